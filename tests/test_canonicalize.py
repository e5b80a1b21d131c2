"""canonicalize's constant folding against two oracles: tgc.ir.alu (the semantics every level shares) and an independent
reference written here (Python integers for the integer types, numpy's own dtype arithmetic for the float types), on
random values per dtype, through dense tensor constants and through scalar uop constants."""
import math
import random
import zlib

import numpy as np
import pytest

import tgc.ir as ir
from tgc.ir import alu, dtypes as D
from tgc.passes import PassManager

INTS = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64']
FLOATS = ['f16', 'bf16', 'f32', 'f64']
N = 8


# ---------------------------------------------------------------- helpers

def rand_values(dt, rng, n=N, role='any'):
  d = D.BY_NAME[dt]
  if d.is_bool: return [int(x) for x in rng.integers(0, 2, n)]
  if d.is_int:
    lo, hi = D.min_max(d)
    if role == 'shift': return [int(x) for x in rng.integers(0, d.bits + 3, n)]
    edge = [lo, hi, 0, 1, -1 if lo < 0 else 2]
    r = random.Random(int(rng.integers(0, 2**31)))
    vals = [r.randint(lo, hi) for _ in range(n)]
    for i in range(min(3, n)): vals[rng.integers(0, n)] = edge[rng.integers(0, len(edge))]
    return vals
  x = rng.standard_normal(n) * rng.choice([1, 10, 1000], n)
  if role == 'positive': x = np.abs(x) + 0.5
  vals = [float(v) for v in D.round_to(x, d)]  # values the dtype holds exactly
  if role == 'any' and n > 2: vals[0], vals[1] = 0.0, -0.0
  return vals

def lit(v, dt):
  if D.BY_NAME[dt].is_float:
    if math.isnan(v): return 'nan'
    if math.isinf(v): return 'inf' if v > 0 else '-inf'
    return repr(float(v))
  return str(int(v))

def fold_tensor(op, dt, args, result_dt=None, text_op=None):
  """Fold `op` over dense constants; returns the folded constant as a list."""
  t = f'tensor<{N}x{dt}>'
  rt = f'tensor<{N}x{result_dt or dt}>'
  lines = [f'  %c{i} = tensor.const [{", ".join(lit(v, a_dt) for v in vals)}] : tensor<{N}x{a_dt}>' for i, (vals, a_dt) in enumerate(args)]
  names = ', '.join(f'%c{i}' for i in range(len(args)))
  types = text_op or (f': {t} -> {rt}' if op in alu.COMPARE or op in ('cast', 'bitcast') else f': {rt}')
  src = (f'func.func @f() -> {rt} {{\n' + '\n'.join(lines) + f'\n  %r = tensor.{op} {names} {types}\n  func.return %r : {rt}\n}}\n')
  m = ir.parse(src)
  PassManager.parse('canonicalize').run(m)
  body = m.ops[0].body.ops
  assert [o.name for o in body] == ['tensor.const', 'func.return'], f'{op} on {dt} was not folded:\n{m.print()}'
  v = body[0].attrs['value']
  return list(v) if isinstance(v, tuple) else [v] * N

def as_np(vals, dt):
  d = D.BY_NAME[dt]
  if d.is_bool: return np.array(vals, dtype=bool)
  if d.is_int: return np.array([int(v) for v in vals], dtype=object).astype(np.int64 if d.is_signed else np.uint64).astype(d.np)
  return D.round_to(np.array(vals, dtype=np.float64), d).astype(D.compute_np(d))

def same(got, want, dt):
  got, want = as_np(got, dt), np.asarray(want)
  if D.BY_NAME[dt].is_float:
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want.astype(got.dtype)[~np.isnan(got)]))
  np.testing.assert_array_equal(got, want.astype(got.dtype))


# ---------------------------------------------------------------- an independent integer reference

def wrap(x, dt):
  d = D.BY_NAME[dt]
  if d.is_bool: return int(bool(x))
  x &= (1 << d.bits) - 1
  if d.is_signed and x >= 1 << (d.bits - 1): x -= 1 << d.bits
  return x

