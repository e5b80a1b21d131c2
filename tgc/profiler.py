"""Where the time went: kernel launches, compile phases, copies and allocations as Chrome trace events.

`with tgc.compiler.profile() as launches:` times every launch in the block on its device (CUDA events on CUDA, the
host clock around a launch and a synchronize elsewhere) and collects (kernel name, seconds) in `launches`;
`profile('trace.json')` also writes the block's Chrome trace-event JSON when it ends (Perfetto and chrome://tracing
open it), and `p.summary()` is the per-kernel table sorted by time. `PROFILE=trace.json` does the same for a whole
program: the trace is written at exit and the table printed on stderr.

The trace has one process for the host (its main thread: each compiled function's compile with its passes, the device
compile and each kernel's part of it, and every launch as the host issued it; compile work on other threads on
tracks of their own) and one per device: its stream's launches with their device time,
its copies and its allocator's allocations and frees (instant events with the bytes in use, and a counter of them).
A launch's device span ends where the host saw the launch finish (a timed launch waits for it).
"""
from __future__ import annotations
import atexit, json, os, sys, threading, time
from contextlib import contextmanager

HOST = 'host'


class Recorder:
  """The events of one profile: Chrome trace events (times in microseconds from the recorder's start) and the
  launches' (name, seconds) list the profile() API returns."""
  def __init__(self):
    self.t0 = time.perf_counter()
    self.events: list[dict] = []
    self.launches: list[tuple[str, float]] = []
    self.kernels: dict[str, dict] = {}        # kernel name -> count, seconds, bytes, flops (the summary table)
    self.pids: dict[str, int] = {}
    self.tids: dict[tuple[int, str], int] = {}
    self.track(HOST, 'main')  # (the host first: pid 0)

  def us(self, t: float) -> float: return round((t - self.t0) * 1e6, 3)

  def track(self, process: str, thread: str) -> tuple[int, int]:
    """(pid, tid) of a process's thread, named by metadata events the first time."""
    pid = self.pids.get(process)
    if pid is None:
      pid = self.pids[process] = len(self.pids)
      self.events.append({'ph': 'M', 'name': 'process_name', 'pid': pid, 'tid': 0, 'ts': 0, 'args': {'name': process}})
      self.events.append({'ph': 'M', 'name': 'process_sort_index', 'pid': pid, 'tid': 0, 'ts': 0, 'args': {'sort_index': pid}})
    tid = self.tids.get((pid, thread))
    if tid is None:
      tid = self.tids[pid, thread] = sum(1 for p, _ in self.tids if p == pid)
      self.events.append({'ph': 'M', 'name': 'thread_name', 'pid': pid, 'tid': tid, 'ts': 0, 'args': {'name': thread}})
    return pid, tid

  def span(self, name: str, cat: str, process: str, thread: str, t0: float, t1: float, args: dict | None = None) -> None:
    pid, tid = self.track(process, thread)
    ev = {'ph': 'X', 'name': name, 'cat': cat, 'pid': pid, 'tid': tid, 'ts': self.us(t0), 'dur': round(max(t1 - t0, 0) * 1e6, 3)}
    if args: ev['args'] = args
    self.events.append(ev)

  def launch(self, fn: str, fn_id: int, kernel, device: str, t0: float, t1: float, dt: float, nbytes: int) -> None:
    """One timed launch of `kernel` (a compiler.Kernel) by function `fn`: issued by the host from t0 to t1, dt
    seconds on the device."""
    self.launches.append((kernel.name, dt))
    flops = kernel.flops_per_point * kernel.points
    args = {'function': fn, 'fn_id': fn_id, 'bytes': nbytes, 'flops': flops, 'device_us': round(dt * 1e6, 3)}
    self.span(kernel.name, 'launch', HOST, 'main', t0, t1, args)
    self.span(kernel.name, 'kernel', device, 'stream 0', max(t0, t1 - dt), t1, args)
    k = self.kernels.get(kernel.name)
    if k is None: k = self.kernels[kernel.name] = {'count': 0, 'seconds': 0.0, 'bytes': 0, 'flops': 0}
    k['count'] += 1; k['seconds'] += dt; k['bytes'] += nbytes; k['flops'] += flops

  def instant(self, name: str, cat: str, process: str, thread: str, args: dict) -> None:
    pid, tid = self.track(process, thread)
    self.events.append({'ph': 'i', 's': 't', 'name': name, 'cat': cat, 'pid': pid, 'tid': tid, 'ts': self.us(time.perf_counter()), 'args': args})

  def memory(self, device: str, what: str, nbytes: int, in_use: int) -> None:
    """An allocation or a free of the device's allocator, and the bytes in use after it."""
    self.instant(what, 'allocator', device, 'allocator', {'bytes': nbytes, 'in_use': in_use})
    pid, _ = self.track(device, 'allocator')
    self.events.append({'ph': 'C', 'name': 'bytes in use', 'pid': pid, 'tid': 0, 'ts': self.us(time.perf_counter()), 'args': {'bytes': in_use}})

  # ---- what comes out
  def summary_rows(self) -> list[dict]:
    """Per kernel name, slowest first: count, total seconds, share of all launches' time, mean, GB/s, GFLOP/s."""
    total = sum(k['seconds'] for k in self.kernels.values()) or 1e-12
    rows = []
    for name, k in self.kernels.items():
      s = max(k['seconds'], 1e-12)
      rows.append({'name': name, 'count': k['count'], 'seconds': k['seconds'], 'share': k['seconds'] / total,
                   'mean': k['seconds'] / k['count'], 'bytes': k['bytes'], 'flops': k['flops'],
                   'gbps': k['bytes'] / s / 1e9 if k['bytes'] else None, 'gflops': k['flops'] / s / 1e9 if k['flops'] else None})
    return sorted(rows, key=lambda r: -r['seconds'])

  def summary(self) -> str:
    """The summary table as text."""
    rows = self.summary_rows()
    if not rows: return "no kernel launches profiled\n"
    hdr = f"{'kernel':<32s} {'count':>6s} {'total ms':>10s} {'share':>7s} {'mean us':>10s} {'GB/s':>8s} {'GFLOP/s':>9s}"
    out = [hdr, '-' * len(hdr)]
    fmt = lambda v, w: f"{v:{w}.2f}" if v is not None else ' ' * (w - 1) + '-'
    for r in rows:
      out.append(f"{r['name']:<32s} {r['count']:6d} {r['seconds'] * 1e3:10.3f} {r['share'] * 100:6.1f}% {r['mean'] * 1e6:10.2f} "
                 f"{fmt(r['gbps'], 8)} {fmt(r['gflops'], 9)}")
    tot = sum(r['seconds'] for r in rows)
    out.append(f"{'total':<32s} {sum(r['count'] for r in rows):6d} {tot * 1e3:10.3f} {100.0:6.1f}%")
    return '\n'.join(out) + '\n'

  def chrome(self) -> dict:
    """The Chrome trace-event JSON object (the JSON Object Format: traceEvents and metadata)."""
    return {'traceEvents': self.events, 'displayTimeUnit': 'ms',
            'otherData': {'tool': 'tgc', 'summary': self.summary_rows()}}

  def write(self, path: str) -> None:
    with open(path, 'w') as f: json.dump(self.chrome(), f)

  @staticmethod
  def load(path: str) -> 'Recorder':
    """A recorder holding the events of a trace this module wrote (PROFILE=trace.json, profile('trace.json'))."""
    with open(path) as f: data = json.load(f)
    r = Recorder()
    r.events = data['traceEvents'] if isinstance(data, dict) else data
    r.pids = {e['args']['name']: e['pid'] for e in r.events if e.get('ph') == 'M' and e.get('name') == 'process_name'}
    for e in r.events:
      if e.get('cat') == 'kernel': r.launches.append((e['name'], e['dur'] / 1e6))
    return r


