"""The parser: lark LALR with the contextual lexer, and an inline transformer that builds ops as lark
reduces them, so no parse tree is ever made. SSA names resolve as ops appear; a use before its definition
becomes a placeholder value that the definition adopts (uop.define_acc names ranges defined after it).
"""
from __future__ import annotations
import os, sys
from lark import Lark, Transformer, Token, v_args
from lark.exceptions import UnexpectedInput, UnexpectedToken, UnexpectedCharacters, UnexpectedEOF
from tgc.ir.core import Operation, Module, Value, Block, lookup_op, REGISTRY, FUNCTION
from tgc.ir.diagnostics import Diagnostic, Location, Source, Note
from tgc.ir.attrs import Ident, Symbol, Record, HexInt, LList, Tup, Ref, AttrError, normalize
from tgc.ir.format import compiled, FormatError
from tgc.ir.types import parse_type

MAX_DEPTH = 256  # nesting of [ ] and ( ): deeper input is refused, not recursed into

_PRETTY = {'VALUE': 'an SSA value', 'SYMBOL': 'a symbol', 'TYPE': 'a type', '_NL': 'end of line', 'OPNAME': 'an operation name',
           'BARE_ID': 'a name', 'INT': 'an integer', 'FLOAT': 'a float', 'STRING': 'a string', 'LSQB': "'['", 'RSQB': "']'",
           'LPAR': "'('", 'RPAR': "')'", 'LBRACE': "'{'", 'RBRACE': "'}'", 'COMMA': "','", 'COLON': "':'", 'EQUAL': "'='",
           'ARROW': "'->'", 'FUNC_NAME': 'a function op', 'MODULE': "'module'", 'RECORD_START': 'a record', 'HEX': 'a hex integer',
           'LOC': 'a location', 'ATTRIBUTES': "'attributes'", '$END': 'end of input'}


class ParseState:
  def __init__(self, source: Source, allow_unregistered: bool):
    self.source, self.allow_unregistered = source, allow_unregistered
    self.scopes: list[dict[str, Value]] = [{}]
    self.defs: list[dict[str, Location]] = [{}]
    self.pending: list[dict[str, tuple[Value, Location]]] = [{}]
    self.func_stack: list[Operation] = []

  def loc(self, tok) -> Location:
    return Location(self.source.name, tok.line + self.source.line_offset, tok.column, self.source)

  def resolve(self, ref: Ref, forward_ok: bool = True) -> Value:
    v = self.scopes[-1].get(ref.name)
    if v is not None: return v
    p = self.pending[-1].get(ref.name)
    if p is None:
      loc = Location(self.source.name, ref.line + self.source.line_offset, ref.col, self.source)
      p = (Value(None, None, 0, ref.name), loc)
      self.pending[-1][ref.name] = p
    return p[0]

  def define(self, name_tok, v: Value):
    name = str(name_tok)[1:]
    if name in self.scopes[-1]:
      raise Diagnostic(f"redefinition of SSA value '%{name}'", self.loc(name_tok),
                       notes=[Note('note', 'previous definition is here', self.defs[-1][name])])
    p = self.pending[-1].pop(name, None)
    if p is not None:  # adopt the placeholder its earlier uses hold
      ph = p[0]
      if ph.type is not None and ph.type != v.type:
        raise Diagnostic(f"use of value '%{name}' expects type {ph.type}, but it is defined as {v.type}", p[1])
      ph.type, ph.owner, ph.index = v.type, v.owner, v.index
      v.owner.results[v.index] = ph
      v = ph
    v.hint = name
    self.scopes[-1][name] = v
    self.defs[-1][name] = self.loc(name_tok)

  def push(self): self.scopes.append({}); self.defs.append({}); self.pending.append({})
  def pop(self):
    self.scopes.pop(); self.defs.pop()
    pend = self.pending.pop()
    if pend:
      name, (v, loc) = min(pend.items(), key=lambda kv: (kv[1][1].line, kv[1][1].col))
      raise Diagnostic(f"use of undeclared SSA value '%{name}'", loc)


