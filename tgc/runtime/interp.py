"""The reference interpreter of the uop dialect: the semantic oracle the emitters are tested against.

It runs the flat list point by point (every gidx/lidx point of the launch grid), in plain Python, and
computes every ALU op with tgc.ir.alu, so an op means here exactly what constant folding says it means.
Values are numpy 0-d arrays (scalars) or 1-d arrays (vec<N x T>) in the dtype's compute type (bf16 and f8 as
rounded float32, i1 as numpy bool). Slow by design: correctness and clear errors only.
"""
from __future__ import annotations
import numpy as np
from tgc.errors import TgcError
from tgc.ir import alu, dtypes as D
from tgc.ir.types import PtrType, VecType, elem
from tgc.dialects.uop import const_value, launch_dims, buffer_signature, buffer_sizes, acc_init_points, WARP_OPS  # (also re-exported)
from tgc.runtime.device import HostDevice, Program, check_buffers


def _scope_pairs(ops) -> dict[int, int]:
  """Index of each range/if -> index of its endrange/endif, and back."""
  pair, stack = {}, []
  for i, op in enumerate(ops):
    if op.name in ('uop.range', 'uop.if'): stack.append(i)
    elif op.name in ('uop.endrange', 'uop.endif'):
      j = stack.pop(); pair[j], pair[i] = i, j
  return pair


def _load(buf: np.ndarray, idx: int, t, where: str):
  n = t.count if isinstance(t, VecType) else 1
  if idx < 0 or idx + n > buf.size: raise TgcError(f"{where}: index {idx} (+{n}) is out of bounds of a buffer of {buf.size}")
  dt = elem(t)
  x = buf.reshape(-1)[idx:idx + n]
  x = D.decode(x, dt.fmt) if dt.fmt else x.copy()
  return x if isinstance(t, VecType) else x[0].reshape(())


def _store(buf: np.ndarray, idx: int, val, t, where: str):
  n = t.count if isinstance(t, VecType) else 1
  if idx < 0 or idx + n > buf.size: raise TgcError(f"{where}: index {idx} (+{n}) is out of bounds of a buffer of {buf.size}")
  dt = elem(t)
  v = D.to_storage(val, dt)
  buf.reshape(-1)[idx:idx + n] = np.broadcast_to(v, (n,))


def _inside(op, idx: int, t) -> bool:
  """Whether an access stays inside the size its buffer declares: one outside it behaves as if its gate were false, as
  the emitters' run-time guards make it (the verifier rejects those it can see; uop_bounds.outside_accesses)."""
  size = op.buf.op.attrs.get('size')
  return size is None or 0 <= idx <= size - (t.count if isinstance(t, VecType) else 1)


def _zero(t):
  z = const_value(0, elem(t))
  return np.full(t.count, z) if isinstance(t, VecType) else np.asarray(z)


def run_uop_func(fn, buffers: list[np.ndarray]) -> None:
  """Execute one uop.func over its whole launch grid; outputs are written into `buffers` in place."""
  if fn.name != 'uop.func': raise TgcError(f"expected a uop.func, got '{fn.name}'")
  bufs = check_buffers(fn, buffers)
  ops = fn.body.ops
  pair = _scope_pairs(ops)
  gs, ls = launch_dims(fn)
  name = f"@{fn.sym_name}"
  for op in ops:
    if op.name == 'uop.define_var' or op.name in WARP_OPS: raise TgcError(f"{name}: the interpreter does not support '{op.name}'")
  locals_ = {}  # define_local buffers are shared by the threads of a work-group; barriers need lockstep, so unsupported
  if any(op.name == 'uop.define_local' for op in ops) or (any(op.name == 'uop.barrier' for op in ops) and max(ls) > 1):
    raise TgcError(f"{name}: the interpreter does not support shared memory or barriers across threads (uop.define_local / uop.barrier)")
  for g in _points(gs):
    for l in _points(ls):
      _run_point(fn, ops, pair, bufs, {'gidx': g, 'lidx': l}, locals_, name)


def _points(sizes):
  """Every point of a grid, in order, one at a time (itertools.product would hold each axis's range as a tuple)."""
  for x in range(sizes[0]):
    for y in range(sizes[1]):
      for z in range(sizes[2]): yield (x, y, z)


