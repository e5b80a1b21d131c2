"""docs/extending.md's new op, followed end to end: declared here as the guide declares it, parsed from IR text,
decomposed, fused, lowered and run on the CPU against numpy."""
import numpy as np
import pytest
import tgc
from tgc.ir.core import Operation, PURE, ELEMENTWISE, REGISTRY
from tgc.ir.diagnostics import DiagnosticList
from tgc.parser import parse
from tgc.passes import PassManager


class SquareOp(Operation):
  name = 'tensor.square'
  OPERANDS = ('src',)
  ATTRS = {}
  TRAITS = {PURE}
  FORMAT = '$src : type($result)'
  def verify(self):
    if self.src.type != self.results[0].type: raise self.error("result type must match the operand")
  def decompose(self, rw):
    return rw.create(REGISTRY['tensor.mul'], [self.src, self.src], [self.results[0].type], loc=self.loc).results[0]


TEXT = """func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  %0 = tensor.square %x : tensor<4x8xf32>
  %1 = tensor.const 1.0 : tensor<4x8xf32>
  %2 = tensor.add %0, %1 : tensor<4x8xf32>
  %3 = tensor.reduce add %0 [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %4 = tensor.reshape %3 : tensor<4x1xf32> -> tensor<4xf32>
  func.return %2, %4 : tensor<4x8xf32>, tensor<4xf32>
}
"""


def test_the_op_parses_prints_and_verifies():
  m = parse(TEXT)
  assert '%0 = tensor.square %x : tensor<4x8xf32>' in m.print()
  with pytest.raises(DiagnosticList, match="'tensor.square' result type must match the operand"):
    parse("func.func @f(%x: tensor<4xf32>) -> tensor<4xi32> {\n  %0 = tensor.square %x : tensor<4xi32>\n  func.return %0 : tensor<4xi32>\n}\n")


def test_tensor_decompose_replaces_it():
  m = parse(TEXT)
  PassManager.parse('tensor-decompose').run(m)
  text = m.print()
  assert 'tensor.square' not in text and 'tensor.mul %x, %x' in text


@pytest.mark.parametrize('noopt', ['0', '1'])
def test_it_runs_on_the_cpu(noopt, monkeypatch):
  monkeypatch.setenv('NOOPT', noopt)
  x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
  out, sums = tgc.compile(TEXT, device='CPU')(x)
  np.testing.assert_allclose(out, x * x + 1, rtol=1e-6)
  np.testing.assert_allclose(sums, (x * x).sum(1), rtol=1e-5)


def test_kernelize_decomposes_it_too():
  m = parse(TEXT)
  PassManager.parse('kernelize').run(m)
  assert len(m.functions('kernel.func')) == 2  # the square fuses into the add's kernel and the reduce's


def test_an_op_kernels_cannot_compute_is_a_diagnostic():
  class CubeOp(Operation):  # elementwise, but no ALU op (no kernel.cube) and no decompose
    name = 'tensor.test_cube'
    OPERANDS = ('src',)
    TRAITS = {PURE, ELEMENTWISE}
    FORMAT = '$src : type($result)'
  try:
    m = parse("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tensor.test_cube %x : tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n")
    with pytest.raises(tgc.Diagnostic, match="no kernel can compute 'tensor.test_cube'.*decompose method"):
      PassManager.parse('kernelize').run(m)
  finally: REGISTRY.pop('tensor.test_cube')
