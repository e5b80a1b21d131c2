"""Regressions: what the fuzzers (fuzz/) found, the caches' keys, memory no one wrote, and the tools'
diagnostics for a module with nothing to run or translate. Results are checked against numpy."""
import io, os, re, sys
import numpy as np
import pytest
import tgc
from tgc import Tensor, driver
from tgc.ir.diagnostics import Diagnostic
from tgc.parser import parse
from tgc.lowering import lower
from tgc.runtime import get_device

HOST_DEVICES = ['CPU', 'C', 'INTERP']
ALL_DEVICES = list(HOST_DEVICES)
for _d in ('OPENCL', 'CUDA'):  # where this machine has them (CUDA: the GPU machine)
  try: get_device(_d); ALL_DEVICES.append(_d)
  except tgc.TgcError: pass


def tool(main, *argv) -> tuple[int, str]:
  """A tool in this process: (exit status, stderr)."""
  err, se, so = io.StringIO(), sys.stderr, sys.stdout
  sys.stderr, sys.stdout = err, io.StringIO()
  try: rc = main(list(argv))
  finally: sys.stderr, sys.stdout = se, so
  return rc, err.getvalue()


def with_host(kernel: str, out: str, *args: str) -> str:
  """A kernel.func's text and a host func.func @main that allocates its output, launches it once and returns it."""
  name = re.search(r'kernel.func @(\w+)', kernel).group(1)
  sig = ', '.join(f"%a{i}: {t}" for i, t in enumerate(args))
  return (f"{kernel}func.func @main({sig}) -> {out} {{\n  %r = kernel.alloc : {out}\n"
          f"  kernel.launch @{name}(%r{''.join(f', %a{i}' for i in range(len(args)))})\n  func.return %r : {out}\n}}\n")


# ---------------------------------------------------------------- found by the fuzzers
@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_empty_tensor_padded(dev):
  """A zero-element intermediate has no kernel: its one launch point read and wrote outside empty buffers."""
  x = np.zeros(0, np.int16)
  t = Tensor(x, device=dev)
  np.testing.assert_array_equal((t == t).pad(((2, 2),)).numpy(), np.pad(x == x, (2, 2)))
  np.testing.assert_array_equal((t + 1).sum().numpy(), (x + 1).sum())


def test_kernelize_makes_no_kernel_for_zero_elements():
  m = parse("func.func @f(%a: tensor<0x3xf32>) -> tensor<0x3xf32> {\n  %0 = tensor.exp2 %a : tensor<0x3xf32>\n"
            "  func.return %0 : tensor<0x3xf32>\n}\n")
  from tgc.passes.manager import PassManager
  PassManager.parse('kernelize').run(m)
  assert not m.functions('kernel.func')


REDUCE_SIZE1 = """kernel.func @k(%data0: !kernel.buf<1xi16>, %data1: !kernel.buf<3xi16>) {
  %0 = kernel.load %data1 [view(shape = [1], strides = [0], offset = 2)] : i16
  %1 = kernel.const 5 : i16
  %2 = kernel.add %1, %0 : i16
  %3 = kernel.reduce add %2 [0] : i16
  %4 = kernel.mul %3, %1 : i16
  kernel.store %data0 [view(shape = [1], strides = [1], offset = 0)], %4 : i16
}
"""

@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_reduce_over_size1_axes_with_no_larger_load(dev):
  """linearize reduces one point (it raised 'a reduce with nothing below it to give its size')."""
  a = np.array([4, -9, 7], np.int16)
  np.testing.assert_array_equal(tgc.compile(with_host(REDUCE_SIZE1, 'tensor<1xi16>', 'tensor<3xi16>'), dev)(a)[0], (a[2:] + 5) * 5)


EPILOGUE_STORES_REDUCE = """kernel.func @r_softmax(%data0: !kernel.buf<4x512xf32>, %data1: !kernel.buf<4x512xf32>) attributes {opts = OPTS} {
  %0 = kernel.load %data1 [view(shape = [4, 512], strides = [512, 1], offset = 0)] : f32
  %1 = kernel.reduce max %0 [1] : f32
  %2 = kernel.sub %0, %1 : f32
  %3 = kernel.exp2 %2 : f32
  %4 = kernel.reduce add %3 [1] : f32
  kernel.store %data0 [view(shape = [4, 512], strides = [512, 1], offset = 0)], %4 : f32
}
"""

