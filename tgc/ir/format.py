"""Custom forms as data: a small assembly-format language, MLIR's idea, read for parsing and printing.

  $name        an operand (variadic operands take every value left in their group) or an attribute
  [ ... ]      a bracketed group, ( ... ) a parenthesised one
  ,            a separator: the parser passes the custom form's commas as tokens, (text, line, col) tuples,
               and each must be where the format has one (inside [ ] and ( ) the grammar requires them)
  ?{ ... }     an optional group, present when its first operand or attribute (in a group inside it too) is
  : type($x), type($y) -> type($r)    the types: of operands (checked) and results (taken)

Whitespace in the format is where the printer puts spaces.
"""
from __future__ import annotations
import re
from tgc.ir.attrs import Ident, LList, Tup, Ref, Record, AttrError, normalize, fmt_attr

_TOK = re.compile(r'\s*(\$\w+|\?\{|\}|\[|\]|\(|\)|,|:|->|type\(\$\w+\))')


def _leaves(ds):
  """The operands and attributes of a format's directives, in order, inside groups too."""
  for d in ds:
    if d.kind in ('operand', 'attr'): yield d
    elif d.children: yield from _leaves(d.children)


class FormatError(Exception):
  """A custom form that does not match the op's format; the parser turns it into a diagnostic, at `pos`
  (line, column) when the error has a place of its own, else at the op."""
  def __init__(self, msg, pos=None): super().__init__(msg); self.pos = pos


class Directive:
  __slots__ = ('kind', 'name', 'space', 'children')
  def __init__(self, kind, name=None, space=False, children=None):
    self.kind, self.name, self.space, self.children = kind, name, space, children


