"""One printer for every dialect: custom form through each op's format, or the generic form."""
from __future__ import annotations
from tgc.ir.core import Operation, Module, Value, FUNCTION
from tgc.ir.attrs import fmt_attr
from tgc.ir.format import compiled


class Printer:
  def __init__(self, generic: bool = False, locs: bool = False):
    self.generic, self.locs = generic, locs
    self.names: dict[Value, str] = {}
    self.used: set[str] = set()
    self.counter = 0

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
    pad = '  ' * indent
    if op.has(FUNCTION): return self.print_function(op, out, indent)
    res = ', '.join(self.names.get(r) or self.define(r) for r in op.results)
    head = f"{pad}{res} = " if res else pad
    if self.generic: body = self.generic_body(op)
    else: body = op.name + compiled(type(op)).print(op, self.name)
    if self.locs and op.loc is not None and op.loc.line > 0: body += ' ' + op.loc.text()
    out.append(head + body)

  def generic_body(self, op: Operation) -> str:
    s = f'"{op.name}"(' + ', '.join(self.name(v) for v in op.operands) + ')'
    if op.attrs: s += ' {' + ', '.join(f"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}" for k, v in sorted(op.attrs.items())) + '}'
    ins = ', '.join(str(v.type) for v in op.operands)
    outs = [str(r.type) for r in op.results]
    return s + f" : ({ins}) -> " + (outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')')

  def print_function(self, op: Operation, out: list[str], indent: int):
    saved = self.names, self.used, self.counter
    self.names, self.used, self.counter = {}, set(), 0
    pad = '  ' * indent
    args = ', '.join(f"{self.define(a)}: {a.type}" for a in op.body.args)
    s = f"{pad}{op.name} @{op.attrs['sym_name']}({args})"
    rt = op.attrs.get('result_types')
    if rt is not None and len(rt) > 0:
      s += ' -> ' + (str(rt[0]) if len(rt) == 1 else '(' + ', '.join(map(str, rt)) + ')')
    extra = {k: v for k, v in op.attrs.items() if k not in ('sym_name', 'result_types')}
    if extra: s += ' attributes {' + ', '.join(f"{k} = {fmt_attr(op.ATTRS.get(k, 'any'), v)}" for k, v in sorted(extra.items())) + '}'
    if self.locs and op.loc is not None and op.loc.line > 0: s += ' ' + op.loc.text()
    out.append(s + ' {')
    for o in op.body.ops:  # name every value first: uses may precede definitions (uop.define_acc)
      for r in o.results: self.define(r)
    for o in op.body.ops: self.print_op(o, out, indent + 1)
    out.append(pad + '}')
    self.names, self.used, self.counter = saved
