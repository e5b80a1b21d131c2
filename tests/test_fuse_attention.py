"""fuse-attention: softmax(q k^T * scale + bias) v written out as tensor ops (the Tensor API's softmax, a mask by
where or added, the scale on the scores or on q) becomes one tensor.attention where the device fuses it. Checked on
the CPU: the rewritten function (its attention in the plain form) against torch from the same half-precision inputs;
the attributes it found (causal from a mask of positions, the scale, the bias); what it leaves alone; the gradient
of a written-out attention through the fused op (autograd runs the pass where the device fuses); on cuda, one
kernel.attention; on a GPU, the values and gradients against torch."""
import math
import numpy as np
import pytest
import torch
import tgc
import tgc.ir as I
from tgc import Tensor
from tgc.compiler import compile_module
from tgc.passes.manager import PassManager, parse_pipeline
from tgc.passes.fuse_attention import Offsets, causal_offsets
from tgc.target import DeviceSpec
from test_attention import _cuda  # (skips where this machine has no CUDA device)

B, H, L, S, D = 2, 3, 16, 24, 64
FUSE = 'canonicalize,fuse-attention{target=cuda},canonicalize'
RNG = np.random.default_rng(11)
PAD = RNG.random((B, 1, 1, S)) > 0.3
PAD[:, :, :, 0] = True  # (every row sees a key: the written-out softmax of a row of -inf is NaN)
BIAS = RNG.standard_normal((1, H, L, S)).astype(np.float32)
NEG = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf)
SC = lambda q, k: q @ k.transpose(-2, -1)

# name -> (tgc's form, torch's float64 form, causal, a bias operand)
FORMS = {
  'tril mask': (lambda q, k, v: Tensor.ones(L, S, dtype='bool', device=q.device).tril().where(SC(q, k) / math.sqrt(D), -math.inf).softmax(-1) @ v,
                lambda q, k, v: (SC(q, k) / math.sqrt(D)).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf).softmax(-1) @ v, 1, False),
  'scale on q': (lambda q, k, v: SC(q * D ** -0.5, k).softmax(-1) @ v, lambda q, k, v: SC(q * D ** -0.5, k).softmax(-1) @ v, 0, False),
  'k transposed given': (lambda q, k, v: (q @ k.transpose(-2, -1).contiguous().realize() * 0.125).softmax(-1) @ v,
                         lambda q, k, v: (SC(q, k) * 0.125).softmax(-1) @ v, 0, False),
  'padding mask': (lambda q, k, v: Tensor(PAD, device=q.device).where(SC(q, k) * 0.125, -math.inf).softmax(-1) @ v,
                   lambda q, k, v: (SC(q, k) * 0.125).masked_fill(~torch.tensor(PAD), -math.inf).softmax(-1) @ v, 0, True),
  'added bias': (lambda q, k, v: (SC(q, k) * 0.125 + Tensor(BIAS, device=q.device)).softmax(-1) @ v,
                 lambda q, k, v: (SC(q, k) * 0.125 + torch.tensor(BIAS).double()).softmax(-1) @ v, 0, True),
  'triu of -inf added': (lambda q, k, v: (SC(q, k) * 0.125 + Tensor.full((L, S), -math.inf, device=q.device).triu(1)).softmax(-1) @ v,
                         lambda q, k, v: (SC(q, k) * 0.125 + torch.tensor(NEG)).softmax(-1) @ v, 1, False),
  'bottom-right causal': (lambda q, k, v: Tensor.ones(L, S, dtype='bool', device=q.device).tril(S - L).where(SC(q, k) * 0.125, -math.inf).softmax(-1) @ v,
                          lambda q, k, v: (SC(q, k) * 0.125).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), -math.inf).softmax(-1) @ v, 0, True),
  'exp over its sum': (lambda q, k, v: (lambda e: (e / e.sum(-1, keepdim=True)) @ v)((SC(q, k) * 0.125).exp()),
                       lambda q, k, v: (SC(q, k) * 0.125).softmax(-1) @ v, 0, False),
  'soft-capped': (lambda q, k, v: Tensor.ones(L, S, dtype='bool', device=q.device).tril().where((SC(q, k) * 0.125 / 30).tanh() * 30, -math.inf).softmax(-1) @ v,
                  lambda q, k, v: (torch.tanh(SC(q, k) * 0.125 / 30) * 30).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf).softmax(-1) @ v, 1, False),
  'soft-capped, biased': (lambda q, k, v: ((SC(q, k) / 8).div(5.0).tanh() * 5.0 + Tensor(BIAS, device=q.device)).softmax(-1) @ v,
                          lambda q, k, v: (torch.tanh(SC(q, k) / 40) * 5 + torch.tensor(BIAS).double()).softmax(-1) @ v, 0, True),
  'bias inside a scale': (lambda q, k, v: ((SC(q, k) * 0.5 + Tensor.ones(L, S, device=q.device).tril() * 0.1) * 0.25).softmax(-1) @ v,
                          lambda q, k, v: ((SC(q, k) * 0.5 + torch.ones(L, S).double().tril() * 0.1) * 0.25).softmax(-1) @ v, 0, True),
}


