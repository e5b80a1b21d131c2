"""The 8-bit floats (f8e4m3, f8e5m2 and the FNUZ variants), bf16 and the sub-byte ints (i4, u4, i2, u2) against
ml_dtypes, an oracle tgc does not use itself: tgc.ir.dtypes' encoder/decoder over every code and every rounding
boundary, casts and arithmetic on the CPU (LLVM), C and INTERP devices, the IR text, nvcc on the CUDA source, and the
numpy boundaries (tgc.compile, ONNX)."""
import numpy as np
import pytest
import tgc
import tgc.ir as I
from tgc.ir import dtypes as D
from tgc.runtime import get_device
from test_target_cuda import NVCC, nvcc_cubin

ml = pytest.importorskip('ml_dtypes')
ML = {'f8e4m3': ml.float8_e4m3fn, 'f8e5m2': ml.float8_e5m2, 'f8e4m3fnuz': ml.float8_e4m3fnuz, 'f8e5m2fnuz': ml.float8_e5m2fnuz}
DEVICES = ['CPU', 'C', 'INTERP']


def oracle(x, name):
  """ml_dtypes' rounding of float32 values to nearest even, saturated as a tgc cast is (ONNX Cast's default: a clip first)."""
  m = ML[name]
  with np.errstate(all='ignore'):
    return np.clip(np.asarray(x, np.float32), -float(ml.finfo(m).max), float(ml.finfo(m).max)).astype(m)

def same(got_bits, want, name):
  """Bits equal, except that any NaN stands for any NaN (tgc writes one NaN code, ml_dtypes keeps the sign)."""
  g, w = np.asarray(got_bits).view(ML[name]).astype(np.float32), want.astype(np.float32)
  np.testing.assert_array_equal(g, w)  # (NaN == NaN here; +0 == -0: the bits below tell them apart)
  fin = ~np.isnan(w)
  np.testing.assert_array_equal(np.asarray(got_bits)[fin], want.view(np.uint8)[fin])

def boundaries(name, rng):
  """Every finite value, every midpoint between neighbours and the floats either side of it, the specials, and
  random values over the whole exponent range (overflowing and underflowing ones included)."""
  v = np.unique(np.arange(256, dtype=np.uint8).view(ML[name]).astype(np.float32))
  v = v[np.isfinite(v)]
  mid = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
  rnd = (rng.standard_normal(2000) * np.exp2(rng.integers(-24, 20, 2000))).astype(np.float32)
  spec = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e30, -1e30, 1e-30, -1e-30, np.finfo(np.float32).tiny], np.float32)
  return np.concatenate([v, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)), rnd, spec])

def kernel(body, n, dsts, srcs):
  """A uop.func with output buffers `dsts` then inputs `srcs` (loaded as %a, %b), one point per element."""
  lines = [f"%{i} = uop.define_global {i} : !uop.ptr<{t}>" for i, t in enumerate(dsts + srcs)]
  lines += [f"%g = uop.special gidx0 {n} : i32"] + [f"%{'ab'[j]} = uop.load %{len(dsts) + j}[%g] : {t}" for j, t in enumerate(srcs)]
  return "uop.func @k() attributes {global_size = [%d]} {\n  %s\n}" % (n, '\n  '.join(lines + body))

def run(text, bufs, dev):
  get_device(dev).compile(I.parse(text).functions('uop.func')[0])(*bufs)
  return bufs


@pytest.mark.parametrize('name', list(ML))
def test_format_matches_ml_dtypes(name):
  f, m = D.get(name).fmt, ML[name]
  codes = np.arange(256, dtype=np.uint8)
  np.testing.assert_array_equal(D.decode(codes, f), codes.view(m).astype(np.float32))
  assert f.max == float(ml.finfo(m).max) and D.decode(np.uint8(f.max_code), f) == f.max
  x = boundaries(name, np.random.default_rng(0))
  same(D.encode(x, f), oracle(x, name), name)
  assert np.isnan(D.decode(D.encode(np.float32(np.nan), f), f))

