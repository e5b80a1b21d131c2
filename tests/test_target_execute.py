"""The c and opencl targets executed (C: the system compiler + ctypes; OPENCL: pyopencl on PoCL), compared
with numpy and with the INTERP device; bit-exact on integer programs. The same programs are compiled by
tests/test_target_cuda.py (nvcc) and run through tests/test_target_metal.py (g++ and tests/metal_shim.h)."""
import numpy as np
import pytest
import tgc
import tgc.ir as I
from tgc.ir import dtypes as D
from tgc.runtime import get_device

# ---- tensor-level programs: (name, text, inputs, numpy reference or None (INTERP only), exact) ----
def _t(shape, dt): return f"tensor<{'x'.join(map(str, shape))}x{dt}>" if shape else f"tensor<{dt}>"

TENSOR = {
  'dot': ("""func.func @dot(%a: tensor<2xi32>, %b: tensor<2xi32>) -> tensor<i32> {
  %0 = tensor.mul %a, %b : tensor<2xi32>
  %1 = tensor.reduce add %0 [0] : tensor<2xi32> -> tensor<1xi32>
  %2 = tensor.reshape %1 : tensor<1xi32> -> tensor<i32>
  func.return %2 : tensor<i32>
}""", lambda a, b: [np.array(a @ b, np.int32)], [('i32', (2,)), ('i32', (2,))]),
  'add44': ("""func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %c = tensor.const 2.5 : tensor<4x4xf32>
  %0 = tensor.add %a, %b : tensor<4x4xf32>
  %1 = tensor.mul %0, %c : tensor<4x4xf32>
  %2 = tensor.max %1, %a : tensor<4x4xf32>
  func.return %2 : tensor<4x4xf32>
}""", lambda a, b: [np.maximum((a + b) * np.float32(2.5), a)], [('f32', (4, 4)), ('f32', (4, 4))]),
  'reduce': ("""func.func @red(%a: tensor<6x5xf32>) -> (tensor<6x1xf32>, tensor<1x5xf32>) {
  %0 = tensor.reduce add %a [1] : tensor<6x5xf32> -> tensor<6x1xf32>
  %1 = tensor.reduce max %a [0] : tensor<6x5xf32> -> tensor<1x5xf32>
  func.return %0, %1 : tensor<6x1xf32>, tensor<1x5xf32>
}""", lambda a: [a.sum(1, keepdims=True), a.max(0, keepdims=True)], [('f32', (6, 5))]),
  'softmax': ("""func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = tensor.reduce max %x [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %me = tensor.expand %m : tensor<4x1xf32> -> tensor<4x8xf32>
  %d = tensor.sub %x, %me : tensor<4x8xf32>
  %e = tensor.exp2 %d : tensor<4x8xf32>
  %s = tensor.reduce add %e [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %se = tensor.expand %s : tensor<4x1xf32> -> tensor<4x8xf32>
  %r = tensor.fdiv %e, %se : tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}""", lambda x: [np.exp2(x - x.max(1, keepdims=True)) / np.exp2(x - x.max(1, keepdims=True)).sum(1, keepdims=True)], [('f32', (4, 8))]),
  'matmul': ("""func.func @mm(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %0 = tensor.matmul %a, %b : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}""", lambda a, b: [a @ b], [('f32', (4, 8)), ('f32', (8, 3))]),
  'padshrink': ("""func.func @ps(%a: tensor<4x4xi32>) -> tensor<5x4xi32> {
  %0 = tensor.pad %a [(1, 2), (0, 1)] : tensor<4x4xi32> -> tensor<7x5xi32>
  %1 = tensor.shrink %0 [(1, 6), (1, 5)] : tensor<7x5xi32> -> tensor<5x4xi32>
  %2 = tensor.flip %1 [1] : tensor<5x4xi32>
  %c = tensor.const 3 : tensor<5x4xi32>
  %3 = tensor.add %2, %c : tensor<5x4xi32>
  func.return %3 : tensor<5x4xi32>
}""", lambda a: [(np.pad(a, ((1, 2), (0, 1)))[1:6, 1:5][:, ::-1] + 3).astype(np.int32)], [('i32', (4, 4))]),
  'gather': ("""func.func @gather(%x: tensor<6x5xf32>, %i: tensor<4x5xi64>, %j: tensor<3xi32>, %k: tensor<6x3xi8>) -> (tensor<4x5xf32>, tensor<3x5xf32>, tensor<6x3xf32>) {
  %0 = tensor.gather %x, %i 0 : tensor<6x5xf32>, tensor<4x5xi64> -> tensor<4x5xf32>
  %1 = tensor.reshape %j : tensor<3xi32> -> tensor<3x1xi32>
  %2 = tensor.expand %1 : tensor<3x1xi32> -> tensor<3x5xi32>
  %3 = tensor.gather %x, %2 0 : tensor<6x5xf32>, tensor<3x5xi32> -> tensor<3x5xf32>
  %4 = tensor.add %3, %3 : tensor<3x5xf32>
  %5 = tensor.flip %x [1] : tensor<6x5xf32>
  %6 = tensor.gather %5, %k 1 : tensor<6x5xf32>, tensor<6x3xi8> -> tensor<6x3xf32>
  func.return %0, %4, %6 : tensor<4x5xf32>, tensor<3x5xf32>, tensor<6x3xf32>
}""", lambda x, i, j, k: [np.take_along_axis(x, np.clip(i, 0, 5), 0), 2 * x[np.clip(j, 0, 5)],
                          np.take_along_axis(x[:, ::-1], np.clip(k, 0, 4).astype(np.int64), 1)],
     [('f32', (6, 5)), ('i64', (4, 5)), ('i32', (3,)), ('i8', (6, 3))]),
  'casts': ("""func.func @casts(%a: tensor<12xf32>, %i: tensor<12xi32>) -> (tensor<12xi8>, tensor<12xu8>, tensor<12xi64>, tensor<12xf16>, tensor<12xbf16>, tensor<12xf64>, tensor<12xf32>, tensor<12xi1>, tensor<12xu16>) {
  %0 = tensor.cast %a : tensor<12xf32> -> tensor<12xi8>
  %1 = tensor.cast %i : tensor<12xi32> -> tensor<12xu8>
  %2 = tensor.cast %i : tensor<12xi32> -> tensor<12xi64>
  %3 = tensor.cast %a : tensor<12xf32> -> tensor<12xf16>
  %4 = tensor.cast %a : tensor<12xf32> -> tensor<12xbf16>
  %5 = tensor.cast %a : tensor<12xf32> -> tensor<12xf64>
  %6 = tensor.bitcast %i : tensor<12xi32> -> tensor<12xf32>
  %7 = tensor.cast %a : tensor<12xf32> -> tensor<12xi1>
  %8 = tensor.cast %3 : tensor<12xf16> -> tensor<12xu16>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<12xi8>, tensor<12xu8>, tensor<12xi64>, tensor<12xf16>, tensor<12xbf16>, tensor<12xf64>, tensor<12xf32>, tensor<12xi1>, tensor<12xu16>
}""", None, [('f32', (12,)), ('i32', (12,))]),
  # the f8 types: saturating casts from f32 (the inputs hold inf, NaN, overflow and subnormals), arithmetic rounded
  # after every op, casts between them and to f32/f16, a bitcast of the bits, a reduction
  'f8': ("""func.func @f8(%a: tensor<16xf32>, %b: tensor<16xf32>) -> (tensor<16xf8e4m3>, tensor<16xf8e5m2>, tensor<16xf32>, tensor<16xf16>, tensor<16xf8e4m3fnuz>, tensor<16xf8e5m2fnuz>, tensor<16xi8>, tensor<16xf8e4m3>) {
  %0 = tensor.cast %a : tensor<16xf32> -> tensor<16xf8e4m3>
  %1 = tensor.cast %b : tensor<16xf32> -> tensor<16xf8e5m2>
  %2 = tensor.mul %0, %0 : tensor<16xf8e4m3>
  %3 = tensor.add %1, %1 : tensor<16xf8e5m2>
  %4 = tensor.cast %2 : tensor<16xf8e4m3> -> tensor<16xf32>
  %5 = tensor.cast %3 : tensor<16xf8e5m2> -> tensor<16xf16>
  %6 = tensor.cast %a : tensor<16xf32> -> tensor<16xf8e4m3fnuz>
  %7 = tensor.cast %1 : tensor<16xf8e5m2> -> tensor<16xf8e5m2fnuz>
  %8 = tensor.bitcast %0 : tensor<16xf8e4m3> -> tensor<16xi8>
  %s = tensor.shrink %0 [(6, 16)] : tensor<16xf8e4m3> -> tensor<10xf8e4m3>
  %r = tensor.reduce max %s [0] : tensor<10xf8e4m3> -> tensor<1xf8e4m3>
  %9 = tensor.expand %r : tensor<1xf8e4m3> -> tensor<16xf8e4m3>
  func.return %0, %1, %4, %5, %6, %7, %8, %9 : tensor<16xf8e4m3>, tensor<16xf8e5m2>, tensor<16xf32>, tensor<16xf16>, tensor<16xf8e4m3fnuz>, tensor<16xf8e5m2fnuz>, tensor<16xi8>, tensor<16xf8e4m3>
}""", None, [('f32', (16,)), ('f32', (16,))]),
  # the sub-byte ints (a byte each): every result wraps to 4 or 2 bits, casts from floats truncate and wrap
  'subbyte': ("""func.func @sb(%a: tensor<16xi4>, %b: tensor<16xi4>, %f: tensor<16xf32>) -> (tensor<16xi4>, tensor<16xi4>, tensor<16xu4>, tensor<16xi2>, tensor<16xi8>, tensor<16xf32>, tensor<16xu2>, tensor<16xi4>) {
  %0 = tensor.add %a, %b : tensor<16xi4>
  %1 = tensor.mul %a, %b : tensor<16xi4>
  %2 = tensor.cast %f : tensor<16xf32> -> tensor<16xu4>
  %3 = tensor.cast %a : tensor<16xi4> -> tensor<16xi2>
  %4 = tensor.cast %1 : tensor<16xi4> -> tensor<16xi8>
  %5 = tensor.cast %0 : tensor<16xi4> -> tensor<16xf32>
  %6 = tensor.bitcast %3 : tensor<16xi2> -> tensor<16xu2>
  %r = tensor.reduce add %1 [0] : tensor<16xi4> -> tensor<1xi4>
  %7 = tensor.expand %r : tensor<1xi4> -> tensor<16xi4>
  func.return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<16xi4>, tensor<16xi4>, tensor<16xu4>, tensor<16xi2>, tensor<16xi8>, tensor<16xf32>, tensor<16xu2>, tensor<16xi4>
}""", None, [('i4', (16,)), ('i4', (16,)), ('f32', (16,))]),
  'halfmath': ("""func.func @hm(%a: tensor<8xf16>, %b: tensor<8xf16>) -> (tensor<8xf16>, tensor<8xbf16>, tensor<8xf64>) {
  %0 = tensor.mul %a, %b : tensor<8xf16>
  %1 = tensor.add %0, %a : tensor<8xf16>
  %2 = tensor.sqrt %1 : tensor<8xf16>
  %3 = tensor.cast %a : tensor<8xf16> -> tensor<8xbf16>
  %4 = tensor.mul %3, %3 : tensor<8xbf16>
  %5 = tensor.cast %b : tensor<8xf16> -> tensor<8xf64>
  %6 = tensor.recip %5 : tensor<8xf64>
  func.return %2, %4, %6 : tensor<8xf16>, tensor<8xbf16>, tensor<8xf64>
}""", None, [('f16', (8,)), ('f16', (8,))]),
  'intdiv': ("""func.func @idiv(%a: tensor<64xi32>, %b: tensor<64xi32>, %c: tensor<64xi8>, %d: tensor<64xu32>) -> (tensor<64xi32>, tensor<64xi32>, tensor<64xi32>, tensor<64xi32>, tensor<64xi8>, tensor<64xi8>, tensor<64xu32>, tensor<64xu32>, tensor<64xi32>) {
  %0 = tensor.idiv %a, %b : tensor<64xi32>
  %1 = tensor.mod %a, %b : tensor<64xi32>
  %2 = tensor.shl %a, %b : tensor<64xi32>
  %3 = tensor.shr %a, %b : tensor<64xi32>
  %4 = tensor.idiv %c, %c : tensor<64xi8>
  %e = tensor.add %c, %c : tensor<64xi8>
  %5 = tensor.mul %e, %c : tensor<64xi8>
  %6 = tensor.mod %d, %d : tensor<64xu32>
  %7 = tensor.shr %d, %d : tensor<64xu32>
  %k = tensor.const 3 : tensor<64xi32>
  %8 = tensor.idiv %a, %k : tensor<64xi32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<64xi32>, tensor<64xi32>, tensor<64xi32>, tensor<64xi32>, tensor<64xi8>, tensor<64xi8>, tensor<64xu32>, tensor<64xu32>, tensor<64xi32>
}""", None, [('i32', (64,)), ('i32', (64,)), ('i8', (64,)), ('u32', (64,))]),
  'where': ("""func.func @w(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %c = tensor.cmplt %a, %b : tensor<3x4xf32> -> tensor<3x4xi1>
  %n = tensor.neg %b : tensor<3x4xf32>
  %0 = tensor.where %c, %a, %n : tensor<3x4xf32>
  %1 = tensor.permute %0 [1, 0] : tensor<3x4xf32> -> tensor<4x3xf32>
  %2 = tensor.contiguous %1 : tensor<4x3xf32>
  %3 = tensor.log2 %2 : tensor<4x3xf32>
  %4 = tensor.sin %3 : tensor<4x3xf32>
  %5 = tensor.reshape %4 : tensor<4x3xf32> -> tensor<3x4xf32>
  func.return %5 : tensor<3x4xf32>
}""", None, [('f32', (3, 4)), ('f32', (3, 4))]),
  # scans: along rows, along one long axis (split in chunks on every target: a reduce of each, an exclusive scan of
  # the totals, each chunk's scan from its offset), with an init, exclusive, of ints
  'scan': ("""func.func @scan(%a: tensor<5x300xf32>, %b: tensor<20000xf32>, %j: tensor<20000xi32>, %i: tensor<7x5xi32>, %n: tensor<1x5xi32>) -> (tensor<5x300xf32>, tensor<20000xi32>, tensor<20000xf32>, tensor<7x5xi32>, tensor<7x5xi32>, tensor<5x300xf32>, tensor<5x300xf32>) {
  %e = tensor.exp2 %a : tensor<5x300xf32>
  %0 = tensor.scan add %e 1 : tensor<5x300xf32>
  %1 = tensor.scan add %j 0 : tensor<20000xi32>
  %2 = tensor.scan max %b 0 : tensor<20000xf32>
  %3 = tensor.scan mul %i 0 (%n) : tensor<7x5xi32>
  %4 = tensor.scan add %i 0 {exclusive = true} : tensor<7x5xi32>
  %5 = tensor.scan max %a 1 {exclusive = true} : tensor<5x300xf32>
  %6 = tensor.scan logaddexp %a 1 : tensor<5x300xf32>
  func.return %0, %1, %2, %3, %4, %5, %6 : tensor<5x300xf32>, tensor<20000xi32>, tensor<20000xf32>, tensor<7x5xi32>, tensor<7x5xi32>, tensor<5x300xf32>, tensor<5x300xf32>
}""", lambda a, b, j, i, n: (np.cumsum(np.exp2(a.astype(np.float64)), 1), np.cumsum(j), np.maximum.accumulate(b), n * np.cumprod(i, 0),
                             np.cumsum(i, 0) - i, np.concatenate([np.full((5, 1), -np.inf), np.maximum.accumulate(a, 1)[:, :-1]], 1),
                             np.logaddexp.accumulate(a.astype(np.float64), 1)),
           [('f32', (5, 300)), ('f32', (20000,)), ('i32', (20000,)), ('i32', (7, 5)), ('i32', (1, 5))]),
}