def _fused(o):
  """The Tensor o's function after the pass (for cuda), its leaves' values, and its one tensor.attention."""
  from tgc.tensor import _build_module
  m, leaves = _build_module([o.node])
  PassManager(parse_pipeline(FUSE)).run(m)
  atts = [op for op in m.ops[0].body.ops if op.name == 'tensor.attention']
  return m, [Tensor(n).numpy() for n in leaves], atts


def _as_float(a, dt):
  return (a.astype(np.uint32) << 16).view(np.float32) if dt == 'bfloat16' else a.astype(np.float32)


@pytest.mark.parametrize('form,dt', [(f, 'float16') for f in FORMS] + [('tril mask', 'bfloat16'), ('padding mask', 'bfloat16')])
def test_written_out_attention_fuses_and_keeps_its_value(form, dt):
  build, ref, causal, bias = FORMS[form]
  arrs = [RNG.standard_normal(s).astype(np.float32) for s in ((B, H, L, D), (B, H, S, D), (B, H, S, D))]
  q, k, v = (Tensor(a).cast(dt).realize() for a in arrs)
  m, ins, atts = _fused(build(q, k, v))
  assert len(atts) == 1, str(m)
  (a,) = atts
  assert (a.causal, a.bias is not None) == (causal, bias)
  assert not any(op.name in ('tensor.exp2', 'tensor.matmul') for op in m.ops[0].body.ops)
  (got,) = compile_module(m, 'CPU')(*ins)
  tdt = getattr(torch, dt)
  want = ref(*(torch.tensor(x).to(tdt).double() for x in arrs))
  np.testing.assert_allclose(_as_float(got, dt), want.numpy(), rtol=2e-2, atol=2e-2 if dt == 'float16' else 5e-2)


def test_scale_is_the_product_of_the_constants():
  q, k, v = (Tensor(RNG.standard_normal((1, 2, 8, 64)).astype(np.float32)).half().realize() for _ in range(3))
  _, _, (a,) = _fused(SC(q * 0.5, k * 0.5).div(4.0).softmax(-1) @ v)
  assert a.attrs['scale'] == 0.5 * 0.5 / 4 and a.causal == 0


def test_soft_cap_and_scale_of_capped_scores():
  """c * tanh(x): the op's softcap c and scale c times x's (the kernel computes softcap * tanh(s * scale / softcap)),
  the factors above the tanh the cap's."""
  q, k, v = (Tensor(RNG.standard_normal((1, 2, 8, 64)).astype(np.float32)).half().realize() for _ in range(3))
  _, _, (a,) = _fused(((SC(q * 0.5, k) * 0.25 / 50).tanh() * 25 * 2).softmax(-1) @ v)
  assert a.attrs['softcap'] == 50 and math.isclose(a.attrs['scale'], 0.5 * 0.25 / 50 * 50)


