"""The compile path's machinery: the disk cache of binaries (tgc.cache: where it lives, TGC_CACHE=0, damaged entries,
concurrent processes), the compile workers (tgc.runtime.workers: results in order whatever the order of finishing,
errors reported), the progress line and DEBUG=1's phases."""
from __future__ import annotations
import io, os, subprocess, sys
import numpy as np
import pytest
import tgc
from tgc import cache
from tgc.runtime import workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tgc.__file__)))


@pytest.fixture
def cdir(tmp_path, monkeypatch):
  monkeypatch.delenv('TGC_CACHE', raising=False)
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path / 'cache'))
  return tmp_path / 'cache'


def test_location_from_the_environment(tmp_path, monkeypatch):
  monkeypatch.delenv('TGC_CACHE', raising=False); monkeypatch.delenv('TGC_CACHE_DIR', raising=False)
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert cache.cache_dir() == str(tmp_path / 'xdg' / 'tgc')
  monkeypatch.delenv('XDG_CACHE_HOME'); monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  assert cache.cache_dir() == str(tmp_path / 'home' / '.cache' / 'tgc')
  monkeypatch.setenv('TGC_CACHE', str(tmp_path / 'legacy'))  # (a directory in TGC_CACHE: the older spelling)
  assert cache.cache_dir() == str(tmp_path / 'legacy')
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path / 'over'))
  assert cache.cache_dir() == str(tmp_path / 'over') and os.path.isdir(tmp_path / 'over')
  monkeypatch.setenv('TGC_CACHE', '0')
  assert cache.cache_dir() is None
  cache.put('llvm', cache.key('x'), b'data')
  assert cache.get('llvm', cache.key('x')) is None and not os.listdir(tmp_path / 'over')


def test_unwritable_directory_turns_the_cache_off(tmp_path, monkeypatch):
  (tmp_path / 'file').write_text('not a directory')
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path / 'file' / 'cache'))
  assert cache.cache_dir() is None
  cache.put('c', cache.key('x'), b'data')  # (no error)
  assert cache.get('c', cache.key('x')) is None


def test_key_takes_every_part_and_tgc_version(monkeypatch):
  k = cache.key('src', 'sm_90a', 'nvrtc 12.4')
  assert k == cache.key('src', 'sm_90a', 'nvrtc 12.4')
  assert len({k, cache.key('src', 'sm_90', 'nvrtc 12.4'), cache.key('src', 'sm_90a', 'nvrtc 12.5'), cache.key('sr', 'csm_90a', 'nvrtc 12.4')}) == 4
  monkeypatch.setattr(tgc, '__version__', tgc.__version__ + '.dev1')
  assert cache.key('src', 'sm_90a', 'nvrtc 12.4') != k


def test_damaged_entry_is_ignored_and_rewritten(cdir):
  k = cache.key('some source')
  cache.put('llvm', k, b'\x7fELF object bytes')
  assert cache.get('llvm', k) == b'\x7fELF object bytes'
  path, = cache.entries('llvm')
  for damage in (lambda b: b[:-3], lambda b: b[:10], lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:], lambda b: b''):
    data = open(path, 'rb').read() if os.path.exists(path) else None
    cache.put('llvm', k, b'\x7fELF object bytes')
    data = open(path, 'rb').read()
    open(path, 'wb').write(damage(data))
    n = cache.stats['corrupt']
    assert cache.get('llvm', k) is None and cache.stats['corrupt'] == n + 1 and not os.path.exists(path)
  cache.put('llvm', k, b'new')
  assert cache.get('llvm', k) == b'new'


_CPU_RUN = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
from test_llvm import _scaled, fn_of
from tgc.runtime import get_device, cpu
progs = get_device('CPU').compile_all([fn_of(_scaled(f'k{{i}}', 16, k=1.5 + i)) for i in range({n})])
x = np.arange(16, dtype=np.float32)
for i, p in enumerate(progs):
  out = np.zeros(16, np.float32); p(out, x); assert np.array_equal(out, x * np.float32(1.5 + i))
