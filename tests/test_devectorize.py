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
