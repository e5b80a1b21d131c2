"""tensor.attention: its plain form (tensor-decompose) against torch's scaled_dot_product_attention, on the CPU and
the reference interpreter; its gradients through autodiff (flash attention's backward, from the plain form's
probabilities); on the cuda target the fused kernel (one kernel.attention, its CUDA source built by nvcc here), and
on a GPU the Tensor API's scaled_dot_product_attention through it against torch's, gradients included."""
import math, os, shutil, subprocess, tempfile
import numpy as np
import pytest
import torch
import tgc.ir as I
from tgc.compiler import compile_module
from tgc.passes.manager import PassManager, parse_pipeline


def _ty(shape, dt): return f"tensor<{'x'.join(map(str, shape))}x{dt}>"

def _text(qs, ks, vs, dt, causal, scale, same=False, bias=False):
  out = qs[:-1] + vs[-1:]
  if bias:  # a bias of the scores' shape, a fourth argument
    bs = qs[:-1] + ks[-2:-1]
    return f"""func.func @f(%q: {_ty(qs, dt)}, %k: {_ty(ks, dt)}, %v: {_ty(vs, dt)}, %b: {_ty(bs, dt)}) -> {_ty(out, dt)} {{
  %0 = tensor.attention %q, %k, %v, %b {{causal = {int(causal)}, scale = {scale!r}}} : {_ty(qs, dt)}, {_ty(ks, dt)}, {_ty(vs, dt)}, {_ty(bs, dt)} -> {_ty(out, dt)}
  func.return %0 : {_ty(out, dt)}
}}"""
  if same:  # attention(x, x, x): one argument read three times
    return f"""func.func @f(%x: {_ty(qs, dt)}) -> {_ty(out, dt)} {{
  %0 = tensor.attention %x, %x, %x {{causal = {int(causal)}, scale = {scale!r}}} : {_ty(qs, dt)}, {_ty(qs, dt)}, {_ty(qs, dt)} -> {_ty(out, dt)}
  func.return %0 : {_ty(out, dt)}
}}"""
  return f"""func.func @f(%q: {_ty(qs, dt)}, %k: {_ty(ks, dt)}, %v: {_ty(vs, dt)}) -> {_ty(out, dt)} {{
  %0 = tensor.attention %q, %k, %v {{causal = {int(causal)}, scale = {scale!r}}} : {_ty(qs, dt)}, {_ty(ks, dt)}, {_ty(vs, dt)} -> {_ty(out, dt)}
  func.return %0 : {_ty(out, dt)}
}}"""

def _torch(q, k, v, causal, scale, grad=None, bias=None):
  ts = [torch.tensor(a.astype(np.float64), requires_grad=grad is not None) for a in (q, k, v) + (() if bias is None else (bias,))]
  if bias is not None and causal:  # (torch takes a mask or is_causal: the causal mask folded into the bias)
    ts_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    o = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3].masked_fill(~ts_mask, -math.inf), scale=scale)
  else: o = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3] if bias is not None else None, is_causal=causal, scale=scale)
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
@pytest.mark.parametrize('dt', ['f32', 'f16'])
def test_attention_gradients_through_autodiff(causal, dt):
  """autodiff's rule for tensor.attention: dq, dk and dv of sum(out * seed) against torch's (f16: the probabilities
  and their gradient rounded to f16 for the products, as flash attention's backward)."""
  rng = np.random.default_rng(5)
  shapes = CASES[0]
  np_dt = np.float32 if dt == 'f32' else np.float16
  q, k, v = (rng.standard_normal(s).astype(np_dt) for s in shapes)
  seed = rng.standard_normal(shapes[0][:-1] + shapes[2][-1:]).astype(np_dt)
  m = I.parse(_text(*shapes, dt, causal, 0.4))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  out, dq, dk, dv = compile_module(m, 'CPU')(q, k, v, seed)
  want, grads = _torch(q, k, v, causal, 0.4, seed)
  tol = (1e-5, 1e-4) if dt == 'f32' else (1e-2, 2e-2)
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol[0], atol=tol[0])
  for got, ref in zip((dq, dk, dv), grads): np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol[1], atol=tol[1])


