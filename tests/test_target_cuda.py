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


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_kernel_compiles_with_nvcc():
  src = render_cuda(all_kernels())
  with tempfile.TemporaryDirectory() as td:
    cu = os.path.join(td, 'k.cu')
    open(cu, 'w').write(src)
    p = subprocess.run([NVCC, '--cubin', '-arch=sm_90', '-o', os.path.join(td, 'k.cubin'), cu], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + '\n' + src
    assert os.path.getsize(os.path.join(td, 'k.cubin')) > 0


def test_seed_shapes():
  src = render_cuda_kernel(uop_fn('vec'))
  assert src.startswith('#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n')
  assert 'extern "C" __global__ void __launch_bounds__(1) E_2(float* data0, float* data1, float* data2) {' in src
  assert '  int gidx0 = blockIdx.x; /* 2 */' in src and 'float4 val0 = *((float4*)(data1+alu0));' in src
  assert '__launch_bounds__(4) r_2_4' in render_cuda_kernel(uop_fn('local')) and '__shared__ int temp0[4];' in render_cuda_kernel(uop_fn('local'))


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
