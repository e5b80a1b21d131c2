"""canonicalize: constant folding, algebraic identities and movement-op folding, on every dialect.

Folding evaluates through tgc.ir.alu, the semantic oracle, so a folded value is exactly what the
kernel would have computed (the dtype's wrap-around and rounding included).
"""
from __future__ import annotations
import math
from tgc.ir import alu, dtypes as D
from tgc.ir.core import REGISTRY, CONSTANT, ELEMENTWISE, Operation
from tgc.ir.types import TensorType, elem
from tgc.ir.attrs import HexInt
from tgc.ir.rewrite import PatternMatcher, apply_patterns, const_value
from tgc.passes.manager import Pass

DENSE_LIMIT = 4096  # fold into a dense constant only up to this many elements


def to_array(v, t):
  """A stored constant -> numpy array (scalar or shaped) in the compute dtype of `t`."""
  import numpy as np
  dt = elem(t)
  def scalar(x):
    if isinstance(x, HexInt) and dt.is_float:  # the bit pattern, as a Python float (bitcast gives a 1-element array)
      ut = D.BY_NAME[f'u{dt.bits}']
      r = alu.exec_bitcast(np.array(int(x), dtype=ut.np), ut, dt)
      return float(np.asarray(r).reshape(-1)[0])
    return x
  if isinstance(v, tuple):
    flat = _flatten(v)
    arr = np.array([scalar(x) for x in flat], dtype=object)
    shape = t.shape if isinstance(t, TensorType) else (len(flat),)
    return _cast_in(arr, dt).reshape(shape)
  return _cast_in(np.array(scalar(v), dtype=object), dt)

def _cast_in(arr, dt):
  import numpy as np
  if dt.is_bool: return arr.astype(np.bool_)
  if dt.is_float: return D.round_to(arr.astype(np.float64), dt).astype(D.compute_np(dt))
  return np.array([int(x) for x in arr.reshape(-1)], dtype=object).astype(np.int64 if dt.is_signed else np.uint64).astype(dt.np).reshape(arr.shape)

def _flatten(v):
  out, stack = [], [v]
  while stack:
    x = stack.pop()
    if isinstance(x, tuple): stack.extend(reversed(x))
    else: out.append(x)
  return out

def from_array(arr, dt):
  """numpy result -> stored constant (a Python scalar, or nested tuples)."""
  import numpy as np
  def conv(x):
    if dt.is_float: return float(x)
    return int(x)
  arr = np.asarray(arr)
  if arr.ndim == 0: return conv(arr[()])
  return _nest(arr, conv)

def _nest(arr, conv):
  if arr.ndim == 1: return tuple(conv(x) for x in arr)
  return tuple(_nest(a, conv) for a in arr)


def make_const(rw, op: Operation, value, t):
  return rw.create(REGISTRY[f"{op.dialect}.const"], [], [t], {'value': value}, op.loc).results[0]

def _is_splat(v): return v is not None and not isinstance(v, tuple)

def _folds(t) -> bool:
  """Constants of this type can be made: tensors (splat or small dense) and scalars, not vectors."""
  return isinstance(t, TensorType) or isinstance(t, D.DType)


def fold_alu(op, rw):
  name = getattr(op, 'opname', None)
  if name is None: return None
  consts = [const_value(v) for v in op.operands]
  if any(c is None for c in consts): return None
  rt = op.results[0].type
  if not _folds(rt) or not all(_folds(v.type) for v in op.operands): return None
  all_splat = all(_is_splat(c) for c in consts)
  if not all_splat and isinstance(rt, TensorType) and rt.numel > DENSE_LIMIT: return None
  try:
    args = [to_array(c, v.type) for c, v in zip(consts, op.operands)]
    if not all_splat and isinstance(rt, TensorType):
      import numpy as np
      args = [np.broadcast_to(a, rt.shape) for a in args]
    src_dt = elem(op.operands[0].type)
    if name == 'cast': r = alu.exec_cast(args[0], src_dt, elem(rt))
    elif name == 'bitcast': r = alu.exec_bitcast(args[0], src_dt, elem(rt))
    elif name in alu.COMPARE: r = alu.exec_alu(name, src_dt, *args)
    else: r = alu.exec_alu(name, elem(rt), *args)
  except (ValueError, TypeError, OverflowError): return None
  rw.stats['ops folded'] += 1
  return make_const(rw, op, from_array(r, elem(rt)), rt)


