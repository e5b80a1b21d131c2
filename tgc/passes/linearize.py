"""linearize: kernel.func ASTs -> uop.func flat lists (ranges, index arithmetic, accumulators).

The kernel's `opts` are applied first (tgc/passes/schedule.py: what each action does to the iteration space);
this pass lowers the schedule that results:

  global   the launch grid: `uop.special gidxN` (the last global axis is gidx0, as in tinygrad); on CPU
           targets only the outermost is a special (the runtime splits it across threads), the rest loops
  local    work-group dims: `uop.special lidxN`
  reduce   `uop.range` loops (ridxN) inside which the reduce's input is computed
  group    a reduce axis spread over the work-group: partials meet in shared memory (a tree when a power of two)
  upcast   a non-reduce axis computed in registers: unrolled, and the widest upcast axis is a vector lane
  unroll   a reduce axis unrolled inside the loop (a vector lane when no upcast axis is)

Values are generated once per combination of the unrolled lanes; along the vector axis a value is either
uniform (a scalar) or a `vec<W>`: loads whose index has stride 1 along it become vector loads, stride 0
a scalar, anything else a gather of scalar loads. A reduce is a `uop.define_acc` per lane combination
before its loops and `uop.phi` inside them; a reduce over a vector lane ends with a horizontal reduce.
"""
from __future__ import annotations
import functools, itertools, math, operator, struct
from tgc.ir.core import Operation, Module, Value, Block, REGISTRY
from tgc.ir.types import PtrType, VecType, elem
from tgc.ir import dtypes as D, alu
from tgc.ir.attrs import Symbol
from tgc.errors import TgcError
from tgc.passes.manager import Pass
from tgc.passes.kernelize import softcap_attr
from tgc.target import DeviceSpec, DEVICE_OPTIONS
from tgc.passes.schedule import Schedule, OptError, MAX_GLOBAL_DIMS, feeding, reduce_stages, launch_groups
from tgc.passes.shared_memory import SharedMemoryLowering
from tgc.passes.tensor_cores import TensorCoreLowering

_pack_d = struct.Struct('<d').pack
def _exact(v):
  """An attribute value as a key that tells apart what equality does not: -0.0 from 0.0 (equal, and one hash), NaNs."""
  return ('f', _pack_d(v)) if type(v) is float else v

U = lambda n: REGISTRY[f'uop.{n}']
VEC_WIDTHS = (2, 4, 8, 16)
MAX_ACCS = 24     # accumulators kept apart per unrolled lane at most (registers: 32 vector registers on AVX-512)


_MISS = object()
_UOPS: dict = {}  # uop name -> its op class

_INT_FOLD = {'add': operator.add, 'sub': operator.sub, 'mul': operator.mul, 'and': operator.and_, 'or': operator.or_, 'xor': operator.xor,
             'max': max, 'min': min, 'cmplt': operator.lt, 'cmpne': operator.ne, 'cmpeq': operator.eq}


class UopBuilder:
  """Appends uops to a list, hash-consing pure ones and folding the obvious (x+0, x*1, constants).
  Doubles as the expression builder of ViewStack.to_indexed."""
  def __init__(self, idx_dt=D.i32):
    self.ops: list[Operation] = []
    self.cache: dict = {}
    self.idx_dt = idx_dt
    self.scopes: list[list] = [[]]   # cache keys made inside each open range: forgotten at its end
    self.consts: dict = {}           # every uop.const's result -> its value (cval: asked of every operand of index math)

  def emit(self, name, srcs, t, attrs=None, pure=True) -> Value:
    key = (name, tuple(srcs), t, tuple(sorted((k, _exact(v)) for k, v in attrs.items())) if attrs else ()) if pure else None
    if key is not None:
      r = self.cache.get(key, _MISS)
      if r is not _MISS: return r
    cls = _UOPS.get(name) or _UOPS.setdefault(name, U(name))
    op = cls(list(srcs), [t] if t is not None else [], attrs)
    self.ops.append(op)
    r = op.results[0] if op.results else None
    if key is not None: self.cache[key] = r; self.scopes[-1].append(key)
    if name == 'const': self.consts[r] = op.attrs['value']
    return r

  def indexed(self, vs, at: tuple, clamp: tuple = ()):
    """vs.to_indexed(at, clamp) built once per view stack and point while the scope that built it is open: what building it
    again would return (its ops are pure, found again), without the work (loads of one layout index alike)."""
    key = ('indexed', vs, at, clamp)  # (by value: the loads and stores of one layout have stacks equal, not the same)
    r = self.cache.get(key)
    if r is None:
      r = self.cache[key] = vs.to_indexed(at, self, clamp)
      self.scopes[-1].append(key)
    return r

  def open_range(self, start, end):
    r = self.emit('range', [start, end], self.idx_dt, pure=False)
    self.scopes.append([])
    return r
  def close_range(self, r):
    self.emit('endrange', [r], None, pure=False)
    for k in self.scopes.pop(): self.cache.pop(k, None)
  def open_if(self, cond):  # a scope too: what is made under the condition is not computed for the threads outside it
    self.emit('if', [cond], None, pure=False)
    self.scopes.append([])
  def close_if(self):
    self.emit('endif', [], None, pure=False)
    for k in self.scopes.pop(): self.cache.pop(k, None)

  def cval(self, v): return self.consts.get(v)

  def const(self, x, dt=None):
    if dt is None: dt, v = self.idx_dt, int(x)  # (index arithmetic's: the most asked)
    else: v = float(x) if dt.is_float else int(x)
    r = self.cache.get(('const', (), dt, (('value', _exact(v)),)))  # (emit's key: index building asks for constants most)
    return r if r is not None else self.emit('const', [], dt, {'value': v})
  def true(self): return self.const(1, D.bool_)
  def alu(self, name, a, b, dt=None):
    ca, cb = self.consts.get(a), self.consts.get(b)
    if ca is None and cb is None: return self.emit(name, (a, b), D.bool_ if name in alu.COMPARE else dt or a.type)  # (nothing to fold)
    t = dt or a.type
    if ca is not None and cb is not None and isinstance(t, D.DType) and (t.is_int or t.is_bool):
      src = elem(a.type)
      f = _INT_FOLD.get(name)
      if f is not None and not src.width and not t.width:  # (Python's ints, wrapped to the dtype: as exec_alu, faster)
        r = f(ca, cb)
        if name not in alu.COMPARE and t.is_int:
          m = 1 << t.bits
          r = r % m if not t.is_signed else (r + (m >> 1)) % m - (m >> 1)
        return self.const(int(r), D.bool_ if name in alu.COMPARE else t)
      import numpy as np
      r = alu.exec_alu(name, src, np.array(ca), np.array(cb))
      return self.const(int(r), D.bool_ if name in alu.COMPARE else t)
    if name == 'add':
      if ca == 0: return b
      if cb == 0: return a
    if name == 'mul':
      if ca == 1: return b
      if cb == 1: return a
      if (ca == 0 or cb == 0) and elem(t).is_int: return self.const(0, t)
    if name == 'idiv' and cb == 1: return a
    if name == 'mod' and cb == 1: return self.const(0, t)
    if name == 'and' and t is D.bool_:  # (of integers, a bit mask: and(x, 1) is x's lowest bit)
      if ca == 1: return b
      if cb == 1: return a
      if ca == 0 or cb == 0: return self.const(0, D.bool_)
    rt = D.bool_ if name in alu.COMPARE else t
    return self.emit(name, [a, b], rt)
  def add(self, a, b): return self.alu('add', a, b)
  def mul(self, a, b): return self.alu('mul', a, b)
  def idiv(self, a, b): return self.alu('idiv', a, b)
  def mod(self, a, b): return self.alu('mod', a, b)
  def lt(self, a, b): return self.alu('cmplt', a, b)
  def and_(self, a, b): return self.alu('and', a, b)


