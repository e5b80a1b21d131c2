"""tgc beside numpy (and tinygrad, if installed) on the workloads of the optimisation issue, in one run.

    python bench/kernels.py                 # the full table (a few minutes on 2 cores)
    python bench/kernels.py --quick         # smaller sizes, for a smoke run
    python bench/kernels.py --devices CPU,C,OPENCL --runs 10

Each workload is built with the Tensor API, turned into one tensor-level function (tgc.tensor's module
builder) and compiled once per device; then the compiled function is called on the same numpy arrays:
that call (allocation of outputs and every kernel launch) is what is timed, as numpy's call is. Medians of
--runs runs after a warm-up; `cmp(s)` is the compile time: the first call (lowering, code generation, JIT) less one run,
with an empty $TGC_CACHE unless --warm-cache. Every result is
checked against numpy (float32 tolerance) as the benchmark runs.

If tinygrad imports and its default device starts, a tinygrad column is added: the same Tensor-API graph under
TinyJit (kernel replay), on tinygrad's default device (choose it with tinygrad's own DEV=..., e.g. DEV=CPU:LLVM
with LLVM_PATH naming a libLLVM; its CPU device builds helper programs with clang, or $CC).
"""
from __future__ import annotations
import argparse, atexit, os, shutil, statistics, sys, tempfile, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor
from tgc.tensor import _build_module
from tgc.compiler import compile_module


def median_time(f, runs: int) -> float:
  f()
  ts = []
  for _ in range(runs):
    t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
  return statistics.median(ts)


class Workload:
  def __init__(self, name, unit, amount, inputs, build, ref, tol=1e-3):
    self.name, self.unit, self.amount, self.inputs, self.build, self.ref, self.tol = name, unit, amount, inputs, build, ref, tol


def workloads(quick: bool):
  rng = np.random.default_rng(0)
  f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
  n = 1 << (20 if quick else 24)
  rows = 1024 if quick else 4096
  out = []
  a, b, c = f32(n), f32(n), f32(n)
  out.append(Workload(f"add 2^{n.bit_length() - 1}", 'GB/s', 3 * 4 * n, (a, b), lambda x, y: x + y, lambda x, y: x + y))
  out.append(Workload(f"a*b+c 2^{n.bit_length() - 1}", 'GB/s', 4 * 4 * n, (a, b, c), lambda x, y, z: x * y + z, lambda x, y, z: x * y + z))
  out.append(Workload(f"sum 2^{n.bit_length() - 1}", 'GB/s', 4 * n, (a,), lambda x: x.sum(), lambda x: x.sum(dtype=np.float32), tol=1e-2))
  m = f32(rows, rows)
  out.append(Workload(f"rowsum {rows}^2", 'GB/s', 4 * rows * rows, (m,), lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)))
  s = f32(rows, 1024)
  def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True)); return e / e.sum(axis=-1, keepdims=True)
  out.append(Workload(f"softmax {rows}x1024", 'GB/s', 2 * 4 * rows * 1024, (s,), lambda x: x.softmax(), np_softmax))
  for M in ((256, 512) if quick else (512, 1024, 2048)):
    A, B = f32(M, M), f32(M, M)
    out.append(Workload(f"matmul {M}", 'GFLOP/s', 2 * M ** 3, (A, B), lambda x, y: x @ y, lambda x, y: x @ y, tol=1e-2))
  bs, ch, hw = (2, 16, 28) if quick else (8, 64, 56)
  X, W = f32(bs, ch, hw, hw), f32(ch, ch, 3, 3) * 0.1
  def np_conv(x, w):  # im2col + BLAS: numpy's best
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # bs, c, h, w, 3, 3
    return np.einsum('bchwij,ocij->bohw', cols, w, optimize=True)
  out.append(Workload(f"conv2d b{bs} {ch}->{ch} {hw}^2 3x3", 'GFLOP/s', 2 * bs * ch * ch * hw * hw * 9, (X, W),
                      lambda x, w: x.conv2d(w, padding=1), np_conv, tol=1e-2))
  batch = 64 if quick else 256
  xs, w1, b1, w2, b2, w3, b3 = f32(batch, 784), f32(784, 1024) * 0.03, f32(1024), f32(1024, 1024) * 0.03, f32(1024), f32(1024, 10) * 0.03, f32(10)
  def np_mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, 0); h = np.maximum(h @ w2 + b2, 0); return h @ w3 + b3
  out.append(Workload(f"MLP 784-1024-1024-10 b{batch}", 'GFLOP/s', 2 * batch * (784 * 1024 + 1024 * 1024 + 1024 * 10), (xs, w1, b1, w2, b2, w3, b3),
                      lambda x, w1, b1, w2, b2, w3, b3: x.linear(w1, b1).relu().linear(w2, b2).relu().linear(w3, b3), np_mlp, tol=1e-2))
  return out


