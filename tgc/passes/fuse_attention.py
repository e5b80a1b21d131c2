"""fuse-attention: attention written out as tensor ops -> one tensor.attention, where the device computes that in its
fused kernel (its spec's fused_attention).

softmax(q k^T * scale + bias) v, as a hand-written model, the Tensor API's softmax or an ONNX export spells it:

  s   = matmul(q, permute(k)) * c ... [c' * tanh(s * c'')] [+ b] [where(m, s, -inf)]    the scores
  e   = exp2((s - expand(reduce max s)) * log2(e))                    (without the max: the same softmax)
  p   = e * expand(recip(reduce add e))    or    e / expand(reduce add e)
  out = matmul(p, v)

becomes `tensor.attention %q, %k, %v[, %bias] {causal, scale[, softcap]}`: scores capped, c * tanh(x / c) with
the scale inside (Gemma 2's soft-capping), are the op's softcap c. Casts between floats may sit anywhere on the scores'
and probabilities' way (the kernel keeps them in f32); q, k and v are read below the casts that widen them (q's half
floats cast up for the product) and the positive constants they are multiplied by. The scale is the product of
the positive constants the scores, q and k are multiplied by (or divided by); the bias is the sum of the terms added
to the scores (each times the constants applied after it) and of the masks that set a score to -inf (0 where a key
takes part, -inf where not). A term is computed at its own shape and read through its broadcast, so a padding mask
of batch x keys stays that small. k and v whose heads are repeated for groups of q's (repeat_interleave: grouped-query
attention written out) are read as their own fewer heads.

A mask computed from positions alone (a tril of ones; key and query positions compared) is read as the set of
offsets query - key it keeps (Offsets): where that is every offset >= 0 (key j <= query i) the op is causal, and the
kernel skips the tiles above the diagonal; a mask that keeps every offset is no mask.

Only where the scores, exponentials and probabilities are read by the pattern alone (else they would be computed
anyway, and the attention twice). The fused kernel computes the scores and softmax in f32 whatever the graph
rounded them to; a row whose every key is masked gives 0, where the written-out form divides 0 by 0.
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY, Value
from tgc.ir.attrs import HexInt
from tgc.ir.types import TensorType
from tgc.ir.rewrite import PatternMatcher, apply_patterns, const_value
from tgc.passes.manager import Pass
from tgc.passes.kernelize import positions_scan
from tgc.target import DeviceSpec, DEVICE_OPTIONS

LOG2E = 1 / math.log(2)
INF = math.inf


def _is(v: Value, *names: str):
  return v.op is not None and v.op.name in names

def _splat(v: Value):
  """The number a value holds everywhere (a splat constant, through casts, reshapes and expands), or None."""
  while _is(v, 'tensor.cast', 'tensor.reshape', 'tensor.expand'): v = v.op.operands[0]
  c = const_value(v)
  return None if c is None or isinstance(c, (tuple, HexInt)) else c

def _positive(v: Value):
  c = _splat(v)
  return float(c) if c is not None and not isinstance(c, bool) and 0 < c < INF else None

def _scaled(v: Value, f: float) -> tuple[Value, float] | None:
  """(x, f times c) where v is x times a positive constant c, (x, f / c) where it is x over c, else None."""
  if not _is(v, 'tensor.mul', 'tensor.fdiv'): return None
  a, b = v.op.operands
  c = _positive(b)
  if c is None and v.op.name == 'tensor.mul': c, a = _positive(a), b
  if c is None: return None
  return a, f * c if v.op.name == 'tensor.mul' else f / c

def _float_cast(v: Value) -> bool:
  return _is(v, 'tensor.cast') and v.type.dtype.is_float and v.op.operands[0].type.dtype.is_float

def _widening(v: Value) -> bool:  # a cast that keeps every value (a half float cast up to f32)
  return _float_cast(v) and v.type.dtype.itemsize > v.op.operands[0].type.dtype.itemsize


class Match:
  """One attention pattern being read from its output's product back to q, k and v: the ops it reads (`inner`:
  those whose results nothing else may read), and what it found. `keep`: values it may neither look through nor
  remove (a backward's detached values and targets), but for the row max it subtracts (`shifts`: the softmax does
  not depend on it, so a detached max is that max)."""
  def __init__(self, users: dict, keep=frozenset()):
    self.users, self.inner, self.keep, self.shifts = users, set(), keep, set()

  def through(self, v: Value, shift: bool = False) -> Value:
    """v below the float casts and same-shape reshapes on the pattern's way, each counted inner."""
    while (_float_cast(v) or (_is(v, 'tensor.reshape') and v.op.operands[0].type == v.type)) and (shift or v not in self.keep):
      self.inner.add(v.op)
      if shift: self.shifts.add(v.op)
      v = v.op.operands[0]
    return v

  def op(self, v: Value, name: str, shift: bool = False):
    v = self.through(v, shift)
    if not _is(v, 'tensor.' + name): return None
    self.inner.add(v.op)
    return v.op

  def softmax(self, p: Value) -> Value | None:
    """The scores whose softmax p is (its exponentials times 1 / their row sums, or over them), or None."""
    p = self.through(p)
    if not _is(p, 'tensor.mul', 'tensor.fdiv'): return None
    a, b = p.op.operands
    for x, y in ([(a, b), (b, a)] if p.op.name == 'tensor.mul' else [(a, b)]):
      before = set(self.inner)
      e = self.through(x)
      if _is(e, 'tensor.exp2') and _is(y, 'tensor.expand'):
        self.inner |= {p.op, e.op, y.op}
        total = y.op.operands[0]
        r = self.op(total, 'recip') if p.op.name == 'tensor.mul' else None
        if (p.op.name == 'tensor.fdiv' or r is not None) and self.row_reduce(r.operands[0] if r else total, 'add', e):
          return self.exponent(e)
      self.inner = before
    return None

  def row_reduce(self, v: Value, kind: str, of: Value) -> bool:
    """Whether v is the reduce `kind` over the last axis of `of` (below casts)."""
    r = self.op(v, 'reduce', shift=kind == 'max')
    return r is not None and r.kind == kind and tuple(r.axes) == (of.type.rank - 1,) and self.through(r.operands[0]) is of

  def exponent(self, e: Value) -> Value | None:
    """The scores s of e = exp2((s - expand(rowmax(s))) * log2(e)) (or of exp2(s * log2(e))), or None."""
    x = self.op(e.op.operands[0], 'mul')
    if x is None: return None
    for y, c in (x.operands, x.operands[::-1]):
      k = _splat(c)
      if k is None or abs(k / LOG2E - 1) > 2.0 ** -(7 if c.type.dtype.itemsize <= 2 else 22): continue
      d = self.through(y)
      if not _is(d, 'tensor.sub'): return d
      s, mx = d.op.operands
      s = self.through(s)
      self.inner.add(d.op)
      if not _is(mx, 'tensor.expand'): return None
      self.inner.add(mx.op)
      return s if self.row_reduce(mx.op.operands[0], 'max', s) else None
    return None

  def scores(self, s: Value, mult: float, terms: list, cap: float | None = None):
    """(q's product with k^T, the scale, the bias terms, the soft cap) of the scores s, or None: a term is ('add',
    value, multiplier) or ('mask', condition, whether a key takes part where it holds). Below a tanh (c * tanh(x),
    c the product of the constants above it: the cap) the scale is x's, and no term may be added: the cap comes
    before the bias."""
    while True:
      s = self.through(s)
      if _is(s, 'tensor.matmul'):
        self.inner.add(s.op)
        return s.op, mult, terms, cap
      if _is(s, 'tensor.mul', 'tensor.fdiv'):
        if (found := _scaled(s, mult)) is None: return None
        self.inner.add(s.op)
        s, mult = found
      elif _is(s, 'tensor.tanh') and cap is None:
        self.inner.add(s.op)
        s, cap, mult = s.op.operands[0], mult, 1.0
      elif cap is not None: return None
      elif _is(s, 'tensor.add'):
        self.inner.add(s.op)
        a, b = s.op.operands
        inner = set(self.inner)
        found = self.scores(a, mult, terms + [('add', b, mult)])
        if found is not None: return found
        self.inner = inner
        s, terms = b, terms + [('add', a, mult)]
      elif _is(s, 'tensor.where'):
        c, a, b = s.op.operands
        self.inner.add(s.op)
        if _splat(b) == -INF: terms, s = terms + [('mask', c, True)], a
        elif _splat(a) == -INF: terms, s = terms + [('mask', c, False)], b
        else: return None
      else: return None

  def read_alone(self, out) -> bool:
    """Whether what the pattern computes is read by it alone (and `out`, its product with v)."""
    ops = self.inner | {out}
    return all(all(u in ops for u in self.users.get(r, ())) and (r not in self.keep or o in self.shifts) for o in self.inner for r in o.results)


