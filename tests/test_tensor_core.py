"""The lazy Tensor, checked against numpy: creation, dtypes and promotion, elementwise ops with broadcasting,
comparisons, bitwise ops, casts, and the errors a user can make (raised eagerly, as TgcError subclasses)."""
import math
import numpy as np
import pytest
import tgc
from tgc import Tensor, dtypes, TgcError, ShapeError, DTypeError, AxisError, IndexingError

pytestmark = pytest.mark.usefixtures('_default_device')  # $TGC_TEST_DEVICE, or a test's `dev` (conftest.py)

RNG = np.random.default_rng(1234)
# The big matrices of cases run on the reference interpreter (cheap to compile, fine for small tensors); a
# test that takes a `dev` argument runs on each device it is given. The CPU device compiles each new graph
# with LLVM -O2, which costs 0.1-2 s a kernel on this machine, so its cases are picked, not exhaustive.
BOTH = ["CPU", "INTERP"]


SHAPES = [(), (1,), (3,), (7,), (17,), (3, 7), (127,), (2, 3, 5)]


def randf(shape, lo=-3.0, hi=3.0):
  return RNG.uniform(lo, hi, shape).astype(np.float32)

def randi(shape, lo=-20, hi=20, dtype=np.int32):
  return RNG.integers(lo, hi, shape).astype(dtype)

def check(t, expected, dtype=None, rtol=1e-5, atol=1e-6):
  assert isinstance(t, Tensor)
  e = np.asarray(expected)
  if dtype is not None: assert t.dtype == dtype, f"dtype {t.dtype!r}, expected {dtype!r}"
  assert t.shape == e.shape, f"shape {t.shape}, expected {e.shape}"
  r = t.numpy()
  assert r.shape == e.shape
  if t.dtype.is_float: np.testing.assert_allclose(r.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
  else: np.testing.assert_array_equal(r, e)


# ---------------------------------------------------------------- creation and properties

@pytest.mark.parametrize("data,dt,np_dt", [
  (1, dtypes.int32, np.int32), (2.5, dtypes.float32, np.float32), (True, dtypes.bool, np.bool_),
  ([1, 2, 3], dtypes.int32, np.int32), ([[1.5, 2], [3, 4]], dtypes.float32, np.float32),
  ([[True, False]], dtypes.bool, np.bool_), ([], dtypes.float32, np.float32),
])
def test_from_python(data, dt, np_dt):
  t = Tensor(data)
  assert t.dtype is dt and t.shape == np.shape(data) and t.ndim == len(np.shape(data))
  np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=np_dt))
  assert t.numpy().dtype == np_dt

@pytest.mark.parametrize("np_dt", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                                   np.float16, np.float32, np.float64])
def test_numpy_keeps_dtype(np_dt):  # on the interpreter; CPU in test_cpu_dtypes
  a = (RNG.integers(0, 5, (3, 7)) if np_dt is not np.bool_ else RNG.integers(0, 2, (3, 7))).astype(np_dt)
  t = Tensor(a)
  assert t.dtype.np == np.dtype(np_dt) and t.shape == (3, 7) and t.numel() == 21
  check(t + t if np_dt is not np.bool_ else t | t, a + a if np_dt is not np.bool_ else a | a)

def test_data_is_copied():
  a = np.arange(4, dtype=np.float32)
  t = Tensor(a); a[0] = 100
  assert t.numpy()[0] == 0

@pytest.mark.parametrize("dt", ["float16", dtypes.int8, dtypes.uint8, dtypes.bfloat16, dtypes.float64, np.int16, dtypes.half])
def test_dtype_argument(dt):
  t = Tensor([1, 2, 3], dtype=dt)
  assert t.dtype is tgc.tensor.to_dtype(dt)
  np.testing.assert_array_equal(t.numpy().astype(np.float64), [1, 2, 3])

def test_dtypes_namespace():
  from tgc.ir.dtypes import BY_API
  for n in ('bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float16', 'bfloat16', 'float32', 'float64'):
    assert getattr(dtypes, n) is BY_API[n]
  assert dtypes.half is dtypes.float16 and dtypes.float is dtypes.float32 and dtypes.double is dtypes.float64
  assert tgc.dtypes is dtypes and tgc.Tensor is Tensor

@pytest.mark.parametrize("shape", [(), (1,), (3, 7), (2, 1, 5)])
@pytest.mark.parametrize("fn,np_fn,dt", [
  (Tensor.zeros, np.zeros, dtypes.float32), (Tensor.ones, np.ones, dtypes.float32),
])
def test_zeros_ones(shape, fn, np_fn, dt):
  check(fn(*shape), np_fn(shape, dtype=np.float32), dt)
  check(fn(shape, dtype=dtypes.int8), np_fn(shape, dtype=np.int8), dtypes.int8)

