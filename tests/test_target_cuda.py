"""The cuda target: every kernel of the test programs compiles with `nvcc --cubin -arch=sm_90`; on a machine
with a GPU (tgc.runtime.cuda opens), the programs also run and match the INTERP device."""
import os, shutil, subprocess, tempfile
import numpy as np
import pytest
import tgc
from tgc.compiler import lower
import tgc.ir as I
from tgc.ir import dtypes as D
from tgc.ir.core import Module
from tgc.emit.cuda import render_cuda, render_cuda_kernel, nvcc_arch
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


def nvcc_cubin(src: str, ptxas_info: list | None = None) -> int:
  """Build src with `nvcc --cubin -arch=sm_90` (sm_90a where it holds wgmma, as the runtime does; asserting that it
  builds): the cubin's size. `ptxas_info`: a list that gets ptxas's report (-Xptxas -v)."""
  with tempfile.TemporaryDirectory() as td:
    cu = os.path.join(td, 'k.cu')
    open(cu, 'w').write(src)
    p = subprocess.run([NVCC, '--cubin', f'-arch={nvcc_arch(src, "sm_90")}', '-o', os.path.join(td, 'k.cubin'), cu] + (['-Xptxas', '-v'] if ptxas_info is not None else []),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + '\n' + src
    if ptxas_info is not None: ptxas_info.append(p.stderr)
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


def _nvcc_builds(src: str) -> None:
  if NVCC is None: pytest.skip("nvcc is not installed")
  nvcc_cubin(src)


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
  """(a module of build over tensors of `arrays`: uint16 ones hold bf16 bits, the leaves' arrays in order)."""
  from tgc.tensor import _build_module
  from tgc.ir import dtypes as D
  ts = [tgc.Tensor(D.from_storage(x, D.bf16).astype(np.float32), device=device, dtype='bfloat16') if x.dtype == np.uint16 else tgc.Tensor(x, device=device) for x in arrays]
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
  _nvcc_builds(src)


def test_tensor_cores_not_for_other_dtypes():
  """A matmul of float32 inputs keeps the ordinary kernel; one of half inputs whose m, n and k the tile does not
  divide gets its operands' rows padded to 16 bytes by copies (tensor-decompose, for the cuda target only), its axes
  padded (padto before tc), and the padded columns cut off by a copy."""
  m, _ = _tc_module(lambda a, b: a @ b, (np.ones((16, 32), np.float32), np.ones((32, 8), np.float32)), 'INTERP')
  lower(m, 'cuda')
  assert not any(op.name == 'uop.wmma' for f in m.functions('uop.func') for op in f.body.ops)
  m, _ = _tc_module(lambda a, b: a @ b, (np.ones((20, 33), np.float16), np.ones((33, 7), np.float16)), 'INTERP')
  lower(m, 'cuda')
  assert [f.attrs['sym_name'] for f in m.functions('uop.func')] == ['E_20_40', 'E_40_8', 'r_20_8_40', 'E_20_7']
  f = m.lookup('r_20_8_40')
  assert [o.name for o in f.attrs['opts']] == ['padto', 'padto', 'tc'] and any(op.name == 'uop.wmma' for op in f.body.ops)
  m, _ = _tc_module(lambda a, b: a @ b, (np.ones((20, 33), np.float16), np.ones((33, 7), np.float16)), 'INTERP')
  lower(m, 'llvm')  # no tensor cores: no copies
  assert len(m.functions('uop.func')) == 1


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


def _conv_weight_grad(x, w, g):
  import torch
  tw = torch.tensor(w, requires_grad=True)
  (torch.nn.functional.conv2d(torch.tensor(x), tw, padding=1) * torch.tensor(g)).sum().backward()
  return tw.grad.numpy()


def _softmax(a):
  e = np.exp(a - a.max(1, keepdims=True)); return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize('case', ['matmul_odd', 'matmul_f16', 'matmul_4095', 'rowsum_odd', 'sum_odd', 'softmax', 'max_short_rows',
                                  'softmax_big', 'softmax_odd', 'softmax_short_rows', 'softmax_cols', 'log_softmax', 'layernorm', 'var_f64',
                                  'sum_i32', 'argmax', 'softmax_f16', 'softmax_rows1000', 'softmax_rows6625', 'max_rows6625', 'conv1x3_960',
                                  'matmul_smem', 'matmul_smem_t', 'matmul_smem_epilogue', 'matmul_smem_batched', 'matmul_tc_smem',
                                  'matmul_tc_4095', 'matmul_tc_rect', 'matmul_tc_small_odd', 'conv_tc', 'conv_tc_strided',
                                  'cumsum_rows', 'cumsum_long', 'cumsum_cols', 'cummax_odd', 'logcumsumexp_long', 'argmax_rows',
                                  'linear_bf16_mixed', 'onehot_grad', 'column_sum', 'column_max', 'column_sum_3d',
                                  'norm_weight_grad', 'max_f16', 'max_bf16', 'max_i16', 'argmax_f16', 'cumsum_f16',
                                  'matmul_residual_f16', 'matmul_residual_f32_out', 'matmul_residual_odd', 'conv_first_weight_grad'])
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
    # one kernel: the reduces in stages and the rows' epilogue (warp shuffles, 1 to 8 warps a group; rows no warp divides)
    'softmax_big': (lambda a: a.softmax(axis=1), (r(513, 8192),), _softmax, 1e-5),
    'softmax_odd': (lambda a: a.softmax(axis=1), (r(33, 1000),), _softmax, 1e-5),
    'softmax_short_rows': (lambda a: a.softmax(axis=1), (r(3000, 64),), _softmax, 1e-5),
    'softmax_cols': (lambda a: a.softmax(axis=0), (r(4096, 48),), lambda a: _softmax(a.T).T, 1e-5),
    'log_softmax': (lambda a: a.log_softmax(axis=1), (r(256, 2048),), lambda a: np.log(_softmax(a)), 1e-5),
    'layernorm': (lambda a: a.layernorm(), (r(300, 768),), lambda a: (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5), 1e-4),
    'var_f64': (lambda a: a.var(axis=1), (r(64, 4096, dt=np.float64),), lambda a: a.var(1, ddof=1), 1e-9),
    'sum_i32': (lambda a: a.sum(axis=1), (rng.integers(-1000, 1000, (100, 4096)).astype(np.int32),), lambda a: a.sum(1), 0),
    'argmax': (lambda a: a.argmax(axis=1), (r(100, 4096),), lambda a: a.argmax(1), 0),
    'softmax_f16': (lambda a: a.softmax(axis=1), (r(128, 4096, dt=np.float16),), _softmax, 2e-3),
    # a warpgroup product whose epilogue reads a whole tile of another buffer (a residual): read 16 bytes a lane
    # into shared memory, then at the accumulators' places; rows no tile divides: read where the accumulators are
    'matmul_residual_f16': (lambda a, b, c: a @ b + c, (r(256, 128, dt=np.float16), r(128, 512, dt=np.float16), r(256, 512, dt=np.float16)),
                            lambda a, b, c: a.astype(np.float32) @ b.astype(np.float32) + c, 2e-2),
    'matmul_residual_f32_out': (lambda a, b, c: (a.cast('bfloat16') @ b.cast('bfloat16')).cast('float32') * c, (r(512, 384), r(384, 512), r(512, 512)),
                                lambda a, b, c: D.round_to(a.astype(np.float64), D.bf16) @ D.round_to(b.astype(np.float64), D.bf16) * c, 2e-2),
    'matmul_residual_odd': (lambda a, b, c: a @ b + c, (r(255, 128, dt=np.float16), r(128, 512, dt=np.float16), r(255, 512, dt=np.float16)),
                            lambda a, b, c: a.astype(np.float32) @ b.astype(np.float32) + c, 2e-2),
    # a first conv's weight gradient (3 input channels, 3x3): the pixels' sum shared by 16 threads, 16 output channels
    # a thread (narrow_product)
    'conv_first_weight_grad': (lambda x, w, g: (x.conv2d(w, padding=1) * g).sum().gradient(w)[0],
                               (r(64, 3, 32, 32), r(32, 3, 3, 3), r(64, 32, 32, 32)), _conv_weight_grad, 1e-3),
    # 2-byte values folded by warp shuffles (a half's row max, as attention's softmax takes it)
    'max_f16': (lambda a: a.max(axis=1), (r(1000, 1024, dt=np.float16),), lambda a: a.max(1), 0),
    'max_bf16': (lambda a: a.cast('bfloat16').max(axis=1).cast('float32'), (r(300, 4096),), lambda a: D.round_to(a.astype(np.float64), D.bf16).max(1), 0),
    'max_i16': (lambda a: a.max(axis=1), (rng.integers(-30000, 30000, (100, 4096)).astype(np.int16),), lambda a: a.max(1), 0),
    'argmax_f16': (lambda a: a.argmax(axis=1), (r(100, 4096, dt=np.float16),), lambda a: a.argmax(1), 0),
    'cumsum_f16': (lambda a: a.cumsum(1), (r(64, 512, dt=np.float16) / 16,), lambda a: np.cumsum(a.astype(np.float32), 1), 2e-2),
    'softmax_rows1000': (lambda a: a.softmax(axis=1), (r(4096, 1000),), _softmax, 1e-5),  # GROUP 8, 32 rows a work-group
    # rows no group divides: padded to 6656, the padding masked out of the max, the sum and the stores
    'softmax_rows6625': (lambda a: a.softmax(axis=1), (r(40, 6625) - 3,), _softmax, 1e-5),
    'max_rows6625': (lambda a: a.max(axis=1), (r(40, 6625) - 3,), lambda a: a.max(1), 0),
    # few outputs, a long reduce whose innermost axis (3 taps) no amount divides: GROUPTOP on the channels
    'conv1x3_960': (lambda x, w: x.conv2d(w), (r(1, 960, 1, 42), r(60, 960, 1, 3)), lambda x, w: _torch_conv(x, w), 1e-4),
    # staged through shared memory (smem): square, transposed, with an epilogue, batched, on tensor cores
    'matmul_smem': (lambda a, b: a @ b, (r(256, 192), r(192, 384)), lambda a, b: a @ b, 1e-4),
    'matmul_smem_t': (lambda a, b: a.T @ b, (r(192, 256), r(192, 128)), lambda a, b: a.T @ b, 1e-4),
    'matmul_smem_epilogue': (lambda a, b: ((a * 2 + 1) @ b).relu(), (r(128, 64), r(64, 256)), lambda a, b: np.maximum((a * 2 + 1) @ b, 0), 1e-4),
    'matmul_smem_batched': (lambda a, b: a @ b, (r(3, 128, 64), r(3, 64, 128)), lambda a, b: a @ b, 1e-4),
    'matmul_tc_smem': (lambda a, b: a @ b, (r(256, 512, dt=np.float16), r(512, 256, dt=np.float16)), lambda a, b: a @ b, 2e-2),
    # sizes the tensor-core tiles do not divide: padded (PADTO on m, n and k), the padding masked on loads and stores
    'matmul_tc_4095': (lambda a, b: a @ b, (r(255, 4095, dt=np.float16), r(4095, 130, dt=np.float16)), lambda a, b: a @ b, 2e-2),
    'matmul_tc_rect': (lambda a, b: a @ b, (r(1000, 3000, dt=np.float16), r(3000, 700, dt=np.float16)), lambda a, b: a @ b, 2e-2),
    'matmul_tc_small_odd': (lambda a, b: a @ b, (r(17, 33, dt=np.float16), r(33, 9, dt=np.float16)), lambda a, b: a @ b, 2e-2),
    # a half conv the heuristic puts on tensor cores (tc on the input channels; m, n its batch and output channels)
    'conv_tc': (lambda x, w: x.conv2d(w, padding=1), (r(16, 32, 12, 12, dt=np.float16), r(16, 32, 3, 3, dt=np.float16)), _conv_ref, 2e-2),
    # the implicit GEMM on tensor cores: strides, dilation, a window wider than tall, uneven padding
    'conv_tc_strided': (lambda x, w: x.conv2d(w, stride=(2, 1), padding=(1, 2), dilation=2), (r(16, 32, 13, 9, dt=np.float16), r(8, 32, 3, 5, dt=np.float16)),
                        lambda x, w: _torch_conv(x, w, stride=(2, 1), padding=(1, 2), dilation=2), 2e-2),
    # scans: rows in chunks (a thread a chunk, from its offset), one long axis in three levels, along axis 0, odd sizes
    'cumsum_rows': (lambda a: a.cumsum(1), (r(8192, 512),), lambda a: np.cumsum(a, 1), 1e-4),
    'cumsum_long': (lambda a: a.cumsum(0), (r(1 << 24),), lambda a: np.cumsum(a), 1e-4),
    'cumsum_cols': (lambda a: a.cumsum(0), (r(3001, 70),), lambda a: np.cumsum(a, 0), 1e-4),
    'cummax_odd': (lambda a: a.cummax(1)[0], (r(33, 100003),), lambda a: np.maximum.accumulate(a, 1), 0),
    'logcumsumexp_long': (lambda a: a.logcumsumexp(0), (r(1000003) * 10,), lambda a: np.logaddexp.accumulate(a), 1e-5),
    'argmax_rows': (lambda a: a.argmax(1), (r(8192, 4096),), lambda a: a.argmax(1), 0),
    # mixed precision (float32 activations and weights, the product of their bfloat16 casts summed in float32): the
    # casts stored as bfloat16 copies, the product on the tensor cores
    # a one-hot product summed over 4096 tokens (an embedding's gradient) whose other factor is computed: the sum split
    # into chunks, the computed factor stored once, not recomputed for each of the 256 rows it is broadcast to
    'onehot_grad': (lambda t, a, b: ((t.reshape(4096, 1, 1) == tgc.Tensor.arange(256, device='CUDA').reshape(1, 256, 1)).cast('float32') *
                                     ((a * a + 1).sqrt() * b).reshape(4096, 1, 384)).sum(0),
                    (rng.integers(0, 256, 4096).astype(np.int32), r(4096, 384), r(4096, 384)),
                    lambda t, a, b: np.eye(256)[t.astype(np.int64)].T @ (np.sqrt(a * a + 1) * b), 1e-4),
    # sums across rows into few columns (a bias's gradient, a norm's weight gradient): the rows in chunks of 32, each
    # chunk a thread a column, then the chunks
    'column_sum': (lambda a, b: (a * b).sum(0), (r(4096, 1536), r(4096, 1536)), lambda a, b: (a * b).sum(0), 1e-4),
    'column_max': (lambda a: a.max(0), (r(2048, 200),), lambda a: a.max(0), 0),
    'column_sum_3d': (lambda a: a.sum((0, 1)), (r(16, 256, 384),), lambda a: a.sum((0, 1)), 1e-4),
    # a layer norm's weight gradient: the normalised rows recomputed from their statistics, broadcast along the columns
    'norm_weight_grad': (lambda dy, x, m, v: (dy * ((x - m) / (v + 1e-5).sqrt())).sum(0), (r(4096, 384), r(4096, 384), r(4096, 1), r(4096, 1) ** 2),
                         lambda dy, x, m, v: (dy * ((x - m) / np.sqrt(v + 1e-5))).sum(0), 1e-4),
    'linear_bf16_mixed': (lambda x, w: x.cast('bfloat16').linear(w.transpose().cast('bfloat16')).cast('float32'), (r(256, 384), r(192, 384)),
                          lambda x, w: _bf16(x) @ _bf16(w).T, 2e-2),
  }[case]
  out = f(*[tgc.Tensor(a, device='CUDA') for a in args]).numpy()
  want = ref(*[a.astype(np.float64) for a in args])
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def test_register_tiles_leave_every_multiprocessor_a_work_group():
  """A reduce that stages nothing takes a register tile along the axis its row statistics broadcast along only while
  its threads still give each of the device's multiprocessors a work-group: 128 x 384 sums of a layer norm's weight
  gradient keep one column a thread on 132 multiprocessors, take a tile on 8; a million sums take one on 132."""
  from tgc.target import DeviceSpec
  from tgc.tensor import _build_module
  E = tgc.Tensor.empty
  def upcasts(t, processors):
    m, _ = _build_module([t.node], 'main')
    lower(m, DeviceSpec.of('cuda', processors=processors), 'opt')
    (k,) = m.functions('kernel.func')
    return [o.fields['amt'] for o in k.attrs.get('opts', ()) if o.name == 'upcast']
  norm_grad = lambda rows: (E(rows, 32, 384) * ((E(rows, 32, 384) - E(rows, 32, 1)) * E(rows, 32, 1))).sum(1)
  assert upcasts(norm_grad(128), 132) == []
  assert upcasts(norm_grad(128), 8) != []
  assert upcasts(norm_grad(2048), 132) != []


