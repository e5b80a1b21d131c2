"""The autodiff pass: every primitive op's gradient rule against central finite differences (in f64, on the IR
the pass prints, compiled like any function), the pass's options and errors, and the Tensor API's
backward/gradient against torch (CPU) through movement ops, reductions, ties, matmul, conv2d and pooling."""
from __future__ import annotations
import os
import numpy as np
import pytest
import torch
from tgc import Tensor
from tgc.errors import TgcError
from tgc.ir.diagnostics import Diagnostic
from tgc.parser import parse
from tgc.passes import PassManager, PipelineError
from tgc.compiler import compile_module

DEV = os.environ.get('TGC_TEST_DEVICE', 'CPU')
T = 'tensor<2x3xf64>'
# op -> (body computing %r from %x and %y, both T; the type of %r)
OPS = {
  **{u: (f"%r = tensor.{u} %x : {T}", T) for u in ('neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip')},
  **{b: (f"%r = tensor.{b} %x, %y : {T}", T) for b in ('add', 'sub', 'mul', 'fdiv', 'mod', 'max', 'min')},
  'where': (f"%c = tensor.cmplt %x, %y : {T} -> tensor<2x3xi1>\n  %r = tensor.where %c, %x, %y : {T}", T),
  'mulacc': (f"%r = tensor.mulacc %x, %y, %x : {T}", T),
  'cast': (f"%a = tensor.cast %x : {T} -> tensor<2x3xf32>\n  %b = tensor.cast %a : tensor<2x3xf32> -> {T}\n  %r = tensor.mul %b, %y : {T}", T),
  'cast-int': (f"%i = tensor.cast %x : {T} -> tensor<2x3xi32>\n  %f = tensor.cast %i : tensor<2x3xi32> -> {T}\n  %r = tensor.mul %f, %x : {T}", T),
  'trunc': (f"%t = tensor.trunc %x : {T}\n  %r = tensor.mul %t, %y : {T}", T),
  'reduce-add': (f"%r = tensor.reduce add %x [1] : {T} -> tensor<2x1xf64>", 'tensor<2x1xf64>'),
  'reduce-max': (f"%r = tensor.reduce max %x [0] : {T} -> tensor<1x3xf64>", 'tensor<1x3xf64>'),
  'reduce-mul': (f"%r = tensor.reduce mul %x [0, 1] : {T} -> tensor<1x1xf64>", 'tensor<1x1xf64>'),
  'reshape': (f"%r = tensor.reshape %x : {T} -> tensor<3x2xf64>", 'tensor<3x2xf64>'),
  'expand': (f"%a = tensor.reshape %x : {T} -> tensor<1x2x3xf64>\n  %r = tensor.expand %a : tensor<1x2x3xf64> -> tensor<4x2x3xf64>", 'tensor<4x2x3xf64>'),
  'permute': (f"%r = tensor.permute %x [1, 0] : {T} -> tensor<3x2xf64>", 'tensor<3x2xf64>'),
  'pad': (f"%r = tensor.pad %x [(1, 0), (2, 1)] : {T} -> tensor<3x6xf64>", 'tensor<3x6xf64>'),
  'shrink': (f"%r = tensor.shrink %x [(1, 2), (0, 2)] : {T} -> tensor<1x2xf64>", 'tensor<1x2xf64>'),
  'flip': (f"%r = tensor.flip %x [1] : {T}", T),
  'contiguous': (f"%a = tensor.contiguous %x : {T}\n  %r = tensor.mul %a, %y : {T}", T),
  'matmul': (f"%p = tensor.permute %y [1, 0] : {T} -> tensor<3x2xf64>\n  %r = tensor.matmul %x, %p : {T}, tensor<3x2xf64> -> tensor<2x2xf64>", 'tensor<2x2xf64>'),
  'gelu': (f"%r = tensor.gelu %x : {T}", T),
  'gelu-negative': (f"%n = tensor.neg %x : {T}\n  %r = tensor.gelu %n : {T}", T),  # (the other branch of its sigmoid)
}


