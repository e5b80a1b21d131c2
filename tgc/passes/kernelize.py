"""kernelize: the tensor graph -> one kernel.func per fused kernel, and the host schedule.

Which values become buffers (tinygrad's rules, ir.md):
  - function results (a reshape of a buffer stays a host-side reshape), `tensor.contiguous`;
  - where a reduce's result reaches a movement op or another reduce through elementwise ops (its consumers
    would need it at another shape): the value at that point when there is one such point (the elementwise
    ops up to it are the reduce kernel's epilogue: a matmul's bias and relu), else the reduce's result;
    elementwise ops after a reduce otherwise fuse into its kernel;
  - a value with several consumers when its fused graph contains a reduce (recomputing would repeat the
    reduction); elementwise values are recomputed in each consumer instead, as tinygrad does, which is
    what keeps softmax at three kernels;
  - a computed value under a pad (padding must read 0, not f(0)).
Constants and movement ops never make a kernel: movement ops fold into the view stacks of the loads,
splat constants become kernel.const, dense constants stay on the host as buffers.
"""
from __future__ import annotations
import math
from tgc.ir.core import Operation, Module, Value, Block, REGISTRY, MOVEMENT, ELEMENTWISE
from tgc.ir.types import TensorType, BufType
from tgc.ir.attrs import Symbol
from tgc.shape import ViewStack, View
from tgc.passes.manager import Pass
from tgc.ir.diagnostics import Diagnostic
from tgc.passes.tensor_decompose import decompose_patterns, declared_patterns
from tgc.ir.rewrite import apply_patterns, PatternMatcher

K = lambda n: REGISTRY[f'kernel.{n}']


class _Realize(Exception):
  """Raised while building a kernel: this value must become a buffer first."""
  def __init__(self, v): self.v = v


def _movement_base(v: Value) -> Value:
  while v.op is not None and MOVEMENT in v.op.TRAITS: v = v.op.operands[0]
  return v

def _is_leaf(v: Value) -> bool:
  return v.op is None or v.op.name in ('tensor.const', 'tensor.empty')