def _run_point(fn, ops, pair, bufs, special, locals_, name):
  val: dict = {}     # Value -> numpy value
  # define_acc / phi result -> the define_acc (the mutable cell): static, so a phi of a loop that ran zero
  # times still reads the accumulator after its endrange
  acc = {op.results[0]: (op.results[0] if op.name == 'uop.define_acc' else op.acc) for op in ops if op.name in ('uop.define_acc', 'uop.phi')}
  cell: dict = {}    # define_acc Value -> current value
  ends: dict = {}    # range op index -> end value
  def get(v):
    a = acc.get(v)
    return cell[a] if a is not None else val[v]
  inits = acc_init_points(ops)
  pc, n = 0, len(ops)
  while pc < n:
    op = ops[pc]
    for a in inits.get(pc, ()): cell[a.results[0]] = np.array(get(a.init))
    nm = op.name[4:]
    if nm == 'define_global': val[op.results[0]] = bufs[op.attrs['index']]
    elif nm == 'special':
      ax = op.attrs['axis']
      val[op.results[0]] = np.asarray(special[ax[:4]][int(ax[4])]).astype(op.results[0].type.np)
    elif nm == 'const':
      t = op.results[0].type
      c = const_value(op.attrs['value'], elem(t))
      val[op.results[0]] = np.full(t.count, c) if isinstance(t, VecType) else np.asarray(c)
    elif nm == 'define_acc': pass  # initialised at its init point, above
    elif nm == 'phi': cell[op.acc] = np.array(get(op.value))
    elif nm == 'range':
      s, e = int(get(op.start)), int(get(op.end))
      if s >= e: pc = pair[pc] + 1; continue
      val[op.results[0]] = np.asarray(s).astype(op.results[0].type.np); ends[pc] = e
    elif nm == 'endrange':
      j = pair[pc]; r = ops[j].results[0]
      i = int(val[r]) + 1
      if i < ends[j]: val[r] = np.asarray(i).astype(r.type.np); pc = j + 1; continue
    elif nm == 'if':
      if not bool(get(op.cond)): pc = pair[pc] + 1; continue
    elif nm in ('endif', 'barrier'): pass
    elif nm in ('load', 'store') and op.gate is not None and isinstance(op.gate.type, VecType):
      # a vector gate: each lane on its own (read or written where its gate is true and it is inside the buffer)
      g, i = get(op.gate), int(get(op.idx))
      e = elem(op.results[0].type if nm == 'load' else op.value.type)
      if nm == 'load':
        out = np.array(get(op.alt))
        for l in range(len(g)):
          if g[l] and _inside(op, i + l, e): out[l] = _load(get(op.buf), i + l, e, f"{name}: 'uop.load'")
        val[op.results[0]] = out
      else:
        v = get(op.value)
        for l in range(len(g)):
          if g[l] and _inside(op, i + l, e): _store(get(op.buf), i + l, v[l], e, f"{name}: 'uop.store'")
    elif nm == 'load':
      t = op.results[0].type
      if (op.gate is not None and not bool(get(op.gate))) or not _inside(op, int(get(op.idx)), t):
        val[op.results[0]] = np.array(get(op.alt)) if op.alt is not None else _zero(t)
      else: val[op.results[0]] = _load(get(op.buf), int(get(op.idx)), t, f"{name}: 'uop.load'")
    elif nm == 'store':
      if (op.gate is None or bool(get(op.gate))) and _inside(op, int(get(op.idx)), op.value.type):
        _store(get(op.buf), int(get(op.idx)), get(op.value), op.value.type, f"{name}: 'uop.store'")
    elif nm == 'vectorize': val[op.results[0]] = np.array([get(s) for s in op.srcs])
    elif nm == 'gep': val[op.results[0]] = np.asarray(get(op.vec)[op.attrs['index']])
    elif nm == 'cast': val[op.results[0]] = np.asarray(alu.exec_cast(get(op.src), elem(op.src.type), elem(op.results[0].type)))
    elif nm == 'bitcast': val[op.results[0]] = np.asarray(alu.exec_bitcast(get(op.src), elem(op.src.type), elem(op.results[0].type)))
    elif nm in alu.COMPARE: val[op.results[0]] = np.asarray(alu.exec_alu(nm, elem(op.operands[0].type), *map(get, op.operands)))
    elif nm in alu.UNARY or nm in alu.BINARY or nm in alu.TERNARY:
      try: val[op.results[0]] = np.asarray(alu.exec_alu(nm, elem(op.results[0].type), *map(get, op.operands)))
      except ValueError as e: raise TgcError(f"{name}: {e}") from None
    else: raise TgcError(f"{name}: the interpreter does not support '{op.name}'")
    pc += 1


class InterpProgram(Program):
  """A uop.func run by the interpreter; launch(arrays) runs it over host buffers (viewed in its dtypes)."""
  def launch(self, args) -> None:
    run_uop_func(self.fn, [a.view(dt.np) for a, dt in zip(args, self.signature)])
    self.device.launches += 1


class InterpDevice(HostDevice):
  """The interpreter as a device: host memory; `compile(fn)` gives a Program that the interpreter runs."""
  name, target = 'INTERP', 'llvm'
  def __init__(self): super().__init__(); self.launches = 0
  def compile(self, fn) -> InterpProgram: return InterpProgram(self, fn)
