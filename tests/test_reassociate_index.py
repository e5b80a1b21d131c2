"""reassociate-index: indices of accesses inside loops as varying + loop-invariant + constant, values unchanged; the
C-style emitters' addresses into global memory as the pointer plus those parts."""
import re
import numpy as np
import pytest
import tgc
import tgc.ir as I
from tgc.ir.core import Module
from tgc.ir.rewrite import const_value
from tgc.passes.manager import PassManager, parse_pipeline
from tgc.runtime import get_device
from tgc.dialects.uop_bounds import bounds

# a loop whose accesses' indices linearize might build: invariant and varying terms interleaved, constants between
LOOP = """
uop.func @k() attributes {global_size = [4], local_size = [8]} {
  %out = uop.define_global 0 {size = 512} : !uop.ptr<f32>
  %in = uop.define_global 1 {size = 7000} : !uop.ptr<f32>
  %tile = uop.define_local temp0 128 : !uop.ptr<f32, local>
  %g = uop.special gidx0 4 : i32
  %l = uop.special lidx0 8 : i32
  %z = uop.const 0 : i32
  %n = uop.const 16 : i32
  %c8 = uop.const 8 : i32
  %c3 = uop.const 3 : i32
  %c1 = uop.const 1 : i32
  %c256 = uop.const 256 : i32
  %c1024 = uop.const 1024 : i32
  %base = uop.mul %g, %c1024 : i32
  %g16 = uop.mul %g, %n : i32
  %r = uop.range %z, %n : i32
  %v = uop.mul %r, %c256 : i32
  %a = uop.add %base, %v : i32
  %w = uop.mul %l, %c8 : i32
  %b = uop.add %a, %c3 : i32
  %i = uop.add %b, %w : i32
  %x = uop.load %in[%i] : f32
  %j = uop.add %i, %c1 : i32
  %y = uop.load %in[%j] : f32
  %s = uop.add %x, %y : f32
  %rt = uop.mul %r, %c8 : i32
  %tl = uop.add %l, %rt : i32
  uop.store %tile[%tl], %s : f32
  %o0 = uop.add %g16, %r : i32
  %o8 = uop.mul %o0, %c8 : i32
  %o = uop.add %l, %o8 : i32
  %t = uop.load %tile[%tl] : f32
  uop.store %out[%o], %t : f32
  uop.endrange %r
}"""


def _fn(text):
  return I.parse(text).functions('uop.func')[0]

# the same without the shared tile (for the devices without shared memory): out[(g*16 + r)*8 + l] = in[..+3] + in[..+4]
LOOP_GLOBAL = '\n'.join(l for l in LOOP.split('\n') if 'tile' not in l and '%rt' not in l and '%tl' not in l).replace('uop.store %out[%o], %t', 'uop.store %out[%o], %s')


def test_parts_in_order():
  """Inside the loop each index that mixes them is (varying) + (invariant) [+ constant]; outside, none changes."""
  fn = _fn(LOOP)
  m = Module([fn])
  PassManager(parse_pipeline('reassociate-index,dce')).run(m)
  ops = fn.body.ops
  r = next(op.results[0] for op in ops if op.name == 'uop.range')
  varying = lambda v: v is r or (v.op is not None and any(varying(x) for x in v.op.operands))
  const = lambda v: v.op is not None and v.op.name == 'uop.const'
  shapes = []
  for op in ops:
    if op.name not in ('uop.load', 'uop.store'): continue
    v = op.operands[1]
    c = None
    if v.op.name == 'uop.add' and const(v.op.operands[1]): v, c = v.op.operands[0], int(const_value(v.op.operands[1]))
    lhs, rhs = v.op.operands if v.op.name == 'uop.add' else (v, None)
    shapes.append((op.operands[0].op.attrs.get('sym', op.operands[0].op.attrs.get('index')), varying(lhs), rhs is not None and not varying(rhs), c))
  # in[r*256 + (g*1024 + l*8) + 3], in[... + 4], tile[r*8 + l] twice, out[(g*16 + r)*8 + l]
  assert shapes == [(1, True, True, 3), (1, True, True, 4), ('temp0', True, True, None), ('temp0', True, True, None), (0, True, True, None)]


@pytest.mark.parametrize('dev', ['CPU', 'C', 'INTERP'])
def test_values_unchanged(dev):
  x = np.random.default_rng(0).standard_normal(7000).astype(np.float32)
  outs = []
  for pipeline in (None, 'reassociate-index,dce'):
    fn = _fn(LOOP_GLOBAL)
    if pipeline:
      before = str(Module([fn]))
      PassManager(parse_pipeline(pipeline)).run(Module([fn]))
      assert (str(Module([fn]))) != before  # (the indices did change)
    out = np.zeros(512, np.float32)
    get_device(dev).compile(fn)(out, x)
    outs.append(out)
  ref = np.array([x[r * 256 + g * 1024 + l * 8 + 3] + x[r * 256 + g * 1024 + l * 8 + 4] for g in range(4) for r in range(16) for l in range(8)], np.float32)
  np.testing.assert_array_equal(outs[0], outs[1])
  np.testing.assert_allclose(outs[1], ref, rtol=1e-6)


def test_matmul_tile_copies_add_the_step_to_the_pointer():
  """The warpgroup matmul's tile copies in its loop: each source address is the pointer plus the step's varying part
  and the copy's own invariant part (C adds each to the pointer); none adds a whole 32-bit index."""
  from tgc.tensor import _build_module
  from tgc.lowering import lower
  from tgc.emit.cuda import render_cuda
  a = tgc.Tensor.empty(1024, 1024, dtype='float16', device='CUDA')
  b = tgc.Tensor.empty(1024 * 1024 + 8, dtype='float16', device='CUDA')[:1024 * 1024].reshape(1024, 1024)
  m, _ = _build_module([(a @ b).node], 'mm')
  lower(m, 'cuda', local_memory=227 << 10)
  src = render_cuda(m)
  loop = src[src.index('for (int ridx0'):src.index('wgmma.commit_group')]
  copies = re.findall(r'tg_cp_async16\(([^;]*)\);', loop)
  assert len(copies) >= 4
  for c in copies:
    dst, srcp = c.split(', ')[:2]
    assert re.fullmatch(r'data\d\+alu\d+(\+\(.*\)|\+alu\d+)?(\+\d+)?', srcp), c
    assert re.fullmatch(r'temp\d\+\(.*\)', dst), c  # (shared memory: a 32-bit sum)


def test_bounds_of_xor_and_or():
  """xor and or of values that are not negative stay below the next power of two (a swizzled tile's column)."""
  fn = _fn("""
uop.func @b() attributes {global_size = [1], local_size = [64]} {
  %l = uop.special lidx0 64 : i32
  %c7 = uop.const 7 : i32
  %c8 = uop.const 8 : i32
  %cm = uop.const -1 : i32
  %r = uop.mod %l, %c8 : i32
  %q = uop.idiv %l, %c8 : i32
  %x = uop.xor %q, %r : i32
  %o = uop.or %q, %c8 : i32
  %n = uop.xor %l, %cm : i32
}""")
  vals = {op.results[0].hint: op.results[0] for op in fn.body.ops if op.results}
  memo = {}
  assert bounds(vals['x'], memo) == (0, 7)
  assert bounds(vals['o'], memo) == (8, 15)
  lo, hi = bounds(vals['n'], memo)
  assert (lo, hi) == (-2 ** 31, 2 ** 31 - 1)  # (a negative operand: nothing known)