@pytest.mark.parametrize("value,dt,np_dt", [(2.5, dtypes.float32, np.float32), (7, dtypes.int32, np.int32), (True, dtypes.bool, np.bool_)])
def test_full(value, dt, np_dt):
  check(Tensor.full((3, 7), value), np.full((3, 7), value, dtype=np_dt), dt)
  check(Tensor.full(5, value, dtype=dtypes.float16), np.full(5, value, dtype=np.float16), dtypes.float16)

def test_like_and_empty():
  t = Tensor(np.zeros((3, 4), dtype=np.int16))
  check(t.zeros_like(), np.zeros((3, 4), np.int16), dtypes.int16)
  check(t.ones_like(dtype=dtypes.float32), np.ones((3, 4), np.float32), dtypes.float32)
  check(Tensor.zeros_like(t), np.zeros((3, 4), np.int16))
  e = Tensor.empty(3, 5, dtype=dtypes.int32)
  assert e.shape == (3, 5) and e.dtype is dtypes.int32 and e.numpy().shape == (3, 5)

@pytest.mark.parametrize("args,kw", [((5,), {}), ((2, 9), {}), ((10, 1, -3), {}), ((0.5, 3.0, 0.25), {}), ((7,), {'dtype': dtypes.float32}),
                                     ((3, -4, -1), {}), ((0,), {})])
def test_arange(args, kw):
  e = np.arange(*args).astype(np.float32 if any(isinstance(a, float) for a in args) or kw else np.int32)
  check(Tensor.arange(*args, **kw), e, dtypes.float32 if e.dtype == np.float32 else dtypes.int32)

@pytest.mark.parametrize("args,dt", [((1024,), None), ((10, 0, -3), None), ((2**31 - 10, 2**31 - 1), None), ((0, 2**33, 2**31), None),
                                     ((6,), 'int8'), ((-4, 9, 5), 'int64'), ((5,), 'float16')])
def test_integer_arange_is_positions(args, dt):
  """A whole-number arange is positions (a sum scan of ones, which kernels compute from their index) scaled and
  shifted in its dtype: no dense constant of its values in the graph (a causal mask's two aranges of 1024 took 0.3 ms
  a call to build as tuples), the values numpy's."""
  t = Tensor.arange(*args, dtype=dt)
  e = np.arange(*args).astype(t.dtype.np)
  assert 'tensor.const [' not in t.to_ir() and 'tensor.scan add' in t.to_ir()
  np.testing.assert_array_equal(t.numpy(), e)

@pytest.mark.parametrize("n,m", [(1, None), (3, None), (3, 5), (7, 2)])
def test_eye(n, m):
  check(Tensor.eye(n, m), np.eye(n, m, dtype=np.float32), dtypes.float32)

def test_rand_randn():
  a, b = Tensor.rand(3, 7, seed=5), Tensor.rand(3, 7, seed=5)
  assert a.dtype is dtypes.float32 and a.shape == (3, 7)
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert ((a.numpy() >= 0) & (a.numpy() < 1)).all()
  np.testing.assert_array_equal(a.numpy(), np.random.default_rng(5).random((3, 7), dtype=np.float32))
  n = Tensor.randn(1000, seed=0).numpy()
  assert abs(n.mean()) < 0.15 and 0.8 < n.std() < 1.2
  assert not np.array_equal(Tensor.rand(4, seed=1).numpy(), Tensor.rand(4, seed=2).numpy())
  Tensor.manual_seed(3); x = Tensor.rand(4).numpy()
  Tensor.manual_seed(3); np.testing.assert_array_equal(x, Tensor.rand(4).numpy())
  assert Tensor.randn((2, 2), dtype=dtypes.float16, seed=0).dtype is dtypes.float16

def test_results():
  t = Tensor([[1, 2], [3, 4]])
  assert t.tolist() == [[1, 2], [3, 4]]
  assert Tensor(3.5).item() == 3.5 and isinstance(Tensor(3).item(), int)
  assert (Tensor([2]) * 3).item() == 6
  assert t.realize() is t and t.node.realized
  with pytest.raises(ShapeError, match=r"\(2, 2\)"): t.item()

def test_lazy_until_realized():
  a = Tensor([1.0, 2.0])
  b = a * 2 + 1
  assert not b.node.realized and b.node.op == 'add'
  c = b.exp()
  b.realize()
  assert b.node.realized
  check(c, np.exp(np.array([3.0, 5.0], np.float32)))