@v_args(inline=True)
class _Build(Transformer):
  """lark calls these as it reduces; `self.st` is the state of the parse in progress."""
  st: ParseState

  # ---- items ----
  def ref(self, t): return Ref(str(t)[1:], t.line, t.column)
  def ident(self, t): return Ident(str(t))
  def symbol(self, t): return Symbol(str(t)[1:])
  def int(self, t): return int(t)
  def hex(self, t): return HexInt(int(str(t), 16))
  def float(self, t): return float(str(t))
  def string(self, t): return _unescape(str(t))
  def items(self, *xs): return list(xs)
  def list(self, items=None): return self._nest(LList(items or []), items)
  def tuple(self, items=None): return self._nest(Tup(items or []), items)
  def _nest(self, obj, items):
    d = 1 + max((getattr(x, 'depth', 0) for x in items or ()), default=0)
    if d > MAX_DEPTH: raise Diagnostic(f"nesting deeper than {MAX_DEPTH} levels", None)
    if isinstance(obj, LList): obj.depth = d
    else: obj = _DTup(obj, d)
    return obj
  def record(self, start, *kwargs):
    fields = {}
    for k, v in (kw for kw in kwargs if kw is not None):
      if k in fields: raise Diagnostic(f"duplicate field '{k}' in '{str(start)[:-1]}(...)'", self.st.loc(start))
      fields[k] = v
    return Record(str(start)[:-1], fields)
  def kwarg(self, k, v): return (str(k), _generic_value(v))
  def attr_dict(self, *kwargs):
    d = {}
    for kw in kwargs:
      if kw is None: continue
      if kw[0] in d: raise Diagnostic(f"duplicate attribute '{kw[0]}'", None)
      d[kw[0]] = kw[1]
    return d

  # ---- types ----
  def types(self, *toks): return [self._type(t) for t in toks]
  def _type(self, t):
    try: return parse_type(str(t))
    except ValueError as e: raise Diagnostic(str(e), self.st.loc(t)) from None
  def func_type(self, ins, outs=None):
    if isinstance(outs, Token): outs = [self._type(outs)]
    return ins or [], outs or []
  def ret(self, x=None):
    if isinstance(x, Token): return [self._type(x)]
    return x or []
  def results(self, *toks): return list(toks)
  def values(self, *toks): return [Ref(str(t)[1:], t.line, t.column) for t in toks]

  # ---- ops ----
  def custom(self, name, items, attrs, tin, arrow, tout):
    return ('custom', name, items or [], attrs, tin or [], tout if arrow is not None else None)
  def generic(self, name, values, attrs, ftype):
    return ('generic', name, values or [], attrs, ftype)

  def simple_op(self, results, body, loc_tok):
    st = self.st
    first = results[0] if results else body[1]
    loc = _explicit_loc(loc_tok, st) or st.loc(first)
    kind, name_tok = body[0], body[1]
    name = _unescape(str(name_tok)) if kind == 'generic' else str(name_tok)
    if name == 'return': name = 'func.return'
    cls = lookup_op(name)
    if cls is None:
      if not st.allow_unregistered or '.' not in name:
        raise Diagnostic(f"unregistered operation '{name}'" + ("" if st.allow_unregistered else " (use --allow-unregistered-dialect to accept it)"), st.loc(name_tok))
      if kind != 'generic': raise Diagnostic(f"custom form of unregistered operation '{name}' cannot be parsed: use the generic form", st.loc(name_tok))
      cls = _unregistered(name)
    if cls.FORMAT is None:
      raise Diagnostic(f"'{name}' has a region and only its custom form", st.loc(name_tok))
    try:
      if kind == 'custom':
        _, _, items, attrs, tin, tout = body
        operands, rtypes, fattrs = compiled(cls).parse(items, tin, tout, st.resolve)
        if attrs:
          for k in attrs:
            if k in fattrs: raise Diagnostic(f"attribute '{k}' is given twice", loc)
          fattrs.update(attrs)
      else:
        _, _, refs, fattrs, (tin, rtypes) = body
        fattrs = dict(fattrs or {})
        operands = [st.resolve(r) for r in refs]
        if len(tin) != len(operands): raise Diagnostic(f"'{name}' has {len(operands)} operands but its type lists {len(tin)}", loc)
        for i, (v, t) in enumerate(zip(operands, tin)):
          if v.type is None: v.type = t
          elif v.type != t: raise Diagnostic(f"operand #{i} of '{name}' has type {v.type}, but the type list says {t}", loc)
      for k, v in fattrs.items():
        kd = cls.ATTRS.get(k, 'any').rstrip('?')
        if kd == 'ident' and isinstance(v, str): continue
        fattrs[k] = normalize(kd, v)
      nres = len(results) if results else 0
      if nres != len(rtypes):
        raise Diagnostic(f"'{name}' produces {len(rtypes)} result{'s' if len(rtypes) != 1 else ''}, but {nres} name{'s are' if nres != 1 else ' is'} bound", loc)
      op = cls(operands, rtypes, fattrs, loc)
    except FormatError as e: raise Diagnostic(str(e), loc) from None
    except AttrError as e: raise Diagnostic(f"'{name}': {e}", loc) from None
    for tok, v in zip(results or (), op.results): st.define(tok, v)
    return op

  def func_header(self, name_tok, sym, args, arrow, ret, attrs_kw, attrs, loc_tok):
    st = self.st
    name = str(name_tok)
    cls = lookup_op(name)
    if cls is None or FUNCTION not in cls.TRAITS: raise Diagnostic(f"unregistered operation '{name}'", st.loc(name_tok))
    loc = _explicit_loc(loc_tok, st) or st.loc(name_tok)
    st.push()
    vals = []
    for a in args or []:
      v = Value(self._type(a[1]), hint=str(a[0])[1:])
      st.define(a[0], v)
      vals.append(v)
    fattrs = dict(attrs or {})
    fattrs['sym_name'] = Symbol(str(sym)[1:])
    if arrow is not None: fattrs['result_types'] = tuple(ret)
    try:
      for k, v in fattrs.items():
        if k not in ('sym_name', 'result_types'): fattrs[k] = normalize(cls.ATTRS.get(k, 'any'), v)
      op = cls([], [], fattrs, loc, Block(vals))
    except AttrError as e: raise Diagnostic(f"'{name}': {e}", loc) from None
    st.func_stack.append(op)
    return op
  def arg(self, v, t): return (v, t)
  def args(self, *a): return list(a)

  def func_op(self, header, *rest):
    ops = [o for o in rest if isinstance(o, Operation)]
    header.body.ops = ops
    self.st.pop()
    self.st.func_stack.pop()
    return header

  def module(self, _kw, *ops): return list(ops)
  def start(self, *tops):
    out = []
    for t in tops:
      if isinstance(t, list): out += t
      elif t is not None: out.append(t)
    return out


