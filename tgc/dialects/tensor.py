"""Dialect `tensor`: the lazy tensor graph. Values are whole tensors; no implicit broadcasting."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any
from tgc.ir.core import Operation, PURE, CONSTANT, MOVEMENT, ELEMENTWISE
from tgc.ir.types import TensorType
from tgc.ir.attrs import HexInt
from tgc.ir import alu
from tgc.ir import dtypes as D
from tgc.dialects.alu import define_alu_ops

define_alu_ops('tensor', True, globals())


def _tensor(op, t, what='result'):
  if not isinstance(t, TensorType): raise op.error(f"{what} must be a tensor, got {t}")
  return t

def _axes_ok(op, axes, rank, what='axis'):
  for a in axes:
    if not 0 <= a < rank: raise op.error(f"{what} {a} is out of range for rank {rank}")
  if len(set(axes)) != len(axes): raise op.error(f"repeats an {what} in {list(axes)}")


def dense_shape(v) -> tuple[int, ...]:
  """The shape of a nested-list constant (a scalar is ())."""
  shape, x = [], v
  while isinstance(x, tuple):
    shape.append(len(x))
    if not x: break
    x = x[0]
  return tuple(shape)

def check_dense(op, v, shape, dt):
  """Rectangular, of the declared shape, with values the dtype can hold."""
  def walk(x, depth):
    if depth < len(shape):
      if not isinstance(x, tuple) or len(x) != shape[depth]:
        raise op.error(f"value has the wrong shape for {op.results[0].type}")
      for y in x: walk(y, depth + 1)
    else:
      if isinstance(x, tuple): raise op.error(f"value has the wrong shape for {op.results[0].type}")
      check_scalar(op, x, dt)
  walk(v, 0)

def check_softcap(op) -> None:
  """An attention op's softcap attribute: a finite number >= 0 (0 or absent: the scores are not capped)."""
  if not 0 <= float(op.attrs.get('softcap', 0)) < math.inf: raise op.error(f"softcap must be a finite number >= 0 (0: none), got {op.attrs['softcap']}")


def check_scalar(op, x, dt):
  if isinstance(x, HexInt):
    if dt.is_float and x >= 1 << dt.bits: raise op.error(f"hex literal {hex(x)} does not fit {dt.bits} bits of {dt}")
    if not dt.is_float and x >= 1 << dt.bits: raise op.error(f"value {hex(x)} does not fit {dt}")
    return
  if isinstance(x, float) and not dt.is_float: raise op.error(f"float value {x} for integer type {dt}")
  if isinstance(x, int) and not dt.is_float:
    from tgc.ir.dtypes import min_max
    lo, hi = min_max(dt)
    if not lo <= x <= hi: raise op.error(f"value {x} is out of range for {dt}")


class ConstOp(Operation):
  name = 'tensor.const'
  ATTRS = {'value': 'dense'}
  TRAITS = {PURE, CONSTANT}
  FORMAT = '$value : type($result)'
  def verify(self):
    t = _tensor(self, self.results[0].type)
    v = self.attrs['value']
    if isinstance(v, tuple): check_dense(self, v, t.shape, t.dtype)
    else: check_scalar(self, v, t.dtype)
  @property
  def is_splat(self) -> bool: return not isinstance(self.attrs['value'], tuple)


class EmptyOp(Operation):
  name = 'tensor.empty'
  TRAITS = {PURE}
  FORMAT = ': type($result)'
  def verify(self): _tensor(self, self.results[0].type)


class ReduceOp(Operation):
  name = 'tensor.reduce'
  OPERANDS = ('src',)
  ATTRS = {'kind': 'ident', 'axes': 'ints'}
  TRAITS = {PURE}
  FORMAT = '$kind $src $axes : type($src) -> type($result)'
  def verify(self):
    s, r = _tensor(self, self.src.type, 'operand'), _tensor(self, self.results[0].type)
    if self.kind not in alu.REDUCE_KINDS: raise self.error(f"unknown reduce kind '{self.kind}' (expected one of {', '.join(alu.REDUCE_KINDS)})")
    _axes_ok(self, self.axes, s.rank)
    want = tuple(1 if i in self.axes else d for i, d in enumerate(s.shape))
    if r.shape != want or r.dtype != s.dtype:
      raise self.error(f"result must be {TensorType(want, s.dtype)} (reduced axes kept as 1), got {r}")


class ScanBase(Operation):
  """A scan of either level (tensor.scan, kernel.scan): its operands, attributes and form, and the checks of them."""
  OPERANDS = ('src', 'init?')
  ATTRS = {'kind': 'ident', 'axis': 'int', 'exclusive': 'any?'}
  TRAITS = {PURE}
  FORMAT = '$kind $src $axis?{ ($init)} : type($result)'
  @property
  def exclusive(self) -> bool: return self.attrs.get('exclusive', False) in (True, 'true')
  def check_attrs(self, dtype) -> None:
    """The exclusive flag, the kind, and logaddexp on floats."""
    if self.attrs.get('exclusive', False) not in (True, False, 'true', 'false'): raise self.error(f"exclusive must be true or false, got {self.attrs['exclusive']!r}")
    if self.kind not in alu.SCAN_KINDS: raise self.error(f"unknown scan kind '{self.kind}' (expected one of {', '.join(alu.SCAN_KINDS)})")
    if self.kind == 'logaddexp' and not getattr(dtype, 'is_float', False): raise self.error(f"logaddexp scans floats, got {dtype}")


