"""The cuda target: every kernel of the test programs compiles with `nvcc --cubin -arch=sm_90`; on a machine
with a GPU (tgc.runtime.cuda opens), the programs also run and match the INTERP device."""
import os, shutil, subprocess, tempfile
import numpy as np
import pytest
import tgc
from tgc.compiler import lower
import tgc.ir as I
from tgc.ir.core import Module
from tgc.emit.cuda import render_cuda, render_cuda_kernel
from test_target_execute import TENSOR, UOP, inputs_for, uop_fn, uop_inputs, run_uop, uop_reference, compiled

NVCC = shutil.which('nvcc') or ('/usr/local/bin/nvcc' if os.path.exists('/usr/local/bin/nvcc') else None)


def all_kernels(lower_target='cuda'):
  """Every uop.func of the test programs, renamed apart, as one module."""
  fns = []
  for name, (text, *_rest) in TENSOR.items():
    m = I.parse(text)
    lower(m, lower_target)
    fns += m.functions('uop.func')
  fns += [uop_fn(n) for n in UOP]
  for i, f in enumerate(fns): f.attrs['sym_name'] = f"{f.sym_name}_k{i}"
  return Module(fns)


def nvcc_cubin(src: str) -> int:
  """Build src with `nvcc --cubin -arch=sm_90` (asserting that it builds): the cubin's size."""
  with tempfile.TemporaryDirectory() as td:
    cu = os.path.join(td, 'k.cu')
    open(cu, 'w').write(src)
    p = subprocess.run([NVCC, '--cubin', '-arch=sm_90', '-o', os.path.join(td, 'k.cubin'), cu], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + '\n' + src
    return os.path.getsize(os.path.join(td, 'k.cubin'))


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_kernel_compiles_with_nvcc():
  assert nvcc_cubin(render_cuda(all_kernels())) > 0


def test_seed_shapes():
  src = render_cuda_kernel(uop_fn('vec'))
  assert src.startswith('#undef INFINITY\n#define INFINITY (__int_as_float(0x7f800000))\n#undef NAN\n#define NAN (__int_as_float(0x7fffffff))\n')
  assert 'extern "C" __global__ void __launch_bounds__(1) E_2(float* data0, float* data1, float* data2) {' in src
  assert '  int gidx0 = blockIdx.x; /* 2 */' in src and 'float4 val0 = *((float4*)(data1+alu0));' in src
  assert '__launch_bounds__(4) r_2_4' in render_cuda_kernel(uop_fn('local')) and '__shared__ __align__(16) int temp0[4];' in render_cuda_kernel(uop_fn('local'))


def _gpu():
  try: return tgc.runtime.get_device('CUDA')
  except tgc.TgcError as e: pytest.skip(str(e))


@pytest.mark.parametrize('name', list(TENSOR))
def test_tensor_programs_on_gpu(name):
  _gpu()
  ins = inputs_for(name)
  for g, r in zip(compiled(name, 'CUDA')(*ins), compiled(name, 'INTERP')(*ins)):
    if g.dtype.kind in 'iub': np.testing.assert_array_equal(g, r)
    else: np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=2e-3 if g.dtype == np.float16 else 1e-5, atol=1e-6)


@pytest.mark.parametrize('name', list(UOP))
def test_uop_programs_on_gpu(name):
  _gpu()
  ins = uop_inputs(name)
  for g, r in zip(run_uop(name, 'CUDA', ins), uop_reference(name, ins)):
    if g.dtype.kind in 'iub': np.testing.assert_array_equal(g, r)
    else: np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-3)


def test_unavailable_is_a_clear_error():
  try: tgc.runtime.get_device('CUDA')
  except tgc.TgcError as e: assert 'CUDA device unavailable' in str(e)


# ---- tensor cores: kernel-opt's TC on matmuls of f16/bf16 (mma.sync m16n8k16, one warp per 16x8 tile) ----

