"""The schedule of a kernel: its iteration space after the optimisation actions of its `opts` attribute.

The iteration space of a kernel is its full shape (its loads' shape; its store's where nothing is reduced). Each
action splits an axis r -> r_outer * amt + r_inner (`axis` counts axes of the shape as it is after the earlier
actions) and gives the inner part a kind:

  global   the launch grid (the outer parts keep this kind)
  local    work-group dims (GPU targets)
  reduce   the reduce's loops (the outer parts of reduce axes keep this kind)
  scan     a scan's axis: one loop in order, carrying the running value (UNROLL alone splits it: a vector of steps a
           loop iteration, carried through its lanes in order; GROUP spreads each step over a work-group, whose
           threads' totals meet in a work-group scan, the whole step's total carried to the next)
  group    a reduce axis spread over the work-group (GROUP: the inner part; GROUPTOP: the outer one); a scan's: the
           threads of a step, each its vector of lanes in order (GROUP after UNROLL)
  upcast   a non-reduce axis computed in registers (the widest upcast axis is a vector lane)
  unroll   a reduce axis unrolled inside the loop
  padto    not a split: the axis is rounded up to a multiple of amt (the padding is computed, never stored); a reduce
           axis too: its padding reads zeros, which a sum of products adds as they are and any other reduce takes as
           its identity (linearize masks its input there: a max, a softmax's sum of exp(x - max))
  swap     not a split: two global axes change places (the loop order)
  tc       tensor cores: m, n, k split into the target's instruction tile (tcm, tcn, tck), first of all; `amt` 0:
           a warp per tile (mma.sync), 1: a warpgroup of 4 warps per 64 rows (Hopper's wgmma, both operands staged
           through shared memory in the tensor cores' swizzled layout, see SwizzledTile)
  smem     not a split: load number `axis` (of the loads under the reduce, in order) is staged through shared
           memory: per step of the reduce loop the work-group copies the tile its threads' lanes read, then reads that;
           `amt` stages (2 or more; 0 is one buffer) keep a ring of tiles, the copies running that many steps ahead
           (asynchronously where the target can); several reduce loops (a conv's) then run as one range

kernel-opt's heuristics and search look at a Schedule to choose actions; linearize lowers one. An `opts` attribute
written by hand replays exactly, and an action that does not apply is an OptError naming the kernel: its shape where
the Schedule is made (apply_opts), the rest of what lowering needs on a target in Schedule.check, the one place that
says whether a schedule lowers (linearize lowers only what it passes; kernel-opt asks it whether tensor cores apply).
"""
from __future__ import annotations
import itertools, math, operator
from dataclasses import dataclass
from tgc.ir.core import Operation
from tgc.ir.attrs import Record
from tgc.ir import dtypes as D
from tgc.errors import TgcError
from tgc.target import Target, DeviceSpec, tensor_core_targets

MAX_LANES = 256  # unrolled lanes (upcast x unroll) a kernel may have at most
MAX_GATHERED_LANES = 64  # a CPU tile's gathered lanes (Schedule.gathered_lanes) at most: LLVM took 0.8 s over a tiny GPT's
                         # embedding and layer norm (two gathers in a tile of 64 rows with its reduce unrolled 4 times: 512)
MAX_UNROLLED_OPS = 1024  # a GPU tile's unrolled body (Schedule.unrolled_ops) the heuristic's reduce unrolling stays within:
                         # NVRTC took 1.9 s over one of 3700 (a position embedding's gradient behind a layernorm's), 0.6 over 1560, 0.2 over 640
MAX_STAGES = 8   # SMEM's ring of tiles (uop.async_wait counts at most 8 groups in flight)
MAX_GLOBAL_DIMS = 3  # launch grid dims (gidx0..2, lidx0..2): more axes are merged into the outermost
MAX_GRID = 2**31 - 1  # points along one launch grid dim at most
OPT_KINDS = {'upcast': 'global', 'local': 'global', 'padto': 'global', 'swap': 'global', 'unroll': 'reduce', 'group': 'reduce', 'grouptop': 'reduce',
             'tc': 'reduce', 'smem': 'load'}


# the ALU ops whose results are finite wherever their operands are (overflow aside): not the reciprocal, the division,
# the logarithm, the square root (of a negative) or the exponential
_FINITE_OPS = frozenset(('neg', 'trunc', 'not', 'add', 'sub', 'mul', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr',
                         'cmplt', 'cmpne', 'cmpeq', 'where', 'mulacc', 'sin'))

def Opt(name: str, axis: int, amt: int) -> Record: return Record(name, {'axis': axis, 'amt': amt})


def feeding(roots, stop=()) -> set:
  """The ops that compute the values `roots`, through their operands (not through the ops in `stop`)."""
  seen, todo = set(), list(roots)
  while todo:
    op = todo.pop().op
    if op is None or op in seen or op in stop: continue
    seen.add(op); todo.extend(op.operands)
  return seen