class _DTup(Tup):
  def __new__(cls, t, depth):
    o = super().__new__(cls, t); o.depth = depth; return o


def _generic_value(v):
  if isinstance(v, Ident):
    if v == 'true': return True
    if v == 'false': return False
  return v

def _explicit_loc(tok, st: ParseState) -> Location | None:
  if tok is None: return None
  s = str(tok)[4:-1]
  q = s.rindex('"')
  fname = _unescape(s[:q + 1])
  line, col = s[q + 2:].split(':')
  return Location(fname, int(line), int(col), st.source if fname == st.source.name else None)

def _unescape(s: str) -> str:
  body = s[1:-1]
  if '\\' not in body: return body
  out, i = [], 0
  while i < len(body):
    c = body[i]
    if c == '\\' and i + 1 < len(body):
      n = body[i + 1]
      out.append({'n': '\n', 't': '\t', '"': '"', '\\': '\\'}.get(n, n)); i += 2
    else: out.append(c); i += 1
  return ''.join(out)

_unreg: dict[str, type] = {}
def _unregistered(name: str):
  if name not in _unreg:
    cls = type('Unregistered', (Operation,), {'OPERANDS': ('operands*',), 'RESULTS': -1, 'FORMAT': '$operands'})
    cls.name = name  # set after class creation: not entered in the registry
    _unreg[name] = cls
  return _unreg[name]


_lark: Lark | None = None
_build = _Build()