class ScanOp(ScanBase):
  """`tensor.scan add %x 1 : tensor<8x512xf32>`: the inclusive scan of x along one axis, out[..., i, ...] = x[..., 0,
  ...] op ... op x[..., i, ...] (cumsum: add, cumprod: mul, cummax: max). `tensor.scan add %x 1 (%init)` starts each
  row's running value from init (x's shape with 1 along the axis) instead of the kind's identity: a long axis split in
  chunks scans each chunk from the scan of the chunks' totals before it. `{exclusive = true}`: out[i] leaves x[i] out
  (out[0] is the init, or the identity)."""
  name = 'tensor.scan'
  def verify(self):
    s, r = _tensor(self, self.src.type, 'operand'), _tensor(self, self.results[0].type)
    self.check_attrs(s.dtype)
    if not 0 <= self.axis < s.rank: raise self.error(f"axis {self.axis} is out of range for rank {s.rank}")
    if r != s: raise self.error(f"result must be the operand's type {s}, got {r}")
    if self.init is not None:
      want = TensorType(tuple(1 if i == self.axis else d for i, d in enumerate(s.shape)), s.dtype)
      if _tensor(self, self.init.type, 'init') != want: raise self.error(f"init must be {want} (the operand's shape with 1 along axis {self.axis}), got {self.init.type}")


class _Movement(Operation):
  OPERANDS = ('src',)
  TRAITS = {PURE, MOVEMENT}
  def verify(self):
    s, r = _tensor(self, self.src.type, 'operand'), _tensor(self, self.results[0].type)
    if s.dtype != r.dtype: raise self.error(f"changes the element type: {s} -> {r}")
    want = self.result_shape(s.shape)
    if want is not None and r.shape != want: raise self.error(f"result must be {TensorType(want, s.dtype)}, got {r}")
  def result_shape(self, shape): return None


class ReshapeOp(_Movement):
  name = 'tensor.reshape'
  FORMAT = '$src : type($src) -> type($result)'
  def verify(self):
    super().verify()
    s, r = self.src.type, self.results[0].type
    if s.numel != r.numel: raise self.error(f"cannot reshape {s} ({s.numel} elements) to {r} ({r.numel} elements)")


class ExpandOp(_Movement):
  name = 'tensor.expand'
  FORMAT = '$src : type($src) -> type($result)'
  def verify(self):
    super().verify()
    s, r = self.src.type, self.results[0].type
    if s.rank != r.rank: raise self.error(f"cannot expand {s} to {r}: ranks differ")
    for i, (a, b) in enumerate(zip(s.shape, r.shape)):
      if a != b and a != 1: raise self.error(f"cannot expand {s} to {r}: axis {i} has size {a}, only size-1 axes grow")


class PermuteOp(_Movement):
  name = 'tensor.permute'
  ATTRS = {'order': 'ints'}
  FORMAT = '$src $order : type($src) -> type($result)'
  def result_shape(self, shape):
    o = self.order
    if sorted(o) != list(range(len(shape))): raise self.error(f"order {list(o)} is not a permutation of {len(shape)} axes")
    return tuple(shape[i] for i in o)


class PadOp(_Movement):
  name = 'tensor.pad'
  ATTRS = {'pads': 'pairs'}
  FORMAT = '$src $pads : type($src) -> type($result)'
  def result_shape(self, shape):
    p = self.pads
    if len(p) != len(shape): raise self.error(f"has {len(p)} (before, after) pairs for rank {len(shape)}")
    if any(a < 0 or b < 0 for a, b in p): raise self.error(f"pads must be non-negative, got {[tuple(x) for x in p]}")
    return tuple(s + a + b for s, (a, b) in zip(shape, p))


class ShrinkOp(_Movement):
  name = 'tensor.shrink'
  ATTRS = {'bounds': 'pairs'}
  FORMAT = '$src $bounds : type($src) -> type($result)'
  def result_shape(self, shape):
    b = self.bounds
    if len(b) != len(shape): raise self.error(f"has {len(b)} (start, end) pairs for rank {len(shape)}")
    for i, ((lo, hi), s) in enumerate(zip(b, shape)):
      if not 0 <= lo <= hi <= s: raise self.error(f"bounds ({lo}, {hi}) of axis {i} are not within [0, {s}]")
    return tuple(hi - lo for lo, hi in b)


class FlipOp(_Movement):
  name = 'tensor.flip'
  ATTRS = {'axes': 'ints'}
  FORMAT = '$src $axes : type($result)'
  def result_shape(self, shape):
    _axes_ok(self, self.axes, len(shape))
    return shape


class ContiguousOp(Operation):
  name = 'tensor.contiguous'
  OPERANDS = ('src',)
  FORMAT = '$src : type($result)'
  TRAITS = frozenset()  # not pure: it is a request to materialise, cse/dce must keep it
  def verify(self):
    if self.src.type != self.results[0].type: raise self.error(f"result type {self.results[0].type} does not match operand type {self.src.type}")
    _tensor(self, self.src.type, 'operand')


class PowOp(Operation):
  """base ** exponent of floats, elementwise (torch's and tinygrad's pow). A composite: its own gradient rule
  (tgc/passes/autodiff.py) is exact where the exp2/log2 it decomposes into meet 0 * inf, at a base of 0 or inf."""
  name = 'tensor.pow'
  OPERANDS = ('lhs', 'rhs')
  TRAITS = {PURE}
  FORMAT = '$lhs, $rhs : type($result)'
  def verify(self):
    r = _tensor(self, self.results[0].type)
    if self.lhs.type != r or self.rhs.type != r: raise self.error(f"operands {self.lhs.type} and {self.rhs.type} must be the result type {r}")
    if not r.dtype.is_float: raise self.error(f"needs a float type, got {r}")
  def decompose(self, rw):
    """exp2(e * log2|b|), negated for a negative base to an odd integer power, NaN for a negative finite base to
    a fractional one, 1 for an exponent of 0."""
    from tgc.ir.core import REGISTRY
    t = self.results[0].type
    tb = TensorType(t.shape, D.bool_)
    def op(name, *srcs, ty=t): return rw.create(REGISTRY['tensor.' + name], list(srcs), [ty], None, self.loc).results[0]
    def c(v, ty=t): return rw.create(REGISTRY['tensor.const'], [], [ty], {'value': v}, self.loc).results[0]
    b, e = self.lhs, self.rhs
    neg = op('cmplt', b, c(0.0), ty=tb)
    ret = op('exp2', op('mul', e, op('log2', op('where', neg, op('neg', b), b))))
    is_int = op('cmpeq', op('trunc', e), e, ty=tb)
    odd = op('and', is_int, op('cmpne', op('mod', e, c(2.0)), c(0.0), ty=tb), ty=tb)
    ret = op('where', op('and', neg, odd, ty=tb), op('neg', ret), ret)
    frac = op('and', op('and', neg, op('not', is_int, ty=tb), ty=tb), op('cmpne', b, c(-math.inf), ty=tb), ty=tb)
    ret = op('where', frac, c(math.nan), ret)  # ((-inf) ** 0.3 is inf, as torch)
    return op('where', op('cmpeq', e, c(0.0), ty=tb), c(1.0), ret)


