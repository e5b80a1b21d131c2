"""The whole pipeline against numpy: tensor-level programs, NOOPT and optimised, on the LLVM CPU device and
the reference interpreter; and every kernel-opt action replayed on odd shapes keeps the results."""
import itertools, os
import numpy as np
import pytest
import tgc
from tgc import ir
from tgc.ir.attrs import Record
from tgc.passes import PassManager
from tgc.compiler import compile_module

RNG = np.random.default_rng(0)

def arr(shape, dt='f32'):
  if dt == 'f32': return RNG.standard_normal(shape).astype(np.float32)
  return RNG.integers(-20, 20, size=shape).astype(np.int32)

def ty(shape, dt='f32'): return f"tensor<{''.join(f'{s}x' for s in shape)}{dt}>"

# (name, text, inputs, numpy reference)
def programs():
  out = []
  for n in (1, 3, 7, 17, 127):
    a, b = arr((n,)), arr((n,))
    out.append((f"add{n}", f"""func.func @f(%a: {ty((n,))}, %b: {ty((n,))}) -> {ty((n,))} {{
  %0 = tensor.add %a, %b : {ty((n,))}
  func.return %0 : {ty((n,))}
}}""", (a, b), lambda a, b: a + b))
  for m, k, n in ((1, 1, 1), (3, 5, 7), (17, 3, 9), (16, 32, 16), (7, 127, 3)):
    a, b = arr((m, k)), arr((k, n))
    out.append((f"matmul{m}x{k}x{n}", f"""func.func @f(%a: {ty((m, k))}, %b: {ty((k, n))}) -> {ty((m, n))} {{
  %0 = tensor.matmul %a, %b : {ty((m, k))}, {ty((k, n))} -> {ty((m, n))}
  func.return %0 : {ty((m, n))}
}}""", (a, b), lambda a, b: a @ b))
  for shape, axis in (((3, 7), 0), ((3, 7), 1), ((17, 16), 1), ((4, 5, 6), 1), ((127,), 0), ((17,), 0)):
    a = arr(shape)
    rs = tuple(1 if i == axis else s for i, s in enumerate(shape))
    for kind, f in (('add', np.sum), ('max', np.max)):
      out.append((f"reduce_{kind}{shape}{axis}", f"""func.func @f(%a: {ty(shape)}) -> {ty(rs)} {{
  %0 = tensor.reduce {kind} %a [{axis}] : {ty(shape)} -> {ty(rs)}
  func.return %0 : {ty(rs)}
}}""", (a,), lambda a, f=f, axis=axis: f(a, axis=axis, keepdims=True)))
  a = arr((5, 9))
  out.append(("softmax", f"""func.func @f(%x: {ty((5, 9))}) -> {ty((5, 9))} {{
  %m = tensor.reduce max %x [1] : {ty((5, 9))} -> {ty((5, 1))}
  %me = tensor.expand %m : {ty((5, 1))} -> {ty((5, 9))}
  %d = tensor.sub %x, %me : {ty((5, 9))}
  %e = tensor.exp2 %d : {ty((5, 9))}
  %s = tensor.reduce add %e [1] : {ty((5, 9))} -> {ty((5, 1))}
  %se = tensor.expand %s : {ty((5, 1))} -> {ty((5, 9))}
  %o = tensor.fdiv %e, %se : {ty((5, 9))}
  func.return %o : {ty((5, 9))}
}}""", (a,), lambda x: np.exp2(x - x.max(1, keepdims=True)) / np.exp2(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))
  a, b = arr((3, 7)), arr((7, 3))
  out.append(("movement", f"""func.func @f(%a: {ty((3, 7))}, %b: {ty((7, 3))}) -> {ty((5, 3))} {{
  %0 = tensor.permute %b [1, 0] : {ty((7, 3))} -> {ty((3, 7))}
  %1 = tensor.mul %a, %0 : {ty((3, 7))}
  %2 = tensor.flip %1 [1] : {ty((3, 7))}
  %3 = tensor.shrink %2 [(0, 3), (2, 5)] : {ty((3, 7))} -> {ty((3, 3))}
  %4 = tensor.pad %3 [(1, 1), (0, 0)] : {ty((3, 3))} -> {ty((5, 3))}
  %5 = tensor.reshape %4 : {ty((5, 3))} -> {ty((15,))}
  %6 = tensor.reshape %5 : {ty((15,))} -> {ty((5, 3))}
  func.return %6 : {ty((5, 3))}
}}""", (a, b), lambda a, b: np.pad(np.flip(a * b.T, 1)[:, 2:5], ((1, 1), (0, 0)))))
  # a sum of products whose other factor divides by a value broadcast along the sum (softmax's backward): where the
  # sum's axis is padded, the padding's zeros must not reach the division (0 * 1/0 is NaN)
  a, b = arr((3, 7)), np.abs(arr((3, 1))) + 1
  out.append(("rowdot_over", f"""func.func @f(%a: {ty((3, 7))}, %b: {ty((3, 1))}) -> {ty((3, 1))} {{
  %0 = tensor.expand %b : {ty((3, 1))} -> {ty((3, 7))}
  %1 = tensor.fdiv %a, %0 : {ty((3, 7))}
  %2 = tensor.mul %1, %a : {ty((3, 7))}
  %3 = tensor.reduce add %2 [1] : {ty((3, 7))} -> {ty((3, 1))}
  func.return %3 : {ty((3, 1))}
}}""", (a, b), lambda a, b: (a / b * a).sum(1, keepdims=True)))
  a, b = arr((4, 6), 'i32'), arr((4, 6), 'i32')
  out.append(("int_divmod", f"""func.func @f(%a: {ty((4, 6), 'i32')}, %b: {ty((4, 6), 'i32')}) -> ({ty((4, 6), 'i32')}, {ty((4, 6), 'i32')}) {{
  %0 = tensor.idiv %a, %b : {ty((4, 6), 'i32')}
  %1 = tensor.mod %a, %b : {ty((4, 6), 'i32')}
  func.return %0, %1 : {ty((4, 6), 'i32')}, {ty((4, 6), 'i32')}
}}""", (a, b), None))
  return out

PROGRAMS = programs()

def check(name, res, args, ref):
  if ref is None:  # integer division: C semantics from the oracle
    from tgc.ir import alu, dtypes as D
    want = (alu.exec_alu('idiv', D.i32, *args), alu.exec_alu('mod', D.i32, *args))
    for r, w in zip(res, want): np.testing.assert_array_equal(r, w)
    return
  np.testing.assert_allclose(res[0], ref(*args), rtol=1e-4, atol=1e-4, err_msg=name)

# the interpreter runs point by point in Python: it gets the small programs only
CASES = [(p, d) for p in PROGRAMS for d in ("CPU", "INTERP") if d == "CPU" or sum(a.size for a in p[2]) <= 600]

@pytest.mark.parametrize("noopt", [True, False])
@pytest.mark.parametrize("name,text,args,ref,device", [(*p, d) for p, d in CASES], ids=[f"{p[0]}-{d}" for p, d in CASES])
def test_program(name, text, args, ref, device, noopt, monkeypatch):
  monkeypatch.setenv("NOOPT", "1" if noopt else "0")
  fn = tgc.compile(text, device=device)
  check(name, fn(*args), args, ref)

def test_seed_dot_is_one_kernel(monkeypatch):
  monkeypatch.setenv("NOOPT", "1")
  text = open(os.path.join(os.path.dirname(__file__), '..', 'examples', 'dot.tgc')).read()
  m = ir.parse(text)
  PassManager.parse('lower-to-uop').run(m)
  (k,) = m.functions('uop.func')
  assert k.attrs['sym_name'] == 'r_2'
  names = [op.name for op in k.body.ops]
  assert names.count('uop.range') == 1 and names.count('uop.define_acc') == 1 and names.count('uop.phi') == 1
  assert tgc.compile(text)(np.array([1, 2], np.int32), np.array([3, 4], np.int32))[0] == 11

# ---- every action, replayed from an opts attribute, keeps the results ----
def kernel_module(text):
  m = ir.parse(text)
  PassManager.parse('canonicalize,tensor-decompose,canonicalize,kernelize').run(m)
  return m

CPU_OPTS = [
  ("matmul16x32x16", [Record('upcast', {'axis': 1, 'amt': 4})]),
  ("matmul16x32x16", [Record('upcast', {'axis': 0, 'amt': 2}), Record('upcast', {'axis': 2, 'amt': 8}), Record('unroll', {'axis': 4, 'amt': 4})]),
  ("matmul16x32x16", [Record('unroll', {'axis': 2, 'amt': 0})]),
  ("matmul3x5x7", [Record('padto', {'axis': 0, 'amt': 4}), Record('upcast', {'axis': 0, 'amt': 4})]),
  ("matmul3x5x7", [Record('swap', {'axis': 0, 'amt': 1})]),
  ("matmul3x5x7", [Record('padto', {'axis': 1, 'amt': 8}), Record('upcast', {'axis': 1, 'amt': 4}), Record('swap', {'axis': 0, 'amt': 1})]),
  ("matmul16x32x16", [Record('upcast', {'axis': 1, 'amt': 4}), Record('upcast', {'axis': 0, 'amt': 2}), Record('swap', {'axis': 0, 'amt': 2})]),
  ("matmul3x5x7", [Record('padto', {'axis': 1, 'amt': 8}), Record('upcast', {'axis': 1, 'amt': 8})]),
  ("add127", [Record('padto', {'axis': 0, 'amt': 16}), Record('upcast', {'axis': 0, 'amt': 16})]),
  ("reduce_add(17, 16)1", [Record('unroll', {'axis': 1, 'amt': 16})]),
  ("reduce_max(17, 16)1", [Record('unroll', {'axis': 1, 'amt': 4}), Record('unroll', {'axis': 1, 'amt': 2})]),
  ("reduce_add(4, 5, 6)1", [Record('upcast', {'axis': 2, 'amt': 2}), Record('unroll', {'axis': 1, 'amt': 5})]),
  ("movement", [Record('upcast', {'axis': 1, 'amt': 3})]),
  ("softmax", [Record('upcast', {'axis': 0, 'amt': 5})]),
  # PADTO on a reduce axis that is no sum of products: the padding masked to the reduce's identity (vector lanes too),
  # an epilogue's stores at the iteration shape cut at the axis's end
  ("reduce_max(17, 16)1", [Record('padto', {'axis': 1, 'amt': 20}), Record('unroll', {'axis': 1, 'amt': 4})]),
  ("reduce_max(3, 7)1", [Record('padto', {'axis': 1, 'amt': 8}), Record('unroll', {'axis': 1, 'amt': 2})]),
  ("reduce_add(3, 7)1", [Record('padto', {'axis': 1, 'amt': 8}), Record('unroll', {'axis': 1, 'amt': 8})]),
  ("reduce_max(127,)0", [Record('padto', {'axis': 0, 'amt': 64}), Record('unroll', {'axis': 0, 'amt': 4})]),
  ("softmax", [Record('padto', {'axis': 1, 'amt': 12}), Record('unroll', {'axis': 1, 'amt': 4})]),
  ("softmax", [Record('padto', {'axis': 1, 'amt': 16}), Record('upcast', {'axis': 0, 'amt': 5})]),
  ("rowdot_over", [Record('padto', {'axis': 1, 'amt': 8}), Record('unroll', {'axis': 1, 'amt': 8})]),
  ("rowdot_over", [Record('padto', {'axis': 1, 'amt': 4}), Record('unroll', {'axis': 1, 'amt': 4})]),
]

@pytest.mark.parametrize("device", ["CPU", "INTERP"])
@pytest.mark.parametrize("prog,opts", CPU_OPTS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CPU_OPTS)])
def test_opts_replay(prog, opts, device):
  name, text, args, ref = next(p for p in PROGRAMS if p[0] == prog)
  from tgc.passes.kernel_opt import try_opts
  m = kernel_module(text)
  fits = [k for k in m.functions('kernel.func') if try_opts(k, opts) is not None]
  assert fits, "the opts fit none of the program's kernels"
  for k in fits: k.attrs['opts'] = tuple(opts)
  fn = compile_module(m, device)
  check(name, fn(*args), args, ref)