class Format:
  def __init__(self, cls, text: str):
    self.cls = cls
    self.operand_kinds = {n.rstrip('*?'): (n[-1] if n[-1] in '*?' else '') for n in cls.OPERANDS}
    body, _, types = text.partition(' :')
    if not _ and text.startswith(':'): body, types = '', text[1:]
    self.body = self._compile(body)
    if self.body: self.body[0].space = True  # one space after the op name
    before, arrow, after = types.partition('->')
    self.types_in = [t for t in re.findall(r'type\(\$(\w+)\)', before)]
    self.types_out = [t for t in re.findall(r'type\(\$(\w+)\)', after)] if arrow else None
    self.has_types = bool(types.strip())
    self.covered = {d for d in self._names(self.body)}
    self.parse = _compile_parse(self)   # the same as parse_slow, generated for this format
    self.print = _compile_print(self)   # the same as print_slow when the operands fit; print_slow otherwise

  def _names(self, ds):
    for d in ds:
      if d.kind in ('operand', 'attr'): yield d.name
      if d.children: yield from self._names(d.children)

  def _compile(self, text: str) -> list[Directive]:
    stack: list[list[Directive]] = [[]]
    closers: list[str] = []
    pos = 0
    while pos < len(text):
      m = _TOK.match(text, pos)
      if not m: raise ValueError(f"bad format {text!r} at {pos}")
      tok, space = m.group(1), m.start(1) > m.start(0)
      pos = m.end()
      if tok.startswith('$'):
        n = tok[1:]
        kind = 'operand' if n in self.operand_kinds else 'attr'
        if kind == 'attr' and n not in self.cls.ATTRS: raise ValueError(f"{self.cls.name}: format names unknown ${n}")
        stack[-1].append(Directive(kind, n, space))
      elif tok in ('[', '(', '?{'):
        d = Directive('group' if tok != '?{' else 'optional', tok if tok != '?{' else None, space, [])
        stack[-1].append(d); stack.append(d.children); closers.append({'[': ']', '(': ')', '?{': '}'}[tok])
      elif tok in (']', ')', '}'):
        if not closers or closers.pop() != tok: raise ValueError(f"unbalanced format {text!r}")
        stack.pop()
      elif tok == ',': stack[-1].append(Directive('comma', space=space))
      else: raise ValueError(f"unexpected {tok!r} in format {text!r}")
    return stack[0]

  # ---- parsing: items (from the grammar) -> operands, attrs ----
  def parse_slow(self, items: list, types_in: list, types_out: list | None, resolve):
    operands: dict[str, list] = {}
    attrs: dict = {}
    rest = self._match(self.body, list(items), operands, attrs, resolve, True)
    if rest: raise FormatError(f"unexpected {describe(rest[0])} in custom form of '{self.cls.name}'")
    ordered = []
    for n in self.cls.OPERANDS: ordered += operands.get(n.rstrip('*?'), [])
    # types
    if not self.has_types:
      if types_in or types_out is not None: raise FormatError(f"'{self.cls.name}' takes no type list")
      return ordered, [], attrs
    want_out = self.types_out is not None
    if want_out != (types_out is not None):
      raise FormatError(f"'{self.cls.name}' expects types as ': {self._types_text()}'")
    result_types = []
    for spec, got in ((self.types_in, types_in), (self.types_out or [], types_out or [])):
      result_types += self._bind_types(spec, got, operands)
    return ordered, result_types, attrs

  def _types_text(self):
    s = ', '.join(f'type(${n})' for n in self.types_in)
    return s + (' -> ' + ', '.join(f'type(${n})' for n in self.types_out) if self.types_out is not None else '')

  def _bind_types(self, spec, got, operands):
    variadic = [n for n in spec if self.operand_kinds.get(n) in ('*', '?')]
    fixed = len(spec) - len(variadic)
    if (not variadic and len(got) != fixed) or len(got) < fixed:
      raise FormatError(f"'{self.cls.name}' expects {fixed} type{'s' if fixed != 1 else ''} in ': {self._types_text()}', got {len(got)}")
    out, i = [], 0
    for n in spec:
      if n == 'result':
        out.append(got[i]); i += 1
      elif self.operand_kinds.get(n) in ('*', '?'):
        k = len(operands.get(n, []))
        for v, t in zip(operands.get(n, []), got[i:i + k]): _check_type(v, t, n)
        i += k
      else:
        vals = operands.get(n)
        if vals: _check_type(vals[0], got[i], n)
        i += 1
    return out

  def _match(self, ds, items, operands, attrs, resolve, top=False):
    """`top`: the op's own items, with their commas; a group's hold none (the grammar checked them)."""
    for d in ds:
      if d.kind == 'comma':
        if top and items:
          if not _is_comma(items[0]): raise FormatError(f"'{self.cls.name}' expects ',' before {describe(items[0])}", _pos(items[0]))
          items.pop(0)
        continue
      if d.kind == 'operand':
        k = self.operand_kinds[d.name]
        if k == '*':
          vals = []
          if top:  # %a, %b, ...: a comma before each value after the first
            if items and isinstance(items[0], Ref):
              vals.append(resolve(items.pop(0), True))
              while len(items) > 1 and _is_comma(items[0]) and isinstance(items[1], Ref): items.pop(0); vals.append(resolve(items.pop(0), True))
              if items and isinstance(items[0], Ref): raise FormatError(f"'{self.cls.name}' expects ',' before {describe(items[0])}", _pos(items[0]))
          else:
            while items and isinstance(items[0], Ref): vals.append(resolve(items.pop(0), True))
          operands[d.name] = vals
        else:
          if not items or not isinstance(items[0], Ref): raise FormatError(f"'{self.cls.name}' expects an SSA value for ${d.name}, got {describe(items[0]) if items else 'nothing'}")
          operands[d.name] = [resolve(items.pop(0), False)]
      elif d.kind == 'attr':
        if not items: raise FormatError(f"'{self.cls.name}' expects ${d.name}, got nothing")
        it = items.pop(0)
        kind = self.cls.ATTRS[d.name].rstrip('?')
        if isinstance(it, Ref): raise FormatError(f"'{self.cls.name}' expects ${d.name} ({kind}), got an SSA value")
        if _is_comma(it): raise FormatError(f"'{self.cls.name}' expects ${d.name} ({kind}), got ','", _pos(it))
        if kind == 'ident' and not isinstance(it, Ident): raise FormatError(f"'{self.cls.name}' expects a name for ${d.name}, got {describe(it)}")
        try: attrs[d.name] = normalize(kind, it)
        except AttrError as e: raise FormatError(f"'{self.cls.name}' ${d.name}: {e}") from None
      elif d.kind == 'group':
        want = LList if d.name == '[' else Tup
        if not items or not isinstance(items[0], want):
          raise FormatError(f"'{self.cls.name}' expects '{d.name}' here, got {describe(items[0]) if items else 'nothing'}")
        inner = list(items.pop(0))
        rest = self._match(d.children, inner, operands, attrs, resolve)
        if rest: raise FormatError(f"unexpected {describe(rest[0])} in custom form of '{self.cls.name}'")
      elif d.kind == 'optional':
        if items and _opens(d.children, top)(items[0]): items = self._match(d.children, items, operands, attrs, resolve, top)
    return items

  # ---- printing ----
  def print_slow(self, op, name) -> str:
    groups = op.operand_groups()
    out: list[str] = []
    self._print(self.body, op, groups, name, out)
    s = ''.join(out)
    extra = {k: v for k, v in op.attrs.items() if k not in self.covered}
    if extra: s += ' {' + ', '.join(f"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}" for k, v in sorted(extra.items())) + '}'
    if self.has_types:
      def ty(n):
        if n == 'result': return [str(op.results[0].type)]
        return [str(v.type) for v in groups[n]]
      ins = [t for n in self.types_in for t in ty(n)]
      if not ins and self.types_out is None: return s
      s += ' : ' + ', '.join(ins)
      if self.types_out is not None: s += ' -> ' + ', '.join(t for n in self.types_out for t in ty(n))
    return s

  def _print(self, ds, op, groups, name, out):
    for d in ds:
      sp = ' ' if d.space else ''
      if d.kind == 'comma': out.append(sp + ',')
      elif d.kind == 'operand': out.append(sp + ', '.join(name(v) for v in groups[d.name]))
      elif d.kind == 'attr': out.append(sp + fmt_attr(op.ATTRS[d.name], op.attrs[d.name], custom=True))
      elif d.kind == 'group':
        out.append(sp + d.name)
        self._print(d.children, op, groups, name, out)
        out.append(']' if d.name == '[' else ')')
      elif d.kind == 'optional':
        first = next(_leaves(d.children), None)
        present = first is None or (groups.get(first.name) if first.kind == 'operand' else first.name in op.attrs)
        if present: self._print(d.children, op, groups, name, out)


