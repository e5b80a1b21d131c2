"""Whole models beside torch in one process, as a user runs them: tgc's Tensor API and tgc.nn, the step jitted, the
inputs already on the device, a synchronize before and after each timed call.

    python bench/models.py --device CUDA                      # the GPU machine: torch on cuda
    python bench/models.py --config tiny                      # small shapes, on the CPU (torch on the CPU too)
    python bench/models.py --config odd                       # small sizes no tile divides (a head of 40), on the CPU
    python bench/models.py --rows train,generate --steps 30

The rows (--rows, comma-separated):
  train       a GPT-style training step (examples/gpt_train.py's model: 4 layers, d 384, 6 heads, seq 256, batch 16,
              vocabulary 256; causal attention, GELU MLP, LayerNorm; AdamW), float32
  train-bf16  the same in mixed precision: float32 weights, the matmuls, attention and GELU in bfloat16 (tgc: casts in
              the model, as torch.autocast places them; torch: torch.autocast)
  train-bf16-written  the same with tgc's attention written out (softmax(q k^T / sqrt(d) masked by a tril) v, as
              models spell it: the compiler fuses it); torch as in train-bf16 (its scaled_dot_product_attention)
  generate    greedy generation with a KV cache: a prompt of 32 tokens, then 64 new ones, at batch 1 and 16. tgc's
              cache is fixed-size buffers written in place at a position held in a device tensor, so one jitted
              decode step replays for every token; torch slices its buffers at a Python position, as its users do
  resnet      a ResNet-style CNN training step (a stem and three residual blocks with BatchNorm, global average
              pooling, a linear head; SGD with momentum): batch 64 of 3x32x32, 10 classes
Every row starts tgc from torch's initial weights (copied) on the same data. A training row's steps/s is the median of
its steps after the first (each synchronized), its first step (the compile) timed apart, its losses after --steps
steps checked against torch's; the generated tokens must equal torch's. Peak memory: the device allocator's high
water mark over the row, bytes in use (tgc's allocator, torch.cuda.max_memory_allocated; none for torch on the CPU);
a training row's torch floor is what no step can do without, on any device: parameters, gradients, optimizer state
and the activations torch's autograd saves (torch_floor). After each row,
where tgc's time goes in one call: tgc.compiler.profile's kernels (each launch timed alone), the largest first.
torch runs with its defaults: on cuda its cuDNN convolves float32 in TF32 (the resnet row; tgc keeps float32), its
float32 matmuls stay float32. On a CPU both run on one thread (CPU_THREADS sets both).
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor, nn
from tgc.compiler import profile
from tgc.nn import optim
from tgc.nn.state import get_parameters, get_state_dict, load_state_dict
from examples.gpt_train import GPT, train_step

CONFIGS = {
  'default': dict(gpt=dict(layers=4, d=384, heads=6, seq=256, batch=16, vocab=256), prompt=32, new=64, gen_batches=(1, 16),
                  cnn=dict(batch=64, size=32, width=32, classes=10), steps=20),
  'tiny': dict(gpt=dict(layers=1, d=16, heads=2, seq=16, batch=2, vocab=32), prompt=4, new=6, gen_batches=(1, 2),
               cnn=dict(batch=4, size=8, width=4, classes=5), steps=6),
  # sizes no tile divides (a head of 40, 9 tokens, 17 words, 7x7 images of 5 channels): the padded and cut tiles
  'odd': dict(gpt=dict(layers=1, d=40, heads=1, seq=9, batch=3, vocab=17), prompt=3, new=5, gen_batches=(1, 3),
              cnn=dict(batch=3, size=7, width=5, classes=3), steps=6),
}
ROWS = ('train', 'train-bf16', 'train-bf16-written', 'generate', 'resnet')
TOL = {'train': 1e-3, 'train-bf16': 3e-2, 'train-bf16-written': 3e-2, 'resnet': 1e-3}  # relative, on the losses


# ---- torch's models, their parameters named as tgc's so that weights copy by name
def torch_gpt(vocab: int, seq: int, d: int, layers: int, heads: int):
  import torch
  F = torch.nn

  class Attention(F.Module):
    def __init__(self):
      super().__init__()
      self.qkv, self.proj = F.Linear(d, 3 * d), F.Linear(d, d)
    def forward(self, x, cache=None, pos=0):
      b, t, _ = x.shape
      q, k, v = [y.reshape(b, t, heads, d // heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=2)]
      if cache is not None:
        kc, vc = cache
        kc[:, :, pos:pos + t], vc[:, :, pos:pos + t] = k, v
        k, v = kc[:, :, :pos + t], vc[:, :, :pos + t]
      a = F.functional.scaled_dot_product_attention(q, k, v, is_causal=t > 1)  # (t > 1 only for the prompt, at 0)
      return self.proj(a.transpose(1, 2).reshape(b, t, d))

  class Block(F.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.attn, self.ln2 = F.LayerNorm(d), Attention(), F.LayerNorm(d)
      self.fc, self.out = F.Linear(d, 4 * d), F.Linear(4 * d, d)
    def forward(self, x, cache=None, pos=0):
      x = x + self.attn(self.ln1(x), cache, pos)
      return x + self.out(F.functional.gelu(self.fc(self.ln2(x))))

  class Model(F.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos = F.Embedding(vocab, d), F.Embedding(seq, d)
      self.blocks = F.ModuleList(Block() for _ in range(layers))
      self.ln, self.head = F.LayerNorm(d), F.Linear(d, vocab, bias=False)
    def forward(self, idx, caches=None, pos=0):
      x = self.tok(idx) + self.pos(torch.arange(pos, pos + idx.shape[1], device=idx.device)[None])
      for i, blk in enumerate(self.blocks): x = blk(x, None if caches is None else caches[i], pos)
      return self.head(self.ln(x))
  return Model()


class ResBlock:
  def __init__(self, cin: int, cout: int, stride: int):
    self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
    self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
    self.down = [nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)] if stride != 1 or cin != cout else []
  def __call__(self, x: Tensor) -> Tensor:
    y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
    return (y + (self.down[1](self.down[0](x)) if self.down else x)).relu()


class ResNet:
  def __init__(self, width: int, classes: int):
    w = width
    self.stem, self.bn = nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w)
    self.blocks = [ResBlock(w, w, 1), ResBlock(w, 2 * w, 2), ResBlock(2 * w, 4 * w, 2)]
    self.fc = nn.Linear(4 * w, classes)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn(self.stem(x)).relu()
    for b in self.blocks: x = b(x)
    return self.fc(x.mean((2, 3)))


def torch_resnet(width: int, classes: int):
  import torch
  F = torch.nn

  class Block(F.Module):
    def __init__(self, cin, cout, stride):
      super().__init__()
      self.c1, self.b1 = F.Conv2d(cin, cout, 3, stride, 1, bias=False), F.BatchNorm2d(cout)
      self.c2, self.b2 = F.Conv2d(cout, cout, 3, 1, 1, bias=False), F.BatchNorm2d(cout)
      self.down = F.Sequential(F.Conv2d(cin, cout, 1, stride, bias=False), F.BatchNorm2d(cout)) if stride != 1 or cin != cout else F.Sequential()
    def forward(self, x):
      y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
      return (y + self.down(x)).relu()

  class Model(F.Module):
    def __init__(self):
      super().__init__()
      w = width
      self.stem, self.bn = F.Conv2d(3, w, 3, 1, 1, bias=False), F.BatchNorm2d(w)
      self.blocks = F.ModuleList([Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2)])
      self.fc = F.Linear(4 * w, classes)
    def forward(self, x):
      x = self.bn(self.stem(x)).relu()
      for b in self.blocks: x = b(x)
      return self.fc(x.mean((2, 3)))
  return Model()


def copy_weights(model, tmodel, device: str) -> None:
  """tgc's model gets torch's parameters and buffers, by name."""
  sd = {k: v.detach().cpu().numpy() for k, v in tmodel.state_dict().items()}
  load_state_dict(model, {k: Tensor(np.array(sd[k]), device=device) for k in get_state_dict(model)})


# ---- the clocks
class Side:
  """One framework's device: its synchronize and its allocator's peak over a row."""
  def __init__(self, name: str, device: str):
    self.name, self.device = name, device
    if name == 'tgc':
      self.dev = tgc.Device[device]
      self.sync = self.dev.synchronize
    else:
      import torch
      self.sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)

  def reset_peak(self) -> None:
    if self.name == 'tgc':
      al = self.dev.allocator; al.peak = al.in_use  # (the high-water mark from here on)
    elif self.device == 'cuda':
      import torch
      torch.cuda.reset_peak_memory_stats()

  def peak(self) -> int | None:
    if self.name == 'tgc': return self.dev.allocator.stats()['peak']
    if self.device == 'cuda':
      import torch
      return torch.cuda.max_memory_allocated()
    return None

  def timed(self, fn):
    """(fn's result, its seconds), synchronized before and after."""
    self.sync(); t0 = time.perf_counter()
    out = fn(); self.sync()
    return out, time.perf_counter() - t0


def train_loop(side: Side, step, steps: int) -> dict:
  """The first step and steps-1 more, each timed alone; the losses read after the last (no host wait in between)."""
  side.reset_peak()
  losses, times = [], []
  for _ in range(steps):
    loss, dt = side.timed(step)
    losses.append(loss); times.append(dt)
  return {'first': times[0], 'step': statistics.median(times[1:]) if steps > 1 else times[0],
          'losses': [float(l.item()) for l in losses], 'peak': side.peak()}


def torch_floor(tm, topt, loss_fn) -> int:
  """The bytes a torch training step cannot do without (torch's measured peak adds its transients): the parameters,
  their gradients, the optimizer's state and the activations autograd saves for the backward (torch's saved-tensor
  hooks, each storage once, the parameters' own left out), read from one more forward and backward after the timed
  steps (its gradients then cleared)."""
  import torch
  params = {p.untyped_storage().data_ptr() for p in tm.parameters()}
  saved = {}
  def pack(x):
    st = x.untyped_storage()
    if st.data_ptr() not in params: saved[st.data_ptr()] = st.nbytes()
    return x
  with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x): loss = loss_fn()
  loss.backward(); topt.zero_grad()
  nbytes = lambda x: x.numel() * x.element_size()
  state = sum(nbytes(v) for st in topt.state.values() for v in st.values() if torch.is_tensor(v))
  return 2 * sum(nbytes(p) for p in tm.parameters()) + state + sum(saved.values())