@pytest.mark.parametrize('causal', [True, False])
@pytest.mark.parametrize('dt', ['f32', 'f16'])
def test_attention_with_a_bias_and_its_gradients(causal, dt):
  """tensor.attention's fourth operand, added to the scaled scores (a mask's -inf hides keys): the plain form's value
  and autodiff's dq, dk, dv and dbias (the scores' gradient) against torch's attn_mask."""
  rng = np.random.default_rng(8)
  shapes = CASES[1]
  np_dt = np.float32 if dt == 'f32' else np.float16
  q, k, v = (rng.standard_normal(s).astype(np_dt) for s in shapes)
  bias = rng.standard_normal(shapes[0][:-1] + shapes[1][-2:-1])
  bias[..., 3] = -np.inf  # (a key no query sees)
  bias = bias.astype(np_dt)
  seed = rng.standard_normal(shapes[0][:-1] + shapes[2][-1:]).astype(np_dt)
  m = I.parse(_text(*shapes, dt, causal, 0.4, bias=True))
  (got,) = compile_module(m, 'CPU')(q, k, v, bias)
  tol = (1e-5, 1e-4) if dt == 'f32' else (1e-2, 2e-2)
  want, grads = _torch(q, k, v, causal, 0.4, seed, bias)
  np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol[0], atol=tol[0])
  m = I.parse(_text(*shapes, dt, causal, 0.4, bias=True))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  out, *gs = compile_module(m, 'CPU')(q, k, v, bias, seed)
  np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol[0], atol=tol[0])
  for got, ref in zip(gs, grads): np.testing.assert_allclose(got.astype(np.float64), np.nan_to_num(ref), rtol=tol[1], atol=tol[1])


@pytest.mark.parametrize('causal', [True, False])
def test_grouped_query_attention_and_its_gradients(causal):
  """k and v with fewer heads than q (axis -3), each shared by a group of q's heads: the plain form's value and
  autodiff's dq, dk, dv (k's and v's summed over their groups) against torch's enable_gqa."""
  rng = np.random.default_rng(10)
  shapes = ((2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 3))
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
  seed = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)
  m = I.parse(_text(*shapes, 'f32', causal, 0.4))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  out, *gs = compile_module(m, 'CPU')(q, k, v, seed)
  ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v)]
  o = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal, scale=0.4, enable_gqa=True)
  (o * torch.tensor(seed.astype(np.float64))).sum().backward()
  np.testing.assert_allclose(out, o.detach().numpy(), rtol=1e-5, atol=1e-5)
  for got, t in zip(gs, ts): np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('boolean', [True, False])
def test_sdpa_with_a_mask_on_the_cpu(boolean):
  """The Tensor API's scaled_dot_product_attention with attn_mask where no fused kernel runs it (the composite): a
  query row the mask hides every key from gives 0 and no NaN in any gradient (torch's math), against torch's,
  the gradients of q, k, v and of a float mask too; enable_gqa beside it."""
  import tgc
  rng = np.random.default_rng(12)
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 6, 8), (2, 2, 5, 8), (2, 2, 5, 8)))
  mask = rng.random((2, 1, 6, 5)) > 0.4 if boolean else rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
  if boolean: mask[:, :, 2] = False
  else: mask[:, :, 2] = -np.inf
  xs = [tgc.Tensor(a, requires_grad=True) for a in (q, k, v)] + [tgc.Tensor(mask, requires_grad=not boolean)]
  out = xs[0].scaled_dot_product_attention(xs[1], xs[2], attn_mask=xs[3], enable_gqa=True)
  (out * out).sum().backward()
  ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)] + [torch.tensor(mask, requires_grad=not boolean)]
  ref = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3], enable_gqa=True)
  (ref * ref).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
  assert not np.abs(out.numpy()[:, :, 2]).any()
  for x, t in zip(xs, ts):
    if t.requires_grad: np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('causal', [True, False])
def test_sdpa_scale_keyword(causal):
  """scale= (torch's keyword) in place of 1/sqrt(d), through the Tensor API, against torch's; a scale that is not a
  finite number is an ArgumentError."""
  import tgc
  rng = np.random.default_rng(13)
  q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(3))
  got = tgc.Tensor(q).scaled_dot_product_attention(tgc.Tensor(k), tgc.Tensor(v), is_causal=causal, scale=0.7).numpy()
  want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=causal, scale=0.7).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match='scale must be a finite number'):  # (tgc.errors.ArgumentError)
    tgc.Tensor(q).scaled_dot_product_attention(tgc.Tensor(k), tgc.Tensor(v), scale=float('nan'))


def _capped_torch(q, k, v, causal, scale, cap, mask=None):
  """torch's attention with the scores soft-capped (cap * tanh(s / cap)) before the mask, in float64 (torch's sdpa has
  no softcap: the scores written out)."""
  s = q @ k.transpose(-2, -1) * scale
  s = cap * torch.tanh(s / cap)
  if mask is not None: s = s + mask
  if causal: s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
  return s.softmax(-1) @ v


