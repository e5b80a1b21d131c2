"""Scans (tensor.scan: cumsum, cumprod, cummax, cummin), their chunked form for long axes (scan-split), positions
computed from indices (kernel.index) and the one-kernel argmax/argmin, against numpy and torch; the IR of each."""
import numpy as np
import pytest
import torch
import tgc
import tgc.ir as I
from tgc import Tensor, dtypes
from tgc.ir.diagnostics import Diagnostic
from tgc.target import DeviceSpec
from tgc.passes.scan_split import chunking

pytestmark = pytest.mark.usefixtures('_default_device')  # $TGC_TEST_DEVICE, or a test's `dev` (conftest.py)

RNG = np.random.default_rng(24)
DEVS = ['CPU', 'C', 'OPENCL', 'INTERP']


def close(t, want, rtol=1e-5, atol=1e-5):
  got = t.numpy()
  assert got.shape == np.shape(want), (got.shape, np.shape(want))
  if got.dtype.kind in 'iub': np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


# odd sizes, every axis, and axes long enough that scan-split chunks them (on the CPU from 8192 along few rows; on the
# OpenCL target, a GPU language, from 32)
SHAPES = [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 33, 3), 1), ((4, 7, 5), -1), ((40, 64), 0), ((20001,), 0), ((3, 9001), 1), ((9000, 3), 0)]

@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('shape,axis', SHAPES, ids=str)
def test_cumsum_cumprod(shape, axis, dev):
  if dev == 'INTERP' and np.prod(shape) > 10000: pytest.skip("the interpreter runs a point at a time")
  x = RNG.standard_normal(shape).astype(np.float32)
  close(Tensor(x).cumsum(axis), np.cumsum(x.astype(np.float64), axis), rtol=1e-4, atol=1e-3)
  xi = RNG.integers(-9, 9, shape).astype(np.int32)
  close(Tensor(xi).cumsum(axis), np.cumsum(xi, axis).astype(np.int32))
  xm = (1 + RNG.standard_normal(shape) * 1e-3).astype(np.float32)  # (products that stay in range along 20001 steps)
  close(Tensor(xm).cumprod(axis), np.cumprod(xm.astype(np.float64), axis), rtol=1e-4)


@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('shape,axis', SHAPES, ids=str)
def test_cummax_cummin(shape, axis, dev):
  if dev == 'INTERP' and np.prod(shape) > 10000: pytest.skip("the interpreter runs a point at a time")
  x = RNG.integers(-5, 5, shape).astype(np.float32)  # (ties: the index is the last position of the running extreme)
  for name in ('cummax', 'cummin'):
    v, i = getattr(Tensor(x), name)(axis)
    tv, ti = getattr(torch, name)(torch.tensor(x), axis)
    assert i.dtype is dtypes.int32
    close(v, tv.numpy()); close(i, ti.numpy().astype(np.int32))


@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('shape,axis', SHAPES, ids=str)
def test_logcumsumexp(shape, axis, dev):
  """A scan whose step is log(exp(a) + exp(b)): a large spread loses nothing, -inf stays -inf, long axes in chunks."""
  if dev == 'INTERP' and np.prod(shape) > 10000: pytest.skip("the interpreter runs a point at a time")
  x = (RNG.standard_normal(shape) * 30).astype(np.float32)
  x.reshape(-1)[:2] = -np.inf
  close(Tensor(x).logcumsumexp(axis), torch.logcumsumexp(torch.tensor(x, dtype=torch.float64), axis).numpy(), rtol=1e-5, atol=1e-4)


def test_dtypes_and_nan():
  x = np.array([[1, 3, 3, 2, 7], [5, 4, 6, 6, 0]], np.int8)
  close(Tensor(x).cumsum(1), np.cumsum(x, 1).astype(np.int32))  # (summed in int32, as sum)
  h = RNG.standard_normal((3, 40)).astype(np.float16)
  r = Tensor(h).cumsum(1)
  assert r.dtype is dtypes.float16
  close(r, np.cumsum(h.astype(np.float32), 1), rtol=1e-2, atol=1e-2)
  b = np.array([[False, True, False], [True, False, True]])
  close(Tensor(b).cumsum(1), np.cumsum(b, 1).astype(np.int32))
  f = np.array([1.0, np.nan, 2.0, 5.0, -np.inf], np.float32)  # NaN rules from where it appears (torch's cummax)
  v, i = Tensor(f).cummax(0)
  tv, ti = torch.cummax(torch.tensor(f), 0)
  np.testing.assert_array_equal(v.numpy(), tv.numpy()); np.testing.assert_array_equal(i.numpy(), ti.numpy())


