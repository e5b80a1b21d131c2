import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tgc.shape import IntBuilder, View, ViewStack


# ---- helpers ----

def materialize(vs: ViewStack, base: np.ndarray) -> np.ndarray:
  """Read vs out of the flat buffer `base` with IntBuilder on broadcast index arrays (pads read 0)."""
  if vs.size == 0: return np.zeros(vs.shape, dtype=base.dtype)
  grid = list(np.indices(vs.shape)) if vs.shape else []
  idx, valid = vs.to_indexed(grid, IntBuilder())
  idx = np.broadcast_to(np.asarray(idx), vs.shape)
  valid = np.broadcast_to(np.asarray(valid, dtype=bool), vs.shape)
  return np.where(valid, base[np.where(valid, idx, 0)], 0)


def np_apply(a: np.ndarray, op: str, arg) -> np.ndarray:
  if op == "reshape": return a.reshape(arg)
  if op == "expand": return np.broadcast_to(a, arg)
  if op == "permute": return a.transpose(arg)
  if op == "pad": return np.pad(a, arg)
  if op == "shrink": return a[tuple(slice(b, e) for b, e in arg)]
  if op == "flip": return np.flip(a, arg) if arg else a
  raise AssertionError(op)


def check(base_shape, ops):
  base = np.arange(1, math.prod(base_shape) + 1)  # from 1, so a pad (0) never looks like an element
  ref = base.reshape(base_shape)
  vs = ViewStack.from_shape(base_shape)
  for op, arg in ops:
    ref = np_apply(ref, op, arg)
    vs = getattr(vs, op)(arg)
    assert vs.shape == ref.shape
  np.testing.assert_array_equal(materialize(vs, base), ref)
  simp = vs.simplify()
  assert len(simp.views) <= len(vs.views) and simp.shape == vs.shape
  np.testing.assert_array_equal(materialize(simp, base), ref)
  return vs


def idx_valid(vs: ViewStack):
  grid = list(np.indices(vs.shape))
  idx, valid = vs.to_indexed(grid, IntBuilder())
  return np.broadcast_to(np.asarray(idx), vs.shape), np.broadcast_to(np.asarray(valid, dtype=bool), vs.shape)


# ---- View.create / contiguous ----

def test_create_canonical():
  v = View.create((3, 1, 4))
  assert v.strides == (4, 0, 1) and v.offset == 0 and v.mask is None and v.contiguous
  assert View.create((2, 3), mask=((0, 2), (0, 3))).mask is None
  empty = View.create((2, 3), (3, 1), 5, ((0, 2), (2, 2)))
  assert empty.mask == ((0, 0), (0, 0)) and empty.strides == (0, 0) and empty.offset == 0
  assert View.create((1, 5), (7, 1)).strides == (0, 1)
  assert View.create((0, 3)).contiguous


def test_contiguous_detection():
  assert ViewStack.from_shape((2, 3)).contiguous
  assert not ViewStack.from_shape((2, 3)).permute((1, 0)).contiguous
  assert not ViewStack.from_shape((2, 3)).shrink(((1, 2), (0, 3))).contiguous  # offset 3
  assert ViewStack.from_shape((2, 3)).shrink(((0, 1), (0, 3))).contiguous  # first row is contiguous
  assert not ViewStack.from_shape((2, 3)).pad(((0, 1), (0, 0))).contiguous
  assert not ViewStack.from_shape((1, 3)).expand((2, 3)).contiguous
  assert ViewStack.from_shape((3, 1)).permute((1, 0)).contiguous  # size-1 axes don't matter
  assert not ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).contiguous  # two views


# ---- single ops ----

def test_reshape_merges_contiguous():
  vs = ViewStack.from_shape((4, 4)).reshape((16,))
  assert len(vs.views) == 1 and vs.views[0] == View.create((16,))
  vs = ViewStack.from_shape((2, 3, 4)).reshape((6, 1, 4)).reshape((2, 12))
  assert len(vs.views) == 1 and vs.contiguous


