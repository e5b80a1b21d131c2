"""The Tensor members of tgc/tensor_api.py and the new parameters, each against torch (CPU, test-only) or numpy."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tgc import Tensor, dtypes
from tgc.errors import TgcError, ShapeError, IndexingError

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 5)).astype(np.float32)
U = rng.uniform(-0.9, 0.9, (3, 5)).astype(np.float32)
P = rng.uniform(1.1, 4.0, (3, 5)).astype(np.float32)
T = torch.tensor


def close(a, b, tol=1e-5):
  a = a.numpy() if isinstance(a, Tensor) else np.asarray(a)
  b = b.numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
  assert a.shape == b.shape, (a.shape, b.shape)
  np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)


UNARY = [
  ('log10', X.__abs__() + 0.1, torch.log10), ('sinh', X, torch.sinh), ('cosh', X, torch.cosh), ('asinh', X * 3, torch.asinh),
  ('acosh', P, torch.acosh), ('atanh', U, torch.atanh), ('asin', U, torch.asin), ('acos', U, torch.acos),
  ('atan', X * 4, torch.atan), ('erf', X, torch.erf), ('relu6', X * 5, F.relu6), ('hardsigmoid', X * 4, F.hardsigmoid),
  ('hardswish', X * 4, F.hardswish), ('softsign', X, F.softsign), ('logsigmoid', X * 5, F.logsigmoid), ('celu', X, F.celu),
  ('selu', X, F.selu), ('mish', X, F.mish), ('quick_gelu', X, lambda t: t * torch.sigmoid(1.702 * t)),
  ('clone', X, torch.clone), ('isnan', np.array([1, np.nan, np.inf], np.float32), torch.isnan),
  ('isinf', np.array([1, np.nan, np.inf, -np.inf], np.float32), torch.isinf),
  ('isfinite', np.array([1, np.nan, np.inf, -np.inf], np.float32), torch.isfinite),
]

@pytest.mark.parametrize('name,x,ref', UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, x, ref): close(getattr(Tensor(x), name)(), ref(T(x)), 2e-5)

def test_activations_with_args():
  close(Tensor(X).softmin(0), F.softmin(T(X), 0))
  close(Tensor(X * 10).softplus(beta=2, threshold=5), F.softplus(T(X * 10), beta=2, threshold=5))
  close(Tensor([300.0]).softplus(), F.softplus(T([300.0])))
  close(Tensor(X).gelu(approximate='none'), F.gelu(T(X)))
  close(Tensor(X).gelu(), F.gelu(T(X), approximate='tanh'))
  close(Tensor(X).normalize(dim=1), F.normalize(T(X), dim=1))
  for p in (0, 1, 3.5, math.inf, -math.inf):  # (0: how many are not zero; +-inf: the largest, smallest magnitude)
    close(Tensor(X).normalize(p=p, dim=1), F.normalize(T(X), p=p, dim=1))
  np.testing.assert_array_equal(Tensor(X).softplus(beta=0).numpy(), F.softplus(T(X), beta=0).numpy())  # (inf, not a ZeroDivisionError)
  close(Tensor(X).celu(0.5), F.celu(T(X), 0.5))

def test_gelu_is_one_node_matching_torch():
  """gelu's tanh form is one tensor.gelu (a composite: the call's graph and key stay small); its values over the
  range where the branches of its sigmoid meet (0, large |x|) and its gradient match torch's, half floats computed in
  f32 as torch computes them."""
  a = np.concatenate([np.linspace(-12, 12, 241), [0.0, -0.0, 1e-4, -1e-4, 40.0, -40.0, 1e4, -1e4]]).astype(np.float32)
  assert 'tensor.gelu' in Tensor(a).gelu().to_ir('tensor') and 'tensor.exp2' not in Tensor(a).gelu().to_ir('tensor')
  for dt, tdt, tol in ((dtypes.float32, torch.float32, 2e-6), (dtypes.float16, torch.float16, 1e-3), (dtypes.bfloat16, torch.bfloat16, 8e-3)):
    x = Tensor(a, requires_grad=True)
    (x.cast(dt).gelu().cast(dtypes.float32) * 3).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ref = F.gelu(tx.to(tdt), approximate='tanh')
    (ref.float() * 3).sum().backward()
    got = x.cast(dt).gelu().cast(dtypes.float32).numpy()
    np.testing.assert_allclose(got, ref.float().detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=max(tol, 1e-5) * 8, atol=max(tol, 1e-5) * 8)

def test_binary():
  y = rng.standard_normal((3, 5)).astype(np.float32)
  close(Tensor(X).copysign(Tensor(y)), torch.copysign(T(X), T(y)))
  close(Tensor(X * 5).fmod(Tensor(y)), torch.fmod(T(X * 5), T(y)))
  close(Tensor([7, -7, 7, -7]).fmod(Tensor([3, 3, -3, -3])), torch.fmod(T([7, -7, 7, -7]), T([3, 3, -3, -3])))
  close(Tensor(X).lerp(Tensor(y), 0.3), torch.lerp(T(X), T(y), 0.3))
  close(Tensor(X * 30).logaddexp(Tensor(y)), torch.logaddexp(T(X * 30), T(y)))
  close(Tensor([5, 0, -3], dtype=dtypes.int8).bitwise_not(), torch.bitwise_not(T([5, 0, -3], dtype=torch.int8)))
  close(Tensor([True, False]).bitwise_not(), torch.bitwise_not(T([True, False])))
  a, b = np.array([1.0, 1.0, np.nan, np.inf], np.float32), np.array([1.0 + 1e-7, 1.1, np.nan, np.inf], np.float32)
  close(Tensor(a).isclose(Tensor(b)), torch.isclose(T(a), T(b)))
  close(Tensor(a).isclose(Tensor(b), equal_nan=True), torch.isclose(T(a), T(b), equal_nan=True))
  m = X > 0
  close(Tensor(X).masked_fill(Tensor(m), -1.0), T(X).masked_fill(T(m), -1.0))

@pytest.mark.parametrize('mode', ['trunc', 'floor'])
def test_div_rounding(mode):
  close(Tensor(X * 5).div(Tensor(P), rounding_mode=mode), torch.div(T(X * 5), T(P), rounding_mode=mode))
  a, b = [7, -7, 7, -7], [2, 2, -2, -2]
  close(Tensor(a).div(Tensor(b), rounding_mode=mode), torch.div(T(a), T(b), rounding_mode=mode))

def test_reductions_and_scans():
  s, m = Tensor(X).std_mean(1)
  ts, tm = torch.std_mean(T(X), 1)
  close(s, ts); close(m, tm)
  for ax in (0, 1):
    close(Tensor(X).cumprod(ax), torch.cumprod(T(X), ax))
    close(Tensor(X * 20).logcumsumexp(ax), torch.logcumsumexp(T(X * 20), ax))
    for name in ('cummax', 'cummin'):
      v, i = getattr(Tensor(X), name)(ax)
      tv, ti = getattr(torch, name)(T(X), ax)
      close(v, tv); close(i, ti)
  v, i = Tensor([1, 3, 3, 2, 3]).cummax(0)
  tv, ti = torch.cummax(T([1, 3, 3, 2, 3]), 0)
  close(v, tv); close(i, ti)

@pytest.mark.parametrize('desc', [False, True])
def test_sort(desc):
  x = np.array([[3, 1, 2, 1, 5], [0, 0, -1, 4, 4]], np.float32)
  v, i = Tensor(x).sort(1, descending=desc)
  tv, ti = torch.sort(T(x), dim=1, descending=desc, stable=True)
  close(v, tv); close(i, ti)
  close(Tensor(X).argsort(0, descending=desc), torch.argsort(T(X), 0, descending=desc))
  v, i = Tensor(X).topk(2, largest=not desc)
  tv, ti = torch.topk(T(X), 2, largest=not desc)
  close(v, tv); close(i, ti)

def test_gather_scatter():
  idx = np.array([[0, 2, 4], [1, 1, 0], [4, 3, 2]])
  close(Tensor(X).gather(1, Tensor(idx)), torch.gather(T(X), 1, T(idx)))
  close(Tensor(X).gather(0, Tensor(idx[:2, :2] % 3)), torch.gather(T(X), 0, T(idx[:2, :2] % 3)))
  src = rng.standard_normal((3, 3)).astype(np.float32)
  uniq = np.array([[0, 2, 4], [1, 3, 0], [4, 3, 2]])
  close(Tensor(X).scatter(1, Tensor(uniq), Tensor(src)), T(X).scatter(1, T(uniq), T(src)))
  close(Tensor(X).scatter(1, Tensor(idx), 2.5, reduce='add'), T(X).scatter(1, T(idx), 2.5, reduce='add'))
  with pytest.raises(TypeError, match='scatter_reduce'): Tensor(X).scatter(1, Tensor(idx), Tensor(src), reduce='add')
  for red in ('sum', 'prod', 'mean', 'amax', 'amin'):
    for inc in (True, False):
      close(Tensor(X).scatter_reduce(1, Tensor(idx), Tensor(src), red, include_self=inc),
            T(X).scatter_reduce(1, T(idx), T(src), red, include_self=inc), 1e-5)

def test_one_hot_masked_nonzero():
  close(Tensor([0, 2, 1]).one_hot(4), F.one_hot(T([0, 2, 1]), 4))
  close(Tensor([0, 2, 1]).one_hot(), F.one_hot(T([0, 2, 1])))
  m = X > 0.2
  close(Tensor(X).masked_select(Tensor(m)), torch.masked_select(T(X), T(m)))
  x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
  close(Tensor(x).nonzero(), torch.nonzero(T(x)))

def test_movement():
  x = np.arange(24, dtype=np.float32).reshape(4, 6)
  for a, b in zip(Tensor(x).chunk(3, 1), torch.chunk(T(x), 3, 1)): close(a, b)
  for a, b in zip(Tensor(x).split([1, 3], 0), torch.split(T(x), [1, 3], 0)): close(a, b)
  for a, b in zip(Tensor(x).split(4, 1), torch.split(T(x), 4, 1)): close(a, b)
  close(Tensor(x).unflatten(1, (2, 3)), T(x).unflatten(1, (2, 3)))
  close(Tensor(x).unfold(1, 3, 2), T(x).unfold(1, 3, 2))
  close(Tensor(x).unfold(0, 2, 1), T(x).unfold(0, 2, 1))
  close(Tensor(x).roll(2, 1), torch.roll(T(x), 2, 1))
  close(Tensor(x).roll((1, -2), (0, 1)), torch.roll(T(x), (1, -2), (0, 1)))
  close(Tensor(x).roll(5), torch.roll(T(x), 5))
  close(Tensor(x).repeat_interleave(2, 1), T(x).repeat_interleave(2, 1))
  close(Tensor(x).repeat_interleave(2), T(x).repeat_interleave(2))
  for ind in ('ij', 'xy'):
    for a, b in zip(Tensor.meshgrid(Tensor([1, 2, 3]), Tensor([4, 5]), indexing=ind), torch.meshgrid(T([1, 2, 3]), T([4, 5]), indexing=ind)): close(a, b)
    for a, b in zip(Tensor([1, 2]).meshgrid(Tensor([4, 5, 6]), Tensor([7]), indexing=ind), torch.meshgrid(T([1, 2]), T([4, 5, 6]), T([7]), indexing=ind)): close(a, b)

@pytest.mark.parametrize('k', [-1, 0, 2])
def test_triangles(k):
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  close(Tensor(x).tril(k), torch.tril(T(x), k)); close(Tensor(x).triu(k), torch.triu(T(x), k))
  close(Tensor(x).diagonal(k), torch.diagonal(T(x), k)); close(Tensor(x).diag(k), torch.diag(T(x), k))
  close(Tensor([1., 2, 3]).diag(k), torch.diag(T([1., 2, 3]), k))
  x3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  close(Tensor(x3).diagonal(k, 1, 2), torch.diagonal(T(x3), k, 1, 2))

def test_creation():
  close(Tensor.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
  close(Tensor.linspace(3, 3, 1), torch.linspace(3, 3, 1))
  n = Tensor.normal(2000, mean=3.0, std=0.5, seed=1).numpy()
  assert abs(n.mean() - 3.0) < 0.05 and abs(n.std() - 0.5) < 0.05
  k = Tensor.kaiming_uniform(64, 32, seed=1).numpy()
  bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(32)
  assert k.shape == (64, 32) and np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
  assert (dtypes.int.max, dtypes.int.min, dtypes.uint8.max, dtypes.int8.min) == (2 ** 31 - 1, -2 ** 31, 255, -128)
  assert dtypes.float32.max == math.inf and dtypes.bool.max == 1

def test_losses():
  logits = rng.standard_normal((4, 3)).astype(np.float32)
  y = np.array([0, 2, 1, 2])
  for red in ('mean', 'sum', 'none'):
    close(Tensor(logits).cross_entropy(Tensor(y), reduction=red), F.cross_entropy(T(logits), T(y), reduction=red))
    close(Tensor(logits).log_softmax(1).nll_loss(Tensor(y), reduction=red), F.nll_loss(F.log_softmax(T(logits), 1), T(y), reduction=red))
  w = np.array([0.2, 1.0, 3.0], np.float32)
  close(Tensor(logits).log_softmax(1).nll_loss(Tensor(y), weight=Tensor(w)), F.nll_loss(F.log_softmax(T(logits), 1), T(y), weight=T(w)))
  close(Tensor(logits).cross_entropy(Tensor(y), label_smoothing=0.1), F.cross_entropy(T(logits), T(y), label_smoothing=0.1))
  close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y)), F.cross_entropy(T(logits), T(y)))
  yi = np.array([0, -1, 1, 2])
  close(Tensor(logits).sparse_categorical_crossentropy(Tensor(yi)), F.cross_entropy(T(logits), T(yi), ignore_index=-1))
  p, t = 1 / (1 + np.exp(-logits)), (rng.uniform(size=(4, 3)) > 0.5).astype(np.float32)
  close(Tensor(p).binary_crossentropy(Tensor(t)), F.binary_cross_entropy(T(p), T(t)))
  close(Tensor(logits).binary_crossentropy_logits(Tensor(t)), F.binary_cross_entropy_with_logits(T(logits), T(t)))

def test_attention_einsum():
  q, k, v = (rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(3))
  close(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)), F.scaled_dot_product_attention(T(q), T(k), T(v)))
  close(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True), F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True))
  a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
  for f, ops in (('ij,jk->ik', (a, b)), ('ij->ji', (a,)), ('ij->', (a,)), ('ij,jk', (a, b)), ('bij,bjk->bik', (q, k.transpose(0, 2, 1))),
                 ('ii->i', (a[:3, :3],)), ('i,j->ij', (a[0], b[0])), ('...ii->...i', (q[:, :, :4],)), ('...ij,jk', (q, rng.standard_normal((8, 3)).astype(np.float32))),
                 ('b...,b...->...', (q, k)), ('->', (np.float32(3),))):
    close(Tensor.einsum(f, *[Tensor(o) for o in ops]), torch.einsum(f, *[T(o) for o in ops]), 1e-4)

@pytest.mark.parametrize('stride,padding,output_padding,groups', [(1, 0, 0, 1), (2, 1, 1, 1), (2, 0, 0, 2)])
def test_conv_transpose2d(stride, padding, output_padding, groups):
  x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
  w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  b = rng.standard_normal(3 * groups).astype(np.float32)
  close(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), stride=stride, padding=padding, output_padding=output_padding, groups=groups),
        F.conv_transpose2d(T(x), T(w), T(b), stride=stride, padding=padding, output_padding=output_padding, groups=groups), 1e-4)

@pytest.mark.parametrize('mode,align', [('nearest', False), ('nearest-exact', False), ('bilinear', False), ('bilinear', True)])
def test_interpolate(mode, align):
  x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
  kw = {} if mode.startswith('nearest') else {'align_corners': align}
  for size in ((8, 3), (3, 7)):
    close(Tensor(x).interpolate(size, mode=mode, **kw), F.interpolate(T(x), size, mode=mode, **kw))

@pytest.mark.parametrize('mode', ['constant', 'reflect', 'replicate', 'circular'])
def test_pad_modes(mode):
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  close(Tensor(x).pad((2, 1, 1, 2), mode=mode), F.pad(T(x), (2, 1, 1, 2), mode=mode))
  close(Tensor(x).pad(((0, 0), (1, 1), (3, 0)), mode=mode), F.pad(T(x), (3, 0, 1, 1), mode=mode))

@pytest.mark.parametrize('ceil_mode', [False, True])
def test_pools(ceil_mode):
  x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
  for cip in (False, True):
    close(Tensor(x).avg_pool2d(3, 2, padding=1, ceil_mode=ceil_mode, count_include_pad=cip),
          F.avg_pool2d(T(x), 3, 2, padding=1, ceil_mode=ceil_mode, count_include_pad=cip))
  m, i = Tensor(x).max_pool2d(3, 2, padding=1, ceil_mode=ceil_mode, return_indices=True)
  tm, ti = F.max_pool2d(T(x), 3, 2, padding=1, ceil_mode=ceil_mode, return_indices=True)
  close(m, tm); close(i, ti)
  close(m.max_unpool2d(i, 3, 2, padding=1, output_size=(7, 6)), F.max_unpool2d(tm, ti, 3, 2, padding=1, output_size=(7, 6)))
  close(Tensor(x).max_pool2d(2, ceil_mode=ceil_mode), F.max_pool2d(T(x), 2, ceil_mode=ceil_mode))


@pytest.mark.parametrize('bad,exc', [
  (lambda: Tensor(X).split([1, 1], 0), ValueError), (lambda: Tensor(X).topk(9), ValueError),
  (lambda: Tensor(X).cross_entropy(Tensor([0, 1, 2]), reduction='avg'), ValueError),
  (lambda: Tensor(X).unsqueeze(0).interpolate((2, 2), mode='cubic'), ValueError),
  (lambda: Tensor.einsum('ij,jk->ik', Tensor(X)), ValueError), (lambda: Tensor.einsum('ijk->i', Tensor(X)), ValueError),
  (lambda: Tensor(X).pad((5, 5), mode='reflect'), ValueError), (lambda: Tensor(X).tril().sum() + Tensor([1.0]).tril(), ValueError),
  (lambda: Tensor(X).gather(1, Tensor([[0]] * 4)), IndexError), (lambda: Tensor(X).scatter(1, Tensor([[0]]), Tensor([[1.0]]), reduce='max'), ValueError),
  (lambda: Tensor(X).div(2, rounding_mode='ceil'), ValueError), (lambda: Tensor(X).gelu(approximate='erf'), ValueError),
  (lambda: Tensor(X).sort(2), IndexError), (lambda: Tensor(X).chunk(0), ValueError),
  # sizes numpy or the arithmetic would have failed on (ValueError, ZeroDivisionError) before the checks
  (lambda: Tensor(X).unsqueeze(0).interpolate((0, 0)), ValueError), (lambda: Tensor(X).interpolate((-2, 2)), ValueError),
  (lambda: Tensor.rand(-1, 2), ValueError), (lambda: Tensor.randn(-2), ValueError), (lambda: Tensor.empty(-1), ValueError),
  (lambda: Tensor.randint(-1, low=0, high=3), ValueError), (lambda: Tensor.eye(-1), ValueError), (lambda: Tensor.full((2, -1), 0.0), ValueError),
  (lambda: Tensor.arange(math.nan), ValueError), (lambda: Tensor.arange(0, math.inf), ValueError), (lambda: Tensor(X).chunk(math.nan), ValueError),
  # a Tensor argument given as something else: a DTypeError (a TypeError too) naming it, not an AttributeError inside
  (lambda: Tensor(X).linear(None), TypeError), (lambda: Tensor(X).unsqueeze(0).unsqueeze(0).conv2d(3), TypeError),
  (lambda: Tensor(X).gather(1, [[0]]), TypeError), (lambda: Tensor(X).cross_entropy(None), TypeError),
  (lambda: Tensor(X).masked_fill(1, 0.0), TypeError), (lambda: Tensor.einsum('ij->i', 3), TypeError),
])
def test_bad_arguments(bad, exc):
  with pytest.raises(TgcError) as e: bad()
  assert isinstance(e.value, exc)