def _opens(ds, top: bool):
  """Whether an item can open an optional group of these directives: the kind its first directive reads (a bracketed
  or parenthesised group, an SSA value, an attribute; any item where it is a comma at the op's top level), so that
  optional groups may follow one another (`?{ ($a)}?{, $b}`: the second present without the first)."""
  d = next((d for d in ds if d.kind != 'comma' or top), None)
  if d is None or d.kind == 'comma': return lambda it: True  # (whatever follows: a missing comma's own message)
  if d.kind == 'group': return (lambda it: isinstance(it, LList)) if d.name == '[' else (lambda it: isinstance(it, Tup))
  if d.kind == 'operand': return lambda it: isinstance(it, Ref)
  if d.kind == 'attr': return lambda it: not isinstance(it, Ref) and not _is_comma(it)
  return _opens(d.children, top)

def _check_type(v, t, n):
  if v.type is None: v.type = t  # a forward reference takes the type its use states
  elif v.type != t: raise FormatError(f"type of ${n} is {v.type}, but the type list says {t}")

def _is_comma(it) -> bool: return it.__class__ is tuple  # the parser's token; a parsed ( ) is a Tup
def _pos(it): return (it[1], it[2]) if _is_comma(it) else (it.line, it.col) if isinstance(it, Ref) else None

def describe(it) -> str:
  if _is_comma(it): return "','"
  if isinstance(it, Ref): return f"'%{it.name}'"
  if isinstance(it, Ident): return f"'{it}'"
  if isinstance(it, LList): return "'[...]'"
  if isinstance(it, Tup): return "'(...)'"
  if isinstance(it, Record): return f"'{it.name}(...)'"
  return repr(it)

