"""tgc beside torch on the GPU, as a user calls it: the Tensor API, inputs already on the device, each result left
on the device and synchronized.

    python bench/gpu.py                   # every row, on CUDA (the GPU machine: see docs/gpu.md)
    python bench/gpu.py --rows add,sum --device CPU --scale 0.0625   # a smaller run anywhere (torch on the CPU)

For each row, one process and the same data:
  torch        torch's own call (cuBLAS, its reductions), synchronized; median of --iters calls
  tgc e2e      `y = f(a, b).realize(); Device[D].synchronize()`: graph, cache lookup, allocation, launches
  tgc kernels  the device time of the kernels one such call launched (CUDA events around each launch), summed;
               median over calls
Throughput counts the bytes a row must move (inputs read once, outputs written once) or its flops. The last
columns say whether anything hides around the kernels: e2e / kernels, and e2e - kernels in microseconds, set
against the launch overhead (the e2e time of a 16-element add, measured in the same run).
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tgc
from tgc import Tensor
from tgc.compiler import profile


def rows(scale: float):
  n = int((1 << 26) * scale)
  m, k = max(int(8192 * scale ** 0.5), 1), 4096
  mm = max(int(4096 * scale ** (1 / 3)) // 16 * 16, 16)
  nb = max(int(32 * scale), 1)
  conv_flops = 2 * nb * 64 * 56 * 56 * 64 * 9
  nb8, sq = max(int(8 * scale), 1), max(int(1024 * scale ** 0.5) // 64 * 64, 64)
  return {
    # name: (shapes, dtype, tgc function, torch function, bytes or flops, unit)
    'add': ([(n,), (n,)], 'float32', lambda a, b: a + b, lambda a, b: a + b, 12 * n, 'GB/s'),
    'a*b+c': ([(n,), (n,), (n,)], 'float32', lambda a, b, c: a * b + c, lambda a, b, c: a * b + c, 16 * n, 'GB/s'),
    'sum': ([(n,)], 'float32', lambda a: a.sum(), lambda a: a.sum(), 4 * n, 'GB/s'),
    'rowsum': ([(m, k)], 'float32', lambda a: a.sum(axis=1), lambda a: a.sum(dim=1), 4 * m * k, 'GB/s'),
    'softmax': ([(m, k)], 'float32', lambda a: a.softmax(axis=1), lambda a: a.softmax(dim=1), 8 * m * k, 'GB/s'),
    # scans: rows of 512 (chunks of each row run as threads of their own), one long axis (chunk totals, a scan of them,
    # the chunks' scans from their offsets); argmax: one kernel, its positions computed from the indices
    'cumsum rows': ([(m, 512)], 'float32', lambda a: a.cumsum(1), lambda a: a.cumsum(1), 8 * m * 512, 'GB/s'),
    'cumsum long': ([(n // 4,)], 'float32', lambda a: a.cumsum(0), lambda a: a.cumsum(0), 8 * (n // 4), 'GB/s'),
    'argmax rows': ([(m, k)], 'float32', lambda a: a.argmax(axis=1), lambda a: a.argmax(dim=1), 4 * m * k, 'GB/s'),
    # causal attention as a user calls it (torch: its flash kernels); flops of the unmasked products (4 b h s^2 d)
    'sdpa causal f16': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_sdpa(True), _torch_sdpa(True), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa f16': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_sdpa(False), _torch_sdpa(False), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa causal bf16 d128': ([(nb8 // 2 or 1, 16, sq, 128)] * 3, 'bfloat16', _tgc_sdpa(True), _torch_sdpa(True), 4 * (nb8 // 2 or 1) * 16 * sq * sq * 128, 'TFLOP/s'),
    'sdpa causal f16 s8k': ([(1, 16, sq * 8, 64)] * 3, 'float16', _tgc_sdpa(True), _torch_sdpa(True), 4 * 16 * (sq * 8) ** 2 * 64, 'TFLOP/s'),
    'sdpa bf16 d128': ([(nb8 // 2 or 1, 16, sq, 128)] * 3, 'bfloat16', _tgc_sdpa(False), _torch_sdpa(False), 4 * (nb8 // 2 or 1) * 16 * sq * sq * 128, 'TFLOP/s'),
    'sdpa f16 s8k': ([(1, 16, sq * 8, 64)] * 3, 'float16', _tgc_sdpa(False), _torch_sdpa(False), 4 * 16 * (sq * 8) ** 2 * 64, 'TFLOP/s'),
    # with attn_mask: a boolean padding mask (batch, 1, 1, keys: about 2 % of the keys hidden, made from k on the
    # device in both), an added bias of every score of each head (ALiBi's, T5's): flops as the unmasked rows'
    # grouped-query attention (enable_gqa): 16 query heads, 4 key and value heads (read once a group, not repeated)
    # soft-capped scores (Gemma 2's 50 * tanh(s / 50)): tgc's softcap keyword, one kernel; torch's sdpa has none, so its
    # user writes the scores out (torch's eager ops)
    'sdpa causal f16 softcap': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_sdpa(True, softcap=50.0), _torch_softcap(True, 50.0), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa causal f16 gqa': ([(nb8, 16, sq, 64), (nb8, 4, sq, 64), (nb8, 4, sq, 64)], 'float16', _tgc_sdpa(True, gqa=True), _torch_sdpa(True, gqa=True), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa f16 padding mask': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_sdpa(False, mask='padding'), _torch_sdpa(False, mask='padding'), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa f16 head bias': ([(nb8, 16, sq, 64)] * 3 + [(1, 16, sq, sq)], 'float16', _tgc_sdpa(False, mask='bias'), _torch_sdpa(False, mask='bias'), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    # forward and backward (the gradients of q, k and v of out.sum(); flops of the forward's products and the
    # backward's four, unmasked: 2.5 times the forward's), dq compared
    'sdpa causal f16 fwd+bwd': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_sdpa(True, grad=True), _torch_sdpa(True, grad=True), 10 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'sdpa causal bf16 d128 fwd+bwd': ([(nb8 // 2 or 1, 16, sq, 128)] * 3, 'bfloat16', _tgc_sdpa(True, grad=True), _torch_sdpa(True, grad=True), 10 * (nb8 // 2 or 1) * 16 * sq * sq * 128, 'TFLOP/s'),
    # attention as a model writes it out (softmax(q k^T / sqrt(d) masked by a tril) v): the compiler's fused kernel,
    # beside torch's scaled_dot_product_attention (torch runs the written-out form as its separate ops)
    'attention written out causal f16': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_written_attention(False), _torch_sdpa(True), 4 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'attention written out causal f16 fwd+bwd': ([(nb8, 16, sq, 64)] * 3, 'float16', _tgc_written_attention(True), _torch_sdpa(True, grad=True), 10 * nb8 * 16 * sq * sq * 64, 'TFLOP/s'),
    'matmul f32': ([(mm, mm), (mm, mm)], 'float32', lambda a, b: a @ b, lambda a, b: a @ b, 2 * mm ** 3, 'TFLOP/s'),
    # f32 on the tensor cores as TF32 where each is asked to (tgc.set_float32_matmul_precision('high'), torch's
    # allow_tf32=True), both within the call alone
    'matmul f32 tf32': ([(mm, mm), (mm, mm)], 'float32', _tgc_tf32(lambda a, b: a @ b), _torch_tf32(lambda a, b: a @ b), 2 * mm ** 3, 'TFLOP/s'),
    'matmul f16': ([(mm, mm), (mm, mm)], 'float16', lambda a, b: a @ b, lambda a, b: a @ b, 2 * mm ** 3, 'TFLOP/s'),
    'matmul bf16': ([(mm, mm), (mm, mm)], 'bfloat16', lambda a, b: a @ b, lambda a, b: a @ b, 2 * mm ** 3, 'TFLOP/s'),
    # a matmul with its epilogue (bias and the tanh gelu in the product's kernel): compare with 'matmul f16'
    'gelu(x@W+b) f16': ([(mm, mm), (mm, mm), (mm,)], 'float16', lambda x, w, b: (x @ w + b).gelu(), _torch_gelu_linear, 2 * mm ** 3, 'TFLOP/s'),
    # sizes no tile divides: guarded edges
    'mm f16 odd': ([(mm - 1, mm - 1), (mm - 1, mm - 1)], 'float16', lambda a, b: a @ b, lambda a, b: a @ b, 2 * (mm - 1) ** 3, 'TFLOP/s'),
    'mm f32 odd': ([(mm - 1, mm - 1), (mm - 1, mm - 1)], 'float32', lambda a, b: a @ b, lambda a, b: a @ b, 2 * (mm - 1) ** 3, 'TFLOP/s'),
    'mm f16 rect': ([(max(mm * 1000 // 4096, 1), max(mm * 3000 // 4096, 1)), (max(mm * 3000 // 4096, 1), max(mm * 700 // 4096, 1))], 'float16',
                    lambda a, b: a @ b, lambda a, b: a @ b, 2 * max(mm * 1000 // 4096, 1) * max(mm * 3000 // 4096, 1) * max(mm * 700 // 4096, 1), 'TFLOP/s'),
    # a Linear's three products (W stored (out, in) as nn.Linear's): forward x @ W.T, backward dx = dy @ W and
    # dW = dy.T @ x; a transposed operand is a view the kernel reads, no copy
    **{f'linear {dt}{sfx}': ([(mm, i), (o, i)], dts, lambda x, w: x @ w.T, lambda x, w: x @ w.T, 2 * mm * i * o, 'TFLOP/s')
       for dt, dts in (('f32', 'float32'), ('f16', 'float16')) for sfx, i, o in (('', mm, mm), (' 384x1536', 384, 1536), (' 1536x384', 1536, 384))},
    # nn.Linear's forward with its bias (one kernel: the bias an epilogue)
    **{f'linear bias {dt}': ([(mm, 384), (1536, 384), (1536,)], dts, lambda x, w, b: x @ w.T + b, _torch_linear, 2 * mm * 384 * 1536, 'TFLOP/s')
       for dt, dts in (('f32', 'float32'), ('f16', 'float16'))},
    **{f'linear {dt} m16': ([(16, mm), (mm, mm)], dts, lambda x, w: x @ w.T, lambda x, w: x @ w.T, 2 * 16 * mm * mm, 'TFLOP/s')
       for dt, dts in (('f32', 'float32'), ('f16', 'float16'))},  # (a few tokens through a Linear: decoding)
    **{f'linear bwd dx {dt}': ([(mm, 1536), (1536, 384)], dts, lambda dy, w: dy @ w, lambda dy, w: dy @ w, 2 * mm * 1536 * 384, 'TFLOP/s')
       for dt, dts in (('f32', 'float32'), ('f16', 'float16'))},
    **{f'linear bwd dw {dt}': ([(mm, 1536), (mm, 384)], dts, lambda dy, x: dy.T @ x, lambda dy, x: dy.T @ x, 2 * mm * 1536 * 384, 'TFLOP/s')
       for dt, dts in (('f32', 'float32'), ('f16', 'float16'))},
    # a ResNet stage: batch 32, 64 -> 64 channels, 56x56, 3x3, padding 1
    'conv2d f32': ([(nb, 64, 56, 56), (64, 64, 3, 3)], 'float32', lambda x, w: x.conv2d(w, padding=1), _torch_conv, conv_flops, 'TFLOP/s'),
    # torch's cuDNN convolves f32 in TF32 by default (10-bit mantissas); tgc keeps f32: this row holds torch to f32 too
    'conv2d f32 strict': ([(nb, 64, 56, 56), (64, 64, 3, 3)], 'float32', lambda x, w: x.conv2d(w, padding=1), _torch_conv_strict, conv_flops, 'TFLOP/s'),
    'conv2d f32 tf32': ([(nb, 64, 56, 56), (64, 64, 3, 3)], 'float32', _tgc_tf32(lambda x, w: x.conv2d(w, padding=1)), _torch_conv, conv_flops, 'TFLOP/s'),
    'conv2d f16': ([(nb, 64, 56, 56), (64, 64, 3, 3)], 'float16', lambda x, w: x.conv2d(w, padding=1), _torch_conv, conv_flops, 'TFLOP/s'),
  }


def _tgc_tf32(f):
  """f with tgc's float32 matmul precision 'high' (TF32), realized within it: the precision is read as the graph compiles."""
  def call(*xs):
    was = tgc.get_float32_matmul_precision()
    tgc.set_float32_matmul_precision('high')
    try: return f(*xs).realize()
    finally: tgc.set_float32_matmul_precision(was)
  return call