def test_float32_reciprocal_within_one_ulp():
  """1/x on the GPU (the hardware's approximation and a Newton step): zeros, infinities and NaN exact, every other
  float32 (subnormals and reciprocals that are) within 1 ulp of the rounded quotient, nearly all of them equal to it."""
  _gpu()
  rng = np.random.default_rng(3)
  bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1.1754942e-38, 1.1754944e-38, 3.4028235e38,
                      -3.4028235e38, 8.5e37, 2.0**126, 2.0**127, 1.0, -3.0, 0.1, 7.0], np.float32)
  x = np.concatenate([special, bits.view(np.float32)])
  got = tgc.Tensor(x, device='CUDA').reciprocal().numpy()
  with np.errstate(divide='ignore', over='ignore', invalid='ignore'): want = (np.float32(1) / x).astype(np.float32)
  nan = np.isnan(want)
  assert np.array_equal(np.isnan(got), nan)
  g, w = got[~nan].view(np.int32).astype(np.int64), want[~nan].view(np.int32).astype(np.int64)
  exact = (x[~nan] == 0) | np.isinf(x[~nan])
  assert np.array_equal(g[exact], w[exact])
  assert np.abs(g - w).max() <= 1 and (g == w).mean() > 0.99


def _bf16(a):
  """a rounded to bfloat16 (to nearest even), as float64."""
  u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
  return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def test_mixed_precision_products_take_the_tensor_cores():
  """A float32 product of bfloat16 casts (a mixed-precision Linear: float32 weights and activations) runs on the
  tensor cores, its computed casts stored as bfloat16 copies first; a float32 product of float32 values stays on the
  CUDA cores (without TF32)."""
  from tgc.passes.schedule import Schedule
  from tgc.target import DeviceSpec
  spec = DeviceSpec.of('cuda', processors=132)
  x, w = tgc.Tensor.empty(4096, 384), tgc.Tensor.empty(1536, 384)
  ks = _kernels_at_opt(x.cast('bfloat16').linear(w.transpose().cast('bfloat16')), spec)
  mm = [k for k in ks if any(op.name == 'kernel.reduce' for op in k.body.ops)]
  assert len(mm) == 1 and any(o.name == 'tc' for o in Schedule(mm[0], None, spec.target).opts)
  assert all(op.buf.type.dtype == tgc.dtypes.bfloat16 for op in mm[0].body.ops if op.name == 'kernel.load')
  k, = _kernels_at_opt(x.linear(w.transpose()), spec)
  assert not any(o.name == 'tc' for o in Schedule(k, None, spec.target).opts)


