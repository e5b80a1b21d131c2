"""Host overhead of one eager `Tensor` call on tiny inputs, beside torch CPU eager.

    python bench/eager.py                  # per-call microseconds of tgc and torch and their ratio
    python bench/eager.py --profile add    # also cProfile one workload (top lines by cumtime)

Inputs are 4x4 (64x64 for matmul) so that the kernels cost about a microsecond and what is measured is the
Python path from `Tensor` ops to the launched kernels: graph building, the cache key, cache lookup, buffers,
launch. Each call builds the graph anew from realized inputs, as an eager program does.
"""
from __future__ import annotations
import argparse, cProfile, io, os, pstats, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tgc import Tensor


def workloads(T, rng):
  """name -> (inputs, fn); T wraps a numpy array into the framework's tensor."""
  a, b, c = (T(rng.standard_normal((4, 4)).astype(np.float32)) for _ in range(3))
  m1, m2 = (T(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
  x, w1, w2 = T(rng.standard_normal((4, 16)).astype(np.float32)), T(rng.standard_normal((16, 32)).astype(np.float32)), T(rng.standard_normal((32, 8)).astype(np.float32))
  im, k3 = T(rng.standard_normal((2, 4, 8, 8)).astype(np.float32)), T(rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
  conv = (lambda: im.conv2d(k3, padding=1)) if hasattr(im, 'conv2d') else (lambda: __import__('torch').nn.functional.conv2d(im, k3, padding=1))
  gelu = (lambda: a.gelu()) if hasattr(a, 'gelu') else (lambda: __import__('torch').nn.functional.gelu(a, approximate='tanh'))
  return {'add': lambda: a + b, 'a*b+c': lambda: a * b + c, 'sum': lambda: a.sum(), 'softmax': lambda: a.softmax(-1),
          'matmul 64': lambda: m1 @ m2, 'mlp': lambda: (x @ w1).relu() @ w2, 'conv 3x3': conv,
          'gelu': gelu}


def per_call(fn, calls: int, repeats: int = 5) -> float:
  for _ in range(20): fn()
  ts = []
  for _ in range(repeats):
    t = time.perf_counter_ns()
    for _ in range(calls): fn()
    ts.append((time.perf_counter_ns() - t) / calls / 1e3)
  return statistics.median(ts)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--calls', type=int, default=300)
  ap.add_argument('--profile', default=None, help="a workload's name to cProfile")
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  tg = workloads(lambda v: Tensor(v).realize(), rng)
  try:
    import torch
    torch.set_num_threads(1)
    th = workloads(torch.from_numpy, np.random.default_rng(0))
  except ImportError: th = None
  print(f"{'workload':<10} {'tgc us':>9} {'torch us':>9} {'tgc/torch':>9}")
  for name, f in tg.items():
    t = per_call(lambda: f().realize(), args.calls)
    u = per_call(th[name], args.calls) if th else float('nan')
    print(f"{name:<10} {t:9.1f} {u:9.1f} {t / u:9.1f}")
  if args.profile:
    f = tg[args.profile]
    pr = cProfile.Profile(); pr.enable()
    for _ in range(args.calls): f().realize()
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(25); print(s.getvalue())


if __name__ == '__main__': main()
