"""tensor-decompose: composite tensor ops into primitives, as tinygrad builds them.

matmul (..., n, k) @ (..., k, m): reshape/expand both to (..., n, m, k), multiply, reduce add over k,
reshape away the kept axis. The multiply and the reduce fuse into one kernel. What depends on the device is chosen
here from its spec (the pass's options), so the tensor level stays the same for every device: a CPU's packed column
panels (pack), and on a target with tensor cores the rows of a half-precision product padded to 16 bytes.

Any other op whose class has a `decompose(rw)` method (a composite an extension declares: docs/extending.md) is
replaced by what it returns, the primitives it creates with `rw.create`.
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY, MOVEMENT
from tgc.ir.types import TensorType
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass
from tgc.target import DeviceSpec, DEVICE_OPTIONS


PACK_MIN = 1 << 16  # pack the right operand when it has at least this many elements
PACK = 16           # columns per panel: one AVX-512 vector of f32, two AVX2 ones (the tile is two vectors wide)

def tc_row_pads(op, spec: DeviceSpec) -> tuple | None:
  """For a matmul of half-precision values cast up (the front end's form: products accumulate in f32) on a target whose
  tensor cores take that dtype: the two sources and the zeros that pad k and n to rows of 16 bytes; None where the rows
  are so already or no tensor core applies."""
  tc = spec.target.tensor_cores
  src = [v.op.operands[0] if v.op is not None and v.op.name == 'tensor.cast' else None for v in (op.lhs, op.rhs)]
  if tc is None or None in src or len(src[0].type.shape) < 2 or len(src[1].type.shape) < 2: return None
  dt = src[0].type.dtype
  if src[1].type.dtype is not dt or dt.itemsize >= 4 or not any(dt.name == i for i, _ in tc.dtypes): return None
  q = 16 // dt.itemsize  # (rows of a multiple of 8 bytes copy 8 a time: fast enough to need no copy first)
  k, n = src[0].type.shape[-1], src[1].type.shape[-1]
  if k % (q // 2) == 0 and n % (q // 2) == 0: return None
  return src, -k % q, -n % q


def pad_rows(op, rw, spec: DeviceSpec):
  """cast(matmul(cast(x), cast(w))) back to a half-precision dtype whose rows tc_row_pads pads: tensor cores stage rows
  through shared memory 16 bytes a copy, and rows of an odd length (4095 halves) would copy 2 bytes at a time, so the
  operands are copied once with their rows padded to 16 bytes (zeros add nothing to the sums), and the result's
  padding is cut off after the cast (the cast stays in the product's kernel)."""
  mm = op.operands[0].op
  if mm is None or mm.name != 'tensor.matmul' or (pads := tc_row_pads(mm, spec)) is None: return None
  (xs, ws), pk, pn = pads
  def padded(v, pairs):
    t = v.type
    full = tuple(s + hi for s, (_, hi) in zip(t.shape, pairs))
    v = rw.create(REGISTRY['tensor.pad'], [v], [TensorType(full, t.dtype)], {'pads': pairs}, op.loc).results[0]
    v = rw.create(REGISTRY['tensor.contiguous'], [v], [TensorType(full, t.dtype)], None, op.loc).results[0]
    return rw.create(REGISTRY['tensor.cast'], [v], [TensorType(full, mm.lhs.type.dtype)], None, op.loc).results[0]
  a = padded(xs, ((0, 0),) * (len(xs.type.shape) - 1) + ((0, pk),)) if pk else mm.lhs
  b = padded(ws, ((0, 0),) * (len(ws.type.shape) - 2) + ((0, pk), (0, pn))) if pk or pn else mm.rhs
  shape = op.results[0].type.shape
  r = rw.create(REGISTRY['tensor.matmul'], [a, b], [TensorType(shape[:-1] + (b.type.shape[-1],), mm.results[0].type.dtype)], None, op.loc).results[0]
  r = rw.create(REGISTRY['tensor.cast'], [r], [TensorType(r.type.shape, op.results[0].type.dtype)], None, op.loc).results[0]
  if not pn: return r
  return rw.create(REGISTRY['tensor.shrink'], [r], [TensorType(shape, r.type.dtype)], {'bounds': tuple((0, d) for d in shape)}, op.loc).results[0]


def split_k(shape: tuple, k: int, spec: DeviceSpec | None) -> int:
  """Into how many chunks a GPU splits a product's k (each summed apart, the partial sums added after): a product
  whose outputs make fewer work-groups than keep every multiprocessor busy (a weight's gradient, 384x1536 summed
  over 4096 tokens: its staged tiles made 144 blocks for 132 SMs) gets chunks of k as more work-groups, down to
  chunks of SPLIT_K_MIN."""
  if spec is None or not spec.gpu or not spec.processors: return 1
  s, out = 1, math.prod(shape)
  while out * s < TILE_OUTPUTS * WAVES * spec.processors and k % (2 * s) == 0 and k // (2 * s) >= SPLIT_K_MIN: s *= 2
  return s

TILE_OUTPUTS = 4096  # the outputs of a GPU matmul's staged tile (64x64)
WAVES = 2            # the work-groups per multiprocessor a product should have
SPLIT_K_MIN = 256    # the shortest chunk of k a split leaves


def split_product_reduce(op, rw, spec: DeviceSpec):
  """A sum of products over several axes into too few outputs for a GPU's multiprocessors (a conv's weight gradient:
  32x32x3x3 sums over a batch of 64 images of 32x32 pixels made 3 staged tiles' work-groups): partial sums that keep
  the outermost summed axis (the batch), then their sum, as split_k does for a matmul."""
  src, a = op.src, op.axes[0] if len(op.axes) > 1 else None
  prod = src.op
  while prod is not None and prod.name == 'tensor.cast': prod = prod.operands[0].op
  if a is None or op.kind != 'add' or prod is None or prod.name != 'tensor.mul': return None
  def base(v):  # the value a factor is a view of (through movement ops)
    while v.op is not None and MOVEMENT in v.op.TRAITS: v = v.op.operands[0]
    return v
  # a product's factors each broadcast along some axis (a matmul's, a conv's): each read is shared by many outputs;
  # an elementwise product summed (a norm's weight gradient) reads its factors once and stays one reduce
  if any(base(x).type.numel >= src.type.numel for x in prod.operands): return None
  shape, out = src.type.shape, math.prod(op.results[0].type.shape)
  if out >= TILE_OUTPUTS * WAVES * spec.processors or shape[a] < 2 or math.prod(shape[i] for i in op.axes[1:]) < SPLIT_K_MIN: return None
  part = TensorType(tuple(1 if i in op.axes[1:] else d for i, d in enumerate(shape)), op.results[0].type.dtype)
  r = rw.create(REGISTRY['tensor.reduce'], [src], [part], {'kind': 'add', 'axes': op.axes[1:]}, op.loc).results[0]
  return rw.create(REGISTRY['tensor.reduce'], [r], [op.results[0].type], {'kind': 'add', 'axes': (a,)}, op.loc).results[0]


def decompose_matmul(op, rw, pack: bool = False, spec: DeviceSpec | None = None):
  shape = op.results[0].type.shape
  return _product(rw, op.lhs, op.rhs, op.loc, pack, split_k(shape, op.lhs.type.shape[-1], spec))


def _product(rw, a, b, loc, pack: bool, split: int = 1):
  """a (..., n, k) @ b (..., k, m) as a multiply and a reduce over k (split: over each of that many chunks of k,
  then over the chunks)."""
  at, bt = a.type, b.type
  *batch, n, k = at.shape
  m = bt.shape[-1]
  batch, dt = tuple(batch), at.dtype
  def mk(name, src, shape, attrs=None):
    return rw.create(REGISTRY[f'tensor.{name}'], [src], [TensorType(tuple(shape), dt)], attrs, loc).results[0]
  nb = len(batch)
  if pack and m % PACK == 0 and m > PACK and k * m >= PACK_MIN:
    # b (k, m) -> panels (m/16, k, 16), contiguous: the kernel then reads 16 columns of b as one sequential
    # stream along k instead of one cache line per row (a copy of b buys a matmul that runs out of cache)
    p = m // PACK
    bp = mk('reshape', b, batch + (k, p, PACK))
    bp = mk('permute', bp, batch + (p, k, PACK), {'order': tuple(range(nb)) + (nb + 1, nb, nb + 2)})
    bp = rw.create(REGISTRY['tensor.contiguous'], [bp], [TensorType(batch + (p, k, PACK), dt)], None, loc).results[0]
    full = batch + (n, p, k, PACK)
    a2 = mk('expand', mk('reshape', a, batch + (n, 1, k, 1)), full)
    b2 = mk('expand', mk('reshape', bp, batch + (1, p, k, PACK)), full)
    prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, loc).results[0]
    red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(batch + (n, p, 1, PACK), dt)], {'kind': 'add', 'axes': (nb + 2,)}, loc).results[0]
    return mk('reshape', red, batch + (n, m))
  order = tuple(range(nb)) + (nb + 1, nb)
  bt = mk('permute', b, batch + (m, k), {'order': order})
  if split > 1:  # the chunk axis outermost: each chunk's partial sums are one contiguous (n, m) block
    c, first = k // split, tuple(range(nb)) + (nb + 1, nb, nb + 2)
    full = batch + (split, n, m, c)
    a2 = mk('expand', mk('reshape', mk('permute', mk('reshape', a, batch + (n, split, c)), batch + (split, n, c), {'order': first}), batch + (split, n, 1, c)), full)
    b2 = mk('expand', mk('reshape', mk('permute', mk('reshape', bt, batch + (m, split, c)), batch + (split, m, c), {'order': first}), batch + (split, 1, m, c)), full)
  else:
    full = batch + (n, m, k)
    a2 = mk('expand', mk('reshape', a, batch + (n, 1, k)), full)
    b2 = mk('expand', mk('reshape', bt, batch + (1, m, k)), full)
  prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, loc).results[0]
  red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(full[:-1] + (1,), dt)], {'kind': 'add', 'axes': (len(full) - 1,)}, loc).results[0]
  if split > 1: red = rw.create(REGISTRY['tensor.reduce'], [red], [TensorType(batch + (1, n, m, 1), dt)], {'kind': 'add', 'axes': (nb,)}, loc).results[0]
  return mk('reshape', red, batch + (n, m))

