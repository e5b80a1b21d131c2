"""Mutation fuzzer of the tools over the lit_tests/ and examples/ corpus, at every level of the pipeline.

`python -m fuzz.mutate --seed 1 --seconds 600 --out fuzz-out`. The corpus is every chunk of a file (a file, or one
`// -----` part of a split file), and each valid chunk with a func.func also lowered to the kernel level (kernelize)
and to the uop level (lower-to-uop), so that mutants of kernel ASTs, host schedules and uop.funcs come from real
ones. A mutant is a chunk changed in one to four places: a number made interesting (0, -1, 2**31, 2**64, a 40-digit
one, nan, inf, -0.0 ...), a size moved near its value or a list of sizes made longer or shorter (fuzz.hostile: a
launch's global_size, a special's extent, a buffer's declared size, a view's shape, strides and mask, a type's
dimensions), a name, type, op or attribute swapped for another from the corpus, a value reference swapped, a token
or line deleted, duplicated or moved, a line taken from another file, a file cut short.
Each mutant goes through the tools, driven in-process (in the crash-isolated child, its host buffers between guard
pages: fuzz.guard_pages): tgc-opt (parse, verify, print; the printed text must parse again), tgc-opt with pass
pipelines, tgc-translate to every target, and tgc-run on a device. Every call must succeed, or exit 1 with a
diagnostic at a place (`file:line:col: error:`) or naming the tool (`tgc-opt: error:`, for what has no place);
exit 3 (an internal error), a Python traceback, another exit status, a signal or a hang is a finding. A small
mutant that runs is also run on the reference interpreter and on CPU or C with the same inputs: they must agree
(`mismatch` otherwise).
"""
from __future__ import annotations
import glob, io, os, re, sys
from fuzz.hostile import mutate_text

NAME = 'mutate'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ('llvm', 'c', 'opencl', 'cuda', 'metal')
PIPELINES = ('canonicalize,cse,dce', 'kernelize', 'canonicalize,tensor-decompose,canonicalize,kernelize,kernel-opt,linearize,uop-simplify',
             'lower-to-uop', 'lower-to-uop{target=cuda}', 'lower-to-uop{noopt=true}', 'lower-to-uop{target=metal},devectorize',
             'linearize{target=opencl}', 'uop-simplify,decompose-transcendentals,devectorize,cse,dce', 'kernel-opt{mode=search budget=0.2}')
RUN_DEVICES = ('CPU', 'INTERP', 'C')
NUMBERS = ('0', '1', '-1', '2', '3', '7', '16', '255', '256', '65536', '2147483647', '2147483648', '-2147483648', '4294967296',
           '9223372036854775807', '9223372036854775808', '18446744073709551616', '1' + '0' * 40, '-0.0', '0.5', '1.0e300', '1e309',
           'nan', 'inf', '-inf', '0x7fc00000', '0xffffffffffffffffffff')
_TOKEN = re.compile(r'%[\w.$-]+|@[\w.$-]+|0x[0-9a-fA-F]+|-?\d+\.\d*(?:e[+-]?\d+)?|-?\d+(?:e[+-]?\d+)?|[A-Za-z_][\w.]*|"[^"\n]*"|\S')
_CORPUS: list[str] | None = None
_VALID = 0  # the first _VALID chunks of the corpus expect no error
_VOCAB: dict[str, list[str]] | None = None
MAX_RUN_ELEMENTS = 1 << 20


LOWERINGS = ('canonicalize,tensor-decompose,canonicalize,kernelize', 'lower-to-uop')  # the kernel and uop levels