class _FloatComposite(Operation):
  """An elementwise function of one float operand that decomposes (gelu, tanh): the operand's type is the result's."""
  OPERANDS = ('src',)
  TRAITS = {PURE, ELEMENTWISE}
  FORMAT = '$src : type($result)'
  def verify(self):
    r = _tensor(self, self.results[0].type)
    if self.src.type != r: raise self.error(f"operand {self.src.type} must be the result type {r}")
    if not r.dtype.is_float: raise self.error(f"needs a float type, got {r}")


class GeluOp(_FloatComposite):
  """`tensor.gelu %x : tensor<8x512xf16>`: GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  (tinygrad's gelu; torch's with approximate='tanh'), floats; half floats computed in f32 and rounded once. A composite:
  one node where the Tensor API's call built about 40 each call (the graph and its cache key cost the host time of the
  call); it decomposes into x * sigmoid(2 y) (the same function: 0.5 (1 + tanh y) = sigmoid(2 y)), elementwise
  primitives that fuse into the kernel of x's producer (a matmul's epilogue). Its gradient rule (autodiff) recomputes
  s = sigmoid(2y) and takes s + x s (1 - s) (2y)'."""
  name = 'tensor.gelu'
  def sigmoid_2y(self, rw, x):
    """s = sigmoid(z), z = 2 y = 2 sqrt(2/pi) x (1 + 0.044715 x^2), of x (this op's source in f32 or wider), made with
    `rw.create`: the plain form is x * s, its derivative s + x s (1 - s) z' (autodiff's rule). s = 1 / (1 + e),
    e = 2^(-z log2 e) = 2^(x (k + 0.044715 k x^2)), k = -2 sqrt(2/pi) / ln 2: one power and one reciprocal, accurate
    to their relative errors on both sides (s is e's reciprocal where e is large); where e overflows, s is 0, its limit."""
    from tgc.ir.core import REGISTRY
    ta = x.type
    def op(name, *srcs): return rw.create(REGISTRY['tensor.' + name], list(srcs), [ta], None, self.loc).results[0]
    def c(v): return rw.create(REGISTRY['tensor.const'], [], [ta], {'value': v}, self.loc).results[0]
    k = -2 * math.sqrt(2 / math.pi) / math.log(2)
    e = op('exp2', op('mul', x, op('add', c(k), op('mul', op('mul', x, x), c(0.044715 * k)))))
    return op('recip', op('add', c(1.0), e))
  def decompose(self, rw):
    from tgc.ir.core import REGISTRY
    t = self.results[0].type
    acc = t.dtype if t.dtype.itemsize >= 4 else D.f32
    def cast(v, ty): return rw.create(REGISTRY['tensor.cast'], [v], [ty], None, self.loc).results[0]
    x = self.src if t.dtype is acc else cast(self.src, TensorType(t.shape, acc))
    y = rw.create(REGISTRY['tensor.mul'], [x, self.sigmoid_2y(rw, x)], [x.type], None, self.loc).results[0]
    return y if t.dtype is acc else cast(y, t)


class TanhOp(_FloatComposite):
  """`tensor.tanh %x : tensor<8x512xf32>`: the hyperbolic tangent, floats; half floats computed in f32 and rounded once.
  A composite: one node where the Tensor API's formula made 20 (and a soft-capped score, c * tanh(s / c), is one op
  that fuse-attention reads); it decomposes into 2 sigmoid(2 x) - 1, the sigmoid 1 / (1 + e) where 2 x >= 0 and
  e / (1 + e) below, e = 2^(-|2 x| log2 e): e never overflows, so neither the value nor the gradient of this plain
  form (autodiff differentiates it) meets inf * 0 at extreme inputs."""
  name = 'tensor.tanh'
  def decompose(self, rw):
    from tgc.ir.core import REGISTRY
    t = self.results[0].type
    ta = TensorType(t.shape, t.dtype if t.dtype.itemsize >= 4 else D.f32)
    tb = TensorType(t.shape, D.bool_)
    def op(name, *srcs, ty=ta): return rw.create(REGISTRY['tensor.' + name], list(srcs), [ty], None, self.loc).results[0]
    def c(v): return rw.create(REGISTRY['tensor.const'], [], [ta], {'value': v}, self.loc).results[0]
    x = self.src if ta == t else op('cast', self.src)
    y = op('mul', c(2.0), x)
    pos = op('or', op('cmplt', c(0.0), y, ty=tb), op('cmpeq', y, c(0.0), ty=tb), ty=tb)
    e = op('exp2', op('mul', op('where', pos, op('neg', y), y), c(1 / math.log(2))))
    r = op('recip', op('add', c(1.0), e))
    th = op('sub', op('mul', c(2.0), op('where', pos, r, op('mul', e, r))), c(1.0))
    return th if ta == t else op('cast', th, ty=t)


