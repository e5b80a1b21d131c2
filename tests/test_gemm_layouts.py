"""The products of a Linear layer (W stored (out, in)): forward x @ W.T, backward dx = dy @ W and dW = dy.T @ x (and
x.T @ dy, batched x @ W.T). On a GPU each gets the staged register tiles (f32) or tensor cores (f16, bf16) whatever
the majors of its operands: a transposed operand is a layout the tiles load. The tiles kernel-opt chooses for cuda
run here on OpenCL (PoCL) against numpy; the tensor-core kernels build with nvcc."""
import os, shutil
import numpy as np
import pytest
import tgc
from tgc.tensor import _build_module
from tgc.compiler import lower, compile_module
from tgc.runtime import get_device
from tgc.passes.schedule import Opt

H100_SHARED = 227 << 10  # what an H100 lets a block ask for: kernel-opt's budget there
NVCC = shutil.which('nvcc') or ('/usr/local/bin/nvcc' if os.path.exists('/usr/local/bin/nvcc') else None)

# name: (operand shapes for (m, k, n), the product)
LAYOUTS = {
  'x@W.T': (lambda m, k, n: ((m, k), (n, k)), lambda x, w: x @ w.T),
  'x@W': (lambda m, k, n: ((m, k), (k, n)), lambda x, w: x @ w),
  'dy@W': (lambda m, k, n: ((m, k), (k, n)), lambda dy, w: dy @ w),  # (dx: W is (out, in), here (k, n))
  'dy.T@x': (lambda m, k, n: ((k, m), (k, n)), lambda dy, x: dy.T @ x),
  'x.T@dy': (lambda m, k, n: ((k, m), (k, n)), lambda x, dy: x.T @ dy),
  'batched x@W.T': (lambda m, k, n: ((4, m // 4, k), (n, k)), lambda x, w: x @ w.T),
}


def cuda_opts(name, m, k, n, dt='float32', **caps):
  shapes, f = LAYOUTS[name]
  mod, _ = _build_module([f(*[tgc.Tensor.empty(*s, dtype=dt) for s in shapes(m, k, n)]).node], 'f')
  lower(mod, 'cuda', 'opt', **caps)
  (kern,) = mod.functions('kernel.func')
  return list(kern.attrs.get('opts', ()))


@pytest.mark.parametrize('mkn', [(4096, 384, 1536), (4096, 1536, 384), (16384, 1152, 3072), (1024, 4096, 4096)])
def test_every_layout_takes_the_staged_tiles(mkn):
  """f32 on cuda: every layout of a Linear's products gets the register tiles staged through shared memory (two smem
  actions, work-groups, no reduce spread over the work-group), x @ W.T and batched x @ W.T the very tiles of x @ W."""
  got = {name: cuda_opts(name, *mkn, local_memory=H100_SHARED) for name in LAYOUTS}
  for name, opts in got.items():
    kinds = [o.name for o in opts]
    assert kinds.count('smem') == 2 and 'local' in kinds and 'upcast' in kinds and not {'group', 'grouptop'} & set(kinds), (name, opts)
  assert got['x@W.T'] == got['x@W'] == got['batched x@W.T'], got


def run_with_cuda_tiles(f, arrays, **caps):
  """Lower f's graph for OPENCL with the opts kernel-opt chooses for cuda (an H100's shared memory; caps: more of the
  device, given to both) replayed on its kernels, run it there: (the opts, the result)."""
  ts = [tgc.Tensor(a, device='OPENCL') for a in arrays]
  mc, _ = _build_module([f(*ts).node], 'f')
  lower(mc, 'cuda', 'opt', local_memory=H100_SHARED, **caps)
  want = [k.attrs.get('opts', ()) for k in mc.functions('kernel.func')]
  m, leaves = _build_module([f(*ts).node], 'f')
  lower(m, 'opencl', 'kernel', processor='gpu', local_memory=H100_SHARED, **caps)
  ks = list(m.functions('kernel.func'))
  assert len(ks) == len(want)
  for k, o in zip(ks, want): k.attrs['opts'] = o
  lower(m, 'opencl', processor='gpu', local_memory=H100_SHARED, **caps)
  (out,) = compile_module(m, 'OPENCL')(*[next(a for t, a in zip(ts, arrays) if t.node is l) for l in leaves])
  return [o for ko in want for o in ko], out


@pytest.mark.parametrize('name,mkn', [('x@W.T', (128, 192, 256)), ('dy@W', (128, 256, 192)), ('dy.T@x', (192, 256, 128)),
                                      ('x.T@dy', (128, 192, 256)), ('batched x@W.T', (256, 256, 128)), ('x@W.T', (100, 300, 70)),
                                      ('x@W.T', (16, 384, 256)), ('x@W.T', (4, 256, 100)), ('x@W.T', (2, 128, 64)), ('x@W.T', (8, 4096, 64))])
def test_tiles_of_every_layout_run(name, mkn):
  """cuda's tiles of each layout, replayed on OpenCL, match numpy: staged (a ring of 4 stages, 8x4 a thread; sizes no
  tile divides padded), and for a few rows by a matrix read along k (x @ W.T, m of 16 or less) the rows in registers,
  GROUP along k."""
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  shapes, f = LAYOUTS[name]
  rng = np.random.default_rng(11)
  arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes(*mkn)]
  opts, out = run_with_cuda_tiles(f, arrays)
  few = mkn[0] <= 16
  assert [o.name for o in opts].count('smem') == (0 if few else 2), opts
  if few: assert {'group', 'upcast'} <= {o.name for o in opts} and Opt('upcast', 0, mkn[0]) in opts, opts
  np.testing.assert_allclose(out.astype(np.float64), f(*[a.astype(np.float64) for a in arrays]), rtol=1e-4, atol=1e-4)


def test_opencl_gpu_stages_x_wt():
  """OpenCL's own GPU tiles for x @ W.T with a reduce long enough for a row reduce (k = 192): staged, and right."""
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(12)
  x, w = rng.standard_normal((96, 192)).astype(np.float32), rng.standard_normal((128, 192)).astype(np.float32)
  tx, tw = tgc.Tensor(x, device='OPENCL'), tgc.Tensor(w, device='OPENCL')
  m, leaves = _build_module([(tx @ tw.T).node], 'f')
  lower(m, 'opencl', processor='gpu')
  opts = [o.name for fn in m.functions('uop.func') for o in fn.attrs.get('opts', ())]
  assert 'smem' in opts and 'group' not in opts, opts
  (out,) = compile_module(m, 'OPENCL')(*[x if l is tx.node else w for l in leaves])
  np.testing.assert_allclose(out.astype(np.float64), x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize('dt', ['float16', 'bfloat16'])
@pytest.mark.parametrize('warpgroup', [True, False])
def test_tensor_cores_for_every_layout(dt, warpgroup):
  """f16 and bf16 on cuda: every layout's kernel runs on tensor cores (wgmma on an H100, mma.sync without
  warpgroups), and nvcc builds them all."""
  from tgc.emit.cuda import render_cuda
  from test_target_cuda import nvcc_cubin
  m, k, n = 1024, 384, 1536
  outs = []
  for name, (shapes, f) in LAYOUTS.items():
    outs.append(f(*[tgc.Tensor.empty(*s, dtype=dt) for s in shapes(m, k, n)]))
  mod, _ = _build_module([o.node for o in outs], 'f')
  lower(mod, 'cuda', local_memory=H100_SHARED, warpgroup=warpgroup)
  fns = list(mod.functions('uop.func'))
  op = 'uop.wgmma' if warpgroup else 'uop.wmma'
  # (one kernel a product; products of equal operands and layout, x @ W and dy @ W, are one)
  assert len(fns) >= 4 and all(any(o.name == op for o in fn.body.ops) for fn in fns), [fn.sym_name for fn in fns]
  assert nvcc_cubin(render_cuda(mod)) > 0


@pytest.mark.parametrize('m', [1, 2, 4, 8, 16])
def test_few_rows_by_a_matrix_read_along_k(m):
  """f32 x @ W.T with a few rows (decoding a few tokens): the matrix's sum spread over threads along k (GROUP), every
  row's partial sum in registers, no tiles staged (m 1: the matrix-vector product's GROUP)."""
  for k, n in ((384, 1536), (4096, 4096), (1152, 3072)):
    opts = cuda_opts('x@W.T', m, k, n, local_memory=H100_SHARED)
    names = [o.name for o in opts]
    assert 'group' in names and 'smem' not in names and (m == 1 or Opt('upcast', 0, m) in opts), (m, k, n, opts)


@pytest.mark.parametrize('m', [2, 4, 16])
def test_few_rows_are_not_split_on_a_device_of_known_size(m):
  """On a GPU of 132 multiprocessors a few rows by a matrix read along k stay one kernel (few_rows' GROUP, the matrix
  read once), where chunks of k would read it again a row; the same rows by a matrix read across k (x @ W) and one
  row (a matrix-vector product's own GROUP) keep the chunks, as do f16 products (the tensor cores')."""
  caps = dict(local_memory=H100_SHARED, processors=132)
  def kernels(name, m, k, n, dt='float32'):
    shapes, f = LAYOUTS[name]
    mod, _ = _build_module([f(*[tgc.Tensor.empty(*s, dtype=dt) for s in shapes(m, k, n)]).node], 'f')
    lower(mod, 'cuda', 'opt', **caps)
    return list(mod.functions('kernel.func'))
  for k, n in ((4096, 4096), (1536, 4096)):
    (kern,) = kernels('x@W.T', m, k, n)
    opts = list(kern.attrs.get('opts', ()))
    assert 'group' in [o.name for o in opts] and Opt('upcast', 0, m) in opts, (m, k, n, opts)
    assert len(kernels('dy@W', m, k, n)) == 2 and len(kernels('x@W.T', m, k, n, 'float16')) == 2
  assert len(kernels('x@W.T', 1, 4096, 4096)) == 2
  try: get_device('OPENCL')  # (the unsplit kernel's numbers: cuda's opts replayed on OpenCL)
  except tgc.TgcError as e: pytest.skip(str(e))
  shapes, f = LAYOUTS['x@W.T']
  rng = np.random.default_rng(13)
  arrays = [rng.standard_normal(s_).astype(np.float32) for s_ in shapes(m, 1024, 512)]
  opts, out = run_with_cuda_tiles(f, arrays, processors=132)
  assert Opt('upcast', 0, m) in opts, opts
  np.testing.assert_allclose(out.astype(np.float64), f(*[a.astype(np.float64) for a in arrays]), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_f32_layouts_build_with_nvcc():
  """The f32 kernels of every layout (staged tiles; a few rows' GROUP of 32 and of 128 threads, folded in warp
  shuffles and shared memory) build with nvcc."""
  from tgc.emit.cuda import render_cuda
  from test_target_cuda import nvcc_cubin
  outs = [f(*[tgc.Tensor.empty(*s) for s in shapes(*mkn)]) for mkn in ((1024, 384, 1536), (16, 4096, 1536), (4, 384, 1536))
          for name, (shapes, f) in LAYOUTS.items() if mkn[0] > 16 or name == 'x@W.T']
  mod, _ = _build_module([o.node for o in outs], 'f')
  lower(mod, 'cuda', local_memory=H100_SHARED)
  opts = [o for fn in mod.functions('uop.func') for o in fn.attrs.get('opts', ())]
  assert Opt('group', 5, 128) in opts and Opt('group', 5, 32) in opts and Opt('smem', 1, 2) in opts, opts
  assert nvcc_cubin(render_cuda(mod)) > 0


def test_few_rows_over_two_axes_run():
  """A few rows along two axes that do not merge (4 sequences' first 4 tokens, of 8): both upcast whole, the matrix's
  sum spread along k; cuda's opts replayed on OpenCL match numpy."""
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(13)
  x, w = rng.standard_normal((4, 8, 256)).astype(np.float32), rng.standard_normal((128, 256)).astype(np.float32)
  opts, out = run_with_cuda_tiles(lambda x, w: x[:, :4] @ w.T, [x, w])
  assert [o.name for o in opts][:2] == ['upcast', 'upcast'] and 'group' in [o.name for o in opts], opts
  np.testing.assert_allclose(out.astype(np.float64), x[:, :4].astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('m', [128, 16])
def test_linear_with_bias_runs(m):
  """nn.Linear's forward with its bias and an activation, one kernel: the bias (read once an output) leaves the
  matmul's tiles as they are (staged, or a few rows' GROUP); cuda's opts replayed on OpenCL match numpy."""
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  rng = np.random.default_rng(14)
  x, w, b = rng.standard_normal((m, 192)).astype(np.float32), rng.standard_normal((256, 192)).astype(np.float32), rng.standard_normal(256).astype(np.float32)
  opts, out = run_with_cuda_tiles(lambda x, w, b: (x @ w.T + b).relu(), [x, w, b])
  names = [o.name for o in opts]
  assert (names.count('smem') == 2) if m > 16 else ('group' in names and Opt('upcast', 0, m) in opts), opts
  np.testing.assert_allclose(out.astype(np.float64), np.maximum(x.astype(np.float64) @ w.T + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('dt', ['float32', 'float16'])
@pytest.mark.parametrize('name,mkn', [(n, (512, 384, 1536)) for n in LAYOUTS] + [('x@W.T', (16, 1536, 384)), ('x@W.T', (4, 4096, 1024)),
                                                                                 ('x@W.T', (500, 300, 700))])
def test_layouts_on_gpu(name, mkn, dt):
  """On a CUDA GPU (skipped elsewhere): every layout's product, staged f32 tiles, a few rows' GROUP, tensor cores for
  f16 (wgmma on an H100), against numpy."""
  try: get_device('CUDA')
  except tgc.TgcError as e: pytest.skip(str(e))
  shapes, f = LAYOUTS[name]
  rng = np.random.default_rng(15)
  arrays = [rng.standard_normal(s).astype(dt) for s in shapes(*mkn)]
  out = f(*[tgc.Tensor(a, device='CUDA') for a in arrays]).numpy().astype(np.float64)
  want = f(*[a.astype(np.float64) for a in arrays])
  tol = 1e-4 if dt == 'float32' else 2e-2
  np.testing.assert_allclose(out, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def test_split_k_on_a_gpu_with_few_output_tiles():
  """A weight's gradient (384x1536 summed over 4096 tokens) on a GPU of 132 multiprocessors: its k is split into
  chunks summed apart and then added (two kernels), enough work-groups for the device and evenly spread (f32: 4
  chunks; on the tensor cores 2); with the device's
  multiprocessors unknown, or on a CPU, or for a product of many outputs, one kernel. The split product equals
  numpy's (decomposed for cuda, run on the CPU)."""
  from tgc.lowering import lower
  from tgc.target import DeviceSpec
  from tgc.tensor import _build_module
  from tgc.passes.manager import PassManager
  from tgc.compiler import compile_module
  def kernels(y, spec):
    m, _ = _build_module([y.node], 'main')
    lower(m, spec, 'kernel')
    return [f.attrs['sym_name'] for f in m.functions('kernel.func')]
  from tgc import Tensor
  x, dy = Tensor.empty(4096, 384), Tensor.empty(4096, 1536)
  assert kernels(x.T @ dy, DeviceSpec.of('cuda', processors=132)) == ['r_4_384_1536_1024', 'r_4_589824']  # (4 or 5 work-groups a multiprocessor)
  assert kernels(x.T.cast('half') @ dy.cast('half'), DeviceSpec.of('cuda', processors=132))[-1] == 'r_2_589824'  # (tensor cores: fewer partial sums)
  assert len(kernels(x.T @ dy, DeviceSpec.of('cuda'))) == 1
  assert kernels(x.T @ dy, DeviceSpec.of('llvm', processors=132)) == ['E_96_4096_16', 'r_384_96_4096_16']  # (its column panels)
  assert len(kernels(Tensor.empty(4096, 384) @ Tensor.empty(384, 1536), DeviceSpec.of('cuda', processors=132))) == 1
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((1024, 48)).astype(np.float32), rng.standard_normal((1024, 96)).astype(np.float32)
  m, _ = _build_module([(Tensor(a).T @ Tensor(b)).node], 'mm')
  PassManager.parse('tensor-decompose{target=cuda processors=132}').run(m)
  assert str(m).count('tensor.reduce') == 2
  (out,) = compile_module(m, 'CPU')(a, b)
  np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)


def test_split_of_a_conv_weight_gradient():
  """A sum of products of broadcast factors over several axes into few outputs (a 3x3 conv's weight gradient over a
  batch of 64) on a GPU of 132 multiprocessors: partial sums per image, then their sum; an elementwise product summed
  over 4096 rows into 48 columns (a norm's weight gradient: neither factor broadcast) sums chunks of 32 rows, then the
  chunks. Both equal numpy's (run on the CPU)."""
  from tgc import Tensor
  from tgc.passes.manager import PassManager
  rng = np.random.default_rng(5)
  x, g = rng.standard_normal((64, 8, 18, 18)).astype(np.float32), rng.standard_normal((64, 16, 16, 16)).astype(np.float32)
  xt, gt = Tensor(x), Tensor(g)
  dw = (xt._pool((3, 3)).reshape(64, 1, 8, 16, 16, 3, 3) * gt.reshape(64, 16, 1, 16, 16, 1, 1)).sum((0, 3, 4))
  ref = np.einsum('nchwij,nohw->ocij', np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3)), g)
  a, b = rng.standard_normal((16, 256, 48)).astype(np.float32), rng.standard_normal((16, 256, 48)).astype(np.float32)
  ln = (Tensor(a) * Tensor(b)).sum((0, 1))
  # at 8x8 pixels an image's 64 sums are too few alone: the partial sums take 4 images each (a computed factor, the
  # gradient times 2 plus 1, stored first)
  x8, g8 = rng.standard_normal((64, 8, 10, 10)).astype(np.float32), rng.standard_normal((64, 16, 8, 8)).astype(np.float32)
  dw8 = (Tensor(x8)._pool((3, 3)).reshape(64, 1, 8, 8, 8, 3, 3) * (Tensor(g8) * 2 + 1).reshape(64, 16, 1, 8, 8, 1, 1)).sum((0, 3, 4))
  ref8 = np.einsum('nchwij,nohw->ocij', np.lib.stride_tricks.sliding_window_view(x8, (3, 3), axis=(2, 3)), g8 * 2 + 1)
  # a first layer's (3 input channels: 864 sums) takes an image's rows in 4 chunks of 8 as well
  x3, g3 = rng.standard_normal((64, 3, 34, 34)).astype(np.float32), rng.standard_normal((64, 32, 32, 32)).astype(np.float32)
  dw3 = (Tensor(x3)._pool((3, 3)).reshape(64, 1, 3, 32, 32, 3, 3) * Tensor(g3).reshape(64, 32, 1, 32, 32, 1, 1)).sum((0, 3, 4))
  ref3 = np.einsum('nchwij,nohw->ocij', np.lib.stride_tricks.sliding_window_view(x3, (3, 3), axis=(2, 3)), g3)
  for y, want, reduces in ((dw, ref, 2), (ln, (a * b).sum((0, 1)), 2), (dw8, ref8, 2), (dw3, ref3, 2)):
    m, _ = _build_module([y.node], 'f')
    PassManager.parse('tensor-decompose{target=cuda processors=132}').run(m)
    assert str(m).count('tensor.reduce') == reduces, str(m)
    if y is dw8: assert 'tensor<16x4x' in str(m), str(m)  # (16 chunks of 4 images)
    if y is dw3: assert 'x4x8x32x' in str(m), str(m)  # (an image's rows in 4 chunks of 8)
    (out,) = compile_module(m, 'CPU')(*[t for t in (x, g, a, b, x8, g8, x3, g3) if any(v.type.shape == t.shape for v in m.functions('func.func')[0].body.args)])
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-3, atol=1e-3)


def test_split_of_an_embedding_gradient():
  """An embedding's gradient (a one-hot of 4096 tokens times their gradients, summed over the tokens into 256x384)
  on a GPU of 132 multiprocessors: the token axis cut into chunks summed apart, then their sum (its one-hot factor is
  computed, but from reads of the tokens and the positions only); a sum over the tokens of an elementwise product
  sums chunks of 32 tokens, then the chunks. Both equal numpy's (decomposed for cuda, run on the CPU)."""
  from tgc import Tensor
  from tgc.nn import Embedding
  from tgc.passes.manager import PassManager
  rng = np.random.default_rng(7)
  tok, g = rng.integers(0, 256, 4096).astype(np.int32), rng.standard_normal((4096, 384)).astype(np.float32)
  emb = Embedding(256, 384)
  emb.weight.requires_grad = True
  tt, gt = Tensor(tok), Tensor(g)
  (dw,) = emb(tt).gradient(emb.weight, gradient=gt)
  want = np.zeros((256, 384), np.float64)
  np.add.at(want, tok, g)
  a, b = rng.standard_normal((4096, 384)).astype(np.float32), rng.standard_normal((4096, 384)).astype(np.float32)
  at, bt = Tensor(a), Tensor(b)
  ew = (at * bt).sum(0)
  arrays = {id(tt.node): tok, id(gt.node): g, id(at.node): a, id(bt.node): b}
  for y, want, reduces in ((dw, want, 2), (ew, (a * b).sum(0), 2)):
    m, leaves = _build_module([y.node], 'f')
    PassManager.parse('tensor-decompose{target=cuda processors=132}').run(m)
    assert str(m).count('tensor.reduce') == reduces, str(m)
    (res,) = compile_module(m, 'CPU')(*[arrays[id(l)] for l in leaves])
    np.testing.assert_allclose(res.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_computed_operand_of_a_cuda_core_product_is_a_buffer():
  """On a GPU, an f32 matmul's operand that is computed (scaled rows) becomes a buffer of its own, so that the
  product's tiles stage it as a plain read: two kernels, the product's reading buffers only; a plain operand, a
  product on the tensor cores (f32 as TF32), or a CPU keeps one kernel. The result equals numpy's (lowered for cuda, run on
  the CPU)."""
  from tgc import Tensor
  from tgc.lowering import lower
  from tgc.target import DeviceSpec
  from tgc.passes.manager import PassManager
  rng = np.random.default_rng(9)
  x, s, w = rng.standard_normal((256, 128)).astype(np.float32), rng.random((256, 1)).astype(np.float32) + 0.5, rng.standard_normal((128, 64)).astype(np.float32)
  xt, st, wt = Tensor(x), Tensor(s), Tensor(w)
  def kernels(y, spec):
    m, _ = _build_module([y.node], 'f')
    lower(m, spec, 'kernel')
    return m.functions('kernel.func')
  cuda = DeviceSpec.of('cuda', processors=132)
  ks = kernels((xt * st.reciprocal()) @ wt, cuda)
  assert len(ks) == 2 and 'kernel.recip' not in str(ks[-1]) and 'kernel.recip' in str(ks[0])
  assert len(kernels(xt @ wt, cuda)) == 1
  assert len(kernels((xt * st.reciprocal()) @ wt, DeviceSpec.of('llvm'))) == 1
  assert len(kernels((xt * st.reciprocal()) @ wt, DeviceSpec.of('cuda', processors=132, tf32=True))) == 1  # (on the tensor cores)
  m, leaves = _build_module([((xt * st.reciprocal()) @ wt).node], 'f')
  PassManager.parse('tensor-decompose{target=cuda processors=132}').run(m)
  arrays = {id(xt.node): x, id(st.node): s, id(wt.node): w}
  (out,) = compile_module(m, 'CPU')(*[arrays[id(l)] for l in leaves])
  np.testing.assert_allclose(out, (x / s) @ w, rtol=1e-4, atol=1e-4)


def test_first_conv_weight_gradient_runs():
  """A first conv's weight gradient (3 input channels, a 3x3 window: the output gradient broadcast only along axes of
  3): the pixels' sum shared by 16 threads (GROUPTOP) and 16 output channels a thread; cuda's opts replayed on OpenCL
  match torch's gradient."""
  try: get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))
  import torch
  rng = np.random.default_rng(15)
  x, w, g = rng.standard_normal((16, 3, 32, 32)).astype(np.float32), rng.standard_normal((32, 3, 3, 3)).astype(np.float32), rng.standard_normal((16, 32, 32, 32)).astype(np.float32)
  opts, out = run_with_cuda_tiles(lambda x, w, g: (x.conv2d(w, padding=1) * g).sum().gradient(w)[0], [x, w, g])
  assert ('grouptop', 16) in [(o.name, o.fields['amt']) for o in opts] and Opt('upcast', 1, 16) in opts, opts
  tw = torch.tensor(w, requires_grad=True)
  (torch.nn.functional.conv2d(torch.tensor(x), tw, padding=1) * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(out, tw.grad.numpy(), rtol=1e-4, atol=1e-3)