class Scheduler:
  def __init__(self, fn: Operation, used_names: set[str]):
    self.fn, self.used_names = fn, used_names
    self.users: dict[Value, list[Operation]] = {}
    for op in fn.body.ops:
      for v in op.operands: self.users.setdefault(v, []).append(op)
    self.order = {op: i for i, op in enumerate(fn.body.ops)}
    self.R: set[Value] = set()
    self.host_reshape: dict[Value, Value] = {}

  # ---- phase 1: which values are buffers ----
  def compute_ops(self):
    return [op for op in self.fn.body.ops if op.name not in ('func.return',)]

  def eff_uses(self, v: Value) -> int:
    n = 0
    for u in self.users.get(v, []):
      n += self.eff_uses(u.results[0]) if MOVEMENT in u.TRAITS else 1
    return n

  def choose(self):
    ret = self.fn.body.ops[-1]
    for v in ret.operands:
      b = v
      while b.op is not None and b.op.name == 'tensor.reshape': b = b.op.operands[0]
      if b.op is None or _is_leaf(b): continue  # an argument or a host constant, maybe reshaped on the host
      self.R.add(b)
    for op in self.fn.body.ops:
      if op.name == 'tensor.contiguous': self.R.add(op.results[0])
      if op.name == 'tensor.reduce':
        pts = self._reduce_escapes(op.results[0])
        # one way out: the elementwise ops up to it are the reduce kernel's epilogue (a matmul's bias and relu),
        # as in tinygrad; several: the reduce itself is the buffer
        if pts: self.R.add(next(iter(pts)) if len(pts) == 1 else op.results[0])
      if op.name == 'tensor.pad':
        u = _movement_base(op.operands[0])
        if u.op is not None and not _is_leaf(u): self.R.add(u)
    has_reduce: dict[Value, bool] = {}
    for op in self.fn.body.ops:
      if not op.results: continue
      v = op.results[0]
      if _is_leaf(v): has_reduce[v] = False; continue
      hr = op.name == 'tensor.reduce' or any(has_reduce.get(s, False) and s not in self.R for s in op.operands)
      has_reduce[v] = hr
      if hr and MOVEMENT not in op.TRAITS and v not in self.R and self.eff_uses(v) >= 2: self.R.add(v)

  def _reduce_escapes(self, r: Value) -> set[Value]:
    """Where the reduce's result, through elementwise ops (and reshapes: store views), reaches a movement op or
    a reduce: the values (not movement results) that would have to be buffers there."""
    seen, stack, out = set(), [(r, r)], set()
    while stack:
      v, base = stack.pop()
      for u in self.users.get(v, []):
        if u.name == 'func.return': continue
        if u.name == 'tensor.reshape' and u.results[0] not in self.R:  # a reshape of the output is only a store view
          stack.append((u.results[0], base)); continue
        if MOVEMENT in u.TRAITS or u.name in ('tensor.reduce', 'tensor.matmul'): out.add(base); continue
        if ELEMENTWISE in u.TRAITS and u.results[0] not in seen and u.results[0] not in self.R:
          seen.add(u.results[0]); stack.append((u.results[0], u.results[0]))
    return out

  # ---- phase 2: build the kernels ----
  def build(self):
    while True:
      try: return self._build_all()
      except _Realize as r:
        if r.v in self.R:  # a composite left for tensor-decompose, or an op declared without a kernel form
          raise Diagnostic(f"no kernel can compute '{r.v.op.name}': kernels compute ALU ops (tgc/ir/alu.py), reduces and movement; "
                           f"another op needs a decompose method (docs/extending.md)", r.v.op.loc) from None
        self.R.add(r.v)  # each retry adds a value: this ends

  def _build_all(self):
    roots = sorted(self.R, key=lambda v: self.order[v.op])
    kernels, host = [], []
    self.buffers: dict[Value, Value] = {a: a for a in self.fn.body.args}
    self.host_consts: dict[Value, Value] = {}
    self.host_ops: list[Operation] = []
    names = set()
    for root in roots:
      if root.type.numel == 0:  # nothing to compute: a launch over no elements would still run its one point
        alloc = K('alloc')([], [root.type], None, root.op.loc)
        alloc.results[0].hint = None
        self.host_ops.append(alloc); self.buffers[root] = alloc.results[0]
        continue
      kb = _KernelBuilder(self, root)
      kfn, inputs = kb.build()
      name = kb.name()
      base, i = name, 1
      while name in names or name in self.used_names: name, i = f"{base}n{i}", i + 1
      names.add(name)
      kfn.attrs['sym_name'] = Symbol(name)
      kernels.append(kfn)
      alloc = K('alloc')([], [root.type], None, root.op.loc)
      alloc.results[0].hint = None
      launch = K('launch')([alloc.results[0]] + inputs, [], {'callee': Symbol(name)}, root.op.loc)
      self.host_ops += [alloc, launch]
      self.buffers[root] = alloc.results[0]
    # results: buffers, host reshapes of them, or arguments
    ret = self.fn.body.ops[-1]
    outs = []
    for v in ret.operands:
      chain = []
      b = v
      while b not in self.buffers and b.op is not None and b.op.name == 'tensor.reshape': chain.append(b.op); b = b.op.operands[0]
      buf = self.buffers.get(b) or self.host_buffer(b)
      for op in reversed(chain):
        r = REGISTRY['tensor.reshape']([buf], [op.results[0].type], None, op.loc)
        self.host_ops.append(r); buf = r.results[0]
      outs.append(buf)
    ret.operands = outs
    self.host_ops.append(ret)
    return kernels, self.host_ops

  def host_buffer(self, v: Value) -> Value:
    """A leaf that lives on the host: an argument, a dense (or masked) constant, an empty tensor."""
    if v in self.buffers: return self.buffers[v]
    op = v.op
    if op.name == 'tensor.const':
      c = REGISTRY['tensor.const']([], [v.type], dict(op.attrs), op.loc)
    elif op.name == 'tensor.empty':  # any contents will do: zeros, so that nothing reads memory no one wrote
      c = REGISTRY['tensor.const']([], [v.type], {'value': 0.0 if v.type.dtype.is_float else 0}, op.loc)
    else: raise AssertionError(f"not a host leaf: {op.name}")
    self.host_ops.append(c)
    self.buffers[v] = c.results[0]
    return c.results[0]


