"""tgc beside onnxruntime (and tinygrad, if installed) on the real ONNX models, per model: the first call (import +
compile + run) and the steady-state call (median of --calls, the runtimes' calls interleaved), on the CPU (or --device).

    python bench/onnx.py                    # needs: pip install onnx onnxruntime; pip install --no-deps rapidocr-onnxruntime silero-vad
    python bench/onnx.py --device CUDA --calls 50
    python bench/onnx.py --threads 1        # every runtime on one thread: steadier where other jobs share the cores
    python bench/onnx.py --threads 1 --cpu-time   # ... timed in CPU time: on a loaded machine, wall time is mostly waiting
    python bench/onnx.py --models silero_vad
    python bench/onnx.py --models gpt2,bert,vit,resnet,torch_transformer --profile 1   # torch's exports (pip install torch)

--device names tgc's device (default: tgc's Device.DEFAULT, $DEVICE or CPU) and picks the others' to match: onnxruntime's
CUDAExecutionProvider for CUDA where this onnxruntime has it (else its CPU provider, said in the header), tinygrad's
device of that name (DEV=CPU, CUDA; OPENCL is tinygrad's CL). The header prints the device each runtime used.

tinygrad (its column appears when it imports and its device starts a kernel; else one line says why) runs the model as
its users do: `tinygrad.nn.onnx.OnnxRunner` on a copy of the model whose graph inputs have the feeds' fixed shapes (its
runner rejects a symbolic or -1 dimension; tgc specialises to the fed shapes too), the call wrapped in `TinyJit` (the
inputs as numpy-backed Tensors, fresh each call, moved to the device inside the jitted function, as openpilot's
compile3 feeds them), its outputs brought back with .numpy(). Its first call runs with CACHELEVEL=0 (no kernels from
its disk cache: tgc's first call compiles every kernel too); its second call, the jit capture, is not timed.

Each runtime's outputs (of its last call) are checked against onnxruntime on the CPU: `max err` is the largest
absolute difference over the largest reference magnitude, per model; a runtime above 1e-3 there is reported wrong and
its times are not printed.

The models: the real ones of tgc.frontend.onnx_models (PP-OCR, silero VAD, from their pip wheels) and the kinds a
model library holds, exported by torch from small configs with random weights (a GPT-2 style decoder, a BERT style
encoder, a ViT, a ResNet, torch.nn.TransformerEncoder). --profile N prints, for the N models slowest against
onnxruntime, where tgc's call spends its time: tgc.compiler.profile's per-kernel times (each launch timed
alone, the median of several calls), the largest first, beside the steady call's time.
"""
from __future__ import annotations
import argparse, os, statistics, sys, tempfile, time
import numpy as np

# the repository instead of bench/ on the path: this file's own name would shadow the onnx package
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from tgc.frontend import onnx as fe
from tgc.frontend.onnx_models import MODELS

TOL = 1e-3  # ten times the real-model tests' 1e-4: a GPU's other summation orders (and tinygrad's) still pass


def timed(fns: dict, calls: int, clock=time.perf_counter) -> dict:
  """{runtime: (first call, median steady call) or an exception}: the first calls in turn, one untimed warm call
  each (tinygrad's jit captures there), then the steady calls interleaved, so that load from other processes on a
  shared machine falls on every runtime alike. A runtime whose first call raises is left out of the rest."""
  first, steady = {}, {k: [] for k in fns}
  for k, fn in list(fns.items()):
    t = time.perf_counter()
    try: fn()
    except Exception as e:
      if k == 'tinygrad': first[k] = e; del fns[k]; continue
      raise
    first[k] = time.perf_counter() - t
  for fn in fns.values(): fn()
  for _ in range(calls):
    for k, fn in fns.items():
      t = clock(); fn(); steady[k].append(clock() - t)
  return {k: v if isinstance(v, Exception) else (v, statistics.median(steady[k])) for k, v in first.items()}