def test_bf16_matches_ml_dtypes():
  rng = np.random.default_rng(1)
  x = np.concatenate([(rng.standard_normal(5000) * np.exp2(rng.integers(-140, 120, 5000))).astype(np.float32),
                      np.array([np.inf, -np.inf, 3.4e38, -0.0, 1e-45, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8], np.float32)])
  np.testing.assert_array_equal(D.f32_to_bf16_bits(x), x.astype(ml.bfloat16).view(np.uint16))
  b = np.arange(0, 1 << 16, 7, dtype=np.uint16)
  np.testing.assert_array_equal(D.bf16_bits_to_f32(b), b.view(ml.bfloat16).astype(np.float32))


@pytest.mark.parametrize('dev', DEVICES)
@pytest.mark.parametrize('name', list(ML))
def test_casts_from_and_to_f32_f16(name, dev):
  x = boundaries(name, np.random.default_rng(2))
  n = len(x)
  body = [f"%c = uop.cast %a : f32 -> {name}", f"uop.store %0[%g], %c : {name}",
          f"%h = uop.cast %b : f16 -> {name}", f"uop.store %1[%g], %h : {name}",
          f"%d = uop.cast %a : f32 -> f64", f"%e = uop.cast %d : f64 -> {name}", f"uop.store %2[%g], %e : {name}"]
  with np.errstate(over='ignore'): h = x.astype(np.float16)
  out = run(kernel(body, n, [name] * 3, ['f32', 'f16']), [np.zeros(n, np.uint8) for _ in range(3)] + [x, h], dev)
  same(out[0], oracle(x, name), name)
  same(out[1], oracle(h.astype(np.float32), name), name)  # f16 -> float32 is exact
  same(out[2], oracle(x, name), name)                      # from f64: through float32, as bf16
  codes = np.arange(256, dtype=np.uint8)
  body = [f"%c = uop.cast %a : {name} -> f32", "uop.store %0[%g], %c : f32", f"%h = uop.cast %a : {name} -> f16", "uop.store %1[%g], %h : f16",
          f"%i = uop.cast %a : {name} -> i32", "uop.store %2[%g], %i : i32"]
  f32, f16, i32 = run(kernel(body, 256, ['f32', 'f16', 'i32'], [name]), [np.zeros(256, np.float32), np.zeros(256, np.float16), np.zeros(256, np.int32), codes], dev)[:3]
  v = codes.view(ML[name])
  np.testing.assert_array_equal(f32, v.astype(np.float32))
  np.testing.assert_array_equal(f16, v.astype(np.float32).astype(np.float16))
  fin = np.isfinite(v.astype(np.float32))
  np.testing.assert_array_equal(i32[fin], np.trunc(v.astype(np.float32)[fin]).astype(np.int32))


@pytest.mark.parametrize('dev', DEVICES)
def test_casts_between_f8_types(dev):
  codes = np.arange(256, dtype=np.uint8)
  for src in ML:
    body = [f"%c{i} = uop.cast %a : {src} -> {dst}\n  uop.store %{i}[%g], %c{i} : {dst}" for i, dst in enumerate(ML)]
    outs = run(kernel(body, 256, list(ML), [src]), [np.zeros(256, np.uint8) for _ in ML] + [codes], dev)
    for got, dst in zip(outs, ML): same(got, oracle(codes.view(ML[src]).astype(np.float32), dst), dst)


@pytest.mark.parametrize('dev', DEVICES)
@pytest.mark.parametrize('name', ['f8e4m3', 'f8e5m2'])
def test_arithmetic_rounds_every_result(name, dev):
  """Each op computes in float32 and rounds its result (saturating), as ml_dtypes' arithmetic does before its cast."""
  rng = np.random.default_rng(3)
  a = rng.integers(0, 256, 512).astype(np.uint8)
  b = rng.integers(0, 256, 512).astype(np.uint8)
  ops = {'add': np.add, 'mul': np.multiply, 'fdiv': np.divide, 'sub': np.subtract}
  body = [f"%r{i} = uop.{op} %a, %b : {name}\n  uop.store %{i}[%g], %r{i} : {name}" for i, op in enumerate(ops)]
  body += [f"%s = uop.sqrt %a : {name}\n  uop.store %{len(ops)}[%g], %s : {name}"]
  outs = run(kernel(body, 512, [name] * (len(ops) + 1), [name, name]), [np.zeros(512, np.uint8) for _ in range(len(ops) + 1)] + [a, b], dev)[:len(ops) + 1]
  fa, fb = a.view(ML[name]).astype(np.float32), b.view(ML[name]).astype(np.float32)
  with np.errstate(all='ignore'):
    for got, f in zip(outs, ops.values()): same(got, oracle(f(fa, fb), name), name)
    same(outs[-1], oracle(np.sqrt(fa), name), name)