@pytest.mark.parametrize('dev', HOST_DEVICES)
@pytest.mark.parametrize('opts', ['[unroll(axis = 1, amt = 4)]', '[unroll(axis = 1, amt = 4), unroll(axis = 1, amt = 8)]'])
def test_epilogue_stores_a_reduce_result_itself(dev, opts):
  """A store at the iteration shape of a reduce's own result (each row's sum broadcast along it), with the reduce axis
  unrolled: the store takes the result whatever the lane (linearize looked it up per unrolled lane: a KeyError that
  fuzz.mutate found)."""
  x = np.random.default_rng(2).standard_normal((4, 512)).astype(np.float32)
  out = tgc.compile(with_host(EPILOGUE_STORES_REDUCE.replace('OPTS', opts), 'tensor<4x512xf32>', 'tensor<4x512xf32>'), dev)(x)[0]
  e = np.exp2(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(out, np.broadcast_to(e.sum(1, keepdims=True), x.shape), rtol=1e-5)

WMMA = """uop.func @w() attributes {global_size = [1, 1, 1], local_size = [32, 1, 1]} {
  %0 = uop.define_global 0 {size = 128} : !uop.ptr<f16>
  %1 = uop.define_global 1 {size = 256} : !uop.ptr<f16>
  %2 = uop.define_global 2 {size = 128} : !uop.ptr<f16>
  %lane = uop.special lidx0 32 : i32
  %c4 = uop.const 4 : i32
  %c8 = uop.const 8 : i32
  %i = uop.mul %lane, %c8 : i32
  %j = uop.mul %lane, %c4 : i32
  %a = uop.load %1[%i] : vec<8xf16>
  %b = uop.load %2[%j] : vec<4xf16>
  %acc = uop.load %0[%j] : vec<4xf16>
  %d = uop.wmma cuda [16, 8, 16] %a, %b, %acc : vec<8xf16>, vec<4xf16> -> vec<4xf16>
  uop.store %0[%j], %d : vec<4xf16>
}
"""

@pytest.mark.parametrize('width', [1, 2])
def test_devectorize_keeps_wmma_whole(width):
  """The instruction keeps its shape; its wide result reaches the store through geps (was: invalid IR)."""
  from tgc.passes.manager import PassManager
  m = parse(WMMA)
  PassManager.parse(f'devectorize{{width={width}}}').run(m)
  m.verify()
  ops = m.functions('uop.func')[0].body.ops
  wmma = next(op for op in ops if op.name == 'uop.wmma')
  assert str(wmma.results[0].type) == 'vec<4xf16>'
  assert sum(op.name == 'uop.gep' and op.operands[0] is wmma.results[0] for op in ops) == 4
  assert sum(op.name == 'uop.store' for op in ops) == 4 // width


@pytest.mark.parametrize('body,msg', [
  ("  %h = uop.define_global 1 : !uop.ptr<i32>", "buffer argument 0 has no uop.define_global"),
  ("  %g = uop.define_global 0 : !uop.ptr<i32>\n  %h = uop.define_global 0 : !uop.ptr<f32>", "buffer 0 is defined with two dtypes"),
])
def test_define_global_numbering_is_verified_at_a_place(body, msg):
  with pytest.raises(Diagnostic, match=msg) as e: parse(f"uop.func @k() {{\n{body}\n}}\n", 'k.tgc')
  assert e.value.loc is not None and e.value.loc.line >= 1


# ---------------------------------------------------------------- class 5: memory no one wrote
UNWRITTEN = """kernel.func @k(%data0: !kernel.buf<2xf32>, %data1: !kernel.buf<2xf32>) {
  %0 = kernel.load %data1 [view(shape = [2], strides = [1], offset = 0)] : f32
  kernel.store %data0 [view(shape = [2], strides = [1], offset = 0)], %0 : f32
}
func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %b = kernel.alloc : tensor<2xf32>
  %c = kernel.alloc : tensor<2xf32>
  kernel.launch @k(%c, SRC)
  func.return RET : tensor<2xf32>
}
"""

@pytest.mark.parametrize('src,ret,err', [('%a', '%b', "returns a kernel.alloc that no kernel.launch has written"),
                                         ('%b', '%c', "reads operand #1: a kernel.alloc that no kernel.launch has written"),
                                         ('%a', '%c', None)])
def test_unwritten_alloc_is_rejected(src, ret, err):
  text = UNWRITTEN.replace('SRC', src).replace('RET', ret)
  if err is None:
    a = np.array([1.5, -2], np.float32)
    np.testing.assert_array_equal(tgc.compile(text, 'CPU')(a)[0], a); return
  with pytest.raises(Diagnostic, match=err) as e: parse(text, 'h.tgc')
  assert e.value.loc.line == (9 if ret == '%b' else 8)
  assert any('allocated here' in n.message for n in e.value.notes)


@pytest.mark.parametrize('dev', HOST_DEVICES)
def test_returned_empty_tensor_is_zeros(dev):
  """tensor.empty may hold anything: kernelize makes it zeros, never memory no one wrote."""
  text = "func.func @f() -> tensor<3x2xf32> {\n  %0 = tensor.empty : tensor<3x2xf32>\n  func.return %0 : tensor<3x2xf32>\n}\n"
  np.testing.assert_array_equal(tgc.compile(text, dev)()[0], np.zeros((3, 2), np.float32))


# ---------------------------------------------------------------- class 6: the tools
@pytest.mark.parametrize('text', ['', '// only a comment\n\n// and another\n'])
def test_run_and_translate_nothing_is_located(tmp_path, text):
  p = tmp_path / 'n.tgc'; p.write_text(text)
  for main, argv, what in [(driver.run_main, [], 'nothing to run'), (driver.translate_main, ['--target=c'], 'nothing to translate')]:
    rc, err = tool(main, str(p), *argv)
    assert rc == 1 and re.match(rf"{re.escape(str(p))}:1:1: error: {what}", err), err


def test_translate_a_module_that_computes_nothing_is_located(tmp_path):
  p = tmp_path / 'id.tgc'
  p.write_text("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %a : tensor<4xf32>\n}\n")
  rc, err = tool(driver.translate_main, str(p), '--target=cuda')
  assert rc == 1 and err.startswith(f"{p}:1:1: error: nothing to translate"), err


# ---------------------------------------------------------------- caches: what differs is never shared
def _copy_kernel(n: int, dt: str = 'f32') -> str:
  return (f"uop.func @copy() attributes {{global_size = [{n}], local_size = [1]}} {{\n"
          f"  %0 = uop.define_global 0 {{size = {n}}} : !uop.ptr<{dt}>\n  %1 = uop.define_global 1 {{size = {n}}} : !uop.ptr<{dt}>\n"
          f"  %g = uop.special gidx0 {n} : i32\n  %v = uop.load %1[%g] : {dt}\n  uop.store %0[%g], %v : {dt}\n}}\n")


@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_program_cache_tells_grids_apart(dev):
  """The same kernel for 3 and for 33 points: each runs its own grid (the CPU's cache once shared them)."""
  d = get_device(dev)
  for n in (3, 33, 3):
    src = np.arange(n, dtype=np.float32) + 1
    out = np.zeros(n, np.float32)
    d.compile(parse(_copy_kernel(n)).functions('uop.func')[0])(out, src)
    np.testing.assert_array_equal(out, src)


@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_program_cache_tells_dtypes_apart(dev):
  """i8 and u8 copies can share their code; each program still checks and reads its own dtype."""
  d = get_device(dev)
  for dt, npdt in (('i8', np.int8), ('u8', np.uint8)):
    prg = d.compile(parse(_copy_kernel(4, dt)).functions('uop.func')[0])
    src = np.array([-1, 2, 127, -128], np.int64).astype(npdt)
    out = np.zeros(4, npdt)
    prg(out, src)
    np.testing.assert_array_equal(out, src)
    with pytest.raises(tgc.TgcError, match='dtype'): prg(np.zeros(4, np.uint8 if dt == 'i8' else np.int8), src)


def test_c_disk_cache_is_keyed_by_the_host_cpu(tmp_path, monkeypatch):
  """-march=native code is the host's: a cache directory shared with another machine keeps libraries apart."""
  from tgc.runtime import c
  from tgc import cache
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path))
  src = "void tgc_cache_probe(void) {}\n"
  monkeypatch.setattr(c, '_libs', {})
  c.compile_c(src)
  monkeypatch.setattr(c, '_libs', {})
  monkeypatch.setattr(c, '_host_id', 'another machine')
  c.compile_c(src)
  assert len(cache.entries('c')) == 2