def reduce_stages(reduces) -> list[list]:
  """Reduces in stages: a reduce whose input uses another's result (softmax's sum of exp(x - max)) comes in a stage
  after that one's."""
  stage: dict = {}
  for r in reduces:
    stage[r] = 1 + max((stage[q] for q in feeding([r.src]) if q in stage), default=-1)
  return [[r for r in reduces if stage[r] == i] for i in range(max(stage.values(), default=-1) + 1)]


def launch_groups(axes, full=None, limits=()) -> list[list[int]]:
  """The axes of each launch grid dim (of the global or the local axes, outermost first; the last is dim 0): one
  each, the outermost merged while there are more than MAX_GLOBAL_DIMS; then, given the axes' sizes (`full`) and the
  most each grid dim takes (`limits`, dim 0 first: Target.max_grid), a group past its dim's limit merged into the
  next inner one, until each fits (dim 0's limit is the largest: CUDA's grid takes 2**31 - 1 blocks along x, 65535
  along y and z)."""
  groups = [[a] for a in axes]
  while len(groups) > MAX_GLOBAL_DIMS: groups[0:2] = [groups[0] + groups[1]]
  while limits and full is not None:
    n = len(groups)
    over = next((j for j in range(n - 1) if math.prod(full[a] for a in groups[j]) > limits[min(n - 1 - j, len(limits) - 1)]), None)
    if over is None: break
    groups[over:over + 2] = [groups[over] + groups[over + 1]]
  return groups


def tc_tile(t: Target | None) -> tuple[int, int, int] | None:
  """The (m, n, k) tile the TC action splits by: the target's tensor cores'. A target without any (or none given)
  checks opts against the kernel with the first registered ones' tile, so that a shape error comes first, as for
  every action; linearize then refuses tc on it."""
  tc = t.tensor_cores if t is not None and t.tensor_cores is not None else next((x.tensor_cores for x in tensor_core_targets()), None)
  return tc.dims if tc is not None else None


class OptError(TgcError):
  """An optimisation action that does not apply to the kernel."""


def _split_padded(padded, ax, inner):
  """PADTO's bounds after axis ax splits into (outer, inner): its index is now outer * inner + inner's."""
  return {k: ([t for a, m in terms for t in (((a, m * inner), (a + 1, m)) if a == ax else ((a if a < ax else a + 1, m),))], size)
          for k, (terms, size) in padded.items()}