class ArgMaxOp(Operation):
  """`tensor.argmax %x 1 : tensor<8x512xf32> -> tensor<8x1xi32>`: the position of the first maximum along one axis
  (kept as 1), i32; a NaN is the maximum where there is one (numpy's and torch's answer). A composite: one node where
  the Tensor API's call built a graph of 16 each call; it decomposes into a max, a compare with it, and a max of the
  positions counted down (n - j at a maximum j: the first one's is the largest), which fuse into one kernel."""
  name = 'tensor.argmax'
  OPERANDS = ('src',)
  ATTRS = {'axis': 'int'}
  TRAITS = {PURE}
  FORMAT = '$src $axis : type($src) -> type($result)'
  def verify(self):
    s, r = _tensor(self, self.src.type, 'operand'), _tensor(self, self.results[0].type)
    if not 0 <= self.axis < s.rank: raise self.error(f"axis {self.axis} is out of range for rank {s.rank}")
    if s.shape[self.axis] == 0: raise self.error(f"axis {self.axis} of {s} is empty: it has no maximum")
    want = TensorType(tuple(1 if i == self.axis else d for i, d in enumerate(s.shape)), D.i32)
    if r != want: raise self.error(f"result must be {want} (the axis kept as 1), got {r}")
  def decompose(self, rw):
    from tgc.ir.core import REGISTRY
    x, a = self.src, self.axis
    s, n = x.type.shape, x.type.shape[self.axis]
    row = tuple(1 if i == a else d for i, d in enumerate(s))
    def op(name, srcs, shape, dt, attrs=None): return rw.create(REGISTRY['tensor.' + name], list(srcs), [TensorType(tuple(shape), dt)], attrs, self.loc).results[0]
    m = op('reduce', [x], row, x.type.dtype, {'kind': 'max', 'axes': (a,)})
    hit = op('cmpeq', [x, op('expand', [m], s, x.type.dtype)], s, D.bool_)
    if x.type.dtype.is_float: hit = op('or', [hit, op('cmpne', [x, x], s, D.bool_)], s, D.bool_)  # (a NaN is the max, as numpy's)
    # n - j along the axis: the positions 1..n (a sum scan of ones, computed from indices) flipped
    pos = op('flip', [op('scan', [op('const', [], (n,), D.i32, {'value': 1})], (n,), D.i32, {'kind': 'add', 'axis': 0})], (n,), D.i32, {'axes': (0,)})
    pos = op('expand', [op('reshape', [pos], tuple(n if i == a else 1 for i in range(len(s))), D.i32)], s, D.i32)
    best = op('reduce', [op('where', [hit, pos, op('const', [], s, D.i32, {'value': 0})], s, D.i32)], row, D.i32, {'kind': 'max', 'axes': (a,)})
    return op('sub', [op('const', [], row, D.i32, {'value': n}), best], row, D.i32)


