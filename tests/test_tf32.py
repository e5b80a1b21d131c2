"""TF32: tgc.set_float32_matmul_precision('high') (or TGC_TF32=1) lets f32 products run on CUDA's tensor cores as TF32
(mma.sync m16n8k8 .tf32, inputs rounded with cvt.rna); 'highest', the default, keeps them exact. The switch reaches the
DeviceSpec (pipeline text, cache keys); other targets ignore it. The emitted CUDA builds with nvcc for sm_80 and
sm_90a; on a machine with a GPU the products run and match numpy within TF32's error."""
import os, shutil, subprocess, sys, tempfile
import numpy as np
import pytest
import tgc
from tgc.tensor import _build_module
from tgc.compiler import lower, device_spec
from tgc.emit.cuda import render_cuda
from tgc.target import DeviceSpec, get_float32_matmul_precision, set_float32_matmul_precision

NVCC = shutil.which('nvcc') or ('/usr/local/bin/nvcc' if os.path.exists('/usr/local/bin/nvcc') else None)
MMA_TF32 = 'mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32'


@pytest.fixture
def precision():
  """Sets the float32 matmul precision for the test (restored after)."""
  was = get_float32_matmul_precision()
  yield set_float32_matmul_precision
  set_float32_matmul_precision(was)


def tf32_exact(x):
  """x with the 13 low mantissa bits cleared: exactly a TF32 value."""
  return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def matmul_module(m_, k_, n_, dt='float32', device='INTERP'):
  a, b = tgc.Tensor.empty(m_, k_, dtype=dt, device=device), tgc.Tensor.empty(k_, n_, dtype=dt, device=device)
  return _build_module([(a @ b).node], 'mm')[0]


def conv_module(dt='float32'):
  x, w = tgc.Tensor.empty(16, 32, 12, 12, dtype=dt, device='INTERP'), tgc.Tensor.empty(16, 32, 3, 3, dtype=dt, device='INTERP')
  return _build_module([x.conv2d(w, padding=1).node], 'conv')[0]


def wmmas(m):
  return [op for f in m.functions('uop.func') for op in f.body.ops if op.name == 'uop.wmma']


def nvcc_builds(src: str, arch: str) -> None:
  """nvcc builds src into a cubin for `arch` (asserting it), and its PTX holds TF32's mma where the source does."""
  if NVCC is None: pytest.skip("nvcc is not installed")
  with tempfile.TemporaryDirectory() as td:
    cu = os.path.join(td, 'k.cu')
    open(cu, 'w').write(src)
    for kind in ('--cubin', '--ptx'):
      p = subprocess.run([NVCC, kind, f'-arch={arch}', '-o', os.path.join(td, 'k.out'), cu], capture_output=True, text=True, timeout=300)
      assert p.returncode == 0, p.stderr
    ptx = open(os.path.join(td, 'k.out')).read()
    assert (MMA_TF32 in ptx and 'cvt.rna.tf32.f32' in ptx) == (MMA_TF32 in src)


# ---- the switch ----

def test_precision_switch(precision):
  precision('highest')  # (the default, unless TGC_TF32=1: test_environment_sets_the_starting_precision)
  assert get_float32_matmul_precision() == 'highest' and tgc.get_float32_matmul_precision() == 'highest'
  tgc.set_float32_matmul_precision('high')
  assert get_float32_matmul_precision() == 'high' and device_spec('CUDA').tf32
  tgc.set_float32_matmul_precision('medium')  # (torch's bf16 tier: TF32 here too)
  assert device_spec('CUDA').has_tf32
  tgc.set_float32_matmul_precision('highest')
  assert not device_spec('CUDA').tf32
  with pytest.raises(tgc.TgcError, match="'low' is not a precision \\(known: highest, high, medium\\)"): tgc.set_float32_matmul_precision('low')
  with pytest.raises(ValueError): tgc.set_float32_matmul_precision('fast')  # (an ArgumentError is a ValueError too)
  assert get_float32_matmul_precision() == 'highest'