@pytest.mark.parametrize('causal,bias', [(True, False), (False, True)])
def test_softcap_plain_form_and_gradients(causal, bias):
  """softcap = c: the scaled scores capped, c * tanh(s / c), before the bias; the plain form's value and autodiff's
  gradients (q, k, v and the bias) against torch's, float64."""
  rng = np.random.default_rng(21)
  qs = (2, 3, 12, 8)
  q, k, v = (rng.standard_normal(qs).astype(np.float32) * 2 for _ in range(3))
  b = rng.standard_normal(qs[:-1] + (12,)).astype(np.float32) if bias else None
  seed = rng.standard_normal(qs).astype(np.float32)
  text = _text(qs, qs, qs, 'f32', causal, 0.5, bias=bias).replace('scale = 0.5}', 'scale = 0.5, softcap = 3.0}')
  m = I.parse(text)
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  out, *grads = compile_module(m, 'CPU')(*([q, k, v] + ([b] if bias else []) + [seed]))
  ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v) + ((b,) if bias else ())]
  o = _capped_torch(*ts[:3], causal, 0.5, 3.0, ts[3] if bias else None)
  (o * torch.tensor(seed.astype(np.float64))).sum().backward()
  np.testing.assert_allclose(out, o.detach().numpy(), rtol=1e-5, atol=1e-5)
  for got, t in zip(grads, ts): np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_sdpa_softcap_keyword():
  """softcap= (tgc's keyword, Gemma 2's soft-capping) through the Tensor API against the scores written out in torch;
  a softcap that is not a positive finite number is an ArgumentError; on cuda the attention is one kernel (_cap)."""
  import tgc
  from tgc.lowering import lower
  rng = np.random.default_rng(14)
  q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) * 3 for _ in range(3))
  got = tgc.Tensor(q).scaled_dot_product_attention(tgc.Tensor(k), tgc.Tensor(v), is_causal=True, softcap=2.0).numpy()
  want = _capped_torch(*(torch.tensor(a.astype(np.float64)) for a in (q, k, v)), True, 8 ** -0.5, 2.0).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for bad in (0.0, -1.0, float('inf')):
    with pytest.raises(ValueError, match='softcap must be'):
      tgc.Tensor(q).scaled_dot_product_attention(tgc.Tensor(k), tgc.Tensor(v), softcap=bad)
  m = lower(I.parse(_text((2, 3, 100, 64), (2, 3, 70, 64), (2, 3, 70, 64), 'f16', True, 0.125).replace('scale = 0.125}', 'scale = 0.125, softcap = 30.0}')), 'cuda', 'kernel')
  (kf,) = m.functions('kernel.func')
  assert str(kf.sym_name) == 'attn_causal_cap_6_100_70_64' and kf.body.ops[0].attrs['softcap'] == 30.0


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


# ---- the fused kernel (the cuda target's FusedAttention)

NVCC = shutil.which('nvcc') or ('/usr/local/bin/nvcc' if os.path.exists('/usr/local/bin/nvcc') else None)

def _lowered(qs, ks, vs, dt, causal, stage='uop', **spec):
  from tgc.lowering import lower
  return lower(I.parse(_text(qs, ks, vs, dt, causal, 0.125)), 'cuda', stage, **spec)


@pytest.mark.parametrize('dt,hd', [('f16', 64), ('bf16', 128)])
def test_cuda_lowers_attention_as_one_kernel(dt, hd):
  """f16/bf16 heads of 64 or 128 on cuda: one kernel.attention kernel (its operands' views B x H x rows x E) whose
  uop.func launches a work-group of 128 threads a head and 64 queries, and one uop.attention in it."""
  qs, ks = (2, 3, 100, hd), (2, 3, 70, hd)
  m = _lowered(qs, ks, ks, dt, True, 'kernel')
  (k,) = m.functions('kernel.func')
  assert [op.name for op in k.body.ops] == ['kernel.attention']
  assert [vs.shape for vs in k.body.ops[0].views()] == [(2, 3, 100, hd), (2, 3, 100, hd), (2, 3, 70, hd), (2, 3, 70, hd)]
  for wg in (True, False):  # (the products on a warpgroup where the device has warpgroup tensor cores)
    u = _lowered(qs, ks, ks, dt, True, warpgroup=wg)
    (f,) = u.functions('uop.func')
    assert f.attrs['global_size'] == (6, 2) and f.attrs['local_size'] == (128,)
    (a,) = [op for op in f.body.ops if op.name == 'uop.attention']
    assert (a.attrs['rows'], a.attrs['keys'], a.attrs['dim'], a.attrs['causal'], a.attrs.get('warpgroup', 0)) == (100, 70, hd, 1, int(wg))


