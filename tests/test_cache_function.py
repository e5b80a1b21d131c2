"""Whole functions in the disk cache (tgc.function_cache): a new process that compiles a function an earlier one
compiled loads it (no lowering, the same results), and what the lowered result depends on (the graph, the device's
spec, NOOPT, tgc's source) keys it; a damaged or unusable entry is compiled anew."""
from __future__ import annotations
import json, os, subprocess, sys
import numpy as np
import pytest
import tgc
from tgc import cache, function_cache
from tgc.compiler import compile_module, count_flops
from tgc.parser import parse
from tgc.runtime import get_device, workers
from tgc.target import DeviceSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tgc.__file__)))

MLP = """func.func @main(%x: tensor<{n}x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> (tensor<{n}x8xf32>, tensor<1xf32>) {{
  %m = tensor.matmul %x, %w : tensor<{n}x16xf32>, tensor<16x8xf32> -> tensor<{n}x8xf32>
  %b1 = tensor.reshape %b : tensor<8xf32> -> tensor<1x8xf32>
  %bb = tensor.expand %b1 : tensor<1x8xf32> -> tensor<{n}x8xf32>
  %s = tensor.add %m, %bb : tensor<{n}x8xf32>
  %z = tensor.const 0.0 : tensor<{n}x8xf32>
  %neg = tensor.cmplt %s, %z : tensor<{n}x8xf32> -> tensor<{n}x8xi1>
  %r = tensor.where %neg, %z, %s : tensor<{n}x8xf32>
  %t = tensor.reduce add %r [0, 1] : tensor<{n}x8xf32> -> tensor<1x1xf32>
  %t1 = tensor.reshape %t : tensor<1x1xf32> -> tensor<1xf32>
  func.return %r, %t1 : tensor<{n}x8xf32>, tensor<1xf32>
}}
"""

def _inputs(n):
  rng = np.random.default_rng(n)
  return [rng.standard_normal(s).astype(np.float32) for s in ((n, 16), (16, 8), (8,))]

def _ref(x, w, b):
  r = np.maximum(x @ w + b, 0)
  return r, r.sum(keepdims=True).reshape(1)


@pytest.fixture
def cdir(tmp_path, monkeypatch):
  """A cache directory of the test's own, and the CPU's machine code of this process forgotten: a kernel compiled
  before, under another directory, has no object file in this one, and a function of it would not be kept."""
  from tgc.runtime import cpu
  monkeypatch.setattr(cpu, '_code', {}); monkeypatch.setattr(cpu, '_cache', {})
  monkeypatch.delenv('TGC_CACHE', raising=False)
  monkeypatch.delenv('NOOPT', raising=False)
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path / 'cache'))
  return tmp_path / 'cache'


_RUN = """
import json, sys, numpy as np
sys.path.insert(0, {root!r})
import tgc
from tgc import function_cache
from tgc.runtime import workers
rng = np.random.default_rng({n})
ins = [rng.standard_normal(s).astype(np.float32) for s in (({n}, 16), (16, 8), (8,))]
f = tgc.compile({text!r}, 'CPU')
r, t = f(*ins)
st = workers.STATS
print(json.dumps({{'r': r.tolist(), 't': t.tolist(), 'kernels': st.kernels, 'loaded': st.loaded, 'phases': sorted(st.phases), **function_cache.stats}}))
"""