def func_text(body: str, rt: str) -> str:
  return f"func.func @f(%x: {T}, %y: {T}) -> {rt} {{\n  {body}\n  func.return %r : {rt}\n}}\n"

def run(text: str, *arrays):
  return compile_module(parse(text), DEV)(*arrays)


@pytest.mark.parametrize('op', list(OPS))
def test_rule_against_finite_differences(op):
  body, rt = OPS[op]
  text = func_text(body, rt)
  rng = np.random.default_rng(len(op))
  x, y = rng.uniform(0.5, 2.0, (2, 3)), rng.uniform(0.3, 0.45, (2, 3))
  if op == 'trunc': x = x + 0.25  # away from integers, where trunc jumps
  m = parse(text)
  PassManager.parse('autodiff{seed=true}').run(m)
  grad_text = m.print()
  assert parse(grad_text).print() == grad_text  # prints, parses back and verifies
  shape = tuple(int(s) for s in rt[len('tensor<'):-len('xf64>')].split('x'))
  seed = rng.standard_normal(shape)
  out, gx, gy = compile_module(m, DEV)(x, y, seed)
  fwd = compile_module(parse(text), DEV)
  def f(a, b): return float((fwd(a, b)[0] * seed).sum())
  eps = 1e-2 if op == 'cast' else 1e-6  # through f32 the function is a staircase of f32 steps: a wide step (it is linear)
  for arg, g in ((0, gx), (1, gy)):
    num = np.zeros((2, 3))
    for i in np.ndindex(2, 3):
      d = np.zeros((2, 3)); d[i] = eps
      a = (x + d, y) if arg == 0 else (x, y + d)
      b = (x - d, y) if arg == 0 else (x, y - d)
      num[i] = (f(*a) - f(*b)) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-4 if op == 'cast' else 1e-5, atol=1e-6, err_msg=f"{op}: gradient of argument {arg}")


def test_no_gradient_ops_give_zeros():
  text = func_text(f"%c = tensor.cmplt %x, %y : {T} -> tensor<2x3xi1>\n  %b = tensor.bitcast %x : {T} -> tensor<2x3xi64>\n"
                   f"  %f = tensor.cast %b : tensor<2x3xi64> -> {T}\n  %r = tensor.where %c, %f, %y : {T}", T)
  m = parse(text)
  PassManager.parse('autodiff{wrt=0}').run(m)
  _, gx = compile_module(m, DEV)(np.ones((2, 3)), np.full((2, 3), 2.0))
  np.testing.assert_array_equal(gx, np.zeros((2, 3)))


def test_options_pick_results_and_arguments():
  text = (f"func.func @f(%x: {T}, %y: {T}, %i: tensor<2x3xi32>) -> ({T}, {T}) {{\n  %a = tensor.mul %x, %y : {T}\n"
          f"  %b = tensor.mul %a, %a : {T}\n  func.return %a, %b : {T}, {T}\n}}\n")
  x, y, i = np.full((2, 3), 2.0), np.full((2, 3), 3.0), np.zeros((2, 3), np.int32)
  m = parse(text)
  PassManager.parse('autodiff{wrt=1 of=1}').run(m)
  assert [str(t) for t in m.ops[0].result_types] == [T] * 3
  np.testing.assert_allclose(run(m.print(), x, y, i)[2], 2 * (x * y) * x)  # d(xy)^2/dy
  m = parse(text)
  PassManager.parse('autodiff').run(m)  # every float argument, every float result summed
  _, _, gx, gy = run(m.print(), x, y, i)
  np.testing.assert_allclose(gx, y + 2 * x * y * y)
  np.testing.assert_allclose(gy, x + 2 * x * x * y)