def _mixed_linear_grads(x, w):
  """The gradients of a mixed-precision Linear (bfloat16 products of float32 values, as torch.autocast runs them) under
  a loss whose gradient is computed (sum of squares)."""
  y = x.cast('bfloat16').linear(w.transpose().cast('bfloat16')).cast('float32')
  (y * y).sum().backward()
  return x.grad, w.grad


def test_mixed_precision_backward_products_take_the_tensor_cores():
  """The backward products of a mixed-precision Linear (dx = dy @ W, dW = dy.T @ x) read bfloat16 operands too: the
  gradient rounded to bfloat16 is stored as bfloat16 (not as the float32 it is cast back to), the transposed weight is
  the forward's bfloat16 copy (made once), and all three products run on the tensor cores."""
  from tgc.passes.schedule import Schedule
  from tgc.tensor import _build_module
  from tgc.lowering import lower as lower_to
  from tgc.target import DeviceSpec
  spec = DeviceSpec.of('cuda', processors=132)
  x, w = tgc.Tensor.empty(4096, 384).requires_grad_(), tgc.Tensor.empty(1536, 384).requires_grad_()
  dx, dw = _mixed_linear_grads(x, w)
  m, _ = _build_module([dx.node, dw.node], 'main')
  lower_to(m, spec, 'opt')
  ks = m.functions('kernel.func')
  names = lambda k: {op.name for op in k.body.ops}
  products = [k for k in ks if {'kernel.reduce', 'kernel.mul'} <= names(k)]  # (not a split sum's partial sums added)
  assert len(products) >= 3
  for k in products:
    assert any(o.name == 'tc' for o in Schedule(k, None, spec.target).opts), k.attrs['sym_name']
    assert all(op.buf.type.dtype == tgc.dtypes.bfloat16 for op in k.body.ops if op.name == 'kernel.load' and op.buf.type.shape != (1,))
  copies = [k for k in ks if k.body.args[1].type.shape == (1536, 384) and k.body.args[0].type.dtype == tgc.dtypes.bfloat16]
  assert len(copies) == 1, [k.attrs['sym_name'] for k in copies]


def test_mixed_precision_linear_gradients():
  """The mixed-precision Linear's gradients on the GPU against numpy (bfloat16 roundings of x, w and the gradient)."""
  _gpu()
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((256, 384)).astype(np.float32), rng.standard_normal((192, 384)).astype(np.float32) * 0.1
  dx, dw = _mixed_linear_grads(tgc.Tensor(x, device='CUDA', requires_grad=True), tgc.Tensor(w, device='CUDA', requires_grad=True))
  xb, wb = _bf16(x), _bf16(w)
  dy = _bf16(2 * _bf16(xb @ wb.T))
  for got, want in ((dx.numpy(), dy @ wb), (dw.numpy(), dy.T @ xb)):
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2 * float(np.abs(want).max()))


def test_a_sum_across_rows_is_split_into_chunks_of_rows():
  """A GPU sum of 4096 rows into 384 columns: a kernel of partial sums over chunks of 32 rows (its threads along the
  columns, the reduce along a chunk), then one over the chunks; 256 rows stay one kernel."""
  from tgc.target import DeviceSpec
  spec = DeviceSpec.of('cuda', processors=132)
  ks = _kernels_at_opt((tgc.Tensor.empty(4096, 384) * tgc.Tensor.empty(4096, 384)).sum(0), spec)
  assert [str(k.attrs['sym_name']).lstrip('@') for k in ks] == ['r_128_32_384', 'r_1_128_384']
  assert len(_kernels_at_opt(tgc.Tensor.empty(256, 384).sum(0), spec)) == 1
  # a softmax along the columns stays one kernel of stages: its max is read back along the rows, its sum reads the max
  assert len(_kernels_at_opt(tgc.Tensor.empty(4096, 48).softmax(0), spec)) == 1


def test_a_product_reads_a_computed_buffer_through_its_view_not_a_copy():
  """On a GPU a product's factor that is a buffer anyway (an MLP's GELU, its first product's epilogue, which the second
  product reads and the weight's gradient reads transposed) is read through a view, not copied first; a conv's weight,
  an argument, is still copied into the layout its tiles read."""
  from tgc.target import DeviceSpec
  from tgc.tensor import _build_module
  from tgc.lowering import lower as lower_to
  spec = DeviceSpec.of('cuda', processors=132)
  x, w1, b1, w2, dy = (tgc.Tensor.empty(*s) for s in ((4096, 384), (384, 1536), (1536,), (1536, 384), (4096, 384)))
  g = (x @ w1 + b1).gelu()
  m, _ = _build_module([(g @ w2).node, (g.T @ dy).node], 'main')
  lower_to(m, spec, 'kernel')
  ks = m.functions('kernel.func')
  assert not any(all(op.name in ('kernel.load', 'kernel.store') for op in k.body.ops) for k in ks), [str(k.attrs['sym_name']) for k in ks]
  assert len(_kernels_at_opt(tgc.Tensor.empty(4, 64, 56, 56).conv2d(tgc.Tensor.empty(64, 64, 3, 3), padding=1), spec)) == 3
  # attention's heads, slices of a qkv Linear's output, are read through their views by the forward and backward
  # products, in bf16 (through the casts that widen them to the products' f32 sums) as in f32
  for dt, want in ((None, ['E_384_128']), ('bfloat16', [])):  # (f32: the weight's transpose, an argument; bf16: its cast)
    (x, w, b), (o, _) = _attention_block((2, 128, 2, 64), dt, np.random.default_rng(0), 'CPU')
    m, _ = _build_module([o.node, x.grad.node, w.grad.node], 'main')
    lower_to(m, spec, 'kernel')
    copies = [k for k in m.functions('kernel.func') if all(op.name in ('kernel.load', 'kernel.store') for op in k.body.ops)]
    assert [str(k.attrs['sym_name']).lstrip('@') for k in copies] == want, dt
  # a head of 36 bf16 values starts its rows 72 bytes apart: copied, so that the tiles' copies take 16 bytes at a time
  (x, w, b), (o, _) = _attention_block((2, 64, 3, 36), 'bfloat16', np.random.default_rng(0), 'CPU')
  m, _ = _build_module([o.node], 'main')
  lower_to(m, spec, 'kernel')
  assert any(all(op.name in ('kernel.load', 'kernel.store') for op in k.body.ops) for k in m.functions('kernel.func'))


