"""devectorize: a register-tiled kernel (vec<4> lanes, vector loads and accumulators) split to width 1, 2
and 4 keeps its results, and no vector wider than the width is left."""
import numpy as np
import pytest
from tgc import ir
from tgc.passes import PassManager
from tgc.compiler import compile_module

TEXT = """
kernel.func @r_8_8_8(%data0: !kernel.buf<8x8xf32>, %data1: !kernel.buf<8x8xf32>, %data2: !kernel.buf<8x8xf32>) attributes {opts = [upcast(axis = 1, amt = 8), upcast(axis = 0, amt = 2), unroll(axis = 4, amt = 4)]} {
  %0 = kernel.load %data1 [view(shape = [8, 8, 8], strides = [8, 0, 1], offset = 0)] : f32
  %1 = kernel.load %data2 [view(shape = [8, 8, 8], strides = [0, 1, 8], offset = 0)] : f32
  %2 = kernel.mul %0, %1 : f32
  %3 = kernel.reduce max %2 [2] : f32
  kernel.store %data0 [view(shape = [8, 8, 1], strides = [8, 1, 0], offset = 0)], %3 : f32
}
func.func @mm(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = kernel.alloc : tensor<8x8xf32>
  kernel.launch @r_8_8_8(%0, %a, %b)
  func.return %0 : tensor<8x8xf32>
}
"""

@pytest.mark.parametrize("device", ["CPU", "INTERP"])
@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_devectorize_keeps_results(width, device):
  m = ir.parse(TEXT)
  PassManager.parse(f'linearize,uop-simplify,devectorize{{width={width}}},cse,dce').run(m)
  widths = {r.type.count for fn in m.functions('uop.func') for op in fn.body.ops for r in op.results if isinstance(r.type, ir.VecType)}
  assert all(w <= width for w in widths), widths
  if width == 8: assert widths == {8}
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
  want = (a[:, None, :] * b.T[None, :, :]).max(-1)
  np.testing.assert_array_equal(compile_module(m, device)(a, b)[0], want)


@pytest.mark.parametrize("width", [1, 2, 4])
def test_devectorize_splits_vector_gates(width):
  """A masked vec<8> load and store (one gate a lane) split into chunks keep each lane's gate: the interpreter gives the
  same buffers before and after (a chunk of one lane takes a scalar gate)."""
  import sys, os
  sys.path.insert(0, os.path.dirname(__file__))
  from test_target_execute import UOP, uop_inputs
  from tgc.runtime import get_device
  ins = uop_inputs('masked')
  ins[2] = np.array([3, -5, 15], np.int32)
  def run(m):
    bufs = [b.copy() for b in ins]
    get_device('INTERP').compile(m.functions('uop.func')[0])(*bufs)
    return bufs
  want = run(ir.parse(UOP['masked'][0]))
  m = ir.parse(UOP['masked'][0])
  PassManager.parse(f'devectorize{{width={width}}}').run(m)
  m.verify()
  widths = {r.type.count for fn in m.functions('uop.func') for op in fn.body.ops for r in op.results if isinstance(r.type, ir.VecType)}
  assert all(w <= width for w in widths), widths
  for g, w in zip(run(m), want): np.testing.assert_array_equal(g, w)