def row_train(cfg: dict, device: str, tdev: str, steps: int, bf16: bool, written: bool = False):
  """tgc's and torch's train_loop results, the tgc step (for its kernel table) and its flops by 6 x params x tokens."""
  import torch
  g = cfg['gpt']
  torch.manual_seed(0)
  tm = torch_gpt(g['vocab'], g['seq'], g['d'], g['layers'], g['heads']).to(tdev)
  model = GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'], dtype='bfloat16' if bf16 else None, written=written)
  copy_weights(model, tm, device)
  rng = np.random.default_rng(0)
  data = rng.integers(0, g['vocab'], (g['batch'], g['seq'] + 1)).astype(np.int32)
  # torch
  topt = torch.optim.AdamW(tm.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.01)
  tx, ty = torch.tensor(data[:, :-1], dtype=torch.long, device=tdev), torch.tensor(data[:, 1:], dtype=torch.long, device=tdev)
  def tloss():
    with torch.autocast(tdev, dtype=torch.bfloat16, enabled=bf16):
      return torch.nn.functional.cross_entropy(tm(tx).reshape(-1, g['vocab']), ty.reshape(-1))
  def tstep():
    topt.zero_grad()
    loss = tloss()
    loss.backward(); topt.step()
    return loss
  # tgc
  opt = optim.AdamW(get_parameters(model), lr=1e-3, eps=1e-8, weight_decay=0.01)
  x, y = Tensor(data[:, :-1], device=device).realize(), Tensor(data[:, 1:], device=device).realize()
  step = train_step(model, opt)
  t = train_loop(Side('torch', tdev), tstep, steps)
  t['floor'] = torch_floor(tm, topt, tloss)
  r = train_loop(Side('tgc', device), lambda: step(x, y), steps)
  flops = 6 * g['batch'] * g['seq'] * sum(p.numel() for n, p in tm.named_parameters() if n != 'pos.weight' and n != 'tok.weight')
  return r, t, (lambda: step(x, y)), flops


