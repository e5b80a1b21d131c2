"""The ONNX ops: each a function (ctx, node attributes, inputs) -> outputs, on tgc's lazy Tensors.

Each is composed from Tensor members (Gather is fancy indexing, Erf Tensor.erf, Pad's modes Tensor.pad's), so an
imported model fuses like any Tensor program; ConvTranspose crops Tensor.conv_transpose2d's output by ONNX's pads,
which may differ at the two ends of an axis."""
from __future__ import annotations
import math
import numpy as np
from tgc.tensor import Tensor, dtypes, broadcasts_to
from tgc.errors import TgcError, IndexingError
from tgc.ir import dtypes as D

class OnnxError(TgcError):
  """A model tgc cannot import: malformed, an unsupported op, dtype or shape."""

class _Empty:
  """The value of an optional that holds nothing."""
  def __repr__(self): return 'EMPTY'
EMPTY = _Empty()

OPS: dict = {}
def op(*names):
  def deco(fn):
    for n in names: OPS[n] = fn
    return fn
  return deco

# ---------------------------------------------------------------- compositions

def conv_transpose(x: Tensor, w: Tensor, b, stride, pads, dilation, groups, out_pad) -> Tensor:
  """ConvTranspose with ONNX's pads, which may differ at the two ends of an axis: Tensor.conv_transpose2d's whole
  output (no padding; output_padding extends its end), cropped by the pads."""
  nk = w.ndim - 2
  grow = any(p < 0 for p in pads)  # a negative pad (from an output_shape larger than the whole output) adds zeros, then the bias
  y = x.conv_transpose2d(w, None if grow else b, stride=tuple(stride), padding=0, output_padding=tuple(out_pad), dilation=tuple(dilation), groups=groups)
  if grow: y = y.pad(((0, 0), (0, 0)) + tuple((max(0, -pads[i]), max(0, -pads[i + nk])) for i in range(nk)))
  pads = [max(0, p) for p in pads]
  y = y.shrink(((0, y.shape[0]), (0, y.shape[1])) + tuple((pads[i], y.shape[2 + i] - pads[i + nk]) for i in range(nk)))
  return y + b.reshape(1, -1, *(1,) * nk) if grow and b is not None else y

# ---------------------------------------------------------------- helpers

def _axis(a, nd): return a + nd if a < 0 else a
def _float_attr(attrs, k, d): return float(attrs.get(k, d))

def _reduce_axes(ctx, attrs, ins, x):
  """The axes of a Reduce*: the attribute (older opsets) or the second input; None: all axes or none."""
  axes = attrs.get('axes')
  if axes is None and len(ins) > 1 and ins[1] is not None: axes = ctx.ints(ins[1])
  if not axes:
    return () if attrs.get('noop_with_empty_axes', 0) else tuple(range(x.ndim))
  return tuple(_axis(a, x.ndim) for a in axes)

def _coerce2d(fn, x, axis):
  """softmax of opsets < 13: on x flattened to 2D at axis."""
  a = _axis(axis, x.ndim)
  return fn(x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:])), 1).reshape(x.shape)

