"""Differential fuzzer of random Tensor programs against numpy, on every device this machine has.

`python -m fuzz.tensor --seed 1 --seconds 600 --out fuzz-out`. A program is a list of steps, each making one value
from earlier ones: inputs (0-d to 5-d, odd and size-1 axes, now and then an empty one, every dtype), elementwise
ops with broadcasting (a division by an input drawn away from zero among them), casts, comparisons and where, movement chains (reshape, permute, expand, pad, shrink,
flip), reductions (sum, max, min, mean, argmax), scans (cumsum, cummax), matmul, scaled_dot_product_attention (causal,
a boolean or added mask that broadcasts, grouped key heads, a scale, a softcap), and realized intermediates that several later
steps read. Each program runs on CPU, C, INTERP, OPENCL (where pyopencl finds a platform) and CUDA (where present), and
each result is checked against numpy: exactly for integers and bools, within a tolerance fitting the dtype
(relative to a bound on the values the generator keeps) for floats. A float feeds a cast to an integer, a
comparison or an argmax only where it is exact (an input, or what movement, neg, abs, max and min make of one),
so that rounding never flips a decision.
"""
from __future__ import annotations
import json, math, sys
from fuzz.hostile import mutate_list

NAME = 'tensor'
FLOATS = ('float16', 'bfloat16', 'float32', 'float64')
SINTS = ('int8', 'int16', 'int32', 'int64')
UINTS = ('uint8', 'uint16', 'uint32', 'uint64')
DTYPES = ('bool',) + SINTS + UINTS + FLOATS
TOL = {'float16': 2 ** -7, 'bfloat16': 2 ** -5, 'float32': 1e-4, 'float64': 1e-9}
FLOAT_CAP = {'float16': 300.0, 'bfloat16': 300.0, 'float32': 1e5, 'float64': 1e5}  # the generator keeps |values| below
MAX_NUMEL = 3000
DEVICES: list[str] = []
WORKER_INFO = ''  # set by the harness: setup()'s line from the child


# ---------------------------------------------------------------- generating (in the parent)
class _V:
  """What the generator knows of a value: shape, dtype, a bound on |value|, whether it is exact (see above), whether
  |value| >= 1 (an input drawn away from zero: a divisor)."""
  def __init__(self, shape, dtype, bound, exact, away=False):
    self.shape, self.dtype, self.bound, self.exact, self.away = tuple(shape), dtype, bound, exact, away
  @property
  def numel(self): return math.prod(self.shape)
  @property
  def kind(self): return 'f' if self.dtype in FLOATS else 'b' if self.dtype == 'bool' else 'i'


def _rand_shape(r, numel_cap=400):
  nd = r.choice((0, 1, 1, 2, 2, 3, 3, 4, 5))
  shape = [r.choice((1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33)) for _ in range(nd)]
  if nd and r.random() < 0.04: shape[r.randrange(nd)] = 0
  while math.prod(shape) > numel_cap: shape[shape.index(max(shape))] //= 2
  return shape


def _input(r, vals, steps, shape, dtype, away=False):
  """A new input; away: a float one drawn from [-2, -1] and [1, 2] (a divisor: a padded axis's zeros must not reach
  its division)."""
  bound = 0 if dtype == 'bool' else 2.0 if dtype in FLOATS else 10 if dtype in SINTS else 20
  steps.append({'op': 'input', 'arg': [list(shape), dtype, r.randrange(1 << 30)] + ([True] if away else [])})
  vals.append(_V(shape, dtype, bound, True, away))
  return len(vals) - 1


def _partner(r, vals, steps, a: _V):
  """An existing value of a's dtype whose shape broadcasts against a's to a's shape, or a new input that does."""
  ok = [i for i, v in enumerate(vals) if v.dtype == a.dtype and len(v.shape) <= len(a.shape)
        and all(s in (1, t) for s, t in zip(v.shape[::-1], a.shape[::-1]))]
  if ok and r.random() < 0.6: return r.choice(ok)
  shape = [1 if r.random() < 0.3 else s for s in a.shape][r.randrange(len(a.shape) + 1) if r.random() < 0.3 else 0:]
  return _input(r, vals, steps, shape, a.dtype, a.dtype in FLOATS and r.random() < 0.3)


def _factor(r, shape):
  """Another shape with the same number of elements, 0 to 5 axes."""
  n = math.prod(shape)
  if n == 0: return [0] + [1] * r.randrange(3)
  primes, m, p = [], n, 2
  while m > 1:
    while m % p == 0: primes.append(p); m //= p
    p += 1
  nd = r.randrange(1, 6) if primes else r.randrange(0, 4)
  out = [1] * max(nd, 1)
  for q in primes: out[r.randrange(len(out))] *= q
  if nd == 0: return []
  return out