def test_reshape_split_and_merge_strided():
  vs = ViewStack.from_shape((4, 6)).permute((1, 0))  # strides (1, 6)
  r = vs.reshape((2, 3, 2, 2))
  assert len(r.views) == 1 and r.views[0].strides == (3, 1, 12, 6)
  check((4, 6), [("permute", (1, 0)), ("reshape", (2, 3, 2, 2))])
  # the two trailing axes of a transposed (2, 3, 4) tensor still merge: strides (1, 12, 4) -> ...
  vs = ViewStack.from_shape((2, 3, 4)).permute((2, 0, 1)).reshape((4, 6))
  assert len(vs.views) == 1 and vs.views[0].strides == (1, 4)


def test_reshape_pushes_when_impossible():
  vs = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,))
  assert len(vs.views) == 2 and vs.views[1] == View.create((6,))
  assert len(vs.simplify().views) == 2  # not expressible as one view
  check((2, 3), [("permute", (1, 0)), ("reshape", (6,))])


def test_reshape_expanded_axes():
  vs = ViewStack.from_shape((1, 4)).expand((6, 4)).reshape((2, 3, 4))
  assert len(vs.views) == 1 and vs.views[0].strides == (0, 0, 1)
  vs = ViewStack.from_shape((1, 4)).expand((6, 4)).reshape((24,))
  assert len(vs.views) == 2
  check((1, 4), [("expand", (6, 4)), ("reshape", (3, 8))])


def test_reshape_masked():
  vs = ViewStack.from_shape((2, 3)).pad(((1, 1), (0, 0))).reshape((1, 4, 1, 3, 1))
  assert len(vs.views) == 1 and vs.views[0].mask == ((0, 1), (1, 3), (0, 1), (0, 3), (0, 1))
  # padding on the outer axis survives merging with a full inner axis
  vs = ViewStack.from_shape((2, 3)).pad(((1, 1), (0, 0))).reshape((12,))
  assert len(vs.views) == 1 and vs.views[0].mask == ((3, 9),)
  # and splitting it back
  assert vs.reshape((4, 3)).views[0].mask == ((1, 3), (0, 3))
  # elements 3..8 of a (2, 6) grid are not a box: push
  assert len(vs.reshape((2, 6)).views) == 2
  # padding on the inner axis cannot be flattened into one interval
  vs = ViewStack.from_shape((2, 3)).pad(((0, 0), (1, 1))).reshape((10,))
  assert len(vs.views) == 2
  for ops in ([("pad", ((1, 1), (0, 0))), ("reshape", (12,))], [("pad", ((1, 1), (0, 0))), ("reshape", (2, 6))],
              [("pad", ((0, 0), (1, 1))), ("reshape", (10,))], [("pad", ((1, 1), (0, 0))), ("reshape", (4, 3, 1))]):
    check((2, 3), ops)


def test_reshape_zero_and_scalar():
  vs = ViewStack.from_shape((2, 0, 3)).reshape((0, 5)).reshape((5, 0))
  assert vs.shape == (5, 0) and vs.size == 0 and len(vs.views) == 1
  vs = ViewStack.from_shape((1, 1)).reshape(())
  assert vs.shape == () and vs.size == 1
  assert vs.to_indexed([], IntBuilder()) == (0, True)
  check((3,), [("shrink", ((1, 2),)), ("reshape", ()), ("reshape", (1, 1)), ("expand", (2, 3))])
  check((2, 3), [("shrink", ((0, 0), (0, 3))), ("pad", ((1, 1), (0, 0))), ("reshape", (2, 3))])


def test_all_invalid_scalar():
  # a 0-d view has no axis for an all-invalid mask: reshaped to 0-d (and simplified) it stays invalid
  for shape, ops in (((3,), [("pad", ((0, 1),)), ("shrink", ((3, 4),)), ("reshape", ())]),
                     ((2, 3), [("pad", ((0, 2), (0, 0))), ("shrink", ((2, 3), (1, 2))), ("reshape", (1,)), ("reshape", ())])):
    vs = check(shape, ops)
    assert vs.to_indexed([], IntBuilder())[1] is False and vs.simplify().to_indexed([], IntBuilder())[1] is False
  vs = ViewStack((View.create((4,), mask=((1, 3),)), View.create((), offset=3)))
  assert vs.simplify().to_indexed([], IntBuilder())[1] is False


def test_expand():
  vs = ViewStack.from_shape((3, 1)).expand((3, 4))
  assert vs.views[0].strides == (1, 0)
  check((3, 1), [("expand", (3, 4))])
  check((1,), [("expand", (0,))])
  check((1, 2), [("pad", ((1, 1), (0, 0))), ("shrink", ((1, 2), (0, 2))), ("expand", (3, 2))])
  check((1, 2), [("pad", ((1, 1), (0, 0))), ("shrink", ((0, 1), (0, 2))), ("expand", (3, 2))])


