"""How long a model waits for its first step: compile time of a GPT-style training step, cold and warm.

    python bench/compile.py                       # tiny GPT (2 layers, d 32, seq 16, batch 4) on the CPU
    python bench/compile.py --device CUDA --model all
    python bench/compile.py --profile             # cProfile of one cold first step, the model's building included (top functions by own time)

Each row runs in a fresh process: `cold` with an empty disk cache (TGC_CACHE_DIR a new temporary directory),
`warm` in a new process on the cache the cold run filled. A row's seconds are the first step's wall time (building
the graph, lowering, compiling, the step itself), split into phases: lower (tensor -> uop passes), emit (rendering
kernel source), compile (the device's compiler, or loading a kernel's binary from the disk cache), workers (where the
compile workers take the kernels from the kernel level to binaries: lower, emit and compile side by side, wall time;
the lower column is then the tensor -> kernel passes, and a line below gives the workers' CPU seconds), cache (a whole
function written to the disk cache, cold, or loaded from it instead of all of those, warm: tgc.function_cache), run
(the rest: graph building, scheduling, the launches). `cpu s` is the CPU time the first step took in this process and
its compile workers (what a busy machine cannot inflate); `py/kernel` the median Python CPU time (lower + emit) per
kernel; `loss` the first step's (the warm row's must be the cold row's, bit for bit: a line says so where it is not).

The models: `tiny` (2 layers, d 32, 2 heads, seq 16, batch 4) and `gpt` (4 layers, d 384, 6 heads, seq 256,
batch 16), both f32 with AdamW, a causal attention and a GELU MLP, tied embeddings off.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = {'tiny': dict(layers=2, dim=32, heads=2, seq=16, batch=4, vocab=64),
          'gpt': dict(layers=4, dim=384, heads=6, seq=256, batch=16, vocab=256)}


def gpt_step(layers: int, dim: int, heads: int, seq: int, batch: int, vocab: int, device: str):
  """examples/gpt_train.py's GPT, AdamW, and a jitted training step over one fixed batch: step() -> the loss Tensor."""
  import numpy as np
  from tgc import Tensor
  from tgc.nn import optim
  from tgc.nn.state import get_parameters
  from examples.gpt_train import GPT, train_step
  Tensor.manual_seed(0)
  with Tensor.train():
    model = GPT(vocab, seq, dim, layers, heads)
    params = get_parameters(model)
    opt = optim.AdamW(params, lr=1e-3)
  rng = np.random.default_rng(0)
  x = Tensor(rng.integers(0, vocab, (batch, seq)).astype(np.int32), device=device)
  y = Tensor(rng.integers(0, vocab, (batch, seq)).astype(np.int32), device=device)

  step = train_step(model, opt)
  return lambda: step(x, y)


def child(args) -> None:
  """One measurement in this process: the first step's seconds and phases (printed as one JSON line)."""
  import tgc
  from tgc.runtime import workers
  from tgc.runtime import Device
  from tgc import function_cache
  Device.DEFAULT = args.device
  if args.device == 'CPU': os.environ.setdefault('CPU_THREADS', '1')  # (the launches are not what is measured)
  if args.profile:
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
  c0, t0 = os.times(), time.perf_counter()
  step = gpt_step(**MODELS[args.model], device=args.device)
  t1 = time.perf_counter()
  loss = step().item()
  t2, c2 = time.perf_counter(), os.times()
  if args.profile:
    pr.disable()
    pstats.Stats(pr, stream=sys.stderr).sort_stats('tottime').print_stats(40)
    pstats.Stats(pr, stream=sys.stderr).sort_stats('cumulative').print_stats(60)
  second = time.perf_counter(); step().item(); second = time.perf_counter() - second
  st = workers.STATS
  cpu = sum(getattr(c2, f) - getattr(c0, f) for f in ('user', 'system', 'children_user', 'children_system'))
  print(json.dumps({'build': t1 - t0, 'first': t2 - t1, 'cpu': cpu, 'second': second, 'loss': loss, 'kernels': st.kernels, 'compiled': st.compiled,
                    'phases': dict(st.phases), 'worker_cpu': dict(st.worker_cpu), 'per_kernel': st.median_python_ms(), 'version': tgc.__version__, 'function_cache': dict(function_cache.stats)}))


def run_child(model: str, device: str, cache: str, extra=()) -> dict:
  env = dict(os.environ, TGC_CACHE_DIR=cache)
  env.pop('TGC_CACHE', None); env.pop('DEBUG', None)
  p = subprocess.run([sys.executable, os.path.abspath(__file__), '--child', '--model', model, '--device', device, *extra], env=env, capture_output=True, text=True)
  if p.returncode != 0: raise SystemExit(f"{model} on {device} failed:\n{p.stderr[-4000:]}")
  if extra: sys.stderr.write(p.stderr)
  return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--model', choices=[*MODELS, 'all'], default='tiny')
  ap.add_argument('--device', default='CPU', help='tgc device: CPU (default), C, CUDA')
  ap.add_argument('--profile', action='store_true', help='cProfile of one cold first step, on stderr')
  ap.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  args.device = args.device.upper()
  if args.child: return child(args) or 0
  models = list(MODELS) if args.model == 'all' else [args.model]
  hdr = f"{'model':<6s} {'device':<6s} {'cache':<5s} {'kernels':>7s} {'first s':>8s} {'cpu s':>7s} {'lower':>7s} {'emit':>7s} {'compile':>8s} {'workers':>8s} {'cache':>7s} {'run':>7s} {'py/kernel':>9s} {'step 2 s':>8s} {'loss':>10s}"
  print(hdr); print('-' * len(hdr))
  for model in models:
    with tempfile.TemporaryDirectory(prefix='tgc-cache-') as cache:
      if args.profile:
        run_child(model, args.device, cache, ['--profile']); continue
      losses = []
      for label in ('cold', 'warm'):
        r = run_child(model, args.device, cache)
        losses.append(r['loss'])
        ph = r['phases']
        other = r['build'] + r['first'] - sum(ph.values())
        print(f"{model:<6s} {args.device:<6s} {label:<5s} {r['kernels']:7d} {r['build'] + r['first']:8.2f} {r['cpu']:7.2f} {ph.get('lower', 0):7.2f} {ph.get('emit', 0):7.2f} "
              f"{ph.get('compile', 0):8.2f} {ph.get('workers', 0):8.2f} {ph.get('store', 0) + ph.get('load', 0):7.2f} {other:7.2f} {r['per_kernel']:7.1f}ms {r['second']:8.3f} {r['loss']:10.6f}", flush=True)
        if r.get('worker_cpu'): print(f"{'':<20s}(workers' CPU s: " + ', '.join(f"{k} {v:.2f}" for k, v in r['worker_cpu'].items()) + ')', flush=True)
      if losses[0] != losses[1]: print(f"{model}: the warm step's loss {losses[1]!r} is not the cold step's {losses[0]!r}", flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
