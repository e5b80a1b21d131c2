"""Tensor.to_ir at the three levels, tinygrad's kernel counts, compile caching, realizing several tensors
together, Tensor.jit, and the same programs on CPU and on the reference interpreter."""
import os
import numpy as np
import pytest
import tgc
from tgc import Tensor, dtypes, TgcError
from tgc import tensor as T

RNG = np.random.default_rng(5)


@pytest.fixture
def noopt(monkeypatch):
  monkeypatch.setenv("NOOPT", "1")

def kernels(t: Tensor) -> list[str]:
  return [line.split('@')[1].split('(')[0] for line in t.to_ir("kernel").splitlines() if line.startswith('kernel.func')]


def test_to_ir_tensor_level():
  a, b = Tensor([1, 2]), Tensor([3, 4])
  text = a.dot(b).to_ir()
  assert text == """func.func @main(%arg0: tensor<2xi32>, %arg1: tensor<2xi32>) -> tensor<i32> {
  %0 = tensor.mul %arg0, %arg1 : tensor<2xi32>
  %1 = tensor.reduce add %0 [0] : tensor<2xi32> -> tensor<1xi32>
  %2 = tensor.reshape %1 : tensor<1xi32> -> tensor<i32>
  func.return %2 : tensor<i32>
}
"""
  assert tgc.ir.parse(text).print() == text  # round trip

def test_to_ir_broadcast_and_promotion_are_explicit():
  x = Tensor(np.ones((3, 1), np.int32)) + Tensor(np.ones(7, np.float32))
  text = x.to_ir()
  assert 'tensor.cast %arg0 : tensor<3x1xi32> -> tensor<3x1xf32>' in text
  assert 'tensor.expand' in text and 'tensor.reshape' in text
  assert tgc.ir.parse(text).print() == text
  y = Tensor(np.ones((3, 7), np.float32)) * 2.5
  assert 'tensor.const 2.5 : tensor<3x7xf32>' in y.to_ir()

def test_to_ir_shared_nodes_once():
  a = Tensor(np.ones(4, np.float32))
  b = a.exp()
  text = (b * b + b).to_ir()
  assert text.count('tensor.exp2') == 1 and text.count('%arg') == 2  # the declaration and one use... of one argument
  assert 'func.func @main(%arg0: tensor<4xf32>)' in text

def test_to_ir_levels():
  a = Tensor(np.ones((4, 4), np.float32))
  assert 'kernel.func' in (a + 1).to_ir("kernel")
  u = (a + 1).to_ir("uop")
  assert 'uop.func' in u and 'kernel.func' not in u
  with pytest.raises(TgcError): a.to_ir("llvm")
  assert a.to_ir() == "func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {\n  func.return %arg0 : tensor<4x4xf32>\n}\n"

def test_seed_dot(noopt):
  t = Tensor([1, 2]).dot(Tensor([3, 4]))
  assert kernels(t) == ['r_2']
  assert t.numpy() == 11 and t.item() == 11

