"""Custom forms as data: a small assembly-format language, MLIR's idea, read for parsing and printing.

  $name        an operand (variadic operands take every value left in their group) or an attribute
  [ ... ]      a bracketed group, ( ... ) a parenthesised one
  ,            a separator (the parser drops commas; the printer writes them)
  ?{ ... }     an optional group, present when its first operand or attribute is
  : type($x), type($y) -> type($r)    the types: of operands (checked) and results (taken)

Whitespace in the format is where the printer puts spaces.
"""
from __future__ import annotations
import re
from tgc.ir.attrs import Ident, LList, Tup, Ref, Record, AttrError, normalize, fmt_attr

_TOK = re.compile(r'\s*(\$\w+|\?\{|\}|\[|\]|\(|\)|,|:|->|type\(\$\w+\))')


class FormatError(Exception):
  """A custom form that does not match the op's format; the parser turns it into a diagnostic."""


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
  def parse(self, items: list, types_in: list, types_out: list | None, resolve):
    operands: dict[str, list] = {}
    attrs: dict = {}
    rest = self._match(self.body, list(items), operands, attrs, resolve)
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

  def _match(self, ds, items, operands, attrs, resolve):
    for d in ds:
      if d.kind == 'comma': continue
      if d.kind == 'operand':
        k = self.operand_kinds[d.name]
        if k == '*':
          vals = []
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
        if items: items = self._match(d.children, items, operands, attrs, resolve)
    return items

  # ---- printing ----
  def print(self, op, name) -> str:
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
        first = next((c for c in d.children if c.kind in ('operand', 'attr')), None)
        present = first is None or (groups.get(first.name) if first.kind == 'operand' else first.name in op.attrs)
        if present: self._print(d.children, op, groups, name, out)


def _check_type(v, t, n):
  if v.type is None: v.type = t  # a forward reference takes the type its use states
  elif v.type != t: raise FormatError(f"type of ${n} is {v.type}, but the type list says {t}")

def describe(it) -> str:
  if isinstance(it, Ref): return f"'%{it.name}'"
  if isinstance(it, Ident): return f"'{it}'"
  if isinstance(it, LList): return "'[...]'"
  if isinstance(it, Tup): return "'(...)'"
  if isinstance(it, Record): return f"'{it.name}(...)'"
  return repr(it)

def compiled(cls) -> Format:
  f = cls.__dict__.get('_fmt')
  if f is None:
    f = Format(cls, cls.FORMAT)
    cls._fmt = f
  return f
