"""Round trip is a law (ir.md): for random valid tensor-dialect programs, print(parse(print(parse(x)))) == print(parse(x)),
in the custom and in the generic form, and the two forms parse to the same module."""
import math

from hypothesis import HealthCheck, given, settings, strategies as st

import tgc.ir as ir

INTS = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64']
FLOATS = ['f16', 'bf16', 'f32', 'f64']
BITS = {'i1': 1, 'i8': 8, 'i16': 16, 'i32': 32, 'i64': 64, 'u8': 8, 'u16': 16, 'u32': 32, 'u64': 64, 'f16': 16, 'bf16': 16, 'f32': 32, 'f64': 64}
RANGES = {'i1': (0, 1), 'i8': (-128, 127), 'i16': (-2**15, 2**15 - 1), 'i32': (-2**31, 2**31 - 1), 'i64': (-2**63, 2**63 - 1),
          'u8': (0, 255), 'u16': (0, 2**16 - 1), 'u32': (0, 2**32 - 1), 'u64': (0, 2**64 - 1)}
UNARY_F = ['neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip', 'trunc']
UNARY_I = ['neg', 'not', 'trunc']
BINARY_F = ['add', 'sub', 'mul', 'fdiv', 'mod', 'max', 'min']
BINARY_I = ['add', 'sub', 'mul', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr']


def ty(shape, dt): return 'tensor<' + ''.join(f'{s}x' for s in shape) + dt + '>'


def scalar(draw, dt):
  if dt in RANGES:
    lo, hi = RANGES[dt]
    return str(draw(st.integers(lo, hi)))
  kind = draw(st.sampled_from(['float', 'float', 'int', 'special', 'hex']))
  if kind == 'int': return str(draw(st.integers(-1000, 1000)))
  if kind == 'special': return draw(st.sampled_from(['inf', '-inf', 'nan']))
  if kind == 'hex': return hex(draw(st.integers(0, 2 ** BITS[dt] - 1)))
  x = draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
  r = repr(float(x))
  return r if ('.' in r or 'e' in r) else r + '.0'


def dense(draw, shape, dt):
  if not shape: return scalar(draw, dt)
  return '[' + ', '.join(dense(draw, shape[1:], dt) for _ in range(shape[0])) + ']'


@st.composite
def programs(draw):
  shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
  dtypes = st.sampled_from(INTS + FLOATS + ['i1'])
  nargs = draw(st.integers(1, 3))
  args = [(f'%arg{i}', draw(shapes), draw(dtypes)) for i in range(nargs)]
  vals = list(args)                 # (name, shape, dtype) of every value so far
  lines, n = [], 0

  def new(shape, dt, text):
    nonlocal n
    name = draw(st.sampled_from([f'%{n}', f'%v{n}', f'%t_{n}']))
    lines.append(f'  {name} = {text}')
    vals.append((name, shape, dt)); n += 1

  for _ in range(draw(st.integers(1, 14))):
    x, shape, dt = draw(st.sampled_from(vals))
    t = ty(shape, dt)
    fam = draw(st.sampled_from(['const', 'dense', 'empty', 'unary', 'binary', 'compare', 'where', 'mulacc', 'cast', 'bitcast', 'reduce',
                                'reshape', 'expand', 'permute', 'pad', 'shrink', 'flip', 'contiguous', 'matmul', 'generic']))
    if fam == 'const':
      s, d = draw(shapes), draw(dtypes)
      new(s, d, f'tensor.const {scalar(draw, d)} : {ty(s, d)}')
    elif fam == 'dense':
      s, d = draw(shapes), draw(dtypes)
      if s: new(s, d, f'tensor.const {dense(draw, s, d)} : {ty(s, d)}')
    elif fam == 'empty':
      new(shape, dt, f'tensor.empty : {t}')
    elif fam == 'unary':
      ops = UNARY_F if dt in FLOATS else UNARY_I if dt in INTS else ['not']
      new(shape, dt, f'tensor.{draw(st.sampled_from(ops))} {x} : {t}')
    elif fam == 'binary':
      ops = BINARY_F if dt in FLOATS else BINARY_I if dt in INTS else ['and', 'or', 'xor', 'add', 'mul', 'max', 'min']
      y = draw(st.sampled_from([v for v in vals if v[1:] == (shape, dt)]))[0]
      new(shape, dt, f'tensor.{draw(st.sampled_from(ops))} {x}, {y} : {t}')
    elif fam == 'compare':
      y = draw(st.sampled_from([v for v in vals if v[1:] == (shape, dt)]))[0]
      new(shape, 'i1', f'tensor.{draw(st.sampled_from(["cmplt", "cmpne", "cmpeq"]))} {x}, {y} : {t} -> {ty(shape, "i1")}')
    elif fam == 'where':
      conds = [v for v in vals if v[1:] == (shape, 'i1')]
      if conds:
        c = draw(st.sampled_from(conds))[0]
        y = draw(st.sampled_from([v for v in vals if v[1:] == (shape, dt)]))[0]
        new(shape, dt, f'tensor.where {c}, {x}, {y} : {t}')
    elif fam == 'mulacc' and dt != 'i1':
      new(shape, dt, f'tensor.mulacc {x}, {x}, {x} : {t}')
    elif fam == 'cast':
      d = draw(dtypes)
      new(shape, d, f'tensor.cast {x} : {t} -> {ty(shape, d)}')
    elif fam == 'bitcast' and dt != 'i1':
      d = draw(st.sampled_from([d for d in INTS + FLOATS if BITS[d] == BITS[dt]]))
      new(shape, d, f'tensor.bitcast {x} : {t} -> {ty(shape, d)}')
    elif fam == 'reduce' and shape:
      axes = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
      out = tuple(1 if i in axes else s for i, s in enumerate(shape))
      new(out, dt, f'tensor.reduce {draw(st.sampled_from(["add", "max", "mul"]))} {x} {list(axes)} : {t} -> {ty(out, dt)}')
    elif fam == 'reshape':
      numel = math.prod(shape)
      out = draw(st.sampled_from([(numel,), (1, numel), (numel, 1)] + ([()] if numel == 1 else [])))
      new(out, dt, f'tensor.reshape {x} : {t} -> {ty(out, dt)}')
    elif fam == 'expand' and 1 in shape:
      out = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)
      new(out, dt, f'tensor.expand {x} : {t} -> {ty(out, dt)}')
    elif fam == 'permute':
      order = draw(st.permutations(list(range(len(shape)))))
      out = tuple(shape[i] for i in order)
      new(out, dt, f'tensor.permute {x} {list(order)} : {t} -> {ty(out, dt)}')
    elif fam == 'pad':
      pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape]
      out = tuple(s + a + b for s, (a, b) in zip(shape, pads))
      new(out, dt, f'tensor.pad {x} [' + ', '.join(f'({a}, {b})' for a, b in pads) + f'] : {t} -> {ty(out, dt)}')
    elif fam == 'shrink':
      bounds = []
      for s in shape:
        lo = draw(st.integers(0, s)); bounds.append((lo, draw(st.integers(lo, s))))
      out = tuple(b - a for a, b in bounds)
      new(out, dt, f'tensor.shrink {x} [' + ', '.join(f'({a}, {b})' for a, b in bounds) + f'] : {t} -> {ty(out, dt)}')
    elif fam == 'flip':
      axes = sorted(draw(st.sets(st.integers(0, max(len(shape) - 1, 0)), max_size=len(shape)))) if shape else []
      new(shape, dt, f'tensor.flip {x} {list(axes)} : {t}')
    elif fam == 'contiguous':
      new(shape, dt, f'tensor.contiguous {x} : {t}')
    elif fam == 'matmul' and len(shape) == 2:
      k = draw(st.integers(1, 4))
      a, b = ty(shape, dt), ty((shape[1], k), dt)
      rhs = [v for v in vals if v[1:] == ((shape[1], k), dt)]
      if rhs: new((shape[0], k), dt, f'tensor.matmul {x}, {draw(st.sampled_from(rhs))[0]} : {a}, {b} -> {ty((shape[0], k), dt)}')
    elif fam == 'generic' and dt in FLOATS:
      new(shape, dt, f'"tensor.add"({x}, {x}) : ({t}, {t}) -> {t}')
  rets = draw(st.lists(st.sampled_from(vals), max_size=3))
  sig = ', '.join(f'{a}: {ty(s, d)}' for a, s, d in args)
  res = '' if not rets else ' -> ' + (ty(*rets[0][1:]) if len(rets) == 1 else '(' + ', '.join(ty(*r[1:]) for r in rets) + ')')
  ret = 'func.return' + ('' if not rets else ' ' + ', '.join(r[0] for r in rets) + ' : ' + ', '.join(ty(*r[1:]) for r in rets))
  wrap = draw(st.booleans())
  body = f'func.func @f({sig}){res} {{\n' + '\n'.join(lines) + f'\n  {ret}\n}}\n'
  return f'module {{\n{body}}}\n' if wrap else body


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs())
def test_round_trip_custom_and_generic(text):
  once = ir.parse(text).print()
  assert ir.parse(once).print() == once                          # custom form: a fixed point
  gen = ir.parse(text).print(generic=True)
  assert ir.parse(gen).print(generic=True) == gen                # generic form: a fixed point
  assert ir.parse(gen).print() == once                           # both forms are the same module
  assert ir.parse(once).print(generic=True) == gen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_round_trip_survives_clone(text):
  m = ir.parse(text)
  assert m.clone().print() == m.print()
  assert m.clone().print(generic=True) == m.print(generic=True)