def _step(r, vals, steps):
  i = r.randrange(len(vals)) if r.random() < 0.5 else len(vals) - 1
  a = vals[i]
  k, nd = a.kind, len(a.shape)
  choice = r.choice(('unary', 'unary', 'binary', 'binary', 'binary', 'cast', 'cmp', 'where', 'reshape', 'permute', 'expand',
                     'pad', 'shrink', 'flip', 'reduce', 'reduce', 'scan', 'matmul', 'attention', 'realize', 'contiguous', 'input', 'scalar'))
  cap = FLOAT_CAP.get(a.dtype, 1e18)
  def add(op, src, arg, shape, dtype, bound, exact):
    steps.append({'op': op, 'src': src, 'arg': arg}); vals.append(_V(shape, dtype, bound, exact))
  if choice == 'input': _input(r, vals, steps, _rand_shape(r), r.choice(DTYPES)); return
  if choice == 'unary':
    if k == 'f':
      ops = ['neg', 'abs', 'relu', 'sigmoid', 'tanh', 'sqrtabs', 'log1pabs', 'recip1pabs']
      if a.bound < 50: ops.append('sin')
      if a.bound < 4: ops.append('exp')
      if a.bound ** 2 < cap: ops.append('square')
      op = r.choice(ops)
      # (each bound computed only for the op chosen: exp and square of a large bound overflow Python's floats)
      b = {'neg': lambda: a.bound, 'abs': lambda: a.bound, 'relu': lambda: a.bound, 'sigmoid': lambda: 1, 'tanh': lambda: 1,
           'sqrtabs': lambda: math.sqrt(a.bound) + 1, 'sin': lambda: 1, 'log1pabs': lambda: math.log1p(a.bound) + 1,
           'recip1pabs': lambda: 1, 'exp': lambda: math.exp(a.bound), 'square': lambda: a.bound ** 2}[op]()
      add('unary', [i], op, a.shape, a.dtype, b, a.exact and op in ('neg', 'abs', 'relu'))
    elif k == 'i':
      op = r.choice(['abs', 'relu', 'square', 'invert'] + (['neg'] if a.dtype in SINTS else []))
      add('unary', [i], op, a.shape, a.dtype, 2.0 ** 64 if op in ('invert', 'square') else a.bound + 1, True)
    else: add('unary', [i], 'not', a.shape, a.dtype, 0, True)
    return
  if choice == 'scalar':  # a binary op with a Python number
    if k == 'f':
      op, c = r.choice(('add', 'sub', 'mul', 'div', 'rsub')), r.choice((0.5, 2.0, -1.5, 3.0, 0.0))
      if op == 'div' and c == 0: c = 4.0
      b = a.bound * abs(c) if op == 'mul' else a.bound / abs(c) if op == 'div' else a.bound + abs(c)
      if b < cap: add('scalar', [i], [op, c], a.shape, a.dtype, b, a.exact and op == 'mul' and c in (2.0, 0.0))
    elif k == 'i':
      op, c = r.choice(('add', 'sub', 'mul', 'floordiv', 'mod', 'and', 'or', 'xor', 'rsub')), r.randrange(1, 8)
      add('scalar', [i], [op, c], a.shape, a.dtype, a.bound * c + c, True)
    return
  if choice == 'binary':
    j = _partner(r, vals, steps, a)
    b = vals[j]
    if k == 'f':
      op = r.choice(('add', 'sub', 'mul', 'maximum', 'minimum', 'div1pabs') + (('div', 'div') if b.away else ()))
      bound = {'add': a.bound + b.bound, 'sub': a.bound + b.bound, 'mul': a.bound * b.bound, 'div1pabs': a.bound, 'div': a.bound}.get(op, max(a.bound, b.bound))
      if bound < cap: add('binary', [i, j], op, a.shape, a.dtype, bound, a.exact and b.exact and op in ('maximum', 'minimum'))
    elif k == 'i':
      op = r.choice(('add', 'sub', 'mul', 'maximum', 'minimum', 'and', 'or', 'xor'))
      add('binary', [i, j], op, a.shape, a.dtype, min(a.bound * b.bound + a.bound + b.bound, 1e18), True)
    else: add('binary', [i, j], r.choice(('and', 'or', 'xor')), a.shape, a.dtype, 0, True)
    return
  if choice == 'cast':
    to = r.choice(DTYPES)
    if k == 'f' and to not in FLOATS and to != 'bool' and not (a.exact and a.bound < 100 and to in SINTS): return
    if k == 'f' and to == 'bool' and not a.exact: return
    if k == 'i' and to in FLOATS and a.bound >= 256: return
    if k == 'f' and to in ('float16', 'bfloat16') and a.bound >= 300: return
    add('cast', [i], to, a.shape, to, a.bound if to != 'bool' else 0, a.exact and (to not in ('float16', 'bfloat16') or a.dtype == to))
    return
  if choice == 'cmp':
    if k == 'f' and not a.exact: return
    j = _partner(r, vals, steps, a)
    if k == 'f' and not vals[j].exact: return
    add('cmp', [i, j], r.choice(('lt', 'eq', 'ne')), a.shape, 'bool', 0, True); return
  if choice == 'where':
    conds = [c for c, v in enumerate(vals) if v.dtype == 'bool' and len(v.shape) <= nd and all(s in (1, t) for s, t in zip(v.shape[::-1], a.shape[::-1]))]
    if not conds: return
    j = _partner(r, vals, steps, a)
    add('where', [r.choice(conds), i, j], None, a.shape, a.dtype, max(a.bound, vals[j].bound), a.exact and vals[j].exact); return
  if choice == 'reshape': shape = _factor(r, a.shape); add('reshape', [i], shape, shape, a.dtype, a.bound, a.exact); return
  if choice == 'permute' and nd:
    order = list(range(nd)); r.shuffle(order)
    add('permute', [i], order, [a.shape[o] for o in order], a.dtype, a.bound, a.exact); return
  if choice == 'expand' and 1 in a.shape:
    shape = [r.choice((2, 3, 5)) if s == 1 and r.random() < 0.7 else s for s in a.shape]
    if math.prod(shape) <= MAX_NUMEL: add('expand', [i], shape, shape, a.dtype, a.bound, a.exact)
    return
  if choice == 'pad' and nd:
    pads = [[r.randrange(3), r.randrange(3)] if r.random() < 0.5 else [0, 0] for _ in a.shape]
    shape = [s + p + q for s, (p, q) in zip(a.shape, pads)]
    if math.prod(shape) <= MAX_NUMEL: add('pad', [i], pads, shape, a.dtype, a.bound, a.exact)
    return
  if choice == 'shrink' and nd:
    b = []
    for s in a.shape:
      lo = r.randrange(s + 1) if r.random() < 0.5 else 0
      b.append([lo, r.randrange(lo, s + 1) if r.random() < 0.5 else s])
    add('shrink', [i], b, [hi - lo for lo, hi in b], a.dtype, a.bound, a.exact); return
  if choice == 'flip' and nd:
    axes = sorted(r.sample(range(nd), r.randrange(1, nd + 1)))
    add('flip', [i], axes, a.shape, a.dtype, a.bound, a.exact); return
  if choice == 'scan' and nd:  # cumsum (in sum's dtype) or cummax's values along one axis
    ax, kind = r.randrange(nd), r.choice(['cumsum', 'cummax'])
    if kind == 'cummax': add('scan', [i], [kind, ax], a.shape, a.dtype, a.bound, a.exact); return
    bound = a.bound * max(a.shape[ax], 1)
    if k == 'f' and bound >= cap: return
    dt = a.dtype if a.dtype in ('float16', 'bfloat16') else {'bool': 'int32', 'int8': 'int32', 'int16': 'int32', 'uint8': 'uint32', 'uint16': 'uint32'}.get(a.dtype, a.dtype)
    add('scan', [i], [kind, ax], a.shape, dt, bound, False); return
  if choice == 'reduce':
    kinds = ['sum', 'max', 'min'] + (['mean'] if k == 'f' else []) + (['argmax'] if a.exact and nd else [])
    kind = r.choice(kinds)
    axes = None if not nd or r.random() < 0.25 else sorted(r.sample(range(nd), r.randrange(1, nd + 1)))
    if kind == 'argmax': axes = None if r.random() < 0.3 else [r.randrange(nd)]
    red = range(nd) if axes is None else axes
    n = math.prod(a.shape[x] for x in red)
    if n == 0 and kind != 'sum': return
    keep = r.random() < 0.4
    shape = [1 if x in red else s for x, s in enumerate(a.shape)] if keep else [s for x, s in enumerate(a.shape) if x not in red]
    if kind == 'argmax':
      if axes is None: shape = [1] * nd if keep else []
      add('reduce', [i], [kind, axes, keep], shape, 'int32', max(a.shape), True); return
    bound = a.bound * max(n, 1) if kind == 'sum' else a.bound
    if k == 'f' and bound >= cap: return
    dt = a.dtype if kind != 'sum' else {'bool': 'int32', 'int8': 'int32', 'int16': 'int32', 'uint8': 'uint32', 'uint16': 'uint32'}.get(a.dtype, a.dtype)
    if kind == 'sum' and k == 'f' and a.dtype in ('float16', 'bfloat16'): dt = a.dtype
    add('reduce', [i], [kind, axes, keep], shape, dt, bound, a.exact and kind in ('max', 'min'))
    return
  if choice == 'matmul' and k == 'f' and nd in (1, 2) and a.shape[-1]:
    n = r.choice((1, 3, 4, 8, 17))
    j = _input(r, vals, steps, [a.shape[-1], n], a.dtype)
    bound = a.bound * 2.0 * a.shape[-1]
    if bound < cap: add('matmul', [i, j], None, list(a.shape[:-1]) + [n], a.dtype, bound, False)
    return
  if choice == 'attention' and k == 'f' and nd in (2, 3, 4) and a.numel and a.bound <= 4:
    # q (..., L, E) against new k and v inputs of S keys (k's and v's heads, axis -3, a divisor of q's where grouped);
    # its output a convex combination of v's rows: |out| <= v's bound (0 for a row the mask hides every key from)
    batch, S, ev = list(a.shape[:-2]), r.choice((1, 2, 5, 9, 16)), r.choice((1, 3, 8))
    gqa = nd == 4 and batch[-1] > 1 and r.random() < 0.4
    kb = batch[:-1] + [r.choice([d for d in range(1, batch[-1]) if batch[-1] % d == 0] or [1])] if gqa else batch
    src = [i, _input(r, vals, steps, kb + [S, a.shape[-1]], a.dtype), _input(r, vals, steps, kb + [S, ev], a.dtype)]
    mode = r.choice(('none', 'causal', 'bool', 'float'))
    if mode in ('bool', 'float'):
      scores = batch + [a.shape[-2], S]
      shape = [1 if r.random() < 0.5 else d for d in scores][r.randrange(len(scores) + 1) if r.random() < 0.3 else 0:]
      src.append(_input(r, vals, steps, shape, 'bool' if mode == 'bool' else a.dtype))
    add('attention', src, [mode == 'causal', gqa, r.choice((None, 0.5, 0.125)), r.choice((None, None, 2.0, 20.0))], batch + [a.shape[-2], ev], a.dtype, vals[src[2]].bound, False)
    return
  if choice in ('realize', 'contiguous'): add(choice, [i], None, a.shape, a.dtype, a.bound, a.exact)