SUBML = {'i4': ml.int4, 'u4': ml.uint4, 'i2': ml.int2, 'u2': ml.uint2}

@pytest.mark.parametrize('dev', DEVICES)
@pytest.mark.parametrize('name', list(SUBML))
def test_sub_byte_ints(name, dev):
  """i4/u4/i2/u2, a byte each: casts from floats truncate and wrap, as ml_dtypes' astype (ONNX Cast's reference);
  every op's result wraps to the type's bits; casts to wider types keep the value."""
  m, dt = SUBML[name], D.get(name)
  x = np.concatenate([np.arange(-40, 40, 0.75), [1e3, -1e3, 0.0, -0.0]]).astype(np.float32)
  n = len(x)
  out = run(kernel([f"%c = uop.cast %a : f32 -> {name}", f"uop.store %0[%g], %c : {name}"], n, [name], ['f32']), [np.zeros(n, dt.np), x], dev)[0]
  np.testing.assert_array_equal(out, x.astype(m).astype(dt.np))
  v = np.arange(int(ml.iinfo(m).min), int(ml.iinfo(m).max) + 1)
  a, b = np.repeat(v, len(v)).astype(dt.np), np.tile(v, len(v)).astype(dt.np)
  ops = {'add': np.add, 'sub': np.subtract, 'mul': np.multiply, 'xor': np.bitwise_xor}
  body = [f"%r{i} = uop.{op} %a, %b : {name}\n  uop.store %{i}[%g], %r{i} : {name}" for i, op in enumerate(ops)]
  body += [f"%w = uop.cast %r2 : {name} -> i32\n  uop.store %{len(ops)}[%g], %w : i32", f"%f = uop.cast %a : {name} -> f16\n  uop.store %{len(ops) + 1}[%g], %f : f16"]
  k = len(a)
  outs = run(kernel(body, k, [name] * len(ops) + ['i32', 'f16'], [name, name]), [np.zeros(k, dt.np) for _ in ops] + [np.zeros(k, np.int32), np.zeros(k, np.float16), a, b], dev)
  for got, f in zip(outs, ops.values()): np.testing.assert_array_equal(got, f(a.astype(np.int64), b).astype(m).astype(dt.np), err_msg=name)
  np.testing.assert_array_equal(outs[len(ops)], (a.astype(np.int64) * b).astype(m).astype(np.int32))
  np.testing.assert_array_equal(outs[len(ops) + 1], a.astype(np.float16))


def test_ir_text_roundtrip():
  text = """func.func @f(%a: tensor<2x3xf8e4m3>, %b: tensor<2x3xf8e5m2fnuz>) -> tensor<2x3xf8e4m3fnuz> {
  %c = tensor.const 500.0 : tensor<2x3xf8e4m3>
  %0 = tensor.add %a, %c : tensor<2x3xf8e4m3>
  %1 = tensor.cast %0 : tensor<2x3xf8e4m3> -> tensor<2x3xf8e4m3fnuz>
  func.return %1 : tensor<2x3xf8e4m3fnuz>
}"""
  m = I.parse(text)
  assert m.print() == I.parse(m.print()).print() and 'tensor<2x3xf8e5m2fnuz>' in m.print() and 'f8e4m3fnuz' in m.print()
  from tgc.dialects.uop import const_value
  from tgc.ir.attrs import HexInt
  for name in ML:
    dt = D.get(name)
    assert I.parse(f"uop.func @k() {{\n  %0 = uop.define_global 0 : !uop.ptr<{name}>\n}}").print().count(name) == 1
    f = dt.fmt
    assert const_value(HexInt(f.max_code), dt) == float(ml.finfo(ML[name]).max)
    assert const_value(1e9, dt) == f.max and const_value(-np.inf, dt) == -f.max  # a constant rounds as a cast does
    assert const_value(0.3, dt) == oracle(np.float32(0.3), name).astype(np.float32)


