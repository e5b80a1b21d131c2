"""The example programs (examples/*.tgc) through tgc-run (a subprocess, as a user runs it): the numbers match
numpy, and DEBUG=2 shows the kernel counts tinygrad's NOOPT=1 gives."""
import os, re, subprocess, sys
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, 'examples')
RNG = np.random.default_rng(0)

def tgc_run(args, env=None, tmp=None):
  e = dict(os.environ, **(env or {}))
  p = subprocess.run([sys.executable, '-c', 'from tgc.driver import run_entry; run_entry()', *args], capture_output=True, text=True, env=e, timeout=120)
  return p

def save(tmp_path, **arrays):
  out = []
  for k, v in arrays.items():
    f = tmp_path / f"{k}.npy"; np.save(f, v); out += ['--input', f"{k}={f}"]
  return out

CASES = {
  'dot.tgc': (lambda: dict(a=np.array([1, 2], np.int32), b=np.array([3, 4], np.int32)), lambda a, b: np.array(11), 1),
  'add.tgc': (lambda: dict(a=RNG.standard_normal((4, 4)).astype(np.float32), b=RNG.standard_normal((4, 4)).astype(np.float32)), lambda a, b: a + b, 1),
  'muladd.tgc': (lambda: dict(a=RNG.standard_normal((4, 4)).astype(np.float32), b=RNG.standard_normal((4, 4)).astype(np.float32),
                              c=RNG.standard_normal((4, 4)).astype(np.float32)), lambda a, b, c: a * b + c, 1),
  'sum0.tgc': (lambda: dict(a=RNG.standard_normal((4, 4)).astype(np.float32)), lambda a: a.sum(0), 1),
  'softmax.tgc': (lambda: dict(x=RNG.standard_normal((4, 8)).astype(np.float32)),
                  lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True), 1),
}

@pytest.mark.parametrize("device", ["CPU", "INTERP", "C"])
@pytest.mark.parametrize("name", list(CASES))
def test_example(name, device, tmp_path):
  make, ref, kernels = CASES[name]
  ins = make()
  out = tmp_path / 'out'
  p = tgc_run([os.path.join(EX, name), f'--device={device}', '--output', str(out)] + save(tmp_path, **ins), env={'NOOPT': '1', 'DEBUG': '2'})
  assert p.returncode == 0, p.stderr
  got = np.load(out / 'result0.npy')
  np.testing.assert_allclose(got, ref(**ins), rtol=1e-5, atol=1e-6)
  launches = re.findall(r'^\*\*\* \S+\s+\d+ (\S+)', p.stderr, re.M)
  assert len(launches) == kernels, p.stderr
  if name == 'dot.tgc': assert launches == ['r_2'] and p.stdout.strip() == '11'

def test_random_inputs_are_said_and_seeded(tmp_path):
  p1 = tgc_run([os.path.join(EX, 'add.tgc'), '--seed', '3'])
  p2 = tgc_run([os.path.join(EX, 'add.tgc'), '--seed', '3'])
  assert p1.returncode == 0 and p1.stdout == p2.stdout
  assert 'input %a: random tensor<4x4xf32> (seed 3)' in p1.stderr

def test_debug_levels(tmp_path):
  base = [os.path.join(EX, 'dot.tgc')] + save(tmp_path, a=np.array([1, 2], np.int32), b=np.array([3, 4], np.int32))
  d4 = tgc_run(base, env={'NOOPT': '1', 'DEBUG': '4'}).stderr
  assert 'define void @r_2(' in d4 and 'kernel.func @r_2' in d4 and 'uop.func' not in d4
  d5 = tgc_run(base, env={'NOOPT': '1', 'DEBUG': '5'}).stderr
  assert 'uop.func @r_2()' in d5 and 'uop.define_acc' in d5

def test_run_errors(tmp_path):
  p = tgc_run([os.path.join(EX, 'dot.tgc'), '--input', f"zz={tmp_path / 'nope.npy'}"])
  assert p.returncode == 1 and 'cannot load' in p.stderr and 'Traceback' not in p.stderr
  np.save(tmp_path / 'bad.npy', np.zeros(3, np.int32))
  p = tgc_run([os.path.join(EX, 'dot.tgc'), '--input', f"a={tmp_path / 'bad.npy'}"])
  assert p.returncode == 1 and 'shape (3,)' in p.stderr and 'Traceback' not in p.stderr
  p = tgc_run([os.path.join(EX, 'dot.tgc'), '--device=NOPE'])
  assert p.returncode == 1 and "unknown device 'NOPE'" in p.stderr
  p = tgc_run([os.path.join(EX, 'dot.tgc'), '--entry=@missing'])
  assert p.returncode == 1 and "no func.func named '@missing'" in p.stderr
