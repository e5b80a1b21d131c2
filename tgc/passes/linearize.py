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
import functools, itertools, math, operator
from tgc.ir.core import Operation, Module, Value, Block, REGISTRY
from tgc.ir.types import PtrType, VecType, elem
from tgc.ir import dtypes as D, alu
from tgc.ir.attrs import Symbol
from tgc.errors import TgcError
from tgc.passes.manager import Pass
from tgc.target import get_target, tensor_core_targets
from tgc.passes.schedule import Schedule, OptError, MAX_LANES

U = lambda n: REGISTRY[f'uop.{n}']
MAX_GLOBAL_DIMS = 3
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
    key = (name, tuple(srcs), t, tuple(sorted(attrs.items())) if attrs else ()) if pure else None
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

  def indexed(self, vs, at: tuple):
    """vs.to_indexed(at) built once per view stack and point while the scope that built it is open: what building it
    again would return (its ops are pure, found again), without the work (loads of one layout index alike)."""
    key = ('indexed', vs, at)  # (by value: the loads and stores of one layout have stacks equal, not the same)
    r = self.cache.get(key)
    if r is None:
      r = self.cache[key] = vs.to_indexed(at, self)
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
    r = self.cache.get(('const', (), dt, (('value', v),)))  # (emit's key: index building asks for constants most)
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
    if name == 'and':
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


def feeding(roots, stop=()) -> set:
  """The ops that compute the values `roots`, through their operands (not through the ops in `stop`)."""
  seen, todo = set(), list(roots)
  while todo:
    op = todo.pop().op
    if op is None or op in seen or op in stop: continue
    seen.add(op); todo.extend(op.operands)
  return seen


