"""kernel-opt: choose optimisation actions for each kernel and record them as its `opts` attribute.

The actions (each splits an iteration axis r -> r_outer * amt + r_inner; see schedule.py for what the
kinds mean): UPCAST and LOCAL on global axes, UNROLL, GROUP and GROUPTOP on reduce axes, PADTO to round
a global axis up, SWAP, which exchanges two global axes (the loop order), and TC: tensor cores on a matmul's
(m, n, k) tile (CUDA's mma.sync m16n8k16, f16/bf16 inputs: a warp per 16x8 output tile). `axis` counts axes
of the shape as it is after the earlier actions. linearize applies them, so an `opts` attribute written by hand
replays exactly.

mode=heuristic mirrors tinygrad's hand-coded optimisations, as an ordered list of strategies (STRATEGIES:
warpgroups' tensor cores, a conv's and a matmul's tensor cores, a matrix-vector product, a few rows by a matrix, a
row reduce, everything else): upcast axes that some buffer broadcasts (register reuse, as in matmul), vectorise the
contiguous axis, unroll short reduces, group reduces whose output is too small to fill a GPU, local dims on GPUs; on
CPUs a loop order that re-reads the least, on cuda tensor cores for f16/bf16 matmuls. mode=search times candidates on the
device (beam search with a disk cache) and keeps the fastest. Kernels that already have opts are left alone.
"""
from __future__ import annotations
import math
from tgc.ir.core import Module, Operation
from tgc.ir.attrs import Record
from tgc.target import Target, DeviceSpec, DEVICE_OPTIONS
from tgc.dialects.kernel import WHOLE_KERNELS
from tgc.host import CPU_KINDS, cpu_facts
from tgc.passes.manager import Pass, PipelineError
from tgc.passes.schedule import Schedule, Opt, OptError, try_opts, lowers, tc_axes, MAX_LANES, MAX_UNROLLED_OPS, MAX_GATHERED_LANES
from tgc.passes.pipelines import noopt_from_env


def is_matvec(k: Operation, ks: Schedule, r: int) -> bool:
  """A sum over axis r of matrix * vector: two loads, the matrix contiguous along r and broadcast along no axis,
  the vector broadcast along some (a matmul's two operands are both broadcast somewhere)."""
  red = next(op for op in k.body.ops if op.name == 'kernel.reduce')
  mul = red.src.op
  if red.kind != 'add' or mul is None or mul.name != 'kernel.mul' or any(v.op is None or v.op.name != 'kernel.load' for v in mul.operands): return False
  bcast = lambda op: any(st == 0 and n > 1 for st, n in zip(ks.strides(op), ks.full))
  a, x = (v.op for v in mul.operands)
  if bcast(a): a, x = x, a
  return not bcast(a) and bcast(x) and ks.strides(a)[r] == 1


# a thread's share of a row (after GROUP) that kernels in stages keep whole in registers, at most this many steps
STAGE_UNROLL = 8


class Tiling:
  """kernel-opt's work on one kernel: the device, the opts chosen so far and the Schedule they make (`ks`), and what
  the strategies read of the kernel as it was (its reduce and global axes before any action: `red`, `glob`)."""
  def __init__(self, k: Operation, spec: DeviceSpec, max_upcast: int = 0, allow_local: bool | None = None, unroll: int = 4,
               stage: bool = True):
    # the register tiles, reductions and loop order follow the processor; work-groups follow the target (an OpenCL
    # device on a CPU still runs work-items in work-groups, and a work-group of one costs a launch each)
    self.k, self.spec, self.t, self.gpu = k, spec, spec.target, spec.gpu
    self.max_upcast, self.unroll, self.stage = max_upcast, unroll, stage
    self.allow_local = (not self.t.is_cpu) if allow_local is None else allow_local
    self.cpu = cpu_facts(spec.cpu)
    self.smem_budget = spec.smem_budget  # the device's, where it is known
    self.opts: list[Record] = []
    self.ks = ks = Schedule(k, (), self.t)
    self.loads = loads = [op for op in k.body.ops if op.name == 'kernel.load']
    if ks.full:
      self.vec = max_upcast or self.t.upcast(spec.processor, self.cpu.lanes(max((op.buf.type.dtype.itemsize for op in loads), default=4)),
                                             max(op.buf.type.dtype.itemsize for op in loads + [ks.store]))
    self.red, self.glob = ks.axes('reduce'), ks.axes('global')

  @property
  def matmul_like(self) -> bool:
    """A GPU sum over the product of two loads, each broadcast along some axis (a matmul in any layout of its operands,
    a conv over its channels and window): the staged register tiles' kernels."""
    f = self.factors
    return self.gpu and self.allow_local and len(self.red) >= 1 and len(f) == 2 and \
      all(any(st == 0 and n > 1 for st, n in zip(self.ks.strides(op), self.ks.full)) for op in f)

  @property
  def factors(self) -> list:
    """The loads under the reduce (at the iteration shape): a matmul's two operands, not its epilogue's (a Linear's
    bias, read once an output)."""
    return [op for op in self.loads if tuple(self.ks.views[op].shape) == tuple(self.ks.full)]

  def apply(self, o, most_ops: int | float = math.inf) -> bool:
    """Add the action where it applies to the kernel's shape (the schedule follows) and leaves the unrolled body at
    most `most_ops` ops (Schedule.unrolled_ops: what the device's compiler reads); on a CPU, not one that takes a
    tile's gathered lanes past MAX_GATHERED_LANES (each is a scalar load: the unrolled code grows, not the speed)."""
    nk = try_opts(self.k, self.opts + [o], self.t)
    if nk is None or (most_ops < math.inf and nk.unrolled_ops() > most_ops): return False
    if not self.gpu and o.name in ('upcast', 'unroll') and MAX_GATHERED_LANES < (g := nk.gathered_lanes()) and g > self.ks.gathered_lanes(): return False
    self.opts.append(o); self.ks = nk
    return True

  def tile_grid(self, role):
    """After tc: the global axis just outside the tile's m or n ('tcm' / 'tcn'), or None."""
    ks = self.ks
    ax = ks.kinds.index(role) - 1
    while ax >= 0 and ks.kinds[ax] in ('upcast', 'local'): ax -= 1
    return ax if ax >= 0 and ks.kinds[ax] == 'global' else None