def test_permute():
  vs = ViewStack.from_shape((2, 3, 4)).permute((2, 0, 1))
  assert vs.shape == (4, 2, 3) and vs.views[0].strides == (1, 12, 4)
  check((2, 3, 4), [("permute", (2, 0, 1))])


def test_pad():
  vs = ViewStack.from_shape((2, 3)).pad(((1, 0), (2, 1)))
  v = vs.views[0]
  assert v.shape == (3, 6) and v.mask == ((1, 3), (2, 5)) and v.offset == -5
  check((2, 3), [("pad", ((1, 0), (2, 1)))])
  assert ViewStack.from_shape((2, 3)).pad(((0, 0), (0, 0))).contiguous


def test_shrink():
  vs = ViewStack.from_shape((4, 5)).shrink(((1, 3), (2, 5)))
  assert vs.views[0] == View((2, 3), (5, 1), 7, None)
  check((4, 5), [("shrink", ((1, 3), (2, 5)))])
  # shrinking the padding away removes the mask
  vs = ViewStack.from_shape((2, 3)).pad(((1, 1), (1, 1))).shrink(((1, 3), (1, 4)))
  assert vs.contiguous


def test_flip():
  vs = ViewStack.from_shape((2, 3)).flip((1,))
  assert vs.views[0] == View((2, 3), (3, -1), 2, None)
  check((2, 3), [("flip", (1,))])
  check((2, 3), [("pad", ((1, 0), (0, 2))), ("flip", (0, 1))])
  assert ViewStack.from_shape((2, 3)).flip((0, 1)).flip((1, 0)).contiguous


def test_to_indexed_is_minimal():
  class Count(IntBuilder):
    def __init__(self): self.ops = []
    def add(self, x, y): self.ops.append("add"); return x + y
    def mul(self, x, y): self.ops.append("mul"); return x * y
    def idiv(self, x, y): self.ops.append("idiv"); return x // y
    def mod(self, x, y): self.ops.append("mod"); return x % y
    def lt(self, x, y): self.ops.append("lt"); return x < y
    def and_(self, x, y): self.ops.append("and"); return x & y
  b = Count()
  assert ViewStack.from_shape((3, 4)).to_indexed([2, 1], b) == (9, True) and b.ops == ["mul", "add"]
  b = Count()
  assert ViewStack.from_shape((1, 4)).expand((3, 4)).to_indexed([2, 1], b) == (1, True) and b.ops == []
  b = Count()  # only the padded side of the padded axis is checked
  assert ViewStack.from_shape((2, 3)).pad(((0, 1), (0, 0))).to_indexed([2, 1], b) == (7, False)
  assert b.ops == ["mul", "add", "lt"]
  b = Count()  # transpose then flatten: lower view unravels with one idiv and one mod, the outer digit needs no mod
  idx, valid = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).to_indexed([3], b)
  assert (idx, valid) == (4, True) and sorted(b.ops) == ["add", "idiv", "mod", "mul"]


def test_multi_view_mask_below():
  # a masked view under a pushed view: validity of both is combined
  ops = [("pad", ((0, 1), (1, 0))), ("permute", (1, 0)), ("reshape", (12,)), ("pad", ((2, 0),))]
  vs = check((2, 3), ops)
  assert len(vs.views) == 2


# ---- simplify ----

def test_simplify_drops_contiguous_lower():
  lower = View.create((6,))
  top = View.create((3, 2), (1, 3))
  vs = ViewStack((lower, top)).simplify()
  assert vs.views == (top,)


def test_simplify_merges_composable():
  # transpose, flatten (pushes), then unflatten back: the composition is one view again
  vs = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,))
  vs = ViewStack((vs.views[0], View.create((3, 2)),))
  s = vs.simplify()
  assert len(s.views) == 1 and s.views[0] == View.create((3, 2), (1, 3))
  # a pushed view whose top reshape restores the shape simplifies away
  vs = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).reshape((3, 2))
  assert len(vs.simplify().views) == 1
  # masked lower view, with the mask expressible on the top axes
  vs = ViewStack.from_shape((2, 3)).pad(((1, 1), (0, 0))).permute((1, 0)).reshape((12,)).reshape((3, 4))
  s = vs.simplify()
  assert len(s.views) == 1 and s.views[0].mask == ((0, 3), (1, 3))
  np.testing.assert_array_equal(materialize(s, np.arange(1, 7)), materialize(vs, np.arange(1, 7)))