HOSTILE_OPS = ('reshape', 'permute', 'expand', 'pad', 'shrink', 'flip', 'reduce')


def generate(r):
  vals, steps = [], []
  for _ in range(r.randrange(1, 3)): _input(r, vals, steps, _rand_shape(r), r.choice(DTYPES))
  for _ in range(r.randrange(1, 14)):
    if len(vals) < 40: _step(r, vals, steps)
  if r.random() < 0.15 and _hostile(r, vals, steps): return {'steps': steps, 'outs': [len(steps) - 1], 'hostile': True}
  outs = sorted({len(vals) - 1} | {r.randrange(len(vals)) for _ in range(r.randrange(0, 3))})
  return {'steps': steps, 'outs': outs}


def _hostile(r, vals, steps) -> bool:
  """A last step that moves or reduces a value with its argument lied about (fuzz.hostile.mutate_list: an entry near
  its value or -1, one entry more or less): tgc must refuse it with an error a user catches (TgcError, ValueError,
  IndexError, TypeError) or, where numpy computes it too, give numpy's result."""
  n = len(steps)
  for _ in range(20):
    _step(r, vals, steps)
    if len(steps) > n and steps[-1]['op'] in HOSTILE_OPS and steps[-1]['arg'] is not None: break
    del steps[n:], vals[n:]
  else: return False
  st = steps[-1]
  if st['op'] == 'reduce':
    if st['arg'][1] is None: return False
    st['arg'] = [st['arg'][0], mutate_list(r, st['arg'][1]), st['arg'][2]]
  else: st['arg'] = mutate_list(r, st['arg'])
  return True