def test_devices():
  t = Tensor([1, 2, 3], device="INTERP")
  assert t.device == "INTERP"
  u = (t * 2).to("CPU")
  assert u.device == "CPU"
  np.testing.assert_array_equal((u + 1).numpy(), [3, 5, 7])
  assert Tensor([1]).device == tgc.Device.DEFAULT
  assert Tensor([1], device="cpu").device == "CPU"
  with pytest.raises(TgcError, match="FOO"): Tensor([1], device="FOO")
  with pytest.raises(TgcError, match="different devices"): Tensor([1], device="CPU") + Tensor([1], device="INTERP")


# ---------------------------------------------------------------- promotion

P = dtypes
@pytest.mark.parametrize("a,b,r", [
  (P.int32, P.float32, P.float32), (P.int8, P.uint8, P.int16), (P.float16, P.float32, P.float32), (P.bool, P.int32, P.int32),
  (P.bool, P.float16, P.float16), (P.int64, P.float32, P.float32), (P.uint8, P.uint16, P.uint16), (P.int16, P.uint16, P.int32),
  (P.uint32, P.int32, P.int64), (P.float16, P.bfloat16, P.float32), (P.int32, P.float16, P.float16), (P.float32, P.float64, P.float64),
  (P.uint8, P.int8, P.int16), (P.bool, P.bool, P.bool), (P.int8, P.int64, P.int64), (P.uint64, P.uint8, P.uint64),
])
def test_promotion(a, b, r):
  x, y = Tensor([1, 0], dtype=a), Tensor([1, 1], dtype=b)
  assert (x + y).dtype is r and (y * x).dtype is r and (x == y).dtype is dtypes.bool
  assert tgc.tensor.least_upper_dtype(a, b) is r

@pytest.mark.parametrize("dt,scalar,r", [
  (P.float32, 2.5, P.float32), (P.float16, 2.5, P.float16), (P.int32, 2.5, P.float32), (P.int8, 3, P.int8), (P.uint8, 3, P.uint8),
  (P.bool, 3, P.int32), (P.bool, 1.5, P.float32), (P.bool, True, P.bool), (P.int16, True, P.int16), (P.float64, 2, P.float64),
])
def test_weak_scalars(dt, scalar, r):
  x = Tensor([1, 0, 1], dtype=dt)
  assert (x + scalar).dtype is r and (scalar * x).dtype is r

@pytest.mark.parametrize("dev", BOTH)
def test_weak_scalar_values(dev):
  check(Tensor([1.5, 2.5], dtype=dtypes.float16) * 2.5, np.array([1.5, 2.5], np.float16) * np.float16(2.5), dtypes.float16)
  check(Tensor([1, 2, 3]) * 2.5, np.array([2.5, 5, 7.5], np.float32), dtypes.float32)
  check(Tensor([250, 3], dtype=dtypes.uint8) + 10, np.array([250, 3], np.uint8) + np.uint8(10), dtypes.uint8)
  check(Tensor([True, False]) + 3, np.array([4, 3], np.int32), dtypes.int32)

@pytest.mark.parametrize("dt", [P.int32, P.int8, P.uint8, P.bool, P.int64])
def test_true_division_of_ints_is_float32(dt):
  a = np.array([1, 3, 0, 7], dtype=dt.np)
  b = np.array([2, 3, 4, 2], dtype=dt.np)
  check(Tensor(a) / Tensor(b), (a.astype(np.float64) / b).astype(np.float32), dtypes.float32)


# ---------------------------------------------------------------- unary ops

def _gelu(x): return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
def _sigmoid(x): return 1 / (1 + np.exp(-x))
UNARY = {
  'neg': (lambda t: -t, lambda x: -x, None), 'exp': (Tensor.exp, np.exp, None), 'exp2': (Tensor.exp2, np.exp2, None),
  'log': (Tensor.log, np.log, 'pos'), 'log2': (Tensor.log2, np.log2, 'pos'), 'sin': (Tensor.sin, np.sin, None),
  'cos': (Tensor.cos, np.cos, None), 'tan': (Tensor.tan, np.tan, 'small'), 'sqrt': (Tensor.sqrt, np.sqrt, 'pos'),
  'rsqrt': (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), 'pos'), 'reciprocal': (Tensor.reciprocal, lambda x: 1 / x, 'pos'),
  'sign': (Tensor.sign, np.sign, None), 'trunc': (Tensor.trunc, np.trunc, None), 'floor': (Tensor.floor, np.floor, None),
  'ceil': (Tensor.ceil, np.ceil, None), 'round': (Tensor.round, np.round, 'half'), 'abs': (Tensor.abs, np.abs, None),
  'relu': (Tensor.relu, lambda x: np.maximum(x, 0), None), 'sigmoid': (Tensor.sigmoid, _sigmoid, None),
  'tanh': (Tensor.tanh, np.tanh, None), 'gelu': (Tensor.gelu, _gelu, None), 'silu': (Tensor.silu, lambda x: x * _sigmoid(x), None),
  'leaky_relu': (Tensor.leaky_relu, lambda x: np.where(x < 0, 0.01 * x, x), None),
  'softplus': (Tensor.softplus, lambda x: np.log1p(np.exp(x)), None), 'square': (Tensor.square, np.square, None),
  'abs_op': (abs, np.abs, None),
}

