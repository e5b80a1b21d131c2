"""Element types: the scalar dtypes every level of the IR shares."""
from __future__ import annotations
from dataclasses import dataclass
import functools


@dataclass(frozen=True)
class FloatFormat:
  """A float format tgc emulates: stored as its bits, computed in float32, every result rounded back (to nearest
  even, from float32). One description drives the numpy oracle below and every emitter's conversions.
  kind: 'ieee' (the top exponent is inf/NaN), 'fn' (no inf; S.1111.111 is NaN) or 'fnuz' (no inf, no -0; 0x80 is
  NaN). saturate: out-of-range values and inf round to the largest finite value (ONNX Cast's default, CUDA's
  satfinite, tinygrad's fp8), else they overflow to inf. NaN becomes nan_code whatever its sign and payload."""
  exp: int
  man: int
  bias: int
  kind: str
  saturate: bool
  nan_code: int

  @property
  def bits(self) -> int: return 1 + self.exp + self.man
  @property
  def wide(self) -> bool:  # float32's exponent range: the top bits of a float32 (bf16), no subnormal or overflow cases
    return self.exp == 8
  @property
  def max_code(self) -> int:  # the largest finite magnitude's bits
    top = (1 << (self.exp + self.man)) - 1
    return top - (1 << self.man) if self.kind == 'ieee' else top - 1 if self.kind == 'fn' else top
  @property
  def max(self) -> float:
    e, m = self.max_code >> self.man, self.max_code & ((1 << self.man) - 1)
    return (1 + m / (1 << self.man)) * 2.0 ** (e - self.bias)
  @property
  def inf_code(self): return ((1 << self.exp) - 1) << self.man if self.kind == 'ieee' else None
  # the encoder's constants, as float32 bits: the smallest normal, and the magic number whose float32 ulp is the
  # smallest subnormal (adding it rounds a subnormal to its code, to nearest even)
  @property
  def min_normal_bits(self) -> int: return (128 - self.bias) << 23
  @property
  def magic_bits(self) -> int: return (151 - self.bias - self.man) << 23


@dataclass(eq=False)
class DType:
  name: str        # textual name in the IR: i32, f16, ...
  itemsize: int    # bytes
  kind: str        # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  np_name: str     # numpy dtype used to store it (bf16 and the f8 types are stored as their bits)
  api: str         # tinygrad-style name: int32, float16, ...
  fmt: FloatFormat | None = None  # an emulated float: stored as these bits, computed in float32
  width: int = 0   # a sub-byte int (ONNX's INT4/INT2...): its value bits, stored one per byte, every result wrapped to them

  @functools.cached_property
  def np(self):  # numpy is imported on first use only: tgc-opt starts without it
    import numpy
    return numpy.dtype(self.np_name)

  @property
  def bits(self) -> int: return 1 if self.kind == 'b' else self.width or self.itemsize * 8
  @property
  def is_float(self) -> bool: return self.kind == 'f'
  @property
  def is_int(self) -> bool: return self.kind in 'iu'
  @property
  def is_signed(self) -> bool: return self.kind == 'i'
  @property
  def is_bool(self) -> bool: return self.kind == 'b'
  @property
  def min(self): return min_max(self)[0]  # tinygrad's dtypes.int.min
  @property
  def max(self): return min_max(self)[1]
  def __repr__(self): return f"dtypes.{self.api}"
  def __str__(self): return self.name
  def __reduce__(self): return (get, (self.name,))


