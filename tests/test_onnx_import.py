"""ONNX import: tgc-import-onnx writes text plus a .npz of weights that tgc-opt parses and tgc-run runs; tgc.onnx.load
gives a callable; bad input is a TgcError and exit 1 with no traceback. Results are checked against numpy."""
import os, re, subprocess, sys
import numpy as np
import pytest
onnx = pytest.importorskip('onnx', reason="the onnx package is not installed (pip install -e '.[onnx]')")
from onnx import helper as h, TensorProto as T, numpy_helper
import tgc
from tgc.frontend import onnx as fe
from tgc.parser import parse
from tgc.lowering import lower
from tgc.target import DeviceSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(0)
W1, B1, W2 = (RNG.standard_normal(s).astype(np.float32) for s in ((8, 32), (32,), (32, 4)))


def mlp(batch='N', opset=17):
  """x (batch, 8) -> gelu(x @ W1 + B1) @ W2 -> softmax, as an exporter writes it (Shape/Gather/Reshape included)."""
  nodes = [h.make_node('MatMul', ['x', 'W1'], ['a']), h.make_node('Add', ['a', 'B1'], ['b']),
           h.make_node('Erf', ['b'], ['e']), h.make_node('Mul', ['b', 'e'], ['g']),
           h.make_node('Shape', ['g'], ['s']), h.make_node('Reshape', ['g', 's'], ['r']),
           h.make_node('MatMul', ['r', 'W2'], ['c']), h.make_node('Softmax', ['c'], ['y'], axis=-1)]
  inits = [numpy_helper.from_array(v, n) for n, v in (('W1', W1), ('B1', B1), ('W2', W2))]
  g = h.make_graph(nodes, 'mlp', [h.make_tensor_value_info('x', T.FLOAT, [batch, 8])], [h.make_tensor_value_info('y', T.FLOAT, [batch, 4])], inits)
  return h.make_model(g, opset_imports=[h.make_opsetid('', opset)])