@pytest.mark.parametrize("pad", [(0, 0), (2, 1)])
def test_padded_rows_load_clamped_on_cpu(pad):
  """PADTO on a register tile's rows (not its vector axis): on the CPU the padded rows read the last row (clamped)
  instead of gated loads, also where the input's own view masks that axis (a pad before the matmul); results right."""
  a, b = arr((5 - sum(pad), 9)), arr((9, 16))
  text = f"""func.func @f(%a: {ty(a.shape)}, %b: {ty(b.shape)}) -> {ty((5, 16))} {{
  %0 = tensor.pad %a [({pad[0]}, {pad[1]}), (0, 0)] : {ty(a.shape)} -> {ty((5, 9))}
  %1 = tensor.matmul %0, %b : {ty((5, 9))}, {ty(b.shape)} -> {ty((5, 16))}
  func.return %1 : {ty((5, 16))}
}}"""
  opts = [Record('upcast', {'axis': 1, 'amt': 16}), Record('padto', {'axis': 0, 'amt': 4}), Record('upcast', {'axis': 0, 'amt': 4})]
  m = kernel_module(text)
  fits = [k for k in m.functions('kernel.func') if k.sym_name.startswith('r_')]
  for k in fits: k.attrs['opts'] = tuple(opts)
  lowered = ir.parse(str(m))
  PassManager.parse('linearize,uop-simplify').run(lowered)
  (k,) = [k for k in lowered.functions('uop.func') if k.sym_name.startswith('r_')]
  gated = [op for op in k.body.ops if op.name == 'uop.load' and len(op.operands) == 4]
  if pad == (0, 0): assert not gated  # (the input's own padding keeps its gates)
  ref = np.pad(a, (pad, (0, 0))) @ b
  for dev in ("CPU", "C"): np.testing.assert_allclose(compile_module(ir.parse(str(m)), dev)(a, b)[0], ref, rtol=1e-4, atol=1e-4, err_msg=dev)
  np.testing.assert_allclose(compile_module(kernel_module(text), "INTERP")(a, b)[0], ref, rtol=1e-4, atol=1e-4)

