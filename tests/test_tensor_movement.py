"""Tensor movement ops against numpy: reshape/permute/expand/pad/shrink/flip, __getitem__, cat/stack/repeat,
and chains of them over computed values (which exercise kernelize's view stacks and pad masks)."""
import numpy as np
import pytest
import tgc
from tgc import Tensor, dtypes, ShapeError, AxisError, IndexingError

pytestmark = pytest.mark.usefixtures('_default_device')  # $TGC_TEST_DEVICE, or a test's `dev` (conftest.py)

RNG = np.random.default_rng(7)



def check(t, e):
  e = np.asarray(e)
  assert t.shape == e.shape, f"shape {t.shape}, expected {e.shape}"
  r = t.numpy()
  if t.dtype.is_float: np.testing.assert_allclose(r, e, rtol=1e-6, atol=1e-6)
  else: np.testing.assert_array_equal(r, e)

A = np.arange(2 * 3 * 7, dtype=np.int32).reshape(2, 3, 7)


@pytest.mark.parametrize("shape", [(42,), (6, 7), (7, 6), (-1, 3), (2, -1, 7), (1, 42, 1), (3, 2, 7), (42, 1)])
def test_reshape(shape):
  check(Tensor(A).reshape(shape), A.reshape(shape))
  check(Tensor(A).reshape(*shape), A.reshape(shape))
  check(Tensor(A).view(shape), A.reshape(shape))

def test_reshape_scalar_and_ones():
  check(Tensor(5).reshape(1, 1), np.array(5).reshape(1, 1))
  check(Tensor([5]).reshape(()), np.array(5))
  check(Tensor(A).reshape(-1), A.reshape(-1))

@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1), (-1, 0, 1)])
def test_permute(order):
  check(Tensor(A).permute(order), A.transpose(order))
  check(Tensor(A).permute(*order), A.transpose(order))

@pytest.mark.parametrize("d0,d1", [(1, 0), (0, 2), (-1, -2), (2, 2)])
def test_transpose(d0, d1):
  check(Tensor(A).transpose(d0, d1), np.swapaxes(A, d0, d1))

def test_T_flatten_squeeze_unsqueeze():
  B = A[0]
  check(Tensor(B).T, B.T); check(Tensor(A[0, 0]).T, A[0, 0])
  check(Tensor(A).T, np.swapaxes(A, 0, 1))  # tinygrad's T is transpose(1, 0)
  check(Tensor(A).flatten(), A.flatten()); check(Tensor(A).flatten(1), A.reshape(2, 21)); check(Tensor(A).flatten(0, 1), A.reshape(6, 7))
  C = A.reshape(2, 1, 3, 1, 7)
  check(Tensor(C).squeeze(), C.squeeze()); check(Tensor(C).squeeze(1), C.squeeze(1)); check(Tensor(C).squeeze(-2), C.squeeze(-2))
  check(Tensor(C).squeeze(0), C)  # torch's rule: an axis that is not 1 stays
  check(Tensor(C).squeeze((1, 3)), C.squeeze((1, 3)))
  for d in (0, 1, 3, -1, -4):
    check(Tensor(A).unsqueeze(d), np.expand_dims(A, d))
  check(Tensor(3).unsqueeze(0), np.array([3]))

@pytest.mark.parametrize("src,shape", [((1,), (5,)), ((3, 1), (3, 7)), ((1, 7), (4, 3, 7)), ((), (2, 2)), ((3, 1), (-1, 5)), ((1, 1, 1), (2, 3, 4))])
def test_expand(src, shape):
  x = RNG.standard_normal(src).astype(np.float32)
  want = tuple(o if s == -1 else s for s, o in zip(shape, (1,) * (len(shape) - len(src)) + src))
  check(Tensor(x).expand(shape), np.broadcast_to(x, want))
  check(Tensor(x).expand(*shape), np.broadcast_to(x, want))

@pytest.mark.parametrize("pads", [((0, 0), (1, 2), (3, 0)), ((1, 1), (0, 0), (0, 0)), ((2, 0), None, (0, 5)), ((0, 1), (3, 3), (1, 1))])
def test_pad(pads):
  full = [p or (0, 0) for p in pads]
  check(Tensor(A).pad(pads), np.pad(A, full))
  check((Tensor(A) * 2 + 1).pad(pads), np.pad(A * 2 + 1, full))  # a computed value under a pad reads 0 outside
  check(Tensor(A.astype(np.float32)).pad(pads, value=-1.5), np.pad(A.astype(np.float32), full, constant_values=-1.5))

