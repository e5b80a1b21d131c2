"""The replay overhead of `Tensor.jit` per kernel launch, beside the other ways to run a graph.

    python bench/jit.py                     # N = 1 and 16 kernels, 2000 calls each, on the CPU
    python bench/jit.py --device CUDA       # on the GPU (launches are asynchronous: each batch ends synchronized)
    python bench/jit.py --kernels 32 --calls 5000
    python bench/jit.py --profile           # also cProfile the jitted replay (top lines by tottime)

The function is a chain of N tiny kernels: y = (y * 1.5 + 1).contiguous(), N times, on a 16-element
float32 tensor, so that the kernels themselves cost almost nothing and what is measured is the machinery
around them. Each way of running it is timed over --calls calls after a warm-up (median of --repeats
batches), for 1 kernel and for N kernels:

  jit replay        @Tensor.jit f(x): the compiled function replayed on x's buffer
  no jit            f(x).realize(): graph building, the module built and printed (the cache key), cache lookup, run
  tgc.compile       tgc.compile(text)(arr): numpy in and out (copies on a GPU), the host schedule between
  kernel launch     the compiled kernel's Program.launch on device buffers, per kernel
  ctypes            the bare ctypes function pointer of the kernel, per kernel (CPU only)
  torch eager       the same chain in torch on the same device (when torch is installed), for scale

"us/kernel" is the time of a call divided by the N kernels it launches; "marginal" is the slope
(t(N) - t(1)) / (N - 1): the cost each further kernel adds, the fixed cost per call taken out.
For scale: a pycuda launch costs about 13 us on an H100; tinygrad's JIT replay about 135 us per kernel.
"""
from __future__ import annotations
import argparse, cProfile, io, os, pstats, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor


def chain(n: int):
  def f(x: Tensor) -> Tensor:
    for _ in range(n): x = (x * 1.5 + 1).contiguous()
    return x
  return f


def per_call(fn, calls: int, repeats: int, sync=lambda: None) -> float:
  """Median over `repeats` batches of the seconds one call takes (a batch: `calls` calls, then a synchronize)."""
  for _ in range(max(10, calls // 20)): fn()  # warm-up
  ts = []
  for _ in range(repeats):
    sync(); t0 = time.perf_counter()
    for _ in range(calls): fn()
    sync(); ts.append((time.perf_counter() - t0) / calls)
  return statistics.median(ts)


def torch_chain(n: int, device: str):
  try: import torch
  except Exception: return None  # (not installed, or a broken install)
  tdev = 'cuda' if device == 'CUDA' else 'cpu' if device in ('CPU', 'C') else None
  if tdev is None or (tdev == 'cuda' and not torch.cuda.is_available()): return None
  x = torch.arange(16, dtype=torch.float32, device=tdev) / 16
  sync = torch.cuda.synchronize if tdev == 'cuda' else (lambda: None)
  def f():
    y = x
    for _ in range(n): y = y * 1.5 + 1
    return y
  return f, sync


def measure(n: int, calls: int, repeats: int, device: str = 'CPU') -> dict[str, float]:
  """Seconds per call of each way of running the n-kernel chain."""
  arr = np.arange(16, dtype=np.float32) / 16
  x = Tensor(arr, device=device)
  sync = tgc.Device[device].synchronize
  f = chain(n)
  expect = arr.astype(np.float64)
  for _ in range(n): expect = expect * 1.5 + 1

  jf = Tensor.jit(f)
  np.testing.assert_allclose(jf(x).numpy(), expect, rtol=1e-5)
  np.testing.assert_allclose(jf(x).numpy(), expect, rtol=1e-5)  # the second call replays
  ir_text = f(x).to_ir()
  n_funcs = f(x).to_ir('kernel').count('\nkernel.func') + f(x).to_ir('kernel').startswith('kernel.func')
  assert n_funcs == n, f"the chain of {n} made {n_funcs} kernels"
  cf = tgc.compile(ir_text, device=device)
  np.testing.assert_allclose(cf(arr)[0], expect, rtol=1e-5)
  out = {}
  out['jit replay'] = per_call(lambda: jf(x), calls, repeats, sync)
  out['no jit'] = per_call(lambda: f(x).realize(), max(calls // 10, 50), repeats, sync)
  out['tgc.compile'] = per_call(lambda: cf(arr), calls, repeats, sync)
  # one kernel, launched directly: n launches of it cost n times this
  k = next(iter(cf.kernels.values())).program
  o = tgc.runtime.Buffer(device, 16, x.dtype)
  args = [o.arg, x.node.buf.arg]
  out['kernel launch'] = n * per_call(lambda: k.launch(args), calls, repeats, sync)
  if hasattr(k, '_cfn'):
    ptrs = (*args, 0, k.global_size[0])
    cfn = k._cfn
    out['ctypes'] = n * per_call(lambda: cfn(*ptrs), calls, repeats)
  tc = torch_chain(n, device)
  if tc is not None: out['torch eager'] = per_call(tc[0], calls, repeats, tc[1])
  return out


def profile_replay(n: int, calls: int, device: str, top: int = 18) -> str:
  x = Tensor(np.arange(16, dtype=np.float32), device=device)
  jf = Tensor.jit(chain(n))
  jf(x); jf(x)
  pr = cProfile.Profile()
  pr.enable()
  for _ in range(calls): jf(x)
  pr.disable()
  s = io.StringIO()
  pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(top)
  return s.getvalue()


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--kernels', type=int, default=16, help='N, the kernels in the chain (default 16)')
  ap.add_argument('--calls', type=int, default=2000, help='calls per timed batch')
  ap.add_argument('--repeats', type=int, default=5, help='batches; the median is reported')
  ap.add_argument('--profile', action='store_true', help='cProfile the jitted replay of the N-kernel chain')
  ap.add_argument('--device', default='CPU', help='CPU (default), C, OPENCL, CUDA')
  args = ap.parse_args(argv)
  n = args.kernels
  if n < 2: ap.error('--kernels must be at least 2')
  os.environ.pop('DEBUG', None)
  dev = args.device.upper()
  t1 = measure(1, args.calls, args.repeats, dev)
  tn = measure(n, args.calls, args.repeats, dev)
  print(f"tgc {tgc.__version__}, device {dev}, a chain of tiny kernels on 16 float32s, median of {args.repeats} x {args.calls} calls")
  print()
  hdr = f"{'way of running':<16s} {'1 kernel':>12s} {f'{n} kernels':>12s} {'us/kernel':>10s} {'marginal':>10s}"
  print(hdr)
  print(f"{'':<16s} {'us/call':>12s} {'us/call':>12s} {f'(at N={n})':>10s} {'us/kernel':>10s}")
  print('-' * len(hdr))
  for name in t1:
    a, b = t1[name] * 1e6, tn[name] * 1e6
    print(f"{name:<16s} {a:12.2f} {b:12.2f} {b / n:10.2f} {(b - a) / (n - 1):10.2f}")
  print()
  print("kernel launch and ctypes rows: one kernel's direct launch times N (no host schedule around it).")
  print("For scale: pycuda launches cost ~13 us on an H100; tinygrad's JIT replay ~135 us per kernel.")
  if args.profile:
    print()
    print(f"cProfile of {args.calls} jitted replays of the {n}-kernel chain (by tottime):")
    print(profile_replay(n, args.calls, dev))
  return 0


if __name__ == '__main__':
  sys.exit(main())
