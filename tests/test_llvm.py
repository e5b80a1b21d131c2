"""The LLVM emitter and the CPU runtime, checked against numpy and tgc.ir.alu (and the interpreter)."""
import os, sys
import unittest.mock as um
import numpy as np
import pytest
import llvmlite.binding as llvm
import tgc
import tgc.ir as I
from tgc.ir import alu, dtypes as D
from tgc.emit import render
from tgc.emit.llvm import render_llvm, render_llvm_module
from tgc.runtime import get_device, Device
from tgc.runtime import cpu

DEVICES = ['CPU', 'INTERP']
F8 = ['f8e4m3', 'f8e5m2', 'f8e4m3fnuz', 'f8e5m2fnuz']
SUB = ['i4', 'u4', 'i2', 'u2']  # sub-byte ints, a byte each
ALL = ['i1', 'i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'f16', 'bf16', 'f32', 'f64'] + F8 + SUB
INTS = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64'] + SUB
FLOATS = ['f16', 'bf16', 'f32', 'f64'] + F8


def fn_of(text):
  return I.parse(text).functions('uop.func')[0]

def run(text, bufs, device='CPU'):
  get_device(device).compile(fn_of(text))(*bufs)
  return bufs[0]

def verifies(text):
  llvm.parse_assembly(render_llvm(fn_of(text))).verify()

def to_compute(x, dt):
  """Stored numpy values -> the compute values exec_alu takes."""
  return D.from_storage(x, dt)

def to_store(x, dt):
  return D.to_storage(x, dt)

def sample(dt, n, rng):
  if dt.is_bool: return rng.integers(0, 2, n).astype(bool)
  if dt.is_int:
    lo, hi = D.min_max(dt)
    edge = [lo, hi, 0, 1, -1 if lo < 0 else 2, 7, dt.bits, dt.bits - 1, dt.bits + 1]
    r = rng.integers(lo, hi, n, dtype=dt.np, endpoint=True)
    r[:len(edge)] = np.array(edge, dtype=object).astype(np.int64).astype(dt.np) if lo < 0 else np.array(edge, dtype=np.uint64).astype(dt.np)
    return D.to_storage(r, dt)  # (the edges wrapped into a sub-byte int)
  x = (rng.standard_normal(n) * 10).astype(np.float32)
  x[:8] = [0.0, -0.0, 1.0, -1.5, 3.0, 2.5, 1e-3, 100.0]
  return to_store(D.round_to(x, dt), dt) if dt.fmt else x.astype(dt.np)

def binary_kernel(op, dt, n, out=None):
  out = out or ('i1' if op in alu.COMPARE else dt)
  rhs = f": {dt} -> i1" if op in alu.COMPARE else f": {dt}"
  return f"""
uop.func @E_{n}() attributes {{global_size = [{n}, 1, 1]}} {{
  %0 = uop.define_global 0 : !uop.ptr<{out}>
  %1 = uop.define_global 1 : !uop.ptr<{dt}>
  %2 = uop.define_global 2 : !uop.ptr<{dt}>
  %g = uop.special gidx0 {n} : i32
  %a = uop.load %1[%g] : {dt}
  %b = uop.load %2[%g] : {dt}
  %r = uop.{op} %a, %b {rhs}
  uop.store %0[%g], %r : {out}
}}"""

def unary_kernel(op, dt, n, dst=None):
  if op in ('cast', 'bitcast'): body = f"%r = uop.{op} %a : {dt} -> {dst}"
  else: body, dst = f"%r = uop.{op} %a : {dt}", dt
  return f"""
uop.func @E_{n}() attributes {{global_size = [{n}]}} {{
  %0 = uop.define_global 0 : !uop.ptr<{dst}>
  %1 = uop.define_global 1 : !uop.ptr<{dt}>
  %g = uop.special gidx0 {n} : i32
  %a = uop.load %1[%g] : {dt}
  {body}
  uop.store %0[%g], %r : {dst}
}}"""

R_2 = """
uop.func @r_2() attributes {global_size = [1, 1, 1], local_size = [1, 1, 1]} {
  %0 = uop.define_global 0 : !uop.ptr<i32>
  %1 = uop.define_global 1 : !uop.ptr<i32>
  %2 = uop.define_global 2 : !uop.ptr<i32>
  %3 = uop.const 0 : i32
  %4 = uop.const 2 : i32
  %acc0 = uop.define_acc %3 (%ridx0) : i32
  %ridx0 = uop.range %3, %4 : i32
  %val0 = uop.load %1[%ridx0] : i32
  %val1 = uop.load %2[%ridx0] : i32
  %alu0 = uop.mul %val0, %val1 : i32
  %alu1 = uop.add %alu0, %acc0 : i32
  %5 = uop.phi %acc0, %alu1 : i32
  uop.endrange %ridx0
  uop.store %0[%3], %5 : i32
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_dot_r_2(dev):
  out = run(R_2, [np.zeros(1, np.int32), np.array([1, 2], np.int32), np.array([3, 4], np.int32)], dev)
  assert out[0] == 11


def test_r_2_llvm_shape():
  text = render_llvm(fn_of(R_2))
  assert 'define void @r_2(ptr %data0, ptr %data1, ptr %data2, i32 %start, i32 %end)' in text
  assert 'alloca i32' in text and ' fast ' not in text and 'i32*' not in text
  llvm.parse_assembly(text).verify()


E_4_4 = """
uop.func @E_4_4() attributes {global_size = [4, 4]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %2 = uop.define_global 2 : !uop.ptr<f32>
  %gidx0 = uop.special gidx0 4 : i32
  %gidx1 = uop.special gidx1 4 : i32
  %c4 = uop.const 4 : i32
  %r = uop.mul %gidx0, %c4 : i32
  %i = uop.add %r, %gidx1 : i32
  %a = uop.load %1[%i] : f32
  %b = uop.load %2[%i] : f32
  %s = uop.add %a, %b : f32
  %c = uop.const 2.5 : f32
  %m = uop.mul %s, %c : f32
  uop.store %0[%i], %m : f32
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_elementwise_gidx(dev):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
  out = run(E_4_4, [np.zeros(16, np.float32), a, b], dev)
  np.testing.assert_array_equal(out, (a + b) * np.float32(2.5))


def test_gidx0_split_start_end():
  prg = get_device('CPU').compile(fn_of(E_4_4))
  a, b, out = np.ones(16, np.float32), np.ones(16, np.float32), np.zeros(16, np.float32)
  prg(out, a, b, start=1, end=3)
  np.testing.assert_array_equal(out, np.array([0] * 4 + [5] * 8 + [0] * 4, np.float32))
  with pytest.raises(tgc.TgcError): prg(out, a, b, start=2, end=5)


LOCAL = """
uop.func @E_2_3() attributes {global_size = [2], local_size = [3]} {
  %0 = uop.define_global 0 : !uop.ptr<i32>
  %g = uop.special gidx0 2 : i32
  %l = uop.special lidx0 3 : i32
  %c3 = uop.const 3 : i32
  %c10 = uop.const 10 : i32
  %i0 = uop.mul %g, %c3 : i32
  %i = uop.add %i0, %l : i32
  %v0 = uop.mul %g, %c10 : i32
  %v = uop.add %v0, %l : i32
  uop.barrier
  uop.store %0[%i], %v : i32
}"""


@pytest.mark.parametrize('dev', ['INTERP'])
def test_local_size_interp_rejects_barrier(dev):
  with pytest.raises(tgc.TgcError, match='barrier'): run(LOCAL, [np.zeros(6, np.int32)], dev)


def test_local_size_cpu():
  with pytest.raises(tgc.TgcError, match='uop.barrier'): render_llvm(fn_of(LOCAL))
  text = LOCAL.replace('  uop.barrier\n', '')
  for dev in DEVICES:
    np.testing.assert_array_equal(run(text, [np.zeros(6, np.int32)], dev), [0, 1, 2, 10, 11, 12])


MATMUL = """
uop.func @r_4_5_3() attributes {global_size = [4]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %2 = uop.define_global 2 : !uop.ptr<f32>
  %gidx0 = uop.special gidx0 4 : i32
  %c0 = uop.const 0 : i32
  %c3 = uop.const 3 : i32
  %c5 = uop.const 5 : i32
  %z = uop.const 0.0 : f32
  %ridx0 = uop.range %c0, %c5 : i32
  %acc0 = uop.define_acc %z (%ridx1) : f32
  %ridx1 = uop.range %c0, %c3 : i32
  %ai0 = uop.mul %gidx0, %c3 : i32
  %ai = uop.add %ai0, %ridx1 : i32
  %bi0 = uop.mul %ridx1, %c5 : i32
  %bi = uop.add %bi0, %ridx0 : i32
  %a = uop.load %1[%ai] : f32
  %b = uop.load %2[%bi] : f32
  %m = uop.mulacc %a, %b, %acc0 : f32
  %p = uop.phi %acc0, %m : f32
  uop.endrange %ridx1
  %oi0 = uop.mul %gidx0, %c5 : i32
  %oi = uop.add %oi0, %ridx0 : i32
  uop.store %0[%oi], %p : f32
  uop.endrange %ridx0
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_nested_ranges_matmul(dev):
  a = np.arange(12, dtype=np.float32).reshape(4, 3)
  b = np.arange(15, dtype=np.float32).reshape(3, 5) - 7
  out = run(MATMUL, [np.zeros(20, np.float32), a.ravel(), b.ravel()], dev)
  np.testing.assert_array_equal(out.reshape(4, 5), a @ b)


PAD = """
uop.func @E_8() attributes {global_size = [8]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %g = uop.special gidx0 8 : i32
  %c2 = uop.const 2 : i32
  %c6 = uop.const 6 : i32
  %lo = uop.cmplt %g, %c2 : i32 -> i1
  %t = uop.const true : i1
  %ge = uop.xor %lo, %t : i1
  %lt = uop.cmplt %g, %c6 : i32 -> i1
  %in = uop.and %ge, %lt : i1
  %i = uop.sub %g, %c2 : i32
  %alt = uop.const -1.0 : f32
  %v = uop.load %1[%i], %in, %alt : f32
  uop.store %0[%g], %v : f32
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_gated_load_pad(dev):
  # only 4 elements: an ungated load of index -2 or 4..5 would read outside (the interpreter would raise)
  out = run(PAD, [np.zeros(8, np.float32), np.array([1, 2, 3, 4], np.float32)], dev)
  np.testing.assert_array_equal(out, [-1, -1, 1, 2, 3, 4, -1, -1])


GSTORE = """
uop.func @E_8() attributes {global_size = [8]} {
  %0 = uop.define_global 0 : !uop.ptr<i16>
  %g = uop.special gidx0 8 : i32
  %c2 = uop.const 2 : i32
  %c0 = uop.const 0 : i32
  %m = uop.mod %g, %c2 : i32
  %even = uop.cmpeq %m, %c0 : i32 -> i1
  %v = uop.cast %g : i32 -> i16
  uop.store %0[%g], %v, %even : i16
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_gated_store(dev):
  out = run(GSTORE, [np.full(8, 99, np.int16)], dev)
  np.testing.assert_array_equal(out, [0, 99, 2, 99, 4, 99, 6, 99])


IF = """
uop.func @E_6() attributes {global_size = [6]} {
  %0 = uop.define_global 0 : !uop.ptr<u8>
  %1 = uop.define_global 1 : !uop.ptr<i1>
  %g = uop.special gidx0 6 : i32
  %c = uop.load %1[%g] : i1
  uop.if %c
  %v = uop.const 200 : u8
  uop.store %0[%g], %v : u8
  uop.endif
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_if_endif_and_bool_buffer(dev):
  c = np.array([1, 0, 1, 1, 0, 0], bool)
  out = run(IF, [np.zeros(6, np.uint8), c], dev)
  np.testing.assert_array_equal(out, np.where(c, 200, 0))


VEC = """
uop.func @E_2() attributes {global_size = [2]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %2 = uop.define_global 2 : !uop.ptr<f32>
  %g = uop.special gidx0 2 : i32
  %c4 = uop.const 4 : i32
  %i = uop.mul %g, %c4 : i32
  %a = uop.load %1[%i] : vec<4xf32>
  %x0 = uop.gep %a 3 : f32
  %x1 = uop.gep %a 2 : f32
  %x2 = uop.gep %a 1 : f32
  %x3 = uop.gep %a 0 : f32
  %rev = uop.vectorize %x0, %x1, %x2, %x3 : vec<4xf32>
  %one = uop.const 1.0 : vec<4xf32>
  %b = uop.load %2[%i] : vec<4xf32>
  %s = uop.mulacc %rev, %b, %one : vec<4xf32>
  %c = uop.cmplt %s, %one : vec<4xf32> -> vec<4xi1>
  %z = uop.const 0.0 : vec<4xf32>
  %w = uop.where %c, %z, %s : vec<4xf32>
  %q = uop.sqrt %w : vec<4xf32>
  uop.store %0[%i], %q : vec<4xf32>
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_vectors(dev):
  a = np.arange(8, dtype=np.float32); b = np.array([1, -1, 2, 3, 0.5, 1, 1, -4], np.float32)
  out = run(VEC, [np.zeros(8, np.float32), a, b], dev)
  rev = a.reshape(2, 4)[:, ::-1].ravel()
  s = rev * b + 1
  np.testing.assert_allclose(out, np.sqrt(np.where(s < 1, 0, s)), rtol=1e-7)


def test_vector_llvm_types():
  text = render_llvm(fn_of(VEC))
  assert '<4 x float>' in text and 'insertelement' in text and 'extractelement' in text
  llvm.parse_assembly(text).verify()


VEC_TYPES = """
uop.func @E_1() attributes {global_size = [1]} {
  %0 = uop.define_global 0 : !uop.ptr<bf16>
  %1 = uop.define_global 1 : !uop.ptr<i1>
  %2 = uop.define_global 2 : !uop.ptr<bf16>
  %c0 = uop.const 0 : i32
  %m = uop.load %1[%c0] : vec<4xi1>
  %a = uop.load %2[%c0] : vec<4xbf16>
  %b = uop.add %a, %a : vec<4xbf16>
  %c = uop.where %m, %b, %a : vec<4xbf16>
  uop.store %0[%c0], %c : vec<4xbf16>
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_vector_bool_and_bf16(dev):
  a = D.f32_to_bf16_bits(np.array([1.5, -2, 3.25, 100], np.float32))
  m = np.array([1, 0, 0, 1], bool)
  out = run(VEC_TYPES, [np.zeros(4, np.uint16), m, a], dev)
  np.testing.assert_array_equal(D.bf16_bits_to_f32(out), [3, -2, 3.25, 200])


@pytest.mark.parametrize('dt', ALL)
@pytest.mark.parametrize('op', ['add', 'mul', 'sub', 'max', 'min', 'cmplt', 'cmpne', 'cmpeq'])
def test_every_dtype_binary(dt, op):
  dt = D.get(dt)
  if dt.is_bool and op == 'sub': op = 'xor'
  rng = np.random.default_rng(1)
  n = 32
  a, b = sample(dt, n, rng), sample(dt, n, rng)
  if dt.is_float: a[9], b[10], a[11], b[11] = (to_store(np.float32(x), dt) for x in (np.nan, np.nan, np.inf, -np.inf))
  want = alu.exec_alu(op, dt, to_compute(a, dt), to_compute(b, dt))
  out_dt = D.bool_ if op in alu.COMPARE else dt
  want = to_store(want, out_dt)
  for dev in DEVICES:
    got = run(binary_kernel(op, dt.name, n), [np.zeros(n, out_dt.np), a, b], dev)
    np.testing.assert_array_equal(got, want, err_msg=f"{dev} {op} {dt}")


@pytest.mark.parametrize('src', ALL)
@pytest.mark.parametrize('dst', ALL)
def test_every_cast(src, dst):
  src, dst = D.get(src), D.get(dst)
  rng = np.random.default_rng(2)
  a = sample(src, 24, rng)
  if src.is_float:  # the holes: NaN, inf, out of range, and exact halves to round
    extra = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 255.5, -128.7, 65504.0, 65520.0, 3e9, -3e9, 2.0 ** 63, 1e-8, 1.0 + 2.0 ** -8 + 2.0 ** -9], np.float64)
    with np.errstate(all='ignore'): a = np.concatenate([a, to_store(D.round_to(extra, src), src)])
  want = to_store(alu.exec_cast(to_compute(a, src), src, dst), dst)
  for dev in DEVICES:
    got = run(unary_kernel('cast', src.name, len(a), dst.name), [np.zeros(len(a), dst.np), a], dev)
    np.testing.assert_array_equal(got, want, err_msg=f"{dev} cast {src}->{dst} of {a}")


BITCASTS = [('f32', 'i32'), ('i32', 'f32'), ('f32', 'u32'), ('f64', 'i64'), ('u64', 'f64'), ('f16', 'i16'), ('u16', 'f16'),
            ('bf16', 'u16'), ('i16', 'bf16'), ('bf16', 'f16'), ('f16', 'bf16'), ('i8', 'u8'), ('u32', 'i32'),
            ('f8e4m3', 'i8'), ('u8', 'f8e5m2'), ('f8e4m3', 'f8e5m2fnuz'), ('f8e5m2', 'f8e4m3fnuz'), ('i4', 'u4'), ('u2', 'i2')]


@pytest.mark.parametrize('src,dst', BITCASTS)
def test_bitcast(src, dst):
  src, dst = D.get(src), D.get(dst)
  a = sample(src, 16, np.random.default_rng(3))
  want = to_store(alu.exec_bitcast(to_compute(a, src), src, dst), dst)
  for dev in DEVICES:
    got = run(unary_kernel('bitcast', src.name, len(a), dst.name), [np.zeros(len(a), dst.np), a], dev)
    np.testing.assert_array_equal(got.view(f'u{dst.itemsize}'), np.asarray(want).view(f'u{dst.itemsize}'), err_msg=f"{dev} {src}->{dst}")


@pytest.mark.parametrize('dt', INTS)
@pytest.mark.parametrize('op', ['idiv', 'mod', 'shl', 'shr', 'and', 'or', 'xor'])
def test_integer_holes(dt, op):
  dt = D.get(dt)
  lo, hi = D.min_max(dt)
  vals = sorted({lo, lo + 1, -1 if lo else 3, 0, 1, 2, 7, -7 if lo else 9, dt.bits - 1, dt.bits, dt.bits + 1, 32, 64, hi - 1, hi})
  vals = [v for v in vals if lo <= v <= hi]
  a = np.array([x for x in vals for _ in vals], dtype=object).astype(dt.np)
  b = np.array([y for _ in vals for y in vals], dtype=object).astype(dt.np)
  want = alu.exec_alu(op, dt, a, b)
  for dev in DEVICES:
    got = run(binary_kernel(op, dt.name, len(a)), [np.zeros(len(a), dt.np), a, b], dev)
    np.testing.assert_array_equal(got, want, err_msg=f"{dev} {op} {dt}")


def test_i64_min_division_cpu():
  # C: INT64_MIN / 2 == -2**62 (toward zero), INT64_MIN / (INT64_MIN + 1) == 1, INT64_MIN % 3 == -2, 7 / INT64_MIN == 0
  mn = np.iinfo(np.int64).min
  a, b = np.array([mn, mn, mn, mn, 7, -7], np.int64), np.array([2, mn + 1, 3, mn, mn, mn], np.int64)
  got = run(binary_kernel('idiv', 'i64', 6), [np.zeros(6, np.int64), a, b])
  np.testing.assert_array_equal(got, [-2 ** 62, 1, -3074457345618258602, 1, 0, 0])
  got = run(binary_kernel('mod', 'i64', 6), [np.zeros(6, np.int64), a, b])
  np.testing.assert_array_equal(got, [0, -1, -2, 0, 7, -7])


def test_i64_min_division_oracle():
  mn = np.int64(np.iinfo(np.int64).min)
  assert alu.exec_alu('idiv', D.i64, mn, np.int64(2)) == -2 ** 62


def test_integer_holes_named_cases():
  i32 = D.i32
  mn = np.int32(-2 ** 31)
  cases = [('idiv', 7, 0, 0), ('mod', 7, 0, 0), ('idiv', mn, -1, mn), ('mod', mn, -1, 0), ('idiv', -7, 2, -3), ('mod', -7, 2, -1),
           ('shl', 1, 32, 0), ('shr', -8, 32, 0), ('shr', -8, 1, -4), ('shl', 1, -1, 0)]
  for op, x, y, want in cases:
    assert alu.exec_alu(op, i32, np.int32(x), np.int32(y)) == want
    for dev in DEVICES:
      got = run(binary_kernel(op, 'i32', 1), [np.zeros(1, np.int32), np.array([x], np.int32), np.array([y], np.int32)], dev)
      assert got[0] == want, (dev, op, x, y)
  got = run(binary_kernel('shr', 'u32', 1), [np.zeros(1, np.uint32), np.array([0x80000000], np.uint32), np.array([4], np.uint32)])
  assert got[0] == 0x08000000  # logical on unsigned


@pytest.mark.parametrize('dt', FLOATS)
@pytest.mark.parametrize('op', ['neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip', 'trunc'])
def test_float_unary(dt, op):
  dt = D.get(dt)
  a = sample(dt, 24, np.random.default_rng(4))
  want = to_compute(to_store(alu.exec_alu(op, dt, to_compute(a, dt)), dt), dt)
  exact = op in ('neg', 'sqrt', 'recip', 'trunc')
  for dev in DEVICES:
    got = to_compute(run(unary_kernel(op, dt.name, len(a)), [np.zeros(len(a), dt.np), a], dev), dt)
    if exact or dev == 'INTERP': np.testing.assert_array_equal(got, want, err_msg=f"{dev} {op} {dt}")
    else:  # transcendentals: libm vs numpy may differ by an ulp of the dtype
      tol = 2.0 ** -dt.fmt.man if dt.bits == 8 else {'f16': 2e-3, 'bf16': 1e-2, 'f32': 1e-6, 'f64': 1e-14}[dt.name]  # f8: an ulp
      np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, err_msg=f"{dev} {op} {dt}")


@pytest.mark.parametrize('dt', FLOATS)
@pytest.mark.parametrize('op', ['fdiv', 'mod'])
def test_float_division(dt, op):
  dt = D.get(dt)
  rng = np.random.default_rng(5)
  a, b = sample(dt, 24, rng), sample(dt, 24, rng)
  want = to_store(alu.exec_alu(op, dt, to_compute(a, dt), to_compute(b, dt)), dt)
  for dev in DEVICES:
    got = run(binary_kernel(op, dt.name, len(a)), [np.zeros(len(a), dt.np), a, b], dev)
    np.testing.assert_array_equal(got, want, err_msg=f"{dev} {op} {dt}")


@pytest.mark.parametrize('dt', FLOATS + INTS + ['i1'])
def test_mulacc_and_where(dt):
  dt = D.get(dt)
  n = 16
  rng = np.random.default_rng(6)
  a, b, c, m = sample(dt, n, rng), sample(dt, n, rng), sample(dt, n, rng), rng.integers(0, 2, n).astype(bool)
  text = f"""
uop.func @E_{n}() attributes {{global_size = [{n}]}} {{
  %0 = uop.define_global 0 : !uop.ptr<{dt}>
  %1 = uop.define_global 1 : !uop.ptr<{dt}>
  %2 = uop.define_global 2 : !uop.ptr<{dt}>
  %3 = uop.define_global 3 : !uop.ptr<{dt}>
  %4 = uop.define_global 4 : !uop.ptr<i1>
  %g = uop.special gidx0 {n} : i32
  %a = uop.load %1[%g] : {dt}
  %b = uop.load %2[%g] : {dt}
  %c = uop.load %3[%g] : {dt}
  %m = uop.load %4[%g] : i1
  %r = uop.mulacc %a, %b, %c : {dt}
  %w = uop.where %m, %r, %a : {dt}
  uop.store %0[%g], %w : {dt}
}}"""
  r = alu.exec_alu('mulacc', dt, *(to_compute(x, dt) for x in (a, b, c)))
  want = to_store(alu.exec_alu('where', dt, m, r, to_compute(a, dt)), dt)
  for dev in DEVICES:
    got = run(text, [np.zeros(n, dt.np), a, b, c, m], dev)
    np.testing.assert_array_equal(got, want, err_msg=f"{dev} {dt}")


def test_bf16_rounding():
  # ties to even, carries into the exponent, overflow to inf, NaN kept (as the canonical 0x7FC0)
  f = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, 3.3895e38, np.nan, -np.nan, 1.0 - 2 ** -9, -2.0 - 2 ** -7], np.float32)
  want = D.f32_to_bf16_bits(f)
  assert list(want[:2]) == [0x3F80, 0x3F82]
  for dev in DEVICES:
    got = run(unary_kernel('cast', 'f32', len(f), 'bf16'), [np.zeros(len(f), np.uint16), f], dev)
    np.testing.assert_array_equal(got, want, err_msg=dev)
  # every add result rounds: 1 + 2^-8 in bf16 is 1 (a tie, to even), 1 + 3*2^-8 rounds up
  a = D.f32_to_bf16_bits(np.array([1.0, 1.0, 256.0], np.float32))
  b = D.f32_to_bf16_bits(np.array([2 ** -8, 3 * 2 ** -8, 1.0], np.float32))
  for dev in DEVICES:
    got = run(binary_kernel('add', 'bf16', 3), [np.zeros(3, np.uint16), a, b], dev)
    np.testing.assert_array_equal(D.bf16_bits_to_f32(got), [1.0, 1.0 + 2 ** -6, 256.0])


