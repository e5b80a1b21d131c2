"""What the viewer shows of one function: its lowering pass by pass, and per kernel each level it went through.

capture(text, filename, target, ...) parses the text (so that every op has a location: a line of that text), runs
the target's lower-to-uop pipeline one pass at a time keeping each pass's printed module and its diff from the one
before (what --print-ir-after-all prints), and gathers per kernel: the lines of the text whose ops it computes (the
locations kernelize keeps on kernel ops), its kernel-dialect AST before and after kernel-opt with the opts applied,
its uop listing and the source the target's emitter writes. The result is plain JSON-able data.
"""
from __future__ import annotations
import difflib, time
from tgc.errors import TgcError
from tgc.ir.core import Module, Operation
from tgc.ir.printer import Printer
from tgc.target import DeviceSpec
from tgc.viz.graph import module_graph, layout

MAX_STEP_TEXT = 400_000   # a pass's whole printed module is kept up to this size (its diff always)
MAX_TENSOR_GRAPH = 1500   # the tensor graph's drawing is kept for functions of up to this many ops


def _lines_of(fn: Operation, filename: str) -> list[int]:
  """The lines of the input whose ops a kernel function computes (its ops' locations in that file)."""
  return sorted({op.loc.line for op in fn.walk() if op.loc is not None and op.loc.line > 0 and op.loc.file == filename})


def _ast_lines(fn: Operation, filename: str) -> tuple[str, list[int]]:
  """A kernel or uop function's text and, per line of it, the input line of the op printed there (0: none)."""
  out: list[str] = []
  Printer().print_function(fn, out, 0)
  text = '\n'.join(out)
  ops = [fn] + list(fn.body.ops)  # (a flat body: one op a line, between the header and the closing brace)
  lines = text.split('\n')
  locs = [(op.loc.line if op.loc is not None and op.loc.file == filename else 0) for op in ops]
  return text, (locs + [0] * len(lines))[:len(lines)] if len(lines) == len(ops) + 1 else [0] * len(lines)


def _opts_text(fn: Operation) -> str:
  """A function's opts attribute as the IR prints it ('[]': none)."""
  from tgc.ir.attrs import fmt_attr
  o = fn.attrs.get('opts')
  return fmt_attr(fn.ATTRS.get('opts', 'any'), o) if o else '[]'


def capture(text: str, filename: str, target: 'str | DeviceSpec' = 'llvm', entry: str | None = None,
            noopt: bool | None = None) -> dict:
  from tgc.parser import parse
  from tgc.passes.manager import parse_pipeline
  from tgc.passes.pipelines import stage_steps
  from tgc.lowering import level_of
  from tgc import emit
  from tgc.compiler import count_flops
  m = parse(text, filename)
  fns = m.functions('func.func')
  if not fns: raise TgcError(f"{filename}: no func.func to show")
  name = (entry or fns[0].attrs['sym_name']).lstrip('@')
  spec, level = DeviceSpec.of(target), level_of(m)
  target = spec.name
  steps_text = stage_steps(spec, level, 'uop', noopt)  # (the passes tgc.lowering.lower runs, one at a time)
  host = m.lookup(name)
  if host is None or host.name != 'func.func': raise TgcError(f"{filename}: no func.func named '@{name}'")
  tensor_graph = module_graph(m, host)
  prev = m.print()
  steps = [{'name': 'input', 'seconds': 0.0, 'changed': True, 'diff': '', 'text': prev}]
  asts: dict[str, tuple[str, list[int]]] = {}
  opts: dict[str, str] = {}
  kernel_graph = None
  for p in parse_pipeline(','.join(steps_text)) if steps_text else []:
    t0 = time.perf_counter(); p.run(m); dt = time.perf_counter() - t0
    after = m.print()
    diff = ''.join(difflib.unified_diff(prev.splitlines(True), after.splitlines(True), 'before', 'after', n=2)) if after != prev else ''
    steps.append({'name': repr(p), 'seconds': dt, 'changed': after != prev, 'diff': diff,
                  'text': after if len(after) <= MAX_STEP_TEXT else None})
    prev = after
    if p.name == 'kernelize':
      asts = {k.attrs['sym_name']: _ast_lines(k, filename) for k in m.functions('kernel.func')}
      host = m.lookup(name); kernel_graph = module_graph(m, host)
    if p.name == 'kernel-opt':
      for k in m.functions('kernel.func'):
        opts[k.attrs['sym_name']] = _opts_text(k)
        asts.setdefault(k.attrs['sym_name'], _ast_lines(k, filename))
        asts[k.attrs['sym_name'] + '#opt'] = _ast_lines(k, filename)
  host = m.lookup(name)
  if kernel_graph is None: kernel_graph = module_graph(m, host)
  kernels = []
  for fn in m.functions('uop.func'):
    kn = fn.attrs['sym_name']
    try: src = emit.render(Module([fn]), target)
    except TgcError as e: src = f"// no source for target {target}: {e}"
    uops, _ = _ast_lines(fn, filename)
    ast, ast_locs = asts.get(kn, ('', []))
    opt_ast = asts.get(kn + '#opt')
    gs, ls = fn.attrs.get('global_size', (1,)), fn.attrs.get('local_size', (1,))
    points = 1
    for d in (*gs, *ls): points *= d
    kernels.append({'name': kn, 'lines': sorted({l for l in ast_locs if l}) or _lines_of(fn, filename),
                    'ast': ast, 'ast_locs': ast_locs, 'opt_ast': opt_ast[0] if opt_ast else None,
                    'opts': opts.get(kn, _opts_text(fn) if 'opts' in fn.attrs else '(kernel-opt not run)'),
                    'uops': uops, 'source': src, 'global_size': list(gs), 'local_size': list(ls),
                    'flops': count_flops(fn) * points, 'uop_count': len(fn.body.ops)})
  kg = kernel_graph
  by_kernel = {k['name']: k for k in kernels}
  for n in kg.nodes:
    if n.kind == 'kernel' and n.label in by_kernel:
      k = by_kernel[n.label]
      n.detail = f"global {k['global_size']} local {k['local_size']}"
  for n in kg.nodes:  # a kernel's bytes: the buffers its (first) launch reads and writes
    k = by_kernel.get(n.label) if n.kind == 'kernel' else None
    if k is not None and 'bytes' not in k:
      k['bytes'] = sum({e.value: e.bytes for e in kg.edges if n.id in (e.src, e.dst)}.values())
  return {'name': name, 'file': filename, 'target': target, 'source': text, 'level': level,
          'graph': {**kg.to_json(), 'layout': layout(kg)},
          'tensor_graph': {**tensor_graph.to_json(), 'layout': layout(tensor_graph)} if level == 'tensor' and len(tensor_graph.nodes) <= MAX_TENSOR_GRAPH else None,
          'steps': steps, 'kernels': kernels}
