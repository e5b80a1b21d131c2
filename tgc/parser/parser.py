"""The parser: lark LALR with the contextual lexer, and builder callbacks that make ops as the parser
reduces, so no parse tree is ever made. SSA names resolve as ops appear; a use before its definition
becomes a placeholder value that the definition adopts (uop.define_acc names ranges defined after it).

Speed (tools.md): the grammar, its LALR tables and its contextual lexer are lark's; the loop that drives
them is `_Engine.run` below, a tight version of lark's own `parse_from_state` + `ContextualLexer.lex` that
reads the same tables, tries the same terminals in the same order in each parser state (dispatched on the
first character), and calls the builder with exactly the children lark's tree builder would pass
(`maybe_placeholders`, filtered tokens, inlined `_rules` and `?rules`). The tables are extracted from lark
once and cached next to lark's own grammar cache, so start-up does not import lark at all. On a syntax
error the input is handed to lark itself (without the builder: everything before the error has already
been built without complaint), so every syntax diagnostic is lark's, exactly as before.
"""
from __future__ import annotations
import gc, os, sys
from tgc.ir.core import Operation, Module, Value, Block, lookup_op, FUNCTION
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

# A token that reaches the builder is a tuple (text, line, column); the others are never looked at.


class ParseState:
  __slots__ = ('source', 'allow_unregistered', 'scopes', 'defs', 'pending', 'func_stack', 'name', 'offset')
  def __init__(self, source: Source, allow_unregistered: bool):
    self.source, self.allow_unregistered = source, allow_unregistered
    self.name, self.offset = source.name, source.line_offset
    self.scopes: list[dict[str, Value]] = [{}]
    self.defs: list[dict[str, tuple]] = [{}]   # name -> its defining token (a Location is made only for a diagnostic)
    self.pending: list[dict[str, tuple[Value, Location]]] = [{}]
    self.func_stack: list[Operation] = []

  def loc(self, tok) -> Location:
    return _location(self.name, tok[1] + self.offset, tok[2], self.source)

  def resolve(self, ref: Ref, forward_ok: bool = True) -> Value:
    v = self.scopes[-1].get(ref.name)
    if v is not None: return v
    p = self.pending[-1].get(ref.name)
    if p is None:
      loc = Location(self.name, ref.line + self.offset, ref.col, self.source)
      p = (Value(None, None, 0, ref.name), loc)
      self.pending[-1][ref.name] = p
    return p[0]

  def define(self, name_tok, v: Value):
    name = name_tok[0][1:]
    scope = self.scopes[-1]
    if name in scope:
      raise Diagnostic(f"redefinition of SSA value '%{name}'", self.loc(name_tok),
                       notes=[Note('note', 'previous definition is here', self.loc(self.defs[-1][name]))])
    pending = self.pending[-1]
    if pending:  # (usually empty: no use before its definition)
      p = pending.pop(name, None)
      if p is not None:  # adopt the placeholder its earlier uses hold
        ph = p[0]
        if ph.type is not None and ph.type != v.type:
          raise Diagnostic(f"use of value '%{name}' expects type {ph.type}, but it is defined as {v.type}", p[1])
        ph.type, ph.owner, ph.index = v.type, v.owner, v.index
        v.owner.results[v.index] = ph
        v = ph
    v.hint = name
    scope[name] = v
    self.defs[-1][name] = name_tok

  def push(self): self.scopes.append({}); self.defs.append({}); self.pending.append({})
  def pop(self):
    self.scopes.pop(); self.defs.pop()
    pend = self.pending.pop()
    if pend:
      name, (v, loc) = min(pend.items(), key=lambda kv: (kv[1][1].line, kv[1][1].col))
      raise Diagnostic(f"use of undeclared SSA value '%{name}'", loc)


def _location_fast(file, line, col, source, _new=object.__new__, _L=Location):
  o = _new(_L)
  d = o.__dict__
  d['file'] = file; d['line'] = line; d['col'] = col; d['source'] = source
  return o

def _pick_location():
  """Location is a frozen dataclass, whose __init__ is slow; filling its __dict__ makes the same object
  (fields, equality, hash) four times as fast. Only where that holds: plain fields, no __post_init__."""
  try:
    import dataclasses
    names = tuple(f.name for f in dataclasses.fields(Location))
    if names == ('file', 'line', 'col', 'source') and '__slots__' not in Location.__dict__ and not hasattr(Location, '__post_init__'):
      l = _location_fast('f', 1, 2, None)
      if l == Location('f', 1, 2, None) and hash(l) == hash(Location('f', 1, 2, None)) and repr(l) == repr(Location('f', 1, 2, None)):
        return _location_fast
  except Exception: pass
  return Location

