"""Passes and the pass manager: pipelines written as text, MLIR's way.

A pass is a class with a `name`, a one-line `summary`, the levels it reads and leaves, typed `options`
(name -> (type, default, help)) and `run(module)`. `PassManager.parse('a,b{k=v},c')` builds a pipeline;
`builtin.module(...)` / `func.func(...)` anchors are accepted and flattened (every pass runs on modules).
"""
from __future__ import annotations
import difflib, importlib, re, time
from collections import defaultdict
from tgc.errors import TgcError
from tgc.ir.core import Module
from tgc.ir.diagnostics import Diagnostic, DiagnosticList

PASSES: dict[str, type[Pass]] = {}

LEVEL_FUNCS = {'tensor': 'func.func of tensor ops', 'kernel': 'kernel.func', 'uop': 'uop.func'}

def module_levels(m: Module) -> set[str]:
  """The levels m's functions are at: a kernel.func's, a uop.func's, and 'tensor' for a func.func that is not a
  host schedule (one that launches kernels)."""
  levels = set()
  for fn in m.ops:
    if fn.name == 'kernel.func': levels.add('kernel')
    elif fn.name == 'uop.func': levels.add('uop')
    elif fn.name == 'func.func' and not any(op.name.startswith('kernel.') for op in fn.body.ops): levels.add('tensor')
  return levels

# name -> module that defines it; imported on first use so that tgc-opt starts fast
_PASS_MODULES = {
  'canonicalize': 'tgc.passes.canonicalize', 'cse': 'tgc.passes.cse', 'dce': 'tgc.passes.dce',
  'tensor-decompose': 'tgc.passes.tensor_decompose', 'kernelize': 'tgc.passes.kernelize', 'kernel-opt': 'tgc.passes.kernel_opt',
  'linearize': 'tgc.passes.linearize', 'uop-simplify': 'tgc.passes.uop_simplify', 'devectorize': 'tgc.passes.devectorize',
  'decompose-transcendentals': 'tgc.passes.decompose_transcendentals', 'lower-to-uop': 'tgc.passes.pipelines',
  'autodiff': 'tgc.passes.autodiff', 'scan-split': 'tgc.passes.scan_split', 'fuse-attention': 'tgc.passes.fuse_attention',
  'reassociate-index': 'tgc.passes.reassociate_index',
}


class PipelineError(TgcError):
  """A bad pipeline: unknown pass, unknown option, bad option value."""


class PassFailure(Exception):
  """A pass broke the IR or raised: a bug of tgc's, reported as an internal error naming the pass."""
  def __init__(self, pass_name: str, message: str, op=None):
    super().__init__(message)
    self.pass_name, self.op = pass_name, op


class Pass:
  name: str = ''
  summary: str = ''
  reads: str = 'any'
  leaves: str = 'any'
  options: dict[str, tuple[type, object, str]] = {}

  def __init_subclass__(cls, **kw):
    super().__init_subclass__(**kw)
    if cls.name: PASSES[cls.name] = cls

  def __init__(self, **opts):
    for k, (ty, default, _) in self.options.items(): setattr(self, k, opts.get(k, default))
    self.opts = {k: getattr(self, k) for k in self.options}
    self.stats: dict[str, int] = defaultdict(int)

  def run(self, m: Module) -> None:
    raise NotImplementedError

  def expand(self) -> list[Pass]:
    """A named pipeline returns the passes it stands for; a plain pass itself."""
    return [self]

  def idle_reason(self, m: Module, levels: set[str]) -> str | None:
    """Why this pass has nothing to work on in m, whose levels (as the pipeline before it leaves them) are
    `levels`; None when it has. A pass anchored on a level finds nothing at another (mlir-opt's pass anchored
    on the wrong op); a pass whose option names something absent overrides this to say so."""
    if self.reads == 'any' or self.reads in levels: return None
    first = {'kernel': ' (kernelize first)', 'uop': ' (linearize first, or lower-to-uop from the tensor level)'}.get(self.reads, '')
    return (f"pass '{self.name}' works on the {self.reads} level ({LEVEL_FUNCS[self.reads]}), and the IR here is at the "
            f"{' and '.join(sorted(levels))} level: it has nothing to do{first}")

  def __repr__(self):
    o = ' '.join(f"{k}={_fmt_opt(v)}" for k, v in self.opts.items() if v != self.options[k][1])
    return self.name + (f"{{{o}}}" if o else '')