@pytest.mark.parametrize('dev', ['CPU', 'INTERP'])
def test_exclusive(dev):
  x = RNG.integers(-9, 9, (4, 10001)).astype(np.int32)
  close(Tensor(x)._cum('add', 1, exclusive=True), (np.cumsum(x, 1) - x).astype(np.int32))
  y = RNG.integers(1, 3, (5, 6)).astype(np.int32)
  close(Tensor(y)._cum('mul', 0, exclusive=True), (np.cumprod(y, 0) // y).astype(np.int32))


def _grads(f, tf, x, g):
  a = Tensor(x, requires_grad=True)
  (f(a) * Tensor(g)).sum().backward()
  ta = torch.tensor(x, requires_grad=True)
  (tf(ta) * torch.tensor(g)).sum().backward()
  return a.grad.numpy(), ta.grad.numpy()

@pytest.mark.parametrize('dev', ['CPU', 'INTERP'])
def test_gradients_match_torch(dev):
  x = RNG.standard_normal((4, 9)).astype(np.float32)
  x[1, 3] = x[2, 2] = x[2, 6] = x[3, 0] = 0.0  # cumprod: a row's first zero, a second one, a zero first
  x[0, 4] = x[0, 2]  # cummax: a tie
  g = RNG.standard_normal((4, 9)).astype(np.float32)
  for f in (lambda t: t.cumsum(1), lambda t: t.cumsum(0), lambda t: t.cumprod(1), lambda t: t.cumprod(0),
            lambda t: t.cummax(1)[0], lambda t: t.cummin(0)[0], lambda t: t.logcumsumexp(1), lambda t: (t * 40).logcumsumexp(0)):
    got, want = _grads(f, f, x, g)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))  # (x * 40: exp of f32 sums near 100)


def _kernels(t: Tensor) -> list[str]:
  return [ln for ln in t.to_ir('kernel').splitlines() if ln.startswith('kernel.func')]

@pytest.mark.parametrize('dev', DEVS)
@pytest.mark.parametrize('n', [1, 2, 7, 64, 1000, 4099])
def test_argmax_argmin_first_index(n, dev):
  x = RNG.integers(-3, 3, (5, n)).astype(np.float32)  # (ties: the first index, as numpy and torch)
  for axis in (1, 0, -1):
    close(Tensor(x).argmax(axis), np.argmax(x, axis).astype(np.int32))
    close(Tensor(x).argmin(axis), np.argmin(x, axis).astype(np.int32))
  close(Tensor(x).argmax(), np.int32(np.argmax(x)))


def test_argmax_is_one_kernel_without_constants():
  t = Tensor.empty(64, 4096).argmax(1)
  ks = _kernels(t)
  assert len(ks) == 1 and ks[0].startswith('kernel.func @r_64_4096(%data0: !kernel.buf<64x1xi32>, %data1: !kernel.buf<64x4096xf32>)'), ks
  kir = t.to_ir('kernel')
  assert 'kernel.index [view(shape = [64, 4096], strides = [0, -1], offset = 4095)] : i32' in kir and 'tensor.const [' not in kir


def test_scan_kernel_ir():
  """A cumsum along rows is one kernel whose scanned axis is a loop: the accumulator (its init before the loop)
  updated and stored every step."""
  t = Tensor.empty(37, 50).cumsum(1)
  k = t.to_ir('kernel')
  assert '%1 = kernel.scan add %0 1 : f32' in k and 'kernel.store %data0 [view(shape = [37, 50], strides = [50, 1], offset = 0)], %1 : f32' in k
  u = [ln.split(' = ', 1)[-1].split(' %')[0].strip() for ln in t.to_ir('uop').splitlines() if 'uop.' in ln]
  i = u.index('uop.define_acc')
  assert u[i + 1:].index('uop.range') < u[i + 1:].index('uop.phi') < u[i + 1:].index('uop.store') < u[i + 1:].index('uop.endrange')