_location = _pick_location()


def _type_of(st, t):
  try: return parse_type(t[0])
  except ValueError as e: raise Diagnostic(str(e), st.loc(t)) from None


class _Build:
  """The parser calls these as it reduces, with the children lark's tree builder would give the rule
  (positionally, as lark's `v_args(inline=True)` would); `self.st` is the state of the parse in progress."""

  def __init__(self, st: ParseState):
    self.st = st
    self._types = {}  # TYPE text -> type, for this parse (errors still go through _type_of)
    self._ops = {}    # op name as written -> (class, its format's parse, its name)

  # ---- items ----
  def ref(self, t): return Ref(t[0][1:], t[1], t[2])
  def ident(self, t): return Ident(t[0])
  def symbol(self, t): return Symbol(t[0][1:])
  def int(self, t):
    # Python refuses int() of more digits than sys.get_int_max_str_digits() (4300); no type needs 40
    if len(t[0]) > 100: raise Diagnostic(f"integer literal of {len(t[0].lstrip('-'))} digits is too long", self.st.loc(t))
    return int(t[0])
  def hex(self, t): return HexInt(int(t[0], 16))
  def float(self, t): return float(t[0])
  def string(self, t): return _unescape(t[0])
  def items(self, *xs): return list(xs)
  def list(self, items=None): return _nest(LList(items or []), items)
  def tuple(self, items=None): return _nest(Tup(items or []), items)
  def record(self, start, *kwargs):
    fields = {}
    for k, v, tok in (kw for kw in kwargs if kw is not None):
      if k in fields: raise Diagnostic(f"duplicate field '{k}' in '{start[0][:-1]}(...)'", self.st.loc(tok))
      fields[k] = v
    return Record(start[0][:-1], fields)
  def kwarg(self, k, v):
    r = _first_ref(v)  # (an attribute holds constants: an SSA value there printed as a Python object, unparseable)
    if r is not None: raise Diagnostic(f"attribute '{k[0]}' holds the SSA value %{r.name}: attributes are constants", self.st.loc((r.name, r.line, r.col)))
    return (k[0], _generic_value(v), k)  # the key's token: where a duplicate is reported
  def attr_dict(self, *kwargs):
    d = {}
    for kw in kwargs:
      if kw is None: continue
      if kw[0] in d: raise Diagnostic(f"duplicate attribute '{kw[0]}'", self.st.loc(kw[2]))
      d[kw[0]] = kw[1]
    return d

  # ---- types ----
  def types(self, *toks):
    cache, out = self._types, []
    for t in toks:
      ty = cache.get(t[0])
      if ty is None: ty = cache[t[0]] = _type_of(self.st, t)
      out.append(ty)
    return out
  def func_type(self, ins, outs=None):
    if isinstance(outs, tuple): outs = [_type_of(self.st, outs)]
    return ins or [], outs or []
  def ret(self, x=None):
    if isinstance(x, tuple): return [_type_of(self.st, x)]
    return x or []
  def results(self, *toks): return list(toks)
  def values(self, *toks): return [Ref(t[0][1:], t[1], t[2]) for t in toks]

  # ---- ops ----
  def custom(self, name, items, attrs, tin, arrow, tout):
    return (True, name, items or [], attrs, tin or [], tout if arrow is not None else None)
  def generic(self, name, values, attrs, ftype):
    return (False, name, values or [], attrs, ftype)

  def simple_op(self, results, body, loc_tok):
    st = self.st
    is_custom, name_tok = body[0], body[1]
    loc = _explicit_loc(loc_tok, st) if loc_tok is not None else None
    if loc is None:
      first = results[0] if results else name_tok
      loc = _location(st.name, first[1] + st.offset, first[2], st.source)
    name = name_tok[0] if is_custom else _unescape(name_tok[0])
    known = self._ops.get(name)
    if known is None:
      if name == 'return': name = 'func.return'
      cls = lookup_op(name)
      if cls is None:
        if not st.allow_unregistered or '.' not in name:
          raise Diagnostic(f"unregistered operation '{name}'" + ("" if st.allow_unregistered else " (use --allow-unregistered-dialect to accept it)"), st.loc(name_tok))
        if is_custom: raise Diagnostic(f"custom form of unregistered operation '{name}' cannot be parsed: use the generic form", st.loc(name_tok))
        cls = _unregistered(name)
      if cls.FORMAT is None:
        raise Diagnostic(f"'{name}' has a region and only its custom form", st.loc(name_tok))
      known = self._ops[name_tok[0] if is_custom else _unescape(name_tok[0])] = (cls, compiled(cls).parse, name)
    cls, fparse, name = known
    try:
      if is_custom:
        _, _, items, attrs, tin, tout = body
        operands, rtypes, fattrs = fparse(items, tin, tout, st.resolve)
        if attrs:
          for k in attrs:
            if k in fattrs: raise Diagnostic(f"attribute '{k}' is given twice", loc)
          fattrs.update(attrs)
          _normalize_attrs(cls, fattrs)
        # else: the format has normalised every attribute it read, and normalize is idempotent
      else:
        _, _, refs, fattrs, (tin, rtypes) = body
        fattrs = dict(fattrs or {})
        operands = [st.resolve(r) for r in refs]
        if len(tin) != len(operands): raise Diagnostic(f"'{name}' has {len(operands)} operands but its type lists {len(tin)}", loc)
        for i, (v, t) in enumerate(zip(operands, tin)):
          if v.type is None: v.type = t
          elif v.type != t: raise Diagnostic(f"operand #{i} of '{name}' has type {v.type}, but the type list says {t}", loc)
        if fattrs: _normalize_attrs(cls, fattrs)
      nres = len(results) if results else 0
      if nres != len(rtypes):
        raise Diagnostic(f"'{name}' produces {len(rtypes)} result{'s' if len(rtypes) != 1 else ''}, but {nres} name{'s are' if nres != 1 else ' is'} bound", loc)
      op = cls._new(operands, rtypes, fattrs, loc)
    except FormatError as e: raise Diagnostic(str(e), st.loc((None,) + e.pos) if e.pos else loc) from None
    except AttrError as e: raise Diagnostic(f"'{name}': {e}", loc) from None
    if results:
      define = st.define
      for tok, v in zip(results, op.results): define(tok, v)
    return op

  def func_header(self, name_tok, sym, args, arrow, ret, attrs_kw, attrs, loc_tok):
    st = self.st
    name = name_tok[0]
    cls = lookup_op(name)
    if cls is None or FUNCTION not in cls.TRAITS: raise Diagnostic(f"unregistered operation '{name}'", st.loc(name_tok))
    loc = _explicit_loc(loc_tok, st) or st.loc(name_tok)
    st.push()
    vals = []
    for a in args or []:
      v = Value(_type_of(st, a[1]), hint=a[0][0][1:])
      st.define(a[0], v)
      vals.append(v)
    fattrs = dict(attrs or {})
    fattrs['sym_name'] = Symbol(sym[0][1:])
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
    header.body.ops = [o for o in rest if isinstance(o, Operation)]
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


