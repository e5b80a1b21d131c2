"""The whole test suite: pytest (tests/) and lit (lit_tests/), then one line `N passed, N failed`.

Exit status 0 only when both ran tests and none failed.
"""
from __future__ import annotations
import os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd: list[str]) -> tuple[int, str]:
  print('$', ' '.join(cmd), flush=True)
  p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  out = []
  for line in p.stdout:
    sys.stdout.write(line); out.append(line)
  return p.wait(), ''.join(out)


def count(pattern: str, text: str) -> int:
  return sum(int(m) for m in re.findall(pattern, text, re.M))


def main() -> int:
  args = sys.argv[1:]
  workers = os.environ.get('TGC_TEST_WORKERS', str(os.cpu_count() or 1))
  rc1, out1 = run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests', *args])
  tail = out1.strip().splitlines()[-1] if out1.strip() else ''
  py_pass, py_fail = count(r'(\d+) passed', tail), count(r'(\d+) failed', tail) + count(r'(\d+) errors?', tail)
  py_skip = count(r'(\d+) skipped', tail)
  rc2, out2 = run([sys.executable, '-c', 'import lit.main; lit.main.main()', '-sv', '-j', workers, 'lit_tests'])
  lit_pass = count(r'^\s*Passed\s*:\s*(\d+)', out2)
  lit_fail = count(r'^\s*(?:Failed|Unresolved|Timed Out|Unexpectedly Passed)\s*:\s*(\d+)', out2)
  passed, failed = py_pass + lit_pass, py_fail + lit_fail
  print(f"\npytest: {py_pass} passed, {py_fail} failed, {py_skip} skipped; lit: {lit_pass} passed, {lit_fail} failed")
  ok = rc1 == 0 and rc2 == 0 and failed == 0 and py_pass > 0 and lit_pass > 0
  print(f"{passed} passed, {failed} failed")
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