def warpgroup(tl: Tiling) -> list | None:
  """Warpgroups' tensor cores (Hopper's wgmma), where the device has them: warpgroup_tiles."""
  k, t, spec, red, smem_budget = tl.k, tl.t, tl.spec, tl.red, tl.smem_budget
  # warpgroups' tensor cores (Hopper's wgmma), where the device has them: a block of 2 warpgroups takes 128x256
  # outputs (8 warps of 16 rows along m, each 32 tiles of 8 along n: one wgmma of 64x256 a warpgroup; 128x128 where
  # that leaves too few blocks), a step of k is 64 deep, both operands are staged in the tensor cores' swizzled layout
  # in a ring of stages: on an H100 a 4096 f16 matmul ran at 494 TFLOP/s so with 4 stages, 458 with 128x128 blocks and
  # 3 (two blocks a multiprocessor), 478 with 256x128, where mma.sync's best ran 291. A
  # conv (its output channels m, its output columns n): 64 channels x 56 columns a warpgroup, two output rows a block:
  # its 3x3 f16 conv kernel (32x64x56x56) ran in 29.7 us, where mma.sync's below took 62.4
  if spec.has_warpgroup and red:
    wg = warpgroup_tiles(k, tl.ks, t, smem_budget)
    if wg is not None: return wg


def tc_conv(tl: Tiling) -> list | None:
  """A conv on tensor cores (several reduce axes; tc on the first, its input channels)."""
  k, t, loads, red, smem_budget = tl.k, tl.t, tl.loads, tl.red, tl.smem_budget
  # a conv on tensor cores (several reduce axes; tc on the first, its input channels): a warp takes 2 tiles of m by 8
  # of n (32x64), a block 4x2 warps along the other global axes (the output's columns and rows, which share the
  # weights' tile), a step of the reduce loops 4 tiles deep, and both operands go through a ring of shared-memory
  # stages (the reduce loops run as one range): on an H100 a 3x3 f16 conv (32x64x56x56) ran its conv kernel in 69 us
  # so, 169 us with 2x4 tiles, 8x2 warps and one buffer a step of 16 (a sweep of 11 shapes)
  if t.tensor_cores is not None and len(red) > 1 and lowers(k, Opt('tc', red[0], 0), tl.spec):
    tl.apply(Opt('tc', red[0], 0))
    for role, amts in (('tcn', (8, 4, 2)), ('tcm', (2,))):
      ax = tl.tile_grid(role)
      if ax is not None: next((a for a in amts if tl.ks.full[ax] % a == 0 and tl.apply(Opt('upcast', ax, a))), None)
    done: list = []
    for amts in ((4, 2), (2,)):
      other = [a for a in tl.ks.axes('global') if a not in (tl.tile_grid('tcm'), tl.tile_grid('tcn')) and a not in done]
      if other and next((a for a in amts if tl.ks.full[other[-1]] % a == 0 and tl.apply(Opt('local', other[-1], a))), None): done.append(other[-1])
    r = tl.ks.axes('reduce')
    if r: next((u for u in (4, 2) if tl.ks.full[r[0]] % u == 0 and tl.apply(Opt('unroll', r[0], u))), None)
    for i, op in enumerate(op for op in loads if tuple(tl.ks.views[op].shape) == tuple(tl.ks.full)):
      if tl.ks.tile_bytes(op) <= smem_budget: tl.apply(Opt('smem', i, 0))
    return stage_ring(tl.ks, tl.opts, t, smem_budget)


def tc_matmul(tl: Tiling) -> list | None:
  """A matmul on tensor cores, its sizes padded to the tiles first."""
  k, t, loads, red, smem_budget = tl.k, tl.t, tl.loads, tl.red, tl.smem_budget
  # tensor cores, where the target has them and the kernel is a matmul of their dtypes and tile multiples;
  # sizes the tiles do not divide are padded first (PADTO: a 4095 f16 matmul ran at 0.2 TFLOP/s without tensor cores)
  pads = tc_padding(tl.ks, t) if t.tensor_cores is not None and len(red) == 1 else None
  if pads is not None and lowers(k, pads + [Opt('tc', red[0], 0)], tl.spec):
    for o in pads: tl.apply(o)
    # a warp computes 4x4 tiles (64x32), a block 2x4 warps (128x128), a step of the k loop 4 tiles (64) deep, and
    # both operands are staged through shared memory (SMEM) in a ring of stages: on an H100 a 4096 f16 matmul ran
    # at 286 TFLOP/s so, 256 with one buffer, 161 with 64x128 blocks and steps of 16 (sweeps of 48 and 80 shapes)
    tl.apply(Opt('tc', red[0], 0))
    for kind, amts, role in (('upcast', (4, 2), 'tcm'), ('upcast', (4, 2), 'tcn'), ('local', (2,), 'tcm'), ('local', (4, 2), 'tcn')):
      ax = tl.tile_grid(role)
      # a tile leaves two blocks along its axis at least, unless the other axes have blocks to spare: an im2col conv's
      # 64 output channels in one warp tile (4 of m), its pixels and batch giving the blocks, ran its matmul on an H100
      # in 81 us so, 97 us with two blocks of 32
      others = math.prod(tl.ks.full[a] for a in tl.ks.axes('global') if a != ax)
      amt = next((a for a in amts if ax is not None and tl.ks.full[ax] % a == 0 and (tl.ks.full[ax] > a or (kind == 'upcast' and others >= 4096))), None)
      if amt: tl.apply(Opt(kind, ax, amt))
    r = tl.ks.axes('reduce')
    # (deep steps between a block's barriers: 128 bytes of k a row, so that f32's (TF32) stages are the size of f16's
    # and a ring of them fits where 64-deep steps of f32 would leave one buffer)
    deep = (4, 2) if max((op.buf.type.dtype.itemsize for op in tl.factors), default=2) <= 2 else (2,)
    if r and tl.ks.axes('local'): next((u for u in deep if tl.ks.full[r[0]] % u == 0 and tl.apply(Opt('unroll', r[0], u))), None)
    used = 0 if any(kd in ('upcast', 'local') for kd in tl.ks.kinds) else smem_budget  # (one tile a block: nothing shared)
    for i, op in enumerate(op for op in loads if tuple(tl.ks.views[op].shape) == tuple(tl.ks.full)):
      if used + tl.ks.tile_bytes(op) <= smem_budget and tl.apply(Opt('smem', i, 0)): used += tl.ks.tile_bytes(op)
    return stage_ring(tl.ks, tl.opts, t, smem_budget)


def matvec(tl: Tiling) -> list | None:
  """A GPU matrix-vector product: threads share a row (GROUP)."""
  k, gpu, red, glob = tl.k, tl.gpu, tl.red, tl.glob
  # GPU matrix-vector product: 8 threads share each row's sum (GROUP), so that neighbouring threads read neighbouring
  # elements of the matrix (coalesced) instead of rows a whole row apart; 4 rows per thread, 4 per work-group
  if gpu and len(red) == 1 and is_matvec(k, tl.ks, red[0]):
    r = red[0]
    ax = next((a for a in glob if tl.ks.full[a] % 16 == 0), None)
    if ax is not None and tl.ks.full[r] % 8 == 0 and tl.ks.full[r] > 8:
      for o in (Opt('group', r, 8), Opt('local', ax, 4), Opt('upcast', ax, 4)): tl.apply(o)
      return tl.opts


