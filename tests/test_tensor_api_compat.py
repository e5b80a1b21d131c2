"""Where tgc's Tensor follows tinygrad (and torch) at the edges: extreme inputs, empty axes, index dtypes, the errors
raised and their builtin classes. Values against torch (CPU, test-only) or numpy."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tgc import Tensor, dtypes
from tgc.errors import TgcError, AxisError, IndexingError, ArgumentError, DTypeError, ShapeError

rng = np.random.default_rng(0)


def grad_pair(fn, *vals):
  """(tgc's value, torch's value, tgc's gradients, torch's gradients) of fn(*vals).sum()."""
  ts = [torch.tensor(np.asarray(v, np.float32), requires_grad=True) for v in vals]
  tt = [Tensor(np.asarray(v, np.float32)) for v in vals]
  o, grads = fn(*ts), fn(*tt).sum().gradient(*tt)  # (the gradient before numpy(): a realized tensor is a leaf)
  return fn(*tt).numpy(), o.detach().numpy(), [g.numpy() for g in grads], [g.numpy() for g in torch.autograd.grad(o.sum(), ts)]


def same(a, b, tol=1e-5):
  assert a.shape == b.shape, (a.shape, b.shape)
  np.testing.assert_allclose(a, b, rtol=tol, atol=tol)  # (NaN equals NaN)


# ---- wrong numbers at extreme inputs

@pytest.mark.parametrize('lo,hi', [(300, 400), (-400, -300), (-5, 5)])
def test_sigmoid_extreme_value_and_gradient(lo, hi):
  x = rng.uniform(lo, hi, (7, 9)).astype(np.float32)
  v, tv, g, tg = grad_pair(lambda t: t.sigmoid(), x)
  same(v, tv); same(g[0], tg[0])
  assert not np.isnan(g[0]).any()


def test_sigmoid_at_zero_and_nan():
  v, tv, g, tg = grad_pair(lambda t: t.sigmoid(), [0.0, -0.0, math.nan, math.inf, -math.inf])
  same(v, tv); same(g[0], tg[0])


@pytest.mark.parametrize('equal_nan', [False, True])
def test_isclose_special_values(equal_nan):
  s = [math.inf, -math.inf, math.nan, 0.0, 1e-9]
  a, b = np.array([x for x in s for _ in s], np.float32), np.array(s * len(s), np.float32)
  assert (Tensor(a).isclose(Tensor(b), equal_nan=equal_nan).numpy() == torch.tensor(a).isclose(torch.tensor(b), equal_nan=equal_nan).numpy()).all()
  assert (Tensor(a).isclose(1.0).numpy() == torch.tensor(a).isclose(torch.tensor(1.0)).numpy()).all()


def test_logcumsumexp_large_spread():
  for vals in ([0.0, 100.0], [100.0, 0.0, -100.0, 50.0], [-math.inf, 0.0, 1.0]):
    v, tv, g, tg = grad_pair(lambda t: t.logcumsumexp(0), vals)
    same(v, tv); same(g[0], tg[0])
  x = rng.standard_normal((6, 5, 4)).astype(np.float32) * 30
  for ax in (0, 1, 2, -1):
    v, tv, g, tg = grad_pair(lambda t: t.logcumsumexp(ax), x)
    same(v, tv, 1e-4); same(g[0], tg[0], 1e-4)


def test_scatter_last_write_wins():
  idx = torch.randint(3, (3, 4, 5), generator=torch.Generator().manual_seed(0))
  x, src = rng.standard_normal((4, 5, 6)).astype(np.float32), rng.standard_normal((4, 5, 6)).astype(np.float32)
  for dim in (0, 1, 2, -1):
    same(Tensor(x).scatter(dim, Tensor(idx.numpy().astype(np.int32)), Tensor(src)).numpy(), torch.tensor(x).scatter(dim, idx, torch.tensor(src)).numpy())
  with pytest.raises(RuntimeError): Tensor(x[:2]).scatter(1, Tensor(idx.numpy()), Tensor(src))  # index larger than self outside dim
  with pytest.raises(RuntimeError): Tensor(x).half().scatter_reduce(0, Tensor(idx.numpy()), Tensor(src), reduce='sum')  # src of another dtype


# ---- pow

@pytest.mark.parametrize('x', [-math.inf, 0.0, 1.0, math.inf])
@pytest.mark.parametrize('c', [-1, 0, 0.3, 1, 2, -0.3])
def test_pow_constant_exponent_gradient_at_edges(x, c):
  v, tv, g, tg = grad_pair(lambda t: t ** c, [x])
  same(v, tv); same(g[0], tg[0])


@pytest.mark.parametrize('b,e', [([-math.inf, math.inf, 0.0], [0.0, 0.0, 0.0]), ([0.0], [0.3]), ([0.0], [-0.3]), ([0.0], [0.0])])
def test_pow_tensor_exponent_gradient_at_edges(b, e):
  v, tv, g, tg = grad_pair(lambda x, y: x ** y, b, e)
  same(v, tv); same(g[0], tg[0]); same(g[1], tg[1])


@pytest.mark.parametrize('base', [0, 0.7, -2, 5.5])
def test_pow_constant_base_gradient(base):
  v, tv, g, tg = grad_pair(lambda t: base ** t, [-2.0, -1, 0, 1, 2, 3])
  same(v, tv, 1e-4); same(g[0], tg[0], 1e-4)


def test_pow_random_bases_and_exponents():
  a, b = rng.uniform(-2, 2, (9, 7)).astype(np.float32), rng.uniform(-2, 2, (9, 7)).astype(np.float32)
  v, tv, g, tg = grad_pair(lambda x, y: x ** y, a, b)
  same(v, tv, 1e-4); same(g[0], tg[0], 1e-3); same(g[1], tg[1], 1e-3)


@pytest.mark.parametrize('e', [0.5, 1.5, 2.0, -1.0, 0.0])
def test_pow_int_base_float_exponent_is_float(e):
  r = Tensor([1, 2, 3, 4], dtype=dtypes.int32) ** e
  assert r.dtype == dtypes.float32
  same(r.numpy(), (torch.tensor([1, 2, 3, 4], dtype=torch.int32) ** e).numpy())


# ---- index outputs in tinygrad's default int

def test_index_outputs_are_int32():
  x = Tensor(rng.standard_normal((4, 6)).astype(np.float32))
  outs = [x.argsort(), x.sort()[1], x.topk(2)[1], x.cummax(1)[1], x.cummin(0)[1], (x > 0).nonzero(),
          Tensor(rng.standard_normal((1, 1, 4, 4)).astype(np.float32)).max_pool2d(return_indices=True)[1]]
  assert all(o.dtype == dtypes.int32 for o in outs), [o.dtype for o in outs]
  t = torch.tensor(x.numpy())
  assert (x.cummax(1)[1].numpy() == torch.cummax(t, 1).indices.numpy()).all()
  assert (x.argsort(0).numpy() == torch.sort(t, dim=0, stable=True).indices.numpy()).all()


def test_uint8_bilinear_interpolate_as_torch():
  """uint8 stays uint8, in tinygrad's 7-bit fixed point: torch's own uint8 kernel agrees on these sizes (its weights
  are finer, so on others it can differ by 1)."""
  x = (rng.uniform(-2, 2, (2, 3, 32, 24)) * 10).clip(0, 255).astype(np.uint8)
  for size in [(10, 10), (16, 12), (8, 5)]:
    r = Tensor(x).interpolate(size, mode='linear')
    assert r.dtype == dtypes.uint8
    assert (r.numpy() == F.interpolate(torch.tensor(x), size=size, mode='bilinear').numpy()).all()
  f = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
  for ac in (False, True):
    same(Tensor(f).interpolate((4, 13), mode='linear', align_corners=ac).numpy(), F.interpolate(torch.tensor(f), (4, 13), mode='bilinear', align_corners=ac).numpy())


# ---- accepted as tinygrad accepts

def test_cross_entropy_rank1_probabilities():
  x, y = rng.standard_normal(12).astype(np.float32), rng.uniform(0, 1, 12).astype(np.float32)
  v, tv, g, tg = grad_pair(lambda a, b: a.cross_entropy(b) if isinstance(a, Tensor) else F.cross_entropy(a, b), x, y)
  same(v, tv); same(g[0], tg[0]); same(g[1], tg[1])
  same(Tensor(x).cross_entropy(Tensor(np.int32(3))).numpy(), F.cross_entropy(torch.tensor(x), torch.tensor(3)).numpy())


@pytest.mark.parametrize('shape,axis', [((2, 0, 4), 1), ((0, 3), 0), ((2, 3, 0), 2)])
def test_cumulative_over_empty_axis(shape, axis):
  x = Tensor.ones(*shape)
  for fn in ('cummax', 'cummin'):
    v, i = getattr(x, fn)(axis)
    assert v.shape == shape and i.shape == shape and i.dtype == dtypes.int32
  assert x.cumprod(axis).shape == shape and x.logcumsumexp(axis).shape == shape


@pytest.mark.parametrize('mode', ['reflect', 'replicate'])
@pytest.mark.parametrize('pads', [(3, -5, 1, -5), (0, 0, 0, -5), (3, -3, 0, -3), (-1, 2, 2, -1), (4, 4, 0, 4)])
def test_reflect_replicate_negative_pads_after_the_edges(mode, pads):
  x = rng.standard_normal((1, 1, 5, 5)).astype(np.float32)
  same(Tensor(x).pad(pads, mode=mode).numpy(), F.pad(torch.tensor(x), pads, mode=mode).numpy())


def test_index_by_nested_tuples_and_lists():
  x = np.arange(2 * 5 * 6).reshape(2, 5, 6).astype(np.float32)
  for idx in [((0,),), (((0,),),), ((1, 0), slice(None), (2, 1)), ([[0]], 1), ((0,), [1, 2])]:
    assert (Tensor(x)[idx].numpy() == torch.tensor(x)[idx].numpy()).all(), idx


def test_roll_int_and_tuple_shifts():
  x = np.arange(8, dtype=np.float32).reshape(2, 4)
  for args in [(1,), ((1,),), (1, 0), ((2, 1), (0, 1)), (-5, 0)]:
    same(Tensor(x).roll(*args).numpy(), torch.tensor(x).roll(*args).numpy())
  with pytest.raises(RuntimeError): Tensor(x).roll((1, 2))
  with pytest.raises(RuntimeError): Tensor(x).roll(1, (0, 1))


# ---- refused as tinygrad refuses, with the builtin classes users catch

def test_refusals_are_the_builtins():
  x = Tensor.ones(20)
  with pytest.raises(IndexError): x.cumprod(1)
  with pytest.raises(IndexError): Tensor(1.0).cumprod(1)
  with pytest.raises(IndexError): Tensor(1.0).cummax(1)
  with pytest.raises((RuntimeError, ValueError)): Tensor.linspace(5, 10, 3, dtype='bool')
  with pytest.raises(ValueError): Tensor([1, 2]).one_hot(-1)
  with pytest.raises(ValueError): Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
  with pytest.raises(IndexError): Tensor.stack(Tensor.ones(4, 3), dim=77)
  q = Tensor.ones(1, 2, 4, 8)
  with pytest.raises(RuntimeError): q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(4, 4, dtype=dtypes.bool), is_causal=True)
  with pytest.raises(RuntimeError): Tensor.ones(3, 4).permute(0, 0)
  with pytest.raises(RuntimeError): Tensor.ones(3, 4).flip((1, -1))
  with pytest.raises(RuntimeError): Tensor.ones(3).clip(None, None)
  with pytest.raises(RuntimeError): Tensor([1.0]) << 2
  with pytest.raises(RuntimeError): Tensor([2]) ** -2
  with pytest.raises(NotImplementedError): Tensor.ones(3).pad((1, 1), mode='typo')
  with pytest.raises(AttributeError): Tensor.ones(3).sum(dtype='')
  with pytest.raises(ValueError): Tensor.ones(4, 3)[::0]
  with pytest.raises(OverflowError): Tensor.arange(2 ** 33, dtype=dtypes.int32)
  with pytest.raises(OverflowError): Tensor.arange(127, -130, -1, dtype=dtypes.int8)


def test_error_classes_keep_tgc_and_add_builtins():
  for cls, builtins in ((AxisError, (IndexError, RuntimeError)), (IndexingError, (IndexError, RuntimeError)),
                        (ArgumentError, (ValueError, RuntimeError)), (DTypeError, (TypeError, RuntimeError)),
                        (ShapeError, (ValueError, RuntimeError))):
    assert issubclass(cls, TgcError) and all(issubclass(cls, b) for b in builtins), cls


# ---- members tinygrad has

@pytest.mark.parametrize('name', ['kaiming_normal', 'kaiming_uniform', 'scaled_uniform', 'glorot_uniform'])
def test_initialisers(name):
  t = getattr(Tensor, name)(64, 32, seed=1).numpy()
  std = {'kaiming_normal': math.sqrt(2 / 1.0001 / 32), 'kaiming_uniform': math.sqrt(2 / 1.0001 / 32),
         'scaled_uniform': (64 * 32) ** -0.5 / math.sqrt(3), 'glorot_uniform': math.sqrt(6 / 96) / math.sqrt(3)}[name]
  assert t.shape == (64, 32) and abs(t.std() / std - 1) < 0.1 and abs(t.mean()) < 0.1 * std * 3
  with pytest.raises(ValueError): getattr(Tensor, name)(-3, 2)
  with pytest.raises(ValueError): getattr(Tensor, name)((2, -3))


def test_nonzero_and_masked_select_with_size():
  assert (Tensor([1, 0, 2, 0, 3]).nonzero(size=3).numpy() == [[0], [2], [4]]).all()
  assert (Tensor([1, 0, 2, 0, 3]).nonzero(size=5, fill_value=-1).numpy() == [[0], [2], [4], [-1], [-1]]).all()
  assert (Tensor([[1, 0], [0, 2]]).nonzero(size=2).numpy() == [[0, 0], [1, 1]]).all()
  assert Tensor(5).nonzero(size=4).shape == (4, 0) and Tensor([1, 0]).nonzero(size=3, fill_value=-1.5).dtype == dtypes.int32
  t, m = Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8]), Tensor([True, False, True, False, True, False, False, False, True])
  assert (t.masked_select(m, size=6, fill_value=-1).numpy() == [0, 2, 4, 8, -1, -1]).all()
  assert (t.masked_select(m, size=2).numpy() == [0, 2]).all()
  assert Tensor([1.0, 2.0]).masked_select(Tensor([True, False]), size=3, fill_value=-1).dtype == dtypes.float32


def test_sdpa_grouped_query_attention():
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 8, 5, 16), (2, 2, 5, 16), (2, 2, 5, 16)))
  ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), enable_gqa=True).numpy()
  same(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True).numpy(), ref, 1e-4)
  with pytest.raises(RuntimeError): Tensor(q[:, :7]).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)


def test_large_arange_is_fast_and_exact():
  r = Tensor.arange(-50.3, -380.2, -2.25).numpy()
  same(r, torch.arange(-50.3, -380.2, -2.25).numpy())
  assert Tensor.arange(2 ** 31, 2 ** 31 + 3).dtype == dtypes.int64
  assert Tensor.arange(3_000_000).shape == (3_000_000,)  # (a python loop over the values took seconds)


# ---- gradients at the edges

@pytest.mark.parametrize('lo,hi', [(300, 400), (-400, -300), (-3, 3)])
def test_softplus_gradient_without_overflow(lo, hi):
  x = rng.uniform(lo, hi, (5, 7)).astype(np.float32)
  for beta in (1, 3, 1 / 3):
    v, tv, g, tg = grad_pair(lambda t: t.softplus(beta) if isinstance(t, Tensor) else F.softplus(t, beta), x)
    same(v, tv, 1e-5); same(g[0], tg[0], 1e-6)


def test_softmax_gradient_cancels_to_rounding():
  x = rng.uniform(-2, 2, (45, 65)).astype(np.float32)
  v, tv, g, tg = grad_pair(lambda t: t.softmax(1), x)
  same(v, tv, 1e-6)
  np.testing.assert_allclose(g[0], tg[0], atol=1e-7, rtol=0)  # the gradient of sum(softmax) is 0


def test_gradient_of_unused_and_empty_inputs():
  x, y = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
  v, tv, g, tg = grad_pair(lambda a, b: a.copysign(b) if isinstance(a, Tensor) else torch.copysign(a, b), x, y)
  same(v, tv); same(g[0], tg[0]); same(g[1], tg[1])  # y only through its sign: zeros
  for fn in (lambda t: t[5:2], lambda t: t[:, 0:0], lambda t: t.sum(axis=1), lambda t: t.mean(axis=1)):
    for shape in ((3, 4), (3, 0)):
      if fn(Tensor.ones(*shape)).numel() == 0 or 0 in shape:
        v, tv, g, tg = grad_pair(fn, np.ones(shape, np.float32))
        same(v, tv); same(g[0], tg[0])
  with pytest.raises(RuntimeError): Tensor.ones(3).sum().gradient(Tensor.ones(3))  # not in the graph at all
  with pytest.raises(IndexError): Tensor(3.14).cat(Tensor(3.14))


def test_scatter_refuses_a_src_of_another_dtype():
  idx = Tensor([[0, 1]])
  with pytest.raises(RuntimeError): Tensor.ones(2, 2).half().scatter(1, idx, Tensor([[1.0, 2.0]]))
  assert Tensor.ones(2, 2).scatter(1, idx, 3.0).numpy().tolist() == [[3.0, 3.0], [1.0, 1.0]]


def test_relu_and_clip_gradients_on_the_boundaries():
  v, tv, g, tg = grad_pair(lambda t: t.relu(), [-1.0, 0.0, 1.0, math.nan])
  same(v, tv); same(g[0], tg[0])
  v, tv, g, tg = grad_pair(lambda t: t.clip(-2.5, 1.5), [-3.0, -2.5, 0, 1.5, 2])
  same(v, tv); same(g[0], tg[0])
  v, tv, g, tg = grad_pair(lambda t: t.clip(3, 0), [-1.0, 1.0, 4.0])  # min > max: all max, as torch
  same(v, tv); same(g[0], tg[0])


@pytest.mark.parametrize('act', [lambda t: t.relu(), lambda t: t.clip(0, 6), lambda t: t * (t + 3).clip(0, 6) / 6])
def test_activation_reading_a_reduce_twice_fuses(act):
  """relu's where(r <= 0, 0, r) reads the matmul's r twice; the uses meet in the where, so r is no buffer of its own:
  the matmul's kernel and the sum's, as with maximum(r, 0)."""
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  kir = act(x @ x.T).sum(axis=1).to_ir('kernel')
  assert sum(l.startswith('kernel.func') for l in kir.splitlines()) == 2, kir


def test_backward_without_marked_tensors_fills_the_data_tensors():
  """Nothing marked requires_grad=True: backward gives .grad to the float tensors made from data (tinygrad's rule);
  with a marked one, only the marked ones get it (torch's, and an optimizer's parameters)."""
  v = rng.standard_normal(4).astype(np.float32)
  for cmp in (lambda t: t != 0, lambda t: t < 0):
    tt, t = Tensor(v), torch.tensor(v, requires_grad=True)
    (tt * cmp(tt)).sum().backward(); (t * cmp(t)).sum().backward()
    same(tt.grad.numpy(), t.grad.numpy())
  w, x, off = Tensor(v, requires_grad=True), Tensor(v), Tensor(v, requires_grad=False)
  (w * x * off).sum().backward()
  assert w.grad is not None and x.grad is None and off.grad is None