def shrink(case):
  """Fewer outputs, then a step bypassed where its source has its shape and dtype, then dead steps gone."""
  steps, outs = case['steps'], case['outs']
  if len(outs) > 1:
    for o in outs: yield _dce({'steps': steps, 'outs': [o]})
  for i, st in enumerate(steps):
    for s in st.get('src', []):
      if _meta(steps, s) == _meta(steps, i) and st['op'] != 'input':
        new = [dict(x, src=[s if v == i else v for v in x['src']]) if 'src' in x else x for x in steps]
        yield _dce({'steps': new, 'outs': [s if o == i else o for o in outs]})
  devs = case.get('devices') or WORKER_INFO.replace('devices ', '').split(', ')
  if len(devs) > 1:
    for d in devs: yield dict(case, devices=[d])


def _meta(steps, i):
  """(shape, dtype) of value i, from the reference evaluated up to it."""
  try: return _numpy_eval(steps, i)
  except Exception: return None


def _dce(case):
  steps, outs = case['steps'], case['outs']
  live = set(outs)
  for i in range(len(steps) - 1, -1, -1):
    if i in live: live.update(steps[i].get('src', []))
  keep = sorted(live)
  ren = {o: n for n, o in enumerate(keep)}
  new = [dict(steps[o], src=[ren[s] for s in steps[o]['src']]) if 'src' in steps[o] else steps[o] for o in keep]
  return dict(case, steps=new, outs=[ren[o] for o in outs])