def _normalize_attrs(cls, fattrs):
  for k, v in fattrs.items():
    kd = cls.ATTRS.get(k, 'any').rstrip('?')
    if kd == 'ident' and isinstance(v, str): continue
    fattrs[k] = normalize(kd, v)

def _nest(obj, items):
  d = 1 + max((getattr(x, 'depth', 0) for x in items or ()), default=0)
  if d > MAX_DEPTH: raise Diagnostic(f"nesting deeper than {MAX_DEPTH} levels", None)
  if isinstance(obj, LList): obj.depth = d
  else: obj = _DTup(obj, d)
  return obj


class _DTup(Tup):
  def __new__(cls, t, depth):
    o = super().__new__(cls, t); o.depth = depth; return o


def _first_ref(v):
  """The first SSA value reference in an item (lists, tuples and records searched), or None."""
  if isinstance(v, Ref): return v
  if isinstance(v, Record): v = list(v.fields.values())
  if isinstance(v, (list, tuple)):
    for x in v:
      r = _first_ref(x)
      if r is not None: return r
  return None

def _generic_value(v):
  if isinstance(v, Ident):
    if v == 'true': return True
    if v == 'false': return False
  return v

def _explicit_loc(tok, st: ParseState) -> Location | None:
  if tok is None: return None
  s = tok[0][4:-1]
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
    cls = type('Unregistered', (Operation,), {'OPERANDS': ('values*',), 'RESULTS': -1, 'FORMAT': '$values'})  # not 'operands': that is Operation's own
    cls.name = name  # set after class creation: not entered in the registry
    _unreg[name] = cls
  return _unreg[name]