def test_environment_sets_the_starting_precision():
  code = "import tgc; from tgc.compiler import device_spec; print(tgc.get_float32_matmul_precision(), device_spec('CUDA').options())"
  env = {**os.environ, 'PYTHONPATH': os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
  run = lambda v: subprocess.run([sys.executable, '-c', code], env={**env, 'TGC_TF32': v}, capture_output=True, text=True, timeout=120).stdout.split()
  on, off = run('1'), run('0')  # (a GPU here declares its own capabilities beside them)
  assert on[:2] == ['high', 'target=cuda'] and 'tf32=true' in on
  assert off[:2] == ['highest', 'target=cuda'] and 'tf32=true' not in off


def test_the_spec_carries_it_where_the_target_takes_it(precision):
  """A device's spec takes the precision where its target's tensor cores take TF32 (cuda): its pipeline text says
  tf32=true, its repr (the function cache's key) differs; a CPU device's spec stays as it was."""
  precision('highest')
  off = device_spec('CUDA')
  cpu_off = tgc.Device['CPU'].spec
  precision('high')
  on = device_spec('CUDA')
  assert on.tf32 and on.has_tf32 and ('f32', 'f32') in on.tc_dtypes and ('f32', 'f32') not in off.tc_dtypes
  assert on.options() == off.options() + ' tf32=true' and repr(on) != repr(off)
  assert tgc.Device['CPU'].spec == cpu_off and 'tf32' not in cpu_off.options()
  assert not DeviceSpec.of('llvm', tf32=True).has_tf32 and not DeviceSpec.of('opencl', tf32=True).tc_dtypes


def test_function_cache_key_holds_it(tmp_path, monkeypatch):
  from tgc import function_cache
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path))
  dev = type('Dev', (), {'binary_id': lambda self: 'cuda sm_90'})()
  spec = DeviceSpec.of('cuda', device='CUDA')
  assert function_cache.key('text', None, spec, dev) != function_cache.key('text', None, DeviceSpec.of(spec, tf32=True), dev)


def test_pipeline_text_round_trips():
  """tf32=true in pipeline text is the spec's: lower-to-uop{target=cuda tf32=true} lowers an f32 matmul to TF32 mma."""
  from tgc.passes.manager import PassManager, parse_pipeline
  from tgc.passes.pipelines import lower_to_uop_steps
  steps = lower_to_uop_steps('cuda', tf32=True)
  assert all('tf32=true' in s for s in steps if s.startswith(('kernel-opt', 'linearize')))
  m = matmul_module(64, 128, 32)
  PassManager(parse_pipeline('lower-to-uop{target=cuda tf32=true}')).run(m)
  assert wmmas(m) and all(w.a.type.dtype.name == 'f32' for w in wmmas(m))


def test_eager_cache_compiles_again_when_it_changes(precision):
  import tgc.tensor as T
  precision('highest')
  a, b = tgc.Tensor(np.ones((4, 8), np.float32), device='INTERP'), tgc.Tensor(np.ones((8, 4), np.float32), device='INTERP')
  (a @ b).realize()
  n = len(T._COMPILED)
  (a @ b).realize()
  assert len(T._COMPILED) == n
  precision('high')
  out = (a @ b).numpy()
  assert len(T._COMPILED) == n + 1 and (out == 8).all()  # (INTERP ignores the switch: the same result)


# ---- the lowering and the emitted CUDA ----

@pytest.mark.parametrize('arch', ['sm_80', 'sm_90a'])
def test_f32_matmul_takes_tf32_tensor_cores_only_when_on(arch):
  """On: tc on the f32 matmul (f32 fragments, two m16n8k8 .tf32 a uop.wmma, inputs rounded by cvt.rna), no wgmma
  (whose TF32 wants both operands K-major); off: the exact f32 kernel, no tensor cores, nothing of TF32."""
  caps = dict(local_memory=227 << 10)
  off, on = matmul_module(256, 512, 128), matmul_module(256, 512, 128)
  lower(off, 'cuda', **caps)
  lower(on, 'cuda', tf32=True, **caps)
  assert not wmmas(off) and wmmas(on) and all(tuple(w.attrs['dims']) == (16, 8, 16) and w.a.type.count == 8 for w in wmmas(on))
  src_off, src_on = render_cuda(off), render_cuda(on)
  assert 'tf32' not in src_off and 'mma.sync' not in src_off
  assert MMA_TF32 in src_on and 'cvt.rna.tf32.f32' in src_on and 'wgmma' not in src_on and 'mma.sync.aligned.m16n8k16' not in src_on
  (f,) = on.functions('uop.func')
  names = [o.name for o in f.attrs['opts']]
  assert names[0] == 'tc' and names.count('smem') == 2 and ('unroll', 2) in [(o.name, o.fields['amt']) for o in f.attrs['opts']], names  # (32 deep: 128 bytes of k a row)
  nvcc_builds(src_on, arch)
  nvcc_builds(src_off, arch)