# ---------------------------------------------------------------- running (in the child)
def _input_array(shape, dtype, seed, away=False):
  import numpy as np
  rng = np.random.default_rng(seed)
  if dtype == 'bool': return rng.integers(0, 2, size=shape).astype(np.bool_)
  if dtype in SINTS: return rng.integers(-10, 11, size=shape).astype(dtype)
  if dtype in UINTS: return rng.integers(0, 21, size=shape).astype(dtype)
  x = rng.uniform(1, 2, size=shape) * rng.choice((-1, 1), size=shape) if away else rng.uniform(-2, 2, size=shape)
  return _round(x, dtype)


def _round(x, dtype):
  """x rounded to a float dtype and held as float64 (bf16: round to nearest even on the float32 bits)."""
  import numpy as np
  x = np.asarray(x, dtype=np.float64)
  if dtype == 'float16': return x.astype(np.float16).astype(np.float64)
  if dtype == 'float32': return x.astype(np.float32).astype(np.float64)
  if dtype == 'bfloat16':
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return b.view(np.float32).astype(np.float64)
  return x


def _np_dtype(dtype):
  import numpy as np
  return np.float64 if dtype in FLOATS else np.dtype(dtype)


def _numpy_ops():
  import numpy as np
  def unary(x, op, dt):
    if dt in FLOATS:
      f = {'neg': lambda v: -v, 'abs': np.abs, 'relu': lambda v: np.maximum(v, 0), 'sigmoid': lambda v: 1 / (1 + np.exp(-v)),
           'tanh': np.tanh, 'sqrtabs': lambda v: np.sqrt(np.abs(v)), 'log1pabs': lambda v: np.log(np.abs(v) + 1),
           'recip1pabs': lambda v: 1 / (np.abs(v) + 1), 'sin': np.sin, 'exp': np.exp, 'square': lambda v: v * v}[op]
      return _round(f(x), dt)
    if op == 'not': return ~x
    with np.errstate(over='ignore'):
      return {'neg': lambda v: -v, 'abs': lambda v: np.where(v < 0, -v, v).astype(v.dtype), 'relu': lambda v: np.maximum(v, 0).astype(v.dtype),
              'square': lambda v: (v * v).astype(v.dtype), 'invert': lambda v: ~v}[op](x)
  def binary(x, y, op, dt):
    with np.errstate(over='ignore'):
      f = {'add': np.add, 'sub': np.subtract, 'mul': np.multiply, 'maximum': np.maximum, 'minimum': np.minimum, 'and': np.bitwise_and,
           'or': np.bitwise_or, 'xor': np.bitwise_xor, 'div1pabs': lambda a, b: a / (np.abs(b) + 1), 'div': np.divide}[op]
      r = f(x, y)
    return _round(r, dt) if dt in FLOATS else r.astype(_np_dtype(dt))
  def scalar(x, op, c, dt):
    with np.errstate(over='ignore'):
      if dt in FLOATS:
        r = {'add': x + c, 'sub': x - c, 'mul': x * c, 'div': x / c, 'rsub': c - x}[op]
        return _round(r, dt)
      c = np.array(c, dtype=x.dtype)
      r = {'add': lambda: x + c, 'sub': lambda: x - c, 'mul': lambda: x * c, 'floordiv': lambda: x // c, 'mod': lambda: x % c,
           'and': lambda: x & c, 'or': lambda: x | c, 'xor': lambda: x ^ c, 'rsub': lambda: c - x}[op]()
      return r.astype(x.dtype)
  return unary, binary, scalar