def _tc_cases():
  """(name, build(Tensor inputs) -> Tensor, numpy inputs, reference in float64, relative tolerance)."""
  rng = np.random.default_rng(7)
  a, b = rng.standard_normal((48, 64)).astype(np.float16), rng.standard_normal((64, 24)).astype(np.float16)
  bias = rng.standard_normal(24).astype(np.float32)
  xa, xb = a.astype(np.float64), b.astype(np.float64)
  batched_a, batched_b = rng.standard_normal((3, 32, 16)).astype(np.float16), rng.standard_normal((3, 16, 16)).astype(np.float16)
  bf_a, bf_b = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
  to_bf16 = lambda x: (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # exactly representable in bf16
  bf_a, bf_b = to_bf16(bf_a), to_bf16(bf_b)
  ta, tb, tbias = rng.standard_normal((128, 96)).astype(np.float16), rng.standard_normal((96, 256)).astype(np.float16), rng.standard_normal(256).astype(np.float32)
  return [
    ("f16", lambda x, y: x @ y, (a, b), xa @ xb, 2e-2),
    ("tiles f16->f32 +bias", lambda x, y, z: x.cast('float32') @ y.cast('float32') + z, (ta, tb, tbias), ta.astype(np.float64) @ tb + tbias, 1e-4),
    ("f16->f32 +bias relu", lambda x, y, z: (x.cast('float32') @ y.cast('float32') + z).relu(), (a, b, bias), np.maximum(xa @ xb + bias, 0), 1e-4),
    ("batched f16->f32", lambda x, y: x.cast('float32') @ y.cast('float32'), (batched_a, batched_b), batched_a.astype(np.float64) @ batched_b, 1e-4),
    ("bf16->f32", lambda x, y: x.cast('bfloat16').cast('float32') @ y.cast('bfloat16').cast('float32'), (bf_a, bf_b), bf_a.astype(np.float64) @ bf_b, 1e-4),
    # sigmoid's 1.0 comes before the reduce in the kernel and is used after it
    ("f16->f32 sigmoid", lambda x, y: (x.cast('float32') @ y.cast('float32')).sigmoid(), (a, b), 1 / (1 + np.exp(-(xa @ xb))), 1e-4),
  ]

TC_CASES = _tc_cases()


def _tc_module(build, arrays, device):
  from tgc.tensor import _build_module
  ts = [tgc.Tensor(x, device=device) for x in arrays]
  m, leaves = _build_module([build(*ts).node], 'tc')
  return m, [arrays[next(i for i, t in enumerate(ts) if t.node is l)] for l in leaves]


@pytest.mark.parametrize('case', TC_CASES, ids=[c[0] for c in TC_CASES])
def test_tensor_cores_chosen_and_compiled(case):
  """kernel-opt gives these matmuls `tc` on cuda: their kernels hold uop.wmma, rendered as mma.sync, and nvcc builds them."""
  name, build, arrays, ref, tol = case
  m, _ = _tc_module(build, arrays, 'INTERP')
  lower(m, 'cuda')
  wmma = [op for f in m.functions('uop.func') for op in f.body.ops if op.name == 'uop.wmma']
  assert wmma and all(tuple(w.attrs['dims']) == (16, 8, 16) for w in wmma)
  src = render_cuda(m)
  assert 'mma.sync.aligned.m16n8k16.row.col' in src
  if NVCC is None: pytest.skip("nvcc is not installed")
  nvcc_cubin(src)


def test_tensor_cores_not_for_other_shapes_and_dtypes():
  """A matmul whose m is no multiple of 16, or of float32 inputs, keeps the ordinary kernel."""
  for x, y in [(np.ones((20, 32), np.float16), np.ones((32, 8), np.float16)), (np.ones((16, 32), np.float32), np.ones((32, 8), np.float32))]:
    m, _ = _tc_module(lambda a, b: a @ b, (x, y), 'INTERP')
    lower(m, 'cuda')
    assert not any(op.name == 'uop.wmma' for f in m.functions('uop.func') for op in f.body.ops)


@pytest.mark.parametrize('case', TC_CASES, ids=[c[0] for c in TC_CASES])
def test_tensor_cores_on_gpu(case):
  _gpu()
  from tgc.compiler import compile_module
  name, build, arrays, ref, tol = case
  m, args = _tc_module(build, arrays, 'CUDA')
  fn = compile_module(m, 'CUDA')
  assert any(op.name == 'uop.wmma' for k in fn.kernels.values() for op in k.fn.body.ops)
  (out,) = fn(*args)
  np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_tensor_core_flops_are_counted():
  """DEBUG=2's GFLOPS counts a uop.wmma as its warp's share of 2*m*n*k: the kernel's total is the matmul's."""
  import math
  from tgc.compiler import count_flops
  name, build, arrays, ref, tol = TC_CASES[0]
  m, _ = _tc_module(build, arrays, 'INTERP')
  lower(m, 'cuda')
  (f,) = m.functions('uop.func')
  points = math.prod(f.attrs['global_size']) * math.prod(f.attrs['local_size'])
  (M, K), (_, N) = arrays[0].shape, arrays[1].shape
  assert count_flops(f) * points == 2 * M * N * K


@pytest.mark.parametrize('case', ['matmul_odd', 'matmul_f16', 'matmul_4095', 'rowsum_odd', 'sum_odd', 'softmax', 'max_short_rows',
                                  'matmul_smem', 'matmul_smem_t', 'matmul_smem_epilogue', 'matmul_smem_batched', 'matmul_tc_smem'])
def test_gpu_heuristic_shapes(case):
  """The shapes kernel-opt's GPU heuristics choose differently for (register tiles, GROUP along rows with a tree in
  shared memory, several rows per work-group, a split sum), at sizes that divide nothing evenly, against numpy."""
  _gpu()
  rng = np.random.default_rng(5)
  r = lambda *s, dt=np.float32: rng.standard_normal(s).astype(dt)
  f, args, ref, tol = {
    'matmul_odd': (lambda a, b: a @ b, (r(100, 300), r(300, 70)), lambda a, b: a @ b, 1e-4),
    'matmul_f16': (lambda a, b: a @ b, (r(128, 256, dt=np.float16), r(256, 64, dt=np.float16)), lambda a, b: a @ b, 2e-2),
    'matmul_4095': (lambda a, b: a @ b, (r(255, 4095), r(4095, 33)), lambda a, b: a @ b, 1e-3),
    'rowsum_odd': (lambda a: a.sum(axis=1), (r(1000, 3000),), lambda a: a.sum(axis=1), 1e-4),
    'sum_odd': (lambda a: a.sum(), (r((1 << 20) + 3),), lambda a: a.sum(), 1e-4),
    'softmax': (lambda a: a.softmax(axis=1), (r(37, 4096),), lambda a: np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True), 1e-5),
    'max_short_rows': (lambda a: a.max(axis=1), (r(4096, 128),), lambda a: a.max(axis=1), 0),
    # staged through shared memory (smem): square, transposed, with an epilogue, batched, on tensor cores
    'matmul_smem': (lambda a, b: a @ b, (r(256, 192), r(192, 384)), lambda a, b: a @ b, 1e-4),
    'matmul_smem_t': (lambda a, b: a.T @ b, (r(192, 256), r(192, 128)), lambda a, b: a.T @ b, 1e-4),
    'matmul_smem_epilogue': (lambda a, b: ((a * 2 + 1) @ b).relu(), (r(128, 64), r(64, 256)), lambda a, b: np.maximum((a * 2 + 1) @ b, 0), 1e-4),
    'matmul_smem_batched': (lambda a, b: a @ b, (r(3, 128, 64), r(3, 64, 128)), lambda a, b: a @ b, 1e-4),
    'matmul_tc_smem': (lambda a, b: a @ b, (r(256, 512, dt=np.float16), r(512, 256, dt=np.float16)), lambda a, b: a @ b, 2e-2),
  }[case]
  out = f(*[tgc.Tensor(a, device='CUDA') for a in args]).numpy()
  want = ref(*[a.astype(np.float64) for a in args])
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))