KEEP = {
  'a bias inside the cap': lambda q, k, v: ((SC(q, k) * 0.125 + Tensor(BIAS)) / 30).tanh().mul(30).softmax(-1) @ v,
  'two caps': lambda q, k, v: ((SC(q, k) * 0.125 / 30).tanh() * 30 / 20).tanh().mul(20).softmax(-1) @ v,
  'f32 (no fused kernel)': lambda q, k, v: (SC(q.float(), k.float()) * 0.125).softmax(-1) @ v.float(),
  'probabilities read elsewhere': lambda q, k, v: (lambda p: (p @ v) + p.sum(-1, keepdim=True).cast(q.dtype))((SC(q, k) * 0.125).softmax(-1)),
  'softmax over the queries': lambda q, k, v: (SC(q, k) * 0.125).softmax(-2) @ v,
  'a finite fill': lambda q, k, v: Tensor.ones(L, S, dtype='bool').tril().where(SC(q, k) * 0.125, -1e4).softmax(-1) @ v,
  'v scaled by a negative score': lambda q, k, v: (SC(q, k) * -0.125).softmax(-1) @ v,
}


@pytest.mark.parametrize('form', list(KEEP))
def test_what_is_not_attention_stays(form):
  q, k, v = (Tensor(RNG.standard_normal(s).astype(np.float32)).half().realize() for s in ((B, H, L, D), (B, H, S, D), (B, H, S, D)))
  _, _, atts = _fused(KEEP[form](q, k, v))
  assert atts == []


def test_head_dims_the_kernel_does_not_take_stay():
  q, k, v = (Tensor(RNG.standard_normal((1, 2, 8, 32)).astype(np.float32)).half().realize() for _ in range(3))
  assert _fused((SC(q, k) * 0.125).softmax(-1) @ v)[2] == []


def _offsets(build):
  """The predicate a mask built from positions (a Tensor of L x S bools) keeps, as causal_offsets reads it."""
  from tgc.tensor import _build_module
  m, _ = _build_module([build().node])
  return causal_offsets(Offsets()(m.ops[0].body.ops[-1].operands[0]), L, S)


@pytest.mark.parametrize('build,want', [
  (lambda: Tensor.ones(L, S, dtype='bool').tril(), 'causal'),
  (lambda: Tensor.ones(L, S, dtype='bool').triu(1).logical_not(), 'causal'),
  (lambda: Tensor.arange(S).reshape(1, S) <= Tensor.arange(L).reshape(L, 1), 'causal'),
  (lambda: (Tensor.arange(L).reshape(L, 1) - Tensor.arange(S).reshape(1, S)) >= 0, 'causal'),
  (lambda: Tensor.ones(L, S, dtype='bool').tril(1), None),
  (lambda: Tensor.ones(L, S, dtype='bool').tril(-1), None),
  (lambda: Tensor.ones(L, S, dtype='bool').tril() & Tensor.ones(L, S, dtype='bool').triu(-4), None),  # (a window)
  (lambda: Tensor.ones(L, S, dtype='bool').tril() | Tensor.ones(L, S, dtype='bool').triu(1), 'all'),
  (lambda: Tensor.arange(S).reshape(1, S).expand(L, S) < 5, None),
  (lambda: Tensor.ones(L, S, dtype='bool').tril(S - 1), 'all'),  # (the diagonal past the last key: every key)
])
def test_masks_of_positions(build, want):
  assert _offsets(build) == want


