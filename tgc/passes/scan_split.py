"""scan-split: a scan along a long axis over few rows -> scans of chunks, for the device's parallelism.

A scan kernel runs its scanned axis as one loop a row: 8192 rows of 512 are 8192 threads of 512 dependent steps,
and one axis of 2^24 is one thread. Split into k chunks of c (the axis padded with the kind's identity to k * c):

  totals = reduce kind over each chunk                         (..., k, 1, ...)   a reduce kernel
  before = exclusive scan kind of the totals along k           (..., k, 1, ...)   what precedes each chunk
  out    = scan kind of each chunk, from `before` (its init)   (..., k, c, ...)   k times the rows, c steps each

The scan of the totals is split again while it is long. How many rows the device wants and how short a chunk may
be come from its DeviceSpec: a GPU wants some 2^17 threads (an H100 holds 270k) and chunks of 16 or more, a CPU
64 rows (its cores' threads, load-balanced) and chunks long enough to stream (4096). A scan too small to fill the
device anyway (the totals of a big one) takes chunks 4 times as long: each level costs two launches, so an axis of
2^24 on a GPU is chunks of 128, their totals in chunks of 64, those in chunks of 64, and one scan of 32.
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY
from tgc.ir.types import TensorType
from tgc.ir import dtypes as D, alu
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass
from tgc.target import DeviceSpec, DEVICE_OPTIONS
from tgc.passes.kernelize import positions_scan

GPU_ROWS, GPU_CHUNK = 1 << 17, 16   # threads a GPU wants busy; the shortest chunk worth a thread
CPU_ROWS, CPU_CHUNK = 64, 4096      # rows a CPU's threads share; the shortest chunk worth a row
GROUP_STEPS = 16                    # a work-group's steps along a row it scans (chunks are at most that long)


def chunking(rows: int, n: int, spec: DeviceSpec, itemsize: int = 4) -> int | None:
  """The chunk length to split an axis of n into for `rows` independent scans, or None to leave it whole."""
  want, least = (GPU_ROWS, GPU_CHUNK) if spec.gpu else (CPU_ROWS, CPU_CHUNK)
  threads, w = spec.target.max_threads, max(1, 16 // itemsize)
  if spec.gpu and threads >= 32:
    # kernel-opt's GROUP of a scan: a work-group scans a row of whole warps' vectors (w lanes a thread), a step of the
    # work-group's vectors at a time: such a row of at most GROUP_STEPS steps stays whole, as do rows enough to fill
    # the device so; a longer one (or a long one of another length) is cut into chunks of whole steps, at most
    # GROUP_STEPS each, as many as give the device work-groups enough
    step = w * threads
    if n % (w * 32) == 0 and (n <= GROUP_STEPS * step or rows * min(threads, n // w) >= want): return None
    if n >= 4 * step:
      k = -(-want // (rows * threads))  # (the chunks a row takes for that)
      c = min(GROUP_STEPS * step, -(-(-(-n // k)) // step) * step)
      return c if -(-n // c) >= 4 else None
  if rows >= want or n < 2 * least: return None
  c = max(least, -(-n // -(-want // rows)))
  if rows * n <= want: c = max(c, 4 * least)  # a small scan (the totals of a bigger one): longer chunks, fewer levels
  if -(-n // c) < 4: return None  # (fewer chunks save too little: a chunk's own scan is not split again)
  return next((d for d in range(c, min(2 * c, n)) if n % d == 0 and n // d >= 4), c)  # a divisor near it, where one is (no padding)


def split_scan(op, rw, spec: DeviceSpec):
  x, t, a = op.src, op.results[0].type, op.axis
  shape, n, dt = t.shape, t.shape[op.axis], t.dtype
  rows = math.prod(shape) // n if n else 0
  c = chunking(rows, n, spec, dt.itemsize) if rows and not positions_scan(op) else None  # (positions: computed from indices)
  if c is None: return None
  k = -(-n // c)
  pre, post = shape[:a], shape[a + 1:]
  T = lambda sh, d=dt: TensorType(tuple(sh), d)
  def mk(name, srcs, sh, attrs=None, d=dt): return rw.create(REGISTRY['tensor.' + name], list(srcs), [T(sh, d)], attrs, op.loc).results[0]
  ident = lambda sh, v=None: mk('const', (), sh, {'value': alu.reduce_identity(op.kind, dt) if v is None else v})
  def pad_ident(v, pads, sh):  # a pad that reads the kind's identity (tensor.pad reads 0)
    p = mk('pad', [v], sh, {'pads': pads})
    if op.kind == 'add': return p
    inside = mk('pad', [mk('const', (), v.type.shape, {'value': 1}, D.bool_)], sh, {'pads': pads}, D.bool_)
    return mk('where', [inside, p, ident(sh)], sh)
  if k * c != n: x = pad_ident(x, tuple((0, k * c - n) if i == a else (0, 0) for i in range(len(shape))), pre + (k * c,) + post)
  xs = mk('reshape', [x], pre + (k, c) + post)
  if op.kind == 'logaddexp':  # a chunk's total: log(sum(exp(x - m))) + m, m its max where finite (else 0)
    m = mk('reduce', [xs], pre + (k, 1) + post, {'kind': 'max', 'axes': (a + 1,)})
    m = mk('where', [mk('cmpeq', [mk('sub', [m, m], m.type.shape), ident(m.type.shape, 0.0)], m.type.shape, d=D.bool_), m, ident(m.type.shape, 0.0)], m.type.shape)
    e = mk('exp2', [mk('mul', [mk('sub', [xs, mk('expand', [m], xs.type.shape)], xs.type.shape), ident(xs.type.shape, 1 / math.log(2))], xs.type.shape)], xs.type.shape)
    s = mk('reduce', [e], m.type.shape, {'kind': 'add', 'axes': (a + 1,)})
    tot = mk('add', [mk('mul', [mk('log2', [s], m.type.shape), ident(m.type.shape, math.log(2))], m.type.shape), m], m.type.shape)
  else: tot = mk('reduce', [xs], pre + (k, 1) + post, {'kind': op.kind, 'axes': (a + 1,)})
  init = None if op.init is None else mk('reshape', [op.init], pre + (1, 1) + post)
  before = mk('scan', [tot] + ([init] if init is not None else []), pre + (k, 1) + post, {'kind': op.kind, 'axis': a, 'exclusive': True})
  out = mk('scan', [xs, before], pre + (k, c) + post, {'kind': op.kind, 'axis': a + 1, **({'exclusive': True} if op.exclusive else {})})
  out = mk('reshape', [out], pre + (k * c,) + post)
  if k * c != n: out = mk('shrink', [out], shape, {'bounds': tuple((0, n) if i == a else (0, s) for i, s in enumerate(shape))})
  return out


class ScanSplit(Pass):
  name = 'scan-split'
  summary = "split a scan along a long axis over few rows into chunks: a reduce of each, a scan of the totals, each chunk's scan from its offset"
  reads = leaves = 'tensor'
  options = DEVICE_OPTIONS  # (the device's spec: how many rows it wants busy, how short a chunk may be)
  def run(self, m):
    spec = DeviceSpec.from_options(self.opts)
    apply_patterns(m, PatternMatcher([('tensor.scan', lambda op, rw: split_scan(op, rw, spec))]), stats=self.stats)