def inputs_for(name, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for dt, shape in TENSOR[name][2]:
    d = D.get(dt)
    if d.is_int:
      lo, hi = D.min_max(d)
      x = rng.integers(max(lo, -9), min(hi, 9), shape, endpoint=True).astype(d.np)
      if name == 'intdiv':  # the holes: zero divisors, INT_MIN / -1, shifts by >= the width and negative
        edge = [0, -1, 1, 31, 32, 33, -5, 7, lo, hi, 2, 100]
        x.reshape(-1)[:len(edge)] = np.array(edge, dtype=object).astype(np.int64).astype(d.np)
        x = np.roll(x, seed)
    else:
      x = (rng.standard_normal(shape) * 4).astype(d.np)
      if name == 'casts': x.reshape(-1)[:6] = [0.0, -0.0, 2.5, -3.75, 127.9, -128.5]
      if name == 'f8': x.reshape(-1)[:10] = np.roll([np.inf, -np.inf, np.nan, 500.0, -6e4, 1e6, 2.0 ** -9, 3 * 2.0 ** -10, -2.0 ** -17, 0.0], len(out))
    out.append(x)
  return out


_compiled = {}
def compiled(name, dev):
  if (name, dev) not in _compiled: _compiled[name, dev] = tgc.compile(TENSOR[name][0], device=dev)
  return _compiled[name, dev]

def exact(r): return r.dtype.kind in 'iub' or r.dtype == np.uint16


@pytest.mark.parametrize('dev', ['C', 'OPENCL'])
@pytest.mark.parametrize('name', list(TENSOR))
def test_tensor_programs(name, dev):
  ins = inputs_for(name)
  got = compiled(name, dev)(*ins)
  ref = compiled(name, 'INTERP')(*ins)
  for g, r in zip(got, ref):
    assert g.dtype == r.dtype and g.shape == r.shape
    # integers agree bit for bit; floats summed in another order (each target's kernel-opt picks its own tiles)
    # agree to rounding, except where no reduction is involved
    if exact(r) or name not in ('softmax', 'where', 'halfmath', 'matmul', 'dot', 'reduce', 'scan'): np.testing.assert_array_equal(g, r, err_msg=f"{name} on {dev}")
    else: np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=2e-6 if r.dtype != np.float16 else 1e-3, err_msg=f"{name} on {dev}")
  if TENSOR[name][1] is not None:
    for g, want in zip(got, TENSOR[name][1](*ins)):
      np.testing.assert_allclose(g, np.asarray(want, g.dtype).reshape(g.shape), rtol=1e-5, atol=1e-6)


