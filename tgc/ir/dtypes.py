"""Element types: the scalar dtypes every level of the IR shares."""
from __future__ import annotations
from dataclasses import dataclass
import functools


@dataclass(eq=False)
class DType:
  name: str        # textual name in the IR: i32, f16, ...
  itemsize: int    # bytes
  kind: str        # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  np_name: str     # numpy dtype used to store it (bf16 is stored as its uint16 bits)
  api: str         # tinygrad-style name: int32, float16, ...

  @functools.cached_property
  def np(self):  # numpy is imported on first use only: tgc-opt starts without it
    import numpy
    return numpy.dtype(self.np_name)

  @property
  def bits(self) -> int: return 1 if self.kind == 'b' else self.itemsize * 8
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
        DType('f16', 2, 'f', 'float16', 'float16'), DType('bf16', 2, 'f', 'uint16', 'bfloat16'),
        DType('f32', 4, 'f', 'float32', 'float32'), DType('f64', 8, 'f', 'float64', 'float64')]
BY_NAME: dict[str, DType] = {d.name: d for d in _ALL}
BY_API: dict[str, DType] = {d.api: d for d in _ALL}
BY_API.update(half=BY_NAME['f16'], float=BY_NAME['f32'], double=BY_NAME['f64'], int=BY_NAME['i32'], long=BY_NAME['i64'],
              uchar=BY_NAME['u8'], char=BY_NAME['i8'], short=BY_NAME['i16'], ushort=BY_NAME['u16'], uint=BY_NAME['u32'], ulong=BY_NAME['u64'])

def get(name: str) -> DType: return BY_NAME[name]

bool_, i8, i16, i32, i64 = (BY_NAME[n] for n in ('i1', 'i8', 'i16', 'i32', 'i64'))
u8, u16, u32, u64 = (BY_NAME[n] for n in ('u8', 'u16', 'u32', 'u64'))
f16, bf16, f32, f64 = (BY_NAME[n] for n in ('f16', 'bf16', 'f32', 'f64'))

def from_numpy(dt) -> DType:
  import numpy as np
  dt = np.dtype(dt)
  for d in _ALL:
    if d.np == dt and d is not bf16: return d
  raise KeyError(f"no tgc dtype for numpy dtype {dt}")

def compute_np(dt: DType):
  """The numpy dtype arithmetic is done in: bf16 computes in float32 and rounds back."""
  import numpy as np
  return np.dtype(np.float32) if dt is bf16 else dt.np

def min_max(dt: DType):
  """The smallest and largest values of a dtype (without numpy: the verifier calls it while parsing)."""
  if dt.is_bool: return 0, 1
  if dt.is_int:
    b = dt.bits
    return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if dt.is_signed else (0, (1 << b) - 1)
  return -float('inf'), float('inf')

# ---- bfloat16 storage: the top 16 bits of a float32, rounded to nearest even ----
def f32_to_bf16_bits(x):
  import numpy as np
  b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
  nan = np.isnan(np.asarray(x, dtype=np.float32))
  r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)

def bf16_bits_to_f32(b):
  import numpy as np
  return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

def round_to(x, dt: DType):
  """Round a computed value (numpy array/scalar) to what `dt` can hold, in its compute dtype."""
  if dt is bf16: return bf16_bits_to_f32(f32_to_bf16_bits(x))
  import numpy as np
  return np.asarray(x).astype(dt.np)
