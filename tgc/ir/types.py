"""IR types: element types, tensor<...>, vec<...>, !kernel.buf<...> and !uop.ptr<...>.

Types are interned immutable values; `parse_type` maps their text to them through a cache, so the parser
turns a type token into an object with one dict lookup.
"""
from __future__ import annotations
from dataclasses import dataclass
import math, re
from tgc.ir import dtypes as D
from tgc.ir.dtypes import DType


@dataclass(frozen=True)
class TensorType:
  shape: tuple[int, ...]
  dtype: DType
  def __str__(self): return f"tensor<{''.join(f'{s}x' for s in self.shape)}{self.dtype.name}>"
  @property
  def numel(self) -> int: return math.prod(self.shape)
  @property
  def rank(self) -> int: return len(self.shape)
  def with_dtype(self, dt: DType) -> TensorType: return TensorType(self.shape, dt)

@dataclass(frozen=True)
class VecType:
  count: int
  dtype: DType
  def __str__(self): return f"vec<{self.count}x{self.dtype.name}>"

@dataclass(frozen=True)
class BufType:
  """A kernel's view of a device buffer: !kernel.buf<4x4xf32>."""
  shape: tuple[int, ...]
  dtype: DType
  def __str__(self): return f"!kernel.buf<{''.join(f'{s}x' for s in self.shape)}{self.dtype.name}>"
  @property
  def numel(self) -> int: return math.prod(self.shape)

@dataclass(frozen=True)
class PtrType:
  """A pointer into global (or work-group local) memory: !uop.ptr<f32> / !uop.ptr<f32, local>."""
  dtype: DType
  local: bool = False
  def __str__(self): return f"!uop.ptr<{self.dtype.name}{', local' if self.local else ''}>"

Type = DType | TensorType | VecType | BufType | PtrType

def elem(t) -> DType:
  """The element dtype of any type."""
  return t if isinstance(t, DType) else t.dtype

_ELT = '|'.join(sorted(D.BY_NAME, key=len, reverse=True))
_SHAPED = re.compile(rf'(tensor|vec|!kernel\.buf)<((?:\d+x)*)({_ELT})>$')
_PTR = re.compile(rf'!uop\.ptr<({_ELT})(\s*,\s*local)?>$')
_cache: dict[str, Type] = {}
MAX_LANES = 1024             # a vector is registers: no target has wider ones (and a pass may loop over its lanes)
MAX_ELEMENTS = 2 ** 31 - 1   # a tensor or buffer: kernels index elements with i32

def parse_type(text: str) -> Type:
  """Text of a type -> the type; ValueError with a reason when it is not one."""
  t = _cache.get(text)
  if t is not None: return t
  if text in D.BY_NAME: t = D.BY_NAME[text]
  elif m := _SHAPED.match(text):
    dims, dt = tuple(int(x) for x in m.group(2).split('x') if x), D.BY_NAME[m.group(3)]
    if m.group(1) == 'vec':
      if len(dims) != 1 or not 1 <= dims[0] <= MAX_LANES: raise ValueError(f"vector type '{text}' needs one size from 1 to {MAX_LANES}")
      t = VecType(dims[0], dt)
    else:
      if math.prod(dims) > MAX_ELEMENTS: raise ValueError(f"type '{text}' has more than {MAX_ELEMENTS} elements (kernels index them with i32)")
      t = (TensorType if m.group(1) == 'tensor' else BufType)(dims, dt)
  elif m := _PTR.match(text): t = PtrType(D.BY_NAME[m.group(1)], bool(m.group(2)))
  else: raise ValueError(f"unknown type '{text}'")
  if len(_cache) < 100_000: _cache[text] = t
  return t