class _AttentionBase(Operation):
  """What tensor.attention, tensor.attention_lse and tensor.attention_grad share: q (..., L, E) and k (..., S, E) of
  one float type and batch axes but the heads (axis -3: k's may be fewer, each shared by a group of q's heads, as
  grouped-query attention's; k and v have the same), causal and scale, the optional bias (..., L, S) of q's type added to the scaled
  scores (torch's float attn_mask; a boolean mask is 0 where a key takes part and -inf where not), the plain form's
  scores, and whether a device computes them in its fused kernel. `softcap = c` (c > 0) caps the scaled scores,
  c * tanh(s * scale / c), before the bias is added (Gemma 2's soft-capping, ONNX Attention's softcap)."""
  ATTRS = {'causal': 'int', 'scale': 'number', 'softcap': 'number?'}
  TRAITS = {PURE}
  def check_qk(self):
    q, k = _tensor(self, self.q.type), _tensor(self, self.k.type)
    if self.causal not in (0, 1): raise self.error(f"causal must be 0 or 1, got {self.causal}")
    check_softcap(self)
    if q.rank != k.rank or q.rank < 2: raise self.error(f"needs q and k of one rank >= 2, got {q} and {k}")
    if q.shape[:-3] != k.shape[:-3] or (q.rank > 2 and (k.shape[-3] == 0 or q.shape[-3] % k.shape[-3])) or (q.rank == 2 and q.shape[:-2] != k.shape[:-2]):
      raise self.error(f"batch axes differ: {q} and {k} (k's heads, axis -3, may be fewer where they divide q's)")
    if k.shape[-1] != q.shape[-1]: raise self.error(f"shapes do not fit: q {q} and k {k} need one last axis")
    if k.shape[-2] == 0: raise self.error(f"needs at least one key, got {k}")
    if self.bias is not None:
      b, want = _tensor(self, self.bias.type), TensorType(q.shape[:-1] + k.shape[-2:-1], q.dtype)
      if b != want: raise self.error(f"bias must be {want} (the scores' shape, q's type), got {b}")
    return q, k
  def scores(self, rw) -> 'AttentionPlain':
    """The plain form's scores s = q k^T * scale + bias (masked to -inf where causal hides a key), made with
    `rw.create`, in f32 for half floats, with the op makers that made them."""
    from tgc.ir.core import REGISTRY
    q, k = self.q, self.k
    acc = q.type.dtype if q.type.dtype.itemsize >= 4 else D.f32
    *batch, L, _ = q.type.shape
    S = k.type.shape[-2]
    def op(name, srcs, shape, dtype=acc, attrs=None):
      return rw.create(REGISTRY['tensor.' + name], list(srcs), [TensorType(tuple(shape), dtype)], attrs, self.loc).results[0]
    c = lambda value, shape, dtype=acc: op('const', [], shape, dtype, {'value': value})
    wide = lambda x: x if x.type.dtype is acc else op('cast', [x], x.type.shape)
    n = len(batch) + 2
    group = batch[-1] // k.type.shape[-3] if batch else 1
    def heads(x):  # x's heads repeated to q's: each shared by a group (x (..., Hk, rows, e) -> (..., Hk * group, rows, e))
      if group == 1: return x
      *b, hk, rows, e = x.type.shape
      x = op('expand', [op('reshape', [x], (*b, hk, 1, rows, e), x.type.dtype)], (*b, hk, group, rows, e), x.type.dtype)
      return op('reshape', [x], (*b, hk * group, rows, e), x.type.dtype)
    def grouped(x):  # x (..., Hq, rows, e) summed over each group of heads: (..., Hk, rows, e)
      if group == 1: return x
      *b, h, rows, e = x.type.shape
      x = op('reduce', [op('reshape', [x], (*b, h // group, group, rows, e), x.type.dtype)], (*b, h // group, 1, rows, e), x.type.dtype, {'kind': 'add', 'axes': (len(b) + 1,)})
      return op('reshape', [x], (*b, h // group, rows, e), x.type.dtype)
    tr = lambda x: op('permute', [x], (*x.type.shape[:-2], x.type.shape[-1], x.type.shape[-2]), x.type.dtype, {'order': tuple(range(n - 2)) + (n - 1, n - 2)})
    sc = (*batch, L, S)
    s = op('mul', [op('matmul', [wide(q), tr(heads(wide(k)))], sc), c(float(self.scale), sc)], sc)
    t = None
    if self.softcap:  # s = cap * tanh(s / cap) (tensor.tanh, itself decomposed)
      t = op('tanh', [op('mul', [s, c(1 / self.softcap, sc)], sc)], sc)
      s = op('mul', [t, c(self.softcap, sc)], sc)
    if self.bias is not None: s = op('add', [s, wide(self.bias)], sc)
    if self.causal:  # key j - query i <= 0, the positions counted by scans of ones
      pos = lambda m: op('add', [op('scan', [c(1, (m,), D.i32)], (m,), D.i32, {'kind': 'add', 'axis': 0}), c(-1, (m,), D.i32)], (m,), D.i32)
      grid = lambda p, shape: op('expand', [op('reshape', [p], shape, D.i32)], (L, S), D.i32)
      d = op('sub', [grid(pos(S), (1, S)), grid(pos(L), (L, 1))], (L, S), D.i32)
      seen = op('expand', [op('reshape', [op('cmplt', [d, c(1, (L, S), D.i32)], (L, S), D.bool_)], (1,) * len(batch) + (L, S), D.bool_)], sc, D.bool_)
      s = op('where', [seen, s, c(-math.inf, sc)], sc)
    return AttentionPlain(op, c, wide, tr, acc, s, heads, grouped, t)
  def softmax(self, rw) -> 'AttentionPlain':
    """The scores (scores) and their softmax's parts: the row max m, the exponentials e = exp(s - m) (exp(-inf) = 0)
    and their row sums. With a bias a row may see no key (all its scores -inf): its max counts as 0 there, so that
    its exponentials and sum are 0, its log-sum-exp -inf and its output 0 (torch's, and the fused kernel's)."""
    p = self.scores(rw)
    sc, n = p.s.type.shape, len(p.s.type.shape)
    row = sc[:-1] + (1,)
    p.m = p.op('reduce', [p.s], row, attrs={'kind': 'max', 'axes': (n - 1,)})
    if self.bias is not None: p.m = p.op('where', [p.op('cmpeq', [p.m, p.c(-math.inf, row)], row, D.bool_), p.c(0.0, row), p.m], row)
    p.e = p.op('exp2', [p.op('mul', [p.op('sub', [p.s, p.op('expand', [p.m], sc)], sc), p.c(1 / math.log(2), sc)], sc)], sc)
    p.total = p.op('reduce', [p.e], row, attrs={'kind': 'add', 'axes': (n - 1,)})
    return p
  def fused(self, spec) -> bool:
    """Whether the device (a tgc.target.DeviceSpec) computes this in its fused attention kernel: tensor-decompose
    keeps it whole there, and kernelize gives it a kernel of its own (kernel.attention)."""
    e = self.q.type.shape[-1]  # (a positive scale: the kernel takes each row's max before scaling)
    return float(self.attrs['scale']) > 0 and spec.fused_attention(self.q.type.dtype, e, self.v.type.shape[-1] if hasattr(type(self), 'v') else e)


class AttentionOp(_AttentionBase):
  """`tensor.attention %q, %k, %v {causal = 1, scale = 0.125} : tensor<2x8x64xf16>, tensor<2x8x64xf16>,
  tensor<2x8x64xf16> -> tensor<2x8x64xf16>`: softmax(q k^T * scale) v over the last two axes (torch's
  scaled_dot_product_attention without dropout): q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev), one
  dtype, the batch axes equal but k's and v's heads (axis -3), which may be fewer, each shared by a group of q's
  (grouped-query attention); causal 1: query i sees the keys j <= i (the lower triangle of L x S, torch's is_causal);
  `, %bias` (..., L, S) after v: added to the scaled scores (a mask's -inf hides a key). A composite: it decomposes into its plain form, the scores and the probabilities' product summed in f32 for half
  floats, where the device has no fused kernel for it (fused)."""
  name = 'tensor.attention'
  OPERANDS = ('q', 'k', 'v', 'bias?')
  FORMAT = '$q, $k, $v?{, $bias} : type($q), type($k), type($v), type($bias) -> type($result)'
  def verify(self):
    q, k, v, r = (_tensor(self, t) for t in (self.q.type, self.k.type, self.v.type, self.results[0].type))
    if not q.dtype.is_float or not (q.dtype == k.dtype == v.dtype): raise self.error(f"needs q, k and v of one float type, got {q}, {k} and {v}")
    if not (q.rank == k.rank == v.rank) or q.rank < 2: raise self.error(f"needs q, k and v of one rank >= 2, got {q}, {k} and {v}")
    if k.shape[:-2] != v.shape[:-2]: raise self.error(f"batch axes differ: {q}, {k} and {v}")
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
      raise self.error(f"shapes do not fit: q {q} and k {k} need one last axis, k and v {v} one key axis")
    self.check_qk()
    want = TensorType(q.shape[:-1] + v.shape[-1:], q.dtype)
    if r != want: raise self.error(f"result must be {want}, got {r}")
  def decompose(self, rw):
    p = self.softmax(rw)
    v, dt = self.v, self.q.type.dtype
    out, row = self.q.type.shape[:-1] + v.type.shape[-1:], p.total.type.shape
    total = p.total
    if self.bias is not None:  # (a row that sees no key: e = 0, its output 0)
      total = p.op('where', [p.op('cmplt', [p.c(0.0, row), total], row, D.bool_), total, p.c(1.0, row)], row)
    o = p.op('mul', [p.op('matmul', [p.e, p.heads(p.wide(v))], out), p.op('expand', [p.op('recip', [total], row)], out)], out)
    return o if p.acc is dt else p.op('cast', [o], out, dt)


class AttentionLseOp(_AttentionBase):
  """`tensor.attention_lse %q, %k {causal = 1, scale = 0.125} : tensor<2x8x64xf16>, tensor<2x8x64xf16> ->
  tensor<2x8x1xf32>`: each query row's log-sum-exp of its scores, log(sum_j exp(s_ij)) with s = q k^T * scale over
  the keys it sees (-inf where it sees none), in f32 for half floats: what attention's backward recomputes its
  probabilities from, exp(s - lse). Where the device computes it in its fused kernel, the kernel of the
  tensor.attention of the same q, k, causal and scale stores it beside its output (kernelize); else its plain form."""
  name = 'tensor.attention_lse'
  OPERANDS = ('q', 'k', 'bias?')
  FORMAT = '$q, $k?{, $bias} : type($q), type($k), type($bias) -> type($result)'
  def verify(self):
    q, k = self.check_qk()
    if not q.dtype.is_float or q.dtype != k.dtype: raise self.error(f"needs q and k of one float type, got {q} and {k}")
    want = TensorType(q.shape[:-1] + (1,), q.dtype if q.dtype.itemsize >= 4 else D.f32)
    if _tensor(self, self.results[0].type) != want: raise self.error(f"result must be {want}, got {self.results[0].type}")
  def decompose(self, rw):
    p = self.softmax(rw)
    row = p.total.type.shape
    return p.op('add', [p.m, p.op('mul', [p.op('log2', [p.total], row), p.c(math.log(2), row)], row)], row)


class AttentionGradOp(_AttentionBase):
  """`tensor.attention_grad %q, %k, %v, %g, %lse, %d {causal = 1, scale = 0.125, wrt = 0} : ... -> tensor<...>`: one
  of attention's gradients (wrt 0: q's, 1: k's, 2: v's, 3: the bias's, with `, %bias` after d; of that operand's type) given the output's gradient g, the
  rows' log-sum-exp (tensor.attention_lse) and d, each query row's sum of g * out (f32 for half floats), as flash
  attention's backward computes them: p = exp(s - lse), dv = p^T g, ds = p * (g v^T - d) * scale (times 1 - t^2, t
  the scores' tanh, where softcap caps them), dq = ds k,
  dk = ds^T q (p and ds rounded to the inputs' type for the products), dbias = ds / scale. Where the device has fused backward kernels
  (fused) kernelize computes dq in one kernel, dk and dv of the same operands in another; else its plain form."""
  name = 'tensor.attention_grad'
  OPERANDS = ('q', 'k', 'v', 'g', 'lse', 'd', 'bias?')
  ATTRS = {'causal': 'int', 'scale': 'number', 'softcap': 'number?', 'wrt': 'int'}
  FORMAT = '$q, $k, $v, $g, $lse, $d?{, $bias} : type($q), type($k), type($v) -> type($result)'
  def fused(self, spec) -> bool:  # (the bias's gradient, a scores-shaped tensor, is its plain form)
    return self.wrt != 3 and spec.fused_attention_grad(self.q.type.dtype, self.q.type.shape[-1], self.v.type.shape[-1])
  def verify(self):
    q, k = self.check_qk()
    v, g = _tensor(self, self.v.type), _tensor(self, self.g.type)
    if not q.dtype.is_float or not (q.dtype == k.dtype == v.dtype == g.dtype): raise self.error(f"needs q, k, v and g of one float type, got {q}, {k}, {v} and {g}")
    if v.shape[:-1] != k.shape[:-1] or g.shape != q.shape[:-1] + v.shape[-1:]: raise self.error(f"shapes do not fit: k {k}, v {v} (one key axis) and g {g} (the output's)")
    row = TensorType(q.shape[:-1] + (1,), q.dtype if q.dtype.itemsize >= 4 else D.f32)
    for nm in ('lse', 'd'):
      if _tensor(self, getattr(self, nm).type) != row: raise self.error(f"{nm} must be {row}, got {getattr(self, nm).type}")
    if self.wrt not in (0, 1, 2, 3) or (self.wrt == 3 and self.bias is None): raise self.error(f"wrt must be 0 (q), 1 (k), 2 (v) or, with a bias, 3 (the bias), got {self.wrt}")
    want = (q, k, v, self.bias and self.bias.type)[self.wrt]
    if self.results[0].type != want: raise self.error(f"result must be {want}, got {self.results[0].type}")
  def decompose(self, rw):
    p = self.scores(rw)
    mk, acc, dt = p.op, p.acc, self.q.type.dtype
    half = lambda x: x if acc is dt else p.wide(mk('cast', [x], x.type.shape, dt))  # (rounded, then cast back up)
    sc = p.s.type.shape
    lse = self.lse
    if self.bias is not None:  # (a row that sees no key, lse -inf: its probabilities 0, not exp(-inf + inf))
      row = lse.type.shape
      lse = mk('where', [mk('cmpeq', [lse, p.c(-math.inf, row)], row, D.bool_), p.c(math.inf, row), lse], row)
    prob = half(mk('exp2', [mk('mul', [mk('sub', [p.s, mk('expand', [lse], sc)], sc), p.c(1 / math.log(2), sc)], sc)], sc))
    gw, q = p.wide(self.g), p.wide(self.q)
    k, v = (p.heads(p.wide(x)) for x in (self.k, self.v))  # (k's and v's gradients summed over each group of heads)
    if self.wrt == 2: r = p.grouped(mk('matmul', [p.tr(prob), gw], v.type.shape))
    else:
      dp = mk('sub', [mk('matmul', [gw, p.tr(v)], sc), mk('expand', [self.d], sc)], sc)
      if self.wrt == 3: r = mk('mul', [prob, dp], sc)  # (the scores' gradient: the bias is added to them)
      else:
        dsc = p.c(float(self.scale), sc)  # (the scores' derivative by q k^T: scale, times 1 - tanh^2 where capped)
        if p.t is not None: dsc = mk('mul', [dsc, mk('sub', [p.c(1.0, sc), mk('mul', [p.t, p.t], sc)], sc)], sc)
        ds = half(mk('mul', [mk('mul', [prob, dp], sc), dsc], sc))
        r = mk('matmul', [ds, k], q.type.shape) if self.wrt == 0 else p.grouped(mk('matmul', [p.tr(ds), q], k.type.shape))
    return r if acc is dt else mk('cast', [r], r.type.shape, dt)


@dataclass
class AttentionPlain:
  """What _AttentionBase.scores (and softmax) made: the op makers (op(name, operands, shape, dtype=acc, attrs),
  c(value, shape, dtype), wide(x): x in acc, tr(x): x's last two axes swapped), the accumulation dtype, the masked
  scores s, heads(x): k's or v's heads repeated to q's, grouped(x): a gradient of q's heads summed to k's; softmax's
  row max m, exponentials e and their row sums total."""
  op: Any
  c: Any
  wide: Any
  tr: Any
  acc: Any
  s: Any
  heads: Any = None
  grouped: Any = None
  t: Any = None  # (tanh of the scores over softcap, where capped)
  m: Any = None
  e: Any = None
  total: Any = None


class GatherOp(Operation):
  """`tensor.gather %src, %index axis`: out[p] = src[p with its coordinate along axis replaced by index[p]] (torch's
  gather, ONNX's GatherElements): index has src's rank and shape but along axis, and out is index's shape. An index
  value outside [0, src's size along axis) reads the element at the nearer end (clamped: never outside the tensor);
  the Tensor API wraps negative indices first."""
  name = 'tensor.gather'
  OPERANDS = ('src', 'index')
  ATTRS = {'axis': 'int'}
  TRAITS = {PURE}
  FORMAT = '$src, $index $axis : type($src), type($index) -> type($result)'
  def verify(self):
    x, i, r = (_tensor(self, t) for t in (self.src.type, self.index.type, self.results[0].type))
    if not i.dtype.is_int: raise self.error(f"index must be an integer tensor, got {i}")
    if i.rank != x.rank or not 0 <= self.axis < x.rank: raise self.error(f"gathers along axis {self.axis} of {x} by {i}: the ranks must match and hold the axis")
    if any(a != b for k, (a, b) in enumerate(zip(x.shape, i.shape)) if k != self.axis):
      raise self.error(f"index shape {list(i.shape)} differs from the source's {list(x.shape)} outside axis {self.axis}")
    if x.shape[self.axis] == 0 and i.numel: raise self.error(f"gathers from an empty axis {self.axis} of {x}")
    want = TensorType(i.shape, x.dtype)
    if r != want: raise self.error(f"result must be {want}, got {r}")


class MatmulOp(Operation):
  name = 'tensor.matmul'
  OPERANDS = ('lhs', 'rhs')
  TRAITS = {PURE}
  FORMAT = '$lhs, $rhs : type($lhs), type($rhs) -> type($result)'
  def verify(self):
    a, b, r = (_tensor(self, t) for t in (self.lhs.type, self.rhs.type, self.results[0].type))
    if a.rank < 2 or b.rank < 2 or a.rank != b.rank:
      raise self.error(f"needs operands of equal rank >= 2, got {a} and {b}")
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
      raise self.error(f"shapes do not fit: {a} and {b} (inner sizes {a.shape[-1]} and {b.shape[-2]})")
    if a.dtype != b.dtype: raise self.error(f"operands have different types: {a} and {b}")
    want = TensorType(a.shape[:-1] + b.shape[-1:], a.dtype)
    if r != want: raise self.error(f"result must be {want}, got {r}")


def conv_acc(dt):
  """The dtype a conv's products sum in, as a sum's (Tensor.sum): half-precision floats in f32 (the result cast back to
  the operands' dtype), narrow ints in 32 bits (the result so too); None for a packed (sub-byte) int."""
  if getattr(dt, 'width', 0): return None
  if dt.itemsize >= 4 and not dt.is_bool: return dt
  return D.f32 if dt.is_float else D.u32 if dt.kind == 'u' else D.i32


def conv_result(op, x, w, stride, dilation, pads, groups) -> TensorType:
  """The result type of conv(x, w) with these attributes; op.error for what does not fit."""
  from tgc.shape.pool import pool_shape
  from tgc.errors import ShapeError
  if x.rank != w.rank or x.rank < 3: raise op.error(f"needs an input and a weight of the same rank >= 3, got {x} and {w}")
  if x.dtype != w.dtype: raise op.error(f"operands have different types: {x} and {w}")
  nk = x.rank - 2
  if not isinstance(groups, int) or groups < 1: raise op.error(f"groups must be a positive integer, got {groups!r}")
  if len(stride) != nk or len(dilation) != nk or len(pads) != 2 * nk:
    raise op.error(f"needs {nk} strides, {nk} dilations and {2 * nk} pads for {nk} spatial axes, got {list(stride)}, {list(dilation)} and {list(pads)}")
  (bs, cin_), (cout, cin) = x.shape[:2], w.shape[:2]
  if groups * cin != cin_ or cout % groups:
    raise op.error(f"input {x} does not fit weight {w} with groups={groups} ({groups * cin} vs {cin_} channels, {cout} output channels)")
  if (acc := conv_acc(x.dtype)) is None: raise op.error(f"cannot convolve {x.dtype} (a packed integer type)")
  # pads flat from the last axis (torch's F.pad): (left, right) of the last axis first
  padded = tuple(s + pads[2 * (nk - 1 - i)] + pads[2 * (nk - 1 - i) + 1] for i, s in enumerate(x.shape[2:]))
  if any(p < 0 for p in padded): raise op.error(f"pads {list(pads)} remove more than the input {x} has")
  try: _, _, out = pool_shape(padded, w.shape[2:], tuple(stride), tuple(dilation))
  except ShapeError as e: raise op.error(str(e)) from None
  return TensorType((bs, cout, *out), x.dtype if x.dtype.is_float else acc)


class ConvOp(Operation):
  """`tensor.conv %x, %w {dilation = [1, 1], groups = 1, pads = [0, 0, 0, 0], stride = [1, 1]}`: the convolution
  (a cross-correlation, torch's) of x (bs, groups * cin, *spatial) with w (cout, cin, *kernel) to (bs, cout, *out),
  x padded with zeros by `pads` (flat from the last axis, torch's F.pad: left, right, top, bottom, ...); each group
  of cout / groups output channels reads its own cin input channels. The products sum as Tensor.sum's do (conv_acc).
  A composite: tensor-decompose lays it out for the device, autodiff differentiates its plain form."""
  name = 'tensor.conv'
  OPERANDS = ('x', 'w')
  ATTRS = {'stride': 'ints', 'dilation': 'ints', 'pads': 'ints', 'groups': 'int'}
  TRAITS = {PURE}
  FORMAT = '$x, $w : type($x), type($w) -> type($result)'
  def verify(self):
    x, w, r = (_tensor(self, t) for t in (self.x.type, self.w.type, self.results[0].type))
    want = conv_result(self, x, w, self.stride, self.dilation, self.pads, self.groups)
    if r != want: raise self.error(f"result must be {want}, got {r}")


class _CollectiveOp(Operation):
  """A collective of one rank of a per-device (SPMD) function: every device in `devices` runs its own function with
  the same collectives in the same order; this one is rank `rank`'s part. Not pure: each rank must take part, so
  cse and dce keep it."""
  OPERANDS = ('src',)
  TRAITS = frozenset()
  def verify(self):
    s, r = _tensor(self, self.src.type, 'operand'), _tensor(self, self.results[0].type)
    devs, rank = self.attrs.get('devices'), self.attrs.get('rank')
    if not isinstance(devs, tuple) or not devs or not all(isinstance(d, str) for d in devs):
      raise self.error(f"devices must be a non-empty list of device names, got {devs!r}")
    if len(set(devs)) != len(devs): raise self.error(f"devices {list(devs)} repeat a device")
    if not isinstance(rank, int) or not 0 <= rank < len(devs): raise self.error(f"rank {rank} is out of range for {len(devs)} devices")
    if s.dtype != r.dtype: raise self.error(f"changes the element type: {s} -> {r}")
    if 'op' in self.ATTRS and self.attrs['op'] not in ('add', 'max', 'min', 'mul'):
      raise self.error(f"unknown reduction '{self.attrs['op']}' (expected one of add, max, min, mul)")
    want = self.result_shape(s.shape, len(devs))
    if r.shape != want: raise self.error(f"result must be {TensorType(want, s.dtype)} for {len(devs)} devices, got {r}")


class AllReduceOp(_CollectiveOp):
  """Every rank gets the reduction (`op`) of all ranks' operands, element by element."""
  name = 'tensor.allreduce'
  ATTRS = {'op': 'ident', 'devices': 'any', 'rank': 'int'}
  FORMAT = '$op $src : type($src) -> type($result)'
  def result_shape(self, shape, n): return shape


class AllGatherOp(_CollectiveOp):
  """Every rank gets the ranks' operands joined along axis 0, in rank order."""
  name = 'tensor.allgather'
  ATTRS = {'devices': 'any', 'rank': 'int'}
  FORMAT = '$src : type($src) -> type($result)'
  def result_shape(self, shape, n):
    if not shape: raise self.error("needs an operand of rank >= 1 (it joins along axis 0)")
    return (shape[0] * n, *shape[1:])


class ReduceScatterOp(_CollectiveOp):
  """Rank i gets the i-th of n equal slices along axis 0 of the reduction (`op`) of all ranks' operands."""
  name = 'tensor.reduce_scatter'
  ATTRS = {'op': 'ident', 'devices': 'any', 'rank': 'int'}
  FORMAT = '$op $src : type($src) -> type($result)'
  def result_shape(self, shape, n):
    if not shape or shape[0] % n: raise self.error(f"axis 0 of the operand ({shape[0] if shape else 'none'}) does not split into {n} equal slices")
    return (shape[0] // n, *shape[1:])
