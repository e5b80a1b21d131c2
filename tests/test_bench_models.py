"""bench/models.py's rows in their tiny config on the CPU: tgc, started from torch's initial weights, gives torch's
losses step by step (a GPT training step in float32 and in bfloat16 mixed precision, a ResNet-style CNN with
BatchNorm) and torch's greedy tokens through its KV cache; the script's table comes out, and a bad row is said."""
from __future__ import annotations
import importlib.util, os, subprocess, sys
import numpy as np
import pytest
import tgc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location('bench_models', os.path.join(ROOT, 'bench', 'models.py'))
bm = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(bm)
CFG, STEPS = bm.CONFIGS['tiny'], 4


@pytest.fixture(autouse=True)
def _on_cpu():
  old = tgc.Device._default
  tgc.Device.DEFAULT = 'CPU'  # (the models' layers are made on the default device)
  yield
  tgc.Device._default = old


@pytest.mark.parametrize('config', ['tiny', 'odd'])
@pytest.mark.parametrize('row', ['train', 'train-bf16', 'resnet'])
def test_training_losses_match_torch(row, config):
  cfg = bm.CONFIGS[config]  # (odd: sizes no tile divides, a head of 40)
  r, t, call, _ = bm.row_resnet(cfg, 'CPU', 'cpu', STEPS) if row == 'resnet' else bm.row_train(cfg, 'CPU', 'cpu', STEPS, row == 'train-bf16')
  assert len(r['losses']) == len(t['losses']) == STEPS
  # the losses fall (the steps update the weights) and follow torch's, step by step
  assert t['losses'][-1] < t['losses'][0]
  np.testing.assert_allclose(r['losses'], t['losses'], rtol=3e-3 if row == 'train-bf16' else 1e-4)
  assert r['first'] > 0 and r['step'] > 0 and r['peak'] > 0
  assert float(call().item()) == pytest.approx(t['losses'][-1], rel=0.2)  # (the call the kernel table profiles: one more step)


@pytest.mark.parametrize('config', ['tiny', 'odd'])
def test_generated_tokens_match_torch(config):
  cfg = bm.CONFIGS[config]
  out = bm.row_generate(cfg, 'CPU', 'cpu', 2)
  assert sorted(out) == sorted(cfg['gen_batches'])
  for B, (r, t, _) in out.items():
    assert r['tokens'].shape == t['tokens'].shape == (B, cfg['new'])
    np.testing.assert_array_equal(r['tokens'], t['tokens'])
    assert len(np.unique(t['tokens'])) > 1  # (a constant sequence would hide a cache that is not read)


def test_script_prints_the_table_and_refuses_an_unknown_row():
  env = dict(os.environ, PYTHONPATH=ROOT)
  p = subprocess.run([sys.executable, os.path.join(ROOT, 'bench', 'models.py'), '--config', 'tiny', '--rows', 'generate', '--steps', '2', '--top', '3'],
                     capture_output=True, text=True, env=env, timeout=600)
  assert p.returncode == 0, p.stderr[-3000:]
  assert '| generate b1 (4+6) | tokens/s |' in p.stdout and 'tokens equal' in p.stdout and '| kernel | count | ms |' in p.stdout
  p = subprocess.run([sys.executable, os.path.join(ROOT, 'bench', 'models.py'), '--rows', 'train,bogus'], capture_output=True, text=True, env=env, timeout=120)
  assert p.returncode == 2 and 'unknown row bogus' in p.stderr and 'Traceback' not in p.stderr


def test_kv_cache_decode_gives_the_full_forward_logits():
  """examples/gpt_train.py's GPT through its KVCache (a prompt, then one token a step, the position a device
  tensor, the step jitted) gives, at every position, torch's logits of the whole sequence so far without a cache."""
  import torch
  from tgc import Tensor
  g = CFG['gpt']
  torch.manual_seed(0)
  tm = bm.torch_gpt(g['vocab'], g['seq'], g['d'], g['layers'], g['heads']).eval()
  model = bm.GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'])
  bm.copy_weights(model, tm, 'CPU')
  B, P, N = 2, 3, 6
  seq = np.random.default_rng(2).integers(0, g['vocab'], (B, P + N)).astype(np.int32)
  with torch.no_grad(): want = tm(torch.tensor(seq, dtype=torch.long)).numpy()
  cache = model.cache(B, P + N, 'CPU')
  step = Tensor.jit(lambda tok, pos: model(tok, cache, pos).realize())
  got = [step(Tensor(seq[:, :P]), Tensor(np.zeros(1, np.int32))).numpy()]
  got += [step(Tensor(seq[:, i:i + 1]), Tensor(np.full(1, i, np.int32))).numpy() for i in range(P, P + N)]
  np.testing.assert_allclose(np.concatenate(got, 1), want, rtol=1e-3, atol=3e-4)
  assert len(step.cache) == 2  # the prompt's step and one decode step for every position


def test_bf16_model_rounds_as_autocast():
  """The GPT with dtype='bfloat16' computes in bfloat16 (its logits are not the float32 model's) and within bfloat16's
  rounding of torch.autocast's logits from the same weights."""
  import torch
  from tgc import Tensor
  g = dict(vocab=32, seq=16, d=32, layers=2, heads=2)
  torch.manual_seed(0)
  tm = bm.torch_gpt(**g)
  x = np.random.default_rng(0).integers(0, g['vocab'], (2, 16)).astype(np.int32)
  with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16): want = tm(torch.tensor(x, dtype=torch.long)).float().numpy()
  got = {}
  for dt in (None, 'bfloat16'):
    m = bm.GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'], dtype=dt)
    bm.copy_weights(m, tm, 'CPU')
    got[dt] = m(Tensor(x)).numpy()
  assert got['bfloat16'].dtype == np.float32 and np.abs(got['bfloat16'] - got[None]).max() > 1e-3
  np.testing.assert_allclose(got['bfloat16'], want, atol=3e-2)


def test_memory_script_accounts_for_the_allocators_peak():
  """bench/memory.py's account of a jitted GPT step: the allocator's peak over a replayed step is what was in use
  before it plus the peak of the step's plan (its blocks by liveness), and bytes in use come back to where they were."""
  spec = importlib.util.spec_from_file_location('bench_memory', os.path.join(ROOT, 'bench', 'memory.py'))
  mem = importlib.util.module_from_spec(spec); spec.loader.exec_module(mem)
  from tgc import Tensor
  from tgc.nn import optim
  from tgc.nn.state import get_parameters
  from examples.gpt_train import GPT, train_step
  g = CFG['gpt']
  model = GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'])
  opt = optim.AdamW(get_parameters(model), lr=1e-3)
  data = np.random.default_rng(0).integers(0, g['vocab'], (g['batch'], g['seq'] + 1)).astype(np.int32)
  x, y = Tensor(data[:, :-1]).realize(), Tensor(data[:, 1:]).realize()
  step = train_step(model, opt)
  step(x, y).item()
  al = tgc.Device['CPU'].allocator
  base = al.peak = al.in_use
  step(x, y).item()
  (cf,) = [e[1] for e in next(iter(step.cache.values())).log if e[0] == 'realize']
  peak, _, live = mem.plan_peak(cf)
  assert al.peak == base + peak and peak == sum(nb for nb, _, _ in live.values()) > 0
  assert al.in_use == base
  assert mem.main(['--config', 'tiny', '--steps', '2', '--top', '3']) == 0