def operand(v: Value, factors: bool = True, keep=frozenset()) -> tuple[Value, float]:
  """An input of the products below its widening casts and (factors: q's and k's) the positive constants it is
  multiplied by, and their product; a value in `keep` is the input itself."""
  scale = 1.0
  while v not in keep:
    if _widening(v) or (_is(v, 'tensor.reshape') and v.op.operands[0].type == v.type): v = v.op.operands[0]; continue
    if factors and (found := _scaled(v, scale)) is not None: v, scale = found; continue
    break
  return v, scale


def repeated_heads(x: Value, keep=frozenset()) -> tuple[Value, int]:
  """x (..., H * g, rows, e) as the heads it repeats g times each, next to each other (repeat_interleave along the
  heads: a reshape to (..., H, 1, rows, e), an expand to g, the two axes merged): (the source, g); else (x, 1)."""
  e = x.op.operands[0] if _is(x, 'tensor.reshape') else None
  r = e.op.operands[0] if e is not None and _is(e, 'tensor.expand') else None
  if r is None or not _is(r, 'tensor.reshape') or r.op.operands[0].type.rank < 3 or {x, e, r} & keep: return x, 1
  src = r.op.operands[0]
  s = src.type.shape
  g = e.type.shape[len(s) - 2]
  if r.type.shape != s[:-2] + (1,) + s[-2:] or e.type.shape != s[:-2] + (g,) + s[-2:] or x.type.shape != s[:-3] + (s[-3] * g,) + s[-2:]:
    return x, 1
  return src, g