def start_tinygrad(device: str):
  """tinygrad's module and its device's name, or None and why not. DEV and CACHELEVEL are read when tinygrad is
  first imported, so they are set before."""
  os.environ['DEV'] = {'OPENCL': 'CL'}.get(device, device)
  os.environ.setdefault('CACHELEVEL', '0')
  try:
    import importlib.metadata, tinygrad
    from tinygrad import Device, Tensor
    (Tensor([1.0]) + 1).numpy()  # the device starts and compiles a kernel
    return tinygrad, f"tinygrad {importlib.metadata.version('tinygrad')} on {Device.DEFAULT} ({type(Device[Device.DEFAULT].renderer).__name__})"
  except Exception as e: return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def fixed_dims(path: str, feeds: dict, tmp: str) -> str:
  """A copy of the model whose graph inputs have the feeds' shapes (dim_value), for tinygrad's OnnxRunner."""
  import onnx
  m = onnx.load(path)
  for i in m.graph.input:
    if i.name in feeds and len(i.type.tensor_type.shape.dim) == np.ndim(feeds[i.name]):
      for d, n in zip(i.type.tensor_type.shape.dim, np.shape(feeds[i.name])): d.ClearField('dim_param'); d.dim_value = n
  onnx.save(m, out := os.path.join(tmp, os.path.basename(path)))
  return out


def tinygrad_call(path: str, feeds: dict, tmp: str):
  from tinygrad import Tensor, TinyJit, Device
  from tinygrad.nn.onnx import OnnxRunner
  # a 0-d array would become a constant, which TinyJit refuses as an input: it goes in as one element, viewed as 0-d
  def arg(v): return Tensor(v, device='NPY') if np.ndim(v) else Tensor(np.reshape(v, 1), device='NPY').reshape(())
  state = {}
  def call():
    if 'jit' not in state:
      run = OnnxRunner(fixed_dims(path, feeds, tmp))
      state['jit'] = TinyJit(lambda **kw: [v.realize() for v in run({k: t.to(Device.DEFAULT) for k, t in kw.items()}).values()])
    return [o.numpy() for o in state['jit'](**{k: arg(v) for k, v in feeds.items()})]
  return call


