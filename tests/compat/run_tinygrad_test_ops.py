"""Run tinygrad's test/backend/test_ops.py (from a tinygrad checkout) against tgc and print the pass counts.

  python tests/compat/run_tinygrad_test_ops.py /path/to/tinygrad/test/backend/test_ops.py [-k EXPR] [--mode forward|grad|both] [-j JOBS]

The file runs unchanged under pytest with tests/compat/tinygrad_shim first on sys.path: its `tinygrad` package maps
Tensor, dtypes and Device onto tgc and supplies the test helpers (getenv, Context, DEV). Two modes: forward only
(FORWARD_ONLY=1: no test compares gradients) and with gradients (every helper_test_op also compares the gradients
with torch's). A test passes only if pytest reports it passed; skips and timeouts (TEST_TIMEOUT, 60 s) count as not
passed. The failures of each mode go to --report (one line each: test id, the error's last line).
"""
from __future__ import annotations
import argparse, os, shutil, subprocess, sys, tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, 'tinygrad_shim')


def run_mode(test_file: str, forward_only: bool, extra: list[str], jobs: int) -> tuple[int, int, int, list[str]]:
  with tempfile.TemporaryDirectory(prefix='tgc_test_ops_') as tmp:
    shutil.copy(test_file, os.path.join(tmp, 'test_ops.py'))
    shutil.copy(os.path.join(SHIM, 'time_limit.py'), os.path.join(tmp, 'conftest.py'))  # (a conftest only there)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SHIM, ROOT, os.environ.get('PYTHONPATH', '')]), FORWARD_ONLY='1' if forward_only else '0')
    pytest = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '--rootdir', tmp]
    ids = subprocess.run([*pytest, '--collect-only', 'test_ops.py', *extra], cwd=tmp, env=env, capture_output=True, text=True).stdout.split()
    ids = [i for i in ids if i.startswith('test_ops.py::')]
    if not ids: raise SystemExit(f"no tests collected from {test_file}: run pytest --collect-only on it with PYTHONPATH={env['PYTHONPATH']}")
    # the test ids dealt round-robin to `jobs` pytest processes
    shards = [ids[j::jobs] for j in range(jobs) if ids[j::jobs]] if jobs > 1 else [['test_ops.py', *extra]]
    procs = [subprocess.Popen([*pytest, f'--junitxml={tmp}/result{j}.xml', *args], cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for j, args in enumerate(shards)]
    for p in procs: p.wait()
    passed = skipped = 0
    failures = []
    cases = [c for j in range(len(shards)) if os.path.exists(f'{tmp}/result{j}.xml') for c in ET.parse(f'{tmp}/result{j}.xml').getroot().iter('testcase')]
    seen = {f"test_ops.py::{c.get('classname').rpartition('.')[2]}::{c.get('name')}" for c in cases}
    failures += [f"{i.rpartition('::')[2]}\tcrashed\tno result (the pytest process died)" for i in ids if i not in seen]
    total = len(ids)
    for case in cases:
      bad = [c for c in case if c.tag in ('failure', 'error', 'skipped')]
      if not bad: passed += 1; continue
      if bad[0].tag == 'skipped': skipped += 1
      msg = (bad[0].get('message') or '').strip().splitlines()
      failures.append(f"{case.get('name')}\t{bad[0].tag}\t{msg[-1][:300] if msg else ''}")
    return passed, skipped, total, failures


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('test_file', help="tinygrad's test_ops.py")
  ap.add_argument('--mode', choices=('forward', 'grad', 'both'), default='both')
  ap.add_argument('-k', help='pytest -k expression (a subset)')
  ap.add_argument('-j', '--jobs', type=int, default=1, help='pytest processes in parallel (default 1)')
  ap.add_argument('--report', help='write the failures of each mode to REPORT.forward.txt / REPORT.grad.txt')
  a = ap.parse_args()
  extra = ['-k', a.k] if a.k else []
  for mode in (('forward', 'grad') if a.mode == 'both' else (a.mode,)):
    passed, skipped, total, failures = run_mode(os.path.abspath(a.test_file), mode == 'forward', extra, a.jobs)
    label = 'forward only' if mode == 'forward' else 'with gradients'
    run = total - skipped  # (the skips are the file's own unittest.skip decorators; a skip is never a pass)
    print(f"{label:15s} {passed}/{total} passed ({100 * passed / max(total, 1):.1f} %); {skipped} skipped by the file itself, "
          f"{total - passed - skipped} failed; {passed}/{run} of those run ({100 * passed / max(run, 1):.1f} %)", flush=True)
    if a.report:
      with open(f'{a.report}.{mode}.txt', 'w') as f: f.write('\n'.join(failures) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
