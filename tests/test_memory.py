"""Device memory: Buffers and allocators, tensors that stay on their device, the host schedule's liveness.

OPENCL (PoCL on this machine) allocates real cl.Buffers, the path a GPU's OpenCL driver takes, so the copy
counts below are those a GPU would see; CUDA runs the same code on the GPU machine (tests/test_target_cuda.py).
"""
import gc
import numpy as np
import pytest
import tgc
from tgc import Tensor
from tgc.runtime import Allocator, Buffer, HostAllocator, HostDevice, get_device, register_device
from tgc.runtime import DEVICES, _opened
from tgc.runtime.cpu import CPUDevice, HostPointerAllocator
from tgc.ir import dtypes as D
from tgc import tensor as T
import tgc.compiler


def opencl():
  try: return get_device('OPENCL')
  except tgc.TgcError as e: pytest.skip(str(e))


def counts(dev):
  s = dev.allocator.stats()
  return s['copies_in'], s['copies_out'], s['copies']


def test_chain_of_20_ops_copies_each_input_in_once_and_each_result_out_once():
  dev = opencl()
  a_np, b_np = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)
  def chain(a, b):  # 20 ops; every fifth result is a kernel boundary of its own (4 kernels)
    x = a
    for i in range(20):
      x = x * b + (i % 3) if i % 5 == 4 else x * 0.5 + b
      if i % 5 == 4 and isinstance(x, Tensor): x = x.contiguous()
    return x
  ref = chain(a_np.astype(np.float64), b_np.astype(np.float64))
  before = counts(dev)
  a, b = Tensor(a_np, device='OPENCL'), Tensor(b_np, device='OPENCL')
  assert counts(dev) == (before[0] + 2, before[1], before[2])  # one copy in per input
  out = chain(a, b).realize()
  assert counts(dev) == (before[0] + 2, before[1], before[2])  # realize copies nothing: 4 kernels on device buffers
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
  assert counts(dev) == (before[0] + 2, before[1] + 1, before[2])  # one copy out per numpy()
  out.numpy(); out.tolist()
  assert counts(dev)[1] == before[1] + 3


def test_1000_realizes_keep_bytes_in_use_flat():
  dev = opencl()
  x = Tensor(np.ones(1 << 20, np.float32), device='OPENCL')
  y = (x + 1).realize()
  base = dev.allocator.stats()
  for _ in range(1000): y = (x + 1).realize()
  s = dev.allocator.stats()
  assert s['in_use'] == base['in_use'], (base, s)
  assert s['allocs'] <= base['allocs'] + 1  # two results live at a time (y and the next); then cached blocks
  assert float(y[7].item()) == 2.0


def test_host_device_bytes_in_use_flat():
  dev = get_device('CPU')
  x = Tensor(np.ones(1 << 20, np.float32), device='CPU')
  y = (x + 1).realize()
  base = dev.allocator.in_use
  for _ in range(200): y = (x * 2 + y).realize()
  assert dev.allocator.in_use == base
  assert float(y[0].item()) == 2 + 200 * 2  # y starts at 2; each step adds 2


@pytest.mark.parametrize('device', ['CPU', 'OPENCL'])
def test_intermediates_go_back_to_the_allocator_after_their_last_launch(device):
  dev = opencl() if device == 'OPENCL' else get_device(device)
  n = 1 << 18
  x = Tensor(np.ones(n, np.float32), device=device)
  y = x
  for _ in range(12): y = (y + 1).contiguous()  # 12 kernels, 11 intermediates
  base = dev.allocator.stats()
  dev.allocator.peak = dev.allocator.in_use
  y.realize()
  s = dev.allocator.stats()
  assert s['in_use'] == base['in_use'] + 4 * n  # the result alone stays
  assert s['peak'] <= base['in_use'] + 2 * 4 * n  # two buffers at a time: an input and an output
  np.testing.assert_array_equal(y.numpy(), np.full(n, 13, np.float32))