@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP'])
def test_compiled_function_takes_float32_for_f8(dev):
  fn = tgc.compile("""func.func @f(%a: tensor<8xf8e4m3>, %b: tensor<8xf8e5m2>) -> (tensor<8xf8e4m3>, tensor<8xf32>) {
  %0 = tensor.cast %b : tensor<8xf8e5m2> -> tensor<8xf8e4m3>
  %1 = tensor.mul %a, %0 : tensor<8xf8e4m3>
  %2 = tensor.cast %1 : tensor<8xf8e4m3> -> tensor<8xf32>
  func.return %1, %2 : tensor<8xf8e4m3>, tensor<8xf32>
}""", device=dev)
  a = oracle(np.array([1.5, -2, 0.125, 300, 3, 0, 7, -0.5], np.float32), 'f8e4m3').astype(np.float32)
  b = oracle(np.array([3, 2.5, 1024, 2, -0.0, 5, 0.75, 96], np.float32), 'f8e5m2').astype(np.float32)
  bits, f32 = fn(a, b)
  want = oracle(a * oracle(b, 'f8e4m3').astype(np.float32), 'f8e4m3')
  same(bits, want, 'f8e4m3')
  np.testing.assert_array_equal(f32, want.astype(np.float32))


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_cuda_source_compiles_with_nvcc():
  from tgc.emit.cuda import render_cuda
  from tgc.ir.core import Module
  fns = []
  for i, name in enumerate(ML):
    body = [f"%c = uop.cast %a : f32 -> {name}", f"%d = uop.mul %c, %c : {name}", f"%e = uop.exp2 %d : {name}",
            f"%h = uop.cast %e : {name} -> f16", "uop.store %1[%g], %h : f16", f"%x = uop.bitcast %c : {name} -> u8",
            f"%y = uop.bitcast %x : u8 -> {'f8e5m2' if name != 'f8e5m2' else 'f8e4m3'}", f"uop.store %0[%g], %y : {'f8e5m2' if name != 'f8e5m2' else 'f8e4m3'}"]
    fn = I.parse(kernel(body, 32, ['f8e5m2' if name != 'f8e5m2' else 'f8e4m3', 'f16'], ['f32'])).functions('uop.func')[0]
    fn.attrs['sym_name'] = f"k{i}"
    fns.append(fn)
  src = render_cuda(Module(fns))
  assert all(f"tg_f32_to_{n}" in src for n in ML)
  assert nvcc_cubin(src) > 0


def test_onnx_boundary():
  onnx = pytest.importorskip('onnx')
  from onnx import helper as h, TensorProto as T
  from tgc.frontend import onnx as fe
  g = h.make_graph([h.make_node('Cast', ['x'], ['q'], to=T.FLOAT8E4M3FN), h.make_node('Cast', ['q'], ['y'], to=T.FLOAT),
                    h.make_node('Add', ['b', 'b'], ['c'])], 'g',
                   [h.make_tensor_value_info('x', T.FLOAT, [6]), h.make_tensor_value_info('b', T.BFLOAT16, [3])],
                   [h.make_tensor_value_info('q', T.FLOAT8E4M3FN, [6]), h.make_tensor_value_info('y', T.FLOAT, [6]),
                    h.make_tensor_value_info('c', T.BFLOAT16, [3])])
  model = fe.load(h.make_model(g, opset_imports=[h.make_opsetid('', 19)]))
  x = np.array([0.3, -1e6, np.inf, np.nan, 2.0 ** -9, -17.0], np.float32)
  b = np.array([1.5, -3.0078125, 100.5], np.float32).astype(ml.bfloat16)
  q, y, c = model(x, b)
  assert q.dtype == ml.float8_e4m3fn and c.dtype == ml.bfloat16
  same(q.view(np.uint8), oracle(x, 'f8e4m3'), 'f8e4m3')
  np.testing.assert_array_equal(y, oracle(x, 'f8e4m3').astype(np.float32))
  np.testing.assert_array_equal(c.astype(np.float32), (b.astype(np.float32) * 2).astype(ml.bfloat16).astype(np.float32))


