"""One printer for every dialect: custom form through each op's format, or the generic form."""
from __future__ import annotations
from tgc.ir.core import REGISTRY, Operation, Module, Value, FUNCTION
from tgc.ir.attrs import fmt_attr
from tgc.ir.format import compiled


class Printer:
  def __init__(self, generic: bool = False, locs: bool = False):
    self.generic, self.locs = generic, locs
    self.names: dict[Value, str] = {}
    self.used: set[str] = set()
    self.counter = 0
    self._tstr: dict[int, tuple] = {}  # id(type) -> (type, its text): types print often and are few

  def tstr(self, t) -> str:
    e = self._tstr.get(id(t))
    if e is not None and e[0] is t: return e[1]
    s = str(t)
    self._tstr[id(t)] = (t, s)
    return s

  # SSA names: a value keeps the name it was parsed with unless that name is a number or taken;
  # others are numbered in order of definition, per function (functions are isolated from above).
  def define(self, v: Value) -> str:
    h = v.hint
    if h and not h.isdigit() and h not in self.used: n = h
    else:
      if h and not h.isdigit():
        i = 1
        while f"{h}_{i}" in self.used: i += 1
        n = f"{h}_{i}"
      else:
        while str(self.counter) in self.used: self.counter += 1
        n = str(self.counter); self.counter += 1
    self.used.add(n)
    self.names[v] = n = '%' + n
    return n

  def name(self, v: Value) -> str:
    n = self.names.get(v)
    return n if n is not None else self.define(v) if v.op is None else '%<<UNKNOWN>>'

  def print_module(self, m: Module) -> str:
    out: list[str] = []
    for op in m.ops: self.print_op(op, out, 0)
    return '\n'.join(out) + ('\n' if out else '')

  def print_op_text(self, op: Operation) -> str:
    out: list[str] = []
    self.print_op(op, out, 0)
    return '\n'.join(out)

  def print_op(self, op: Operation, out: list[str], indent: int):
    if op.has(FUNCTION): return self.print_function(op, out, indent)
    out.append(self._op_line(op, '  ' * indent))

  def _op_line(self, op: Operation, pad: str) -> str:
    names = self.names
    results = op.results
    if len(results) == 1:
      r = results[0]
      head = pad + (names.get(r) or self.define(r)) + ' = '
    elif results: head = pad + ', '.join(names.get(r) or self.define(r) for r in results) + ' = '
    else: head = pad
    if self.generic or REGISTRY.get(op.name) is not type(op): body = self.generic_body(op)  # unregistered: generic only
    else:
      body = op.name + _print_fn(type(op))(op, self.name, self.tstr, names)
      if body[-1] == ' ': body = body.rstrip()  # an empty custom form (a bare func.return) leaves a space
    if self.locs and op.loc is not None and op.loc.line > 0: body += ' ' + op.loc.text()
    return head + body

  def generic_body(self, op: Operation) -> str:
    names, name, tstr = self.names, self.name, self.tstr
    ops = op.operands
    s = f'"{op.name}"(' + ', '.join([names.get(v) or name(v) for v in ops]) + ')'
    if op.attrs: s += ' {' + ', '.join(f"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}" for k, v in sorted(op.attrs.items())) + '}'
    ins = ', '.join([tstr(v.type) for v in ops])
    outs = [tstr(r.type) for r in op.results]
    return s + f" : ({ins}) -> " + (outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')')

  def print_function(self, op: Operation, out: list[str], indent: int):
    saved = self.names, self.used, self.counter
    self.names, self.used, self.counter = {}, set(), 0
    pad = '  ' * indent
    args = ', '.join(f"{self.define(a)}: {a.type}" for a in op.body.args)
    define = self.define
    s = f"{pad}{op.name} @{op.attrs['sym_name']}({args})"
    rt = op.attrs.get('result_types')
    if rt is not None and len(rt) > 0:
      s += ' -> ' + (str(rt[0]) if len(rt) == 1 else '(' + ', '.join(map(str, rt)) + ')')
    extra = {k: v for k, v in op.attrs.items() if k not in ('sym_name', 'result_types')}
    if extra: s += ' attributes {' + ', '.join(f"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}" for k, v in sorted(extra.items())) + '}'
    if self.locs and op.loc is not None and op.loc.line > 0: s += ' ' + op.loc.text()
    out.append(s + ' {')
    for o in op.body.ops:  # name every value first: uses may precede definitions (uop.define_acc)
      for r in o.results: define(r)
    inner = pad + '  '
    line = self._op_line
    for o in op.body.ops:
      if o.has(FUNCTION): self.print_function(o, out, indent + 1)
      else: out.append(line(o, inner))
    out.append(pad + '}')
    self.names, self.used, self.counter = saved


_print_fns: dict = {}

def _print_fn(cls):
  """The custom form printer of an op class: (op, name, tstr, names) -> text after the op name."""
  f = _print_fns.get(cls)
  if f is None:
    p = compiled(cls).print
    if getattr(p, 'fast', False): f = p
    else: f = lambda op, name, tstr, names, p=p: p(op, name)
    _print_fns[cls] = f
  return f