# ---------------------------------------------------------------- lark, and the tables taken from it
_TABLES_VERSION = 1
_HERE = os.path.dirname(os.path.abspath(__file__))
_GRAMMAR = os.path.join(_HERE, 'grammar.lark')
_lark = None


def _cache_dir() -> str | None:
  from tgc.cache import cache_dir  # (tgc's one cache directory: TGC_CACHE=0 turns it off)
  return cache_dir()

def _lark_init() -> str | None:
  """lark's __init__.py, found without importing lark."""
  for d in sys.path:
    f = os.path.join(d or '.', 'lark', '__init__.py')
    if os.path.isfile(f): return f
  return None

def _key(files=None) -> str:
  """What the cached tables depend on: the grammar, this file (how they are made), lark (its
  __init__.py, which names its version) and Python (marshal's format, code objects)."""
  parts = [sys.version, str(_TABLES_VERSION)]
  for f in files or (_GRAMMAR, __file__, _lark_init()):
    try: st = os.stat(f); parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    except (OSError, TypeError): parts.append(f"{f}:-")
  return '|'.join(parts)

def _key_name(key: str) -> str:
  import zlib
  return f"{zlib.crc32(key.encode()):08x}{zlib.adler32(key.encode()):08x}"

def _parser():
  """lark's own parser for this grammar (no builder): makes the tables, and every syntax diagnostic."""
  global _lark
  if _lark is None:
    from lark import Lark
    cache = _cache_dir()
    cache_file = os.path.join(cache, f'grammar-{_key_name(_key((_GRAMMAR, _lark_init())))}.lark.cache') if cache else False
    _lark = Lark.open(_GRAMMAR, parser='lalr', lexer='contextual', maybe_placeholders=True, cache=cache_file or False)
  return _lark


def _extract_tables() -> dict:
  """lark's LALR tables, rules and per-state terminals, as plain data (picklable, lark-free)."""
  from lark.parsers.lalr_analysis import Shift
  from lark.parse_tree_builder import maybe_create_child_filter, ChildFilterLALR, ChildFilterLALR_NoPlaceholders
  lk = _parser()
  pt = lk.parser.parser.parser.parse_table
  start_state, end_state = pt.start_states['start'], pt.end_states['start']
  rules = list(lk.rules)
  rule_index = {id(r): i for i, r in enumerate(rules)}
  nstates = max(pt.states) + 1
  term_names = {t.name for t in lk.terminals} | {'$END'}
  actions = [dict() for _ in range(nstates)]  # terminal -> next state (shift) or ~rule index (reduce)
  gotos = [dict() for _ in range(nstates)]    # nonterminal -> next state
  for s, acts in pt.states.items():
    for sym, (action, arg) in acts.items():
      sym = str(sym)  # plain data only: loading the tables must not need lark
      if action is Shift: (actions if sym in term_names else gotos)[s][sym] = int(arg)
      else: actions[s][sym] = ~rule_index[id(arg)]
  out_rules = []
  for r in rules:
    o = r.options
    empty = o.empty_indices  # maybe_placeholders=True
    cf = maybe_create_child_filter(r.expansion, o.keep_all_tokens, False, empty)
    n = len(r.expansion)
    if cf is None: to_include, trailing = [(i, False, 0) for i in range(n)], 0
    elif cf.func is ChildFilterLALR: to_include, trailing = cf.args
    elif cf.func is ChildFilterLALR_NoPlaceholders: to_include, trailing = [(i, x, 0) for i, x in cf.args[0]], 0
    else: raise RuntimeError(f"unexpected child filter {cf.func}")
    out_rules.append({'origin': str(r.origin.name), 'size': n, 'include': [tuple(int(y) for y in x) for x in to_include],
                      'trailing': int(trailing), 'expand1': bool(o.expand1 and not r.alias),
                      'name': str(r.alias or o.template_source or r.origin.name)})
  lx = lk.parser.lexer
  lexers, lexer_of = [], [None] * nstates
  seen = {}
  for s, bl in lx.lexers.items():
    if id(bl) not in seen:
      seen[id(bl)] = len(lexers)
      bl.scanner  # builds bl.callback
      if bl.callback or bl.user_callbacks: raise RuntimeError("lexer callbacks are not supported by the fast parser")
      lexers.append([(str(t.name), str(t.pattern.to_regexp())) for t in bl.terminals])  # in lark's order
    lexer_of[s] = seen[id(bl)]
  # terminals the builder may see (filtering is per occurrence: "->" is dropped where ARROW is kept)
  keep = sorted({sym.name for r in rules for sym in r.expansion if sym.is_term and not sym.filter_out})
  ignore = {t.name: t.pattern.to_regexp() for t in lk.terminals if t.name in lk.lexer_conf.ignore}
  newline = sorted(t.name for t in lk.terminals if _may_match_newline(t.pattern.to_regexp()))
  keep, newline = [str(x) for x in keep], [str(x) for x in newline]
  firsts = {}  # regexp -> the characters its matches can start with ('' never; None: any)
  for terms in lexers:
    for _, rx in terms:
      if rx not in firsts:
        f = _first_chars(rx)
        firsts[rx] = None if f is _ANY else ''.join(sorted(f))
  ignore = {str(k): str(v) for k, v in ignore.items()}
  return {'start': int(start_state), 'end': int(end_state), 'actions': actions, 'gotos': gotos, 'rules': out_rules,
          'lexers': lexers, 'lexer_of': lexer_of, 'keep': keep, 'ignore': ignore, 'newline': newline, 'firsts': firsts}