def test_unused_argument_gets_zeros_and_errors_are_located():
  m = parse(func_text(f"%r = tensor.neg %x : {T}", T))
  PassManager.parse('autodiff{wrt=1}').run(m)
  np.testing.assert_array_equal(run(m.print(), np.ones((2, 3)), np.ones((2, 3)))[1], np.zeros((2, 3)))
  for opts, msg in (('wrt=2', 'wrt position 2 is out of range'), ('of=x', 'positions like'), ('wrt=0 of=0 func=g', None)):
    m = parse(func_text(f"%r = tensor.neg %x : {T}", T), filename='in.tgc')
    if msg is None:  # another function's name: this one is left alone
      PassManager.parse(f'autodiff{{{opts}}}').run(m); assert len(m.ops[0].result_types) == 1; continue
    with pytest.raises(Diagnostic, match=msg) as e: PassManager.parse(f'autodiff{{{opts}}}').run(m)
    assert 'in.tgc:1:1' in str(e.value)
  m = parse("func.func @f(%i: tensor<3xi32>) -> tensor<3xi32> {\n  func.return %i : tensor<3xi32>\n}\n")
  with pytest.raises(Diagnostic, match='only float tensors have gradients'): PassManager.parse('autodiff{wrt=0}').run(m)
  with pytest.raises(PipelineError): PassManager.parse('autodiff{seed=maybe}')


# ---------------------------------------------------------------- the Tensor API against torch

def both(*arrays):
  return [Tensor(a, device=DEV, requires_grad=True) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]

def check(fn, *arrays, tfn=None, rtol=1e-4, atol=1e-5):
  ts, ps = both(*arrays)
  fn(*ts).backward()
  (tfn or fn)(*ps).backward()
  for t, p in zip(ts, ps): np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=rtol, atol=atol)

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6, 5)).astype(np.float32)
Q, K, V, W = RNG.standard_normal((4, 2, 3, 5, 4)).astype(np.float32)  # (batch, heads, positions, head size)
MASK = RNG.standard_normal((5, 5)).astype(np.float32)

CASES = {
  'elementwise': (lambda a: (a.exp() * a.sin() + a.sigmoid() / (a * a + 1)).sum(), A),
  'log-sqrt-pow': (lambda a: ((a * a + 1).log() + (a.abs() + 1).sqrt() + (a * a + 0.5) ** 1.5).sum(), A),
  'getitem-flip-pad': (lambda a: (a[1:, ::2].flip(0).pad(((1, 0), (0, 2))) * 3).square().sum(),
                       A, lambda a: (torch.nn.functional.pad(a[1:, ::2].flip(0), (0, 2, 1, 0)) * 3).square().sum()),
  'permute-expand-reshape': (lambda a: (a.T.reshape(2, 12) * a.reshape(1, 2, 12).expand(3, 2, 12)).sum() + a[:, :1].expand(4, 6).square().sum(), A),
  'sum-mean-var': (lambda a: a.sum(1).square().sum() + a.mean(0).exp().sum() + a.var(1).sum(), A),
  'max-min-reduce': (lambda a: a.max(1).sum() + (a.min(0) * 2).sum(), A,
                     lambda a: a.amax(1).sum() + (a.amin(0) * 2).sum()),
  'prod': (lambda a: a.prod(1).sum(), A),
  'softmax-logsumexp': (lambda a: (a.softmax(1) * a).sum() + a.log_softmax(0)[1].sum() + a.logsumexp(1).sum(), A,
                        lambda a: (a.softmax(1) * a).sum() + a.log_softmax(0)[1].sum() + a.logsumexp(1).sum()),
  'matmul': (lambda a, b: (a @ b).relu().sum() + (a[0] @ b).square().sum(), A, B),
  'attention': (lambda q, k, v: (q.scaled_dot_product_attention(k, v, is_causal=True) * Tensor(W, device=DEV)).sum()
                + q.scaled_dot_product_attention(k, v, attn_mask=Tensor(MASK, device=DEV)).square().sum(), Q, K, V,
                lambda q, k, v: (torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * torch.tensor(W)).sum()
                + torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(MASK)).square().sum()),
  'where-maximum': (lambda a, b: (a > 0).where(a, a * b[:4, :1]).sum() + a.maximum(b[:4, :1] * 0.1).sum(), A, B,
                    lambda a, b: torch.where(a > 0, a, a * b[:4, :1]).sum() + torch.maximum(a, b[:4, :1] * 0.1).sum()),
  'cast': (lambda a: (a.half().float() * a).sum() + a.cast('float64').square().sum().float(), A,
           lambda a: (a.half().float() * a).sum() + a.double().square().sum().float()),
  'cumsum-cat-stack': (lambda a: a.cumsum(1).square().sum() + a.cat(a * 2, dim=1).exp().sum() + Tensor.stack(a, a).sum(0).square().sum(), A,
                       lambda a: a.cumsum(1).square().sum() + torch.cat([a, a * 2], dim=1).exp().sum() + torch.stack([a, a]).sum(0).square().sum()),
}

