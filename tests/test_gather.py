"""Gathers (a load whose index is another tensor's value): Tensor.gather, integer-tensor __getitem__, nn.Embedding and
ONNX's Gather, GatherElements and GatherND, against numpy (and onnxruntime) on the CPU (LLVM), C and INTERP devices
(TGC_TEST_DEVICE=OPENCL runs the device-default ones on OpenCL). Negative indices wrap; an index still outside its
axis reads the nearest end (clamped), and the kernels' accesses are proven inside their buffers (no guard)."""
import re
import numpy as np
import pytest
import tgc
from tgc import Tensor, nn
from tgc.compiler import lower

DEVS = ['CPU', 'C', 'INTERP']
rng = np.random.default_rng(0)


@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('axis', [0, 1, 2, -1])
def test_gather_matches_numpy(dev, axis):
  x = rng.standard_normal((4, 5, 6)).astype(np.float32)
  shape = [3, 5, 2]; shape[axis] = 7
  i = rng.integers(-x.shape[axis], x.shape[axis], shape)
  got = Tensor(x, device=dev).gather(axis, Tensor(i, device=dev)).numpy()
  np.testing.assert_array_equal(got, np.take_along_axis(x[:3, :, :2] if axis in (1,) else x[:3, :5, :] if axis in (2, -1) else x[:, :5, :2], i % x.shape[axis], axis))


@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('case', ['rows', 'rows2d', 'last', 'two', 'split', 'neg', 'list'])
def test_getitem_integer_tensor_matches_numpy(dev, case):
  x = rng.standard_normal((6, 5, 4)).astype(np.float32)
  a, b = rng.integers(-6, 6, (2, 3)), rng.integers(-4, 4, (3,))
  idx = {'rows': lambda T: T(a[0]), 'rows2d': lambda T: T(a), 'last': lambda T: (Ellipsis, T(b)), 'two': lambda T: (T(a), T(a % 5)),
         'split': lambda T: (T(a), slice(None), T(b)), 'neg': lambda T: (slice(1, None), T(-1 - (a % 5))), 'list': lambda T: [5, -6, 0]}[case]
  want = x[idx(np.array) if case != 'list' else [5, -6, 0]]
  got = Tensor(x, device=dev)[idx(lambda v: Tensor(v, device=dev)) if case != 'list' else [5, -6, 0]].numpy()
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('dev', DEVS)
def test_out_of_range_indices_are_clamped(dev):
  x = np.arange(10, dtype=np.float32).reshape(5, 2)
  got = Tensor(x, device=dev)[Tensor(np.array([7, -9, 2, 2**40]), device=dev)].numpy()  # (int64: past 2**31 too)
  np.testing.assert_array_equal(got, x[[4, 0, 2, 4]])
  i = np.array([[5, -100], [1, 3]])
  np.testing.assert_array_equal(Tensor(x, device=dev).gather(1, Tensor(i, device=dev)).numpy(), np.take_along_axis(x[:2], np.clip(i, 0, 1), 1))


@pytest.mark.parametrize('dev', DEVS)
def test_embedding_is_a_gather_with_a_gradient(dev):
  e = nn.Embedding(50, 8)
  w = rng.standard_normal((50, 8)).astype(np.float32)
  e.weight = Tensor(w, device=dev, requires_grad=True)
  ids = rng.integers(0, 50, (2, 7))
  y = e(Tensor(ids, device=dev))
  ir = y.to_ir('kernel')
  assert 'kernel.reduce' not in ir and ir.count('kernel.func @') == 1, ir  # no one-hot matmul
  g = rng.standard_normal((2, 7, 8)).astype(np.float32)
  (y * Tensor(g, device=dev)).sum().backward()
  np.testing.assert_array_equal(y.numpy(), w[ids])
  ref = np.zeros_like(w); np.add.at(ref, ids, g)
  np.testing.assert_allclose(e.weight.grad.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_gather_kernels_prove_their_accesses():
  """The clamp makes every index value's range known: uop bounds proves each load and store inside its buffer, so the
  emitters add no guard; a row of an embedding is one vector load."""
  from tgc.dialects.uop_bounds import unproven_accesses
  w, ids = Tensor(rng.standard_normal((100, 16)).astype(np.float32)), Tensor(rng.integers(0, 100, (8,)))
  m = tgc.ir.parse((w[ids] * 2).to_ir('kernel'))
  lower(m, 'llvm')
  fns = m.functions('uop.func')
  assert fns and all(not unproven_accesses(f) for f in fns)
  text = str(m)
  assert re.search(r'uop\.load %\d+\[%\d+\] : vec<\d+xf32>', text) and 'uop.min' in text and 'uop.max' in text, text


# ---- ONNX's gathers, against onnxruntime
onnx = pytest.importorskip('onnx')

def _model(op, x, idx, **attrs):
  from onnx import helper, TensorProto, numpy_helper
  node = helper.make_node(op, ['x', 'i'], ['y'], **attrs)
  g = helper.make_graph([node], 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, x.shape), helper.make_tensor_value_info('i', TensorProto.INT64, idx.shape)],
                        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)])
  return helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=10)  # (an IR version older onnxruntimes read too)

