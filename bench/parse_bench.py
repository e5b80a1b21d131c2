"""Parse / verify / print throughput of tgc's textual IR, and the start-up of tgc-opt; xdsl for scale.

    python bench/parse_bench.py            # 10k and 100k ops
    python bench/parse_bench.py --quick    # 1k and 10k ops, fewer start-up runs (CI)

Each measurement runs in a fresh child process pinned to one core (no multiprocessing in timing), one
after another: the child reads the module from a file, then times parse (without verification), verify
and print, and reports its peak RSS (ru_maxrss). The round-trip figure is ops / (parse + verify + print)
of the same run; with --repeat N the best of N runs is kept. Start-up is the median wall time of
`tgc-opt EMPTY` (and `xdsl-opt EMPTY`) over --startup-runs runs. The xdsl column parses an equivalent
module of arith.addf / arith.mulf ops (custom form) with xdsl's own parser, verifier and printer.

Targets (tools.md / the perf issue): round trip of 100k ops >= 25,000 ops/s; peak memory <= 300 MB;
tgc-opt start-up on an empty file <= 0.15 s.
"""
from __future__ import annotations
import argparse, json, os, random, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# ---------------------------------------------------------------- module generators
T, P, R, B = 'tensor<4x8xf32>', 'tensor<8x4xf32>', 'tensor<4x1xf32>', 'tensor<4x8xi1>'


def tensor_module(n: int, seed: int = 0) -> str:
  """A func.func of n ops (func.return included) in tensor's custom form: binary (add mul sub max), unary
  (neg exp2), cmplt, where, reduce, reshape, permute and const, each using recent values. Valid."""
  rng = random.Random(seed)
  pools = {T: ['%a', '%b'], P: [], R: [], B: []}
  out = [f"func.func @bench(%a: {T}, %b: {T}) -> {T} {{"]
  k = 0

  def pick(ty):
    p = pools[ty]
    return p[-1 - rng.randrange(min(len(p), 8))]

  def new(ty, text):
    nonlocal k
    name = f"%{k}"; k += 1
    out.append(f"  {name} = {text}")
    pools[ty].append(name)
    if len(pools[ty]) > 64: del pools[ty][:32]

  weights = [('bin', 40), ('un', 12), ('cmp', 6), ('where', 6), ('reduce', 6), ('reshape', 8), ('permute', 8), ('const', 8),
             ('reshape_r', 6)]
  kinds = [w for w, c in weights for _ in range(c)]
  while k < n - 1:
    kind = rng.choice(kinds)
    if kind == 'bin':
      op = rng.choice(('add', 'mul', 'sub', 'max'))
      ty = T if not pools[P] or rng.random() < 0.8 else P
      new(ty, f"tensor.{op} {pick(ty)}, {pick(ty)} : {ty}")
    elif kind == 'un': new(T, f"tensor.{rng.choice(('neg', 'exp2'))} {pick(T)} : {T}")
    elif kind == 'cmp': new(B, f"tensor.cmplt {pick(T)}, {pick(T)} : {T} -> {B}")
    elif kind == 'where' and pools[B]: new(T, f"tensor.where {pick(B)}, {pick(T)}, {pick(T)} : {T}")
    elif kind == 'reduce': new(R, f"tensor.reduce {rng.choice(('add', 'max'))} {pick(T)} [1] : {T} -> {R}")
    elif kind == 'reshape': new(P, f"tensor.reshape {pick(T)} : {T} -> {P}")
    elif kind == 'reshape_r' and pools[R]: new(T, f"tensor.expand {pick(R)} : {R} -> {T}")
    elif kind == 'permute' and pools[P]: new(T, f"tensor.permute {pick(P)} [1, 0] : {P} -> {T}")
    elif kind == 'const': new(T, f"tensor.const {rng.choice(('2.5', '1.0', '-0.5', '3.0e-02'))} : {T}")
  out.append(f"  func.return {pools[T][-1]} : {T}")
  out.append("}")
  return '\n'.join(out) + '\n'


def arith_module(n: int, seed: int = 0) -> str:
  """The same size of module for xdsl: arith.addf / arith.mulf on tensor<4x8xf32>, each on recent values."""
  rng = random.Random(seed)
  pool = ['%a', '%b']
  out = [f"func.func @bench(%a: {T}, %b: {T}) -> {T} {{"]
  for k in range(n - 1):
    x, y = (pool[-1 - rng.randrange(min(len(pool), 8))] for _ in range(2))
    out.append(f"  %{k} = arith.{rng.choice(('addf', 'mulf'))} {x}, {y} : {T}")
    pool.append(f"%{k}")
    if len(pool) > 64: del pool[:32]
  out.append(f"  func.return {pool[-1]} : {T}")
  out.append("}")
  return '\n'.join(out) + '\n'