@pytest.mark.parametrize('case', list(CASES))
def test_tensor_gradient_against_torch(case):
  fn, *arrays = CASES[case]
  tfn = arrays.pop() if callable(arrays[-1]) else None
  check(fn, *arrays, tfn=tfn)


def test_ties_split_equally():
  """max of equal values and a max reduce over repeated maxima split the gradient, as torch's maximum and amax."""
  a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)
  b = np.array([[1.0, 0.0, 3.0], [2.0, 5.0, 2.0]], np.float32)
  check(lambda x, y: x.maximum(y).sum() + x.minimum(y).sum() * 3, a, b, tfn=lambda x, y: torch.maximum(x, y).sum() + torch.minimum(x, y).sum() * 3)
  check(lambda x: x.max(1).sum() + x.max().square(), a, tfn=lambda x: x.amax(1).sum() + x.amax().square())
  x = Tensor(a, device=DEV, requires_grad=True)
  x.max().backward()
  np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [0, 0, 0]])


def test_prod_with_zeros():
  a = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 5.0]], np.float32)
  check(lambda x: x.prod(1).sum(), a, tfn=lambda x: x.prod(1).sum())


CONV = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32), RNG.standard_normal((6, 2, 3, 3)).astype(np.float32), RNG.standard_normal(6).astype(np.float32)

@pytest.mark.parametrize('kw', [dict(), dict(stride=2, padding=1), dict(padding=(2, 1), dilation=2, groups=2), dict(padding=1),
                                dict(padding=(1, 2), dilation=(2, 1)), dict(padding=(2, 2), dilation=1), dict(stride=(3, 2), padding=(0, 1)),
                                dict(stride=2, padding=2, dilation=2)])
def test_conv2d_gradient(kw):
  x, w, b = CONV
  groups = kw.get('groups', 1)
  w = w if groups == 2 else RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
  check(lambda x, w, b: x.conv2d(w, b, **kw).relu().square().sum(), x, w, b,
        tfn=lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw).relu().square().sum(), rtol=1e-3, atol=1e-3)