def ref_int(op, dt, a, b=None, c=None):
  bits = D.BY_NAME[dt].bits
  if op == 'add': return wrap(a + b, dt)
  if op == 'sub': return wrap(a - b, dt)
  if op == 'mul': return wrap(a * b, dt)
  if op == 'neg': return wrap(-a, dt)
  if op == 'not': return wrap(~a, dt)
  if op == 'and': return a & b
  if op == 'or': return a | b
  if op == 'xor': return a ^ b
  if op == 'max': return max(a, b)
  if op == 'min': return min(a, b)
  if op == 'trunc': return a
  if op == 'idiv':
    if b == 0: return 0
    q = abs(a) // abs(b)
    return wrap(q if (a < 0) == (b < 0) else -q, dt)
  if op == 'mod':
    if b == 0: return 0
    q = abs(a) // abs(b)
    q = q if (a < 0) == (b < 0) else -q
    return wrap(a - q * b, dt)
  if op == 'shl': return 0 if b >= bits else wrap(a << b, dt)
  if op == 'shr': return 0 if b >= bits else a >> b  # Python's >> is arithmetic on negatives, logical on the non-negative
  if op == 'mulacc': return wrap(a * b + c, dt)
  if op == 'cmplt': return int(a < b)
  if op == 'cmpne': return int(a != b)
  if op == 'cmpeq': return int(a == b)
  raise KeyError(op)


INT_BINARY = ['add', 'sub', 'mul', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr']

@pytest.mark.parametrize('dt', INTS)
@pytest.mark.parametrize('op', INT_BINARY)
def test_int_binary_folds_like_c(op, dt):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt)).encode()))
  a = rand_values(dt, rng)
  b = rand_values(dt, rng, role='shift' if op in ('shl', 'shr') else 'any')
  if op in ('idiv', 'mod'): b[0] = 0  # division by zero folds to 0
  got = fold_tensor(op, dt, [(a, dt), (b, dt)])
  assert [int(g) for g in got] == [ref_int(op, dt, x, y) for x, y in zip(a, b)]
  same(got, alu.exec_alu(op, D.BY_NAME[dt], as_np(a, dt), as_np(b, dt)), dt)


@pytest.mark.parametrize('dt', INTS)
@pytest.mark.parametrize('op', ['neg', 'not', 'trunc'])
def test_int_unary_folds(op, dt):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt)).encode()))
  a = rand_values(dt, rng)
  got = fold_tensor(op, dt, [(a, dt)])
  assert [int(g) for g in got] == [ref_int(op, dt, x) for x in a]


@pytest.mark.parametrize('dt', INTS + FLOATS)
@pytest.mark.parametrize('op', ['cmplt', 'cmpne', 'cmpeq'])
def test_compare_folds(op, dt):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt)).encode()))
  a = rand_values(dt, rng)
  b = list(a[:N // 2]) + rand_values(dt, rng, N - N // 2)  # some equal pairs
  got = fold_tensor(op, dt, [(a, dt), (b, dt)], result_dt='i1')
  if dt in INTS: assert [int(g) for g in got] == [ref_int(op, dt, x, y) for x, y in zip(a, b)]
  f = {'cmplt': np.less, 'cmpne': np.not_equal, 'cmpeq': np.equal}[op]
  assert [bool(g) for g in got] == list(f(as_np(a, dt), as_np(b, dt)))


@pytest.mark.parametrize('dt', INTS)
def test_int_mulacc_folds(dt):
  rng = np.random.default_rng(7)
  a, b, c = (rand_values(dt, rng) for _ in range(3))
  got = fold_tensor('mulacc', dt, [(a, dt), (b, dt), (c, dt)])
  assert [int(g) for g in got] == [ref_int('mulacc', dt, x, y, z) for x, y, z in zip(a, b, c)]


# ---------------------------------------------------------------- floats: numpy's dtype arithmetic, rounding included

NP_FLOAT = {'f16': np.float16, 'f32': np.float32, 'f64': np.float64}
FLOAT_BINARY = {'add': np.add, 'sub': np.subtract, 'mul': np.multiply, 'fdiv': np.divide, 'max': np.maximum, 'min': np.minimum,
                'mod': np.fmod}

@pytest.mark.parametrize('dt', ['f16', 'f32', 'f64'])
@pytest.mark.parametrize('op', sorted(FLOAT_BINARY))
def test_float_binary_rounds_like_numpy(op, dt):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt)).encode()))
  a, b = rand_values(dt, rng), rand_values(dt, rng)
  got = fold_tensor(op, dt, [(a, dt), (b, dt)])
  with np.errstate(all='ignore'):
    want = FLOAT_BINARY[op](np.array(a, dtype=NP_FLOAT[dt]), np.array(b, dtype=NP_FLOAT[dt]))
  same(got, want, dt)