def compiled(cls) -> Format:
  try: return _by_class[cls]
  except KeyError: pass
  f = cls.__dict__.get('_fmt')
  if f is None:
    f = Format(cls, cls.FORMAT)
    cls._fmt = f
  _by_class[cls] = f
  return f

_by_class: dict = {}  # class -> its Format (classes are few and live as long as the process)


# ---- code generation: each format's parse and print as one straight Python function ----
# The generated functions do exactly what Format.parse_slow / print_slow do, step for step (the same
# checks in the same order, the same messages), without interpreting the directive list for each op.

class _Src:
  def __init__(self): self.lines, self.n = [], 0
  def emit(self, depth, text): self.lines.append('  ' * depth + text)
  def var(self, base):
    self.n += 1
    return f"{base}{self.n}"


def _compile_parse(f: Format):
  cls = f.cls
  kinds = f.operand_kinds
  src, env = _Src(), {'Ref': Ref, 'Ident': Ident, 'LList': LList, 'Tup': Tup, 'FormatError': FormatError, 'AttrError': AttrError,
                      'normalize': normalize, 'describe': describe, '_pos': _pos, 'NAME': cls.name, 'TYPES_TEXT': f._types_text()}
  opvar = {}   # operand name -> local holding its list of values (assigned where the format reads it)
  seen = []
  def operand_var(n):
    if n not in opvar: opvar[n] = f"o_{n}"; seen.append(n)
    return opvar[n]
  def match(ds, items, idx, depth, top):
    for d in ds:
      if d.kind == 'comma':
        if top: src.emit(depth, f"if {idx} < len({items}):"); comma(items, idx, depth + 1); src.emit(depth + 1, f"{idx} += 1")
        continue
      if d.kind == 'operand':
        v = operand_var(d.name)
        if kinds[d.name] == '*':
          src.emit(depth, f"{v} = []")
          if top:  # %a, %b, ...: a comma before each value after the first
            src.emit(depth, f"if {idx} < len({items}) and isinstance({items}[{idx}], Ref):")
            src.emit(depth + 1, f"{v}.append(resolve({items}[{idx}], True)); {idx} += 1")
            src.emit(depth + 1, f"while {idx} + 1 < len({items}) and {items}[{idx}].__class__ is tuple and isinstance({items}[{idx} + 1], Ref):")
            src.emit(depth + 2, f"{v}.append(resolve({items}[{idx} + 1], True)); {idx} += 2")
            src.emit(depth + 1, f"if {idx} < len({items}) and isinstance({items}[{idx}], Ref):")
            comma(items, idx, depth + 2)
          else:
            src.emit(depth, f"while {idx} < len({items}) and isinstance({items}[{idx}], Ref):")
            src.emit(depth + 1, f"{v}.append(resolve({items}[{idx}], True)); {idx} += 1")
        else:
          src.emit(depth, f"if {idx} >= len({items}) or not isinstance({items}[{idx}], Ref): raise FormatError(f\"'{{NAME}}' expects an SSA value for ${d.name}, got {{describe({items}[{idx}]) if {idx} < len({items}) else 'nothing'}}\")")
          src.emit(depth, f"{v} = [resolve({items}[{idx}], False)]; {idx} += 1")
      elif d.kind == 'attr':
        kind = cls.ATTRS[d.name].rstrip('?')
        env[f"K_{d.name}"] = kind
        src.emit(depth, f"if {idx} >= len({items}): raise FormatError(\"'\" + NAME + \"' expects ${d.name}, got nothing\")")
        src.emit(depth, f"it = {items}[{idx}]; {idx} += 1")
        src.emit(depth, f"if isinstance(it, Ref): raise FormatError(\"'\" + NAME + \"' expects ${d.name} ({kind}), got an SSA value\")")
        if top: src.emit(depth, f"if it.__class__ is tuple: raise FormatError(\"'\" + NAME + \"' expects ${d.name} ({kind}), got ','\", _pos(it))")
        if kind == 'ident':
          src.emit(depth, f"if not isinstance(it, Ident): raise FormatError(f\"'{{NAME}}' expects a name for ${d.name}, got {{describe(it)}}\")")
        src.emit(depth, f"try: attrs[{d.name!r}] = normalize(K_{d.name}, it)")
        src.emit(depth, f"except AttrError as e: raise FormatError(f\"'{{NAME}}' ${d.name}: {{e}}\") from None")
      elif d.kind == 'group':
        want = 'LList' if d.name == '[' else 'Tup'
        src.emit(depth, f"if {idx} >= len({items}) or not isinstance({items}[{idx}], {want}): raise FormatError(f\"'{{NAME}}' expects '{d.name}' here, got {{describe({items}[{idx}]) if {idx} < len({items}) else 'nothing'}}\")")
        g, gi = src.var('g'), src.var('j')
        src.emit(depth, f"{g} = {items}[{idx}]; {idx} += 1; {gi} = 0")
        match(d.children, g, gi, depth, False)
        src.emit(depth, f"if {gi} < len({g}): raise FormatError(f\"unexpected {{describe({g}[{gi}])}} in custom form of '{{NAME}}'\")")
      elif d.kind == 'optional':
        env[(fits := src.var('OPENS'))] = _opens(d.children, top)
        src.emit(depth, f"if {idx} < len({items}) and {fits}({items}[{idx}]):")
        src.emit(depth + 1, "pass")  # an empty group is allowed
        match(d.children, items, idx, depth + 1, top)
  def comma(items, idx, depth):  # raise unless items[idx] is a comma (Format._match's message)
    src.emit(depth, f"if {items}[{idx}].__class__ is not tuple: raise FormatError(f\"'{{NAME}}' expects ',' before {{describe({items}[{idx}])}}\", _pos({items}[{idx}]))")
  src.emit(1, "i = 0")
  src.emit(1, "attrs = {}")
  mark = len(src.lines)
  match(f.body, 'items', 'i', 1, True)
  src.emit(1, "if i < len(items): raise FormatError(f\"unexpected {describe(items[i])} in custom form of '{NAME}'\")")
  # operands the format may not read are empty (Format.parse_slow: operands.get(name, []))
  inits = [f"  {opvar[n]} = ()" for n in seen]
  src.lines[mark:mark] = inits
  ordered = [opvar[n.rstrip('*?')] for n in cls.OPERANDS if n.rstrip('*?') in opvar]
  src.emit(1, f"ordered = [{', '.join('*' + v for v in ordered)}]")
  if not f.has_types:
    src.emit(1, "if types_in or types_out is not None: raise FormatError(\"'\" + NAME + \"' takes no type list\")")
    src.emit(1, "return ordered, [], attrs")
  else:
    if f.types_out is not None: src.emit(1, "if types_out is None: raise FormatError(\"'\" + NAME + \"' expects types as ': \" + TYPES_TEXT + \"'\")")
    else: src.emit(1, "if types_out is not None: raise FormatError(\"'\" + NAME + \"' expects types as ': \" + TYPES_TEXT + \"'\")")
    src.emit(1, "rtypes = []")
    for spec, got in ((f.types_in, 'types_in'), (f.types_out or [], 'types_out')):
      variadic = [n for n in spec if kinds.get(n) in ('*', '?')]
      fixed = len(spec) - len(variadic)
      msg = f"\"'\" + NAME + \"' expects {fixed} type{'s' if fixed != 1 else ''} in ': \" + TYPES_TEXT + \"', got \" + str(len({got}))"
      if got == 'types_out' and f.types_out is None:
        continue  # Format.parse_slow binds an empty spec against [] here: nothing to do
      if not variadic: src.emit(1, f"if len({got}) != {fixed}: raise FormatError({msg})")
      else: src.emit(1, f"if len({got}) < {fixed}: raise FormatError({msg})")
      src.emit(1, "k = 0")
      for n in spec:
        if n == 'result':
          src.emit(1, f"rtypes.append({got}[k]); k += 1")
        elif kinds.get(n) in ('*', '?'):
          vv = opvar.get(n, '()')
          src.emit(1, f"for v, t in zip({vv}, {got}[k:k + len({vv})]):")
          src.emit(2, "if v.type is None: v.type = t")
          src.emit(2, f"elif v.type is not t and v.type != t: raise FormatError(f\"type of ${n} is {{v.type}}, but the type list says {{t}}\")")
          src.emit(1, f"k += len({vv})")
        else:
          if n in opvar:
            src.emit(1, f"if {opvar[n]}:")
            src.emit(2, f"v, t = {opvar[n]}[0], {got}[k]")
            src.emit(2, "if v.type is None: v.type = t")
            src.emit(2, f"elif v.type is not t and v.type != t: raise FormatError(f\"type of ${n} is {{v.type}}, but the type list says {{t}}\")")
          src.emit(1, "k += 1")
    src.emit(1, "return ordered, rtypes, attrs")
  code = "def parse(items, types_in, types_out, resolve):\n" + '\n'.join(src.lines)
  exec(compile(code, f"<format {cls.name}>", 'exec'), env)
  fn = env['parse']
  fn.source = code
  return fn