def _load_tables() -> dict:
  """The tables (and the compiled rule functions' code), from the cache when it was made for this key."""
  import marshal
  key = _key()
  cache = _cache_dir()
  path = os.path.join(cache, f'tables-{_key_name(key)}.marshal') if cache else None
  if path:
    try:
      with open(path, 'rb') as f: t = marshal.load(f)
      if isinstance(t, dict) and t.get('key') == key: return t
    except Exception: pass
  t = _extract_tables()
  t['key'] = key
  t['factory'] = _factory_code(t['rules'])
  if path:
    try:
      tmp = f"{path}.{os.getpid()}.tmp"
      with open(tmp, 'wb') as f: marshal.dump(t, f)
      os.replace(tmp, path)
    except (OSError, ValueError): pass
  return t


# ---------------------------------------------------------------- the engine
def _plain(p): return not any(x.startswith('*') for x in p)

# The commonest builder methods as expressions, written into the rule functions instead of a call; each
# is exactly its _Build method (`ref`, `items`, `results`, `custom`). None: no template for these children.
_INLINE = {
  'ref': lambda p: f"Ref({p[0]}[0][1:], {p[0]}[1], {p[0]}[2])" if len(p) == 1 and _plain(p) else None,
  'items': lambda p: f"[{', '.join(p)}]",
  'results': lambda p: f"[{', '.join(p)}]",
  'custom': lambda p: (f"(True, {p[0]}, {p[1]} or [], {p[2]}, {p[3]} or [], {p[5]} if {p[4]} is not None else None)"
                       if len(p) == 6 and _plain(p) else None),
}

def _factory_code(rules):
  """Python source for one function per rule: the children lark's tree builder would pass, then the
  builder's method (or, for lark's inlined `_rules`, the list itself). A rule of one symbol takes that
  child itself (c0); a longer one the list of its children (c); an empty one nothing. A rule whose value
  is its only child (lark's `?rule` with one child left) gets no function: None."""
  src = ['def _mk(B):']
  names = {}
  fnames = []
  for i, r in enumerate(rules):
    size = r['size']
    def ch(j): return 'c0' if size == 1 else f'c[{j}]'
    parts = []
    for (j, expand, nones) in r['include']:
      parts += ['None'] * nones
      parts.append(f'*{ch(j)}' if expand else ch(j))
    parts += ['None'] * r['trailing']
    cb = r['name']
    if r['origin'].startswith('_'):  # an inlined rule: its value is the list of its children
      inc = r['include']
      if inc and inc[0][1] and inc[0][2] == 0:  # lark's left-recursion optimisation: grow the child's list
        body = f"x = {ch(inc[0][0])}"
        for p in parts[1:]: body += f"\n    x.extend({p[1:]})" if p.startswith('*') else f"\n    x.append({p})"
        body += "\n    return x"
      else: body = f"return [{', '.join(parts)}]"
    elif r['expand1'] and len(parts) == 1 and not parts[0].startswith('*'):
      if size == 1: fnames.append('None'); continue  # the value is the child
      body = f"return {parts[0]}"
    else:
      inline = _INLINE[cb](parts) if cb in _INLINE and not r['expand1'] else None
      if inline is not None: body = f"return {inline}"
      else:
        var = names.setdefault(cb, f"B_{cb}")
        body = f"return {var}({', '.join(parts)})"
        if r['expand1']: body = f"a = [{', '.join(parts)}]\n    return a[0] if len(a) == 1 else {var}(*a)"
    args = '' if size == 0 else 'c0' if size == 1 else 'c'
    src.append(f"  def r{i}({args}):\n    {body}")
    fnames.append(f"r{i}")
  for cb, var in names.items(): src.insert(1, f"  {var} = B.{cb}")
  src.append(f"  return [{', '.join(fnames)}]")
  return compile('\n'.join(src), '<tgc-parser-rules>', 'exec')


