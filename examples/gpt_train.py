"""A GPT-style training step on the Tensor API: token and position embeddings, pre-norm blocks of causal
self-attention and a GELU MLP, a tied-free LM head, cross-entropy on the next token, AdamW; the step jitted.
The model (with mixed precision and a KV cache for generation) is the one bench/compile.py and bench/models.py run.

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


def linear(layer: nn.Linear, x: Tensor, dtype=None) -> Tensor:
  """layer(x), or with dtype (mixed precision, as torch.autocast does it) the matmul in that dtype on casts of the
  float32 weights."""
  if dtype is None: return layer(x)
  return x.cast(dtype).linear(layer.weight.transpose().cast(dtype), None if layer.bias is None else layer.bias.cast(dtype))


class KVCache:
  """Keys and values of every layer in fixed buffers of max_len positions, written in place: a step's shapes do not
  depend on the position (a device Tensor), so one jitted decode step replays for every token."""
  def __init__(self, layers: int, batch: int, heads: int, max_len: int, head_dim: int, device=None):
    self.max_len = max_len
    self.kv = [(Tensor.zeros(batch, heads, max_len, head_dim, device=device).contiguous().realize(),
                Tensor.zeros(batch, heads, max_len, head_dim, device=device).contiguous().realize()) for _ in range(layers)]

  def update(self, layer: int, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Write k, v (batch, heads, t, head_dim) at positions pos..pos+t-1; the whole buffers and the mask of what each
    of the t queries sees (positions up to its own)."""
    t, n = k.shape[2], self.max_len
    at = pos.reshape(1, 1) + Tensor.arange(t, device=k.device).reshape(t, 1)    # (t, 1): the new rows' positions
    onehot = Tensor.arange(n, device=k.device).reshape(1, n) == at            # (t, n)
    written = onehot.any(0).reshape(n, 1)
    scatter = onehot.transpose().cast(k.dtype)                                 # (n, t): row i of the buffer <- new row j
    kc, vc = self.kv[layer]
    kc.assign(written.where(scatter @ k, kc)); vc.assign(written.where(scatter @ v, vc))
    return kc, vc, Tensor.arange(n, device=k.device).reshape(1, n) <= at


def written_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
  """Causal attention written out, as many models spell it: the compiler finds it (fuse-attention) and runs the same
  fused kernels as scaled_dot_product_attention's."""
  scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
  return Tensor.ones(q.shape[-2], k.shape[-2], dtype='bool', device=q.device).tril().where(scores, float('-inf')).softmax(-1) @ v


class Attention:
  def __init__(self, d: int, heads: int, written: bool = False):
    self.heads, self.qkv, self.proj, self.written = heads, nn.Linear(d, 3 * d), nn.Linear(d, d), written
  def __call__(self, x: Tensor, dtype=None, cache: KVCache | None = None, layer: int = 0, pos: Tensor | None = None) -> Tensor:
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in linear(self.qkv, x, dtype).chunk(3, dim=2)]
    if cache is None: a = written_attention(q, k, v) if self.written else q.scaled_dot_product_attention(k, v, is_causal=True)
    else:
      k, v, mask = cache.update(layer, k, v, pos)
      a = q.scaled_dot_product_attention(k, v, attn_mask=mask)
    return linear(self.proj, a.transpose(1, 2).reshape(b, t, d), dtype)


class Block:
  def __init__(self, d: int, heads: int, written: bool = False):
    self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d, heads, written), nn.LayerNorm(d)
    self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
  def __call__(self, x: Tensor, dtype=None, **cache) -> Tensor:
    x = x + self.attn(self.ln1(x), dtype, **cache)
    return x + linear(self.out, linear(self.fc, self.ln2(x), dtype).gelu(), dtype)


class GPT:
  """Token and position embeddings, pre-norm blocks, the LM head. `dtype` (e.g. 'bfloat16'): mixed precision as
  torch.autocast runs it (weights float32; the matmuls, attention and GELU in dtype; the norms, the residual stream
  and the logits in float32). With a KVCache the tokens idx continue the cached ones from position pos. written: the
  training forward's attention written out (written_attention) instead of scaled_dot_product_attention."""
  def __init__(self, vocab: int, seq: int, d: int, layers: int, heads: int, dtype=None, written: bool = False):
    self.heads, self.dtype = heads, dtype
    self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
    self.blocks = [Block(d, heads, written) for _ in range(layers)]
    self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
  def __call__(self, idx: Tensor, cache: KVCache | None = None, pos: Tensor | None = None) -> Tensor:
    t = idx.shape[1]
    at = Tensor.arange(t, device=idx.device).reshape(1, t)
    x = self.tok(idx) + self.pos(at if pos is None else at + pos.reshape(1, 1))
    for i, blk in enumerate(self.blocks): x = blk(x, self.dtype, **({} if cache is None else dict(cache=cache, layer=i, pos=pos)))
    return linear(self.head, self.ln(x), self.dtype).float()

  def cache(self, batch: int, max_len: int, device=None) -> KVCache:
    d = self.tok.embed_size
    return KVCache(len(self.blocks), batch, self.heads, max_len, d // self.heads, device)


def train_step(model: GPT, opt):
  """The jitted training step: next-token cross-entropy, its backward and the optimizer's update realized together;
  step(x, y) -> the loss."""
  @Tensor.jit
  def step(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss
  return step


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

  step = train_step(model, opt)
  for i in range(args.steps): print(f"step {i}: loss {step(x, y).item():.4f}")
  return 0


if __name__ == '__main__':
  sys.exit(main())