def test_masks_of_positions_with_one_query():
  """One query (a decode step): a bottom-right causal mask keeps every key (no mask), a top-left one key 0 alone."""
  from tgc.tensor import _build_module
  def read(m):
    mod, _ = _build_module([m.node])
    return causal_offsets(Offsets()(mod.ops[0].body.ops[-1].operands[0]), 1, S)
  assert read(Tensor.ones(1, S, dtype='bool').tril(S - 1)) == 'all'
  assert read(Tensor.ones(1, S, dtype='bool').tril()) == 'causal'
  assert read(Tensor.ones(1, S, dtype='bool').tril(3)) is None


def test_gradient_of_written_out_attention_is_the_fused_backward(monkeypatch):
  """On a device that fuses attention, backward() of a written-out attention differentiates the fused op
  (attention_grad: no scores-sized gradient). The CPU stands in for such a device here: the pass runs with cuda's
  spec, the gradients (attention_grad's plain form on the CPU) against torch's."""
  import tgc.passes.fuse_attention as FA
  run = FA.fuse_attention
  monkeypatch.setattr(FA, 'fuse_attention', lambda m, spec, stats=None, keep=frozenset(): run(m, DeviceSpec.of('cuda'), stats, keep))
  arrs = [RNG.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3)]
  q, k, v = (Tensor(a, dtype='float16').detach().requires_grad_() for a in arrs)  # (targets that are detached views)
  o = Tensor.ones(L, L, dtype='bool').tril().where(SC(q, k) / math.sqrt(D), -math.inf).softmax(-1) @ v
  loss = (o.cast('float32') ** 2).sum()
  loss.backward()
  # (the forward ops after the attention read it written out; on the device the pass fuses that too, one op after cse)
  from tgc.tensor import _build_module
  m, _ = _build_module([q.grad.node])
  PassManager(parse_pipeline(FUSE + ',cse')).run(m)
  names = [op.name for op in m.ops[0].body.ops]
  assert names.count('tensor.attention') == 1 and 'tensor.attention_grad' in names and 'tensor.exp2' not in names
  tq, tk, tv = (torch.tensor(a).half().double().requires_grad_() for a in arrs)
  to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
  (to ** 2).sum().backward()
  np.testing.assert_allclose(loss.item(), (to ** 2).sum().item(), rtol=1e-3)
  for t, r in zip((q, k, v), (tq, tk, tv)):
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=2e-2, atol=2e-2)


def test_gradient_of_written_out_soft_capped_attention(monkeypatch):
  """Soft-capped scores written out ((s / c).tanh() * c) differentiate as the fused op with its softcap: the
  backward's attention_grad carries it, and the gradients match torch's of the written-out form."""
  import tgc.passes.fuse_attention as FA
  run = FA.fuse_attention
  monkeypatch.setattr(FA, 'fuse_attention', lambda m, spec, stats=None, keep=frozenset(): run(m, DeviceSpec.of('cuda'), stats, keep))
  arrs = [RNG.standard_normal((B, H, L, D)).astype(np.float32) * 2 for _ in range(3)]
  q, k, v = (Tensor(a, dtype='float16').detach().requires_grad_() for a in arrs)
  o = ((SC(q, k) * 0.125 / 4).tanh() * 4).softmax(-1) @ v
  (o.cast('float32') ** 2).sum().backward()
  from tgc.tensor import _build_module
  m, _ = _build_module([q.grad.node])
  PassManager(parse_pipeline(FUSE + ',cse')).run(m)
  grads = [op for op in m.ops[0].body.ops if op.name == 'tensor.attention_grad']
  assert grads and all(g.attrs.get('softcap') == 4 for g in grads), str(m)
  tq, tk, tv = (torch.tensor(a).half().double().requires_grad_() for a in arrs)
  to = (torch.tanh(SC(tq, tk) * 0.125 / 4) * 4).softmax(-1) @ tv
  (to ** 2).sum().backward()
  for t, r in zip((q, k, v), (tq, tk, tv)):
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=2e-2, atol=2e-2 * float(r.grad.abs().max()))