def _parser() -> Lark:
  global _lark
  if _lark is None:
    here = os.path.dirname(__file__)
    cache = os.path.join(os.environ.get('XDG_CACHE_HOME', os.path.expanduser('~/.cache')), 'tgc')
    try: os.makedirs(cache, exist_ok=True); cache_file = os.path.join(cache, f'grammar-{_grammar_hash(here)}.lark.cache')
    except OSError: cache_file = False
    _lark = Lark.open(os.path.join(here, 'grammar.lark'), parser='lalr', lexer='contextual', transformer=_build,
                      maybe_placeholders=True, cache=cache_file or False)
  return _lark

def _grammar_hash(here):
  import hashlib
  import lark
  with open(os.path.join(here, 'grammar.lark'), 'rb') as f: return hashlib.sha1(f.read() + lark.__version__.encode()).hexdigest()[:16]


def parse(text: str, filename: str = '<stdin>', verify: bool = True, allow_unregistered: bool = False, line_offset: int = 0) -> Module:
  """Text -> a verified Module. Raises Diagnostic (or DiagnosticList from the verifier) on bad input."""
  source = Source(filename, text, line_offset)
  if '\x00' in text: 
    line = text[:text.index('\x00')].count('\n') + 1
    raise Diagnostic("unexpected NUL byte in input", Location(filename, line + line_offset, 1, source))
  st = ParseState(source, allow_unregistered)
  _build.st = st
  p = _parser()
  old = sys.getrecursionlimit()
  try:
    ops = p.parse(text if text.endswith('\n') else text + '\n')
  except UnexpectedInput as e: raise _syntax_error(e, source) from None
  except RecursionError: raise Diagnostic("input nested too deeply", Location(filename, 1 + line_offset, 1, source)) from None
  except Diagnostic as d:
    if d.loc is None: d.loc = _nesting_loc(source) if 'nesting' in d.message else _last_loc(st)
    raise
  finally: sys.setrecursionlimit(old)
  if st.pending[-1]:
    st.pop()
  m = Module(ops or [], source)
  if verify: m.verify()
  return m

def _nesting_loc(source: Source) -> Location:
  """Where the brackets first nest deeper than MAX_DEPTH."""
  depth, line, col = 0, 1, 0
  for ch in source.text:
    col += 1
    if ch == '\n': line, col = line + 1, 0
    elif ch in '[(': 
      depth += 1
      if depth > MAX_DEPTH: break
    elif ch in '])': depth -= 1
  return Location(source.name, line + source.line_offset, col, source)

def _last_loc(st): return Location(st.source.name, 1 + st.source.line_offset, 1, st.source)

def _syntax_error(e: UnexpectedInput, source: Source) -> Diagnostic:
  line, col = getattr(e, 'line', 1) or 1, getattr(e, 'column', 1) or 1
  if line < 1: line, col = source.text.count('\n') + 1, 1
  loc = Location(source.name, line + source.line_offset, col, source)
  if isinstance(e, UnexpectedCharacters):
    ch = source.text.split('\n')[line - 1][col - 1:col] if line - 1 < len(source.text.split('\n')) else '?'
    return Diagnostic(f"unexpected character {ch!r}" if ch.isprintable() else f"unexpected character {ch.encode('unicode_escape').decode()!r}", loc)
  if isinstance(e, UnexpectedToken):
    tok = e.token
    got = 'end of input' if tok.type == '$END' else 'end of line' if tok.type == '_NL' else repr(str(tok))
    exp = sorted({_PRETTY.get(x, repr(x)) for x in e.expected})
    if tok.type == '$END': loc = Location(source.name, source.text.count('\n') + 1 + source.line_offset, 1, source)
    return Diagnostic(f"expected {_join(exp)}, got {got}", loc)
  return Diagnostic("unexpected end of input", loc)

def _join(xs):
  if len(xs) > 6: xs = xs[:6] + ['...']
  return xs[0] if len(xs) == 1 else ', '.join(xs[:-1]) + ' or ' + xs[-1]


def parse_chunks(text: str, filename: str, split: bool):
  """For --split-input-file: yields (chunk text, line offset) for each `// -----` separated part."""
  if not split:
    yield text, 0; return
  lines = text.split('\n')
  start = 0
  for i, l in enumerate(lines + ['// -----']):
    if l.strip() == '// -----':
      yield '\n'.join(lines[start:i]), start
      start = i + 1