def test_pad_with_a_value_reads_one_element():
  """A pad with a value (max pool's -inf) selects between the input and the value by the pad's `inside` mask, a splat
  constant under the pad: it lives on the host as one element (not a buffer of the padded shape), read with no gate
  (a select), and the results match numpy on the CPU and the interpreter."""
  from tgc import Tensor
  from tgc.tensor import _build_module
  from tgc.ir.types import elem
  x = arr((4, 6, 6))
  tx = Tensor(x, device='CPU')
  m, _ = _build_module([tx.pad(((0, 0), (1, 1), (1, 1)), value=-np.inf).node], 'p')
  m = ir.parse(str(m))
  PassManager.parse('canonicalize,tensor-decompose,canonicalize,kernelize').run(m)
  (k,) = m.functions('kernel.func')
  bools = [a for a in k.body.args if a.type.dtype.name in ('bool', 'i1')]
  assert [a.type.numel for a in bools] == [1], [str(a.type) for a in k.body.args]
  lowered = ir.parse(str(m))
  PassManager.parse('kernel-opt{target=llvm cpu=avx512},linearize,uop-simplify').run(lowered)
  (u,) = lowered.functions('uop.func')
  loads = [op for op in u.body.ops if op.name == 'uop.load' and elem(op.results[0].type).name in ('bool', 'i1')]
  assert loads and all(len(op.operands) == 2 for op in loads)
  ref = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  for dev in ("CPU", "INTERP"): np.testing.assert_array_equal(compile_module(ir.parse(str(m)), dev)(x)[0], ref)