# ---------------------------------------------------------------- children (one measurement each)
def _pin():
  try: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
  except (AttributeError, OSError): pass

def _maxrss_mb() -> float:
  import resource
  r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return r / (1 << 20) if sys.platform == 'darwin' else r / 1024

def child_tgc(path: str, n: int, out_path: str | None = None):
  _pin()
  import gc
  from tgc.parser import parse
  from tgc.ir.printer import Printer
  with open(path) as f: text = f.read()
  gc.collect()
  t0 = time.perf_counter(); m = parse(text, path, verify=False)
  t1 = time.perf_counter(); m.verify()
  t2 = time.perf_counter(); s = Printer().print_module(m)
  t3 = time.perf_counter()
  if out_path:
    with open(out_path, 'w') as f: f.write(s)
  ops = sum(1 for _ in m.walk()) - len(m.ops)
  return {'ops': ops, 'parse': t1 - t0, 'verify': t2 - t1, 'print': t3 - t2, 'rss': _maxrss_mb()}

def child_xdsl(path: str, n: int, out_path: str | None = None):
  _pin()
  import gc
  from xdsl.context import Context
  from xdsl.dialects.builtin import Builtin
  from xdsl.dialects.func import Func
  from xdsl.dialects.arith import Arith
  from xdsl.parser import Parser
  from xdsl.printer import Printer
  import io
  ctx = Context()
  for d in (Builtin, Func, Arith): ctx.load_dialect(d)
  with open(path) as f: text = f.read()
  gc.collect()
  t0 = time.perf_counter(); m = Parser(ctx, text, path).parse_module()
  t1 = time.perf_counter(); m.verify()
  t2 = time.perf_counter(); buf = io.StringIO(); Printer(stream=buf).print_op(m); s = buf.getvalue()
  t3 = time.perf_counter()
  if out_path:
    with open(out_path, 'w') as f: f.write(s)
  ops = sum(1 for _ in m.walk()) - 2  # module and func.func
  return {'ops': ops, 'parse': t1 - t0, 'verify': t2 - t1, 'print': t3 - t2, 'rss': _maxrss_mb()}


def run_child(which: str, path: str, n: int) -> dict:
  env = dict(os.environ, PYTHONHASHSEED='0')
  p = subprocess.run([sys.executable, os.path.abspath(__file__), '--child', which, path, str(n)], capture_output=True, text=True, env=env, cwd=ROOT)
  if p.returncode != 0: raise RuntimeError(f"{which} child failed:\n{p.stderr[-3000:]}")
  return json.loads(p.stdout.strip().splitlines()[-1])


def best_of(which, path, n, repeat) -> dict:
  runs = [run_child(which, path, n) for _ in range(repeat)]
  best = min(runs, key=lambda r: r['parse'] + r['verify'] + r['print'])
  best = dict(best)
  for k in ('parse', 'verify', 'print'): best[k] = min(r[k] for r in runs)
  best['rt'] = min(r['parse'] + r['verify'] + r['print'] for r in runs)
  best['rss'] = max(r['rss'] for r in runs)
  return best


def startup(cmd: list[str], runs: int) -> float:
  ts = []
  for _ in range(runs):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, preexec_fn=_pin)
    ts.append(time.perf_counter() - t0)
    if p.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.decode()[-2000:]}")
  return statistics.median(ts)


def cli_roundtrip(cmd: list[str]) -> float:
  t0 = time.perf_counter()
  p = subprocess.run(cmd, capture_output=True, preexec_fn=_pin)
  if p.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.decode()[-2000:]}")
  return time.perf_counter() - t0


def have_xdsl() -> bool:
  try:
    import importlib.util
    return importlib.util.find_spec('xdsl') is not None
  except Exception: return False