@pytest.mark.parametrize('target,rows,n,want', [('cuda', 8192, 512, None), ('cuda', 1, 1 << 24, 16384), ('cuda', 1, 1 << 17, 1024), ('cuda', 1, 2048, None),
                                                ('cuda', 3, 100000, 1024), ('cuda', 1, 2000, 80),
                                                ('cuda', 1, 32, None), ('cuda', 1, 31, None), ('cuda', 2048, 64, None),
                                                ('cuda', 1 << 17, 64, None), ('llvm', 8192, 512, None), ('llvm', 1, 1 << 24, 1 << 18),
                                                ('llvm', 2, 20001, 4096), ('llvm', 1, 8000, None)])
def test_chunking_from_the_device(target, rows, n, want):
  """How long the chunks of a scan are. A GPU scans a row of whole warps' float4s by a work-group (1024 floats a step
  on the cuda target): a row of at most 16 steps stays whole, a longer one (or a long one of another length: 100000)
  is cut into chunks of whole steps, as many as make some 2^17 threads; shorter rows take chunks of 16 or more, a
  thread each. A CPU wants 64 rows and chunks of 4096 or more; a small scan (the totals of a big one) chunks 4 times
  as long, at least 4 of them."""
  assert chunking(rows, n, DeviceSpec.of(target)) == want


def test_split_ir():
  """One long axis on a GPU target: the chunks' totals (a reduce), an exclusive scan of them (split again while
  long), each chunk's scan from its offset."""
  m = I.parse("""func.func @f(%x: tensor<3x1000xf32>) -> tensor<3x1000xf32> {
  %0 = tensor.scan max %x 1 : tensor<3x1000xf32>
  func.return %0 : tensor<3x1000xf32>
}""")
  from tgc.passes.manager import PassManager, parse_pipeline
  PassManager(parse_pipeline('scan-split{target=cuda}')).run(m)
  text = m.print()
  assert '%1 = tensor.reduce max %0 [2] : tensor<3x10x100xf32> -> tensor<3x10x1xf32>' in text, text
  assert '%2 = tensor.scan max %1 1 {exclusive = true} : tensor<3x10x1xf32>' in text, text
  assert '%3 = tensor.scan max %0 2 (%2) : tensor<3x10x100xf32>' in text, text


ROUND = """func.func @f(%x: tensor<4x6xf32>, %i: tensor<4x1xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %0 = tensor.scan add %x 1 : tensor<4x6xf32>
  %1 = tensor.scan max %0 1 (%i) {exclusive = true} : tensor<4x6xf32>
  func.return %0, %1 : tensor<4x6xf32>, tensor<4x6xf32>
}
kernel.func @s_4_6(%data0: !kernel.buf<4x6xi32>, %data1: !kernel.buf<4x6xi32>, %data2: !kernel.buf<4x1xi32>) {
  %0 = kernel.load %data1 [view(shape = [4, 6], strides = [6, 1], offset = 0)] : i32
  %1 = kernel.load %data2 [view(shape = [4, 1], strides = [1, 0], offset = 0)] : i32
  %2 = kernel.index [view(shape = [4, 6], strides = [0, 1], offset = 0)] : i32
  %3 = kernel.add %0, %2 : i32
  %4 = kernel.scan mul %3 1 (%1) {exclusive = true} : i32
  kernel.store %data0 [view(shape = [4, 6], strides = [6, 1], offset = 0)], %4 : i32
}
"""

def test_ir_round_trip():
  m = I.parse(ROUND)
  text = m.print()
  assert I.parse(text).print() == text and I.parse(m.print(generic=True)).print() == text
  for ln in ROUND.strip().splitlines(): assert ln in text.splitlines(), ln


@pytest.mark.parametrize('opts', ['', ' attributes {opts = [upcast(axis = 0, amt = 2)]}', ' attributes {opts = [upcast(axis = 0, amt = 2), upcast(axis = 0, amt = 2)]}',
                                  ' attributes {opts = [unroll(axis = 1, amt = 2)]}'])
