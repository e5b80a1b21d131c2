"""Structural verification shared by every dialect, then each op's own `verify`.

Structure: operand and result counts, uses after definitions within a function (functions are isolated
from above), unique symbols. All violations are collected, in source order, into one DiagnosticList.
"""
from __future__ import annotations
from tgc.ir.core import Operation, Module, FUNCTION, FORWARD_REFS
from tgc.ir.diagnostics import Diagnostic, DiagnosticList, Note


def verify(m: Module) -> None:
  diags: list[Diagnostic] = []
  seen: dict[str, Operation] = {}
  for op in m.ops:
    if not op.has(FUNCTION):
      diags.append(op.error("is not allowed at the top level: expected a function (func.func, kernel.func, uop.func)"))
      continue
    sym = op.attrs.get('sym_name')
    if sym in seen:
      diags.append(Diagnostic(f"redefinition of symbol '@{sym}'", op.loc, notes=[Note('note', 'previous definition is here', seen[sym].loc)]))
    else: seen[sym] = op
    verify_function(op, m, diags)
  if diags: raise DiagnosticList(diags)

def verify_op(op: Operation, module: Module | None = None) -> None:
  n, v = len(op.OPERANDS) - sum(attr not in op.attrs for attr in op.PRESENT_WITH.values()), op._variadic
  kinds = op.OPERANDS[v][-1] if v is not None else ''
  if v is None and len(op.operands) != n: raise op.error(f"expects {n} operand{'s' if n != 1 else ''}, got {len(op.operands)}")
  if kinds == '*' and len(op.operands) < n - 1: raise op.error(f"expects at least {n - 1} operands, got {len(op.operands)}")
  if kinds == '?' and not (n - 1 <= len(op.operands) <= n): raise op.error(f"expects {n - 1} or {n} operands, got {len(op.operands)}")
  if op.RESULTS >= 0 and len(op.results) != op.RESULTS:
    raise op.error(f"expects {op.RESULTS} result{'s' if op.RESULTS != 1 else ''}, got {len(op.results)}")
  for name, kind in op.ATTRS.items():
    if kind.endswith('?'): continue
    if name not in op.attrs: raise op.error(f"requires attribute '{name}'")
  if module is not None and hasattr(op, 'verify_symbols'): op.verify_symbols(module)
  op.verify()

def verify_function(fn: Operation, m: Module | None, diags: list[Diagnostic]) -> None:
  try: verify_op(fn, m)
  except Diagnostic as d: diags.append(d); return
  defined = set(fn.body.args)
  ops = fn.body.ops
  later = {r for op in ops for r in op.results}  # for ops allowed to refer forward
  ndiags = len(diags)
  for op in ops:
    if op.has(FUNCTION):
      diags.append(op.error("cannot be nested in another function")); continue
    ok = True
    for i, v in enumerate(op.operands):
      if v not in defined:
        if op.has(FORWARD_REFS) and i >= 1 and v in later: continue
        diags.append(op.error(f"operand #{i} does not dominate this use: it is {'defined after it' if v in later else 'not defined in this function'}"))
        ok = False; break
    if ok:
      try: verify_op(op, m)
      except Diagnostic as d: diags.append(d)
    defined.update(op.results)
  # the body's rules read the ops' attributes and operands: only when every op has passed its own
  if hasattr(fn, 'verify_body') and len(diags) == ndiags:
    try: fn.verify_body()
    except Diagnostic as d: diags.append(d)