def corpus(levels: bool = True) -> list[str]:
  """Every chunk of every .tgc file under lit_tests/ and examples/, comment lines dropped; with `levels`, each valid
  one with a func.func also lowered to the kernel and the uop level (valid chunks first: the first _VALID)."""
  global _CORPUS, _VALID
  if _CORPUS is None:
    chunks = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'lit_tests', '**', '*.tgc'), recursive=True) + glob.glob(os.path.join(ROOT, 'examples', '*.tgc'))):
      with open(path) as f: text = f.read()
      for ch in re.split(r'^// -----.*$', text, flags=re.M):
        body = '\n'.join(l for l in ch.split('\n') if not l.lstrip().startswith('//') and l.strip())
        if body.strip(): chunks.append((body + '\n', 'expected-' in ch))
    valid = [c for c, bad in chunks if not bad]
    if levels: valid += _lowered(valid)
    _CORPUS = valid + [c for c, bad in chunks if bad]
    _VALID = len(valid)
  return _CORPUS


def _lowered(chunks: list[str]) -> list[str]:
  """The chunks with a func.func lowered to each level of LOWERINGS (a few seconds, the same every time)."""
  from tgc.parser import parse
  from tgc.passes.manager import PassManager, parse_pipeline
  out = []
  for ch in chunks:
    if 'func.func' not in ch or _too_big(ch): continue
    for p in LOWERINGS:
      try:
        m = parse(ch, 'corpus.tgc'); PassManager(parse_pipeline(p)).run(m)
      except Exception: continue  # (a chunk a pipeline refuses, or one for a device: its text level is there)
      out.append(str(m))
  return out


def vocab() -> dict[str, list[str]]:
  global _VOCAB
  if _VOCAB is None:
    v: dict[str, set] = {'op': set(), 'word': set(), 'value': set(), 'sym': set(), 'line': set()}
    for ch in corpus():
      for t in _TOKEN.findall(ch):
        if re.fullmatch(r'[a-z_]+\.[a-z_]+', t): v['op'].add(t)
        elif re.fullmatch(r'[A-Za-z_]\w*', t): v['word'].add(t)
        elif t.startswith('%'): v['value'].add(t)
        elif t.startswith('@'): v['sym'].add(t)
      v['line'].update(l for l in ch.split('\n') if l.strip())
    _VOCAB = {k: sorted(s) for k, s in v.items()}
  return _VOCAB


def _mutate_once(r, text: str) -> str:
  toks = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]
  lines = text.split('\n')
  kind = r.choice(('number', 'number', 'number', 'word', 'op', 'op', 'value', 'value', 'delete-token', 'dup-token', 'delete-line', 'dup-line',
                   'swap-lines', 'foreign-line', 'truncate', 'type', 'type', 'type', 'char', 'size', 'size', 'size', 'size', 'size'))
  if kind == 'size': return mutate_text(r, text)
  V = vocab()
  def replace(pred, choices):
    cand = [t for t in toks if pred(t[2])]
    if not cand: return text
    s, e, _ = r.choice(cand)
    return text[:s] + r.choice(choices) + text[e:]
  if kind == 'number': return replace(lambda t: re.fullmatch(r'-?[\d.]+(e[+-]?\d+)?|0x\w+', t) is not None, NUMBERS)
  if kind == 'word': return replace(lambda t: re.fullmatch(r'[A-Za-z_]\w*', t) is not None, V['word'])
  if kind == 'op': return replace(lambda t: '.' in t and t[0].isalpha(), V['op'])
  if kind == 'value': return replace(lambda t: t.startswith('%'), V['value'] + [t for _, _, t in toks if t.startswith('%')] * 3)
  if kind == 'type': return replace(lambda t: re.fullmatch(r'(i|u|f|bf)\d+', t) is not None, ['i1', 'i8', 'i16', 'i32', 'i64', 'u8', 'u32', 'u64', 'f16', 'bf16', 'f32', 'f64', 'index'])
  if kind == 'char': pos = r.randrange(len(text) + 1); return text[:pos] + r.choice('{}()[]<>,:=%@"x0-.\n\\') + text[pos:]
  if kind in ('delete-token', 'dup-token') and toks:
    s, e, t = r.choice(toks)
    return text[:s] + text[e:] if kind == 'delete-token' else text[:s] + t + ' ' + text[s:]
  if kind == 'truncate': return text[:r.randrange(len(text) + 1)]
  i = r.randrange(len(lines))
  if kind == 'delete-line': del lines[i]
  elif kind == 'dup-line': lines.insert(r.randrange(len(lines) + 1), lines[i])
  elif kind == 'swap-lines':
    j = r.randrange(len(lines)); lines[i], lines[j] = lines[j], lines[i]
  elif kind == 'foreign-line': lines.insert(i, r.choice(V['line']))
  return '\n'.join(lines)


