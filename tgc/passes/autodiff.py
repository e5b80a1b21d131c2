"""autodiff: reverse-mode differentiation of a tensor-dialect function, written into the function itself.

`differentiate(fn, outs, seeds, targets)` appends to `fn`'s body (before its return) the ops that compute the
gradient of the outputs (each weighted by its seed, ones when None) with respect to each target value: the
forward values are reused as they are, each op's gradient rule makes the backward ops, and a value used
several times gets the sum (tensor.add) of what flows back from each use. Only float values carry gradients;
compares, integer ops, bitcasts and trunc pass none (their derivative is zero or undefined).

Ties, as tinygrad and torch do them: `max`/`min` of two equal values give each half of the gradient; a `max`
reduce divides it equally among the maxima. A `mul` reduce is exact with zeros (the product of the others).

The pass `autodiff{wrt=0+1 of=0 seed=false func=f}` appends the gradients of the chosen results with respect
to the chosen arguments to each function's results (after the original ones, in `wrt` order).
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY, Value
from tgc.ir.types import TensorType
from tgc.ir import dtypes as D
from tgc.passes.manager import Pass


class Builder:
  """Makes tensor-dialect ops (kept in `ops`, in order), their result types from their operands."""
  def __init__(self):
    self.ops, self.loc = [], None
  def op(self, name: str, srcs, t: TensorType, attrs=None) -> Value:
    o = REGISTRY['tensor.' + name](list(srcs), [t], attrs, self.loc)
    self.ops.append(o)
    return o.results[0]
  def c(self, v, like: Value) -> Value: return self.op('const', (), like.type, {'value': v})
  def alu(self, name, *srcs) -> Value: return self.op(name, srcs, srcs[-1].type)
  def cmp(self, name, a, b) -> Value: return self.op(name, (a, b), TensorType(a.type.shape, D.bool_))
  def where(self, c, x, y) -> Value: return self.op('where', (c, x, y), x.type)
  def cast(self, x, dt) -> Value: return x if x.type.dtype is dt else self.op('cast', (x,), TensorType(x.type.shape, dt))
  def move(self, name, x, shape, attrs=None) -> Value: return self.op(name, (x,), TensorType(tuple(shape), x.type.dtype), attrs)
  def reduce(self, kind, x, axes) -> Value:
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.type.shape))
    return self.op('reduce', (x,), TensorType(shape, x.type.dtype), {'kind': kind, 'axes': tuple(axes)})
  def expand(self, x, shape) -> Value: return x if x.type.shape == tuple(shape) else self.move('expand', x, shape)
  def transpose(self, x) -> Value:
    n, s = x.type.rank, x.type.shape
    return self.move('permute', x, s[:-2] + (s[-1], s[-2]), {'order': tuple(range(n - 2)) + (n - 1, n - 2)})


# ---------------------------------------------------------------- the rules: (builder, op, g) -> a gradient per operand

def _tie_split(b, op, g, wins):
  """max/min of two values: the gradient goes to the winner, half to each on a tie."""
  x, y = op.operands
  half, zero, eq = b.alu('mul', g, b.c(0.5, g)), b.c(0.0, g), b.cmp('cmpeq', x, y)
  tie = b.where(eq, half, zero)
  return [b.where(wins(x, y), g, tie), b.where(wins(y, x), g, tie)]

def _reduce(b, op, g):
  x, y = op.src, op.results[0]
  shape, axes = x.type.shape, op.axes
  if op.kind == 'add': return [b.expand(g, shape)]
  if op.kind == 'max':
    hit = b.cast(b.cmp('cmpeq', x, b.expand(y, shape)), x.type.dtype)
    share = b.alu('fdiv', g, b.reduce('add', hit, axes))
    return [b.alu('mul', hit, b.expand(share, shape))]
  # mul: the product of the other elements, also where some are zero
  zero = b.cmp('cmpeq', x, b.c(0.0, x))
  nonzero = b.expand(b.reduce('mul', b.where(zero, b.c(1.0, x), x), axes), shape)
  zeros = b.expand(b.reduce('add', b.cast(zero, x.type.dtype), axes), shape)
  none_, one = b.cmp('cmpeq', zeros, b.c(0.0, zeros)), b.cmp('cmpeq', zeros, b.c(1.0, zeros))
  others = b.where(zero, b.where(one, nonzero, b.c(0.0, x)), b.where(none_, b.alu('fdiv', nonzero, x), b.c(0.0, x)))
  return [b.alu('mul', b.expand(g, shape), others)]

def _expand(b, op, g):
  src = op.src.type.shape
  axes = tuple(i for i, (s, r) in enumerate(zip(src, op.results[0].type.shape)) if s != r)
  return [b.reduce('add', g, axes) if axes else g]

def _mod(b, op, g):  # fmod(x, y) = x - trunc(x / y) * y
  x, y = op.operands
  return [g, b.alu('neg', b.alu('mul', g, b.alu('trunc', b.alu('fdiv', x, y))))]

def _pow(b, op, g):
  """d/db = e * b^(e-1) (0 for e = 0); d/de = b^e * ln(b), at b = 0: 0 for e >= 0 and -inf below (torch's)."""
  x, e = op.operands
  zero_e, zero_b = b.cmp('cmpeq', e, b.c(0.0, e)), b.cmp('cmpeq', x, b.c(0.0, x))
  db = b.where(zero_e, b.c(0.0, g), b.alu('mul', e, b.alu('pow', x, b.alu('sub', e, b.c(1.0, e)))))
  de_zero = b.where(b.cmp('cmplt', e, b.c(0.0, e)), b.c(-math.inf, g), b.c(0.0, g))
  de = b.where(zero_b, de_zero, b.alu('mul', op.results[0], b.alu('mul', b.alu('log2', x), b.c(math.log(2), x))))
  return [b.alu('mul', g, db), b.alu('mul', g, de)]

def _gelu(b, op, g):
  """d/dx x sigmoid(z) = s + x s (1 - s) z', z = 2 sqrt(2/pi) (x + 0.044715 x^3), s = sigmoid(z) made as the plain
  form makes it; in f32 for half floats. (Differentiating the plain form instead takes both branches of its sigmoid's
  where: a longer epilogue in the backward's product.)"""
  from tgc.ir import dtypes as D
  dt = op.src.type.dtype
  acc = dt if dt.itemsize >= 4 else D.f32
  x = b.cast(op.src, acc)
  s = op.sigmoid_2y(_Into(b), x)
  dz = b.alu('mul', b.c(2 * math.sqrt(2 / math.pi), x), b.alu('add', b.c(1.0, x), b.alu('mul', b.alu('mul', x, x), b.c(3 * 0.044715, x))))
  ds = b.alu('add', s, b.alu('mul', b.alu('mul', x, s), b.alu('mul', b.alu('sub', b.c(1.0, x), s), dz)))
  return [b.cast(b.alu('mul', b.cast(g, acc), ds), dt)]

def _cast(b, op, g):
  return [b.cast(g, op.src.type.dtype) if op.src.type.dtype.is_float and op.results[0].type.dtype.is_float else None]

def _gather(b, op, g):
  """A gather's gradient: each source element gets the sum of the output gradients whose (clamped) index is its
  position along the axis (a one-hot compare of the index with the positions, times g, summed over the axis)."""
  x, idx, a = op.src, op.index, op.axis
  O, n = idx.type.shape, x.type.shape[a]
  E, ins = O[:a + 1] + (n,) + O[a + 1:], O[:a + 1] + (1,) + O[a + 1:]
  it = idx.type
  clamped = b.alu('min', b.alu('max', idx, b.c(0, idx)), b.c(n - 1, idx))
  pos = b.op('const', (), TensorType((n,), it.dtype), {'value': tuple(range(n))})
  pos = b.expand(b.move('reshape', pos, (1,) * (a + 1) + (n,) + (1,) * (len(O) - a - 1)), E)
  hit = b.cast(b.cmp('cmpeq', b.expand(b.move('reshape', clamped, ins), E), pos), g.type.dtype)
  s = b.reduce('add', b.alu('mul', hit, b.expand(b.move('reshape', g, ins), E)), (a,))
  return [b.move('reshape', s, x.type.shape), None]

def _scan(b, op, g):
  """add: the gradient summed from the end (a reversed cumsum); max: each output's gradient goes to the position that
  holds its running maximum (the last one so on ties, NaN's own where a NaN rules: torch's cummax index); mul: the
  reversed cumsum of g * y divided by x before a row's first zero, at the zero the products of the others (a scan with
  the zero as 1), after it nothing. The init takes what comes back to the running value's start."""
  x, y, a, init = op.src, op.results[0], op.axis, op.init
  shape, n, dt = x.type.shape, x.type.shape[a], x.type.dtype
  scan = lambda kind, v: b.op('scan', (v,), v.type, {'kind': kind, 'axis': a})
  rev = lambda v: b.move('flip', v, v.type.shape, {'axes': (a,)})
  it = TensorType(shape, D.i32)
  pos = b.op('scan', (b.op('const', (), TensorType((n,), D.i32), {'value': 1}),), TensorType((n,), D.i32), {'kind': 'add', 'axis': 0, 'exclusive': True})
  pos = b.expand(b.move('reshape', pos, (1,) * a + (n,) + (1,) * (len(shape) - a - 1)), shape)
  if op.kind == 'add':  # (exclusive: out[i] leaves x[i] out, so x[j] reaches the outputs after it)
    gx = rev(b.op('scan', (rev(g),), g.type, {'kind': 'add', 'axis': a, **({'exclusive': True} if op.exclusive else {})}))
    return [gx, b.reduce('add', g, (a,)) if init is not None else None]
  if op.exclusive: raise op.error(f"has no gradient rule: an exclusive {op.kind} scan is differentiated only for add")
  if op.kind == 'logaddexp':  # sum over i >= j of g[i] exp(x[j] - y[i]): g's positive and negative parts apart, each
    # a reversed logcumsumexp of log|g| - y, so that nothing overflows (torch's form)
    ln2, c = math.log(2), lambda v, like: b.c(v, like)
    exp = lambda v: b.alu('exp2', b.alu('mul', v, c(1 / ln2, v)))
    log = lambda v: b.alu('mul', b.alu('log2', v), c(ln2, v))
    part = lambda gp: exp(b.alu('add', x, rev(scan('logaddexp', rev(b.alu('sub', log(gp), y))))))
    gx = b.alu('sub', part(b.alu('max', g, c(0.0, g))), part(b.alu('max', b.alu('neg', g), c(0.0, g))))
    return [gx, b.reduce('add', b.alu('mul', g, exp(b.alu('sub', b.expand(init, shape), y))), (a,)) if init is not None else None]
  if op.kind == 'max':
    hit = b.op('or', (b.cmp('cmpeq', x, y), b.cmp('cmpne', x, x)), TensorType(shape, D.bool_))
    idx = scan('max', b.where(hit, pos, b.c(-1, pos)))  # the position holding each running maximum (-1: the init's)
    E = shape[:a + 1] + (n,) + shape[a + 1:]  # (.., output i, position j, ..)
    ii = b.expand(b.move('reshape', idx, shape[:a + 1] + (1,) + shape[a + 1:]), E)
    jj = b.expand(b.move('reshape', pos, shape[:a] + (1,) + shape[a:]), E)
    ge = b.expand(b.move('reshape', g, shape[:a + 1] + (1,) + shape[a + 1:]), E)
    gx = b.move('reshape', b.reduce('add', b.where(b.cmp('cmpeq', ii, jj), ge, b.c(0.0, ge)), (a,)), shape)
    return [gx, b.reduce('add', b.where(b.cmp('cmplt', idx, b.c(0, idx)), g, b.c(0.0, g)), (a,)) if init is not None else None]
  ginit = None
  if init is not None:  # y = init * (the scan without it): the init's gradient sums g times that
    q = scan('mul', x)
    ginit, g, y = b.reduce('add', b.alu('mul', g, q), (a,)), b.alu('mul', g, b.expand(init, shape)), q
  zero = b.cmp('cmpeq', x, b.c(0.0, x))
  # first: where the leading run of nonzeros ends (the first zero's position, n when there is none)
  first = b.expand(b.reduce('add', b.cast(b.cmp('cmpeq', scan('max', b.cast(zero, D.i32)), b.c(0, pos)), D.i32), (a,)), shape)
  before, at = b.cmp('cmplt', pos, first), b.cmp('cmpeq', pos, first)
  rsum = rev(scan('add', rev(b.alu('mul', g, y))))
  others = scan('mul', b.where(at, b.c(1.0, x), x))  # the products with the first zero left out
  at_zero = b.expand(b.reduce('add', b.where(b.cmp('cmplt', pos, first), b.c(0.0, g), b.alu('mul', g, others)), (a,)), shape)
  gx = b.where(before, b.alu('fdiv', rsum, b.where(before, x, b.c(1.0, x))), b.where(at, at_zero, b.c(0.0, x)))
  return [gx, ginit]

def _through(b, start: int, r: Value, g: Value) -> dict:
  """The adjoints of what the ops the builder made from `start` on (a composite's plain form, result r) read,
  back from r's gradient g by their rules."""
  adj = {r: g}
  for o in reversed(b.ops[start:]):
    if (gr := adj.get(o.results[0])) is None: continue
    name = o.name.split('.', 1)[1]
    if name in NO_GRADIENT: continue
    for v, gv in zip(o.operands, RULES[name](b, o, gr)):
      if gv is not None: adj[v] = gv if v not in adj else b.alu('add', adj[v], gv)
  return adj

def _operands_adjoints(op, adj) -> list:
  """Each operand's adjoint, once: an operand the op reads twice (attention(x, x, x)) holds the sum in its first place."""
  seen = set()
  return [None if v in seen or seen.add(v) else adj.get(v) for v in op.operands]

def _conv(b, op, g):
  """A conv's gradients: its plain form (tensor-decompose's for no device: NCHW, no copies) written here and
  differentiated by the rules of its primitives; the forward keeps the layout tensor-decompose gives it for the
  device. (The plain form's result itself goes unused: the rules of its multiply and sum read only its views.)"""
  from tgc.passes.tensor_decompose import conv_of
  start = len(b.ops)
  adj = _through(b, start, conv_of(op, lambda name, srcs, t, attrs: b.op(name, srcs, t, attrs), None).v, g)
  if op.w is not op.x and (gx := _conv_input_grad(b, op, g)) is not None: return [gx, adj.get(op.w)]
  return _operands_adjoints(op, adj)

class _Into:
  """A rewriter's `create` that makes the ops into a Builder: a composite's `decompose` writes its plain form there."""
  def __init__(self, b): self.b = b
  def create(self, cls, operands, types, attrs, loc):
    o = cls(list(operands), list(types), attrs, loc)
    self.b.ops.append(o)
    return o

def _plain(b, op, g):
  """A composite without a rule of its own (an extension's): its `decompose`'s plain form, differentiated by the
  rules of the ops it makes."""
  start = len(b.ops)
  return _operands_adjoints(op, _through(b, start, op.decompose(_Into(b)), g))

def _attention(b, op, g):
  """softmax(q k^T * scale + bias) v's gradients as flash attention's backward (tensor.attention_grad, one a operand: where
  the device fuses it, two kernels), from the rows' log-sum-exp (tensor.attention_lse: where the device fuses
  attention, its forward kernel stores it) and d, each query row's sum of g * out. No gradient goes through the
  softmax's max (a shift the value does not depend on)."""
  from tgc.ir import dtypes as D
  q, k, v, bias = op.q, op.k, op.v, op.operands[3:]
  acc = q.type.dtype if q.type.dtype.itemsize >= 4 else D.f32
  row = TensorType(q.type.shape[:-1] + (1,), acc)
  wide = lambda x: x if x.type.dtype is acc else b.op('cast', [x], TensorType(x.type.shape, acc))
  attrs = {'causal': op.causal, 'scale': op.attrs['scale'], **({'softcap': op.attrs['softcap']} if op.softcap else {})}
  lse = b.op('attention_lse', [q, k, *bias], row, attrs)
  d = b.op('reduce', [b.alu('mul', wide(g), wide(op.results[0]))], row, {'kind': 'add', 'axes': (row.rank - 1,)})
  adj: dict = {}
  for i, x in enumerate(op.operands):  # (the bias's gradient, where one is read, wrt 3: dead code where none is)
    gx = b.op('attention_grad', [q, k, v, g, lse, d, *bias], x.type, {**attrs, 'wrt': i})
    adj[x] = gx if x not in adj else b.alu('add', adj[x], gx)
  return _operands_adjoints(op, adj)

def _conv_input_grad(b, op, g):
  """The input's gradient of a conv as a conv itself (the transposed conv): the output's gradient, with s - 1 zeros
  between its elements along an axis of stride s, padded by each axis's reach less its own padding, convolved with
  the weight's input and output channels swapped and its window flipped. The plain form's gradient is the product
  of the output's gradient and the weight at every window position (a batch x channels x pixels x window buffer),
  then the windows' overlaps summed: a ResNet's 32-channel 3x3 conv's took 0.44 ms on an H200 so, where its forward
  conv takes 0.05. None where that does not apply (groups, a padding wider than the window's reach)."""
  x, w = op.x.type, op.w.type
  nk, K, dil, pads, st = x.rank - 2, w.shape[2:], tuple(op.dilation), tuple(op.pads), tuple(op.stride)
  if op.groups != 1 or not x.dtype.is_float or g.type.dtype is not x.dtype: return None
  (n, co), out = g.type.shape[:2], g.type.shape[2:]
  stuffed = tuple((o - 1) * s + 1 for o, s in zip(out, st))  # (the gradient's elements s apart, zeros between)
  reach = [d * (k - 1) for d, k in zip(dil, K)]
  new_pads = []
  for i in range(nk):  # (pads flat from the last axis: left, right of the last axis first)
    ax = nk - 1 - i
    lo = pads[2 * i]
    hi = x.shape[2 + ax] - stuffed[ax] + lo  # (what the input's rows past the last window read: zeros)
    if not (0 <= lo <= reach[ax] and hi >= 0): return None
    new_pads += [reach[ax] - lo, hi]
  if any(s > 1 for s in st):
    z = b.move('reshape', g, (n, co) + tuple(v for o in out for v in (o, 1)))
    z = b.move('pad', z, (n, co) + tuple(v for o, s in zip(out, st) for v in (o, s)),
               {'pads': ((0, 0), (0, 0)) + tuple(p for s in st for p in ((0, 0), (0, s - 1)))})
    z = b.move('reshape', z, (n, co) + tuple(o * s for o, s in zip(out, st)))
    g = b.move('shrink', z, (n, co) + stuffed, {'bounds': ((0, n), (0, co)) + tuple((0, v) for v in stuffed)})
  order = (1, 0) + tuple(range(2, w.rank))
  wt = b.move('permute', op.w, tuple(w.shape[i] for i in order), {'order': order})
  wt = b.move('flip', wt, wt.type.shape, {'axes': tuple(range(2, w.rank))})
  return b.op('conv', (g, wt), TensorType(x.shape, x.dtype), {'stride': (1,) * nk, 'dilation': dil, 'pads': tuple(new_pads), 'groups': 1})

RULES = {
  'neg': lambda b, op, g: [b.alu('neg', g)],
  'exp2': lambda b, op, g: [b.alu('mul', g, b.alu('mul', op.results[0], b.c(math.log(2), g)))],
  'log2': lambda b, op, g: [b.alu('fdiv', g, b.alu('mul', op.src, b.c(math.log(2), g)))],
  'sin': lambda b, op, g: [b.alu('mul', g, b.alu('sin', b.alu('sub', b.c(math.pi / 2, g), op.src)))],
  'sqrt': lambda b, op, g: [b.alu('fdiv', g, b.alu('mul', op.results[0], b.c(2.0, g)))],
  'recip': lambda b, op, g: [b.alu('neg', b.alu('mul', g, b.alu('mul', op.results[0], op.results[0])))],
  'add': lambda b, op, g: [g, g],
  'sub': lambda b, op, g: [g, b.alu('neg', g)],
  'mul': lambda b, op, g: [b.alu('mul', g, op.rhs), b.alu('mul', g, op.lhs)],
  'fdiv': lambda b, op, g: [b.alu('fdiv', g, op.rhs), b.alu('neg', b.alu('fdiv', b.alu('mul', g, op.results[0]), op.rhs))],
  'mod': _mod,
  'pow': _pow,
  'gelu': _gelu,
  'max': lambda b, op, g: _tie_split(b, op, g, lambda x, y: b.cmp('cmplt', y, x)),
  'min': lambda b, op, g: _tie_split(b, op, g, lambda x, y: b.cmp('cmplt', x, y)),
  'where': lambda b, op, g: [None, b.where(op.cond, g, b.c(0.0, g)), b.where(op.cond, b.c(0.0, g), g)],
  'mulacc': lambda b, op, g: [b.alu('mul', g, op.b), b.alu('mul', g, op.a), g],
  'cast': _cast,
  'reduce': _reduce,
  'reshape': lambda b, op, g: [b.move('reshape', g, op.src.type.shape)],
  'expand': _expand,
  'permute': lambda b, op, g: [b.move('permute', g, op.src.type.shape, {'order': tuple(sorted(range(len(op.order)), key=op.order.__getitem__))})],
  'pad': lambda b, op, g: [b.move('shrink', g, op.src.type.shape, {'bounds': tuple((lo, lo + s) for (lo, _), s in zip(op.pads, op.src.type.shape))})],
  'shrink': lambda b, op, g: [b.move('pad', g, op.src.type.shape, {'pads': tuple((lo, s - hi) for (lo, hi), s in zip(op.bounds, op.src.type.shape))})],
  'flip': lambda b, op, g: [b.move('flip', g, g.type.shape, {'axes': op.axes})],
  'contiguous': lambda b, op, g: [g],
  'gather': _gather,
  'scan': _scan,
  'conv': _conv,
  'attention': _attention,
  'matmul': lambda b, op, g: [b.op('matmul', (g, b.transpose(op.rhs)), op.lhs.type), b.op('matmul', (b.transpose(op.lhs), g), op.rhs.type)],
}
# ops whose outputs carry no gradient to their operands (constant, integer or bool only, or piecewise constant)
NO_GRADIENT = frozenset(('const', 'empty', 'trunc', 'not', 'cmplt', 'cmpne', 'cmpeq', 'and', 'or', 'xor', 'shl', 'shr', 'idiv', 'bitcast', 'argmax'))


def _carries(v: Value) -> bool: return isinstance(v.type, TensorType) and v.type.dtype.is_float

def differentiate(fn, outs: list[Value], seeds: list[Value | None], targets: list[Value], stop=frozenset()) -> list[Value | None]:
  """Insert into `fn` (before its return) the gradient of sum(out * seed) with respect to each target value:
  the gradient values (None where no path leads from the target to an output). Values in `stop` pass no
  gradient through (detached)."""
  body = fn.body
  ops = body.ops[:-1]
  live = {t for t in targets if t is not None and _carries(t)}  # values that depend on a target through float values
  for op in ops:
    if any(v in live for v in op.operands): live.update(r for r in op.results if _carries(r) and r not in stop)
  b, adj = Builder(), {}
  def acc(v, g): adj[v] = g if v not in adj else b.alu('add', adj[v], g)
  for o, s in zip(outs, seeds):
    if o in live: acc(o, s if s is not None else b.c(1.0, o))
  for op in reversed(ops):
    g = adj.get(op.results[0]) if len(op.results) == 1 else None
    if g is None or op.results[0] in stop or not any(v in live for v in op.operands): continue
    name = op.name.split('.', 1)[1]
    rule = RULES.get(name) if op.name.startswith('tensor.') else None
    if rule is None and callable(getattr(op, 'decompose', None)) and name not in NO_GRADIENT: rule = _plain
    if rule is None:
      if name in NO_GRADIENT: continue
      raise op.error("has no gradient rule (autodiff differentiates the primitive tensor ops; run tensor-decompose first for a composite)")
    b.loc = op.loc
    for v, gv in zip(op.operands, rule(b, op, g)):
      if gv is not None and v in live: acc(v, gv)
  grads = [adj.get(t) for t in targets]
  used, keep = set(grads), []
  for o in reversed(b.ops):  # only what the gradients use: a rule makes every operand's gradient
    if o.results[0] in used: keep.append(o); used.update(o.operands)
  body.ops[-1:-1] = keep[::-1]
  return grads


def _indices(text: str, n: int, what: str, fn) -> list[int] | None:
  if not text: return None
  try: idx = [int(s) for s in text.replace('+', ',').split(',') if s]
  except ValueError: raise fn.error(f"autodiff: {what} must be positions like 0+2, got '{text}'") from None
  for i in idx:
    if not 0 <= i < n: raise fn.error(f"autodiff: {what} position {i} is out of range: @{fn.sym_name} has {n}")
  return idx


class Autodiff(Pass):
  name = 'autodiff'
  summary = "append the gradients of results with respect to arguments (reverse mode; seeds of ones, or arguments)"
  reads = leaves = 'tensor'
  options = {
    'wrt': (str, '', "the arguments to differentiate with respect to, by position (0+2; default: every float argument)"),
    'of': (str, '', "the results to differentiate, by position (default: every float result; their gradients add up)"),
    'seed': (bool, False, "take each differentiated result's incoming gradient as a new last argument instead of ones"),
    'func': (str, '', "only the function of this name (default: every func.func)"),
  }

  def idle_reason(self, m, levels):
    names = [fn.sym_name for fn in m.functions('func.func')]
    if self.func and self.func not in names:
      return f"autodiff: no func.func named '@{self.func}'" + (f" (functions: {', '.join('@' + n for n in names)})" if names else '')
    return super().idle_reason(m, levels)

  def run(self, m):
    for fn in m.functions('func.func'):
      if self.func and fn.sym_name != self.func: continue
      args, ret = fn.body.args, fn.body.ops[-1]
      wrt = _indices(self.wrt, len(args), 'wrt', fn)
      of = _indices(self.of, len(ret.operands), 'of', fn)
      wrt = wrt if wrt is not None else [i for i, a in enumerate(args) if _carries(a)]
      of = of if of is not None else [i for i, v in enumerate(ret.operands) if _carries(v)]
      for i in wrt:
        if not _carries(args[i]): raise fn.error(f"autodiff: argument {i} of @{fn.sym_name} is {args[i].type}; only float tensors have gradients")
      for i in of:
        if not _carries(ret.operands[i]): raise fn.error(f"autodiff: result {i} of @{fn.sym_name} is {ret.operands[i].type}; only float results are differentiated")
      outs, seeds, body = [ret.operands[i] for i in of], [], fn.body
      for k, o in enumerate(outs):
        seeds.append(Value(o.type, body, len(body.args), hint=f"seed{k}") if self.seed else None)
        if self.seed: body.args.append(seeds[-1])
      grads = differentiate(fn, outs, seeds, [args[i] for i in wrt])
      b = Builder()
      b.loc = fn.loc
      grads = [g if g is not None else b.c(0.0, args[i]) for g, i in zip(grads, wrt)]
      fn.body.ops[-1:-1] = b.ops
      ret.operands = ret.operands + grads
      fn.attrs['result_types'] = tuple(fn.result_types) + tuple(g.type for g in grads)
      self.stats['gradients'] += len(grads)
