"""uop-simplify: symbolic algebra on index expressions with value ranges, and constant folding.

Every integer value gets bounds [vmin, vmax] (specials and ranges from their sizes, arithmetic by
interval rules). With them: x % c -> x and x // c -> 0 when 0 <= x < c; (a*c + b) // c -> a and
(a*c + b) % c -> b when 0 <= b < c (sums are split into linear terms, coefficients into a multiple of c and the
rest); comparisons decided by the bounds fold to constants, k*x + c < n becomes x < ceil((n - c) / k); gates that are
always true disappear.
"""
from __future__ import annotations
from tgc.ir.core import REGISTRY, Value
from tgc.ir.types import VecType, elem
from tgc.ir import dtypes as D
from tgc.ir.rewrite import PatternMatcher, apply_patterns, const_value
from tgc.passes.manager import Pass
from tgc.passes.canonicalize import canonical_patterns, make_const
from tgc.dialects.uop_bounds import bounds



def terms(v: Value, memo) -> tuple[list[tuple[int, Value]], int]:
  """v as sum(coef * atom) + const, looking through add, sub and mul by constants."""
  op = v.op
  c = const_value(v) if op is not None and op.name == 'uop.const' else None
  if c is not None: return [], c
  opn = getattr(op, 'opname', None) if op is not None else None
  if opn in ('add', 'sub'):
    ta, ca = terms(op.operands[0], memo)
    tb, cb = terms(op.operands[1], memo)
    if opn == 'sub': tb, cb = [(-k, x) for k, x in tb], -cb
    return ta + tb, ca + cb
  if opn == 'mul':
    for x, y in (op.operands, op.operands[::-1]):
      k = const_value(y) if y.op is not None and y.op.name == 'uop.const' else None
      if k is not None:
        tx, cx = terms(x, memo)
        return [(k * kk, a) for kk, a in tx], k * cx
  return [(1, v)], 0


def _build(rw, op, ts, const, t):
  """Materialise sum(coef * atom) + const as uops before `op`."""
  C = lambda x: rw.create(REGISTRY['uop.const'], [], [t], {'value': x}, op.loc).results[0]
  acc = None
  for k, a in ts:
    term = a if k == 1 else rw.create(REGISTRY['uop.mul'], [a, C(k)], [t], None, op.loc).results[0]
    acc = term if acc is None else rw.create(REGISTRY['uop.add'], [acc, term], [t], None, op.loc).results[0]
  if acc is None: return C(const)
  if const: acc = rw.create(REGISTRY['uop.add'], [acc, C(const)], [t], None, op.loc).results[0]
  return acc


