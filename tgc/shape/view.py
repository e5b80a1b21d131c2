"""Strided views over a flat buffer, and stacks of them (tinygrad's View / ShapeTracker).

A View maps a point p of its shape to the flat index `offset + sum(strides[i] * p[i])`; the point is
valid iff `mask[i][0] <= p[i] < mask[i][1]` on every axis (invalid points read as 0: padding).
Movement ops only rewrite these numbers; no data moves. When a reshape is not expressible as one
View, a ViewStack pushes a new View that addresses the flattened output of the one below it.
A 0-d View has no axis to carry an all-invalid mask: a reshape to 0-d of an all-invalid view (the scalar reduce of
an empty axis padded with its identity) stays a stack, the all-invalid view below.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

Mask = tuple[tuple[int, int], ...]


def strides_for_shape(shape: Sequence[int]) -> tuple[int, ...]:
  """C-order strides; size-1 axes get stride 0 (the canonical form every View uses)."""
  out, acc = [], 1
  for s in reversed(shape):
    out.append(0 if s == 1 else acc)
    acc *= s
  return tuple(reversed(out))


def _split_groups(up: View, lo_shape: Sequence[int]) -> list[list[int]] | None:
  """When View `up` is a plain reshape that splits each axis of lo_shape into consecutive axes of its own (no mask,
  no offset, C-order strides): the axes of `up` each axis of lo_shape became; else None."""
  if up.mask is not None or up.offset != 0 or up.strides != strides_for_shape(up.shape): return None
  groups, i = [], 0
  for s in lo_shape:
    g, p = [], 1
    while p < s and i < len(up.shape): g.append(i); p *= up.shape[i]; i += 1
    if p != s: return None
    groups.append(g)
  if not groups: return None
  while i < len(up.shape) and up.shape[i] == 1: groups[-1].append(i); i += 1
  return groups if i == len(up.shape) else None


def _unravel(shape: Sequence[int], flat: int) -> list[int]:
  out = []
  for s in reversed(shape):
    out.append(flat % s)
    flat //= s
  return out[::-1]


def _merge_interval(sizes: Sequence[int], ranges: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
  """Flatten a box of per-axis ranges (outer axis first) into one interval, or None if the box is not
  contiguous once flattened. It is contiguous iff the axes are: single-valued, then one arbitrary
  axis, then full ones."""
  start, k = 0, 0
  while k < len(sizes) and ranges[k][1] - ranges[k][0] == 1:
    start = start * sizes[k] + ranges[k][0]
    k += 1
  if k == len(sizes): return (start, start + 1)
  inner = math.prod(sizes[k + 1:])
  if any(ranges[i] != (0, sizes[i]) for i in range(k + 1, len(sizes))): return None
  base = start * sizes[k] * inner
  return (base + ranges[k][0] * inner, base + ranges[k][1] * inner)


def _split_interval(iv: tuple[int, int], sizes: Sequence[int]) -> list[tuple[int, int]] | None:
  """Inverse of _merge_interval: per-axis ranges whose box is exactly the interval, or None."""
  b, e = iv
  out = []
  for k in range(len(sizes)):
    inner = math.prod(sizes[k + 1:])
    if b % inner == 0 and e % inner == 0:
      return out + [(b // inner, e // inner)] + [(0, s) for s in sizes[k + 1:]]
    if b // inner != (e - 1) // inner: return None
    out.append((b // inner, b // inner + 1))
    b, e = b % inner, (e - 1) % inner + 1
  return out  # unreachable: the innermost axis has inner == 1


@dataclass(frozen=True)
class View:
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int = 0
  mask: Mask | None = None  # valid [start, end) per axis; None = everything valid

  @staticmethod
  def create(shape: Sequence[int], strides: Sequence[int] | None = None, offset: int = 0,
             mask: Sequence[tuple[int, int]] | None = None) -> View:
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape): raise ValueError(f"negative dimension in shape {shape}")
    n = len(shape)
    strides = strides_for_shape(shape) if strides is None else tuple(int(s) for s in strides)
    if len(strides) != n: raise ValueError(f"strides {strides} do not match shape {shape}")
    # nothing is ever addressed in an empty view, so keep a single canonical form for it
    if 0 in shape: return View(shape, (0,) * n, 0, None)
    strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
    if mask is not None:
      if len(mask) != n: raise ValueError(f"mask {tuple(mask)} does not match shape {shape}")
      mask = tuple((max(0, int(b)), min(s, int(e))) for (b, e), s in zip(mask, shape))
      # an empty range on any axis makes the whole view invalid: canonical "all invalid" form
      if any(b >= e for b, e in mask): return View(shape, (0,) * n, 0, ((0, 0),) * n)
      if all(m == (0, s) for m, s in zip(mask, shape)): mask = None
    return View(shape, strides, int(offset), mask)

  @property
  def size(self) -> int: return math.prod(self.shape)

  def reach(self, indexed: bool = False) -> int:
    """The largest magnitude an index this view computes may take, at any point (a mask only gates the read);
    indexed: a view above this one makes a linear index into its shape, so its size counts too."""
    r = abs(self.offset) + sum(abs(st) * max(s - 1, 0) for st, s in zip(self.strides, self.shape))
    return max(r, self.size) if indexed else r

  @property
  def all_invalid(self) -> bool: return self.mask is not None and any(b >= e for b, e in self.mask)

  @property
  def contiguous(self) -> bool:
    if self.offset != 0 or self.mask is not None: return False
    if 0 in self.shape: return True
    return all(s == 1 or st == cst for s, st, cst in zip(self.shape, self.strides, strides_for_shape(self.shape)))

  def _ranges(self) -> list[tuple[int, int]]:
    return list(self.mask) if self.mask is not None else [(0, s) for s in self.shape]

  # ---- movement ops ----

  def reshape(self, new_shape: Sequence[int]) -> View | None:
    new_shape = tuple(int(s) for s in new_shape)
    if any(s < 0 for s in new_shape): raise ValueError(f"cannot reshape {self.shape} to {new_shape}: negative dimension")
    if math.prod(new_shape) != self.size:
      raise ValueError(f"cannot reshape {self.shape} ({self.size} elements) to {new_shape} ({math.prod(new_shape)} elements)")
    if new_shape == self.shape: return self
    if self.size == 0 or self.contiguous: return View.create(new_shape)
    if self.all_invalid: return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
    # size-1 axes address nothing (stride 0, full mask unless all-invalid, handled above): drop them and
    # match the remaining axes in chunks of equal element count, outer to inner
    old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self._ranges()) if s != 1]
    new_idx = [k for k, s in enumerate(new_shape) if s != 1]
    new_strides, new_mask = [0] * len(new_shape), [(0, s) for s in new_shape]
    i = j = 0
    while i < len(old):
      oi, nj, po, pn = [i], [new_idx[j]], old[i][0], new_shape[new_idx[j]]
      while po != pn:
        if po < pn: i += 1; oi.append(i); po *= old[i][0]
        else: j += 1; nj.append(new_idx[j]); pn *= new_shape[new_idx[j]]
      i, j = i + 1, j + 1
      # the chunk is one affine run only if each old axis steps exactly over the one inside it
      if any(old[a][1] != old[c][1] * old[c][0] for a, c in zip(oi, oi[1:])): return None
      st = old[oi[-1]][1]
      for k in reversed(nj): new_strides[k], st = st, st * new_shape[k]
      if any(old[a][2] != (0, old[a][0]) for a in oi):
        iv = _merge_interval([old[a][0] for a in oi], [old[a][2] for a in oi])
        parts = None if iv is None else _split_interval(iv, [new_shape[k] for k in nj])
        if parts is None: return None
        for k, r in zip(nj, parts): new_mask[k] = r
    return View.create(new_shape, new_strides, self.offset, new_mask if self.mask is not None else None)

  def expand(self, new_shape: Sequence[int]) -> View:
    new_shape = tuple(int(s) for s in new_shape)
    if len(new_shape) != len(self.shape) or any(ns != s and s != 1 or ns < 0 for s, ns in zip(self.shape, new_shape)):
      raise ValueError(f"cannot expand {self.shape} to {new_shape}: only size-1 axes can grow")
    if new_shape == self.shape: return self
    if self.size == 0: return View.create(new_shape)
    # grown axes read the same element (stride 0); their mask is either full or empty
    mask = None if self.mask is None else tuple(m if s == ns else (0, ns) if m == (0, 1) else (0, 0)
                                                 for m, s, ns in zip(self.mask, self.shape, new_shape))
    return View.create(new_shape, [0 if s != ns else st for s, ns, st in zip(self.shape, new_shape, self.strides)],
                       self.offset, mask)

  def permute(self, order: Sequence[int]) -> View:
    order = tuple(int(o) for o in order)
    if sorted(order) != list(range(len(self.shape))):
      raise ValueError(f"permute order {order} is not a permutation of the axes of {self.shape}")
    return View.create([self.shape[o] for o in order], [self.strides[o] for o in order], self.offset,
                       None if self.mask is None else [self.mask[o] for o in order])

  def _resize(self, bounds: Sequence[tuple[int, int]]) -> View:
    """Window [start, end) per axis; bounds may reach outside the shape (padding), where the old
    valid range, shifted into the window, becomes the mask."""
    offset = self.offset + sum(st * b for st, (b, _) in zip(self.strides, bounds))
    mask = [(max(0, mb - b), min(e - b, me - b)) for (mb, me), (b, e) in zip(self._ranges(), bounds)]
    need_mask = self.mask is not None or any(b < 0 or e > s for (b, e), s in zip(bounds, self.shape))
    return View.create([e - b for b, e in bounds], self.strides, offset, mask if need_mask else None)

  def pad(self, pads: Sequence[tuple[int, int]]) -> View:
    pads = tuple((int(b), int(a)) for b, a in pads)
    if len(pads) != len(self.shape) or any(b < 0 or a < 0 for b, a in pads):
      raise ValueError(f"invalid pad {pads} for shape {self.shape}: need one non-negative (before, after) per axis")
    if all(p == (0, 0) for p in pads): return self
    return self._resize([(-b, s + a) for (b, a), s in zip(pads, self.shape)])

  def shrink(self, bounds: Sequence[tuple[int, int]]) -> View:
    bounds = tuple((int(b), int(e)) for b, e in bounds)
    if len(bounds) != len(self.shape) or any(not 0 <= b <= e <= s for (b, e), s in zip(bounds, self.shape)):
      raise ValueError(f"invalid shrink {bounds} for shape {self.shape}: need 0 <= start <= end <= size per axis")
    if all(bd == (0, s) for bd, s in zip(bounds, self.shape)): return self
    return self._resize(bounds)

  def flip(self, axes: Sequence[int]) -> View:
    axes = tuple(int(a) for a in axes)
    n = len(self.shape)
    if any(not 0 <= a < n for a in axes) or len(set(axes)) != len(axes):
      raise ValueError(f"invalid flip axes {axes} for shape {self.shape}")
    if self.size == 0: return self
    fl = [i in axes for i in range(n)]
    offset = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, fl) if f)
    mask = None if self.mask is None else [(s - e, s - b) if f else (b, e) for (b, e), s, f in zip(self.mask, self.shape, fl)]
    return View.create(self.shape, [-st if f else st for st, f in zip(self.strides, fl)], offset, mask)

  # ---- helpers for stacks ----

  def compress(self) -> View:
    """Same flat -> (index, valid) function with the fewest axes: drop size-1 axes and merge
    neighbours that form one affine run with an interval mask. Used on lower views, which are only
    addressed through their flattened index."""
    if self.size == 0 or self.all_invalid: return self
    axes: list[tuple[int, int, tuple[int, int]]] = []
    for s, st, m in zip(self.shape, self.strides, self._ranges()):
      if s == 1: continue
      if axes and axes[-1][1] == st * s:
        iv = _merge_interval([axes[-1][0], s], [axes[-1][2], m])
        if iv is not None:
          axes[-1] = (axes[-1][0] * s, st, iv)
          continue
      axes.append((s, st, m))
    return View.create([a[0] for a in axes], [a[1] for a in axes], self.offset,
                       [a[2] for a in axes] if self.mask is not None else None)

  def to_indexed(self, idxs: Sequence[Any], b) -> tuple[Any, Any]:
    """(flat index, valid) of this view alone at the point idxs, built with b."""
    idx = None
    for x, st in zip(idxs, self.strides):
      if st == 0: continue
      term = x if st == 1 else b.mul(x, b.const(st))
      idx = term if idx is None else b.add(idx, term)
    if idx is None: idx = b.const(self.offset)
    elif self.offset != 0: idx = b.add(idx, b.const(self.offset))
    valid = None
    if self.mask is not None:
      if self.all_invalid: return b.const(0), b.lt(b.const(0), b.const(0))
      for x, (lo, hi), s in zip(idxs, self.mask, self.shape):
        if lo > 0: valid = _and(b, valid, b.lt(b.const(lo - 1), x))
        if hi < s: valid = _and(b, valid, b.lt(x, b.const(hi)))
    return idx, (b.true() if valid is None else valid)


def _and(b, x, y): return y if x is None else b.and_(x, y)


def _merge_views(lo: View, up: View) -> View | None:
  """One View equal to `up` addressing the flattened `lo`, or None if there is none (that we find).

  Take the first valid point p0 of `up`, unravel its flat index f0 into lower digits, and for every up
  axis k the digit change of one step along k. Assuming every step adds the same digit deltas, each
  lower digit is affine in p: D_j(p) = origin_j + sum_k c_kj (p_k - p0_k). If every D_j stays inside
  [0, S_j) over up's valid box, these are the true digits (mixed radix is unique), so the composition
  is affine. The lower mask then constrains each digit; it is a box in p if each constrained digit
  depends on at most one up axis."""
  if up.size == 0: return View.create(up.shape)
  if up.all_invalid or lo.all_invalid: return View.create(up.shape, mask=((0, 0),) * len(up.shape)) if up.shape else None
  if lo.size == 0: return None
  lo = lo.compress()
  S, T, n = lo.shape, lo.strides, len(up.shape)
  box = up._ranges()
  f0 = up.offset + sum(st * b for st, (b, _) in zip(up.strides, box))
  if not 0 <= f0 < lo.size: return None
  origin = _unravel(S, f0)
  coef = []  # per up axis, digit deltas per lower axis (None: axis constant over the valid box)
  for st, (b, e) in zip(up.strides, box):
    if st == 0 or e - b == 1: coef.append(None); continue
    if not 0 <= f0 + st < lo.size: return None
    coef.append([d - o for d, o in zip(_unravel(S, f0 + st), origin)])
  # every digit must be in range before any lower-mask conclusion (e.g. "all invalid") is drawn
  digits = []
  for j in range(len(S)):
    dep = [(k, c[j]) for k, c in enumerate(coef) if c is not None and c[j] != 0]
    dlo = origin[j] + sum(min(0, c * (box[k][1] - 1 - box[k][0])) for k, c in dep)
    dhi = origin[j] + sum(max(0, c * (box[k][1] - 1 - box[k][0])) for k, c in dep)
    if dlo < 0 or dhi >= S[j]: return None
    digits.append((dep, dlo, dhi))
  mask = list(box)
  for j, ((dep, dlo, dhi), (mb, me)) in enumerate(zip(digits, lo._ranges())):
    if mb <= dlo and dhi < me: continue
    if len(dep) != 1: return None if dep or not n else View.create(up.shape, mask=((0, 0),) * n)
    # mb <= origin + c*t < me for t = p_k - box_k[0]: an interval of t
    k, c = dep[0]
    lo_num, hi_num = mb - origin[j], me - 1 - origin[j]
    if c > 0: tlo, thi = -((-lo_num) // c), hi_num // c
    else: tlo, thi = -((-hi_num) // c), lo_num // c
    mask[k] = (max(mask[k][0], box[k][0] + tlo), min(mask[k][1], box[k][0] + thi + 1))
  strides = [0 if c is None else sum(t * d for t, d in zip(T, c)) for c in coef]
  offset = lo.offset + sum(t * o for t, o in zip(T, origin)) - sum(st * b for st, (b, _) in zip(strides, box))
  return View.create(up.shape, strides, offset, mask)


@dataclass(frozen=True)
class ViewStack:
  views: tuple[View, ...]

  @staticmethod
  def from_shape(shape: Sequence[int]) -> ViewStack: return ViewStack((View.create(shape),))

  @property
  def shape(self) -> tuple[int, ...]: return self.views[-1].shape

  @property
  def size(self) -> int: return self.views[-1].size

  def reach(self) -> int:
    """The largest index magnitude any view of the stack computes (View.reach; each one below another is indexed)."""
    return max(v.reach(i < len(self.views) - 1) for i, v in enumerate(self.views))

  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].contiguous

  def _top(self, v: View) -> ViewStack: return ViewStack(self.views[:-1] + (v,))

  def reshape(self, new_shape: Sequence[int]) -> ViewStack:
    v = self.views[-1].reshape(new_shape)
    return self._top(v) if v is not None else ViewStack(self.views + (View.create(new_shape),))

  def expand(self, new_shape: Sequence[int]) -> ViewStack: return self._top(self.views[-1].expand(new_shape))
  def permute(self, order: Sequence[int]) -> ViewStack: return self._top(self.views[-1].permute(order))
  def pad(self, pads: Sequence[tuple[int, int]]) -> ViewStack: return self._top(self.views[-1].pad(pads))
  def shrink(self, bounds: Sequence[tuple[int, int]]) -> ViewStack: return self._top(self.views[-1].shrink(bounds))
  def flip(self, axes: Sequence[int]) -> ViewStack: return self._top(self.views[-1].flip(axes))

  def simplify(self) -> ViewStack:
    """Merge adjacent views (top pair first) while the composition is one View."""
    views = list(self.views)
    i = len(views) - 2
    while i >= 0:
      m = _merge_views(views[i], views[i + 1])
      if m is None: i -= 1; continue
      views[i:i + 2] = [m]
      i = min(i, len(views) - 2)
    return ViewStack(tuple(views))

  def to_indexed(self, idxs: Sequence[Any], b, clamp: Sequence = ()) -> tuple[Any, Any]:
    """(flat index, valid) at the point idxs, built with b. `clamp`: bounds ([(axis, multiplier)], size) of axes
    split into tiles (a sum of digits below a size, PADTO's): where the top view splits the one below along exactly
    those digits, that coordinate is clamped to size - 1 first (b.alu('min')), so that points past it read the last
    element instead of a masked one (for values that are never stored: no gate, no branch)."""
    if len(idxs) != len(self.shape): raise ValueError(f"{len(idxs)} indices for shape {self.shape}")
    views = self.views
    if len(views) > 1 and (groups := _split_groups(views[-1], views[-2].shape)) is not None:
      # the top view only splits the axes of the one below (a masked axis split into tiles: PADTO, then opts):
      # that view's coordinates are its digits' sums, without a flat index over the whole space (and its constants)
      coords = []
      for g in groups:
        c, inner, terms = b.const(0), 1, {}
        for i in reversed(g):
          c = b.add(c, b.mul(idxs[i], b.const(inner)))
          if views[-1].shape[i] > 1: terms[i] = inner
          inner *= views[-1].shape[i]
        size = next((n for ts, n in clamp if {a: m for a, m in ts if views[-1].shape[a] > 1} == terms), None)
        if size is not None and terms: c = b.alu('min', c, b.const(size - 1))
        coords.append(c)
      idxs, views = coords, views[:-1]
    idx, valid = views[-1].to_indexed(idxs, b)
    valid = valid if views[-1].mask is not None else None  # None: no condition yet
    for v in reversed(views[:-1]):
      v = v.compress()
      if v.all_invalid: return b.const(0), b.lt(b.const(0), b.const(0))
      # unravel the flat index of the view above into this view's axes; the outermost digit needs no
      # mod because the flat index of a valid point is below this view's size
      digits, inner = [], 1
      for k in range(len(v.shape) - 1, -1, -1):
        s, st, m = v.shape[k], v.strides[k], v._ranges()[k]
        if st == 0 and m == (0, s): digits.append(None)
        else:
          d = idx if inner == 1 else b.idiv(idx, b.const(inner))
          digits.append(d if k == 0 else b.mod(d, b.const(s)))
        inner *= s
      digits.reverse()
      idx, vv = v.to_indexed([b.const(0) if d is None else d for d in digits], b)
      if v.mask is not None: valid = _and(b, valid, vv)
    return idx, (b.true() if valid is None else valid)

  def real_strides(self, ignore_valid: bool = False) -> tuple[int | None, ...]:
    """Per axis: the buffer stride if the index is affine in that axis (0 if it does not appear),
    else None; axes that the validity depends on are None unless ignore_valid."""
    if len(self.views) == 1 and self.views[0].mask is None: return self.views[0].strides
    sb = _SymBuilder(self.shape)
    idx, valid = self.to_indexed([sb.var(i) for i in range(len(self.shape))], sb)
    out: list[int | None] = []
    for i in range(len(self.shape)):
      if i in idx.opaque_vars or (not ignore_valid and i in valid.vars): out.append(None)
      else: out.append(idx.terms.get(i, 0))
    return tuple(out)

  def mask_aligned(self, axis: int, w: int, limit: int = 1 << 20) -> bool:
    """Whether the validity is the same across each aligned group of w along `axis`, for every value of the other
    axes it depends on (then a w-wide vector gated by its first element's validity is exact). Evaluated on those
    axes' values (their corners and neighbours where all of them would be more than `limit` points)."""
    import numpy as np
    if self.shape[axis] % w: return False
    sb = _SymBuilder(self.shape)
    _, valid = self.to_indexed([sb.var(i) for i in range(len(self.shape))], sb)
    if axis not in valid.vars: return True
    others = sorted(a for a in valid.vars if a != axis)
    full = math.prod(self.shape[a] for a in others) * self.shape[axis] <= limit
    vals = {a: np.arange(self.shape[a]) if full else np.unique(np.clip([0, 1, 2, self.shape[a] - 3, self.shape[a] - 2, self.shape[a] - 1], 0, self.shape[a] - 1))
            for a in others}
    vals[axis] = np.arange(self.shape[axis])
    order = others + [axis]
    idxs = [0] * len(self.shape)
    for i, a in enumerate(order): idxs[a] = vals[a].reshape([-1 if j == i else 1 for j in range(len(order))])
    _, ok = self.to_indexed(idxs, IntBuilder())
    ok = np.broadcast_to(ok, [len(vals[a]) for a in order]).reshape(-1, self.shape[axis] // w, w)
    return bool((ok == ok[..., :1]).all())


class IntBuilder:
  """Evaluates index expressions on Python ints or numpy integer arrays (elementwise)."""
  def const(self, x): return x
  def add(self, x, y): return x + y
  def mul(self, x, y): return x * y
  def idiv(self, x, y): return x // y
  def mod(self, x, y): return x % y
  def lt(self, x, y): return x < y
  def and_(self, x, y): return x & y
  def true(self): return True


# ---- symbolic builder for real_strides: affine forms over axis variables, with interval bounds ----

@dataclass(frozen=True)
class _Atom:
  """A non-affine subexpression: only its variables and its range are kept."""
  vars: frozenset
  lo: int
  hi: int
  uid: int


@dataclass(frozen=True)
class _Sym:
  terms: dict  # key: axis number (int) or _Atom -> coefficient
  const: int
  def __hash__(self): return id(self)

  @property
  def opaque_vars(self) -> frozenset:
    return frozenset().union(*[k.vars for k in self.terms if isinstance(k, _Atom)])


@dataclass(frozen=True)
class _SymBool:
  value: bool | None  # None: depends on vars
  vars: frozenset


class _SymBuilder:
  def __init__(self, shape: Sequence[int]): self.shape, self.n = tuple(shape), 0

  def var(self, i: int) -> _Sym: return _Sym({i: 1}, 0)
  def const(self, x: int) -> _Sym: return _Sym({}, x)

  def _range(self, x: _Sym) -> tuple[int, int]:
    lo = hi = x.const
    for k, c in x.terms.items():
      klo, khi = (k.lo, k.hi) if isinstance(k, _Atom) else (0, self.shape[k] - 1)
      lo, hi = lo + min(c * klo, c * khi), hi + max(c * klo, c * khi)
    return lo, hi

  def _atom(self, x: _Sym, lo: int, hi: int) -> _Sym:
    self.n += 1
    vs = frozenset(k for k in x.terms if not isinstance(k, _Atom)) | x.opaque_vars
    return _Sym({_Atom(vs, lo, hi, self.n): 1}, 0)

  def add(self, x: _Sym, y: _Sym) -> _Sym:
    t = dict(x.terms)
    for k, c in y.terms.items(): t[k] = t.get(k, 0) + c
    return _Sym({k: c for k, c in t.items() if c != 0}, x.const + y.const)

  def mul(self, x: _Sym, y: _Sym) -> _Sym:
    if x.terms and y.terms:
      r = sorted(a * b for a in self._range(x) for b in self._range(y))
      return self._atom(self.add(x, y), r[0], r[-1])
    if x.terms: x, y = y, x
    return _Sym({k: c * x.const for k, c in y.terms.items() if c * x.const != 0}, x.const * y.const)

  def _split(self, x: _Sym, d: int) -> tuple[_Sym, _Sym]:
    """x = d*q + r: each coefficient (and the constant) c = d*(c // d) + c % d, its first part to q, the rest to r
    (so 101*x over d = 100 leaves only x in r: a window's row plus its column, kept apart when its range fits)."""
    q = _Sym({k: c // d for k, c in x.terms.items() if c // d != 0}, x.const // d)
    r = _Sym({k: c % d for k, c in x.terms.items() if c % d != 0}, x.const % d)
    return q, r

  def idiv(self, x: _Sym, y: _Sym) -> _Sym:
    d = y.const
    q, r = self._split(x, d)
    lo, hi = self._range(r)
    if lo // d == hi // d: return self.add(q, self.const(lo // d))
    return self.add(q, self._atom(r, lo // d, hi // d))

  def mod(self, x: _Sym, y: _Sym) -> _Sym:
    d = y.const
    _, r = self._split(x, d)
    lo, hi = self._range(r)
    if lo // d == hi // d: return self.add(r, self.const(-d * (lo // d)))
    return self._atom(r, 0, d - 1)

  def lt(self, x: _Sym, y: _Sym) -> _SymBool:
    z = self.add(x, self.mul(y, self.const(-1)))
    lo, hi = self._range(z)
    if hi < 0: return _SymBool(True, frozenset())
    if lo >= 0: return _SymBool(False, frozenset())
    return _SymBool(None, frozenset(k for k in z.terms if not isinstance(k, _Atom)) | z.opaque_vars)

  def and_(self, x: _SymBool, y: _SymBool) -> _SymBool:
    if x.value is False or y.value is False: return _SymBool(False, frozenset())
    if x.value is True: return y
    if y.value is True: return x
    return _SymBool(None, x.vars | y.vars)

  def true(self) -> _SymBool: return _SymBool(True, frozenset())