def test_conv_input_gradient_is_a_transposed_conv():
  """Of a conv (any stride and dilation, a padding within the window's reach) the input's gradient is a conv of the
  output's gradient (its elements a stride apart, zeros between) with the flipped weight: the backward graph holds a
  second tensor.conv; with a wider padding it is the plain form's (no second conv). Both equal torch's."""
  x, w = RNG.standard_normal((2, 3, 8, 7)).astype(np.float32), RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
  for kw, convs in ((dict(padding=1), 2), (dict(padding=(0, 2), dilation=(1, 2)), 2), (dict(padding=1, stride=2), 2),
                    (dict(padding=(1, 0), stride=(3, 2)), 2), (dict(padding=3), 1)):
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    loss = (tx.conv2d(tw, **kw) ** 2).sum()
    gx, gw = loss.gradient(tx, tw)
    assert gx.to_ir('tensor').count('tensor.conv') == convs, kw
    px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (torch.nn.functional.conv2d(px, pw, **kw) ** 2).sum().backward()
    np.testing.assert_allclose(gx.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gw.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_pooling_gradient():
  x = CONV[0]
  check(lambda x: x.max_pool2d(2).square().sum() + x.avg_pool2d(3, stride=2).exp().sum(), x,
        tfn=lambda x: torch.nn.functional.max_pool2d(x, 2).square().sum() + torch.nn.functional.avg_pool2d(x, 3, stride=2).exp().sum())


def test_gradient_targets_detach_and_accumulation():
  x, w = (Tensor(v, device=DEV) for v in (A, B))
  h = x @ w
  loss = (h.relu() * h.detach()).sum()
  gh, gw = loss.gradient(h, w)
  hn = A @ B
  np.testing.assert_allclose(gh.numpy(), (hn > 0) * hn, rtol=1e-5, atol=1e-5)  # through relu only: the detached factor is constant
  np.testing.assert_allclose(gw.numpy(), A.T @ ((hn > 0) * hn), rtol=1e-4, atol=1e-4)
  with pytest.raises(TgcError, match='not in the graph'): loss.gradient(Tensor(A, device=DEV))
  assert float(loss.gradient(Tensor(A, device=DEV), materialize_grads=True)[0].abs().sum().item()) == 0
  p = Tensor(A, device=DEV, requires_grad=True)
  for _ in range(2): (p * 3).sum().backward()
  np.testing.assert_allclose(p.grad.numpy(), np.full(A.shape, 6.0))
  q = Tensor(A, device=DEV, requires_grad=True)
  s = B.T[:4]
  (q * q).backward(Tensor(s, device=DEV))  # a non-scalar output needs its gradient
  np.testing.assert_allclose(q.grad.numpy(), 2 * A * s, rtol=1e-6)
  with pytest.raises(TgcError, match='needs a gradient'): (q * q).backward()


def test_gradient_is_lazy_and_fuses():
  x = Tensor(A, device=DEV, requires_grad=True)
  (x.exp() * 2).sum().backward()
  assert not x.grad.node.realized
  ir = x.grad.to_ir('kernel')
  assert ir.count('kernel.func') == 1  # forward exp and backward multiply in one elementwise kernel
  np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(A), rtol=1e-5)


def test_a_graph_differentiated_again_replays_its_backward(monkeypatch):
  """A second backward of a graph of the same structure makes the backward nodes the first one's autodiff pass made,
  without the pass, and they compute the new values' gradients; another set of targets, another detached node or
  another seed is another backward."""
  import tgc.passes.autodiff as AD
  calls = []
  real = AD.differentiate
  monkeypatch.setattr(AD, 'differentiate', lambda *a, **k: calls.append(1) or real(*a, **k))
  rng = np.random.default_rng(3)
  def step(x, w, b, detach=False, seed=None):
    xt, wt, bt = (Tensor(a).requires_grad_() for a in (x, w, b))
    h = (xt @ (wt.detach() if detach else wt) + bt).gelu()
    loss = h.mean() if seed is None else h
    loss.backward(None if seed is None else Tensor(seed))
    xq, wq, bq = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    hq = torch.nn.functional.gelu(xq @ (wq.detach() if detach else wq) + bq, approximate='tanh')
    (hq.mean() if seed is None else hq).backward(None if seed is None else torch.tensor(seed))
    for t, q in ((xt, xq), (wt, wq), (bt, bq)):
      if q.grad is None: assert t.grad is None or not t.grad.numpy().any()
      else: np.testing.assert_allclose(t.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
  args = lambda: (rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32))
  step(*args()); n = len(calls)
  step(*args()); assert len(calls) == n  # (the same structure: replayed)
  step(*args(), detach=True); assert len(calls) == n + 1
  step(*args(), detach=True); assert len(calls) == n + 1
  step(*args(), seed=rng.standard_normal((4, 5)).astype(np.float32)); assert len(calls) == n + 2
  step(*args(), seed=rng.standard_normal((4, 5)).astype(np.float32)); assert len(calls) == n + 2
  x, w, b = args()  # a target set of one: another backward
  xt, wt = Tensor(x).requires_grad_(), Tensor(w)
  (xt @ wt + Tensor(b)).gelu().mean().backward()
  assert len(calls) == n + 3 and wt.grad is None
