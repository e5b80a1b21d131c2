"""linearize: kernel.func ASTs -> uop.func flat lists (ranges, index arithmetic, accumulators).

The iteration space of a kernel is its full shape: axes that are not reduced are global (launch grid,
`uop.special gidxN`, the last axis is gidx0 as in tinygrad), reduced axes are `uop.range` loops
(`ridxN`). Loads and stores index through their view stacks (ViewStack.to_indexed with a builder that
emits uops); a mask becomes the gate of the load. A reduce is a `uop.define_acc` before its loops and
a `uop.phi` inside them; what follows the reduce reads the phi after `uop.endrange`.
"""
from __future__ import annotations
from tgc.ir.core import Operation, Module, Value, Block, REGISTRY
from tgc.ir.types import PtrType, elem
from tgc.ir import dtypes as D, alu
from tgc.ir.attrs import Symbol
from tgc.passes.manager import Pass

U = lambda n: REGISTRY[f'uop.{n}']
MAX_GLOBAL_DIMS = 3


class UopBuilder:
  """Appends uops to a list, hash-consing pure ones and folding the obvious (x+0, x*1, constants).
  Doubles as the expression builder of ViewStack.to_indexed."""
  def __init__(self, idx_dt=D.i32):
    self.ops: list[Operation] = []
    self.cache: dict = {}
    self.idx_dt = idx_dt

  def emit(self, name, srcs, t, attrs=None, pure=True) -> Value:
    key = (name, tuple(srcs), t, tuple(sorted(attrs.items())) if attrs else ()) if pure else None
    if key is not None and key in self.cache: return self.cache[key]
    op = U(name)(list(srcs), [t] if t is not None else [], attrs)
    self.ops.append(op)
    r = op.results[0] if op.results else None
    if key is not None: self.cache[key] = r
    return r

  def cval(self, v):
    op = v.op
    return op.attrs['value'] if op is not None and op.name == 'uop.const' else None

  # the index-expression interface (ints)
  def const(self, x, dt=None): return self.emit('const', [], dt or self.idx_dt, {'value': int(x) if not (dt or self.idx_dt).is_float else float(x)})
  def true(self): return self.emit('const', [], D.bool_, {'value': 1})
  def alu(self, name, a, b, dt=None):
    ca, cb = self.cval(a), self.cval(b)
    t = dt or a.type
    if ca is not None and cb is not None and elem(t).is_int or (ca is not None and cb is not None and name in ('cmplt', 'and')):
      import numpy as np
      r = alu.exec_alu(name, elem(a.type), np.array(ca), np.array(cb))
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


