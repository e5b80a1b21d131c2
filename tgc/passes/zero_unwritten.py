"""A result no kernel provably writes whole reads zeros where it was not written (hand-written uop.funcs).

A kernel.func's store covers its buffer by the kernel dialect's rule, so the uop.funcs lowered from kernel.funcs write
every element of what they store to. A uop.func given as it is may store part of a buffer (a gated or partial store):
the elements it leaves would hold whatever the allocator left, which differs between devices (the interpreter's
buffers start at zero, a GPU's do not). So before the first launch that writes a kernel.alloc through such a kernel
(uop_bounds.covered cannot prove that it writes every element) the host schedule launches a kernel that stores zeros
to all of it: every device, and the interpreter, then agree, as the tensor-level `empty` reads zeros.
"""
from __future__ import annotations
from tgc.ir.core import Block, Module, Operation, REGISTRY
from tgc.ir.attrs import Symbol
from tgc.ir.types import PtrType, TensorType
from tgc.ir import dtypes as D
from tgc.dialects.uop_bounds import covered
from tgc.dialects.builtin import written_args

U = lambda n: REGISTRY[f'uop.{n}']
GRID_X = 1 << 16  # threads per row of the fill's grid (a larger buffer takes rows on gidx1)


def zero_unwritten(m: Module, host: Operation, given: set) -> None:
  """Launch a zero fill before each launch of a uop.func named in `given` (the uop.funcs the module came with) that
  is the first to write a kernel.alloc and does not provably write all of it."""
  base, written, proven = {}, set(), {}
  ops = []
  for op in host.body.ops:
    if op.name == 'kernel.alloc': base[op.results[0]] = op.results[0]
    elif op.name in ('kernel.reshape', 'tensor.reshape') and op.operands and op.operands[0] in base: base[op.results[0]] = base[op.operands[0]]
    elif op.name == 'kernel.launch' and (k := m.lookup(op.attrs['callee'])) is not None and k.name == 'uop.func':
      stores = written_args(k)
      fresh = {i: op.operands[i] for i in sorted(stores) if i < len(op.operands) and base.get(op.operands[i]) is not None and base[op.operands[i]] not in written}
      if k.attrs['sym_name'] in given and fresh:
        sizes = {i: v.type.numel for i, v in fresh.items()}
        key = (k.attrs['sym_name'], tuple(sorted(sizes.items())))
        if key not in proven: proven[key] = covered(k, sizes)
        for i, v in fresh.items():
          if i not in proven[key]: ops.append(REGISTRY['kernel.launch']([v], [], {'callee': Symbol(_fill(m, v.type))}, op.loc))
      written |= {base[v] for v in fresh.values()}
    ops.append(op)
  host.body.ops[:] = ops


def _fill(m: Module, t: TensorType) -> str:
  """The name of a uop.func that stores zeros to all of a buffer of t's elements (made once per module)."""
  n, dt = t.numel, t.dtype
  name = f"zero_{dt.name}_{n}"
  if m.lookup(name) is not None: return name
  cols, it = min(n, GRID_X), D.i32 if n < 1 << 31 else D.i64
  rows = -(-n // cols)
  ops: list = []
  def emit(op_name, srcs, ty, attrs=None):
    op = U(op_name)(list(srcs), [ty] if ty is not None else [], attrs or {}); ops.append(op)
    return op.results[0] if op.results else None
  buf = emit('define_global', [], PtrType(dt), {'index': 0, 'size': n})
  idx = emit('special', [], it, {'axis': 'gidx0', 'size': cols})
  if rows > 1: idx = emit('add', [emit('mul', [emit('special', [], it, {'axis': 'gidx1', 'size': rows}), emit('const', [], it, {'value': cols})], it), idx], it)
  gate = emit('cmplt', [idx, emit('const', [], it, {'value': n})], D.bool_) if rows * cols != n else None
  zero = emit('const', [], dt, {'value': False if dt.is_bool else 0.0 if dt.is_float else 0})
  emit('store', [buf, idx, zero] + ([gate] if gate is not None else []), None)
  attrs = {'sym_name': Symbol(name), 'global_size': (cols, rows) if rows > 1 else (cols,), 'local_size': (1,)}
  at = next(i for i, f in enumerate(m.body.ops) if f.name == 'func.func')
  m.body.ops.insert(at, U('func')([], [], attrs, None, Block([], ops)))
  return name