def test_a_schedules_peak_is_its_liveness_bound():
  """The allocator's peak over one realize is the liveness bound by hand: a block lives from the launch that writes
  it to its last reader. a = x + 1, b = 2a, c = a + b (a's and b's last use), d = c * c (c's), the sums of d's rows
  (d's): at c's launch a, b and c are live (3 blocks of n), at d's c and d, at the sums' d and the result (n / 8);
  blocks kept to the end of the call would peak at a + b + c + d + n / 8."""
  dev, n = get_device('CPU'), 1 << 16
  x = Tensor(np.ones(n, np.float32), device='CPU').realize()
  a = (x + 1).contiguous(); b = (a * 2).contiguous(); c = (a + b).contiguous(); d = (c * c).contiguous()
  e = d.reshape(n // 8, 8).sum(1)
  base = dev.allocator.in_use
  dev.allocator.peak = base
  e.realize()
  f32 = 4
  live = [[a], [a, b], [a, b, c], [c, d], [d, e]]  # per launch, in order: what its launch needs (each of n elements but e)
  size = lambda t: f32 * t.numel()
  assert dev.allocator.peak - base == max(sum(size(t) for t in ts) for ts in live) == 3 * f32 * n
  assert dev.allocator.in_use - base == size(e)
  np.testing.assert_array_equal(e.numpy(), np.full(n // 8, 8 * 36, np.float32))  # ((1 + 1) * 3) ** 2 = 36, 8 a row


def test_attention_backward_keeps_one_score_matrix_a_layer():
  """A stack of causal self-attention layers keeps one (T, T) block a head and layer for its backward: softmax's
  division comes after the matmul with the values, so the probabilities are never a buffer beside the scores (which
  the backward needs for their exponentials). The peak, where the last layer's backward starts: a score block of
  each of the n layers and the last one's gradient, n + 1, beside (B, T, D) activations (each 1/32 of a score block
  here; at most 8 a layer: its input, q, k, v, the attention output and its projection, two gradients). The
  gradient is torch's."""
  import torch
  from tgc import nn
  dev, (B, T, D, H, n) = get_device('CPU'), (2, 256, 16, 2, 4)
  rng = np.random.default_rng(0)
  xs = rng.standard_normal((B, T, D)).astype(np.float32)
  ws = [(rng.standard_normal((D, 3 * D)) * 0.3).astype(np.float32) for _ in range(n)]
  def run(x, w, attention):
    for w_ in w:
      q, k, v = [y.reshape(B, T, H, D // H).transpose(1, 2) for y in (x @ w_).chunk(3, dim=2)]
      x = x + attention(q, k, v).transpose(1, 2).reshape(B, T, D)
    return x.square().sum()
  x = Tensor(xs, device='CPU', requires_grad=True).realize()
  run(x, [Tensor(w, device='CPU') for w in ws], lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True)).backward()
  base = dev.allocator.in_use
  dev.allocator.peak = base
  x.grad.realize()
  f32, score, act = 4, B * H * T * T, B * T * D
  assert dev.allocator.peak - base <= f32 * ((n + 1) * score + 8 * n * act)
  tx = torch.tensor(xs, requires_grad=True)
  run(tx, [torch.tensor(w) for w in ws], lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)).backward()
  want = tx.grad.numpy()
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())  # (float32 sums of values up to 1e4)


def test_a_jitted_training_step_keeps_no_copy_of_its_state():
  """After jitted AdamW steps the device holds what it held before them: the weights, the optimizer's state and the
  inputs, once. The jit keeps none of the values its first call read or wrote (the step's weights and moments before
  and after it) and no lazy gradient of that call holds the weights it read (the gradients are None after a jitted
  step; an eager step's stay until the next zero_grad); no step leaves garbage for the collector to find (the check
  runs without gc.collect). The losses and weights are those of eager steps."""
  from tgc import nn
  from tgc.nn import optim
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((8, 16)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int32)
  def model():
    l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
    for l, w in ((l1, 0.1), (l2, 0.2)):
      l.weight.assign(Tensor(np.linspace(-w, w, l.weight.numel(), dtype=np.float32).reshape(l.weight.shape))); l.bias.assign(Tensor.zeros(*l.bias.shape))
    ps = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = optim.AdamW(ps, lr=1e-2)
    Tensor.realize(*ps, *opt.buffers)
    def step(x, y):
      opt.zero_grad()
      loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      return loss
    return step, ps
  al = get_device('CPU').allocator
  x, y = Tensor(xs, device='CPU').realize(), Tensor(ys, device='CPU').realize()
  eager, eager_ps = model()
  want = [eager(x, y).item() for _ in range(4)]
  step, ps = model()
  step = Tensor.jit(step)
  base = al.in_use
  got = [step(x, y).item() for _ in range(4)]
  assert al.in_use == base, (al.in_use, base)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert all(p.grad is None for p in ps) and all(p.grad is not None for p in eager_ps)
  for p, q in zip(ps, eager_ps): np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('device', ['CPU', 'C'])
def test_a_specialized_function_keeps_its_intermediates(device):
  """A specialized function (an ONNX model's) owns its intermediates on a host device: allocated once, shared by the
  slots whose launches do not overlap (12 kernels, two blocks); a call allocates its result alone, and calls with
  other inputs still compute from their own."""
  from tgc.tensor import _build_module
  dev, n = get_device(device), 1 << 16
  x = Tensor(np.ones(n, np.float32), device=device)
  y = x
  for _ in range(12): y = (y * 2 + 1).contiguous()
  m, _ = _build_module([y.node], 'f')
  base = dev.allocator.in_use
  fn = tgc.compiler.compile_module(m, device).specialize({})
  outs = [fn(np.full(n, v, np.float32))[0] for v in (1.0, 3.0, -2.0)]
  held = dev.allocator.in_use - base
  assert held == 2 * 4 * n, held  # two blocks take turns: a launch's input and its output
  for _ in range(5): fn(np.zeros(n, np.float32))
  assert dev.allocator.in_use - base == held
  for v, o in zip((1.0, 3.0, -2.0), outs):
    want = np.full(n, v, np.float32)
    for _ in range(12): want = want * 2 + 1
    np.testing.assert_array_equal(o, want)


def test_a_specialized_function_batches_its_small_launches():
  """On the CPU, a specialized function's launches that settled on one thread run as one native call (a step of the
  plan), still counted one by one and computing the same; profiling times them one by one again."""
  from tgc.tensor import _build_module
  from tgc.runtime import cpu
  x = np.linspace(-1, 1, 64).astype(np.float32)
  y = Tensor(x)
  for _ in range(30): y = (y * 1.5 - 0.25).contiguous()
  m, _ = _build_module([y.node], 'f')
  fn = tgc.compiler.compile_module(m, 'CPU').specialize({})
  want = x.copy()
  for _ in range(30): want = want * np.float32(1.5) - np.float32(0.25)
  for _ in range(3): np.testing.assert_allclose(fn(x)[0], want, rtol=1e-5, atol=1e-4)  # (the first calls settle each kernel)
  assert len(fn.plan[0]) < 30  # launches merged
  plain = tgc.compiler.compile_module(_build_module([y.node], 'f')[0], 'CPU')  # (not specialized: launch by launch)
  n0 = cpu.stats['launches']
  np.testing.assert_array_equal(fn(x * 2)[0], plain(x * 2)[0])
  assert cpu.stats['launches'] - n0 == 60
  with tgc.compiler.profile() as launches: fn(x)
  assert len(launches) == 30


def test_to_copies_between_devices():
  opencl()
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device='OPENCL')
  b = (a * 2).to('CPU')
  c = (b + 1).to('C').to('OPENCL') - a
  assert c.device == 'OPENCL'
  np.testing.assert_array_equal(c.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
  with pytest.raises(tgc.TgcError, match='different devices'): (a + b).realize()


def test_bf16_and_bool_round_trip_through_device_buffers():
  opencl()
  x = np.array([1.5, -2.25, 3.0], np.float32)
  t = Tensor(x, dtype='bfloat16', device='OPENCL')
  np.testing.assert_array_equal((t * 2).numpy(), x * 2)
  m = Tensor([True, False, True], device='OPENCL')
  assert (m.logical_not()).tolist() == [False, True, False]


def test_compile_takes_and_gives_numpy_arrays_on_every_device():
  text = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %c = tensor.mul %a, %b : tensor<4xf32>
  %d = tensor.const 1.0 : tensor<4xf32>
  %e = tensor.add %c, %d : tensor<4xf32>
  func.return %e : tensor<4xf32>
}"""
  a, b = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
  for dev in ('CPU', 'INTERP', 'C', 'OPENCL'):
    if dev == 'OPENCL': opencl()
    (r,) = tgc.compile(text, device=dev)(a, b)
    assert isinstance(r, np.ndarray)
    np.testing.assert_array_equal(r, a * b + 1)


def test_jit_replays_on_device_buffers():
  dev = opencl()
  @Tensor.jit
  def f(x, y): return (x * y + 1).sum(axis=1)
  rng = np.random.default_rng(1)
  for i in range(4):
    a, b = rng.standard_normal((2, 8, 16)).astype(np.float32)
    x, y = Tensor(a, device='OPENCL'), Tensor(b, device='OPENCL')
    before = counts(dev)
    r = f(x, y)
    assert counts(dev) == before  # replaying launches on the inputs' buffers copies nothing
    np.testing.assert_allclose(r.numpy(), (a * b + 1).sum(axis=1), rtol=1e-5, atol=1e-5)


# ---- the allocator itself

class CountingAllocator(Allocator):
  """Device-like memory (blocks are cached) of a fixed capacity; `fail_at` makes the N-th _alloc fail."""
  def __init__(self, capacity=1 << 20, fail_at=None):
    super().__init__('TEST')
    self.capacity, self.used, self.calls, self.fail_at, self.freed = capacity, 0, 0, fail_at, []
  def _alloc(self, nbytes):
    self.calls += 1
    if self.calls == self.fail_at or self.used + nbytes > self.capacity: raise MemoryError('test device is full')
    self.used += nbytes
    return bytearray(nbytes)
  def _free(self, h): self.used -= len(h); self.freed.append(h)
  def _mem_info(self): return (self.capacity - self.used, self.capacity)


def test_caching_allocator_reuses_blocks_by_size_and_trims_when_full():
  a = CountingAllocator(capacity=1000)
  h1 = a.alloc(400); a.free(h1, 400)
  assert a.stats()['cached'] == 400 and a.stats()['in_use'] == 0
  assert a.alloc(400) is h1 and a.calls == 1  # from the cache
  a.free(h1, 400)
  h2 = a.alloc(800)  # 400 cached + 800 > 1000: the cache is trimmed, then it fits
  assert a.freed == [h1] and a.in_use == 800 and a.cached == 0
  with pytest.raises(tgc.TgcError, match=r'TEST: out of device memory: asked for 600 bytes \(200 of 1000 bytes free\)'):
    a.alloc(600)
  assert a.in_use == 800 and a.peak == 800
  a.free(h2, 800)
  assert a.in_use == 0


class FlakyDevice(HostDevice):
  """The CPU's compiler over host memory whose allocator fails from a chosen call on (the device is full)."""
  name, target = 'FLAKY', 'llvm'
  def __init__(self):
    class Flaky(HostPointerAllocator):
      fail_at, calls = None, 0
      def _alloc(self, nbytes):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at: raise MemoryError('injected failure')
        return super()._alloc(nbytes)
    HostDevice.__init__(self); self.allocator = Flaky(self.name)
  def compile(self, fn): return get_device('CPU').compile(fn)


@pytest.fixture
def flaky():
  register_device('FLAKY', 'test_memory:FlakyDevice')
  yield get_device('FLAKY')
  DEVICES.pop('FLAKY', None); _opened.pop('FLAKY', None)


def test_out_of_memory_is_a_clear_error_and_the_allocator_stays_consistent(flaky):
  al = flaky.allocator
  x = Tensor(np.arange(64, dtype=np.float32), device='FLAKY')
  base = al.in_use
  for n in (1, 2, 3):
    al.calls, al.fail_at = 0, n
    y = x
    for _ in range(4): y = (y + 1).contiguous()
    with pytest.raises(tgc.TgcError, match=r'FLAKY: out of device memory: asked for 256 bytes'): y.realize()
    del y; gc.collect()
    assert al.in_use == base  # what the failed call had taken went back
  al.fail_at = None
  np.testing.assert_array_equal((x + 1).contiguous().add(1).numpy(), np.arange(64) + 2)


def test_a_buffer_is_freed_once():
  gc.collect()
  try: dev = get_device('OPENCL').name  # a caching allocator
  except tgc.TgcError: dev = 'CPU'
  b = Buffer(dev, 100, D.f32)
  al = b.allocator
  used = al.in_use
  b.free(); b.free(); del b; gc.collect()
  assert al.in_use == used - 400


def test_host_buffers_are_numpy_memory():
  arr = np.arange(6, dtype=np.int32)
  b = Buffer.wrap('CPU', arr)
  assert isinstance(b.allocator, HostAllocator) and np.shares_memory(b.host_array, arr)
  c = Buffer.from_numpy('CPU', arr)
  assert not np.shares_memory(c.host_array, arr)
  np.testing.assert_array_equal(c.numpy(), arr)


def test_device_synchronize_and_stats_are_public():
  d = tgc.Device['CPU']
  d.synchronize()
  assert set(d.allocator.stats()) >= {'in_use', 'cached', 'peak'}
  assert isinstance(get_device('CPU'), CPUDevice) and d.target == 'llvm'


def test_specialize_runs_what_the_fixed_arguments_alone_give_once():
  # f(x, w) = (x + (w * 2 copied), (w - 1) copied): with w fixed, the two kernels over w alone run once, at
  # specialize; a call launches the one kernel that reads x, and the result made from w alone is a copy each call
  x, w = Tensor(np.arange(8, dtype=np.float32)), Tensor(np.full(8, 3, np.float32))
  y, z = x + (w * 2).contiguous(), (w - 1).contiguous()
  m, leaves = T._build_module([y.node, z.node])
  fn = tgc.compiler.compile_module(m, 'CPU')
  cpu = get_device('CPU')
  bufs = [l.buf for l in leaves]
  iw = leaves.index(w.node)
  n0 = cpu.launches; plain = fn.run(bufs); assert cpu.launches - n0 == 3
  fixed = fn.specialize({iw: w.node.buf})
  got = []
  for a in (np.arange(8, dtype=np.float32), np.ones(8, np.float32)):
    bufs[1 - iw] = Buffer.from_numpy('CPU', a)
    n0 = cpu.launches; got.append(fixed.run(bufs)); assert cpu.launches - n0 == 1
    np.testing.assert_array_equal(got[-1][0].numpy(), a + 6)
    np.testing.assert_array_equal(got[-1][1].numpy(), np.full(8, 2, np.float32))
  np.testing.assert_array_equal(plain[0].numpy(), np.arange(8) + 6)
  assert got[0][1] is not got[1][1]  # (a buffer made at specialize is handed out as a copy)