@pytest.mark.parametrize('dt', FLOATS)
@pytest.mark.parametrize('op', ['neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip', 'trunc'])
def test_float_unary_matches_the_oracle(op, dt):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt)).encode()))
  a = rand_values(dt, rng, role='positive' if op in ('log2', 'sqrt') else 'any')
  if op == 'exp2': a = [x / 1000 for x in a]
  a = [float(v) for v in D.round_to(np.array(a), D.BY_NAME[dt])]
  got = fold_tensor(op, dt, [(a, dt)])
  d = D.BY_NAME[dt]
  same(got, alu.exec_alu(op, d, as_np(a, dt)), dt)
  if dt in NP_FLOAT:  # and numpy computing in the dtype itself agrees to within one rounding
    f = {'neg': np.negative, 'exp2': np.exp2, 'log2': np.log2, 'sin': np.sin, 'sqrt': np.sqrt, 'recip': np.reciprocal, 'trunc': np.trunc}[op]
    with np.errstate(all='ignore'):
      want = f(np.array(a, dtype=np.float64)).astype(NP_FLOAT[dt])
    np.testing.assert_allclose(as_np(got, dt).astype(np.float64), want.astype(np.float64), rtol=2 * np.finfo(NP_FLOAT[dt]).eps, atol=0)


def test_bf16_folds_round_to_nearest_even():
  # 1 + 2^-8 is a tie between 1 and 1 + 2^-7 in bf16: ties go to even (1.0); 1 + 3 * 2^-8 goes up to 1 + 2^-6
  got = fold_tensor('add', 'bf16', [([1.0] * N, 'bf16'), ([2.0 ** -8] * N, 'bf16')])
  assert got == [1.0] * N
  got = fold_tensor('add', 'bf16', [([1.0] * N, 'bf16'), ([3 * 2.0 ** -8] * N, 'bf16')])
  assert got == [1.0 + 2.0 ** -6] * N


def test_f16_overflow_is_inf_and_f32_keeps_its_rounding():
  assert fold_tensor('add', 'f16', [([60000.0] * N, 'f16'), ([60000.0] * N, 'f16')]) == [math.inf] * N
  assert fold_tensor('add', 'f32', [([0.1] * N, 'f32'), ([0.2] * N, 'f32')]) == [float(np.float32(0.1) + np.float32(0.2))] * N
  assert fold_tensor('add', 'f64', [([0.1] * N, 'f64'), ([0.2] * N, 'f64')]) == [0.1 + 0.2] * N


# ---------------------------------------------------------------- casts

@pytest.mark.parametrize('src,dst', [('f32', 'i32'), ('f32', 'u8'), ('i32', 'f16'), ('i64', 'f32'), ('i32', 'u8'), ('u8', 'i8'),
                                     ('f64', 'f16'), ('f32', 'bf16'), ('i32', 'i1'), ('f32', 'i1'), ('u64', 'f64')])
def test_cast_folds_like_astype(src, dst):
  rng = np.random.default_rng(zlib.crc32(repr((src, dst)).encode()))
  a = rand_values(src, rng)
  if D.BY_NAME[src].is_float and D.BY_NAME[dst].is_int:
    lo, hi = D.min_max(D.BY_NAME[dst])
    a = [float(min(max(v, lo), hi)) for v in a]  # in range: out-of-range float->int is undefined in C
  got = fold_tensor('cast', src, [(a, src)], result_dt=dst)
  same(got, alu.exec_cast(as_np(a, src), D.BY_NAME[src], D.BY_NAME[dst]), dst)
  if dst != 'bf16':
    want = np.trunc(np.array(a, dtype=np.float64)) if D.BY_NAME[src].is_float and D.BY_NAME[dst].is_int else as_np(a, src)
    with np.errstate(all='ignore'):
      same(got, np.asarray(want).astype(D.BY_NAME[dst].np), dst)


@pytest.mark.parametrize('src,dst', [('f32', 'i32'), ('i32', 'f32'), ('f16', 'u16'), ('u16', 'bf16'), ('f64', 'i64'), ('u32', 'f32')])
def test_bitcast_folds_to_the_same_bits(src, dst):
  rng = np.random.default_rng(zlib.crc32(repr((src, dst)).encode()))
  a = [v for v in rand_values(src, rng)]
  if dst in ('f32', 'bf16'):  # keep the bit patterns away from NaNs, whose payload a float attribute cannot keep
    a = [v & 0x3fffffff if src == 'u32' else v & 0x3fff if src == 'u16' else v for v in a]
  got = fold_tensor('bitcast', src, [(a, src)], result_dt=dst)
  if dst == 'bf16': want = D.bf16_bits_to_f32(as_np(a, src))
  else: want = as_np(a, src).view(D.BY_NAME[dst].np)
  same(got, want, dst)