def mlp_ref(x):
  from math import erf
  b = x @ W1 + B1
  c = (b * np.vectorize(erf)(b)) @ W2
  e = np.exp(c - c.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def tool(name, *args):
  code = f"import sys; from tgc.driver import {name} as m; sys.exit(m(sys.argv[1:]))"
  p = subprocess.run([sys.executable, '-c', code, *args], capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
  assert 'Traceback' not in p.stderr, p.stderr
  return p.returncode, p.stdout, p.stderr


def test_load_callable_matches_numpy():
  f = tgc.onnx.load(mlp())
  for n in (1, 3):  # a symbolic batch: specialised per call
    x = RNG.standard_normal((n, 8)).astype(np.float32)
    np.testing.assert_allclose(f(x)[0], mlp_ref(x), rtol=1e-4, atol=1e-6)



def test_tgc_onnx_is_a_module():
  """`import tgc.onnx` and `from tgc.onnx import load` work in a fresh interpreter, as the attribute tgc.onnx does."""
  code = "import tgc.onnx, tgc; from tgc.onnx import load, OnnxModel; assert tgc.onnx.load is load; print(sorted(tgc.onnx.__all__))"
  p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
  assert p.returncode == 0, p.stderr
  assert 'load' in p.stdout and 'import_text' in p.stdout
  assert isinstance(tgc.onnx.load(mlp()), tgc.onnx.OnnxModel)

def test_import_text_weights_beside_and_roundtrip():
  text, weights = fe.import_text(mlp(), {'x': (2, 8)})
  assert sorted(weights) == ['B1', 'W1', 'W2'] and len(text) < 4000  # the weights are not literals in the text
  assert text.startswith('func.func @main(%x: tensor<2x8xf32>, ')
  assert tgc.ir.parse(text).print() == text


def test_tools_import_opt_run(tmp_path):
  src, out = tmp_path / 'mlp.onnx', tmp_path / 'mlp.tgc'
  onnx.save(mlp(), str(src))
  rc, _, err = tool('import_onnx_main', str(src), '-o', str(out), '--input-shape', 'N=2')  # by the dimension's name
  assert rc == 0, err
  assert (tmp_path / 'mlp.npz').exists()
  rc, text, err = tool('opt_main', str(out), '-p', 'canonicalize,kernelize')
  assert rc == 0 and 'kernel.func' in text, err
  x = RNG.standard_normal((2, 8)).astype(np.float32)
  np.save(tmp_path / 'x.npy', x)
  rc, _, err = tool('run_main', str(out), '--input', f'x={tmp_path / "x.npy"}', '--output', str(tmp_path / 'res'))
  assert rc == 0, err
  np.testing.assert_allclose(np.load(tmp_path / 'res' / 'result0.npy'), mlp_ref(x), rtol=1e-4, atol=1e-6)



def test_run_without_the_weights_is_an_error(tmp_path):
  """The imported function names its weights (attributes {weights = [...]}); tgc-run with the .npz missing, or
  missing one of them, says which file and exits 1; --random-weights fills them with seeded random values."""
  src, out = tmp_path / 'mlp.onnx', tmp_path / 'mlp.tgc'
  onnx.save(mlp(), str(src))
  assert tool('import_onnx_main', str(src), '-o', str(out), '--input-shape', 'N=2')[0] == 0
  assert 'attributes {weights = ["W1", "B1", "W2"]}' in out.read_text()
  npz = tmp_path / 'mlp.npz'
  weights = dict(np.load(npz))
  npz.unlink()
  rc, text, err = tool('run_main', str(out))
  assert rc == 1 and text == '', err
  assert f"'{npz}' does not exist" in err and '%W1, %B1, %W2' in err and '--random-weights' in err
  np.savez(npz, W1=weights['W1'], B1=weights['B1'])
  rc, _, err = tool('run_main', str(out))
  assert rc == 1 and f"'{npz}' does not hold them" in err and 'weights with no values: %W2;' in err, err
  x = RNG.standard_normal((2, 8)).astype(np.float32)
  np.save(tmp_path / 'x.npy', x); np.save(tmp_path / 'w2.npy', weights['W2'])
  rc, _, err = tool('run_main', str(out), '--input', f"x={tmp_path / 'x.npy'}", '--input', f"W2={tmp_path / 'w2.npy'}", '--output', str(tmp_path / 'a'))
  assert rc == 0, err  # the last one given by --input
  np.testing.assert_allclose(np.load(tmp_path / 'a' / 'result0.npy'), mlp_ref(x), rtol=1e-4, atol=1e-6)
  rc, _, err = tool('run_main', str(out), '--random-weights', '--output', str(tmp_path / 'b'))
  assert rc == 0 and 'input %W2: random tensor<32x4xf32>' in err and 'input %W1' not in err, err
  assert np.load(tmp_path / 'b' / 'result0.npy').shape == (2, 4)

def _bad_models(tmp_path):
  garbage = tmp_path / 'garbage.onnx'; garbage.write_bytes(b'\x08\x07not a model at all\xff\xff')
  unsupported = h.make_model(h.make_graph([h.make_node('ImageDecoder', ['x'], ['y'], name='im0')], 'g',
    [h.make_tensor_value_info('x', T.UINT8, [8])], [h.make_tensor_value_info('y', T.UINT8, [2, 2, 3])]), opset_imports=[h.make_opsetid('', 20)])
  strings = h.make_model(h.make_graph([h.make_node('Identity', ['x'], ['y'])], 'g',
    [h.make_tensor_value_info('x', T.STRING, [2])], [h.make_tensor_value_info('y', T.STRING, [2])]), opset_imports=[h.make_opsetid('', 13)])
  body = h.make_graph([h.make_node('Identity', ['c'], ['co']), h.make_node('Add', ['v', 'v'], ['vo'])], 'b',
    [h.make_tensor_value_info('i', T.INT64, []), h.make_tensor_value_info('c', T.BOOL, []), h.make_tensor_value_info('v', T.FLOAT, [1])],
    [h.make_tensor_value_info('co', T.BOOL, []), h.make_tensor_value_info('vo', T.FLOAT, [1])])
  endless = h.make_model(h.make_graph([h.make_node('Constant', [], ['t'], value=h.make_tensor('t', T.BOOL, [], [True])),
    h.make_node('Loop', ['', 't', 'x'], ['y'], body=body, name='lp')], 'g', [h.make_tensor_value_info('x', T.FLOAT, [1])],
    [h.make_tensor_value_info('y', T.FLOAT, [1])]), opset_imports=[h.make_opsetid('', 13)])
  seq_in = h.make_model(h.make_graph([h.make_node('ConcatFromSequence', ['s'], ['y'], axis=0)], 'g',
    [h.make_tensor_sequence_value_info('s', T.FLOAT, [2])], [h.make_tensor_value_info('y', T.FLOAT, [None])]), opset_imports=[h.make_opsetid('', 13)])
  W = numpy_helper.from_array(np.ones(4, np.float32), 'W'); W.raw_data = W.raw_data[:6]  # (6 bytes for 4 floats)
  short_init = h.make_model(h.make_graph([h.make_node('Add', ['x', 'W'], ['y'])], 'g', [h.make_tensor_value_info('x', T.FLOAT, [4])],
    [h.make_tensor_value_info('y', T.FLOAT, [4])], [W]), opset_imports=[h.make_opsetid('', 13)])
  future = h.make_model(h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'g', [h.make_tensor_value_info('x', T.FLOAT, [2])],
    [h.make_tensor_value_info('y', T.FLOAT, [2])]), opset_imports=[h.make_opsetid('', 1000)])
  gather_oob = h.make_model(h.make_graph([h.make_node('Gather', ['x', 'i'], ['y'])], 'g', [h.make_tensor_value_info('x', T.FLOAT, [3])],
    [h.make_tensor_value_info('y', T.FLOAT, None)], [numpy_helper.from_array(np.array([7], np.int64), 'i')]), opset_imports=[h.make_opsetid('', 13)])
  return [(str(garbage), [], 'not a valid ONNX model'), (endless, [], "node 'lp' (Loop): Loop runs past 4096 iterations"),
          (seq_in, [], "graph input 's' is a sequence: tgc takes one only in the Python callable"),
          (h.make_model(h.make_graph([h.make_node('Foo', ['x'], ['y'], name='f', domain='com.example')], 'g', [h.make_tensor_value_info('x', T.FLOAT, [2])],
            [h.make_tensor_value_info('y', T.FLOAT, [2])]), opset_imports=[h.make_opsetid('', 13), h.make_opsetid('com.example', 1)]), [],
           "op com.example.Foo (opset 1) is not supported by tgc: only the domains '', 'ai.onnx.preview'"), (str(tmp_path / 'missing.onnx'), [], 'no such file'),
          (unsupported, [], "node 'im0': op ImageDecoder (opset 20) is not supported"), (mlp(), [], "dimension 0 is symbolic ('N')"),
          (strings, [], 'dtype STRING is not supported'), (mlp(), ['y=1x8'], "'y', which is not a graph input"),
          (mlp(), ['x=-1x4'], 'dimensions are whole numbers of 0 or more, got (-1, 4)'),
          (short_init, [], "initializer 'W' ([4]) does not hold its data"), (future, [], "the model's opset 1000 is newer than"),
          (gather_oob, [], "index 7 is out of range for axis 0 of size 3")]


def test_bad_input_is_a_tgc_error_and_exit_1(tmp_path):
  for k, (model, shapes, msg) in enumerate(_bad_models(tmp_path)):
    with pytest.raises(tgc.TgcError, match=re.escape(msg)):
      fe.import_text(model, dict(fe.parse_shape(s) for s in shapes))
    if not isinstance(model, str):
      path = tmp_path / f'bad{k}.onnx'; onnx.save(model, str(path)); model = str(path)
    rc, _, err = tool('import_onnx_main', model, *[a for s in shapes for a in ('--input-shape', s)])
    assert rc == 1 and 'tgc-import-onnx: error:' in err and msg in err, err


def test_backend_interface():
  assert fe.supports_device('CPU')
  x = RNG.standard_normal((3, 8)).astype(np.float32)
  out = fe.prepare(mlp()).run([x])
  np.testing.assert_allclose(out[0], mlp_ref(x), rtol=1e-4, atol=1e-6)


def test_repeated_constants_are_splats():
  """A constant holding one value repeated (a Mul's scale of shape [1], ConstantOfShape's fill) prints as a splat
  `tensor.const`, not a weight; values compare by bits, so [0.0, -0.0] stays dense (1 / it is [inf, -inf])."""
  nodes = [h.make_node('Constant', [], ['s'], value=numpy_helper.from_array(np.full([1], 0.25, np.float32))),
           h.make_node('Constant', [], ['big'], value=numpy_helper.from_array(np.full([64], 3.0, np.float32))),
           h.make_node('Constant', [], ['z'], value=numpy_helper.from_array(np.array([0.0, -0.0], np.float32))),
           h.make_node('Mul', ['x', 's'], ['a']), h.make_node('Add', ['a', 'big'], ['y']), h.make_node('Reciprocal', ['z'], ['r'])]
  g = h.make_graph(nodes, 'g', [h.make_tensor_value_info('x', T.FLOAT, [64])],
                   [h.make_tensor_value_info('y', T.FLOAT, [64]), h.make_tensor_value_info('r', T.FLOAT, [2])])
  model = h.make_model(g, opset_imports=[h.make_opsetid('', 13)])
  text, weights = fe.import_text(model, {})
  assert weights == {} and 'tensor.const 0.25 : tensor<1xf32>' in text and 'tensor.const 3.0 : tensor<64xf32>' in text, text
  assert 'tensor.const [0.0, -0.0] : tensor<2xf32>' in text, text
  x = RNG.standard_normal(64).astype(np.float32)
  y, r = tgc.onnx.load(model)(x)
  np.testing.assert_allclose(y, x * 0.25 + 3.0, rtol=1e-6)
  assert list(r) == [np.inf, -np.inf]


@pytest.mark.parametrize('shape,stride,group,const', [((2, 6, 5, 7), 1, 1, True), ((1, 6, 4, 4), 1, 1, True), ((2, 6, 5, 7), 1, 1, False),
                                                     ((2, 6, 5, 7), 2, 1, True), ((2, 6, 5, 7), 1, 2, True)])
def test_pointwise_conv_matches_numpy(shape, stride, group, const):
  """1x1 convs with a bias, then Relu: W @ x over 16 pixels, x^T @ W^T (W^T packed at import) over 35, conv2d for a
  weight fed as an input, a stride or groups."""
  x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in (shape, (8, 6 // group, 1, 1), (8,)))
  nodes = [h.make_node('Conv', ['x', 'w', 'b'], ['c'], strides=[stride, stride], group=group), h.make_node('Relu', ['c'], ['y'])]
  ins = [h.make_tensor_value_info('x', T.FLOAT, list(x.shape))] + ([] if const else [h.make_tensor_value_info('w', T.FLOAT, list(w.shape))])
  g = h.make_graph(nodes, 'g', ins, [h.make_tensor_value_info('y', T.FLOAT, None)], ([numpy_helper.from_array(w, 'w')] if const else []) + [numpy_helper.from_array(b, 'b')])
  xs = x[:, :, ::stride, ::stride]
  xs = xs.reshape(shape[0], group, 6 // group, *xs.shape[2:])
  ref = np.einsum('ngchw,gkc->ngkhw', xs, w.reshape(group, 8 // group, 6 // group)).reshape(shape[0], 8, *xs.shape[3:]) + b[:, None, None]
  f = tgc.onnx.load(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]))
  np.testing.assert_allclose((f(x) if const else f(x, w))[0], np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('xs,ws,group', [((2, 4, 11), (4, 1, 4), 4), ((1, 3, 6, 7), (5, 3, 3, 3), 1)])
def test_f16_conv_rounds_once(xs, ws, group):
  """An f16 Conv sums its products in float32 unrounded (as matmul, and as tensor cores do): with 8-bit factors
  the products and their sums are exact in float32, so the result is the exact sum rounded to f16 once (a product
  rounded to f16 first is off by an ulp)."""
  x = (RNG.integers(-255, 256, xs) / 256).astype(np.float16)
  w = (RNG.integers(-127, 128, ws) / 128).astype(np.float16)
  g = h.make_graph([h.make_node('Conv', ['x', 'w'], ['y'], group=group)], 'g',
                   [h.make_tensor_value_info('x', T.FLOAT16, list(xs)), h.make_tensor_value_info('w', T.FLOAT16, list(ws))],
                   [h.make_tensor_value_info('y', T.FLOAT16, None)])
  y, = tgc.onnx.load(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]))(x, w)
  from onnx.reference import ReferenceEvaluator
  m64 = h.make_model(h.make_graph(g.node, 'g', [h.make_tensor_value_info(n, T.DOUBLE, None) for n in 'xw'], [h.make_tensor_value_info('y', T.DOUBLE, None)]),
                     opset_imports=[h.make_opsetid('', 13)])
  exact, = ReferenceEvaluator(m64).run(None, {'x': x.astype(np.float64), 'w': w.astype(np.float64)})
  np.testing.assert_array_equal(y, exact.astype(np.float16))


@pytest.mark.parametrize('k,bias', [((2, 2), True), ((2, 3), False)])
def test_conv_transpose_with_kernel_equal_to_stride(k, bias):
  """ConvTranspose whose windows tile the output (kernel = stride, no pads): one input pixel times one tap each."""
  x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 5, 3, 4), (5, 3, *k), (3,)))
  g = h.make_graph([h.make_node('ConvTranspose', ['x', 'w'] + (['b'] if bias else []), ['y'], strides=list(k))], 'g',
                   [h.make_tensor_value_info('x', T.FLOAT, list(x.shape))], [h.make_tensor_value_info('y', T.FLOAT, None)],
                   [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b')])
  ref = np.einsum('nchw,cdab->ndhawb', x, w).reshape(2, 3, 3 * k[0], 4 * k[1]) + (b[:, None, None] if bias else 0)
  np.testing.assert_allclose(tgc.onnx.load(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]))(x)[0], ref, rtol=1e-5, atol=1e-5)


