"""The metal target, proven without a Mac: every emitted kernel compiles as C++20 with g++ against
tests/metal_shim.h, and runs on the CPU (one std::thread per thread of a threadgroup, so barriers and
threadgroup memory are real), matching numpy and the INTERP device. All kernels go into one translation
unit, compiled once."""
import ctypes, os, shutil, subprocess, tempfile
import numpy as np
import pytest
import tgc
import tgc.ir as I
from tgc.compiler import lower, compile_module
from tgc.ir.core import Module
from tgc.ir import dtypes as D
from tgc.emit.metal import MetalLang, render_metal, render_metal_kernel
from tgc.runtime import register_device
from tgc.runtime.interp import buffer_signature, launch_dims
from tgc.runtime.device import BaseDevice, HostDevice, Program
from tgc.runtime.cpu import HostPointerAllocator
from test_target_execute import TENSOR, UOP, inputs_for, uop_fn, uop_inputs, uop_reference, compiled

HERE = os.path.dirname(os.path.abspath(__file__))
GXX = shutil.which('g++')
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed")
_BUILT = {}


def programs():
  """name -> lowered module (tensor programs, with their hosts) or uop.func; every kernel renamed apart."""
  out, k = {}, 0
  for name, (text, *_r) in TENSOR.items():
    m = I.parse(text)
    lower(m, 'metal')
    ren = {}
    for f in m.functions('uop.func'):
      ren[f.sym_name] = new = f"{f.sym_name}_k{k}"; f.attrs['sym_name'] = new; k += 1
    for op in m.functions('func.func')[0].body.ops:
      if op.name == 'kernel.launch': op.attrs['callee'] = ren[op.attrs['callee']]
    out[name] = m
  for name in UOP:
    f = uop_fn(name); f.attrs['sym_name'] = f"{f.sym_name}_k{k}"; k += 1
    out['uop_' + name] = f
  return out


def launcher(fn) -> str:
  L, (gs, ls) = MetalLang(), launch_dims(fn)
  args = ', '.join(f"({L.mem(dt)}*)b[{i}]" for i, dt in enumerate(buffer_signature(fn)))
  return (f'extern "C" void run_{fn.sym_name}(void **b) {{ tg_launch([&](uint3 gid, uint3 lid) {{ {fn.sym_name}({args}{", " if args else ""}gid, lid); }}, '
          f'uint3({gs[0]}u, {gs[1]}u, {gs[2]}u), uint3({ls[0]}u, {ls[1]}u, {ls[2]}u)); }}')


@pytest.fixture(scope='module')
def shim():
  progs, refused = programs(), {}
  for name, p in list(progs.items()):  # Metal has no double: those programs must be refused by name
    try: render_metal(p if isinstance(p, Module) else Module([p]))
    except tgc.TgcError as e: refused[name] = str(e); del progs[name]
  fns = [f for p in progs.values() for f in (p.functions('uop.func') if isinstance(p, Module) else [p])]
  src = render_metal(Module(fns)) + '\n'.join(launcher(f) for f in fns) + '\n'
  td = tempfile.mkdtemp(prefix='tgc_metal_')
  with open(os.path.join(td, 'metal_stdlib'), 'w') as f: f.write(f'#include "{os.path.join(HERE, "metal_shim.h")}"\n')
  with open(os.path.join(td, 'k.metal.cpp'), 'w') as f: f.write(src)
  so = os.path.join(td, 'k.so')
  p = subprocess.run([GXX, '-std=c++20', '-O1', '-shared', '-fPIC', '-pthread', '-ffp-contract=off', '-Wno-attributes', '-I', td,
                      os.path.join(td, 'k.metal.cpp'), '-o', so], capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[:6000]
  lib = ctypes.CDLL(so)

  def built(fn):  # a kernel the programs do not hold (compile_module's zero fill of a result): a library of its own
    d = tempfile.mkdtemp(prefix='k_', dir=td)
    with open(os.path.join(d, 'k.metal.cpp'), 'w') as f: f.write(render_metal(Module([fn])) + launcher(fn) + '\n')
    p = subprocess.run([GXX, '-std=c++20', '-O1', '-shared', '-fPIC', '-pthread', '-Wno-attributes', '-I', td, os.path.join(d, 'k.metal.cpp'), '-o', os.path.join(d, 'k.so')],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[:6000]
    return getattr(ctypes.CDLL(os.path.join(d, 'k.so')), f"run_{fn.sym_name}")

  class ShimProgram(Program):
    def __init__(self, dev, fn):
      super().__init__(dev, fn)
      self.f = getattr(lib, f"run_{fn.sym_name}") if hasattr(lib, f"run_{fn.sym_name}") else built(fn)
    def launch(self, args): self.f((ctypes.c_void_p * max(len(args), 1))(*args))

  class ShimDevice(HostDevice):  # host memory; a launch takes the buffers' addresses
    name, target = 'METALSHIM', 'metal'
    def __init__(self): BaseDevice.__init__(self, HostPointerAllocator(self.name))
    def compile(self, fn): return ShimProgram(self, fn)
  dev = ShimDevice()
  yield progs, dev, refused
  shutil.rmtree(td, ignore_errors=True)


@pytest.mark.parametrize('name', list(TENSOR))
def test_tensor_programs_run_as_cpp(shim, name):
  progs, dev, refused = shim
  if name in refused:
    assert 'dtype f64 is not supported by the metal target' in refused[name]
    pytest.skip(f"refused as it must be: {refused[name]}")
  from tgc import runtime
  runtime._opened['METALSHIM'] = dev; runtime.DEVICES.setdefault('METALSHIM', 'tests:none')
  fn = compile_module(progs[name], device='METALSHIM')
  ins = inputs_for(name)
  for g, r in zip(fn(*ins), compiled(name, 'INTERP')(*ins)):
    if g.dtype.kind in 'iub': np.testing.assert_array_equal(g, r, err_msg=name)
    else: np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=2e-3 if g.dtype == np.float16 else 2e-6, err_msg=name)


@pytest.mark.parametrize('name', list(UOP))
def test_uop_programs_run_as_cpp(shim, name):
  progs, dev, _ = shim
  ins = uop_inputs(name)
  got = [b.copy() for b in ins]
  dev.compile(progs['uop_' + name])(*got)
  for g, r in zip(got, uop_reference(name, ins)):
    if g.dtype.kind in 'iub' or g.dtype == np.uint16: np.testing.assert_array_equal(g, r, err_msg=name)
    else: np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-3)


def test_seed_r_2_shape():
  m = I.parse(TENSOR['dot'][0])
  os.environ['NOOPT'] = '1'
  try: lower(m, 'metal')
  finally: del os.environ['NOOPT']
  assert render_metal(m) == """#include <metal_stdlib>
using namespace metal;
kernel void r_2(device int* data0, const device int* data1, const device int* data2, uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int acc0 = 0;
  for (int ridx0 = 0; ridx0 < 2; ridx0++) {
    int val0 = *(data1+ridx0);
    int val1 = *(data2+ridx0);
    acc0 = (acc0+(val0*val1));
  }
  *(data0+0) = acc0;
}
"""


def test_f64_is_a_clear_error():
  text = UOP['vec'][0].replace('f32', 'f64')
  with pytest.raises(tgc.TgcError, match=r"f64 is not supported by the metal target"):
    render_metal_kernel(I.parse(text).functions('uop.func')[0])