def row_resnet(cfg: dict, device: str, tdev: str, steps: int):
  import torch
  c = cfg['cnn']
  torch.manual_seed(0)
  tm = torch_resnet(c['width'], c['classes']).to(tdev)
  model = ResNet(c['width'], c['classes'])
  copy_weights(model, tm, device)
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((c['batch'], 3, c['size'], c['size'])).astype(np.float32), rng.integers(0, c['classes'], c['batch']).astype(np.int32)
  topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
  tx, ty = torch.tensor(xs, device=tdev), torch.tensor(ys, dtype=torch.long, device=tdev)
  tloss = lambda: torch.nn.functional.cross_entropy(tm(tx), ty)
  def tstep():
    topt.zero_grad()
    loss = tloss()
    loss.backward(); topt.step()
    return loss
  opt = optim.SGD(get_parameters(model), lr=0.01, momentum=0.9)
  x, y = Tensor(xs, device=device).realize(), Tensor(ys, device=device).realize()
  @Tensor.jit
  def step(x, y):
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).cross_entropy(y)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      return loss
  tm.train()
  t = train_loop(Side('torch', tdev), tstep, steps)
  t['floor'] = torch_floor(tm, topt, tloss)
  r = train_loop(Side('tgc', device), lambda: step(x, y), steps)
  return r, t, (lambda: step(x, y)), None


