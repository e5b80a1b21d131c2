"""reassociate-index: each memory access inside a loop indexes its buffer at (its terms that vary in the loop) + (its
loop-invariant terms) + a constant, summed in that order.

An emitter writes an address into global memory whose index is such a sum as the pointer plus each part
(`data1+alu77+(alu12+alu9)+65536`, C adding each to the pointer): the device's compiler adds the varying part to the
pointer once a step for all the accesses that share it, each access then adds its invariant part (a register
computed before the loop) and its constant (the instruction's offset). Left as linearize built them, the sums
interleave the two kinds (`((inv0 + var) + inv1) + 65536`), and every access adds its whole index in 32 bits and
widens it. The copies that stage a matmul's tiles into shared memory are where it shows: on an H200 the 4096 f16
matmul's kernel ran 11 % faster with its copies' addresses taken apart so.

An index's terms are found through its adds that vary in the innermost loop around the access, and those that add a
constant. A term is invariant where it is defined before that loop, or computed there from invariant values alone by
pure ops. Each index keeps its value: an add of integers is associative, wrapping or not. It runs after cse, which
would otherwise merge a reordered add back into the original it commutes with.
"""
from __future__ import annotations
from functools import reduce
from tgc.ir.core import REGISTRY, PURE, SCOPE_OPEN, SCOPE_CLOSE
from tgc.ir.rewrite import const_value
from tgc.ir import dtypes as D
from tgc.passes.manager import Pass


def reassociate_function(fn, stats) -> None:
  ops = fn.body.ops
  where = {r: i for i, op in enumerate(ops) for r in op.results}
  loops: list[int] = []  # the positions of the open uop.range ops
  scopes: list[dict] = [{}]  # ('add', a, b) -> the sum built of them, in the scope it was built in
  memo: dict = {}
  out: list = []

  def invariant(v, start: int) -> bool:
    if where.get(v, -1) < start: return True
    key = (v, start)
    if key not in memo:
      op = v.op
      memo[key] = PURE in op.TRAITS and op.body is None and all(invariant(x, start) for x in op.operands)
    return memo[key]

  def split(v, start: int, inv: list, var: list) -> int:
    """v's terms into inv and var (in order), through the adds that vary in the loop and those that add a constant;
    the constant part."""
    op = v.op
    if op is not None and op.name == 'uop.const': return int(const_value(v))
    if op is not None and op.name == 'uop.add' and (not invariant(v, start) or any(x.op is not None and x.op.name == 'uop.const' for x in op.operands)):
      return split(op.operands[0], start, inv, var) + split(op.operands[1], start, inv, var)
    (inv if invariant(v, start) else var).append(v)
    return 0

  def made(name, operands, t, attrs=None, loc=None):
    op = REGISTRY[name](operands, [t], attrs, loc)
    out.append(op)
    return op.results[0]

  def index(v, loc):
    t = v.type
    if not isinstance(t, D.DType) or not t.is_int: return v
    inv, var = [], []
    c = split(v, loops[-1], inv, var)
    if not var or not (inv or c): return v  # nothing to take apart: all invariant, or all varying
    def add(a, b):  # (each sum once in its scope: accesses that share terms share their partial sums)
      key = ('add', a, b)
      got = next((s[key] for s in reversed(scopes) if key in s), None)
      if got is None: got = scopes[-1][key] = made('uop.add', [a, b], t, None, loc)
      return got
    r = reduce(add, var)
    if inv: r = add(r, reduce(add, inv))
    if c: r = add(r, made('uop.const', [], t, {'value': c}, loc))
    stats['indices reassociated'] += 1
    return r

  for i, op in enumerate(ops):
    if SCOPE_CLOSE in op.TRAITS and len(scopes) > 1: scopes.pop()
    if op.name == 'uop.endrange' and loops: loops.pop()
    if loops and op.ADDRESSES:
      ix = {j for _, j in op.ADDRESSES}
      op.operands = [index(x, op.loc) if j in ix else x for j, x in enumerate(op.operands)]
    out.append(op)
    if op.name == 'uop.range': loops.append(i)
    if SCOPE_OPEN in op.TRAITS: scopes.append({})
  fn.body.ops = out


class ReassociateIndex(Pass):
  name = 'reassociate-index'
  summary = 'memory indices in loops as varying terms + loop-invariant terms + a constant'
  reads = leaves = 'uop'
  def run(self, m):
    for fn in m.functions('uop.func'): reassociate_function(fn, self.stats)