def test_cuda_forward_kernel_stores_an_lse_listed_before_it():
  """A backward's graph lists the lse dq reads before the forward whose output d reads (the Tensor API's order): the
  forward's kernel stores it all the same (no lse-only kernel), where everything reading the lse comes after the
  forward; where something reads it before, the lse has its own kernel."""
  from tgc.lowering import lower
  T, R = 'tensor<2x3x100x64xf16>', 'tensor<2x3x100x1xf32>'
  def text(early):
    use = f"  %early = tensor.exp2 %lse : {R} -> {R}\n" if early else ''
    return f"""func.func @f(%q: {T}, %k: {T}, %v: {T}, %g: {T}) -> ({T}{', ' + R if early else ''}) {{
  %lse = tensor.attention_lse %q, %k {{causal = 1, scale = 0.125}} : {T}, {T} -> {R}
{use}  %o = tensor.attention %q, %k, %v {{causal = 1, scale = 0.125}} : {T}, {T}, {T} -> {T}
  %m = tensor.mul %g, %o : {T}
  %mf = tensor.cast %m : {T} -> tensor<2x3x100x64xf32>
  %d = tensor.reduce add %mf [3] : tensor<2x3x100x64xf32> -> {R}
  %dq = tensor.attention_grad %q, %k, %v, %g, %lse, %d {{causal = 1, scale = 0.125, wrt = 0}} : {T}, {T}, {T} -> {T}
  func.return %dq{', %early' if early else ''} : {T}{', ' + R if early else ''}
}}""".replace(f"tensor.exp2 %lse : {R} -> {R}", f"tensor.exp2 %lse : {R}")
  names = lambda early: [str(f.sym_name).split('_')[:2] for f in lower(I.parse(text(early)), 'cuda', 'kernel').functions('kernel.func')]
  assert names(False) == [['attn', 'causal'], ['r', '600'], ['attn', 'dq']]
  assert ['attn', 'lse'] in names(True)


@pytest.mark.parametrize('dt,hd,spec', [('f32', 64, {}), ('f16', 32, {}), ('f16', 96, {}), ('bf16', 128, {'local_memory': 48 << 10})])
def test_cuda_decomposes_what_the_kernel_does_not_take(dt, hd, spec):
  """f32, head sizes other than 64 and 128, and tiles past the device's shared memory: the plain form."""
  m = _lowered((2, 16, hd), (2, 16, hd), (2, 16, hd), dt, False, 'kernel', **spec)
  assert not any(op.name == 'kernel.attention' for k in m.functions('kernel.func') for op in k.body.ops)
  assert len(m.functions('kernel.func')) > 1