def generate(r):
  c = corpus()
  text = r.choice(c[:_VALID] if r.random() < 0.85 else c)  # mostly mutants of valid input: they get further
  for _ in range(r.choice((1, 1, 1, 1, 2, 2, 3, 4))): text = _mutate_once(r, text)
  return {'text': text, 'pipeline': r.choice(PIPELINES), 'targets': r.sample(TARGETS, 2), 'device': r.choice(RUN_DEVICES),
          'noopt': r.random() < 0.3, 'run': r.random() < 0.5}


def shrink(case):
  """Fewer lines (halves, then one at a time), then fewer stages."""
  lines = case['text'].split('\n')
  n = len(lines)
  step = max(n // 2, 1)
  while step >= 1:
    for s in range(0, n, step):
      yield dict(case, text='\n'.join(lines[:s] + lines[s + step:]))
    step //= 2


# ---------------------------------------------------------------- running
_LOCATED = re.compile(r'^(?:[^\n:]+:\d+:\d+: (?:error|warning|note): |tgc-(?:opt|translate|run): error: )', re.M)


def setup() -> str:
  import tgc.driver, tgc.parser  # noqa: F401  (imported once: the child's cost, not each case's)
  from tgc.passes import manager  # noqa: F401
  return f"{len(corpus(levels=False))} corpus chunks and their lowerings, {len(PIPELINES)} pipelines, targets {', '.join(TARGETS)}, run on {', '.join(RUN_DEVICES)}"


def call(main, argv) -> tuple[int, str, str]:
  """A tool's main() in this process: (exit status, stdout, stderr)."""
  out, err = io.StringIO(), io.StringIO()
  so, se = sys.stdout, sys.stderr
  sys.stdout, sys.stderr = out, err
  try:
    try: rc = main(argv)
    except SystemExit as e: rc = e.code if isinstance(e.code, int) else 1
  finally: sys.stdout, sys.stderr = so, se
  return rc, out.getvalue(), err.getvalue()


def _judge(stage: str, rc: int, err: str) -> tuple[str, str | None]:
  if 'Traceback (most recent call last)' in err: return 'traceback', f"{stage}: a Python traceback:\n{err[-3000:]}"
  if rc == 0: return 'ok', None
  if rc == 1:
    if _LOCATED.search(err): return 'diagnosed', None
    return 'unlocated', f"{stage}: exit 1 without a diagnostic at a place: {err.strip()[:500]}"
  if rc == 3: return 'internal', f"{stage}: exit 3: {err.strip()[:1500]}"
  return f"exit{rc}", f"{stage}: exit status {rc}: {err.strip()[:1500]}"


def _too_big(text: str) -> bool:
  for m in re.finditer(r'(?:tensor|buf)<([\dx]+)x?[a-z]', text):
    n = 1
    for d in m.group(1).split('x'):
      if d: n *= int(d) if len(d) < 12 else 1 << 40
    if n > MAX_RUN_ELEMENTS: return True
  return False


def run(case):
  from tgc import driver
  text = case['text']
  path = os.path.join(_tmpdir(), 'mutant.tgc')
  with open(path, 'w') as f: f.write(text)
  rc, out, err = call(driver.opt_main, [path])
  res = _judge('tgc-opt mutant.tgc', rc, err)
  if res[1] is not None or rc != 0: return res[0] if res[1] else 'rejected', res[1]
  # the printed form parses back to itself
  with open(path + '.printed', 'w') as f: f.write(out)
  rc2, out2, err2 = call(driver.opt_main, [path + '.printed'])
  if rc2 != 0 or out2 != out:
    return 'roundtrip', f"tgc-opt's output does not parse back to itself (exit {rc2}): {err2.strip()[:800]}\n--- printed:\n{out[:1500]}"
  # (--allow-idle-passes: a pipeline of another level than the mutant's still runs, as a warning)
  stages = [(f"tgc-opt mutant.tgc -p '{case['pipeline']}' --allow-idle-passes", driver.opt_main, [path, '-p', case['pipeline'], '--allow-idle-passes'])]
  for t in case['targets']:
    stages.append((f"tgc-translate mutant.tgc --target={t}{' --noopt' if case['noopt'] else ''}", driver.translate_main,
                   [path, f'--target={t}'] + (['--noopt'] if case['noopt'] else [])))
  if case['run'] and not _too_big(text) and 'func.func' in text:
    stages.append((f"tgc-run mutant.tgc --device={case['device']}", driver.run_main, [path, f"--device={case['device']}"]))
  worst = 'accepted'
  for name, main, argv in stages:
    rc, out, err = call(main, argv)
    res = _judge(name, rc, err)
    if res[1] is not None: return res
    if res[0] == 'diagnosed': worst = 'accepted, later diagnosed'
    elif name.startswith('tgc-run') and _small(text):
      bad = _differ(text, case['device'] if case['device'] != 'INTERP' else 'CPU')
      if bad: return 'mismatch', bad
  return worst, None


MAX_DIFF_ELEMENTS = 4096  # the reference interpreter runs a point at a time


def _small(text: str) -> bool:
  """Few enough elements and launch points for the interpreter (a point at a time, in Python)."""
  points = 1
  for m in re.finditer(r'(?:global_size|local_size) = \[([\d, ]*)\]|uop\.special \w+ (\d+)', text):
    for d in re.findall(r'\d+', m.group(0).split('=')[-1] if m.group(1) is not None else m.group(2)):
      points *= min(int(d), 1 << 40)
  if points > (1 << 16): return False
  total = 0
  for m in re.finditer(r'tensor<([\dx]*?)x?[a-z]', text):
    n = 1
    for d in m.group(1).split('x'):
      if d: n *= int(d) if len(d) < 7 else 1 << 40
    total += n
  return total <= MAX_DIFF_ELEMENTS


def _differ(text: str, device: str) -> str | None:
  """How the reference interpreter's results and the device's differ on the same inputs (None: they agree, or one
  of them refuses the module with a TgcError, which tgc-run has reported already)."""
  import tgc
  from tgc.errors import TgcError
  from tgc.parser import parse
  from fuzz.ir import _inputs, _same
  res = {}
  for d in ('INTERP', device):
    try:
      fn = tgc.compile(parse(text, 'mutant.tgc'), d)
      res[d] = (fn(*_inputs(fn, 1)), fn.result_types)
    except TgcError: return None
  for i, (g, w, t) in enumerate(zip(res[device][0], res['INTERP'][0], res['INTERP'][1])):
    err = _same(g, w, t.dtype)
    if err: return f"tgc-run mutant.tgc --device={device} and --device=INTERP disagree: result {i} ({t}): {err}"


_TMP = None
def _tmpdir():
  global _TMP
  if _TMP is None:
    import tempfile
    _TMP = tempfile.mkdtemp(prefix='tgc-mutate-')
  return _TMP


def reproducer(case):
  """The mutant, then (at its end, so that line numbers stay) the commands it went through."""
  cmds = ["tgc-opt repro.tgc", f"tgc-opt repro.tgc -p '{case['pipeline']}' --allow-idle-passes"] + [f"tgc-translate repro.tgc --target={t}{' --noopt' if case['noopt'] else ''}" for t in case['targets']]
  cmds += [f"tgc-run repro.tgc --device={case['device']}"] if case['run'] else []
  return 'tgc', case['text'].rstrip('\n') + '\n// found by fuzz/mutate.py (finding.txt names the failing command) after, in this folder:\n' + ''.join(f"//   {c}\n" for c in cmds)


if __name__ == '__main__':
  from fuzz.harness import main
  sys.exit(main(sys.modules[__name__]))