def split_divmod(x: Value, c: int, memo):
  """x as c * q + r with 0 <= r < c for every value of its variables: (q's terms, q's constant, r's terms, r's
  constant), or None. Each coefficient splits into its multiple of c and the rest (101*kx over 100: kx to each
  side), so a window's column offset (ox + kx) stays apart from its rows when that rest stays below c."""
  if bounds(x, memo)[0] < 0: return None
  ts, k = terms(x, memo)
  if any(bounds(a, memo)[0] < 0 or kk < 0 for kk, a in ts): return None
  q = [(kk // c, a) for kk, a in ts if kk // c]
  r = [(kk % c, a) for kk, a in ts if kk % c]
  kq, kr = divmod(k, c)
  rlo = kr + sum(kk * bounds(a, memo)[0] for kk, a in r)
  rhi = kr + sum(kk * bounds(a, memo)[1] for kk, a in r)
  return (q, kq, r, kr) if 0 <= rlo and rhi < c else None


def simplify_divmod(op, rw, memo):
  t = op.results[0].type
  if not isinstance(t, D.DType) or not t.is_int: return None
  c = const_value(op.operands[1]) if op.operands[1].op is not None and op.operands[1].op.name == 'uop.const' else None
  if c is None or c <= 0: return None
  x = op.operands[0]
  lo, hi = bounds(x, memo)
  if lo < 0: return None
  if hi < c: return x if op.opname == 'mod' else make_const(rw, op, 0, t)
  split = split_divmod(x, c, memo)
  if split is None or not split[0] and not split[1]: return None
  q, kq, r, kr = split
  if op.opname == 'idiv': return _build(rw, op, q, kq, t)
  return _build(rw, op, r, kr, t)


def multiple_of(v: Value, w: int, memo=None) -> bool:
  """Whether the integer expression v is a multiple of w for every value of its variables: a sum of terms, each a
  multiple by its coefficient or by its atom (x % m with m and x multiples of w; x // c whose quotient, as
  split_divmod takes it apart, is one: a view's index through a reshape)."""
  memo = {} if memo is None else memo
  ts, k = terms(v, memo)
  def atom(a):
    op, opn = a.op, getattr(a.op, 'opname', None)
    c = const_value(op.operands[1]) if opn in ('mod', 'idiv') and op.operands[1].op is not None and op.operands[1].op.name == 'uop.const' else None
    if not c or c <= 0: return False
    if opn == 'mod': return c % w == 0 and multiple_of(op.operands[0], w, memo)
    split = split_divmod(op.operands[0], c, memo)
    return split is not None and split[1] % w == 0 and all(kk % w == 0 or atom(x) for kk, x in split[0])
  return k % w == 0 and all(kk % w == 0 or atom(a) for kk, a in ts)


def simplify_cmp(op, rw, memo):
  if op.opname != 'cmplt': return None
  (a0, a1), (b0, b1) = bounds(op.operands[0], memo), bounds(op.operands[1], memo)
  if a1 < b0: return make_const(rw, op, 1, op.results[0].type)
  if a0 >= b1: return make_const(rw, op, 0, op.results[0].type)
  # k*x + c < n (k > 1, constants c and n, no wrap) -> x < ceil((n - c) / k): the lanes of a vector along a padded
  # axis (16*i + lane < 6625) then test one value (i < 414) instead of one sum each
  t, y = op.operands[0].type, op.operands[1]
  n = const_value(y) if y.op is not None and y.op.name == 'uop.const' else None
  if n is None or not isinstance(t, D.DType) or not t.is_int: return None
  ts, c = terms(op.operands[0], memo)
  if len(ts) != 1 or ts[0][0] <= 1: return None
  (k, x), (lo, hi) = ts[0], D.min_max(t)
  if not (lo <= a0 and a1 <= hi) or x.type != t: return None
  return rw.create(REGISTRY['uop.cmplt'], [x, make_const(rw, op, -((c - n) // k), t)], [op.results[0].type], None, op.loc).results[0]

def simplify_gate(op, rw, memo):
  """A load's gate that is always false gives its alternative; one always true goes where the load is proven inside
  its buffer's declared size (a gated load outside it reads as a false gate on every device: dropping that gate
  would make an access the verifier rejects of one the guards keep in bounds)."""
  if op.name == 'uop.load' and len(op.operands) == 4:
    g = const_value(op.operands[2]) if op.operands[2].op is not None and op.operands[2].op.name == 'uop.const' else None
    if g == 0: return op.operands[3]
    if g == 1:
      n = op.buf.op.attrs.get('size') if op.buf.op is not None and op.buf.op.name in ('uop.define_global', 'uop.define_local') else None
      t = op.results[0].type
      lo, hi = bounds(op.idx, memo)
      if n is not None and not (lo >= 0 and hi + (t.count if isinstance(t, VecType) else 1) - 1 < n): return None
      return rw.create(REGISTRY['uop.load'], op.operands[:2], [op.results[0].type], None, op.loc).results[0]
  return None


class UopSimplify(Pass):
  name = 'uop-simplify'
  summary = 'symbolic index algebra with value ranges, constant folding'
  reads = leaves = 'uop'
  def run(self, m):
    memo: dict = {}
    pm = canonical_patterns + PatternMatcher([
      (('uop.idiv', 'uop.mod'), lambda op, rw: simplify_divmod(op, rw, memo)),
      ('uop.cmplt', lambda op, rw: simplify_cmp(op, rw, memo)),
      ('uop.load', lambda op, rw: simplify_gate(op, rw, memo)),
    ])
    apply_patterns(m, pm, stats=self.stats)
    from tgc.passes.dce import remove_dead
    remove_dead(m, self.stats)