def _numpy_eval(steps, upto=None):
  """The reference: every value as numpy (floats held as float64 rounded to their dtype at every step); values[upto] or all."""
  import numpy as np
  unary, binary, scalar = _numpy_ops()
  vals, dts = [], []
  for i, st in enumerate(steps):
    op, src, arg = st['op'], [vals[s] for s in st.get('src', [])], st.get('arg')
    sd = [dts[s] for s in st.get('src', [])]
    dt = sd[0] if sd else None
    if op == 'input': v, dt = _input_array(*arg), arg[1]
    elif op == 'unary': v = unary(src[0], arg, dt)
    elif op == 'binary': v = binary(src[0], src[1], arg, dt)
    elif op == 'scalar': v = scalar(src[0], arg[0], arg[1], dt)
    elif op == 'cast':
      x = src[0]
      if arg in FLOATS: v = _round(x.astype(np.float64), arg)
      elif arg == 'bool': v = x != 0
      else:
        v = np.trunc(x).astype(arg) if dt in FLOATS else x.astype(arg)  # (the generator casts only exact floats below 100)
      dt = arg
    elif op == 'cmp': v, dt = {'lt': np.less, 'eq': np.equal, 'ne': np.not_equal}[arg](src[0], src[1]), 'bool'
    elif op == 'where': v, dt = np.where(src[0], src[1], src[2]), sd[1]; v = v.astype(_np_dtype(dt))
    elif op == 'reshape': v = src[0].reshape(arg)
    elif op == 'permute': v = src[0].transpose(arg)
    elif op == 'expand': v = np.broadcast_to(src[0], arg)
    elif op == 'pad': v = np.pad(src[0], arg)
    elif op == 'shrink': v = src[0][tuple(slice(a, b) for a, b in arg)]
    elif op == 'flip': v = np.flip(src[0], arg)
    elif op == 'matmul': v = _round(src[0] @ src[1], dt)
    elif op == 'attention':  # (in float64; a row that sees no key: 0, as torch's math)
      causal, gqa, sc, cap = (*arg, None)[:4]  # (softcap: steps recorded before it have three)
      q, kk, vv = (x.astype(np.float64) for x in src[:3])
      if gqa: kk, vv = (np.repeat(x, q.shape[-3] // x.shape[-3], axis=-3) for x in (kk, vv))
      s = q @ np.swapaxes(kk, -1, -2) * (1 / math.sqrt(q.shape[-1]) if sc is None else sc)
      if cap: s = cap * np.tanh(s / cap)
      if causal: s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
      if len(src) > 3: s = np.where(src[3], s, -np.inf) if src[3].dtype == np.bool_ else s + src[3].astype(np.float64)
      mx = s.max(-1, keepdims=True)
      e = np.exp(s - np.where(np.isneginf(mx), 0, mx))
      ss = e.sum(-1, keepdims=True)
      v = _round((e @ vv) / np.where(ss > 0, ss, 1), dt)
    elif op in ('realize', 'contiguous'): v = src[0]
    elif op == 'reduce':
      kind, axes, keep = arg
      x = src[0]
      ax = tuple(axes) if axes is not None else None
      if kind == 'argmax':
        if axes is None: v = np.array(np.argmax(x.reshape(-1)))
        else: v = np.argmax(x, axis=axes[0])
        v = v.astype(np.int32)
        # (the one axis the Tensor call takes, axes[0], negative or not: a mutated list may hold more)
        if keep: v = v.reshape([1 if axes is None or d == axes[0] % x.ndim else s for d, s in enumerate(x.shape)])
        dt = 'int32'
      else:
        if kind == 'sum':
          dt = {'bool': 'int32', 'int8': 'int32', 'int16': 'int32', 'uint8': 'uint32', 'uint16': 'uint32'}.get(dt, dt)
          with np.errstate(over='ignore'): v = np.sum(x, axis=ax, keepdims=keep, dtype=_np_dtype(dt))
        elif kind == 'mean': v = np.mean(x, axis=ax, keepdims=keep)
        else: v = (np.max if kind == 'max' else np.min)(x, axis=ax, keepdims=keep)
        if dt in FLOATS: v = _round(v, dt)
        v = np.asarray(v).astype(_np_dtype(dt))
    elif op == 'scan':
      kind, ax = arg
      x = src[0]
      if kind == 'cummax': v = np.maximum.accumulate(x, axis=ax) if x.shape[ax] else x
      else:
        dt = {'bool': 'int32', 'int8': 'int32', 'int16': 'int32', 'uint8': 'uint32', 'uint16': 'uint32'}.get(dt, dt)
        with np.errstate(over='ignore'): v = np.cumsum(x, axis=ax, dtype=_np_dtype(dt))
      if dt in FLOATS: v = _round(v, dt)
      v = np.asarray(v).astype(_np_dtype(dt))
    else: raise ValueError(f"unknown step {op}")
    vals.append(np.asarray(v)); dts.append(dt)
    if upto == i: return vals[-1].shape, dt
  return vals, dts


def _tgc_eval(steps, outs, device):
  import numpy as np
  from tgc import Tensor
  vals = []
  for st in steps:
    op, src, arg = st['op'], [vals[s] for s in st.get('src', [])], st.get('arg')
    x = src[0] if src else None
    if op == 'input':
      v = Tensor(_input_array(*arg).astype('float32' if arg[1] == 'bfloat16' else arg[1]), dtype=arg[1], device=device)
    elif op == 'unary':
      v = {'neg': lambda: -x, 'abs': x.abs, 'relu': x.relu, 'sigmoid': x.sigmoid, 'tanh': x.tanh, 'sqrtabs': lambda: x.abs().sqrt(),
           'log1pabs': lambda: (x.abs() + 1).log(), 'recip1pabs': lambda: (x.abs() + 1).reciprocal(), 'sin': x.sin, 'exp': x.exp,
           'square': x.square, 'not': x.logical_not, 'invert': lambda: ~x}[arg]()
    elif op == 'binary':
      y = src[1]
      v = {'add': lambda: x + y, 'sub': lambda: x - y, 'mul': lambda: x * y, 'maximum': lambda: x.maximum(y), 'minimum': lambda: x.minimum(y),
           'and': lambda: x & y, 'or': lambda: x | y, 'xor': lambda: x ^ y, 'div1pabs': lambda: x / (y.abs() + 1), 'div': lambda: x / y}[arg]()
    elif op == 'scalar':
      o, c = arg
      v = {'add': lambda: x + c, 'sub': lambda: x - c, 'mul': lambda: x * c, 'div': lambda: x / c, 'rsub': lambda: c - x,
           'floordiv': lambda: x // c, 'mod': lambda: x % c, 'and': lambda: x & c, 'or': lambda: x | c, 'xor': lambda: x ^ c}[o]()
    elif op == 'cast': v = x.cast(arg)
    elif op == 'cmp': v = {'lt': lambda: x < src[1], 'eq': lambda: x == src[1], 'ne': lambda: x != src[1]}[arg]()
    elif op == 'where': v = x.where(src[1], src[2])
    elif op == 'reshape': v = x.reshape(tuple(arg))
    elif op == 'permute': v = x.permute(tuple(arg))
    elif op == 'expand': v = x.expand(tuple(arg))
    elif op == 'pad': v = x.pad(tuple(tuple(p) for p in arg))
    elif op == 'shrink': v = x.shrink(tuple(tuple(b) for b in arg))
    elif op == 'flip': v = x.flip(tuple(arg))
    elif op == 'matmul': v = x @ src[1]
    elif op == 'attention':
      v = x.scaled_dot_product_attention(src[1], src[2], attn_mask=src[3] if len(src) > 3 else None, is_causal=arg[0], enable_gqa=arg[1], scale=arg[2],
                                         softcap=arg[3] if len(arg) > 3 else None)
    elif op == 'realize': v = x.realize()
    elif op == 'contiguous': v = x.contiguous()
    elif op == 'reduce':
      kind, axes, keep = arg
      ax = tuple(axes) if axes is not None else None
      if kind == 'argmax': v = x.argmax(None if axes is None else axes[0], keepdim=keep)
      else: v = getattr(x, kind)(ax, keepdim=keep)
    elif op == 'scan': v = x.cumsum(arg[1]) if arg[0] == 'cumsum' else x.cummax(arg[1])[0]
    vals.append(v)
  res = [vals[o] for o in outs]
  Tensor.realize(*res) if len(res) > 1 else res[0].realize()
  return [(t.numpy(), t.dtype.api if hasattr(t.dtype, 'api') else str(t.dtype)) for t in res]


def _compare(got, want, dt, bound, rel):
  """None, or how got differs from numpy's want: floats within rel (the coarsest precision on the way) of bound."""
  import numpy as np
  got = np.asarray(got)
  if got.shape != want.shape: return f"shape {got.shape}, numpy's {want.shape}"
  if dt in FLOATS:
    g = got.astype(np.float64)
    with np.errstate(invalid='ignore'):
      bad = ~((g == want) | (np.abs(g - want) <= rel * max(bound, 1.0) + rel * np.abs(want)) | (np.isnan(g) & np.isnan(want)))
  else: bad = got != want.astype(got.dtype) if got.dtype == want.dtype else np.ones(got.shape, bool)
  if not bad.any(): return None
  idx = tuple(int(i) for i in np.argwhere(bad)[0])
  return f"{int(bad.sum())} of {bad.size} elements differ (dtype {got.dtype} vs {want.dtype}); first at {list(idx)}: {got[idx]!r}, numpy {want[idx]!r}"


def setup() -> str:
  import numpy as np
  from tgc import Tensor
  for d in ('CPU', 'C', 'INTERP', 'OPENCL', 'CUDA'):
    try:
      if (Tensor(np.arange(3, dtype=np.float32), device=d) + 1).numpy().tolist() == [1, 2, 3]: DEVICES.append(d)
    except Exception: pass
  return f"devices {', '.join(DEVICES)}"


def run(case):
  import numpy as np
  from tgc.errors import TgcError
  steps, outs = case['steps'], case['outs']
  hostile = case.get('hostile', False)
  try: ref, dts = _numpy_eval(steps)
  except Exception:
    if not hostile: raise
    ref = None  # numpy refuses the lie: tgc must refuse it too, or compute something numpy cannot be asked about
  if ref is not None: bounds, rels = _value_bounds(steps, ref, dts)
  outcome = 'ok'
  for d in case.get('devices', DEVICES):
    try: got = _tgc_eval(steps, outs, d)
    except (TgcError, ValueError, IndexError, TypeError) as e:
      if hostile: outcome = 'rejected'; continue  # (a clean refusal of a lie; any other exception is a finding)
      return 'error', f"{d}: {type(e).__name__}: {e}"  # the program is valid: tgc refusing it is a finding too
    except Exception as e:
      import traceback
      return f"exception:{type(e).__name__}", f"{d}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
    if ref is None: continue
    for o, (g, gdt) in zip(outs, got):
      if gdt != dts[o]: return 'mismatch', f"{d}: value {o} has dtype {gdt}, numpy's rules give {dts[o]}"
      err = _compare(g, ref[o], dts[o], bounds[o], rels[o])
      if err: return 'mismatch', f"{d}: value {o} (step {steps[o]['op']} {steps[o].get('arg')}): {err}"
  return outcome, None


def _value_bounds(steps, ref, dts):
  """Per value, for the float tolerance: a bound on |value| (the largest magnitude on its way, from the reference:
  what the generator kept below its caps), and the coarsest relative precision on its way (an f32 result cast to
  f64 is no more precise than f32)."""
  import numpy as np
  bounds, rels = [], []
  for i, st in enumerate(steps):
    m = float(np.max(np.abs(ref[i]))) if ref[i].size and dts[i] in FLOATS else 0.0
    src = [s for s in st.get('src', []) if dts[s] in FLOATS]
    bounds.append(max([m] + [bounds[s] for s in src]))
    rels.append(max([TOL.get(dts[i], 0.0)] + [rels[s] for s in src]))
  return bounds, rels


def reproducer(case):
  lines = ["# A Tensor program that tgc runs differently from numpy (found by fuzz/tensor.py).",
           "# Run from the repository root: python repro.py", "#"]
  for i, st in enumerate(case['steps']):
    lines.append(f"#   v{i} = {st['op']}({', '.join('v%d' % s for s in st.get('src', []))}{', ' if st.get('src') and st.get('arg') is not None else ''}{'' if st.get('arg') is None else json.dumps(st['arg'])})")
  lines.append(f"#   outputs: {', '.join('v%d' % o for o in case['outs'])}")
  lines += ["import json, sys; sys.path.insert(0, '.')", "from fuzz import tensor as fz",
            f"case = json.loads({json.dumps(case)!r})",  # (JSON's true and null are no Python)
            "print(fz.setup()); print(fz.run(case))", ""]
  return 'py', '\n'.join(lines)


if __name__ == '__main__':
  from fuzz.harness import main
  sys.exit(main(sys.modules[__name__]))
