"""tensor.conv: the front end builds one op whatever the device, tensor-decompose lays it out for the device's spec.

The kernels of x.conv2d(w) lowered for a device are those of that device's layout written with Tensor methods (the
reference below: channels last on CPUs and on tensor cores where the dtype and shapes fit, the padded input copied
first, the weight copied with its output channels innermost); its gradients (autodiff's plain form) match torch's."""
import numpy as np
import math
import pytest
import torch
import tgc
from tgc import Tensor
from tgc.tensor import _build_module
from tgc.lowering import lower
from tgc.target import DeviceSpec

SPECS = {'cuda': DeviceSpec.of('cuda'), 'cuda-nowg': DeviceSpec.of('cuda', warpgroup=False), 'llvm': DeviceSpec.of('llvm'),
         'c': DeviceSpec.of('c'), 'opencl': DeviceSpec.of('opencl')}


def layout_reference(x: Tensor, w: Tensor, spec: DeviceSpec, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
  """The conv in the device's layout, in Tensor methods (written out independently of tensor-decompose)."""
  (bs, _), (cout, cin), HW = x.shape[:2], w.shape[:2], w.shape[2:]
  t, tc = spec.target, spec.target.tensor_cores
  cl = t.is_cpu or (tc is not None and any(x.dtype.name == i for i, _ in tc.dtypes) and bs % tc.dims[0] == 0 and cin % tc.dims[2] == 0 and groups == 1)
  pads = Tensor._pads2d(padding, len(HW))
  n = x.ndim
  strides = stride if isinstance(stride, tuple) else (stride,) * len(HW)
  if t.pack_matmul and x.dtype.is_float and x.dtype.itemsize == 4 and groups == 1 and set(HW) == {1} and set(strides) == {1} and not any(pads):
    # CPUs: a pointwise conv is a matmul over the pixels (W @ x where half a vector divides them, else x^T @ W^T)
    P = math.prod(x.shape[2:])
    xm = x.reshape(bs, cin, P)
    y = w.reshape(cout, cin) @ xm if P % 8 == 0 else (xm.permute(0, 2, 1) @ w.reshape(cout, cin).T).permute(0, 2, 1)
    return y.reshape(bs, cout, *x.shape[2:])
  if cl and not t.is_cpu:
    xl = x.permute(0, *range(2, n), 1).contiguous()
    xp = xl._pad2d([0, 0, *pads]) if any(pads) else xl
    if any(pads) and not spec.has_warpgroup: xp = xp.contiguous()
    x = xp.permute(0, n - 1, *range(1, n - 1))
  else:
    x = x._pad2d(pads)
    if any(pads): x = x.contiguous()
  x = x._pool(HW, stride, dilation)
  rcout, oyx = cout // groups, x.shape[2:-len(HW)]
  nd, nk = len(oyx), len(HW)
  x = x.reshape(bs, groups, cin, *oyx, 1, *HW).expand(bs, groups, cin, *oyx, rcout, *HW)
  out = [0, 1, *[3 + i for i in range(nd)], 3 + nd] if cl else [0, 1, 3 + nd, *[3 + i for i in range(nd)]]
  x = x.permute(*out, 2, *[4 + nd + i for i in range(nk)])
  if rcout % 16 == 0: w = w.permute(*range(1, n), 0).contiguous().permute(n - 1, *range(0, n - 1))
  w = w.reshape((1, groups, *[1] * nd, rcout, cin, *HW) if cl else (1, groups, rcout, *[1] * nd, cin, *HW))
  dt = x.dtype
  if dt.is_float and dt.itemsize < 4: x, w = x.cast('float32'), w.cast('float32')  # (products widened, summed, cast back)
  ret = (x * w).sum([-1 - i for i in range(1 + nk)]).cast(dt)
  if cl: ret = ret.contiguous().permute(0, 1, 2 + nd, *[2 + i for i in range(nd)])
  return ret.reshape(bs, cout, *oyx)


# (x shape, w shape, conv2d's keywords, dtype): batch 32 and 64 channels (tensor cores apply to f16), and odd ones
CONVS = [((32, 64, 12, 12), (64, 64 // g, 3, 3), dict(stride=s, padding=p, groups=g), dt)
         for dt in ('float32', 'float16') for g in (1, 2) for s in (1, 2) for p in (0, 1)] + [
  ((2, 3, 9, 11), (5, 3, 3, 2), dict(stride=(2, 1), dilation=2, padding=(1, 2, 0, 1)), 'float32'),
  ((3, 4, 7, 5), (6, 4, 2, 3), dict(padding=(1, 2)), 'float16'),
  ((2, 4, 11), (6, 2, 3), dict(groups=2, padding=1), 'float32'),
  ((1, 2, 5, 6, 4), (4, 2, 2, 3, 2), dict(stride=(1, 2, 1)), 'float32'),
  ((4, 8, 10, 10), (8, 1, 3, 3), dict(groups=8, stride=2, padding=1), 'float32'),
  ((2, 8, 6, 6), (64, 4, 3, 3), dict(padding=1, groups=2), 'float16'),
  ((4, 16, 5, 5), (16, 16, 1, 1), {}, 'float32'),
  ((2, 3, 5, 5), (4, 3, 2, 2), dict(padding=1), 'int32'),
]


def _kernels(y: Tensor, spec: DeviceSpec) -> list[str]:
  m, _ = _build_module([y.node], 'f')
  lower(m, spec, 'opt')
  return [str(k) for k in m.functions('kernel.func')]


@pytest.mark.parametrize('spec', list(SPECS))
def test_kernels_are_the_devices_layout(spec):
  for xs, ws, kw, dt in CONVS:
    x, w = Tensor.empty(*xs, dtype=dt), Tensor.empty(*ws, dtype=dt)
    got, want = _kernels(x.conv2d(w, **kw), SPECS[spec]), _kernels(layout_reference(x, w, SPECS[spec], **kw), SPECS[spec])
    assert got == want, (spec, xs, ws, kw, dt)


def test_the_tensor_level_is_the_same_on_every_device_and_opens_none(monkeypatch):
  def no_device(*a, **k): raise AssertionError("building a graph opened a device")
  monkeypatch.setattr(tgc.runtime, 'get_device', no_device)
  texts = set()
  for dev in ('CPU', 'CUDA', 'OPENCL', 'C'):
    x, w = Tensor.empty(32, 64, 12, 12, dtype='float16', device=dev), Tensor.empty(64, 64, 3, 3, dtype='float16', device=dev)
    m, _ = _build_module([x.conv2d(w, padding=1).node], 'f')
    texts.add(str(m))
  (text,) = texts
  assert 'tensor.conv %0, %1 {dilation = [1, 1], groups = 1, pads = [1, 1, 1, 1], stride = [1, 1]}' in text and 'tensor.pad' not in text


GRAD_CASES = [((2, 4, 7, 6), (6, 2, 3, 2), dict(groups=2, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2))),
              ((2, 3, 9), (4, 3, 3), dict(padding=2, dilation=2, stride=2)),
              ((1, 2, 4, 5, 3), (3, 2, 2, 2, 2), dict(padding=1, stride=(1, 2, 1))),
              ((2, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, padding=1))]

@pytest.mark.parametrize('case', GRAD_CASES)
@pytest.mark.parametrize('device', ['CPU', 'OPENCL'])
def test_gradients_match_torch(case, device):
  xs, ws, kw = case
  rng = np.random.default_rng(0)
  a, b, c = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32), rng.standard_normal(ws[0]).astype(np.float32)
  x, w, bias = (Tensor(v, device=device, requires_grad=True) for v in (a, b, c))
  y = x.conv2d(w, bias, **kw)
  (y * y).sum().backward()
  tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (a, b, c))
  p = kw.get('padding', 0)
  tp = torch.nn.functional.pad(tx, p) if isinstance(p, tuple) and len(p) == 2 * (len(xs) - 2) else tx
  conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[len(xs)]
  ty = conv(tp, tw, tb, stride=kw.get('stride', 1), padding=0 if tp is not tx else p, dilation=kw.get('dilation', 1), groups=kw.get('groups', 1))
  (ty * ty).sum().backward()
  np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
  for g, t in ((x.grad, tx), (w.grad, tw), (bias.grad, tb)): np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_a_conv_of_a_tensor_with_itself_has_both_gradients():
  a = np.random.default_rng(1).standard_normal((2, 2, 4, 4)).astype(np.float32)
  x = Tensor(a, requires_grad=True)
  x.conv2d(x).sum().backward()
  tx = torch.tensor(a, requires_grad=True)
  torch.nn.functional.conv2d(tx, tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_bad_convs_are_clear_errors():
  x, w = Tensor.empty(2, 4, 5, 5), Tensor.empty(3, 4, 3, 3)
  with pytest.raises(tgc.ShapeError, match='does not fit weight'): x.conv2d(Tensor.empty(3, 3, 3, 3))
  with pytest.raises(tgc.ShapeError, match='larger than the input'): x.conv2d(w, dilation=3)
  with pytest.raises(tgc.ShapeError, match='removes more than the input'): x.conv2d(w, padding=-3)
  with pytest.raises(tgc.TgcError, match='groups must be a positive integer'): x.conv2d(w, groups=0)
  with pytest.raises(tgc.DTypeError, match='packed integer'): Tensor.empty(2, 4, 5, 5, dtype='int4').conv2d(Tensor.empty(3, 4, 3, 3, dtype='int4'))


CONV_TEXT = """func.func @f(%x: tensor<2x4x7x9xf32>, %w: tensor<6x2x3x2xf32>) -> tensor<2x6x3x9xf32> {
  %0 = tensor.conv %x, %w {stride = [2, 1], dilation = [1, 2], pads = [1, 1, 1, 0], groups = 2} : tensor<2x4x7x9xf32>, tensor<6x2x3x2xf32> -> tensor<2x6x3x9xf32>
  func.return %0 : tensor<2x6x3x9xf32>
}
"""

@pytest.mark.parametrize('pipeline', ['device', 'kernelize'])
def test_tensor_conv_from_text_runs(pipeline):
  # the device's layout (tensor-decompose for llvm), and the plain form where kernelize meets the op undecomposed
  import tgc.ir as I
  from tgc.compiler import compile_module
  from tgc.passes.manager import PassManager, parse_pipeline
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((2, 4, 7, 9)).astype(np.float32), rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
  m = I.parse(CONV_TEXT)
  if pipeline == 'kernelize':
    PassManager(parse_pipeline('kernelize')).run(m)
    assert not any(op.name == 'tensor.conv' for f in m.functions('func.func') for op in f.body.ops)
  (out,) = compile_module(m, 'CPU')(a, b)
  want = torch.nn.functional.conv2d(torch.nn.functional.pad(torch.tensor(a), (1, 1, 1, 0)), torch.tensor(b), stride=(2, 1), dilation=(1, 2), groups=2)
  np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-4)