@pytest.mark.parametrize('dev', ['CPU', 'INTERP'])
def test_realize_cache_tells_apart_what_the_graph_holds(dev):
  x = np.array([1.0, -2.0, 3.0], np.float32)
  t = Tensor(x, device=dev)
  assert np.signbit((t * 0.0).numpy()).tolist() == np.signbit(x * np.float32(0.0)).tolist()
  assert np.signbit((t * -0.0).numpy()).tolist() == np.signbit(x * np.float32(-0.0)).tolist()
  h = Tensor(x.astype(np.float16), device=dev)
  assert (t + 1).numpy().dtype == np.float32 and (h + 1).numpy().dtype == np.float16
  np.testing.assert_array_equal((h + 1).numpy(), x.astype(np.float16) + np.float16(1))
  np.testing.assert_array_equal(t.flip(0).numpy(), x[::-1])
  np.testing.assert_array_equal(t.pad(((1, 0),)).numpy(), np.pad(x, (1, 0)))
  np.testing.assert_array_equal(t.pad(((0, 1),)).numpy(), np.pad(x, (0, 1)))


def test_jit_cache_tells_argument_places_apart():
  f = Tensor.jit(lambda a, b: a - b)
  x, y = np.array([5.0, 1.0], np.float32), np.array([2.0, 7.0], np.float32)
  for _ in range(2):  # the second call of each replays
    np.testing.assert_array_equal(f(a=Tensor(x), b=Tensor(y)).numpy(), x - y)
    np.testing.assert_array_equal(f(b=Tensor(x), a=Tensor(y)).numpy(), y - x)
  g = Tensor.jit(lambda a, b: a - b)
  for _ in range(2):
    np.testing.assert_array_equal(g(Tensor(x), 3).numpy(), x - 3)
    np.testing.assert_array_equal(g(3, Tensor(x)).numpy(), 3 - x)
  h = Tensor.jit(lambda a, w: a + Tensor(w))
  big0, big1 = np.zeros(2000, np.float32), np.zeros(2000, np.float32)
  big1[1000] = 1  # the same repr as big0: numpy elides the middle
  for w in (big0, big1, big0, big1):
    np.testing.assert_array_equal(h(Tensor(np.ones(2000, np.float32)), w).numpy(), 1 + w)