class _SyntaxError(Exception):
  """The engine met input the grammar does not accept: lark will say how."""


_ANY = None  # a terminal that may start with any character

def _regex_tree(regexp: str):
  try:
    import re._parser as P, re._constants as C
    return P.parse(regexp), C
  except Exception: return None, None

def _first_chars(regexp: str):
  """The set of characters a match of `regexp` can start with (None: any, or unknown)."""
  parsed, C = _regex_tree(regexp)
  if parsed is None: return _ANY
  reps = tuple(getattr(C, n) for n in ('MAX_REPEAT', 'MIN_REPEAT', 'POSSESSIVE_REPEAT') if hasattr(C, n))
  def seq(items):
    acc = set()
    for op, av in items:
      f, nullable = one(op, av)
      if f is _ANY: return _ANY, False
      acc |= f
      if not nullable: return acc, False
    return acc, True
  def one(op, av):
    if op is C.LITERAL: return {chr(av)}, False
    if op is C.IN:
      s = set()
      for o, a in av:
        if o is C.LITERAL: s.add(chr(a))
        elif o is C.RANGE: s.update(chr(c) for c in range(a[0], a[1] + 1))
        else: return _ANY, False  # NEGATE, CATEGORY, ...
      return s, False
    if op is C.SUBPATTERN:
      if av[1] or av[2]: return _ANY, False  # flags
      return seq(av[3])
    if op is C.BRANCH:
      s, nullable = set(), False
      for alt in av[1]:
        f, n = seq(alt)
        if f is _ANY: return _ANY, False
        s |= f; nullable = nullable or n
      return s, nullable
    if op in reps:
      f, n = seq(av[2])
      if f is _ANY: return _ANY, False
      return f, n or av[0] == 0
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT): return set(), True  # zero width: what follows decides (a superset)
    return _ANY, False
  f, nullable = seq(parsed)
  if f is _ANY or nullable: return _ANY
  return frozenset(f)

def _may_match_newline(regexp: str) -> bool:
  """Whether a match of `regexp` can contain a line break (True when unsure)."""
  parsed, C = _regex_tree(regexp)
  if parsed is None: return True
  NL = 10
  def walk(items):
    for op, av in items:
      if op is C.LITERAL:
        if av == NL: return True
      elif op is C.NOT_LITERAL:
        if av != NL: return True
      elif op is C.IN:
        neg = any(o is C.NEGATE for o, _ in av)
        has = False
        for o, a in av:
          if o is C.LITERAL and a == NL: has = True
          elif o is C.RANGE and a[0] <= NL <= a[1]: has = True
          elif o is C.CATEGORY:
            nm = str(a)
            if ('SPACE' in nm or 'LINEBREAK' in nm) != ('NOT' in nm) or 'NOT_DIGIT' in nm or 'NOT_WORD' in nm: has = True
        if has != neg: return True
      elif op is C.ANY: continue  # without DOTALL (lark sets no flags; a flagged group is below) '.' is not \n
      elif op is C.SUBPATTERN:
        if av[1] or av[2] or walk(av[3]): return True
      elif op is C.BRANCH:
        if any(walk(alt) for alt in av[1]): return True
      elif op in (C.MAX_REPEAT, C.MIN_REPEAT) or op.name.endswith('REPEAT'):
        if walk(av[2]): return True
      elif op in (C.AT, C.ASSERT, C.ASSERT_NOT): continue
      else: return True
    return False
  return walk(parsed)


_NO_TERMINAL = (lambda text, pos: None, None, None, None)  # a dispatch entry that never matches