def operand_axes(tl: Tiling, w, x) -> tuple[list, list, list]:
  """A matmul-like kernel's global axes (of more than one point) as (rows, cols, others): the rows are w's, along which
  x broadcasts and w not (its m, for w = A), the cols x's (its n), the others the batch."""
  sw, sx = tl.ks.strides(w), tl.ks.strides(x)
  glob = tl.ks.axes('global')
  rows = [a for a in glob if sx[a] == 0 and sw[a] != 0]
  cols = [a for a in glob if sw[a] == 0 and sx[a] != 0]
  return rows, cols, [a for a in glob if a not in rows and a not in cols]


def narrow_product(tl: Tiling) -> list | None:
  """A GPU sum of products whose one factor is broadcast only along axes too short for a register tile (a first
  conv's weight gradient: the output gradient broadcast along 3 input channels x 3x3 taps, each axis 3 long): the
  work-group's threads share the sum along its innermost axis (GROUPTOP 16, reading it contiguously), and each takes
  16 (or 8, 4) of the other factor's axis in registers, reusing each loaded value of the narrow one there. The staged
  tiles would take 4 lanes of that axis and nothing along the other: on an H200 the first conv's weight gradient of
  the ResNet step (64 images x 32 x 3 x 3x3, partial sums over 8x32 pixels) took 281 us so, 29 us this way (the
  opts kernel-opt's beam search found there)."""
  if not tl.matmul_like: return None
  full, r = tl.ks.full, tl.red[-1]
  for w, x in (tl.factors, tl.factors[::-1]):
    rows, narrow, _ = operand_axes(tl, w, x)  # (x is broadcast along rows: each value reused across a row tile)
    if narrow and all(full[a] < 4 for a in narrow) and rows: break
  else: return None
  if full[r] % 16 or any(tl.ks.strides(op)[r] != 1 for op in tl.factors): return None
  ax = max(rows, key=lambda a: full[a])
  amt = next((a for a in (16, 8, 4) if full[ax] % a == 0), None)
  if amt is None: return None
  tile = [Opt('grouptop', r, 16), Opt('upcast', ax, amt)]  # (r is a reduce axis, after ax: its split moves no axis of ax's)
  if try_opts(tl.k, tl.opts + tile, tl.t) is None: return None
  for o in tile: tl.apply(o)
  rest = full[ax] // amt
  threads = next((a for a in (8, 4, 2) if rest % a == 0), None)
  if threads: tl.apply(Opt('local', ax, threads))
  return tl.opts