def apply_opts(full, out, kinds, views, opts, tile=None):
  """Split axes per the opts (`tile`: TC's (m, n, k), see tc_tile). `views`: {key: ViewStack at `full` (below the
  reduce) or `out`}. Returns the new (full, out, kinds, views, padded, smem) where padded holds, per PADTO,
  ([(axis, multiplier)], size): the index along the padded axis (a sum once it is split) must stay below its size
  before padding (keyed ('reduce', n) for a reduce axis: the reduce's bound, and the bound of stores at the iteration
  shape), and smem {load: stages} for the loads SMEM stages."""
  full, out, kinds = list(full), list(out), list(kinds)
  padded: dict[int, int] = {}
  smem: dict = {}
  for pos, o in enumerate(opts):
    name = o.name
    if name not in OPT_KINDS: raise OptError(f"unknown optimisation '{name}' (known: {', '.join(OPT_KINDS)})")
    ax, amt = o.fields.get('axis'), o.fields.get('amt', 0)
    if name == 'smem':  # marks a load; the tile it stages follows from the kinds of the axes once all opts are applied
      below = [k for k, vs in views.items() if k.name == 'kernel.load' and tuple(vs.shape) == tuple(full)]
      if 'reduce' not in kinds and 'unroll' not in kinds: raise OptError("smem: the kernel has no reduce loop to stage a load for")
      if not isinstance(ax, int) or not 0 <= ax < len(below): raise OptError(f"smem: load {ax} is out of range for the {len(below)} loads under the reduce")
      if not isinstance(amt, int) or not (amt == 0 or 2 <= amt <= MAX_STAGES): raise OptError(f"smem: amount {amt}: 0 (one buffer) or 2 to {MAX_STAGES} stages")
      if below[ax] in smem: raise OptError(f"smem: load {ax} is staged twice")
      if smem and max(1, amt) != max(1, *smem.values()): raise OptError(f"smem: load {ax} has {max(1, amt)} stages, another {max(1, *smem.values())}: one ring for all")
      smem[below[ax]] = max(1, amt)
      continue
    if not isinstance(ax, int) or not 0 <= ax < len(full): raise OptError(f"{name}: axis {ax} is out of range for {len(full)} axes")
    if 'scan' in kinds and (name == 'unroll' and (any(kd in ('upcast', 'unroll') for kd in kinds) or amt not in (2, 4, 8, 16)) or name == 'upcast' and 'unroll' in kinds):
      raise OptError(f"{name}: a scan's unrolled steps (UNROLL of its axis by 2, 4, 8 or 16: one vector) take no other unrolled lanes")
    if 'scan' in kinds and (name == 'group' and ('local' in kinds or 'upcast' in kinds or 'group' in kinds) or name in ('local', 'upcast', 'unroll') and 'group' in kinds):
      raise OptError(f"{name}: a scan's work-group (GROUP of its axis, after UNROLL's steps) takes no local or upcast axes, and no steps after it")
    if kinds[ax] != OPT_KINDS[name] and not (name == 'padto' and kinds[ax] == 'reduce') and not (name in ('unroll', 'group') and kinds[ax] == 'scan'):
      raise OptError(f"{name}: axis {ax} is a {kinds[ax]} axis, {name} applies to {OPT_KINDS[name]} axes" +
                     (" (and reduce axes)" if name == 'padto' else ''))
    if 'tck' in kinds and name not in ('upcast', 'local', 'swap', 'unroll'):
      raise OptError(f"{name}: after tc only upcast, local and swap (the grid of tiles) and unroll (steps of k) apply")
    if name == 'swap':  # exchange two global axes (`amt` names the other): the loop order, outermost first
      if not isinstance(amt, int) or not 0 <= amt < len(full) or amt == ax or kinds[amt] != 'global':
        raise OptError(f"swap: axis {amt} must be another global axis of the {len(full)} (axis {ax} is the first)")
      perm = list(range(len(full))); perm[ax], perm[amt] = amt, ax
      full, out, kinds = [full[i] for i in perm], [out[i] for i in perm], [kinds[i] for i in perm]
      for k, vs in views.items(): views[k] = vs.permute(tuple(perm))
      padded = {k: ([(perm[a], m) for a, m in terms], size) for k, (terms, size) in padded.items()}
      continue
    if name == 'tc':
      if amt not in (0, 1): raise OptError(f"tc: amount {amt}: 0 (a warp's tensor-core tile) or 1 (a warpgroup's: wgmma)")
      if any(p.name != 'padto' for p in opts[:pos]): raise OptError("tc: tensor cores come first, after padto only (then upcast, local or swap of the tile grid)")
      if tile is None: raise OptError("tc: no target has tensor cores")
      # (a warpgroup's m comes in 64 rows: of the pairs, the first whose m 64 divides; a conv's output channels, not
      # its batch)
      m_ax, n_ax = tc_axes(full, kinds, views, (64,) + tuple(tile[1:]) if amt == 1 else tile)
      for a, size, kind in sorted([(ax, tile[2], 'tck'), (n_ax, tile[1], 'tcn'), (m_ax, tile[0], 'tcm')], reverse=True):
        if full[a] % size: raise OptError(f"tc: axis {a} of size {full[a]} is not a multiple of the tile's {size}")
        full, out, kinds = _split(full, out, kinds, views, a, full[a] // size, size, kind)
        padded = _split_padded(padded, a, size)
      continue
    s = full[ax]
    amt = s if amt == 0 else amt
    if not isinstance(amt, int) or amt < 1: raise OptError(f"{name}: amount {amt} must be a positive integer")
    if name == 'padto':
      ns = -(-s // amt) * amt
      if ns == s: continue
      for k, vs in views.items():  # (views at the output shape have 1 along a reduce axis: nothing to pad)
        if vs.shape[ax] == s: views[k] = vs.pad(tuple((0, ns - s) if i == ax else (0, 0) for i in range(len(vs.shape))))
      # (a reduce axis's padding reads zeros: its bound tells SMEM's copies where the data ends, and masks a reduce
      # other than a sum of products and an epilogue's stores)
      padded[len(padded) if kinds[ax] != 'reduce' else ('reduce', len(padded))] = ([(ax, 1)], s)
      full[ax] = ns
      if kinds[ax] != 'reduce': out[ax] = ns
      continue
    if s % amt: raise OptError(f"{name}: amount {amt} does not divide axis {ax} of size {s}")
    outer, inner = (amt, s // amt) if name == 'grouptop' else (s // amt, amt)
    full, out, kinds = _split(full, out, kinds, views, ax, outer, inner, {'upcast': 'upcast', 'local': 'local', 'unroll': 'unroll', 'group': 'group'}.get(name))
    if name == 'grouptop': kinds[ax:ax + 2] = ['group', 'reduce']
    padded = _split_padded(padded, ax, inner)
  if max(smem.values(), default=1) > 1 and not any(kd == 'reduce' and full[a] > 1 for a, kd in enumerate(kinds)):
    raise OptError("smem: stages need a reduce loop to run ahead along")
  return tuple(full), tuple(out), kinds, views, padded, smem


def _split(full, out, kinds, views, ax, outer, inner, inner_kind):
  """Axis ax -> (outer, inner): the outer part keeps the axis's kind, the inner one gets inner_kind; views
  at the full shape and at the output shape (1 along reduce axes) reshape along."""
  s = full[ax]
  nf = full[:ax] + [outer, inner] + full[ax + 1:]
  no = out[:ax] + ([outer, inner] if out[ax] == s else [1, 1]) + out[ax + 1:]
  for k, vs in views.items():
    nv = vs.reshape(tuple(nf) if tuple(vs.shape) == tuple(full) else tuple(no))
    # a split along a lower view's own digits can make the stack one view (a concatenated input read in tiles of
    # its parts: an affine address where the stack took a div and a mod a lane)
    views[k] = nv.simplify() if len(nv.views) == len(vs.views) > 1 else nv
  return nf, no, kinds[:ax] + [kinds[ax], inner_kind] + kinds[ax + 1:]


def tc_axes(full, kinds, views, tile=(1, 1, 1)) -> tuple[int, int]:
  """The (m, n) axes of a matmul-like kernel for tensor cores: its two loads below the reduce, A broadcast
  along n and B along m; of the pairs, the innermost whose sizes the tile divides (conv: m its output channels, n
  its output columns)."""
  loads = [vs for op, vs in views.items() if op.name == 'kernel.load' and tuple(vs.shape) == tuple(full)]
  if len(loads) != 2: raise OptError(f"tc: tensor cores need a reduce over the product of two loads, not {len(loads)}")
  zero = lambda a: tuple(vs.real_strides(ignore_valid=True)[a] == 0 for vs in loads)
  glob = [a for a in range(len(full)) if kinds[a] == 'global' and full[a] > 1]
  pairs = [(m, n) for n in reversed(glob) if zero(n) in ((True, False), (False, True)) for m in reversed(glob) if zero(m) == tuple(not z for z in zero(n))]
  if not pairs: raise OptError("tc: no pair of axes along which one load broadcasts and the other not (a matmul's m and n)")
  return next(((m, n) for m, n in pairs if full[m] % tile[0] == 0 and full[n] % tile[1] == 0), pairs[0])


@dataclass(frozen=True)
class SwizzledTile:
  """SMEM's tile of an operand of Hopper's wgmma, in the layout its tensor cores read through a descriptor with
  128-byte swizzling: n_rows x n_cols 16-bit elements, each coordinate a sum of axis indices times coefficients. The
  columns (the operand's contiguous axis in memory: k for a K-major operand, m or n for an MN-major one) come in blocks
  of 64 (128 bytes); element (r, c) lies at (c // 64) * n_rows * 64 + r * 64 + c % 64, with its 16-byte chunk
  (c % 64 // 8) exchanged for chunk ^ (r % 8): in 8 rows of 128 bytes (1024-byte aligned) each chunk column falls in
  other banks, the hardware's Swizzle<3,4,3> on the address. A descriptor then steps by the lbo and sbo bytes."""
  rows: tuple[tuple[int, int], ...]
  cols: tuple[tuple[int, int], ...]
  n_rows: int
  n_cols: int
  major: str  # 'k' | 'mn'
  @property
  def size(self) -> int: return self.n_rows * self.n_cols
  def place(self, r: int, c: int) -> int:
    """The element offset of (r, c), as the tensor cores read it (the swizzle applied)."""
    return (c // 64) * self.n_rows * 64 + r * 64 + ((((c % 64) >> 3) ^ (r & 7)) << 3) + (c & 7)
  def descriptor(self) -> tuple[int, int, int]:
    """(major: 0 K / 1 MN, lbo, sbo) in bytes: from one 64-column block to the next (unused K-major, where an
    instruction's 16 columns lie in one block: 16 by convention), from 8 rows to the next 8."""
    return (0, 16, 1024) if self.major == 'k' else (1, self.n_rows * 128, 1024)


class Schedule:
  """A kernel.func with its opts applied: the full and output shapes, each axis's kind, the loads' and the store's
  views at the split shape, and the PADTO bounds (see apply_opts). `opts` None: the kernel's own `opts` attribute;
  tc splits by `target`'s tensor cores."""
  def __init__(self, k: Operation, opts=None, target: Target | None = None):
    ops = k.body.ops
    self.k = k
    reduces = [op for op in ops if op.name == 'kernel.reduce']
    self.scans = [op for op in ops if op.name == 'kernel.scan']
    axes = tuple(reduces[0].axes) if reduces else (self.scans[0].axis,) if self.scans else ()
    # the stores at the stored shape (1 along the reduced axes), then those at the iteration shape (an epilogue)
    stores = [op for op in ops if op.name == 'kernel.store']
    self.full_stores = [op for op in stores if any(op.view.shape[a] != 1 for a in axes)]
    self.stores = [op for op in stores if op not in self.full_stores] + self.full_stores
    self.store = self.stores[0]
    out = tuple(1 if i in axes else n for i, n in enumerate(self.store.view.shape))
    full = next((op.view.shape for op in ops if op.name in ('kernel.load', 'kernel.index') and op.view.shape != out), None) or \
      (self.full_stores[0].view.shape if self.full_stores else None)
    if full is None:
      if reduces and any(out[a] != 1 for a in axes): raise TgcError(f"@{k.sym_name}: a reduce with no load to give its size")
      full = out  # nothing loaded at a larger shape: the reduce (if any) is over size-1 axes, one point
    views = {op: op.view for op in ops if op.name in ('kernel.load', 'kernel.index', 'kernel.store')}
    kinds = [('scan' if self.scans else 'reduce') if i in axes else 'global' for i in range(len(full))]
    self.opts = opts = tuple(k.attrs.get('opts', ()) if opts is None else opts)
    def uncast(v):
      while v.op is not None and v.op.name == 'kernel.cast': v = v.op.operands[0]
      return v.op
    finite: dict = {}
    def stays_finite(v) -> bool:  # v's op and those it reads take finite values to finite ones (no 1/0, log 0)
      if v not in finite:
        op = v.op
        finite[v] = op is not None and (op.name in ('kernel.load', 'kernel.index') or
          (op.name == 'kernel.const' and math.isfinite(op.attrs['value'])) or
          (op.name == 'kernel.cast' or getattr(op, 'opname', None) in _FINITE_OPS) and all(stays_finite(x) for x in op.operands))
      return finite[v]
    def zero_pad(r):
      # a sum of products with a loaded factor: padding its axes masks that load to zero, which adds nothing where the
      # other factors stay finite there (loads read zeros there too: a reciprocal of them is infinite, and 0 * inf NaN)
      product = uncast(r.src)
      return r.kind == 'add' and product is not None and product.name == 'kernel.mul' and \
        any(f is not None and f.name == 'kernel.load' for f in map(uncast, product.operands)) and all(stays_finite(x) for x in product.operands)
    try: self.full, self.out, self.kinds, self.views, self.padded, self.smem = apply_opts(full, out, kinds, views, opts, tc_tile(target))
    except (OptError, ValueError) as e: raise OptError(f"@{k.sym_name}: {e}") from None
    self.reduces = reduces
    self.reduce_kind = reduces[0].kind if reduces else None
    self.warpgroup = any(o.name == 'tc' and o.fields.get('amt') == 1 for o in opts)  # wgmma: SMEM's tiles are SwizzledTiles
    # the reduces whose input linearize masks to their identity past a padded reduce axis's end
    self.masked = {r for r in reduces if not zero_pad(r)} if self.reduce_bounds else set()

  def check(self, target: Target | DeviceSpec) -> 'Schedule':
    """This schedule, where it lowers on `target` (its language's limits); else an OptError naming the kernel, the
    first rule broken in the order lowering meets them: the unrolled lanes, work-groups and shared memory on a GPU
    language alone, gathers neither on tensor cores nor staged, tensor cores on a target that has them, the launch grid's sizes, tensor cores' operands, dtypes
    and warps (tc_operands; a warpgroup's: its staged operands and its warps along m), the shared memory the staged
    tiles take (per reduce loop)."""
    spec = DeviceSpec.of(target)  # (a Target: its defaults; a device's spec may add tensor cores' dtypes: TF32)
    t = spec.target
    name, full, kinds = self.k.sym_name, self.full, self.kinds
    axes = lambda *ks: [i for i in range(len(full)) if kinds[i] in ks and full[i] > 1]
    lanes = math.prod(full[i] for i in axes('upcast') + axes('unroll'))
    if lanes > MAX_LANES: raise OptError(f"@{name}: {lanes} unrolled lanes (at most {MAX_LANES})")
    if any(kd in ('local', 'group') for kd in kinds) and t.is_cpu: raise OptError(f"@{name}: local and group dims need a GPU target, not {t.name}")
    if self.smem and (t.is_cpu or not t.local_memory): raise OptError(f"@{name}: smem needs a GPU target with shared memory, not {t.name}")
    tc = any(kd in ('tcm', 'tcn', 'tck') for kd in kinds)
    if (tc and any(op.name == 'kernel.load' and op.gather is not None for op in self.k.walk())) or any(op.gather is not None for op in self.smem):
      raise OptError(f"@{name}: a gather (a load by a computed index) is read neither by tensor cores nor through smem's tiles")
    if tc and t.tensor_cores is None:
      raise OptError(f"@{name}: tensor cores (tc) need the {' or '.join(x.name for x in tensor_core_targets())} target, not {t.name}")
    def grid(ax, prefix):  # (on a CPU only the outermost global axis is a launch dim, the rest loops)
      groups = [ax[:1]] if t.is_cpu and prefix == 'gidx' else launch_groups(ax, full, t.max_grid if prefix == 'gidx' else ())
      for gi, grp in enumerate(reversed(groups)):
        if (size := math.prod(full[a] for a in grp)) > MAX_GRID:
          raise OptError(f"@{name}: {size} points along {prefix}{gi}, more than a launch grid holds (2**31 - 1)")
    grid(axes('global'), 'gidx')
    if tc and len(axes('local', 'group')) > 2: raise OptError(f"@{name}: tc: at most two local dims besides the warp's lanes")
    if not tc: grid(axes('local', 'group'), 'lidx')
    if tc:
      r, (xa, ca), (xb, cb) = self.tc_operands(spec)
      if self.warpgroup: self.check_warpgroup(t, r, (xa, ca), (xb, cb))
      stages = [[op for op in self.smem if op in ca or op in cb]]
    else:
      done, stages = set(), []
      for st in reduce_stages(self.reduces):
        inside = feeding([r.src for r in st], stop=done)
        stages.append([op for op in self.smem if op in inside]); done |= set(st)
    for loads in stages:
      if (size := sum(self.tile_bytes(op) for op in loads)) > t.max_local_memory:
        raise OptError(f"@{name}: smem: the tiles take {size} bytes of shared memory, more than the {t.max_local_memory} of {t.name}")
    return self

  def tc_operands(self, target: Target | DeviceSpec):
    """Tensor cores' sum of products: (the reduce, (A, the ops computing it), (B, the same)), each factor without the
    casts that widen it to the sum's dtype, A the one broadcast along n; an OptError where the kernel is no such sum
    or no tensor core of `target` multiplies its dtypes (DeviceSpec.tc_dtypes: f32 as TF32 where the device's spec
    allows it)."""
    bad = lambda why: OptError(f"@{self.k.sym_name}: tc: {why}")
    if len(self.reduces) != 1 or self.reduces[0].kind != 'add': raise bad("tensor cores compute one sum of products")
    r, dtypes = self.reduces[0], DeviceSpec.of(target).tc_dtypes
    tc_in = {D.BY_NAME[i] for i, o in dtypes if i != o}  # (the narrow inputs whose widening casts the factors lose)
    mul = r.src.op
    # a product of narrow values widened after (conv's half product summed in float): the tensor cores multiply
    # exactly and sum in the wider type, as they do when the factors are widened first
    while mul is not None and mul.name == 'kernel.cast' and mul.operands[0].type in tc_in: mul = mul.operands[0].op
    if mul is None or mul.name != 'kernel.mul': raise bad("the reduce must sum a product")
    def operand(v):  # a factor without the casts that widen it to the sum's dtype, and the ops computing that
      while v.op is not None and v.op.name == 'kernel.cast' and v.op.operands[0].type in tc_in: v = v.op.operands[0]
      seen, order = set(), []
      def visit(u):
        if u in seen or u.op is None: return
        seen.add(u)
        for w in u.op.operands: visit(w)
        order.append(u.op)
      visit(v)
      return v, order
    m_in, n_in = self.kinds.index('tcm'), self.kinds.index('tcn')
    (xa, ca), (xb, cb) = (operand(v) for v in mul.operands)
    zero_along = lambda chain, ax: all(self.views[op].real_strides(ignore_valid=True)[ax] == 0 for op in chain if op.name == 'kernel.load')
    if not zero_along(ca, n_in): (xa, ca), (xb, cb) = (xb, cb), (xa, ca)  # A is the factor broadcast along n
    if not (zero_along(ca, n_in) and zero_along(cb, m_in)): raise bad("one factor must vary along m only and the other along n only")
    acc_dt = r.results[0].type
    if xb.type is not xa.type or (xa.type.name, acc_dt.name) not in dtypes:
      tcs = DeviceSpec.of(target).target.tensor_cores
      off = tcs is not None and tcs.tf32 and xa.type is xb.type is acc_dt is D.f32  # (the target's take f32, the device's spec not)
      tf32 = " (f32 as TF32: set_float32_matmul_precision('high'))" if off else ''
      raise bad(f"no tensor core multiplies {xa.type} by {xb.type} into {acc_dt} (they take {', '.join(f'{i} -> {o}' for i, o in dtypes)}{tf32})")
    return r, (xa, ca), (xb, cb)

  def check_warpgroup(self, t: Target, r, a, b) -> None:
    """TC on warpgroups (wgmma): f16 or bf16 factors summed in f32, each a load staged through shared memory; the
    local axis just outside the tile's m the innermost, a multiple of 4 warps (a warpgroup's 64 rows); a warpgroup's
    n (8 a tile of the upcast axis just outside the tile's n) at most 256."""
    bad = lambda why: OptError(f"@{self.k.sym_name}: tc (warpgroup): {why}")
    full, kinds = self.full, self.kinds
    if not t.tensor_cores.warpgroup: raise bad(f"the {t.name} target has no warpgroup tensor cores (wgmma)")
    (xa, ca), (xb, cb) = a, b
    if r.results[0].type is not D.f32 or xa.type not in (D.f16, D.bf16): raise bad(f"wgmma multiplies f16 or bf16 into f32, not {xa.type} into {r.results[0].type}")
    if len(ca) != 1 or len(cb) != 1 or ca[0] not in self.smem or cb[0] not in self.smem:
      raise bad("both factors must be loads staged through shared memory (smem), with nothing computed on them")
    lo = [i for i in range(len(full)) if kinds[i] in ('local', 'group') and full[i] > 1]
    wm, nu = kinds.index('tcm') - 1, kinds.index('tcn') - 1
    if kinds[wm] != 'local' or full[wm] % 4 or not lo or lo[-1] != wm:
      raise bad("the axis just outside the tile's m must be local, a multiple of 4 warps (a warpgroup's 64 rows), and the innermost local axis")
    N = 8 * (full[nu] if kinds[nu] == 'upcast' else 1)
    if N > 256: raise bad(f"a warpgroup's n is {N} (the upcast axis just outside the tile's n times 8): wgmma takes at most 256")

  def strides(self, op):
    """Per axis, how far the load's address moves (None: not by a constant). A mask (padding) gates lanes without
    moving them, so a padded input still reads contiguously along its rows: the tiles are chosen as if unmasked, and
    linearize gates each lane."""
    st = self.views[op].real_strides(ignore_valid=True)
    if op.name == 'kernel.load' and op.gather is not None:  # (its index moves it along the axes the index varies along)
      vary = self.varying(op.index)
      st = tuple(None if a in vary else s for a, s in enumerate(st))
    return st

  def varying(self, v) -> set[int]:
    """The axes along which a value of the kernel varies: those of the loads that compute it (where the load's address
    moves, or a gather's index varies)."""
    memo = self.__dict__.setdefault('_varying', {})
    if v not in memo:
      op = v.op
      if op is None: memo[v] = set()
      else:
        axes = set().union(*(self.varying(u) for u in op.operands))
        if op.name in ('kernel.load', 'kernel.index'):
          axes |= {a for a, s in enumerate(self.views[op].real_strides(ignore_valid=True)) if s != 0}
        memo[v] = axes
    return memo[v]

  @property
  def reduce_bounds(self) -> list:
    """PADTO's bounds on the reduce axes: (terms, size), the points at or past a size read as zeros."""
    return [v for k, v in self.padded.items() if isinstance(k, tuple)]

  @property
  def store_bounds(self) -> list:
    """PADTO's bounds on the stored axes: (terms, size), the points at or past a size computed but not stored."""
    return [v for k, v in self.padded.items() if not isinstance(k, tuple)]

  def axes(self, kind): return [i for i, kd in enumerate(self.kinds) if kd == kind and self.full[i] > 1]

  def gathered_lanes(self) -> int:
    """The lanes of the unrolled tile that load by a computed index (a gather: on a CPU each is a scalar load and an
    insert, where other loads are vectors)."""
    lanes = self.axes('upcast') + self.axes('unroll')
    return sum(math.prod(self.full[a] for a in lanes if self.strides(op)[a] != 0)
               for op in self.views if op.name == 'kernel.load' and op.gather is not None)

  def unrolled_ops(self) -> int:
    """How many ops the kernel's unrolled body holds: each op once per lane of the upcast and unrolled axes along
    which its value varies (a load broadcast along a tile's columns is loaded once a row; a sum's accumulators are
    one a lane). What the device's compiler reads: its time grows with it, faster than linearly where registers run
    short."""
    lanes = self.axes('upcast') + self.axes('unroll')
    if not lanes: return sum(1 for op in self.k.body.ops if op.results)
    unroll, var, n = set(self.axes('unroll')), {}, 0
    for op in self.k.body.ops:
      axes = set().union(*(var.get(v, ()) for v in op.operands))
      if op.name in ('kernel.load', 'kernel.index'):
        st = self.strides(op)
        axes |= {a for a in lanes if st[a] != 0}
      n += math.prod(self.full[a] for a in axes)
      if op.name == 'kernel.reduce': axes = axes - unroll
      for r in op.results: var[r] = axes
    return n

  def tile_axes(self, op) -> list[int]:
    """SMEM's tile of a load: the axes of a work-group's step of the reduce loop (local, group, upcast, unroll) that
    the load does not broadcast along, the one of the largest stride in memory first (so the last, fastest in the
    tile, is the most contiguous: neighbouring threads copy neighbouring addresses)."""
    rs = self.strides(op)
    axes = [a for a, kd in enumerate(self.kinds) if kd in ('local', 'group', 'upcast', 'unroll', 'tcm', 'tcn', 'tck') and self.full[a] > 1 and rs[a] != 0]
    return sorted(axes, key=lambda a: -1 if rs[a] is None else -abs(rs[a]))  # (stable: equal strides keep the axis order)

  def tile_layout(self, op) -> tuple[dict | SwizzledTile, int]:
    """SMEM's layout of a load's tile: {axis: stride} (the fastest axis 1) and the elements it takes. A row of a
    multiple of 128 bytes (the shared-memory banks' period) is padded by 16 bytes, so that the same column of
    consecutive rows (ldmatrix's 8 rows, a float4 per thread down a column) falls in different banks. Under a
    warpgroup's tc the layout is the tensor cores' own (a SwizzledTile)."""
    if self.warpgroup: return (sw := self.swizzled_tile(op)), sw.size
    axes, size = self.tile_axes(op), 1
    isz = op.results[0].type.itemsize
    strides = {}
    for a in reversed(axes):
      if strides and (size * isz) % 128 == 0: size += 16 // isz
      strides[a] = size; size *= self.full[a]
    return strides, size

  def swizzled_tile(self, op) -> SwizzledTile:
    """A wgmma operand's tile: its m (or n) coordinate from the axes that split m (tcm, then the local and upcast axes
    just outside it), its k coordinate from tck and the unroll axis outside it; the contiguous one in memory is the
    tile's column (K-major: k, MN-major: m or n)."""
    axes, rs = self.tile_axes(op), self.strides(op)
    def coord(tc_kind, kinds):  # ((axis, coefficient), ...) of the axes that make up one coordinate, and its extent
      a, out, size = self.kinds.index(tc_kind), [], 1
      while a >= 0 and (self.kinds[a] == tc_kind or self.kinds[a] in kinds):
        if self.full[a] > 1 and rs[a] != 0: out.append((a, size)); size *= self.full[a]
        a -= 1
      return tuple(out), size
    k, nk = coord('tck', ('unroll',))
    mn, nmn = next((c for c in (coord('tcm', ('local', 'upcast')), coord('tcn', ('local', 'upcast'))) if c[0] and c[0][0][0] in axes), ((), 1))
    kmajor = axes[-1] in {a for a, _ in k}
    # the tile's other axes (a conv's rows of output pixels that other warpgroups take) repeat its rows: blocks of
    # rows one after another, each the operand of its own warpgroup
    others, n_other = [], 1
    for a in reversed([a for a in axes if a not in {x for x, _ in k + mn}]):
      if self.kinds[a] not in ('local', 'upcast'): raise OptError(f"tc: a warpgroup's operand tile spans axis {a}, a {self.kinds[a]} axis")
      others.append(a); n_other *= self.full[a]
    rows, n_rows = (mn, nmn) if kmajor else (k, nk)
    rows = rows + tuple((a, n_rows * st) for a, st in zip(others, itertools.accumulate([1] + [self.full[a] for a in others[:-1]], operator.mul)))
    sw = SwizzledTile(rows, k, n_rows * n_other, nk, 'k') if kmajor else SwizzledTile(rows, mn, n_rows * n_other, nmn, 'mn')
    if sw.n_cols % 64 or sw.n_rows % 8 or op.results[0].type.itemsize != 2:
      raise OptError(f"tc: a warpgroup's operand tile must be of 16-bit elements with rows of a multiple of 64 (128 bytes) "
                     f"and a multiple of 8 rows, got {sw.n_rows} x {sw.n_cols} of {op.results[0].type}")
    return sw

  @property
  def stages(self) -> int: return max(self.smem.values(), default=1)

  def slot_elems(self, op) -> int:
    """Elements of one tile of a load's ring: its layout's, rounded up to 16 bytes (every stage as aligned as the
    first; a swizzled tile's to 1024, the period of its pattern)."""
    w = max(1, (1024 if self.warpgroup else 16) // op.results[0].type.itemsize)
    return -(-self.tile_layout(op)[1] // w) * w

  @property
  def stage_bytes(self) -> int:
    """The shared memory one stage of SMEM's ring takes: a slot of each staged load."""
    return sum(self.slot_elems(op) * op.results[0].type.itemsize for op in self.smem)

  def tile_bytes(self, op, stages: int | None = None) -> int:
    """The shared memory a load's tiles take: `stages` of them (None: the schedule's)."""
    s = self.stages if stages is None else stages
    return (self.tile_layout(op)[1] if s == 1 else s * self.slot_elems(op)) * op.results[0].type.itemsize


def try_opts(k, opts, target: Target | None = None) -> Schedule | None:
  """The schedule, or None where an action does not apply to the kernel's shape."""
  try: return Schedule(k, opts, target)
  except TgcError: return None


def lowers(k, opts, target: Target | DeviceSpec) -> bool:
  """Whether the kernel with these opts lowers on `target` (Schedule.check: its shape, dtypes, limits)."""
  t = target.target if isinstance(target, DeviceSpec) else target
  try: Schedule(k, tuple(opts) if isinstance(opts, list) else (opts,) if isinstance(opts, Record) else opts, t).check(target); return True
  except TgcError: return False
