"""A pool of compile workers: processes (a kernel's Python lowering and LLVM's or a compiler's work hold the GIL
or a process of their own), forked from this process when a batch starts, so that they see the batch's kernels as
they are here (nothing is pickled on the way in but an index and what `args` holds).

`run(fn, n, ...)` calls fn(i) for i in range(n) on the workers, the costliest first (a long kernel started last would
leave the other workers idle), and returns the results in index order: the output is the same whatever the order the
workers finish in. Where a pool does not pay (one core, one item, no fork on this platform, TGC_COMPILE_WORKERS=1, or
inside a worker) it runs here, one after another. A worker that fails is reported as the exception it raised.

TGC_COMPILE_WORKERS sets the number of processes (default: the cores this process may use).
"""
from __future__ import annotations
import os, sys, time
from typing import Callable

_job: tuple | None = None     # (fn, args) of the batch being run: what forked workers find here
_in_worker = False


def workers() -> int:
  """Processes a batch may use: $TGC_COMPILE_WORKERS, else the cores this process may run on."""
  v = os.environ.get('TGC_COMPILE_WORKERS', '')
  try: n = int(v) if v else len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
  except ValueError: n = os.cpu_count() or 1
  return max(1, n)


def _call(i: int):
  fn, args = _job
  t = time.perf_counter()
  r = fn(i, *args)
  return r, time.perf_counter() - t


def in_worker() -> bool:
  """Whether this process is a compile worker (its batches run in it, one after another)."""
  return _in_worker


def _mark_worker():
  global _in_worker
  _in_worker = True


def run(fn: Callable, n: int, args: tuple = (), cost: Callable[[int], float] | None = None,
        done: Callable[[int, float], None] | None = None, min_cost: float = 0) -> list:
  """[fn(0, *args), ..., fn(n - 1, *args)], on the pool where it pays. `cost(i)`: a guess at item i's work (the
  costliest go first); `min_cost`: the work (in cost's units) below which starting processes costs more than it
  saves, and the items run here; `done(i, seconds)`: called here as each item finishes (a progress line)."""
  global _job
  procs = min(workers(), n)
  if cost is not None and min_cost and sum(cost(i) for i in range(n)) < min_cost: procs = 1
  if procs < 2 or _in_worker or sys.platform == 'win32' or not hasattr(os, 'fork'):
    out = []
    for i in range(n):
      t = time.perf_counter(); out.append(fn(i, *args))
      if done: done(i, time.perf_counter() - t)
    return out
  import multiprocessing as mp
  from concurrent.futures import ProcessPoolExecutor
  from concurrent.futures.process import BrokenProcessPool
  from tgc.errors import TgcError
  order = sorted(range(n), key=lambda i: -cost(i)) if cost else list(range(n))
  prev, _job = _job, (fn, args)
  out: list = [None] * n
  try:
    with ProcessPoolExecutor(procs, mp_context=mp.get_context('fork'), initializer=_mark_worker) as ex:
      futs = {ex.submit(_call, i): i for i in order}
      from concurrent.futures import as_completed
      for f in as_completed(futs):
        i = futs[f]
        try: out[i], dt = f.result()
        except BrokenProcessPool: raise TgcError(f"a compile worker process died (killed, or a crash in the compiler) on item {i} of {n}; TGC_COMPILE_WORKERS=1 compiles in this process") from None
        if done: done(i, dt)
  finally: _job = prev
  return out


class CompileStats:
  """What compiling took in this process: seconds per phase (lower: the passes to the uop level; emit: rendering
  kernel source; compile: the device's compiler or loading from the disk cache; store and load: a whole function
  written to or read from the disk cache), kernels asked for, kernels actually compiled (not found in a cache) and
  kernels loaded with their function, and each kernel's Python seconds (lowering's share and its emit, in CPU
  time: what the kernel costs whatever else the machine runs): what bench/compile.py and DEBUG=1 print."""
  def __init__(self): self.reset()
  def reset(self):
    self.phases: dict[str, float] = {}
    self.worker_cpu: dict[str, float] = {}  # (kernels lowered on the workers: their CPU seconds per phase, summed)
    self.kernels = self.compiled = 0
    self.loaded = 0  # kernels loaded with their function from the disk cache (tgc.function_cache): not lowered here
    self.lower_per_kernel: list[float] = []  # (a batch's lowering seconds over its kernels, one entry a kernel)
    self.emit_per_kernel: list[float] = []
  def add(self, phase: str, seconds: float) -> None: self.phases[phase] = self.phases.get(phase, 0.0) + seconds
  def median_python_ms(self) -> float:
    """The median of lower + emit per kernel, in CPU ms (lowering's seconds shared evenly among a batch's kernels)."""
    xs = sorted(l + e for l, e in zip(self.lower_per_kernel, self.emit_per_kernel))
    return 1e3 * xs[len(xs) // 2] if xs else 0.0

STATS = CompileStats()


class Progress:
  """`tgc: compile 37/208 kernels, 1.4 s` on stderr, rewritten in place, once compiling has taken AFTER seconds; only
  where stderr is a terminal or DEBUG >= 1 (not a terminal: a line per update, at most one a second). `phase(name,
  total)` starts a phase of so many items (lower, emit, compile); `step()` counts one done."""
  AFTER = 1.0
  def __init__(self, debug: int = 0):
    self.name, self.total, self.n, self.t0, self.shown, self.last = '', 0, 0, time.perf_counter(), False, 0.0
    try: tty = sys.stderr.isatty()
    except (AttributeError, ValueError): tty = False
    self.tty, self.on = tty, tty or debug >= 1
  def phase(self, name: str, total: int) -> None:
    self.name, self.total, self.n = name, total, 0
    self.show()
  def step(self, k: int = 1) -> None:
    self.n += k
    self.show()
  def show(self) -> None:
    if not self.on: return
    t = time.perf_counter()
    dt = t - self.t0
    if dt < self.AFTER or (not self.tty and t - self.last < 1.0 and self.n < self.total): return
    self.last = t
    line = f"tgc: {self.name} {self.n}/{self.total} kernels, {dt:.1f} s"
    sys.stderr.write(f"\r{line}\x1b[K" if self.tty else line + '\n'); sys.stderr.flush()
    self.shown = True
  def close(self) -> None:
    if self.shown and self.tty: sys.stderr.write('\n'); sys.stderr.flush()
