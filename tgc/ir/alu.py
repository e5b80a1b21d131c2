"""The meaning of every ALU op, on numpy arrays: the one semantic oracle.

Constant folding, the reference interpreter and the tests all call `exec_alu`, so an op means the same
thing everywhere. Values are numpy arrays in the dtype's compute type (bf16 and the f8 types compute as rounded float32).
Integer semantics are C's with the holes closed: division by zero gives 0, a shift by the bit width or
more gives 0, signed overflow wraps.
"""
from __future__ import annotations
from tgc.ir import dtypes as D
from tgc.ir.dtypes import DType

UNARY = ('neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip', 'trunc', 'not')
BINARY = ('add', 'sub', 'mul', 'fdiv', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr')
COMPARE = ('cmplt', 'cmpne', 'cmpeq')
TERNARY = ('where', 'mulacc')
COMMUTATIVE = frozenset(('add', 'mul', 'max', 'min', 'and', 'or', 'xor', 'cmpne', 'cmpeq'))
REDUCE_KINDS = ('add', 'max', 'mul')
# a scan's kinds: the reduces', and log(exp(a) + exp(b)) of floats (logcumsumexp's running value)
SCAN_KINDS = REDUCE_KINDS + ('logaddexp',)


def _int_div(a, b, dt: DType):
  import numpy as np  # on first use: parsing IR must not import numpy
  a64, b64 = a.astype(np.int64) if dt.is_signed else a.astype(np.uint64), b.astype(np.int64) if dt.is_signed else b.astype(np.uint64)
  safe = np.where(b64 == 0, 1, b64)
  if dt.is_signed and dt.itemsize == 8:  # |INT64_MIN| does not fit int64: exact Python ints
    ao, so = a64.astype(object), safe.astype(object)
    q = np.asarray(np.frompyfunc(lambda x, y: abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1), 2, 1)(ao, so), dtype=object)  # (a 0-d call gives a bare int)
    return q, so, ao
  if dt.is_signed:
    q = np.abs(a64) // np.abs(safe)  # truncate toward zero
    q = np.where((a64 < 0) != (safe < 0), -q, q)
  else: q = a64 // safe
  return q, safe, a64

