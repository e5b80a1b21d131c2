"""A conv layer's training step as a user calls it: the forward alone, and the forward with the gradients of the
input and the weight (one realization, as a training step computes them), inputs on the device, synchronized.

    python bench/conv_grad.py                             # on CUDA (the GPU machine: see docs/gpu.md)
    python bench/conv_grad.py --device CPU --scale 0.125  # a smaller run anywhere

Per row: the median e2e time of --iters calls of each, and the kernels each launches (run it on two checkouts to
compare their layouts of the backward).
"""
from __future__ import annotations
import argparse, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor
from tgc.compiler import device_spec
from tgc.lowering import lower
from tgc.tensor import _build_module
from bench.gpu import median_time


def rows(scale: float):
  nb, hw = max(int(32 * scale), 1), max(int(56 * scale ** 0.5), 4)
  return {  # name: (x shape, w shape, conv2d's keywords, dtype)
    **{f'3x3 {dt}': ((nb, 64, hw, hw), (64, 64, 3, 3), dict(padding=1), dt) for dt in ('float32', 'float16')},
    **{f'3x3 s2 {dt}': ((nb, 64, hw, hw), (128, 64, 3, 3), dict(padding=1, stride=2), dt) for dt in ('float32', 'float16')},
    'grouped 3x3 f32': ((nb, 64, hw, hw), (64, 16, 3, 3), dict(padding=1, groups=4), 'float32'),
    '1x1 f16': ((nb, 64, hw, hw), (256, 64, 1, 1), {}, 'float16'),
  }


def kernels(ts: list[Tensor], device: str) -> int:
  """The kernels realizing ts launches (its graph lowered for the device, as realize lowers it)."""
  m, _ = _build_module([t.node for t in ts], 'f')
  lower(m, device_spec(device), 'kernel')
  return len(list(m.functions('kernel.func')))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--device', default='CUDA')
  ap.add_argument('--rows', default='', help='comma-separated row names (default: all)')
  ap.add_argument('--iters', type=int, default=20)
  ap.add_argument('--scale', type=float, default=1.0, help='problem size relative to the full one (e.g. 0.125)')
  args = ap.parse_args(argv)
  sync, table, rng = tgc.Device[args.device].synchronize, rows(args.scale), np.random.default_rng(0)
  print(f"{'row':<18s} {'forward us':>11s} {'kernels':>7s} {'fwd+grads us':>13s} {'kernels':>7s}")
  for name in [r for r in args.rows.split(',') if r] or list(table):
    xs, ws, kw, dt = table[name]
    x, w = (Tensor(rng.standard_normal(s).astype(dt), device=args.device) for s in (xs, ws))
    g = Tensor(rng.standard_normal(x.conv2d(w, **kw).shape).astype(dt), device=args.device)
    def graph():
      y = x.conv2d(w, **kw)
      return [y, *(y * g).sum().gradient(x, w)]
    fwd, kf = median_time(lambda: x.conv2d(w, **kw).realize(), sync, args.iters), kernels([x.conv2d(w, **kw)], args.device)
    both, kb = median_time(lambda: Tensor.realize(*graph()), sync, args.iters), kernels(graph(), args.device)
    print(f"{name:<18s} {fwd * 1e6:11.1f} {kf:7d} {both * 1e6:13.1f} {kb:7d}", flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