def test_pad_flat_negative_and_value():
  check(Tensor(A).pad((1, 2)), np.pad(A, ((0, 0), (0, 0), (1, 2))))
  check(Tensor(A).pad((1, 2, 0, 1)), np.pad(A, ((0, 0), (0, 1), (1, 2))))
  check(Tensor(A).pad(((0, 0), (-1, 1), (2, -3))), np.pad(A, ((0, 0), (0, 1), (2, 0)))[:, 1:, :-3])
  x = RNG.standard_normal((3, 7)).astype(np.float32)
  check(Tensor(x).pad(((1, 1), (1, 1)), value=-np.inf).max(0), np.pad(x, 1, constant_values=-np.inf).max(0))
  check(Tensor(x > 0).pad(((1, 0), (0, 2))), np.pad(x > 0, ((1, 0), (0, 2))))

@pytest.mark.parametrize("bounds", [((0, 2), (0, 3), (0, 7)), ((1, 2), (1, 3), (2, 5)), (None, (2, 3), (6, 7)), ((0, 1), None, (3, 3))])
def test_shrink(bounds):
  sl = tuple(slice(*b) if b else slice(None) for b in bounds)
  check(Tensor(A).shrink(bounds), A[sl])
  check((Tensor(A) - 3).shrink(bounds), (A - 3)[sl])

@pytest.mark.parametrize("axis", [0, 1, 2, -1, (0, 2), (0, 1, 2), None])
def test_flip(axis):
  check(Tensor(A).flip(axis), np.flip(A, axis))
  check((Tensor(A) * 3).flip(axis) + 1, np.flip(A * 3, axis) + 1)

B = np.arange(7 * 5 * 3, dtype=np.int32).reshape(7, 5, 3)
INDEX = [
  0, -1, 6, (1, 2), (1, 2, 0), (-1, -2, -3), slice(None), slice(1, 4), slice(None, None, 2), slice(None, None, -1), slice(5, 1, -1),
  slice(None, None, -3), slice(-2, None), slice(10, 20), slice(4, 1), (slice(1, 6, 2), slice(None, None, -2)), (Ellipsis, 0),
  (Ellipsis, slice(None, None, 2)), (None,), (None, 1, None), (0, Ellipsis, None), (slice(None), None, slice(1, 3), -1),
  (slice(6, None, -4), 3, slice(None, None, 2)), (Ellipsis,), (1, Ellipsis, 1), (slice(-100, 100, 3),), (slice(2, 3), slice(3, 4), slice(1, 2)),
  (np.int64(2), slice(None, None, -2)), (None, Ellipsis, None),
]

@pytest.mark.parametrize("idx", INDEX, ids=[repr(i) for i in INDEX])
def test_getitem(idx):
  check(Tensor(B)[idx], B[idx])

@pytest.mark.parametrize("idx", [slice(None, None, 2), (slice(None, None, -3), slice(1, None, 2)), (Ellipsis, slice(None, None, -2))])
def test_getitem_of_computed_value(idx):
  check((Tensor(B) * 2 - 1)[idx], (B * 2 - 1)[idx])
  check((Tensor(B) * 2 - 1)[idx].sum(), (B * 2 - 1)[idx].sum())

def test_getitem_errors():
  t = Tensor(B)
  for idx, exc in ((7, IndexingError), (-8, IndexingError), ((0, 0, 0, 0), IndexingError), (slice(None, None, 0), IndexingError),
                   ((Ellipsis, Ellipsis), IndexingError), (1.5, IndexingError), (Tensor([1.0]), IndexingError), ('a', IndexingError)):
    with pytest.raises(exc): t[idx]

def test_iter_and_len():
  assert len(Tensor(B)) == 7
  rows = [r.numpy() for r in Tensor(B[:3])]
  np.testing.assert_array_equal(np.stack(rows), B[:3])

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
  a, b, c = A, A[:, :, :3] if dim in (-1,) else A[:1] if dim == 0 else A[:, :2], None
  x = RNG.standard_normal(A.shape).astype(np.float32)
  check(Tensor(a).cat(Tensor(b), dim=dim), np.concatenate([a, b], axis=dim))
  check(Tensor(x).cat(Tensor(a), Tensor(x) * 2, dim=dim), np.concatenate([x, a, x * 2], axis=dim))

@pytest.mark.parametrize("dim", [0, 1, 3, -1])
def test_stack(dim):
  x = RNG.standard_normal(A.shape).astype(np.float32)
  check(Tensor(x).stack(Tensor(x) + 1, Tensor(A), dim=dim), np.stack([x, x + 1, A.astype(np.float32)], axis=dim))

@pytest.mark.parametrize("reps", [(1, 1, 1), (2, 1, 3), (1, 2, 1, 2), (3, 1, 1)])
def test_repeat(reps):
  check(Tensor(A).repeat(reps), np.tile(A, reps))
  check((Tensor(A) + 1).repeat(*reps), np.tile(A + 1, reps))