def test_llvm_ir_is_verified_before_optimisation():
  """What reaches llvmlite is checked by LLVM's own verifier first: bad IR is a TgcError, never a crash in LLVM."""
  from tgc.runtime.cpu import jit
  with pytest.raises(tgc.TgcError, match='does not verify'):
    jit("define void @bad(i32 %x) {\nentry:\n  ret i32 %x\n}\n", ['bad'])
  with pytest.raises(tgc.TgcError, match='does not verify'):
    jit("define i32 @bad2(i32 %x) {\nentry:\n  %y = add i32 %y, %x\n  ret i32 %y\n}\n", ['bad2'])


def test_devectorize_regroups_a_computed_fragment():
  """A wmma operand that an op on vectors computes is split like any wide op, then regrouped for the instruction
  (was: the wmma's operand no longer defined)."""
  from tgc.passes.manager import PassManager
  m = parse("""uop.func @v() {
  %0 = uop.define_global 0 : !uop.ptr<f32>
  %z = uop.const 0 : i32
  %a = uop.const 1.0 : f32
  %v = uop.vectorize %a, %a, %a, %a : vec<4xf32>
  %w = uop.const 2.0 : vec<4xf32>
  %s = uop.add %v, %w : vec<4xf32>
  %m = uop.wmma metal [8, 8, 8] %v, %w, %s : vec<4xf32>, vec<4xf32> -> vec<4xf32>
  uop.store %0[%z], %m : vec<4xf32>
}
""")
  PassManager.parse('devectorize').run(m)
  m.verify()
  ops = m.functions('uop.func')[0].body.ops
  wmma = next(op for op in ops if op.name == 'uop.wmma')
  assert all(v.op.name == 'uop.vectorize' for v in wmma.operands)
  assert not any(str(r.type).startswith('vec') for op in ops if op.name not in ('uop.wmma', 'uop.vectorize') for r in op.results)


BITCAST = """kernel.func @k(%data0: !kernel.buf<4xDST>, %data1: !kernel.buf<4xSRC>) {
  %0 = kernel.load %data1 [view(shape = [4], strides = [1], offset = 0)] : SRC
  %1 = kernel.bitcast %0 : SRC -> DST
  kernel.store %data0 [view(shape = [4], strides = [1], offset = 0)], %1 : DST
}
"""

@pytest.mark.parametrize('dev', ALL_DEVICES)
@pytest.mark.parametrize('src,dst', [('bf16', 'f16'), ('f16', 'bf16'), ('bf16', 'i16'), ('u16', 'bf16')])
def test_bitcast_through_bf16_keeps_the_bits(dev, src, dst):
  """The C emitter converted the 16 bits' value to f16 instead of reinterpreting them (bf16 -> f16)."""
  bits = np.array([0x3FC0, 0xBFC1, 0x4000, 0x0001], np.uint16)  # (compiled functions take and give bf16 as its bits)
  arg = bits.view(np.int16) if src == 'i16' else bits.view(np.float16) if src == 'f16' else bits
  out = tgc.compile(with_host(BITCAST.replace('SRC', src).replace('DST', dst), f'tensor<4x{dst}>', f'tensor<4x{src}>'), dev)(arg)[0]
  np.testing.assert_array_equal(np.asarray(out).view(np.uint16), bits)


def test_group_of_one_is_no_group():
  """group(amt = 1) leaves one thread per reduce: linearize makes no shared-memory meeting (its uop.if had no
  condition: invalid IR), and the kernel still reduces."""
  text = """kernel.func @r(%data0: !kernel.buf<i32>, %data1: !kernel.buf<20xi32>) attributes {opts = [group(axis = 0, amt = 1)]} {
  %0 = kernel.const 20 : i32
  %1 = kernel.load %data1 [view(shape = [20], strides = [1], offset = 0)] : i32
  %2 = kernel.reduce max %1 [0] : i32
  %3 = kernel.sub %0, %2 : i32
  kernel.store %data0 [view(shape = [1], strides = [0], offset = 0)], %3 : i32
}
"""
  text = with_host(text, 'tensor<i32>', 'tensor<20xi32>')
  from tgc.passes.manager import PassManager
  for t in ('metal', 'cuda', 'opencl'):
    m = parse(text)
    PassManager.parse(f'linearize{{target={t}}}').run(m)
    m.verify()
    assert not any(op.name in ('uop.if', 'uop.define_local') for op in m.functions('uop.func')[0].body.ops)
  if 'OPENCL' in ALL_DEVICES:
    a = np.arange(-7, 13, dtype=np.int32)[::-1].copy()
    assert tgc.compile(text, 'OPENCL')(a)[0] == 20 - a.max()


