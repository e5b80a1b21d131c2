"""tgc.nn layers, nn.optim and nn.state against torch (CPU) and the safetensors format; Tensor.train and dropout."""
from __future__ import annotations
import json, os, struct
import numpy as np
import pytest
import torch
import tgc
from tgc import Tensor, nn, dtypes
from tgc.errors import TgcError
from tgc.nn import optim
from tgc.nn.state import get_state_dict, get_parameters, load_state_dict, safe_save, safe_load, safe_load_metadata

DEV = os.environ.get('TGC_TEST_DEVICE', 'CPU')


@pytest.fixture(autouse=True)
def _on_dev():
  """Layers and optimizer state are made on the default device: DEV here."""
  old = tgc.Device._default
  tgc.Device.DEFAULT = DEV
  yield
  tgc.Device._default = old
RNG = np.random.default_rng(0)

def tg(a): return Tensor(a, device=DEV)
def put(layer, tlayer):
  """Copy the tgc layer's initial parameters into the torch layer."""
  with torch.no_grad():
    for k, v in get_state_dict(layer).items():
      if hasattr(tlayer, k) and v.dtype.is_float: getattr(tlayer, k).copy_(torch.tensor(v.numpy()))


LAYERS = {
  'linear': (lambda: nn.Linear(6, 4), lambda: torch.nn.Linear(6, 4), (3, 6)),
  'conv2d': (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 7, 7)),
  'conv_transpose2d': (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                       lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), (2, 4, 5, 5)),
  'layernorm': (lambda: nn.LayerNorm((3, 5)), lambda: torch.nn.LayerNorm((3, 5)), (2, 3, 5)),
  'groupnorm': (lambda: nn.GroupNorm(2, 6), lambda: torch.nn.GroupNorm(2, 6), (3, 6, 4, 4)),
}

@pytest.mark.parametrize('name', list(LAYERS))
def test_layer_forward_and_backward(name):
  mk, tmk, shape = LAYERS[name]
  layer, tlayer = mk(), tmk()
  for p in get_parameters(layer): p.assign(tg(RNG.standard_normal(p.shape).astype(np.float32))).realize().requires_grad = True  # not the init's ones/zeros
  put(layer, tlayer)
  x = RNG.standard_normal(shape).astype(np.float32)
  xt, xp = Tensor(x, device=DEV, requires_grad=True), torch.tensor(x, requires_grad=True)
  out, tout = layer(xt), tlayer(xp)
  (out * out).sum().backward(); (tout * tout).sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(xt.grad.numpy(), xp.grad.numpy(), rtol=1e-3, atol=1e-4)
  for k, p in get_state_dict(layer).items():
    np.testing.assert_allclose(p.grad.numpy(), getattr(tlayer, k).grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=k)