def test_f32_conv_takes_tf32_tensor_cores():
  on = conv_module()
  lower(on, 'cuda', tf32=True)
  assert wmmas(on)
  nvcc_builds(render_cuda(on), 'sm_80')
  off = conv_module()
  lower(off, 'cuda')
  assert not wmmas(off) and 'tf32' not in render_cuda(off)


@pytest.mark.parametrize('dt', ['float16', 'bfloat16'])
def test_half_products_do_not_change(dt):
  """f16 and bf16 products lower the same with TF32 on or off (wgmma or m16n8k16 mma.sync, nothing of TF32)."""
  for warpgroup in (True, False):
    a, b = matmul_module(256, 256, 256, dt), matmul_module(256, 256, 256, dt)
    lower(a, 'cuda', warpgroup=warpgroup)
    lower(b, 'cuda', warpgroup=warpgroup, tf32=True)
    assert render_cuda(a) == render_cuda(b) and 'tf32' not in render_cuda(b)


def test_other_targets_ignore_it():
  for target in ('llvm', 'c', 'opencl', 'metal'):
    a, b = matmul_module(32, 64, 16), matmul_module(32, 64, 16)
    lower(a, target)
    lower(b, target, tf32=True)
    assert str(a) == str(b), target


def test_a_forced_tc_on_f32_names_the_switch():
  """An f32 kernel given tc by hand, with TF32 off, is refused with the reason and the way to turn it on."""
  from tgc.passes.schedule import Schedule, Opt
  m = matmul_module(32, 64, 16)
  lower(m, 'cuda', 'kernel')
  (k,) = m.functions('kernel.func')
  red = Schedule(k, (), None).axes('reduce')[0]
  with pytest.raises(tgc.TgcError, match=r"no tensor core multiplies f32 by f32 into f32 .*set_float32_matmul_precision\('high'\)"):
    Schedule(k, (Opt('tc', red, 0),), None).check(DeviceSpec.of('cuda'))
  Schedule(k, (Opt('tc', red, 0),), None).check(DeviceSpec.of('cuda', tf32=True))


def test_translate_tool_flag(tmp_path, precision):
  from tgc.driver import translate_main
  precision('highest')  # (the flag, or TGC_TF32=1: the precision the process has)
  src = tmp_path / 'mm.tgc'
  src.write_text(matmul_module(64, 128, 32).print())
  for flag, want in (([], False), (['--tf32'], True)):
    out = tmp_path / f'mm{len(flag)}.cu'
    assert translate_main([str(src), '--target', 'cuda', '-o', str(out)] + flag) == 0
    assert (MMA_TF32 in out.read_text()) == want
  assert translate_main([str(src), '--target', 'llvm', '--tf32', '-o', str(tmp_path / 'mm.ll')]) == 0


# ---- on a GPU ----

def _gpu():
  try: return tgc.runtime.get_device('CUDA')
  except tgc.TgcError as e: pytest.skip(str(e))


def _run_on_gpu(build, arrays):
  """build(*tensors) compiled for CUDA at the precision set now: (its result, whether its kernels use tensor cores)."""
  from tgc.compiler import compile_module
  ts = [tgc.Tensor(x, device='CUDA') for x in arrays]
  m, leaves = _build_module([build(*ts).node], 'f')
  fn = compile_module(m, 'CUDA')
  (out,) = fn(*[arrays[next(i for i, t in enumerate(ts) if t.node is l)] for l in leaves])
  return out.astype(np.float64), any(op.name == 'uop.wmma' for k in fn.kernels.values() for op in k.fn.body.ops)


def _rel(out, ref): return np.abs(out - ref).max() / np.abs(ref).max()