def test_attention_kernel_on_other_targets_is_a_diagnostic():
  """A kernel.attention lowered for a target without the fused kernel: a located error, not a crash."""
  from tgc.lowering import lower
  from tgc.passes.manager import PassFailure
  from tgc.errors import TgcError
  m = _lowered((1, 64, 64), (1, 64, 64), (1, 64, 64), 'f16', False, 'kernel')
  with pytest.raises(TgcError, match='no fused attention kernel'): lower(m, 'opencl', 'uop')


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_attention_kernel_builds_with_nvcc():
  """The generated CUDA builds, without a warning and no product serialized, its products on warpgroups (wgmma, sm_90a) and without them
  (mma.sync: a device without warpgroup tensor cores), the forward with the backward's kernels (heads of 64 and 128:
  the backward's tiles then in dynamic shared memory beside the forward's, declared alike), soft-capped (heads of 128)."""
  from tgc.emit.cuda import render_cuda, nvcc_arch
  from tgc.lowering import lower
  for dt, hd, cap in (('f16', 64, ''), ('bf16', 128, ', softcap = 30.0')):
    for wg in (True, False):
      m = I.parse(_text((2, 100, hd), (2, 70, hd), (2, 70, hd), dt, True, 0.125).replace('scale = 0.125}', f'scale = 0.125{cap}}}'))
      PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
      u = lower(m, 'cuda', 'uop', warpgroup=wg)
      tag = '_cap' if cap else ''
      assert {str(f.sym_name) for f in u.functions('uop.func')} >= {f'attn_dq_causal{tag}_2_100_70_{hd}', f'attn_dkdv_causal{tag}_2_100_70_{hd}'}
      src = render_cuda(u)
      assert ('wgmma.mma_async' in src) == wg and (', 30.0f, ' in src) == bool(cap)  # (the calls' softcap argument)
      grads = [op for f in u.functions('uop.func') for op in f.body.ops if op.name == 'uop.attention_grad']
      assert len(grads) == 2 and all(op.attrs.get('warpgroup', 0) == wg for op in grads)  # (the backward's products on warpgroups too)
      assert src.count('__launch_bounds__(128, 3)') == (2 if wg and hd == 64 else 0)  # (heads of 64: 3 work-groups a multiprocessor)
      with tempfile.TemporaryDirectory() as td:
        cu = os.path.join(td, 'k.cu')
        open(cu, 'w').write(src)
        p = subprocess.run([NVCC, '--cubin', '-Xptxas', '-v', f'-arch={nvcc_arch(src, "sm_90")}', '-o', os.path.join(td, 'k.cubin'), cu], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and '1886' not in p.stderr, p.stderr  # (#1886-D: tg_shared declared with two alignments)
        # (ptxas keeps every kernel's wgmma pipelined: a product it serializes, C7514 or C7515, says why in its report)
        assert 'Used' in p.stderr and 'Potential Performance Loss' not in p.stderr, p.stderr


def _cuda():
  import tgc
  try: tgc.Device['CUDA']
  except tgc.TgcError as e: pytest.skip(str(e))


GPU_CASES = [((2, 4, 128, 64), (2, 4, 128, 64), True, 'float16'), ((2, 4, 100, 64), (2, 4, 70, 64), True, 'float16'),
             ((3, 200, 128), (3, 257, 128), False, 'bfloat16'), ((1, 2, 1000, 64), (1, 2, 1000, 64), False, 'bfloat16'),
             ((2, 2, 65, 128), (2, 2, 65, 128), True, 'float16'),
             # enough blocks for the 128-query work-groups (8 warps)
             ((4, 16, 1024, 64), (4, 16, 1024, 64), True, 'float16'), ((2, 16, 1100, 128), (2, 16, 1100, 128), False, 'bfloat16')]


@pytest.mark.parametrize('qs,ks,causal,dt', GPU_CASES)
def test_sdpa_fused_on_gpu_matches_torch(qs, ks, causal, dt):
  """The Tensor API's scaled_dot_product_attention on CUDA: one fused kernel, its result and q/k/v's gradients
  against torch's (on the same device)."""
  _cuda()
  import tgc
  tdt = getattr(torch, dt)
  rng = np.random.default_rng(7)
  arrs = [rng.standard_normal(s).astype(np.float32) for s in (qs, ks, ks, qs)]
  tq, tk, tv = (torch.tensor(a, dtype=tdt, device='cuda', requires_grad=True) for a in arrs[:3])
  seed = torch.tensor(arrs[3], dtype=tdt, device='cuda')
  ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
  (ref.float() * seed.float()).sum().backward()
  q, k, v = (tgc.Tensor(a, device='CUDA', dtype=getattr(tgc.dtypes, dt), requires_grad=True) for a in arrs[:3])
  out = q.scaled_dot_product_attention(k, v, is_causal=causal)
  assert 'kernel.attention' in out.to_ir('kernel')
  (out.cast(tgc.dtypes.float32) * tgc.Tensor(arrs[3], device='CUDA', dtype=getattr(tgc.dtypes, dt)).cast(tgc.dtypes.float32)).sum().backward()
  tol = 2e-2 if dt == 'float16' else 6e-2
  got = out.cast(tgc.dtypes.float32).numpy()
  np.testing.assert_allclose(got, ref.float().detach().cpu().numpy(), rtol=tol, atol=tol)
  for t, r in zip((q, k, v), (tq, tk, tv)):
    g, want = t.grad.cast(tgc.dtypes.float32).numpy(), r.grad.float().cpu().numpy()
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


# (q, k shapes, the mask's shape, boolean or added, dtype): padding masks broadcast over heads and queries, a per-head
# bias of every score, a causal-like boolean mask of queries x keys, heads of 128 (the backward's plain form)
MASK_CASES = [((2, 4, 100, 64), (2, 4, 70, 64), (2, 1, 1, 70), True, 'float16'), ((2, 4, 128, 64), (2, 4, 128, 64), (1, 4, 128, 128), False, 'bfloat16'),
              ((3, 130, 64), (3, 200, 64), (130, 200), True, 'bfloat16'), ((1, 2, 300, 128), (1, 2, 300, 128), (1, 2, 300, 300), False, 'float16')]


@pytest.mark.parametrize('qs,ks,ms,boolean,dt', MASK_CASES)
def test_sdpa_with_a_mask_fused_on_gpu_matches_torch(qs, ks, ms, boolean, dt):
  """scaled_dot_product_attention with attn_mask on CUDA: one fused kernel reading the mask through its broadcast,
  its result and the gradients of q, k, v and a float mask against torch's math on the CPU from the same rounded
  inputs (a row that sees no key: 0 there; torch's CUDA kernels disagree among themselves on such rows)."""
  _cuda()
  import tgc
  tdt, gdt = getattr(torch, dt), getattr(tgc.dtypes, dt)
  rng = np.random.default_rng(9)
  arrs = [rng.standard_normal(s).astype(np.float32) for s in (qs, ks, ks, qs)]
  mask = rng.random(ms) > 0.3 if boolean else rng.standard_normal(ms).astype(np.float32)
  if boolean and ms[-2] > 1: mask[..., 0, :] = False  # (the first query sees no key where the mask has rows)
  if not boolean: mask[..., 5] = -np.inf
  rounded = lambda a: torch.tensor(a).to(tdt).float()
  tq, tk, tv = (rounded(a).requires_grad_() for a in arrs[:3])
  tm = torch.tensor(mask) if boolean else rounded(mask).requires_grad_()
  ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
  (ref * torch.tensor(arrs[3])).sum().backward()
  q, k, v = (tgc.Tensor(a, device='CUDA', dtype=gdt, requires_grad=True) for a in arrs[:3])
  m = tgc.Tensor(mask, device='CUDA', dtype=tgc.dtypes.bool if boolean else gdt, requires_grad=not boolean)
  out = q.scaled_dot_product_attention(k, v, attn_mask=m)
  assert 'kernel.attention' in out.to_ir('kernel')
  (out.cast(tgc.dtypes.float32) * tgc.Tensor(arrs[3], device='CUDA')).sum().backward()
  tol = 2e-2 if dt == 'float16' else 6e-2
  np.testing.assert_allclose(out.cast(tgc.dtypes.float32).numpy(), ref.detach().numpy(), rtol=tol, atol=tol)
  for t, r in zip((q, k, v) + (() if boolean else (m,)), (tq, tk, tv) + (() if boolean else (tm,))):
    g, want = t.grad.cast(tgc.dtypes.float32).numpy(), r.grad.numpy()
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def test_cuda_reads_a_padding_mask_through_its_broadcast():
  """A padding mask's bias (batch, 1, 1, keys) expanded to the scores' shape: the fused kernel reads it where it is,
  through a view with strides 0 over heads and queries (no scores-sized buffer), forward and backward."""
  from tgc.lowering import lower
  q, k, m, b = _ty((2, 4, 100, 64), 'f16'), _ty((2, 4, 70, 64), 'f16'), _ty((2, 1, 1, 70), 'f16'), _ty((2, 4, 100, 70), 'f16')
  text = f"""func.func @f(%q: {q}, %k: {k}, %m: {m}) -> {q} {{
  %b = tensor.expand %m : {m} -> {b}
  %0 = tensor.attention %q, %k, %k, %b {{causal = 0, scale = 0.125}} : {q}, {k}, {k}, {b} -> {q}
  func.return %0 : {q}
}}"""
  mod = I.parse(text)
  PassManager(parse_pipeline('autodiff{seed=true}')).run(mod)
  for stage in ('kernel', 'uop'):  # (printed and parsed back as it is)
    low = lower(mod if stage == 'kernel' else I.parse(text), 'cuda', stage)
    assert str(I.parse(str(low))) == str(low)
  ks = lower(mod, 'cuda', 'kernel').functions('kernel.func')
  fused = [op for f in ks for op in f.body.ops if op.name in ('kernel.attention', 'kernel.attention_grad')]
  assert len(fused) == 3  # (the forward, dq, dk and dv)
  for op in fused:
    (view,) = op.attrs['bias_view'].views
    assert op.bias.type.numel == 140 and view.shape == (2, 4, 100, 70) and view.strides == (70, 0, 0, 1)


def test_cuda_lowers_grouped_query_attention_without_copies():
  """k and v of 2 heads for q's 6: the fused kernels read them as they are (views of 2 heads), uop.attention and the
  backward's take group = 3, dk and dv one work-group a k head (summing its group's q heads); the CUDA builds."""
  from tgc.lowering import lower
  from tgc.emit.cuda import render_cuda, nvcc_arch
  m = I.parse(_text((2, 6, 100, 64), (2, 2, 70, 64), (2, 2, 70, 64), 'f16', True, 0.125))
  PassManager(parse_pipeline('autodiff{seed=true}')).run(m)
  ks = lower(m, 'cuda', 'kernel').functions('kernel.func')
  fused = [op for f in ks for op in f.body.ops if op.name in ('kernel.attention', 'kernel.attention_grad')]
  assert len(fused) == 3 and all(op.attrs['k_view'].shape == (2, 2, 70, 64) for op in fused)
  u = lower(m, 'cuda', 'uop')
  ops = {op.name + str(op.attrs.get('part', '')): (op, f) for f in u.functions('uop.func') for op in f.body.ops if op.name.startswith('uop.attention')}
  assert {k: v[0].attrs.get('group') for k, v in ops.items()} == {'uop.attention': 3, 'uop.attention_grad0': 3, 'uop.attention_grad1': 3}
  assert ops['uop.attention_grad0'][1].attrs['global_size'][0] == 12 and ops['uop.attention_grad1'][1].attrs['global_size'][0] == 4
  if NVCC is None: return
  src = render_cuda(u)
  with tempfile.TemporaryDirectory() as td:
    cu = os.path.join(td, 'k.cu')
    open(cu, 'w').write(src)
    p = subprocess.run([NVCC, '--cubin', f'-arch={nvcc_arch(src, "sm_90")}', '-o', os.path.join(td, 'k.cubin'), cu], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


GQA_CASES = [((2, 8, 100, 64), (2, 2, 70, 64), True, 'float16'), ((1, 6, 130, 128), (1, 3, 130, 128), False, 'bfloat16'),
             ((2, 4, 256, 64), (2, 1, 256, 64), False, 'bfloat16')]


@pytest.mark.parametrize('qs,ks,causal,dt', GQA_CASES)
def test_sdpa_grouped_query_fused_on_gpu_matches_torch(qs, ks, causal, dt):
  """enable_gqa on CUDA: k and v read once a group of q heads (no repeated copies), the result and q/k/v's gradients
  against torch's."""
  _cuda()
  import tgc
  tdt, gdt = getattr(torch, dt), getattr(tgc.dtypes, dt)
  rng = np.random.default_rng(11)
  arrs = [rng.standard_normal(s).astype(np.float32) for s in (qs, ks, ks, qs)]
  tq, tk, tv = (torch.tensor(a, dtype=tdt, device='cuda', requires_grad=True) for a in arrs[:3])
  ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=True)
  (ref.float() * torch.tensor(arrs[3], device='cuda')).sum().backward()
  q, k, v = (tgc.Tensor(a, device='CUDA', dtype=gdt, requires_grad=True) for a in arrs[:3])
  out = q.scaled_dot_product_attention(k, v, is_causal=causal, enable_gqa=True)
  ir = out.to_ir('kernel')
  assert 'kernel.attention' in ir and ir.count('kernel.func') == 1  # (no kernel copies k or v to q's heads)
  (out.cast(tgc.dtypes.float32) * tgc.Tensor(arrs[3], device='CUDA')).sum().backward()
  tol = 2e-2 if dt == 'float16' else 6e-2
  np.testing.assert_allclose(out.cast(tgc.dtypes.float32).numpy(), ref.float().detach().cpu().numpy(), rtol=tol, atol=tol)
  for t, r in zip((q, k, v), (tq, tk, tv)):
    g, want = t.grad.cast(tgc.dtypes.float32).numpy(), r.grad.float().cpu().numpy()
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def _lse_text(shape, dt, with_attention):
  ty, row = _ty(shape, dt), _ty(shape[:-1] + (1,), 'f32')
  att = f"  %a = tensor.attention %q, %k, %q {{causal = 1, scale = 0.125}} : {ty}, {ty}, {ty} -> {ty}\n" if with_attention else ''
  rets = (f"%a, %l", f"{ty}, {row}") if with_attention else ("%l", row)
  return f"""func.func @f(%q: {ty}, %k: {ty}) -> ({rets[1]}) {{
{att}  %l = tensor.attention_lse %q, %k {{causal = 1, scale = 0.125}} : {ty}, {ty} -> {row}
  func.return {rets[0]} : {rets[1]}
}}"""


def test_attention_lse_matches_numpy():
  """tensor.attention_lse's plain form: each query row's log-sum-exp of its causal scores (f16 inputs, f32 out)."""
  rng = np.random.default_rng(8)
  q, k = (rng.standard_normal((2, 9, 8)).astype(np.float16) for _ in range(2))
  (got,) = compile_module(I.parse(_lse_text((2, 9, 8), 'f16', False)), 'CPU')(q, k)
  s = np.einsum('bie,bje->bij', q.astype(np.float64), k.astype(np.float64)) * 0.125
  s = np.where(np.tril(np.ones((9, 9), bool)), s, -np.inf)
  np.testing.assert_allclose(got[..., 0], np.log(np.exp(s).sum(-1)), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize('with_attention', [True, False])
def test_attention_lse_on_gpu_matches_numpy(with_attention):
  """On CUDA the rows' log-sum-exp stored beside the attention's output, and by a kernel that stores it alone
  (lse_only: no P V, no output) where the graph has no attention of the same q and k."""
  _cuda()
  rng = np.random.default_rng(15)
  q, k = (rng.standard_normal((2, 100, 64)).astype(np.float16) for _ in range(2))
  *_, got = compile_module(I.parse(_lse_text((2, 100, 64), 'f16', with_attention)), 'CUDA')(q, k)
  s = np.einsum('bie,bje->bij', q.astype(np.float64), k.astype(np.float64)) * 0.125
  s = np.where(np.tril(np.ones((100, 100), bool)), s, -np.inf)
  np.testing.assert_allclose(got[..., 0], np.log(np.exp(s).sum(-1)), rtol=2e-3, atol=2e-3)


def test_cuda_attention_kernel_stores_the_lse_of_its_rows():
  """On cuda a tensor.attention_lse after the attention of the same q, k, causal and scale is stored by its kernel
  (kernel.attention's lse operand); without that attention (a backward whose forward's result is a buffer already)
  the kernel of attention(q, k, k) computes it (its output a buffer no one reads)."""
  from tgc.lowering import lower
  for with_attention in (True, False):
    m = lower(I.parse(_lse_text((2, 64, 64), 'f16', with_attention)), 'cuda', 'kernel')
    (k,) = m.functions('kernel.func')
    a = k.body.ops[0]
    assert a.name == 'kernel.attention' and a.lse is not None and a.lse.type.numel == 128
    assert a.attrs.get('lse_only', 0) == (0 if with_attention else 1)  # (alone: its output unwritten, no P V)
    assert str(k.sym_name).startswith('attn_causal' if with_attention else 'attn_lse_causal')
    (launch,) = [op for op in m.functions('func.func')[0].body.ops if op.name == 'kernel.launch']
    assert (launch.operands[-1] is launch.operands[-2]) != with_attention  # (v is k)


@pytest.mark.parametrize('qs,causal,mask,dt', [((2, 4, 200, 64), True, None, 'float16'), ((1, 4, 300, 128), False, (1, 1, 1, 300), 'bfloat16')])
def test_sdpa_softcap_fused_on_gpu_matches_torch(qs, causal, mask, dt):
  """softcap= on CUDA: the fused kernels (forward, dq, dk/dv: _cap), their value and q/k/v's gradients against torch's
  float64 with the scores written out and capped."""
  _cuda()
  import tgc
  rng = np.random.default_rng(23)
  arrs = [rng.standard_normal(qs).astype(np.float32) * 2 for _ in range(4)]
  m = rng.random(mask) > 0.3 if mask else None
  tdt = getattr(torch, dt)
  ts = [torch.tensor(a).to(tdt).double().requires_grad_() for a in arrs[:3]]
  tm = None if m is None else torch.where(torch.tensor(m), 0.0, -math.inf).double()
  want = _capped_torch(*ts, causal, qs[-1] ** -0.5, 5.0, tm)
  (want * torch.tensor(arrs[3]).double()).sum().backward()
  q, k, v = (tgc.Tensor(a, device='CUDA', dtype=dt, requires_grad=True) for a in arrs[:3])
  out = q.scaled_dot_product_attention(k, v, attn_mask=None if m is None else tgc.Tensor(m, device='CUDA'), is_causal=causal, softcap=5.0)
  assert '_cap_' in out.to_ir('kernel')
  (out.cast('float32') * tgc.Tensor(arrs[3], device='CUDA')).sum().backward()
  tol = 2e-2 if dt == 'float16' else 6e-2
  np.testing.assert_allclose(out.cast('float32').numpy(), want.detach().numpy(), rtol=tol, atol=tol)
  for t, r in zip((q, k, v), ts):
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=tol, atol=tol * max(1.0, float(r.grad.abs().max())))