def test_cuda_lowers_written_out_attention_to_one_kernel():
  """On cuda the written-out causal attention is one kernel.attention, its mask gone (causal); a padding mask is a
  small kernel of its own (the bias at batch x keys) beside it."""
  from tgc.lowering import lower
  for form, kernels in (('tril mask', 1), ('padding mask', 2)):
    q, k, v = (Tensor(RNG.standard_normal(s).astype(np.float32)).half().realize() for s in ((B, H, L, D), (B, H, S, D), (B, H, S, D)))
    m = lower(I.parse(FORMS[form][0](q, k, v).to_ir()), 'cuda', 'kernel')
    ks = m.functions('kernel.func')
    assert len(ks) == kernels and sum(op.name == 'kernel.attention' for f in ks for op in f.body.ops) == 1




@pytest.mark.parametrize('form,dt', [('tril mask', 'float16'), ('padding mask', 'bfloat16'), ('scale on q', 'float16')])
def test_written_out_attention_on_gpu_matches_torch(form, dt):
  """On a GPU: the written-out attention runs as the fused kernel, its value and q/k/v's gradients against torch's."""
  _cuda()
  build, ref, _, _ = FORMS[form]
  shapes = ((B, H, L, D), (B, H, S, D), (B, H, S, D))
  arrs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
  tdt = getattr(torch, dt)
  ts = [torch.tensor(a, dtype=tdt).double().requires_grad_() for a in arrs]
  want = ref(*ts)
  (want ** 2).sum().backward()
  q, k, v = (Tensor(a, device='CUDA', dtype=dt, requires_grad=True) for a in arrs)
  o = build(q, k, v)
  assert 'kernel.attention' in o.to_ir('kernel')
  (o.cast('float32') ** 2).sum().backward()
  tol = 2e-2 if dt == 'float16' else 6e-2
  np.testing.assert_allclose(o.cast('float32').numpy(), want.detach().numpy(), rtol=tol, atol=tol)
  for t, r in zip((q, k, v), ts):
    assert 'attention_grad' in t.grad.to_ir()
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=tol, atol=tol * max(1.0, float(r.grad.abs().max())))


def _written_onnx():
  """An ONNX graph of attention as exporters write it out (no Attention op): MatMul with K transposed, Div by
  sqrt(d), Add of a float mask (batch, 1, 1, keys), Softmax, MatMul; f16."""
  onnx = pytest.importorskip('onnx', reason="the onnx package is not installed (pip install -e '.[onnx]')")
  from onnx import helper as h, TensorProto as T
  qs, ks, ms = (B, H, L, D), (B, H, S, D), (B, 1, 1, S)
  nodes = [h.make_node('Transpose', ['K'], ['Kt'], perm=[0, 1, 3, 2]), h.make_node('MatMul', ['Q', 'Kt'], ['QK']),
           h.make_node('Div', ['QK', 'c'], ['Sc']), h.make_node('Add', ['Sc', 'M'], ['Sm']),
           h.make_node('Softmax', ['Sm'], ['P'], axis=-1), h.make_node('MatMul', ['P', 'V'], ['Y'])]
  ins = [h.make_tensor_value_info(n, T.FLOAT16, s) for n, s in zip('QKVM', (qs, ks, ks, ms))]
  c = h.make_tensor('c', T.FLOAT16, (), [math.sqrt(D)])
  g = h.make_graph(nodes, 'attn', ins, [h.make_tensor_value_info('Y', T.FLOAT16, None)], initializer=[c])
  return h.make_model(g, opset_imports=[h.make_opsetid('', 17)], ir_version=8)


