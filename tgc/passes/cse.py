"""cse: merge pure ops that compute the same thing from the same operands.

Scopes are respected: in the uop dialect a value defined inside a range is not visible after its
endrange, so the table of known expressions is pushed at SCOPE_OPEN ops and popped at SCOPE_CLOSE.
"""
from __future__ import annotations
from tgc.ir.core import PURE, COMMUTATIVE, SCOPE_OPEN, SCOPE_CLOSE
from tgc.passes.manager import Pass


def _exact(v):
  """An attribute value as a key that tells apart what == does not: -0.0 from 0.0, a hex bit pattern from
  the integer of the same value, 1 from 1.0 from True."""
  if isinstance(v, tuple): return (type(v).__name__,) + tuple(_exact(x) for x in v)
  if isinstance(v, float): return ('float', v.hex())
  if isinstance(v, (bool, int)): return (type(v).__name__, int(v))
  return (type(v).__name__, v)


def cse_function(fn, stats) -> None:
  scopes: list[dict] = [{}]
  subst: dict = {}
  out = []
  for op in fn.body.ops:
    if subst: op.operands = [subst.get(v, v) for v in op.operands]
    if SCOPE_CLOSE in op.TRAITS and len(scopes) > 1: scopes.pop()
    if PURE in op.TRAITS and op.results and op.body is None:
      operands = tuple(op.operands)
      if COMMUTATIVE in op.TRAITS: operands = tuple(sorted(operands, key=id))
      key = (op.name, operands, tuple(sorted((k, _exact(v)) for k, v in op.attrs.items())), tuple(r.type for r in op.results))
      prev = next((s[key] for s in reversed(scopes) if key in s), None)
      if prev is not None:
        subst.update(zip(op.results, prev.results))
        stats['ops merged'] += 1
        continue
      scopes[-1][key] = op
    out.append(op)
    if SCOPE_OPEN in op.TRAITS: scopes.append({})
  fn.body.ops = out
  if subst:
    for op in out: op.operands = [subst.get(v, v) for v in op.operands]


class CSE(Pass):
  name = 'cse'
  summary = 'merge identical pure ops'
  def run(self, m):
    for fn in m.ops:
      if fn.body is not None: cse_function(fn, self.stats)