class _KernelBuilder:
  def __init__(self, sched: Scheduler, root: Value):
    self.s, self.root = sched, root
    self.ops: list[Operation] = []
    self.memo: dict = {}
    self.inputs: list[Value] = []           # host values, in the order the kernel's args take them
    self.args: dict[Value, Value] = {}      # host value -> kernel block argument
    self.full: tuple[int, ...] | None = None
    self.axes: tuple[int, ...] = ()
    self.loads: list[Operation] = []
    self.after: list[Operation] = []       # loads outside the reduce: they walk the stored shape
    self.out_shape = root.type.shape
    self.const_loads = False                # splat constants below the reduce are read from host buffers

  def name(self):
    shape = self.final_shape
    return ('r_' if self.axes else 'E_') + '_'.join(str(s) for s in shape)

  def arg_for(self, host: Value) -> Value:
    a = self.args.get(host)
    if a is None:
      t = host.type
      a = self.args[host] = Value(BufType(t.shape, t.dtype), hint=None)
      self.inputs.append(host)
    return a

  def views(self, leaf_shape, path) -> ViewStack:
    st = ViewStack.from_shape(leaf_shape)
    for op in reversed(path):
      n = op.name
      if n == 'tensor.reshape': st = st.reshape(op.results[0].type.shape)
      elif n == 'tensor.expand': st = st.expand(op.results[0].type.shape)
      elif n == 'tensor.permute': st = st.permute(op.order)
      elif n == 'tensor.pad': st = st.pad(op.pads)
      elif n == 'tensor.shrink': st = st.shrink(op.bounds)
      elif n == 'tensor.flip': st = st.flip(op.axes)
    return st.simplify()

  def add(self, op):
    self.ops.append(op)
    return op.results[0]

  def emit(self, v: Value, path: tuple, below: bool) -> Value:
    key = (v, path, below)
    r = self.memo.get(key)
    if r is not None: return r
    r = self.memo[key] = self._emit(v, path, below)
    return r

  def _emit(self, v, path, below):
    s = self.s
    op = v.op
    dt = v.type.dtype
    if v is not self.root and (v in s.R or op is None or op.name == 'tensor.empty'):
      if v in s.R and v not in s.buffers: raise AssertionError("buffer used before its kernel")
      return self.load(s.buffers[v] if v in s.buffers else s.host_buffer(v), path, below)
    if op.name == 'tensor.const':
      st = self.views(v.type.shape, path)
      if isinstance(op.attrs['value'], tuple) or any(w.mask is not None for w in st.views) or (below and self.const_loads):
        return self.load(s.host_buffer(v), path, below)
      return self.add(K('const')([], [dt], {'value': op.attrs['value']}, op.loc))
    if MOVEMENT in op.TRAITS: return self.emit(op.operands[0], path + (op,), below)
    if op.name == 'tensor.contiguous': return self.emit(op.operands[0], path, below)
    if op.name == 'tensor.reduce':
      if below or any(p.name != 'tensor.reshape' for p in path): raise _Realize(v)
      full, axes = op.src.type.shape, tuple(sorted(op.axes))
      if self.full is not None and (self.full != full or self.axes != axes): raise _Realize(v)
      self.full, self.axes, self.out_shape = full, axes, v.type.shape
      src = self.emit(op.src, (), True)
      return self.add(K('reduce')([src], [dt], {'kind': op.kind, 'axes': axes}, op.loc))
    if ELEMENTWISE in op.TRAITS and hasattr(op, 'opname'):  # an ALU op: its kernel twin (kernel.<opname>)
      srcs = [self.emit(x, path, below) for x in op.operands]
      return self.add(K(op.opname)(srcs, [dt], None, op.loc))
    raise _Realize(v)  # anything else (a composite not decomposed) gets a kernel of its own

  def load(self, host: Value, path, below: bool) -> Value:
    st = self.views(host.type.shape, path)
    op = K('load')([self.arg_for(host)], [host.type.dtype], {'view': st}, None)
    self.loads.append(op)
    if not below: self.after.append(op)
    return self.add(op)

  def build(self):
    root = self.root
    val = self.emit(root, (), False)
    if self.axes and all(ld in self.after for ld in self.loads):
      # a reduce over constants only: nothing would give the loop its size; read the constant from a host buffer
      self.__init__(self.s, root)
      self.const_loads = True
      val = self.emit(root, (), False)
    out = self.out_shape  # the reduce's output shape; the root may be a reshape of it
    full = self.full if self.full is not None else out
    if full == ():  # scalar kernels iterate over one point
      full, out = (1,), (1,)
      for ld in self.loads: ld.attrs['view'] = ld.attrs['view'].reshape((1,))
    for ld in self.after:
      if ld.attrs['view'].shape != out: ld.attrs['view'] = ld.attrs['view'].reshape(out).simplify()
    store_vs = ViewStack.from_shape(root.type.shape).reshape(out).simplify()
    full, out, store_vs = self.merge_dims(full, out, store_vs)
    self.final_shape = full
    out_arg = Value(BufType(root.type.shape, root.type.dtype))
    store = K('store')([out_arg, val], [], {'view': store_vs}, root.op.loc if root.op else None)
    kargs = [out_arg] + [self.args[h] for h in self.inputs]
    for i, a in enumerate(kargs): a.hint = f"data{i}"
    body = Block(kargs, self.ops + [store])
    kfn = K('func')([], [], {'sym_name': Symbol('k')}, root.op.loc if root.op else None, body)
    return kfn, self.inputs

  def merge_dims(self, full, out, store_vs):
    """Merge adjacent axes that every view walks as one (tinygrad's simplify_merge_adjacent)."""
    red = set(self.axes)
    i = len(full) - 2
    reduce_ops = [op for op in self.ops if op.name == 'kernel.reduce']
    while i >= 0:
      if (i in red) == (i + 1 in red):
        nf = full[:i] + (full[i] * full[i + 1],) + full[i + 2:]
        no = out[:i] + (out[i] * out[i + 1],) + out[i + 2:]
        new_views, ok = [], True
        for ld in self.loads:
          vs = ld.attrs['view']
          tgt = nf if vs.shape == full else no
          m = vs.reshape(tgt)
          if len(m.views) != len(vs.views): ok = False; break
          new_views.append(m)
        sm = store_vs.reshape(no)
        if ok and len(sm.views) == len(store_vs.views):
          for ld, vs in zip(self.loads, new_views): ld.attrs['view'] = vs
          store_vs = sm
          full, out = nf, no
          red = {a if a <= i else a - 1 for a in red}
      i -= 1
    self.axes = tuple(sorted(red))
    for op in reduce_ops: op.attrs['axes'] = self.axes
    return full, out, store_vs