def _fmt_opt(v):
  return ('true' if v else 'false') if isinstance(v, bool) else str(v)


def load_all():
  for mod in set(_PASS_MODULES.values()):
    try: importlib.import_module(mod)
    except ModuleNotFoundError as e:
      if e.name != mod: raise

def get_pass(name: str) -> type[Pass]:
  if name not in PASSES and name in _PASS_MODULES:
    try: importlib.import_module(_PASS_MODULES[name])
    except ModuleNotFoundError as e:
      if e.name != _PASS_MODULES[name]: raise
  if name not in PASSES:
    load_all()
    close = difflib.get_close_matches(name, list(PASSES), n=1)
    raise PipelineError(f"unknown pass '{name}'" + (f" (did you mean '{close[0]}'?)" if close else ''))
  return PASSES[name]


def _convert(p: type[Pass], key: str, text: str):
  if key not in p.options:
    raise PipelineError(f"pass '{p.name}' has no option '{key}'" + (f" (options: {', '.join(p.options)})" if p.options else ' (it takes none)'))
  ty = p.options[key][0]
  try:
    if ty is bool:
      if text.lower() in ('true', '1', 'yes', 'on'): return True
      if text.lower() in ('false', '0', 'no', 'off'): return False
      raise ValueError
    return ty(text)
  except ValueError:
    raise PipelineError(f"option '{key}' of pass '{p.name}' expects {ty.__name__}, got '{text}'") from None


_TOKEN = re.compile(r'\s*([A-Za-z0-9_.+\-]+|[{}(),=]|"[^"]*")')

def parse_pipeline(text: str) -> list[Pass]:
  toks, pos = [], 0
  text = text.strip()
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if not m:
      if text[pos:].strip() == '': break
      raise PipelineError(f"cannot parse pipeline at '{text[pos:pos + 20]}'")
    toks.append(m.group(1)); pos = m.end()
  i = 0
  def item() -> list[Pass]:
    nonlocal i
    if i >= len(toks) or toks[i] in '{}(),=': raise PipelineError(f"expected a pass name in pipeline '{text}'")
    name = toks[i]; i += 1
    if i < len(toks) and toks[i] == '(':  # an anchor: builtin.module(...), func.func(...)
      i += 1
      inner = seq(')')
      i += 1
      return inner
    p = get_pass(name)
    opts = {}
    if i < len(toks) and toks[i] == '{':
      i += 1
      while i < len(toks) and toks[i] != '}':
        if toks[i] == ',': i += 1; continue
        key = toks[i]; i += 1
        if i >= len(toks) or toks[i] != '=': raise PipelineError(f"expected '=' after option '{key}' of pass '{name}'")
        i += 1
        if i >= len(toks) or toks[i] in '{}(),=': raise PipelineError(f"expected a value for option '{key}' of pass '{name}'")
        val = toks[i].strip('"'); i += 1
        opts[key] = _convert(p, key, val)
      if i >= len(toks): raise PipelineError(f"unclosed '{{' after pass '{name}'")
      i += 1
    return p(**opts).expand()
  def seq(close=None) -> list[Pass]:
    nonlocal i
    out = []
    while i < len(toks) and toks[i] != close:
      out += item()
      if i < len(toks) and toks[i] == ',': i += 1
      elif i < len(toks) and toks[i] != close: raise PipelineError(f"expected ',' in pipeline '{text}', got '{toks[i]}'")
    if close and i >= len(toks): raise PipelineError(f"unclosed '(' in pipeline '{text}'")
    return out
  out = seq()
  return out


