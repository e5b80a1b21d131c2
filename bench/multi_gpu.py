"""Several GPUs: all-reduce bus bandwidth, data-parallel GPT-style training, a tensor-parallel MLP; tgc beside torch.

    python bench/multi_gpu.py                         # CUDA: 1, 2 and 4 GPUs (as many as there are)
    python bench/multi_gpu.py --gpus 1,2 --only allreduce,dp
    python bench/multi_gpu.py --device CPU --gpus 1,2 --small   # a smoke run on CPU:0, CPU:1 (no torch columns)

1. **All-reduce** of f32 buffers by size, bus bandwidth (NCCL's definition: 2(n-1)/n * bytes / time) on n GPUs:
   tgc driving all GPUs from one process (one NCCL group a call), tgc with one process a GPU (tgc.distributed),
   and torch.distributed (one process a GPU) -- the last two in the same worker processes, launched here.
2. **Data-parallel training** of a GPT-style model (4 layers, d 384, 6 heads, seq 256, f32, AdamW; batch 16 a GPU),
   the step a Tensor.jit, in two modes: "one process" (the weights replicated with `to_`, the batch sharded with
   `shard(axis=0)`, every GPU driven from this process) and "process a GPU" (tgc.distributed, one worker process a
   GPU launched here: the whole model on CUDA:rank, the rank's slice of the batch, the gradients averaged by
   all_reduce_coalesced inside the jitted step). Steps/s on 1, 2 and 4 GPUs and the scaling of samples/s over one
   GPU; the losses of the first steps checked against one GPU training on the same global batch (within 1e-5
   relative).
3. **Tensor-parallel MLP** (d 1024, hidden 4096, 4096 tokens, f32): the first layer split by columns, the second by
   rows (one all-reduce forward, one backward), forward + backward time and its match with one GPU.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set here for every process (tgc sets it too when it loads NCCL).
"""
from __future__ import annotations
import argparse, json, math, os, subprocess, sys, time
os.environ.setdefault('NCCL_NVLS_ENABLE', '0')  # (before torch or tgc opens NCCL, in this process and its workers)
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tgc import Tensor, nn
from tgc.nn import optim
from tgc.nn.state import get_parameters