# ---- hand-written uop IR: vectors, shared memory + barrier, if/endif, gated loads and stores ----
UOP = {
  'masked': ("""uop.func @E_3() attributes {global_size = [3]} {
  %0 = uop.define_global 0 {size = 24} : !uop.ptr<f32>
  %1 = uop.define_global 1 {size = 20} : !uop.ptr<f32>
  %2 = uop.define_global 2 {size = 3} : !uop.ptr<i32>
  %3 = uop.define_global 3 {size = 20} : !uop.ptr<f32>
  %g = uop.special gidx0 3 : i32
  %c8 = uop.const 8 : i32
  %n = uop.const 20 : i32
  %base = uop.mul %g, %c8 : i32
  %k0 = uop.const 0 : i32
  %i0 = uop.add %base, %k0 : i32
  %g0 = uop.cmplt %i0, %n : i32 -> i1
  %k1 = uop.const 1 : i32
  %i1 = uop.add %base, %k1 : i32
  %g1 = uop.cmplt %i1, %n : i32 -> i1
  %k2 = uop.const 2 : i32
  %i2 = uop.add %base, %k2 : i32
  %g2 = uop.cmplt %i2, %n : i32 -> i1
  %k3 = uop.const 3 : i32
  %i3 = uop.add %base, %k3 : i32
  %g3 = uop.cmplt %i3, %n : i32 -> i1
  %k4 = uop.const 4 : i32
  %i4 = uop.add %base, %k4 : i32
  %g4 = uop.cmplt %i4, %n : i32 -> i1
  %k5 = uop.const 5 : i32
  %i5 = uop.add %base, %k5 : i32
  %g5 = uop.cmplt %i5, %n : i32 -> i1
  %k6 = uop.const 6 : i32
  %i6 = uop.add %base, %k6 : i32
  %g6 = uop.cmplt %i6, %n : i32 -> i1
  %k7 = uop.const 7 : i32
  %i7 = uop.add %base, %k7 : i32
  %g7 = uop.cmplt %i7, %n : i32 -> i1
  %m = uop.vectorize %g0, %g1, %g2, %g3, %g4, %g5, %g6, %g7 : vec<8xi1>
  %a = uop.const -1.0 : f32
  %alt = uop.vectorize %a, %a, %a, %a, %a, %a, %a, %a : vec<8xf32>
  %v = uop.load %1[%base], %m, %alt : vec<8xf32>
  %t = uop.const true : i1
  %f = uop.const false : i1
  %odd = uop.vectorize %f, %t, %f, %t, %f, %t, %f, %t : vec<8xi1>
  %off = uop.load %2[%g] : i32
  %w = uop.load %1[%off], %odd, %v : vec<8xf32>
  uop.store %0[%base], %w, %m : vec<8xf32>
  %x = uop.add %v, %w : vec<8xf32>
  %c4 = uop.const 4 : i32
  %o2 = uop.sub %base, %c4 : i32
  uop.store %3[%o2], %x, %odd : vec<8xf32>
}""", [('f32', 24), ('f32', 20), ('i32', 3), ('f32', 20)]),
  'vec': ("""uop.func @E_2() attributes {global_size = [2]} {
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
  %m = uop.max %q, %b : vec<4xf32>
  uop.store %0[%i], %m : vec<4xf32>
}""", [('f32', 8), ('f32', 8), ('f32', 8)]),
  'vec_bf16': ("""uop.func @E_1() attributes {global_size = [1]} {
  %0 = uop.define_global 0 : !uop.ptr<bf16>
  %1 = uop.define_global 1 : !uop.ptr<i1>
  %2 = uop.define_global 2 : !uop.ptr<bf16>
  %c0 = uop.const 0 : i32
  %m = uop.load %1[%c0] : vec<4xi1>
  %a = uop.load %2[%c0] : vec<4xbf16>
  %b = uop.add %a, %a : vec<4xbf16>
  %c = uop.where %m, %b, %a : vec<4xbf16>
  uop.store %0[%c0], %c : vec<4xbf16>
}""", [('bf16', 4), ('i1', 4), ('bf16', 4)]),
  'vec_f8': ("""uop.func @E_1() attributes {global_size = [1]} {
  %0 = uop.define_global 0 : !uop.ptr<f8e4m3>
  %1 = uop.define_global 1 : !uop.ptr<i1>
  %2 = uop.define_global 2 : !uop.ptr<f8e4m3>
  %3 = uop.define_global 3 : !uop.ptr<f8e5m2>
  %c0 = uop.const 0 : i32
  %m = uop.load %1[%c0] : vec<4xi1>
  %a = uop.load %2[%c0] : vec<4xf8e4m3>
  %k = uop.const 0x7e : vec<4xf8e4m3>
  %b = uop.add %a, %k : vec<4xf8e4m3>
  %c = uop.where %m, %b, %a : vec<4xf8e4m3>
  uop.store %0[%c0], %c : vec<4xf8e4m3>
  %d = uop.cast %c : vec<4xf8e4m3> -> vec<4xf8e5m2>
  %e = uop.sqrt %d : vec<4xf8e5m2>
  uop.store %3[%c0], %e : vec<4xf8e5m2>
}""", [('f8e4m3', 4), ('i1', 4), ('f8e4m3', 4), ('f8e5m2', 4)]),
  'vec_half8': ("""uop.func @E_2_8() attributes {global_size = [2]} {
  %0 = uop.define_global 0 : !uop.ptr<f16>
  %1 = uop.define_global 1 : !uop.ptr<f16>
  %g = uop.special gidx0 2 : i32
  %c8 = uop.const 8 : i32
  %i = uop.mul %g, %c8 : i32
  %a = uop.load %1[%i] : vec<8xf16>
  %h = uop.const 0.5 : vec<8xf16>
  %b = uop.mul %a, %h : vec<8xf16>
  %e = uop.exp2 %b : vec<8xf16>
  uop.store %0[%i], %e : vec<8xf16>
}""", [('f16', 16), ('f16', 16)]),
  'local': ("""uop.func @r_2_4() attributes {global_size = [2], local_size = [4]} {
  %0 = uop.define_global 0 : !uop.ptr<i32>
  %1 = uop.define_global 1 : !uop.ptr<i32>
  %t = uop.define_local temp0 4 : !uop.ptr<i32, local>
  %g = uop.special gidx0 2 : i32
  %l = uop.special lidx0 4 : i32
  %c4 = uop.const 4 : i32
  %c0 = uop.const 0 : i32
  %b = uop.mul %g, %c4 : i32
  %i = uop.add %b, %l : i32
  %v = uop.load %1[%i] : i32
  uop.store %t[%l], %v : i32
  uop.barrier
  %z = uop.cmpeq %l, %c0 : i32 -> i1
  uop.if %z
  %acc = uop.define_acc %c0 (%r) : i32
  %r = uop.range %c0, %c4 : i32
  %x = uop.load %t[%r] : i32
  %s = uop.add %acc, %x : i32
  %p = uop.phi %acc, %s : i32
  uop.endrange %r
  uop.store %0[%g], %p : i32
  uop.endif
}""", [('i32', 2), ('i32', 8)]),
  'pad_gated': ("""uop.func @E_8() attributes {global_size = [8]} {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %2 = uop.define_global 2 : !uop.ptr<i16>
  %g = uop.special gidx0 8 : i32
  %c2 = uop.const 2 : i32
  %c6 = uop.const 6 : i32
  %c0 = uop.const 0 : i32
  %lo = uop.cmplt %g, %c2 : i32 -> i1
  %t = uop.const true : i1
  %ge = uop.xor %lo, %t : i1
  %lt = uop.cmplt %g, %c6 : i32 -> i1
  %in = uop.and %ge, %lt : i1
  %i = uop.sub %g, %c2 : i32
  %alt = uop.const -1.0 : f32
  %v = uop.load %1[%i], %in, %alt : f32
  uop.store %0[%g], %v : f32
  %m = uop.mod %g, %c2 : i32
  %even = uop.cmpeq %m, %c0 : i32 -> i1
  %w = uop.cast %g : i32 -> i16
  uop.store %2[%g], %w, %even : i16
}""", [('f32', 8), ('f32', 4), ('i16', 8)]),
  'if_bool': ("""uop.func @E_6() attributes {global_size = [3, 2]} {
  %0 = uop.define_global 0 : !uop.ptr<u8>
  %1 = uop.define_global 1 : !uop.ptr<i1>
  %g0 = uop.special gidx0 3 : i32
  %g1 = uop.special gidx1 2 : i32
  %c2 = uop.const 2 : i32
  %r = uop.mul %g0, %c2 : i32
  %i = uop.add %r, %g1 : i32
  %c = uop.load %1[%i] : i1
  uop.if %c
  %v = uop.const 200 : u8
  %w = uop.cast %i : i32 -> u8
  %x = uop.add %v, %w : u8
  %y = uop.add %x, %v : u8
  uop.store %0[%i], %y : u8
  uop.endif
}""", [('u8', 6), ('i1', 6)]),
  'bitcast': ("""uop.func @E_4() attributes {global_size = [4]} {
  %0 = uop.define_global 0 : !uop.ptr<i32>
  %1 = uop.define_global 1 : !uop.ptr<f32>
  %2 = uop.define_global 2 : !uop.ptr<u16>
  %3 = uop.define_global 3 : !uop.ptr<f16>
  %g = uop.special gidx0 4 : i32
  %a = uop.load %1[%g] : f32
  %b = uop.bitcast %a : f32 -> i32
  %n = uop.const nan : f32
  %inf = uop.const -inf : f32
  %c = uop.cmpne %a, %n : f32 -> i1
  %d = uop.where %c, %inf, %a : f32
  %e = uop.bitcast %d : f32 -> i32
  %f = uop.xor %b, %e : i32
  uop.store %0[%g], %f : i32
  %h = uop.load %3[%g] : f16
  %k = uop.bitcast %h : f16 -> u16
  uop.store %2[%g], %k : u16
}""", [('i32', 4), ('f32', 4), ('u16', 4), ('f16', 4)]),
}