@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('op,xs,idx,attrs', [
  ('Gather', (1000, 32), lambda r: r.integers(-1000, 1000, (2, 16)), {}),
  ('Gather', (3, 7, 4), lambda r: r.integers(-7, 7, (5,)), {'axis': 1}),
  ('Gather', (3, 7, 4), lambda r: np.array(-2), {'axis': 2}),
  ('GatherElements', (4, 6), lambda r: r.integers(-6, 6, (4, 3)), {'axis': 1}),
  ('GatherElements', (4, 6), lambda r: r.integers(-4, 4, (2, 6)), {'axis': 0}),
  ('GatherND', (4, 5, 3), lambda r: np.stack([r.integers(-4, 4, (2, 6)), r.integers(-5, 5, (2, 6))], -1), {}),
  ('GatherND', (2, 5, 3), lambda r: r.integers(-5, 5, (2, 4, 1)), {'batch_dims': 1}),
])
def test_onnx_gathers_match_onnxruntime(dev, op, xs, idx, attrs):
  ort = pytest.importorskip('onnxruntime')
  r = np.random.default_rng(1)
  x, i = r.standard_normal(xs).astype(np.float32), np.asarray(idx(r), np.int64)
  m = _model(op, x, i, **attrs)
  want = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']).run(None, {'x': x, 'i': i})[0]
  model = tgc.onnx.load(m, device=dev)
  np.testing.assert_array_equal(model(x=x, i=i)[0], want)


def test_cpu_tiles_of_gathers_stay_small():
  """Token and position embeddings summed and layer-normed (a transformer's first kernel): the gathered tables' loads
  move along the rows with the token ids (their views alone broadcast there), and a CPU tile takes at most
  MAX_GATHERED_LANES of them (each a scalar load: 512 made 7500 lines of LLVM IR); the values against numpy."""
  from tgc.tensor import _build_module
  from tgc.lowering import lower as lower_to
  from tgc.target import DeviceSpec
  from tgc.passes.schedule import Schedule, MAX_GATHERED_LANES
  ids = rng.integers(0, 64, (4, 16)).astype(np.int32)
  tok, pos = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
  y = (nn.Embedding(64, 32), nn.Embedding(16, 32))
  y[0].weight, y[1].weight = Tensor(tok), Tensor(pos)
  out = (y[0](Tensor(ids)) + y[1](Tensor.arange(16, dtype=tgc.dtypes.int32).reshape(1, 16))).layernorm()
  spec = DeviceSpec.of('llvm')
  m, _ = _build_module([out.node], 'main')
  lower_to(m, spec, 'opt')
  ks = [Schedule(k, None, spec.target) for k in m.functions('kernel.func')]
  g = [k for k in ks if any(op.name == 'kernel.load' and op.gather is not None for op in k.views)]
  assert g
  for k in g:  # (at the kernel's own shape, 4 x 16 x 32: the token table's rows follow both axes of the ids)
    plain = Schedule(k.k, (), spec.target)
    assert (None, None, 1) in [plain.strides(op) for op in plain.views if op.name == 'kernel.load' and op.gather is not None]
  assert all(0 < k.gathered_lanes() <= MAX_GATHERED_LANES for k in g), [(k.opts, k.gathered_lanes()) for k in g]
  x = tok[ids] + pos[None]
  want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
