"""The sliding windows of a pool or a convolution as a view (tinygrad's _pool), over anything with movement methods.

`pool(x, kernel, stride, dilation)` takes x (..., *spatial) to (..., *out, *kernel) with movement ops alone: a pad
and shrink that cut the input into (out, stride) blocks where the windows do not overlap, a repeat of the input
that lays the overlapping windows side by side where they do (stride < kernel, or a dilation). `x` is duck-typed:
`shape`, `pad`, `shrink`, `reshape`, `permute`, `repeat` with the Tensor API's meanings (None in pad and shrink:
the axis as it is), so that the Tensor front end and tensor-decompose (over IR values) build the same ops.
"""
from __future__ import annotations
from tgc.errors import ShapeError


def pool_shape(shape, k_, stride=1, dilation=1) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
  """(stride, dilation, out) per window axis of pooling `shape`'s last len(k_) axes; a ShapeError where they do not fit."""
  nk = len(k_)
  s_ = (stride,) * nk if isinstance(stride, int) else tuple(stride)
  d_ = (dilation,) * nk if isinstance(dilation, int) else tuple(dilation)
  if len(shape) < nk or len(s_) != nk or len(d_) != nk: raise ShapeError(f"cannot pool shape {tuple(shape)} with kernel {tuple(k_)}, stride {s_}, dilation {d_}")
  i_ = tuple(shape[len(shape) - nk:])
  if any(d * (k - 1) + 1 > i for k, d, i in zip(k_, d_, i_)):
    raise ShapeError(f"kernel {tuple(k_)} (dilation {d_}) is larger than the input {i_}")
  if any(s < 1 for s in s_) or any(d < 1 for d in d_): raise ShapeError(f"stride {s_} and dilation {d_} must be positive")
  return s_, d_, tuple((i - d * (k - 1) - 1) // s + 1 for i, d, k, s in zip(i_, d_, k_, s_))


def pool(x, k_, stride=1, dilation=1):
  """x (..., *spatial) -> (..., *out, *k_): the windows of the kernel k_ at each output position."""
  s_, d_, o_ = pool_shape(x.shape, k_, stride, dilation)
  nk = len(k_)
  noop, i_ = [None] * (len(x.shape) - nk), x.shape[-nk:]
  nn = len(noop)
  if any(k > s for k, s in zip(k_, s_)) or any(d != 1 for d in d_):
    f_ = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(o_, s_, i_, d_, k_)]
    x = x.repeat([1] * nn + [-(-k * (i * f + d) // i) for k, i, d, f in zip(k_, i_, d_, f_)])
    x = x.shrink(tuple(noop + [(0, k * (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)]))
    x = x.reshape(tuple(x.shape[:nn]) + tuple(v for k, i, d, f in zip(k_, i_, d_, f_) for v in (k, i * f + d)))
    x = x.shrink(tuple(noop + [b for k, o, s in zip(k_, o_, s_) for b in ((0, k), (0, o * s))]))
    x = x.reshape(tuple(x.shape[:nn]) + tuple(v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)))
    x = x.shrink(tuple(noop + [b for k, o in zip(k_, o_) for b in ((0, k), (0, o), (0, 1))]))
    x = x.reshape(tuple(x.shape[:nn]) + tuple(v for k, o in zip(k_, o_) for v in (k, o)))
    return x.permute(*range(nn), *[nn + i * 2 + 1 for i in range(nk)], *[nn + i * 2 for i in range(nk)])
  x = x.pad(tuple(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)]))
  x = x.shrink(tuple(noop + [(0, o * s) for o, s in zip(o_, s_)]))
  x = x.reshape(tuple(x.shape[:nn]) + tuple(v for o, s in zip(o_, s_) for v in (o, s)))
  x = x.shrink(tuple(noop + [b for o, k in zip(o_, k_) for b in ((0, o), (0, k))]))
  return x.permute(*range(nn), *[nn + i * 2 for i in range(nk)], *[nn + i * 2 + 1 for i in range(nk)])