def test_onnx_sub_byte_ints():
  pytest.importorskip('onnx')
  from onnx import helper as h, TensorProto as T
  from tgc.frontend import onnx as fe
  g = h.make_graph([h.make_node('Cast', ['x'], ['q'], to=T.INT4), h.make_node('Add', ['q', 'q'], ['s']), h.make_node('Cast', ['s'], ['y'], to=T.FLOAT)], 'g',
                   [h.make_tensor_value_info('x', T.FLOAT, [6])], [h.make_tensor_value_info('s', T.INT4, [6]), h.make_tensor_value_info('y', T.FLOAT, [6])])
  s, y = fe.load(h.make_model(g, opset_imports=[h.make_opsetid('', 21)]))(np.array([3.7, -9, 7, 100.5, -0.5, 5], np.float32))
  want = (np.array([3.7, -9, 7, 100.5, -0.5, 5], np.float32).astype(ml.int4).astype(np.int64) * 2).astype(ml.int4)
  assert s.dtype == ml.int4
  np.testing.assert_array_equal(s.astype(np.int8), want.astype(np.int8))
  np.testing.assert_array_equal(y, want.astype(np.float32))


@pytest.mark.parametrize('name', list(ML))
def test_tensor_api_f8(name):
  """tgc.dtypes.fp8*: a cast rounds as ml_dtypes does (saturating), arithmetic rounds each result, sums and matmuls
  accumulate in float32 and round once, and the values come back as float32."""
  from tgc import Tensor, dtypes
  dt = getattr(dtypes, {'f8e4m3': 'fp8e4m3', 'f8e5m2': 'fp8e5m2', 'f8e4m3fnuz': 'fp8e4m3fnuz', 'f8e5m2fnuz': 'fp8e5m2fnuz'}[name])
  rng = np.random.default_rng(3)
  x = (rng.standard_normal((8, 16)) * 4).astype(np.float32)
  w = rng.standard_normal((16, 4)).astype(np.float32)
  want = oracle(x, name).astype(np.float32)
  t = Tensor(x).cast(dt)
  assert t.dtype is dt and t.numpy().dtype == np.float32
  np.testing.assert_array_equal(t.numpy(), want)
  np.testing.assert_array_equal((t + t).numpy(), oracle(want + want, name).astype(np.float32))
  np.testing.assert_array_equal(t.sum(axis=1).numpy(), oracle(want.sum(axis=1, dtype=np.float32), name).astype(np.float32))
  wq = oracle(w, name).astype(np.float32)
  got = (t @ Tensor(w).cast(dt)).numpy()
  np.testing.assert_allclose(got, oracle(want @ wq, name).astype(np.float32), rtol=0.13, atol=1e-6)
  assert Tensor(np.ones(2, np.float16)).cast(dt).cast('float16').dtype is dtypes.float16 and (t + Tensor(np.ones((8, 16), np.float16))).dtype is dtypes.float16