# without a device: the plain product (kernelize decomposes what is left so)
decompose_patterns = PatternMatcher([('tensor.matmul', decompose_matmul)])

def declared_patterns() -> PatternMatcher:
  """A rule for every registered op that says how it decomposes (ops may be declared after this module loads)."""
  return PatternMatcher([(name, lambda op, rw: op.decompose(rw)) for name, cls in REGISTRY.items() if callable(getattr(cls, 'decompose', None))])


class TensorDecompose(Pass):
  name = 'tensor-decompose'
  summary = 'rewrite composite tensor ops (matmul, ops with a decompose method) into reshape/expand/mul/reduce'
  reads = leaves = 'tensor'
  # (the device's spec, DEVICE_OPTIONS, among them: what the decompositions choose for a device)
  options = {**DEVICE_OPTIONS,
             'pack': (bool, False, "copy a big matmul's right operand into column panels first (for CPUs: sequential reads)")}
  def run(self, m):
    spec, pack = DeviceSpec.from_options(self.opts), self.pack
    if spec.target.tensor_cores is not None:
      apply_patterns(m, PatternMatcher([('tensor.cast', lambda op, rw: pad_rows(op, rw, spec))]), stats=self.stats)
    mm = PatternMatcher([('tensor.matmul', lambda op, rw: decompose_matmul(op, rw, pack, spec))])
    apply_patterns(m, mm + declared_patterns(), stats=self.stats)
    if spec.gpu and spec.processors:  # (one sweep: the partial sums are not split again)
      apply_patterns(m, PatternMatcher([('tensor.reduce', lambda op, rw: split_product_reduce(op, rw, spec))]), max_sweeps=1, stats=self.stats)