print(cpu.stats['compiles'], cpu.stats['disk_hits'])
"""

def _run_cpu(env, n=3):
  return subprocess.Popen([sys.executable, '-c', _CPU_RUN.format(tests=os.path.dirname(__file__), n=n)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def _env(**kw):
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]), **kw}
  return env


def test_cpu_kernels_with_the_cache_off(tmp_path):
  env = _env(TGC_CACHE='0', TGC_CACHE_DIR=str(tmp_path), HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path))
  for _ in range(2):
    p = _run_cpu(env); out, err = p.communicate()
    assert p.returncode == 0, err
    assert out.split() == ['3', '0']  # (compiled each time: nothing kept)
  assert not any(files for _, _, files in os.walk(tmp_path))


def test_concurrent_processes_share_the_cache(tmp_path):
  """Four processes compile the same kernels into one cache at once: every one gets working kernels, the cache ends
  with one whole entry per kernel, and a process after them compiles nothing."""
  env = _env(TGC_CACHE_DIR=str(tmp_path), TGC_COMPILE_WORKERS='1')
  env.pop('TGC_CACHE', None)
  ps = [_run_cpu(env, 6) for _ in range(4)]
  for p in ps:
    out, err = p.communicate()
    assert p.returncode == 0, err
  p = _run_cpu(env, 6); out, err = p.communicate()
  assert out.split() == ['0', '6'], err
  assert len([f for _, _, fs in os.walk(tmp_path / 'llvm') for f in fs]) == 6  # (no temporary file left behind)


_WRITER = """
import os, sys
sys.path.insert(0, {root!r})
from tgc import cache
data = {{i: bytes([i]) * (100000 + i) for i in range(8)}}
for r in range(40):
  for i in range(8):
    k = cache.key('entry', str(i))
    got = cache.get('blob', k)
    assert got is None or got == data[i], (i, len(got))
    cache.put('blob', k, data[i])
print('ok')
"""

def test_concurrent_writers_and_readers_never_see_part_of_an_entry(tmp_path):
  env = _env(TGC_CACHE_DIR=str(tmp_path))
  env.pop('TGC_CACHE', None)
  ps = [subprocess.Popen([sys.executable, '-c', _WRITER.format(root=ROOT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
  for p in ps:
    out, err = p.communicate()
    assert p.returncode == 0 and out.strip() == 'ok', err


def test_c_library_entry_that_does_not_load_is_rebuilt(cdir, monkeypatch):
  from tgc.runtime import c
  monkeypatch.setattr(c, '_libs', {})
  src = "int tgc_cache_probe_c(void) { return 41; }\n"
  assert c.compile_c(src).tgc_cache_probe_c() == 41
  path, = cache.entries('c')
  k = os.path.basename(path)
  cache.put('c', k, b'whole, but no library')  # (its checksum is right: only loading finds it out)
  monkeypatch.setattr(c, '_libs', {})
  assert c.compile_c(src).tgc_cache_probe_c() == 41
  assert cache.get('c', k).startswith(b'\x7fELF')


def _square(i, base): return (base + i) ** 2
def _fail(i):
  if i == 3: raise tgc.TgcError("kernel 3 does not compile")
  return i

@pytest.mark.parametrize('n_workers', ['1', '2', '3'])
def test_workers_return_results_in_order(monkeypatch, n_workers):
  monkeypatch.setenv('TGC_COMPILE_WORKERS', n_workers)
  seen = []
  # (costliest first: the order of running differs from the order of results)
  assert workers.run(_square, 9, (10,), cost=lambda i: i % 4, done=lambda i, dt: seen.append(i)) == [(10 + i) ** 2 for i in range(9)]
  assert sorted(seen) == list(range(9))
  with pytest.raises(tgc.TgcError, match='kernel 3'): workers.run(_fail, 6)


def test_progress_line_on_stderr(monkeypatch):
  err = io.StringIO()
  monkeypatch.setattr(sys, 'stderr', err)
  p = workers.Progress(debug=0)
  p.AFTER = 0
  p.phase('compile', 3); p.step(); p.close()
  assert err.getvalue() == ''  # (not a terminal, DEBUG=0: nothing)
  p = workers.Progress(debug=1)
  p.AFTER = 0
  p.phase('compile', 3); p.step(); p.step(); p.step(); p.close()
  lines = err.getvalue().splitlines()
  assert lines[0].startswith('tgc: compile 0/3 kernels') and lines[-1].startswith('tgc: compile 3/3 kernels')


def test_debug_prints_the_phases(cdir, monkeypatch):
  monkeypatch.setenv('DEBUG', '1')
  out = io.StringIO()
  from tgc.compiler import compile_module
  from tgc.parser import parse
  m = parse("func.func @main(%a: tensor<4x8xf32>) -> tensor<4x1xf32> {\n  %r = tensor.reduce add %a [1] : tensor<4x8xf32> -> tensor<4x1xf32>\n  func.return %r : tensor<4x1xf32>\n}\n")
  f = compile_module(m, 'CPU', out=out)
  x = np.arange(32, dtype=np.float32).reshape(4, 8)
  np.testing.assert_array_equal(f(x)[0], x.sum(1, keepdims=True))
  line = next(l for l in out.getvalue().splitlines() if 'compiled in' in l)
  assert all(w in line for w in ('lower', 'emit', 'compile'))


def _pid(i): return os.getpid()

def test_small_batches_stay_in_this_process(monkeypatch):
  """Below min_cost a batch runs here (starting processes would cost more than it saves); above it, on the workers."""
  monkeypatch.setenv('TGC_COMPILE_WORKERS', '2')
  assert set(workers.run(_pid, 4, cost=lambda i: 10, min_cost=100)) == {os.getpid()}
  assert os.getpid() not in workers.run(_pid, 4, cost=lambda i: 30, min_cost=100)


_LAYERS = """func.func @main(%x: tensor<8x16xf32>, %w1: tensor<16x16xf32>, %w2: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %a = tensor.matmul %x, %w1 : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
  %b = tensor.exp2 %a : tensor<8x16xf32>
  %c = tensor.matmul %b, %w2 : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
  %d = tensor.exp2 %c : tensor<8x16xf32>
  func.return %d : tensor<8x16xf32>
}
"""

@pytest.mark.parametrize('n_workers', ['1', '2'])
def test_kernels_of_one_body_compile_once(cdir, monkeypatch, n_workers):
  """Two layers' kernels differ only in their names: on the compile workers they are lowered and compiled once and
  share a program; the result is numpy's, and a new process's load of the function from the disk cache (each
  kernel under the name the host calls) gives it again. On one worker every kernel compiles in this process."""
  monkeypatch.setenv('TGC_COMPILE_WORKERS', n_workers)
  from tgc.compiler import compile_module
  from tgc.parser import parse
  rng = np.random.default_rng(1)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((8, 16), (16, 16), (16, 16)))
  want = np.exp2(np.exp2(x @ w1) @ w2)
  st = workers.STATS
  c0 = st.compiled
  f = compile_module(parse(_LAYERS), 'CPU')
  np.testing.assert_allclose(f(x, w1, w2)[0], want, rtol=1e-5)
  names = sorted(map(str, f.kernels))
  assert len(names) == 2
  if n_workers == '2':
    assert st.compiled - c0 == 1 and f.kernels[names[0]].program is f.kernels[names[1]].program
  code = f"""