# the recorders of the profiles now open, innermost last: every event goes to each
ACTIVE: list[Recorder] = []


class profile:
  """`with profile() as launches:` times every kernel launch in the block (as DEBUG=2 does, without printing):
  `launches` collects (kernel name, seconds). `profile(trace='trace.json')` writes the block's Chrome trace when
  it ends; the profile object's `recorder` holds the events and `summary()` the per-kernel table."""
  active: list | None = None   # the innermost open profile's launches list: what the host schedule checks per call

  def __init__(self, trace: str | None = None):
    self.trace, self.recorder = trace, Recorder()

  def __enter__(self):
    self.prev, profile.active = profile.active, self.recorder.launches
    ACTIVE.append(self.recorder); _hook_allocators()
    return profile.active

  def __exit__(self, *exc):
    ACTIVE.remove(self.recorder); _hook_allocators()
    profile.active = self.prev
    if self.trace: self.recorder.write(self.trace)

  def summary(self) -> str: return self.recorder.summary()


def record_launch(cf, k, t0: float, t1: float, dt: float, nbytes: int) -> None:
  for r in ACTIVE: r.launch(cf.name, id(cf), k, cf.device, t0, t1, dt, nbytes)


@contextmanager
def phase(name: str, cat: str = 'compile', **args):
  """A host span around a block (a compile, a pass) in every open profile; nothing when none is open."""
  if not ACTIVE:
    yield; return
  t0 = time.perf_counter()
  try: yield
  finally:
    t1, thread = time.perf_counter(), _thread()
    for r in ACTIVE: r.span(name, cat, HOST, thread, t0, t1, args or None)