def max_err(outs, ref) -> float:
  if len(outs) != len(ref) or any(np.shape(a) != np.shape(b) for a, b in zip(outs, ref)): return float('inf')
  return max(float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30)) if np.size(b) else 0.0 for a, b in zip(outs, ref))


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--device', default=None, help="tgc's device (CPU, CUDA, OPENCL); the other runtimes use the same")
  ap.add_argument('--calls', type=int, default=20)
  ap.add_argument('--threads', type=int, default=0, help="threads of each runtime (onnxruntime's intra-op pool, tgc's CPU_THREADS, tinygrad's NUM_CPU_THREADS); 0: their defaults")
  ap.add_argument('--models', default=None, help='comma-separated model names (default: all)')
  ap.add_argument('--cpu-time', action='store_true', help="steady calls timed in this process's CPU time, not wall time: with --threads 1 (every runtime on the calling thread) a measure that load from other processes barely moves")
  ap.add_argument('--profile', type=int, default=0, metavar='N', help="per-kernel times of tgc's call for the N models slowest against onnxruntime")
  ap.add_argument('--no-tinygrad', action='store_true')
  ap.add_argument('--warm-cache', action='store_true', help="keep $TGC_CACHE (compiled kernels on disk): the first call then shows cache hits")
  args = ap.parse_args()
  if not args.warm_cache:  # a first call is a cold compile: a fresh cache for this run
    import atexit, shutil, tempfile
    os.environ['TGC_CACHE'] = tempfile.mkdtemp(prefix='tgc-bench-')
    atexit.register(shutil.rmtree, os.environ['TGC_CACHE'], True)
  from tgc.runtime import Device
  device = Device.canonicalize(args.device)
  try: Device[device]
  except Exception as e: print(f"tgc: device {device} does not start: {e}"); return 1
  if args.threads: os.environ['CPU_THREADS'] = os.environ['NUM_CPU_THREADS'] = str(args.threads)
  import onnxruntime as ort
  opts = ort.SessionOptions()
  if args.threads: opts.intra_op_num_threads = args.threads
  # (CUDA's provider with the CPU's after it, as onnxruntime's users list them: an op it lacks runs on the CPU)
  providers = ['CUDAExecutionProvider', 'CPUExecutionProvider'] if device == 'CUDA' and 'CUDAExecutionProvider' in ort.get_available_providers() else ['CPUExecutionProvider']
  tiny, tiny_what = (None, '--no-tinygrad') if args.no_tinygrad else start_tinygrad(device)
  print(f"onnxruntime {ort.__version__} on {providers[0]}" + (f" (no CUDAExecutionProvider in {ort.get_available_providers()})" if device == 'CUDA' and providers[0] != 'CUDAExecutionProvider' else ''))
  print(f"tgc on {device}" + (f"; every runtime on {args.threads} thread(s)" if args.threads else '') + ("; steady calls in CPU time" if args.cpu_time else ''))
  print(tiny_what if tiny else f"tinygrad: not run ({tiny_what})")
  print(f"{'model':<12} {'runtime':<12} {'first call ms':>14} {'steady ms':>10} {'vs ort':>7} {'max err':>8}")
  names = args.models.split(',') if args.models else sorted(MODELS)
  ratios, calls = {}, {}
  with tempfile.TemporaryDirectory(prefix='tgc-bench-onnx-') as tmp:
    for name in names:
      make, package = MODELS[name]
      path, feeds = make()
      if path is None: print(f"{name:<12} ({package} is not installed)"); continue
      def ort_call(state={}, path=path, feeds=feeds, name=name):
        if 'sess' not in state:
          state['sess'] = ort.InferenceSession(path, opts, providers=providers)
          # (onnxruntime falls back to the CPU, with a warning only, where the CUDA provider's libraries do not load)
          if state['sess'].get_providers()[0] != providers[0]: print(f"# onnxruntime runs {name} on {state['sess'].get_providers()[0]}")
        return state['sess'].run(None, feeds)
      def tgc_call(state={}, path=path, feeds=feeds):
        if 'model' not in state: state['model'] = fe.load(path, device=device)
        return state['model'](**feeds)
      fns = {'onnxruntime': ort_call, 'tgc': tgc_call}
      if tiny: fns['tinygrad'] = tinygrad_call(path, feeds, tmp)
      rows = timed(dict(fns), args.calls, time.process_time if args.cpu_time else time.perf_counter)
      ref = ort.InferenceSession(path, providers=['CPUExecutionProvider']).run(None, feeds)
      for rt, row in rows.items():
        if isinstance(row, Exception):
          print(f"{name:<12} {rt:<12} failed: {type(row).__name__}: {str(row).splitlines()[0][:100] if str(row) else ''}"); continue
        first, steady = row
        err = max_err(fns[rt](), ref)
        if not err <= TOL: print(f"{name:<12} {rt:<12} {'wrong':>14} {'':>10} {'':>7} {err:>8.1e}"); continue
        print(f"{name:<12} {rt:<12} {first * 1e3:>14.1f} {steady * 1e3:>10.3f} {steady / rows['onnxruntime'][1]:>6.2f}x {err:>8.1e}")
        if rt == 'tgc': ratios[name], calls[name] = steady / rows['onnxruntime'][1], (fns[rt], steady)
    for name in sorted(ratios, key=ratios.get, reverse=True)[:args.profile]: profile(name, *calls[name])
  return 0


def profile(name: str, call, steady: float, top: int = 12, calls: int = 7):
  """tgc's kernels of a call of this model, by time: tgc.compiler.profile's (each launch timed alone), the median of
  each launch over `calls` calls (one call's times on a shared machine hold other processes' time slices)."""
  from tgc.compiler import profile as prof
  runs = []
  for _ in range(calls):
    with prof() as launches: call()
    runs.append(launches)
  by = {}
  for i, (k, _) in enumerate(runs[0]): by[k] = by.get(k, 0.0) + statistics.median(r[i][1] for r in runs)
  total = sum(by.values())
  print(f"\n{name}: {len(runs[0])} launches, {total * 1e3:.3f} ms in kernels (each timed alone, medians of {calls} calls); "
        f"steady call {steady * 1e3:.3f} ms")
  for k, dt in sorted(by.items(), key=lambda kv: -kv[1])[:top]: print(f"  {dt * 1e3:8.3f} ms {dt / total:6.1%}  {k}")

if __name__ == '__main__':
  sys.exit(main())