def row_generate(cfg: dict, device: str, tdev: str, steps: int):
  """Per batch size: tgc's and torch's tokens/s over a whole generation (prompt and new tokens), the first call of
  each apart; the tokens compared."""
  import torch
  g, P, N = cfg['gpt'], cfg['prompt'], cfg['new']
  torch.manual_seed(0)
  tm = torch_gpt(g['vocab'], g['seq'], g['d'], g['layers'], g['heads']).to(tdev).eval()
  model = GPT(g['vocab'], g['seq'], g['d'], g['layers'], g['heads'])
  copy_weights(model, tm, device)
  H, hd = g['heads'], g['d'] // g['heads']
  rng = np.random.default_rng(1)
  out = {}
  for B in cfg['gen_batches']:
    prompt = rng.integers(0, g['vocab'], (B, P)).astype(np.int32)
    tcache = [(torch.zeros(B, H, P + N, hd, device=tdev), torch.zeros(B, H, P + N, hd, device=tdev)) for _ in range(g['layers'])]
    tp = torch.tensor(prompt, dtype=torch.long, device=tdev)
    @torch.no_grad()
    def tgen():
      tok, pos, toks = tp, 0, []
      for _ in range(N):
        tok = tm(tok, tcache, pos)[:, -1].argmax(-1, keepdim=True)
        pos += P if pos == 0 else 1
        toks.append(tok)
      return toks
    cache = model.cache(B, P + N, device)
    @Tensor.jit
    def step(tok, pos):
      return model(tok, cache, pos)[:, -1].argmax(-1).cast('int32').reshape(B, 1), pos + tok.shape[1]
    x, pos0 = Tensor(prompt, device=device).realize(), Tensor(np.zeros(1, np.int32), device=device).realize()
    def gen():
      tok, pos, toks = x, pos0, []
      for _ in range(N):
        tok, pos = step(tok, pos)
        toks.append(tok)
      return toks
    res = {}
    for name, side, fn in (('torch', Side('torch', tdev), tgen), ('tgc', Side('tgc', device), gen)):
      side.reset_peak()
      toks, first = side.timed(fn)
      times = [side.timed(fn)[1] for _ in range(max(steps - 1, 1))]
      res[name] = {'first': first, 'step': statistics.median(times), 'peak': side.peak(),
                   'tokens': np.concatenate([t.cpu().numpy() if name == 'torch' else t.numpy() for t in toks], 1)}
    out[B] = (res['tgc'], res['torch'], (lambda s=step, B=B: s(Tensor(np.zeros((B, 1), np.int32), device=device).realize(), Tensor(np.full(1, P, np.int32), device=device).realize())))
  return out


# ---- the tables
def kernel_table(call, top: int, step: float, what: str = "the call's median") -> str:
  """One call's kernels by time, as markdown: tgc.compiler.profile's summary (each launch timed alone), beside the
  call's time unprofiled (`step` seconds, `what` it is)."""
  call()  # (anything it compiles, compiled outside the profile)
  p = profile()
  with p: call()
  rows = p.recorder.summary_rows()
  total = sum(r['seconds'] for r in rows)
  out = ['| kernel | count | ms | achieved | share |', '| --- | ---: | ---: | ---: | ---: |']
  for r in rows[:top]:
    rate = f"{r['gflops'] / 1e3:.2f} TFLOP/s" if r['gflops'] and r['flops'] >= r['bytes'] else f"{r['gbps']:.1f} GB/s" if r['gbps'] else '-'
    out.append(f"| `{r['name']}` | {r['count']} | {r['seconds'] * 1e3:.3f} | {rate} | {r['share']:.1%} |")
  if len(rows) > top:
    rest = rows[top:]
    out.append(f"| ({len(rest)} more) | {sum(r['count'] for r in rest)} | {sum(r['seconds'] for r in rest) * 1e3:.3f} | | {sum(r['share'] for r in rest):.1%} |")
  out.append(f"| total | {sum(r['count'] for r in rows)} | {total * 1e3:.3f} | | 100% |")
  return '\n'.join(out) + f"\n\nkernels {total * 1e3:.3f} ms; {what} {step * 1e3:.3f} ms (synchronized, unprofiled)"