@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP'])
def test_hand_written_scan_kernel_runs(dev, opts):
  """The round trip's kernel, launched from a function: an exclusive product scan from an init, of a load plus the
  position along the row; as it is, with rows in vector lanes (and in lanes of their own), with steps in vector lanes."""
  k = "kernel.func" + ROUND.split('kernel.func')[1].replace('%data2: !kernel.buf<4x1xi32>)', '%data2: !kernel.buf<4x1xi32>)' + opts)
  fn = tgc.compile(k + """func.func @main(%a: tensor<4x6xi32>, %b: tensor<4x1xi32>) -> tensor<4x6xi32> {
  %0 = kernel.alloc : tensor<4x6xi32>
  kernel.launch @s_4_6(%0, %a, %b)
  func.return %0 : tensor<4x6xi32>
}""", device=dev)
  a, b = RNG.integers(-3, 3, (4, 6)).astype(np.int32), RNG.integers(1, 4, (4, 1)).astype(np.int32)
  y = a + np.arange(6)
  want = b * np.concatenate([np.ones((4, 1), np.int64), np.cumprod(y, 1)[:, :-1]], 1)
  np.testing.assert_array_equal(fn(a, b)[0], want.astype(np.int32))


BAD = [
  ("%0 = tensor.scan min %x 1 : tensor<4x6xf32>", "unknown scan kind 'min' (expected one of add, max, mul, logaddexp)"),
  ("%0 = tensor.scan logaddexp %j 1 : tensor<4x6xi32>", "logaddexp scans floats, got i32"),
  ("%0 = tensor.scan add %x 2 : tensor<4x6xf32>", "axis 2 is out of range for rank 2"),
  ("%0 = tensor.scan add %x 1 : tensor<4x6xi32>", "result must be the operand's type tensor<4x6xf32>, got tensor<4x6xi32>"),
  ("%0 = tensor.scan add %x 0 (%i) : tensor<4x6xf32>", "init must be tensor<1x6xf32> (the operand's shape with 1 along axis 0), got tensor<4x1xf32>"),
  ("%0 = tensor.scan add %x 1 {exclusive = 3} : tensor<4x6xf32>", "exclusive must be true or false, got 3"),
]

@pytest.mark.parametrize('line,msg', BAD, ids=[m for _, m in BAD])
def test_verifier_errors(line, msg):
  with pytest.raises(Diagnostic, match=msg.replace('(', r'\(').replace(')', r'\)').replace('[', r'\[')):
    I.parse(f"func.func @f(%x: tensor<4x6xf32>, %i: tensor<4x1xf32>, %j: tensor<4x6xi32>) {{\n  {line}\n  func.return\n}}")


def test_scan_unroll_schedule():
  """UNROLL alone splits a scan's axis (a vector of steps carried through in order); the GPU heuristic takes it where
  the loads and the store run along the axis: 16 bytes a load and a store."""
  from tgc.passes.schedule import Schedule, Opt, OptError
  k = I.parse(ROUND).functions('kernel.func')[0]
  assert Schedule(k, (Opt('unroll', 1, 2),)).kinds == ['global', 'scan', 'unroll']
  assert Schedule(k, (Opt('unroll', 1, 2), Opt('group', 1, 3))).kinds == ['global', 'scan', 'group', 'unroll']
  for opts, msg in [((Opt('upcast', 0, 2), Opt('unroll', 1, 2)), "take no other unrolled lanes"), ((Opt('unroll', 1, 3),), "take no other unrolled lanes"),
                    ((Opt('group', 1, 2), Opt('unroll', 1, 2)), "no steps after it"), ((Opt('local', 0, 2), Opt('group', 1, 2)), "takes no local or upcast axes")]:
    with pytest.raises(OptError, match=msg): Schedule(k, opts)
  from tgc.tensor import _build_module
  from tgc.lowering import lower
  m, _ = _build_module([Tensor.empty(64, 512).cumsum(1).node], 'k')
  src = lower(m, 'cuda', until='source')
  assert 'float4 val0 = *((float4*)(data1+alu0));' in src and '*((float4*)(data0+alu0)) = make_float4(' in src and '__shfl_xor_sync' in src, src