def uop_inputs(name, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for i, (dt, n) in enumerate(UOP[name][1]):
    d = D.get(dt)
    if i == 0: x = np.zeros(n, d.np) + (99 if d.is_int else 0)
    elif d.is_bool: x = rng.integers(0, 2, n).astype(bool)
    elif d.is_int: x = rng.integers(-50, 50, n).astype(d.np)
    else:
      x = (rng.standard_normal(n) * 3).astype(np.float32)
      x = D.to_storage(x, d)
    out.append(x)
  return out

def uop_fn(name): return I.parse(UOP[name][0]).functions('uop.func')[0]

def run_uop(name, dev, ins):
  bufs = [b.copy() for b in ins]
  get_device(dev).compile(uop_fn(name))(*bufs)
  return bufs

def uop_reference(name, ins):
  """The interpreter's answer; it has no shared memory, so the 'local' kernel's sum is numpy's."""
  if name == 'local': return [ins[1].reshape(2, 4).sum(1).astype(np.int32)] + [b.copy() for b in ins[1:]]
  return run_uop(name, 'INTERP', ins)


@pytest.mark.parametrize('dev', ['C', 'OPENCL'])
@pytest.mark.parametrize('name', list(UOP))
def test_uop_programs(name, dev):
  if dev == 'C' and name == 'local': pytest.skip("the c target runs a work-group's threads one after another: no barrier across threads")
  ins = uop_inputs(name)
  got, ref = run_uop(name, dev, ins), uop_reference(name, ins)
  for g, r in zip(got, ref):
    if g.dtype == np.float16: np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-3)
    elif g.dtype.kind == 'f': np.testing.assert_allclose(g, r, rtol=1e-6)
    else: np.testing.assert_array_equal(g, r, err_msg=f"{name} on {dev}")


