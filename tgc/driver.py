"""The command-line tools: tgc-opt, tgc-translate, tgc-run (../shared/spec/tools.md).

Exit codes: 0 ok; 1 a user's mistake (a diagnostic); 2 a malformed command line; 3 a bug of tgc's own
(`internal error:`, with a traceback only when TGC_TRACEBACK=1).
"""
from __future__ import annotations
import argparse, os, re, sys, traceback


class UsageError(Exception):
  pass

class ToolError(Exception):
  """An error that belongs to no file position: printed as `tool: error: message`, exit 1."""


class _Parser(argparse.ArgumentParser):
  """argparse with the tools' exit code 2 for a malformed command line, and `--version` on every tool."""
  def __init__(self, *a, **kw):
    super().__init__(*a, **kw)
    from tgc import __version__
    self.add_argument('--version', action='version', version=f"%(prog)s {__version__}", help="print the tool's version and exit")

  def error(self, message):
    self.print_usage(sys.stderr)
    sys.stderr.write(f"{self.prog}: error: {message}\n")
    sys.exit(2)


def read_input(path: str, tool: str) -> tuple[str, str]:
  """(text, name) of a file or '-'; undecodable bytes are a located diagnostic."""
  from tgc.ir.diagnostics import Diagnostic, Location, Source
  if path == '-': data, name = sys.stdin.buffer.read(), '<stdin>'
  else:
    try:
      with open(path, 'rb') as f: data = f.read()
    except OSError as e: raise ToolError(f"cannot open '{path}': {e.strerror}") from None
    name = path
  try: return data.decode('utf-8'), name
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    col = e.start - (data.rfind(b'\n', 0, e.start) + 1) + 1
    text = data.decode('utf-8', errors='replace')
    raise Diagnostic(f"invalid UTF-8 byte 0x{data[e.start]:02x} in input", Location(name, line, col, Source(name, text))) from None

def write_output(text: str, path: str | None):
  if path in (None, '-'): sys.stdout.write(text)
  else:
    try:
      with open(path, 'w') as f: f.write(text)
    except OSError as e: raise ToolError(f"cannot write '{path}': {e.strerror}") from None


def run_tool(tool: str, body) -> int:
  """Call body(); turn every failure into the right message and exit code."""
  from tgc.ir.diagnostics import Diagnostic, DiagnosticList
  from tgc.errors import TgcError
  try:
    return body()
  except Diagnostic as d:
    sys.stderr.write(d.format(tool) + '\n'); return 1
  except DiagnosticList as dl:
    sys.stderr.write('\n'.join(d.format(tool) for d in dl.diags) + '\n'); return 1
  except (ToolError, TgcError) as e:
    sys.stderr.write(f"{tool}: error: {e}\n"); return 1
  except UsageError as e:
    sys.stderr.write(f"{tool}: error: {e}\n"); return 2
  except KeyboardInterrupt:
    return 130
  except BrokenPipeError:
    return 0
  except Exception as e:  # a bug of ours
    from tgc.passes.manager import PassFailure
    where = ''
    if isinstance(e, PassFailure): where = f" in pass '{e.pass_name}'"
    sys.stderr.write(f"{tool}: internal error{where}: {e}\n")
    if os.environ.get('TGC_TRACEBACK') == '1': traceback.print_exc()
    else: sys.stderr.write("(set TGC_TRACEBACK=1 for the Python traceback)\n")
    return 3


# ---------------------------------------------------------------- tgc-opt
_KNOWN_PASS_FLAG = re.compile(r'^--([a-z][a-z0-9\-]*)(=(.*))?$')

def _split_pass_flags(argv: list[str]):
  """Pull `--<pass-name>[=options]` flags out of argv, in order."""
  from tgc.passes.manager import _PASS_MODULES
  rest, passes = [], []
  for a in argv:
    m = _KNOWN_PASS_FLAG.match(a)
    if m and m.group(1) in _PASS_MODULES:
      passes.append(m.group(1) + (f"{{{m.group(3)}}}" if m.group(3) else ''))
    else: rest.append(a)
  return rest, passes