def _c(v):
  """The splat constant of a value as a Python number, or None."""
  c = const_value(v)
  if not _is_splat(c): return None
  if isinstance(c, HexInt) and elem(v.type).is_float: return None
  return c

def identities(op, rw):
  name, ops = op.opname, op.operands
  t = op.results[0].type
  dt = elem(t)
  if name in ('add', 'or', 'xor', 'sub', 'shl', 'shr') and _c(ops[1]) == 0 and ops[0].type == t: return ops[0]
  if name in ('add', 'or', 'xor') and _c(ops[0]) == 0 and ops[1].type == t: return ops[1]
  if name == 'mul' and _c(ops[1]) == 1: return ops[0]
  if name == 'mul' and _c(ops[0]) == 1: return ops[1]
  if name in ('idiv', 'fdiv') and _c(ops[1]) == 1: return ops[0]
  if name == 'mul' and not dt.is_float and (_c(ops[0]) == 0 or _c(ops[1]) == 0) and _folds(t):
    return make_const(rw, op, 0, t)
  if name == 'mod' and not dt.is_float and _c(ops[1]) == 1 and _folds(t): return make_const(rw, op, 0, t)
  if name in ('max', 'min', 'and', 'or') and ops[0] is ops[1]: return ops[0]
  if name == 'where':
    if ops[1] is ops[2]: return ops[1]
    c = _c(ops[0])
    if c is not None: return ops[1] if c else ops[2]
  if name in ('neg', 'not') and ops[0].op is not None and getattr(ops[0].op, 'opname', None) == name: return ops[0].op.operands[0]
  if name in ('cast', 'bitcast') and ops[0].type == t: return ops[0]
  if name == 'cast' and getattr(ops[0].op, 'opname', None) == 'cast' and (x := ops[0].op.operands[0]).type == t and lossless(x.type, ops[0].type):
    return x  # (a float cast up and back: a half-precision product's f32 result rounded to its inputs' type)
  return None


def lossless(a, b) -> bool:
  """Whether a cast from type a to b keeps every value: a float to f32 or f64 of more bytes."""
  a, b = elem(a), elem(b)
  return a.is_float and b.is_float and b.itemsize >= 4 and b.itemsize > a.itemsize

# ---- movement ops of the tensor dialect ----
def _create(rw, name, src, t, attrs, loc):
  return rw.create(REGISTRY[name], [src], [t], attrs, loc).results[0]

def fold_movement(op, rw):
  src, t = op.operands[0], op.results[0].type
  if src.type == t and op.name in ('tensor.reshape', 'tensor.expand'): return src
  if op.name == 'tensor.permute' and tuple(op.order) == tuple(range(len(op.order))): return src
  if op.name == 'tensor.pad' and all(a == b == 0 for a, b in op.pads): return src
  if op.name == 'tensor.shrink' and all(lo == 0 and hi == s for (lo, hi), s in zip(op.bounds, src.type.shape)): return src
  if op.name == 'tensor.flip' and all(src.type.shape[a] == 1 for a in op.axes): return src
  c = const_value(src)
  if _is_splat(c) and op.name != 'tensor.pad': return make_const(rw, op, c, t)  # expand/reshape/... of a splat
  inner = src.op
  if inner is None: return None
  if op.name == 'tensor.reshape' and inner.name == 'tensor.reshape':
    return _create(rw, 'tensor.reshape', inner.operands[0], t, None, op.loc)
  if op.name == 'tensor.permute' and inner.name == 'tensor.permute':
    order = tuple(inner.order[i] for i in op.order)
    return _create(rw, 'tensor.permute', inner.operands[0], t, {'order': order}, op.loc)
  if op.name == 'tensor.expand' and inner.name == 'tensor.expand':
    return _create(rw, 'tensor.expand', inner.operands[0], t, None, op.loc)
  if op.name == 'tensor.flip' and inner.name == 'tensor.flip':
    axes = tuple(sorted(set(op.axes) ^ set(inner.axes)))
    return inner.operands[0] if not axes else _create(rw, 'tensor.flip', inner.operands[0], t, {'axes': axes}, op.loc)
  return None