def _one_node(op, x, inits=(), opset=13, **attrs):
  g = h.make_graph([h.make_node(op, ['x'] + [n for n, _ in inits], ['y'], **attrs)], 'g', [h.make_tensor_value_info('x', T.FLOAT, list(x.shape))],
                   [h.make_tensor_value_info('y', T.FLOAT, None)], [numpy_helper.from_array(v, n) for n, v in inits])
  return h.make_model(g, opset_imports=[h.make_opsetid('', opset)])


@pytest.mark.parametrize('m', [1000, 1024])
def test_matmul_by_a_constant_weight_in_panels(m):
  """The imported text is the plain product (the same for every device); on the CPU the weight is packed into column
  panels (padded to whole panels where 16 does not divide its columns, the result cut back), once: the model's
  function is specialised to its weights, and its later calls run the product alone."""
  x, w = RNG.standard_normal((2, 5, 120)).astype(np.float32), RNG.standard_normal((120, m)).astype(np.float32)
  model = _one_node('MatMul', x, [('W', w)])
  text, weights = fe.import_text(model, {})
  assert list(weights) == ['W'] and 'tensor.matmul' in text and 'tensor.pad' not in text
  f = tgc.onnx.load(model, device='CPU')
  from tgc.compiler import profile
  with profile() as first: np.testing.assert_allclose(f(x)[0], x @ w, rtol=1e-4, atol=1e-4)
  with profile() as later: np.testing.assert_allclose(f(x)[0], x @ w, rtol=1e-4, atol=1e-4)
  panels = f'_{-(-m // 16)}_120_16'
  assert [str(k) for k, _ in first if str(k).endswith(panels) and str(k).startswith('E')], first  # the pack
  assert not [k for k, _ in later if str(k).startswith('E') and str(k).endswith(panels)] and any(panels in str(k) for k, _ in later), later