def test_onnx_export_of_written_out_attention_fuses():
  """What an exporter writes out imports as tensor ops that fuse-attention makes one op, the mask its bias; on the
  CPU the fused function against onnxruntime."""
  from tgc.frontend.onnx import import_text
  model = _written_onnx()
  text, _ = import_text(model)
  m = I.parse(text)
  PassManager(parse_pipeline(FUSE)).run(m)
  (a,) = [op for op in m.ops[0].body.ops if op.name == 'tensor.attention']
  assert a.bias is not None and a.causal == 0 and abs(a.attrs['scale'] - 1 / math.sqrt(D)) < 1e-3
  ort = pytest.importorskip('onnxruntime')
  feeds = {n: RNG.standard_normal(s).astype(np.float16) for n, s in zip('QKV', ((B, H, L, D), (B, H, S, D), (B, H, S, D)))}
  feeds['M'] = np.where(RNG.random((B, 1, 1, S)) > 0.3, 0, -np.inf).astype(np.float16)
  feeds['M'][..., 0] = 0
  want = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider']).run(None, feeds)[0]
  args = [feeds[n] for n in 'QKVM']
  (got,) = compile_module(m, 'CPU')(*args)
  np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_detached_scores_stay_written_out(monkeypatch):
  """Scores detached in the model pass no gradient to q and k: the backward's pass leaves that attention written out
  (fusing it would differentiate through the scores); v's gradient as torch's."""
  import tgc.passes.fuse_attention as FA
  run = FA.fuse_attention
  monkeypatch.setattr(FA, 'fuse_attention', lambda m, spec, stats=None, keep=frozenset(): run(m, DeviceSpec.of('cuda'), stats, keep))
  arrs = [RNG.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3)]
  q, k, v = (Tensor(a, dtype='float16', requires_grad=True) for a in arrs)
  ((SC(q, k) * 0.125).detach().softmax(-1) @ v).sum().backward()
  assert not q.grad.numpy().any() and not k.grad.numpy().any()
  tq, tk, tv = (torch.tensor(a).half().double() for a in arrs)
  tv.requires_grad_()
  ((SC(tq, tk) * 0.125).softmax(-1) @ tv).sum().backward()
  np.testing.assert_allclose(v.grad.cast('float32').numpy(), tv.grad.numpy(), rtol=2e-2, atol=2e-2)


def test_repeated_heads_are_grouped_query_attention(monkeypatch):
  """k and v repeated for groups of q's heads (repeat_interleave, as a written-out grouped-query attention does) are
  read as their own heads: the op's k and v have fewer heads; its value and gradients (through the fused op's,
  autograd on the CPU standing in for a device that fuses) against torch's."""
  import tgc.passes.fuse_attention as FA
  run = FA.fuse_attention
  monkeypatch.setattr(FA, 'fuse_attention', lambda m, spec, stats=None, keep=frozenset(): run(m, DeviceSpec.of('cuda'), stats, keep))
  arrs = [RNG.standard_normal(s).astype(np.float32) for s in ((B, 6, L, D), (B, 2, S, D), (B, 2, S, D))]
  q, k, v = (Tensor(a, dtype='float16', requires_grad=True) for a in arrs)
  o = (SC(q, k.repeat_interleave(3, dim=1)) * 0.125).softmax(-1) @ v.repeat_interleave(3, dim=1)
  _, _, (a,) = _fused(o)
  assert a.k.type.shape == (B, 2, S, D) and a.v.type.shape == (B, 2, S, D)
  (o.cast('float32') ** 2).sum().backward()
  tq, tk, tv = (torch.tensor(x).half().double().requires_grad_() for x in arrs)
  to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, scale=0.125, enable_gqa=True)
  (to ** 2).sum().backward()
  np.testing.assert_allclose(o.cast('float32').numpy(), to.detach().numpy(), rtol=2e-2, atol=2e-2)
  for t, r in zip((q, k, v), (tq, tk, tv)):
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=2e-2, atol=3e-2)


