"""tgc-viz: the pipeline viewer's page for an IR file or a Python program.

    tgc-viz in.tgc -o page.html                      # the pipeline for the default device's target (or --target)
    tgc-viz in.tgc --run 10 -o page.html             # also compile it on the device, run it 10 times, profiled
    tgc-viz in.tgc --profile trace.json              # the launches of a trace PROFILE=trace.json tgc-run in.tgc wrote
    tgc-viz train.py -o page.html -- --steps 3       # run a program (VIZ=1): every function it compiles, profiled
    tgc-viz ... --trace trace.json                   # the run's Chrome trace beside the page
"""
from __future__ import annotations
import argparse, os, runpy, sys, traceback


def main(argv: list[str] | None = None) -> int:
  from tgc.driver import _Parser, run_tool
  ap = _Parser(prog='tgc-viz', description='Write one self-contained HTML page of what the compiler did: the kernel graph, '
               "each kernel's levels, the pipeline pass by pass, and a profile's launch timeline.",
               usage='tgc-viz [options] INPUT.tgc | PROGRAM.py [-- PROGRAM ARGS]',
               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split('\n', 2)[2])
  ap.add_argument('input', help="a .tgc file (IR at any level; '-' for stdin) or a Python program (.py)")
  ap.add_argument('-o', dest='output', default=None, help='the page (default: the input with .html; tgc-viz.html for stdin)')
  ap.add_argument('--target', default=None, help="an IR file's target when it is not run (default: the device's)")
  ap.add_argument('--device', default=None, help="an IR file's device: CPU (default), C, OPENCL, CUDA (a program picks its own)")
  ap.add_argument('--entry', default=None, help='@name of the func.func (default: the first)')
  ap.add_argument('--run', type=int, default=0, metavar='N', help='run an IR file N times on the device, profiled (after one call that is not)')
  ap.add_argument('--seed', type=int, default=0, help="seed of --run's random inputs")
  ap.add_argument('--trace', default=None, metavar='FILE.json', help="also write the run's Chrome trace (Perfetto opens it)")
  ap.add_argument('--profile', default=None, metavar='FILE.json', help="an IR file's launches from a trace PROFILE= or profile() "
                  "wrote (matched to its kernels by name), instead of --run")
  argv = list(sys.argv[1:] if argv is None else argv)
  rest = argv[argv.index('--') + 1:] if '--' in argv else []  # (a program's own arguments)
  args = ap.parse_args(argv[:len(argv) - len(rest) - (1 if '--' in argv else 0)])
  args.args = rest
  out = args.output or ('tgc-viz.html' if args.input == '-' else os.path.splitext(args.input)[0] + '.html')
  body = (lambda: _program(args, out)) if args.input.endswith('.py') else (lambda: _ir(args, out))
  return run_tool('tgc-viz', body)


def _ir(args, out: str) -> int:
  import numpy as np
  from tgc.driver import read_input, random_input, ToolError, UsageError
  if args.trace and not args.run: raise UsageError("--trace needs --run N for an IR file (a program is always run)")
  if args.profile and args.run: raise UsageError("--profile gives the launches of an earlier run: not with --run")
  from tgc import compiler
  from tgc.viz import capture, page
  from tgc.profiler import profile
  text, name = read_input(args.input, 'tgc-viz')
  from tgc.runtime import Device
  dev = Device.canonicalize(args.device)
  target = args.target or compiler.device_spec(dev)  # (the device's spec: what a compile for it runs)
  if args.run and args.target and args.target != compiler.device_target(dev).name:
    raise ToolError(f"--run compiles for the device ({dev}: target {compiler.device_target(dev).name}), not --target={args.target}")
  f = capture.capture(text, name, target, args.entry)
  prof = None
  if args.run:
    from tgc.parser import parse
    m = parse(text, name)
    cf = compiler.compile_module(m, dev, f['name'])
    rng = np.random.default_rng(args.seed)
    inputs = [random_input(t, rng) for t in cf.arg_types]
    cf(*inputs)  # (a warm-up call, not profiled: a device's first launch may set itself up)
    p = profile(args.trace)
    with p:
      for _ in range(args.run): cf(*inputs)
    f['device'], f['fn_id'] = dev, id(cf)
    prof = page.profile_data(p.recorder, [f])
  if args.profile:
    from tgc.profiler import Recorder
    try: prof = page.profile_data(Recorder.load(args.profile), [f])
    except (OSError, ValueError, KeyError, TypeError) as e: raise ToolError(f"cannot read the trace '{args.profile}': {e}") from None
  page.write(out, [f], prof, os.path.basename(name))
  sys.stderr.write(f"tgc-viz: wrote {out}\n")
  return 0


def _program(args, out: str) -> int:
  from tgc.driver import ToolError
  from tgc.viz import record
  if not os.path.exists(args.input): raise ToolError(f"cannot open '{args.input}': No such file or directory")
  record.start(out)
  argv, sys.argv = sys.argv, [args.input] + args.args
  status = 0
  try: runpy.run_path(args.input, run_name='__main__')
  except SystemExit as e: status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except Exception:  # the program's own error: its traceback, as Python prints it, and the page of what it compiled
    traceback.print_exc(); status = 1
  finally:
    sys.argv = argv
    path = record.finish(' '.join([os.path.basename(args.input)] + args.args), args.trace)
  sys.stderr.write(f"tgc-viz: wrote {path}" + (f" and {args.trace}" if args.trace else '') + '\n')
  return status
