"""The fuzzers' child process: `python -m fuzz.worker fuzz.tensor` runs one case a line from stdin and answers
one JSON line ({"outcome", "msg"}) on the descriptor $TGC_FUZZ_FD (stdout and stderr stay the program's own)."""
import importlib, json, os, sys, traceback


def main():
  guard = os.environ.get('TGC_GUARD', 'after')
  if guard != 'off':  # a kernel that touches memory outside its buffers dies here, a crash the harness reports
    from fuzz.guard_pages import install
    install(guard)
  fz = importlib.import_module(sys.argv[1])
  out = os.fdopen(int(os.environ['TGC_FUZZ_FD']), 'w')
  def answer(**kw): out.write(json.dumps(kw) + '\n'); out.flush()
  answer(info=fz.setup())
  for line in sys.stdin:
    case = json.loads(line)
    try: outcome, msg = fz.run(case)
    except Exception as e:  # the fuzzer's own run() let an exception out: a finding, with its traceback
      outcome, msg = f"exception:{type(e).__name__}", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    answer(outcome=outcome, msg=msg)


if __name__ == '__main__':
  main()