def test_simplify_keeps_impossible():
  vs = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).shrink(((1, 5),))
  assert len(vs.simplify().views) == 2
  check((2, 3), [("permute", (1, 0)), ("reshape", (6,)), ("shrink", ((1, 5),))])
  # a slice of 2 consecutive elements across a row break is still affine
  vs = ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).shrink(((1, 3),))
  assert len(vs.simplify().views) == 1
  check((2, 3), [("permute", (1, 0)), ("reshape", (6,)), ("shrink", ((1, 3),))])


# ---- real_strides ----

def test_real_strides():
  assert ViewStack.from_shape((2, 3)).real_strides() == (3, 1)
  assert ViewStack.from_shape((2, 3)).permute((1, 0)).real_strides() == (1, 3)
  assert ViewStack.from_shape((1, 3)).expand((4, 3)).real_strides() == (0, 1)
  padded = ViewStack.from_shape((2, 3)).pad(((0, 0), (1, 1)))
  assert padded.real_strides() == (3, None)
  assert padded.real_strides(ignore_valid=True) == (3, 1)
  # two views: flat axis of a transpose is not affine
  assert ViewStack.from_shape((2, 3)).permute((1, 0)).reshape((6,)).real_strides() == (None,)
  # two views where the top axes are still affine in the lower buffer
  vs = ViewStack.from_shape((4, 6)).permute((1, 0)).reshape((24,)).reshape((6, 4))
  assert len(vs.views) == 2 and vs.real_strides() == (1, 6)
  vs = ViewStack.from_shape((2, 4)).permute((1, 0)).reshape((8,)).reshape((2, 2, 2))
  assert vs.real_strides() == (2, 1, 4)


# ---- errors ----

@pytest.mark.parametrize("op,arg,msg", [
  ("reshape", (4, 2), r"\(2, 3\).*\(4, 2\)"),
  ("reshape", (-1, 6), r"\(2, 3\)"),
  ("expand", (4, 3), r"\(2, 3\).*\(4, 3\)"),
  ("expand", (2, 3, 1), r"\(2, 3\)"),
  ("permute", (0, 0), r"\(2, 3\)"),
  ("permute", (0, 1, 2), r"\(2, 3\)"),
  ("pad", ((0, 0), (-1, 0)), r"\(2, 3\)"),
  ("pad", ((0, 0),), r"\(2, 3\)"),
  ("shrink", ((0, 3), (0, 3)), r"\(2, 3\)"),
  ("shrink", ((2, 1), (0, 3)), r"\(2, 3\)"),
  ("shrink", ((-1, 1), (0, 3)), r"\(2, 3\)"),
  ("flip", (2,), r"\(2, 3\)"),
  ("flip", (-1,), r"\(2, 3\)"),
  ("flip", (0, 0), r"\(2, 3\)"),
])
def test_errors(op, arg, msg):
  with pytest.raises(ValueError, match=msg):
    getattr(ViewStack.from_shape((2, 3)), op)(arg)


# ---- property test against numpy ----

@st.composite
def reshape_target(draw, shape):
  """A random shape with the same element count: shuffle the prime factors into axes, sprinkle 1s."""
  n = math.prod(shape)
  if n == 0:
    return tuple(draw(st.permutations([0] + [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))])))
  factors, k, p = [], n, 2
  while k > 1:
    while k % p == 0: factors.append(p); k //= p
    p += 1
  factors = draw(st.permutations(factors))
  naxes = draw(st.integers(1, max(1, len(factors))))
  cuts = sorted(draw(st.lists(st.integers(0, len(factors)), min_size=naxes - 1, max_size=naxes - 1)))
  out = [math.prod(factors[a:b]) for a, b in zip([0] + cuts, cuts + [len(factors)])]
  for _ in range(draw(st.integers(0, 2))): out.insert(draw(st.integers(0, len(out))), 1)
  return tuple(out)


