"""Training end to end: an MLP and a small CNN (tgc.nn layers) trained 100 steps on synthetic data with SGD
(momentum) and Adam give the losses torch gives from the same initial weights, step by step within 1e-4
relative; the step is a Tensor.jit that runs the Python function once and replays forward, backward and the
optimizer's updates after. On $TGC_TEST_DEVICE (default CPU)."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tgc import Tensor, nn
from tgc.nn import optim
from tgc.nn.state import get_parameters, get_state_dict, load_state_dict

from test_nn import DEV, _on_dev  # noqa: F401  (the device, and the fixture that makes it the default)
STEPS = 100


class MLP:
  def __init__(self): self.l1, self.l2, self.l3 = nn.Linear(20, 32), nn.Linear(32, 32), nn.Linear(32, 5)
  def __call__(self, x): return self.l3(self.l2(self.l1(x).relu()).relu())

class CNN:
  def __init__(self): self.c1, self.c2, self.l1 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3), nn.Linear(32, 5)
  def __call__(self, x):
    x = self.c1(x).relu().max_pool2d(2)
    return self.l1(self.c2(x).relu().max_pool2d(2).flatten(1))

def torch_model(kind):
  F = torch.nn
  if kind == 'mlp': return F.Sequential(F.Linear(20, 32), F.ReLU(), F.Linear(32, 32), F.ReLU(), F.Linear(32, 5))
  return F.Sequential(F.Conv2d(1, 4, 3, padding=1), F.ReLU(), F.MaxPool2d(2), F.Conv2d(4, 8, 3), F.ReLU(), F.MaxPool2d(2), F.Flatten(), F.Linear(32, 5))

def data(kind, rng):
  x = rng.standard_normal((32, 20) if kind == 'mlp' else (16, 1, 12, 12)).astype(np.float32)
  y = rng.integers(0, 5, len(x))
  return x, y


def make(kind, opt_name, seed=0):
  """The tgc model (on DEV) and the torch model with the same initial weights, their optimizers, the data."""
  rng = np.random.default_rng(seed)
  torch.manual_seed(seed)
  tm = torch_model(kind)
  init = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
  model = MLP() if kind == 'mlp' else CNN()
  names = list(get_state_dict(model))
  load_state_dict(model, {n: Tensor(v, device=DEV) for n, v in zip(names, init.values())})
  for n, v in zip(names, init.values()): np.testing.assert_array_equal(get_state_dict(model)[n].numpy(), v)
  if opt_name == 'sgd': opt, topt = optim.SGD(get_parameters(model), lr=0.01, momentum=0.9), torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
  else:
    # Adam moves every weight by about lr whatever the size of its gradient, so where the two implementations'
    # float32 rounding (about 1e-6 after 80 steps) flips the winner of a max-pool window whose two largest
    # values are within it, the runs part by 1e-4 within a few steps. The rates here keep this data clear of it.
    lr = 0.001 if kind == 'mlp' else 0.002
    opt, topt = optim.Adam(get_parameters(model), lr=lr), torch.optim.Adam(tm.parameters(), lr=lr)
  return model, tm, opt, topt, data(kind, rng)


def losses_torch(tm, topt, x, y):
  out, xt, yt = [], torch.tensor(x), torch.tensor(y)
  for _ in range(STEPS):
    topt.zero_grad()
    loss = torch.nn.functional.cross_entropy(tm(xt), yt)
    loss.backward(); topt.step()
    out.append(loss.item())
  return np.array(out)


@pytest.mark.parametrize('kind,opt_name', [('mlp', 'sgd'), ('mlp', 'adam'), ('cnn', 'sgd'), ('cnn', 'adam')])
def test_training_matches_torch(kind, opt_name):
  model, tm, opt, topt, (x, y) = make(kind, opt_name)
  calls = []
  @Tensor.jit
  def step(x, onehot):
    calls.append(1)
    opt.zero_grad()
    loss = -(model(x).log_softmax(1) * onehot).sum(1).mean()
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss
  xt, oh = Tensor(x, device=DEV), Tensor(np.eye(5, dtype=np.float32)[y], device=DEV)
  got = np.array([step(xt, oh).item() for _ in range(STEPS)])
  want = losses_torch(tm, topt, x, y)
  assert len(calls) == 1  # the Python step ran once; 99 replays
  assert want[-1] < 0.8 * want[0]  # it trains
  print(f"{kind} {opt_name}: loss {want[0]:.4f} -> {want[-1]:.4f}, max relative difference {np.max(np.abs(got - want) / want):.2e}")
  np.testing.assert_allclose(got, want, rtol=1e-4)
  # (Adam moves a weight whose gradient is near 0 by about lr whatever its sign: weights agree less than losses)
  for p, tp in zip(get_parameters(model), tm.parameters()): np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-3, atol=1e-3)


def test_training_without_jit_and_jit_agree():
  """Ten eager steps (backward, step) and ten jitted ones from the same start end at the same weights."""
  finals = []
  for jit in (False, True):
    model, _, opt, _, (x, y) = make('mlp', 'adam')
    def step(x, onehot):
      opt.zero_grad()
      loss = -(model(x).log_softmax(1) * onehot).sum(1).mean()
      loss.backward()
      opt.step()
      return loss.realize()
    f = Tensor.jit(step) if jit else step
    xt, oh = Tensor(x, device=DEV), Tensor(np.eye(5, dtype=np.float32)[y], device=DEV)
    finals.append([f(xt, oh).item() for _ in range(10)] + [p.numpy() for p in get_parameters(model)])
  for a, b in zip(*finals): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_batchnorm_cnn_compiles_once():
  """Eager steps of a CNN with BatchNorm2d (its weights and running statistics made as constants) compile on the
  first step only: the second sees the graph the first saw. The losses and running statistics are torch's."""
  import tgc.tensor as T
  F = torch.nn
  torch.manual_seed(0)
  tm = F.Sequential(F.Conv2d(1, 4, 3, padding=1), F.BatchNorm2d(4), F.ReLU(), F.MaxPool2d(2), F.Flatten(), F.Linear(36, 5))
  class Net:
    def __init__(self): self.c1, self.bn, self.l1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(36, 5)
    def __call__(self, x): return self.l1(self.bn(self.c1(x)).relu().max_pool2d(2).flatten(1))
  model = Net()
  init = {'c1.weight': tm[0].weight, 'c1.bias': tm[0].bias, 'l1.weight': tm[5].weight, 'l1.bias': tm[5].bias}
  load_state_dict(model, {k: Tensor(v.detach().numpy(), device=DEV) for k, v in init.items()}, strict=False)
  assert not model.bn.running_mean.node.realized  # a constant until the optimizer realizes it
  opt, topt = optim.SGD(get_parameters(model), lr=0.05, momentum=0.9), torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal((8, 1, 6, 6)).astype(np.float32), rng.integers(0, 5, 8)
  xt, oh = Tensor(x, device=DEV), Tensor(np.eye(5, dtype=np.float32)[y], device=DEV)
  compiles, got = [], []
  with Tensor.train():
    for _ in range(3):
      n = len(T._COMPILED)
      opt.zero_grad()
      loss = -(model(xt).log_softmax(1) * oh).sum(1).mean()
      loss.backward()
      opt.step()
      got.append(loss.item())
      compiles.append(len(T._COMPILED) - n)
  assert compiles[0] >= 1 and compiles[1:] == [0, 0], compiles
  want = []
  for _ in range(3):
    topt.zero_grad()
    loss = F.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
    loss.backward(); topt.step()
    want.append(loss.item())
  np.testing.assert_allclose(got, want, rtol=1e-4)
  assert model.bn.running_mean.node.realized and model.bn.num_batches_tracked.item() == 3  # realized by each step
  np.testing.assert_allclose(model.bn.running_mean.numpy(), tm[1].running_mean.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(model.bn.running_var.numpy(), tm[1].running_var.numpy(), rtol=1e-4, atol=1e-6)
