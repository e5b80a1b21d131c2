"""tensor-decompose: composite tensor ops into primitives, as tinygrad builds them.

matmul (..., n, k) @ (..., k, m): reshape/expand both to (..., n, m, k), multiply, reduce add over k,
reshape away the kept axis. The multiply and the reduce fuse into one kernel.

Any other op whose class has a `decompose(rw)` method (a composite an extension declares: docs/extending.md) is
replaced by what it returns, the primitives it creates with `rw.create`.
"""
from __future__ import annotations
from tgc.ir.core import REGISTRY
from tgc.ir.types import TensorType
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass


PACK_MIN = 1 << 16  # pack the right operand when it has at least this many elements
PACK = 16           # columns per panel: one AVX-512 vector of f32, two AVX2 ones (the tile is two vectors wide)

def decompose_matmul(op, rw, pack=False):
  a, b = op.lhs, op.rhs
  at, bt = a.type, b.type
  *batch, n, k = at.shape
  m = bt.shape[-1]
  batch, dt = tuple(batch), at.dtype
  def mk(name, src, shape, attrs=None):
    return rw.create(REGISTRY[f'tensor.{name}'], [src], [TensorType(tuple(shape), dt)], attrs, op.loc).results[0]
  nb = len(batch)
  if pack and m % PACK == 0 and m > PACK and k * m >= PACK_MIN:
    # b (k, m) -> panels (m/16, k, 16), contiguous: the kernel then reads 16 columns of b as one sequential
    # stream along k instead of one cache line per row (a copy of b buys a matmul that runs out of cache)
    p = m // PACK
    bp = mk('reshape', b, batch + (k, p, PACK))
    bp = mk('permute', bp, batch + (p, k, PACK), {'order': tuple(range(nb)) + (nb + 1, nb, nb + 2)})
    bp = rw.create(REGISTRY['tensor.contiguous'], [bp], [TensorType(batch + (p, k, PACK), dt)], None, op.loc).results[0]
    full = batch + (n, p, k, PACK)
    a2 = mk('expand', mk('reshape', a, batch + (n, 1, k, 1)), full)
    b2 = mk('expand', mk('reshape', bp, batch + (1, p, k, PACK)), full)
    prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, op.loc).results[0]
    red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(batch + (n, p, 1, PACK), dt)], {'kind': 'add', 'axes': (nb + 2,)}, op.loc).results[0]
    return mk('reshape', red, batch + (n, m))
  full = batch + (n, m, k)
  a2 = mk('expand', mk('reshape', a, batch + (n, 1, k)), full)
  order = tuple(range(nb)) + (nb + 1, nb)
  b2 = mk('expand', mk('reshape', mk('permute', b, batch + (m, k), {'order': order}), batch + (1, m, k)), full)
  prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, op.loc).results[0]
  red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(batch + (n, m, 1), dt)], {'kind': 'add', 'axes': (nb + 2,)}, op.loc).results[0]
  return mk('reshape', red, batch + (n, m))

decompose_patterns = PatternMatcher([('tensor.matmul', decompose_matmul)])
packing_patterns = PatternMatcher([('tensor.matmul', lambda op, rw: decompose_matmul(op, rw, pack=True))])

def declared_patterns() -> PatternMatcher:
  """A rule for every registered op that says how it decomposes (ops may be declared after this module loads)."""
  return PatternMatcher([(name, lambda op, rw: op.decompose(rw)) for name, cls in REGISTRY.items() if callable(getattr(cls, 'decompose', None))])


class TensorDecompose(Pass):
  name = 'tensor-decompose'
  summary = 'rewrite composite tensor ops (matmul, ops with a decompose method) into reshape/expand/mul/reduce'
  reads = leaves = 'tensor'
  options = {'pack': (bool, False, "copy a big matmul's right operand into column panels first (for CPUs: sequential reads)")}
  def run(self, m):
    apply_patterns(m, (packing_patterns if self.pack else decompose_patterns) + declared_patterns(), stats=self.stats)