def _attention_block(shape, dt, rng, device):
  """A GPT attention block's heads from a qkv Linear (x @ w.T + b, chunked, heads transposed) through causal
  attention, the gradients of sum(o*o) taken: ((x, w, b), (o, numpy's o, dx and dw in float64 from the same inputs))."""
  B, S, H, D = shape
  d = H * D
  arrays = [rng.standard_normal((B, S, d)).astype(np.float32), (rng.standard_normal((3 * d, d)) / np.sqrt(d)).astype(np.float32), rng.standard_normal(3 * d).astype(np.float32)]
  x, w, b = (tgc.Tensor(a, device=device).requires_grad_() for a in arrays)
  qkv = x.cast(dt) @ w.cast(dt).T + b.cast(dt) if dt else x @ w.T + b
  q, k, v = [y.reshape(B, S, H, D).transpose(1, 2) for y in qkv.chunk(3, dim=2)]
  o = q.scaled_dot_product_attention(k, v, is_causal=True)
  (o.float() * o.float()).sum().backward()
  xa, wa, ba = (a.astype(np.float64) for a in arrays)
  heads = [t.reshape(B, S, H, D).transpose(0, 2, 1, 3) for t in np.split(xa @ wa.T + ba, 3, axis=2)]
  s = np.where(np.tril(np.ones((S, S), bool)), heads[0] @ heads[1].transpose(0, 1, 3, 2) / np.sqrt(D), -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
  ro = p @ heads[2]
  dp = 2 * ro @ heads[2].transpose(0, 1, 3, 2)
  ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.sqrt(D)
  dqkv = np.concatenate([t.transpose(0, 2, 1, 3).reshape(B, S, d) for t in (ds @ heads[1], ds.transpose(0, 1, 3, 2) @ heads[0], p.transpose(0, 1, 3, 2) @ (2 * ro))], axis=2)
  return (x, w, b), (o, (ro, dqkv @ wa, np.einsum('bsi,bsj->ij', dqkv, xa)))


@pytest.mark.parametrize('device', ['CUDA', 'CPU'])
@pytest.mark.parametrize('dt', [None, 'bfloat16'])
@pytest.mark.parametrize('shape', [(2, 128, 2, 64), (3, 100, 3, 40)])
def test_attention_heads_of_a_qkv_linear(shape, dt, device):
  """The attention block's forward and backward against numpy: on the GPU the heads are read through views of the
  qkv buffer by the products (on tensor cores in bf16); on the CPU a head dim of 40 pads the softmax backward's sum,
  whose other factor divides by the softmax's sum."""
  if device == 'CUDA': _gpu()
  (x, w, b), (o, refs) = _attention_block(shape, dt, np.random.default_rng(1), device)
  tol = 3e-2 if dt else 1e-4
  for got, ref in zip((o.float().numpy(), x.grad.numpy(), w.grad.numpy()), refs):
    assert np.abs(got.astype(np.float64) - ref).max() <= tol * np.abs(ref).max()


def test_a_computed_factor_broadcast_along_a_split_sum_is_stored():
  """An embedding's gradient as a GPU computes it: a one-hot of 4096 tokens times their (computed) gradients, summed
  over the tokens in chunks: the gradients are computed once, in a kernel of their own, not in the one-hot product's
  kernel once for each of the 256 rows they are broadcast to."""
  from tgc.target import DeviceSpec
  spec = DeviceSpec.of('cuda', processors=132)
  t, a, b = tgc.Tensor.empty(4096, dtype=tgc.dtypes.int32), tgc.Tensor.empty(4096, 384), tgc.Tensor.empty(4096, 384)
  onehot = (t.reshape(4096, 1, 1) == tgc.Tensor.arange(256).reshape(1, 256, 1)).cast('float32')
  ks = _kernels_at_opt((onehot * ((a * a + 1).sqrt() * b).reshape(4096, 1, 384)).sum(0), spec)
  ops = [{op.name for op in k.body.ops} for k in ks]
  assert any('kernel.cmpeq' in o for o in ops) and any('kernel.sqrt' in o for o in ops)
  assert not any({'kernel.cmpeq', 'kernel.sqrt'} <= o for o in ops), ops


def _kernels_at_opt(root, spec):
  from tgc.tensor import _build_module
  from tgc.lowering import lower as lower_to
  m, _ = _build_module([root.node], 'main')
  lower_to(m, spec, 'opt')
  return m.functions('kernel.func')


def test_unrolled_ops_counts_each_op_once_per_lane_it_varies_along():
  """A matmul tile of 8 rows x 4 columns with the reduce unrolled by 8: a row's operand is loaded once per row and
  step, a column's once per column and step, the products and sums once per lane and step, the stores once a lane."""
  from tgc.passes.schedule import Schedule, Opt
  from tgc.target import DeviceSpec
  a, b = tgc.Tensor.empty(64, 32), tgc.Tensor.empty(32, 48)
  k, = _kernels_at_opt(a @ b, DeviceSpec.of('llvm'))
  ks = Schedule(k, [Opt('upcast', 1, 4), Opt('upcast', 0, 8), Opt('unroll', 4, 8)], None)
  assert ks.unrolled_ops() == 8 * 8 + 4 * 8 + 2 * 8 * 4 * 8 + 8 * 4


def test_gpu_unrolling_keeps_a_heavy_body_small():
  """A reduce over a long elementwise chain of broadcast and gathered operands (a position embedding's gradient behind
  a layernorm's): the GPU tile unrolls its reduce only as far as keeps the unrolled body within MAX_UNROLLED_OPS (NVRTC
  spent 1.9 s on such a kernel unrolled 8 times); a matmul's tile still unrolls 8 deep."""
  from tgc.passes.schedule import Schedule, MAX_UNROLLED_OPS
  from tgc.target import DeviceSpec
  spec = DeviceSpec.of('cuda', processors=132)
  x, g = tgc.Tensor.empty(16, 256, 384), tgc.Tensor.empty(384)
  idx, emb = tgc.Tensor.empty(16, 256, dtype=tgc.dtypes.int32), tgc.Tensor.empty(64, 384)
  mu, var = tgc.Tensor.empty(16, 256, 1), tgc.Tensor.empty(16, 256, 1)
  e = emb[idx]
  y = x * g * (var / 384 + 1e-5).rsqrt() + mu * (e - mu) * 2 + e * x
  k, = _kernels_at_opt(y.sum(0), spec)
  ks = Schedule(k, None, spec.target)
  assert any(o.name == 'unroll' for o in ks.opts) and any(o.name == 'upcast' for o in ks.opts), ks.opts
  assert ks.unrolled_ops() <= MAX_UNROLLED_OPS, (ks.opts, ks.unrolled_ops())
  k, = _kernels_at_opt(tgc.Tensor.empty(1024, 384) @ tgc.Tensor.empty(384, 384), spec)
  assert [o.fields['amt'] for o in Schedule(k, None, spec.target).opts if o.name == 'unroll'] == [8]


def _staged_tc_module(device, stages=4, warpgroup=False):
  """A 256x512 @ 512x256 f16 matmul on tensor cores (a warp's mma.sync, or with `warpgroup` Hopper's wgmma) whose SMEM
  ring (`stages` of 64-deep steps) outgrows static shared memory (48 KB)."""
  from tgc.tensor import _build_module
  from test_target_execute import lower_staged
  rng = np.random.default_rng(8)
  a, b = rng.standard_normal((256, 512)).astype(np.float16), rng.standard_normal((512, 256)).astype(np.float16)
  ta, tb = tgc.Tensor(a, device=device), tgc.Tensor(b, device=device)
  m, leaves = _build_module([(ta @ tb).node], 'mm')
  lower_staged(m, 'cuda', stages, warpgroup=warpgroup)
  return m, [a if l is ta.node else b for l in leaves], a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize('warpgroup', [False, True])
def test_staged_tiles_beyond_static_shared_memory(warpgroup):
  """SMEM's ring takes more than 48 KB: the kernel carves its tiles from dynamic shared memory (uop.shared_layout;
  wgmma's swizzled tiles 1024-byte aligned), starts them with cp.async, and nvcc builds it."""
  from tgc.emit.cuda import dynamic_shared_bytes
  from tgc.dialects.uop import shared_layout
  m, _, _ = _staged_tc_module('INTERP', warpgroup=warpgroup)
  (f,) = m.functions('uop.func')
  offsets, total = shared_layout(f)
  assert dynamic_shared_bytes(f) == total > 48 << 10 and len(offsets) == 2
  src = render_cuda(m)
  assert f'extern __shared__ __align__(1024) unsigned char tg_shared[];' in src and 'cp.async.cg.shared.global' in src
  # (a warpgroup keeps one step's wgmmas running past its end: its copies run a step less ahead)
  assert f'cp.async.wait_group {1 if warpgroup else 2};' in src and src.count('__syncthreads();') == 1
  assert ('wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16' in src) == warpgroup and ('mma.sync.aligned' in src) != warpgroup
  _nvcc_builds(src)


@pytest.mark.parametrize('warpgroup', [False, True])
def test_a_ring_longer_than_the_loop_commits_every_group(warpgroup):
  """4 stages over a k loop of 2 steps: the copies before the loop still close 3 groups (the last empty; 2 for
  warpgroups, whose copies run one step less ahead), since each step waits for all but the newest 2 (1); with as many
  groups as steps the first step would not wait for its own copies (on an H100 a batched 128-deep matmul read stale
  tiles so)."""
  from tgc.tensor import _build_module
  from test_target_execute import lower_staged
  a, b = np.ones((128, 128), np.float16), np.ones((128, 128), np.float16)
  m, _ = _build_module([(tgc.Tensor(a, device='INTERP') @ tgc.Tensor(b, device='INTERP')).node], 'mm')
  lower_staged(m, 'cuda', 4, warpgroup=warpgroup)
  (f,) = m.functions('uop.func')
  names = [op.name for op in f.body.ops]
  loop = names.index('uop.range')
  ahead = 2 if warpgroup else 3  # (a warpgroup's copies run a step less ahead: its last step's wgmmas may still run)
  assert names[:loop].count('uop.async_commit') == ahead and names[loop + 1] == 'uop.async_wait'
  assert next(op for op in f.body.ops if op.name == 'uop.async_wait').attrs['pending'] == ahead - 1
  assert names[:loop].count('uop.copy_async')
  if ahead > 2: assert names[names.index('uop.async_commit', names.index('uop.async_commit') + 1) + 1] == 'uop.async_commit'  # (the empty group)

@pytest.mark.parametrize('warpgroup', [False, True])
@pytest.mark.parametrize('stages', [2, 3, 4])
def test_staged_tiles_on_gpu(stages, warpgroup):
  """The ring of cp.async stages (4: beyond static shared memory) computes the matmul numpy does."""
  _gpu()
  from tgc.compiler import compile_module
  m, args, want = _staged_tc_module('CUDA', stages, warpgroup)
  (out,) = compile_module(m, 'CUDA')(*args)
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


# ---- warpgroup tensor cores (tc amount 1: Hopper's wgmma, sm_90a) ----

def _wg_cases():
  """(name, build, numpy inputs, reference in float64, tolerance) for matmuls the heuristic gives wgmma on an H100."""
  rng = np.random.default_rng(11)
  h = lambda *s: rng.standard_normal(s).astype(np.float16)
  a, b, bt, bias = h(256, 512), h(512, 384), h(384, 512), rng.standard_normal(384).astype(np.float32)
  oa, ob = h(500, 700), h(700, 380)  # padded to 512 x 384 x 704
  ba, bb = h(3, 128, 128), h(3, 128, 64)
  sq, sk = h(4, 256, 64), h(4, 512, 64)
  wide = h(512, 1000)
  from tgc.ir import dtypes as D
  fa, fb = (D.to_storage(rng.standard_normal(s).astype(np.float32), D.bf16) for s in ((256, 512), (512, 384)))  # bf16 bits
  f64 = lambda x: x.astype(np.float64)
  bf = lambda x: f64(D.from_storage(x, D.bf16))
  return [
    ("f16->f32", lambda x, y: x.cast('float32') @ y.cast('float32'), (a, b), f64(a) @ f64(b), 1e-4),
    ("f16 out", lambda x, y: x @ y, (a, b), f64(a) @ f64(b), 2e-2),
    ("B k-major", lambda x, y: x.cast('float32') @ y.cast('float32').T, (a, bt), f64(a) @ f64(bt).T, 1e-4),
    ("bf16->f32", lambda x, y: x.cast('float32') @ y.cast('float32'), (fa, fb), bf(fa) @ bf(fb), 1e-4),
    ("padded", lambda x, y: x.cast('float32') @ y.cast('float32'), (oa, ob), f64(oa) @ f64(ob), 1e-4),
    ("+bias relu", lambda x, y, z: (x.cast('float32') @ y.cast('float32') + z).relu(), (a, b, bias), np.maximum(f64(a) @ f64(b) + bias, 0), 1e-4),
    ("batched", lambda x, y: x.cast('float32') @ y.cast('float32'), (ba, bb), f64(ba) @ f64(bb), 1e-4),
    # attention's scores: k = 64, one step, f16 out (the epilogue through shared memory, 16 bytes a store)
    ("scores k64", lambda x, y: x @ y.transpose(-2, -1), (sq, sk), f64(sq) @ f64(sk).transpose(0, 2, 1), 2e-2),
    # f16 out with n padded (380: the last chunk of 8 cut by the bound, gated a lane each)
    ("f16 out padded", lambda x, y: x @ y, (oa, ob), f64(oa) @ f64(ob), 2e-2),
    # n padded (1000 to 1024) in 16-byte rows: the chunks the bound cuts stored a lane each
    ("f16 out n1000", lambda x, y: x @ y, (a, wide), f64(a) @ f64(wide), 2e-2),
    ("+bias gelu f16", lambda x, y, z: (x @ y + z.cast('float16')).gelu(), (a, b, bias), _gelu(f64(a) @ f64(b) + f64(bias.astype(np.float16))), 3e-2),
  ]

def _gelu(x):  # tanh's form, as Tensor.gelu
  return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

WG_CASES = _wg_cases()
H100_SHARED = 227 << 10  # what an H100 lets a block ask for: kernel-opt's budget there


@pytest.mark.parametrize('case', WG_CASES, ids=[c[0] for c in WG_CASES])
def test_warpgroup_tensor_cores_chosen_and_compiled(case):
  """With an H100's shared memory kernel-opt gives these matmuls tc on warpgroups: their kernels hold uop.wgmma (one
  64x128x16 a warpgroup and step of 16), rendered as wgmma.mma_async, and nvcc builds them for sm_90a; a device
  without warpgroup tensor cores (kernel-opt{warpgroup=false}) gets mma.sync."""
  name, build, arrays, ref, tol = case
  m, _ = _tc_module(build, arrays, 'INTERP')
  lower(m, 'cuda', local_memory=H100_SHARED)
  wg = [op for f in m.functions('uop.func') for op in f.body.ops if op.name == 'uop.wgmma']
  assert wg and all(list(w.attrs['dims']) in ([64, 128, 16], [64, 64, 16]) for w in wg)
  src = render_cuda(m)
  assert 'wgmma.mma_async.sync.aligned.m64n' in src and 'fence.proxy.async.shared::cta;' in src and 'mma.sync' not in src
  _nvcc_builds(src)
  m, _ = _tc_module(build, arrays, 'INTERP')
  lower(m, 'cuda', local_memory=H100_SHARED, warpgroup=False)
  ops = [op.name for f in m.functions('uop.func') for op in f.body.ops]
  assert 'uop.wmma' in ops and 'uop.wgmma' not in ops


def test_warpgroup_tiles_follow_the_size():
  """kernel-opt's warpgroup tiles: 128x256 blocks in a ring of 4 stages (one block a multiprocessor) where that leaves
  256 blocks or more (a 4096 matmul: 512); 128x128 in 3 (two blocks a multiprocessor) where it would not
  (1000x3000x700, padded: 96 blocks of 128x256)."""
  from tgc.tensor import _build_module
  from tgc.passes.manager import PassManager, parse_pipeline
  def opts(m_, k_, n_):
    a, b = tgc.Tensor.empty(m_, k_, dtype='float16', device='CUDA'), tgc.Tensor.empty(k_, n_, dtype='float16', device='CUDA')
    m, _ = _build_module([(a @ b).node], 'mm')
    PassManager(parse_pipeline(f'canonicalize,tensor-decompose,canonicalize,cse,kernelize,kernel-opt{{target=cuda local_memory={H100_SHARED}}}')).run(m)
    (k,) = [f for f in m.functions('kernel.func') if any(o.name == 'kernel.reduce' for o in f.body.ops)]
    return [(o.name, o.fields['amt']) for o in k.attrs['opts'] if o.name != 'padto']
  assert opts(4096, 4096, 4096) == [('tc', 1), ('local', 8), ('upcast', 32), ('unroll', 4), ('smem', 4), ('smem', 4)]
  assert opts(1000, 700, 3000) == [('tc', 1), ('local', 8), ('upcast', 16), ('unroll', 4), ('smem', 3), ('smem', 3)]

# (x @ w with w of (K, N), a row-major operand: the layouts whose plain stores once had ptxas serialize the wgmmas)
WG_SERIAL_CASES = [(1024, 1024, 1024, 'float16', False), (4096, 4096, 4096, 'float16', False),
                   (4096, 1536, 384, 'bfloat16', False), (4096, 384, 1536, 'float16', True), (1000, 1000, 1000, 'float16', True)]

def _wg_matmul_module(M, K, N, dt, bias):
  from tgc.tensor import _build_module
  a, b = tgc.Tensor.empty(M, K, dtype=dt, device='CUDA'), tgc.Tensor.empty(K, N, dtype=dt, device='CUDA')
  y = a @ b
  if bias: y = y + tgc.Tensor.empty(N, dtype=dt, device='CUDA')
  m, _ = _build_module([y.node], 'mm')
  lower(m, 'cuda', local_memory=H100_SHARED)
  return m

@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize('M, K, N, dt, bias', WG_SERIAL_CASES)
def test_warpgroup_wgmmas_are_not_serialized(M, K, N, dt, bias):
  """ptxas serializes a warpgroup's wgmmas where other instructions touch their accumulators while they run (a copy of
  the registers between two of them, a branch around the next step's copies it cannot prove uniform, index values
  that live across the loop for the epilogue alone): then a step's wgmmas would not run on past its end."""
  info = []
  nvcc_cubin(render_cuda(_wg_matmul_module(M, K, N, dt, bias)), info)
  assert 'wgmma' in info[0] or 'registers' in info[0]
  assert 'serialized' not in info[0], info[0]

@pytest.mark.parametrize('M, K, N, dt, bias', WG_SERIAL_CASES)
def test_warpgroup_epilogue_reads_its_indices_again(M, K, N, dt, bias):
  """After a warpgroup kernel's loop, its epilogue computes its indices from the launch indices read again (uop.special
  {read = 1}, an opaque read on CUDA): of what is made before the loop it uses the accumulators, buffers and constants
  alone, so that no index value lives across the loop for it."""
  m = _wg_matmul_module(M, K, N, dt, bias)
  (f,) = [f for f in m.functions('uop.func') if any(op.name == 'uop.wgmma' for op in f.body.ops)]
  ops = f.body.ops
  last = max(i for i, op in enumerate(ops) if op.name == 'uop.wgmma_wait')
  made = {r: i for i, op in enumerate(ops) for r in op.results}
  early = {ops[made[v]].name for op in ops[last:] for v in op.operands if made.get(v, last) < last}
  assert early <= {'uop.phi', 'uop.define_global', 'uop.define_local', 'uop.const'}, early
  again = [op for op in ops[last:] if op.name == 'uop.special']
  assert again and all(op.attrs.get('read') == 1 for op in again)
  src = render_cuda(m)
  assert 'asm volatile("mov.u32 %0, %%ctaid.x;"' in src and 'gidx0_1' in src


@pytest.mark.parametrize('dt, lanes', [('float16', 8), ('float32', 4)])
def test_warpgroup_epilogue_stores_rows_through_shared_memory(dt, lanes):
  """A warpgroup kernel's results go through shared memory to the output, 16 bytes a store along its rows (8 halfs, 4
  floats), where the accumulators' layout would store one element at a time; with n padded too (516 to 576, the
  bound cutting a chunk: its lanes gated each). Rows of 516 halfs (1032 bytes) are not 16-byte aligned: element
  stores there."""
  from tgc.tensor import _build_module
  def stores(n, out_dt):
    a, b = tgc.Tensor.empty(8, 256, 64, dtype='float16', device='CUDA'), tgc.Tensor.empty(8, 64, n, dtype='float16', device='CUDA')
    m, _ = _build_module([(a @ b).cast(out_dt).node], 'mm')
    lower(m, 'cuda', local_memory=H100_SHARED)
    (f,) = [f for f in m.functions('uop.func') if any(op.name == 'uop.wgmma' for op in f.body.ops)]
    glob = {op.results[0] for op in f.body.ops if op.name == 'uop.define_global' and op.attrs['index'] == 0}
    return [op.value.type for op in f.body.ops if op.name == 'uop.store' and op.buf in glob]
  for n in (512, 516):
    got, staged = stores(n, dt), n == 512 or dt == 'float32'
    want = f"vec<{lanes}x{'f16' if dt == 'float16' else 'f32'}>" if staged else 'f16'
    assert got and all(str(t) == want for t in got), (n, set(map(str, got)))


@pytest.mark.parametrize('case', WG_CASES, ids=[c[0] for c in WG_CASES])
def test_warpgroup_tensor_cores_on_gpu(case):
  """On a Hopper GPU the wgmma kernels compute what numpy does (elsewhere the device's kernels keep mma.sync)."""
  dev = _gpu()
  from tgc.compiler import compile_module
  name, build, arrays, ref, tol = case
  m, args = _tc_module(build, arrays, 'CUDA')
  fn = compile_module(m, 'CUDA')
  names = {op.name for k in fn.kernels.values() for op in k.fn.body.ops}
  assert ('uop.wgmma' in names) == dev.warpgroup_mma and ('uop.wgmma' in names or 'uop.wmma' in names)
  (out,) = fn(*args)
  np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())


