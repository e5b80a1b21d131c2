"""tensor.attention: its plain form (tensor-decompose) against torch's scaled_dot_product_attention, on the CPU and
the reference interpreter, and its gradients through autodiff (the plain form differentiated)."""
import math
import numpy as np
import pytest
import torch
import tgc.ir as I
from tgc.compiler import compile_module
from tgc.passes.manager import PassManager, parse_pipeline


def _ty(shape, dt): return f"tensor<{'x'.join(map(str, shape))}x{dt}>"

def _text(qs, ks, vs, dt, causal, scale, same=False):
  out = qs[:-1] + vs[-1:]
  if same:  # attention(x, x, x): one argument read three times
    return f"""func.func @f(%x: {_ty(qs, dt)}) -> {_ty(out, dt)} {{
  %0 = tensor.attention %x, %x, %x {{causal = {int(causal)}, scale = {scale!r}}} : {_ty(qs, dt)}, {_ty(qs, dt)}, {_ty(qs, dt)} -> {_ty(out, dt)}
  func.return %0 : {_ty(out, dt)}
}}"""
  return f"""func.func @f(%q: {_ty(qs, dt)}, %k: {_ty(ks, dt)}, %v: {_ty(vs, dt)}) -> {_ty(out, dt)} {{
  %0 = tensor.attention %q, %k, %v {{causal = {int(causal)}, scale = {scale!r}}} : {_ty(qs, dt)}, {_ty(ks, dt)}, {_ty(vs, dt)} -> {_ty(out, dt)}
  func.return %0 : {_ty(out, dt)}
}}"""

def _torch(q, k, v, causal, scale, grad=None):
  ts = [torch.tensor(a.astype(np.float64), requires_grad=grad is not None) for a in (q, k, v)]
  o = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal, scale=scale)
  if grad is None: return o.detach().numpy()
  (o * torch.tensor(grad.astype(np.float64))).sum().backward()
  return o.detach().numpy(), [t.grad.numpy() for t in ts]

CASES = [((2, 5, 8), (2, 7, 8), (2, 7, 3)), ((2, 3, 16, 8), (2, 3, 16, 8), (2, 3, 16, 8)), ((9, 4), (5, 4), (5, 6))]


@pytest.mark.parametrize('shapes', CASES)
@pytest.mark.parametrize('causal', [True, False])
@pytest.mark.parametrize('dt', ['f32', 'f16'])
def test_attention_matches_torch(shapes, causal, dt):
  rng = np.random.default_rng(3)
  q, k, v = (rng.standard_normal(s).astype(np.float32 if dt == 'f32' else np.float16) for s in shapes)
  scale = 1 / math.sqrt(shapes[0][-1])
  (got,) = compile_module(I.parse(_text(*shapes, dt, causal, scale)), 'CPU')(q, k, v)
  tol = 1e-5 if dt == 'f32' else 1e-2
  np.testing.assert_allclose(got.astype(np.float64), _torch(q, k, v, causal, scale), rtol=tol, atol=tol)


def test_attention_on_the_interpreter():
  rng = np.random.default_rng(4)
  shapes = CASES[0]
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
  (got,) = compile_module(I.parse(_text(*shapes, 'f32', True, 0.3)), 'INTERP')(q, k, v)
  np.testing.assert_allclose(got, _torch(q, k, v, True, 0.3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('causal', [True, False])
def test_attention_gradients_through_autodiff(causal):
  """autodiff differentiates tensor.attention's plain form (it has no rule of its own): dq, dk and dv of
  sum(out * seed) against torch's."""
  rng = np.random.default_rng(5)
  shapes = CASES[0]
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
  seed = rng.standard_normal(shapes[0][:-1] + shapes[2][-1:]).astype(np.float32)
  m = I.parse(_text(*shapes, 'f32', causal, 0.4))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  out, dq, dk, dv = compile_module(m, 'CPU')(q, k, v, seed)
  want, grads = _torch(q, k, v, causal, 0.4, seed)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
  for got, ref in zip((dq, dk, dv), grads): np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_self_attention_gradient_sums_each_use_once():
  """attention(x, x, x): x's gradient is the sum of its three uses' (not three times that sum)."""
  rng = np.random.default_rng(6)
  x = rng.standard_normal((2, 6, 4)).astype(np.float32)
  seed = rng.standard_normal((2, 6, 4)).astype(np.float32)
  m = I.parse(_text((2, 6, 4), (2, 6, 4), (2, 6, 4), 'f32', True, 0.5, same=True))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  _, dx = compile_module(m, 'CPU')(x, seed)
  t = torch.tensor(x.astype(np.float64), requires_grad=True)
  (torch.nn.functional.scaled_dot_product_attention(t, t, t, is_causal=True, scale=0.5) * torch.tensor(seed.astype(np.float64))).sum().backward()
  np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-4, atol=1e-5)