class _Engine:
  """Runs lark's LALR tables over a text with lark's contextual lexer's terminals; see the module doc.

  Lexing: in each parser state, lark's contextual lexer tries the state's terminals in one order and
  takes the first that matches. The engine tries the same terminals in the same order, less those that
  cannot start with the next character (their first characters come from the regexps). Ignored terminals
  (spaces, comments) are skipped before each token by one regexp when that is exact: when no kept
  terminal can start where they can (an _NL at \r\n aside, which the skip leaves alone)."""

  def __init__(self, t: dict):
    import re
    self.re = re
    self.start, self.end = t['start'], t['end']
    self.actions, self.gotos = t['actions'], t['gotos']
    self.keep = frozenset(t['keep'])
    self.newline = frozenset(t['newline'])
    self.ignore = frozenset(t['ignore'])
    self.lexer_terms = t['lexers']
    self.lexer_of = t['lexer_of']
    self._first = {rx: (_ANY if f is None else frozenset(f)) for rx, f in t.get('firsts', {}).items()}
    self._compiled = {}
    self._by_lexer = [dict() for _ in self.lexer_terms]  # char -> (match, type or None: m.lastgroup); lazily
    self.dispatch = [self._by_lexer[i] if i is not None else {} for i in self.lexer_of]
    ign = t['ignore']
    # the skip regexp below is exactly grammar.lark's two %ignore terminals
    skip_ok = ign == {'COMMENT': '\\/\\/[^\n]*', '__IGNORE_1': '[ \t\x0c\r]+'}
    skip_chars = set(' \t\f\r/')
    if skip_ok:
      for terms in self.lexer_terms:
        for name, rx in terms:
          if name in ign: continue
          f = self._first_of(rx)
          if f is _ANY or (f & skip_chars) - ({'\r'} if name == '_NL' else set()): skip_ok = False
    self.skip_chars = frozenset(skip_chars) if skip_ok else frozenset()
    self.skipped = frozenset(ign) if skip_ok else frozenset()  # left out of the dispatch
    self.skip = re.compile(r'(?:(?!\r?\n)[ \t\f\r]+|//[^\n]*)+').match
    self.rules = t['rules']
    by_origin = {}  # nonterminal -> {state: the state its goto leads to}
    for st_, g in enumerate(self.gotos):
      for sym, nxt in g.items(): by_origin.setdefault(sym, {})[st_] = nxt
    self._rule_gotos = [by_origin.get(r['origin'], {}) for r in self.rules]
    ns = {'Ref': Ref}
    exec(t['factory'], ns)
    self._factory = ns['_mk']

  def _first_of(self, rx):
    f = self._first.get(rx, 0)
    if f == 0: f = self._first[rx] = _first_chars(rx)
    return f

  def entry(self, state: int, c: str):
    """(match, type) for the terminals of `state`'s lexer that can start with `c`, in lark's order."""
    li = self.lexer_of[state]
    if li is None: return _NO_TERMINAL
    tab = self._by_lexer[li]
    if c in tab: return tab[c]
    terms = []
    for n, rx in self.lexer_terms[li]:
      if n in self.skipped: continue
      f = self._first_of(rx)
      if f is _ANY or c in f: terms.append((n, rx))
    if not terms: e = _NO_TERMINAL
    else:
      if len(terms) == 1: pat, typ = terms[0][1], terms[0][0]
      else: pat, typ = '|'.join(f'(?P<{n}>{rx})' for n, rx in terms), None
      m = self._compiled.get(pat)
      if m is None: m = self._compiled[pat] = self.re.compile(pat).match
      special = self.newline | self.ignore
      # (match, type or None when m.lastgroup tells, whether the builder sees it, whether it is _NL/ignored)
      e = (m, typ, typ in self.keep, typ in special) if typ is not None else (m, None, None, None)
    tab[c] = e
    return e

  def run(self, text: str, builder):
    fns = self._factory(builder)
    # this run's action tables: a shift is the next state (an int), a reduce the tuple
    # (size, that rule's gotos: state below -> next state, its function)
    rgoto = self._rule_gotos
    red = [(r['size'], rgoto[i], f) for i, (r, f) in enumerate(zip(self.rules, fns))]
    actions = [{t: (a if a >= 0 else red[~a]) for t, a in acts.items()} for acts in self.actions]
    dispatch, keep, newline, ignore = self.dispatch, self.keep, self.newline, self.ignore
    special = newline | ignore
    skip, skip_chars, entry = self.skip, self.skip_chars, self.entry
    single_space = ' ' in skip_chars
    end_state = self.end
    n = len(text)
    pos, line, lstart = 0, 1, 0
    state = self.start
    sstack, vstack = [state], []
    spush, vpush = sstack.append, vstack.append
    _int = int
    while pos < n:
      c = text[pos]
      if c in skip_chars:
        if c == ' ' and single_space and pos + 1 < n and text[pos + 1] not in skip_chars:  # the usual one space
          pos += 1
          c = text[pos]
        else:
          m = skip(text, pos)
          if m is not None:
            pos = m.end()
            if pos >= n: break
            c = text[pos]
      try: match, typ, kept, spec = dispatch[state][c]
      except KeyError: match, typ, kept, spec = entry(state, c)
      m = match(text, pos)
      if m is None: raise _SyntaxError()
      if typ is None:
        typ = m.lastgroup
        kept, spec = typ in keep, typ in special
      p0, pos = pos, m.end()
      tok = (m.group(), line, p0 - lstart + 1) if kept else None
      if spec:
        if typ in newline:
          v = m.group()
          k = v.count('\n')
          if k: line += k; lstart = p0 + v.rindex('\n') + 1
        if typ in ignore: continue
      acts = actions[state]
      while True:
        try: a = acts[typ]
        except KeyError: raise _SyntaxError() from None
        if a.__class__ is _int:
          state = a; spush(a); vpush(tok)
          break
        size, gt, fn = a
        if size == 1:
          if fn is not None: vstack[-1] = fn(vstack[-1])
          state = sstack[-1] = gt[sstack[-2]]
        else:
          if size:
            ch = vstack[-size:]
            del vstack[-size:]; del sstack[-size:]
            v = fn(ch)
          else: v = fn()
          state = gt[sstack[-1]]
          spush(state); vpush(v)
        acts = actions[state]
    # end of input: the reduce step again, written out: folding the two loops into one costs the main loop 40%
    while True:
      a = actions[state].get('$END')
      if a is None or a.__class__ is _int: raise _SyntaxError()
      size, gt, fn = a
      if size == 1:
        if fn is not None: vstack[-1] = fn(vstack[-1])
        state = sstack[-1] = gt[sstack[-2]]
      else:
        if size:
          ch = vstack[-size:]
          del vstack[-size:]; del sstack[-size:]
          v = fn(ch)
        else: v = fn()
        state = gt[sstack[-1]]
        spush(state); vpush(v)
      if state == end_state: return vstack[-1]