def fold_reduce(op, rw):
  src, t = op.operands[0], op.results[0].type
  shape = src.type.shape if isinstance(src.type, TensorType) else None
  if shape is not None and all(shape[a] == 1 for a in op.axes): return src if src.type == t else None
  if shape is not None and any(shape[a] == 0 for a in op.axes) and isinstance(t, TensorType) and _folds(t):
    # a reduce over an empty axis is its identity (a matmul of an empty contracted axis: zeros), never a loop of none
    dt = t.dtype
    ident = {'add': 0, 'mul': 1}.get(op.kind, -math.inf if dt.is_float else False if dt.is_bool else dt.min)
    return make_const(rw, op, ident, t)
  c = const_value(src)
  if op.kind == 'max' and _is_splat(c) and isinstance(t, TensorType): return make_const(rw, op, c, t)
  return None


def fold_matmul(op, rw):
  """A product with a splat factor c (the gradient of a sum: ones) is c times the other factor's sums along the
  contracted axis, broadcast: a reduce, where the product would read the constant as a matrix (no tensor cores, and
  the sums computed once an output column). Only where that is exact: c zero or a power of two (a float's), any
  integer."""
  a, b = op.operands
  t = op.results[0].type
  for i, (x, other) in enumerate(((b, a), (a, b))):
    c = _c(x)
    if c is None or not isinstance(t, TensorType) or other.type.dtype != t.dtype or t.dtype.is_bool: continue
    if t.dtype.is_float and c != 0 and (not math.isfinite(c) or math.frexp(c)[0] not in (0.5, -0.5)): continue
    axis = other.type.rank - 1 if i == 0 else other.type.rank - 2
    rshape = tuple(1 if j == axis else n for j, n in enumerate(other.type.shape))
    s = rw.create(REGISTRY['tensor.reduce'], [other], [TensorType(rshape, t.dtype)], {'kind': 'add', 'axes': (axis,)}, op.loc).results[0]
    if c != 1: s = rw.create(REGISTRY['tensor.mul'], [s, make_const(rw, op, c, s.type)], [s.type], None, op.loc).results[0]
    rw.stats['products of a constant folded'] += 1
    return _create(rw, 'tensor.expand', s, t, None, op.loc)
  return None


ALU_NAMES = [f"{d}.{n}" for d in ('tensor', 'kernel', 'uop') for n in alu.UNARY + alu.BINARY + alu.COMPARE + alu.TERNARY + ('cast', 'bitcast')]
MOVEMENT = ('tensor.reshape', 'tensor.expand', 'tensor.permute', 'tensor.pad', 'tensor.shrink', 'tensor.flip')

canonical_patterns = PatternMatcher([
  (tuple(ALU_NAMES), fold_alu),
  (tuple(ALU_NAMES), identities),
  (MOVEMENT, fold_movement),
  ('tensor.reduce', fold_reduce),
  ('tensor.matmul', fold_matmul),
])


class Canonicalize(Pass):
  name = 'canonicalize'
  summary = 'fold constants, apply algebraic identities, fold movement ops'
  def run(self, m):
    from tgc.passes.dce import remove_dead
    apply_patterns(m, canonical_patterns, stats=self.stats)
    remove_dead(m, self.stats)