@pytest.mark.parametrize('op', ['Cast', 'CastLike'])
@pytest.mark.parametrize('name,src', [(n, s) for n in ML for s in ('FLOAT', 'FLOAT16', 'FLOAT8E5M2') if (n, s) != ('f8e5m2', 'FLOAT8E5M2')])
def test_onnx_cast_saturate_0(name, src, op):
  """ONNX Cast/CastLike with saturate=0: ml_dtypes' plain astype (a value that rounds past the largest finite one,
  inf included, is inf in E5M2 and NaN in the formats without inf), at the rounding boundary above the largest value;
  saturate=1 (the default) clips. From float32, f16 and E5M2 (whose 512 is NaN in E4M3FN and 256 in E4M3FNUZ); the
  result is a graph output, and also read back by a Cast to float32."""
  onnx = pytest.importorskip('onnx')
  from onnx import helper as h, TensorProto as T
  from tgc.frontend import onnx as fe
  elem = {'f8e4m3': T.FLOAT8E4M3FN, 'f8e5m2': T.FLOAT8E5M2, 'f8e4m3fnuz': T.FLOAT8E4M3FNUZ, 'f8e5m2fnuz': T.FLOAT8E5M2FNUZ}[name]
  mx = float(ml.finfo(ML[name]).max)
  code = np.array([mx], np.float32).astype(ML[name]).view(np.uint8)
  ulp = mx - float((code - 1).view(ML[name]).astype(np.float32)[0])  # the spacing below the largest value
  x = np.array([0.3, -17.0, mx, -mx, mx + ulp / 2, -(mx + ulp / 2), mx + ulp / 4, mx + ulp * 0.75, 1e6, -1e6, np.inf, -np.inf, np.nan, 2.0 ** -12], np.float32)
  xt = getattr(T, src)
  with np.errstate(over='ignore'):  # (1e6 is inf in f16 and E5M2)
    if src != 'FLOAT': x = x.astype(np.float16 if src == 'FLOAT16' else ML['f8e5m2'])
  for sat in (0, 1):
    like = [h.make_tensor_value_info('like', elem, [1])] if op == 'CastLike' else []
    node = h.make_node('CastLike', ['x', 'like'], ['q'], saturate=sat) if op == 'CastLike' else h.make_node('Cast', ['x'], ['q'], to=elem, saturate=sat)
    g = h.make_graph([node, h.make_node('Cast', ['q'], ['y'], to=T.FLOAT)], 'g', [h.make_tensor_value_info('x', xt, [len(x)])] + like,
                     [h.make_tensor_value_info('q', elem, [len(x)]), h.make_tensor_value_info('y', T.FLOAT, [len(x)])])
    args = [x] + ([np.zeros(1, ML[name])] if like else [])
    q, y = fe.load(h.make_model(g, opset_imports=[h.make_opsetid('', 21)]))(*args)
    with np.errstate(all='ignore'): want = x.astype(np.float32).astype(ML[name]) if not sat else oracle(x.astype(np.float32), name)
    assert q.dtype == ML[name]
    same(q.view(np.uint8), want, name)
    np.testing.assert_array_equal(y, want.astype(np.float32))


@pytest.mark.parametrize('sat', [0, 1])
@pytest.mark.parametrize('name', ['f8e4m3', 'f8e5m2'])
def test_onnx_quantize_linear_to_f8(name, sat):
  """QuantizeLinear to an 8-bit float: x / scale + zero point, rounded as Cast rounds (saturate as the attribute says)."""
  pytest.importorskip('onnx')
  from onnx import helper as h, TensorProto as T, numpy_helper
  from tgc.frontend import onnx as fe
  elem = {'f8e4m3': T.FLOAT8E4M3FN, 'f8e5m2': T.FLOAT8E5M2}[name]
  scale = np.array([0.5, 2.0, 0.25], np.float32)
  inits = [numpy_helper.from_array(scale, 's'), h.make_tensor('z', elem, [3], [0, 0, 0])]
  g = h.make_graph([h.make_node('QuantizeLinear', ['x', 's', 'z'], ['q'], axis=1, saturate=sat)], 'g', [h.make_tensor_value_info('x', T.FLOAT, [2, 3])],
                   [h.make_tensor_value_info('q', elem, [2, 3])], inits)
  x = np.array([[0.3, -17.0, 1e5], [np.inf, 3.3, -250.0]], np.float32)
  q, = fe.load(h.make_model(g, opset_imports=[h.make_opsetid('', 21)]))(x)
  with np.errstate(all='ignore'): want = (x / scale).astype(ML[name]) if not sat else oracle(x / scale, name)
  same(q.view(np.uint8), want, name)