@pytest.mark.parametrize('dev', ['CPU', 'INTERP', 'C', 'OPENCL'])
def test_masked_vector_accesses(dev):
  """A vec<8> load and store under a vec<8xi1> gate touch only the lanes whose gate is true; lanes outside the
  buffer (a data-dependent index, an index below 0) act as gated off, each on its own."""
  ins = uop_inputs('masked')
  ins[2] = np.array([3, -5, 15], np.int32)  # (thread 1's odd lanes read -4..2, thread 2's 16..22: some outside)
  out, x, off, side = run_uop('masked', dev, ins)
  src = ins[1]
  ref0, ref3 = np.zeros(24, np.float32), ins[3].copy()
  for g in range(3):
    v = np.array([src[8 * g + l] if 8 * g + l < 20 else -1.0 for l in range(8)], np.float32)
    w = np.array([src[off[g] + l] if l % 2 and 0 <= off[g] + l < 20 else v[l] for l in range(8)], np.float32)
    for l in range(8):
      if 8 * g + l < 20: ref0[8 * g + l] = w[l]
      if l % 2 and 0 <= 8 * g - 4 + l < 20: ref3[8 * g - 4 + l] = v[l] + w[l]
  np.testing.assert_array_equal(out, ref0)
  np.testing.assert_array_equal(side, ref3)


def test_c_rejects_shared_memory_across_threads():
  with pytest.raises(tgc.TgcError, match='c target'): get_device('C').compile(uop_fn('local'))


def test_c_split_launch():
  prg = get_device('C').compile(uop_fn('pad_gated'))
  out, a, s = np.zeros(8, np.float32), np.arange(1, 5, dtype=np.float32), np.full(8, 7, np.int16)
  prg(out, a, s, start=2, end=4)
  np.testing.assert_array_equal(out, [0, 0, 1, 2, 0, 0, 0, 0])
  with pytest.raises(tgc.TgcError): prg(out, a, s, start=3, end=9)


def test_opencl_platform_choice(monkeypatch):
  from tgc.runtime.opencl import pick_platform
  import pyopencl as cl
  assert 'portable' in pick_platform(cl).name.lower() or 'pocl' in pick_platform(cl).name.lower()
  monkeypatch.setenv('OPENCL_PLATFORM', 'no-such-platform')
  with pytest.raises(tgc.TgcError, match='OPENCL_PLATFORM'): pick_platform(cl)



def test_opencl_kernels_retrieved_once():
  """Compiling the same program again reuses its cl.Kernel: pyopencl warns RepeatedKernelRetrieval when a program's
  kernel is fetched by attribute twice."""
  import warnings
  from tgc.compiler import compile_module
  try: dev = get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    for _ in range(3):
      fn = compile_module(I.parse(TENSOR['add44'][0]), 'OPENCL')
      np.testing.assert_array_equal(fn(a, a)[0], np.maximum((a + a) * np.float32(2.5), a))
  assert not [w for w in caught if 'RepeatedKernelRetrieval' in type(w.message).__name__ or 'retrieved more than once' in str(w.message)]
  src, name = next(iter(dev._kernels))
  assert dev.kernel(src, name) is dev.kernel(src, name)


def test_opencl_unavailable_says_how_to_install(monkeypatch):
  import sys
  from tgc.runtime.opencl import OpenCLDevice
  monkeypatch.setitem(sys.modules, 'pyopencl', None)  # import pyopencl raises ImportError
  with pytest.raises(tgc.TgcError, match=r"OPENCL device unavailable: pyopencl is not installed .*pip install 'pyopencl\[pocl\]'"): OpenCLDevice()

@pytest.mark.parametrize('processor', ['gpu', 'cpu'])
def test_opencl_tiles_for_either_processor(processor):
  """An OpenCL device on a CPU (PoCL) gets kernel-opt's CPU tiles; a GPU gets work-group sharing (a matvec's GROUP)
  and 4x4 tiles. Both lowerings of the same programs run on this device and match numpy."""
  from tgc.tensor import _build_module
  from tgc.compiler import lower, compile_module
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(3)
  a, x, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)
  for build, ref, opt in [(lambda A, X, B: A @ X, a.astype(np.float64) @ x, 'group'), (lambda A, X, B: A @ B, a.astype(np.float64) @ b, 'upcast')]:
    ts = [tgc.Tensor(v, device='OPENCL') for v in (a, x, b)]
    m, leaves = _build_module([build(*ts).node], 'f')
    lower(m, 'opencl', processor=processor)
    opts = [o.name for f in m.functions('uop.func') for o in f.attrs.get('opts', ())]
    assert opt in opts or processor == 'cpu', opts
    args = [next(v for t, v in zip(ts, (a, x, b)) if t.node is l) for l in leaves]
    (out,) = compile_module(m, 'OPENCL')(*args)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('case', ['rowsum', 'rowmax', 'shortrows', 'softmax', 'bigsum', 'colsum', 'add2d', 'matmul', 'batched', 'transposed', 'epilogue',
                                  'odd', 'odd_staged', 'cumsum_rows', 'cummax_rows', 'logcumsumexp_rows', 'cumsum_long', 'cumsum_odd'])
def test_opencl_gpu_reductions(case):
  """GPU lowerings of reductions (GROUP along contiguous rows, partials combined as a tree in shared memory, several
  short rows per work-group, the split of a big sum) and of elementwise work-groups, run on this OpenCL device
  against numpy."""
  from tgc.tensor import _build_module
  from tgc.compiler import lower, compile_module
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(4)
  shape, f, ref, opt = {
    'rowsum': ((6, 1024), lambda t: t.sum(axis=1), lambda a: a.sum(axis=1), 'group'),
    'rowmax': ((3, 4096), lambda t: t.max(axis=1), lambda a: a.max(axis=1), 'group'),
    'shortrows': ((24, 128), lambda t: t.sum(axis=1), lambda a: a.sum(axis=1), 'local'),
    'softmax': ((5, 512), lambda t: t.softmax(axis=1), lambda a: np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True), 'group'),
    'bigsum': ((1 << 16,), lambda t: t.sum(), lambda a: a.sum(), 'group'),
    'colsum': ((256, 48), lambda t: t.sum(axis=0), lambda a: a.sum(axis=0), None),
    'add2d': ((64, 96), lambda t: t + t * 2, lambda a: a + a * 2, 'local'),
    # SMEM: both operands staged through shared memory (float4 copies, A's k lanes read 4 at a time)
    'matmul': ((64, 96), lambda t: t @ (t.T * 0.5), lambda a: a @ (a.T * 0.5), 'smem'),
    'batched': ((4, 64, 48), lambda t: t @ t.transpose(1, 2), lambda a: a @ a.transpose(0, 2, 1), 'smem'),
    'transposed': ((64, 128), lambda t: t.T @ t[:, :64], lambda a: a.T @ a[:, :64], 'smem'),  # A's tile: rows fastest
    'epilogue': ((64, 96), lambda t: ((t * 2 + 1) @ t.T[:, :32] * 0.5).relu(), lambda a: np.maximum((a * 2 + 1) @ a.T[:, :32] * 0.5, 0), 'smem'),
    # sizes no tile divides: m, n and k padded (PADTO; the padding masked on loads, never stored), then tiled
    'odd': ((100, 300), lambda t: t @ t.T[:, :70], lambda a: a @ a.T[:, :70], 'padto'),
    'odd_staged': ((127, 61), lambda t: t @ t.T, lambda a: a @ a.T, 'padto'),
    # scans along rows a work-group each (GROUP: its threads' vectors side by side, their totals met in shared memory
    # every step, the steps' totals carried), and one long axis in chunks a work-group each
    'cumsum_rows': ((6, 2048), lambda t: t.cumsum(1), lambda a: a.cumsum(1), 'group'),
    'cummax_rows': ((5, 512), lambda t: t.cummax(1)[0], lambda a: np.maximum.accumulate(a, 1), 'group'),
    'logcumsumexp_rows': ((3, 1024), lambda t: t.logcumsumexp(1), lambda a: np.logaddexp.accumulate(a, 1), 'group'),
    'cumsum_long': ((1 << 17,), lambda t: t.cumsum(0), lambda a: a.cumsum(0), 'group'),
    'cumsum_odd': ((3, 100000), lambda t: t.cumsum(1), lambda a: a.cumsum(1), None),
  }[case]
  a = rng.standard_normal(shape).astype(np.float32)
  m, leaves = _build_module([f(tgc.Tensor(a, device='OPENCL')).node], 'f')
  lower(m, 'opencl', processor='gpu')
  opts = [o.name for fn in m.functions('uop.func') for o in fn.attrs.get('opts', ())]
  assert opt is None or opt in opts, opts
  (out,) = compile_module(m, 'OPENCL')(a)
  np.testing.assert_allclose(out.astype(np.float64), ref(a.astype(np.float64)), rtol=1e-4, atol=1e-4)


