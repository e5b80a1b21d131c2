"""VIZ=1 for a Python program: every function the program compiles (tgc.compile, the Tensor API's realizes) is kept,
its launches are timed, and at exit one page shows them all: `tgc-viz.html` in the current directory, or the file
VIZ names (VIZ=out.html). The compiler calls watch(m) before it lowers a module and the returned callable with the
CompiledFunction after; the page re-runs each kept function's pipeline pass by pass (capture()), so a program's own
compile is not slowed by the printing the viewer needs.
"""
from __future__ import annotations
import atexit, os, sys
from tgc.profiler import profile

_kept: list[tuple[str, object]] = []   # (the module's text as the compiler got it, its CompiledFunction)
_session: dict = {}


def start(path: str | None = None) -> None:
  """Keep every compiled function from now on, launches timed; the page goes to `path` at finish()."""
  from tgc.compiler import COMPILE_WATCHERS
  from tgc import tensor
  if _session: return
  # (the Tensor API's functions compiled before now are compiled again, from the disk cache where it holds them, so
  # that every function the program launches from here on is on the page with its pipeline)
  tensor.forget_compiled()
  p = profile()
  p.__enter__()
  _session.update(path=path or 'tgc-viz.html', profile=p)
  COMPILE_WATCHERS.append(watch)


def watch(m):
  """Called by compile_module with the module it is about to lower: a callable that keeps it with its
  CompiledFunction."""
  text = m.print()
  return lambda cf: _kept.append((text, cf))


def functions() -> list[dict]:
  """The kept functions as the page shows them: each one's pipeline captured for its device."""
  from tgc.viz.capture import capture
  out = []
  if len(_kept) > 20: sys.stderr.write(f"tgc-viz: printing the pipeline of {len(_kept)} compiled functions\n")
  for i, (text, cf) in enumerate(_kept):
    dev = cf.dev
    try:
      f = capture(text, f"fn{i}.tgc", dev.spec, cf.name)
    except Exception as e:  # (one function the viewer cannot show does not lose the others)
      sys.stderr.write(f"tgc-viz: function #{i} @{cf.name} not shown: {type(e).__name__}: {e}\n"); continue
    f['device'], f['fn_id'] = cf.device, id(cf)
    out.append(f)
  return out


def finish(title: str = 'tgc viz', trace: str | None = None) -> str | None:
  """Close the session: write the page (and the Chrome trace when `trace` names a file); the page's path."""
  from tgc.viz import page
  if not _session: return None
  from tgc.compiler import COMPILE_WATCHERS
  p = _session['profile']
  p.__exit__(None, None, None)
  if watch in COMPILE_WATCHERS: COMPILE_WATCHERS.remove(watch)
  fns = functions()
  prof = page.profile_data(p.recorder, fns)
  page.write(_session['path'], fns, prof, title)
  if trace: p.recorder.write(trace)
  path = _session['path']
  _session.clear(); _kept.clear()
  return path


def _at_exit() -> None:
  path = finish(' '.join(sys.argv) or 'tgc viz')
  if path: sys.stderr.write(f"VIZ: {path}\n")


_env = os.environ.get('VIZ', '0')
if _env not in ('', '0') and not _session:
  start(None if _env == '1' else _env)
  atexit.register(_at_exit)