def mb(b) -> str: return '-' if b is None else f"{b / 2**20:.1f}"


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--device', default='CPU', help="tgc's device: CPU (default), CUDA (torch then on cuda), ...")
  ap.add_argument('--rows', default=','.join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
  ap.add_argument('--config', choices=list(CONFIGS), default='default', help='tiny: small shapes that run in a minute on a CPU; odd: small sizes no tile divides')
  ap.add_argument('--steps', type=int, default=0, help='training steps (and generations) per framework (default: the config\'s)')
  ap.add_argument('--top', type=int, default=12, help='kernels listed per row')
  ap.add_argument('--cold', action='store_true', help="a fresh disk cache (TGC_CACHE_DIR) for the run: tgc's first steps compile every kernel")
  args = ap.parse_args(argv)
  if args.cold:
    import atexit, shutil, tempfile
    os.environ['TGC_CACHE_DIR'] = tempfile.mkdtemp(prefix='tgc-bench-models-')
    atexit.register(shutil.rmtree, os.environ['TGC_CACHE_DIR'], True)
  os.environ.pop('DEBUG', None)
  rows = [r for r in args.rows.split(',') if r]
  if bad := [r for r in rows if r not in ROWS]: ap.error(f"unknown row {', '.join(bad)}: the rows are {', '.join(ROWS)}")
  from tgc.runtime import Device
  device = Device.canonicalize(args.device)
  try: Device[device]
  except Exception as e: print(f"tgc: device {device} does not start: {e}"); return 1
  Device.DEFAULT = device
  tdev = 'cuda' if device.split(':')[0] == 'CUDA' else 'cpu'
  if tdev == 'cpu': os.environ.setdefault('CPU_THREADS', '1')  # (set before torch starts its pool)
  import torch
  if tdev == 'cpu': torch.set_num_threads(int(os.environ['CPU_THREADS']))  # on a CPU, both on as many threads
  if tdev == 'cuda' and not torch.cuda.is_available(): print("torch has no CUDA here: it cannot run beside tgc's CUDA"); return 1
  cfg = CONFIGS[args.config]
  steps = max(args.steps or cfg['steps'], 2)
  results, ok = [], True
  what = torch.cuda.get_device_name() if tdev == 'cuda' else 'the CPU'
  print(f"tgc {tgc.__version__} on {device} beside torch {torch.__version__} on {tdev} ({what})"
        + (f", both on {torch.get_num_threads()} thread(s)" if tdev == 'cpu' else '') + f"; config {args.config}, {steps} steps per row"
        + f"; {'a fresh disk cache' if args.cold else 'the disk cache as it is (--cold: a fresh one)'}\n")
  for row in rows:
    if row == 'generate':
      for B, (r, t, call) in row_generate(cfg, device, tdev, steps).items():
        good = bool(np.array_equal(r['tokens'], t['tokens']))
        if not good: ok = False
        n = B * cfg['new']
        results.append((f"generate b{B} ({cfg['prompt']}+{cfg['new']})", 'tokens/s', n / r['step'], n / t['step'], r['first'], t['first'],
                        'tokens equal' if good else f"TOKENS DIFFER ({int((r['tokens'] != t['tokens']).sum())} of {r['tokens'].size})", r['peak'], t['peak'], None))
      table = kernel_table(call, args.top, r['step'] / cfg['new'], "a generation's median over its tokens")
      print(f"### {row}: one decode step at batch {B}\n\n{table}\n", flush=True)
      del call; continue  # (a row's models are garbage by the next: each peak counts its row's memory)
    r, t, call, flops = (row_resnet(cfg, device, tdev, steps) if row == 'resnet' else row_train(cfg, device, tdev, steps, row.startswith('train-bf16'), row.endswith('written')))
    err = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(r['losses'], t['losses']))
    good = err <= TOL[row]
    if not good: ok = False
    check = f"loss {r['losses'][-1]:.4f} vs {t['losses'][-1]:.4f} (max rel err {err:.1e})" + ('' if good else ' MISMATCH')
    results.append((row, 'steps/s', 1 / r['step'], 1 / t['step'], r['first'], t['first'], check, r['peak'], t['peak'], t['floor']))
    print(f"### {row}: one step" + (f" ({flops / r['step'] / 1e12:.3f} TFLOP/s by 6 x params x tokens at tgc's median step)" if flops else '')
          + f"\n\n{kernel_table(call, args.top, r['step'])}\n", flush=True)
    del call
  print('| row | unit | tgc | torch | tgc/torch | tgc first s | torch first s | check | tgc peak MiB | torch peak MiB | torch floor MiB |')
  print('| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |')
  for name, unit, a, b, fa, fb, check, pa, pb, fl in results:
    print(f"| {name} | {unit} | {a:.2f} | {b:.2f} | {a / b:.2f} | {fa:.2f} | {fb:.2f} | {check} | {mb(pa)} | {mb(pb)} | {mb(fl)} |")
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