def tgc_function(w: Workload, device: str):
  """Compile the workload's graph for `device`: (callable on the numpy inputs, kernels, compile seconds)."""
  ts = [Tensor(x, device=device) for x in w.inputs]
  out = w.build(*ts)
  m, leaves = _build_module([out.node], 'bench')
  order = [next(i for i, t in enumerate(ts) if t.node is leaf) for leaf in leaves]
  t0 = time.perf_counter()
  fn = compile_module(m, device)
  args = [w.inputs[i] for i in order]
  res = fn(*args)[0]
  first = time.perf_counter() - t0
  return (lambda: fn(*args)[0]), len(fn.kernels), first, res


def tinygrad_function(w: Workload):
  """tinygrad's replay of the same graph (TinyJit: captured on the second call, replayed after), and its result;
  None when tinygrad is not installed or its default device does not start."""
  try:
    from tinygrad import Tensor as TT, TinyJit
    ts = [TT(x).realize() for x in w.inputs]
    jf = TinyJit(lambda *xs: w.build(*xs).realize())
    for _ in range(3): res = jf(*ts)
    return (lambda: jf(*ts)), res.numpy()
  except Exception as e:
    print(f"# tinygrad unavailable for {w.name}: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)
    return None


def tinygrad_device() -> str | None:
  try:
    from tinygrad import Device, Tensor as TT
    (TT([1.0]) + 1).numpy()  # the device starts and compiles a kernel
    return f"{Device.DEFAULT}:{type(Device[Device.DEFAULT].renderer).__name__}"
  except Exception: return None


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--quick', action='store_true')
  ap.add_argument('--runs', type=int, default=10)
  ap.add_argument('--devices', default='CPU,C,OPENCL')
  ap.add_argument('--only', default=None, help='run workloads whose name contains this')
  ap.add_argument('--warm-cache', action='store_true', help="keep $TGC_CACHE (the C device's libraries on disk): cmp(s) then shows cache hits")
  args = ap.parse_args()
  if not args.warm_cache:  # compile times are cold compiles: a fresh cache for this run
    os.environ['TGC_CACHE'] = tempfile.mkdtemp(prefix='tgc-bench-')
    atexit.register(shutil.rmtree, os.environ['TGC_CACHE'], True)
  devices = [d.strip().upper() for d in args.devices.split(',') if d.strip()]
  usable = []
  for d in devices:
    try: tgc.runtime.get_device(d); usable.append(d)
    except Exception as e: print(f"# device {d} unavailable: {e}")
  for d in usable:  # start each device's compiler once, so the first row's compile time is its kernel's own
    (Tensor(np.ones(4, np.float32), device=d) + 1).numpy()
  tiny_dev = tinygrad_device()
  print(f"# tgc bench: numpy {np.__version__}, {os.cpu_count()} cores, runs={args.runs}, devices={','.join(usable)}"
        + (f", tinygrad on {tiny_dev} (TinyJit replay)" if tiny_dev else ''))
  head = f"{'workload':<30} {'unit':<8} {'numpy':>8}"
  for d in usable: head += f" {('tgc ' + d):>11} {'x np':>6} {'kern':>4} {'cmp(s)':>7}"
  if tiny_dev: head += f" {'tinygrad':>9} {'x np':>6}"
  print(head); print('-' * len(head))
  for w in workloads(args.quick):
    if args.only and args.only not in w.name: continue
    t_np = median_time(lambda: w.ref(*w.inputs), args.runs)
    rate = lambda t: w.amount / t / 1e9
    line = f"{w.name:<30} {w.unit:<8} {rate(t_np):8.1f}"
    want = w.ref(*w.inputs)
    for d in usable:
      try:
        f, kernels, first, res = tgc_function(w, d)
        err = np.abs(np.asarray(res, np.float64) - want).max() / max(1.0, np.abs(want).max())
        if not err <= w.tol: raise AssertionError(f"{w.name} on {d}: relative error {err:.2e} > {w.tol}")
        t = median_time(f, args.runs)
        line += f" {rate(t):11.1f} {t_np / t:6.2f} {kernels:4d} {max(first - t, 0.0):7.2f}"  # compile: the first call less a run
      except AssertionError: raise
      except Exception as e:
        line += f" {'error':>11} {'':>6} {'':>4} {'':>7}"
        print(f"# {w.name} on {d}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    if tiny_dev:
      g = tinygrad_function(w)
      if g is None: line += f" {'error':>9} {'':>6}"
      else:
        err = np.abs(np.asarray(g[1], np.float64) - want).max() / max(1.0, np.abs(want).max())
        if not err <= w.tol: raise AssertionError(f"{w.name} on tinygrad: relative error {err:.2e} > {w.tol}")
        t = median_time(g[0], args.runs)
        line += f" {rate(t):9.1f} {t_np / t:6.2f}"
    print(line, flush=True)


if __name__ == '__main__':
  main()
