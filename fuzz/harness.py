"""What the three fuzzers share: cases made from (seed, index), run in a child process that a crash or a hang
cannot take the fuzzer down with, outcomes counted by class, and one minimised reproducer per distinct failure.

A fuzzer is a module with
  NAME                        the command's name (`python -m fuzz.tensor`)
  generate(rng) -> case       a JSON-able case from a random.Random
  setup() -> str              (in the child, once) makes ready what every case needs; a line for the summary
  run(case) -> (outcome, msg) (in the child) outcome counts in the summary; msg is None, or the failure's message
  shrink(case) -> iterable    smaller cases to try while minimising a failure
  reproducer(case) -> (ext, text)  the file a person runs to see the failure again
The child reads one case a line on stdin and answers one JSON line on a descriptor of its own; a case that
kills the child (a signal, an abort, an exit) or outlives its time is a finding of its own.
"""
from __future__ import annotations
import argparse, hashlib, json, os, random, re, select, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 200  # cases per child process: a fresh process now and then, caches shared within a batch as a user's are


def signature(outcome: str, msg: str) -> str:
  """What tells two failures apart: the outcome class and the message's shape (numbers, names, quoted text and
  file places wiped out), so that one bug found a thousand times is one finding."""
  lines = [l for l in msg.strip().splitlines() if l.strip()]
  first = ' / '.join(lines[:2] if outcome == 'internal' else lines[:1])  # an internal error's second line is the error
  keep = lambda m: m.group(0) if re.fullmatch(r"'[a-z][\w.-]*'", m.group(0)) else "'_'"  # quoted names (a pass, an op) stay
  shape = re.sub(r"'[^']*'|\"[^\"]*\"", keep, first)
  shape = re.sub(r'%[\w.]+|@[\w.]+|0x[0-9a-f]+|\d+(\.\d+)?(e[+-]?\d+)?', 'N', shape)
  shape = re.sub(r'\S+\.tgc', 'F', shape)
  return f"{outcome}: {shape[:160]}"