def lower_staged(m, target: str, stages: int, processor: str = 'auto', warpgroup: bool = False):
  """lower-to-uop with kernel-opt's heuristic choice, except that every SMEM tile gets a ring of `stages` (a warp's
  tensor cores unless `warpgroup`)."""
  from tgc.passes.manager import PassManager, parse_pipeline
  from tgc.passes.pipelines import lower_to_uop_steps
  from tgc.passes.schedule import Opt
  steps = lower_to_uop_steps(target, False, processor=processor, warpgroup=warpgroup)
  cut = next(i for i, s in enumerate(steps) if s.startswith('linearize'))
  PassManager(parse_pipeline(','.join(steps[:cut]))).run(m)
  for k in m.functions('kernel.func'):
    k.attrs['opts'] = tuple(Opt('smem', o.fields['axis'], stages) if o.name == 'smem' else o for o in k.attrs.get('opts', ()))
  PassManager(parse_pipeline(','.join(steps[cut:]))).run(m)
  return m


@pytest.mark.parametrize('stages', [2, 3, 4])
@pytest.mark.parametrize('case', ['matmul', 'short_k', 'epilogue', 'batched'])
def test_opencl_smem_stages(case, stages):
  """SMEM with a ring of tiles (the copies of step r + stages - 1 go out while step r computes; one barrier a step):
  OpenCL copies synchronously into the ring, so the ring's slots, its first steps (fewer steps than stages
  included) and the guard on the last ones run here against numpy."""
  from tgc.tensor import _build_module
  from tgc.compiler import compile_module
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(6)
  (sa, sb), f = {'matmul': (((64, 96), (96, 64)), lambda a, b: a @ b), 'short_k': (((64, 16), (16, 64)), lambda a, b: a @ b),
                 'epilogue': (((64, 96), (96, 32)), lambda a, b: ((a * 2 + 1) @ b * 0.5).relu()),
                 'batched': (((4, 64, 48), (4, 48, 64)), lambda a, b: a @ b)}[case]
  a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
  ta, tb = tgc.Tensor(a, device='OPENCL'), tgc.Tensor(b, device='OPENCL')
  m, leaves = _build_module([f(ta, tb).node], 'f')
  lower_staged(m, 'opencl', stages, 'gpu')
  # (the epilogue case's computed operand, a * 2 + 1, is a kernel of its own on a GPU: the product's tiles read plain loads)
  fns = m.functions('uop.func')
  assert len(fns) == (2 if case == 'epilogue' else 1)
  fn = fns[-1]
  ops, depth, in_loop = [op.name for op in fn.body.ops], 0, []
  for o in ops:
    depth += (o == 'uop.range') - (o == 'uop.endrange')
    if depth and o == 'uop.barrier': in_loop.append(o)
  assert len(in_loop) == 1 and 'uop.define_local' in ops and 'uop.copy_async' not in ops, ops
  args = [a if l is ta.node else b for l in leaves]
  (out,) = compile_module(m, 'OPENCL')(*args)
  want = f(a.astype(np.float64), b.astype(np.float64)) if case != 'epilogue' else np.maximum((a * 2 + 1.0) @ b * 0.5, 0)
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('stages', [0, 2, 3])
@pytest.mark.parametrize('opts', [(('local', 3, 4), ('local', 1, 4)), (('upcast', 2, 2), ('local', 4, 4), ('local', 1, 4))])
def test_opencl_smem_conv(opts, stages):
  """SMEM on a padded conv (three reduce loops: channels, the window's rows and columns): the input's tile is copied
  element by element where its mask cuts a row (a vector copy gated by its first element's mask lost the rest), and
  a ring of stages runs the three loops as one range whose step decomposes into each axis's index."""
  from tgc.tensor import _build_module
  from tgc.compiler import compile_module
  from tgc.passes.manager import PassManager, parse_pipeline
  from tgc.passes.pipelines import lower_to_uop_steps
  from tgc.passes.schedule import Opt
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((2, 8, 12, 12)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
  tx, tw = tgc.Tensor(x, device='OPENCL'), tgc.Tensor(w, device='OPENCL')
  m, leaves = _build_module([tx.conv2d(tw, padding=1).node], 'f')
  steps = lower_to_uop_steps('opencl', False, processor='gpu')
  cut = next(i for i, s in enumerate(steps) if s.startswith('linearize'))
  PassManager(parse_pipeline(','.join(steps[:cut]))).run(m)
  (k,) = [k for k in m.functions('kernel.func') if k.sym_name.startswith('r_')]
  k.attrs['opts'] = tuple(Opt(*o) for o in opts) + (Opt('smem', 0, stages), Opt('smem', 1, stages))
  PassManager(parse_pipeline(','.join(steps[cut:]))).run(m)
  (fn,) = [f for f in m.functions('uop.func') if f.sym_name == k.sym_name]
  names = [o.name for o in fn.body.ops]
  assert 'uop.define_local' in names and names.count('uop.range') == (1 if stages else 3), names
  (out,) = compile_module(m, 'OPENCL')(*[x if l is tx.node else w for l in leaves])
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(out, np.einsum('bchwij,ocij->bohw', win, w.astype(np.float64)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('case', ['nchw_nhwc', 'nhwc_nchw', 'pad_nhwc', 'pad_odd', 'matrix'])
def test_opencl_gpu_transpose(case):
  """A GPU layout change takes a square register tile a thread: vector loads along the load's contiguous axis and
  vector stores along the store's (linearize gathers each store vector from the lane combinations), the padded
  conv input's row padded up to the tile; lowered for a GPU work-group and run on OpenCL against numpy."""
  from tgc.tensor import _build_module
  from tgc.compiler import compile_module
  from tgc.passes.manager import PassManager, parse_pipeline
  from tgc.passes.pipelines import lower_to_uop_steps
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(8)
  shape, f, ref = {'nchw_nhwc': ((2, 16, 8, 24), lambda t: t.permute(0, 2, 3, 1), lambda a: a.transpose(0, 2, 3, 1)),
                   'nhwc_nchw': ((2, 8, 24, 16), lambda t: t.permute(0, 3, 1, 2), lambda a: a.transpose(0, 3, 1, 2)),
                   'pad_nhwc': ((2, 16, 14, 14), lambda t: t.pad(((0, 0), (0, 0), (1, 1), (1, 1))).permute(0, 2, 3, 1),
                                lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1))).transpose(0, 2, 3, 1)),
                   'pad_odd': ((2, 8, 20, 20), lambda t: t.pad(((0, 0), (0, 0), (1, 1), (1, 1))).permute(0, 2, 3, 1),  # rows of 22: padded to 24
                               lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1))).transpose(0, 2, 3, 1)),
                   'matrix': ((40, 64), lambda t: t.T, lambda a: a.T)}[case]
  a = rng.standard_normal(shape).astype(np.float32)
  ta = tgc.Tensor(a, device='OPENCL')
  m, _ = _build_module([f(ta).contiguous().node], 'f')
  PassManager(parse_pipeline(','.join(lower_to_uop_steps('opencl', False, processor='gpu')))).run(m)
  (fn,) = m.functions('uop.func')
  stores = [o for o in fn.body.ops if o.name == 'uop.store']
  assert stores and all(isinstance(o.operands[2].type, I.VecType) for o in stores), [o.operands[2].type for o in stores]
  (out,) = compile_module(m, 'OPENCL')(a)
  np.testing.assert_array_equal(out, ref(a))


