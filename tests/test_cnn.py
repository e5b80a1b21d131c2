"""A small CNN's forward pass on the CPU, against a numpy reference; and its kernel launches at DEBUG=2.

conv2d(1->8, 3x3, padding=1) + relu + max_pool2d(2) + conv2d(8->16, 3x3) + relu + max_pool2d(2) + flatten
+ linear(576->10) + log_softmax, on a batch of 32 random 28x28 images.
"""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest
from tgc import Tensor

BATCH = 32
HERE = os.path.dirname(os.path.abspath(__file__))


def make_params(seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  def he(*shape, fan_in): return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
  return {
    'x': rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32),
    'w1': he(8, 1, 3, 3, fan_in=9), 'b1': (rng.standard_normal(8) * 0.1).astype(np.float32),
    'w2': he(16, 8, 3, 3, fan_in=72), 'b2': (rng.standard_normal(16) * 0.1).astype(np.float32),
    'w3': he(16 * 6 * 6, 10, fan_in=576), 'b3': (rng.standard_normal(10) * 0.1).astype(np.float32),  # (in, out)
  }


def tgc_forward(p: dict[str, np.ndarray], device: str = 'CPU') -> Tensor:
  t = {k: Tensor(v, device=device) for k, v in p.items()}
  x = t['x'].conv2d(t['w1'], t['b1'], padding=1).relu().max_pool2d(2)
  x = x.conv2d(t['w2'], t['b2']).relu().max_pool2d(2)
  return x.flatten(1).linear(t['w3'], t['b3']).log_softmax()


# ---------------------------------------------------------------- the numpy reference

def np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding: int = 0) -> np.ndarray:
  """im2col: (N, C, H, W) * (O, C, kh, kw) -> (N, O, H', W'), stride 1, computed in float64."""
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  n, c, h, wd = x.shape
  o, _, kh, kw = w.shape
  oh, ow = h - kh + 1, wd - kw + 1
  cols = np.empty((n, c, kh, kw, oh, ow))
  for i in range(kh):
    for j in range(kw):
      cols[:, :, i, j] = x[:, :, i:i + oh, j:j + ow]
  cols = cols.reshape(n, c * kh * kw, oh * ow)
  out = np.einsum('ok,nkp->nop', w.reshape(o, -1).astype(np.float64), cols)
  return out.reshape(n, o, oh, ow) + b.astype(np.float64)[None, :, None, None]


def np_max_pool2d(x: np.ndarray, k: int = 2) -> np.ndarray:
  n, c, h, w = x.shape
  return x[:, :, :h // k * k, :w // k * k].reshape(n, c, h // k, k, w // k, k).max(axis=(3, 5))


def np_forward(p: dict[str, np.ndarray]) -> np.ndarray:
  x = np_max_pool2d(np.maximum(np_conv2d(p['x'], p['w1'], p['b1'], padding=1), 0))
  x = np_max_pool2d(np.maximum(np_conv2d(x, p['w2'], p['b2']), 0))
  z = x.reshape(x.shape[0], -1) @ p['w3'].astype(np.float64) + p['b3']
  z = z - z.max(axis=-1, keepdims=True)
  return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------- tests

def test_reference_shapes():
  p = make_params()
  assert np_conv2d(p['x'], p['w1'], p['b1'], padding=1).shape == (BATCH, 8, 28, 28)
  assert np_forward(p).shape == (BATCH, 10)


def test_cnn_forward_matches_numpy():
  p = make_params()
  out = tgc_forward(p)
  assert out.shape == (BATCH, 10) and out.dtype.name == 'f32'
  got = out.numpy()
  ref = np_forward(p)
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, rtol=1e-5)
  assert (got.argmax(axis=1) == ref.argmax(axis=1)).all()


def test_cnn_intermediate_shapes():
  p = make_params()
  t = {k: Tensor(v) for k, v in p.items()}
  c1 = t['x'].conv2d(t['w1'], t['b1'], padding=1)
  assert c1.shape == (BATCH, 8, 28, 28)
  h = c1.relu().max_pool2d(2)
  assert h.shape == (BATCH, 8, 14, 14)
  c2 = h.conv2d(t['w2'], t['b2'])
  assert c2.shape == (BATCH, 16, 12, 12)
  assert c2.relu().max_pool2d(2).flatten(1).shape == (BATCH, 576)
  np.testing.assert_allclose(c1.numpy(), np_conv2d(p['x'], p['w1'], p['b1'], padding=1), rtol=1e-5, atol=1e-5)


_SCRIPT = f"""
import sys
sys.path.insert(0, {HERE!r})
from test_cnn import make_params, tgc_forward
out = tgc_forward(make_params())
kernel_ir = out.to_ir("kernel")
n = sum(1 for line in kernel_ir.splitlines() if line.startswith("kernel.func"))
out.realize()
print("KERNEL_FUNCS", n)
"""


def test_cnn_debug2_kernel_launches():
  env = dict(os.environ, DEBUG='2', DEVICE='CPU')
  r = subprocess.run([sys.executable, '-c', _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  lines = r.stdout.splitlines()
  launches = [l for l in lines if l.startswith('*** CPU')]
  n_funcs = int(next(l for l in lines if l.startswith('KERNEL_FUNCS')).split()[1])
  print(f"CNN forward: {len(launches)} kernel launches at DEBUG=2, {n_funcs} kernel.funcs in to_ir('kernel')")
  for l in launches: print(l)
  assert n_funcs > 0
  assert len(launches) == n_funcs, f"{len(launches)} launches printed, {n_funcs} kernel.funcs:\n{r.stdout}"


# ---------------------------------------------------------------- bugs found while writing this file (fixed)

def test_sum_of_constant_tensor():  # a reduce over constants only once had no load to give its loop a size
  assert Tensor.ones(3).sum().item() == 3.0


def test_conv2d_of_constant_tensors():
  assert Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(1, 1, 3, 3)).tolist() == [[[[9.0, 9.0], [9.0, 9.0]]]]


def test_max_pool2d_padding_keeps_int_dtype():  # it padded with -inf, which made an int tensor float32
  y = Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d(2, padding=1)
  assert y.dtype.name == 'i32'
  assert y.tolist() == [[[[0, 2, 3], [8, 10, 11], [12, 14, 15]]]]