def _torch_tf32(f):
  """f with torch's cuBLAS allowed TF32 (torch.backends.cuda.matmul.allow_tf32)."""
  def call(*ts):
    import torch
    was, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, True
    try: return f(*ts)
    finally: torch.backends.cuda.matmul.allow_tf32 = was
  return call


def _sdpa_mask(kind: str, k, bias):
  """attn_mask of a row: the padding mask from k's first feature of its first head (True where it is above -2),
  (batch, 1, 1, keys), or the bias itself."""
  return bias if kind == 'bias' else k[:, 0:1, :, 0:1].transpose(-2, -1) > -2.0


def _fwd_bwd(attention):
  """A call giving the gradients of attention(q, k, v).sum() with respect to q, k and v, realized together."""
  def call(q, k, v):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    attention(q, k, v).sum().backward()
    return q.grad.realize(k.grad, v.grad)
  return call


def _tgc_sdpa(causal: bool, grad: bool = False, mask: str = '', gqa: bool = False, softcap: float | None = None):
  def call(q, k, v, bias=None):
    if softcap: return q.scaled_dot_product_attention(k, v, is_causal=causal, softcap=softcap)
    if mask: return q.scaled_dot_product_attention(k, v, attn_mask=_sdpa_mask(mask, k, bias))
    if gqa: return q.scaled_dot_product_attention(k, v, is_causal=causal, enable_gqa=True)
    if not grad: return q.scaled_dot_product_attention(k, v, is_causal=causal)
    return _fwd_bwd(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=causal))(q, k, v)
  return call