# ---------------------------------------------------------------- main
def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--quick', action='store_true', help='small sizes (1k, 10k) and 3 start-up runs: for CI')
  ap.add_argument('--sizes', default=None, help='comma-separated op counts (default 10000,100000)')
  ap.add_argument('--repeat', type=int, default=None, help='runs per size; the best is kept (default 3, 1 for >= 100k)')
  ap.add_argument('--startup-runs', type=int, default=None, help='start-up runs; the median is kept (default 10)')
  ap.add_argument('--no-xdsl', action='store_true', help='skip the xdsl comparison')
  ap.add_argument('--cli', action='store_true', help='also time the whole `tgc-opt FILE` / `xdsl-opt FILE` command')
  ap.add_argument('--check', action='store_true', help='exit 1 when a target is missed (largest size only)')
  ap.add_argument('--json', default=None, help='also write the results to this file')
  ap.add_argument('--child', nargs=3, help=argparse.SUPPRESS)
  a = ap.parse_args(argv)
  if a.child:
    which, path, n = a.child
    r = (child_tgc if which == 'tgc' else child_xdsl)(path, int(n))
    print(json.dumps(r)); return 0

  sizes = [int(s) for s in a.sizes.split(',')] if a.sizes else ([1000, 10000] if a.quick else [10000, 100000])
  srun = a.startup_runs or (3 if a.quick else 10)
  xd = not a.no_xdsl and have_xdsl()
  tgc_opt = shutil.which('tgc-opt')
  tgc_cmd = [tgc_opt] if tgc_opt else [sys.executable, '-c', 'import sys; from tgc.driver import opt_entry; opt_entry()']
  xdsl_opt = shutil.which('xdsl-opt') if xd else None
  results = {'sizes': {}, 'startup': {}}
  with tempfile.TemporaryDirectory() as tmp:
    empty = os.path.join(tmp, 'empty.tgc')
    open(empty, 'w').close()
    xempty = os.path.join(tmp, 'empty.mlir')  # xdsl-opt refuses an empty file: the smallest module instead
    with open(xempty, 'w') as f: f.write('builtin.module {}\n')
    for n in sizes:
      rep = a.repeat or (1 if n >= 100_000 else 3)
      tp = os.path.join(tmp, f'tgc_{n}.tgc')
      with open(tp, 'w') as f: f.write(tensor_module(n))
      r = {'tgc': best_of('tgc', tp, n, rep)}
      if a.cli: r['tgc']['cli'] = cli_roundtrip(tgc_cmd + [tp])
      if xd:
        xp = os.path.join(tmp, f'xdsl_{n}.mlir')
        with open(xp, 'w') as f: f.write(arith_module(n))
        try:
          r['xdsl'] = best_of('xdsl', xp, n, rep)
          if a.cli and xdsl_opt: r['xdsl']['cli'] = cli_roundtrip([xdsl_opt, xp])
        except RuntimeError as e: print(f"(xdsl skipped: {str(e).splitlines()[0]})", file=sys.stderr)
      results['sizes'][n] = r
      print(f"  .. {n} ops done", file=sys.stderr, flush=True)
    results['startup']['tgc'] = startup(tgc_cmd + [empty], srun)
    if xdsl_opt: results['startup']['xdsl'] = startup([xdsl_opt, xempty], srun)

  print(render(results))
  try:
    load = os.getloadavg()[0]
    if load > 1.0: print(f"(note: load average {load:.1f} while measuring on {os.cpu_count()} cores: figures are noisy)")
  except OSError: pass
  if a.json:
    with open(a.json, 'w') as f: json.dump(results, f, indent=1)
  if a.check:
    n = max(sizes); t = results['sizes'][n]['tgc']
    ok = t['ops'] / t['rt'] >= 25_000 and t['rss'] <= 300 and results['startup']['tgc'] <= 0.15
    return 0 if ok else 1
  return 0


def render(res) -> str:
  rows = [('metric', 'tgc', 'xdsl', 'tgc/xdsl')]
  def rate(r, k): return r['ops'] / r[k] if r[k] > 0 else float('inf')
  for n, r in res['sizes'].items():
    t, x = r['tgc'], r.get('xdsl')
    for label, key in (('parse', 'parse'), ('verify', 'verify'), ('print', 'print'), ('round trip', 'rt')):
      tv = rate(t, key); xv = rate(x, key) if x else None
      rows.append((f"{n:>7,} ops  {label} (ops/s)", f"{tv:,.0f}", f"{xv:,.0f}" if xv else '-', f"{tv / xv:.2f}" if xv else '-'))
    rows.append((f"{n:>7,} ops  peak RSS (MB)", f"{t['rss']:.0f}", f"{x['rss']:.0f}" if x else '-', f"{t['rss'] / x['rss']:.2f}" if x else '-'))
    if 'cli' in t:
      xc = x.get('cli') if x else None
      rows.append((f"{n:>7,} ops  CLI round trip (s)", f"{t['cli']:.2f}", f"{xc:.2f}" if xc else '-', f"{t['cli'] / xc:.2f}" if xc else '-'))
  su = res['startup']
  xs = su.get('xdsl')
  rows.append(("start-up, empty file (s)", f"{su['tgc']:.3f}", f"{xs:.3f}" if xs else '-', f"{su['tgc'] / xs:.2f}" if xs else '-'))
  w = [max(len(r[i]) for r in rows) for i in range(4)]
  lines = ['  '.join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
  lines.insert(1, '  '.join('-' * x for x in w))
  return '\n'.join(lines)


if __name__ == '__main__':
  sys.exit(main())