def test_tensor_core_row_padding():
  """On a target with tensor cores, tensor-decompose gives an f16 matmul whose rows are not a multiple of 8 bytes (k or
  n odd) copies of its operands with rows padded to 16 bytes and cuts the result's padding off: the module decomposed
  for cuda, then run on the CPU, still equals numpy's; rows of a multiple of 8 bytes (n = 700) get no copies, and the
  tensor level (what the front end builds) is the same for every device."""
  from tgc.compiler import compile_module
  from tgc.passes.manager import PassManager
  from tgc.tensor import _build_module
  rng = np.random.default_rng(9)
  for sa, sb, pads in (((20, 37), (37, 30), 2), ((2, 5, 9), (2, 9, 3), 2), ((8, 16), (16, 700), 0)):
    a, b = rng.standard_normal(sa).astype(np.float16), rng.standard_normal(sb).astype(np.float16)
    built = [str(_build_module([(tgc.Tensor.empty(*sa, dtype='float16', device=d) @ tgc.Tensor.empty(*sb, dtype='float16', device=d)).node], 'mm')[0])
             for d in ('CUDA', 'CPU')]
    assert built[0] == built[1] and 'tensor.pad' not in built[0]
    mod, _ = _build_module([(tgc.Tensor(a) @ tgc.Tensor(b)).node], 'mm')
    PassManager.parse('tensor-decompose{target=cuda}').run(mod)
    assert str(mod).count('tensor.pad') == pads, str(mod)
    (out,) = compile_module(mod, 'CPU')(a, b)
    assert out.shape == sa[:-1] + sb[-1:]
    np.testing.assert_allclose(out.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=2e-2)


TRUNC_NAN = """kernel.func @k(%data0: !kernel.buf<1xf64>, %data1: !kernel.buf<96xf64>) {
  %0 = kernel.load %data1 [view(shape = [96], strides = [1], offset = 0)] : f64
  %1 = kernel.const 0.0 : f64
  %2 = kernel.mod %0, %1 : f64
  %3 = kernel.trunc %2 : f64
  %4 = kernel.reduce add %3 [0] : f64
  kernel.store %data0 [view(shape = [1], strides = [1], offset = 0)], %4 : f64
}
func.func @main(%a: tensor<96xf64>) -> tensor<1xf64> {
  %r = kernel.alloc : tensor<1xf64>
  kernel.launch @k(%r, %a)
  func.return %r : tensor<1xf64>
}"""