def opt_main(argv: list[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  argv, pass_flags = _split_pass_flags(argv)
  ap = _Parser(prog='tgc-opt', description='Run a pass pipeline over textual IR (no pipeline: parse, verify, print).',
               epilog='Passes can also be given one flag each, in order: --canonicalize --kernelize ...')
  ap.add_argument('input', nargs='?', default='-', help="input file, or '-' for stdin")
  ap.add_argument('-o', dest='output', default=None, help='output file')
  ap.add_argument('-p', '--pass-pipeline', dest='pipeline', default=None, help="e.g. 'canonicalize,kernelize'")
  ap.add_argument('--split-input-file', action='store_true', help="run each '// -----' separated chunk alone")
  ap.add_argument('--verify-diagnostics', action='store_true', help='check diagnostics against expected-* comments')
  ap.add_argument('--print-ir-after-all', action='store_true')
  ap.add_argument('--print-ir-before-all', action='store_true')
  ap.add_argument('--print-ir-after-change', action='store_true')
  ap.add_argument('--print-ir-after', action='append', default=[], metavar='PASS')
  ap.add_argument('--print-ir-before', action='append', default=[], metavar='PASS')
  ap.add_argument('--print-op-generic', action='store_true', help='print the generic form')
  ap.add_argument('--print-debuginfo', action='store_true', help='print loc(...) after each op')
  ap.add_argument('--view-graph', action='store_true', help='print Graphviz DOT of each function instead of the IR: its kernel '
                  'graph (kernels and buffers) once it launches kernels, else its tensor graph (ops and values)')
  ap.add_argument('--timing', action='store_true', help='per-pass wall time, to stderr')
  ap.add_argument('--pass-statistics', action='store_true', help='per-pass counters, to stderr')
  ap.add_argument('--no-verify', action='store_true', help='skip the verifier between passes')
  ap.add_argument('--list-passes', action='store_true', help='list passes and their options')
  ap.add_argument('--allow-unregistered-dialect', action='store_true')
  ap.add_argument('--allow-idle-passes', action='store_true',
                  help='a pass with nothing of its level to work on, or an option naming nothing, is a warning, not an error')
  args = ap.parse_args(argv)
  return run_tool('tgc-opt', lambda: _opt(args, pass_flags))


def _opt(args, pass_flags) -> int:
  from tgc.passes.manager import list_passes
  if args.list_passes:
    sys.stdout.write(list_passes()); return 0
  pipeline = ','.join(([args.pipeline] if args.pipeline else []) + pass_flags)
  text, name = read_input(args.input, 'tgc-opt')
  pm = None
  if pipeline:
    from tgc.passes.manager import PassManager
    pm = PassManager.parse(pipeline, verify=not args.no_verify, idle='warning' if args.allow_idle_passes else 'error')
  for n in args.print_ir_after + args.print_ir_before:
    from tgc.passes.manager import get_pass
    get_pass(n)
  from tgc.parser import parse_chunks
  from tgc.ir.diagnostics import Diagnostic, DiagnosticList
  outs, status = [], 0
  for chunk, offset in parse_chunks(text, name, args.split_input_file):
    if args.verify_diagnostics:
      status |= _verify_diagnostics(chunk, name, offset, pm, args)
      continue
    if not args.split_input_file:
      outs.append(_run_chunk(chunk, name, offset, pm, args)); continue
    try: outs.append(_run_chunk(chunk, name, offset, pm, args))
    except (Diagnostic, DiagnosticList) as d:  # MLIR's way: report the chunk's errors, go on with the next
      diags = d.diags if isinstance(d, DiagnosticList) else [d]
      sys.stderr.write('\n'.join(x.format('tgc-opt') for x in diags) + '\n')
      status = 1
  if not args.verify_diagnostics:
    write_output('// -----\n'.join(outs), args.output)
  return status


def _run_chunk(chunk, name, offset, pm, args) -> str:
  from tgc.parser import parse
  from tgc.passes.manager import Instrumentation
  from tgc.ir.printer import Printer
  m = parse(chunk, name, verify=True, allow_unregistered=args.allow_unregistered_dialect, line_offset=offset)
  if pm is not None:
    inst = Instrumentation(args.print_ir_before, args.print_ir_after, args.print_ir_before_all, args.print_ir_after_all,
                           args.print_ir_after_change, args.timing, args.pass_statistics, generic=args.print_op_generic)
    pm.run(m, inst)
    _report(inst)
    if not args.verify_diagnostics:  # (there, they are diagnostics to expect)
      for w in pm.warnings: sys.stderr.write(w.format('tgc-opt') + '\n')
  if args.view_graph:
    from tgc.viz.graph import module_graph, to_dot
    return ''.join(to_dot(module_graph(m, fn)) for fn in m.functions('func.func'))
  return Printer(generic=args.print_op_generic, locs=args.print_debuginfo).print_module(m)


def _report(inst):
  if inst.timing and inst.times:
    total = sum(t for _, t in inst.times) or 1e-12
    lines = ["===-------------------------------------------------------------------------===",
             "                         ... Execution time report ...",
             "===-------------------------------------------------------------------------===",
             f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
    for n, t in inst.times: lines.append(f"  {t:.4f} ({100 * t / total:5.1f}%)  {n}")
    lines.append(f"  {total:.4f} (100.0%)  Total")
    inst.stream.write('\n'.join(lines) + '\n')
  if inst.statistics:
    lines = ["===-------------------------------------------------------------------------===",
             "                         ... Pass statistics report ...",
             "===-------------------------------------------------------------------------==="]
    for n, st in inst.stats:
      lines.append(n)
      for k, v in sorted(st.items()): lines.append(f"  ({v}) {k}")
    inst.stream.write('\n'.join(lines) + '\n')


_EXPECT = re.compile(r'//\s*expected-(error|warning|note|remark)(?:@([+-]?\d+|above|below))?\s*\{\{(.*?)\}\}')

def _verify_diagnostics(chunk, name, offset, pm, args) -> int:
  """MLIR's -verify-diagnostics: every produced diagnostic expected, every expected one produced."""
  from tgc.ir.diagnostics import Diagnostic, DiagnosticList, Location, Source
  from tgc.passes.manager import PassFailure
  expected = []
  for i, line in enumerate(chunk.split('\n')):
    for m in _EXPECT.finditer(line):
      sev, where, msg = m.group(1), m.group(2), m.group(3)
      ln = i + 1
      if where in (None, ''): target = ln
      elif where == 'above': target = ln - 1
      elif where == 'below': target = ln + 1
      elif where[0] in '+-': target = ln + int(where)
      else: target = int(where) - offset
      expected.append([sev, target + offset, msg, False, ln + offset, m.start() + 1])
  produced = []
  try:
    _run_chunk(chunk, name, offset, pm, args)
    if pm is not None: produced = [n for w in pm.warnings for n in w.all()]
  except Diagnostic as d: produced = d.all()
  except DiagnosticList as dl: produced = [n for d in dl.diags for n in d.all()]
  except PassFailure: raise
  from tgc.errors import TgcError
  bad = []
  src = Source(name, chunk, offset)
  for p in produced:
    line = p.loc.line if p.loc is not None else 0
    hit = next((e for e in expected if not e[3] and e[0] == p.severity and e[1] == line and e[2] in p.message), None)
    if hit is not None: hit[3] = True
    else: bad.append(Diagnostic(f"unexpected {p.severity}: {p.message}", p.loc if p.loc and p.loc.line > 0 else None))
  for e in expected:
    if not e[3]:
      bad.append(Diagnostic(f"expected {e[0]} \"{e[2]}\" was not produced", Location(name, e[4], e[5], src)))
  for b in bad: sys.stderr.write(b.format('tgc-opt') + '\n')
  return 1 if bad else 0


# ---------------------------------------------------------------- tgc-translate
def translate_main(argv: list[str] | None = None) -> int:
  from tgc.target import TARGETS
  ap = _Parser(prog='tgc-translate', description='Lower IR (any level) and print device source for a target.')
  ap.add_argument('input', nargs='?', default='-')
  ap.add_argument('-o', dest='output', default=None)
  ap.add_argument('--target', required=True, help='|'.join(TARGETS))
  ap.add_argument('--noopt', action='store_true', help='the unoptimised pipeline (as NOOPT=1)')
  ap.add_argument('--tf32', action='store_true', help="f32 products on the target's tensor cores as TF32 (as TGC_TF32=1: the float32 matmul precision 'high')")
  ap.add_argument('--split-input-file', action='store_true')
  args = ap.parse_args(sys.argv[1:] if argv is None else argv)
  return run_tool('tgc-translate', lambda: _translate(args))


def module_error(m, text: str, name: str, offset: int, msg: str):
  """A Diagnostic about a whole module: at its first function, or at the start of the input when it has none."""
  from tgc.ir.diagnostics import Diagnostic, Location, Source
  if m.ops and m.ops[0].loc is not None: return Diagnostic(msg, m.ops[0].loc)
  return Diagnostic(msg, Location(name, offset + 1, 1, Source(name, text, offset)))


def _translate(args) -> int:
  from tgc.parser import parse, parse_chunks
  from tgc.target import get_target, tf32_matmul, DeviceSpec
  from tgc.lowering import lower
  t = get_target(args.target)  # an unknown target before reading the input
  # (TF32 where the target's tensor cores take it; other targets ignore it, as a device's spec does)
  spec = DeviceSpec.of(t, tf32=(args.tf32 or tf32_matmul()) and t.tensor_cores is not None and t.tensor_cores.tf32)
  text, name = read_input(args.input, 'tgc-translate')
  outs = []
  for chunk, offset in parse_chunks(text, name, args.split_input_file):
    m = parse(chunk, name, line_offset=offset)
    lower(m, spec, 'uop', args.noopt or None, verify_each=True)
    if not m.functions('uop.func'):
      raise module_error(m, chunk, name, offset, "nothing to translate: no function here lowers to a kernel (a func.func that computes, a kernel.func or a uop.func)")
    outs.append(lower(m, spec, 'source'))
  write_output('// -----\n'.join(outs), args.output)
  return 0


# ---------------------------------------------------------------- tgc-run
def run_main(argv: list[str] | None = None) -> int:
  ap = _Parser(prog='tgc-run', description='Compile a function and run it on a device; print its results.')
  ap.add_argument('input', nargs='?', default='-')
  ap.add_argument('--device', default=None, help='CPU (default), C, OPENCL, CUDA, INTERP')
  ap.add_argument('--entry', default=None, help='@name of the func.func to run (default: the first)')
  ap.add_argument('--input', dest='inputs', action='append', default=[], metavar='NAME=FILE.npy')
  ap.add_argument('--seed', type=int, default=0, help='seed of the random values for inputs not given')
  ap.add_argument('--random-weights', action='store_true',
                  help="fill weights the .npz beside the input does not hold (an imported model's) with random values, not an error")
  ap.add_argument('--output', default=None, metavar='DIR', help='save results as DIR/result0.npy, ...')
  args = ap.parse_args(sys.argv[1:] if argv is None else argv)
  return run_tool('tgc-run', lambda: _run(args))


def random_input(t, rng):
  import numpy as np
  dt = t.dtype
  if dt.is_bool: return rng.integers(0, 2, size=t.shape).astype(np.bool_)
  if dt.is_int:
    lo = 0 if not dt.is_signed else -10
    return rng.integers(lo, 10, size=t.shape).astype(dt.np)
  from tgc.ir import dtypes as D
  x = rng.standard_normal(size=t.shape).astype(np.float32)
  return D.to_storage(x, dt)


def _run(args) -> int:
  import numpy as np
  from tgc.parser import parse
  from tgc import compiler
  text, name = read_input(args.input, 'tgc-run')
  m = parse(text, name)
  fns = m.functions('func.func')
  if not fns: raise module_error(m, text, name, 0, "nothing to run: no func.func here")
  entry = fns[0]
  if args.entry:
    entry = m.lookup(args.entry.lstrip('@'))
    if entry is None or entry.name != 'func.func': raise ToolError(f"no func.func named '{args.entry}' in '{name}'")
  given = {}
  for spec in args.inputs:
    if '=' not in spec: raise UsageError(f"--input expects NAME=FILE.npy, got '{spec}'")
    k, path = spec.split('=', 1)
    try: given[k.lstrip('%')] = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e: raise ToolError(f"cannot load '{path}': {e}") from None
  npz = None if args.input == '-' else os.path.splitext(args.input)[0] + '.npz'
  given = {**_weights_beside(npz), **given}
  unbound = [w for w in entry.attrs.get('weights', ()) if w not in given]
  if unbound and not args.random_weights:
    names = ', '.join('%' + w for w in unbound[:8]) + (f" and {len(unbound) - 8} more" if len(unbound) > 8 else '')
    if npz is None: where = "the input is stdin, so there is no .npz beside it"
    elif not os.path.exists(npz): where = f"'{npz}' does not exist (tgc-import-onnx -o writes it beside the .tgc)"
    else: where = f"'{npz}' does not hold them"
    raise ToolError(f"@{entry.attrs['sym_name']} has weights with no values: {names}; {where}. "
                    "Give them with --input NAME=FILE.npy, or --random-weights for random values")
  argnames = [a.hint for a in entry.body.args]
  for k in given:
    if k not in argnames: raise ToolError(f"@{entry.attrs['sym_name']} has no argument '%{k}' (arguments: {', '.join('%' + n for n in argnames)})")
  rng = np.random.default_rng(args.seed)
  inputs = []
  for a in entry.body.args:
    if a.hint in given: inputs.append(given[a.hint])
    else:
      inputs.append(random_input(a.type, rng))
      sys.stderr.write(f"tgc-run: input %{a.hint}: random {a.type} (seed {args.seed})\n")
  fn = compiler.compile_module(m, args.device, entry.attrs['sym_name'], out=sys.stderr)
  results = fn(*inputs)
  compiler.print_totals(sys.stderr)
  from tgc.ir import dtypes as D
  for i, (r, t) in enumerate(zip(results, fn.result_types)):
    r = D.from_storage(r, t.dtype)
    if len(results) > 1: sys.stdout.write(f"result{i}: {t}\n")
    sys.stdout.write(np.array2string(np.asarray(r), threshold=10000) + '\n')
    if args.output:
      os.makedirs(args.output, exist_ok=True)
      np.save(os.path.join(args.output, f"result{i}.npy"), r)
  return 0


def _weights_beside(npz: str | None) -> dict:
  """The arguments bound from model.npz beside model.tgc (what tgc-import-onnx writes), if there is one."""
  import numpy as np
  if npz is None or not os.path.exists(npz): return {}
  try:
    with np.load(npz, allow_pickle=False) as z: return {k: z[k] for k in z.files}
  except (OSError, ValueError) as e: raise ToolError(f"cannot load '{npz}': {e}") from None


# ---------------------------------------------------------------- tgc-import-onnx
def import_onnx_main(argv: list[str] | None = None) -> int:
  ap = _Parser(prog='tgc-import-onnx', description='Import an ONNX model as tensor-dialect text; its weights go to a .npz beside it.')
  ap.add_argument('input', help='the .onnx file')
  ap.add_argument('-o', dest='output', default=None, help='output .tgc (weights in the .npz of the same name); default: stdout')
  ap.add_argument('--input-shape', dest='shapes', action='append', default=[], metavar='NAME=1x3x224x224',
                  help='the shape of a graph input, or the size of a symbolic dimension by its name (N=1)')
  ap.add_argument('--input-value', dest='values', action='append', default=[], metavar='NAME=16000',
                  help="fix a graph input's value (numbers, comma-separated, or a .npy file): it becomes a constant, so that "
                       "branches and shapes that read it are taken at import (silero VAD's sample rate)")
  args = ap.parse_args(sys.argv[1:] if argv is None else argv)
  def body():
    import numpy as np
    from tgc.frontend import onnx as fe
    text, weights = fe.import_text(args.input, dict(fe.parse_shape(s) for s in args.shapes), dict(fe.parse_value(v) for v in args.values))
    write_output(text, args.output)
    if weights:
      if args.output in (None, '-'): sys.stderr.write(f"tgc-import-onnx: {len(weights)} weights not written (give -o FILE.tgc to write FILE.npz)\n")
      else:
        try: np.savez(os.path.splitext(args.output)[0] + '.npz', **weights)
        except OSError as e: raise ToolError(f"cannot write the weights: {e.strerror}") from None
    return 0
  return run_tool('tgc-import-onnx', body)


# ---------------------------------------------------------------- entry points
def opt_entry(): sys.exit(opt_main())
def translate_entry(): sys.exit(translate_main())
def run_entry(): sys.exit(run_main())
def import_onnx_entry(): sys.exit(import_onnx_main())
def viz_entry():
  from tgc.viz.tool import main  # (the viewer's own module: tgc/viz)
  sys.exit(main())