def _conv_ref(x, w):
  """A 3x3 conv with padding 1 in float64 (numpy's windows)."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (n, ci, oy, ox, 3, 3)
  return np.einsum('ncyxij,ocij->noyx', win, w.astype(np.float64))


def _wg_conv_module(batch=16):
  """A 3x3 f16 conv, batch x 64 -> 64 channels, 16x24 pixels, as the CUDA device builds it (channels-last, an implicit
  GEMM: m its output channels, n its output columns)."""
  from tgc.tensor import _build_module
  x, w = tgc.Tensor.empty(batch, 64, 16, 24, dtype='float16', device='CUDA'), tgc.Tensor.empty(64, 64, 3, 3, dtype='float16', device='CUDA')
  return _build_module([x.conv2d(w, padding=1).node], 'conv')[0]


def test_warpgroup_conv_chosen_and_compiled():
  """With an H100's shared memory the conv kernel gets warpgroups: 64 output channels x 24 columns a warpgroup (the
  weights MN-major, the channels-last input K-major), two output rows a block; nvcc builds it for sm_90a."""
  m = _wg_conv_module()
  lower(m, 'cuda', local_memory=H100_SHARED)
  wg = [op for f in m.functions('uop.func') for op in f.body.ops if op.name == 'uop.wgmma']
  assert wg and {(tuple(o.attrs['dims']), o.attrs['a_layout'][0], o.attrs['b_layout'][0]) for o in wg} == {((64, 24, 16), 1, 0)}
  (f,) = [f for f in m.functions('uop.func') if any(op.name == 'uop.wgmma' for op in f.body.ops)]
  assert tuple(f.attrs['local_size']) == (32, 4, 2)
  _nvcc_builds(render_cuda(m))
  m = _wg_conv_module()
  lower(m, 'cuda', local_memory=H100_SHARED, warpgroup=False)
  ops = [op.name for f in m.functions('uop.func') for op in f.body.ops]
  assert 'uop.wmma' in ops and 'uop.wgmma' not in ops


def test_warpgroup_conv_reads_its_padding_through_gated_copies(monkeypatch):
  """On warpgroups the conv kernel reads the unpadded channels-last input, its padding as gated 16-byte copies (the
  pad kernel goes: 4 kernels); a device without them keeps the padded copy (mma.sync's masked copies were 30x
  slower): 5 kernels."""
  from tgc.compiler import device_spec
  def kernels(batch, warpgroup):  # (another batch a time: conv2d's graph is recorded once per signature)
    m = _wg_conv_module(batch)
    lower(m, 'cuda', local_memory=H100_SHARED, warpgroup=warpgroup)
    return [f.sym_name for f in m.functions('uop.func')]
  if device_spec('CUDA').has_warpgroup: assert len(kernels(32, True)) == 4
  assert len(kernels(48, False)) == 5

def test_warpgroup_conv_on_gpu():
  """The conv on the GPU matches numpy's (wgmma on a Hopper GPU, mma.sync elsewhere)."""
  dev = _gpu()
  rng = np.random.default_rng(12)
  x, w = rng.standard_normal((16, 64, 16, 24)).astype(np.float16), (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float16)
  out = tgc.Tensor(x, device='CUDA').conv2d(tgc.Tensor(w, device='CUDA'), padding=1).float().numpy()
  ref = _conv_ref(x, w)
  np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