MATMULS = {  # name: (the operands' shapes, the product)
  '128x1024x96': (((128, 1024), (1024, 96)), lambda x, y: x @ y),
  'odd 100x1024x70': (((100, 1024), (1024, 70)), lambda x, y: x @ y),
  'odd k 96x1000x64': (((96, 1000), (1000, 64)), lambda x, y: x @ y),
  'batched': (((4, 256, 1024), (1024, 64)), lambda x, y: x @ y),
  'x.T@y': (((1024, 128), (1024, 96)), lambda x, y: x.T @ y),  # (A's tile m-contiguous, B's n-contiguous)
  'x@y.T': (((128, 1024), (96, 1024)), lambda x, y: x @ y.T),  # (both k-contiguous)
}


@pytest.mark.parametrize('name', list(MATMULS))
def test_tf32_matmul_on_gpu(precision, name):
  """Random f32 inputs, K about 1024: within TF32's error of numpy's float64 product (1e-2 of the largest), and
  further from it than f32 would be (the tensor cores ran); exact f32 again at 'highest'."""
  _gpu()
  shapes, f = MATMULS[name]
  rng = np.random.default_rng(3)
  a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
  ref = f(a.astype(np.float64), b.astype(np.float64))
  precision('high')
  out, tc = _run_on_gpu(f, (a, b))
  assert tc and 1e-6 < _rel(out, ref) < 1e-2, _rel(out, ref)
  precision('highest')
  out, tc = _run_on_gpu(f, (a, b))
  assert not tc and _rel(out, ref) < 1e-5


def test_tf32_fragments_on_gpu(precision):
  """Inputs exact in TF32: the tensor cores' products are exact and only the f32 sums round, so every element is
  where numpy puts it (the fragments' layout, the k slots of both operands alike)."""
  _gpu()
  rng = np.random.default_rng(5)
  a, b = tf32_exact(rng.standard_normal((64, 1024))), tf32_exact(rng.standard_normal((1024, 48)))
  precision('high')
  out, tc = _run_on_gpu(lambda x, y: x @ y, (a, b))
  assert tc and _rel(out, a.astype(np.float64) @ b) < 1e-5


def test_tf32_rounds_to_nearest_on_gpu(precision):
  """1 + 3*2^-12 rounds to TF32's 1 + 2^-10 (cvt.rna: to nearest), not down to 1 (the tensor cores' truncation)."""
  _gpu()
  a, b = np.full((32, 64), 1 + 3 * 2.0 ** -12, np.float32), np.ones((64, 16), np.float32)
  precision('high')
  out, tc = _run_on_gpu(lambda x, y: x @ y, (a, b))
  assert tc and (out == 64 * (1 + 2.0 ** -10)).all(), np.unique(out)


def test_tf32_conv_and_linear_on_gpu(precision):
  """A conv (its products on the tensor cores) and a Linear with a bias, at TF32's tolerance."""
  _gpu()
  from test_target_cuda import _conv_ref
  rng = np.random.default_rng(9)
  x, w = rng.standard_normal((16, 32, 12, 12)).astype(np.float32), rng.standard_normal((16, 32, 3, 3)).astype(np.float32)
  xs, ws, bias = rng.standard_normal((256, 1024)).astype(np.float32), rng.standard_normal((384, 1024)).astype(np.float32), rng.standard_normal(384).astype(np.float32)
  precision('high')
  out, tc = _run_on_gpu(lambda a, b: a.conv2d(b, padding=1), (x, w))
  assert tc and _rel(out, _conv_ref(x.astype(np.float64), w.astype(np.float64))) < 1e-2
  out, tc = _run_on_gpu(lambda a, b, c: a @ b.T + c, (xs, ws, bias))
  assert tc and _rel(out, xs.astype(np.float64) @ ws.T.astype(np.float64) + bias) < 1e-2


def test_tensor_api_follows_the_switch_on_gpu(precision):
  """The Tensor API as a user calls it: the same product, exact by default, TF32 once set (compiled again)."""
  _gpu()
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((256, 1024)).astype(np.float32), rng.standard_normal((1024, 128)).astype(np.float32)
  ta, tb, ref = tgc.Tensor(a, device='CUDA'), tgc.Tensor(b, device='CUDA'), a.astype(np.float64) @ b
  assert _rel((ta @ tb).numpy().astype(np.float64), ref) < 1e-5
  precision('high')
  assert 1e-6 < _rel((ta @ tb).numpy().astype(np.float64), ref) < 1e-2