def test_movement_errors():
  t = Tensor(A)
  with pytest.raises(ShapeError, match=r"\(2, 3, 7\)"): t.reshape(5, -1)
  with pytest.raises(ShapeError): t.expand(2, 4, 7)
  with pytest.raises(ShapeError): t.expand(3, 7)
  with pytest.raises(AxisError): t.permute(0, 1)
  with pytest.raises(AxisError): t.flip(3)
  with pytest.raises(ShapeError): t.shrink(((0, 3), None, None))
  with pytest.raises(ShapeError): t.pad(((0, 1), (0, 1)))
  with pytest.raises(ShapeError): t.cat(Tensor.ones(2, 3), dim=0)
  with pytest.raises(ShapeError): t.repeat(2)

CHAINS = {
  'permute-pad-shrink': (lambda t: t.permute(2, 0, 1).pad(((1, 0), (0, 2), (1, 1))).shrink(((0, 7), (1, 4), (0, 4))),
                         lambda a: np.pad(a.transpose(2, 0, 1), ((1, 0), (0, 2), (1, 1)))[0:7, 1:4, 0:4]),
  'flip-reshape-T': (lambda t: t.flip(1).reshape(6, 7).T, lambda a: np.flip(a, 1).reshape(6, 7).T),
  'expand-permute-sum': (lambda t: t.reshape(2, 3, 7, 1).expand(2, 3, 7, 4).permute(3, 1, 0, 2).sum(2),
                         lambda a: np.broadcast_to(a.reshape(2, 3, 7, 1), (2, 3, 7, 4)).transpose(3, 1, 0, 2).sum(2)),
  'slice-reshape-add': (lambda t: t[:, 1:, ::2].reshape(2, 8) + t[1, :2, :4].reshape(8), lambda a: a[:, 1:, ::2].reshape(2, 8) + a[1, :2, :4].reshape(8)),
  'pad-flip-pad': (lambda t: (t * 2).pad(((0, 1), (1, 0), (0, 0))).flip((0, 2)).pad(((1, 1), (0, 0), (2, 0))),
                   lambda a: np.pad(np.flip(np.pad(a * 2, ((0, 1), (1, 0), (0, 0))), (0, 2)), ((1, 1), (0, 0), (2, 0)))),
  'transpose-reshape-transpose': (lambda t: t.transpose(0, 2).reshape(7, 6).transpose().reshape(3, 2, 7).max(1),
                                  lambda a: np.swapaxes(a, 0, 2).reshape(7, 6).T.reshape(3, 2, 7).max(1)),
  'shrink-expand-mul': (lambda t: t[:, :1, :] * t[:1, :, :1], lambda a: a[:, :1, :] * a[:1, :, :1]),
  'getitem-none-cat': (lambda t: t[None, 0].cat(t[None, 1] * 10), lambda a: np.concatenate([a[None, 0], a[None, 1] * 10])),
}

@pytest.mark.parametrize("dev", ["INTERP", "CPU"])
@pytest.mark.parametrize("name", list(CHAINS))
def test_movement_chain(name, dev):
  f, g = CHAINS[name]
  check(f(Tensor(A)), g(A))


def test_concat_of_permuted_parts_reads_affinely():
  """Heads merged back (b, h, s, d) -> (b, s, h*d) and concatenated (attention's q, k and v gradients): a load of one
  part is a view of a masked view of the permuted buffer, which the tiles' split along the parts' boundaries makes one affine view again (no division or
  remainder a lane in the kernel); the values against numpy."""
  from tgc.tensor import _build_module
  from tgc.lowering import lower
  from tgc.target import DeviceSpec
  a, c = (RNG.standard_normal((4, 2, 16, 16)).astype(np.float32) for _ in range(2))
  kt = RNG.standard_normal((4, 32, 16)).astype(np.float32)  # (a transposed part: the kernel's shape stays 4x16x96)
  merge = lambda t: t.permute(0, 2, 1, 3).reshape(4, 16, 32)
  out = Tensor.cat(merge(Tensor(a)), Tensor(kt).transpose(1, 2), merge(Tensor(c)), dim=-1)
  m, _ = _build_module([out.node], 'main')
  lower(m, DeviceSpec.of('llvm'), 'uop')
  names = {op.name for f in m.functions('uop.func') for op in f.walk()}
  assert not names & {'uop.mod', 'uop.idiv'}, names
  check(out, np.concatenate([a.transpose(0, 2, 1, 3).reshape(4, 16, 32), kt.transpose(0, 2, 1), c.transpose(0, 2, 1, 3).reshape(4, 16, 32)], -1))