def test_swizzled_tile_places_every_element_once():
  """SwizzledTile.place is a permutation of the tile that keeps each 8-element chunk whole and in its 128-byte row,
  exchanging chunk c of row r for chunk c ^ (r % 8), row blocks of 64 columns one after another."""
  from tgc.passes.schedule import SwizzledTile
  t = SwizzledTile((), (), 16, 128, 'mn')
  places = {(r, c): t.place(r, c) for r in range(16) for c in range(128)}
  assert sorted(places.values()) == list(range(16 * 128))
  for (r, c), p in places.items():
    assert p // (16 * 64) == c // 64 and p % (16 * 64) // 64 == r  # its block of columns, its row
    assert p % 64 // 8 == (c % 64 // 8) ^ (r % 8) and p % 8 == c % 8
  assert t.descriptor() == (1, 16 * 128, 1024) and SwizzledTile((), (), 128, 64, 'k').descriptor() == (0, 16, 1024)


def _conv_tc_module(device):
  """A half conv (batch 16, 32 -> 16 channels, 6x6, 3x3, padding 1) whose kernel is given tc by hand, on its input
  channels (k; m and n are the batch and the output channels); ky and kx stay loops."""
  from tgc.tensor import _build_module
  from tgc.passes.manager import PassManager, parse_pipeline
  from tgc.passes.pipelines import lower_to_uop_steps
  from tgc.passes.schedule import Opt
  rng = np.random.default_rng(9)
  x, w = rng.standard_normal((16, 32, 6, 6)).astype(np.float16), rng.standard_normal((16, 32, 3, 3)).astype(np.float16)
  tx, tw = tgc.Tensor(x, device=device), tgc.Tensor(w, device=device)
  m, leaves = _build_module([tx.conv2d(tw, padding=1).node], 'conv')
  steps = lower_to_uop_steps('cuda')
  cut = next(i for i, s in enumerate(steps) if s.startswith('kernel-opt'))
  PassManager(parse_pipeline(','.join(steps[:cut]))).run(m)
  (k,) = [k for k in m.functions('kernel.func') if any(op.name == 'kernel.reduce' for op in k.body.ops)]
  k.attrs['opts'] = (Opt('tc', next(op for op in k.body.ops if op.name == 'kernel.reduce').axes[0], 0),)
  PassManager(parse_pipeline(','.join(steps[cut:]))).run(m)
  return m, [x if l is tx.node else w for l in leaves], _conv_ref(x.astype(np.float64), w.astype(np.float64))