_ALL = [DType('i1', 1, 'b', 'bool', 'bool'),
        DType('i8', 1, 'i', 'int8', 'int8'), DType('i16', 2, 'i', 'int16', 'int16'),
        DType('i32', 4, 'i', 'int32', 'int32'), DType('i64', 8, 'i', 'int64', 'int64'),
        DType('u8', 1, 'u', 'uint8', 'uint8'), DType('u16', 2, 'u', 'uint16', 'uint16'),
        DType('u32', 4, 'u', 'uint32', 'uint32'), DType('u64', 8, 'u', 'uint64', 'uint64'),
        DType('f16', 2, 'f', 'float16', 'float16'), DType('bf16', 2, 'f', 'uint16', 'bfloat16', FloatFormat(8, 7, 127, 'ieee', False, 0x7FC0)),
        DType('f32', 4, 'f', 'float32', 'float32'), DType('f64', 8, 'f', 'float64', 'float64'),
        # ONNX's FLOAT8E4M3FN/FLOAT8E5M2 (tinygrad's fp8e4m3/fp8e5m2) and the FNUZ variants (AMD's): ml_dtypes' bits
        DType('f8e4m3', 1, 'f', 'uint8', 'fp8e4m3', FloatFormat(4, 3, 7, 'fn', True, 0x7F)),
        DType('f8e5m2', 1, 'f', 'uint8', 'fp8e5m2', FloatFormat(5, 2, 15, 'ieee', True, 0x7E)),
        DType('f8e4m3fnuz', 1, 'f', 'uint8', 'fp8e4m3fnuz', FloatFormat(4, 3, 8, 'fnuz', True, 0x80)),
        DType('f8e5m2fnuz', 1, 'f', 'uint8', 'fp8e5m2fnuz', FloatFormat(5, 2, 16, 'fnuz', True, 0x80)),
        DType('i4', 1, 'i', 'int8', 'int4', width=4), DType('u4', 1, 'u', 'uint8', 'uint4', width=4),
        DType('i2', 1, 'i', 'int8', 'int2', width=2), DType('u2', 1, 'u', 'uint8', 'uint2', width=2)]
BY_NAME: dict[str, DType] = {d.name: d for d in _ALL}
BY_API: dict[str, DType] = {d.api: d for d in _ALL}
BY_API.update(half=BY_NAME['f16'], float=BY_NAME['f32'], double=BY_NAME['f64'], int=BY_NAME['i32'], long=BY_NAME['i64'],
              uchar=BY_NAME['u8'], char=BY_NAME['i8'], short=BY_NAME['i16'], ushort=BY_NAME['u16'], uint=BY_NAME['u32'], ulong=BY_NAME['u64'])

def get(name: str) -> DType: return BY_NAME[name]

bool_, i8, i16, i32, i64 = (BY_NAME[n] for n in ('i1', 'i8', 'i16', 'i32', 'i64'))
u8, u16, u32, u64 = (BY_NAME[n] for n in ('u8', 'u16', 'u32', 'u64'))
f16, bf16, f32, f64 = (BY_NAME[n] for n in ('f16', 'bf16', 'f32', 'f64'))
f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz = (BY_NAME[n] for n in ('f8e4m3', 'f8e5m2', 'f8e4m3fnuz', 'f8e5m2fnuz'))
i4, u4, i2, u2 = (BY_NAME[n] for n in ('i4', 'u4', 'i2', 'u2'))
EMULATED = tuple(d for d in _ALL if d.fmt)

def from_numpy(dt) -> DType:
  import numpy as np
  dt = np.dtype(dt)
  for d in _ALL:
    if d.np == dt and not d.fmt and not d.width: return d
  raise KeyError(f"no tgc dtype for numpy dtype {dt}")

def compute_np(dt: DType):
  """The numpy dtype arithmetic is done in: bf16 and the f8 types compute in float32 and round back."""
  import numpy as np
  return np.dtype(np.float32) if dt.fmt else dt.np

def min_max(dt: DType):
  """The smallest and largest values of a dtype (without numpy: the verifier calls it while parsing)."""
  if dt.is_bool: return 0, 1
  if dt.is_int:
    b = dt.bits
    return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if dt.is_signed else (0, (1 << b) - 1)
  return -float('inf'), float('inf')