def _tgc_written_attention(grad: bool):
  """The GPT example's attention written out (examples/gpt_train.py), forward or with its backward."""
  from examples.gpt_train import written_attention
  return _fwd_bwd(written_attention) if grad else written_attention


def _torch_sdpa(causal: bool, grad: bool = False, mask: str = '', gqa: bool = False):
  def call(q, k, v, bias=None):
    import torch.nn.functional as F
    if mask: return F.scaled_dot_product_attention(q, k, v, attn_mask=_sdpa_mask(mask, k, bias))
    if gqa: return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    if not grad: return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()
    return q.grad
  return call


def _torch_softcap(causal: bool, cap: float):
  """torch's attention with soft-capped scores, written out as its users write it (its sdpa takes no softcap)."""
  def call(q, k, v):
    import torch
    s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    s = torch.tanh(s / cap) * cap
    if causal: s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float('-inf'))
    return s.softmax(-1) @ v
  return call


def _torch_linear(x, w, b):
  import torch.nn.functional as F
  return F.linear(x, w, b)


def _torch_gelu_linear(x, w, b):
  import torch, torch.nn.functional as F
  return F.gelu(torch.addmm(b, x, w), approximate='tanh')


def _torch_conv(x, w):
  import torch.nn.functional as F
  return F.conv2d(x, w, padding=1)