class Lowerer(SharedMemoryLowering, TensorCoreLowering):
  """One kernel.func lowered to a uop.func: its schedule checked (Schedule.check), then its index variables, reduce
  regions, lanes and stores; tensor cores' and shared memory's parts in their own modules (the mixins)."""
  def __init__(self, k: Operation, target: str | DeviceSpec, opts=None):
    self.spec = DeviceSpec.of(target)
    self.k, self.target, self.opts = k, self.spec.name, opts
    self.t = self.spec.target
    self.cpu = self.t.is_cpu
    self.open_ifs = 0   # uop.ifs the rest of the kernel runs under (closed at its end)
    self.n_locals = 0   # shared-memory buffers made so far (temp0, temp1, ...)

  def run(self) -> Operation:
    k = self.k
    ops = k.body.ops
    reduces = [op for op in ops if op.name == 'kernel.reduce']
    s = self.sched = Schedule(k, self.opts, self.t).check(self.spec)  # the opts applied, and legal here (its errors name the kernel)
    full, out, kinds, views, padded, opts = s.full, s.out, s.kinds, s.views, s.padded, s.opts
    self.full, self.out, self.kinds, self.views, self.padded = full, out, kinds, views, padded
    self.smem, self.tiles = s.smem, {}  # SMEM's loads; while a reduce loop is open, each one's tiles: (buffer, {axis: stride}, slot size)
    n = len(full)
    # 64-bit indices for a buffer past 2^31 elements, or a view whose index expression may pass that (a stride of
    # 2^32 along an axis its mask keeps at one index is valid IR; in i32 its constant would not be)
    big = any(a.type.numel >= 2**31 for a in k.body.args) or any(op.view.reach() >= 2**31 for op in ops if op.name in ('kernel.load', 'kernel.index', 'kernel.store'))
    b = self.b = UopBuilder(D.i64 if big else D.i32)
    self.buf = {a: b.emit('define_global', [], PtrType(a.type.dtype), {'index': i, 'size': a.type.numel}, pure=False) for i, a in enumerate(k.body.args)}
    # lanes: the unrolled axes of each region, and the vector axis
    up = [i for i in range(n) if kinds[i] == 'upcast' and full[i] > 1]
    un = [i for i in range(n) if kinds[i] == 'unroll' and full[i] > 1]
    cand = [i for i in reversed(up) if full[i] in VEC_WIDTHS] or ([] if up else [i for i in reversed(un) if full[i] in VEC_WIDTHS])
    # the widest axis carries the vector: in a register tile the other upcast axes become separate
    # accumulators and broadcast loads, so 16 lanes x 8 accumulators beat 8 lanes x 32 (conv's cout vs ox);
    # among equals, the one more loads read contiguously, then the innermost
    loads = [v for op, v in views.items() if op.name == 'kernel.load']
    contiguous = lambda i: sum(1 for v in loads if v.real_strides()[i] == 1)
    self.vec = max(cand, key=lambda i: (full[i], contiguous(i), i)) if cand else None
    self.W = full[self.vec] if self.vec is not None else 1
    self.lanes_below = [i for i in up + un if i != self.vec]
    self.lanes_above = [i for i in up if i != self.vec]
    # CPU: loads past a padded global axis's end (PADTO: computed, never stored) read its last element instead of a
    # masked zero: a gate is a branch a load in the inner loop (a 65-row matmul's 8-row tile ran at 0.6x the speed of
    # a 64-row one's); not along the vector axis, whose lanes load as one vector
    self.load_clamp = tuple((tuple(terms), size) for terms, size in s.store_bounds if all(a != self.vec for a, _ in terms)) if self.t.is_cpu else ()
    # index variables
    zero = b.const(0)
    self.idx: dict[int, Value] = {}
    tc = any(kd in ('tcm', 'tcn', 'tck') for kd in kinds)
    self.loops: list[Value] = []
    global_size, local_size = self.index_variables(tc)
    if tc: self.vec, self.W = None, 1  # upcast axes are tiles of their own here, not vector lanes
    for i in range(n):
      if kinds[i] in ('global', 'local', 'group') and i not in self.idx: self.idx[i] = zero
    self.global_size, self.local_size = global_size, local_size
    self.ops_list = ops
    if tc: self.lower_tc(reduces, k.sym_name)
    elif s.scans: self.lower_scan(s.scans[0])
    else: self.lower_body(reduces)
    for _ in range(self.open_ifs): b.close_if()
    for r in reversed(self.loops): b.close_range(r)
    attrs = {'sym_name': Symbol(k.sym_name), 'global_size': tuple(global_size) or (1,), 'local_size': tuple(local_size) or (1,)}
    if opts: attrs['opts'] = opts
    if opts and self.t.fp_contract: attrs['contract'] = True  # fma in the register tiles: half the instructions, one rounding
    return U('func')([], [], attrs, k.loc, Block([], b.ops))

  def index_variables(self, tc: bool, again: bool = False) -> tuple[list[int], list[int]]:
    """The index variables of the global and local axes (self.idx; on tensor cores self.lane, the lane of a warp:
    lidx0, and the warps of a block lidx1 and lidx2): uop.specials and what is computed from them; the launch's
    (global_size, local_size). again: the specials read anew, so that nothing computed from the first reads is used
    from here on (a warpgroup kernel's epilogue: ptxas serialises the wgmma of a loop across which index values
    live that only the code after it reads)."""
    full, kinds = self.full, self.kinds
    gl = [i for i in range(len(full)) if kinds[i] == 'global' and full[i] > 1]
    lo = [i for i in range(len(full)) if kinds[i] in ('local', 'group') and full[i] > 1]
    global_size = self.grid(gl, 'gidx', again)
    if not tc: return global_size, self.grid(lo, 'lidx', again)
    self.lane, local_size = self.special('lidx0', 32, again), [32]
    for j, a in enumerate(reversed(lo)):
      self.idx[a] = self.special(f'lidx{j + 1}', full[a], again); local_size.append(full[a])
    return global_size, local_size

  def special(self, axis: str, size: int, again: bool = False) -> Value:
    """A launch index (again: read anew, uop.special {read = 1})."""
    return self.b.emit('special', [], self.b.idx_dt, {'axis': axis, 'size': size, **({'read': 1} if again else {})})

  def grid(self, axes, prefix, again: bool = False):
    """Specials for these axes (the last is N=0); beyond three, or on the CPU, loops. again: specials read anew
    (index_variables)."""
    b, sizes = self.b, []
    if not axes: return sizes
    if self.cpu and prefix == 'gidx':  # one special for the outermost axis: the runtime splits it across threads
      g = self.special('gidx0', self.full[axes[0]])
      self.idx[axes[0]] = g; sizes.append(self.full[axes[0]])
      for a in axes[1:]:
        r = b.open_range(b.const(0), b.const(self.full[a]))
        self.loops.append(r); self.idx[a] = r
      return sizes
    for gi, grp in enumerate(reversed(launch_groups(axes, self.full, self.t.max_grid if prefix == 'gidx' else ()))):
      size = math.prod(self.full[a] for a in grp)
      g = self.special(f'{prefix}{gi}', size, again)
      sizes.append(size)
      inner = size
      for a in grp:
        inner //= self.full[a]
        v = g if inner == 1 else b.idiv(g, b.const(inner))
        self.idx[a] = v if a == grp[0] else b.mod(v, b.const(self.full[a]))
    return sizes

  # ---- lanes ----
  def combos(self, lane_axes):
    return list(itertools.product(*[range(self.full[a]) for a in lane_axes]))

  def at(self, idx_axes, lane_axes, combo, vec_lane=0):
    """Index expressions per axis for one lane combination."""
    b, out = self.b, []
    cm = dict(zip(lane_axes, combo))
    for i in range(len(self.full)):
      if i in cm: out.append(b.const(cm[i]))
      elif i == self.vec: out.append(b.const(vec_lane))
      elif i in idx_axes: out.append(idx_axes[i])
      else: out.append(b.const(0))
    return out

  def lower_body(self, reduces):
    b, ops = self.b, self.ops_list
    last_reduce = max((ops.index(r) for r in reduces), default=-1)
    below = {i: v for i, v in self.idx.items()}
    above = {i: v for i, v in self.idx.items()}
    self.vals: dict = {}
    # reduces in stages: a reduce whose input uses another's result (softmax's sum of exp(x - max)) runs in a loop
    # after that one's; each stage recomputes what its input needs from the loads
    stages = reduce_stages(reduces)
    # stores at the iteration shape (an epilogue after the reduces: softmax's exp(x - max) / sum) run in one more
    # stage, a loop over the reduce axes as the reduces' own; every thread of a GROUP then needs the results
    epilogue = [op for op in self.sched.full_stores if reduces]
    for i, st in enumerate(stages):
      self.lower_reduce_region(st, below, max(ops.index(r) for r in st), set(r for q in stages[:i] for r in q), i == len(stages) - 1 and not epilogue)
    rest = [op for op in ops[last_reduce + 1:] if op not in epilogue]
    if epilogue:  # (what only the epilogue's stores read is computed in its stage alone)
      for_stores = feeding([op.value for op in rest if op.name == 'kernel.store'])
      rest = [op for op in rest if op.name == 'kernel.store' or op in for_stores]
    if epilogue:
      self.lower_epilogue(epilogue, below, set(reduces))
      if self.sched.axes('group') and any(op.name == 'kernel.store' for op in rest):  # stores at the stored shape: the group's first thread
        b.open_if(b.alu('cmpeq', self.group_index(), b.const(0))); self.open_ifs += 1
    # what the ops after the reduce use from before it (a constant, a load invariant along the reduce) is
    # computed again after the loop: the values made inside the range are not visible past its end
    need = feeding([v for op in rest for v in op.operands], stop=set(reduces))
    for n, op in enumerate(ops):
      if (n <= last_reduce and op not in need) or (n > last_reduce and op not in rest): continue
      self.lower_op(op, above, self.lanes_above, above=True)

  def lower_scan(self, sc):
    """A scan: its init (read at the row shape) and an accumulator per lane combination before one loop along the
    scanned axis, in which the scan's input is computed, combined with the running value (`uop.phi`: the accumulator
    holds it from then on) and stored, every step (exclusive: the stores read it before the phi, which ends the step)."""
    b, ops, lanes = self.b, self.ops_list, self.lanes_below  # (a scan kernel's lanes are its upcast axes)
    a = self.kinds.index('scan')
    idx = {**self.idx, a: b.const(0)}
    self.vals = {}
    pre = feeding([sc.init]) if sc.init is not None else set()
    for op in ops:
      if op in pre: self.lower_op(op, idx, lanes, above=False)
    dt, combos = sc.results[0].type, self.combos(lanes)
    steps = self.vec is not None and self.kinds[self.vec] == 'unroll'  # (a vector of steps: the lanes in order)
    grouped = self.group_threads() > 1
    t = VecType(self.W, dt) if self.vec is not None and self.W > 1 and not steps else dt
    ident = b.const(alu.reduce_identity(sc.kind, dt), dt)
    accs = {c: b.emit('define_acc', [self.broadcast(self.vals[sc.init][c] if sc.init is not None else ident, t)], t, pure=False) for c in combos}
    slots = self.group_scan_slots(dt) if grouped else None  # (shared memory is declared outside every loop: OpenCL's rule)
    r = idx[a] = b.open_range(b.const(0), b.const(self.full[a]))
    for acc in accs.values(): acc.op.operands = [acc.op.operands[0], r]
    late = []  # exclusive: the phis come after the stores, which read the accumulator as it was before the step
    for op in ops:
      if op in pre: continue
      if op is not sc: self.lower_op(op, idx, lanes, above=False); continue
      res = {}
      for c in combos:
        x = self.vals[sc.src][self.project(sc.src, lanes, c)]
        if grouped:  # this thread's lanes in order, from the totals of the threads before it and of the steps before
          xs = [b.emit('gep', [x], dt, {'index': l}) for l in range(self.W)] if isinstance(x.type, VecType) else [x]
          runs = [xs[0]]
          for v in xs[1:]: runs.append(self.combine(sc.kind, runs[-1], v))
          before, total = self.group_scan(sc.kind, runs[-1], dt, slots)
          start = self.combine(sc.kind, accs[c], before)
          outs = [start if sc.exclusive and l == 0 else self.combine(sc.kind, start, runs[l - 1] if sc.exclusive else runs[l]) for l in range(len(xs))]
          late.append((accs[c], self.combine(sc.kind, accs[c], total)))
          res[c] = outs[0] if len(outs) == 1 else b.emit('vectorize', outs, VecType(len(outs), dt))
          continue
        if steps:  # each lane's step from the one before it; the stores take them as one vector
          run, outs = accs[c], []
          for l in range(self.W):
            prev, run = run, self.combine(sc.kind, run, b.emit('gep', [x], dt, {'index': l}) if isinstance(x.type, VecType) else x)
            outs.append(prev if sc.exclusive else run)
          late.append((accs[c], run)); res[c] = b.emit('vectorize', outs, VecType(self.W, dt))
          continue
        nxt = self.combine(sc.kind, accs[c], self.broadcast(x, t))
        if sc.exclusive: late.append((accs[c], nxt)); res[c] = accs[c]
        else: res[c] = b.emit('phi', [accs[c], nxt], t, pure=False)
      self.vals[sc.results[0]] = res
    for acc, nxt in late: b.emit('phi', [acc, nxt], t, pure=False)
    b.close_range(r)

  def group_scan_warps(self, dt) -> int:
    """GROUP of a scan: its warps where the group is whole warps of values a shuffle exchanges (a butterfly of
    shuffles in each), else 0 (shared memory alone)."""
    G, WS = self.group_threads(), self.t.warp_size
    return G // WS if WS and G % WS == 0 and dt.itemsize in self.t.shuffle_bytes and dt is not D.bool_ else 0

  def group_scan_slots(self, dt):
    """The shared memory a GROUP scan's threads meet in: a slot per warp, or per thread."""
    nw = self.group_scan_warps(dt)
    if nw == 1: return None
    self.n_locals += 1
    n = nw or self.group_threads()
    return self.b.emit('define_local', [], PtrType(dt, True), {'sym': f'temp{self.n_locals - 1}', 'size': n}, pure=False)

  def group_scan(self, kind, tot, dt, tmp):
    """GROUP of a scan's step: what the threads before this one in the work-group total (the kind's identity for the
    first) and what they all total, from each thread's total `tot`. Where the group is whole warps: a butterfly of
    uop.shuffle_xor in each warp (a lane whose partner comes first takes in its running total; the kinds are
    commutative), then the warps' totals through the slots `tmp`; else every thread reads every thread's total from
    them. Barriers before the writes too: the slots are the next step's."""
    b = self.b
    G, nw = self.group_threads(), self.group_scan_warps(dt)
    gl, WS = self.group_index(), self.t.warp_size
    ident = b.const(alu.reduce_identity(kind, dt), dt)
    comb = lambda x, y: self.combine(kind, x, y)
    if nw:
      lane, before, run, m = b.mod(gl, b.const(WS)), ident, tot, 1
      while m < WS:
        other = b.emit('shuffle_xor', [run], dt, {'mask': m}, pure=False)
        before = b.emit('where', [b.alu('cmpne', b.alu('and', lane, b.const(m)), b.const(0)), comb(other, before), before], dt)
        run, m = comb(run, other), 2 * m
      if nw == 1: return before, run
      warp = b.idiv(gl, b.const(WS))
      b.emit('barrier', [], None, pure=False)
      b.open_if(b.alu('cmpeq', lane, b.const(0)))
      b.emit('store', [tmp, warp, run], None, pure=False)
      b.close_if()
      b.emit('barrier', [], None, pure=False)
      parts = [b.emit('load', [tmp, b.const(j)], dt, pure=False) for j in range(nw)]
      for j, p in enumerate(parts[:-1]): before = b.emit('where', [b.lt(b.const(j), warp), comb(p, before), before], dt)
      total = parts[0]
      for p in parts[1:]: total = comb(total, p)
      return before, total
    b.emit('barrier', [], None, pure=False)
    b.emit('store', [tmp, gl, tot], None, pure=False)
    b.emit('barrier', [], None, pure=False)
    acc_b, acc_t = (b.emit('define_acc', [ident], dt, pure=False) for _ in range(2))
    j = b.open_range(b.const(0), b.const(G))
    for acc in (acc_b, acc_t): acc.op.operands = [acc.op.operands[0], j]
    v = b.emit('load', [tmp, j], dt, pure=False)
    before = b.emit('phi', [acc_b, b.emit('where', [b.lt(j, gl), comb(acc_b, v), acc_b], dt)], dt, pure=False)
    total = b.emit('phi', [acc_t, comb(acc_t, v)], dt, pure=False)
    b.close_range(j)
    return before, total

  def combine(self, kind, acc, x):
    """A scan's step: acc op x; logaddexp as max + log(1 + exp(min - max)) in base 2 (the larger one where it is
    infinite: -inf and -inf give -inf, not NaN)."""
    b, t = self.b, acc.type
    if kind != 'logaddexp': return b.emit(kind, [acc, x], t, pure=False)
    c = lambda v: self.broadcast(b.const(v, elem(t)), t)
    hi, lo = b.emit('max', [acc, x], t), b.emit('min', [acc, x], t)
    d = b.emit('exp2', [b.emit('mul', [b.emit('sub', [lo, hi], t), c(1 / math.log(2))], t)], t)
    r = b.emit('add', [hi, b.emit('mul', [b.emit('log2', [b.emit('add', [c(1.0), d], t)], t), c(math.log(2))], t)], t)
    inf = b.emit('cmpne', [b.emit('sub', [hi, hi], t), c(0.0)], VecType(t.count, D.bool_) if isinstance(t, VecType) else D.bool_)
    return b.emit('where', [inf, hi, r], t, pure=False)

  def lower_epilogue(self, stores, idx, done):
    """The stores at the iteration shape after the reduces: a loop over the reduce axes (each thread of a GROUP its
    share) recomputing what they store from the loads (those a thread's unrolled share already read are the same
    values: no second read) and the reduces' results."""
    b, ops = self.b, self.ops_list
    inside = feeding([st.value for st in stores], stop=done)
    loop_idx = {**idx, **{a: b.const(0) for a in range(len(self.full)) if self.kinds[a] == 'reduce'}}
    ranges = self.open_reduce_loops(loop_idx, False)
    for op in ops:
      if op in inside and op.name != 'kernel.reduce': self.lower_op(op, loop_idx, self.lanes_below, above=False)
    for st in stores: self.lower_op(st, loop_idx, self.lanes_below, above=False)
    for r in reversed(ranges): b.close_range(r)

  def group_index(self):
    """A thread's index within its GROUP (the group axes' linear index, the last fastest)."""
    b, e, st = self.b, self.b.const(0), 1
    for i in reversed([i for i in range(len(self.full)) if self.kinds[i] == 'group' and self.full[i] > 1]):
      e = b.add(e, b.mul(self.idx[i], b.const(st))); st *= self.full[i]
    return e

  def lower_reduce_region(self, reduces, idx, last_reduce, done=frozenset(), final=True):
    b, ops, full = self.b, self.ops_list, self.full
    cu = self.combos(self.lanes_above)
    cb_all = self.combos(self.lanes_below)
    cmap = {a: i for i, a in enumerate(self.lanes_below)}
    above_of = lambda cb: tuple(cb[cmap[a]] for a in self.lanes_above)
    # one accumulator per unrolled lane while they fit in registers: no chain of dependent updates in the
    # loop; the lanes of an unrolled reduce axis are combined after it
    split = len(cb_all) <= MAX_ACCS
    keys = cb_all if split else cu
    key_of = (lambda cb: cb) if split else above_of
    vec_is_unroll = self.vec is not None and self.kinds[self.vec] == 'unroll'
    accs = {}
    for r in reduces:
      dt = r.results[0].type
      t = VecType(self.W, dt) if self.vec is not None and self.W > 1 else dt
      init = b.const(alu.reduce_identity(r.kind, dt), dt)
      if isinstance(t, VecType): init = b.emit('vectorize', [init] * self.W, t)
      accs[r] = {c: b.emit('define_acc', [init], t, pure=False) for c in keys}
    # the reduce's input, per lane combination of the region below
    inside = feeding([r.src for r in reduces], stop=done)
    staged = [op for op in self.smem if op in inside]
    loop_idx = {**idx, **{a: b.const(0) for a in range(len(full)) if self.kinds[a] == 'reduce'}}
    if staged: self.stage_tiles(staged, loop_idx)
    ranges = self.open_reduce_loops(loop_idx, bool(staged))
    for r in reduces:
      for acc in accs[r].values(): acc.op.operands = [acc.op.operands[0]] + ranges
    if staged: self.stage_step(staged, loop_idx)
    for n, op in enumerate(ops[:last_reduce + 1]):
      if op.name == 'kernel.reduce' or op not in inside: continue
      self.lower_op(op, loop_idx, self.lanes_below, above=False)
    for r in reduces:
      src = self.vals[r.src]
      cur = dict(accs[r])
      for cb in cb_all:
        k = key_of(cb)
        x = self.mask_padding(r, src[cb], loop_idx, cb) if r in self.sched.masked else src[cb]
        cur[k] = b.emit(r.kind, [cur[k], self.broadcast(x, cur[k].type)], cur[k].type, pure=False)
      phis = {k: b.emit('phi', [accs[r][k], cur[k]], cur[k].type, pure=False) for k in keys}
      self.vals[r.results[0]] = phis
    for rr in reversed(ranges): b.close_range(rr)
    self.tiles = {}
    if split:  # combine the unrolled lanes of each upcast lane, as a tree
      for r in reduces:
        phis, res = self.vals[r.results[0]], {}
        for c in cu:
          parts = [phis[cb] for cb in cb_all if above_of(cb) == c]
          while len(parts) > 1:
            parts = [b.emit(r.kind, [parts[i], parts[i + 1]], parts[i].type) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
          res[c] = parts[0]
        self.vals[r.results[0]] = res
    if vec_is_unroll:  # horizontal reduce of the vector lanes (before the group's: W times fewer partials to share)
      for r in reduces:
        dt = r.results[0].type
        res = {}
        for c, v in self.vals[r.results[0]].items():
          parts = [b.emit('gep', [v], dt, {'index': l}) for l in range(self.W)]
          while len(parts) > 1:
            parts = [b.emit(r.kind, [parts[i], parts[i + 1]], dt) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
          res[c] = parts[0]
        self.vals[r.results[0]] = res
    if any(kd == 'group' and n > 1 for kd, n in zip(self.kinds, self.full)):  # (a group of 1: one thread, nothing to meet)
      self.group_reduce(reduces, cu, 1 if vec_is_unroll else self.W, final)

  def bounds_gate(self, bounds, idx, lane_axes, c, lane=0):
    """PADTO: whether this point (lane combination c, vector lane `lane`) lies inside every bound (terms, size): the
    index along a padded axis below its size before padding. None where there is no bound."""
    b, g = self.b, None
    at = self.at(idx, lane_axes, c, lane)
    for terms, size in bounds:
      e = b.const(0)
      for a, m in terms: e = b.add(e, b.mul(at[a], b.const(m)))
      lt = b.lt(e, b.const(size))
      g = lt if g is None else b.and_(g, lt)
    return g

  def mask_padding(self, r, x, idx, cb):
    """A reduce's input past a padded reduce axis's end becomes the reduce's identity (the padding reads zeros, which
    only a sum of products may take as they are); a vector lane by lane where the padding runs along it."""
    b, bounds = self.b, self.sched.reduce_bounds
    dt = elem(x.type)
    ident = b.const(alu.reduce_identity(r.kind, dt), dt)
    if not isinstance(x.type, VecType):
      g = self.bounds_gate(bounds, idx, self.lanes_below, cb)
      return x if g is None or b.cval(g) == 1 else b.emit('where', [g, x, ident], dt)
    gates = [self.bounds_gate(bounds, idx, self.lanes_below, cb, l) for l in range(x.type.count)]
    if all(g is None or b.cval(g) == 1 for g in gates): return x
    if self.t.masked_vectors:  # (one select of the vector)
      cond = b.emit('vectorize', [b.true() if g is None else g for g in gates], VecType(x.type.count, D.bool_))
      return b.emit('where', [cond, x, b.emit('vectorize', [ident] * x.type.count, x.type)], x.type)
    lanes = [b.emit('gep', [x], dt, {'index': l}) for l in range(x.type.count)]
    return b.emit('vectorize', [v if g is None or b.cval(g) == 1 else b.emit('where', [g, v, ident], dt) for v, g in zip(lanes, gates)], x.type)

  def group_reduce(self, reduces, cu, W, final=True):
    """GROUP: each thread holds a partial result (W lanes per upcast combination); they meet in shared memory
    and combine as a tree (log2 steps, a barrier each) when the group's size is a power of two, else group thread 0
    adds them in a loop; the result lands in group thread 0's slot. After the last reduce only the threads whose
    group index is 0 go on (the rest of the kernel runs under that uop.if); after an earlier one every thread reads
    the result (a later reduce's input needs it)."""
    b, full = self.b, self.full
    loc = [i for i in range(len(full)) if self.kinds[i] in ('local', 'group') and full[i] > 1]
    grp = [i for i in loc if self.kinds[i] == 'group']
    def lin(axes, sub):  # the linear index of these axes, the last fastest
      e, st = b.const(0), 1
      for i in reversed(axes): e = b.add(e, b.mul(sub.get(i, self.idx[i]), b.const(st))); st *= full[i]
      return e
    G = math.prod(full[i] for i in grp)
    lanes = len(cu) * W
    # shared-memory slots: a thread's lanes are adjacent, the threads of one group follow each other
    gl, ll = lin(grp, {}), lin([i for i in loc if i not in grp], {})
    base = lambda g: b.mul(b.add(b.mul(ll, b.const(G)), g), b.const(lanes))
    lane_of = lambda v, l: b.emit('gep', [v], v.type.dtype, {'index': l}) if isinstance(v.type, VecType) else v
    WS = self.t.warp_size
    if WS and len(grp) == 1 and loc[-1] == grp[0] and len(loc) <= MAX_GLOBAL_DIMS and G % WS == 0 and \
        all(r.results[0].type.itemsize in self.t.shuffle_bytes and r.results[0].type is not D.bool_ for r in reduces):
      return self.warp_reduce(reduces, cu, W, final, G, gl, ll, lanes, lane_of)
    for r in reduces:
      dt = r.results[0].type
      self.n_locals += 1
      r._tmp = b.emit('define_local', [], PtrType(dt, True), {'sym': f'temp{self.n_locals - 1}', 'size': math.prod(full[i] for i in loc) * lanes}, pure=False)
      for ci, c in enumerate(cu):
        for l in range(W): b.emit('store', [r._tmp, b.add(base(gl), b.const(ci * W + l)), lane_of(self.vals[r.results[0]][c], l)], None, pure=False)
    b.emit('barrier', [], None, pure=False)
    def fold(other):  # my slot op= the slot of group thread `other`
      for r in reduces:
        dt = r.results[0].type
        for j in range(lanes):
          mine = b.add(base(gl), b.const(j))
          x = b.emit('load', [r._tmp, mine], dt, pure=False)
          y = b.emit('load', [r._tmp, b.add(base(other), b.const(j))], dt, pure=False)
          b.emit('store', [r._tmp, mine, b.emit(r.kind, [x, y], dt, pure=False)], None, pure=False)
    if G & (G - 1) == 0:  # step s: group thread g < s folds in the partial of g + s
      s = G // 2
      while s >= 1:
        b.open_if(b.lt(gl, b.const(s)))
        fold(b.add(gl, b.const(s)))
        b.close_if()
        b.emit('barrier', [], None, pure=False)
        s //= 2
    else:  # group thread 0 folds in the others one by one
      b.open_if(b.alu('cmpeq', gl, b.const(0)))
      rg = b.open_range(b.const(1), b.const(G))
      fold(rg)
      b.close_range(rg)
      if not final:
        b.close_if()
        b.emit('barrier', [], None, pure=False)
    if final and G & (G - 1) != 0: self.open_ifs += 1  # thread 0 holds it: go on under its if
    elif final:
      b.open_if(b.alu('cmpeq', gl, b.const(0)))
      self.open_ifs += 1
    for r in reduces:
      dt = r.results[0].type
      parts = {(ci, l): b.emit('load', [r._tmp, b.add(base(b.const(0)), b.const(ci * W + l))], dt, pure=False) for ci in range(len(cu)) for l in range(W)}
      res = {}
      for ci, c in enumerate(cu):
        vt = self.vals[r.results[0]][c].type
        res[c] = parts[(ci, 0)] if not isinstance(vt, VecType) else b.emit('vectorize', [parts[(ci, l)] for l in range(W)], vt)
      self.vals[r.results[0]] = res

  def warp_reduce(self, reduces, cu, W, final, G, gl, ll, lanes, lane_of):
    """GROUP where the group is the work-group's fastest dim (lidx0) and a whole number of warps: each warp folds its
    partials in registers (a butterfly of uop.shuffle_xor: every lane ends with the warp's result), then, with
    several warps, their results meet in shared memory (one barrier) and every thread folds those few. All threads
    hold the result; after the last reduce only the group's first thread goes on."""
    b, WS = self.b, self.t.warp_size
    res = {r: {} for r in reduces}
    for r in reduces:
      dt = r.results[0].type
      for ci, c in enumerate(cu):
        for l in range(W):
          v = lane_of(self.vals[r.results[0]][c], l)
          m = WS // 2
          while m >= 1:
            v = b.emit(r.kind, [v, b.emit('shuffle_xor', [v], dt, {'mask': m}, pure=False)], dt); m //= 2
          res[r][ci, l] = v
    nw = G // WS
    if nw > 1:  # the warps' results: lane 0 of each writes its slot, and every thread reads its group's
      warp, first = b.idiv(gl, b.const(WS)), b.alu('cmpeq', b.mod(gl, b.const(WS)), b.const(0))
      slot = lambda w, j: b.add(b.mul(b.add(b.mul(ll, b.const(nw)), w), b.const(lanes)), b.const(j))
      for r in reduces:
        self.n_locals += 1
        r._tmp = b.emit('define_local', [], PtrType(r.results[0].type, True), {'sym': f'temp{self.n_locals - 1}', 'size': self.group_rows() * nw * lanes}, pure=False)
      b.open_if(first)
      for r in reduces:
        for (ci, l), v in res[r].items(): b.emit('store', [r._tmp, slot(warp, ci * W + l), v], None, pure=False)
      b.close_if()
      b.emit('barrier', [], None, pure=False)
      for r in reduces:
        dt = r.results[0].type
        for (ci, l) in res[r]:
          parts = [b.emit('load', [r._tmp, slot(b.const(w), ci * W + l)], dt, pure=False) for w in range(nw)]
          while len(parts) > 1:
            parts = [b.emit(r.kind, [parts[i], parts[i + 1]], dt) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
          res[r][ci, l] = parts[0]
    for r in reduces:
      out = {}
      for ci, c in enumerate(cu):
        vt = self.vals[r.results[0]][c].type
        out[c] = res[r][ci, 0] if not isinstance(vt, VecType) else b.emit('vectorize', [res[r][ci, l] for l in range(W)], vt)
      self.vals[r.results[0]] = out
    if final:
      b.open_if(b.alu('cmpeq', gl, b.const(0)))
      self.open_ifs += 1

  def group_threads(self) -> int:
    """The threads of a GROUP: the product of its axes."""
    return math.prod(n for n, kd in zip(self.full, self.kinds) if kd == 'group')

  def group_rows(self) -> int:
    """The outputs a work-group computes at once: its local dims other than GROUP's."""
    return math.prod(n for n, kd in zip(self.full, self.kinds) if kd == 'local')

  def broadcast(self, v, t):
    if v.type == t: return v
    if isinstance(t, VecType) and not isinstance(v.type, VecType):
      return self.b.emit('vectorize', [v] * t.count, t)
    raise AssertionError(f"cannot broadcast {v.type} to {t}")

  def lower_op(self, op, idx, lane_axes, above):
    b = self.b
    name = op.name
    combos = self.combos(lane_axes)
    if name == 'kernel.load':
      self.vals[op.results[0]] = {c: self.load(op, idx, lane_axes, c) for c in combos}
    elif name == 'kernel.index':
      self.vals[op.results[0]] = {c: self.position(op, idx, lane_axes, c) for c in combos}
    elif name == 'kernel.const':
      dt = op.results[0].type
      v = b.emit('const', [], dt, {'value': op.attrs['value']})
      self.vals[op.results[0]] = {c: v for c in combos}
    elif name == 'kernel.store':
      if not self.store_across(op, idx, lane_axes):
        for c in combos: self.store(op, idx, lane_axes, c)
    elif name == 'kernel.reduce': raise AssertionError("reduce handled by its region")
    elif hasattr(op, 'opname'):
      res = {}
      for c in combos:
        srcs = [self.vals[s][self.project(s, lane_axes, c)] for s in op.operands]
        vt = next((s.type for s in srcs if isinstance(s.type, VecType)), None)
        dt = op.results[0].type
        if vt is not None:
          srcs = [self.broadcast(s, VecType(vt.count, elem(s.type))) for s in srcs]
          t = VecType(vt.count, dt)
        else: t = dt
        res[c] = b.emit(op.opname, srcs, t)
      self.vals[op.results[0]] = res
    else: raise TgcError(f"linearize: unexpected op '{name}'")

  def project(self, v, lane_axes, c):
    """Values of the region below reach the region above only through the reduce: same combos."""
    d = self.vals[v]
    if c in d: return c
    # a reduce's result (made above, per upcast lane) used below a later reduce: the same along unrolled lanes
    if lane_axes is self.lanes_below and all(a in lane_axes for a in self.lanes_above):
      ca = tuple(c[lane_axes.index(a)] for a in self.lanes_above)
      if ca in d: return ca
    raise AssertionError("lane combination mismatch")

  def index(self, op, idx, lane_axes, c, lane=0, clamp: tuple = ()):
    vs = self.views[op]  # (an axis of size 1, a reduce axis of a view at the stored shape, has index 0 in any stage)
    at = tuple(self.b.const(0) if n == 1 else e for e, n in zip(self.at(idx, lane_axes, c, lane), vs.shape))
    return self.b.indexed(vs, at, clamp)

  def vec_stride(self, op):
    if self.vec is None or self.W == 1: return 0
    rs = self.views[op].real_strides()
    return rs[self.vec]

  def aligned(self, i, w=0) -> bool:
    """CUDA and Metal load a float4 only from an address that is a multiple of its size: the index must be
    a multiple of the vector width (w, else the kernel's) for every value of the variables in it (CPUs and OpenCL's
    vloadN don't care)."""
    if not self.t.aligned_vectors: return True
    from tgc.passes.uop_simplify import multiple_of
    return multiple_of(i, w or self.W)

  def open_reduce_loops(self, loop_idx: dict, staged: bool) -> list:
    """The reduce loops (their ranges), each axis's index into loop_idx. A ring of stages runs ahead along one
    counter: there, several reduce loops (a conv's channels and its window's rows and columns) are one range whose
    step decomposes into each axis's index."""
    b, full = self.b, self.full
    loops = [a for a, kd in enumerate(self.kinds) if kd == 'reduce' and full[a] > 1]
    if staged and self.sched.stages > 1 and len(loops) > 1:
      ranges = [b.open_range(b.const(0), b.const(self.reduce_steps()))]
      loop_idx.update(self.reduce_point(ranges[0]))
    else:
      ranges = []
      for a in loops:
        ranges.append(b.open_range(b.const(0), b.const(full[a]))); loop_idx[a] = ranges[-1]
    self.step = ranges[0] if len(ranges) == 1 else None
    return ranges

  def reduce_steps(self) -> int:
    return math.prod(self.full[a] for a, kd in enumerate(self.kinds) if kd == 'reduce' and self.full[a] > 1)

  def reduce_point(self, step) -> dict:
    """The reduce axes' indices at `step` of the reduce loops taken as one range (the last axis fastest)."""
    b, loops = self.b, [a for a, kd in enumerate(self.kinds) if kd == 'reduce' and self.full[a] > 1]
    point = {}
    for a in reversed(loops):
      point[a] = step if a == loops[0] else b.mod(step, b.const(self.full[a]))
      if a != loops[0]: step = b.idiv(step, b.const(self.full[a]))
    return point

  def load(self, op, idx, lane_axes, c):
    """Loads are merged like pure ops: a kernel stores only to data0 and never reads it back."""
    b = self.b
    dt = op.results[0].type
    if op in self.tiles: return self.load_tile(op, idx, lane_axes, c)  # (only while its reduce loop is open)
    buf = self.buf[op.buf]
    gx = self.gathered(op, lane_axes, c)
    clamp = self.load_clamp
    def one(lane):
      i, valid = self.index(op, idx, lane_axes, c, lane, clamp)
      if gx is not None: i = b.add(i, gx(lane))
      cv = b.cval(valid)
      if cv == 0: return b.const(0, dt)
      if cv == 1: return b.emit('load', [buf, i], dt)
      # a broadcast element (a splat's one-element buffer under a pad's mask): always in bounds, so read it
      # unconditionally and select, with no branch a lane
      if b.cval(i) is not None and 0 <= b.cval(i) < op.buf.type.numel: return b.emit('where', [valid, b.emit('load', [buf, i], dt), b.const(0, dt)], dt)
      return b.emit('load', [buf, i, valid, b.const(0, dt)], dt)
    st = self.vec_stride(op)
    uniform = gx is None or not isinstance(self.vals[op.index][self.project(op.index, lane_axes, c)].type, VecType)
    if st == 0 and uniform: return one(0)
    if st == 1 and uniform and self.aligned(self.index(op, idx, lane_axes, c, 0, clamp)[0]) and (gx is None or self.aligned(gx(0))):
      i, valid = self.index(op, idx, lane_axes, c, 0, clamp)
      if gx is not None: i = b.add(i, gx(0))
      t = VecType(self.W, dt)
      cv = b.cval(valid)
      if cv == 1: return b.emit('load', [buf, i], t)
      if cv == 0: return b.emit('vectorize', [b.const(0, dt)] * self.W, t)
      zero = b.emit('vectorize', [b.const(0, dt)] * self.W, t)
      return b.emit('load', [buf, i, valid, zero], t)
    if st is None and uniform and self.t.masked_vectors and self.views[op].real_strides(ignore_valid=True)[self.vec] == 1:
      # contiguous along the vector but masked along it (an axis padded to whole vectors, a pad's edge): one vector
      # load, each lane gated by its own validity
      i, _ = self.index(op, idx, lane_axes, c, 0, clamp)
      if gx is not None: i = b.add(i, gx(0))
      gates = [self.index(op, idx, lane_axes, c, l, clamp)[1] for l in range(self.W)]
      t = VecType(self.W, dt)
      zero = b.emit('vectorize', [b.const(0, dt)] * self.W, t)
      if all(b.cval(g) == 0 for g in gates): return zero
      return b.emit('load', [buf, i, b.emit('vectorize', gates, VecType(self.W, D.bool_)), zero], t)
    return b.emit('vectorize', [one(l) for l in range(self.W)], VecType(self.W, dt))

  def position(self, op, idx, lane_axes, c):
    """kernel.index: the view's index of the point (0 where its mask is false), a vector along the vector axis."""
    b, dt = self.b, op.results[0].type
    def one(lane):
      i, valid = self.index(op, idx, lane_axes, c, lane)
      if i.type != dt: i = b.emit('cast', [i], dt)
      cv = b.cval(valid)
      return i if cv == 1 else b.const(0, dt) if cv == 0 else b.emit('where', [valid, i, b.const(0, dt)], dt)
    st, vt = self.vec_stride(op), VecType(self.W, dt)
    if st == 0: return one(0)
    if st is not None and all(v.mask is None for v in self.views[op].views):  # (affine along the lanes: a base and steps)
      return b.emit('add', [self.broadcast(one(0), vt), b.emit('vectorize', [b.const(st * l, dt) for l in range(self.W)], vt)], vt)
    return b.emit('vectorize', [one(l) for l in range(self.W)], vt)

  def gathered(self, op, lane_axes, c):
    """A gather's term of the index, per vector lane: clamp(index, 0, size - 1) * stride in the index type (the
    clamp keeps every index value inside the buffer, which uop bounds then proves); None for a plain load."""
    g = op.gather
    if g is None: return None
    b, (stride, size) = self.b, g
    v = self.vals[op.index][self.project(op.index, lane_axes, c)]
    def term(lane):
      x = b.emit('gep', [v], elem(v.type), {'index': lane}) if isinstance(v.type, VecType) else v
      t = elem(x.type)
      # clamped in the index's own type first: a 64-bit id past 2**31 must not wrap into range when narrowed
      lo, hi = max(0, D.min_max(t)[0]), min(size - 1, D.min_max(t)[1])
      x = b.alu('min', b.alu('max', x, b.const(lo, t)), b.const(hi, t))
      if t != b.idx_dt: x = b.emit('cast', [x], b.idx_dt)
      return b.mul(x, b.const(stride))
    return term

  def store(self, op, idx, lane_axes, c):
    b = self.b
    v = self.vals[op.value][self.project(op.value, lane_axes, c)]  # (an epilogue may store a reduce's result itself)
    buf = self.buf[op.buf]
    dt = op.value.type
    # PADTO: the padding is computed, never stored (an epilogue's stores at the iteration shape: a reduce axis's neither)
    bounds = self.sched.store_bounds + (self.sched.reduce_bounds if op in self.sched.full_stores else [])
    pad_gate = lambda lane: self.bounds_gate(bounds, idx, lane_axes, c, lane)
    gate = pad_gate(0)
    def put(i, x, g):
      b.emit('store', [buf, i, x] + ([g] if g is not None and b.cval(g) != 1 else []), None, pure=False)
    # (the vector axis is an unrolled reduce axis in an epilogue's stores at the iteration shape)
    vec_here = self.vec is not None and self.W > 1 and self.views[op].shape[self.vec] > 1
    if not vec_here:
      i, _ = self.index(op, idx, lane_axes, c); put(i, v, gate); return
    st = self.vec_stride(op)
    vec_padded = any(a == self.vec for terms, _ in bounds for a, _ in terms)
    if st == 1 and not vec_padded and self.aligned(self.index(op, idx, lane_axes, c, 0)[0]):
      i, _ = self.index(op, idx, lane_axes, c, 0)
      put(i, self.broadcast(v, VecType(self.W, dt)), gate); return
    if self.t.masked_vectors and self.views[op].real_strides(ignore_valid=True)[self.vec] == 1:
      # contiguous, the padding cutting off lanes: one store, each lane gated by its own bounds
      i, _ = self.index(op, idx, lane_axes, c, 0)
      put(i, self.broadcast(v, VecType(self.W, dt)), b.emit('vectorize', [pad_gate(l) for l in range(self.W)], VecType(self.W, D.bool_))); return
    for l in range(self.W):  # lane by lane: a strided store, or lanes the padding may cut off
      i, _ = self.index(op, idx, lane_axes, c, l)
      x = b.emit('gep', [v], dt, {'index': l}) if isinstance(v.type, VecType) else v
      put(i, x, pad_gate(l))


  def store_across(self, op, idx, lane_axes) -> bool:
    """A store contiguous along an upcast axis other than the vector axis (a transpose whose loads are vectors along
    another axis): each vector lane's values along that axis, gathered from the lane combinations, are one vector
    store. False where this does not apply (then each combination stores on its own)."""
    b, dt = self.b, op.value.type
    rs = self.views[op].real_strides()
    s = next((a for a in lane_axes if rs[a] == 1 and self.full[a] in VEC_WIDTHS), None)
    if s is None or self.sched.store_bounds or (self.vec is not None and self.W > 1 and self.kinds[self.vec] != 'upcast'): return False
    n, j = self.full[s], lane_axes.index(s)
    firsts = [c for c in self.combos(lane_axes) if c[j] == 0]
    if not all(self.aligned(self.index(op, idx, lane_axes, c, l)[0], n) for c in firsts[:1] for l in range(self.W)): return False
    for c in firsts:
      for l in range(self.W):
        xs = []
        for k in range(n):
          v = self.vals[op.value][c[:j] + (k,) + c[j + 1:]]
          xs.append(b.emit('gep', [v], dt, {'index': l}) if isinstance(v.type, VecType) else v)
        i, _ = self.index(op, idx, lane_axes, c, l)
        b.emit('store', [self.buf[op.buf], i, b.emit('vectorize', xs, VecType(n, dt))], None, pure=False)
    return True


def linearize_kernel(k: Operation, target: str | DeviceSpec = 'llvm') -> Operation:
  if k.body.ops and k.body.ops[0].name == 'kernel.attention': return linearize_attention(k, DeviceSpec.of(target))
  if k.body.ops and k.body.ops[0].name == 'kernel.attention_grad': return linearize_attention_grad(k, DeviceSpec.of(target))
  return Lowerer(k, target).run()


class _WholeKernel:
  """The uop.func of a kernel.func the target writes whole (kernel.attention's, kernel.attention_grad's): a
  define_global for each of its arguments, then the ops `emit` makes, in order. `fused(dtype, E, Ev)`: whether the
  device has the target's kernel for the op's q (B, H, L, E) and k (.., S, ..) views (else an OptError naming `what`)."""
  def __init__(self, k: Operation, spec: DeviceSpec, fused, what: str):
    self.k, self.op, self.fa = k, k.body.ops[0], spec.target.attention
    (self.B, self.H, self.L, self.E), self.S, self.dt = self.op.attrs['q_view'].shape, self.op.attrs['k_view'].shape[2], self.op.q.type.dtype
    self.group = self.H // self.op.attrs['k_view'].shape[1]  # (q heads a k and v head: grouped-query attention)
    if self.fa is None or not fused(self.dt, self.E, self.E):
      raise OptError(f"the {spec.name} target has no fused attention {what} for {self.dt} heads of {self.E} (on this device)")
    self.loc, self.ops = self.op.loc, []
    self.glob = {a: self.emit('define_global', [], PtrType(a.type.dtype), {'index': i, 'size': a.type.numel}) for i, a in enumerate(k.body.args)}
  def emit(self, name, operands, t, attrs):
    u = REGISTRY['uop.' + name](operands, [t] if t is not None else [], attrs, self.loc)
    self.ops.append(u)
    return u.results[0] if u.results else None
  def func(self, global_size, local_size) -> Operation:
    attrs = {'sym_name': Symbol(self.k.sym_name), 'global_size': tuple(global_size), 'local_size': tuple(local_size)}
    return REGISTRY['uop.func']([], [], attrs, self.k.loc, Block([], self.ops))


def attention_block(fa, spec: DeviceSpec, heads: int, L: int, E: int, itemsize: int) -> tuple[int, int, int]:
  """The work-group of a fused attention of `heads` heads of L queries of head size E, (queries, threads, warpgroup):
  where the device has warpgroup tensor cores, 64 queries on one warpgroup whose products are wgmma's (an H200, 7
  shapes from 16x6x256 to 1x16x8192, causal or not, heads of 64 and 128: the fastest on each; not causal 8x16x1024x64
  0.97 of torch's call time, two warpgroups of 64 0.95, mma.sync's best 0.71; with a bias, two warpgroups took 1.3
  times as long); elsewhere, heads of 128, the largest work-group (the k and v tiles it copies serve more queries)
  that still makes two a multiprocessor (where the device says how many it has), else the smallest (heads of 64 on
  mma.sync: 128 queries on 8 warps took 0.64 of torch's time where 64 took 0.88)."""
  fits = fa.blocks_for(E, itemsize, spec.attention_smem, spec.has_warpgroup)
  if spec.has_warpgroup: return (*min(fits), 1)
  enough = [(r, t) for r, t in fits if heads * -(-L // r) >= 2 * (spec.processors or 64)]
  return (*(max(enough) if enough and E >= 128 else min(fits)), 0)


def _bias_layout(op: Operation) -> dict:
  """A fused attention's bias_layout where it has a bias: [offset, B's, H's, a query row's and a key's strides]."""
  if op.bias is None: return {}
  v = op.attrs['bias_view'].views[0]
  return {'bias_layout': (v.offset, *v.strides)}


def linearize_attention(k: Operation, spec: DeviceSpec) -> Operation:
  """A kernel.attention's kernel as the target's fused attention kernel (FusedAttention): a work-group of its threads
  for each head (gidx0, the axis of the largest grid) and block of its rows of queries (gidx1), its tiles in shared
  memory, one uop.attention the emitter writes whole; each operand's view as its layout [offset, B's stride, H's
  stride, a row's stride] (a head's rows start at offset + b * B's stride + h * H's stride), the bias's with a key's
  stride after them."""
  b = _WholeKernel(k, spec, spec.fused_attention, 'kernel')
  op, fa, views, emit, glob = b.op, b.fa, b.op.views(), b.emit, b.glob
  B, H, L, S, E, dt = b.B, b.H, b.L, b.S, b.E, b.dt
  bufs = [glob[a] for a in op.operands[:4]] + ([glob[op.bias]] if op.bias is not None else [])
  rows, threads, wg = attention_block(fa, spec, B * H, L, E, dt.itemsize)
  smem = emit('define_local', [], PtrType(dt, True), {'sym': 'smem0', 'size': fa.smem_bytes(rows, E, 1, wg), 'align': 1024})
  blocks = -(-L // rows)
  idx = [emit('special', [], D.i32, {'axis': ax, 'size': n}) for ax, n in (('gidx0', B * H), ('gidx1', blocks), ('lidx0', threads))]
  layouts = {f'{n}_layout': (v.offset, *v.strides[:3]) for n, v in zip(('out', 'q', 'k', 'v'), views)} | _bias_layout(op)
  emit('attention', bufs + [smem] + idx + ([glob[op.lse]] if op.lse is not None else []), None, {'causal': op.causal, 'scale': op.attrs['scale'], **softcap_attr(op), 'heads': H, 'rows': L, 'keys': S, 'dim': E,
                                                 'block_rows': rows, 'threads': threads, 'key_rows': fa.key_rows, **layouts,
                                                 **({'warpgroup': 1} if wg else {}), **({'group': b.group} if b.group > 1 else {}),
                                                 **({'lse_only': 1} if op.attrs.get('lse_only') else {})})
  return b.func((B * H, blocks), (threads,))


def linearize_attention_grad(k: Operation, spec: DeviceSpec) -> Operation:
  """A kernel.attention_grad's kernel as the target's fused backward kernel (FusedAttention's grad_head_dims): a
  work-group of 4 warps for each head (gidx0) and block of 64 queries (part 0: dq) or keys (part 1: dk and dv) (gidx1),
  its six tiles in shared memory, one uop.attention_grad the emitter writes whole; the inputs' views as layouts."""
  b = _WholeKernel(k, spec, spec.fused_attention_grad, 'backward kernel')
  op, fa, views, emit, glob = b.op, b.fa, b.op.views(), b.emit, b.glob
  B, H, L, S, E, dt = b.B, b.H, b.L, b.S, b.E, b.dt
  rows, threads = fa.key_rows, 2 * fa.key_rows  # (64 rows a work-group, a warp a 16)
  wg = spec.has_warpgroup  # (its products on the warpgroup's tensor cores: the tiles read by descriptors, 1024-byte aligned)
  smem = emit('define_local', [], PtrType(dt, True), {'sym': 'smem0', 'size': 6 * rows * E, 'align': 1024 if wg else 128})
  blocks, heads = -(-(L if op.part == 0 else S) // rows), B * H // (b.group if op.part == 1 else 1)  # (dk, dv: a k head a work-group)
  idx = [emit('special', [], D.i32, {'axis': ax, 'size': n}) for ax, n in (('gidx0', heads), ('gidx1', blocks), ('lidx0', threads))]
  layouts = {f'{n}_layout': (v.offset, *v.strides[:3]) for n, v in zip(('q', 'k', 'v', 'g'), views)} | _bias_layout(op)
  emit('attention_grad', [glob[a] for a in op.operands[:6]] + ([glob[op.bias]] if op.bias is not None else []) + [glob[op.out]] + [smem] + idx + ([glob[op.out2]] if op.out2 is not None else []), None,
       {'causal': op.causal, 'scale': op.attrs['scale'], **softcap_attr(op), 'part': op.part, 'heads': H, 'rows': L, 'keys': S, 'dim': E, 'block_rows': rows,
        'threads': threads, **layouts, **({'warpgroup': 1} if wg else {}), **({'group': b.group} if b.group > 1 else {})})
  return b.func((heads, blocks), (threads,))


class Linearize(Pass):
  name = 'linearize'
  summary = 'lower kernel.funcs to flat uop.funcs: ranges, index expressions, accumulators, vector lanes'
  reads, leaves = 'kernel', 'uop'
  options = DEVICE_OPTIONS  # (the device's spec: on CPU targets (llvm, c) only the outermost global axis is a special)
  def run(self, m: Module):
    spec, new = DeviceSpec.from_options(self.opts), []
    for op in m.ops:
      if op.name == 'kernel.func':
        try: new.append(linearize_kernel(op, spec))
        except OptError as e:
          from tgc.ir.diagnostics import Diagnostic
          raise Diagnostic(str(e), op.loc) from None
        self.stats['kernels linearized'] += 1
      else: new.append(op)
    m.body.ops = new