def _input(kind, shape):
  if kind == 'pos': return randf(shape, 0.1, 5.0)
  if kind == 'small': return randf(shape, -1.2, 1.2)
  if kind == 'half': return (RNG.integers(-8, 8, shape) / 2).astype(np.float32) + (RNG.integers(0, 2, shape) * 0.3).astype(np.float32)
  return randf(shape)

@pytest.mark.parametrize("dev,shape", [("INTERP", ()), ("INTERP", (1,)), ("INTERP", (7,)), ("CPU", (3, 7))])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, shape, dev):
  f, g, kind = UNARY[name]
  x = _input(kind, shape)
  check(f(Tensor(x)), g(x.astype(np.float64)).astype(np.float32), dtypes.float32, rtol=2e-5, atol=2e-6)

@pytest.mark.parametrize("name", ['exp', 'sqrt', 'sin', 'log2', 'reciprocal'])
def test_unary_int_gives_float32(name):
  f, g, _ = UNARY[name]
  x = np.array([1, 2, 7], np.int32)
  check(f(Tensor(x)), g(x.astype(np.float64)).astype(np.float32), dtypes.float32)

@pytest.mark.parametrize("dt", [P.int32, P.int8, P.uint8])
def test_unary_int(dt):
  x = RNG.integers(-100 if dt is not P.uint8 else 0, 100, (17,)).astype(dt.np)
  t = Tensor(x)
  check(t.abs(), np.abs(x), dt); check(t.sign(), np.sign(x), dt); check(t.floor(), x, dt); check(t.round(), x, dt)
  check(~t, ~x, dt); check(t.relu(), np.maximum(x, 0), dt)
  if dt.is_signed: check(-t, -x, dt)

@pytest.mark.parametrize("dev", BOTH)
def test_special_values(dev):
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.5, -2.5, 0.5, -0.5, 1.5, 0.49999997, 1e30], np.float32)
  t = Tensor(x)
  check(t.abs(), np.abs(x)); assert not np.signbit(t.abs().numpy()).any()
  check(t.round(), np.round(x)); check(t.floor(), np.floor(x)); check(t.ceil(), np.ceil(x)); check(t.trunc(), np.trunc(x))
  check(t.sign(), np.sign(x)); check(t.relu(), np.maximum(x, 0))
  with np.errstate(invalid='ignore'): check(t.sqrt(), np.sqrt(x))

@pytest.mark.parametrize("dev", BOTH)
def test_round_half_even(dev):
  x = np.arange(-10, 11, dtype=np.float32) / 2
  check(Tensor(x).round(), np.round(x))

@pytest.mark.parametrize("dt", [P.float16, P.float64, P.bfloat16])
@pytest.mark.parametrize("dev", BOTH)
def test_unary_other_floats(dt, dev):
  x = np.array([0.5, 1.0, 2.0, 3.25], np.float32)
  t = Tensor(x, dtype=dt)
  for f, g in ((Tensor.exp, np.exp), (Tensor.sqrt, np.sqrt), (Tensor.sin, np.sin), (Tensor.sigmoid, _sigmoid)):
    r = f(t)
    assert r.dtype is dt
    np.testing.assert_allclose(r.numpy().astype(np.float64), g(x.astype(np.float64)), rtol=1e-2 if dt.itemsize == 2 else 1e-6)


# ---------------------------------------------------------------- binary ops and broadcasting

