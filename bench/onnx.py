"""tgc beside onnxruntime on the real ONNX models, per model: the first call (import + compile + run) and the
steady-state call (median of --calls, the two runtimes' calls interleaved), on the CPU (or --device).

    python bench/onnx.py                    # needs: pip install onnx onnxruntime; pip install --no-deps rapidocr-onnxruntime silero-vad
    python bench/onnx.py --device CUDA --calls 50
    python bench/onnx.py --threads 1        # both runtimes on one thread: steadier where other jobs share the cores

tinygrad is not installed here; its column is left out.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time

# the repository instead of bench/ on the path: this file's own name would shadow the onnx package
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from tgc.frontend import onnx as fe
from tgc.frontend.onnx_models import MODELS


def timed(fns: dict, calls: int) -> dict:
  """{runtime: (first call, median steady call)}: the first calls in turn, then the steady calls interleaved, so
  that load from other processes on a shared machine falls on every runtime alike."""
  first, steady = {}, {k: [] for k in fns}
  for k, fn in fns.items():
    t = time.perf_counter(); fn(); first[k] = time.perf_counter() - t
  for _ in range(calls):
    for k, fn in fns.items():
      t = time.perf_counter(); fn(); steady[k].append(time.perf_counter() - t)
  return {k: (first[k], statistics.median(steady[k])) for k in fns}


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--device', default=None)
  ap.add_argument('--calls', type=int, default=20)
  ap.add_argument('--threads', type=int, default=0, help="threads of each runtime (onnxruntime's intra-op pool, tgc's CPU_THREADS); 0: their defaults")
  args = ap.parse_args()
  import onnxruntime as ort
  opts = ort.SessionOptions()
  if args.threads: opts.intra_op_num_threads, os.environ['CPU_THREADS'] = args.threads, str(args.threads)
  print(f"{'model':<12} {'runtime':<12} {'first call ms':>14} {'steady ms':>10} {'vs ort':>7}")
  for name, (make, package) in sorted(MODELS.items()):
    path, feeds = make()
    if path is None: print(f"{name:<12} ({package} is not installed)"); continue
    def ort_call(state={}):
      if 'sess' not in state: state['sess'] = ort.InferenceSession(path, opts, providers=['CPUExecutionProvider'])
      return state['sess'].run(None, feeds)
    def tgc_call(state={}):
      if 'model' not in state: state['model'] = fe.load(path, device=args.device)
      return state['model'](**feeds)
    rows = timed({'onnxruntime': ort_call, 'tgc': tgc_call}, args.calls)
    for rt, (first, steady) in rows.items():
      print(f"{name:<12} {rt:<12} {first * 1e3:>14.1f} {steady * 1e3:>10.3f} {steady / rows['onnxruntime'][1]:>6.1f}x")
  return 0


if __name__ == '__main__':
  sys.exit(main())