def _wrap(x, dt: DType):
  import numpy as np  # on first use: parsing IR must not import numpy
  x = np.asarray(x)
  if x.dtype == object and dt.is_int:  # exact Python ints (int64 division): wrap to the dtype's width
    m = 1 << dt.bits
    wrap = (lambda v: (int(v) + m // 2) % m - m // 2) if dt.is_signed else (lambda v: int(v) % m)
    return np.asarray(np.frompyfunc(wrap, 1, 1)(x), dtype=object).astype(dt.np)
  with np.errstate(over='ignore'):
    return np.asarray(x).astype(dt.np) if dt.is_int else np.asarray(x)

def exec_alu(op: str, dt: DType, *src):
  """Evaluate `op` producing dtype `dt` (for compares `dt` is the operands' dtype; the result is bool)."""
  r = _exec_alu(op, dt, *src)
  return D.narrow(r, dt) if dt.width and op not in COMPARE else r  # a sub-byte int wraps to its bits

def _exec_alu(op: str, dt: DType, *src):
  import numpy as np  # on first use: parsing IR must not import numpy
  src = [np.asarray(s) for s in src]
  with np.errstate(all='ignore'):
    if op in COMPARE:
      a, b = src
      return {'cmplt': np.less, 'cmpne': np.not_equal, 'cmpeq': np.equal}[op](a, b)
    if op == 'where':
      c, x, y = src
      return np.where(c, x, y).astype(D.compute_np(dt))
    if dt.is_float:
      cdt = D.compute_np(dt)
      src = [s.astype(cdt) for s in src]
      if op == 'mulacc': r = src[0] * src[1] + src[2]
      elif op == 'neg': r = -src[0]
      elif op == 'exp2': r = np.exp2(src[0])
      elif op == 'log2': r = np.log2(src[0])
      elif op == 'sin': r = np.sin(src[0])
      elif op == 'sqrt': r = np.sqrt(src[0])
      elif op == 'recip': r = np.divide(cdt.type(1), src[0])
      elif op == 'trunc': r = np.trunc(src[0])
      elif op == 'add': r = src[0] + src[1]
      elif op == 'sub': r = src[0] - src[1]
      elif op == 'mul': r = src[0] * src[1]
      elif op == 'fdiv': r = np.divide(src[0], src[1])
      # a if (a >= b, or a <= b for min, or a is NaN) else b, as every emitter selects: numpy's maximum and minimum
      # take b on ties where they run on AVX-512 (max(-0.0, 0.0) is 0.0 there, -0.0 elsewhere)
      elif op in ('max', 'min'):
        a, b = np.broadcast_arrays(src[0], src[1])
        r = np.where(((a >= b) if op == 'max' else (a <= b)) | np.isnan(a), a, b)
      elif op == 'mod': r = np.fmod(src[0], src[1])
      elif op == 'idiv': r = np.trunc(np.divide(src[0], src[1]))
      else: raise ValueError(f"'{op}' is not defined on {dt}")
      return D.round_to(r, dt).astype(cdt)
    # bool and integers
    if dt.is_bool:
      a = [s.astype(np.bool_) for s in src]
      if op == 'not': return ~a[0]
      if op in ('and', 'min', 'mul'): return a[0] & a[1]
      if op in ('or', 'max', 'add'): return a[0] | a[1]
      if op in ('xor', 'sub', 'cmpne'): return a[0] ^ a[1]
      if op == 'mulacc': return (a[0] & a[1]) | a[2]
      raise ValueError(f"'{op}' is not defined on {dt}")
    src = [s.astype(dt.np) for s in src]
    a = src[0]
    if op == 'neg': return _wrap(-a.astype(np.int64) if dt.is_signed else (0 - a.astype(np.uint64)), dt)
    if op == 'not': return ~a
    if op in ('exp2', 'log2', 'sin', 'sqrt', 'recip', 'fdiv'): raise ValueError(f"'{op}' is not defined on {dt}")
    if op == 'trunc': return a
    if op == 'mulacc': return _wrap(src[0].astype(np.int64) * src[1].astype(np.int64) + src[2].astype(np.int64), dt) if dt.is_signed \
      else _wrap(src[0].astype(np.uint64) * src[1].astype(np.uint64) + src[2].astype(np.uint64), dt)
    b = src[1]
    if op in ('add', 'sub', 'mul'):
      f = {'add': np.add, 'sub': np.subtract, 'mul': np.multiply}[op]
      return f(a, b).astype(dt.np)  # numpy wraps in the same dtype
    if op == 'max': return np.maximum(a, b)
    if op == 'min': return np.minimum(a, b)
    if op == 'and': return a & b
    if op == 'or': return a | b
    if op == 'xor': return a ^ b
    if op in ('idiv', 'mod'):
      q, safe, a64 = _int_div(a, b, dt)
      r = q if op == 'idiv' else a64 - q * safe
      return _wrap(np.where(b == 0, 0, r), dt)
    if op in ('shl', 'shr'):
      sh = b.astype(np.int64) if dt.is_signed else b.astype(np.uint64)
      ok = (sh >= 0) & (sh < dt.bits)
      s = np.where(ok, sh, 0).astype(dt.np)
      r = np.left_shift(a, s) if op == 'shl' else np.right_shift(a, s)  # numpy: arithmetic for signed, logical for unsigned
      return np.where(ok, r, 0).astype(dt.np)
  raise ValueError(f"unknown ALU op '{op}'")

def exec_cast(x, src: DType, dst: DType):
  """numpy's astype, float to int truncating; NaN/inf/out of range to int is 0-defined as numpy leaves it."""
  import numpy as np  # on first use: parsing IR must not import numpy
  x = np.asarray(x)
  with np.errstate(all='ignore'):
    if dst.is_bool: return x != 0
    if dst.is_float: return D.round_to(x.astype(np.float64) if src.is_int else x, dst).astype(D.compute_np(dst))
    if src.is_float:
      t = np.trunc(x.astype(np.float64))
      lo, hi = D.min_max(dst)
      ok = np.isfinite(t) & (t >= lo) & (t <= hi)
      # out of range: wrap through int64 like C compilers do for in-range-of-i64 values, else 0
      big = np.isfinite(t) & (np.abs(t) < 2.0**63)
      v = np.where(ok | big, t, 0).astype(np.int64)
      return D.to_storage(v, dst)
    return D.to_storage(x, dst)

def exec_bitcast(x, src: DType, dst: DType):
  import numpy as np  # on first use: parsing IR must not import numpy
  x = np.asarray(x)
  out = np.ascontiguousarray(D.to_storage(x, src)).view(dst.np).reshape(x.shape)  # ascontiguousarray makes 0-d 1-d
  return D.from_storage(out, dst)

def reduce_identity(kind: str, dt: DType):
  if kind == 'add': return 0
  if kind == 'mul': return 1
  lo, _ = D.min_max(dt)
  return lo