SPLIT_MIN = 1 << 15   # a reduce of at least this many elements into fewer than SPLIT_OUT outputs is split
SPLIT_OUT = 64

def split_reduce(op, rw):
  """A big reduce into a few outputs is two: (..., n, ...) -> (..., k, n/k, ...) reduced over n/k, then over k,
  so that the first kernel has k*outputs points to spread across cores (tinygrad's split_reduceop)."""
  src, t = op.src, op.results[0].type
  if len(op.axes) != 1 or math.prod(t.shape) >= SPLIT_OUT: return None
  a = op.axes[0]
  n = src.type.shape[a]
  if n < SPLIT_MIN: return None
  k = next((k for k in (256, 128, 64, 32, 16) if n % k == 0 and n // k >= 256), None)
  if k is None: return None
  shape = src.type.shape
  split = shape[:a] + (k, n // k) + shape[a + 1:]
  TT = lambda sh: TensorType(tuple(sh), t.dtype)
  x = rw.create(REGISTRY['tensor.reshape'], [src], [TT(split)], None, op.loc).results[0]
  r1 = rw.create(REGISTRY['tensor.reduce'], [x], [TT(split[:a + 1] + (1,) + split[a + 2:])], {'kind': op.kind, 'axes': (a + 1,)}, op.loc).results[0]
  c = rw.create(REGISTRY['tensor.contiguous'], [r1], [r1.type], None, op.loc).results[0]
  r2 = rw.create(REGISTRY['tensor.reduce'], [c], [TT(split[:a] + (1, 1) + split[a + 2:])], {'kind': op.kind, 'axes': (a,)}, op.loc).results[0]
  return rw.create(REGISTRY['tensor.reshape'], [r2], [t], None, op.loc).results[0]

split_patterns = PatternMatcher([('tensor.reduce', split_reduce)])


class Kernelize(Pass):
  name = 'kernelize'
  summary = 'fuse the tensor graph into kernel.funcs (views for movement ops) and a host schedule'
  reads, leaves = 'tensor', 'kernel'
  options = {'split': (bool, True, 'split a big reduce into few outputs into two kernels, so the first can use every core')}
  def run(self, m: Module):
    apply_patterns(m, decompose_patterns + declared_patterns())
    if self.split: apply_patterns(m, split_patterns, max_sweeps=1)
    used = {op.attrs['sym_name'] for op in m.ops if 'sym_name' in op.attrs}
    kernels = []
    for fn in m.functions('func.func'):
      if any(op.name.startswith('kernel.') for op in fn.body.ops): continue  # already a schedule
      s = Scheduler(fn, used)
      s.choose()
      ks, host = s.build()
      for k in ks: used.add(k.attrs['sym_name'])
      fn.body.ops = host
      kernels += ks
      self.stats['kernels made'] += len(ks)
    m.body.ops = kernels + [op for op in m.ops]