def test_linear_on_a_batch_is_one_matmul_over_its_rows():
  """Linear of a (batch, tokens, features) input multiplies its rows by the weight in one 2-d matmul, as torch's does
  (a batched matmul broadcast the weight over the batch, and a kernel copied it once per batch element), and its
  values and gradients are torch's."""
  rng = np.random.default_rng(0)
  x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 1, 8), (6, 8), (6,)))
  l = nn.Linear(8, 6)
  load_state_dict(l, {'weight': Tensor(w), 'bias': Tensor(b)})
  xt = Tensor(x).requires_grad_(); l.weight.requires_grad_()
  y = l(xt)
  mm = [ln for ln in y.to_ir().splitlines() if 'tensor.matmul' in ln]
  assert len(mm) == 1 and 'tensor<4x8xf32>, tensor<8x6xf32>' in mm[0], mm
  tx, tl = torch.tensor(x, requires_grad=True), torch.nn.Linear(8, 6)
  with torch.no_grad(): tl.weight.copy_(torch.tensor(w)); tl.bias.copy_(torch.tensor(b))
  ty = tl(tx)
  (y * y).sum().backward(); (ty * ty).sum().backward()
  np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(l.weight.grad.numpy(), tl.weight.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_init_bounds_and_shapes():
  c = nn.Conv2d(3, 8, (3, 5))
  assert c.weight.shape == (8, 3, 3, 5) and c.bias.shape == (8,)
  assert np.abs(c.weight.numpy()).max() <= 1 / np.sqrt(45)
  assert nn.Linear(5, 2, bias=False).bias is None and nn.ConvTranspose2d(4, 6, 3).weight.shape == (4, 6, 3, 3)
  assert nn.BatchNorm2d is nn.BatchNorm


def test_batchnorm_train_and_eval():
  bn, tbn = nn.BatchNorm(3), torch.nn.BatchNorm2d(3)
  w, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
  bn.weight.assign(tg(w)).realize(); bn.bias.assign(tg(b)).realize(); put(bn, tbn)
  for _ in range(2):
    x = (RNG.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
    with Tensor.train():
      assert Tensor.training
      y = bn(tg(x))
    assert not Tensor.training
    ty = tbn(torch.tensor(x))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    Tensor.realize(bn.running_mean, bn.running_var)
  np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5)
  assert bn.num_batches_tracked.item() == 2
  tbn.eval()
  x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
  np.testing.assert_allclose(bn(tg(x)).numpy(), tbn(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_embedding():
  e = nn.Embedding(7, 3)
  idx = np.array([[0, 6, 2], [2, 2, 5]], np.int32)
  e.weight.requires_grad = True
  out = e(tg(idx))
  out.square().sum().backward()  # (before out is realized: a realized tensor is a leaf, gradients stop there)
  np.testing.assert_array_equal(out.numpy(), e.weight.numpy()[idx])
  want = np.zeros((7, 3), np.float32)
  np.add.at(want, idx.reshape(-1), 2 * e.weight.numpy()[idx].reshape(-1, 3))
  np.testing.assert_allclose(e.weight.grad.numpy(), want, rtol=1e-6)
  with pytest.raises(TgcError): e(tg(np.ones(3, np.float32)))


def test_dropout():
  x = tg(np.ones((200, 50), np.float32))
  assert x.dropout(0.3) is x  # not training
  with Tensor.train():
    y = x.dropout(0.3).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
    assert 0.25 < (y == 0).mean() < 0.35
    assert (x.dropout(1.0).numpy() == 0).all()
  @Tensor.train(False)
  def f(): return Tensor.training
  with Tensor.train(): assert f() is False and Tensor.training


OPTS = {
  'sgd': (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
  'sgd-momentum-wd': (lambda p: optim.SGD(p, lr=0.1, momentum=0.8, weight_decay=0.01), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8, weight_decay=0.01)),
  'sgd-nesterov': (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
  'adam': (lambda p: optim.Adam(p, lr=0.01, b1=0.8, b2=0.99), lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99))),
  'adamw': (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
}

@pytest.mark.parametrize('name', list(OPTS))
def test_optimizer_steps_match_torch(name):
  mk, tmk = OPTS[name]
  w0 = RNG.standard_normal((3, 4)).astype(np.float32)
  w, tw = tg(w0), torch.tensor(w0, requires_grad=True)
  opt, topt = mk([w]), tmk([tw])
  assert w.requires_grad  # an optimizer's parameters train
  for i in range(5):
    opt.zero_grad(); topt.zero_grad()
    (w.sin() * (i + 1)).sum().backward(); (tw.sin() * (i + 1)).sum().backward()
    opt.step(); topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {i}")


def test_lamb_trust_ratio():
  w0 = RNG.standard_normal(5).astype(np.float32)
  w = tg(w0)
  opt = optim.LAMB([w], lr=0.1)
  (w * w).sum().backward(); opt.step()
  g = 2 * w0.astype(np.float64)
  up = (0.1 * g / 0.1) / (np.sqrt(0.001 * g * g / 0.001) + 1e-6)  # m_hat / (sqrt(v_hat) + eps) after one step
  np.testing.assert_allclose(w.numpy(), w0 - 0.1 * np.linalg.norm(w0) / np.linalg.norm(up) * up, rtol=1e-5)
  with pytest.raises(TgcError, match='backward'): opt.zero_grad() or opt.step()


def test_state_dict_and_load():
  class Net:
    def __init__(self): self.convs, self.head = [nn.Conv2d(1, 2, 3), nn.Conv2d(2, 2, 1, bias=False)], {'out': nn.Linear(2, 3)}
  net = Net()
  sd = get_state_dict(net)
  assert list(sd) == ['convs.0.weight', 'convs.0.bias', 'convs.1.weight', 'head.out.weight', 'head.out.bias']
  assert len(get_parameters(net)) == 5
  new = {k: tg(RNG.standard_normal(v.shape).astype(np.float32)) for k, v in sd.items()}
  load_state_dict(net, new)
  for k, v in get_state_dict(net).items(): np.testing.assert_array_equal(v.numpy(), new[k].numpy())
  with pytest.raises(TgcError, match='head.out.bias'): load_state_dict(net, {k: v for k, v in new.items() if k != 'head.out.bias'})
  with pytest.raises(TgcError, match='shape'): load_state_dict(net, {**new, 'convs.0.bias': tg(np.zeros(3, np.float32))})


def test_safetensors_roundtrip_and_format(tmp_path):
  fn = str(tmp_path / 'm.safetensors')
  ts = {'f32': tg(RNG.standard_normal((2, 3)).astype(np.float32)), 'f16': tg(np.array([1.5, -2.25], np.float16)),
        'bf16': Tensor([1.0, -3.5, 0.15625], dtype=dtypes.bfloat16, device=DEV), 'i64': tg(np.arange(5, dtype=np.int64) - 2),
        'u8': tg(np.array([0, 255], np.uint8)), 'bool': tg(np.array([True, False])), 'f64': tg(np.array([[np.pi]]))}
  safe_save(ts, fn, metadata={'format': 'tgc'})
  raw = open(fn, 'rb').read()
  n = struct.unpack('<Q', raw[:8])[0]
  header = json.loads(raw[8:8 + n])
  assert (8 + n) % 8 == 0 and header['__metadata__'] == {'format': 'tgc'} and safe_load_metadata(fn) == {'format': 'tgc'}
  assert header['f32'] == {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 24]}
  lo, hi = header['i64']['data_offsets']
  np.testing.assert_array_equal(np.frombuffer(raw[8 + n + lo:8 + n + hi], '<i8'), np.arange(5) - 2)
  back = safe_load(fn, device=DEV)
  assert list(back) == list(ts)
  for k, t in ts.items():
    assert back[k].dtype == t.dtype and back[k].shape == t.shape
    np.testing.assert_array_equal(back[k].numpy(), t.numpy())


def header(h: bytes) -> bytes: return struct.pack('<Q', len(h)) + h

@pytest.mark.parametrize('data,msg', [(b'\x01', 'too short'), (struct.pack('<Q', 99) + b'{}', 'past the end'),
                                      (header(b'{{{'), 'not JSON'), (header(b'[1]'), 'not a JSON object'),
                                      (header(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}') + b'\0' * 8, 'does not fit'),
                                      (header(b'{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}') + b'\0' * 4, 'bad entry')])
def test_safetensors_bad_files(tmp_path, data, msg):
  fn = str(tmp_path / 'bad.safetensors')
  open(fn, 'wb').write(data)
  with pytest.raises(TgcError, match=msg): safe_load(fn)


from test_api_docs import doc_examples, run_example
AUTOGRAD_DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs', 'autograd.md')

@pytest.mark.parametrize('line,src,want', doc_examples(AUTOGRAD_DOC), ids=lambda v: str(v) if isinstance(v, int) else '')
def test_autograd_doc_examples(line, src, want):
  """docs/autograd.md's python blocks print exactly their text blocks."""
  assert want is not None and run_example(src, f"autograd.md:{line}") == want


def test_backward_of_a_realized_loss_is_a_gradient_error():
  """A loss read before backward() (realized: its graph replaced by a buffer) reaches no tensor it was computed
  from: a GradientError that says so, not .grad left None; a tensor made from data still gets its own gradient."""
  from tgc.autograd import GradientError
  x = Tensor(np.ones(3, np.float32), requires_grad=True)
  loss = (x * 2).sum()
  assert loss.item() == 6.0
  with pytest.raises(GradientError, match='call backward\\(\\) before reading its value'): loss.backward()
  assert x.grad is None
  loss = (x * 2).sum()
  loss.backward()
  np.testing.assert_allclose(x.grad.numpy(), [2, 2, 2])
  t = Tensor([3.0])
  t.backward()
  np.testing.assert_allclose(t.grad.numpy(), [1.0])
