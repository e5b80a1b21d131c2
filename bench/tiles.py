"""One kernel under several opts lists, timed on a device: how the heuristics' tile choices were measured.

    python bench/tiles.py                                  # the f16 matmul sweep on CUDA (the GPU machine)
    python bench/tiles.py --work 'matmul f32' --device CUDA
    python bench/tiles.py --work 'matmul f16' --opts 'tc:2:0 upcast:0:4 upcast:3:8 local:0:2 local:5:2 unroll:9:4 smem:0:3 smem:1:3'

The workload's kernel is made as a user's call makes it (Tensor API, kernelize); the heuristic's opts come first,
then each variant: the same actions with other amounts (so that every axis number stays valid), or the lists given
with --opts (`name:axis:amt`, space-separated). Each is linearized, compiled and timed by the device on random
buffers (tgc.passes.search.time_kernel: CUDA events, best of --runs after a warm-up); a list that does not apply is
reported, not timed. The table is sorted by rate.
"""
from __future__ import annotations
import argparse, itertools, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tgc import Tensor
from tgc.tensor import _build_module
from tgc.compiler import device_target
from tgc.passes.manager import parse_pipeline, PassManager
from tgc.passes.schedule import Opt, try_opts
from tgc.passes.search import time_kernel
from tgc.runtime import get_device

WORKS = {  # name: (input shapes, dtype, function, flops)
  'matmul f16': ([(4096, 4096)] * 2, 'float16', lambda a, b: a @ b, 2 * 4096 ** 3),
  'matmul bf16': ([(4096, 4096)] * 2, 'bfloat16', lambda a, b: a @ b, 2 * 4096 ** 3),
  'matmul f32': ([(4096, 4096)] * 2, 'float32', lambda a, b: a @ b, 2 * 4096 ** 3),
  # a GPT block's f32 Linears (nn.Linear's weight layout, (out, in)): d 384 to 1536 and back
  'linear f32 384x1536': ([(4096, 384), (1536, 384)], 'float32', lambda x, w: x @ w.T, 2 * 4096 * 384 * 1536),
  'linear f32 1536x384': ([(4096, 1536), (384, 1536)], 'float32', lambda x, w: x @ w.T, 2 * 4096 * 1536 * 384),
  # its weight's gradient, dy.T @ x (k = the 4096 tokens, split in chunks: the kernel timed is the chunks' product)
  'linear bwd dw f32': ([(4096, 1536), (4096, 384)], 'float32', lambda dy, x: dy.T @ x, 2 * 4096 * 1536 * 384),
  'conv2d f16': ([(32, 64, 56, 56), (64, 64, 3, 3)], 'float16', lambda x, w: x.conv2d(w, padding=1), 2 * 32 * 64 * 56 * 56 * 64 * 9),
}


def kernel_of(work: str, device: str):
  """The workload's one reduce kernel (its heuristic opts in place) and the target."""
  shapes, dt, f, _ = WORKS[work]
  xs = [Tensor.empty(*s, dtype=dt, device=device) for s in shapes]
  m, _ = _build_module([f(*xs).node], 'f')
  t = device_target(device)
  lm = getattr(get_device(device), 'local_memory', 0)  # the device's shared memory, as compile_module passes it
  # (tensor-decompose lays a conv out for the device's spec)
  PassManager(parse_pipeline(f'canonicalize,tensor-decompose{{{get_device(device).spec.options()}}},canonicalize,cse,kernelize,kernel-opt{{target={t.name} local_memory={lm}}}')).run(m)
  ks = [op for op in m.ops if op.name == 'kernel.func' and any(o.name == 'kernel.reduce' for o in op.body.ops)]
  size = lambda k: max(math.prod(o.attrs['view'].shape) for o in k.body.ops if o.name == 'kernel.load')
  return max(ks, key=size), t  # (the product's kernel, not the sum of a split's partial products after it)


def variants(base: list, amounts: dict) -> list[list]:
  """The base list with each action named in `amounts` ({name: amounts}) given every combination of those amounts
  (in the order the actions appear; smem's amount, its stages, is one choice for all staged loads)."""
  slots = [i for i, o in enumerate(base) if o.name in amounts and o.name != 'smem']
  smem = [i for i, o in enumerate(base) if o.name == 'smem']
  out = []
  for amts in itertools.product(*[amounts[base[i].name] for i in slots]):
    for st in (amounts.get('smem', (None,)) if smem else (None,)):
      v = list(base)
      for i, a in zip(slots, amts): v[i] = Opt(base[i].name, base[i].fields['axis'], a)
      for i in smem: v[i] = Opt('smem', base[i].fields['axis'], st if st is not None else base[i].fields['amt'])
      if v not in out: out.append(v)
  return out


def parse_opts(text: str) -> list:
  return [Opt(n, int(a), int(m)) for n, a, m in (w.split(':') for w in text.split())]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--work', default='matmul f16', choices=list(WORKS))
  ap.add_argument('--device', default='CUDA')
  ap.add_argument('--runs', type=int, default=5)
  ap.add_argument('--opts', action='append', default=[], help='an opts list to time (name:axis:amt ...); repeatable')
  ap.add_argument('--limit', type=int, default=64, help='time at most this many variants')
  args = ap.parse_args(argv)
  k, t = kernel_of(args.work, args.device)
  base = list(k.attrs.get('opts', ()))
  if args.opts: cands = [base] + [parse_opts(s) for s in args.opts]
  else:  # the tile sweep: warp tiles (upcast), warps a block (local), the k step (unroll) and the stages
    cands = variants(base, {'upcast': (2, 4, 8) if 'conv' in args.work else (4, 8), 'local': (2, 4), 'unroll': (2, 4), 'smem': (3, 4)})
    cands = [base] + [c for c in cands if c != base]
  flops = WORKS[args.work][3]
  rows = []
  for opts in cands[:args.limit]:
    text = ' '.join(f"{o.name}:{o.fields['axis']}:{o.fields['amt']}" for o in opts)
    if try_opts(k, opts, t) is None: rows.append((0.0, text, 'does not apply')); continue
    try: s = time_kernel(k, opts, t.name, args.device, args.runs)
    except Exception as e: rows.append((0.0, text, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}")); continue
    rows.append((flops / s / 1e12, text, f"{s * 1e6:.0f} us" + ('  (heuristic)' if opts is base else '')))
    print(f"{rows[-1][0]:8.1f} TFLOP/s  {rows[-1][2]:>24s}  {text}", flush=True)
  print(f"\n{args.work} on {args.device}: {len(rows)} opts lists, fastest first")
  for r in sorted(rows, key=lambda r: -r[0])[:15]: print(f"{r[0]:8.1f} TFLOP/s  {r[2]:>24s}  {r[1]}")
  return 0


if __name__ == '__main__':
  sys.exit(main())
