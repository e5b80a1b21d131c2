"""The whole test suite: pytest (tests/) and lit (lit_tests/), then one line `N passed, N failed`.

Exit status 0 only when both ran tests and none failed.
"""
from __future__ import annotations
import os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The Tensor matrix runs again on each other device CI has (the first run uses the reference interpreter and
# the CPU): C on all of it, OpenCL (PoCL compiles slowly) on the movement and reduction files.
DEVICE_RUNS = [('C', ['tests/test_tensor_core.py', 'tests/test_tensor_movement.py', 'tests/test_tensor_reduce.py']),
               ('OPENCL', ['tests/test_tensor_movement.py', 'tests/test_tensor_reduce.py'])]


def run(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
  print('$', ' '.join(f"{k}={v}" for k, v in (env or {}).items()), ' '.join(cmd), flush=True)
  p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, **(env or {})))
  out = []
  for line in p.stdout:
    sys.stdout.write(line); out.append(line)
  return p.wait(), ''.join(out)


def unavailable(dev: str) -> str | None:
  """Why this machine cannot open the device (a child process: the runner itself imports no tgc), or None."""
  p = subprocess.run([sys.executable, '-c', f"import tgc\ntry: tgc.Device[{dev!r}]\nexcept tgc.TgcError as e: print(e)"],
                     cwd=ROOT, capture_output=True, text=True)
  return p.stdout.strip() or None


def count(pattern: str, text: str) -> int:
  return sum(int(m) for m in re.findall(pattern, text, re.M))


def main() -> int:
  args = sys.argv[1:]
  workers = os.environ.get('TGC_TEST_WORKERS', str(os.cpu_count() or 1))
  py_pass = py_fail = py_skip = 0
  rc1 = 0
  not_run = []
  for env, files in [(None, ['tests'])] + [({'TGC_TEST_DEVICE': d}, f) for d, f in DEVICE_RUNS]:
    why = env and unavailable(env['TGC_TEST_DEVICE'])
    if why:  # (said in the summary: a run this machine cannot make is neither passed nor failed)
      print(f"$ TGC_TEST_DEVICE={env['TGC_TEST_DEVICE']}: not run: {why}", flush=True); not_run.append(f"{env['TGC_TEST_DEVICE']} ({why})"); continue
    rc, out = run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *files, *args], env)
    tail = out.strip().splitlines()[-1] if out.strip() else ''
    py_pass += count(r'(\d+) passed', tail)
    py_fail += count(r'(\d+) failed', tail) + count(r'(\d+) errors?', tail)
    py_skip += count(r'(\d+) skipped', tail)
    rc1 |= rc
  rc2, out2 = run([sys.executable, '-c', 'import lit.main; lit.main.main()', '-sv', '-j', workers, 'lit_tests'])
  lit_pass = count(r'^\s*Passed\s*:\s*(\d+)', out2)
  lit_fail = count(r'^\s*(?:Failed|Unresolved|Timed Out|Unexpectedly Passed)\s*:\s*(\d+)', out2)
  passed, failed = py_pass + lit_pass, py_fail + lit_fail
  print(f"\npytest: {py_pass} passed, {py_fail} failed, {py_skip} skipped; lit: {lit_pass} passed, {lit_fail} failed")
  for d in not_run: print(f"not run on this machine: the Tensor matrix on {d}")
  ok = rc1 == 0 and rc2 == 0 and failed == 0 and py_pass > 0 and lit_pass > 0
  print(f"{passed} passed, {failed} failed")
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