def few_rows(tl: Tiling) -> list | None:
  """A GPU matmul of a few rows (m of 2 to 16: a few tokens through a Linear) by a matrix read along k: a matrix-vector
  product with every row in registers."""
  # 32 threads (up to 128) share each matrix row's sum (GROUP: neighbouring threads read neighbouring elements), a
  # thread takes 4 matrix rows and keeps all m rows' partial sums (m x 4 of them), so that the matrix is read once and
  # each loaded element of the few rows serves 4 products; 2 threads' rows a work-group (a 1536-row matrix: 192
  # work-groups). A work-group an output (row_reduce) reads the matrix once a row (16 times for m 16, from DRAM where
  # it outgrows the L2); the staged tiles leave a few work-groups of one warp each.
  if not (tl.matmul_like and len(tl.red) == 1): return None
  r, full = tl.red[0], tl.ks.full
  for w, x in (tl.factors, tl.factors[::-1]):
    outs, few, batch = operand_axes(tl, w, x)  # (the matrix's outputs, the few rows: a batch of 2 x 8 tokens too)
    if not batch and len(outs) == 1 and 2 <= math.prod(full[a] for a in few) <= 16 and full[outs[0]] >= 64 and tl.ks.strides(w)[r] == 1: break
  else: return None
  b = outs[0]
  # (a long k takes more threads, 32 steps a thread at least: enough loads in flight to stream a matrix from DRAM)
  g = next((g for g in (128, 64, 32, 16, 8) if full[r] % g == 0 and (g <= 32 or full[r] // g >= 32)), None)
  if g is None or full[b] % 4: return None
  # (each split moves the axes after it one further on: the rows' last first)
  opts = [Opt('upcast', a, full[a]) for a in sorted(few, reverse=True)]
  b1 = b + sum(a < b for a in few)
  opts += [Opt('upcast', b1, 4)] + ([Opt('local', b1, 2)] if full[b] % 8 == 0 else [])
  if (ks := try_opts(tl.k, tl.opts + opts, tl.t)) is None: return None
  opts.append(Opt('group', ks.axes('reduce')[0], g))
  if not lowers(tl.k, tl.opts + opts, tl.t): return None  # (all or nothing: the strategies after build on none of it)
  for o in opts: tl.apply(o)
  return tl.opts


def wide_matmul(tl: Tiling) -> bool:
  """A matmul-like kernel whose m and n are both more than a few rows (16), with outputs enough to fill a GPU (more
  than 4096, where generic spreads no reduce over the work-group): generic's register tiles through shared memory take
  it whatever its operands' layouts. With both operands contiguous along k (a Linear's x @ W.T) it is also a reduce
  along memory, which a work-group an output would take: on an H100 a 4096 f32 x @ W.T so ran in 86 ms, x @ W staged
  in 3.6."""
  if not tl.matmul_like or math.prod(tl.ks.full[a] for a in tl.glob) <= 4096: return False
  rows, cols, _ = operand_axes(tl, *tl.factors)
  return math.prod(tl.ks.full[a] for a in rows) > 16 and math.prod(tl.ks.full[a] for a in cols) > 16


def row_reduce(tl: Tiling) -> list | None:
  """A GPU reduce along memory: a work-group a row (GROUP), its partials meeting in registers or shared memory."""
  k, t, gpu, loads, vec, red, allow_local = tl.k, tl.t, tl.gpu, tl.loads, tl.vec, tl.red, tl.allow_local
  # GPU reduce along memory (rows of a sum, softmax's max and sum): a work-group per output, each thread takes
  # float4s `group` apart (neighbouring threads read neighbouring addresses: coalesced), and the partials meet
  # as a tree in shared memory; a thread per output reading its own row would read a row apart per thread
  if gpu and allow_local and len(red) == 1 and not wide_matmul(tl):
    r = red[0]
    st = [tl.ks.strides(op)[r] for op in loads]
    if 1 in st and all(x in (0, 1) for x in st) and tl.ks.full[r] >= 128:
      # a row no group of threads divides (PP-OCR's 6625 classes) is padded to one, its padding masked: on an H100 its
      # softmax took 1.6 ms with a thread a row
      if tl.ks.full[r] % 8:
        n = tl.ks.full[r]
        next((a for a in (t.max_threads, 128, 64, 32) if -(-n // a) * a - n <= n // 16 and tl.apply(Opt('padto', r, a))), None)
      if tl.ks.full[r] % (vec * 32) == 0: tl.apply(Opt('unroll', r, vec))
      # (rows no warp divides, 1000 long: 8 or 16 threads a row, and rows enough a work-group to fill it)
      for amt in (t.max_threads, 128, 64, 32, 16, 8):
        if amt <= t.max_threads and tl.ks.full[r] % amt == 0 and tl.apply(Opt('group', r, amt)):
          # short rows: several outputs per work-group, so that a block still has 128 threads or more
          for ax in reversed(tl.ks.axes('global')):
            for n in (32, 16, 8, 4, 2):
              if amt * n <= t.max_threads and tl.ks.full[ax] % n == 0 and tl.apply(Opt('local', ax, n)): amt *= n; break
            if amt >= 128: break
          # stages (softmax's max, then its sum of exp(x - max), then its epilogue x / sum at the iteration shape): a
          # thread's share of a row short enough for registers is unrolled whole, so that every stage reads the same
          # loads (x once from memory, not once a stage)
          rest = tl.ks.axes('reduce')
          stages = sum(op.name == 'kernel.reduce' for op in k.body.ops) + bool(tl.ks.full_stores)
          if stages > 1 and rest and tl.ks.full[rest[0]] <= STAGE_UNROLL: tl.apply(Opt('unroll', rest[0], 0))
          return tl.opts


def scan(tl: Tiling) -> list | None:
  """A scan kernel on a GPU: a thread's steps read and write 16 bytes at a time (UNROLL of the scanned axis where
  its loads and its store run along it: a vector of steps carried through in order). A row long enough for a warp's
  vectors (GROUP_SCAN_MIN steps) is scanned by a work-group (GROUP: each step the threads' vectors side by side,
  coalesced, their totals meeting in a work-group scan; up to the target's threads, as few steps as that leaves);
  shorter rows a thread each, in work-groups as generic's."""
  ks = tl.ks
  if not ks.scans: return None
  if tl.gpu:
    a = ks.kinds.index('scan')
    w = 16 // max(op.buf.type.dtype.itemsize for op in tl.loads + [ks.store])
    along = ks.strides(ks.store)[a] == 1 and all(ks.strides(op)[a] in (0, 1) for op in tl.loads)
    if w >= 2 and ks.full[a] % w == 0 and ks.full[a] > w and along: tl.apply(Opt('unroll', a, w))
    n = tl.ks.full[a]  # (its steps, after the vector's lanes)
    if along and tl.allow_local and n >= GROUP_SCAN_MIN:
      g = next((g for g in (tl.t.max_threads, 128, 64, 32) if g <= tl.t.max_threads and n % g == 0), None)
      if g is not None and tl.apply(Opt('group', a, g)): return tl.opts
  return generic(tl)

GROUP_SCAN_MIN = 32  # a scan's steps (after its vector's) from which a work-group scans a row: a warp of vectors


def generic(tl: Tiling) -> list | None:
  """Everything else: GROUPTOP, register tiles (upcast), unrolled reduces, the CPU loop order, work-groups (local), SMEM."""
  k, t, spec, gpu, cpu, loads, vec = tl.k, tl.t, tl.spec, tl.gpu, tl.cpu, tl.loads, tl.vec
  red, glob, allow_local, smem_budget = tl.red, tl.glob, tl.allow_local, tl.smem_budget
  max_upcast, unroll, stage = tl.max_upcast, tl.unroll, tl.stage
  out_points = math.prod(tl.ks.full[i] for i in glob) if glob else 1
  # GPU: a long reduce whose output cannot fill the device gets the work-group to share it (GROUPTOP), along the
  # innermost reduce axis that an amount divides (a 1x3 conv over 960 channels, 60x40 outputs: its 3 taps divide by
  # none; on an H100 it took 300 us with 75 threads)
  if gpu and red and out_points <= 4096 and math.prod(tl.ks.full[a] for a in red) >= 64:
    next((a for ax in reversed(red) for a in (256, 64, 16) if tl.ks.full[ax] % a == 0 and tl.apply(Opt('grouptop', ax, a))), None)
  # GPU matmul-like kernels (a reduce over the product of two loads, each broadcast along some axis: a matmul, a conv
  # over its channels and window) stage both operands through shared memory (SMEM): on an H100 a 4096 f32 matmul ran
  # at 34.9 TFLOP/s with 8 rows x 4 columns a thread, UNROLL 8 and 16x8 work-groups (fma on), 21.5 with the best tiles
  # without it (sweeps of 40 and 11 shapes); an f32 3x3 conv kernel (32x64x56x56) in 265 us so, 490 without
  matmul_like = tl.matmul_like
  staged = stage and matmul_like and t.local_memory > 0
  if matmul_like:  # sizes the GPU tiles below do not divide are padded first (a 4095 f32 matmul ran in 1-thread blocks)
    for o in pad_to_tiles(tl.ks, ((64, 32, 16, 8, 4), (64, 32, 16, 8, 4), (32, 16, 8))) or []: tl.apply(o)
  if red:
    # register tiles: upcast the axes some buffer broadcasts (each loaded value is reused across the lanes).
    # On CPUs two vectors wide and as many rows as keep the accumulators in half the vector registers (the rest
    # hold the loaded row and the broadcasts): 8 rows on AVX-512's 32 registers, 4 on AVX2's 16, where 8 rows
    # spilled every accumulator (a 1024 matmul at 0.35x numpy on a Zen 3, 0.89x with 4 rows)
    lanes, done, vec_bcast, width = 1, set(), None, 1
    # GPU: a register tile of a kernel that stages no operands (its broadcast loads are a layer norm's row statistics,
    # not a matmul's panels) only while the threads left give every multiprocessor a work-group's 256: a layer norm's
    # weight gradient over 4096 tokens, 128 partial sums x 384, took 8 columns a thread in 24 blocks and moved 0.26
    # TB/s on an H200, a GPT step in bf16 6 % faster and a ResNet step 7 % without it; 1024 a multiprocessor also took
    # the tile of an embedding's gradient (16x256 tokens by 256 words, 384 wide), 2.3x slower
    fills = lambda n: staged or not gpu or out_points // n >= 256 * spec.processors
    # on GPUs 8 columns (two float4) x 4 rows a thread: a 4096 f32 matmul ran at 21 TFLOP/s on an H100 where 4x4 made 13
    wants = [vec, 2, max(2, cpu.vector_registers // 4)] if not gpu else [vec, 2 * vec] if staged else [2 * vec, vec]
    for step, want in enumerate(wants):
      glob = tl.ks.axes('global')
      # candidates, innermost first; an axis every load reads contiguously (or broadcasts) first, then the widest
      # split (a 64-long axis gets all 16 lanes where a 56-long one would get 8: conv's output channels beat its
      # width); the doubling step goes to the vector axis's outer part
      cands = [done and min(done)] if want == 2 and done else []
      cands += [ax for ax in reversed(glob) if ax not in done]
      best, best_key = None, None
      for ax in cands:
        st = [tl.ks.strides(op)[ax] for op in loads]
        # the rows of the tile: an axis along which other loads broadcast than along the vector (reuse of the
        # vector loads), not one more split of the same kind (that only adds vector loads)
        if step == len(wants) - 1 and vec_bcast is not None and tuple(s == 0 for s in st) == vec_bcast: continue
        # the doubling step widens the vector's columns (an axis the loads broadcast along as along the vector axis: a
        # packed matmul's panels) or nothing: a row axis by 2 there left the rows step nothing to take, a 16x2 tile
        # where 16x8 ran PP-OCR det's 3x3 convs 3x faster on a Zen 5
        if want == 2 and done and vec_bcast is not None and tuple(s == 0 for s in st) != vec_bcast: continue
        if any(s == 0 for s in st) and any(s not in (0, None) for s in st):
          if not gpu and step == len(wants) - 1: amt = cpu_rows(tl.ks.full[ax], want, MAX_LANES // lanes)
          else: amt = next((a for a in (want, 8, 4, 2) if a <= want and tl.ks.full[ax] % a == 0 and lanes * a <= MAX_LANES and fills(lanes * a)), None)
          key = (all(s in (0, 1) for s in st), amt)
          if amt and (best is None or key > best_key): best, best_key = (ax, amt), key
          if want == 2 and best: break
      if best is None and not gpu and step == len(wants) - 1 and vec_bcast is not None: best = cpu_pad_rows(tl.ks, cands, loads, want, vec_bcast, tl.apply)
      if best is None: continue
      # CPU: an output axis that takes a quarter of the vector or less (258 filters: 2 lanes), or, for a long sum (a
      # conv's weight gradient over the images and pixels), one some load reads strided (its lanes gathered: the
      # input channels), where every load reads the reduce axis contiguously: no register tile, the lanes go along
      # the reduce (silero's STFT, 3x258 by 256 taps: 37.6 -> 7.4 us on a Zen 5; a ResNet's 32x32x3x3 weight gradient
      # over 64 images of 32x32 pixels: 140 -> 80-94 ms on a 2-core Xeon, the first conv's 35 -> 8; sums of 16 pixels a
      # row gained nothing, inference's short sums lost a few percent)
      r_last = tl.ks.axes('reduce')[-1] if tl.ks.axes('reduce') else None
      gathered = r_last is not None and tl.ks.full[r_last] >= 2 * vec and math.prod(tl.ks.full[a] for a in tl.ks.axes('reduce')) >= 4096 and \
          any(tl.ks.strides(op)[best[0]] not in (0, 1, None) for op in loads)
      if step == 0 and not gpu and (best[1] * 4 <= vec or gathered) and r_last is not None and tl.ks.full[r_last] % vec == 0 and \
          all(tl.ks.strides(op)[r_last] in (0, 1) for op in loads) and any(tl.ks.strides(op)[r_last] == 1 for op in loads): break
      # (the largest amount that applies: a CPU tile of gathers takes fewer rows)
      best = next(((best[0], a) for a in (best[1], best[1] // 2, best[1] // 4, best[1] // 8) if a > 1 and best[1] % a == 0 and tl.apply(Opt('upcast', best[0], a))), None)
      if best:
        if vec_bcast is None: vec_bcast, width = tuple(tl.ks.strides(op)[best[0] + 1] == 0 for op in loads), best[1]
        lanes *= best[1]
        done = {a + (a > best[0]) for a in done} | {best[0], best[0] + 1}  # the split's two parts are used
    if not gpu and vec_bcast is not None: cpu_fill(tl, done, vec_bcast, lanes, width)
    red = tl.ks.axes('reduce')
    if red:
      # (staged: the reduce axis a long step divides, a conv's input channels rather than its window's columns)
      r = next((a for a in reversed(red) if tl.ks.full[a] % (4 * unroll) == 0), red[-1]) if staged else red[-1]
      s = tl.ks.full[r]
      cur = math.prod(tl.ks.full[i] for i, kd in enumerate(tl.ks.kinds) if kd in ('upcast', 'unroll'))
      plain = not any(kd == 'upcast' for kd in tl.ks.kinds)
      contig = [tl.ks.strides(op)[r] for op in loads]
      if plain and not gpu and all(c in (0, 1) for c in contig) and 1 in contig and s > vec and (s % vec == 0 or cpu_pad(tl.ks, r, vec, tl.apply)):
        tl.apply(Opt('unroll', r, vec))  # a plain reduction over contiguous memory: vector lanes along it
      elif s <= 32 and cur * s <= MAX_LANES and s in (2, 4, 8, 16, 32) and not gpu: tl.apply(Opt('unroll', r, 0))
      elif staged and s % (4 * unroll) == 0 and cur * 4 * unroll <= MAX_LANES: tl.apply(Opt('unroll', r, 4 * unroll))  # a longer step between barriers
      elif gpu and cur > 1 and s % unroll == 0:  # a GPU tile: more loads in flight, as many as keep the unrolled body small
        # (staged tiles compute their operands once a tile, as they stage them: their loop body is the products)
        most = MAX_UNROLLED_OPS if not staged else math.inf
        next((a for a in (2 * unroll, unroll, 2) if s % a == 0 and cur * a <= MAX_LANES and tl.apply(Opt('unroll', r, a), most)), None)
      elif s % unroll == 0 and cur * unroll <= MAX_LANES: tl.apply(Opt('unroll', r, unroll))
    # CPU loop order: each iteration of the outermost global loop re-reads every buffer that does not vary
    # along it; where such a buffer outgrows a core's cache, make outermost the axis for which that costs least
    # (a matmul's column panels outside its row blocks: A re-read once per panel, not B once per row block)
    glob = tl.ks.axes('global')
    if not gpu and len(glob) > 1 and any(kd == 'upcast' for kd in tl.ks.kinds):
      big = lambda op: op.buf.type.numel * op.buf.type.dtype.itemsize
      cost = lambda ax: tl.ks.full[ax] * sum(big(op) for op in loads if tl.ks.strides(op)[ax] == 0 and big(op) >= cpu.l2_bytes)
      best = min(glob, key=lambda ax: (cost(ax), ax != glob[0]))
      if best != glob[0] and tl.ks.full[best] >= 8: tl.apply(Opt('swap', glob[0], best))
  else:
    # elementwise: vectorise the contiguous innermost axis
    glob = tl.ks.axes('global')
    if glob:
      ax = glob[-1]
      # GPU: an innermost axis no warp's worth of threads divides (a padded 58-wide row) is padded to one, so that
      # the work-group runs along it (coalesced) instead of along an outer axis (an H100 copied a padded conv input
      # at 0.17 TB/s so)
      s = tl.ks.full[ax]
      if gpu and allow_local and s % 32 and s >= 16 and tl.ks.strides(tl.ks.store)[ax] == 1:
        amt = next((a for a in (32, 16, 8) if -(-s // a) * a - s <= s // 8), None)
        if amt and s % amt: tl.apply(Opt('padto', ax, amt))
      if all(tl.ks.strides(op)[ax] in (1, 0) for op in loads + [tl.ks.store]) and tl.ks.strides(tl.ks.store)[ax] == 1:
        if not gpu and s > vec and s % 4: cpu_pad(tl.ks, ax, vec, tl.apply)  # (a multiple of 4 takes 4 or 8 lanes as it is)
        for amt in (vec, 8, 4, 2):
          if amt <= vec and tl.ks.full[ax] % amt == 0 and tl.apply(Opt('upcast', ax, amt)): break
      # GPU layout change (a load contiguous along another axis than the store's: a transpose): a thread takes a
      # square tile of 16 bytes by 16 bytes, read as vectors along the load's axis and written as vectors along the
      # store's (linearize gathers the lanes), so that a warp reads and writes whole sectors (an H100 moved a conv's
      # NCHW -> NHWC copy at 0.6 TB/s with scalar accesses along one of them)
      # CPU layout change: a tile of the store's vector (a register's lanes along its contiguous axis) by half as many
      # rows along the load's, so that each cache line a load touches gives several lanes (a 1024x1024 transpose on a
      # Zen 5: 4.0 GB/s scalar, 2.3 with the store's vector alone, 19.9 with 16x8; conv2d's channels-last results 2x)
      elif not gpu and tl.ks.strides(tl.ks.store)[ax] == 1 and loads and vec >= 4:
        a = next((g for g in reversed(glob) if g != ax and any(tl.ks.strides(op)[g] == 1 for op in loads)), None)
        if a is not None and next((u for u in (vec // 2, 4, 2) if tl.ks.full[a] % u == 0 and tl.apply(Opt('upcast', a, u))), None):
          ax = tl.ks.axes('global')[-1]
          next((u for u in (vec, 8, 4) if u <= vec and tl.ks.full[ax] % u == 0 and tl.apply(Opt('upcast', ax, u))), None)
      elif gpu and allow_local and tl.ks.strides(tl.ks.store)[ax] == 1 and loads:
        a = next((g for g in reversed(glob) if g != ax and any(tl.ks.strides(op)[g] == 1 for op in loads)), None)
        width = 16 // max(op.buf.type.dtype.itemsize for op in loads + [tl.ks.store])
        if a is not None and width >= 2:
          n = tl.ks.full[a]  # (a padded 58-wide row is padded to 64, if that wastes at most an eighth)
          if n % width and -(-n // width) * width - n <= n // 8: tl.apply(Opt('padto', a, width))
          next((u for u in (width, width // 2, 2) if tl.ks.full[a] % u == 0 and tl.apply(Opt('upcast', a, u))), None)
          ax = tl.ks.axes('global')[-1]  # (the store's axis, moved by the split before it)
          next((u for u in (width, width // 2, 2) if tl.ks.full[ax] % u == 0 and tl.apply(Opt('upcast', ax, u))), None)
  # GPU: local dims on the global axes; an elementwise kernel takes the widest work-group along its innermost axis
  # (whole 128-byte lines per warp, fewer blocks to schedule), a tiled one squarer groups (reuse in the caches)
  if allow_local:
    # (staged tiles take 2 too: an f32 3x3 conv's 14 tiles of output columns, 2 threads along them beside 8x8 along
    # its rows and channels, ran its kernel on an H100 in 208 us where 64 threads took 252)
    amts = (16, 8, 4, 2) if staged else (32, 16, 8, 4) if red else tuple(1 << i for i in range(t.max_threads.bit_length() - 1, 1, -1))
    for ax in reversed(tl.ks.axes('global')):
      local = math.prod(tl.ks.full[i] for i, kd in enumerate(tl.ks.kinds) if kd in ('local', 'group'))
      if local >= 128: break
      for amt in amts:
        if local * amt <= (128 if staged else t.max_threads) and tl.ks.full[ax] % amt == 0 and tl.apply(Opt('local', ax, amt)): break
  if staged:  # each operand that the work-group's threads share (broadcast along a local axis), while the tiles fit
    below, used = [op for op in loads if tuple(tl.ks.views[op].shape) == tuple(tl.ks.full)], 0
    for i, op in enumerate(below):
      if any(tl.ks.strides(op)[a] == 0 for a in tl.ks.axes('local')) and used + tl.ks.tile_bytes(op) <= smem_budget and tl.apply(Opt('smem', i, 0)):
        used += tl.ks.tile_bytes(op)
    if not used: return heuristic(k, spec, max_upcast, allow_local, unroll, False)  # no work-group to share them
    # a matmul's register tiles, two stages: a step of k is long enough that one copy ahead hides it (on an H200 a
    # Linear's weight gradient in f32, 4096 tokens x 1536 x 384, ran at 29.4 TFLOP/s so, 26.9 with 4; the f32 4096
    # matmul and the GPT Linears' forward 0-1 % faster; a conv, several reduce axes, keeps up to 4)
    return stage_ring(tl.ks, tl.opts, t, smem_budget, most=2 if len(red) == 1 else 4)
  return tl.opts


# the heuristic's strategies, in order: the first that returns opts decides; one that returns None may have applied
# actions that the next ones build on (a row-reduce's padding where no GROUP then fits)
STRATEGIES = (scan, warpgroup, tc_conv, tc_matmul, matvec, few_rows, narrow_product, row_reduce, generic)


def heuristic(k: Operation, spec: DeviceSpec, max_upcast: int = 0, allow_local: bool | None = None, unroll: int = 4,
              stage: bool = True) -> list[Record]:
  """kernel-opt's choice of actions for a kernel on a device: the first of STRATEGIES that decides."""
  tl = Tiling(k, spec, max_upcast, allow_local, unroll, stage)
  if not tl.ks.full: return tl.opts
  return next(opts for strategy in STRATEGIES if (opts := strategy(tl)) is not None)


# ---- CPU: vectors along rows no vector width divides
def cpu_pad(ks: Schedule, ax: int, vec: int, apply) -> bool:
  """CPU: an axis of odd length past a vector (a ViT's softmax over 65 tokens) is padded to the vector width (PADTO:
  the padding is computed, masked where a reduce would see it, never stored), where that wastes at most a third, so
  that it runs in vector lanes instead of one element at a time (scalar exp2 polynomials: a 130x65 softmax took
  0.18 ms a kernel). Whether it applied."""
  s = ks.full[ax]
  ns = -(-s // vec) * vec
  return ns != s and (ns - s) * 3 <= ns and apply(Opt('padto', ax, vec))


def pad_rows_gain(n: int, rows: int) -> float:
  """The useful rows of a `rows`-row tile along an axis of n padded to a multiple of rows (cpu_pad's rule: at most a
  third wasted), else 0."""
  ns = -(-n // rows) * rows
  return rows * n / ns if (ns - n) * 3 <= ns else 0


def cpu_rows(n: int, want: int, most: int) -> int | None:
  """CPU: the rows of a register tile along an axis of n: the largest divisor of n up to `want` (and `most`), unless
  padding n to `want` rows (or half as many) gives more useful rows (cpu_pad_rows then pads it): None. A conv's 6
  output columns take 6 rows, not 2 (its 6x6x64 3x3 convs: 4 accumulators a step, latency-bound); 3 take 3, not 4
  with one padded; a ViT's 65 tokens 8 padded."""
  d = next((a for a in range(min(want, most, n), 1, -1) if n % a == 0), None)
  pad = max((pad_rows_gain(n, r) for r in (want, want // 2) if 2 <= r <= most), default=0)
  return None if pad > (d or 0) else d


def cpu_fill(tl: 'Tiling', done: set, vec_bcast: tuple, lanes: int, width: int) -> None:
  """CPU: a register tile of fewer accumulators than three quarters of half the vector registers (a conv's 3 output
  columns by 2 vectors: 6 FMA chains, latency-bound) grows, while it stays within half the registers and MAX_LANES:
  by more vector columns (the vector axis's outer part) or, where a row has several vectors already, by a second row
  axis (the output rows beside its columns; beside one vector a row, more rows only add a broadcast an FMA: a 24x24
  conv of 16 channels ran slower so), whichever makes more accumulators."""
  target, loads = tl.cpu.vector_registers // 2, tl.loads
  # (a sum of products of two loads only, a matmul's or a conv's: a layer norm's rows over tokens, tiled for its
  # broadcast statistics, ran 2x slower with more lanes)
  reds = [op for op in tl.k.body.ops if op.name == 'kernel.reduce']
  mul = reds[0].src.op if len(reds) == 1 and reds[0].kind == 'add' else None
  if mul is None or mul.name != 'kernel.mul' or any(v.op is None or v.op.name != 'kernel.load' for v in mul.operands): return
  acc = lanes // width
  pattern = lambda ax: tuple(tl.ks.strides(op)[ax] == 0 for op in loads)
  cols = lambda: math.prod(tl.ks.full[a] for a, kd in enumerate(tl.ks.kinds) if kd == 'upcast' and pattern(a) == vec_bcast) // width
  # (a tile of one row stays as it is: its rows are not affine (an attention's heads merged back), and more vector
  # columns beside one broadcast left a transformer's projection 3x slower than 2 columns with its reduce unrolled)
  while acc < target * 3 // 4 and acc > cols():
    ks, opts = tl.ks, []
    col = min((a for a in done if a in ks.axes('global') and ks.full[a] > 1 and pattern(a) == vec_bcast), default=None)  # (the vector axis's outer part)
    d = next((a for a in range(min(target // acc, MAX_LANES // lanes, ks.full[col]), 1, -1) if ks.full[col] % a == 0), None) if col is not None else None
    if d: opts.append((acc * d, 1, col, d))
    for ax in ks.axes('global') if cols() > 1 else ():  # (one vector a row: more rows only add a broadcast an FMA)
      st = [ks.strides(op)[ax] for op in loads]
      if ax in done or pattern(ax) == vec_bcast or not (any(x == 0 for x in st) and any(x not in (0, None) for x in st)): continue
      d = next((a for a in range(min(target // acc, MAX_LANES // lanes, ks.full[ax]), 1, -1) if ks.full[ax] % a == 0), None)
      if d: opts.append((acc * d, 0, ax, d))
    if not opts: return
    _, _, ax, amt = max(opts)
    if not tl.apply(Opt('upcast', ax, amt)): return
    acc, lanes = acc * amt, lanes * amt
    done = {a + (a > ax) for a in done} | {ax, ax + 1}


def cpu_pad_rows(ks: Schedule, cands, loads, rows: int, vec_bcast, apply):
  """CPU: where no row axis of a register tile (beside its vector axis) divides by a useful amount (a ViT's 65 tokens), the first candidate
  that would take the tile's rows is padded to them (PADTO, at most a third wasted; the padded rows are computed, not
  stored): (axis, rows) for the upcast, or None. A one-row tile reloads every vector of the other operand per row."""
  for ax in cands:
    st = [ks.strides(op)[ax] for op in loads]
    if tuple(s == 0 for s in st) == vec_bcast: continue
    if any(s == 0 for s in st) and any(s not in (0, None) for s in st):
      # (the tile's rows, else half of them: a conv's 3x3 output pixels take 4 rows where 8 would waste more than a third)
      amt = next((a for a in (rows, rows // 2) if a >= 2 and cpu_pad(ks, ax, a, apply)), None)
      if amt: return (ax, amt)
  return None


def pad_to_tiles(ks: Schedule, multiples, tile=None) -> list | None:
  """PADTO actions that round a matmul's m, n and k up to the first of their `multiples` (a triple of tuples, the
  largest first) that wastes at most an eighth (with `tile`, tensor cores': else to the tile, which they need);
  [] where they divide already, None where the kernel has no m and n (two loads each broadcast along one of them;
  `tile` picks among candidate pairs)."""
  try: m, n = tc_axes(ks.full, ks.kinds, ks.views, tile or (1, 1, 1))
  except OptError: return None
  pads = []
  # (k only where a reduce loop is left: GROUPTOP may have spread a short one over the work-group)
  for i, (ax, amts) in enumerate(zip((m, n, *ks.axes('reduce')[:1]), multiples)):
    s = ks.full[ax]
    amt = next((a for a in amts if -(-s // a) * a - s <= s // 8), tile[i] if tile else None)
    if amt and s % amt: pads.append(Opt('padto', ax, amt))
  return pads


def warpgroup_tiles(k: Operation, ks: Schedule, t: Target, budget: int) -> list | None:
  """The heuristic's opts for a matmul or a conv on warpgroups (tc amount 1), or None where they do not apply: a
  matmul's m and n padded to 128 (or 64) and k to 64, wasting at most an eighth; 8 warps along m where it has 128
  rows (two warpgroups), else 4 and a second warpgroup along another global axis (a conv's output rows); 16 (or 8)
  tiles of n a warp, or the whole n where a tile grid of at most 32 takes no such amount (a conv's 56 output columns:
  N = 56); steps of 64 along k."""
  red = ks.axes('reduce')
  pads = pad_to_tiles(ks, ((128, 64), (128, 64), (64,))) if len(red) == 1 else []
  if pads is None: return None
  opts = pads + [Opt('tc', red[0], 1)]
  s = try_opts(k, opts, t)
  if s is None: return None
  grid = lambda s, role: s.kinds.index(role) - 1  # the tile grid's axis just outside tcm or tcn (right after tc)
  gm, gn = s.full[grid(s, 'tcm')], s.full[grid(s, 'tcn')]
  warps = next((w for w in (8, 4) if gm % w == 0), None)
  blocks = math.prod(s.full[a] for a in s.axes('global')) // (warps or 1)
  # (n 256 a warpgroup where that still leaves 256 blocks or more: one 128x256 block a multiprocessor reads a quarter
  # less from L2 than two of 128x128)
  tiles = next((u for u in (32, 16, 8) if gn % u == 0 and (u < 32 or blocks // u >= 256)), gn if gn <= 32 else None)
  if warps is None or tiles is None: return None
  # (local first: the warps along m must sit just outside the tile, 16 rows apart; a second warpgroup along another
  # global axis must come before m's in the axis order, the warps along m being the innermost local dim)
  other = lambda s: next((a for a in reversed(s.axes('global')) if a < grid(s, 'tcm') and a != grid(s, 'tcn') and s.full[a] % 2 == 0), None)
  steps = [lambda s: Opt('local', grid(s, 'tcm'), warps), lambda s: Opt('upcast', grid(s, 'tcn'), tiles) if tiles > 1 else None,
           lambda s: Opt('local', other(s), 2) if warps == 4 and other(s) is not None else None,
           lambda s: Opt('unroll', s.axes('reduce')[0], 4) if s.axes('reduce') else False]
  for step in steps:
    o = step(s)
    if o is False: return None
    if o is None: continue
    if (s := try_opts(k, opts + [o], t)) is None: return None
    opts.append(o)
  staged = [i for i, op in enumerate(op for op in k.body.ops if op.name == 'kernel.load' and tuple(s.views[op].shape) == tuple(s.full))]
  opts += [Opt('smem', i, 0) for i in staged]
  s = try_opts(k, opts, t)
  if s is None or not lowers(k, opts, t) or sum(s.tile_bytes(op) for op in s.smem) > budget: return None
  return stage_ring(s, opts, t, budget, blocks=1 if tiles == 32 else 2)  # (a 128x256 block takes a multiprocessor alone)


def tc_padding(ks: Schedule, t: Target) -> list | None:
  """Tensor cores' padding: m and n to 128-row blocks, k to 64-deep steps, or smaller down to the instruction's tile."""
  tm, tn, tk = tile = t.tensor_cores.dims
  return pad_to_tiles(ks, ((128, 64, 32, tm), (128, 64, 32, tn), (64, 32, tk)), tile)


def stage_ring(ks: Schedule, opts: list, t: Target, budget: int, blocks: int = 2, most: int = 4) -> list:
  """SMEM's tiles become a ring of stages whose copies run ahead of the math, where the target copies
  asynchronously: as many stages (`most` at most) as leave room for `blocks` work-groups a multiprocessor (two: one's
  copies overlap the other's math). On an H100 a 4096 f16 matmul ran at 286 TFLOP/s with 3 stages of 35 KB, 253 with 4
  (one work-group a multiprocessor), 256 with one buffer; f32 at 41.7 TFLOP/s with 2 to 4 stages, 34.7 without."""
  if not t.async_copy or not ks.smem: return opts
  for n in range(most, 1, -1):
    ring = [Opt('smem', o.fields['axis'], n) if o.name == 'smem' else o for o in opts]
    if n * ks.stage_bytes <= budget // blocks and try_opts(ks.k, ring, t) is not None: return ring
  return opts


class KernelOpt(Pass):
  name = 'kernel-opt'
  summary = 'choose optimisation actions (upcast, unroll, local, group, padto) per kernel, as an opts attribute'
  reads = leaves = 'kernel'
  # (the device's spec, DEVICE_OPTIONS, among them: kernel-opt{target=cuda local_memory=232448} replays a device's choices)
  options = {'mode': (str, 'heuristic', 'heuristic | search | none'),
             'target': DEVICE_OPTIONS['target'],
             'upcast': (int, 0, 'the largest upcast (vector width); 0: the target default'),
             'local': (str, 'auto', 'allow local (work-group) dims: true | false | auto (on GPU targets)'),
             'unroll': (int, 4, 'unroll factor of long reduces'),
             **{k: v for k, v in DEVICE_OPTIONS.items() if k != 'target'},
             'beam': (int, 2, 'search: beam width'),
             'budget': (float, 10.0, 'search: seconds per kernel at most')}
  def run(self, m: Module):
    if self.mode not in ('heuristic', 'search', 'none'): raise PipelineError(f"kernel-opt: unknown mode '{self.mode}' (heuristic, search, none)")
    if self.local not in ('true', 'false', 'auto'): raise PipelineError(f"kernel-opt: option 'local' expects true, false or auto, got '{self.local}'")
    for opt, low in (('upcast', 0), ('unroll', 1), ('local_memory', 0), ('beam', 1), ('budget', 0)):
      if not getattr(self, opt) >= low: raise PipelineError(f"kernel-opt: option '{opt}' must be {low} or more, got {getattr(self, opt)}")
    spec = DeviceSpec.from_options(self.opts)
    if self.mode == 'none' or noopt_from_env(): return
    if self.processor not in ('cpu', 'gpu', 'auto'): raise PipelineError(f"kernel-opt: option 'processor' expects cpu, gpu or auto, got '{self.processor}'")
    allow = None if self.local == 'auto' else self.local == 'true'
    if self.cpu != 'host' and self.cpu not in CPU_KINDS: raise PipelineError(f"kernel-opt: option 'cpu' expects host or one of {', '.join(CPU_KINDS)}, got '{self.cpu}'")
    for k in m.functions('kernel.func'):
      if 'opts' in k.attrs or any(op.name in WHOLE_KERNELS for op in k.body.ops): continue  # (the target writes those whole)
      if self.mode == 'search':
        from tgc.passes.search import beam_search
        opts = beam_search(k, spec, self.beam, self.budget, heuristic(k, spec, self.upcast, allow, self.unroll))
      else: opts = heuristic(k, spec, self.upcast, allow, self.unroll)
      if opts:
        k.attrs['opts'] = tuple(opts)
        self.stats['kernels optimised'] += 1
        self.stats['actions'] += len(opts)
