"""Training steps per second of a small CNN: tgc (jitted and eager) beside torch, on the CPU, in one run.

    python bench/train.py                   # batch 16 of 1x12x12, SGD with momentum, 200 steps timed
    python bench/train.py --opt adam --batch 64 --steps 100
    python bench/train.py --device CUDA     # tgc on the GPU (torch on cuda when it has it)

The model is tests/test_train.py's: conv 1->4 (3x3, padding 1), relu, max-pool 2, conv 4->8 (3x3), relu,
max-pool 2, linear 32->5, cross-entropy. A step is forward, backward and the optimizer's update of every
weight; tgc's jitted step replays the compiled step function, its eager step builds the graph, looks the
compiled function up by the graph's structure and runs it. Both start from torch's initial weights, and the
losses are checked to agree before timing.
"""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor, nn
from tgc.nn import optim
from tgc.nn.state import get_parameters, get_state_dict, load_state_dict


class CNN:
  def __init__(self): self.c1, self.c2, self.l1 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3), nn.Linear(32, 5)
  def __call__(self, x):
    x = self.c1(x).relu().max_pool2d(2)
    return self.l1(self.c2(x).relu().max_pool2d(2).flatten(1))


def torch_setup(opt: str, x, y, device: str):
  import torch
  F = torch.nn
  torch.manual_seed(0)
  dev = 'cuda' if device == 'CUDA' and torch.cuda.is_available() else 'cpu'
  m = F.Sequential(F.Conv2d(1, 4, 3, padding=1), F.ReLU(), F.MaxPool2d(2), F.Conv2d(4, 8, 3), F.ReLU(), F.MaxPool2d(2), F.Flatten(), F.Linear(32, 5))
  init = [v.detach().numpy().copy() for v in m.state_dict().values()]
  m = m.to(dev)
  o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) if opt == 'sgd' else torch.optim.Adam(m.parameters(), lr=0.002)
  xt, yt = torch.tensor(x, device=dev), torch.tensor(y, device=dev)
  sync = torch.cuda.synchronize if dev == 'cuda' else (lambda: None)
  def step():
    o.zero_grad()
    loss = F.functional.cross_entropy(m(xt), yt)
    loss.backward(); o.step()
    return loss
  return step, init, sync, dev


def tgc_setup(opt: str, init, x, y, device: str, jit: bool):
  model = CNN()
  load_state_dict(model, {k: Tensor(v, device=device) for k, v in zip(get_state_dict(model), init)})
  o = optim.SGD(get_parameters(model), lr=0.01, momentum=0.9) if opt == 'sgd' else optim.Adam(get_parameters(model), lr=0.002)
  xt, oh = Tensor(x, device=device), Tensor(np.eye(5, dtype=np.float32)[y], device=device)
  def step(x, onehot):
    o.zero_grad()
    loss = -(model(x).log_softmax(1) * onehot).sum(1).mean()
    loss.backward()
    Tensor.realize(loss, *o.schedule_step())
    return loss
  f = Tensor.jit(step) if jit else step
  return lambda: f(xt, oh)


def steps_per_second(step, steps: int, sync=lambda: None) -> float:
  for _ in range(5): step()  # warm-up: compiles, caches
  sync(); t0 = time.perf_counter()
  for _ in range(steps): step()
  sync()
  return steps / (time.perf_counter() - t0)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--batch', type=int, default=16)
  ap.add_argument('--steps', type=int, default=200, help='steps timed (after 5 of warm-up)')
  ap.add_argument('--opt', choices=('sgd', 'adam'), default='sgd')
  ap.add_argument('--device', default='CPU', help='tgc device: CPU (default), C, OPENCL, CUDA')
  args = ap.parse_args(argv)
  os.environ.pop('DEBUG', None)
  dev = args.device.upper()
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((args.batch, 1, 12, 12)).astype(np.float32), rng.integers(0, 5, args.batch)
  tstep, init, tsync, tdev = torch_setup(args.opt, x, y, dev)
  # the same first losses before any timing: the rows below compute the same thing
  want = [tstep().item() for _ in range(3)]
  for jit in (False, True):
    got = tgc_setup(args.opt, init, x, y, dev, jit)
    np.testing.assert_allclose([got().item() for _ in range(3)], want, rtol=1e-4)
  rows = [('tgc jit', steps_per_second(tgc_setup(args.opt, init, x, y, dev, True), args.steps, tgc.Device[dev].synchronize)),
          ('tgc eager', steps_per_second(tgc_setup(args.opt, init, x, y, dev, False), max(args.steps // 4, 20), tgc.Device[dev].synchronize)),
          (f'torch ({tdev})', steps_per_second(tstep, args.steps, tsync))]
  torch_sps = rows[-1][1]
  print(f"tgc {tgc.__version__}, device {dev}: CNN training step (batch {args.batch} of 1x12x12, {args.opt}), {args.steps} steps")
  print()
  hdr = f"{'way of running':<16s} {'steps/s':>10s} {'ms/step':>10s} {'vs torch':>10s}"
  print(hdr)
  print('-' * len(hdr))
  for name, sps in rows: print(f"{name:<16s} {sps:10.1f} {1e3 / sps:10.3f} {sps / torch_sps:9.2f}x")
  return 0


if __name__ == '__main__':
  sys.exit(main())