def record_durations(items, t0: float, thread: str = 'compile workers', cat: str = 'compile') -> None:
  """Spans timed where no profile runs (a compile worker's render of each kernel): (name, seconds) laid end to end
  from t0 on a host track of their own; their lengths are measured, their places only kept in order."""
  if not ACTIVE: return
  t = t0
  for name, dt in items:
    for r in ACTIVE: r.span(name, cat, HOST, thread, t, t + dt)
    t += dt


def _thread() -> str:
  """The host track of the calling thread: `main`, or the thread's name (work a compile hands to other threads)."""
  t = threading.current_thread()
  return 'main' if t is threading.main_thread() else t.name


def instrumentation():
  """A PassManager Instrumentation that records each pass's span while a profile is open; None otherwise."""
  if not ACTIVE: return None
  from tgc.passes.manager import Instrumentation
  return Instrumentation()


def record_passes(inst) -> None:
  """The per-pass spans a PassManager run left in its Instrumentation (tgc.passes.manager)."""
  thread = _thread()
  for r in ACTIVE:
    for name, t0, dt in inst.spans: r.span(name, 'pass', HOST, thread, t0, t0 + dt)


class AllocatorTracer:
  """What an Allocator calls while a profile is open (Allocator.tracer): its allocations, frees and copies."""
  def alloc(self, al, nbytes: int) -> None:
    for r in ACTIVE: r.memory(al.device, 'alloc', nbytes, al.in_use)
  def free(self, al, nbytes: int) -> None:
    for r in ACTIVE: r.memory(al.device, 'free', nbytes, al.in_use)
  @contextmanager
  def copy(self, al, what: str, nbytes: int):
    t0 = time.perf_counter()
    try: yield
    finally:
      t1 = time.perf_counter()
      for r in ACTIVE: r.span(what, 'copy', al.device, 'copies', t0, t1, {'bytes': nbytes})

def _hook_allocators() -> None:
  from tgc.runtime.buffer import Allocator
  Allocator.tracer = AllocatorTracer() if ACTIVE else None


def _from_env() -> None:
  """PROFILE=trace.json: profile the whole program; the trace written and the table printed at exit."""
  path = os.environ.get('PROFILE')
  if not path or path == '0' or _ENV_PROFILE: return
  p = profile(None if path == '1' else path)
  p.__enter__()
  _ENV_PROFILE.append(p)
  def done():
    p.__exit__(None, None, None)
    where = f" (trace: {p.trace})" if p.trace else ''
    sys.stderr.write(f"PROFILE: kernel launches by time{where}\n" + p.summary())
  atexit.register(done)

_ENV_PROFILE: list[profile] = []
