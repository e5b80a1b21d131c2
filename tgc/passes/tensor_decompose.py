"""tensor-decompose: composite tensor ops into primitives, as tinygrad builds them.

matmul (..., n, k) @ (..., k, m): reshape/expand both to (..., n, m, k), multiply, reduce add over k,
reshape away the kept axis. The multiply and the reduce fuse into one kernel.
"""
from __future__ import annotations
from tgc.ir.core import REGISTRY
from tgc.ir.types import TensorType
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass


def decompose_matmul(op, rw):
  a, b = op.lhs, op.rhs
  at, bt = a.type, b.type
  *batch, n, k = at.shape
  m = bt.shape[-1]
  batch, dt = tuple(batch), at.dtype
  def mk(name, src, shape, attrs=None):
    return rw.create(REGISTRY[f'tensor.{name}'], [src], [TensorType(tuple(shape), dt)], attrs, op.loc).results[0]
  nb = len(batch)
  full = batch + (n, m, k)
  a2 = mk('expand', mk('reshape', a, batch + (n, 1, k)), full)
  order = tuple(range(nb)) + (nb + 1, nb)
  b2 = mk('expand', mk('reshape', mk('permute', b, batch + (m, k), {'order': order}), batch + (1, m, k)), full)
  prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, op.loc).results[0]
  red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(batch + (n, m, 1), dt)], {'kind': 'add', 'axes': (nb + 2,)}, op.loc).results[0]
  return mk('reshape', red, batch + (n, m))

decompose_patterns = PatternMatcher([('tensor.matmul', decompose_matmul)])


class TensorDecompose(Pass):
  name = 'tensor-decompose'
  summary = 'rewrite composite tensor ops (matmul) into reshape/expand/mul/reduce'
  reads = leaves = 'tensor'
  def run(self, m):
    apply_patterns(m, decompose_patterns, stats=self.stats)