def linearize_kernel(k: Operation) -> Operation:
  ops = k.body.ops
  stores = [op for op in ops if op.name == 'kernel.store']
  reduces = [op for op in ops if op.name == 'kernel.reduce']
  out = stores[0].view.shape
  axes = tuple(reduces[0].axes) if reduces else ()
  full = next((op.view.shape for op in ops if op.name == 'kernel.load' and op.view.shape != out), None)
  if full is None:
    if reduces and any(out[a] != 1 for a in axes): raise ValueError("reduce kernel without a load to give its iteration shape")
    full = out if not reduces else None
  if full is None: raise ValueError(f"@{k.sym_name}: a reduce with nothing below it to give its size (run canonicalize first)")
  big = any(a.type.numel >= 2**31 for a in k.body.args)
  b = UopBuilder(D.i64 if big else D.i32)
  buf = {}
  for i, a in enumerate(k.body.args):
    buf[a] = b.emit('define_global', [], PtrType(a.type.dtype), {'index': i}, pure=False)
  # global axes: the last one is gidx0; more than three fold the leading ones into one
  gaxes = [i for i in range(len(out)) if i not in axes and out[i] > 1]
  idx = {i: None for i in range(len(full))}
  groups = [[a] for a in gaxes]
  while len(groups) > MAX_GLOBAL_DIMS: groups[0:2] = [groups[0] + groups[1]]
  global_size = []
  for gi, grp in enumerate(reversed(groups)):
    size = 1
    for a in grp: size *= out[a]
    g = b.emit('special', [], b.idx_dt, {'axis': f'gidx{gi}', 'size': size})
    global_size.append(size)
    inner = size
    for a in grp:  # unravel a folded group
      inner //= out[a]
      v = g if inner == 1 else b.idiv(g, b.const(inner))
      idx[a] = v if a == grp[0] else b.mod(v, b.const(out[a]))
  zero = b.const(0)
  for i in range(len(full)):
    if idx[i] is None and i not in axes: idx[i] = zero
  out_idx = [idx[i] if i not in axes else zero for i in range(len(full))]

  vals: dict[Value, Value] = {}
  # everything before the (last) reduce runs inside the reduce loops
  last_reduce = max((ops.index(r) for r in reduces), default=-1)
  accs = []
  if reduces:
    for r in reduces:
      dt = r.results[0].type
      init = b.const(alu.reduce_identity(r.kind, dt), dt) if not dt.is_float else b.emit('const', [], dt, {'value': float(alu.reduce_identity(r.kind, dt))})
      accs.append(b.emit('define_acc', [init], dt, pure=False))
    ranges = []
    for ri, a in enumerate(axes):
      if full[a] == 1: idx[a] = zero; continue
      rng = b.emit('range', [b.const(0), b.const(full[a])], b.idx_dt, pure=False)
      ranges.append(rng); idx[a] = rng
    for acc in accs: acc.op.operands = [acc.op.operands[0]] + ranges
  inner_idx = [idx[i] for i in range(len(full))]

  def load(op, at):
    idx_e, valid = op.view.to_indexed(at, b)
    dt = op.results[0].type
    cv = b.cval(valid)
    if cv == 0: return b.const(0, dt) if not dt.is_float else b.emit('const', [], dt, {'value': 0.0})
    if cv == 1: return b.emit('load', [buf[op.buf], idx_e], dt, pure=False)
    alt = b.const(0, dt) if not dt.is_float else b.emit('const', [], dt, {'value': 0.0})
    return b.emit('load', [buf[op.buf], idx_e, valid, alt], dt, pure=False)

  ri = 0
  for n, op in enumerate(ops):
    name = op.name
    if name == 'kernel.load': vals[op.results[0]] = load(op, inner_idx if reduces and op.view.shape != out else out_idx)
    elif name == 'kernel.const':
      dt = op.results[0].type
      vals[op.results[0]] = b.emit('const', [], dt, {'value': op.attrs['value']})
    elif name == 'kernel.reduce':
      acc = accs[reduces.index(op)]
      kind = {'add': 'add', 'max': 'max', 'mul': 'mul'}[op.kind]
      new = b.emit(kind, [acc, vals[op.src]], acc.type, pure=False)
      vals[op.results[0]] = b.emit('phi', [acc, new], acc.type, pure=False)
      if n == last_reduce:
        for rng in reversed([o.results[0] for o in b.ops if o.name == 'uop.range']):
          b.emit('endrange', [rng], None, pure=False)
        b.cache = {k: v for k, v in b.cache.items() if not _inside(v, b)}  # values of the loop die with it
    elif name == 'kernel.store':
      idx_e, _ = op.view.to_indexed(out_idx, b)
      b.emit('store', [buf[op.buf], idx_e, vals[op.value]], None, pure=False)
    elif hasattr(op, 'opname'):
      vals[op.results[0]] = b.emit(op.opname, [vals[s] for s in op.operands], op.results[0].type)
    else: raise ValueError(f"linearize: unexpected {name}")
  attrs = {'sym_name': Symbol(k.sym_name), 'global_size': tuple(global_size) or (1,), 'local_size': (1,)}
  if 'opts' in k.attrs: attrs['opts'] = k.attrs['opts']
  return U('func')([], [], attrs, k.loc, Block([], b.ops))


def _inside(v, b) -> bool:
  """Was v defined inside a range (after the first uop.range)?"""
  if v is None or v.op is None: return False
  first = next((i for i, o in enumerate(b.ops) if o.name == 'uop.range'), None)
  if first is None: return False
  try: return b.ops.index(v.op) > first
  except ValueError: return False


class Linearize(Pass):
  name = 'linearize'
  summary = 'lower kernel.funcs to flat uop.funcs: ranges, index expressions, accumulators'
  reads, leaves = 'kernel', 'uop'
  def run(self, m: Module):
    new = []
    for op in m.ops:
      if op.name == 'kernel.func':
        new.append(linearize_kernel(op)); self.stats['kernels linearized'] += 1
      else: new.append(op)
    m.body.ops = new