@pytest.mark.parametrize('op,opset,shape,axis', [('Softmax', 13, (3, 1000), -1), ('LogSoftmax', 13, (3, 1000), -1),
                                                 ('Softmax', 11, (2, 3, 100), 1), ('Softmax', 13, (3, 1024), -1)])
def test_softmax_over_a_long_odd_axis(op, opset, shape, axis):
  """A long softmax axis that the vector width does not divide: the imported text is the plain softmax, whose CPU
  kernel pads the axis to whole vectors and reads it with masked vector loads (a row with -inf entries, one all
  -inf but one, included)."""
  x = RNG.standard_normal(shape).astype(np.float32) * 4
  x[0, ..., :7] = -np.inf; x[1, ..., 1:] = -np.inf
  x2 = x.reshape(shape[0], -1) if opset < 13 else x
  ref = np.exp(x2 - x2.max(-1, keepdims=True))
  ref = ref / ref.sum(-1, keepdims=True)
  with np.errstate(divide='ignore'): ref = (np.log(ref) if op == 'LogSoftmax' else ref).reshape(shape)
  model = _one_node(op, x, opset=opset, axis=axis)
  n = x2.shape[-1]
  text = fe.import_text(model, {})[0]
  assert 'tensor.pad' not in text
  m = parse(text)
  lower(m, DeviceSpec.of('llvm'), 'uop')
  assert bool(re.search(r'uop\.vectorize [^\n]*: vec<16xi1>', m.print())) == bool(n % 16)  # (a lane's gates as a vector: a masked load)
  np.testing.assert_allclose(tgc.onnx.load(model)(x)[0], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('e', [np.float32(2.0), np.array([3], np.int64), np.float32(-1.0), np.float32(-2.0), np.float32(0.0),
                               np.float32(0.5), np.full((2, 1), 2.0, np.float32), np.float32(1.5), np.array([[2.0], [3.0]], np.float32)])
def test_pow_by_a_constant_exponent(e):
  """A constant exponent of one value: an integer one is multiplied out, 0.5 is sqrt, with numpy's values at the edges
  (negative bases to odd and even powers, -0, +-inf, NaN; the sign of a zero too); other exponents take the general
  power, a tensor.pow in the text (exp2 of a log2: inexact, 3 ** 3 = 27.000002)."""
  x = np.array([-3, -1.5, -0.0, 0.0, 0.5, 2, np.inf, -np.inf, np.nan, 1e20], np.float32)
  x = np.stack([x, -x]) if np.shape(e) == (2, 1) and np.unique(e).size > 1 else x
  g = h.make_graph([h.make_node('Pow', ['x', 'e'], ['y'])], 'g', [h.make_tensor_value_info('x', T.FLOAT, list(x.shape))],
                   [h.make_tensor_value_info('y', T.FLOAT, None)], [numpy_helper.from_array(np.asarray(e), 'e')])
  model = h.make_model(g, opset_imports=[h.make_opsetid('', 13)])
  general = np.unique(e).size > 1 or not (float(np.ravel(e)[0]).is_integer() or np.ravel(e)[0] == 0.5)
  assert ('tensor.pow' in fe.import_text(model, {})[0]) == general
  with np.errstate(all='ignore'): ref = np.power(x, np.asarray(e, np.float32))
  y = tgc.onnx.load(model)(x)[0]
  assert y.shape == ref.shape and y.dtype == np.float32
  np.testing.assert_allclose(y, ref, rtol=1e-5 if general else 1e-6)
  assert general or (np.signbit(y) == np.signbit(ref))[~np.isnan(ref)].all(), (y, ref)


def test_pow_of_integers_by_a_constant_exponent():
  """An integer base to a constant non-negative integer power: multiplied out in its dtype (negative bases keep odd
  powers' sign)."""
  x = np.array([-7, -2, -1, 0, 1, 3, 1290], np.int32)
  for e, ref in ((np.array(3, np.int64), x ** 3), (np.array(0, np.int64), np.ones_like(x)), (np.array([2.0], np.float32), x * x)):
    g = h.make_graph([h.make_node('Pow', ['x', 'e'], ['y'])], 'g', [h.make_tensor_value_info('x', T.INT32, [7])],
                     [h.make_tensor_value_info('y', T.INT32, None)], [numpy_helper.from_array(e, 'e')])
    y = tgc.onnx.load(h.make_model(g, opset_imports=[h.make_opsetid('', 15)]))(x)[0]
    assert y.dtype == np.int32 and (y == ref).all(), (e, y, ref)


def _conv_ref(x, w, b, stride, pads):
  """Conv (no groups, no dilation) in numpy: windows of the zero-padded input times the filters."""
  nk = w.ndim - 2
  xp = np.pad(x, ((0, 0), (0, 0)) + tuple((pads[i], pads[i + nk]) for i in range(nk)))
  win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=tuple(range(2, 2 + nk)))
  win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
  y = np.einsum('nc' + 'xy'[:nk] + 'ij'[:nk] + ',oc' + 'ij'[:nk] + '->no' + 'xy'[:nk], win, w)
  return y + b.reshape(1, -1, *(1,) * nk)