def test_f16_rounding():
  a = np.array([2048, 1, 65504, 0.1], np.float16)
  b = np.array([1, 2 ** -11, 32, 0.2], np.float16)
  with np.errstate(over='ignore'): want = a + b  # 2049 is a tie -> 2048; 1 + 2^-11 -> 1; 65504 + 32 -> inf
  for dev in DEVICES:
    got = run(binary_kernel('add', 'f16', 4), [np.zeros(4, np.float16), a, b], dev)
    np.testing.assert_array_equal(got, want, err_msg=dev)
  assert np.isinf(want[2]) and want[0] == 2048
  f = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 70000.0, 6e-8, 1e-300], np.float64)  # f64 -> f16 rounds once
  for dev in DEVICES:
    got = run(unary_kernel('cast', 'f64', len(f), 'f16'), [np.zeros(len(f), np.float16), f], dev)
    with np.errstate(over='ignore'): np.testing.assert_array_equal(got, f.astype(np.float16), err_msg=dev)


CONSTS = """
uop.func @E_1() attributes {global_size = [1]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<bf16>
  %2 = uop.define_global 2 : !uop.ptr<u32>
  %3 = uop.define_global 3 : !uop.ptr<f16>
  %c0 = uop.const 0 : i32
  %c1 = uop.const 1 : i32
  %c2 = uop.const 2 : i32
  %nan = uop.const 0x7fc00001 : f32
  %inf = uop.const -inf : f32
  %b = uop.const 0x4049 : bf16
  %u = uop.const 0xffffffff : u32
  %h = uop.const 0.1 : f16
  uop.store %0[%c0], %nan : f32
  uop.store %0[%c1], %inf : f32
  uop.store %1[%c0], %b : bf16
  uop.store %2[%c0], %u : u32
  uop.store %3[%c0], %h : f16
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_constants(dev):
  bufs = [np.zeros(2, np.float32), np.zeros(1, np.uint16), np.zeros(1, np.uint32), np.zeros(1, np.float16)]
  run(CONSTS, bufs, dev)
  assert bufs[0].view(np.uint32)[0] == 0x7fc00001 and bufs[0][1] == -np.inf
  assert bufs[1][0] == 0x4049 and bufs[2][0] == 0xffffffff and bufs[3][0] == np.float16(0.1)


ACC_FORMS = """
uop.func @r_3_4() attributes {global_size = [3]} {
  %0 = uop.define_global 0 : !uop.ptr<i64>
  %1 = uop.define_global 1 : !uop.ptr<i64>
  %g = uop.special gidx0 3 : i32
  %c0 = uop.const 0 : i32
  %c4 = uop.const 4 : i32
  %one = uop.const 1 : i64
  %acc0 = uop.define_acc %one (%r) : i64
  %r = uop.range %c0, %c4 : i32
  %i0 = uop.mul %g, %c4 : i32
  %i = uop.add %i0, %r : i32
  %v = uop.load %1[%i] : i64
  %m = uop.mul %acc0, %v : i64
  %p = uop.phi %acc0, %m : i64
  %q = uop.add %p, %one : i64
  %p2 = uop.phi %acc0, %q : i64
  uop.endrange %r
  %fin = uop.sub %p2, %one : i64
  uop.store %0[%g], %fin : i64
}"""


@pytest.mark.parametrize('dev', DEVICES)
def test_accumulator_reads_current_value(dev):
  x = np.arange(1, 13, dtype=np.int64)
  want = []
  for row in x.reshape(3, 4):
    acc = 1
    for v in row: acc = acc * v + 1
    want.append(acc - 1)
  np.testing.assert_array_equal(run(ACC_FORMS, [np.zeros(3, np.int64), x], dev), want)


def test_llvm_verifies_every_kernel():
  for text in (R_2, E_4_4, MATMUL, PAD, GSTORE, IF, VEC, VEC_TYPES, CONSTS, ACC_FORMS):
    verifies(text)


def test_render_module_and_dispatch():
  m = I.parse(R_2 + '\n' + E_4_4)
  text = render(m, 'llvm')
  assert text == render_llvm_module(m)
  mod = llvm.parse_assembly(text); mod.verify()
  assert {f.name for f in mod.functions if not f.is_declaration} == {'r_2', 'E_4_4'}
  with pytest.raises(tgc.TgcError, match='unknown target'): render(m, 'vulkan')


def test_compile_cache():
  dev = get_device('CPU')
  before = dict(cpu.stats)
  p1 = dev.compile(fn_of(MATMUL))
  p2 = dev.compile(fn_of(MATMUL))  # a new parse of the same text: the same LLVM IR, compiled once
  assert p1 is p2
  assert cpu.stats['compiles'] - before['compiles'] <= 1 and cpu.stats['cache_hits'] - before['cache_hits'] >= 1


def _scaled(name, n, dt='f32', size=None, k=1234.5):
  """out[g] = in[g] * k over gidx0 < n (k: a constant no other test's kernel has, so that the first compile is fresh)."""
  sz = f" {{size = {size}}}" if size else ''
  c = k if dt[0] == 'f' else int(k)
  return f"""
uop.func @{name}() attributes {{global_size = [{n}]}} {{
  %0 = uop.define_global 0{sz} : !uop.ptr<{dt}>
  %1 = uop.define_global 1{sz} : !uop.ptr<{dt}>
  %g = uop.special gidx0 {n} : i32
  %a = uop.load %1[%g] : {dt}
  %k = uop.const {c} : {dt}
  %r = uop.mul %a, %k : {dt}
  uop.store %0[%g], %r : {dt}
}}"""


def test_same_body_other_name_shares_machine_code():
  """Kernels that differ in name only (a model's repeated blocks) are compiled once, in one batch or across two;
  each keeps its own program (its name in errors) and both run right."""
  dev = get_device('CPU')
  before = cpu.stats['compiles'] + cpu.stats['disk_hits']
  a, b = dev.compile_all([fn_of(_scaled('blk_a', 8, k=7.25)), fn_of(_scaled('blk_b', 8, k=7.25))])
  c, = dev.compile_all([fn_of(_scaled('blk_c', 8, k=7.25))])
  assert cpu.stats['compiles'] + cpu.stats['disk_hits'] - before == 1  # (compiled here, or by an earlier process)
  assert a is not b and a.addr == b.addr == c.addr and (a.name, b.name, c.name) == ('blk_a', 'blk_b', 'blk_c')
  x = np.arange(8, dtype=np.float32)
  for p in (a, b, c):
    out = np.zeros(8, np.float32); p(out, x)
    np.testing.assert_array_equal(out, x * np.float32(7.25))
  with pytest.raises(tgc.TgcError, match='@blk_b'): b(np.zeros(8, np.float32), x, x)
  d, e = dev.compile_all([fn_of(_scaled('blk_d', 8, k=7.5)), fn_of(_scaled('blk_d', 8, k=7.5))])
  assert d is e and d.addr != a.addr  # (the same name and body: one program)


def test_kernels_differing_in_grid_size_or_dtype_do_not_share_a_program():
  """The machine code is shared by LLVM IR text, but a program is its grid, its buffers' sizes and dtypes: kernels
  that differ in one of those are distinct programs, each launching its own grid and checking its own buffers."""
  dev = get_device('CPU')
  g8, g16 = dev.compile_all([fn_of(_scaled('grid', 8, k=3.5)), fn_of(_scaled('grid', 16, k=3.5))])
  assert g8 is not g16 and (g8.global_size[0], g16.global_size[0]) == (8, 16)
  x = np.arange(16, dtype=np.float32)
  for p, n in ((g8, 8), (g16, 16)):
    out = np.full(16, -1, np.float32); p(out, x)
    np.testing.assert_array_equal(out[:n], x[:n] * np.float32(3.5)); assert (out[n:] == -1).all()
  s8, s16 = dev.compile_all([fn_of(_scaled('sized', 8, size=8, k=3.5)), fn_of(_scaled('sized', 8, size=16, k=3.5))])
  assert s8 is not s16
  s8(np.zeros(8, np.float32), x[:8])
  with pytest.raises(tgc.TgcError, match='declares 16'): s16(np.zeros(8, np.float32), x[:8])
  i8, u8 = dev.compile_all([fn_of(_scaled('typed', 8, 'i8', k=3)), fn_of(_scaled('typed', 8, 'u8', k=3))])
  assert i8 is not u8
  xi, xu = np.arange(-4, 4, dtype=np.int8), np.arange(250, 258, dtype=np.int64).astype(np.uint8)
  oi, ou = np.zeros(8, np.int8), np.zeros(8, np.uint8)
  i8(oi, xi); u8(ou, xu)
  np.testing.assert_array_equal(oi, xi * np.int8(3)); np.testing.assert_array_equal(ou, xu * np.uint8(3))
  with pytest.raises(tgc.TgcError, match='dtype'): i8(ou, xu)


_DISK = r"""
import sys, numpy as np
sys.path.insert(0, {tests!r})
from test_llvm import _scaled, fn_of
from tgc.runtime import get_device, cpu
progs = get_device('CPU').compile_all([fn_of(_scaled(f'k{{i}}', 16, k=1.5 + i)) for i in range(3)])
x = np.arange(16, dtype=np.float32)
for i, p in enumerate(progs):
  out = np.zeros(16, np.float32); p(out, x); assert np.array_equal(out, x * np.float32(1.5 + i))
print(cpu.stats['compiles'], cpu.stats['disk_hits'])
"""

def test_compiled_kernels_are_kept_on_disk(tmp_path):
  """Each kernel's object file is kept in the disk cache (tgc.cache, kind llvm): the next process with the same kernels
  loads them instead of compiling; a damaged entry is compiled anew (and replaced); another codegen_id (LLVM, the
  CPU, the optimisation) is another entry."""
  import subprocess, sys
  from tgc import cache
  env = {**os.environ, 'TGC_CACHE_DIR': str(tmp_path), 'PYTHONPATH': os.pathsep.join([os.path.dirname(os.path.dirname(tgc.__file__)), os.environ.get('PYTHONPATH', '')])}
  env.pop('TGC_CACHE', None)
  run = lambda: tuple(map(int, subprocess.run([sys.executable, '-c', _DISK.format(tests=os.path.dirname(__file__))], env=env, capture_output=True, text=True, check=True).stdout.split()))
  assert run() == (3, 0)
  with um.patch.dict(os.environ, {'TGC_CACHE_DIR': str(tmp_path)}): files = cache.entries('llvm')
  assert len(files) == 3
  assert run() == (0, 3)
  with open(files[0], 'r+b') as f: f.truncate(os.path.getsize(files[0]) - 100)  # (an entry cut short)
  assert run() == (1, 2) and run() == (0, 3)
  text = "define void @kernel(ptr %a, i32 %s, i32 %e) {\n  store i32 12345, ptr %a\n  ret void\n}\n"
  with um.patch.dict(os.environ, {'TGC_CACHE_DIR': str(tmp_path / 'own')}):
    n0 = cpu.stats['compiles']; cpu.jit_kernels([text])
    with um.patch.object(cpu, '_codegen_id', cpu.codegen_id() + ' another CPU'): cpu.jit_kernels([text])
    cpu.jit_kernels([text])
    assert cpu.stats['compiles'] - n0 == 2 and len(cache.entries('llvm')) == 2


def _rowsum(n, m=37):
  """out[g] = sum of in[g*m : g*m + m] over gidx0 < n: each point's result is its own, whichever thread runs it."""
  return f"""
uop.func @r_{n}_{m}() attributes {{global_size = [{n}]}} {{
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %g = uop.special gidx0 {n} : i32
  %c0 = uop.const 0 : i32
  %cm = uop.const {m} : i32
  %z = uop.const 0.0 : f32
  %acc = uop.define_acc %z (%r) : f32
  %r = uop.range %c0, %cm : i32
  %b = uop.mul %g, %cm : i32
  %i = uop.add %b, %r : i32
  %x = uop.load %1[%i] : f32
  %s = uop.add %acc, %x : f32
  %p = uop.phi %acc, %s : f32
  uop.endrange %r
  uop.store %0[%g], %p : f32
}}"""


@pytest.mark.parametrize('dev,threads', [('CPU', '2'), ('CPU', '3'), ('CPU', '5'), ('C', '2')])
def test_split_launch_matches_one_thread_on_odd_grids(dev, threads, monkeypatch):
  """A launch split across threads (chunks of gidx0 claimed by the caller and the pool's workers; more threads than
  cores too; the C device's kernels as the CPU's) writes exactly what one thread does, whole grids and partial
  ranges alike."""
  monkeypatch.setenv('CPU_THREADS', threads)
  rng = np.random.default_rng(int(threads))
  for n in (2, 3, 7, 13, 101, 1000):
    p = get_device(dev).compile(fn_of(_rowsum(n)))
    x = rng.standard_normal(n * 37).astype(np.float32)
    one, split = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    p.split = False; p(one, x)
    p.split = True; p(split, x)
    np.testing.assert_array_equal(split, one)
    np.testing.assert_allclose(one, x.reshape(n, 37).sum(1, dtype=np.float64), rtol=1e-5, atol=1e-5)
    part = np.full(n, np.nan, np.float32)
    p(part, x, start=n // 3, end=n)
    np.testing.assert_array_equal(part[n // 3:], one[n // 3:]); assert np.isnan(part[:n // 3]).all()
  assert cpu.pool() is not None and cpu.pool().workers >= int(threads) - 1


def test_split_launches_from_two_python_threads():
  """The pool takes one split launch at a time: a launch from another thread meanwhile runs on its own thread, and
  both are right."""
  import threading
  p = get_device('CPU').compile(fn_of(_rowsum(257)))
  p.split = True
  x = np.random.default_rng(1).standard_normal(257 * 37).astype(np.float32)
  ref = np.zeros(257, np.float32); p.split = False; p(ref, x); p.split = True
  bad = []
  def work():
    for _ in range(200):
      out = np.zeros(257, np.float32); p(out, x)
      if not np.array_equal(out, ref): bad.append(1)
  ts = [threading.Thread(target=work) for _ in range(3)]
  for t in ts: t.start()
  for t in ts: t.join()
  assert not bad


def test_split_settles_by_timing_and_the_schedule_follows(monkeypatch):
  """A kernel's first launches are timed (on one thread and split, in turn), then it settles; a host schedule made
  before takes the settled launcher (Program.launcher_epoch), and results stay right throughout. With CPU_THREADS=1
  nothing is timed or split."""
  from tgc.runtime.device import Program
  text = """func.func @f(%a: tensor<300x200xf32>) -> tensor<300x1xf32> {
  %r = tensor.reduce add %a [1] : tensor<300x200xf32> -> tensor<300x1xf32>
  func.return %r : tensor<300x1xf32>
}"""
  a = np.random.default_rng(2).standard_normal((300, 200)).astype(np.float32)
  monkeypatch.setenv('CPU_THREADS', '1')
  f = tgc.compile(text)
  progs = [k.program for k in f.kernels.values() if k.program.global_size[0] > 1]
  assert progs
  for p in progs: p.split, p.times = None, ([], [])  # (a fresh settling: the program may be cached from before)
  for _ in range(5): np.testing.assert_allclose(f(a)[0][:, 0], a.sum(1), rtol=1e-4, atol=1e-4)
  assert all(p.split is None and p.times == ([], []) for p in progs)
  monkeypatch.setenv('CPU_THREADS', '2')
  epoch = Program.launcher_epoch
  for _ in range(2 * cpu.PROBES): np.testing.assert_allclose(f(a)[0][:, 0], a.sum(1), rtol=1e-4, atol=1e-4)
  assert all(p.split is not None and len(p.times[0]) in (1, cpu.PROBES) for p in progs) and Program.launcher_epoch > epoch
  np.testing.assert_allclose(f(a)[0][:, 0], a.sum(1), rtol=1e-4, atol=1e-4)
  assert f._epoch == Program.launcher_epoch  # (the next call took the settled launchers)


def test_split_kernel_that_stalls_times_both_ways_again(monkeypatch):
  """A settled split kernel whose launches come out slower than one thread by half (a worker descheduled mid-chunk
  by another process) goes back to timing both ways after STALLS such launches; results stay right."""
  from tgc.runtime.device import Program
  monkeypatch.setenv('CPU_THREADS', '2')
  p = get_device('CPU').compile(fn_of(_rowsum(64)))
  x = np.ones(64 * 37, np.float32)
  p.split, p.times, p.stalls = True, ([1e-9], [1e-9]), 0  # (one thread "took" a nanosecond: every split launch stalls)
  epoch = Program.launcher_epoch
  for i in range(cpu.STALLS):
    assert p.split is True
    out = np.zeros(64, np.float32); p(out, x); np.testing.assert_array_equal(out, np.full(64, 37, np.float32))
  assert p.split is None and p.times == ([], []) and Program.launcher_epoch == epoch + 1


@pytest.mark.skipif(not hasattr(os, 'fork'), reason="no fork")
def test_split_launch_in_a_forked_child():
  """A forked child has none of the parent's worker threads: its split launches start a pool of their own (with the
  parent's, a launch would run alone, and a timed settling's wake-up wait for workers that do not exist)."""
  p = get_device('CPU').compile(fn_of(_rowsum(99)))
  x = np.arange(99 * 37, dtype=np.float32)
  ref = np.zeros(99, np.float32); p.split = False; p(ref, x); p.split = True
  parent = cpu.pool()
  pid = os.fork()
  if pid == 0:
    code = 1
    try:
      out = np.zeros(99, np.float32); p(out, x); code = 0 if np.array_equal(out, ref) and cpu.pool() is not parent else 2
    finally: os._exit(code)
  _, status = os.waitpid(pid, 0)
  assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not sys.platform.startswith('linux') or len(os.sched_getaffinity(0)) < 2, reason="Linux, 2 CPUs or more")
def test_worker_moves_off_the_callers_cpu():
  """A worker that finds itself on the CPU the caller posted its job from (a KVM guest may wake it there, behind the
  caller's chunks) takes that CPU out of its affinity, keeping the others the process may use (run on a thread of
  the test's own, whose affinity goes with it)."""
  import ctypes, threading
  p = cpu.pool()
  keep_off = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(p.ee.get_function_address('keep_off_caller'))
  allowed, libc = os.sched_getaffinity(0), ctypes.CDLL(None)
  got = {}
  def run():
    ctl, arg = ctypes.create_string_buffer(cpu._CTL), ctypes.create_string_buffer(24 + 128)
    ctypes.memmove(ctypes.addressof(ctl) + 512, p.ctl + 512, 128)  # (the pool's: the CPUs the process may use)
    ctypes.c_int32.from_address(ctypes.addressof(ctl) + 216).value = 1
    ctypes.c_int32.from_address(ctypes.addressof(ctl) + 212).value = other = min(allowed - {libc.sched_getcpu()})
    keep_off(ctypes.addressof(ctl), ctypes.addressof(arg)); got['elsewhere'] = os.sched_getaffinity(0)  # (not its CPU: stays)
    ctypes.c_int32.from_address(ctypes.addressof(ctl) + 212).value = me = libc.sched_getcpu()
    keep_off(ctypes.addressof(ctl), ctypes.addressof(arg)); got['same'], got['me'] = os.sched_getaffinity(0), me
  t = threading.Thread(target=run); t.start(); t.join()
  assert got['elsewhere'] == allowed and got['same'] == allowed - {got['me']}


def test_pool_read_the_machine():
  """The pool's hand-off costs are measured at its start: positive, finite, and the breakeven follows from them."""
  import math
  p = cpu.pool()
  assert p is not None and 0 < p.post_s < 1 and 0 < p.wake_s < 1 and math.isclose(p.breakeven, p.wake_s + 2 * p.post_s)


def test_wrong_buffers_raise():
  prg = get_device('CPU').compile(fn_of(R_2))
  good = [np.zeros(1, np.int32), np.array([1, 2], np.int32), np.array([3, 4], np.int32)]
  prg(*good)
  bad = [
    [good[0], good[1]],                                           # too few
    [np.zeros(1, np.float32), good[1], good[2]],                  # wrong dtype
    [good[0], np.arange(4, dtype=np.int32)[::2], good[2]],        # not contiguous
    [good[0], [1, 2], good[2]],                                   # not an array
    [np.zeros(1, np.int32), good[1], good[2], good[2]],           # too many
  ]
  for b in bad:
    with pytest.raises(tgc.TgcError): prg(*b)
  ro = np.zeros(1, np.int32); ro.flags.writeable = False
  with pytest.raises(tgc.TgcError): prg(ro, good[1], good[2])


@pytest.mark.parametrize('op,decl', [('uop.define_local', '%l = uop.define_local temp0 16 : !uop.ptr<f32, local>'),
                                     ('uop.define_var', '%l = uop.define_var n 1 8 : i32')])
def test_gpu_ops_rejected(op, decl):
  text = f"""
uop.func @k() attributes {{global_size = [1]}} {{
  %0 = uop.define_global 0 : !uop.ptr<f32>
  {decl}
}}"""
  with pytest.raises(tgc.TgcError, match=op): render_llvm(fn_of(text))


def test_empty_and_zero_trip_loops():
  text = """
uop.func @r_1() {
  %0 = uop.define_global 0 : !uop.ptr<i32>
  %c0 = uop.const 0 : i32
  %c5 = uop.const 5 : i32
  %acc = uop.define_acc %c5 (%r) : i32
  %r = uop.range %c5, %c0 : i32
  %p = uop.phi %acc, %r : i32
  uop.endrange %r
  uop.store %0[%c0], %p : i32
}"""
  for dev in DEVICES:
    assert run(text, [np.zeros(1, np.int32)], dev)[0] == 5


def test_default_device():
  assert Device.DEFAULT in ('CPU', 'INTERP') or Device.DEFAULT
  assert Device['cpu'].name == 'CPU' and get_device('INTERP').name == 'INTERP'


MASKED_NARROW = """uop.func @E_1() attributes {global_size = [1]} {
  %0 = uop.define_global 0 {size = 17} : !uop.ptr<%T>
  %1 = uop.define_global 1 {size = 17} : !uop.ptr<u64>
  %z = uop.const 0 : i32
  %e = uop.const 3 : i32
  %r = uop.range %z, %e : i32
  %c8 = uop.const 8 : i32
  %i = uop.mul %r, %c8 : i32
  %two = uop.const 2 : i32
  %g = uop.cmplt %r, %two : i32 -> i1
  %t = uop.const true : i1
  %m = uop.vectorize %t, %g, %g, %g, %g, %g, %g, %g : vec<8xi1>
  %a = uop.const 0 : u64
  %alt = uop.vectorize %a, %a, %a, %a, %a, %a, %a, %a : vec<8xu64>
  %v = uop.load %1[%i], %m, %alt : vec<8xu64>
  %w = uop.cast %v : vec<8xu64> -> vec<8x%T>
  uop.store %0[%i], %w, %m : vec<8x%T>
  uop.endrange %r
}"""

@pytest.mark.parametrize('dt', ['u8', 'i32', 'f32'])
def test_masked_store_of_a_narrowed_value_stays_in_its_lanes(dt):
  """A vec<8> store under a vector gate whose last step keeps one lane (LLVM unrolls the loop: a constant mask): a
  narrowed integer (u64 computed, u8 stored) is stored lane by lane (LLVM 22's x86 backend stored the one lane of a
  truncating masked store as the wide element, 8 bytes past it overwritten), a float through llvm.masked.store;
  the bytes past the buffer are untouched."""
  fn = I.parse(MASKED_NARROW.replace('%T', dt)).functions('uop.func')[0]
  assert ('llvm.masked.store' in render_llvm(fn)) == (dt == 'f32')
  x = np.arange(1, 18, dtype=np.uint64) * 1000003
  npdt = {'u8': np.uint8, 'i32': np.int32, 'f32': np.float32}[dt]
  big = np.full(17 + 64, 77, npdt)
  out = big[16:33]
  get_device('CPU').compile(fn)(out, x)
  np.testing.assert_array_equal(out, x.astype(npdt))
  assert (big[:16] == 77).all() and (big[33:] == 77).all(), big