def test_tangled_matmul_factor_is_copied():
  """An attention's output (heads moved beside the tokens and merged: transpose(1, 2).reshape) times a weight: the
  heads' layout is copied once (a plain transpose), so that the matmul reads its factor through one view; right results."""
  from tgc import Tensor
  from tgc.tensor import _build_module
  p, v, w = arr((2, 2, 16, 16)), arr((2, 2, 16, 32)), arr((64, 48))
  tp, tv, tw = (Tensor(a, device='CPU') for a in (p, v, w))
  m, leaves = _build_module([((tp @ tv).permute(0, 2, 1, 3).reshape(2, 16, 64) @ tw).node], 'att')
  text = str(m)
  m = kernel_module(text)
  mm = [k for k in m.functions('kernel.func') if any(op.name == 'kernel.reduce' for op in k.body.ops)]
  assert len(mm) == 2 and all(len(op.view.views) == 1 for k in mm for op in k.body.ops if op.name == 'kernel.load')
  ins = {id(t.node): a for t, a in ((tp, p), (tv, v), (tw, w))}
  args = [ins[id(l)] for l in leaves]
  ref = ((p @ v).transpose(0, 2, 1, 3).reshape(2, 16, 64)) @ w
  for dev in ("CPU", "INTERP"): np.testing.assert_allclose(compile_module(kernel_module(text), dev)(*args)[0], ref, rtol=1e-4, atol=1e-4)

def test_conv_window_view_is_not_copied():
  """A conv's windows (a pool view: its input repeated per tap) over a computed input stay a view: no kernel stores
  more than the conv's padded input or its output."""
  from tgc import Tensor
  from tgc.tensor import _build_module
  x, w = arr((1, 3, 12, 12)), arr((8, 3, 3, 3))
  tx, tw = Tensor(x, device='CPU'), Tensor(w, device='CPU')
  m, leaves = _build_module([tx.relu().conv2d(tw, padding=1).node], 'cv')
  m = kernel_module(str(m))
  biggest = max(next(op for op in k.body.ops if op.name == 'kernel.store').buf.type.numel for k in m.functions('kernel.func'))
  assert biggest <= max(3 * 14 * 14, 8 * 12 * 12), biggest

def test_heuristic_opts_everywhere():
  """The heuristics give every program here valid opts, and the results stay right."""
  for name, text, args, ref in PROGRAMS:
    fn = tgc.compile(text, device="CPU")
    check(name, fn(*args), args, ref)


def test_rank0_arguments_and_results_keep_their_shape():
  """A 0-d argument, a 0-d computed result and a 0-d host constant all come back as 0-d arrays."""
  text = """func.func @f(%a: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %0 = tensor.neg %a : tensor<f32>
  %c = tensor.const 2.5 : tensor<f32>
  func.return %0, %c : tensor<f32>, tensor<f32>
}"""
  for device in ("CPU", "INTERP"):
    r = tgc.compile(text, device=device)(np.float32(3))
    assert [x.shape for x in r] == [(), ()] and float(r[0]) == -3.0 and float(r[1]) == 2.5
