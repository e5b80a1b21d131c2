"""The rest of tinygrad's Tensor API, composed from the members of tgc/tensor.py (so from the tensor dialect's
primitives: everything here fuses; nothing computes on the host).

`Tensor` inherits `TensorAPI`. Selections by a tensor of indices (gather, fancy indexing, scatter, sort) are
one-hot compares reduced over the indexed axis, as tinygrad builds them: a gather kernel, not a host loop.
Only members whose output shape depends on the data (nonzero, masked_select) realize a count first.
"""
from __future__ import annotations
import math
import numpy as np
from tgc.errors import ShapeError, IndexingError, DTypeError, ArgumentError
from tgc.ir import dtypes as _D

_ASIN = (1.5707963050, -0.2145988016, 0.0889789874, -0.0501743046, 0.0308918810, -0.0170881256, 0.0066700901, -0.0012624911)
_ERF = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _poly(x, coeffs):
  r = x * 0 + coeffs[-1]
  for c in coeffs[-2::-1]: r = r * x + c
  return r


class TensorAPI:
  """Mixin of Tensor: members built from Tensor's own."""
  __slots__ = ()

  def _tensors(self, fn: str, *optional: str, **args) -> None:
    """The arguments named here must be Tensors (those named in `optional` may be None, left out): a DTypeError (a
    TypeError too) naming the method and the argument, not an AttributeError from inside it."""
    for name, v in args.items():
      if not isinstance(v, type(self)) and not (v is None and name in optional):
        raise DTypeError(f"{fn}: {name} must be a Tensor, got {type(v).__name__}")

  # ---- creation
  @classmethod
  def linspace(cls, start, stop, steps: int, dtype=None, device=None):
    if steps < 0: raise ShapeError(f"linspace needs steps >= 0, got {steps}")
    from tgc.tensor import to_dtype
    dt = to_dtype(dtype) if dtype is not None else _D.f32
    if dt.is_bool: raise ArgumentError("linspace cannot make a bool tensor")
    if steps == 1: return cls.full((1,), start, dtype=dt, device=device)
    return (cls.arange(steps, device=device).cast(_D.f32) * ((stop - start) / (steps - 1)) + start).cast(dt)

  @classmethod
  def normal(cls, *shape, mean=0.0, std=1.0, dtype=None, device=None, seed=None):
    return (cls.randn(*shape, device=device, seed=seed) * std + mean).cast(dtype or _D.f32)

  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, dtype=None, device=None, seed=None):
    bound = math.sqrt(3.0) * _kaiming_std(shape, a)
    return cls.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, seed=seed)

  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.01, dtype=None, device=None, seed=None):
    return cls.normal(*shape, mean=0.0, std=_kaiming_std(shape, a), dtype=dtype, device=device, seed=seed)

  @classmethod
  def glorot_uniform(cls, *shape, dtype=None, device=None, seed=None):
    dims = _dims(shape)
    bound = math.sqrt(6 / (dims[0] + math.prod(dims[1:]))) if dims and dims[0] + math.prod(dims[1:]) > 0 else 0.0
    return cls.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, seed=seed)

  @classmethod
  def scaled_uniform(cls, *shape, dtype=None, device=None, seed=None):
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    n = math.prod(_dims(shape))
    return cls.uniform(*shape, low=-1.0, high=1.0, dtype=dtype, device=device, seed=seed) * (n ** -0.5 if n > 0 else 1.0)

  def meshgrid(self, *tensors, indexing: str = 'ij'):
    """a.meshgrid(b, c) as tinygrad, or Tensor.meshgrid(a, b, c) / Tensor.meshgrid([a, b, c]) as torch."""
    if indexing not in ('ij', 'xy'): raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = list(self) + list(tensors) if isinstance(self, (tuple, list)) else [self, *tensors]
    if indexing == 'xy' and len(ts) >= 2: ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.numel() for t in ts)
    out = [t.reshape(tuple(-1 if i == j else 1 for j in range(len(ts)))).expand(shape) for i, t in enumerate(ts)]
    if indexing == 'xy' and len(ts) >= 2: out = [out[1], out[0], *out[2:]]
    return out

  def clone(self): return self.contiguous()

  # ---- unary math
  def log10(self): return self.log2() * math.log10(2)
  def sinh(self): return (self.exp() - (-self._float()).exp()) / 2
  def cosh(self): return (self.exp() + (-self._float()).exp()) / 2
  def asinh(self):
    x = self._float()
    return (x.abs() + (x * x + 1).sqrt()).log() * x.sign()
  def acosh(self):
    x = self._float()
    return (x + (x * x - 1).sqrt()).log()
  def atanh(self):
    x = self._float()
    return ((1 + x) / (1 - x)).log() / 2
  def asin(self):
    """Abramowitz and Stegun 4.4.46 (error < 2e-8 on [0, 1]), odd extension."""
    x = self._float()
    a = x.abs()
    return (math.pi / 2 - (1 - a).sqrt() * _poly(a, _ASIN)) * x.sign()
  def acos(self): return math.pi / 2 - self.asin()
  def atan(self):
    """Reduced to |x| <= 1 (atan(x) = pi/2 - atan(1/x)), then asin(x / sqrt(1 + x^2))."""
    x = self._float()
    big = x.abs() > 1
    r = big.where(x.reciprocal(), x)
    r = (r / (r * r + 1).sqrt()).asin()
    return big.where(x.sign() * (math.pi / 2) - r, r)
  def erf(self):
    """Abramowitz and Stegun 7.1.26 (error < 1.5e-7), odd extension. exp(-x^2) is taken at x^2 <= 20 at most: past
    |x| = 4.5 erf is 1 to a float32's precision either way, and the term stays a normal number (a denormal result costs
    a CPU a hundred times an ordinary one: GELU over large activations ran 20x slower)."""
    x = self._float()
    t = (1 + 0.3275911 * x.abs()).reciprocal()
    return (1 - _poly(t, _ERF) * t * (-(x * x).minimum(20.0)).exp()) * x.sign()

  # ---- activations
  def relu6(self): return self.relu().minimum(6)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5): return (alpha * self + beta).relu().minimum(1)
  def hardswish(self): return self * (self + 3).relu6() * (1 / 6)
  def softsign(self): return self / (1 + self.abs())
  def logsigmoid(self): return -(-self).softplus()
  def celu(self, alpha: float = 1.0): return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self, alpha: float = 1.67326, gamma: float = 1.0507):
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  def mish(self): return self * self.softplus().tanh()
  def quick_gelu(self): return self * (self * 1.702).sigmoid()
  def softmin(self, axis=-1): return (-self).softmax(axis)

  # ---- elementwise binary
  def copysign(self, other):
    a = self._float()
    o = other if isinstance(other, type(self)) else self._c(other, a.dtype)
    neg = (o < 0) | ((o == 0) & (o.reciprocal() < 0))  # -0.0 has a negative sign too
    return neg.where(-a.abs(), a.abs())
  def fmod(self, x):
    """C's fmod: the remainder has the sign of the dividend."""
    a, b = self._broadcasted(x)
    if a.dtype.is_float: return a - (a / b).trunc() * b
    return a._binop('mod', b)
  def lerp(self, end, weight):
    if self.dtype is _D.u8 and isinstance(weight, type(self)):
      # uint8 images stay uint8, as tinygrad's: the weight in 7-bit fixed point, the difference as int8, rounded
      w = (weight * 128 + 0.5).cast(_D.i16)
      d = ((end - self).cast(_D.i8) * w + 64).cast(_D.u16) >> 7
      return (self + d).cast(_D.u8)
    return self + (end - self) * weight
  def logaddexp(self, other):
    m = self.maximum(other)
    return m + ((self - m).exp() + (other - m).exp()).log()
  def bitwise_not(self):
    if self.dtype.is_float: raise DTypeError(f"bitwise_not needs an integer or bool tensor, got {self.dtype!r}")
    return self.logical_not() if self.dtype.is_bool else ~self
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True):
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative if self.dtype.is_float else self._c(False, _D.bool_)
  def isnan(self): return self != self
  def isfinite(self): return (self.isinf() | self.isnan()).logical_not()
  def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """|self - other| <= atol + rtol * |other| for finite values; infinities are close only to themselves; NaN is
    close to NaN only with equal_nan."""
    other = other if isinstance(other, type(self)) else self._c(other, self.dtype if self.dtype.is_float else _D.f32)
    finite = self.isfinite() & other.isfinite() & ((self - other).abs() <= atol + rtol * other.abs())
    close = finite | ((self.isinf() | other.isinf()) & (self == other))
    return close | (self.isnan() & other.isnan()) if equal_nan else close
  def masked_fill(self, mask, value):
    self._tensors('masked_fill', mask=mask)
    return mask.where(value, self)

  # ---- reductions
  def std_mean(self, axis=None, keepdim: bool = False, correction=1):
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def var_mean(self, axis=None, keepdim: bool = False, correction=1):
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    if p == 0: n = (self != 0).sum(dim, keepdim=True).cast(self.dtype)  # (torch's 0-norm: how many are not zero)
    elif p == math.inf: n = self.abs().max(dim, keepdim=True)
    elif p == -math.inf: n = self.abs().min(dim, keepdim=True)
    else: n = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
    return self / n.maximum(eps)

  def _along_last(self, axis, fn):
    """fn applied with `axis` moved to the last position, then moved back."""
    ax = self._axis(axis)
    x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
    r = fn(x)
    back = lambda t: t.transpose(ax, -1) if ax != self.ndim - 1 else t
    return tuple(back(t) for t in r) if isinstance(r, tuple) else back(r)

  def cumprod(self, axis: int = 0):
    """The running product along an axis: a scan (tensor.scan mul)."""
    ax = self._axis(axis)
    if self.ndim == 0 or self.shape[ax] == 0: return self
    return self._cum('mul', ax)
  def _cumext(self, axis, inv: bool):
    """(running extreme, index of it): a max scan of the values, and one of the positions that hold their running
    maximum (or a NaN, which rules from there on), so the index is the last position j <= i that holds the running
    extreme (torch's choice on ties), in tinygrad's default int."""
    ax = self._axis(axis)
    if self.ndim == 0 or self.shape[ax] == 0: return self, self._c(0, _D.i32)
    x = self._inverse() if inv else self
    v, n = x._scan('max', ax), x.shape[ax]
    pos = (type(self)._positions(n, self.device) - 1).reshape((n,) + (1,) * (self.ndim - ax - 1))
    hit = (x == v.detach()) | (x != x) if x.dtype.is_float else x == v
    return (v._inverse() if inv else v), hit.where(pos, -1)._scan('max', ax)
  def cummax(self, axis: int = 0): return self._cumext(axis, False)
  def cummin(self, axis: int = 0): return self._cumext(axis, True)
  def logcumsumexp(self, axis: int = 0):
    """log(sum(exp(x[j]) for j <= i)): a scan whose step is log(exp(a) + exp(b)) about the larger of the two, so no
    exp overflows and no prefix loses its small terms to a later large one."""
    ax = self._axis(axis)
    x = self._float()
    if self.ndim == 0 or self.shape[ax] == 0: return x
    return x._scan('logaddexp', ax)

  # ---- selection by indices: gathers (a load whose index is another tensor's value), one-hot compares
  def one_hot(self, num_classes: int | None = None):
    """int32 (..., num_classes); None: one more than the largest index (realizes it). As tinygrad (and jax), a
    negative num_classes is an error, not torch's -1 for 'infer'."""
    if not (self.dtype.is_int or self.dtype.is_bool): raise DTypeError(f"one_hot needs integer indices, got {self.dtype!r}")
    if num_classes is None: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if num_classes < 0: raise ArgumentError(f"one_hot num_classes must be >= 0, got {num_classes}")
    return (self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(_D.i32)

  def gather(self, dim: int, index):
    """out[..i..] = self[.. index[..i..] ..] along dim; index has self's rank and fits it in the other axes.
    Negative indices count from the end (as torch's and ONNX's); an index still outside the axis reads the nearest
    end of it (clamped: never outside the tensor)."""
    self._tensors('gather', index=index)
    d = self._axis(dim)
    if index.ndim != self.ndim: raise IndexingError(f"gather index of shape {index.shape} needs the rank of {self.shape}")
    if index.dtype.is_float or index.dtype.is_bool: raise IndexingError(f"gather index must be an integer tensor, got {index.dtype!r}")
    if any(s > t for i, (s, t) in enumerate(zip(index.shape, self.shape)) if i != d):
      raise IndexingError(f"gather index of shape {index.shape} is larger than {self.shape} outside axis {d}")
    x = self.shrink(tuple(None if i == d else (0, s) for i, s in enumerate(index.shape)))
    n = self.shape[d]
    if index.dtype.itemsize < 4: index = index.cast(_D.i32)  # (widened: an int8's index + n could wrap)
    return x._gather(d, (index < 0).where(index + n, index))

  def _gather(self, d: int, index):
    """tensor.gather: index has self's shape but along axis d, and values in [0, shape[d]) (else clamped)."""
    if 0 in index.shape: return type(self).zeros(*index.shape, dtype=self.dtype, device=self.device)
    if self.shape[d] == 0: raise IndexingError(f"index into axis {d} of size 0 (shape {self.shape})")
    return self._new('gather', (self, index), index.shape, self.dtype, {'axis': d})

  def _index_tensors(self, idx):
    """__getitem__ with tensor (or list) indices: the basic part first, then one gather along the tensor-indexed axes
    flattened to one (numpy's advanced indexing; negative indices count from the end, an index still outside its axis
    reads the nearest end of it)."""
    T = type(self)
    basic, tens, out_dim = [], [], 0
    for it in idx:
      if isinstance(it, (list, tuple)): it = T(list(it), device=self.device)
      if isinstance(it, T):
        if it.dtype.is_bool: raise IndexingError("boolean tensor indices are not supported (use masked_select or where)")
        if it.dtype.is_float: raise IndexingError(f"tensor indices must be integers, got {it.dtype!r}")
        tens.append((out_dim, it)); basic.append(slice(None)); out_dim += 1
      else:
        basic.append(it)
        if it is Ellipsis:
          out_dim += self.ndim - sum(isinstance(i, (int, slice)) or isinstance(i, (T, list, tuple)) for i in idx if i is not None and i is not Ellipsis)
        elif it is None or isinstance(it, slice): out_dim += 1
    x = self[tuple(basic)]
    dims = [d for d, _ in tens]
    from tgc.tensor import _broadcast_shape
    B = _broadcast_shape(*[t.shape for _, t in tens])
    rest = [i for i in range(x.ndim) if i not in dims]
    rs, ds = tuple(x.shape[i] for i in rest), tuple(x.shape[d] for d in dims)
    N = math.prod(ds)
    it = _D.i64 if N >= 2**31 else _D.i32
    flat, stride = None, 1
    for (d, t), n in reversed(list(zip(tens, ds))):
      if t.dtype.itemsize < 4: t = t.cast(_D.i32)  # (widened: an int8's t + n could wrap)
      t = (t < 0).where(t + n, t)
      # several axes: each clamped in its own type (a 64-bit index past 2**31 must not wrap into range), then one
      # flat index; one axis: the gather clamps it
      if len(tens) > 1: t = t.maximum(0).minimum(n - 1).cast(it)
      t = t._broadcast_to(B) * stride if stride != 1 else t._broadcast_to(B)
      flat, stride = (t if flat is None else flat + t), stride * n
    if 0 in B or 0 in rs: r = T.zeros(*B, *rs, dtype=self.dtype, device=self.device)
    else:
      src = x.permute(*rest, *dims).reshape((1,) * len(B) + rs + (N,)).expand(*B, *rs, N)
      r = src._gather(len(B) + len(rs), flat.reshape(B + (1,) * len(rs) + (1,)).expand(*B, *rs, 1)).reshape(B + rs)
    if dims == list(range(dims[0], dims[0] + len(dims))) and dims[0] > 0:  # adjacent: the new axes go where they were
      nb, p = len(B), dims[0]
      r = r.permute(*range(nb, nb + p), *range(nb), *range(nb + p, r.ndim))
    return r

  def __setitem__(self, idx, value):
    """Assignment into this tensor (tinygrad's semantics: the tensor now holds the new values, realized)."""
    T = type(self)
    pos = T.arange(self.numel(), device=self.device).reshape(self.shape)[idx]
    v = (value if isinstance(value, T) else T(value, device=self.device)).cast(self.dtype).expand(pos.shape)
    n = self.numel()
    oh = pos.reshape(-1, 1) == T.arange(n, device=self.device).reshape(1, n)
    hit = oh.any(0)
    vals = oh.where(v.reshape(-1, 1), 0).sum(0, dtype=_sum_dtype(self.dtype)).cast(self.dtype)
    self.node = hit.where(vals, self.flatten()).reshape(self.shape).realize().node

  def scatter(self, dim: int, index, src, reduce: str | None = None):
    """self with src[..i..] written at index[..i..] along dim; reduce 'add' or 'multiply' combines a scalar src
    instead (a tensor src with a reduce is scatter_reduce's, as in tinygrad; torch deprecates it)."""
    if reduce not in (None, 'add', 'multiply'): raise ArgumentError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
    if reduce is not None and isinstance(src, type(self)): raise DTypeError("scatter: reduce= takes a scalar src; for a tensor src use scatter_reduce")
    self._tensors('scatter', index=index)
    if reduce is None: return self._scatter(dim, index, src, 'set', True)
    return self._scatter(dim, index, src, 'sum' if reduce == 'add' else 'prod', True)

  def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
    if reduce not in ('sum', 'prod', 'mean', 'amax', 'amin'): raise ArgumentError(f"scatter_reduce reduce {reduce!r} is not one of sum, prod, mean, amax, amin")
    return self._scatter(dim, index, src, reduce, include_self)

  def _scatter(self, dim, index, src, reduce, include_self):
    T = type(self)
    d = self._axis(dim)
    self._tensors('scatter', index=index)
    if isinstance(src, T) and src.dtype is not self.dtype: raise DTypeError(f"scatter: src {src.dtype!r} is not self's {self.dtype!r}")
    if not isinstance(src, T): src = self._c(src)._broadcast_to(self.shape) if not isinstance(src, (list, tuple)) else T(src, device=self.device)
    if not index.ndim == self.ndim == src.ndim or any(i > s or (a != d and i > t) for a, (i, s, t) in enumerate(zip(index.shape, src.shape, self.shape))):
      raise ShapeError(f"scatter along axis {d}: index {index.shape} must have the rank of self {self.shape} and src {src.shape}, and fit src and (outside axis {d}) self")
    src = src.cast(self.dtype).shrink(tuple((0, s) for s in index.shape))
    n = self.shape[d]
    # oh[..., j(index axis d), ..., k(target position)]: index hits target k
    idx = (index < 0).where(index + n, index).unsqueeze(-1)
    oh = idx == T.arange(n, device=self.device).reshape((1,) * index.ndim + (n,))
    oh = oh.transpose(d, -1)  # target position at d, index's axis d last
    s = src.unsqueeze(-1).transpose(d, -1)
    pad = tuple(None if i == d or i == index.ndim else (0, self.shape[i] - index.shape[i]) for i in range(index.ndim + 1))
    hit_any = oh.any(-1)
    acc = _sum_dtype(self.dtype)
    if reduce == 'set':  # of several writes to one place the last (along dim) wins, as torch and tinygrad
      j = T.arange(index.shape[d], device=self.device)
      oh = oh & (j == oh.where(j, -1).max(-1, keepdim=True))
    if reduce in ('set', 'sum', 'mean'):
      vals = oh.where(s, 0).sum(-1, dtype=acc)
      cnt = oh.sum(-1)
      vals, cnt, hit_any = vals.pad(pad[:-1]), cnt.pad(pad[:-1]), hit_any.pad(pad[:-1])
      if reduce == 'set': return hit_any.where(vals.cast(self.dtype), self)
      if reduce == 'sum': return (vals + self * include_self if include_self else hit_any.where(vals, self)).cast(self.dtype)
      tot = vals + (self if include_self else 0)
      c = cnt + (1 if include_self else 0)
      r = tot / c.maximum(1)
      r = r if self.dtype.is_float else r.floor()
      return hit_any.where(r.cast(self.dtype), self)
    if reduce == 'prod':
      vals = oh.where(s, 1).prod(-1).pad(pad[:-1]).cast(self.dtype)
      hit_any = hit_any.pad(pad[:-1])
      return hit_any.where(vals * self if include_self else vals, self)
    big = math.inf if self.dtype.is_float else _D.min_max(self.dtype)[1]
    low = -big if self.dtype.is_float else _D.min_max(self.dtype)[0]
    if reduce == 'amax': vals = oh.where(s, low).max(-1)
    else: vals = oh.where(s, big).min(-1)
    vals, hit_any = vals.pad(pad[:-1]), hit_any.pad(pad[:-1])
    if include_self: vals = vals.maximum(self) if reduce == 'amax' else vals.minimum(self)
    return hit_any.where(vals, self)

  def masked_select(self, mask, size: int | None = None, fill_value=0):
    """The elements where mask is true, flattened. size=None realizes the count (the output shape depends on it);
    size=N gives N elements: the first N selected, then fill_value."""
    x, m = self._broadcasted(mask, match_dtype=False)
    m = m.cast(_D.bool_).flatten()
    n = int(m.sum().item()) if size is None else int(size)
    if n < 0: raise ArgumentError(f"masked_select size must be >= 0, got {size}")
    pos = m.cast(_D.i32).cumsum(0) - 1  # the output slot of each selected element
    oh = (pos.unsqueeze(0) == type(self).arange(n, device=self.device).unsqueeze(1)) & m.unsqueeze(0)
    r = oh.where(x.flatten().unsqueeze(0), 0).sum(1, dtype=_sum_dtype(self.dtype)).cast(self.dtype)
    return r if size is None else oh.any(1).where(r, fill_value).cast(self.dtype)

  def nonzero(self, size: int | None = None, fill_value=0):
    """(n, ndim) indices (tinygrad's default int) of the nonzero elements, in row-major order: size=None realizes
    the count first, size=N gives N rows, the first N found then rows of fill_value."""
    T = type(self)
    if self.ndim == 0: return T.zeros(int(bool(self.item())) if size is None else size, 0, dtype=_D.i32, device=self.device)
    m = (self != 0)
    coords = [T.arange(s, device=self.device).reshape(tuple(s if j == i else 1 for j in range(self.ndim))).expand(self.shape) for i, s in enumerate(self.shape)]
    if size is None: size = int(m.sum().item())
    return T.stack(*[c.masked_select(m, size, fill_value) for c in coords], dim=1).cast(_D.i32)

  # ---- sorting (ranks by pairwise compares: O(n^2) work, one fused kernel per use)
  def _sort_last(self, descending: bool):
    n = self.shape[-1]
    a, b = self.unsqueeze(-1), self.unsqueeze(-2)  # a: element i, b: element j
    before = (b > a) if descending else (b < a)
    ar = type(self).arange(n, device=self.device)
    tie = (b == a) & (ar.reshape(1, n) < ar.reshape(n, 1))  # stable: equal elements keep their order
    rank = (before | tie).sum(-1)  # rank of element i
    oh = rank.unsqueeze(-1) == ar  # [..., i, r]
    vals = oh.where(self.unsqueeze(-1), 0).sum(-2, dtype=_sum_dtype(self.dtype)).cast(self.dtype)
    idx = oh.where(ar.reshape(n, 1), 0).sum(-2).cast(_D.i32)
    return vals, idx

  def sort(self, dim: int = -1, descending: bool = False):
    if self.ndim == 0: return self, self._c(0, _D.i32)
    return self._along_last(dim, lambda x: x._sort_last(descending))
  def argsort(self, dim: int = -1, descending: bool = False): return self.sort(dim, descending)[1]
  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
    d = self._axis(dim)
    if not 0 <= k <= self.shape[d]: raise ShapeError(f"topk k={k} is out of range for axis {d} of shape {self.shape}")
    v, i = self.sort(d, descending=largest)
    sl = tuple((0, k) if j == d else None for j in range(self.ndim))
    return v.shrink(sl), i.shrink(sl)

  # ---- movement
  def chunk(self, chunks: int, dim: int = 0):
    d = self._axis(dim)
    if not isinstance(chunks, (int, np.integer)) or isinstance(chunks, bool) or chunks <= 0: raise ArgumentError(f"chunk needs a whole number of chunks > 0, got {chunks!r}")
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, d)
  def split(self, sizes, dim: int = 0):
    d = self._axis(dim)
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ArgumentError(f"split size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if sum(sizes) != n: raise ShapeError(f"split sizes {list(sizes)} do not add up to {n} (axis {d} of shape {self.shape})")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if i == d else None for i in range(self.ndim)))); off += s
    return tuple(out)
  def unflatten(self, dim: int, sizes):
    d = self._axis(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def unfold(self, dim: int, size: int, step: int):
    """Windows of `size` every `step` along dim, as a new last axis."""
    d = self._axis(dim)
    if size > self.shape[d] or size < 0 or step <= 0: raise ShapeError(f"unfold size {size} step {step} do not fit axis {d} of shape {self.shape}")
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    w = x._pool((size,), step)
    return w.transpose(d, -2) if d != self.ndim - 1 else w
  def _pad_mode(self, pairs, mode: str):
    """pad by copies of the tensor's own edges, axis by axis (shrink, flip, expand and cat)."""
    x = self
    for d, (a, b) in enumerate(pairs):
      n = x.shape[d]
      if not a and not b: continue
      if mode == 'reflect' and (a >= n or b >= n): raise ShapeError(f"reflect padding ({a}, {b}) needs less than the size {n} of axis {d} of {self.shape}")
      if mode != 'reflect' and n == 0: raise ShapeError(f"{mode} padding of an empty axis {d} of {self.shape}")
      sl = lambda lo, hi: x.shrink(tuple((lo, hi) if i == d else None for i in range(x.ndim)))
      if mode == 'circular':
        if a > n or b > n: raise ShapeError(f"circular padding ({a}, {b}) is larger than axis {d} of {self.shape}")
        left, right = sl(n - a, n), sl(0, b)
      elif mode == 'reflect': left, right = sl(1, a + 1).flip(d), sl(n - 1 - b, n - 1).flip(d)
      else:
        rep = lambda t, k: t.expand(tuple(k if i == d else s for i, s in enumerate(t.shape)))
        left, right = rep(sl(0, 1), a), rep(sl(n - 1, n), b)
      x = type(self).cat(*[t for t, k in ((left, a), (x, 1), (right, b)) if k], dim=d)
    return x

  def roll(self, shifts, dims=None):
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    if dims is None:
      if len(shifts) != 1: raise ShapeError(f"roll without dims takes one shift (of the flattened tensor), got {shifts}")
      return self.flatten().roll(shifts[0], 0).reshape(self.shape)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims): raise ShapeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    x = self
    for s, d in zip(shifts, dims):
      d = x._axis(d)
      n = x.shape[d]
      if n == 0: continue
      s %= n
      if s: x = x.shrink(tuple((n - s, n) if i == d else None for i in range(x.ndim))).cat(
        x.shrink(tuple((0, n - s) if i == d else None for i in range(x.ndim))), dim=d)
    return x
  def repeat_interleave(self, repeats: int, dim=None):
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else x._axis(dim)
    x = x.unsqueeze(d + 1)
    return x.expand(x.shape[:d + 1] + (repeats,) + x.shape[d + 2:]).flatten(d, d + 1)

  # ---- triangles and diagonals
  def _tri(self, diagonal: int, upper: bool):
    if self.ndim < 2: raise ShapeError(f"tril/triu need at least 2 axes, got shape {self.shape}")
    r, c = self.shape[-2:]
    T = type(self)
    # j - i at [i, j], from one-based positions (a scan of ones: their offsets cancel) and one comparison each side,
    # the fewest nodes (a mask's nodes cost host time on every call that builds one)
    pos = lambda n: T.ones(n, dtype='int32', device=self.device).cumsum(0)
    pc = pos(c)
    d = pc.reshape(1, c) - (pc if r == c else pos(r)).reshape(r, 1)
    keep = (d > diagonal - 1) if upper else (d < diagonal + 1)
    if self.dtype.is_bool: return keep & self
    return keep.where(self, T.full((), 0, dtype=self.dtype, device=self.device))
  def tril(self, diagonal: int = 0): return self._tri(diagonal, False)
  def triu(self, diagonal: int = 0): return self._tri(diagonal, True)
  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
    a, b = self._axis(dim1), self._axis(dim2)
    x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
    r, c = x.shape[-2:]
    if offset < 0: x, r = x.shrink(tuple([None] * (x.ndim - 2) + [(min(-offset, r), r), None])), max(r + offset, 0)
    elif offset > 0: x, c = x.shrink(tuple([None] * (x.ndim - 2) + [None, (min(offset, c), c)])), max(c - offset, 0)
    n = min(r, c)
    x = x.shrink(tuple([None] * (x.ndim - 2) + [(0, n), (0, n)])).reshape(x.shape[:-2] + (n * n,))
    if n == 0: return x
    return x.pad(tuple([None] * (x.ndim - 1) + [(0, n)])).reshape(x.shape[:-1] + (n, n + 1)).shrink(tuple([None] * (x.ndim - 1) + [None, (0, 1)])).reshape(x.shape[:-1] + (n,))
  def diag(self, diagonal: int = 0):
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ShapeError(f"diag needs a 1-d or 2-d tensor, got shape {self.shape}")
    n, k = self.shape[0], abs(diagonal)
    m = (self.unsqueeze(1) * type(self).eye(n, dtype=self.dtype, device=self.device)).cast(self.dtype)
    return m.pad(((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

  # ---- losses
  def binary_crossentropy(self, y, reduction: str = 'mean'):
    self._tensors('binary_crossentropy', y=y)
    return _reduce_loss(-(y * self.log() + (1 - y) * (1 - self).log()), reduction)
  def binary_crossentropy_logits(self, y, reduction: str = 'mean', pos_weight=None):
    self._tensors('binary_crossentropy_logits', y=y)
    log_p, log_1mp = self.logsigmoid(), (-self).logsigmoid()
    return _reduce_loss(-((1 if pos_weight is None else pos_weight) * y * log_p + (1 - y) * log_1mp), reduction)
  def nll_loss(self, Y, weight=None, ignore_index=None, reduction: str = 'mean'):
    """self: log-probabilities (N, C, ...), Y: class indices (N, ...)."""
    self._tensors('nll_loss', 'weight', Y=Y, weight=weight)
    T = type(self)
    oh = (Y.unsqueeze(1) == T.arange(self.shape[1], device=self.device).reshape((1, -1) + (1,) * (Y.ndim - 1)))
    w = oh.cast(_D.f32) if weight is None else oh.where(weight.reshape((1, -1) + (1,) * (Y.ndim - 1)), 0)
    if ignore_index is not None: w = w * (Y != ignore_index).unsqueeze(1)
    nll = -(w * self).sum(1)
    if reduction == 'mean': return nll.sum() / w.sum()
    return _reduce_loss(nll, reduction)
  def cross_entropy(self, Y, reduction: str = 'mean', label_smoothing: float = 0.0):
    """Y: class indices (N, ...) or probabilities of self's shape; classes on axis 1 (axis 0 of a 1-d input)."""
    self._tensors('cross_entropy', Y=Y)
    c = 0 if self.ndim == 1 else 1
    lsm = self.log_softmax(c)
    if Y.shape == self.shape: tgt = Y.cast(lsm.dtype)
    elif Y.shape == self.shape[:c] + self.shape[c + 1:]:
      tgt = (Y.unsqueeze(c) == type(self).arange(self.shape[c], device=self.device).reshape((-1,) + (1,) * (Y.ndim - c))).cast(lsm.dtype)
    else: raise ShapeError(f"cross_entropy: target of shape {Y.shape} is neither the input's {self.shape} nor its shape without the classes")
    if label_smoothing: tgt = tgt * (1 - label_smoothing) + label_smoothing / self.shape[c]
    return _reduce_loss(-(tgt * lsm).sum(c), reduction)
  def sparse_categorical_crossentropy(self, Y, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = 'mean'):
    """tinygrad's: classes on the last axis, Y integer labels; labels equal to ignore_index count for nothing."""
    self._tensors('sparse_categorical_crossentropy', Y=Y)
    lsm = self.log_softmax(-1)
    keep = (Y != ignore_index)
    oh = (Y.unsqueeze(-1) == type(self).arange(self.shape[-1], device=self.device)) & keep.unsqueeze(-1)
    loss = -(oh.where(lsm, 0).sum(-1)) * (1 - label_smoothing) - label_smoothing * lsm.mean(-1) * keep
    if reduction == 'mean': return loss.sum() / keep.sum().maximum(1)
    return _reduce_loss(loss, reduction)

  # ---- attention and linear algebra
  def _attention(self, key, value, causal: bool, mask=None, gqa: bool = False, scale: float | None = None, softcap: float | None = None):
    """softmax(q k^T * scale + mask) v (scale 1/sqrt(E) by default; softcap: the scaled scores capped, softcap * tanh(s /
    softcap)) as one op where the tensors' device computes it whole, else None (the composite
    below); a frontend whose tensors have no such op keeps None."""
    return None

  def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                   *, scale: float | None = None, softcap: float | None = None):
    """softmax(q k^T * scale + mask) v, scale 1/sqrt(d) unless given (torch's keyword). is_causal: the
    lower-triangular mask (no attn_mask with it); enable_gqa: key and value heads (axis -3) shared by groups of the
    query's heads; softcap (tgc's keyword): the scaled scores capped as softcap * tanh(s / softcap) before the mask
    is added (Gemma 2's soft-capping)."""
    if dropout_p: raise ArgumentError("scaled_dot_product_attention: dropout_p is not supported (dropout needs Tensor.train)")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)):
      raise ArgumentError(f"scaled_dot_product_attention: scale must be a finite number, got {scale!r}")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not 0 < softcap < math.inf):
      raise ArgumentError(f"scaled_dot_product_attention: softcap must be a finite number > 0, got {softcap!r}")
    self._tensors('scaled_dot_product_attention', 'attn_mask', key=key, value=value, attn_mask=attn_mask)
    if is_causal and attn_mask is not None: raise ArgumentError("scaled_dot_product_attention: attn_mask and is_causal=True exclude each other")
    if enable_gqa and self.ndim >= 3:
      hq, hk, hv = self.shape[-3], key.shape[-3], value.shape[-3]
      if hk == 0 or hv == 0 or hq % hk or hq % hv: raise ShapeError(f"scaled_dot_product_attention: {hq} query heads do not split into groups for {hk} key and {hv} value heads")
      if hk == hv and (fused := self._attention(key, value, is_causal, attn_mask, gqa=True, scale=scale, softcap=softcap)) is not None: return fused
      key, value = key.repeat_interleave(hq // hk, dim=-3), value.repeat_interleave(hq // hv, dim=-3)
    q = self
    if (fused := q._attention(key, value, is_causal, attn_mask, scale=scale, softcap=softcap)) is not None: return fused
    s = q.matmul(key.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else float(scale))
    if softcap: s = (s * (1 / float(softcap))).tanh() * float(softcap)
    if is_causal:
      L, S = s.shape[-2:]
      attn_mask = type(self).ones(L, S, dtype=_D.bool_, device=self.device).tril()
    # softmax's division after the matmul, on its (L, E) rows, as flash attention does: the (L, S) probabilities are
    # never a buffer, so a backward keeps only the scores (it recomputes their exponentials) where softmax(s) @ v
    # would keep the scores and the probabilities, two (L, S) buffers a head
    if attn_mask is None or is_causal:
      if attn_mask is not None: s = attn_mask.where(s, -math.inf)
      _, e, ss = s._softmax(-1)
      return e.matmul(value) * ss.reciprocal()
    s = attn_mask.where(s, -math.inf) if attn_mask.dtype.is_bool else s + attn_mask
    # a mask may hide every key of a row: its max counts as 0 and its sum as 1, so that its output is 0 (torch's)
    mx = s.max(-1, keepdim=True).detach()
    e = (s - (mx == -math.inf).where(0.0, mx)).exp()
    ss = e.sum(-1, keepdim=True)
    return e.matmul(value) * (ss > 0).where(ss, 1.0).reciprocal()

  @classmethod
  def einsum(cls, formula: str, *operands):
    """Sum of products over the letters missing from the output (explicit `->` or numpy's implicit output)."""
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)): operands = tuple(operands[0])
    if not isinstance(formula, str): raise DTypeError(f"einsum: the formula must be a string, got {type(formula).__name__}")
    if not all(isinstance(o, cls) for o in operands): raise DTypeError(f"einsum: operands must be Tensors, got {', '.join(type(o).__name__ for o in operands)}")
    lhs, _, out = formula.replace(' ', '').partition('->')
    ins = lhs.split(',')
    if len(ins) != len(operands): raise ArgumentError(f"einsum {formula!r} names {len(ins)} operands, got {len(operands)}")
    if '...' in formula:  # the broadcast axes '...' stand for become letters the formula does not use, right-aligned
      free = [c for c in 'ABCDEFGHIJKLMNOPQRSTUVWXYZ' if c not in formula]
      nell = max(t.ndim - len(s.replace('...', '')) for s, t in zip(ins, operands) if '...' in s)
      ins = [s.replace('...', ''.join(free[nell - (t.ndim - len(s.replace('...', ''))):nell])) for s, t in zip(ins, operands)]
      ell = ''.join(free[:nell])
      lhs = ','.join(ins)
      out = out.replace('...', ell) if '->' in formula else ell + ''.join(sorted(c for c in set(lhs) - {','} - set(ell) if lhs.count(c) == 1))
    elif '->' not in formula: out = ''.join(sorted(c for c in set(lhs) - {','} if lhs.count(c) == 1))
    letters = sorted(set(lhs) - {','})
    sizes = {}
    for s, t in zip(ins, operands):
      if len(s) != t.ndim: raise ShapeError(f"einsum operand {s!r} does not fit shape {t.shape}")
      for c, n in zip(s, t.shape):
        if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1: raise ShapeError(f"einsum letter {c!r} has sizes {sizes[c]} and {n}")
        sizes[c] = max(sizes[c], n)
    prod = None
    for s, t in zip(ins, operands):
      for c in set(s):  # a repeated letter in one operand takes the diagonal
        while s.count(c) > 1:
          i, j = s.index(c), s.index(c, s.index(c) + 1)
          t = t.diagonal(0, i, j); s = s[:i] + s[i + 1:j] + s[j + 1:] + c
      order = [s.index(c) for c in letters if c in s]
      t = t.permute(order).reshape(tuple(sizes[c] if c in s else 1 for c in letters))
      prod = t if prod is None else prod * t
    summed = tuple(i for i, c in enumerate(letters) if c not in out)
    r = prod.expand(tuple(sizes[c] for c in letters)).sum(summed) if summed else prod.expand(tuple(sizes[c] for c in letters))
    kept = [c for c in letters if c in out]
    return r.permute([kept.index(c) for c in out])

  # ---- pooling, convolution, resizing
  def max_unpool2d(self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None):
    """Each value written at its flat index (of the H*W plane) from max_pool2d(return_indices=True)."""
    self._tensors('max_unpool2d', indices=indices)
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    s = k if stride is None else ((stride, stride) if isinstance(stride, int) else tuple(stride))
    p = (padding, padding) if isinstance(padding, int) else tuple(padding)
    dl = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    H, W = self.shape[-2:]
    if output_size is None: output_size = tuple((i - 1) * st - 2 * pp + d * (kk - 1) + 1 for i, st, pp, d, kk in zip((H, W), s, p, dl, k))
    oh, ow = output_size[-2:]
    T = type(self)
    x, idx = self.flatten(-2), indices.flatten(-2)
    hit = idx.unsqueeze(-1) == T.arange(oh * ow, device=self.device)
    low = -math.inf if self.dtype.is_float else _D.min_max(self.dtype)[0]
    # overlapping windows can pick one position twice (with one value): max, not sum, keeps it once
    r = hit.any(-2).where(hit.where(x.unsqueeze(-1), low).max(-2), 0).cast(self.dtype)
    return r.reshape(self.shape[:-2] + (oh, ow))

  def conv_transpose2d(self, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1):
    """(cin, cout/groups, kh, kw) weight: a conv2d of the input dilated by stride with the flipped weight."""
    self._tensors('conv_transpose2d', 'bias', weight=weight, bias=bias)
    HW = weight.shape[2:]
    nk = len(HW)
    st, dl, op = [((v,) * nk if isinstance(v, int) else tuple(v)) for v in (stride, dilation, output_padding)]
    pd = (padding,) * nk if isinstance(padding, int) else tuple(padding)
    if groups == 1 and tuple(HW) == st and set(dl) == {1} and not any(pd) and not any(op) and self.ndim == nk + 2 and self.shape[1] == weight.shape[0]:
      # windows that tile the output without overlap (kernel = stride): each output pixel is one input pixel times one
      # weight tap, a product summed over the input channels straight into the output's layout, where the general
      # form dilates the input with zeros first (4x the work of a 2x2 window: PP-OCR det's 24x321x321 copy took 3.4
      # ms on a CPU, then a 2x2 conv). The input is stored first: it is read once per output channel and tap, and its
      # producers (a batch norm, an activation) would be recomputed for each (1.2 ms -> 0.27 ms + a 0.15 ms copy)
      (bs, ci, *sp), co, dt = self.shape, weight.shape[1], self.dtype
      wide = _D.f32 if dt.is_float and dt.itemsize < 4 else dt  # (products widened before the sum, as conv2d's)
      xs = self.contiguous().cast(wide).reshape(bs, ci, 1, *[v for n in sp for v in (n, 1)])
      ws = weight.cast(wide).reshape(1, ci, co, *[v for k in HW for v in (1, k)])
      y = (xs * ws).sum(1).cast(dt).reshape(bs, co, *[n * k for n, k in zip(sp, HW)])
      return y if bias is None else y + bias.reshape(1, co, *(1,) * nk)
    x, w = self, weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(tuple(range(3, 3 + nk)))
    w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
    if any(s > 1 for s in st):  # insert s-1 zeros between the input's pixels
      bs, c, *sp = x.shape
      x = x.reshape(bs, c, *[v for n in sp for v in (n, 1)])
      x = x.pad(tuple([None, None] + [q for s in st for q in (None, (0, s - 1))]))
      x = x.reshape(bs, c, *[n * s for n, s in zip(sp, st)])
      x = x.shrink(tuple([None, None] + [(0, n * s - (s - 1)) for n, s in zip(sp, st)]))
    pads = [v for k, d, p, o in reversed(list(zip(HW, dl, pd, op))) for v in ((k - 1) * d - p, (k - 1) * d - p + o)]
    return x.conv2d(w, bias, dilation=dl, padding=pads, groups=groups)

  def interpolate(self, size, mode: str = 'linear', align_corners: bool = False):
    """Resize the last len(size) axes: 'nearest', 'nearest-exact' or '(bi/tri)linear' (one gather per axis)."""
    T = type(self)
    size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    if not 0 < len(size) <= self.ndim or not all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) and s > 0 for s in size):
      raise ShapeError(f"interpolate: size {size} must be 1 to {self.ndim} whole numbers above 0 (the sizes of the last axes)")
    x = self
    for i, (n_in, n_out) in reversed(list(enumerate(zip(self.shape[-len(size):], size)))):  # the last axis first (uint8 rounds per axis)
      ax = self.ndim - len(size) + i
      if n_in == n_out and mode != 'nearest': continue
      o = T.arange(n_out, device=self.device).cast(_D.f32)
      if mode == 'nearest': src = (o * (n_in / n_out)).floor().cast(_D.i32).minimum(n_in - 1); x = x._take(ax, src); continue
      if mode == 'nearest-exact': src = ((o + 0.5) * (n_in / n_out)).floor().cast(_D.i32).minimum(n_in - 1); x = x._take(ax, src); continue
      if mode not in ('linear', 'bilinear', 'trilinear'): raise ArgumentError(f"interpolate mode {mode!r} is not supported")
      # the source position num/den of each output, in integers: exact, whatever the sizes
      ar = T.arange(n_out, device=self.device)
      num, den = (ar * (n_in - 1), max(n_out - 1, 1)) if align_corners else ((ar * 2 + 1) * n_in - n_out, n_out * 2)
      num = num.clip(0, (n_in - 1) * den)
      lo, hi = num // den, (num + den - 1) // den
      w = ((num % den).cast(_D.f32) / den).reshape((n_out,) + (1,) * (x.ndim - ax - 1))
      x = x._take(ax, lo).lerp(x._take(ax, hi), w)
    return x.cast(self.dtype)

  def _take(self, axis: int, index):
    """Elements at the 1-d int index along axis (a one-hot reduction)."""
    n = self.shape[axis]
    oh = (index.reshape(-1, 1) == type(self).arange(n, device=self.device).reshape(1, n)).reshape((index.numel(), n) + (1,) * (self.ndim - axis - 1))
    return oh.where(self.unsqueeze(axis), 0).sum(axis + 1, dtype=_sum_dtype(self.dtype)).cast(self.dtype)


def _dims(shape) -> tuple:
  """The sizes of a creation call's shape (Tensor.f(2, 3) or Tensor.f((2, 3))); negative sizes are an error."""
  from tgc.tensor import _shape_arg, _new_shape
  return _new_shape(_shape_arg(shape), 'shape')


def _kaiming_std(shape, a: float) -> float:
  """He initialisation's standard deviation: gain sqrt(2 / (1 + a^2)) over sqrt(fan_in), fan_in = prod(shape[1:])
  (the size itself for a 1-d shape)."""
  dims = _dims(shape)
  fan_in = math.prod(dims[1:] if len(dims) > 1 else dims)
  return math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _sum_dtype(dt):
  """Selections sum exactly one value: in the dtype itself (bool through int32: sum has no bool accumulator)."""
  return _D.i32 if dt.is_bool else dt


def _reduce_loss(x, reduction: str):
  if reduction == 'mean': return x.mean()
  if reduction == 'sum': return x.sum()
  if reduction == 'none': return x
  raise ArgumentError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