@pytest.mark.parametrize('dev', ALL_DEVICES)
@pytest.mark.parametrize('dt', ['i32', 'i64'])
def test_signed_overflow_wraps_on_every_device(dev, dt):
  """tgc's signed arithmetic wraps; OpenCL C leaves overflow undefined and PoCL folded -min(INT_MIN, x) to 0."""
  npdt = np.dtype('int32' if dt == 'i32' else 'int64')
  lo = np.iinfo(npdt).min
  text = f"""kernel.func @k(%data0: !kernel.buf<4x{dt}>, %data1: !kernel.buf<4x{dt}>) {{
  %0 = kernel.load %data1 [view(shape = [4], strides = [1], offset = 0)] : {dt}
  %1 = kernel.const {lo} : {dt}
  %2 = kernel.min %1, %0 : {dt}
  %3 = kernel.neg %2 : {dt}
  %4 = kernel.add %3, %1 : {dt}
  %5 = kernel.mul %0, %1 : {dt}
  %6 = kernel.sub %4, %5 : {dt}
  %m = kernel.const -1 : {dt}
  %7 = kernel.idiv %1, %m : {dt}
  %8 = kernel.mulacc %6, %7, %1 : {dt}
  kernel.store %data0 [view(shape = [4], strides = [1], offset = 0)], %8 : {dt}
}}
"""
  text = with_host(text, f'tensor<4x{dt}>', f'tensor<4x{dt}>')
  a = np.array([3, -1, np.iinfo(npdt).max, 0], npdt)
  with np.errstate(over='ignore'):
    c = npdt.type(lo)
    want = (-np.minimum(c, a) + c - a * c) * c + c  # lo // -1 wraps to lo
  np.testing.assert_array_equal(tgc.compile(text, dev)(a)[0], want.astype(npdt))


@pytest.mark.parametrize('ty,msg', [('vec<18446744073709551616xf32>', 'needs one size from 1 to 1024'),
                                    ('tensor<65536x65536xf32>', 'more than 2147483647 elements')])
def test_type_sizes_are_bounded(ty, msg):
  """A vector of 2**64 lanes made a pass loop for ever (fuzz/mutate.py); a tensor kernels cannot index is refused too."""
  with pytest.raises(Diagnostic, match=msg) as e:
    parse(f"func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {{\n  %0 = tensor.empty : {ty}\n  func.return %a : tensor<4xf32>\n}}\n", 't.tgc')
  assert (e.value.loc.line, e.value.loc.col) == (2, 23)  # at the type


def test_every_view_of_a_stack_stays_inside_the_one_below():
  """An upper view's offset of 2**64 passed the verifier (only the lowest view was checked); linearize then made an
  i32 constant out of range (fuzz/mutate.py)."""
  text = """kernel.func @E_6(%data0: !kernel.buf<6xf32>, %data1: !kernel.buf<2x3xf32>) {
  %0 = kernel.load %data1 [view(shape = [3, 2], strides = [1, 3], offset = 0), view(shape = [6], strides = [1], offset = OFF)] : f32
  kernel.store %data0 [view(shape = [6], strides = [1], offset = 0)], %0 : f32
}
"""
  with pytest.raises(Diagnostic, match=r"view #1 makes indices 18446744073709551616\.\.18446744073709551621, outside the 6 elements"):
    parse(text.replace('OFF', str(2 ** 64)))
  with pytest.raises(Diagnostic, match=r"view #1 makes indices 1\.\.6"): parse(text.replace('OFF', '1'))
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  out = tgc.compile(with_host(text.replace('OFF', '0'), 'tensor<6xf32>', 'tensor<2x3xf32>'), 'CPU')(a)[0]
  np.testing.assert_array_equal(out, a.reshape(-1).reshape(3, 2, order='F').reshape(-1))


def test_c_vector_expressions_read_lane_by_lane_are_named(tmp_path):
  """A vector ALU expression whose user reads it lane by lane (C has no vector exp2) is a variable, not inlined: each
  lane repeated the whole expression, and a chain of them grew exponentially (94 MB of C for a float64 sigmoid of a
  tanh: gcc crashed; fuzz.tensor found it)."""
  from tgc.tensor import _build_module
  x = np.random.default_rng(3).standard_normal(264)
  t = Tensor(x, device='C')
  y = (t / (1 + t.abs())).tanh().sigmoid()
  m, _ = _build_module([y.node], 'f')
  (tmp_path / 'f.tgc').write_text(str(m))
  out, err = io.StringIO(), sys.stdout
  sys.stdout = out
  try: rc = driver.translate_main([str(tmp_path / 'f.tgc'), '--target=c'])
  finally: sys.stdout = err
  assert rc == 0 and len(out.getvalue()) < 20000, len(out.getvalue())
  np.testing.assert_allclose(y.numpy(), 1 / (1 + np.exp(-np.tanh(x / (1 + np.abs(x))))), rtol=1e-12)