import numpy as np, tgc
from tgc import function_cache
from tgc.compiler import compile_module
from tgc.parser import parse
f = compile_module(parse({_LAYERS!r}), 'CPU')
print(function_cache.stats['hits'], sorted(map(str, f.kernels)) == {names!r}, np.abs(f(*[np.load(p) for p in {[str(cdir / f'{n}.npy') for n in ('x', 'w1', 'w2')]!r}])[0] - np.load({str(cdir / 'want.npy')!r})).max())
"""
  for n, a in (('x', x), ('w1', w1), ('w2', w2), ('want', want)): np.save(cdir / f'{n}.npy', a)
  p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
  out = p.stdout.split()
  assert out[:2] == ['1', 'True'] and float(out[2]) < 1e-4, p.stderr[-2000:]


def test_workers_fork_from_a_process_that_has_lowered_once(cdir, monkeypatch):
  """Before the first batch the compile workers take for a spec, this process lowers one of its kernels to the uop
  level and renders it (once a spec): the workers forked after find the passes' and the emitter's modules imported,
  where each worker of each batch imported them before its first share. The function's results stay numpy's."""
  monkeypatch.setenv('TGC_COMPILE_WORKERS', '2')
  from tgc import compiler
  from tgc.compiler import compile_module
  from tgc.parser import parse
  from tgc.runtime import get_device
  monkeypatch.setattr(compiler, '_warmed', set())
  rng = np.random.default_rng(2)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((8, 16), (16, 16), (16, 16)))
  f = compile_module(parse(_LAYERS), 'CPU')
  np.testing.assert_allclose(f(x, w1, w2)[0], np.exp2(np.exp2(x @ w1) @ w2), rtol=1e-5)
  assert compiler._warmed == {get_device('CPU').spec.options()}
  # a function without kernels (its result is its argument) has nothing to lower first
  monkeypatch.setattr(compiler, '_warmed', set())
  g = compile_module(parse('func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n'), 'CPU')
  np.testing.assert_array_equal(g(np.arange(4, dtype=np.float32))[0], np.arange(4, dtype=np.float32))
  assert not g.kernels and compiler._warmed == set()