@pytest.mark.parametrize('x_shape,w_shape,stride,pads,padded', [((1, 1, 70), (30, 1, 16), (8,), (0, 0), 32),   # an STFT-like conv
                                                                ((2, 12, 1, 9), (60, 12, 1, 3), (1, 1), (0, 1, 0, 1), 64),
                                                                ((1, 6, 11), (24, 6, 3), (2,), (1, 1), None),  # 24 -> 32: a third more
                                                                ((1, 6, 11), (32, 6, 3), (1,), (1, 1), None)])
def test_conv_with_output_channels_padded_to_vectors(x_shape, w_shape, stride, pads, padded):
  """The imported text is the plain conv; lowered for the CPU, a weight whose output channels the vector (16) does not
  divide is padded with zero filters where that adds at most an eighth of the work (30 -> 32, 60 -> 64; not 24 ->
  32), the result cut back."""
  x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
  g = h.make_graph([h.make_node('Conv', ['x', 'w', 'b'], ['y'], strides=list(stride), pads=list(pads))], 'g',
                   [h.make_tensor_value_info('x', T.FLOAT, list(x.shape))], [h.make_tensor_value_info('y', T.FLOAT, None)],
                   [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b')])
  model = h.make_model(g, opset_imports=[h.make_opsetid('', 13)])
  text, weights = fe.import_text(model, {})
  assert sorted(weights) == ['b', 'w'] and 'tensor.conv' in text and 'tensor.pad' not in text
  m = parse(text)
  lower(m, DeviceSpec.of('llvm'), 'kernel')
  convs = [ln for ln in m.print().splitlines() if ln.startswith('kernel.func @r_')]  # (its signature: the buffers' shapes)
  assert len(convs) == 1 and (f'x{padded}xf32>' in convs[0]) == bool(padded), convs
  np.testing.assert_allclose(tgc.onnx.load(model)(x)[0], _conv_ref(x, w, b, stride, pads), rtol=1e-4, atol=1e-4)


def _branch_on_input():
  """y = x * 2 if rate == 16000 else x * 3: an If on a graph input's value (silero VAD's sample rate)."""
  two, three = (h.make_graph([h.make_node('Mul', ['x', c], ['o'])], n, [], [h.make_tensor_value_info('o', T.FLOAT, [2, 3])],
                             [numpy_helper.from_array(np.array(v, np.float32), c)]) for n, c, v in (('two', 'c2', 2.0), ('three', 'c3', 3.0)))
  nodes = [h.make_node('Equal', ['rate', 'k'], ['cond']), h.make_node('If', ['cond'], ['y'], then_branch=two, else_branch=three)]
  g = h.make_graph(nodes, 'branch', [h.make_tensor_value_info('x', T.FLOAT, [2, 3]), h.make_tensor_value_info('rate', T.INT64, [])],
                   [h.make_tensor_value_info('y', T.FLOAT, [2, 3])], [numpy_helper.from_array(np.array(16000, np.int64), 'k')])
  return h.make_model(g, opset_imports=[h.make_opsetid('', 17)])


@pytest.mark.parametrize('rate, factor', [(16000, 2.0), (8000, 3.0)])
def test_tool_fixes_an_input_value(tmp_path, rate, factor):
  """A branch on an input's value cannot be taken at import unless the value is given: --input-value makes the input a
  constant (no longer an argument of the function), and tgc-run then computes the branch it selects."""
  src, out = tmp_path / 'b.onnx', tmp_path / 'b.tgc'
  onnx.save(_branch_on_input(), str(src))
  rc, _, err = tool('import_onnx_main', str(src), '-o', str(out))
  assert rc == 1 and 'depends on the values of the graph inputs' in err, err
  rc, _, err = tool('import_onnx_main', str(src), '-o', str(out), '--input-value', f'rate={rate}')
  assert rc == 0, err
  assert out.read_text().startswith('func.func @main(%x: tensor<2x3xf32>)')
  x = RNG.standard_normal((2, 3)).astype(np.float32)
  np.save(tmp_path / 'x.npy', x)
  rc, _, err = tool('run_main', str(out), '--input', f'x={tmp_path / "x.npy"}', '--output', str(tmp_path / 'res'))
  assert rc == 0, err
  np.testing.assert_allclose(np.load(tmp_path / 'res' / 'result0.npy'), x * factor, rtol=1e-6)
  for bad, msg in (('rate=abc', 'is not a comma-separated list of numbers'), ('nope=1', "'nope', which is not a graph input"),
                   ('rate=1,2', '2 values for its shape []')):
    rc, _, err = tool('import_onnx_main', str(src), '--input-value', bad)
    assert rc == 1 and msg in err, err


def _attention_model(attrs, shapes, mask=None, past=None, dt=T.FLOAT, qk_output=False):
  """One ONNX Attention node (opset 23) on inputs Q, K, V (and M, the mask; PK, PV, the past), outputs Y (and
  present_key, present_value with a past; qk_matmul_output where asked)."""
  ins = [h.make_tensor_value_info(n, dt, s) for n, s in zip('QKV', shapes)]
  names = ['Q', 'K', 'V']
  if mask is not None: ins.append(h.make_tensor_value_info('M', mask[0], mask[1])); names.append('M')
  elif past is not None: names.append('')
  if past is not None:
    ins += [h.make_tensor_value_info('PK', dt, past[0]), h.make_tensor_value_info('PV', dt, past[1])]; names += ['PK', 'PV']
  outs = ['Y'] + (['present_key', 'present_value'] if past is not None or qk_output else []) + (['qk'] if qk_output else [])
  g = h.make_graph([h.make_node('Attention', names, outs, **attrs)], 'attention', ins, [h.make_tensor_value_info(o, dt, None) for o in outs])
  return h.make_model(g, opset_imports=[h.make_opsetid('', 23)])


ATTENTION_CASES = [  # (attributes, q/k/v shapes, mask (type, shape), past k/v shapes): what sdpa takes, then what it does not
  ({'is_causal': 1}, [(2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)], None, None),
  ({}, [(2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6)], (T.BOOL, (2, 1, 5, 7)), None),
  ({'scale': 0.3}, [(2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8)], (T.FLOAT, (5, 7)), None),
  ({'is_causal': 1}, [(1, 2, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)], (T.BOOL, (1, 1, 3, 7)), ((1, 2, 4, 8), (1, 2, 4, 8))),
  ({'is_causal': 1}, [(1, 2, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)], (T.FLOAT, (3, 7)), ((1, 2, 4, 8), (1, 2, 4, 8))),
  ({'q_num_heads': 4, 'kv_num_heads': 2, 'is_causal': 1}, [(2, 5, 32), (2, 5, 16), (2, 5, 16)], None, None),
  ({'softcap': 2.0}, [(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)], (T.BOOL, (2, 1, 5, 7)), None),
]


@pytest.mark.parametrize('attrs,shapes,mask,past', ATTENTION_CASES)
def test_attention_op_matches_onnxruntime(attrs, shapes, mask, past, monkeypatch):
  """ONNX's Attention against onnxruntime's, every output: through Tensor.scaled_dot_product_attention (so that a
  device with fused attention kernels runs one; its mask, grouped heads, scale, softcap and a past's causal offset);
  a row whose keys the mask hides all gives zeros, as onnxruntime's."""
  ort = pytest.importorskip('onnxruntime')
  calls = []
  real = tgc.Tensor.scaled_dot_product_attention
  monkeypatch.setattr(tgc.Tensor, 'scaled_dot_product_attention', lambda self, *a, **kw: calls.append(a) or real(self, *a, **kw))
  m = _attention_model(attrs, shapes, mask, past)
  rng = np.random.default_rng(16)
  feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip('QKV', shapes)}
  if mask is not None:
    feeds['M'] = rng.random(mask[1]) > 0.3 if mask[0] == T.BOOL else rng.standard_normal(mask[1]).astype(np.float32)
    if mask[0] == T.BOOL: feeds['M'][..., 1, :] = False
  if past is not None: feeds['PK'], feeds['PV'] = (rng.standard_normal(s).astype(np.float32) for s in past)
  want = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']).run(None, feeds)
  got = tgc.onnx.load(m)(**feeds)
  got = got if isinstance(got, (list, tuple)) else [got]
  assert len(got) == len(want)
  for g, w in zip(got, want): np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)
  assert calls