def _torch_conv(x, w, **kw):
  import torch
  return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kw).numpy()


def _conv_ref(x, w):
  """A 3x3 conv with padding 1 in numpy (NCHW input, OIHW weights)."""
  (b, _, h, wd), o = x.shape, w.shape[0]
  xp, ref = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), np.zeros((b, o, h, wd))
  for ky in range(3):
    for kx in range(3): ref += np.einsum('bchw,oc->bohw', xp[:, :, ky:ky + h, kx:kx + wd], w[:, :, ky, kx])
  return ref


def test_conv_heuristic_takes_tensor_cores():
  """kernel-opt gives a half conv whose batch, output and input channels the tile divides tc (on its input
  channels), several tiles a warp, work-groups along the output's columns and rows, and both operands staged."""
  from tgc.tensor import _build_module
  x, w = tgc.Tensor(np.ones((16, 32, 12, 12), np.float16), device='INTERP'), tgc.Tensor(np.ones((16, 32, 3, 3), np.float16), device='INTERP')
  m, _ = _build_module([x.conv2d(w, padding=1).node], 'conv')
  lower(m, 'cuda')
  (f,) = [f for f in m.functions('uop.func') if any(op.name == 'uop.wmma' for op in f.body.ops)]
  names = [o.name for o in f.attrs['opts']]
  assert names[0] == 'tc' and 'upcast' in names and names.count('local') == 2 and names.count('smem') == 2, names
  _nvcc_builds(render_cuda(m))


def test_conv_on_tensor_cores_compiles():
  """tc lowers a conv (several reduce axes, the half product widened after it): one uop.wmma chain per tile, built by nvcc."""
  m, _, _ = _conv_tc_module('INTERP')
  assert any(op.name == 'uop.wmma' for f in m.functions('uop.func') for op in f.body.ops)
  _nvcc_builds(render_cuda(m))


def test_conv_on_tensor_cores_on_gpu():
  _gpu()
  from tgc.compiler import compile_module
  m, args, ref = _conv_tc_module('CUDA')
  (out,) = compile_module(m, 'CUDA')(*args)
  np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


def test_launcher_writes_the_arguments_into_the_parameter_block():
  # the host plan's launcher calls the driver's cuLaunchKernel with ctypes objects made once, the buffers' addresses
  # written into the kernel's parameter block. Checked on a stand-in driver: this machine may have no GPU.
  import ctypes, types
  from tgc.runtime.cuda import CUDAProgram, param_block
  calls, rcs, made_current = [], [], []
  def launch(func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    got = [ctypes.c_uint64.from_address(params[i]).value for i in range(3)]
    calls.append((func.value, [d.value for d in (gx, gy, gz, bx, by, bz)], shared.value, stream.value, got, extra))
    return rcs.pop(0) if rcs else 0
  def check(rc, what):
    if rc: raise tgc.TgcError(f"cuda: {what}: launch failed ({rc})")
  prg = object.__new__(CUDAProgram)
  prg.device = types.SimpleNamespace(lib=types.SimpleNamespace(cuLaunchKernel=launch), stream=types.SimpleNamespace(handle=1234),
                                     make_current=lambda: made_current.append(1), check=check)
  prg.name, prg.grid, prg.block, prg.shared, prg.func, prg.signature = 'k', (4, 2), (128,), 4096, ctypes.c_void_p(77), [None] * 3
  prg._vals, prg._params = param_block(3)
  args = (0x7f0000001000, 0x7f0000002000, 2**64 - 256)
  f = prg.launcher()
  f(args)
  assert calls == [(77, [4, 2, 1, 128, 1, 1], 4096, 1234, list(args), None)] and not made_current
  # a failed launch makes tgc's context current (another library's may be) and tries once more, then raises
  rcs[:] = [400, 400]
  with pytest.raises(tgc.TgcError, match="cuda: @k: launch failed"): f(args)
  assert made_current == [1] and len(calls) == 3


def test_another_context_current():
  """Another library's CUDA context current on the thread (tinygrad creates its own and sets it current with
  cuCtxSetCurrent after its calls): tgc's copies, allocations and launches make tgc's context current again and run."""
  _gpu()
  import ctypes
  import pycuda.driver as cuda
  dev = tgc.Device['CUDA']
  lib = ctypes.CDLL('libcuda.so.1')
  set_current = lambda c: lib.cuCtxSetCurrent(ctypes.c_void_p(c.handle))
  other = cuda.Device(0).make_context(); cuda.Context.pop()  # (made, and not left on pycuda's stack)
  try:
    a = np.arange(1 << 16, dtype=np.float32)
    set_current(other)
    x = tgc.Tensor(a, device='CUDA')
    set_current(other)  # between the copy and the launch
    np.testing.assert_allclose(((x + 1) * 2).numpy(), (a + 1) * 2)
    set_current(other)
    np.testing.assert_allclose(x.sum().numpy(), a.sum(), rtol=1e-6)
  finally:
    set_current(dev.ctx)
    other.detach()


def test_kernels_of_a_function_compile_in_few_modules():
  """compile_module hands the CUDA device all of a function's kernels at once: at most one module a compile worker
  (the kernels allowed fma apart from the others), each program a function of one; results as numpy's."""
  dev = _gpu()
  from tgc.tensor import _build_module
  from tgc.compiler import compile_module
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300, 40)).astype(np.float32)
  ta, tb = tgc.Tensor(a, device='CUDA'), tgc.Tensor(b, device='CUDA')
  m, leaves = _build_module([((ta @ tb).relu().softmax(1) + ta.sum()).node], 'f')
  before = len(dev._modules)
  fn = compile_module(m, 'CUDA')
  from tgc.runtime.workers import workers
  assert len(fn.kernels) >= 3 and len(dev._modules) - before <= min(len(fn.kernels), 2 * workers())
  (out,) = fn(*[a if l is ta.node else b for l in leaves])
  x = np.maximum(a.astype(np.float64) @ b, 0)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(1, keepdims=True) + a.sum(dtype=np.float64), rtol=1e-4, atol=1e-4)