_engine: _Engine | None = None

def _get_engine() -> _Engine | None:
  global _engine
  if _engine is None: _engine = _Engine(_load_tables())
  return _engine


def _lark_syntax_error(text: str):
  """Let lark parse `text` (no builder) and return the UnexpectedInput it raises."""
  from lark.exceptions import UnexpectedInput
  try: _parser().parse(text)
  except UnexpectedInput as e: return e
  raise RuntimeError("the fast parser refused input that lark accepts")


def parse(text: str, filename: str = '<stdin>', verify: bool = True, allow_unregistered: bool = False, line_offset: int = 0) -> Module:
  """Text -> a verified Module. Raises Diagnostic (or DiagnosticList from the verifier) on bad input."""
  source = Source(filename, text, line_offset)
  if '\x00' in text:
    line = text[:text.index('\x00')].count('\n') + 1
    raise Diagnostic("unexpected NUL byte in input", Location(filename, line + line_offset, 1, source))
  st = ParseState(source, allow_unregistered)
  eng = _get_engine()
  full = text if text.endswith('\n') else text + '\n'
  old = sys.getrecursionlimit()
  gc_was = gc.isenabled()
  gc.disable()  # the parse makes many objects that all live on: no collection can free any of them
  try:
    ops = eng.run(full, _Build(st))
  except _SyntaxError: raise _syntax_error(_lark_syntax_error(full), source) from None
  except RecursionError: raise Diagnostic("input nested too deeply", Location(filename, 1 + line_offset, 1, source)) from None
  except Diagnostic as d:
    if d.loc is None: d.loc = _nesting_loc(source) if 'nesting' in d.message else _last_loc(st)
    raise
  finally:
    sys.setrecursionlimit(old)
    if gc_was:
      if gc.get_count()[0] > 50_000 and gc.get_freeze_count() == 0:
        # Everything the parse made lives on, and would all be traversed by the next young collection,
        # then again by the next middle one. Move every tracked object straight to the oldest
        # generation instead (freeze + unfreeze: no traversal, no object kept alive beyond that), unless
        # someone has frozen objects on purpose.
        gc.freeze(); gc.unfreeze()
      gc.enable()
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

def _syntax_error(e, source: Source) -> Diagnostic:
  from lark.exceptions import UnexpectedToken, UnexpectedCharacters
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