class Instrumentation:
  """What tgc-opt asks to see around passes; every field off by default."""
  def __init__(self, print_before=(), print_after=(), print_before_all=False, print_after_all=False,
               print_after_change=False, timing=False, statistics=False, stream=None, generic=False):
    import sys
    self.print_before, self.print_after = set(print_before), set(print_after)
    self.print_before_all, self.print_after_all, self.print_after_change = print_before_all, print_after_all, print_after_change
    self.timing, self.statistics, self.stream, self.generic = timing, statistics, stream or sys.stderr, generic
    self.times: list[tuple[str, float]] = []
    self.spans: list[tuple[str, float, float]] = []  # (pass, perf_counter at its start, seconds): a profile's trace
    self.stats: list[tuple[str, dict]] = []
  def dump(self, when: str, p: Pass, m: Module):
    self.stream.write(f"// -----// IR Dump {when} {p.name} //----- //\n{m.print(generic=self.generic)}\n")


class PassManager:
  """Runs passes in order. `idle` says what a pass with nothing to work on is (Pass.idle_reason: a pass of another
  level than the IR's, an option naming nothing): None, nothing (what compile pipelines want: a program with no
  kernel runs kernel-opt on none); 'error', a Diagnostic; 'warning', one kept in `warnings` and the pass run."""
  def __init__(self, passes: list[Pass] | None = None, verify: bool = True, idle: str | None = None):
    self.passes, self.verify, self.idle = list(passes or []), verify, idle
    self.warnings: list[Diagnostic] = []

  @staticmethod
  def parse(text: str, verify: bool = True, idle: str | None = None) -> PassManager:
    return PassManager(parse_pipeline(text), verify, idle)

  def _check_idle(self, p: Pass, m: Module, levels: set[str]) -> set[str]:
    """Report p if it is idle on m; the levels the IR is at after it (as the pass declares what it leaves)."""
    why = p.idle_reason(m, levels)
    if why is not None:
      loc = next((op.loc for op in m.ops if op.loc is not None), None)
      if self.idle == 'error': raise Diagnostic(why, loc)
      self.warnings.append(Diagnostic(why, loc, severity='warning'))
    return levels if p.reads == 'any' else (levels - {p.reads}) | {p.leaves}

  def add(self, p: Pass) -> PassManager:
    self.passes += p.expand(); return self

  def run(self, m: Module, inst: Instrumentation | None = None) -> Module:
    self.warnings = []
    levels = module_levels(m) if self.idle else set()  # (a module with no function: nothing to check)
    for p in self.passes:
      if levels: levels = self._check_idle(p, m, levels)
      if inst and (inst.print_before_all or p.name in inst.print_before): inst.dump('Before', p, m)
      before = m.print() if inst and inst.print_after_change else None
      t0 = time.perf_counter()
      try: p.run(m)
      except (Diagnostic, DiagnosticList, TgcError): raise   # the input's fault: a user diagnostic
      except RecursionError as e: raise PassFailure(p.name, f"recursion too deep in pass '{p.name}'") from e
      except Exception as e: raise PassFailure(p.name, f"{type(e).__name__}: {e}") from e
      dt = time.perf_counter() - t0
      if inst:
        inst.times.append((p.name, dt)); inst.spans.append((p.name, t0, dt))
        if p.stats: inst.stats.append((p.name, dict(p.stats)))
      if self.verify:
        try: m.verify()
        except (Diagnostic, DiagnosticList) as e:
          raise PassFailure(p.name, f"pass '{p.name}' left invalid IR:\n{e}") from e
      if inst and (inst.print_after_all or p.name in inst.print_after or (before is not None and m.print() != before)):
        inst.dump('After', p, m)
    return m


def list_passes() -> str:
  load_all()
  lines = []
  for name in sorted(PASSES):
    p = PASSES[name]
    lines.append(f"  {name:<28} {p.summary}  [{p.reads} -> {p.leaves}]")
    for k, (ty, d, h) in p.options.items():
      lines.append(f"      {k}={_fmt_opt(d)}  ({ty.__name__}) {h}")
  return "Available passes:\n" + '\n'.join(lines) + '\n'
