"""A GPT-style training step on the Tensor API: token and position embeddings, pre-norm blocks of causal
self-attention and a GELU MLP, a tied-free LM head, cross-entropy on the next token, AdamW; the step jitted.

    python examples/gpt_train.py                       # 2 layers, d 32, 2 heads, seq 16, batch 4, 5 steps on the CPU
    tgc-viz examples/gpt_train.py -o gpt.html          # the viewer's page of every function it compiles, profiled
    PROFILE=trace.json python examples/gpt_train.py    # the Chrome trace and the table of kernels by time
"""
from __future__ import annotations
import argparse, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tgc import Tensor, nn
from tgc.nn import optim
from tgc.nn.state import get_parameters


class Attention:
  def __init__(self, d: int, heads: int):
    self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
  def __call__(self, x: Tensor) -> Tensor:
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=2)]
    return self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))


class Block:
  def __init__(self, d: int, heads: int):
    self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d)
    self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
  def __call__(self, x: Tensor) -> Tensor:
    x = x + self.attn(self.ln1(x))
    return x + self.out(self.fc(self.ln2(x)).gelu())


class GPT:
  def __init__(self, vocab: int, seq: int, d: int, layers: int, heads: int):
    self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
    self.blocks = [Block(d, heads) for _ in range(layers)]
    self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
  def __call__(self, idx: Tensor) -> Tensor:
    t = idx.shape[1]
    x = self.tok(idx) + self.pos(Tensor.arange(t, device=idx.device).reshape(1, t))
    for blk in self.blocks: x = blk(x)
    return self.head(self.ln(x))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--layers', type=int, default=2)
  ap.add_argument('--d', type=int, default=32)
  ap.add_argument('--heads', type=int, default=2)
  ap.add_argument('--seq', type=int, default=16)
  ap.add_argument('--batch', type=int, default=4)
  ap.add_argument('--vocab', type=int, default=64)
  ap.add_argument('--steps', type=int, default=5)
  ap.add_argument('--device', default=None)
  args = ap.parse_args(argv)
  Tensor.manual_seed(0)
  model = GPT(args.vocab, args.seq, args.d, args.layers, args.heads)
  opt = optim.AdamW(get_parameters(model), lr=1e-3)
  rng = np.random.default_rng(0)
  data = rng.integers(0, args.vocab, (args.batch, args.seq + 1)).astype(np.int32)
  x, y = Tensor(data[:, :-1], device=args.device), Tensor(data[:, 1:], device=args.device)

  @Tensor.jit
  def step(x, y):
    opt.zero_grad()
    logits = model(x)
    loss = logits.reshape(-1, args.vocab).cross_entropy(y.reshape(-1))
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss

  for i in range(args.steps): print(f"step {i}: loss {step(x, y).item():.4f}")
  return 0


if __name__ == '__main__':
  sys.exit(main())