# ---------------------------------------------------------------- masks computed from positions

ALL, NONE = ((-INF, INF),), ()

def _merge(iv) -> tuple:
  out = []
  for lo, hi in sorted(iv):
    if out and lo <= out[-1][1] + 1: out[-1] = (out[-1][0], max(out[-1][1], hi))
    else: out.append((lo, hi))
  return tuple(out)

def _complement(a) -> tuple:
  out, lo = [], -INF
  for l, h in a:
    if l > lo: out.append((lo, l - 1))
    lo = h + 1
  if lo < INF and not (a and a[-1][1] == INF): out.append((lo, INF))
  return tuple(out)

def _negate(a) -> tuple: return tuple((-h, -l) for l, h in reversed(a))


class Offsets:
  """What a value computed from positions alone holds at each index: ('lin', coefficients per axis, constant) an
  affine function of the indices; ('pred', form, set) whether the affine form's value (coefficients with no common
  factor, the first nonzero positive; None: a constant) is in the set of integers (closed intervals); ('ind', pred,
  a, b) the number a where pred holds, else b. None for a value that reads data."""
  def __init__(self): self.memo: dict = {}

  def __call__(self, v: Value):
    if v not in self.memo: self.memo[v] = self.eval(v)
    return self.memo[v]

  @staticmethod
  def lin(v, coefs, c):
    return ('lin', tuple(0 if n == 1 else k for k, n in zip(coefs, v.type.shape)), c)

  @staticmethod
  def pred(coefs, c, rel):
    """The predicate `coefs . index + c rel 0` (rel: 'lt' or 'eq')."""
    g = 0
    for k in coefs: g = math.gcd(g, int(k))
    if g == 0: return ('pred', None, ALL if (c < 0 if rel == 'lt' else c == 0) else NONE)
    sign = 1 if next(k for k in coefs if k) > 0 else -1
    form = tuple(int(k) * sign // g for k in coefs)
    if rel == 'eq': return ('pred', form, ((-sign * c // g,) * 2,) if c % g == 0 else NONE)
    if sign > 0: return ('pred', form, ((-INF, math.ceil(-c / g) - 1),))
    return ('pred', form, ((math.floor(c / g) + 1, INF),))

  @staticmethod
  def combine(a, b, how):
    """Two predicates joined ('and', 'or', 'xor'), or None where their forms differ."""
    (_, fa, sa), (_, fb, sb) = a, b
    if fa is not None and fb is not None and fa != fb: return None
    form = fa if fa is not None else fb
    union = lambda x, y: _merge(x + y)
    meet = lambda x, y: _complement(union(_complement(x), _complement(y)))
    s = {'or': union, 'and': meet, 'xor': lambda x, y: union(meet(x, _complement(y)), meet(_complement(x), y))}[how](sa, sb)
    return ('pred', form, s)

  def truth(self, x):
    """x as a predicate (nonzero), or None."""
    if x is None or x[0] == 'pred': return x
    if x[0] == 'lin':
      if not all(float(k).is_integer() for k in (*x[1], x[2])): return None
      return self.not_(self.pred(x[1], int(x[2]), 'eq'))
    _, p, a, b = x
    return self.combine(p if a else ('pred', None, NONE), self.not_(p) if b else ('pred', None, NONE), 'or')

  @staticmethod
  def not_(p): return None if p is None else ('pred', p[1], _complement(p[2]))

  @staticmethod
  def moved(p, move):
    """Predicate p with its form's coefficients moved to other axes (those on axes of 1 dropped), normalised again."""
    if p[1] is None: return p
    form, s = move(p[1]), p[2]
    if not any(form): return ('pred', None, ALL if any(lo <= 0 <= hi for lo, hi in s) else NONE)
    g = 0
    for k in form: g = math.gcd(g, k)
    if g != 1: return None
    if next(k for k in form if k) < 0: form, s = tuple(-k for k in form), _negate(s)
    return ('pred', form, s)

  def compare(self, rel, x, y):
    if x[0] == 'lin' and y[0] == 'lin':
      d = tuple(a - b for a, b in zip(x[1], y[1]))
      if not all(float(k).is_integer() for k in d) or not float(x[2] - y[2]).is_integer(): return None
      p = self.pred(d, int(x[2] - y[2]), 'eq' if rel == 'ne' else rel)
      return self.not_(p) if rel == 'ne' else p
    for ind, other, flip in ((x, y, False), (y, x, True)):  # where(p, a, b) against a constant
      if ind[0] == 'ind' and other[0] == 'lin' and not any(other[1]):
        c = other[2]
        test = lambda a: {'lt': (c < a) if flip else (a < c), 'eq': a == c, 'ne': a != c}[rel]
        _, p, a, b = ind
        return self.combine(p if test(a) else ('pred', None, NONE), self.not_(p) if test(b) else ('pred', None, NONE), 'or')
    return None

  def eval(self, v: Value):
    op = v.op
    if op is None: return None
    name, srcs = op.name.split('.', 1)[1], [self(s) for s in op.operands] if op.name != 'tensor.scan' else []
    shape = v.type.shape
    if name == 'const':
      c = _splat(v)
      if c is None: return None
      return ('pred', None, ALL if c else NONE) if v.type.dtype.is_bool else self.lin(v, (0,) * len(shape), c)
    if name == 'scan':
      if not positions_scan(op): return None
      k = _splat(op.src)
      return self.lin(v, tuple(k if i == op.axis else 0 for i in range(len(shape))), 0 if op.attrs.get('exclusive') else k)
    if any(s is None for s in srcs): return None
    if name in ('add', 'sub') and all(s[0] == 'lin' for s in srcs):
      (_, a, c), (_, b, d) = srcs
      sg = 1 if name == 'add' else -1
      return self.lin(v, tuple(x + sg * y for x, y in zip(a, b)), c + sg * d)
    if name == 'mul' and all(s[0] == 'lin' for s in srcs):
      (_, a, c), (_, b, d) = srcs
      if any(a) and any(b): return None
      return self.lin(v, tuple(x * d + y * c for x, y in zip(a, b)), c * d)
    if name == 'neg' and srcs[0][0] == 'lin': return self.lin(v, tuple(-k for k in srcs[0][1]), -srcs[0][2])
    if name in ('cmplt', 'cmpeq', 'cmpne'): return self.compare(name[3:], *srcs)
    if name in ('and', 'or', 'xor') and v.type.dtype.is_bool:
      a, b = (self.truth(s) for s in srcs)
      return None if a is None or b is None else self.combine(a, b, name)
    if name == 'not' and v.type.dtype.is_bool: return self.not_(self.truth(srcs[0]))
    if name == 'cast' and srcs[0][0] == 'pred' and srcs[0][1] is None and not v.type.dtype.is_bool:
      return self.lin(v, (0,) * len(shape), int(srcs[0][2] == ALL))  # (a constant truth as a number)
    if name == 'where':
      p, a, b = srcs
      p = self.truth(p)
      if p is None or a[0] != 'lin' or b[0] != 'lin' or any(a[1]) or any(b[1]): return None
      return ('ind', p, a[2], b[2])
    if name == 'cast':
      x = srcs[0]
      if v.type.dtype.is_bool: return self.truth(x)
      return ('ind', x, 1, 0) if x[0] == 'pred' else x
    if name in ('reshape', 'expand', 'permute'):
      x = srcs[0]
      src = op.operands[0].type.shape
      if name == 'permute': axes = list(op.order)
      elif name == 'expand': axes = list(range(len(shape)))
      else:  # a reshape that inserts or removes axes of 1 alone
        if [n for n in src if n != 1] != [n for n in shape if n != 1]: return None
        big, axes = iter(i for i, n in enumerate(src) if n != 1), []
        for n in shape: axes.append(next(big) if n != 1 else None)
      move = lambda coefs: tuple(0 if a is None or src[a] == 1 else coefs[a] for a in axes)
      if x[0] == 'lin': return self.lin(v, move(x[1]), x[2])
      if x[0] == 'pred': return self.moved(x, move)
      p = self.moved(x[1], move)
      return None if p is None else ('ind', p, x[2], x[3])
    return None


def causal_offsets(p, rows: int, keys: int) -> str | None:
  """'causal' where the predicate (over a scores-shaped value's indices, `rows` queries and `keys` keys) keeps exactly
  the keys j <= i, 'all' where it keeps every key, else None. Read within the values its form takes on those indices
  (a tril whose diagonal is past the last key keeps every key; with one query, its form is the key's alone)."""
  if p is None or p[0] != 'pred': return None
  if p[1] is None: return 'all' if p[2] == ALL else None
  *batch, fi, fj = p[1]
  if any(batch): return None
  lo = min(0, fi * (rows - 1)) + min(0, fj * (keys - 1))
  hi = max(0, fi * (rows - 1)) + max(0, fj * (keys - 1))
  kept = _complement(_merge(_complement(p[2]) + ((-INF, lo - 1), (hi + 1, INF))))  # (the set within [lo, hi])
  if kept == ((lo, hi),): return 'all'
  if (fi, fj) == (1, -1): causal = ((max(lo, 0), hi),) if hi >= 0 else ()  # (i - j >= 0)
  elif (fi, fj) == (0, 1) and rows == 1: causal = ((0, 0),)                  # (one query: key 0 alone)
  else: return None
  return 'causal' if kept == causal else None


# ---------------------------------------------------------------- the rewrite

def _small(v: Value):
  """v as its smallest source and the movement ops (reshape, expand, permute) that broadcast it to v's shape."""
  chain = []
  while _is(v, 'tensor.reshape', 'tensor.expand', 'tensor.permute'):
    chain.append((v.op.name, v.type.shape, dict(v.op.attrs) or None)); v = v.op.operands[0]
  return v, chain[::-1]


def fuse(out_op, rw, users: dict, spec: DeviceSpec, keep=frozenset()):
  """tensor.attention for the product `out_op` of softmax(scores) and v, or None."""
  m = Match(users, keep)
  s = m.softmax(out_op.lhs)
  found = m.scores(s, 1.0, []) if s is not None else None
  if found is None or not m.read_alone(out_op): return None
  qk, scale, terms, cap = found
  if cap is not None: scale *= cap  # (c * tanh(s * x): the kernel's softcap c, its scale c x)
  (q, sq), (kt, sk), (v, _) = operand(qk.lhs, keep=keep), operand(qk.rhs, keep=keep), operand(out_op.rhs, False, keep)
  dt, loc = q.type.dtype, out_op.loc
  if not dt.is_float or kt.type.dtype is not dt or v.type.dtype is not dt: return None
  mk = lambda name, srcs, shape, dtype, attrs=None: rw.create(REGISTRY['tensor.' + name], list(srcs), [TensorType(tuple(shape), dtype)], attrs, loc).results[0]
  n = kt.type.rank
  if n < 2 or q.type.rank != n or v.type.rank != n: return None
  swap = tuple(range(n - 2)) + (n - 1, n - 2)
  if _is(kt, 'tensor.permute') and tuple(kt.op.order) == swap:
    k, f = operand(kt.op.operands[0], keep=keep)
    sk *= f
    if k.type.dtype is not dt: return None
  else: k = mk('permute', [kt], kt.type.shape[:-2] + kt.type.shape[:-3:-1], dt, {'order': swap})
  (k1, gk), (v1, gv) = repeated_heads(k, keep), repeated_heads(v, keep)
  if gk == gv > 1: k, v = k1, v1  # (grouped-query attention: the kernel reads each k and v head for its group)
  sc = s.type.shape
  causal, bias, offsets = 0, [], Offsets()
  for term in terms:
    kind, x, arg = term
    p = offsets(x) if kind == 'mask' else None
    if kind == 'add' and (a := offsets(x)) is not None and a[0] == 'ind' and {a[2], a[3]} <= {0, -INF} and a[2] != a[3]:
      kind, p, arg = 'mask', a[1], a[2] == 0  # (a position mask added as 0 / -inf)
    elif kind == 'mask' and p is not None: p = offsets.truth(p)
    if kind == 'mask' and p is not None:
      how = causal_offsets(p if arg else offsets.not_(p), *sc[-2:])
      if how == 'all': continue
      if how == 'causal': causal = 1; continue
    base, chain = _small(x)
    if kind == 'mask':
      zero, hide = (mk('const', [], base.type.shape, dt, {'value': c}) for c in (0.0, -INF))
      b = mk('where', [base, zero, hide] if arg else [base, hide, zero], base.type.shape, dt)
    else:
      b = base if arg == 1 else mk('mul', [base, mk('const', [], base.type.shape, base.type.dtype, {'value': arg})], base.type.shape, base.type.dtype)
      if b.type.dtype is not dt: b = mk('cast', [b], b.type.shape, dt)
    for name, shape, attrs in chain: b = mk(name.split('.')[1], [b], shape, dt, attrs)
    bias.append(b)
  while len(bias) > 1:
    a, b = bias.pop(), bias.pop()
    bias.append(mk('add', [mk('expand', [a], sc, dt) if a.type.shape != sc else a, mk('expand', [b], sc, dt) if b.type.shape != sc else b], sc, dt))
  att = REGISTRY['tensor.attention']([q, k, v] + bias, [TensorType(q.type.shape[:-1] + v.type.shape[-1:], dt)],
                                     {'causal': causal, 'scale': scale * sq * sk, **({'softcap': cap} if cap is not None else {})}, loc)
  try: att.verify()
  except Exception: return None
  if not att.fused(spec): return None
  rw.new_ops.append(att)
  rw.stats['attentions fused'] += 1
  r = att.results[0]
  return r if out_op.results[0].type.dtype is dt else mk('cast', [r], r.type.shape, out_op.results[0].type.dtype)


def users_of(fn) -> dict:
  users: dict = {}
  for op in fn.body.ops:
    for x in op.operands: users.setdefault(x, []).append(op)
  return users


def fuse_attention(m, spec: DeviceSpec, stats=None, keep=frozenset()) -> bool:
  """Rewrite every written-out attention of m's functions the device fuses; whether any was. keep: values the
  rewrite leaves in place (neither read through nor removed)."""
  from tgc.passes.dce import remove_dead
  fns = [fn for fn in m.ops if fn.body is not None and any(op.name == 'tensor.exp2' for op in fn.body.ops)]
  if spec.target.attention is None or not fns: return False
  users = {x: us for fn in fns for x, us in users_of(fn).items()}
  changed = apply_patterns(m, PatternMatcher([('tensor.matmul', lambda op, rw: fuse(op, rw, users, spec, keep))]), max_sweeps=1, stats=stats)
  if changed: remove_dead(m, stats)
  return changed


class FuseAttention(Pass):
  name = 'fuse-attention'
  summary = 'softmax(q k^T * scale + bias) v written out as tensor ops -> tensor.attention, where the device fuses it'
  reads = leaves = 'tensor'
  options = DEVICE_OPTIONS  # (the device's spec: whether it computes an attention in one kernel)
  def run(self, m): fuse_attention(m, DeviceSpec.from_options(self.opts), self.stats)