def _compile_print(f: Format):
  """Custom form text after the op's name. The fast path needs every operand group to hold one value
  (no variadic or optional operand, the declared count); otherwise print_slow does it."""
  cls = f.cls
  if any(k for k in f.operand_kinds.values()): return f.print_slow
  names = [n.rstrip('*?') for n in cls.OPERANDS]
  index = {n: i for i, n in enumerate(names)}
  for n in list(f.types_in) + list(f.types_out or []):
    if n != 'result' and n not in index: return f.print_slow  # type($attr): print_slow's KeyError, as before
  env = {'fmt_attr': fmt_attr, 'slow': f.print_slow, 'COVERED': frozenset(f.covered), 'NOPS': len(names), 'NONAMES': {}}
  parts = []   # python expressions whose concatenation is the text (constant strings folded)
  def lit(s):
    if parts and parts[-1][0] == 'lit': parts[-1] = ('lit', parts[-1][1] + s)
    else: parts.append(('lit', s))
  def emit_ds(ds):
    for d in ds:
      sp = ' ' if d.space else ''
      if d.kind == 'comma': lit(sp + ',')
      elif d.kind == 'operand':
        v = f"ops[{index[d.name]}]"
        lit(sp); parts.append(('expr', f"(names.get({v}) or name({v}))"))
      elif d.kind == 'attr':
        env[f"K_{d.name}"] = cls.ATTRS[d.name]
        lit(sp); parts.append(('expr', f"fmt_attr(K_{d.name}, a[{d.name!r}], True)"))
      elif d.kind == 'group':
        lit(sp + d.name)
        if not emit_ds(d.children): return False
        lit(']' if d.name == '[' else ')')
      elif d.kind == 'optional':
        return False
    return True
  if not emit_ds(f.body): return f.print_slow  # optional groups: only with optional operands or attributes
  lines = ["def print_(op, name, tstr=str, names=NONAMES):", "  ops = op.operands", "  if len(ops) != NOPS: return slow(op, name)", "  a = op.attrs"]
  def joined(ps):
    return ' + '.join(repr(v) if k == 'lit' else v for k, v in ps) if ps else "''"
  lines.append(f"  s = {joined(parts)}")
  lines.append("  if a:")
  lines.append("    extra = {k: v for k, v in a.items() if k not in COVERED}")
  lines.append("    if extra: s += ' {' + ', '.join(f\"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}\" for k, v in sorted(extra.items())) + '}'")
  if f.has_types:
    def ty(n): return "tstr(op.results[0].type)" if n == 'result' else f"tstr(ops[{index[n]}].type)"
    # (tstr is the printer's cached str of a type; plain str when called as print_(op, name))
    ins = [ty(n) for n in f.types_in]
    if not ins and f.types_out is None: lines.append("  return s")
    else:
      expr = "s + ' : ' + " + (" + ', ' + ".join(ins) if ins else "''")
      if f.types_out is not None: expr += " + ' -> ' + " + (" + ', ' + ".join(ty(n) for n in f.types_out) if f.types_out else "''")
      lines.append(f"  return {expr}")
  else: lines.append("  return s")
  code = '\n'.join(lines)
  exec(compile(code, f"<format print {cls.name}>", 'exec'), env)
  fn = env['print_']
  fn.source, fn.fast = code, True
  return fn