def test_a_long_chain_of_elementwise_ops_is_cut_into_kernels():
  """3000 elementwise steps through the Tensor API (an unrolled loop): kernelize cuts the chain by a buffer every
  MAX_DEPTH ops (its recursion passed Python's limit: 'recursion too deep in pass kernelize')."""
  from tgc.passes.kernelize import MAX_DEPTH
  from tgc.compiler import profile
  x, ref = Tensor(np.ones(8, np.float32)), np.ones(8, np.float32)
  for i in range(3000):
    if i % 2: x, ref = x * 1.0001 + 0.5, ref * np.float32(1.0001) + np.float32(0.5)
    else: x, ref = (x - 0.25).relu(), np.maximum(ref - np.float32(0.25), 0)
  with profile() as launches: out = x.numpy()
  np.testing.assert_allclose(out, ref, rtol=1e-5)
  assert len(launches) >= 5000 // MAX_DEPTH  # (5000 ops after decomposition: 3000 steps, 2000 of them two ops)


def test_out_of_memory_and_oversized_grids_are_tgc_errors():
  """A host buffer numpy cannot allocate (4 PiB) is an OutOfMemory (a TgcError and a MemoryError), not numpy's bare
  MemoryError; a kernel with more points than a launch grid holds is refused by name (it failed the uop verifier,
  'the pipeline left invalid IR')."""
  from tgc.errors import OutOfMemory
  with pytest.raises(OutOfMemory, match='out of host memory') as e: Tensor.empty(1 << 25, 1 << 25).realize()
  assert isinstance(e.value, MemoryError)
  with pytest.raises(OutOfMemory): Tensor.rand(1 << 50)
  with pytest.raises(tgc.TgcError, match='more than a launch grid holds'): Tensor.ones(4).pad(((0, 1 << 40),)).realize()


# ---------------------------------------------------------------- IR that lies about its sizes
SUMSQ = """func.func @sumsq(%a: tensor<4x4xf32>) -> tensor<4x1xf32> {
  %0 = tensor.reduce add %a [1] : tensor<4x4xf32> -> tensor<4x1xf32>
  %c = tensor.const 0.25 : tensor<4x1xf32>
  %1 = tensor.mul %0, %c : tensor<4x1xf32>
  %2 = tensor.expand %1 : tensor<4x1xf32> -> tensor<4x4xf32>
  %3 = tensor.sub %a, %2 : tensor<4x4xf32>
  %4 = tensor.mul %3, %3 : tensor<4x4xf32>
  %5 = tensor.reduce add %4 [1] : tensor<4x4xf32> -> tensor<4x1xf32>
  func.return %5 : tensor<4x1xf32>
}
"""


def _located(err: str, path, line: int, msg: str) -> bool:
  """A diagnostic at path:line, with the line quoted and a caret under it."""
  lines = err.splitlines()
  return (len(lines) >= 3 and re.match(rf"{re.escape(str(path))}:{line}:\d+: error: .*{re.escape(msg)}", lines[0]) is not None
          and lines[2].strip() == '^')