def _run(n=6, **env):
  e = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]), **env}
  e.pop('DEBUG', None)
  p = subprocess.run([sys.executable, '-c', _RUN.format(root=ROOT, n=n, text=MLP.format(n=n))], env=e, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_the_function_and_lowers_nothing(tmp_path):
  """The first process lowers, compiles and keeps the function; the next loads it (no lower, emit or compile phase,
  every kernel loaded) and computes the same bits, which are numpy's."""
  env = dict(TGC_CACHE_DIR=str(tmp_path), TGC_CACHE='1')
  cold, warm = _run(**env), _run(**env)
  assert cold['loaded'] == 0 and cold['writes'] == 1 and 'lower' in cold['phases'] and cold['kernels'] > 1
  assert warm['hits'] == 1 and warm['writes'] == 0 and warm['loaded'] == warm['kernels'] == cold['kernels']
  assert not {'lower', 'emit', 'compile'} & set(warm['phases'])
  assert warm['r'] == cold['r'] and warm['t'] == cold['t']
  r, t = _ref(*_inputs(6))
  np.testing.assert_allclose(np.array(warm['r'], np.float32), r, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.array(warm['t'], np.float32), t, rtol=1e-4)
  other = _run(n=7, **env)  # (another graph: another entry)
  assert other['hits'] == 0 and other['writes'] == 1 and other['loaded'] == 0
  assert _run(**env, NOOPT='1')['loaded'] == 0  # (another pipeline)
  assert sum(len(fs) for _, _, fs in os.walk(tmp_path / 'function')) == 3


def test_processes_compiling_one_function_at_once(tmp_path):
  """Three processes compile the same function into one cache at the same time: each computes the right values, the
  cache holds one whole entry (no temporary file left behind), and a process after them loads it."""
  e = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]), 'TGC_CACHE_DIR': str(tmp_path), 'TGC_COMPILE_WORKERS': '1'}
  e.pop('TGC_CACHE', None); e.pop('DEBUG', None)
  ps = [subprocess.Popen([sys.executable, '-c', _RUN.format(root=ROOT, n=8, text=MLP.format(n=8))], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
  outs = []
  for p in ps:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    outs.append(json.loads(out.strip().splitlines()[-1]))
  r, t = _ref(*_inputs(8))
  for o in outs:
    np.testing.assert_allclose(np.array(o['r'], np.float32), r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(o['t'], np.float32), t, rtol=1e-4)
  assert len([f for _, _, fs in os.walk(tmp_path / 'function') for f in fs]) == 1
  after = _run(n=8, TGC_CACHE_DIR=str(tmp_path), TGC_CACHE='1')
  assert after['hits'] == 1 and after['r'] == outs[0]['r']


def test_the_cache_off_keeps_no_function(tmp_path):
  env = dict(TGC_CACHE='0', TGC_CACHE_DIR=str(tmp_path))
  assert _run(**env)['loaded'] == 0 and _run(**env)['loaded'] == 0
  assert not any(files for _, _, files in os.walk(tmp_path))


def _compile(n):
  return compile_module(parse(MLP.format(n=n)), 'CPU')

def _check(f, n):
  ins = _inputs(n)
  for got, want in zip(f(*ins), _ref(*ins)): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_loaded_function_runs_and_its_kernels_lower_again_when_asked(cdir):
  """In one process too: the second compile of the text is a load. A loaded kernel's uop.func (which the entry does
  not keep) is the function lowered again, the same as the first compile's; its counts are the stored ones."""
  a = _compile(5)
  h = function_cache.stats['hits']
  b = _compile(5)
  assert function_cache.stats['hits'] == h + 1 and b is not a
  _check(b, 5)
  assert list(b.kernels) == list(a.kernels)
  for name, k in b.kernels.items():
    assert callable(k._fn)  # (not lowered yet)
    assert (k.points, k.flops_per_point) == (a.kernels[name].points, a.kernels[name].flops_per_point)
  k = next(iter(b.kernels.values()))
  assert str(k.fn) == str(a.kernels[k.name].fn) and count_flops(k.fn) == k.flops_per_point
  assert k.program.fn is k.fn or str(k.program.fn) == str(k.fn)


def test_a_loaded_function_on_another_device_of_its_kind(cdir):
  _compile(10)
  b = _compile(10)
  c = b.on_device('CPU:1')
  assert c.device == 'CPU:1' and all(callable(k._fn) for k in c.kernels.values())  # (its binaries, not its kernels' bodies)
  _check(c, 10)


def test_a_damaged_entry_is_compiled_anew(cdir):
  _compile(11)
  path, = cache.entries('function')
  data = open(path, 'rb').read()
  open(path, 'wb').write(data[:len(data) // 2])  # (cut short: the checksum fails)
  w, h = function_cache.stats['writes'], function_cache.stats['hits']
  _check(_compile(11), 11)
  assert function_cache.stats['writes'] == w + 1 and function_cache.stats['hits'] == h
  assert open(path, 'rb').read() == data  # (written again, whole)


@pytest.mark.parametrize('n, damage', enumerate([
  lambda d: b'\xff' * 8 + d[8:],                                          # a header length past the end
  lambda d: d[:8] + d[8:].replace(b'"kernels"', b'"kernelz"', 1),         # a header this code does not read
  lambda d: d[:-10],                                                      # parts cut short
  lambda d: d + b'more',                                                  # parts too long
  lambda d: d.replace(b'"symbols": ["', b'"symbols": ["x', 1)], 12))    # a kernel symbol its object does not define
def test_an_unusable_entry_is_compiled_anew(cdir, n, damage):
  """An entry whose checksum is right but whose content this code cannot use (another writer's bug, a format change
  the key missed) is a miss: the function compiles and runs right, and the entry is written anew."""
  _compile(n)
  path, = cache.entries('function')
  k = os.path.basename(path)
  good = cache.get('function', k)
  cache.put('function', k, damage(good))
  u, w = function_cache.stats['unusable'], function_cache.stats['writes']
  _check(_compile(n), n)
  assert function_cache.stats['unusable'] == u + 1 and function_cache.stats['writes'] == w + 1
  assert cache.get('function', k) == good


def test_the_key_takes_what_the_lowering_depends_on(cdir, monkeypatch):
  dev = get_device('CPU')
  spec = DeviceSpec.of(dev.spec, device='CPU')
  text = MLP.format(n=3)
  k = function_cache.key(text, None, spec, dev)
  assert k == function_cache.key(text, None, spec, dev)
  others = [function_cache.key(MLP.format(n=4), None, spec, dev), function_cache.key(text.replace('0.0', '1.0'), None, spec, dev),
            function_cache.key(text, '@main', spec, dev)]
  others += [function_cache.key(text, None, DeviceSpec.of(spec, **kw), dev) for kw in ({'processor': 'gpu'}, {'cpu': 'sse'}, {'local_memory': 1024}, {'device': 'CPU:1'})]
  monkeypatch.setenv('NOOPT', '1')
  others.append(function_cache.key(text, None, spec, dev))
  monkeypatch.delenv('NOOPT')
  monkeypatch.setattr(function_cache, '_source_id', 'an edited tgc')
  others.append(function_cache.key(text, None, spec, dev))
  monkeypatch.setattr(function_cache, '_source_id', None)
  monkeypatch.setattr(type(dev), 'binary_id', lambda self: 'another CPU')
  others.append(function_cache.key(text, None, spec, dev))
  assert len({k, *others}) == len(others) + 1


def test_nan_payloads_are_part_of_the_key():
  """The text prints every NaN as `nan`; the key takes their bits too (the code keeps a NaN's sign and payload)."""
  import struct
  text = "func.func @main(%a: tensor<4xf64>) -> tensor<4xf64> {\n  %c = tensor.const nan : tensor<4xf64>\n  %r = tensor.add %a, %c : tensor<4xf64>\n  func.return %r : tensor<4xf64>\n}\n"
  a, b = parse(text), parse(text)
  const = next(op for op in b.walk() if op.name == 'tensor.const')
  const.attrs['value'] = struct.unpack('<d', struct.pack('<Q', 0xfff8000000000123))[0]
  assert a.print() == b.print() and function_cache.nan_bits(a) != function_cache.nan_bits(b)
  assert function_cache.nan_bits(parse(text.replace('nan', '1.5'))) == ''


def test_source_id_changes_with_a_source_file(tmp_path, monkeypatch):
  """source_id hashes tgc's own files: an edit anywhere in the package is another id."""
  import shutil
  pkg = tmp_path / 'tgc'
  shutil.copytree(os.path.dirname(tgc.__file__), pkg, ignore=shutil.ignore_patterns('__pycache__'))
  def sid():
    monkeypatch.setattr(function_cache, '_source_id', None)
    monkeypatch.setattr(function_cache, '__file__', str(pkg / 'function_cache.py'))
    return function_cache.source_id()
  a = sid()
  assert sid() == a
  with open(pkg / 'passes' / 'kernel_opt.py', 'a') as f: f.write('\n# an edit\n')
  assert sid() != a


def test_debug_3_compiles(cdir, monkeypatch, capsys):
  """DEBUG >= 3 prints the stages a compile goes through: it compiles even where the function is kept."""
  _compile(4)
  monkeypatch.setenv('DEBUG', '3')
  loaded = workers.STATS.loaded
  _check(_compile(4), 4)
  assert workers.STATS.loaded == loaded and 'kernel.func' in capsys.readouterr().out


def test_cuda_programs_save_and_load_without_a_gpu(monkeypatch):
  """CUDADevice.save_programs and load_programs (the driver's part stubbed): each module's cubin once, every kernel
  back in the module that held it, with its launch facts and shared memory, its uop.func not asked for."""
  import ctypes
  from tgc.runtime import cuda as cuda_rt
  from tgc.runtime.cuda import CUDADevice
  from tests.test_target_cuda import all_kernels
  fns = all_kernels().functions('uop.func')[:6]
  fns[2].attrs['contract'] = True
  monkeypatch.setenv('TGC_COMPILE_WORKERS', '2')
  monkeypatch.setattr(cuda_rt, 'compile_cuda', lambda src, arch, fmad=False, compiler=None: f"cubin {arch} {fmad} {hash(src)}".encode())
  def stub():
    dev = CUDADevice.__new__(CUDADevice)
    dev.arch, dev._modules, dev._cubins, dev.local_memory = 'sm_90', {}, {}, 1 << 16
    def module(src, fmad=False, cubin=None):
      m = ctypes.c_void_p(len(dev._cubins) + 1)
      dev._cubins[m.value] = cubin if cubin is not None else cuda_rt.compile_cuda(src, dev.arch, fmad)
      return m
    dev.module, dev.function = module, lambda m, name: (m.value, name)
    return dev
  a = stub()
  progs = a.compile_all(fns)
  meta, blobs = a.save_programs(progs)
  assert len(blobs) == len({p.module.value for p in progs}) and len(set(blobs)) == len(blobs)
  meta = json.loads(json.dumps(meta))  # (what the entry's header keeps)
  b = stub()
  asked = []
  thunks = [lambda f=f: asked.append(f) or f for f in fns]
  back = b.load_programs(thunks, [p.info for p in progs], meta, blobs)
  assert not asked
  for p, q in zip(progs, back):
    assert q.info == p.info and q.shared == p.shared and b._cubins[q.func[0]] == a._cubins[p.func[0]] and q.func[1] == p.name
  assert back[0].fn is fns[0] and asked == [fns[0]]