BCAST = [((3, 7), (3, 7)), ((3, 1), (1, 7)), ((7,), (3, 7)), ((), (3, 7)), ((17, 1, 3), (1, 5, 1)), ((1,), (127,)), ((3, 7), ())]
FBIN = {
  '+': (lambda a, b: a + b, np.add), '-': (lambda a, b: a - b, np.subtract), '*': (lambda a, b: a * b, np.multiply),
  '/': (lambda a, b: a / b, np.divide), 'maximum': (Tensor.maximum, np.maximum), 'minimum': (Tensor.minimum, np.minimum),
  '<': (lambda a, b: a < b, np.less), '<=': (lambda a, b: a <= b, np.less_equal), '>': (lambda a, b: a > b, np.greater),
  '>=': (lambda a, b: a >= b, np.greater_equal), '==': (lambda a, b: a == b, np.equal), '!=': (lambda a, b: a != b, np.not_equal),
  '//': (lambda a, b: a // b, np.floor_divide), '%': (lambda a, b: a % b, np.remainder),
}

@pytest.mark.parametrize("sa,sb", BCAST)
@pytest.mark.parametrize("op", list(FBIN))
def test_binary_float(op, sa, sb):
  f, g = FBIN[op]
  a, b = randf(sa), randf(sb)
  if op in ('/', '//', '%'): b = np.where(np.abs(b) < 0.3, 1.0, b).astype(np.float32)
  if op in ('<=', '>=', '==', '!='): b = np.where(RNG.random(sb) < 0.3, np.broadcast_to(a, np.broadcast_shapes(sa, sb))[(0,) * len(np.broadcast_shapes(sa, sb))], b).astype(np.float32) if sb else b
  e = g(a, b)
  check(f(Tensor(a), Tensor(b)), e, dtypes.bool if e.dtype == np.bool_ else dtypes.float32, rtol=1e-5, atol=1e-5)

IBIN = {
  '+': (lambda a, b: a + b, np.add), '-': (lambda a, b: a - b, np.subtract), '*': (lambda a, b: a * b, np.multiply),
  '//': (lambda a, b: a // b, np.floor_divide), '%': (lambda a, b: a % b, np.remainder),
  '&': (lambda a, b: a & b, np.bitwise_and), '|': (lambda a, b: a | b, np.bitwise_or), '^': (lambda a, b: a ^ b, np.bitwise_xor),
  '<<': (lambda a, b: a << b, np.left_shift), '>>': (lambda a, b: a >> b, np.right_shift),
  'maximum': (Tensor.maximum, np.maximum), '<': (lambda a, b: a < b, np.less), '==': (lambda a, b: a == b, np.equal),
}

@pytest.mark.parametrize("sa,sb", BCAST[:5])
@pytest.mark.parametrize("op", list(IBIN))
def test_binary_int(op, sa, sb):
  f, g = IBIN[op]
  a = randi(sa, -50, 50)
  b = randi(sb, 0, 8) if op in ('<<', '>>') else randi(sb, -7, 7)
  with np.errstate(all='ignore'): e = g(a, b)
  check(f(Tensor(a), Tensor(b)), e, dtypes.bool if e.dtype == np.bool_ else dtypes.int32)

@pytest.mark.parametrize("dt", [P.int8, P.int16, P.int64, P.uint8, P.uint32])
@pytest.mark.parametrize("op", ['+', '-', '*', '//', '%', '>>', '&'])
def test_binary_int_dtypes(op, dt):
  f, g = IBIN[op]
  lo, hi = (-100, 100) if dt.is_signed else (0, 200)
  a = RNG.integers(lo, hi, (17,)).astype(dt.np)
  b = (RNG.integers(0, 7, (17,)) if op == '>>' else RNG.integers(1 if not dt.is_signed else -9, 9, (17,))).astype(dt.np)
  with np.errstate(all='ignore'): e = g(a, b)
  check(f(Tensor(a), Tensor(b)), e, dt)

@pytest.mark.parametrize("dev", BOTH)
def test_int_division_floors_like_python(dev):
  a = np.array([7, -7, 7, -7, 0, 5, -5, 6, -6], np.int32)
  b = np.array([2, 2, -2, -2, 3, 5, 5, -4, -4], np.int32)
  check(Tensor(a) // Tensor(b), a // b); check(Tensor(a) % Tensor(b), a % b)
  check(Tensor(a) // 3, a // 3); check(Tensor(a) % -3, a % -3); check(17 // Tensor(b), 17 // b); check(-17 % Tensor(b), -17 % b)
  with np.errstate(all='ignore'):
    check(Tensor(a) // 0, np.zeros_like(a)); check(Tensor(a) % 0, np.zeros_like(a))

@pytest.mark.parametrize("dt", [P.int32, P.int8, P.int64])
@pytest.mark.parametrize("dev", BOTH)
def test_shift_right_is_arithmetic(dt, dev):
  a = np.array([-128, -7, -1, 0, 1, 7, 100], dt.np)
  check(Tensor(a) >> 1, a >> 1, dt); check(Tensor(a) >> 3, a >> 3, dt)
  check(Tensor(a.astype(np.uint8)) >> 1, a.astype(np.uint8) >> 1, dtypes.uint8)

@pytest.mark.parametrize("dt", [P.int32, P.int64])
@pytest.mark.parametrize("dev", ['CPU', 'C', 'OPENCL', 'INTERP'])
def test_a_shift_left_stays_signed(dt, dev):
  # a signed shift left, computed in unsigned by the C-style targets, compares as signed (a shift out of range is 0)
  x, n = np.array([-3, -3, 5, -7, 1], dt.np), np.array([-3, 2, 70, 1, 0], dt.np)
  t, u = Tensor(x, device=dev), Tensor(n, device=dev)
  want = np.where((n >= 0) & (n < dt.itemsize * 8), x << np.clip(n, 0, dt.itemsize * 8 - 1), 0).astype(dt.np)
  check(t << u, want, dt)
  check((t << u) < -3, want < -3, P.bool)

@pytest.mark.parametrize("s", [2, -1.5, 0.5, 3])
@pytest.mark.parametrize("op", ['+', '-', '*', '/', '<', '>', '==', '//', '%', '**'])
def test_scalar_both_sides(op, s):
  f = {'+': lambda a, b: a + b, '-': lambda a, b: a - b, '*': lambda a, b: a * b, '/': lambda a, b: a / b, '<': lambda a, b: a < b,
       '>': lambda a, b: a > b, '==': lambda a, b: a == b, '//': lambda a, b: a // b, '%': lambda a, b: a % b, '**': lambda a, b: a ** b}[op]
  x = randf((3, 7), 0.5, 3.0)
  x[0, 0] = s if op == '==' else x[0, 0]
  with np.errstate(all='ignore'):
    e1, e2 = f(x, np.float32(s)), f(np.float32(s), x)
  check(f(Tensor(x), s), e1, rtol=1e-4, atol=1e-5)
  check(f(s, Tensor(x)), e2, rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("dev", BOTH)
def test_bool_ops(dev):
  a, b = np.array([True, False, True, False]), np.array([True, True, False, False])
  A, B = Tensor(a), Tensor(b)
  check(A & B, a & b); check(A | B, a | b); check(A ^ B, a ^ b); check(~A, ~a); check(A.logical_not(), ~a)
  check(A + B, a | b, dtypes.bool); check(A * B, a & b); check(A == B, a == b); check(A < B, a < b)
  check(A.where(1.5, -2), np.where(a, 1.5, -2).astype(np.float32), dtypes.float32)
  check(A.where(Tensor([1, 2, 3, 4]), 0), np.where(a, [1, 2, 3, 4], 0).astype(np.int32), dtypes.int32)

@pytest.mark.parametrize("sc,sx,sy", [((3, 7), (3, 7), (3, 7)), ((3, 1), (1, 7), ()), ((7,), (3, 1), (3, 7)), ((), (3,), (3,))])
def test_where(sc, sx, sy):
  c = RNG.random(sc) < 0.5
  x, y = randf(sx), randi(sy).astype(np.float32)
  check(Tensor(c).where(Tensor(x), Tensor(y)), np.where(c, x, y), dtypes.float32)
  check(Tensor(c).where(Tensor(x), 7), np.where(c, x, np.float32(7)), dtypes.float32)
  check(Tensor(c).where(3, Tensor(y.astype(np.int32))), np.where(c, 3, y.astype(np.int32)), dtypes.int32)

@pytest.mark.parametrize("e", [0, 1, 2, 3, 5, -1, -2, 0.5, 1.5, -0.5, 2.2])
def test_pow_scalar(e):
  x = randf((3, 7), 0.2, 3.0)
  check(Tensor(x) ** e, (x.astype(np.float64) ** e).astype(np.float32), dtypes.float32, rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("dev", BOTH)
def test_pow_more(dev):
  x = randf((17,), -3, 3)
  check(Tensor(x) ** 3, x ** 3, rtol=1e-5)
  e = np.array([0, 1, 2, 3, -1, -2, 0.5, 2.5, 3, 0, 1, 2, 3, 4, 5, 6, 7], np.float32)
  with np.errstate(all='ignore'): want = x.astype(np.float64) ** e
  check(Tensor(x) ** Tensor(e), want.astype(np.float32), rtol=1e-4, atol=1e-5)
  check(2 ** Tensor(x), 2.0 ** x, rtol=1e-5)
  check(Tensor(x).pow(2), x ** 2)
  i = np.array([1, 2, 3, -2, 0, 5], np.int32)
  check(Tensor(i) ** 3, i ** 3, dtypes.int32); check(Tensor(i) ** 0, i ** 0, dtypes.int32)
  check(Tensor(i) ** Tensor(np.array([2, 3, 1, 3, 0, 4], np.int32)), i ** np.array([2, 3, 1, 3, 0, 4]), dtypes.int32)
  check(Tensor([0.0, 0.0, 2.0]) ** Tensor([0.0, 2.0, 0.0]), [1.0, 0.0, 1.0])

@pytest.mark.parametrize("lo,hi", [(-1, 1), (0, None), (None, 0.5), (-0.5, -0.25)])
def test_clip(lo, hi):
  x = randf((3, 7))
  check(Tensor(x).clip(lo, hi), np.clip(x, lo, hi).astype(np.float32))

def test_maximum_minimum_broadcast_mixed():
  a = randi((3, 1))
  b = randf((7,))
  check(Tensor(a).maximum(Tensor(b)), np.maximum(a.astype(np.float32), b), dtypes.float32)
  check(Tensor(a).minimum(2), np.minimum(a, 2), dtypes.int32)

@pytest.mark.parametrize("dev", BOTH)
def test_nan_comparisons(dev):
  x = np.array([np.nan, 1.0, 2.0], np.float32)
  y = np.array([1.0, np.nan, 2.0], np.float32)
  X, Y = Tensor(x), Tensor(y)
  check(X <= Y, x <= y); check(X >= Y, x >= y); check(X == Y, x == y); check(X != Y, x != y); check(X < Y, x < y)


# ---------------------------------------------------------------- casts

@pytest.mark.parametrize("src", [P.float32, P.int32, P.bool, P.uint8, P.float16, P.int64])
@pytest.mark.parametrize("dst", [P.float32, P.int32, P.bool, P.uint8, P.float16, P.int8, P.float64])
def test_cast(src, dst):
  x = np.array([0, 1, 2, 3, 7, 100, 0, 1], dtype=np.float32) * (1 if not src.is_float else 1.25)
  if src.is_bool: x = x > 1
  a = x.astype(src.np)
  t = Tensor(a).cast(dst)
  assert t.dtype is dst
  check(t, a.astype(dst.np))

@pytest.mark.parametrize("dev", BOTH)
def test_bitcast(dev):
  x = randf((3, 7))
  check(Tensor(x).bitcast(dtypes.int32), x.view(np.int32), dtypes.int32)
  check(Tensor(x).bitcast(dtypes.uint32).bitcast(dtypes.float32), x)
  h = x.astype(np.float16)
  check(Tensor(h).bitcast(dtypes.int16), h.view(np.int16), dtypes.int16)
  with pytest.raises(DTypeError, match="same size"): Tensor(x).bitcast(dtypes.int16)
  with pytest.raises(DTypeError): Tensor(x).bitcast(dtypes.bool)

@pytest.mark.parametrize("dev", BOTH)
def test_bfloat16_round_trip(dev):
  x = np.array([1.0, 2.5, -3.0, 0.1, 1000.0], np.float32)
  t = Tensor(x, dtype=dtypes.bfloat16)
  assert t.dtype is dtypes.bfloat16
  np.testing.assert_allclose(t.numpy(), x, rtol=1e-2)
  np.testing.assert_allclose((t * 2).cast(dtypes.float32).numpy(), x * 2, rtol=1e-2)


# ---------------------------------------------------------------- errors: eager, TgcError subclasses, naming shapes

def test_error_broadcast():
  with pytest.raises(ShapeError, match=r"\(3, 7\).*\(3, 5\)"): Tensor.ones(3, 7) + Tensor.ones(3, 5)
  with pytest.raises(ShapeError, match=r"\(4,\)"): Tensor.ones(3, 7).where(Tensor.ones(4), 0)
  assert issubclass(ShapeError, TgcError)

def test_errors_are_eager_and_not_assertions():
  a = Tensor.ones(3, 7)
  cases = [
    (ShapeError, lambda: a.reshape(5, 5)), (ShapeError, lambda: a.reshape(-1, -1)), (ShapeError, lambda: a.expand(3, 8)),
    (ShapeError, lambda: a @ Tensor.ones(3, 7)), (ShapeError, lambda: a.shrink(((0, 4), None))), (ShapeError, lambda: a.pad(((1, 1),))),
    (AxisError, lambda: a.sum(2)), (AxisError, lambda: a.max(-3)), (AxisError, lambda: a.permute(0, 0)), (AxisError, lambda: a.sum((0, 0))),
    (AxisError, lambda: a.transpose(0, 2)), (AxisError, lambda: a.softmax(5)), (AxisError, lambda: a.unsqueeze(4)),
    (IndexingError, lambda: a[3]), (IndexingError, lambda: a[0, 0, 0]), (IndexingError, lambda: a[..., ...]), (IndexingError, lambda: a[::0]),
    (IndexingError, lambda: a[-4]), (IndexingError, lambda: a["x"]),
    (DTypeError, lambda: a & a), (DTypeError, lambda: a << 1), (DTypeError, lambda: ~a), (DTypeError, lambda: a.cast("float99")),
    (DTypeError, lambda: -(a > 0)), (DTypeError, lambda: Tensor(["a"])), (DTypeError, lambda: Tensor([1, 2]) ** -1),
    (ShapeError, lambda: Tensor([[1, 2], [3]])), (ShapeError, lambda: a.item()), (ShapeError, lambda: a.cat(Tensor.ones(2, 6), dim=1)),
    (ShapeError, lambda: a.stack(Tensor.ones(3, 6))), (ShapeError, lambda: Tensor.ones(3).dot(Tensor.ones(4))),
    (ShapeError, lambda: Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(2, 3, 3, 3))), (ShapeError, lambda: Tensor(3.0) @ a),
  ]
  for exc, fn in cases:
    with pytest.raises(exc) as info: fn()
    assert isinstance(info.value, TgcError) and not isinstance(info.value, AssertionError)

def test_error_messages_name_shapes():
  with pytest.raises(ShapeError, match=r"\(3, 7\).*\(5, 5\)"): Tensor.ones(3, 7).reshape(5, 5)
  with pytest.raises(AxisError, match=r"axis 2.*\(3, 7\)"): Tensor.ones(3, 7).sum(2)
  with pytest.raises(IndexingError, match=r"index 3 is out of bounds for axis 0 with size 3"): Tensor.ones(3, 7)[3]
  with pytest.raises(ShapeError, match=r"\(3, 7\) and \(3, 7\)"): Tensor.ones(3, 7) @ Tensor.ones(3, 7)


# ---------------------------------------------------------------- the CPU device: a picked sample of the matrices above

@pytest.mark.parametrize("dev", ["CPU"])
@pytest.mark.parametrize("sa,sb", [((3, 7), (3, 7)), ((3, 1), (1, 7)), ((), (17,))])
def test_cpu_binary(sa, sb, dev):
  a, b = randf(sa), randf(sb, 0.5, 2.0)
  A, B = Tensor(a), Tensor(b)
  check((A + B) * A - B / A.maximum(B), (a + b) * a - b / np.maximum(a, b), rtol=1e-5, atol=1e-5)
  check(((A < B) | (A >= B * 2)) ^ (A == B), ((a < b) | (a >= b * 2)) ^ (a == b))
  check(A // B + A % B, np.floor_divide(a, b) + np.remainder(a, b), rtol=1e-5, atol=1e-5)
  i, j = randi(sa), randi(sb, 1, 9)
  check((Tensor(i) // Tensor(j)) * 3 + (Tensor(i) % -Tensor(j)) + (Tensor(i) << 2) - (Tensor(i) >> 1) & 1023,
        (i // j) * 3 + (i % -j) + (i << 2) - (i >> 1) & 1023)

@pytest.mark.parametrize("dev", ["CPU"])
def test_cpu_dtypes(dev):
  for np_dt in (np.int8, np.uint16, np.int64, np.uint64, np.float16, np.float64):
    a = RNG.integers(0, 50, (17,)).astype(np_dt)
    check(Tensor(a) * 3 + Tensor(a), a * np_dt(3) + a)
  x = randf((7,))
  for dst in (dtypes.int8, dtypes.uint8, dtypes.bool, dtypes.float16, dtypes.int64, dtypes.float64):
    check(Tensor(x * 10).cast(dst), (x * 10).astype(dst.np))
  check(Tensor(np.array([1, 0, 3], np.int32)).cast(dtypes.bool).cast(dtypes.float32), [1.0, 0.0, 1.0])

@pytest.mark.parametrize("dev", ["CPU"])
def test_cpu_where_pow_clip(dev):
  x = randf((3, 7), 0.2, 3.0)
  c = RNG.random((3, 1)) < 0.5
  check(Tensor(c).where(Tensor(x) ** 2.5, Tensor(x).clip(0.5, 1.5)), np.where(c, x.astype(np.float64) ** 2.5, np.clip(x, 0.5, 1.5)), rtol=1e-4)


def test_half_product_read_by_several_kernels_is_stored_half():
  """A half-precision product whose float32 sums several kernels read (attention's scores: a max, an exp, a sum) is
  stored rounded to half, as the Tensor API's matmul gives it to them, not as its float32 sums: the same values in half
  the bytes; the scores of a causal attention match torch."""
  import torch
  from tgc.tensor import _build_module
  from tgc.lowering import lower
  from tgc.target import DeviceSpec
  rng = np.random.default_rng(5)
  q, k, v = (rng.standard_normal((2, 3, 64, 16)).astype(np.float16) for _ in range(3))
  t = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
  m, _ = _build_module([t.node], 'main')
  lower(m, DeviceSpec.of('cuda'), 'kernel')
  first = next(ln for ln in m.print().splitlines() if ln.startswith('kernel.func'))
  assert '%data0: !kernel.buf<2x3x64x64xf16>' in first, first
  ref = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a, dtype=torch.float32) for a in (q, k, v)), is_causal=True).numpy()
  np.testing.assert_allclose(t.numpy().astype(np.float32), ref, atol=2e-3, rtol=2e-3)