@pytest.mark.parametrize('device', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_trunc_passes_nan_through_a_reduce(device):
  """trunc(x mod 0) is NaN, and a sum of NaNs is NaN on every device (PoCL's vectorised trunc returned finite values
  for NaN in such a loop: the OpenCL source guards it; fuzz.ir found the disagreement)."""
  try: get_device(device)
  except tgc.TgcError as e: pytest.skip(str(e))
  (out,) = tgc.compile(TRUNC_NAN, device=device)(np.arange(96, dtype=np.float64))
  assert np.isnan(out).all()



PARTIAL = """uop.func @part() attributes {global_size = [2]} {
  %g0 = uop.define_global 0 : !uop.ptr<i32>
  %g1 = uop.define_global 1 : !uop.ptr<i32>
  %i = uop.special gidx0 2 : i32
  %c2 = uop.const 2 : i32
  %j = uop.mul %i, %c2 : i32
  %v = uop.load %g1[%i] : i32
  uop.store %g0[%j], %v : i32
}
uop.func @fill() attributes {global_size = [4]} {
  %g0 = uop.define_global 0 : !uop.ptr<i32>
  %i = uop.special gidx0 4 : i32
  %c = uop.const -7 : i32
  uop.store %g0[%i], %c : i32
}
func.func @garbage() -> tensor<4xi32> {
  %o = kernel.alloc : tensor<4xi32>
  kernel.launch @fill(%o)
  func.return %o : tensor<4xi32>
}
func.func @main(%a: tensor<2xi32>) -> tensor<4xi32> {
  %o = kernel.alloc : tensor<4xi32>
  kernel.launch @part(%o, %a)
  func.return %o : tensor<4xi32>
}
"""


@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_elements_a_kernel_leaves_read_zero(dev):
  """A hand-written kernel that stores every other element of its result: the rest read 0 on every device, not what
  the allocator's block held before (-7 here; OPENCL and INTERP disagreed: fuzz.ir seed 6007)."""
  garbage, fn = tgc.compile(PARTIAL, dev, entry='garbage'), tgc.compile(PARTIAL, dev, entry='main')
  # (a kernel that stores all of its result needs no zeros first)
  assert [k for k in garbage.kernels if k.startswith('zero')] == [] and [k for k in fn.kernels if k.startswith('zero')] == ['zero_i32_4']
  a = np.array([5, 6], np.int32)
  for _ in range(3):  # (a result's block goes back to the allocator, for the next result of its size)
    np.testing.assert_array_equal(garbage()[0], np.full(4, -7, np.int32))
    np.testing.assert_array_equal(fn(a)[0], np.array([5, 0, 6, 0], np.int32))


def _stores(body, n=8, gs=(4,)):
  return I.parse(f"uop.func @k() attributes {{global_size = {list(gs)}}} {{\n  %g = uop.define_global 0 : !uop.ptr<i32>\n"
                 f"  %s = uop.special gidx0 {gs[0]} : i32\n  %c0 = uop.const 0 : i32\n  %c1 = uop.const 1 : i32\n  %c2 = uop.const 2 : i32\n"
                 f"  %c4 = uop.const 4 : i32\n  %c7 = uop.const 7 : i32\n{body}\n}}\n").functions('uop.func')[0]

@pytest.mark.parametrize('body,proven', [
  ("  %i = uop.mul %s, %c2 : i32\n  uop.store %g[%i], %c1 : i32\n  %j = uop.add %i, %c1 : i32\n  uop.store %g[%j], %c1 : i32", True),
  ("  %r = uop.range %c0, %c2 : i32\n  %i = uop.mul %r, %c4 : i32\n  %j = uop.add %i, %s : i32\n  uop.store %g[%j], %c1 : i32\n  uop.endrange %r", True),
  ("  %i = uop.sub %c7, %s : i32\n  uop.store %g[%i], %c1 : i32\n  %j = uop.sub %c4, %s : i32\n  %k = uop.sub %j, %c1 : i32\n  uop.store %g[%k], %c1 : i32", True),
  ("  %i = uop.mul %s, %c2 : i32\n  %v = uop.vectorize %c1, %c1 : vec<2xi32>\n  uop.store %g[%i], %v : vec<2xi32>", True),
  ("  %i = uop.mul %s, %c2 : i32\n  uop.store %g[%i], %c1 : i32", False),  # every other element
  ("  %i = uop.mul %s, %c2 : i32\n  uop.store %g[%i], %c1 : i32\n  %j = uop.add %i, %c1 : i32\n  %t = uop.cmplt %s, %c2 : i32 -> i1\n"
   "  uop.store %g[%j], %c1, %t : i32", False),  # half of the odd ones gated off
  ("  %r = uop.range %c0, %c0 : i32\n  %i = uop.mul %s, %c2 : i32\n  uop.store %g[%i], %c1 : i32\n  %j = uop.add %i, %c1 : i32\n"
   "  uop.store %g[%j], %c1 : i32\n  uop.endrange %r", False),  # in a loop that never runs
  ("  uop.store %g[%s], %c1 : i32\n  %j = uop.add %s, %c2 : i32\n  uop.store %g[%j], %c1 : i32", False),  # 0..5, twice some
])
def test_covered_stores(body, proven):
  """uop_bounds.covered proves that the stores of a kernel write every element of an 8-element buffer only when
  they do (the interpreter's answer: every element of a buffer of zeros stored 1)."""
  from tgc.dialects.uop_bounds import covered
  buf = np.zeros(8, np.int32)
  get_device('INTERP').compile(_stores(body))(buf)
  assert bool((buf == 1).all()) == proven
  assert covered(_stores(body), {0: 8}) == ({0} if proven else set())


EXP2_NAN = """kernel.func @k(%data0: !kernel.buf<2x1xDT>, %data1: !kernel.buf<2x2xDT>) {
  %0 = kernel.load %data1 [view(shape = [2, 2], strides = [2, 1], offset = 0)] : DT
  %1 = kernel.const -100.0 : DT
  %2 = kernel.sqrt %1 : DT
  %3 = kernel.add %2, %0 : DT
  %4 = kernel.reduce add %3 [1] : DT
  %5 = kernel.exp2 %4 : DT
  kernel.store %data0 [view(shape = [2, 1], strides = [1, 1], offset = 0)], %5 : DT
}
func.func @main(%a: tensor<2x2xDT>) -> tensor<2x1xDT> {
  %r = kernel.alloc : tensor<2x1xDT>
  kernel.launch @k(%r, %a)
  func.return %r : tensor<2x1xDT>
}"""


@pytest.mark.parametrize('dt', ['f32', 'f64'])
@pytest.mark.parametrize('device', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_exp2_of_a_known_nan_is_nan(device, dt):
  """exp2 of a sum of sqrt(-100) + x terms is NaN on every device (PoCL's exp2 returned an undefined value, a denormal
  or a finite number, for an argument its compiler could tell was NaN: the OpenCL source guards it; fuzz.ir found the
  disagreement)."""
  try: get_device(device)
  except tgc.TgcError as e: pytest.skip(str(e))
  a = np.arange(4, dtype=np.float32 if dt == 'f32' else np.float64).reshape(2, 2)
  (out,) = tgc.compile(EXP2_NAN.replace('DT', dt), device=device)(a)
  assert out.shape == (2, 1) and np.isnan(out).all(), out


WIDE_VECTORS = """kernel.func @k(%data0: !kernel.buf<64xDT>, %data1: !kernel.buf<64xDT>) attributes {opts = [upcast(axis = 0, amt = AMT)]} {
  %0 = kernel.load %data1 [view(shape = [64], strides = [1], offset = 0)] : DT
  %1 = kernel.const THREE : DT
  %2 = kernel.mul %0, %1 : DT
  kernel.store %data0 [view(shape = [64], strides = [1], offset = 0)], %2 : DT
}
func.func @main(%a: tensor<64xDT>) -> tensor<64xDT> {
  %r = kernel.alloc : tensor<64xDT>
  kernel.launch @k(%r, %a)
  func.return %r : tensor<64xDT>
}"""


@pytest.mark.parametrize('dt,amt', [('f32', 8), ('f32', 16), ('f64', 4), ('f64', 8), ('f64', 16), ('i32', 16), ('i64', 8), ('u8', 16)])
@pytest.mark.parametrize('device', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_wide_vector_load_and_store(device, dt, amt):
  """A kernel upcast to 64- and 128-byte vectors (float16, double8, double16) loads and stores every lane on every
  device (PoCL without AVX-512 passes such vectors to vloadN/vstoreN by another ABI: vload16 of floats gave its low
  8 lanes; the OpenCL source moves them as halves of at most 32 bytes; fuzz.tensor found the disagreement)."""
  try: get_device(device)
  except tgc.TgcError as e: pytest.skip(str(e))
  npdt = {'f32': np.float32, 'f64': np.float64, 'i32': np.int32, 'i64': np.int64, 'u8': np.uint8}[dt]
  a = (np.arange(64) * 1.5 + 1).astype(npdt)
  (out,) = tgc.compile(WIDE_VECTORS.replace('DT', dt).replace('AMT', str(amt)).replace('THREE', '3.0' if dt[0] == 'f' else '3'), device=device)(a)
  np.testing.assert_array_equal(out, a * npdt(3))


@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_float_to_narrow_int_beyond_int64(dev):
  """A float cast to a narrow integer goes through int64 and wraps (numpy's); beyond int64's range, NaN and inf give
  0 on every device (a C conversion there is undefined: PoCL's vector code gave 43010 for a u16, CUDA saturates)."""
  from tgc.compiler import compile_module
  try: get_device(dev)
  except tgc.TgcError as e: pytest.skip(str(e))
  x = np.array([1e19, -1e19, 2.0**63, -2.0**63, np.nan, np.inf, -np.inf, 70000.7, -3.5, 1.8e19, 123.9, -40000.2, 5e18, -5e18, 2.0**64, 0.5], np.float64)
  m = I.parse("""func.func @f(%x: tensor<16xf64>) -> (tensor<16xu16>, tensor<16xi8>, tensor<16xi32>) {
  %0 = tensor.cast %x : tensor<16xf64> -> tensor<16xu16>
  %1 = tensor.cast %x : tensor<16xf64> -> tensor<16xi8>
  %2 = tensor.cast %x : tensor<16xf64> -> tensor<16xi32>
  func.return %0, %1, %2 : tensor<16xu16>, tensor<16xi8>, tensor<16xi32>
}""")
  from tgc.ir import alu
  got = compile_module(m, dev)(x)
  for g, dt in zip(got, (D.u16, D.i8, D.i32)): np.testing.assert_array_equal(g, alu.exec_cast(x, D.f64, dt), err_msg=f"{dt} on {dev}")


@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP', 'OPENCL'])
def test_negative_zero_constant_is_not_zero(dev):
  """-0.0 and 0.0 are equal and hash alike in Python: linearize's constants were shared by value, so a kernel that made
  -0.0 first stored -0.0 for 0.0 / 100 (fuzz.ir seed 9601 case 3169: an f8e4m3 result's sign bit, on INTERP)."""
  from tgc.compiler import compile_module
  try: get_device(dev)
  except tgc.TgcError as e: pytest.skip(str(e))
  m = I.parse("""kernel.func @k0(%data0: !kernel.buf<1xf8e4m3>, %data1: !kernel.buf<u8>) {
  %0 = kernel.load %data1 [view(shape = [16], strides = [0], offset = 0)] : u8
  %1 = kernel.bitcast %0 : u8 -> f8e4m3
  %2 = kernel.const -0.0 : f8e4m3
  %3 = kernel.mul %2, %1 : f8e4m3
  %4 = kernel.reduce mul %3 [0] : f8e4m3
  %5 = kernel.const 0.0 : f8e4m3
  %6 = kernel.const 100.0 : f8e4m3
  %7 = kernel.fdiv %5, %6 : f8e4m3
  kernel.store %data0 [view(shape = [1], strides = [1], offset = 0)], %7 : f8e4m3
}
func.func @main(%a: tensor<u8>) -> tensor<1xf8e4m3> {
  %r = kernel.alloc : tensor<1xf8e4m3>
  kernel.launch @k0(%r, %a)
  func.return %r : tensor<1xf8e4m3>
}""")
  out = compile_module(m, dev).run([tgc.runtime.buffer.Buffer.from_numpy(dev, np.array([56], np.uint8), D.u8)])[0]
  assert out.numpy().view(np.uint8).tolist() == [0], out.numpy()
