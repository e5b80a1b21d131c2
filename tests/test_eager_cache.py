"""The eager compile cache: one compilation per graph structure; shape, dtype, view and baked-in constants miss."""
import numpy as np
from tgc import Tensor
from tgc import tensor as T

RNG = np.random.default_rng(11)

def _f32(*shape): return RNG.standard_normal(shape).astype(np.float32)

def _compiles(fn) -> int:
  n = len(T._COMPILED); fn(); return len(T._COMPILED) - n

def test_same_structure_other_data_hits_with_right_numbers():
  a, b = _f32(4, 4), _f32(4, 4)
  _compiles(lambda: (Tensor(a) + Tensor(b)).softmax(-1).numpy())
  for _ in range(3):
    a, b = _f32(4, 4), _f32(4, 4)
    got = []
    assert _compiles(lambda: got.append((Tensor(a) + Tensor(b)).softmax(-1).numpy())) == 0
    e = np.exp((a + b) - (a + b).max(-1, keepdims=True))
    np.testing.assert_allclose(got[0], e / e.sum(-1, keepdims=True), rtol=1e-5)

def test_broadcast_fast_path_matches_numpy():
  a, b, c = _f32(3, 5), _f32(3, 5), _f32(5)
  np.testing.assert_allclose((Tensor(a) * Tensor(b) + Tensor(c)).numpy(), a * b + c, rtol=1e-6)
  np.testing.assert_allclose((Tensor(a) - Tensor(b)).numpy(), a - b, rtol=1e-6)

def test_shape_dtype_view_constant_miss():
  a = _f32(4, 6)
  (Tensor(a) * 2).numpy()
  assert _compiles(lambda: (Tensor(_f32(4, 7)) * 2).numpy()) == 1  # another shape
  assert _compiles(lambda: (Tensor(a.astype(np.float64)) * 2).numpy()) == 1  # another dtype
  got = []
  assert _compiles(lambda: got.append((Tensor(a).T * 2).numpy())) == 1  # a view of the same buffer
  np.testing.assert_allclose(got[0], a.T * 2, rtol=1e-6)
  assert _compiles(lambda: got.append((Tensor(a) * 3).numpy())) == 1  # another baked-in constant
  np.testing.assert_allclose(got[1], a * 3, rtol=1e-6)
  assert _compiles(lambda: (Tensor(_f32(4, 6)) * 3).numpy()) == 0