SIZES = [1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


def busbw(nbytes: int, n: int, sec: float) -> float: return 2 * (n - 1) / n * nbytes / sec / 1e9


def sync_all(devs) -> None:
  from tgc.runtime import get_device
  for d in devs: get_device(d).synchronize()


# ---------------------------------------------------------------- 1. all-reduce

def allreduce_tgc(devs, nbytes: int, iters: int) -> float:
  """Seconds per all-reduce of `nbytes` f32 on `devs` from this process (one NCCL group a call)."""
  from tgc.runtime import Buffer
  from tgc.runtime.collectives import for_devices
  from tgc.ir import dtypes as D
  eng = for_devices(devs)
  bufs = [Buffer(d, nbytes // 4, D.f32) for d in devs]
  for _ in range(3): eng.allreduce(bufs)
  sync_all(devs)
  t0 = time.perf_counter()
  for _ in range(iters): eng.allreduce(bufs)
  sync_all(devs)
  return (time.perf_counter() - t0) / iters


def worker() -> None:
  """One rank (run by `procs_allreduce`): torch.distributed and tgc.distributed all-reduces; rank 0 prints JSON."""
  import torch, torch.distributed as tdist
  import tgc.distributed as dist
  rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
  sizes, iters = json.loads(os.environ['BENCH_SIZES']), int(os.environ['BENCH_ITERS'])
  torch.cuda.set_device(rank)
  tdist.init_process_group('nccl', rank=rank, world_size=world, device_id=torch.device('cuda', rank))
  g = dist.init(backend='nccl', master_port=int(os.environ['MASTER_PORT']) + 1, timeout=120)
  from tgc.runtime import Buffer
  from tgc.ir import dtypes as D
  res = {}
  for nbytes in sizes:
    x = torch.ones(nbytes // 4, device='cuda')
    for _ in range(3): tdist.all_reduce(x)
    torch.cuda.synchronize(); tdist.barrier(); t0 = time.perf_counter()
    for _ in range(iters): tdist.all_reduce(x)
    torch.cuda.synchronize(); t_torch = time.perf_counter() - t0
    del x
    b = Buffer(g.device, nbytes // 4, D.f32)
    for _ in range(3): g.engine.run([('allreduce', 'add', [b])])
    sync_all([g.device]); g.barrier(); t0 = time.perf_counter()
    for _ in range(iters): g.engine.run([('allreduce', 'add', [b])])
    sync_all([g.device]); t_tgc = time.perf_counter() - t0
    res[nbytes] = (t_torch / iters, t_tgc / iters)
  if rank == 0: print('RESULT ' + json.dumps(res), flush=True)
  dist.destroy(); tdist.destroy_process_group()


def procs_allreduce(n: int, sizes, iters: int, timeout: float) -> dict:
  """torch.distributed and tgc.distributed, one process a GPU: {bytes: (torch s, tgc s)}."""
  outs = launch_ranks(n, ['--worker'], {'BENCH_SIZES': json.dumps(sizes), 'BENCH_ITERS': str(iters)}, timeout)
  for line in outs[0].splitlines():
    if line.startswith('RESULT '): return {int(k): v for k, v in json.loads(line[7:]).items()}
  print(f"  (the per-process run failed:\n{outs[0][-3000:]})")
  return {}


def bench_allreduce(args, ns) -> None:
  print("\n## All-reduce, f32, bus bandwidth GB/s (NCCL's definition)\n")
  for n in ns:
    if n < 2: continue
    devs = tuple(f"{args.device}:{i}" for i in range(n))
    sizes = [s for s in SIZES if s <= args.max_bytes]
    procs = procs_allreduce(n, sizes, args.iters, args.timeout) if args.device == 'CUDA' and not args.no_torch else {}
    print(f"\n| devices | size | tgc one process | tgc process a GPU | torch.distributed | tgc one process / torch | tgc process a GPU / torch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for nbytes in sizes:
      t = allreduce_tgc(devs, nbytes, args.iters if nbytes >= (64 << 20) else 4 * args.iters)
      tt, tp = procs.get(nbytes, (None, None))
      col = lambda s: f"{busbw(nbytes, n, s):7.1f}" if s else '-'
      ratio = lambda s: f"{tt / s:5.2f}" if tt and s else '-'
      print(f"| {n} | {nbytes >> 20:5d} MiB | {col(t)} | {col(tp)} | {col(tt)} | {ratio(t)} | {ratio(tp)} |")


# ---------------------------------------------------------------- 2. data-parallel GPT-style training

class Block:
  def __init__(self, d: int, heads: int):
    self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
    self.qkv, self.proj, self.fc, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
  def __call__(self, x: Tensor) -> Tensor:
    B, T, C = x.shape
    q, k, v = [t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, dim=2)]
    x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
    return x + self.out(self.fc(self.ln2(x)).gelu())

class GPT:
  def __init__(self, vocab: int, seq: int, d: int, layers: int, heads: int):
    self.tok, self.pos = nn.Embedding(vocab, d), Tensor.uniform(seq, d, low=-0.02, high=0.02)
    self.blocks, self.ln, self.head = [Block(d, heads) for _ in range(layers)], nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
  def __call__(self, idx: Tensor) -> Tensor:
    x = self.tok(idx) + self.pos
    for b in self.blocks: x = b(x)
    return self.head(self.ln(x))


def gpt_trainer(cfg, devs, weights, global_batch: int, seed: int = 0, group=None):
  """A jitted AdamW step of a GPT on one device (devs a name) or data-parallel on a tuple; the weights given as
  numpy arrays (the same for every run); the data: the first `global_batch` rows of one fixed draw. With `group`
  (a tgc.distributed process group, devs its device): this rank's slice of those rows, the gradients and the loss
  averaged over the ranks (one all_reduce_coalesced, recorded by the jit) before the optimizer step."""
  Tensor.manual_seed(0)
  model = GPT(cfg['vocab'], cfg['seq'], cfg['d'], cfg['layers'], cfg['heads'])
  params = get_parameters(model)
  one = devs if isinstance(devs, str) else devs[0]
  for p, w in zip(params, weights):
    t = Tensor(w, device=one)
    if not isinstance(devs, str): t = t.to(devs)
    p.node = t.node
  opt = optim.AdamW(params, lr=1e-3)
  rng = np.random.default_rng(seed)
  data = rng.integers(0, cfg['vocab'], (global_batch, cfg['seq'] + 1)).astype(np.int32)
  if group is not None: data = np.array_split(data, group.world_size)[group.rank]
  x, y = Tensor(data[:, :-1], device=one), Tensor(data[:, 1:], device=one)
  if not isinstance(devs, str): x, y = x.shard(devs, 0), y.shard(devs, 0)
  @Tensor.jit
  def step(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    if group is not None: group.all_reduce_coalesced([*(p.grad for p in params if p.grad is not None), loss], 'avg')
    Tensor.realize(loss, *opt.schedule_step())
    return loss
  return lambda: step(x, y)


def dp_config(args) -> dict:
  return dict(vocab=512, seq=256, d=384, layers=4, heads=6, batch=16) if not args.small else dict(vocab=64, seq=16, d=32, layers=2, heads=2, batch=4)


def gpt_weights(cfg) -> list:
  """The model's initial weights as numpy arrays: the same in every process (the same seed)."""
  Tensor.manual_seed(0)
  return [p.numpy() for p in get_parameters(GPT(cfg['vocab'], cfg['seq'], cfg['d'], cfg['layers'], cfg['heads']))]


def timed_dp(step, args, barrier=lambda: None):
  """(first steps' seconds (compile), their losses, steps/s after 2 more warm-up steps); `barrier` before and
  after the timed loop (the ranks of a process group start and end it together)."""
  t0 = time.perf_counter()
  losses = [step().item() for _ in range(max(1, args.check_steps))]
  first = time.perf_counter() - t0
  for _ in range(2): step()
  step().item(); barrier()
  t0 = time.perf_counter()
  for _ in range(args.steps): last = step()
  last.item(); barrier()
  return first, losses, args.steps / (time.perf_counter() - t0)


def dp_worker(args) -> None:
  """One rank of data-parallel training, one process a device (run by `procs_dp`): the whole model on this
  rank's device, this rank's slice of the global batch; rank 0 prints JSON (first, losses, steps/s)."""
  import tgc.distributed as dist
  rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
  cuda = args.device == 'CUDA'
  g = dist.init(backend='nccl' if cuda else 'host', device=f"CUDA:{rank}" if cuda else 'CPU', timeout=float(os.environ.get('BENCH_TIMEOUT', '240')))
  cfg = dp_config(args)
  step = gpt_trainer(cfg, g.device, gpt_weights(cfg), cfg['batch'] * world, group=g)
  first, losses, sps = timed_dp(step, args, g.barrier)
  if rank == 0: print('RESULT ' + json.dumps({'first': first, 'losses': losses, 'sps': sps}), flush=True)
  dist.destroy()


def launch_ranks(n: int, argv: list, env: dict, timeout: float) -> list[str]:
  """Runs this script with `argv` in n processes (RANK 0..n-1, torchrun's variables; NVLink multicast off);
  each one's output (a process past `timeout` seconds is killed)."""
  import socket
  with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
  env = {**os.environ, **env, 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(port), 'WORLD_SIZE': str(n), 'NCCL_NVLS_ENABLE': '0'}
  procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(n)]
  outs, until = [], time.monotonic() + timeout
  for p in procs:
    try: out, _ = p.communicate(timeout=max(1.0, until - time.monotonic()))
    except subprocess.TimeoutExpired: p.kill(); out = (p.communicate(timeout=30)[0] or '') + f'\n(timed out after {timeout:g} s)'
    outs.append(out)
  return outs


def procs_dp(args, n: int) -> dict | None:
  """Data-parallel training with one process a device: rank 0's {first, losses, sps}, None if the run failed."""
  argv = ['--dp-worker', '--device', args.device, '--steps', str(args.steps), '--check-steps', str(args.check_steps)] + ['--small'] * args.small
  outs = launch_ranks(n, argv, {'BENCH_TIMEOUT': str(max(10.0, args.timeout - 30))}, args.timeout)
  for line in outs[0].splitlines():
    if line.startswith('RESULT '): return json.loads(line[7:])
  bad = next((o for o in outs if 'Error' in o or 'timed out' in o), outs[0])
  print(f"  (the run of a process a device failed:\n{bad[-3000:]})")
  return None


def bench_dp(args, ns) -> None:
  cfg = dp_config(args)
  print(f"\n## Data-parallel GPT-style training (layers {cfg['layers']}, d {cfg['d']}, heads {cfg['heads']}, seq {cfg['seq']}, "
        f"vocab {cfg['vocab']}, f32, AdamW; batch {cfg['batch']} a device)\n")
  print("one process: every device driven from this process (a sharded batch, one graph partitioned per device); "
        "process a device: one process a device (tgc.distributed, gradients averaged by all_reduce_coalesced)\n")
  weights = gpt_weights(cfg)
  base = None
  print("| devices | mode | global batch | first step s (compile) | steps/s | samples/s | scaling (samples/s over 1) | losses vs one device (same global batch) |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- |")
  for n in ns:
    devs = args.device if n == 1 else tuple(f"{args.device}:{i}" for i in range(n))
    gb = cfg['batch'] * n
    want = None
    if n > 1 and args.check_steps:
      one = gpt_trainer(cfg, args.device, weights, gb)
      want = [one().item() for _ in range(args.check_steps)]
      del one
    def row(mode, first, losses, sps):
      nonlocal base
      if n == 1: base = sps
      check = '-'
      if want:
        rel = max(abs(a - b) / abs(b) for a, b in zip(losses, want))
        check = f"max rel {rel:.1e} {'ok' if rel <= 1e-5 else 'OFF'}"
      scale = f"{sps * n / base:5.2f}x" if base else '-'
      print(f"| {n} | {mode} | {gb} | {first:6.1f} | {sps:7.2f} | {sps * gb:8.1f} | {scale} | {check} |")
    step = gpt_trainer(cfg, devs, weights, gb)
    row('one process', *timed_dp(step, args))
    del step
    if n > 1:
      res = procs_dp(args, n)
      if res: row(f'process a {"GPU" if args.device == "CUDA" else "device"}', res['first'], res['losses'], res['sps'])


# ---------------------------------------------------------------- 3. tensor-parallel MLP

def bench_tp(args, ns) -> None:
  d, h, tokens = (1024, 4096, 4096) if not args.small else (64, 256, 64)
  print(f"\n## Tensor-parallel MLP (d {d}, hidden {h}, {tokens} tokens, f32): column-split, gelu, row-split; forward + backward\n")
  rng = np.random.default_rng(0)
  w1, w2 = (rng.standard_normal((d, h)) / math.sqrt(d)).astype(np.float32), (rng.standard_normal((h, d)) / math.sqrt(h)).astype(np.float32)
  x = rng.standard_normal((tokens, d)).astype(np.float32)
  ref = None
  print("| devices | ms a step | speed-up over 1 | max abs diff vs one device (out, grads) |")
  print("| --- | --- | --- | --- |")
  for n in ns:
    devs = args.device if n == 1 else tuple(f"{args.device}:{i}" for i in range(n))
    place = (lambda a, ax: Tensor(a, device=args.device)) if n == 1 else (lambda a, ax: Tensor(a, device=args.device).shard(devs, ax))
    W1, W2, X = place(w1, 1), place(w2, 0), place(x, None)
    W1.requires_grad = W2.requires_grad = True
    @Tensor.jit
    def step(X):
      W1.grad = W2.grad = None
      out = (X @ W1).gelu() @ W2
      out.square().mean().backward()
      Tensor.realize(out, W1.grad, W2.grad)
      return out, W1.grad, W2.grad
    res = [r.numpy() for r in step(X)]
    for _ in range(2): step(X)
    step(X)[0].numpy()
    t0 = time.perf_counter()
    for _ in range(args.steps): o = step(X)
    o[0].numpy()
    ms = (time.perf_counter() - t0) / args.steps * 1e3
    if n == 1: ref, base = res, ms
    diff = max(float(np.abs(a - b).max()) for a, b in zip(res, ref)) if ref is not None else float('nan')
    print(f"| {n} | {ms:8.2f} | {base / ms:5.2f}x | {diff:.1e} |")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--device', default='CUDA', help="CUDA (GPUs CUDA:0..n-1) or CPU (a smoke run on CPU:0..n-1)")
  ap.add_argument('--gpus', default=None, help="device counts, e.g. 1,2,4 (default: 1, 2, 4 up to the GPUs there are)")
  ap.add_argument('--only', default='allreduce,dp,tp')
  ap.add_argument('--steps', type=int, default=10)
  ap.add_argument('--check-steps', type=int, default=3, help="steps whose losses are compared with one device (0: no check, no extra compile)")
  ap.add_argument('--iters', type=int, default=10)
  ap.add_argument('--max-bytes', type=int, default=1 << 30)
  ap.add_argument('--small', action='store_true', help="small shapes (a smoke run)")
  ap.add_argument('--no-torch', action='store_true')
  ap.add_argument('--timeout', type=float, default=300, help="seconds a run of one process a device may take (then it is killed)")
  ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
  ap.add_argument('--dp-worker', action='store_true', help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  sys.stdout.reconfigure(line_buffering=True)  # (rows appear as they are measured: a run cut short keeps them)
  args.device = args.device.upper()
  if args.worker: worker(); return 0
  if args.dp_worker: dp_worker(args); return 0
  if args.gpus: ns = [int(v) for v in args.gpus.split(',')]
  elif args.device == 'CUDA':
    import pycuda.driver as cuda
    cuda.init()
    ns = [n for n in (1, 2, 4, 8) if n <= cuda.Device.count()]
  else: ns = [1, 2]
  if args.device == 'CUDA':
    from tgc.runtime import nccl
    print(f"NCCL {'.'.join(map(str, nccl.version()))} ({nccl.library_path()}), NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}")
  only = set(args.only.split(','))
  if 'allreduce' in only: bench_allreduce(args, ns)
  if 'dp' in only: bench_dp(args, ns)
  if 'tp' in only: bench_tp(args, ns)
  return 0


if __name__ == '__main__':
  sys.exit(main())