@st.composite
def op_for(draw, shape):
  n = len(shape)
  kinds = ["reshape", "permute", "pad", "shrink", "flip"] + (["expand"] if 1 in shape else [])
  op = draw(st.sampled_from(kinds))
  if op == "reshape": return op, draw(reshape_target(shape))
  if op == "expand":
    return op, tuple(draw(st.sampled_from([0, 1, 2, 3, 4] if draw(st.integers(0, 9)) == 0 else [1, 2, 3, 4]))
                     if s == 1 else s for s in shape)
  if op == "permute": return op, tuple(draw(st.permutations(range(n))))
  if op == "pad": return op, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
  if op == "shrink":
    out = []
    for s in shape:
      b = draw(st.integers(0, s))
      e = draw(st.integers(b, s)) if draw(st.integers(0, 39)) == 0 else draw(st.integers(min(b + 1, s), s))
      b = min(b, e)
      out.append((b, e))
    return op, tuple(out)
  return op, tuple(sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))) if n else ()


@st.composite
def programs(draw, max_ops=6):
  base = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
  shape, ops = base, []
  for _ in range(draw(st.integers(1, max_ops))):
    if math.prod(shape) > 5000: break  # keep materialisation cheap
    op, arg = draw(op_for(shape))
    ops.append((op, arg))
    shape = np_apply(np.zeros(shape, dtype=np.int8), op, arg).shape
  return base, ops


@settings(max_examples=300, deadline=None)
@given(programs())
def test_matches_numpy(prog):
  base_shape, ops = prog
  vs = check(base_shape, ops)
  if vs.size == 0: return
  # real_strides: along an axis with a known stride, stepping between valid points moves the index by it
  idx, valid = idx_valid(vs)
  for ax, rs in enumerate(vs.real_strides(ignore_valid=True)):
    if rs is None or vs.shape[ax] < 2: continue
    lo, hi = [slice(None)] * len(vs.shape), [slice(None)] * len(vs.shape)
    lo[ax], hi[ax] = slice(0, -1), slice(1, None)
    both = valid[tuple(lo)] & valid[tuple(hi)]
    assert np.all((idx[tuple(hi)] - idx[tuple(lo)])[both] == rs)


def test_real_strides_of_a_window_over_padded_rows():
  """A 5-wide window sliding over rows padded to 100 (a depthwise conv's input): the window's column (101 per kx in
  the flat index, 1 per ox) stays affine, since ox + kx < 100 never crosses a padded row."""
  pad = View.create((6, 5, 100), (96, 0, 1), offset=-194, mask=((2, 4), (0, 5), (2, 98)))  # rows, kx (a broadcast), columns
  vs = ViewStack((pad, View.create((2, 96, 5, 5), (500, 1, 500, 101))))  # oy, ox, ky, kx over the flat (6, 5, 100)
  assert vs.real_strides(ignore_valid=True) == (96, 1, 96, 1)
  assert vs.real_strides()[1] is None  # the padding's mask depends on the column


def test_mask_aligned():
  """mask_aligned(axis, w): whether a vector of w along the axis, gated by its first element's validity, is exact (the
  validity the same across each aligned group of w), for every value of the other axes the mask depends on."""
  plain = ViewStack.from_shape((4, 16))
  assert plain.mask_aligned(1, 8) and plain.mask_aligned(0, 4)
  end = plain.pad(((0, 0), (0, 8)))  # a row of 16 padded to 24 (PADTO): groups of 8 (or 4) stay whole, of 16 do not fit
  assert end.mask_aligned(1, 8) and end.mask_aligned(1, 4) and not end.mask_aligned(1, 16)
  edge = plain.pad(((0, 0), (1, 3)))  # a conv input's edge: the first group holds the pad and 3 values
  assert not edge.mask_aligned(1, 4) and not edge.mask_aligned(1, 2) and edge.mask_aligned(0, 4)
  rows = plain.pad(((1, 3), (0, 0)))  # a mask along the other axis only
  assert rows.mask_aligned(1, 8) and rows.mask_aligned(1, 16)
  # a window over a padded row (the mask depends on the window's column too): the sliding offset breaks the groups
  win = ViewStack((edge.views[0], View.create((4, 16, 3), (20, 1, 1))))
  assert not win.mask_aligned(1, 4)
  # the axis does not divide into groups
  assert not plain.mask_aligned(1, 3)