class Worker:
  """One child process `python -m fuzz.worker MODULE`, restarted after BATCH cases or when a case kills it."""
  def __init__(self, module: str):
    self.module, self.proc, self.done = module, None, 0
    self.log = tempfile.NamedTemporaryFile(prefix='tgc-fuzz-', suffix='.log', delete=False).name
    self.info = ''

  def start(self):
    r, w = os.pipe()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), TGC_FUZZ_FD=str(w), PYTHONFAULTHANDLER='1')
    with open(self.log, 'wb') as log:
      self.proc = subprocess.Popen([sys.executable, '-m', 'fuzz.worker', self.module], stdin=subprocess.PIPE, stdout=log, stderr=log,
                                   pass_fds=(w,), env=env, cwd=ROOT, start_new_session=True)
    os.close(w)
    self.answers, self.buf, self.done = r, b'', 0
    ready = self._read(600)
    if ready is None: raise RuntimeError(f"the fuzz worker did not start:\n{self.tail()}")
    self.info = ready.get('info', '')

  def tail(self, n: int = 1500) -> str:
    try:
      with open(self.log, 'rb') as f: return f.read()[-n:].decode('utf-8', 'replace')
    except OSError: return ''

  def _read(self, timeout: float):
    end = time.monotonic() + timeout
    while b'\n' not in self.buf:
      left = end - time.monotonic()
      if left <= 0 or not select.select([self.answers], [], [], left)[0]: return None
      chunk = os.read(self.answers, 1 << 16)
      if not chunk: return None
      self.buf += chunk
    line, self.buf = self.buf.split(b'\n', 1)
    return json.loads(line)

  def stop(self):
    if self.proc is None: return
    try: os.killpg(self.proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass
    self.proc.wait(); os.close(self.answers); self.proc = None

  def run(self, case, timeout: float) -> tuple[str, str | None]:
    if self.proc is None or self.done >= BATCH:
      self.stop(); self.start()
    open(self.log, 'wb').close()
    try:
      self.proc.stdin.write((json.dumps(case) + '\n').encode()); self.proc.stdin.flush()
    except BrokenPipeError: pass
    t = time.monotonic()
    ans = self._read(timeout)
    self.done += 1
    if ans is not None: return ans['outcome'], ans['msg']
    try: rc = self.proc.wait(timeout=10) if time.monotonic() - t < timeout else self.proc.poll()  # EOF: it is exiting
    except subprocess.TimeoutExpired: rc = None
    if rc is None: self.stop(); return 'timeout', f"no answer in {timeout:.0f} s\n{self.tail()}"
    self.stop()
    how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    return 'crash', f"the child died ({how}):\n{self.tail()}"


def minimise(worker: Worker, fz, case, sig: str, budget: float, timeout: float):
  """Greedy: take the first smaller case that fails the same way, until none does or the budget is spent."""
  end = time.monotonic() + budget
  improved = True
  while improved and time.monotonic() < end:
    improved = False
    for cand in fz.shrink(case):
      if time.monotonic() >= end: break
      out, msg = worker.run(cand, min(timeout, max(1.0, end - time.monotonic() + 5)))
      if msg is not None and signature(out, msg) == sig:
        case, improved = cand, True
        break
  return case


def write_finding(outdir: str, fz, sig: str, case, outcome: str, msg: str, seed: int, index: int) -> str:
  d = os.path.join(outdir, f"{fz.NAME}-{hashlib.sha1(sig.encode()).hexdigest()[:10]}")
  os.makedirs(d, exist_ok=True)
  ext, text = fz.reproducer(case)
  with open(os.path.join(d, f"repro.{ext}"), 'w') as f: f.write(text)
  with open(os.path.join(d, 'case.json'), 'w') as f: json.dump(case, f)
  with open(os.path.join(d, 'finding.txt'), 'w') as f:
    f.write(f"fuzzer: {fz.NAME}\nseed: {seed}\ncase: {index}\noutcome: {outcome}\nsignature: {sig}\n\n{msg}\n")
  return d


def main(fz, argv=None) -> int:
  ap = argparse.ArgumentParser(prog=f"python -m fuzz.{fz.NAME}", description=(fz.__doc__ or '').strip().splitlines()[0])
  ap.add_argument('--seed', type=int, default=None, help='seed of the case generator (default: a random one, printed)')
  ap.add_argument('--seconds', type=float, default=60, help='time budget for generating and running cases')
  ap.add_argument('--out', default='fuzz-out', help='folder for the reproducers (one sub-folder per distinct failure)')
  ap.add_argument('--timeout', type=float, default=120, help='seconds one case may take before it counts as a hang')
  ap.add_argument('--minimise-seconds', type=float, default=60, help='time spent minimising each new failure')
  ap.add_argument('--max-cases', type=int, default=None, help='stop after this many cases')
  ap.add_argument('--replay', metavar='CASE_JSON', help="run one finding's case.json here, in this process, and print its outcome")
  args = ap.parse_args(argv)
  if args.replay:
    with open(args.replay) as f: case = json.load(f)
    print(f"fuzz.{fz.NAME}: {fz.setup()}", flush=True)
    out, msg = fz.run(case)
    print(f"fuzz.{fz.NAME}: {out}" + (f"\n{msg}" if msg else ''))
    return 1 if msg else 0
  seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
  print(f"fuzz.{fz.NAME}: seed {seed}, {args.seconds:g} s", flush=True)
  t0 = time.monotonic()
  w = Worker(fz.__spec__.name)
  w.start()
  fz.WORKER_INFO = w.info  # what setup() said in the child (the devices it found), for shrink()
  print(f"fuzz.{fz.NAME}: {w.info}", flush=True)
  outcomes: dict[str, int] = {}
  findings: dict[str, tuple[str, int]] = {}
  n = 0
  try:
    while time.monotonic() - t0 < args.seconds and (args.max_cases is None or n < args.max_cases):
      case = fz.generate(random.Random(f"{seed}:{n}"))
      left = args.seconds - (time.monotonic() - t0)
      out, msg = w.run(case, min(args.timeout, max(left, 0) + args.timeout / 4))
      outcomes[out] = outcomes.get(out, 0) + 1
      if msg is not None:
        sig = signature(out, msg)
        if sig in findings: findings[sig] = (findings[sig][0], findings[sig][1] + 1)
        else:
          small = minimise(w, fz, case, sig, args.minimise_seconds, args.timeout)
          if small is not case: out2, msg2 = w.run(small, args.timeout); msg = msg2 or msg
          d = write_finding(args.out, fz, sig, small, out, msg, seed, n)
          findings[sig] = (d, 1)
          print(f"fuzz.{fz.NAME}: FINDING at case {n}: {sig}\n  -> {d}", flush=True)
      n += 1
  finally: w.stop()
  secs = time.monotonic() - t0
  print(f"fuzz.{fz.NAME}: seed {seed}: {n} cases in {secs:.1f} s ({n / max(secs, 1e-9):.1f}/s)")
  for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]): print(f"  {v:7d}  {k}")
  print(f"fuzz.{fz.NAME}: {len(findings)} distinct finding(s)")
  for sig, (d, cnt) in findings.items(): print(f"  {cnt:5d}x {sig}\n         {d}")
  return 1 if findings else 0