def test_seed_fusion(noopt):
  a, b, c = (Tensor(RNG.standard_normal((4, 4)).astype(np.float32)) for _ in range(3))
  assert len(kernels(a + b)) == 1
  assert len(kernels(a * b + c)) == 1
  assert len(kernels(a.sum(0))) == 1
  assert len(kernels(a.softmax())) == 1  # max, exp-sum in stages of one kernel, the division its epilogue
  assert len(kernels(a.softmax(0))) == 1
  assert len(kernels(a.var(axis=1))) == 1  # the mean, then the squares about it: one kernel
  assert len(kernels(a.layernorm())) == 1  # mean, variance and the normalised rows
  assert len(kernels(a.log_softmax())) == 1
  assert len(kernels((a @ b).relu().sum(1))) <= 2
  an, bn, cn = a.numpy(), b.numpy(), c.numpy()
  np.testing.assert_allclose((a * b + c).numpy(), an * bn + cn, rtol=1e-6)
  np.testing.assert_allclose(a.sum(0).numpy(), an.sum(0), rtol=1e-6)
  e = np.exp(an - an.max(1, keepdims=True))
  np.testing.assert_allclose(a.softmax().numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
  e0 = np.exp(an - an.max(0, keepdims=True))
  np.testing.assert_allclose(a.softmax(0).numpy(), e0 / e0.sum(0, keepdims=True), rtol=1e-5)
  xc = an - an.mean(1, keepdims=True)
  np.testing.assert_allclose(a.layernorm().numpy(), xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5)

def test_compile_cache():
  T._COMPILED.clear()
  x1, x2 = Tensor(RNG.standard_normal(5).astype(np.float32)), Tensor(RNG.standard_normal(5).astype(np.float32))
  r1, r2 = (x1 * 3 + 1).numpy(), (x2 * 3 + 1).numpy()
  assert len(T._COMPILED) == 1  # same graph shape: compiled once
  np.testing.assert_allclose(r1, x1.numpy() * 3 + 1, rtol=1e-6); np.testing.assert_allclose(r2, x2.numpy() * 3 + 1, rtol=1e-6)
  (x1 * 4 + 1).numpy()
  assert len(T._COMPILED) == 2  # a different constant is a different program
  (Tensor(x1.numpy(), device="INTERP") * 3 + 1).numpy()
  assert len(T._COMPILED) == 3  # and so is another device

def test_realize_several_and_shared_subgraphs():
  a = Tensor(RNG.standard_normal((3, 7)).astype(np.float32))
  s = (a * 2).exp()
  x, y = s.sum(1), s.max(0)
  x.realize(y)
  assert x.node.realized and y.node.realized
  an = a.numpy()
  np.testing.assert_allclose(x.numpy(), np.exp(an * 2).sum(1), rtol=1e-5)
  np.testing.assert_allclose(y.numpy(), np.exp(an * 2).max(0), rtol=1e-5)
  s.realize()
  z = s + 1  # built on a realized node: s is now an argument
  assert z.to_ir().count('tensor.exp2') == 0
  np.testing.assert_allclose(z.numpy(), np.exp(an * 2) + 1, rtol=1e-5)

def test_realize_is_in_place_for_shared_nodes():
  a = Tensor([1.0, 2.0])
  b = a + 1
  c, d = b * 2, b * 3
  c.realize()
  d.realize()
  b.realize()
  np.testing.assert_allclose(d.numpy(), [6, 9]); np.testing.assert_allclose(b.numpy(), [2, 3])

def test_jit():
  calls = []
  @Tensor.jit
  def f(x, y):
    calls.append(1)
    return (x @ y).relu() + 1, x.sum()
  for i in range(3):
    xa, ya = RNG.standard_normal((3, 7)).astype(np.float32), RNG.standard_normal((7, 2)).astype(np.float32)
    o1, o2 = f(Tensor(xa), Tensor(ya))
    np.testing.assert_allclose(o1.numpy(), np.maximum(xa @ ya, 0) + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o2.numpy(), xa.sum(), rtol=1e-5)
  assert len(calls) == 1
  o1, _ = f(Tensor(np.ones((2, 7), np.float32)), Tensor(np.ones((7, 2), np.float32)))
  assert len(calls) == 2 and o1.shape == (2, 2)

PROGRAMS = {
  'mlp': lambda x, w: (x @ w).relu().sum(1),
  'softmax': lambda x, w: x.softmax(),
  'norm': lambda x, w: (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-3),
  'argmax': lambda x, w: x.argmax(1),
  'movement': lambda x, w: x.T[::-1, 1:].pad(((1, 0), (0, 1))).flip(1) * 2,
  'cumsum': lambda x, w: x.cumsum(1),
  'compare': lambda x, w: ((x > 0) & (x < 0.5)).where(x, -x).abs().sqrt(),
  'getitem': lambda x, w: x[1:, None, ::2] + w[0, :3],
  'int': lambda x, w: ((x * 10).cast(dtypes.int32) // 3) % 4 - (x * 10).cast(dtypes.int32) >> 1,
}

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_cpu_matches_interp(name):
  """Each program on both devices: the interpreter is the reference for the LLVM backend."""
  x, w = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6, 5)).astype(np.float32)
  res = [PROGRAMS[name](Tensor(x, device=d), Tensor(w, device=d)).numpy() for d in ("CPU", "INTERP")]
  assert res[0].shape == res[1].shape
  np.testing.assert_allclose(res[0], res[1], rtol=1e-5, atol=1e-6)