def _pool_pads(ctx, attrs, x, k, s, d):
  """ONNX pads (begins then ends) from `pads` or `auto_pad`; ceil_mode adds what the last window needs."""
  nk, sp = len(k), x.shape[2:]
  auto = attrs.get('auto_pad', 'NOTSET')
  if auto in ('SAME_UPPER', 'SAME_LOWER'):
    pads = [0] * 2 * nk
    for i in range(nk):
      out = -(-sp[i] // s[i])
      tot = max(0, (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - sp[i])
      lo = tot // 2 if auto == 'SAME_UPPER' else tot - tot // 2
      pads[i], pads[i + nk] = lo, tot - lo
  elif auto == 'VALID': pads = [0] * 2 * nk
  else: pads = list(attrs.get('pads', [0] * 2 * nk))
  if attrs.get('ceil_mode', 0):
    for i in range(nk):
      eff = sp[i] + pads[i] + pads[i + nk] - d[i] * (k[i] - 1) - 1
      out = -(-eff // s[i]) + 1
      if (out - 1) * s[i] >= sp[i] + pads[i]: out -= 1  # the last window must start inside the input or its left pad
      pads[i + nk] += max(0, (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (sp[i] + pads[i] + pads[i + nk]))
  return pads

def _spatial_pad(x, pads, value=0.0):
  nk = len(pads) // 2
  return x.pad(((0, 0),) * (x.ndim - nk) + tuple((pads[i], pads[i + nk]) for i in range(nk)), value)

# ---------------------------------------------------------------- elementwise

_UNARY = {'Neg': Tensor.neg, 'Abs': Tensor.abs, 'Sqrt': Tensor.sqrt, 'Reciprocal': Tensor.reciprocal, 'Exp': Tensor.exp,
          'Log': Tensor.log, 'Tanh': Tensor.tanh, 'Sigmoid': Tensor.sigmoid, 'Relu': Tensor.relu, 'Floor': Tensor.floor,
          'Ceil': Tensor.ceil, 'Sin': Tensor.sin, 'Cos': Tensor.cos, 'Tan': Tensor.tan, 'Sign': Tensor.sign,
          'Not': Tensor.logical_not, 'Erf': Tensor.erf, 'Round': Tensor.round, 'Identity': lambda x: x,
          'Asin': Tensor.asin, 'Acos': Tensor.acos, 'Atan': Tensor.atan, 'Sinh': Tensor.sinh, 'Cosh': Tensor.cosh,
          'Asinh': Tensor.asinh, 'Acosh': Tensor.acosh, 'Atanh': Tensor.atanh, 'IsNaN': Tensor.isnan, 'BitwiseNot': Tensor.bitwise_not}
for _n, _f in _UNARY.items(): OPS[_n] = (lambda f: lambda ctx, attrs, x: f(x))(_f)

def _int_div(a: Tensor, b: Tensor) -> Tensor:
  """ONNX's integer Div truncates (the IR's idiv)."""
  a, b = a._broadcasted(b)
  return a._binop('idiv', b)

_BINARY = {'Add': lambda a, b: a + b, 'Sub': lambda a, b: a - b, 'Mul': lambda a, b: a * b,
           'Div': lambda a, b: _int_div(a, b) if a.dtype.is_int and b.dtype.is_int else a / b,
           'Equal': lambda a, b: a == b, 'Less': lambda a, b: a < b, 'Greater': lambda a, b: a > b,
           'LessOrEqual': lambda a, b: a <= b, 'GreaterOrEqual': lambda a, b: a >= b,
           'And': lambda a, b: a & b, 'Or': lambda a, b: a | b, 'Xor': lambda a, b: a ^ b,
           'BitwiseAnd': Tensor.bitwise_and, 'BitwiseOr': Tensor.bitwise_or, 'BitwiseXor': Tensor.bitwise_xor}
for _n, _f in _BINARY.items(): OPS[_n] = (lambda f: lambda ctx, attrs, a, b: f(a, b))(_f)

@op('Pow')
def _pow(ctx, attrs, a, b):
  if ctx.is_const(b) and b.numel() and (e := ctx.array(b).reshape(-1)).dtype.kind in 'biuf' and (e == e[0]).all():
    # a constant exponent, one value (silero's x ** 2.0 of a spectrum): an integer one as multiplications (Tensor.pow's
    # scalar path: x * x, by squaring beyond), where the general log2/exp2 power took 10 us for 387 elements and is
    # inexact (3 ** 3 = 27.000002); the product keeps a negative base's sign as pow does. 0.5 is sqrt, as in numpy,
    # ONNX's reference (onnxruntime's C pow differs at -0 and -inf: +0 and +inf)
    v, shape = e[0].item(), tuple(np.broadcast_shapes(a.shape, b.shape))
    if (float(v).is_integer() and abs(v) <= 1024 and (a.dtype.is_float or v >= 0)) or (v == 0.5 and a.dtype.is_float):
      r = a.pow(int(v) if float(v).is_integer() else v)
      return r.expand(shape) if r.shape != shape else r
  r = a.pow(b.cast(a.dtype) if a.dtype.is_float else b)
  return r.cast(a.dtype)

@op('Mod')
def _mod(ctx, attrs, a, b):
  if attrs.get('fmod', 0): return a - (a / b).trunc() * b if a.dtype.is_float else a - _int_div(a, b) * b
  return a % b

for _n, _f in {'Max': Tensor.maximum, 'Min': Tensor.minimum, 'Sum': Tensor.add, 'Mean': Tensor.add}.items():
  def _v(ctx, attrs, *xs, f=_f, mean=_n == 'Mean'):
    r = xs[0]
    for x in xs[1:]: r = f(r, x)
    return r / len(xs) if mean else r
  OPS[_n] = _v

@op('BitShift')
def _bitshift(ctx, attrs, x, y):
  """A shift by a negative amount or by the width or more is what the sign extension alone gives (-1 for a right
  shift of a negative x, else 0), where C leaves it undefined: such amounts are masked before the shift."""
  right, signed = attrs['direction'] == 'RIGHT', x.dtype.kind == 'i'
  x, y = x._broadcasted(y)
  ok = (y < x.dtype.itemsize * 8) & (y >= 0) if signed else y < x.dtype.itemsize * 8
  r = x.rshift(ok.where(y, 0)) if right else x.lshift(ok.where(y, 0))
  return ok.where(r, (x < 0).where(-1, 0).cast(x.dtype) if right and signed else 0)

@op('IsInf')
def _isinf(ctx, attrs, x):
  if not x.dtype.is_float: return Tensor._const(False, x.shape, dtypes.bool, x.device)
  return ((x == math.inf) & bool(attrs.get('detect_positive', 1))) | ((x == -math.inf) & bool(attrs.get('detect_negative', 1)))

@op('Where')
def _where(ctx, attrs, c, x, y): return c.where(x, y)

def cast(x: Tensor, dt, saturate: int = 1) -> Tensor:
  """ONNX's Cast. tgc's conversions to the 8-bit floats saturate (Cast's default); with saturate=0 a value that rounds
  past the largest finite one (inf included) becomes inf where the format has one (E5M2), else NaN."""
  y, f = x.cast(dt), dt.fmt
  if saturate or f is None or f.bits != 8 or x.dtype.is_bool: return y
  # half an ulp above the largest finite value, where rounding to nearest even overflows: a tie overflows where that
  # value's mantissa is odd; compared in float32, which the conversion rounds from (x's own dtype could round the
  # threshold: 464 is 448 in E5M2)
  ulp = 2.0 ** ((f.max_code >> f.man) - f.bias - f.man)
  a = x.cast(dtypes.float32).abs()
  over = a >= f.max + ulp / 2 if f.max_code & 1 else a > f.max + ulp / 2
  # chosen among the bits: a select of f8 values would compute in float32 and round back, saturating again
  u8 = lambda v: x._c(v, dtypes.uint8)
  code = (x < 0).where(u8(0x80 | f.inf_code), u8(f.inf_code)) if f.kind == 'ieee' else u8(f.nan_code)
  return over.where(code, y.bitcast(dtypes.uint8)).bitcast(dt)

@op('Cast')
def _cast(ctx, attrs, x): return cast(x, ctx.dtype(attrs['to']), attrs.get('saturate', 1))

@op('CastLike')
def _cast_like(ctx, attrs, x, like): return cast(x, like.dtype, attrs.get('saturate', 1))

@op('Clip')
def _clip(ctx, attrs, x, lo=None, hi=None):
  if 'min' in attrs or 'max' in attrs: return x.clip(attrs.get('min', -math.inf), attrs.get('max', math.inf))
  if lo is not None: x = x.maximum(lo.cast(x.dtype))
  if hi is not None: x = x.minimum(hi.cast(x.dtype))
  return x

@op('HardSigmoid')
def _hard_sigmoid(ctx, attrs, x): return (x * _float_attr(attrs, 'alpha', 0.2) + _float_attr(attrs, 'beta', 0.5)).clip(0, 1)

@op('HardSwish')
def _hard_swish(ctx, attrs, x): return x * (x * (1 / 6) + 0.5).clip(0, 1)

@op('LeakyRelu')
def _leaky(ctx, attrs, x): return x.leaky_relu(_float_attr(attrs, 'alpha', 0.01))

@op('Elu')
def _elu(ctx, attrs, x): return (x < 0).where(_float_attr(attrs, 'alpha', 1.0) * (x.exp() - 1), x)

@op('Selu')
def _selu(ctx, attrs, x):
  a, g = _float_attr(attrs, 'alpha', 1.67326319217681884765625), _float_attr(attrs, 'gamma', 1.05070102214813232421875)
  return g * (x <= 0).where(a * (x.exp() - 1), x)

@op('PRelu')
def _prelu(ctx, attrs, x, slope): return (x < 0).where(x * slope, x)

@op('Softplus')
def _softplus(ctx, attrs, x): return x.softplus()

@op('Gelu')
def _gelu(ctx, attrs, x):
  if attrs.get('approximate', 'none') == 'tanh': return x.gelu()
  return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

# ---------------------------------------------------------------- linear algebra and nn

@op('MatMul')
def _matmul(ctx, attrs, a, b): return a.matmul(b)

@op('Gemm')
def _gemm(ctx, attrs, a, b, c=None):
  if attrs.get('transA', 0): a = a.T
  if attrs.get('transB', 0): b = b.T
  r = a.matmul(b)
  if (alpha := _float_attr(attrs, 'alpha', 1.0)) != 1.0: r = r * alpha
  if c is not None: r = r + (c * _float_attr(attrs, 'beta', 1.0) if attrs.get('beta', 1.0) != 1.0 else c)
  return r

def _conv_params(ctx, attrs, x, k):
  nk = len(k)
  s = tuple(attrs.get('strides', [1] * nk)); d = tuple(attrs.get('dilations', [1] * nk))
  return s, d, _pool_pads(ctx, {**attrs, 'ceil_mode': 0}, x, k, s, d)

@op('Conv')
def _conv(ctx, attrs, x, w, b=None):
  k = w.shape[2:]
  s, d, pads = _conv_params(ctx, attrs, x, k)
  nk = len(k)
  # conv2d's padding (flat from the last axis, as torch's F.pad)
  flat = [p for i in reversed(range(nk)) for p in (pads[i], pads[i + nk])]
  return x.conv2d(w, b, stride=s, dilation=d, groups=attrs.get('group', 1), padding=flat)

@op('ConvTranspose')
def _conv_t(ctx, attrs, x, w, b=None):
  nk = w.ndim - 2
  s = tuple(attrs.get('strides', [1] * nk)); d = tuple(attrs.get('dilations', [1] * nk))
  pads, opad = list(attrs.get('pads', [0] * 2 * nk)), list(attrs.get('output_padding', [0] * nk))
  if 'output_shape' in attrs or attrs.get('auto_pad', 'NOTSET') not in ('NOTSET', 'VALID'):
    sp = x.shape[2:]; k = w.shape[2:]
    out = list(attrs.get('output_shape', [sp[i] * s[i] for i in range(nk)]))[-nk:]
    for i in range(nk):
      tot = s[i] * (sp[i] - 1) + opad[i] + ((k[i] - 1) * d[i] + 1) - out[i]
      lo = tot // 2 if attrs.get('auto_pad', 'NOTSET') == 'SAME_UPPER' else tot - tot // 2  # the odd one at the end but for SAME_UPPER
      pads[i], pads[i + nk] = lo, tot - lo
  return conv_transpose(x, w, b, s, pads, d, attrs.get('group', 1), opad)

@op('Col2Im')
def _col2im(ctx, attrs, x, image_shape, block_shape):
  """The adjoint of im2col: a grouped ConvTranspose whose one-hot weight puts each of the block's offsets in place."""
  img, blk = ctx.ints(image_shape), ctx.ints(block_shape)
  nk, K = len(blk), math.prod(blk)
  d, s = attrs.get('dilations', [1] * nk), attrs.get('strides', [1] * nk)
  p = list(attrs.get('pads', [0] * 2 * nk))
  L = [(img[i] + p[i] + p[i + nk] - d[i] * (blk[i] - 1) - 1) // s[i] + 1 for i in range(nk)]
  C = x.shape[1] // K
  w = np.zeros((C * K, 1, *blk), np.float32)
  w[(np.arange(C * K),) + (0,) + np.unravel_index(np.arange(C * K) % K, blk)] = 1
  full = [(L[i] - 1) * s[i] + d[i] * (blk[i] - 1) + 1 for i in range(nk)]  # what the windows cover; the rest is zeros
  y = conv_transpose(x.reshape(x.shape[0], C * K, *L), ctx.const(w.astype(x.dtype.np)), None, s, [0] * 2 * nk, d, C, [0] * nk)
  y = y.pad(((0, 0), (0, 0)) + tuple((0, img[i] + p[i] + p[i + nk] - full[i]) for i in range(nk)))
  return y.shrink(((0, y.shape[0]), (0, C)) + tuple((p[i], p[i] + img[i]) for i in range(nk)))

@op('Det')
def _det(ctx, attrs, x):
  """Gaussian elimination with partial pivoting, unrolled over the (static) size: the product of the pivots, its sign
  flipped per row swap. A row swap is a rank-2 update by one-hot rows, so it stays in the graph."""
  n = x.shape[-1]
  a, det = x.cast(dtypes.float32), None
  ar = Tensor.arange(n, device=x.device)
  for k in range(n):
    col = a.shrink((None,) * (a.ndim - 1) + ((k, k + 1),)).reshape(*a.shape[:-1])  # column k
    p = (ar >= k).where(col.abs(), -1).argmax(-1, keepdim=True)  # the largest pivot candidate at or below k
    ep, ek = (ar == p).cast(a.dtype), (ar == k).cast(a.dtype)
    rp, rk = (ep.unsqueeze(-1) * a).sum(-2), a[..., k, :]
    a = a + ek.unsqueeze(-1) * (rp - rk).unsqueeze(-2) + ep.unsqueeze(-1) * (rk - rp).unsqueeze(-2)
    piv = a[..., k, k]
    f = ((ar > k).cast(a.dtype) * a[..., :, k] / (piv == 0).where(1, piv).unsqueeze(-1)).unsqueeze(-1)
    a = a - f * a[..., k, :].unsqueeze(-2)
    term = (p.reshape(piv.shape) == k).where(piv, -piv)
    det = term if det is None else det * term
  return (det if det is not None else Tensor.ones(*x.shape[:-2], device=x.device)).cast(x.dtype)

def _channel(t, nd): return t.reshape(1, -1, *(1,) * (nd - 2))

@op('BatchNormalization')
def _batchnorm(ctx, attrs, x, scale, bias, mean, var, *_):
  eps = _float_attr(attrs, 'epsilon', 1e-5)
  if attrs.get('training_mode', 0):  # normalised by the batch's statistics; the running ones updated by momentum
    axes, mom = tuple(i for i in range(x.ndim) if i != 1), _float_attr(attrs, 'momentum', 0.9)
    bm, bv = x.mean(axes), x.var(axes, correction=0)
    y = (x - _channel(bm, x.ndim)) * _channel((bv + eps).rsqrt() * scale, x.ndim) + _channel(bias, x.ndim)
    return y, (mean * mom + bm * (1 - mom)).cast(x.dtype), (var * mom + bv * (1 - mom)).cast(x.dtype)
  if all(ctx.is_const(t) for t in (scale, bias, mean, var)):
    # weights known at import (inference): folded into one scale and shift per channel, as onnxruntime folds them, so
    # the kernels that read x do not compute sqrt(var + eps) again per element (per output channel of a 1x1 conv after it)
    s, b, m, v = (ctx.array(t).astype(np.float64) for t in (scale, bias, mean, var))
    inv = s / np.sqrt(v + eps)
    dt = x.dtype.np if x.dtype.is_float else np.float32
    return x * _channel(ctx.const(inv.astype(dt)), x.ndim) + _channel(ctx.const((b - m * inv).astype(dt)), x.ndim)
  inv = (var + eps).rsqrt() * scale
  return (x - _channel(mean, x.ndim)) * _channel(inv, x.ndim) + _channel(bias, x.ndim)

@op('InstanceNormalization')
def _instnorm(ctx, attrs, x, scale, bias):
  y = x.layernorm(tuple(range(2, x.ndim)), _float_attr(attrs, 'epsilon', 1e-5))
  return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)

@op('LayerNormalization')
def _layernorm(ctx, attrs, x, scale, bias=None):
  """Y, and the Mean and InvStdDev outputs (float32, keepdims)."""
  axes = tuple(range(_axis(attrs.get('axis', -1), x.ndim), x.ndim))
  xf = x.cast(dtypes.float32)
  mean = xf.mean(axes, keepdim=True)
  inv = ((xf - mean) * (xf - mean)).mean(axes, keepdim=True).add(_float_attr(attrs, 'epsilon', 1e-5)).rsqrt()
  y = ((xf - mean) * inv).cast(x.dtype) * scale
  return (y + bias if bias is not None else y, mean, inv)

@op('MaxPool', 'AveragePool')
def _pool(ctx, attrs, x):
  k = tuple(attrs['kernel_shape']); nk = len(k)
  s = tuple(attrs.get('strides', [1] * nk)); d = tuple(attrs.get('dilations', [1] * nk))
  pads = _pool_pads(ctx, attrs, x, k, s, d)
  red = tuple(range(-nk, 0))
  if ctx.node.op_type == 'MaxPool':
    lowest = -math.inf if x.dtype.is_float else D.min_max(x.dtype)[0]
    win = _spatial_pad(x, pads, lowest)._pool(k, s, d)
    y = win.max(red)
    if len(ctx.node.output) < 2 or not ctx.node.output[1]: return y
    # Indices: the first maximum of each window (the least flat position: windows are row-major), flat over the
    # input's N, C and spatial axes (storage_order 1 takes the spatial axes column-major)
    sp = x.shape[2:]
    pos = np.arange(math.prod(sp)).reshape(sp)
    if attrs.get('storage_order', 0): pos = np.arange(math.prod(sp)).reshape(sp[::-1]).T
    pw = _spatial_pad(ctx.const(pos.astype(np.int64)), pads, math.prod(sp))._pool(k, s, d)
    first = (win == y.reshape(*y.shape, *(1,) * nk)).where(pw, math.prod(sp)).min(red)
    return y, first + Tensor.arange(x.shape[0] * x.shape[1], device=x.device).reshape(x.shape[0], x.shape[1], *(1,) * nk) * math.prod(sp)
  total = _spatial_pad(x, pads)._pool(k, s, d).sum(red)
  if attrs.get('count_include_pad', 0):
    # the explicit pads count; what ceil_mode added past them does not
    base = _pool_pads(ctx, {**attrs, 'ceil_mode': 0}, x, k, s, d)
    ones = Tensor.ones(*(v + base[i] + base[i + nk] for i, v in enumerate(x.shape[2:])), device=x.device)
    cnt = ones.pad(tuple((0, pads[i + nk] - base[i + nk]) for i in range(nk)))
  else:
    cnt = _spatial_pad(Tensor.ones(*x.shape[2:], device=x.device), pads)
  return total / cnt._pool(k, s, d).sum(red)

@op('LpPool')
def _lp_pool(ctx, attrs, x):
  k = tuple(attrs['kernel_shape']); nk = len(k)
  s = tuple(attrs.get('strides', [1] * nk)); d = tuple(attrs.get('dilations', [1] * nk))
  p = attrs.get('p', 2)
  w = _spatial_pad(x.abs().pow(p), _pool_pads(ctx, attrs, x, k, s, d))._pool(k, s, d)
  return w.sum(tuple(range(-nk, 0))).pow(1 / p).cast(x.dtype)

@op('LpNormalization')
def _lp_norm(ctx, attrs, x):
  p, a = attrs.get('p', 2), attrs.get('axis', -1)
  n = x.abs().sum(a, keepdim=True) if p == 1 else (x * x).sum(a, keepdim=True).sqrt()
  return (n == 0).where(0, x / n).cast(x.dtype)  # a zero norm gives 0, not 0/0

@op('LRN')
def _lrn(ctx, attrs, x):
  """The sum of squares over a window of `size` channels around each, as a pool along the channel axis."""
  size = attrs['size']
  sq = (x * x).transpose(1, -1).pad(((0, 0),) * (x.ndim - 1) + (((size - 1) // 2, size - 1 - (size - 1) // 2),))
  ss = sq._pool((size,), 1).sum(-1).transpose(1, -1)
  a, b, bias = _float_attr(attrs, 'alpha', 1e-4), _float_attr(attrs, 'beta', 0.75), _float_attr(attrs, 'bias', 1.0)
  return x / (bias + a / size * ss).pow(b)

@op('MaxUnpool')
def _max_unpool(ctx, attrs, x, idx, out_shape=None):
  """Each value written at its index (flat over the whole unpooled shape), per (n, c) plane as a one-hot sum; an
  output_shape larger than that shape pads its ends with zeros."""
  k = attrs['kernel_shape']; nk = len(k)
  s, p = attrs.get('strides', [1] * nk), attrs.get('pads', [0] * 2 * nk)
  shp = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * s[i] - p[i] - p[i + nk] + k[i] for i in range(nk)]
  n, c, plane = shp[0], shp[1], math.prod(shp[2:])
  base = Tensor.arange(n * c, device=x.device).reshape(n, c, 1) * plane
  i = idx.reshape(n, c, -1).cast(dtypes.int64) - base
  hit = i.unsqueeze(-1) == Tensor.arange(plane, device=x.device)
  y = hit.where(x.reshape(n, c, -1, 1), 0).sum(2).cast(x.dtype).reshape(*shp)
  if out_shape is None: return y
  out = ctx.ints(out_shape)
  if any(o < v for o, v in zip(out, shp)): raise OnnxError(f"MaxUnpool output_shape {out} is smaller than the unpooled shape {shp}")
  return y.pad(tuple((0, o - v) for o, v in zip(out, shp)))

@op('GlobalAveragePool')
def _gap(ctx, attrs, x): return x.mean(tuple(range(2, x.ndim)), keepdim=True)

@op('GlobalMaxPool')
def _gmp(ctx, attrs, x): return x.max(tuple(range(2, x.ndim)), keepdim=True)

@op('Attention')
def _attention(ctx, attrs, q, k, v, mask=None, past_k=None, past_v=None, *rest):
  """ONNX's Attention (opset 23) as scaled_dot_product_attention, so that a device with fused attention kernels runs
  it as one (its mask, grouped-query heads, scale and softcap too): 3-d inputs split into q_num_heads and kv_num_heads heads,
  k and v after past_key and past_value (present_key, present_value), a causal mask aligned to the last keys where
  there is a past (query i sees keys j <= i + the past's length) and composed with attn_mask. What sdpa does not
  take (the qk_matmul_output, softmax_precision, opset 24's nonpad_kv_seqlen, opset 25's windows, a mask
  that does not broadcast to the scores), and half floats where no fused kernel runs them, is ONNX's own function
  body."""
  outs = ctx.node.output
  ins = [q, k, v, mask, past_k, past_v, *rest]
  while ins[-1] is None: ins.pop()
  def by_its_function():  # (the node traced through the function body ONNX defines it by)
    from tgc.frontend.onnx import _expand
    return _expand(ctx, attrs, *ins)
  windowed = attrs.get('left_window_size', -1) != -1 or attrs.get('right_window_size', -1) != -1
  if attrs.get('softcap', 0.0) < 0 or (len(outs) > 3 and outs[3]) or 'softmax_precision' in attrs or (past_k is None) != (past_v is None) \
     or any(x is not None for x in rest) or windowed:
    return by_its_function()
  three = q.ndim == 3
  if three:  # (batch, rows, heads x head size) -> (batch, heads, rows, head size)
    heads = lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] // h).transpose(1, 2)
    q, k, v = heads(q, attrs['q_num_heads']), heads(k, attrs['kv_num_heads']), heads(v, attrs['kv_num_heads'])
  if past_k is not None: k, v = past_k.cat(k, dim=-2), past_v.cat(v, dim=-2)
  L, S, past = q.shape[-2], k.shape[-2], 0 if past_k is None else past_k.shape[-2]
  scores = q.shape[:-1] + (S,)
  if mask is not None and not broadcasts_to(mask.shape, scores):
    return by_its_function()
  causal = bool(attrs.get('is_causal', 0))
  if causal and (past or mask is not None):  # (the causal frontier as a mask of its own, composed with attn_mask)
    seen = Tensor.ones(L, S, dtype=dtypes.bool, device=q.device).tril(past)
    mask = seen if mask is None else (mask & seen) if mask.dtype == dtypes.bool else mask + seen.where(0.0, -math.inf).cast(mask.dtype)
    causal = False
  gqa = q.shape[-3] != k.shape[-3]
  cap = attrs.get('softcap', 0.0) or None
  y = q._attention(k, v, causal, mask, gqa=gqa, scale=attrs.get('scale'), softcap=cap)  # (the device's fused kernel)
  if y is None and q.dtype.itemsize < 4:  # (else half floats as ONNX's function body rounds them: the softmax in q's type)
    return by_its_function()
  if y is None: y = q.scaled_dot_product_attention(k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa, scale=attrs.get('scale'), softcap=cap)
  if three: y = y.transpose(1, 2).reshape(y.shape[0], L, -1)
  return y, k, v

@op('Softmax', 'LogSoftmax')
def _softmax(ctx, attrs, x):
  f = Tensor.softmax if ctx.node.op_type == 'Softmax' else Tensor.log_softmax
  if ctx.opset < 13: return _coerce2d(f, x, attrs.get('axis', 1))
  return f(x, attrs.get('axis', -1))

@op('ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1', 'ReduceL2', 'ReduceSumSquare', 'ReduceLogSumExp', 'ReduceLogSum')
def _reduce(ctx, attrs, x, *rest):
  axes, keep = _reduce_axes(ctx, attrs, (x, *rest), x), bool(attrs.get('keepdims', 1))
  if not axes: return x
  t = ctx.node.op_type
  if t == 'ReduceSum': return x.sum(axes, keep).cast(x.dtype)
  if t == 'ReduceMean': return x.mean(axes, keep).cast(x.dtype)
  if t == 'ReduceMax': return x.max(axes, keep)
  if t == 'ReduceMin': return x.min(axes, keep)
  if t == 'ReduceProd': return x.prod(axes, keep).cast(x.dtype)
  if t == 'ReduceL1': return x.abs().sum(axes, keep).cast(x.dtype)
  if t == 'ReduceL2': return (x * x).sum(axes, keep).sqrt().cast(x.dtype)
  if t == 'ReduceSumSquare': return (x * x).sum(axes, keep).cast(x.dtype)
  if t == 'ReduceLogSum': return x.sum(axes, keep).log()
  m = x.max(axes, keepdim=True)
  r = (x - m).exp().sum(axes, keepdim=True).log() + m
  return r if keep else r.reshape(tuple(s for i, s in enumerate(r.shape) if i not in axes))

@op('ArgMax', 'ArgMin')
def _argmax(ctx, attrs, x):
  a, keep = _axis(attrs.get('axis', 0), x.ndim), bool(attrs.get('keepdims', 1))
  fn = Tensor.argmax if ctx.node.op_type == 'ArgMax' else Tensor.argmin
  if attrs.get('select_last_index', 0): return (x.shape[a] - 1 - fn(x.flip(a), a, keep)).cast(dtypes.int64)
  return fn(x, a, keep).cast(dtypes.int64)

# ---------------------------------------------------------------- sequences and optionals
# a sequence is a Python list of Tensors; an optional holding nothing is EMPTY

def _seq(t, what):
  if not isinstance(t, list): raise OnnxError(f"{what} expects a sequence, got {'an empty optional' if t is EMPTY else 'a tensor'}")
  return t

def _pos(ctx, p, n, end):
  """A sequence position from its tensor (negatives from the end), or `end` where it is absent."""
  if p is None: return end
  i = ctx.ints(p)[0]
  if not -n <= i <= n: raise OnnxError(f"sequence position {i} is out of range for a sequence of {n}")
  return i + n if i < 0 else i

@op('SequenceConstruct')
def _seq_construct(ctx, attrs, *xs): return list(xs)

@op('SequenceEmpty')
def _seq_empty(ctx, attrs): return []

@op('SequenceLength')
def _seq_length(ctx, attrs, s): return ctx.const(np.array(len(_seq(s, 'SequenceLength')), np.int64))

@op('SequenceAt')
def _seq_at(ctx, attrs, s, p):
  s = _seq(s, 'SequenceAt')
  i = _pos(ctx, p, len(s), None)
  if i == len(s): raise OnnxError(f"SequenceAt position {i} is out of range for a sequence of {len(s)}")
  return s[i]

@op('SequenceInsert')
def _seq_insert(ctx, attrs, s, t, p=None):
  s = list(_seq(s, 'SequenceInsert'))
  s.insert(_pos(ctx, p, len(s), len(s)), t)
  return s

@op('SequenceErase')
def _seq_erase(ctx, attrs, s, p=None):
  s = list(_seq(s, 'SequenceErase'))
  i = _pos(ctx, p, len(s), len(s) - 1)
  if not 0 <= i < len(s): raise OnnxError(f"SequenceErase position {i} is out of range for a sequence of {len(s)}")
  del s[i]
  return s

@op('ConcatFromSequence')
def _concat_from_seq(ctx, attrs, s):
  s = _seq(s, 'ConcatFromSequence')
  if not s: raise OnnxError("ConcatFromSequence of an empty sequence")
  if attrs.get('new_axis', 0): return Tensor.stack(*s, dim=_axis(attrs['axis'], s[0].ndim + 1))
  return _concat(ctx, attrs, *s)

@op('SplitToSequence')
def _split_to_seq(ctx, attrs, x, split=None):
  a = _axis(attrs.get('axis', 0), x.ndim)
  if split is None:  # pieces of 1, their axis dropped unless keepdims
    return [p if attrs.get('keepdims', 1) else p.squeeze(a) for p in x.split(1, a)]
  sz = ctx.ints(split)
  return list(x.split(sz[0] if split.ndim == 0 else sz, a))

@op('SequenceMap')
def _seq_map(ctx, attrs, *ins):
  """The body once per element of the first sequence (the other sequences' element alike, tensors whole)."""
  from tgc.frontend.onnx import _body
  n = len(_seq(ins[0], 'SequenceMap'))
  if any(isinstance(t, list) and len(t) != n for t in ins): raise OnnxError("SequenceMap's sequences differ in length")
  res = [_body(ctx, attrs['body'], [t[i] if isinstance(t, list) else t for t in ins]) for i in range(n)]
  return tuple([r[j] for r in res] for j in range(len(attrs['body'].output)))

@op('Optional')
def _optional(ctx, attrs, x=None): return EMPTY if x is None else x

@op('OptionalHasElement')
def _optional_has(ctx, attrs, x=None): return ctx.const(np.array(x is not None and x is not EMPTY))

@op('OptionalGetElement')
def _optional_get(ctx, attrs, x):
  if x is EMPTY: raise OnnxError("OptionalGetElement of an empty optional")
  return x

# ---------------------------------------------------------------- quantization

def _qparam(v, x, axis, block=0):
  """A scale or zero point broadcast to x: a scalar, one per index of axis (1-D), or one per block along axis."""
  if v.numel() == 1: return v.reshape(())
  a = _axis(axis, x.ndim)
  if not block: return v.reshape(tuple(-1 if i == a else 1 for i in range(x.ndim)))
  return v.repeat_interleave(block, a).shrink(tuple((0, x.shape[a]) if i == a else None for i in range(x.ndim)))

def _saturate(q: Tensor, dt) -> Tensor: return q.round().clip(*D.min_max(dt)).cast(dt)  # ONNX rounds half to even

@op('QuantizeLinear')
def _quantize(ctx, attrs, x, scale, zp=None):
  dt = zp.dtype if zp is not None else ctx.dtype(attrs['output_dtype']) if attrs.get('output_dtype') else dtypes.uint8
  f8 = dt.fmt is not None and dt.fmt.bits == 8
  if not dt.is_int and not f8: raise OnnxError(f"QuantizeLinear to {dt} is not supported (integer and 8-bit float outputs only)")
  a, blk = attrs.get('axis', 1), attrs.get('block_size', 0)
  if attrs.get('precision'): x, scale = x.cast(ctx.dtype(attrs['precision'])), scale.cast(ctx.dtype(attrs['precision']))
  if f8:  # the 8-bit floats round to nearest even as Cast does, saturating or not as the attribute says
    q = x.cast(dtypes.float32) / _qparam(scale, x, a, blk).cast(dtypes.float32)
    return cast(q + _qparam(zp, x, a, blk).cast(dtypes.float32) if zp is not None else q, dt, attrs.get('saturate', 1))
  q = (x / _qparam(scale, x, a, blk)).round()
  return _saturate(q + _qparam(zp, x, a, blk).cast(q.dtype) if zp is not None else q, dt)

@op('DequantizeLinear')
def _dequantize(ctx, attrs, x, scale, zp=None):
  a, blk = attrs.get('axis', 1), attrs.get('block_size', 0)
  dx = x.cast(dtypes.float32) - (_qparam(zp, x, a, blk).cast(dtypes.float32) if zp is not None else 0)
  return (dx * _qparam(scale, x, a, blk)).cast(ctx.dtype(attrs['output_dtype']) if attrs.get('output_dtype') else scale.dtype)

def _zp_sub(t, zp, axis=None):
  """t in int32 less its zero point (a scalar, or 1-D along axis)."""
  t = t.cast(dtypes.int32)
  if zp is None: return t
  return t - (zp.cast(dtypes.int32).reshape(()) if zp.numel() == 1 else _qparam(zp, t, axis).cast(dtypes.int32))

@op('MatMulInteger')
def _matmul_integer(ctx, attrs, a, b, azp=None, bzp=None): return _zp_sub(a, azp, -2).matmul(_zp_sub(b, bzp, -1))

@op('ConvInteger')
def _conv_integer(ctx, attrs, x, w, xzp=None, wzp=None):
  return _conv(ctx, attrs, _zp_sub(x, xzp), _zp_sub(w, wzp, 0))  # the zero point pads: 0 once subtracted

@op('QLinearMatMul')
def _qlinear_matmul(ctx, attrs, a, asc, azp, b, bsc, bzp, ysc, yzp=None):
  acc = _zp_sub(a, azp, -2).matmul(_zp_sub(b, bzp, -1)).cast(dtypes.float32)
  y = acc * (asc.cast(dtypes.float32) * bsc.cast(dtypes.float32) / ysc.cast(dtypes.float32))
  return _saturate(y + yzp.cast(dtypes.float32) if yzp is not None else y, yzp.dtype if yzp is not None else a.dtype)

@op('QLinearConv')
def _qlinear_conv(ctx, attrs, x, xsc, xzp, w, wsc, wzp, ysc, yzp=None, b=None):
  acc = _conv(ctx, attrs, _zp_sub(x, xzp), _zp_sub(w, wzp, 0), b).cast(dtypes.float32)
  y = acc * (xsc * _qparam(wsc, acc, 1) / ysc)
  return _saturate(y + yzp.cast(dtypes.float32) if yzp is not None else y, yzp.dtype if yzp is not None else x.dtype)

# ---------------------------------------------------------------- signal

def _dft_last(ctx, re, im, L, inverse=False, onesided=False, window=None):
  """The DFT of re + i*im along the last axis (cut or zero-padded to L), as products with static cos/sin matrices:
  forward (onesided: the first L//2+1 frequencies), inverse (divided by L), or inverse onesided (irfft: real out)."""
  n = re.shape[-1]
  if inverse and onesided: n = min(n, L // 2 + 1)
  else: n = min(n, L)
  cut = lambda t: t if t is None or t.shape[-1] == n else t.shrink((None,) * (t.ndim - 1) + ((0, n),))
  re, im = cut(re), cut(im)
  rows = np.arange(n)[:, None]
  cols = np.arange(L // 2 + 1 if onesided and not inverse else L)[None, :]
  th = 2 * np.pi * ((rows * cols) % L) / L
  c, sn = np.cos(th), np.sin(th)
  if window is not None: c, sn = c * window[:n, None], sn * window[:n, None]
  if inverse and onesided:  # the conjugate half counts twice, but for the 0 and L/2 frequencies
    w = np.where((rows == 0) | (2 * rows == L), 1.0, 2.0) / L
    c, sn = c * w, sn * w
  elif inverse: c, sn = c / L, sn / L
  mm = lambda t, m: t.matmul(ctx.const(m.astype(np.float32)))
  if im is None: ore, oim = mm(re, c), mm(re, -sn if not inverse else sn)
  elif not inverse: ore, oim = mm(re, c) + mm(im, sn), mm(im, c) - mm(re, sn)
  else: ore, oim = mm(re, c) - mm(im, sn), mm(re, sn) + mm(im, c)
  return ore, (None if inverse and onesided else oim)

def _complex_parts(x):
  """(real, imaginary or None) of a signal whose last axis holds 1 (real) or 2 (real, imaginary) values."""
  xf = x.cast(dtypes.float32)
  part = lambda k: xf.shrink((None,) * (x.ndim - 1) + ((k, k + 1),)).reshape(x.shape[:-1])
  return part(0), part(1) if x.shape[-1] == 2 else None

@op('DFT')
def _dft(ctx, attrs, x, length=None, axis=None):
  a = _axis(ctx.ints(axis)[0] if axis is not None else attrs.get('axis', 1 if ctx.opset < 20 else -2), x.ndim)
  inv, one = bool(attrs.get('inverse', 0)), bool(attrs.get('onesided', 0))
  n = x.shape[a]
  L = ctx.ints(length)[0] if length is not None and length.numel() else 2 * (n - 1) if inv and one else n
  re, im = (t if t is None else t.transpose(a, -1) for t in _complex_parts(x))
  ore, oim = _dft_last(ctx, re, im, L, inv, one)
  y = ore.unsqueeze(-1) if oim is None else ore.stack(oim, dim=-1)
  return y.transpose(a, -2).cast(x.dtype)

@op('STFT')
def _stft(ctx, attrs, x, step, window=None, length=None):
  """Frames every frame_step samples, each weighted by the window, then a forward DFT of frame_length."""
  fl = ctx.ints(length)[0] if length is not None else window.shape[0] if window is not None else x.shape[-2]
  st = ctx.ints(step)[0]
  w = ctx.array(window).astype(np.float64) if window is not None else np.ones(fl)
  frames = lambda t: t if t is None else t.unfold(1, w.shape[0], st)  # (batch, frames, window)
  re, im = (frames(t) for t in _complex_parts(x))
  ore, oim = _dft_last(ctx, re, im, fl, onesided=bool(attrs.get('onesided', 1)), window=w)
  return ore.stack(oim, dim=-1).cast(x.dtype)

@op('BitCast')
def _bitcast(ctx, attrs, x):
  dt = ctx.dtype(attrs['to'])
  if dtypes.bool in (x.dtype, dt) and (x.dtype if dt == dtypes.bool else dt).itemsize == 1:
    return x.cast(dt)  # a bool is the byte 0 or 1 (whatever tgc stores it as): the cast keeps its bits
  return x.bitcast(dt)

# ---------------------------------------------------------------- training (ai.onnx.preview.training)
# each updates n tensors at once: inputs R (learning rate), T (iteration), then the n Xs, the n Gs and the states

def _groups(xs, k):
  n = len(xs) // k
  return [xs[i * n:(i + 1) * n] for i in range(k)]

@op('ai.onnx.preview.training.Adagrad')
def _adagrad(ctx, attrs, r, t, *xs):
  eps, decay, nc = (_float_attr(attrs, k, 0.0) for k in ('epsilon', 'decay_factor', 'norm_coefficient'))
  lr = r / (1 + t.cast(r.dtype) * decay)
  new_x, new_h = [], []
  for x, g, h in zip(*_groups(xs, 3)):
    g = g + nc * x
    h = h + g * g
    new_x.append(x - lr * g / (h.sqrt() + eps)); new_h.append(h)
  return tuple(new_x + new_h)

@op('ai.onnx.preview.training.Momentum')
def _momentum(ctx, attrs, r, t, *xs):
  a, b, nc = (_float_attr(attrs, k, 0.0) for k in ('alpha', 'beta', 'norm_coefficient'))
  bt = (t > 0).where(b, 1.0)  # the gradient counts whole at the first iteration
  new_x, new_v = [], []
  for x, g, v in zip(*_groups(xs, 3)):
    g = g + nc * x
    v = a * v + bt * g
    new_x.append(x - r * (g + a * v if attrs.get('mode', 'standard') == 'nesterov' else v)); new_v.append(v)
  return tuple(new_x + new_v)

@op('ai.onnx.preview.training.Adam')
def _adam(ctx, attrs, r, t, *xs):
  a, b = _float_attr(attrs, 'alpha', 0.9), _float_attr(attrs, 'beta', 0.999)
  eps, nc, post = (_float_attr(attrs, k, 0.0) for k in ('epsilon', 'norm_coefficient', 'norm_coefficient_post'))
  tf = t.cast(dtypes.float32)
  lr = (t > 0).where(r * (1 - Tensor.full((), b, device=r.device).pow(tf)).sqrt() / (1 - Tensor.full((), a, device=r.device).pow(tf)), r)  # bias correction past step 0
  new_x, new_v, new_h = [], [], []
  for x, g, v, h in zip(*_groups(xs, 4)):
    g = g + nc * x
    v, h = a * v + (1 - a) * g, b * h + (1 - b) * g * g
    new_x.append((1 - post) * (x - lr * v / (h.sqrt() + eps))); new_v.append(v); new_h.append(h)
  return tuple(new_x + new_v + new_h)

# ---------------------------------------------------------------- ai.onnx.ml

@op('ai.onnx.ml.Binarizer')
def _binarizer(ctx, attrs, x): return (x > _float_attr(attrs, 'threshold', 0.0)).cast(x.dtype)

@op('ai.onnx.ml.ArrayFeatureExtractor')
def _array_feature_extractor(ctx, attrs, x, idx): return x[(slice(None),) * (x.ndim - 1) + (idx.reshape(-1),)]

# ---------------------------------------------------------------- recurrent

_RNN_ACT = {'Relu': lambda x, a, b: x.relu(), 'Tanh': lambda x, a, b: x.tanh(), 'Sigmoid': lambda x, a, b: x.sigmoid(),
            'Affine': lambda x, a, b: x * a + b, 'LeakyRelu': lambda x, a, b: x.leaky_relu(a),
            'ThresholdedRelu': lambda x, a, b: (x > a).where(x, 0), 'ScaledTanh': lambda x, a, b: (x * b).tanh() * a,
            'HardSigmoid': lambda x, a, b: (x * a + b).clip(0, 1), 'Elu': lambda x, a, b: (x < 0).where(a * (x.exp() - 1), x),
            'Softsign': lambda x, a, b: x / (1 + x.abs()), 'Softplus': lambda x, a, b: x.softplus()}
_RNN_ALPHA = {'LeakyRelu': 0.01, 'ThresholdedRelu': 1.0, 'HardSigmoid': 0.2, 'Elu': 1.0}

@op('RNN', 'GRU', 'LSTM')
def _rnn(ctx, attrs, x, w, r, b=None, lens=None, h0=None, c0=None, peep=None):
  """Unrolled over the (static) sequence: per direction, the input projection of all steps at once, then one step
  per position; past a batch row's sequence_lens its state holds and its output is 0."""
  kind = ctx.node.op_type
  ng, nact = {'RNN': (1, 1), 'GRU': (3, 2), 'LSTM': (4, 3)}[kind]
  hs, layout = attrs.get('hidden_size', w.shape[1] // ng), attrs.get('layout', 0)
  direction = attrs.get('direction', 'forward')
  nd = 2 if direction == 'bidirectional' else 1
  if layout: x, h0, c0 = (None if t is None else t.transpose(0, 1) for t in (x, h0, c0))
  T, B = x.shape[:2]
  names = list(attrs.get('activations', {'RNN': ['Tanh'], 'GRU': ['Sigmoid', 'Tanh'], 'LSTM': ['Sigmoid', 'Tanh', 'Tanh']}[kind] * nd))
  al, be = list(attrs.get('activation_alpha', [])), list(attrs.get('activation_beta', []))
  for n in names:
    if n not in _RNN_ACT: raise OnnxError(f"{kind} activation '{n}' is not supported")
  acts = [(lambda f, a, bb: lambda t: f(t, a, bb))(_RNN_ACT[n], al[i] if i < len(al) else _RNN_ALPHA.get(n, 1.0), be[i] if i < len(be) else (0.5 if n == 'HardSigmoid' else 0.0))
          for i, n in enumerate(names)]
  clip = attrs.get('clip')
  cl = (lambda t: t.clip(-clip, clip)) if clip is not None else (lambda t: t)
  keep = None if lens is None else (Tensor.arange(T, device=x.device).reshape(T, 1) < lens.cast(dtypes.int64).reshape(1, B)).reshape(T, B, 1)
  gates = lambda t: [t.shrink((None,) * (t.ndim - 1) + ((k * hs, (k + 1) * hs),)) for k in range(t.shape[-1] // hs)]
  ys, hl, cl_ = [], [], []
  for d in range(nd):
    f, g, hf = (acts[d * nact:(d + 1) * nact] + [None] * 2)[:3]
    wd, rd = w[d], r[d]
    bd = b[d] if b is not None else Tensor.zeros(2 * ng * hs, dtype=x.dtype, device=x.device)
    wb, rb = bd.shrink(((0, ng * hs),)), bd.shrink(((ng * hs, 2 * ng * hs),))
    xw = x.matmul(wd.T) + wb
    h = h0[d] if h0 is not None else Tensor.zeros(B, hs, dtype=x.dtype, device=x.device)
    c = c0[d] if c0 is not None else Tensor.zeros(B, hs, dtype=x.dtype, device=x.device)
    out = [None] * T
    for t in (range(T - 1, -1, -1) if direction == 'reverse' or d == 1 else range(T)):
      if kind == 'RNN': hn = f(cl(xw[t] + h.matmul(rd.T) + rb))
      elif kind == 'GRU':
        xz, xr, xh = gates(xw[t]); rz, rr, rh = gates(rd.T); bz, br, bh = gates(rb)
        z, rg = f(cl(xz + h.matmul(rz) + bz)), f(cl(xr + h.matmul(rr) + br))
        hh = g(cl(xh + (rg * (h.matmul(rh) + bh) if attrs.get('linear_before_reset', 0) else (rg * h).matmul(rh) + bh)))
        hn = (1 - z) * hh + z * h
      else:
        gi, go, gf, gc = gates(xw[t] + h.matmul(rd.T) + rb)
        pi, po, pf = gates(peep[d]) if peep is not None else (0, 0, 0)
        i = f(cl(gi + pi * c))
        fg = 1 - i if attrs.get('input_forget', 0) else f(cl(gf + pf * c))
        cn = fg * c + i * g(cl(gc))
        hn = f(cl(go + po * cn)) * hf(cn)
        c = cn if keep is None else keep[t].where(cn, c)
      out[t] = hn if keep is None else keep[t].where(hn, 0)
      h = hn if keep is None else keep[t].where(hn, h)
    ys.append(Tensor.stack(*out)); hl.append(h); cl_.append(c)
  y, yh, yc = Tensor.stack(*ys, dim=1), Tensor.stack(*hl), Tensor.stack(*cl_)
  if layout: y, yh, yc = y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
  return (y, yh, yc) if kind == 'LSTM' else (y, yh)

# ---------------------------------------------------------------- movement

@op('Reshape')
def _reshape(ctx, attrs, x, shape):
  shp = ctx.ints(shape)
  if not attrs.get('allowzero', 0): shp = [x.shape[i] if v == 0 else v for i, v in enumerate(shp)]
  return x.reshape(*shp)

@op('Transpose')
def _transpose(ctx, attrs, x): return x.permute(*attrs.get('perm', list(range(x.ndim))[::-1]))

@op('Flatten')
def _flatten(ctx, attrs, x):
  a = _axis(attrs.get('axis', 1), x.ndim)
  return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))

def _axes_arg(ctx, attrs, ins):
  if 'axes' in attrs: return list(attrs['axes'])
  return ctx.ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None

@op('Squeeze')
def _squeeze(ctx, attrs, x, *rest):
  axes = _axes_arg(ctx, attrs, (x, *rest))
  axes = [i for i, s in enumerate(x.shape) if s == 1] if axes is None else [_axis(a, x.ndim) for a in axes]
  return x.reshape(*(s for i, s in enumerate(x.shape) if i not in axes))

@op('Unsqueeze')
def _unsqueeze(ctx, attrs, x, *rest):
  axes = _axes_arg(ctx, attrs, (x, *rest)); nd = x.ndim + len(axes)
  axes = sorted(_axis(a, nd) for a in axes)
  shp = list(x.shape)
  for a in axes: shp.insert(a, 1)
  return x.reshape(*shp)

@op('Concat')
def _concat(ctx, attrs, *xs):
  xs = [x for x in xs if x is not None]
  a = _axis(attrs['axis'], xs[0].ndim)
  nonempty = [x for x in xs if x.shape[a]] or xs[:1]
  return nonempty[0].cat(*nonempty[1:], dim=a)

@op('Split')
def _split(ctx, attrs, x, split=None):
  a = _axis(attrs.get('axis', 0), x.ndim); n = x.shape[a]
  sizes = list(attrs['split']) if 'split' in attrs else ctx.ints(split) if split is not None else None
  if sizes is None:
    k = attrs.get('num_outputs', len(ctx.node.output))
    c = -(-n // k); sizes = [c] * (n // c) + ([n % c] if n % c else [])
  outs, at = [], 0
  for s in sizes:
    outs.append(x.shrink(tuple((at, at + s) if i == a else (0, v) for i, v in enumerate(x.shape)))); at += s
  return tuple(outs)

@op('Slice')
def _slice(ctx, attrs, x, starts=None, ends=None, axes=None, steps=None):
  if ctx.opset < 10: st, en, ax, sp = attrs['starts'], attrs['ends'], attrs.get('axes'), None
  else: st, en = ctx.ints(starts), ctx.ints(ends); ax = ctx.ints(axes) if axes is not None else None; sp = ctx.ints(steps) if steps is not None else None
  ax = list(range(len(st))) if ax is None else [_axis(a, x.ndim) for a in ax]
  sl = [slice(None)] * x.ndim
  for i, a in enumerate(ax):
    step = sp[i] if sp else 1
    n = x.shape[a]
    lo, hi = max(-n - 1, min(st[i], n)), max(-n - 1, min(en[i], n))  # Python's slices clamp as ONNX's do
    if step < 0 and hi < -n: hi = None
    sl[a] = slice(lo, hi, step)
  return x[tuple(sl)]

@op('Gather')
def _gather(ctx, attrs, x, idx):
  a = _axis(attrs.get('axis', 0), x.ndim)
  if ctx.is_const(idx):  # static indices: views, no one-hot
    iv = ctx.ints(idx); n = x.shape[a]
    bad = [i for i in iv if not -n <= i < n]
    if bad: raise IndexingError(f"index {bad[0]} is out of range for axis {a} of size {n}")
    if idx.ndim == 0: return x[(slice(None),) * a + (iv[0] + n if iv[0] < 0 else iv[0],)]
  return x[(slice(None),) * a + (idx,)]  # fancy indexing: a gather kernel, negative indices from the end

@op('GatherElements')
def _gather_elements(ctx, attrs, x, idx): return x.gather(attrs.get('axis', 0), idx)

_SCATTER_REDUCE = {'add': 'sum', 'mul': 'prod', 'max': 'amax', 'min': 'amin'}

@op('ScatterElements', 'Scatter')
def _scatter_elements(ctx, attrs, x, idx, upd):
  red = attrs.get('reduction', 'none')
  if red == 'none': return x.scatter(attrs.get('axis', 0), idx, upd)
  return x.scatter_reduce(attrs.get('axis', 0), idx, upd, _SCATTER_REDUCE[red])

@op('TensorScatter')
def _tensor_scatter(ctx, attrs, cache, upd, write=None):
  """The update written into the cache along axis from each batch row's write index (wrapping round if circular)."""
  a = _axis(attrs.get('axis', -2), cache.ndim)
  shape = lambda d: tuple(-1 if i == d else 1 for i in range(cache.ndim))
  pos = Tensor.arange(upd.shape[a], device=cache.device).reshape(shape(a))
  if write is not None: pos = pos + write.cast(dtypes.int64).reshape(shape(0))
  if attrs.get('mode', 'linear') == 'circular': pos = pos % cache.shape[a]
  return cache.scatter(a, pos.expand(*upd.shape), upd)

def _nd_index(x, idx, b=0):
  """The flat position of each index tuple (idx's last axis) among x's axes b..b+k, negatives from the end."""
  k = idx.shape[-1]
  flat = None
  for j in range(k):
    n = x.shape[b + j]
    ij = idx.shrink(tuple((j, j + 1) if i == idx.ndim - 1 else None for i in range(idx.ndim))).reshape(idx.shape[:-1]).cast(dtypes.int64)
    ij = (ij < 0).where(ij + n, ij) * math.prod(x.shape[b + j + 1:b + k])
    flat = ij if flat is None else flat + ij
  return flat

@op('ScatterND')
def _scatter_nd(ctx, attrs, x, idx, upd):
  """x's first k axes flattened to one, written at each index tuple's flat position (a scatter along it)."""
  k, rest = idx.shape[-1], x.shape[idx.shape[-1]:]
  m = math.prod(idx.shape[:-1])
  pos = _nd_index(x, idx).reshape(m, *(1,) * len(rest)).expand(m, *rest)
  xf, uf = x.reshape(math.prod(x.shape[:k]), *rest), upd.reshape(m, *rest)
  red = attrs.get('reduction', 'none')
  r = xf.scatter(0, pos, uf) if red == 'none' else xf.scatter_reduce(0, pos, uf, _SCATTER_REDUCE[red])
  return r.reshape(x.shape)

@op('GatherND')
def _gather_nd(ctx, attrs, x, idx):
  """Per batch (the first batch_dims axes), x's next k axes flattened to one and indexed by each tuple's flat position."""
  b = attrs.get('batch_dims', 0); k = idx.shape[-1]
  nb, rest = math.prod(x.shape[:b]), x.shape[b + k:]
  xf = x.reshape(nb, math.prod(x.shape[b:b + k]), *rest)
  pos = _nd_index(x, idx, b).reshape(nb, -1)
  r = xf[Tensor.arange(nb, device=x.device).reshape(nb, 1), pos]
  return r.reshape(*idx.shape[:-1], *rest)

@op('CumSum', 'CumProd')
def _cumulative(ctx, attrs, x, axis):
  """One scan (exclusive: each position leaves its own element out), reversed by flips around it."""
  a = _axis(ctx.ints(axis)[0], x.ndim)
  if not x.shape[a]: return x
  rev = attrs.get('reverse', 0)
  y = x.flip(a) if rev else x
  r = y._cum('mul' if ctx.node.op_type == 'CumProd' else 'add', a, bool(attrs.get('exclusive', 0))).cast(x.dtype)
  return r.flip(a) if rev else r

@op('TopK')
def _topk(ctx, attrs, x, k=None):
  kk = ctx.ints(k)[0] if k is not None else attrs['k']
  v, i = x.topk(kk, attrs.get('axis', -1), bool(attrs.get('largest', 1)))
  return v, i.cast(dtypes.int64)

@op('Hardmax')
def _hardmax(ctx, attrs, x):
  def hard(t, a):
    a = _axis(a, t.ndim)
    ar = Tensor.arange(t.shape[a], device=t.device).reshape(tuple(-1 if i == a else 1 for i in range(t.ndim)))
    return (t.argmax(a, keepdim=True) == ar).cast(t.dtype)
  return _coerce2d(hard, x, attrs.get('axis', 1)) if ctx.opset < 13 else hard(x, attrs.get('axis', -1))

@op('Einsum')
def _einsum(ctx, attrs, *xs): return Tensor.einsum(attrs['equation'], *xs)

@op('OneHot')
def _one_hot(ctx, attrs, idx, depth, values):
  d = int(ctx.array(depth).reshape(-1)[0])
  a = _axis(attrs.get('axis', -1), idx.ndim + 1)
  i = idx.cast(dtypes.int64)
  i = (i < 0).where(i + d, i)  # negative indices count from the end; others out of range are all off
  ar = Tensor.arange(d, device=idx.device).reshape(tuple(-1 if j == a else 1 for j in range(idx.ndim + 1)))
  return (i.unsqueeze(a) == ar).where(values[1], values[0])

@op('EyeLike')
def _eye_like(ctx, attrs, x):
  r, c = x.shape
  dt = ctx.dtype(attrs['dtype']) if 'dtype' in attrs else x.dtype
  ar = lambda n: Tensor.arange(n, device=x.device)
  return (ar(c).reshape(1, c) - ar(r).reshape(r, 1) == attrs.get('k', 0)).cast(dt)

@op('Compress')
def _compress(ctx, attrs, x, cond):
  """The kept positions come from the condition's values, known at import (the output's shape depends on them)."""
  keep = np.nonzero(ctx.array(cond).reshape(-1))[0]
  if 'axis' not in attrs: x, a = x.reshape(-1), 0
  else: a = _axis(attrs['axis'], x.ndim)
  keep = keep[keep < x.shape[a]]
  if not keep.size: return x.shrink(tuple((0, 0) if i == a else None for i in range(x.ndim)))
  return x[(slice(None),) * a + (ctx.const(keep.astype(np.int64)),)]

@op('NonZero')
def _nonzero(ctx, attrs, x):
  ctx.array(x)  # the count of nonzeros is the output's shape: the compiled code is specialised to x's values
  return x.nonzero().T

@op('ReverseSequence')
def _reverse_sequence(ctx, attrs, x, lens):
  """A gather along the time axis: position t of batch b reads lens[b]-1-t where t < lens[b], else t."""
  b, t = attrs.get('batch_axis', 1), attrs.get('time_axis', 0)
  tt = Tensor.arange(x.shape[t], device=x.device).reshape(tuple(-1 if i == t else 1 for i in range(x.ndim)))
  ln = lens.cast(dtypes.int64).reshape(tuple(-1 if i == b else 1 for i in range(x.ndim)))
  return x.gather(t, (tt < ln).where(ln - 1 - tt, tt).expand(*x.shape))

@op('Expand')
def _expand(ctx, attrs, x, shape):
  shp = ctx.ints(shape)
  nd = max(len(shp), x.ndim)
  a, b = (1,) * (nd - x.ndim) + x.shape, (1,) * (nd - len(shp)) + tuple(shp)
  return x.reshape(*a).expand(*(max(p, q) if 1 in (p, q) else p for p, q in zip(a, b)))

@op('Tile')
def _tile(ctx, attrs, x, reps): return x.repeat(*ctx.ints(reps))

@op('Pad')
def _pad(ctx, attrs, x, pads=None, value=None, axes=None):
  p = list(attrs['pads']) if 'pads' in attrs else ctx.ints(pads)
  mode = attrs.get('mode', 'constant')
  if mode not in ('constant', 'reflect', 'edge', 'wrap'): raise OnnxError(f"Pad mode '{mode}' is not supported")
  v = float(attrs.get('value', 0.0)) if value is None else ctx.array(value).reshape(-1)[0].item() if ctx.array(value).size else 0
  if mode != 'constant' and any(q < 0 for q in p): raise OnnxError(f"Pad mode '{mode}' with negative pads is not supported")
  ax = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in ctx.ints(axes)]
  pairs = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): pairs[a] = (p[i], p[i + len(ax)])
  return x.pad(tuple(pairs), v, mode={'constant': 'constant', 'reflect': 'reflect', 'edge': 'replicate', 'wrap': 'circular'}[mode])

@op('Shape')
def _shape(ctx, attrs, x):
  s = x.shape[attrs.get('start', 0):attrs['end'] if 'end' in attrs else None]
  return ctx.const(np.array(s, np.int64))

@op('Size')
def _size(ctx, attrs, x): return ctx.const(np.array(x.numel(), np.int64))

@op('Range')
def _range(ctx, attrs, start, limit, delta):
  a, b, c = (ctx.array(t).item() for t in (start, limit, delta))
  return ctx.const(np.arange(a, b, c).astype(ctx.array(start).dtype))

@op('ConstantOfShape')
def _const_of_shape(ctx, attrs, shape):
  v = attrs.get('value'); v = np.zeros(1, np.float32) if v is None else v
  return ctx.const(np.full(tuple(ctx.ints(shape)), v.reshape(-1)[0], v.dtype))

@op('Constant')
def _constant(ctx, attrs):
  for k in ('value', 'value_float', 'value_floats', 'value_int', 'value_ints'):
    if k in attrs:
      v = attrs[k]
      return ctx.const(np.asarray(v, np.float32 if 'float' in k else np.int64) if k != 'value' else v)
  raise OnnxError(f"Constant with attribute {sorted(attrs)} is not supported")

@op('Dropout')
def _dropout(ctx, attrs, x, *rest): return (x, Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device))

@op('Trilu')
def _trilu(ctx, attrs, x, k=None):
  kk = ctx.ints(k)[0] if k is not None else 0
  r, c = x.shape[-2:]
  mask = np.triu(np.ones((r, c), bool), kk) if attrs.get('upper', 1) else np.tril(np.ones((r, c), bool), kk)
  return ctx.const(mask).where(x, Tensor._const(0, x.shape, x.dtype, x.device))

# the cubic convolution kernel (Keys) at a distance in [0, 1] and in [1, 2]: numpy arrays or Tensors
def _cubic_near(d, A): return ((A + 2) * d - (A + 3)) * d * d + 1
def _cubic_far(d, A): return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A

def _cubic(A):
  def w(t):
    t = np.abs(t)
    return np.where(t <= 1, _cubic_near(t, A), np.where(t < 2, _cubic_far(t, A), 0.0))
  return w

def _resize_coeffs(mode, nmode, A, antialias):
  """(ratio in (0, 1], scale) -> the weights of the window of input positions around a source coordinate, as ONNX's
  reference computes them: antialias stretches the linear or cubic kernel by 1/scale when downsampling."""
  if mode == 'nearest':
    return lambda r, s: np.array([0.0, 1.0]) if r == 1 else np.array({'round_prefer_floor': [r <= 0.5, r > 0.5], 'round_prefer_ceil': [r < 0.5, r >= 0.5],
                                                                       'floor': [1, 0], 'ceil': [0, 1]}[nmode], np.float64)
  kern, half = (_cubic(A), 2) if mode == 'cubic' else ((lambda t: np.clip(1 - np.abs(t), 0, 1)), 1)
  def coeffs(r, s):
    s = min(s, 1.0) if antialias else 1.0
    lo = int(np.floor(-half / s) + 1)
    c = kern((np.arange(lo, 2 - lo) - r) * s)
    return c / c.sum() if antialias else c
  return coeffs

def _resize_matrix(n, o, s, ctm, coeffs, roi, exclude_outside, extrapolation):
  """The (o, n) matrix of one axis's resize, and the (o,) values added where tf_crop_and_resize reads outside the input."""
  y, ow = np.arange(o, dtype=np.float64), s * n  # (align_corners and the crop take the unrounded output size, as ONNX)
  if ctm == 'half_pixel': src = (y + 0.5) / s - 0.5
  elif ctm == 'pytorch_half_pixel': src = (y + 0.5) / s - 0.5 if ow > 1 else np.full(o, -0.5)
  elif ctm == 'align_corners': src = y * (n - 1) / (ow - 1) if ow != 1 else np.zeros(o)
  elif ctm == 'asymmetric': src = y / s
  elif ctm == 'half_pixel_symmetric': src = (n / 2) * (1 - o / ow) + (y + 0.5) / s - 0.5
  elif ctm == 'tf_crop_and_resize':
    src = (y * (roi[1] - roi[0]) * (n - 1) / (ow - 1) if ow != 1 else np.full(o, (roi[1] - roi[0]) * (n - 1) / 2)) + roi[0] * (n - 1)
  else: raise OnnxError(f"Resize coordinate_transformation_mode '{ctm}' is not supported")
  fl = np.floor(src)
  c = np.stack([coeffs(r, s) for r in np.where(src == fl, 1.0, src - fl)]) if o else np.zeros((0, 2))
  k = c.shape[1]
  # the k positions nearest the source coordinate (ties to the lower), as the reference's edge-padded window
  pw = -(-k // 2); xp = src + pw; pp = np.floor(xp); fr = xp - pp
  off = np.where(fr == 0, -(k // 2), 1 - k // 2) if k % 2 == 0 else np.where(fr <= 0.5, -((k - 1) // 2), 1 - (k - 1) // 2)
  idx = (pp + off).astype(np.int64)[:, None] + np.arange(k) - pw
  if exclude_outside:
    c = np.where((idx < 0) | (idx >= n), 0.0, c)
    c = c / np.where(c.sum(-1, keepdims=True) == 0, 1.0, c.sum(-1, keepdims=True))
  m = np.zeros((o, n))
  np.add.at(m, (np.arange(o)[:, None], np.clip(idx, 0, n - 1)), c)
  out = (src < 0) | (src > n - 1) if ctm == 'tf_crop_and_resize' else np.zeros(o, bool)
  m[out] = 0
  return m, np.where(out, extrapolation, 0.0)

@op('Resize', 'Upsample')
def _resize(ctx, attrs, x, *rest):
  """nearest, linear and cubic, one axis at a time as a product with a static (out, in) matrix."""
  roi, scales, sizes = (list(rest) + [None] * 3)[:3] if ctx.node.op_type == 'Resize' and ctx.opset >= 11 else (None, rest[0] if rest else None, None)
  if ctx.node.op_type == 'Resize' and ctx.opset == 10: scales = rest[0]
  mode = attrs.get('mode', 'nearest')
  if mode not in ('nearest', 'linear', 'cubic'): raise OnnxError(f"Resize mode '{mode}' is not supported (nearest, linear, cubic)")
  ctm = attrs.get('coordinate_transformation_mode', 'half_pixel' if ctx.node.op_type == 'Resize' and ctx.opset >= 11 else 'asymmetric')
  nmode = attrs.get('nearest_mode', 'round_prefer_floor' if ctx.opset >= 11 else 'floor')
  if 'scales' in attrs: sc = list(attrs['scales'])
  elif scales is not None and ctx.array(scales).size: sc = [float(v) for v in ctx.array(scales)]
  else: sc = None
  sz = ctx.ints(sizes) if sizes is not None and ctx.array(sizes).size else None
  ax = list(range(x.ndim)) if attrs.get('axes') is None else [_axis(a, x.ndim) for a in attrs['axes']]
  rv = [float(v) for v in ctx.array(roi).reshape(-1)] if roi is not None and ctx.array(roi).size else None
  full_roi = [(0.0, 1.0)] * x.ndim
  if rv is not None:
    for i, a in enumerate(ax): full_roi[a] = (rv[i], rv[i + len(ax)])
  full_sc, full_sz = [1.0] * x.ndim, list(x.shape)  # the axes not named keep their size
  if sz is None:
    for a, v in zip(ax, sc): full_sc[a], full_sz[a] = v, int(math.floor(x.shape[a] * v))
  else:
    policy = attrs.get('keep_aspect_ratio_policy', 'stretch')
    ratios = [o / x.shape[a] for a, o in zip(ax, sz)]
    for a, o, r in zip(ax, sz, ratios):
      if policy == 'stretch': full_sc[a], full_sz[a] = r, o
      else:
        full_sc[a] = (min if policy == 'not_larger' else max)(ratios)
        full_sz[a] = int(full_sc[a] * x.shape[a] + 0.5)
  coeffs = _resize_coeffs(mode, nmode, _float_attr(attrs, 'cubic_coeff_a', -0.75), attrs.get('antialias', 0))
  for a, (n, o, s) in enumerate(zip(x.shape, full_sz, full_sc)):
    if n == o and math.isclose(s, 1.0) and (ctm != 'tf_crop_and_resize' or full_roi[a] == (0.0, 1.0)): continue
    m, e = _resize_matrix(n, o, s, ctm, coeffs, full_roi[a], attrs.get('exclude_outside', 0), _float_attr(attrs, 'extrapolation_value', 0.0))
    xt = x.transpose(a, -1) if a != x.ndim - 1 else x
    if mode == 'nearest' and not e.any():  # picks one input each: exact in x's own dtype
      y = xt.matmul(ctx.const(m.T.astype(x.dtype.np if x.dtype.is_float or x.dtype.is_int else np.float32)))
    else: y = xt.cast(dtypes.float32).matmul(ctx.const(m.T.astype(np.float32))) + (ctx.const(e.astype(np.float32)) if e.any() else 0)
    if mode != 'nearest' and not x.dtype.is_float: y = y.round().clip(*D.min_max(x.dtype))  # ONNX's saturating cast
    y = y.cast(x.dtype)
    x = y.transpose(a, -1) if a != x.ndim - 1 else y
  return x


def _gs_reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  """x folded back into [lo, hi] by reflections at the borders (GridSample's reflection padding)."""
  rng = hi - lo
  if rng <= 0: return x * 0 + lo
  def fold(dx, near, far, sgn):
    n = (dx / rng).trunc(); r = dx - n * rng
    return (n - (n / 2).floor() * 2 == 0).where(near + sgn * r, far - sgn * r)
  return (x < lo).where(fold(lo - x, lo, hi, 1), (x > hi).where(fold(x - hi, hi, lo, -1), x))

def _gs_weights(g: Tensor, n: int, mode: str, pad: str, align: bool) -> Tensor:
  """(N, *out, n): the weight of each input position of one spatial axis at each output, as ONNX's reference samples."""
  x = (g + 1) / 2 * (n - 1) if align else ((g + 1) * n - 1) / 2
  lo, hi = (0.0, n - 1.0) if align else (-0.5, n - 0.5)
  if mode == 'nearest': x = x.round()  # half to even, as PyTorch
  if pad == 'border': x = ((x < lo) | (x > hi)).where(x.clip(0, n - 1), x)
  elif pad == 'reflection': x = _gs_reflect(x, lo, hi)
  if mode == 'nearest': taps = [(x.trunc(), 1.0)]
  else:
    x0 = x.floor(); t = x - x0
    taps = [(x0, 1 - t), (x0 + 1, t)] if mode == 'linear' else \
           [(x0 - 1, _cubic_far(t + 1, -0.75)), (x0, _cubic_near(t, -0.75)), (x0 + 1, _cubic_near(1 - t, -0.75)), (x0 + 2, _cubic_far(2 - t, -0.75))]
  ar, w = Tensor.arange(n, device=g.device).cast(g.dtype), None
  for i, c in taps:
    if pad == 'border': i = i.clip(0, n - 1)
    elif pad == 'reflection': i = _gs_reflect(i, lo, hi).trunc()
    k = (i.unsqueeze(-1) == ar).where(c.unsqueeze(-1) if isinstance(c, Tensor) else c, 0)  # (zeros padding: no match outside)
    w = k if w is None else w + k
  return w

@op('GridSample')
def _grid_sample(ctx, attrs, x, grid):
  """Separable: one (N, outputs, n) weight matrix per spatial axis, contracted with x one axis at a time."""
  mode = {'bilinear': 'linear', 'bicubic': 'cubic'}.get(attrs.get('mode', 'linear'), attrs.get('mode', 'linear'))
  pad, align = attrs.get('padding_mode', 'zeros'), bool(attrs.get('align_corners', 0))
  if mode not in ('nearest', 'linear', 'cubic'): raise OnnxError(f"GridSample mode '{mode}' is not supported")
  N, C, dims, out = x.shape[0], x.shape[1], x.shape[2:], grid.shape[1:-1]
  nd, o = len(dims), math.prod(out)
  g = grid.cast(dtypes.float32).reshape(N, o, nd)
  ws = [_gs_weights(g.shrink((None, None, (nd - 1 - i, nd - i))).reshape(N, o), n, mode, pad, align) for i, n in enumerate(dims)]
  y = x.cast(dtypes.float32).reshape(N, -1, dims[-1]).matmul(ws[-1].transpose(1, 2)).reshape(N, C, *dims[:-1], o)
  for i in range(nd - 2, -1, -1):
    y = (y * ws[i].transpose(1, 2).reshape(N, 1, *(1,) * i, dims[i], o)).sum(2 + i)
  return y.reshape(N, C, *out).cast(x.dtype)