@pytest.mark.parametrize('dev', HOST_DEVICES)
def test_launch_grid_past_the_specials_is_rejected(tmp_path, dev):
  """global_size = [100] over `uop.special gidx0 4` ran 100 threads that stored past a 4-element buffer (SIGSEGV on
  CPU): the launch must run exactly the specials' extents, or the IR is rejected at the special."""
  m = parse(SUMSQ, 's.tgc'); lower(m, 'llvm', 'uop')
  text = str(m)
  assert 'global_size = [4]' in text and 'uop.special gidx0 4' in text
  p = tmp_path / 'gs.tgc'; p.write_text(text.replace('global_size = [4]', 'global_size = [100]'))
  rc, err = tool(driver.run_main, str(p), f'--device={dev}')
  assert rc == 1 and _located(err, p, 4, "'uop.special' extent 4 differs from the launch's global_size[0] = 100"), err
  a = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
  d = a - a.mean(1, keepdims=True)
  np.testing.assert_allclose(tgc.compile(text, dev)(a)[0], (d * d).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def _gather_kernel(size: int, host: str) -> str:
  """Row i of a 7x6 input read at i * 6 + 5 (elements 5..41), from a buffer that declares `size`."""
  return (f"uop.func @u() attributes {{global_size = [7], local_size = [1]}} {{\n  %0 = uop.define_global 0 {{size = 7}} : !uop.ptr<f32>\n"
          f"  %1 = uop.define_global 1 {{size = {size}}} : !uop.ptr<f32>\n  %2 = uop.special gidx0 7 : i32\n  %3 = uop.const 6 : i32\n"
          f"  %4 = uop.mul %2, %3 : i32\n  %5 = uop.const 5 : i32\n  %6 = uop.add %4, %5 : i32\n  %7 = uop.load %1[%6] : f32\n"
          f"  uop.store %0[%2], %7 : f32\n}}\nfunc.func @main(%a: {host}) -> tensor<7xf32> {{\n  %o = kernel.alloc : tensor<7xf32>\n"
          f"  kernel.launch @u(%o, %a)\n  func.return %o : tensor<7xf32>\n}}\n")


@pytest.mark.parametrize('size,host,line,msg', [
  (24, 'tensor<7x6xf32>', 9, "'uop.load' reads elements 5..41 of buffer 1, which declares 24"),
  (42, 'tensor<4x6xf32>', 14, "'kernel.launch' argument #1 is tensor<4x6xf32>, @u expects a buffer of 42 f32"),
  (24, 'tensor<4x6xf32>', 9, "'uop.load' reads elements 5..41 of buffer 1, which declares 24")])
def test_declared_sizes_bound_accesses_and_launches(tmp_path, size, host, line, msg):
  """A define_global of size 24 whose loads reach 41 while the host passed 42 elements: CPU (guarded at 24) and the
  interpreter (reading the 42) disagreed. Every access the analysis sees stays inside the declared size, and a
  launch passes buffers of the declared sizes; else the verifier says where."""
  p = tmp_path / 'g.tgc'; p.write_text(_gather_kernel(size, host))
  rc, err = tool(driver.run_main, str(p), '--device=CPU')
  assert rc == 1 and _located(err, p, line, msg), err
  a = np.arange(42, dtype=np.float32).reshape(7, 6)
  for dev in HOST_DEVICES:
    np.testing.assert_array_equal(tgc.compile(_gather_kernel(42, 'tensor<7x6xf32>'), dev)(a)[0], a[:, 5])


GUARDED = """uop.func @u() attributes {global_size = [8], local_size = [1]} {
  %0 = uop.define_global 0 {size = 8} : !uop.ptr<f32>
  %1 = uop.define_global 1 {size = 8} : !uop.ptr<f32>
  %2 = uop.define_global 2 {size = 8} : !uop.ptr<i32>
  %g = uop.special gidx0 8 : i32
  %c4 = uop.const 4 : i32
  %i = uop.add %g, %c4 : i32
  %far = uop.const 100 : i32
  %ok = uop.cmpne %g, %far : i32 -> i1
  %alt = uop.const -1.0 : f32
  %x = uop.load %1[%i], %ok, %alt : f32
  %j = uop.load %2[%g] : i32
  %y = uop.load %1[%j] : f32
  %s = uop.add %x, %y : f32
  uop.store %0[%g], %s : f32
}
func.func @main(%a: tensor<8xf32>, %b: tensor<8xi32>) -> tensor<8xf32> {
  %o = kernel.alloc : tensor<8xf32>
  kernel.launch @u(%o, %a, %b)
  func.return %o : tensor<8xf32>
}
"""


@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_guarded_access_outside_its_size_means_the_same_everywhere(dev):
  """What the verifier cannot see (a gate it cannot narrow the index by, an index read from memory) is guarded at run
  time: outside its declared size an access behaves as if gated off (its alternative value, or zero), on every
  device and in the interpreter alike."""
  a = np.arange(1, 9, dtype=np.float32)
  b = np.array([0, 7, 8, -1, 3, 1 << 30, -(1 << 31), 2], np.int32)
  x = np.where(np.arange(8) + 4 < 8, a[np.minimum(np.arange(8) + 4, 7)], -1.0)
  y = np.where((b >= 0) & (b < 8), a[np.clip(b, 0, 7)], 0.0)
  np.testing.assert_array_equal(tgc.compile(GUARDED, dev)(a, b)[0], (x + y).astype(np.float32))


def test_a_module_of_kernel_and_uop_funcs_is_lowered_before_it_runs():
  """A host launching a kernel.func beside a uop.func was not lowered (an internal KeyError in the host schedule)."""
  text = ("func.func @host(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = kernel.alloc : tensor<4xf32>\n  kernel.launch @k(%0, %a)\n"
          "  func.return %0 : tensor<4xf32>\n}\nkernel.func @k(%data0: !kernel.buf<4xf32>, %data1: !kernel.buf<4xf32>) {\n"
          "  %0 = kernel.load %data1 [view(shape = [4], strides = [1], offset = 0)] : f32\n  %1 = kernel.neg %0 : f32\n"
          "  kernel.store %data0 [view(shape = [4], strides = [1], offset = 0)], %1 : f32\n}\n" + _copy_kernel(4))
  a = np.array([1, -2, 3.5, 0], np.float32)
  for dev in HOST_DEVICES: np.testing.assert_array_equal(tgc.compile(text, dev)(a)[0], -a)


@pytest.mark.parametrize('op', ['uop.define_local temp0 4 : !uop.ptr<f32, local>', 'uop.barrier'])
def test_c_target_refusals_are_located(tmp_path, op):
  p = tmp_path / 'wg.tgc'
  p.write_text("uop.func @E_4() attributes {global_size = [1], local_size = [4]} {\n  %0 = uop.define_global 0 {size = 4} : !uop.ptr<f32>\n"
               f"  {'%1 = ' if 'local' in op else ''}{op}\n  %2 = uop.special lidx0 4 : i32\n  %3 = uop.const 1.0 : f32\n  uop.store %0[%2], %3 : f32\n}}\n")
  rc, err = tool(driver.translate_main, str(p), '--target=c')
  assert rc == 1 and _located(err, p, 3, "of more than one thread is not supported by the c target"), err


def test_the_lowered_host_holds_no_tensor_op_of_the_level_above():
  """lower-to-uop left tensor.reshape in the host: a reshape there is kernel.reshape (the same buffer, no copy)."""
  text = ("func.func @f(%a: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<16xf32>) {\n  %0 = tensor.reduce add %a [0] : tensor<4x4xf32> -> tensor<1x4xf32>\n"
          "  %1 = tensor.reshape %0 : tensor<1x4xf32> -> tensor<4xf32>\n  %2 = tensor.reshape %a : tensor<4x4xf32> -> tensor<16xf32>\n"
          "  func.return %1, %2 : tensor<4xf32>, tensor<16xf32>\n}\n")
  m = parse(text, 'r.tgc'); lower(m, 'llvm', 'uop')
  host = m.lookup('f')
  assert {op.name for op in host.body.ops} == {'kernel.alloc', 'kernel.launch', 'kernel.reshape', 'func.return'}, str(host)
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  for dev in HOST_DEVICES:
    s, flat = tgc.compile(str(m), dev)(a)
    np.testing.assert_array_equal(s, a.sum(0)); np.testing.assert_array_equal(flat, a.reshape(-1))


@pytest.mark.parametrize('call,msg', [(lambda t: t.reshape(-1, -1), "cannot reshape (2, 3) to (-1, -1)"),
                                      (lambda t: t.reshape(-2, 3), "cannot reshape (2, 3) to (-2, 3)"),
                                      (lambda t: t.pad(((0, 1), (1, 0), (2, 2))), "pad of shape (2, 3) needs one (a, b) pair per axis"),
                                      (lambda t: t.shrink(((0, 1),)), "shrink of shape (2, 3) needs one (a, b) pair per axis")])
def test_shape_errors_name_the_shapes(call, msg):
  with pytest.raises(ValueError, match=re.escape(msg)): call(Tensor(np.ones((2, 3), np.float32)))


_ALWAYS_TRUE_GATE = """uop.func @k() attributes {global_size = [4], local_size = [1]} {
  %0 = uop.define_global 0 {size = 4} : !uop.ptr<f32>
  %1 = uop.define_global 1 {size = 4} : !uop.ptr<f32>
  %2 = uop.special gidx0 4 : i32
  %3 = uop.const -2147483648 : i32
  %4 = uop.add %3, %2 : i32
  %5 = uop.const 4 : i32
  %6 = uop.cmplt %4, %5 : i32 -> i1
  %7 = uop.const 5.0 : f32
  %8 = uop.load %1[%4], %6, %7 : f32
  %9 = uop.load %1[%2], %6, %7 : f32
  %10 = uop.add %8, %9 : f32
  uop.store %0[%2], %10 : f32
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = kernel.alloc : tensor<4xf32>
  kernel.launch @k(%r, %x)
  func.return %r : tensor<4xf32>
}
"""

@pytest.mark.parametrize('dev', ALL_DEVICES)
def test_always_true_gate_of_a_load_outside_its_buffer_stays(dev):
  """A gated load whose gate is always true but whose index lies outside its buffer reads as a false gate (its
  alternative) on every device: uop-simplify keeps that gate (dropping it left an access the verifier rejects: an
  internal error, fuzz.mutate seed 7303 case 35887), and drops the one of a load proven inside."""
  from tgc.passes.manager import PassManager
  m = parse(_ALWAYS_TRUE_GATE)
  PassManager.parse('uop-simplify').run(m)
  m.verify()
  loads = [op for op in m.functions('uop.func')[0].body.ops if op.name == 'uop.load']
  assert [len(op.operands) for op in loads] == [4, 2]
  x = np.arange(4, dtype=np.float32)
  (out,) = tgc.compile(_ALWAYS_TRUE_GATE, device=dev)(x)
  np.testing.assert_array_equal(out, x + 5)