def _torch_conv_strict(x, w):
  import torch
  with torch.backends.cudnn.flags(allow_tf32=False): return _torch_conv(x, w)


def median_time(fn, sync, iters: int) -> float:
  fn(); sync()  # warm-up (compiles on the first call)
  ts = []
  for _ in range(iters):
    sync(); t0 = time.perf_counter(); fn(); sync(); ts.append(time.perf_counter() - t0)
  return statistics.median(ts)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--device', default='CUDA')
  ap.add_argument('--rows', default='', help='comma-separated row names (default: all)')
  ap.add_argument('--iters', type=int, default=20)
  ap.add_argument('--scale', type=float, default=1.0, help='problem size relative to the full one (e.g. 0.0625)')
  ap.add_argument('--repeat', type=int, default=1, help='measure each row this many times (torch, then tgc, each time); print the medians')
  args = ap.parse_args(argv)
  os.environ.pop('DEBUG', None)
  import torch
  tdev = 'cuda' if args.device == 'CUDA' else 'cpu'
  tsync = torch.cuda.synchronize if tdev == 'cuda' else (lambda: None)
  dev = tgc.Device[args.device]
  sync = dev.synchronize
  table = rows(args.scale)
  names = [r for r in args.rows.split(',') if r] or list(table)
  if unknown := [r for r in names if r not in table]:
    print(f"bench/gpu.py: error: unknown rows {', '.join(map(repr, unknown))}; the rows: {', '.join(table)}", file=sys.stderr)
    return 1
  rng = np.random.default_rng(0)

  tiny = Tensor(np.ones(16, np.float32), device=args.device)
  overhead = median_time(lambda: (tiny + 1).realize(), sync, 200)
  gpu = torch.cuda.get_device_name() if tdev == 'cuda' else 'CPU'
  print(f"tgc {tgc.__version__} on {args.device} ({gpu}) beside torch {torch.__version__}; median of {args.iters} calls"
        + (f", then the median of {args.repeat} such measurements" if args.repeat > 1 else ''))
  print(f"launch overhead (e2e of a 16-element add): {overhead * 1e6:.1f} us\n")
  hdr = f"{'work':<22s} {'torch':>10s} {'tgc e2e':>10s} {'tgc kern':>10s} {'unit':>7s} {'e2e/torch':>9s} {'kern/torch':>10s} {'e2e/kern':>8s} {'e2e-kern':>10s} {'kernels':>7s}"
  print(hdr); print('-' * len(hdr))
  ok = True
  for name in names:
    shapes, dt, f, tf, work, unit = table[name]
    # (numpy has no bfloat16: such inputs are made in float32 and cast on the device by each framework)
    arrs = [rng.standard_normal(s).astype(dt if dt != 'bfloat16' else 'float32') for s in shapes]
    ts = [torch.from_numpy(a).to(tdev).to(getattr(torch, dt)) for a in arrs]
    xs = [Tensor(a, device=args.device).cast(dt).realize() for a in arrs]
    runs = []
    for _ in range(args.repeat):
      t_torch = median_time(lambda: tf(*ts), tsync, args.iters)
      t_e2e = median_time(lambda: f(*xs).realize(), sync, args.iters)
      kern = []
      for _ in range(max(3, args.iters // 2)):
        with profile() as launches: out = f(*xs).realize()
        kern.append(sum(t for _, t in launches))
      runs.append((t_torch, t_e2e, statistics.median(kern)))
    t_torch, t_e2e, t_kern = (statistics.median(r[i] for r in runs) for i in range(3))
    ref = tf(*ts).float().cpu().numpy()
    got = out.numpy().astype(np.float32)
    tol = 1e-2 if 'tf32' in name else {'float16': 2e-2, 'bfloat16': 5e-2}.get(dt, 1e-3)  # (TF32: 10-bit mantissas, both sides)
    good = np.allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))
    ok &= good
    scale = 1e9 if unit == 'GB/s' else 1e12
    rate = lambda t: work / t / scale
    print(f"{name:<22s} {rate(t_torch):10.1f} {rate(t_e2e):10.1f} {rate(t_kern):10.1f} {unit:>7s} {t_torch / t_e2e:9.2f} {t_torch / t_kern:10.2f} "
          f"{t_e2e / t_kern:8.2f} {(t_e2e - t_kern) * 1e6:8.1f}us {len(launches):7d}{'' if good else '  WRONG RESULT'}")
    del xs, ts, out
  s = dev.allocator.stats()
  print(f"\nallocator: {s['in_use'] / 1e6:.1f} MB in use, {s['cached'] / 1e6:.1f} MB cached, peak {s['peak'] / 1e6:.1f} MB, {s['allocs']} device allocations")
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