def test_repeated_heads_on_gpu_match_torch():
  """On a GPU: written-out grouped-query attention (k and v repeat_interleave'd) as the fused kernel, reading each k
  and v head once; values and gradients against torch's."""
  _cuda()
  arrs = [RNG.standard_normal(s).astype(np.float32) for s in ((B, 8, 256, D), (B, 2, 256, D), (B, 2, 256, D))]
  q, k, v = (Tensor(a, device='CUDA', dtype='float16', requires_grad=True) for a in arrs)
  mask = Tensor.ones(256, 256, dtype='bool', device='CUDA').tril()
  o = mask.where(SC(q, k.repeat_interleave(4, dim=1)) * 0.125, -math.inf).softmax(-1) @ v.repeat_interleave(4, dim=1)
  assert 'kernel.attention' in o.to_ir('kernel')
  (o.cast('float32') ** 2).sum().backward()
  tq, tk, tv = (torch.tensor(x).half().double().requires_grad_() for x in arrs)
  to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, scale=0.125, is_causal=True, enable_gqa=True)
  (to ** 2).sum().backward()
  np.testing.assert_allclose(o.cast('float32').numpy(), to.detach().numpy(), rtol=2e-2, atol=2e-2)
  for t, r in zip((q, k, v), (tq, tk, tv)):
    np.testing.assert_allclose(t.grad.cast('float32').numpy(), r.grad.numpy(), rtol=2e-2, atol=2e-2 * max(1.0, float(r.grad.abs().max())))


def _holds(p, shape) -> np.ndarray:
  """Where Offsets' predicate p (over a 2-d value's indices) holds, as a boolean array of that shape."""
  _, form, ivs = p
  i, j = np.indices(shape)
  x = np.zeros(shape, np.int64) if form is None else form[0] * i + form[1] * j
  return np.logical_or.reduce([(x >= lo) & (x <= hi) for lo, hi in ivs] + [np.zeros(shape, bool)])


def test_offsets_of_position_masks_are_exact():
  """Offsets on random masks of positions (tril and triu of any diagonal, comparisons of the positions' difference
  or of one position with constants, joined by and, or, xor and not): where it reads a predicate, that predicate
  holds exactly where the mask is True; where it calls the mask causal, the mask is the tril of ones."""
  from hypothesis import given, settings, strategies as st
  from tgc.tensor import _build_module

  def atom(draw, L, S):
    kind, d = draw(st.sampled_from(['tril', 'triu', 'diff', 'key', 'query'])), draw(st.integers(-4, 4))
    ones = lambda: Tensor.ones(L, S, dtype='bool')
    if kind == 'tril': return ones().tril(d)
    if kind == 'triu': return ones().triu(d)
    i, j = Tensor.arange(L).reshape(L, 1), Tensor.arange(S).reshape(1, S)
    x = {'diff': (i - j) if draw(st.booleans()) else (j - i) * 2, 'key': j + 0 * i, 'query': i + 0 * j}[kind]
    op = draw(st.sampled_from(['<', '<=', '==', '!=', '>', '>=']))
    return {'<': x < d, '<=': x <= d, '==': x == d, '!=': x != d, '>': x > d, '>=': x >= d}[op]

  @st.composite
  def masks(draw):
    L, S = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    m = atom(draw, L, S)
    for _ in range(draw(st.integers(0, 3))):
      how = draw(st.sampled_from(['&', '|', '^', '~']))
      m = m.logical_not() if how == '~' else {'&': m & atom(draw, L, S), '|': m | atom(draw, L, S), '^': m ^ atom(draw, L, S)}[how]
    return m

  @settings(max_examples=150, deadline=None)
  @given(masks())
  def check(m):
    mod, _ = _build_module([m.node])
    p = Offsets()(mod.ops[0].body.ops[-1].operands[0])
    want = m.numpy()
    if p is not None and p[0] == 'pred': np.testing.assert_array_equal(_holds(p, want.shape), want)
    how = causal_offsets(p, *want.shape)
    if how == 'causal': np.testing.assert_array_equal(want, np.tril(np.ones(want.shape, bool)))
    if how == 'all': assert want.all()
  check()
