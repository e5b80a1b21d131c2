"""The one rewrite mechanism every pass uses: a PatternMatcher of (op names, function) rules, applied
by a greedy driver over each function's block until nothing changes (tinygrad's graph_rewrite, MLIR's
greedy pattern driver).

A rule is `fn(op, rw) -> None | Value | list[Value]`: None leaves the op alone; values replace its
results (the op is dropped). New ops are made with `rw.create(...)`, which inserts them before `op`.
"""
from __future__ import annotations
from collections import defaultdict
from typing import Callable, Iterable
from tgc.ir.core import Operation, Module, Value, Block, FUNCTION, CONSTANT, PURE


class Rewriter:
  def __init__(self):
    self.new_ops: list[Operation] = []
    self.stats: dict[str, int] = defaultdict(int)
  def create(self, cls: type[Operation], operands=(), result_types=(), attrs=None, loc=None) -> Operation:
    op = cls(operands, result_types, attrs, loc)
    self.new_ops.append(op)
    return op


Rule = Callable[[Operation, Rewriter], 'Value | list[Value] | None']

class PatternMatcher:
  def __init__(self, rules: Iterable[tuple[str | tuple[str, ...], Rule]]):
    self.by_name: dict[str, list[Rule]] = defaultdict(list)
    self.any: list[Rule] = []
    for names, fn in rules:
      if names == '*': self.any.append(fn); continue
      for n in ((names,) if isinstance(names, str) else names): self.by_name[n].append(fn)
  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    pm = PatternMatcher([])
    for src in (self, other):
      for n, fns in src.by_name.items(): pm.by_name[n] += fns
      pm.any += src.any
    return pm
  def rules_for(self, name: str) -> list[Rule]:
    return self.by_name.get(name, []) + self.any


def apply_patterns(m: Module, pm: PatternMatcher, max_sweeps: int = 16, stats=None) -> bool:
  """Rewrite every function of `m` to a fixed point. Returns whether anything changed."""
  changed = False
  for fn in m.ops:
    if fn.body is not None: changed |= rewrite_block(fn.body, pm, max_sweeps, stats)
  return changed

def rewrite_block(block: Block, pm: PatternMatcher, max_sweeps: int = 16, stats=None) -> bool:
  changed_any = False
  for _ in range(max_sweeps):
    subst: dict[Value, Value] = {}
    out: list[Operation] = []
    changed = False
    for op in block.ops:
      if subst: op.operands = [subst.get(v, v) for v in op.operands]
      rules = pm.rules_for(op.name)
      rep = None
      for rule in rules:
        rw = Rewriter()
        rep = rule(op, rw)
        if rep is not None:
          out += rw.new_ops
          if stats is not None:
            stats['rewrites'] += 1  # every applied rule; rules may count finer things in rw.stats
            for k, v in rw.stats.items(): stats[k] += v
          break
      if rep is None:
        out.append(op); continue
      changed = True
      if isinstance(rep, Operation): rep = rep.results
      if isinstance(rep, Value): rep = [rep]
      for old, new in zip(op.results, rep):
        if new is not old:
          if new.hint is None and old.hint is not None and not old.hint.isdigit(): new.hint = old.hint
          subst[old] = new
    block.ops = out
    if subst:  # a replaced value may be used by an op that came before its replacement's definition (forward refs)
      for op in block.ops: op.operands = [subst.get(v, v) for v in op.operands]
    changed_any |= changed
    if not changed: break
  return changed_any


def use_counts(block: Block) -> dict[Value, int]:
  n: dict[Value, int] = defaultdict(int)
  for op in block.ops:
    for v in op.operands: n[v] += 1
  return n

def const_value(v: Value):
  """The constant a value holds (a Python scalar, or a nested tuple for a dense tensor), or None."""
  op = v.op
  if op is not None and CONSTANT in op.TRAITS: return op.attrs['value']
  return None


def clone_module(m: Module) -> Module:
  out = []
  for fn in m.ops: out.append(clone_op(fn, {}))
  return Module(out, m.source)

def clone_op(op: Operation, vmap: dict[Value, Value]) -> Operation:
  body = None
  if op.body is not None:
    args = [Value(a.type, hint=a.hint) for a in op.body.args]
    vmap.update(zip(op.body.args, args))
    body = Block(args)
    # results first, so forward references resolve
    new_ops = []
    for o in op.body.ops:
      c = type(o)([], [r.type for r in o.results], dict(o.attrs), o.loc)
      for r, nr in zip(o.results, c.results): vmap[r] = nr; nr.hint = r.hint
      new_ops.append((o, c))
    for o, c in new_ops: c.operands = [vmap.get(v, v) for v in o.operands]
    body.ops = [c for _, c in new_ops]
  new = type(op)([vmap.get(v, v) for v in op.operands], [r.type for r in op.results], dict(op.attrs), op.loc, body)
  for r, nr in zip(op.results, new.results): vmap[r] = nr; nr.hint = r.hint
  return new
