"""Where a jitted GPT training step's device memory goes: the allocator's peak (bytes in use) over steps, and the
blocks live at the peak of the step's host schedule, each named by the kernel that writes it.

    python bench/memory.py                          # examples/gpt_train.py's model at bench/models.py's size, CPU
    python bench/memory.py --device CUDA            # the same schedule on the GPU
    python bench/memory.py --config tiny --top 10

The schedule's blocks come from its plan (tgc.compiler.CompiledFunction): each intermediate is allocated before its
first launch and freed after its last, each result allocated before the launch that writes it; the arguments (the
weights, the optimizer's state, the batch) are live throughout. The peak the allocator saw is theirs plus the plan's.
"""
from __future__ import annotations
import argparse, os, sys, time
from collections import Counter
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor
from tgc.nn import optim
from tgc.nn.state import get_parameters
from examples.gpt_train import GPT, train_step
from bench.models import CONFIGS

MiB = 2 ** 20


def plan_peak(cf) -> tuple[int, int, dict]:
  """(the plan's peak bytes above its arguments, the launch at it, {slot: (bytes, writer kernel, is a result)} live there)."""
  _, _, fresh, _, _, _, steps, _ = cf.plan
  writer, live, cur, peak, at, snap = {}, {}, 0, 0, 0, {}
  for i, (k, _, _, idx, allocs, frees) in enumerate(steps):
    if k is not None:
      for j in k.program.written: writer.setdefault(idx[j], k.name)
    for s, nb in allocs: live[s] = nb; cur += nb
    if cur > peak: peak, at, snap = cur, i, dict(live)
    for s, nb in frees: cur -= live.pop(s)
  return peak, at, {s: (nb, writer.get(s, '?'), s in fresh) for s, nb in snap.items()}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--device', default='CPU')
  ap.add_argument('--config', choices=list(CONFIGS), default='default')
  ap.add_argument('--steps', type=int, default=3)
  ap.add_argument('--top', type=int, default=20, help='live blocks listed, the largest first')
  args = ap.parse_args(argv)
  from tgc.runtime import Device
  device = Device.canonicalize(args.device)
  Device.DEFAULT = device
  g = CONFIGS[args.config]['gpt']
  model = GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'])
  params = get_parameters(model)
  opt = optim.AdamW(params, lr=1e-3, eps=1e-8, weight_decay=0.01)
  Tensor.realize(*params, *opt.buffers)
  data = np.random.default_rng(0).integers(0, g['vocab'], (g['batch'], g['seq'] + 1)).astype(np.int32)
  x, y = Tensor(data[:, :-1]).realize(), Tensor(data[:, 1:]).realize()
  step = train_step(model, opt)
  dev = tgc.Device[device]
  al = dev.allocator
  n = sum(p.numel() for p in params)
  print(f"GPT {g} on {device}: {n} parameters ({n * 4 / MiB:.1f} MiB f32); {al.in_use / MiB:.1f} MiB in use before the first step")
  for i in range(args.steps):
    al.peak = al.in_use
    t0 = time.perf_counter()
    loss = step(x, y); dev.synchronize()
    print(f"step {i}: peak {al.peak / MiB:.1f} MiB, {al.in_use / MiB:.1f} MiB in use after it ({time.perf_counter() - t0:.2f} s, loss {loss.item():.4f})")
  cap = next(iter(step.cache.values()))
  for e in cap.log:
    if e[0] != 'realize': continue
    cf = e[1]
    args_bytes = sum(a.numel * a.dtype.itemsize for a in cf.arg_types)
    peak, at, live = plan_peak(cf)
    steps = cf.plan[6]
    print(f"\n@{cf.name}: {len(steps)} launches; arguments {args_bytes / MiB:.1f} MiB; its blocks peak at {peak / MiB:.1f} MiB"
          f" (launch {at}, {steps[at][0].name if steps[at][0] is not None else '-'}): {(args_bytes + peak) / MiB:.1f} MiB with the arguments")
    sizes = Counter(nb for nb, _, _ in live.values())
    print('live blocks by size: ' + ', '.join(f"{c} x {nb / MiB:.2f} MiB" for nb, c in sorted(sizes.items(), key=lambda kv: -kv[0] * kv[1])))
    print('| MiB | written by | result |\n| ---: | --- | --- |')
    for nb, name, res in sorted(live.values(), key=lambda v: -v[0])[:args.top]: print(f"| {nb / MiB:.2f} | `{name}` | {'yes' if res else ''} |")
  return 0


if __name__ == '__main__':
  sys.exit(main())
