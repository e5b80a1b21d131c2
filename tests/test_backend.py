"""A whole backend added from outside tgc's tree: a Target, an emitter and a device, and nothing else.

The backend here, "testc", is C99 with its own emitter function (the C language's renderer plus a banner, as a
new language would start from a neighbour's), and a device "TESTC" whose memory is its own caching allocator
over host bytes, so buffers go through alloc, copy in, launch and copy out as on a real accelerator.
"""
import ctypes, dataclasses
import numpy as np
import pytest
import tgc
from tgc import Tensor
from tgc.ir.core import Module
from tgc.runtime import Allocator, BaseDevice, Program, DEVICES, _opened, register_device
from tgc.target import TARGETS, get_target, register_target


def render_testc(module) -> str:
  """The emitter: every uop.func of the module as C99 source."""
  from tgc.emit.c import render_c
  return "/* testc */\n" + render_c(module)


class XCAllocator(Allocator):
  """Device-style memory (freed blocks are cached) in ctypes byte arrays; a launch passes their addresses."""
  def _alloc(self, nbytes): return (ctypes.c_uint8 * max(nbytes, 1))()
  def _copyin(self, h, arr): ctypes.memmove(h, arr.ctypes.data, arr.nbytes)
  def _copyout(self, arr, h): ctypes.memmove(arr.ctypes.data, h, arr.nbytes)
  def _copy(self, dst, src, nbytes): ctypes.memmove(dst, src, nbytes)
  def _arg(self, h): return ctypes.addressof(h)


class XCProgram(Program):
  def __init__(self, dev, fn):
    from tgc import emit
    from tgc.runtime.c import compile_c
    super().__init__(dev, fn)
    self.src = emit.render(Module([fn]), 'testc')
    self.f = getattr(compile_c(self.src), self.name)
    self.f.argtypes = [ctypes.c_void_p] * len(self.signature) + [ctypes.c_int, ctypes.c_int]
  def launch(self, args): self.f(*args, 0, self.global_size[0])


class XCDevice(BaseDevice):
  name, target = 'TESTC', 'testc'
  def __init__(self): super().__init__(XCAllocator(self.name)); self.launches = 0
  def compile(self, fn): return XCProgram(self, fn)


@pytest.fixture
def testc():
  register_target(dataclasses.replace(get_target('c'), name='testc', renderer='test_backend:render_testc', device=None))
  register_device('TESTC', 'test_backend:XCDevice')
  yield tgc.Device['TESTC']
  DEVICES.pop('TESTC', None); _opened.pop('TESTC', None); TARGETS.pop('testc', None)


def test_a_backend_from_a_test_file_runs_tensor_programs(testc):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((2, 16, 24)).astype(np.float32)
  x, y = Tensor(a, device='TESTC'), Tensor(b, device='TESTC')
  np.testing.assert_allclose((x * y + 1).sum(axis=1).numpy(), (a * b + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((x @ y.T).relu().numpy(), np.maximum(a @ b.T, 0), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(x.softmax(axis=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
  s = testc.allocator.stats()
  assert s['copies_in'] == 2 and s['copies_out'] == 3 and s['cached'] > 0


def test_the_new_target_is_known_to_the_tools(testc):
  from tgc import emit
  from tgc.compiler import device_target
  assert device_target('TESTC').name == 'testc'
  m = tgc.ir.parse("""func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = tensor.add %a, %a : tensor<4xf32>
  func.return %b : tensor<4xf32>
}""")
  from tgc.passes.pipelines import lower_to_uop_steps
  from tgc.passes.manager import PassManager, parse_pipeline
  PassManager(parse_pipeline(','.join(lower_to_uop_steps('testc')))).run(m)
  assert emit.render(m, 'testc').startswith('/* testc */')
  (r,) = tgc.compile("""func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = tensor.add %a, %a : tensor<4xf32>
  func.return %b : tensor<4xf32>
}""", device='TESTC')(np.arange(4, dtype=np.float32))
  np.testing.assert_array_equal(r, np.arange(4) * 2)
