"""decompose-transcendentals: exp2, log2 and sin as polynomial approximations built from uop ALU ops.

For a target without them, or (the llvm target's default, for exp2 and log2) because the polynomial
vectorises where a libm call does not. float32 and the narrower floats (computed in float32); f64 keeps
the target's own. Accuracy: exp2 and log2 within 2 ulp over the whole range, infinities, NaN, zeros and
subnormals included; sin within a few ulp for |x| < 1e5 (Cody-Waite reduction by pi/2).
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY
from tgc.ir.types import VecType, elem
from tgc.ir import dtypes as D
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass, PipelineError

U = lambda n: REGISTRY[f'uop.{n}']


class _B:
  """Builds uops before the op being rewritten, lane-shaped like it (scalar or vec<N>)."""
  def __init__(self, rw, op):
    self.rw, self.loc = rw, op.loc
    t = op.results[0].type
    self.n = t.count if isinstance(t, VecType) else None
  def ty(self, dt): return VecType(self.n, dt) if self.n else dt
  def c(self, x, dt=D.f32):
    v = self.rw.create(U('const'), [], [dt], {'value': float(x) if dt.is_float else int(x)}, self.loc).results[0]
    return self.rw.create(U('vectorize'), [v] * self.n, [self.ty(dt)], None, self.loc).results[0] if self.n else v
  def op(self, name, *srcs, dt=D.f32):
    return self.rw.create(U(name), list(srcs), [self.ty(dt)], None, self.loc).results[0]
  def f(self, name, *srcs): return self.op(name, *srcs, dt=D.f32)
  def i(self, name, *srcs): return self.op(name, *srcs, dt=D.i32)
  def lt(self, a, b): return self.op('cmplt', a, b, dt=D.bool_)
  def where(self, c, a, b, dt=D.f32): return self.op('where', c, a, b, dt=dt)
  def poly(self, x, coeffs):  # Horner, highest degree first
    acc = self.c(coeffs[0])
    for k in coeffs[1:]: acc = self.f('add', self.f('mul', acc, x), self.c(k))
    return acc
  def pow2i(self, n):  # 2**n for integer n in [-126, 127], from the exponent bits
    return self.op('bitcast', self.i('shl', self.i('add', n, self.c(127, D.i32)), self.c(23, D.i32)), dt=D.f32)
  # a whole number |n| < 2**22 between float and int through the bits of n + 1.5 * 2**23 (n in its low mantissa
  # bits): an add and a bitcast, where a cast is a range-checked conversion on some targets (the llvm target's
  # through float64 and int64: numpy's wrap-around for any float)
  def to_int(self, nf): return self.i('sub', self.op('bitcast', self.f('add', nf, self.c(MAGIC)), dt=D.i32), self.c(MAGIC_BITS, D.i32))
  def to_float(self, n): return self.f('sub', self.op('bitcast', self.i('add', n, self.c(MAGIC_BITS, D.i32)), dt=D.f32), self.c(MAGIC))


MAGIC, MAGIC_BITS = 12582912.0, 0x4B400000  # 1.5 * 2**23 and its bits


def _to_f32(b, x, dt):
  return x if dt is D.f32 else b.op('cast', x, dt=D.f32)

def _from_f32(b, r, dt):
  return r if dt is D.f32 else b.op('cast', r, dt=dt)


def exp2(op, rw):
  dt = elem(op.results[0].type)
  if not dt.is_float or dt is D.f64: return None
  b = _B(rw, op)
  x = _to_f32(b, op.src, dt)
  xc = b.f('max', b.f('min', x, b.c(200.0)), b.c(-200.0))          # beyond this the result is inf or 0 anyway
  half = b.where(b.lt(xc, b.c(0.0)), b.c(-0.5), b.c(0.5))
  nf = b.f('trunc', b.f('add', xc, half))                             # round to nearest
  n = b.to_int(nf)
  fr = b.f('sub', xc, nf)                                              # in [-0.5, 0.5]
  ln2 = math.log(2)
  p = b.poly(fr, [ln2 ** k / math.factorial(k) for k in range(8, -1, -1)])  # 2**f = e**(f ln2), Taylor to degree 8
  n1 = b.i('shr', n, b.c(1, D.i32))                                    # 2**n as two factors: covers [-252, 254]
  n2 = b.i('sub', n, n1)
  r = b.f('mul', b.f('mul', p, b.pow2i(n1)), b.pow2i(n2))
  r = b.where(b.op('cmpne', x, x, dt=D.bool_), x, r)                   # NaN stays NaN
  return _from_f32(b, r, dt)


def log2(op, rw):
  dt = elem(op.results[0].type)
  if not dt.is_float or dt is D.f64: return None
  b = _B(rw, op)
  x = _to_f32(b, op.src, dt)
  sub = b.lt(x, b.c(1.1754943508222875e-38))                            # subnormal (or <= 0): scale by 2**23 first
  xs = b.where(sub, b.f('mul', x, b.c(8388608.0)), x)
  bits = b.op('bitcast', xs, dt=D.i32)
  e = b.i('sub', b.i('and', b.i('shr', bits, b.c(23, D.i32)), b.c(255, D.i32)), b.c(127, D.i32))
  e = b.i('sub', e, b.where(sub, b.c(23, D.i32), b.c(0, D.i32), dt=D.i32))
  m = b.op('bitcast', b.i('or', b.i('and', bits, b.c(0x7FFFFF, D.i32)), b.c(0x3F800000, D.i32)), dt=D.f32)  # [1, 2)
  big = b.lt(b.c(1.4142135623730951), m)                                # m in [sqrt(1/2), sqrt(2)): a smaller t
  m = b.where(big, b.f('mul', m, b.c(0.5)), m)
  e = b.i('add', e, b.where(big, b.c(1, D.i32), b.c(0, D.i32), dt=D.i32))
  t = b.f('fdiv', b.f('sub', m, b.c(1.0)), b.f('add', m, b.c(1.0)))    # log(m) = 2 atanh(t)
  t2 = b.f('mul', t, t)
  s = b.poly(t2, [1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3, 1.0])
  r = b.f('add', b.f('mul', b.f('mul', t, s), b.c(2 / math.log(2))), b.to_float(e))
  # x = 0 -> -inf; x < 0 or NaN -> NaN; +inf -> inf
  r = b.where(b.op('cmpeq', x, b.c(0.0), dt=D.bool_), b.c(-math.inf), r)
  r = b.where(b.lt(x, b.c(0.0)), b.c(math.nan), r)
  r = b.where(b.op('cmpeq', x, b.c(math.inf), dt=D.bool_), x, r)
  r = b.where(b.op('cmpne', x, x, dt=D.bool_), x, r)
  return _from_f32(b, r, dt)


def sin(op, rw):
  dt = elem(op.results[0].type)
  if not dt.is_float or dt is D.f64: return None
  b = _B(rw, op)
  x = _to_f32(b, op.src, dt)
  q = b.f('mul', x, b.c(2 / math.pi))
  half = b.where(b.lt(q, b.c(0.0)), b.c(-0.5), b.c(0.5))
  kf = b.f('trunc', b.f('add', q, half))
  k = b.op('cast', kf, dt=D.i32)
  # r = x - k*pi/2 in three parts (Cody-Waite) so that the products are exact
  r = b.f('sub', x, b.f('mul', kf, b.c(1.5703125)))
  r = b.f('sub', r, b.f('mul', kf, b.c(4.837512969970703125e-4)))
  r = b.f('sub', r, b.f('mul', kf, b.c(7.54978995489188216e-8)))
  r2 = b.f('mul', r, r)
  s = b.f('mul', r, b.poly(r2, [-1 / 39916800, 1 / 362880, -1 / 5040, 1 / 120, -1 / 6, 1.0]))   # sin on [-pi/4, pi/4]
  c = b.poly(r2, [1 / 3628800, -1 / 40320, 1 / 720, -1 / 24, 0.5])
  c = b.f('sub', b.c(1.0), b.f('mul', r2, c))                          # cos on [-pi/4, pi/4]
  kk = b.i('and', k, b.c(3, D.i32))
  odd = b.op('cmpeq', b.i('and', kk, b.c(1, D.i32)), b.c(1, D.i32), dt=D.bool_)
  v = b.where(odd, c, s)
  neg = b.op('cmpeq', b.i('and', kk, b.c(2, D.i32)), b.c(2, D.i32), dt=D.bool_)
  v = b.where(neg, b.f('neg', v), v)
  inf = b.op('cmpeq', b.f('mul', x, b.c(0.0)), b.f('mul', x, b.c(0.0)), dt=D.bool_)   # false for inf and NaN
  v = b.where(inf, v, b.c(math.nan))
  return _from_f32(b, v, dt)


RULES = {'exp2': exp2, 'log2': log2, 'sin': sin}


class DecomposeTranscendentals(Pass):
  name = 'decompose-transcendentals'
  summary = 'rewrite exp2, log2 and sin into polynomial approximations (per target)'
  reads = leaves = 'uop'
  options = {'ops': (str, 'exp2,log2,sin', 'which ops to decompose, comma-separated (in a pipeline: exp2+log2 also works)')}
  def run(self, m):
    names = [n for n in self.ops.replace('+', ',').split(',') if n]
    for n in names:
      if n not in RULES: raise PipelineError(f"decompose-transcendentals: unknown op '{n}' (exp2, log2, sin)")
    apply_patterns(m, PatternMatcher([(f'uop.{n}', RULES[n]) for n in names]), stats=self.stats)
