"""kernel-opt{mode=search}: beam search over optimisation actions, timed on the target's device.

Candidates extend each kept opts list by one action (upcast/unroll/local/group of a few amounts, swap of two global axes, on every
axis it applies to); each is lowered and compiled as a compile does it (tgc.lowering.lower) and timed on random
buffers (warm-up, then the best of a few runs), and the `beam` fastest are kept; the search stops when a round finds
nothing faster or the time budget is spent. Results are cached on disk ($TGC_CACHE or ~/.cache/tgc/search.json) by the kernel's text,
the target and the device, so a search repeats byte for byte. Measuring needs a device: this is the one
pass that reaches the runtime (lazily, at run time), in time_kernel below.
"""
from __future__ import annotations
import hashlib, json, math, os, sys, time
from tgc.ir.attrs import Record
from tgc.target import Target, DeviceSpec
from tgc.passes.schedule import OPT_KINDS, MAX_LANES, try_opts

AMOUNTS = {'upcast': (2, 4, 8, 16), 'unroll': (2, 4, 8, 16, 0), 'local': (2, 4, 8, 16, 32), 'group': (4, 16, 64), 'grouptop': (16, 64, 256)}


def _cache_path() -> str:
  d = os.environ.get('TGC_CACHE') or os.path.join(os.path.expanduser('~'), '.cache', 'tgc')
  os.makedirs(d, exist_ok=True)
  return os.path.join(d, 'search.json')

def _load_cache() -> dict:
  try:
    with open(_cache_path()) as f: return json.load(f)
  except (OSError, ValueError): return {}

def _store_cache(key: str, opts) -> None:
  c = _load_cache()
  c[key] = [[o.name, o.fields['axis'], o.fields['amt']] for o in opts]
  tmp = _cache_path() + f'.{os.getpid()}'
  with open(tmp, 'w') as f: json.dump(c, f)
  os.replace(tmp, _cache_path())


def time_kernel(kernel_func, opts, target: str | DeviceSpec, device: str, runs: int = 3) -> float:
  """Seconds one launch of a kernel.func takes with these opts on `device` (best of `runs` after a warm-up, each
  timed by the device: CUDA events on CUDA), on random device buffers of its argument shapes. The kernel is lowered
  and compiled as a compile does it (tgc.lowering.lower, to the binary stage): the code timed is the code that runs."""
  import numpy as np
  from tgc.ir.core import Module
  from tgc.ir.rewrite import clone_op
  from tgc.lowering import lower
  from tgc.runtime import Buffer
  k = clone_op(kernel_func, {})
  k.attrs['opts'] = tuple(opts)
  (prg,) = lower(Module([k]), DeviceSpec.of(target, device=device), 'binary')
  rng = np.random.default_rng(0)
  bufs = []
  for a in kernel_func.body.args:
    t = a.type
    arr = rng.standard_normal(t.numel).astype(t.dtype.np) if t.dtype.is_float and not t.dtype.fmt else np.zeros(t.numel, t.dtype.np)
    bufs.append(Buffer.from_numpy(device, arr, t.dtype))
  args = [b.arg for b in bufs]
  prg.timed_launch(args)
  return min(prg.timed_launch(args) for _ in range(runs))


def candidates(k, opts, t: Target):
  gpu = not t.is_cpu
  ks = try_opts(k, opts, t)
  if ks is None: return []
  out = []
  for name, kind in OPT_KINDS.items():
    if name in ('padto', 'tc') or (name in ('local', 'group', 'grouptop') and not gpu): continue  # tc: the heuristic's, alone
    for ax, kd in enumerate(ks.kinds):
      if kd != kind or ks.full[ax] <= 1: continue
      for amt in (AMOUNTS[name] if name != 'swap' else [b for b in range(ax + 1, len(ks.kinds)) if ks.kinds[b] == 'global' and ks.full[b] > 1]):
        o = Record(name, {'axis': ax, 'amt': amt})
        nk = try_opts(k, list(opts) + [o], t)
        if nk is None: continue
        lanes = math.prod(nk.full[i] for i, kd2 in enumerate(nk.kinds) if kd2 in ('upcast', 'unroll'))
        threads = math.prod(nk.full[i] for i, kd2 in enumerate(nk.kinds) if kd2 in ('local', 'group'))
        if lanes <= MAX_LANES and threads <= 1024: out.append(list(opts) + [o])
  # SMEM: stage a load under the reduce that the work-group's threads share (broadcast along a local axis); under a
  # warpgroup's tc its two operands are staged already, in the tensor cores' layout, and nothing else may be
  if gpu and t.local_memory and ks.axes('local') and not ks.warpgroup:
    below = [op for op in ks.views if op.name == 'kernel.load' and tuple(ks.views[op].shape) == tuple(ks.full)]
    for i, op in enumerate(below):
      if op not in ks.smem and any(ks.strides(op)[a] == 0 for a in ks.axes('local')) and ks.tile_bytes(op) <= t.local_memory:
        out.append(list(opts) + [Record('smem', {'axis': i, 'amt': 0})])
  # SMEM's ring: the staged tiles with 2 to 4 stages (the copies running ahead of the math)
  if ks.smem:
    for n in (2, 3, 4):
      ring = [Record('smem', {'axis': o.fields['axis'], 'amt': n}) if o.name == 'smem' else o for o in opts]
      if ring != list(opts) and try_opts(k, ring, t) is not None and ks.stage_bytes * n <= t.max_local_memory:
        out.append(ring)
  return out


def beam_search(k, spec: DeviceSpec, beam: int, budget: float, start=None):
  t, device = spec.target, spec.runtime_device
  if device is None: return list(start or [])
  text = str(k)
  key = hashlib.sha256(f"{text}|{t.name}|{device}{'|tf32' if spec.has_tf32 else ''}".encode()).hexdigest()  # (TF32: tc on f32 kernels)
  hit = _load_cache().get(key)
  if hit is not None: return [Record(n, {'axis': a, 'amt': m}) for n, a, m in hit]
  t_end = time.perf_counter() + budget
  def measure(opts):
    try: return time_kernel(k, opts, spec, device)
    except Exception: return math.inf
  best = [(measure([]), [])]
  if start:
    best.append((measure(list(start)), list(start)))
  best.sort(key=lambda x: x[0])
  best = best[:beam]
  tried, rounds = 0, 0
  while time.perf_counter() < t_end:
    rounds += 1
    cands = [c for _, o in best for c in candidates(k, o, t)]
    if not cands: break
    scored = []
    for i, c in enumerate(cands):
      if time.perf_counter() >= t_end: break
      scored.append((measure(c), c)); tried += 1
      sys.stderr.write(f"\r  search @{k.attrs['sym_name']}: round {rounds} [{'#' * (20 * (i + 1) // len(cands)):<20}] {tried} tried, best {best[0][0] * 1e6:9.1f} us")
    merged = sorted(best + scored, key=lambda x: x[0])[:beam]
    improved = merged[0][0] < best[0][0]
    best = merged
    if not improved: break
  sys.stderr.write('\n')
  opts = best[0][1]
  _store_cache(key, opts)
  return opts
