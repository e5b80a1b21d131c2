"""dce: remove pure ops whose results nobody uses."""
from __future__ import annotations
from tgc.ir.core import PURE, CONSTANT
from tgc.passes.manager import Pass


def remove_dead(m, stats=None) -> int:
  removed = 0
  for fn in m.ops:
    if fn.body is None: continue
    used: set = set()
    keep = []
    for op in reversed(fn.body.ops):
      if PURE in op.TRAITS and op.results and not any(r in used for r in op.results):
        removed += 1; continue
      used.update(op.operands)
      keep.append(op)
    keep.reverse()
    fn.body.ops = keep
  if stats is not None and removed: stats['ops removed'] += removed
  return removed


class DCE(Pass):
  name = 'dce'
  summary = 'remove unused pure ops'
  def run(self, m): remove_dead(m, self.stats)
