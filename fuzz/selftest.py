"""A fuzzer whose cases fail on purpose, one way each (an abort, a hang, an exception, a wrong answer): the harness's
own test (tests/test_fuzz.py) that every way a case can fail is caught in the child, deduplicated and written down."""
import os, sys, time

NAME = 'selftest'
KINDS = ('ok', 'abort', 'hang', 'raise', 'wrong', 'exit')
WORKER_INFO = ''


def generate(r): return {'kind': KINDS[r.randrange(len(KINDS))], 'pad': list(range(r.randrange(1, 6)))}
def setup(): return 'cases that fail on purpose'
def shrink(case):
  if len(case['pad']) > 1: yield dict(case, pad=case['pad'][:-1])


def run(case):
  k = case['kind']
  if k == 'abort': os.abort()
  if k == 'hang': time.sleep(3600)
  if k == 'raise': raise RuntimeError('raised on purpose')
  if k == 'exit': os._exit(7)
  if k == 'wrong': return 'mismatch', 'a wrong answer on purpose'
  return 'ok', None


def reproducer(case): return 'txt', f"{case}\n"


if __name__ == '__main__':
  from fuzz.harness import main
  sys.exit(main(sys.modules[__name__]))