# ---- emulated floats: float32 <-> their bits (what every emitter's conversions compute, step for step) ----
def encode(x, f: FloatFormat):
  """float32 values -> the bits of format f, rounded to nearest even (saturating if f.saturate)."""
  import numpy as np
  x = np.asarray(x, dtype=np.float32)
  u = x.view(np.uint32).astype(np.uint32)
  ut = np.uint16 if f.bits == 16 else np.uint8
  nan = np.isnan(x)
  if f.wide: r = (u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16  # bf16: float32's top half, rounded
  else:
    a, s = u & np.uint32(0x7FFFFFFF), (u >> 24) & np.uint32(0x80)
    sh = 23 - f.man
    with np.errstate(over='ignore'):
      normal = (a - np.uint32((127 - f.bias) << 23) + np.uint32((1 << (sh - 1)) - 1) + ((a >> sh) & 1)) >> sh
    magic = np.uint32(f.magic_bits)
    sub = ((a.view(np.float32) + magic.view(np.float32)).view(np.uint32) - magic)
    r = np.where(a < f.min_normal_bits, sub, normal)
    assert f.saturate, "a narrow format that overflows to inf needs an overflow threshold"
    r = np.where(a >= np.float32(f.max).view(np.uint32), f.max_code, r)
    r = r | np.where((r == 0) & (f.kind == 'fnuz'), 0, s)  # fnuz has no -0
  return np.where(nan, f.nan_code, r).astype(ut)

def decode(b, f: FloatFormat):
  """The bits of format f -> float32 values (exact)."""
  import numpy as np
  b = np.asarray(b).astype(np.uint32)
  if f.wide: return (b << 16).view(np.float32)
  m, s = b & 0x7F, (b & 0x80) << 24
  sub = (m.astype(np.float32) * np.float32(2.0 ** (1 - f.bias - f.man))).view(np.uint32)
  r = np.where(m < (1 << f.man), sub, (m << (23 - f.man)) + ((127 - f.bias) << 23)).astype(np.uint32)
  if f.kind == 'ieee': r = np.where(m >= f.inf_code, np.where(m == f.inf_code, 0x7F800000, 0x7FC00000), r)
  if f.kind == 'fn': r = np.where(m == 0x7F, 0x7FC00000, r)
  r = (r | s).astype(np.uint32)
  if f.kind == 'fnuz': r = np.where(b == 0x80, 0x7FC00000, r).astype(np.uint32)
  return r.view(np.float32)

def narrow(x, dt: DType):
  """Integers wrapped to a sub-byte int's bits (two's complement), in its storage dtype."""
  import numpy as np
  m, h = (1 << dt.bits) - 1, 1 << (dt.bits - 1)
  x = np.asarray(x).astype(np.int64) & m
  return ((x ^ h) - h if dt.is_signed else x).astype(dt.np)

def to_storage(x, dt: DType):
  """Computed values -> what a buffer of dt holds (an emulated float's bits, a sub-byte int wrapped to its bits)."""
  import numpy as np
  with np.errstate(over='ignore'):
    return encode(x, dt.fmt) if dt.fmt else narrow(np.asarray(x).astype(dt.np), dt) if dt.width else np.asarray(x).astype(dt.np)

def from_storage(b, dt: DType):
  """What a buffer of dt holds -> values in dt's compute dtype (a bitcast's bits wrapped into a sub-byte int)."""
  return decode(b, dt.fmt) if dt.fmt else narrow(b, dt) if dt.width else b

def f32_to_bf16_bits(x): return encode(x, bf16.fmt)
def bf16_bits_to_f32(b): return decode(b, bf16.fmt)

def round_to(x, dt: DType):
  """Round a computed value (numpy array/scalar) to what `dt` can hold, in its compute dtype."""
  if dt.fmt: return decode(encode(x, dt.fmt), dt.fmt)
  import numpy as np
  return np.asarray(x).astype(dt.np)