# ---------------------------------------------------------------- scalars, through the uop dialect

@pytest.mark.parametrize('dt,op', [('i32', 'add'), ('u8', 'mul'), ('i8', 'idiv'), ('i16', 'mod'), ('u32', 'shr'), ('i64', 'shl'),
                                   ('f32', 'fdiv'), ('f16', 'sub'), ('bf16', 'mul'), ('f64', 'max')])
def test_scalar_uop_folds(dt, op):
  rng = np.random.default_rng(zlib.crc32(repr((op, dt, 'uop')).encode()))
  for _ in range(5):
    a = rand_values(dt, rng, 1)[0]
    b = rand_values(dt, rng, 1, role='shift' if op in ('shl', 'shr') else 'any')[0]
    src = (f'uop.func @u() {{\n  %g = uop.define_global 0 : !uop.ptr<{dt}>\n  %i = uop.const 0 : i32\n'
           f'  %a = uop.const {lit(a, dt)} : {dt}\n  %b = uop.const {lit(b, dt)} : {dt}\n  %r = uop.{op} %a, %b : {dt}\n'
           f'  uop.store %g[%i], %r : {dt}\n}}\n')
    m = ir.parse(src)
    PassManager.parse('canonicalize').run(m)
    store = m.ops[0].body.ops[-1]
    c = store.value.op
    assert c.name == 'uop.const', m.print()
    want = alu.exec_alu(op, D.BY_NAME[dt], as_np([a], dt), as_np([b], dt))
    same([c.attrs['value']], want, dt)
    if dt in INTS: assert int(c.attrs['value']) == ref_int(op, dt, a, b)
    # the folded program prints and parses back
    assert ir.parse(m.print()).print() == m.print()


# ---------------------------------------------------------------- identities and what must not fold

def canon(text):
  m = ir.parse(text)
  PassManager.parse('canonicalize').run(m)
  return m.print()

@pytest.mark.parametrize('dt', ['f16', 'f32', 'bf16', 'f64'])
def test_float_times_zero_is_not_folded(dt):
  out = canon(f'func.func @f(%x: tensor<4x{dt}>) -> tensor<4x{dt}> {{\n  %z = tensor.const 0.0 : tensor<4x{dt}>\n'
              f'  %0 = tensor.mul %x, %z : tensor<4x{dt}>\n  func.return %0 : tensor<4x{dt}>\n}}\n')
  assert 'tensor.mul %x, %z' in out  # NaN * 0 and inf * 0 are NaN, -x * 0 is -0.0

@pytest.mark.parametrize('dt', INTS)
def test_int_times_zero_is_zero(dt):
  out = canon(f'func.func @f(%x: tensor<4x{dt}>) -> tensor<4x{dt}> {{\n  %z = tensor.const 0 : tensor<4x{dt}>\n'
              f'  %0 = tensor.mul %z, %x : tensor<4x{dt}>\n  func.return %0 : tensor<4x{dt}>\n}}\n')
  assert 'tensor.mul' not in out and f'tensor.const 0 : tensor<4x{dt}>' in out

def test_hex_float_constants_fold_by_their_bits():
  out = canon('func.func @f() -> tensor<2xf32> {\n  %a = tensor.const 0x3f800000 : tensor<2xf32>\n'
              '  %b = tensor.const 0x40000000 : tensor<2xf32>\n  %0 = tensor.add %a, %b : tensor<2xf32>\n  func.return %0 : tensor<2xf32>\n}\n')
  assert 'tensor.const 3.0 : tensor<2xf32>' in out

def test_bitcast_of_a_hex_scalar_folds():
  out = canon('func.func @f() -> tensor<i32> {\n  %a = tensor.const 0x3f800000 : tensor<f32>\n'
              '  %0 = tensor.bitcast %a : tensor<f32> -> tensor<i32>\n  func.return %0 : tensor<i32>\n}\n')
  assert 'tensor.const 1065353216 : tensor<i32>' in out

def test_large_dense_constants_are_not_expanded():
  # a splat stays a splat, whatever its size
  out = canon('func.func @f() -> tensor<1000x1000xf32> {\n  %a = tensor.const 1.5 : tensor<1000x1000xf32>\n'
              '  %0 = tensor.add %a, %a : tensor<1000x1000xf32>\n  func.return %0 : tensor<1000x1000xf32>\n}\n')
  assert 'tensor.const 3.0 : tensor<1000x1000xf32>' in out