# ---- compiling: NVRTC, nvcc as the fallback, the disk cache of cubins (no GPU needed) ----
from tgc.runtime import cuda as cuda_rt


def _nvrtc_or_skip():
  if cuda_rt._nvrtc() is None: pytest.skip("NVRTC (cuda-python's cuda.bindings.nvrtc) is not installed")


def test_every_kernel_compiles_with_nvrtc():
  """NVRTC builds what nvcc builds: every kernel of the test programs, for sm_90."""
  _nvrtc_or_skip()
  cubin = cuda_rt.nvrtc_cubin(render_cuda(all_kernels()), 'sm_90')
  assert cubin[:4] == b'\x7fELF'


def test_warpgroup_kernels_compile_with_nvrtc_for_sm_90a():
  """A source with wgmma builds for sm_90a (compile_cuda picks it on an sm_90 device, as nvcc_arch says)."""
  _nvrtc_or_skip()
  name, build, arrays, ref, tol = WG_CASES[0]
  m, _ = _tc_module(build, arrays, 'INTERP')
  lower(m, 'cuda', local_memory=H100_SHARED)
  src = render_cuda(m)
  assert nvcc_arch(src, 'sm_90') == 'sm_90a'
  assert cuda_rt.compile_cuda(src, 'sm_90', compiler='nvrtc')[:4] == b'\x7fELF'


def test_nvrtc_leaves_python_objects_alone():
  """NVRTC writes its log and cubin into buffers of ours. A clean compile's log is one byte: written into a bytes object
  it overwrote CPython's shared b' ', and later strings of the process (LLVM text, torch's schemas) lost their spaces."""
  _nvrtc_or_skip()
  cubin = cuda_rt.nvrtc_cubin('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n', 'sm_90')
  assert cubin[:4] == b'\x7fELF' and isinstance(cubin, bytes)
  assert bytes([32]) == b' ' and b' ' * 1 == b'\x20' and 'a b'.encode() == bytes([97, 32, 98])


def test_nvrtc_refusal_is_a_clear_error():
  _nvrtc_or_skip()
  with pytest.raises(tgc.TgcError, match=r'nvrtc rejected the emitted source:(.|\n)*undefined_thing'):
    cuda_rt.nvrtc_cubin('extern "C" __global__ void k(float* a) { a[0] = undefined_thing; }\n', 'sm_90')


def test_cubins_are_kept_in_the_disk_cache(tmp_path, monkeypatch):
  """A cubin is compiled once per source, architecture, fmad and compiler version; the next ask (another process
  alike) loads it. nvcc stands in for whichever compiler is installed here."""
  from tgc import cache
  monkeypatch.delenv('TGC_CACHE', raising=False)
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path))
  calls = []
  def fake(src, arch, fmad=False):
    calls.append((arch, fmad)); return b'\x7fELF cubin for ' + arch.encode()
  monkeypatch.setattr(cuda_rt, 'nvcc_cubin', fake)
  monkeypatch.setitem(cuda_rt._compiler_ids, 'nvcc', 'nvcc 13.0 (test)')
  src = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n'
  assert cuda_rt.compile_cuda(src, 'sm_90', compiler='nvcc') == b'\x7fELF cubin for sm_90'
  assert cuda_rt.compile_cuda(src, 'sm_90', compiler='nvcc') == b'\x7fELF cubin for sm_90'
  cuda_rt.compile_cuda(src, 'sm_80', compiler='nvcc'); cuda_rt.compile_cuda(src, 'sm_90', True, compiler='nvcc')
  assert calls == [('sm_90', False), ('sm_80', False), ('sm_90', True)] and len(cache.entries('cuda')) == 3
  monkeypatch.setitem(cuda_rt._compiler_ids, 'nvcc', 'nvcc 13.1 (test)')
  cuda_rt.compile_cuda(src, 'sm_90', compiler='nvcc')
  assert len(calls) == 4


def test_nvcc_is_the_fallback_without_nvrtc(tmp_path, monkeypatch):
  monkeypatch.setenv('TGC_CACHE', '0')
  monkeypatch.setattr(cuda_rt, '_nvrtc', lambda: None)
  if NVCC is None: pytest.skip("nvcc is not installed")
  src = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n'
  assert cuda_rt.compile_cuda(src, 'sm_90')[:4] == b'\x7fELF'
  with pytest.raises(tgc.TgcError, match='nvcc rejected'): cuda_rt.compile_cuda(src.replace('1.0f', 'nothing'), 'sm_90')


def test_compile_all_groups_kernels_into_modules_on_the_workers(monkeypatch):
  """CUDADevice.compile_all without a GPU (the driver's part stubbed): kernels allowed fma and the others go to
  different modules, each module's source is compiled once (on the workers), and every kernel gets the module that
  holds it, whatever the number of workers."""
  from tgc.runtime.cuda import CUDADevice
  m = all_kernels()
  fns = m.functions('uop.func')[:7]
  fns[1].attrs['contract'] = fns[4].attrs['contract'] = True
  for n_workers in ('1', '3'):
    monkeypatch.setenv('TGC_COMPILE_WORKERS', n_workers)
    dev = CUDADevice.__new__(CUDADevice)
    dev.arch, loaded = 'sm_90', []
    def module(src, fmad=False, cubin=None):
      loaded.append((src, fmad, cubin)); return len(loaded) - 1
    dev.module = module
    monkeypatch.setattr(cuda_rt, 'compile_cuda', lambda src, arch, fmad=False, compiler=None: f"cubin {arch} {fmad} {hash(src)}".encode())
    monkeypatch.setattr(cuda_rt, 'CUDAProgram', lambda dev, fn, module: (fn.sym_name, module))
    progs = dev.compile_all(fns)
    assert [p[0] for p in progs] == [f.sym_name for f in fns]
    for fn, (name, mi) in zip(fns, progs):
      src, fmad, cubin = loaded[mi]
      assert f" {name}(" in src and fmad == bool(fn.attrs.get('contract')) and cubin == f"cubin sm_90 {fmad} {hash(src)}".encode()
    sizes = [sum(bool(f.attrs.get('contract')) == c for f in fns) for c in (False, True)]
    assert len(loaded) == sum(min(int(n_workers), k) for k in sizes)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_compiler_warnings_go_to_debug_output_only(monkeypatch, capsys):
  """What the CUDA compiler says about a kernel it builds (a warning here: a variable never used) reaches stderr with
  DEBUG=4 or more, and nowhere without."""
  from tgc.runtime.cuda import nvcc_cubin as build
  src = 'extern "C" __global__ void k(float* a) { int unused = 3; a[threadIdx.x] = 1.0f; }\n'
  monkeypatch.delenv('DEBUG', raising=False)
  assert build(src, 'sm_80')
  assert capsys.readouterr().err == ''
  monkeypatch.setenv('DEBUG', '4')
  assert build(src, 'sm_80')
  err = capsys.readouterr().err
  assert err.startswith('tgc: nvcc:') and 'unused' in err, err


@pytest.mark.parametrize('causal', [True, False])
def test_attention_gradients_on_gpu(causal):
  """scaled_dot_product_attention's gradients in half (the backward's products on warpgroups, the scores read into
  their epilogues through shared memory) against torch's, computed in float32."""
  _gpu()
  import torch
  rng = np.random.default_rng(7)
  q, k, v, do = (rng.standard_normal((2, 4, 256, 64)).astype(np.float16) for _ in range(4))
  ts = [tgc.Tensor(a, device='CUDA').requires_grad_() for a in (q, k, v)]
  (ts[0].scaled_dot_product_attention(ts[1], ts[2], is_causal=causal) * tgc.Tensor(do, device='CUDA')).sum().backward()
  tq = [torch.tensor(a.astype(np.float32), requires_grad=True) for a in (q, k, v)]
  (torch.nn.functional.scaled_dot_product_attention(*tq, is_causal=causal) * torch.tensor(do.astype(np.float32))).sum().backward()
  for t, r_ in zip(ts, tq):
    np.testing.assert_allclose(t.grad.numpy().astype(np.float32), r_.grad.numpy(), rtol=3e-2, atol=3e-2)