def test_a_cpu_weight_gradient_takes_its_lanes_along_the_pixels():
  """On a CPU, a conv's weight gradient (a long sum over images and pixels; its outputs' channel axes read strided:
  vector lanes there would be gathers) gets its vector lanes along the pixels' rows, which both factors read
  contiguously, and matches torch's gradient."""
  rng = np.random.default_rng(4)
  x, w, g = rng.standard_normal((8, 16, 32, 32)).astype(np.float32), rng.standard_normal((16, 16, 3, 3)).astype(np.float32), rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
  xt, wt = Tensor(x), Tensor(w)
  gw = (xt.conv2d(wt, padding=1) * Tensor(g)).sum().gradient(wt)[0]
  m, _ = _build_module([gw.node], 'main')
  lower(m, DeviceSpec.of('llvm', cpu='avx512'), 'opt')
  dw = [k for k in m.functions('kernel.func') if math.prod(k.body.args[0].type.shape) == 16 * 16 * 9]
  assert dw and [(o.name, o.fields['amt']) for o in dw[0].attrs['opts']] == [('unroll', 16)], [k.attrs.get('opts') for k in dw]
  tw = torch.tensor(w, requires_grad=True)
  (torch.nn.functional.conv2d(torch.tensor(x), tw, padding=1) * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