class Lowerer:
  def __init__(self, k: Operation, target: str, opts=None):
    self.k, self.target, self.opts = k, target, opts
    self.t = get_target(target)
    self.cpu = self.t.is_cpu
    self.open_ifs = 0   # uop.ifs the rest of the kernel runs under (closed at its end)
    self.n_locals = 0   # shared-memory buffers made so far (temp0, temp1, ...)

  def run(self) -> Operation:
    k = self.k
    ops = k.body.ops
    reduces = [op for op in ops if op.name == 'kernel.reduce']
    s = self.sched = Schedule(k, self.opts, self.t)  # the opts applied (its errors name the kernel)
    full, out, kinds, views, padded, opts = s.full, s.out, s.kinds, s.views, s.padded, s.opts
    self.full, self.out, self.kinds, self.views, self.padded = full, out, kinds, views, padded
    self.smem, self.tiles = s.smem, {}  # SMEM's loads; while a reduce loop is open, each one's tiles: (buffer, {axis: stride}, slot size)
    n = len(full)
    # 64-bit indices for a buffer past 2^31 elements, or a view whose index expression may pass that (a stride of
    # 2^32 along an axis its mask keeps at one index is valid IR; in i32 its constant would not be)
    big = any(a.type.numel >= 2**31 for a in k.body.args) or any(op.view.reach() >= 2**31 for op in ops if op.name in ('kernel.load', 'kernel.store'))
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
    if math.prod(full[i] for i in up + un) > MAX_LANES: raise OptError(f"@{k.sym_name}: {math.prod(full[i] for i in up + un)} unrolled lanes (at most {MAX_LANES})")
    if any(kd in ('local', 'group') for kd in kinds) and self.cpu:
      raise OptError(f"@{k.sym_name}: local and group dims need a GPU target, not {self.target}")
    if self.smem and (self.cpu or not self.t.local_memory): raise OptError(f"@{k.sym_name}: smem needs a GPU target with shared memory, not {self.target}")
    # index variables
    zero = b.const(0)
    self.idx: dict[int, Value] = {}
    gl = [i for i in range(n) if kinds[i] == 'global' and full[i] > 1]
    lo = [i for i in range(n) if kinds[i] in ('local', 'group') and full[i] > 1]
    tc = any(kd in ('tcm', 'tcn', 'tck') for kd in kinds)
    if tc and self.t.tensor_cores is None:
      raise OptError(f"@{k.sym_name}: tensor cores (tc) need the {' or '.join(t.name for t in tensor_core_targets())} target, not {self.target}")
    self.loops: list[Value] = []
    global_size = self.grid(gl, 'gidx')
    if tc:  # a warp per tile: lidx0 is the lane; local dims (warps of a block) are lidx1 and lidx2
      if len(lo) > 2: raise OptError(f"@{k.sym_name}: tc: at most two local dims besides the warp's lanes")
      self.lane, local_size = b.emit('special', [], b.idx_dt, {'axis': 'lidx0', 'size': 32}), [32]
      for j, a in enumerate(reversed(lo)):
        self.idx[a] = b.emit('special', [], b.idx_dt, {'axis': f'lidx{j + 1}', 'size': full[a]}); local_size.append(full[a])
      self.vec, self.W = None, 1  # upcast axes are tiles of their own here, not vector lanes
    else: local_size = self.grid(lo, 'lidx')
    for i in range(n):
      if kinds[i] in ('global', 'local', 'group') and i not in self.idx: self.idx[i] = zero
    self.global_size, self.local_size = global_size, local_size
    self.ops_list = ops
    if tc: self.lower_tc(reduces, k.sym_name)
    else: self.lower_body(reduces)
    for _ in range(self.open_ifs): b.close_if()
    for r in reversed(self.loops): b.close_range(r)
    attrs = {'sym_name': Symbol(k.sym_name), 'global_size': tuple(global_size) or (1,), 'local_size': tuple(local_size) or (1,)}
    if opts: attrs['opts'] = opts
    if opts and self.t.fp_contract: attrs['contract'] = True  # fma in the register tiles: half the instructions, one rounding
    return U('func')([], [], attrs, k.loc, Block([], b.ops))

  def grid(self, axes, prefix):
    """Specials for these axes (the last is N=0); beyond three, or on the CPU, loops."""
    b, sizes = self.b, []
    if not axes: return sizes
    if self.cpu and prefix == 'gidx':  # one special for the outermost axis: the runtime splits it across threads
      if self.full[axes[0]] >= 2**31: raise OptError(f"@{self.k.sym_name}: {self.full[axes[0]]} points along gidx0, more than a launch grid holds (2**31 - 1)")
      g = b.emit('special', [], b.idx_dt, {'axis': 'gidx0', 'size': self.full[axes[0]]})
      self.idx[axes[0]] = g; sizes.append(self.full[axes[0]])
      for a in axes[1:]:
        r = b.open_range(b.const(0), b.const(self.full[a]))
        self.loops.append(r); self.idx[a] = r
      return sizes
    groups = [[a] for a in axes]
    while len(groups) > MAX_GLOBAL_DIMS: groups[0:2] = [groups[0] + groups[1]]
    for gi, grp in enumerate(reversed(groups)):
      size = math.prod(self.full[a] for a in grp)
      if size >= 2**31: raise OptError(f"@{self.k.sym_name}: {size} points along {prefix}{gi}, more than a launch grid holds (2**31 - 1)")
      g = b.emit('special', [], b.idx_dt, {'axis': f'{prefix}{gi}', 'size': size})
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
    stage: dict = {}
    for r in reduces:
      stage[r] = 1 + max((stage[q] for q in feeding([r.src]) if q in stage), default=-1)
    stages = [[r for r in reduces if stage[r] == i] for i in range(max(stage.values(), default=-1) + 1)]
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

  def lower_tc(self, reduces, name):
    """TC: a warp per (16 x 8) output tile. Per step of 16 along k, lane 4g + t loads its fragment of A (8 values
    at m = g + 8*(i>>1 & 1), k = 2t + (i&1) + 8*(i>>2)) and of B (4 at k = 2t + (i&1) + 8*(i>>1), n = g), as the
    PTX ISA lays out mma.m16n8k16's operands; uop.wmma accumulates the tile, and each lane's 4 results (at
    m = g + 8*(i>>1), n = 2t + (i&1)) go through the rest of the kernel (a bias, a cast) to the store."""
    b, full, kinds, ops = self.b, self.full, self.kinds, self.ops_list
    self.vals = {}
    bad = lambda why: OptError(f"@{name}: tc: {why}")
    if len(reduces) != 1 or reduces[0].kind != 'add': raise bad("tensor cores compute one sum of products")
    r = reduces[0]
    tcs = self.t.tensor_cores
    tc_in = {D.BY_NAME[i] for i, _ in tcs.dtypes}
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
    m_in, n_in, k_in = (kinds.index(x) for x in ('tcm', 'tcn', 'tck'))
    (xa, ca), (xb, cb) = (operand(v) for v in mul.operands)
    zero_along = lambda chain, ax: all(self.views[op].real_strides(ignore_valid=True)[ax] == 0 for op in chain if op.name == 'kernel.load')
    if not zero_along(ca, n_in): (xa, ca), (xb, cb) = (xb, cb), (xa, ca)  # A is the factor broadcast along n
    if not (zero_along(ca, n_in) and zero_along(cb, m_in)): raise bad("one factor must vary along m only and the other along n only")
    acc_dt = r.results[0].type
    if xb.type is not xa.type or (xa.type.name, acc_dt.name) not in tcs.dtypes:
      raise bad(f"no tensor core multiplies {xa.type} by {xb.type} into {acc_dt} (they take {', '.join(f'{i} -> {o}' for i, o in tcs.dtypes)})")
    if self.sched.warpgroup: return self.lower_wgmma(r, (xa, ca), (xb, cb), m_in, n_in, k_in, name)
    zero, lane = b.const(0), self.lane
    g, t2 = b.idiv(lane, b.const(4)), b.mul(b.mod(lane, b.const(4)), b.const(2))
    plus = lambda e, c: b.add(e, b.const(c))
    # upcast axes of the grid of tiles: a warp computes several tiles, each with its accumulator (fragments that
    # repeat, A's along n and B's along m, are the same loads: the builder merges them)
    up = [i for i in range(len(full)) if kinds[i] == 'upcast' and full[i] > 1]
    tiles = [{a: b.const(c) for a, c in zip(up, combo)} for combo in self.combos(up)]
    acc_t = VecType(4, acc_dt)
    init = b.emit('vectorize', [b.const(0, acc_dt)] * 4, acc_t)
    accs = [b.emit('define_acc', [init], acc_t, pure=False) for _ in tiles]
    staged = [op for op in self.smem if op in ca or op in cb]
    loop_idx, ranges = {**self.idx, **{a: zero for a in range(len(full)) if kinds[a] == 'reduce'}}, []
    if staged: self.stage_tiles(staged, loop_idx)
    ranges = self.open_reduce_loops(loop_idx, bool(staged))
    for acc in accs: acc.op.operands = [init] + ranges
    if staged: self.stage_step(staged, loop_idx)
    def fragment(v, chain, tile, at):  # the factor at each (m, n, k) position of this lane, as one vector
      if len(chain) == 1 and chain[0] in self.tiles: return staged_fragment(v, chain[0], tile, at)
      vals = []
      for mi, ni, ki in at:
        for op in chain: self.lower_op(op, {**loop_idx, **tile, m_in: mi, n_in: ni, k_in: ki}, [], above=False)
        vals.append(self.vals[v][()])
      return b.emit('vectorize', vals, VecType(len(vals), v.type))
    from tgc.passes.uop_simplify import terms
    def staged_fragment(v, load, tile, at):  # from its tile: two neighbouring positions are one 2-lane read
      buf, strides, _ = self.tiles[load]
      pos = lambda mi, ni, ki: self.tile_pos(load, self.at({**loop_idx, **tile, m_in: mi, n_in: ni, k_in: ki}, [], ()))
      if tcs.ldmatrix and v.type.bits == 16:  # one ldmatrix: each lane gives the address of one 8-element row
        l8, j = b.mod(lane, b.const(8)), b.idiv(lane, b.const(8))
        if len(at) == 8 and strides.get(k_in) == 1:  # A, k contiguous: matrices (m 0-7, 8-15) x (k 0-7, 8-15)
          p, n, trans = pos(b.add(l8, b.mul(b.mod(j, b.const(2)), b.const(8))), zero, b.mul(b.idiv(j, b.const(2)), b.const(8))), 4, 0
        elif len(at) == 4 and strides.get(n_in) == 1:  # B, n contiguous: rows k 0-15 of 8 n each, transposed
          p, n, trans = pos(zero, zero, b.mod(lane, b.const(16))), 2, 1
        elif len(at) == 4 and strides.get(k_in) == 1:  # B, k contiguous: rows n 0-7 of k 0-7, then of k 8-15
          p, n, trans = pos(zero, l8, b.mul(b.mod(j, b.const(2)), b.const(8))), 2, 0
        else: p = None
        # B's fragments of two neighbouring tiles along n (an upcast of the tile grid) are one ldmatrix of 4
        # matrices, lanes 16-31 pointing at the second tile's rows: half the reads through MIO
        pair = None if p is None or n != 2 else next((u for u in tile if u in strides and self.full[u] % 2 == 0), None)
        if pair is not None:
          c = b.cval(tile[pair])
          row = dict(zip((m_in, n_in, k_in), (zero, zero, b.mod(lane, b.const(16))) if trans else (zero, l8, b.mul(b.mod(j, b.const(2)), b.const(8)))))
          p0 = self.tile_pos(load, self.at({**loop_idx, **tile, pair: b.const(c - c % 2), **row}, [], ()))
          p4 = b.add(p0, b.mul(b.idiv(lane, b.const(16)), b.const(strides[pair])))
          if self.aligned(p4, 8):
            x4 = b.emit('ldmatrix', [buf, p4], VecType(8, v.type), {'count': 4, 'trans': trans})
            return b.emit('vectorize', [b.emit('gep', [x4], v.type, {'index': 4 * (c % 2) + i}) for i in range(4)], VecType(4, v.type))
        if p is not None and self.aligned(p, 8): return b.emit('ldmatrix', [buf, p], VecType(2 * n, v.type), {'count': n, 'trans': trans})
      ps, vals, i = [pos(*x) for x in at], [], 0
      while i < len(ps):
        if i + 1 < len(ps):
          (t0, c0), (t1, c1) = terms(ps[i], {}), terms(ps[i + 1], {})
          if sorted(t0, key=id) == sorted(t1, key=id) and c1 == c0 + 1 and self.aligned(ps[i], 2):
            pair = b.emit('load', [buf, ps[i]], VecType(2, v.type))
            vals += [b.emit('gep', [pair], v.type, {'index': 0}), b.emit('gep', [pair], v.type, {'index': 1})]
            i += 2; continue
        vals.append(b.emit('load', [buf, ps[i]], v.type)); i += 1
      return b.emit('vectorize', vals, VecType(len(vals), v.type))
    # unrolled steps of k (UNROLL after tc): each tile's accumulator takes one mma per step, in order
    un = [i for i in range(len(full)) if kinds[i] == 'unroll' and full[i] > 1]
    steps = [{a: b.const(c) for a, c in zip(un, combo)} for combo in self.combos(un)]
    # step by step, every tile in each: a step's fragments serve all tiles and then die (registers), and the mmas
    # that follow one another are independent (a tile's chain of steps would wait on each mma's latency)
    ds = list(accs)
    for step in steps:
      for j, tile in enumerate(tiles):
        at = {**tile, **step}
        fa = fragment(xa, ca, at, [(plus(g, 8 * ((i >> 1) & 1)), zero, plus(t2, (i & 1) + 8 * (i >> 2))) for i in range(8)])
        fb = fragment(xb, cb, at, [(zero, g, plus(t2, (i & 1) + 8 * (i >> 1))) for i in range(4)])
        ds[j] = b.emit('wmma', [fa, fb, ds[j]], acc_t, {'dims': tcs.dims, 'target': self.t.name})
    results = [b.emit('phi', [acc, d], acc_t, pure=False) for acc, d in zip(accs, ds)]
    for rr in reversed(ranges): b.close_range(rr)
    self.tiles = {}
    self.tc_epilogue(r, [(tile, res, 0) for tile, res in zip(tiles, results)], m_in, n_in)

  def tc_epilogue(self, r, tiles, m_in, n_in):
    """The rest of the kernel after a TC reduce, and what it uses from before the reduce (a constant), per result
    of each 16x8 tile: `tiles` holds (the tile's upcast indices, its accumulator, where its 4 values start in it);
    lane 4g + t has them at m = g + 8*(i>>1), n = 2t + (i&1)."""
    b, ops = self.b, self.ops_list
    g, t2 = b.idiv(self.lane, b.const(4)), b.mul(b.mod(self.lane, b.const(4)), b.const(2))
    plus = lambda e, c: b.add(e, b.const(c))
    need = feeding([v for op in ops[ops.index(r) + 1:] for v in op.operands], stop={r})
    after = [op for n, op in enumerate(ops) if n > ops.index(r) or op in need]
    for tile, res, first in tiles:
      for i in range(4):
        self.vals[r.results[0]] = {(): b.emit('gep', [res], r.results[0].type, {'index': first + i})}
        at = {**self.idx, **tile, m_in: plus(g, 8 * (i >> 1)), n_in: plus(t2, i & 1)}
        for op in after: self.lower_op(op, at, [], above=True)

  def lower_wgmma(self, r, a, bb, m_in, n_in, k_in, name):
    """TC on warpgroups (wgmma): the local axis just outside the tile's m counts warps, each 16 rows, 4 of them a
    warpgroup of 64 rows; the upcast axis just outside its n gives a warpgroup's N (8 a tile); any other upcast axis
    repeats the whole. Per step of 16 along k a warpgroup issues one uop.wgmma per repeat, reading both operands from
    their SMEM tiles (SwizzledTile); at the step's end it waits for the step before's group (with 3 stages or more,
    the copies then running a step less ahead: `ahead`; else for its own), so that a barrier later the slot that group
    read may be copied into. A warp's N/2 results per repeat are mma.sync's 16x8 tiles along n, each then as
    lower_tc's."""
    b, full, kinds = self.b, self.full, self.kinds
    bad = lambda why: OptError(f"@{name}: tc (warpgroup): {why}")
    tcs = self.t.tensor_cores
    if not tcs.warpgroup: raise bad(f"the {self.target} target has no warpgroup tensor cores (wgmma)")
    (xa, ca), (xb, cb) = a, bb
    if r.results[0].type is not D.f32 or xa.type not in (D.f16, D.bf16): raise bad(f"wgmma multiplies f16 or bf16 into f32, not {xa.type} into {r.results[0].type}")
    if len(ca) != 1 or len(cb) != 1 or ca[0] not in self.smem or cb[0] not in self.smem:
      raise bad("both factors must be loads staged through shared memory (smem), with nothing computed on them")
    la, lb = ca[0], cb[0]
    lo = [i for i in range(len(full)) if kinds[i] in ('local', 'group') and full[i] > 1]
    wm, nu = m_in - 1, n_in - 1
    if kinds[wm] != 'local' or full[wm] % 4 or not lo or lo[-1] != wm:
      raise bad("the axis just outside the tile's m must be local, a multiple of 4 warps (a warpgroup's 64 rows), and the innermost local axis")
    N = 8 * (full[nu] if kinds[nu] == 'upcast' else 1)
    if N > 256: raise bad(f"a warpgroup's n is {N} (the upcast axis just outside the tile's n times 8): wgmma takes at most 256")
    zero = b.const(0)
    up = [i for i in range(len(full)) if kinds[i] == 'upcast' and full[i] > 1 and i != nu]
    groups = [{a_: b.const(c) for a_, c in zip(up, combo)} for combo in self.combos(up)]
    acc_t = VecType(N // 2, D.f32)
    init = b.emit('vectorize', [b.const(0, D.f32)] * (N // 2), acc_t)
    accs = [b.emit('define_acc', [init], acc_t, pure=False) for _ in groups]
    loop_idx = {**self.idx, **{a_: zero for a_ in range(len(full)) if kinds[a_] == 'reduce'}}
    self.stage_tiles([la, lb], loop_idx)
    ranges = self.open_reduce_loops(loop_idx, True)
    for acc in accs: acc.op.operands = [init] + ranges
    self.stage_step([la, lb], loop_idx)
    b.emit('wgmma_fence', [], None, pure=False)
    lays = {op: self.tiles[op][1] for op in (la, lb)}
    attrs = {'dims': (64, N, 16), 'a_layout': lays[la].descriptor(), 'b_layout': lays[lb].descriptor()}
    first_warp = b.mul(b.idiv(self.idx[wm], b.const(4)), b.const(4))  # the warpgroup's: its 64 rows start there
    un = [i for i in range(len(full)) if kinds[i] == 'unroll' and full[i] > 1]
    ds = list(accs)
    for combo in self.combos(un):
      for j, grp in enumerate(groups):
        at = {**loop_idx, **grp, **{a_: b.const(c) for a_, c in zip(un, combo)}, wm: first_warp, m_in: zero, n_in: zero, k_in: zero}
        if kinds[nu] == 'upcast': at[nu] = zero
        point = self.at(at, [], ())
        ai, bi = self.tile_pos(la, point, swizzle=False), self.tile_pos(lb, point, swizzle=False)
        ds[j] = b.emit('wgmma', [self.tiles[la][0], ai, self.tiles[lb][0], bi, ds[j]], acc_t, attrs, pure=False)
    b.emit('wgmma_commit', [], None, pure=False)
    lag = self.sched.stages - 1 - self.ahead  # (one group may run on while the next step's copies are waited for)
    b.emit('wgmma_wait', [], None, {'pending': lag}, pure=False)
    results = [b.emit('phi', [acc, d], acc_t, pure=False) for acc, d in zip(accs, ds)]
    for rr in reversed(ranges): b.close_range(rr)
    if lag: b.emit('wgmma_wait', [], None, {'pending': 0}, pure=False)
    self.tiles = {}
    tiles = [({**grp, **({nu: b.const(u)} if kinds[nu] == 'upcast' else {})}, res, 4 * u) for grp, res in zip(groups, results) for u in range(N // 8)]
    self.tc_epilogue(r, tiles, m_in, n_in)

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
    lanes = [b.emit('gep', [x], dt, {'index': l}) for l in range(x.type.count)]
    gates = [self.bounds_gate(bounds, idx, self.lanes_below, cb, l) for l in range(x.type.count)]
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
        all(r.results[0].type.itemsize in (4, 8) and r.results[0].type is not D.bool_ for r in reduces):
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

  def index(self, op, idx, lane_axes, c, lane=0):
    vs = self.views[op]  # (an axis of size 1, a reduce axis of a view at the stored shape, has index 0 in any stage)
    at = tuple(self.b.const(0) if n == 1 else e for e, n in zip(self.at(idx, lane_axes, c, lane), vs.shape))
    return self.b.indexed(vs, at)

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

  @property
  def ahead(self) -> int:
    """How many steps ahead SMEM's copies run: stages - 1, or stages - 2 where a warpgroup keeps one step's wgmma
    group running past the step's end (a slot is free again only once the group that read it is done)."""
    S = self.sched.stages
    return S - 1 - (self.sched.warpgroup and S >= 3)

  def stage_tiles(self, loads, idx):
    """SMEM, before the reduce loop: shared memory for each load's tiles (a ring of `stages` of them) and, with
    stages, the copies of the first stages - 1 steps (`idx`: the point before the loop, its reduce axis 0), one
    group each."""
    b, S = self.b, self.sched.stages
    size = sum(self.sched.tile_bytes(op) for op in loads)
    if size > self.t.max_local_memory: raise OptError(f"@{self.k.sym_name}: smem: the tiles take {size} bytes of shared memory, more than the {self.t.max_local_memory} of {self.target}")
    for op in loads:
      lay, n = self.sched.tile_layout(op)
      slot = n if S == 1 and isinstance(lay, dict) else self.sched.slot_elems(op)
      attrs = {'sym': f'temp{self.n_locals}', 'size': slot * S, **({} if isinstance(lay, dict) else {'align': 1024})}  # (a swizzle's period)
      buf = b.emit('define_local', [], PtrType(op.results[0].type, True), attrs, pure=False)
      self.n_locals += 1
      b.ops.insert(next(j for j, o in enumerate(b.ops) if o.name not in ('uop.define_global', 'uop.define_local')), b.ops.pop())  # at the top (OpenCL allows no other place)
      self.tiles[op] = (buf, lay, slot)
    if S > 1:  # (`ahead` groups even where the loop has fewer steps: a step's wait counts on them, empty or not)
      for step in range(self.ahead):
        if step < self.reduce_steps(): self.copy_tiles(loads, {**idx, **self.reduce_point(b.const(step))}, b.const(step))
        if self.t.async_copy: b.emit('async_commit', [], None, pure=False)

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

  def stage_step(self, loads, idx):
    """SMEM, at the top of a step of the reduce loop. One buffer: the work-group copies the step's tiles between two
    barriers (the first waits for the last step's reads). Stages: this step's copies (started `ahead` steps ago)
    are waited for, one barrier shows them to the work-group and says the reads of the slot the copies go to next are
    done, and the copies of the step `ahead` steps ahead go into that slot."""
    b, S = self.b, self.sched.stages
    # (wgmma reads shared memory through the async proxy: each thread fences its own writes before the barrier)
    fence = lambda: self.sched.warpgroup and b.emit('fence_async_shared', [], None, pure=False)
    if S == 1:
      self.slot = b.const(0)
      b.emit('barrier', [], None, pure=False)
      self.copy_tiles(loads, idx, self.slot)
      fence()
      b.emit('barrier', [], None, pure=False)
      return
    if self.t.async_copy: b.emit('async_wait', [], None, {'pending': self.ahead - 1}, pure=False)
    fence()
    b.emit('barrier', [], None, pure=False)
    ahead, steps = b.add(self.step, b.const(self.ahead)), self.reduce_steps()
    if self.sched.warpgroup and self.t.async_copy:
      # no branch around the copies past the loop's end: gated off, they zero-fill a slot nothing reads again (ptxas
      # serializes a warpgroup's wgmmas across a branch it cannot prove uniform: on an H100's 4096 f16 matmul, ...)
      self.copy_tiles(loads, {**idx, **self.reduce_point(b.alu('min', ahead, b.const(steps - 1)))}, b.mod(ahead, b.const(S)), b.lt(ahead, b.const(steps)))
    else:
      b.open_if(b.lt(ahead, b.const(steps)))
      self.copy_tiles(loads, {**idx, **self.reduce_point(ahead)}, b.mod(ahead, b.const(S)))
      b.close_if()
    if self.t.async_copy: b.emit('async_commit', [], None, pure=False)
    self.slot = b.mod(self.step, b.const(S))

  def copy_tiles(self, loads, idx, slot, gate=None):
    """The work-group copies the tile of each load that its threads' lanes read in the step at `idx`
    (Schedule.tile_axes) into ring slot `slot`: neighbouring threads copy neighbouring addresses, 16 bytes at a
    time where they are contiguous and aligned, asynchronously where the target can (and stages are asked for)."""
    b, full, kinds = self.b, self.full, self.kinds
    loc = [i for i in range(len(full)) if kinds[i] in ('local', 'group') and full[i] > 1]
    tc = 'tck' in kinds  # the warp's lanes are threads too (lidx0), the local dims count warps
    tid, st = (self.lane, 32) if tc else (b.const(0), 1)
    for i in reversed(loc): tid = b.add(tid, b.mul(self.idx[i], b.const(st))); st *= full[i]
    T = st
    for op in loads:
      rs, axes = self.views[op].real_strides(ignore_valid=True), self.sched.tile_axes(op)
      buf, lay, slot_elems = self.tiles[op]
      base = b.mul(slot, b.const(slot_elems))
      dt = op.results[0].type
      def at(e, cw):  # the point of the tile's element (group of cw along the fastest axis) e, and its place in the tile
        coords = {}
        for a in reversed(axes):
          n = full[a] // cw if a == axes[-1] else full[a]
          coords[a] = b.mul(b.mod(e, b.const(n)), b.const(cw)) if a == axes[-1] else b.mod(e, b.const(n))
          e = b.idiv(e, b.const(n))
        pos = b.add(base, self.tile_offset(lay, coords))
        return [coords[a] if a in coords else idx[a] if kinds[a] in ('global', 'reduce') and full[a] > 1 else b.const(0) for a in range(len(full))], pos
      # 16 bytes a copy where the tile's fastest axis is contiguous and the addresses aligned, else 8 or 4; the
      # first element's mask gates all of it, so no mask may cut a copy in two (a PADTO bound, a padded conv input's
      # edge: the view's validity must be the same across each aligned group)
      fast = axes[-1] if axes and rs[axes[-1]] == 1 else None
      cw = next((w for w in (16 // dt.itemsize, 8 // dt.itemsize, 4 // dt.itemsize) if w > 1 and fast is not None and full[fast] % w == 0
                 and self.views[op].mask_aligned(fast, w) and self.aligned(self.views[op].to_indexed(at(tid, w)[0], b)[0], w)), 1)
      copy_async = self.t.async_copy and self.sched.stages > 1 and cw * dt.itemsize in (4, 8, 16)
      n = math.prod(full[a] for a in axes) // cw
      # (a warpgroup's copies take no branch, which would serialize its wgmmas: the threads past the tile's end copy
      # an element another thread copies too, the same bytes to the same place; a gated-off copy would write zeros)
      branchless = copy_async and self.sched.warpgroup
      for j in range(-(-n // T)):
        e = b.add(tid, b.const(T * j))
        tail = (j + 1) * T > n
        if tail and not branchless: b.open_if(b.lt(e, b.const(n)))
        if tail and branchless: e = b.mod(e, b.const(n))
        point, pos = at(e, cw)
        i, valid = self.views[op].to_indexed(point, b)
        if gate is not None and copy_async: valid = gate if b.cval(valid) == 1 else b.and_(valid, gate)  # (`gate`: the copy is wanted at all)
        t = VecType(cw, dt) if cw > 1 else dt
        zero = b.emit('vectorize', [b.const(0, dt)] * cw, t) if cw > 1 else b.const(0, dt)
        cv = b.cval(valid)
        if copy_async and cv != 0:
          b.emit('copy_async', [buf, pos, self.buf[op.buf], i] + ([] if cv == 1 else [valid]), None, {'bytes': cw * dt.itemsize}, pure=False)
        else:
          x = b.emit('load', [self.buf[op.buf], i], t) if cv == 1 else zero if cv == 0 else b.emit('load', [self.buf[op.buf], i, valid, zero], t)
          b.emit('store', [buf, pos, x], None, pure=False)
        if tail and not branchless: b.close_if()

  def tile_pos(self, op, ix, swizzle=True):
    """A point's place in the load's tile (in this step's slot of the ring)."""
    buf, lay, slot_elems = self.tiles[op]
    return self.b.add(self.b.mul(self.slot, self.b.const(slot_elems)), self.tile_offset(lay, ix, swizzle))

  def tile_offset(self, lay, ix, swizzle=True):
    """A point's place in a tile of layout `lay` ({axis: stride}, or a SwizzledTile; without `swizzle`, where it
    would lie unswizzled: a wgmma descriptor's start, which the hardware swizzles itself)."""
    b = self.b
    lin = lambda terms: functools.reduce(b.add, [b.mul(ix[a], b.const(s)) for a, s in terms], b.const(0))
    if isinstance(lay, dict): return lin(lay.items())
    r, c = lin(lay.rows), lin(lay.cols)
    cm = b.mod(c, b.const(64))
    if swizzle: cm = b.add(b.mul(b.alu('xor', b.idiv(cm, b.const(8)), b.mod(r, b.const(8))), b.const(8)), b.mod(cm, b.const(8)))
    return b.add(b.add(b.mul(b.idiv(c, b.const(64)), b.const(lay.n_rows * 64)), b.mul(r, b.const(64))), cm)

  def load_tile(self, op, idx, lane_axes, c):
    """A staged load in the reduce loop: from its tile in shared memory (a vector where the vector axis runs
    along the tile's fastest axis)."""
    b, dt = self.b, op.results[0].type
    buf, strides, _ = self.tiles[op]
    pos = lambda lane, c=c: self.tile_pos(op, self.at(idx, lane_axes, c, lane))
    vs = strides.get(self.vec, 0) if self.vec is not None and self.W > 1 else 0
    fast = next((a for a, s in strides.items() if s == 1), None)
    if vs == 0 and fast in lane_axes and self.full[fast] % 4 == 0:
      # the lanes along the tile's fastest axis come 4 at a time (one 16-byte read; the same read serves 4 lanes)
      j = lane_axes.index(fast)
      c4 = c[:j] + (c[j] - c[j] % 4,) + c[j + 1:]
      p = pos(0, c4)
      if self.aligned(p, 4): return b.emit('gep', [b.emit('load', [buf, p], VecType(4, dt))], dt, {'index': c[j] % 4})
    if vs == 0: return b.emit('load', [buf, pos(0)], dt)
    if vs == 1 and self.aligned(pos(0)): return b.emit('load', [buf, pos(0)], VecType(self.W, dt))
    return b.emit('vectorize', [b.emit('load', [buf, pos(l)], dt) for l in range(self.W)], VecType(self.W, dt))

  def load(self, op, idx, lane_axes, c):
    """Loads are merged like pure ops: a kernel stores only to data0 and never reads it back."""
    b = self.b
    dt = op.results[0].type
    if op in self.tiles: return self.load_tile(op, idx, lane_axes, c)  # (only while its reduce loop is open)
    buf = self.buf[op.buf]
    def one(lane):
      i, valid = self.index(op, idx, lane_axes, c, lane)
      cv = b.cval(valid)
      if cv == 0: return b.const(0, dt)
      if cv == 1: return b.emit('load', [buf, i], dt)
      return b.emit('load', [buf, i, valid, b.const(0, dt)], dt)
    st = self.vec_stride(op)
    if st == 0: return one(0)
    if st == 1 and self.aligned(self.index(op, idx, lane_axes, c, 0)[0]):
      i, valid = self.index(op, idx, lane_axes, c, 0)
      t = VecType(self.W, dt)
      cv = b.cval(valid)
      if cv == 1: return b.emit('load', [buf, i], t)
      if cv == 0: return b.emit('vectorize', [b.const(0, dt)] * self.W, t)
      zero = b.emit('vectorize', [b.const(0, dt)] * self.W, t)
      return b.emit('load', [buf, i, valid, zero], t)
    return b.emit('vectorize', [one(l) for l in range(self.W)], VecType(self.W, dt))

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


def linearize_kernel(k: Operation, target: str = 'llvm') -> Operation:
  return Lowerer(k, target).run()


def tc_applies(k: Operation, opts, target: str) -> bool:
  """Whether the TC action (`opts`: it, or PADTO actions and it) lowers for this kernel on `target` (shape, dtypes, a
  sum of a product of two loads)."""
  try: Lowerer(k, target, tuple(opts) if isinstance(opts, list) else (opts,)).run(); return True
  except OptError: return False


class Linearize(Pass):
  name = 'linearize'
  summary = 'lower kernel.funcs to flat uop.funcs: ranges, index expressions, accumulators, vector lanes'
  reads, leaves = 'kernel', 'uop'
  options = {'target': (str, 'llvm', 'the target (tgc/target.py): on CPU targets (llvm, c) only the outermost global axis is a special')}
  def run(self, m: Module):
    new = []
    for op in m.ops:
      if op.name == 'kernel.func':
        try: new.append(linearize_kernel(op, self.target))
        except OptError as e:
          from tgc.ir.diagnostics import Diagnostic
          raise Diagnostic(str(e), op.loc) from None
        self.stats['kernels linearized'] += 1
      else: new.append(op)
    m.body.ops = new
