"""Several devices: devices by index (CPU:N), sharded tensors on them (tinygrad's shard / to(tuple) API), the host
all-reduce; results, gradients and training steps equal to one device's."""
import numpy as np
import pytest
from tgc import Tensor, TgcError
from tgc.runtime import get_device


def test_devices_by_index_are_distinct_objects():
  assert get_device('CPU:0') is get_device('CPU') is get_device('cpu')
  d1 = get_device('CPU:1')
  assert d1 is not get_device('CPU') and d1.name == 'CPU:1' and d1.index == 1
  assert d1.allocator is not get_device('CPU').allocator


def test_tensor_on_a_device_index_and_copies_between_them():
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  x = Tensor(a, device='cpu:1')
  assert x.device == 'CPU:1' and Tensor(a, device='CPU:0').device == 'CPU'
  y = (x * 2).to('CPU:2')
  assert y.device == 'CPU:2'
  np.testing.assert_array_equal(y.numpy(), a * 2)
  with pytest.raises(TgcError, match="different devices"): x + Tensor(a)


@pytest.mark.parametrize('bad', ['CPU:x', 'CPU:-1', 'NOPE:1'])
def test_bad_device_index_is_a_clear_error(bad):
  with pytest.raises(TgcError, match="device"): Tensor([1.0], device=bad)


# ---------------------------------------------------------------- sharded tensors
# On $TGC_TEST_DEVICE (CPU: CPU:0 .. CPU:3 with the host all-reduce; CUDA: the GPUs, through NCCL)
import os
import tgc
from tgc import nn
from tgc.nn import optim
from tgc.nn.state import get_parameters
from tgc.multi import MultiBuffer

DEV = os.environ.get('TGC_TEST_DEVICE', 'CPU')
NDEV = int(os.environ.get('TGC_TEST_NDEV', '2'))
DEVS = tuple(f"{DEV}:{i}" for i in range(NDEV))
RNG = np.random.default_rng(0)

def rnd(*shape): return RNG.standard_normal(shape).astype(np.float32)

def close(t, want, rtol=1e-5, atol=1e-5): np.testing.assert_allclose(t.numpy(), want, rtol=rtol, atol=atol)


def test_shard_and_replicate_have_tinygrads_api():
  a = rnd(4 * NDEV, 2 * NDEV)
  x = Tensor(a, device=DEV).shard(DEVS, axis=0)
  assert x.device == tgc.Device.canonicalize(DEVS) and x.sharding == 0 and x.shape == a.shape
  assert isinstance(x.node.buf, MultiBuffer) and [b.device for b in x.node.buf.bufs] == list(x.device)
  np.testing.assert_array_equal(x.node.buf.shard_numpy(1), a[4:8])
  r = Tensor(a, device=DEV).to(DEVS)
  assert r.sharding is None and r.device == x.device
  np.testing.assert_array_equal(r.numpy(), a)
  w = Tensor(a, device=DEV); w.shard_(DEVS, axis=-1)
  assert w.sharding == 1
  np.testing.assert_array_equal(w.numpy(), a)
  v = Tensor(a, device=DEV); v.to_(DEVS)
  assert v.sharding is None
  np.testing.assert_array_equal(x.to(DEVS[1]).numpy(), a)  # the shards joined on one device
  assert Tensor(a, device=DEVS).sharding is None  # made on a tuple of devices: replicated


def test_elementwise_reduce_and_movement_ops_equal_one_device():
  a, b, c = rnd(4 * NDEV, 6), rnd(4 * NDEV, 6), rnd(6)
  x, y, z = Tensor(a, device=DEV).shard(DEVS, 0), Tensor(b, device=DEV).shard(DEVS, 0), Tensor(c, device=DEV).to(DEVS)
  close((x * y + z).relu(), np.maximum(a * b + c, 0))
  close(x.sum(), a.sum(), rtol=1e-4)
  close(x.sum(0), a.sum(0)); close(x.sum(1), a.sum(1)); close(x.max(0), a.max(0)); close(x.mean(), a.mean(), rtol=1e-4)
  close(x.softmax(1), np.exp(a) / np.exp(a).sum(1, keepdims=True))
  ls = x.softmax(0).numpy()
  np.testing.assert_allclose(ls, np.exp(a - a.max(0)) / np.exp(a - a.max(0)).sum(0), rtol=1e-5, atol=1e-6)
  close(x.reshape(NDEV, 24), a.reshape(NDEV, 24)); close(x.reshape(-1), a.reshape(-1)); close(x.T, a.T)
  close(x.permute(1, 0).reshape(6, 2 * NDEV, 2), a.T.reshape(6, 2 * NDEV, 2))
  close(x[1:3], a[1:3]); close(x.flip(0), a[::-1]); close(x.pad(((1, 0), (0, 0))), np.pad(a, ((1, 0), (0, 0))))
  close(x[:, 2:4], a[:, 2:4]); close(x.flip(1), a[:, ::-1])
  s = Tensor(a, device=DEV).shard(DEVS, 1) if 6 % NDEV == 0 else Tensor(a, device=DEV).to(DEVS)
  close(x + s, a + a)  # different axes: resharded
  close((x > 0).where(x, 0.5).cumsum(1), np.cumsum(np.where(a > 0, a, 0.5), 1), rtol=1e-4)  # (a scan of each shard)
  close(x.cumsum(0), np.cumsum(a, 0), rtol=1e-4); close(x.cummax(1)[0], np.maximum.accumulate(a, 1))  # (gathered first; each shard's)
  assert (x.argmax(1).numpy() == a.argmax(1)).all()


def test_matmul_row_column_and_contracted_splits():
  a, w = rnd(2 * NDEV, 8 * NDEV), rnd(8 * NDEV, 4 * NDEV)
  want = a @ w
  rows, cols = Tensor(a, device=DEV).shard(DEVS, 0), Tensor(w, device=DEV).shard(DEVS, 1)
  rep_a, rep_w = Tensor(a, device=DEV).to(DEVS), Tensor(w, device=DEV).to(DEVS)
  k_a, k_w = Tensor(a, device=DEV).shard(DEVS, 1), Tensor(w, device=DEV).shard(DEVS, 0)
  for x, y, axis in [(rows, rep_w, 0), (rep_a, cols, 1), (k_a, k_w, None), (k_a, rep_w, None), (rep_a, k_w, None), (rows, cols, 0)]:
    r = (x @ y).realize()
    assert r.sharding == axis
    close(r, want, rtol=1e-4, atol=1e-4)
  b = rnd(NDEV, 3, 5); c = rnd(NDEV, 5, 2)
  close(Tensor(b, device=DEV).shard(DEVS, 0) @ Tensor(c, device=DEV).to(DEVS), b @ c, rtol=1e-5)


def test_gradients_of_sharded_and_replicated_tensors_equal_one_device():
  a, w = rnd(4 * NDEV, 8), rnd(8, 3)
  def grads(x, w):
    w.requires_grad = True; x.requires_grad = True
    loss = ((x @ w).relu() * 2 - 1).square().mean()
    loss.backward()
    return loss.numpy(), x.grad.numpy(), w.grad.numpy()
  want = grads(Tensor(a, device=DEV), Tensor(w, device=DEV))
  got = grads(Tensor(a, device=DEV).shard(DEVS, 0), Tensor(w, device=DEV).to(DEVS))
  for g, wnt in zip(got, want): np.testing.assert_allclose(g, wnt, rtol=1e-5, atol=1e-6)


class _MLP:
  def __init__(self): self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
  def __call__(self, x): return self.l2(self.l1(x).gelu())

def _clone(model, devices=None, axes=None):
  """A model of the same weights, on one device or on `devices` (a weight replicated, or split per `axes`)."""
  m = _MLP()
  for name, (dst, src) in {'l1.weight': (m.l1, model.l1), 'l2.weight': (m.l2, model.l2)}.items():
    for attr in ('weight', 'bias'):
      t = Tensor(getattr(src, attr).numpy(), device=DEV)
      if devices is not None: t = t.shard(devices, (axes or {}).get(f"{name.split('.')[0]}.{attr}"))
      setattr(dst, attr, t)
  return m


@pytest.mark.parametrize('optimizer', ['sgd', 'adam'])
def test_data_parallel_training_equals_one_device(optimizer):
  Tensor.manual_seed(1)
  base = _MLP()
  x, y = rnd(8 * NDEV, 16), RNG.integers(0, 4, 8 * NDEV)
  def train(model, xt, yt, steps=5):
    params = get_parameters(model)
    opt = optim.SGD(params, lr=0.05, momentum=0.9) if optimizer == 'sgd' else optim.Adam(params, lr=0.01)
    @Tensor.jit
    def step(xt, yt):
      calls.append(xt.device)
      opt.zero_grad()
      loss = model(xt).sparse_categorical_crossentropy(yt)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      return loss
    return np.array([step(xt, yt).item() for _ in range(steps)]), [p.numpy() for p in params]
  calls = []
  one, w1 = train(_clone(base), Tensor(x, device=DEV), Tensor(y, device=DEV))
  many, wn = train(_clone(base, DEVS), Tensor(x, device=DEV).shard(DEVS, 0), Tensor(y, device=DEV).shard(DEVS, 0))
  assert one[-1] < one[0]
  assert len(calls) == 2  # the Python step ran once a model: the other steps were replays (the collectives too)
  np.testing.assert_allclose(many, one, rtol=1e-5)
  for a, b in zip(wn, w1): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_tensor_parallel_mlp_forward_and_backward_equal_one_device():
  Tensor.manual_seed(2)
  base = _MLP()
  x = rnd(6, 16)
  # column-split first layer (its output features), row-split second (its input features): one all-reduce
  split = {'l1.weight': 1, 'l1.bias': 0, 'l2.weight': 0, 'l2.bias': None}
  one, tp = _clone(base), _clone(base, DEVS, split)
  outs = []
  for m, xt in ((one, Tensor(x, device=DEV)), (tp, Tensor(x, device=DEV).to(DEVS))):
    params = get_parameters(m)
    for p in params: p.requires_grad = True
    out = m(xt)
    out.square().sum().backward()
    outs.append((out.numpy(), [p.grad.numpy() for p in params]))
  assert tp.l1.weight.sharding == 1
  np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
  for g, w in zip(outs[1][1], outs[0][1]): np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_mismatched_shards_and_devices_are_clear_errors():
  a = rnd(3, 4)
  with pytest.raises(tgc.ShapeError, match=r"cannot shard shape \(3, 4\) along axis 0 over 2 devices"):
    Tensor(a, device=DEV).shard(DEVS[:1] + (f"{DEV}:5",), 0)
  x = Tensor(rnd(4, 4), device=DEV).shard((f"{DEV}:0", f"{DEV}:1"), 0)
  y = Tensor(rnd(4, 4), device=DEV).shard((f"{DEV}:1", f"{DEV}:0"), 0)  # (devices that exist on a machine of two GPUs)
  with pytest.raises(TgcError, match="different devices"): x + y
  with pytest.raises(TgcError, match="different devices"): x + Tensor(rnd(4, 4), device=DEV)
  with pytest.raises(TgcError, match="repeat"): Tensor(a, device=DEV).shard((DEV, DEV))


def test_collectives_check_their_buffers():
  from tgc.runtime import Buffer
  from tgc.runtime.collectives import for_devices
  from tgc.ir import dtypes as D
  devs = tgc.Device.canonicalize(DEVS)
  eng = for_devices(devs)
  vals = [np.arange(4 * NDEV, dtype=np.float32) + i for i in range(NDEV)]
  bufs = [Buffer.from_numpy(d, v) for d, v in zip(devs, vals)]
  np.testing.assert_allclose(eng.allreduce(bufs)[1].numpy(), sum(vals))
  np.testing.assert_allclose(eng.allreduce(bufs, 'max')[0].numpy(), vals[-1])
  np.testing.assert_allclose(eng.allgather(bufs)[0].numpy(), np.concatenate(vals))
  np.testing.assert_allclose(eng.reduce_scatter(bufs)[NDEV - 1].numpy(), np.split(sum(vals), NDEV)[-1])
  bad = bufs[:-1] + [Buffer.from_numpy(devs[-1], np.zeros(3, np.float32))]
  with pytest.raises(TgcError, match="mismatched shards"): eng.allreduce(bad)
  with pytest.raises(TgcError, match="buffers for"): eng.allreduce(bufs[:1])
  h = [Buffer.from_numpy(d, D.encode(v, D.bf16.fmt), D.bf16) for d, v in zip(devs, vals)]
  np.testing.assert_allclose(D.from_storage(eng.allreduce(h)[0].numpy(), D.bf16), sum(vals), rtol=1e-2)


@pytest.mark.skipif(DEV != 'CUDA', reason="NCCL's watchdog: CUDA devices")
def test_an_aborted_nccl_group_is_an_error_on_every_later_use():
  from tgc.runtime import Buffer
  from tgc.runtime.nccl import NCCLCollectives, NCCLError
  devs = tgc.Device.canonicalize(DEVS)
  eng = NCCLCollectives(devs, timeout=5)  # (an engine of its own: the shared one stays usable)
  bufs = [Buffer.from_numpy(d, np.ones(1024, np.float32)) for d in devs]
  np.testing.assert_allclose(eng.allreduce(bufs)[0].numpy(), NDEV)
  eng._abort("nccl: aborted by the test")
  with pytest.raises(NCCLError, match="aborted by the test"): eng.allreduce(bufs)


def test_to_ir_prints_one_function_a_device_with_its_collectives():
  x = Tensor(rnd(4, 4), device=DEV).shard(DEVS, 0)
  text = (x * 2).sum().to_ir()
  assert text.count('func.func @main_') == NDEV and 'tensor.allreduce add' in text and f'rank = {NDEV - 1}' in text


# ---------------------------------------------------------------- one process per device (tgc.distributed)
import socket, subprocess, sys, time

def _free_port():
  with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

def _ranks(world, *args, ranks=None):
  port, here = _free_port(), os.path.dirname(__file__)
  env = {**os.environ, 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(port), 'WORLD_SIZE': str(world), 'DEVICE': DEV,
         'PYTHONPATH': os.pathsep.join([os.path.dirname(here), os.environ.get('PYTHONPATH', '')])}
  procs = [subprocess.Popen([sys.executable, os.path.join(here, 'dist_worker.py'), *args], env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (ranks if ranks is not None else range(world))]
  return [(p.wait(timeout=240), p.stdout.read()) for p in procs]


def test_two_processes_all_reduce_their_gradients():
  # (CPU: the host backend, through the store; CUDA: NCCL, a communicator a process by ncclCommInitRank)
  for rc, out in _ranks(2): assert rc == 0 and 'ok' in out, out


def test_two_processes_train_a_jitted_step_that_all_reduces_its_gradients():
  # (each rank's half of the batch; the step, its all_reduce_coalesced with it, replayed by the jit: as one process on the whole batch)
  for rc, out in _ranks(2, '60', 'jit'): assert rc == 0 and 'ok' in out, out


def test_a_missing_rank_is_a_timeout_error_not_a_hang():
  t0 = time.monotonic()
  (rc, out), = _ranks(2, '3', ranks=[0])  # rank 1 never starts
  assert rc != 0 and 'DistributedError' in out and 'timed out after 3 s' in out, out
  assert time.monotonic() - t0 < 60


def test_sharding_on_devices_whose_memory_is_not_the_hosts(testc):
  """A device-style allocator (tests/test_backend.py's TESTC: cached blocks, copies in and out): shards, the host
  collectives and gathers go through copies."""
  a, w = rnd(8, 6), rnd(6, 4)
  devs = ('TESTC:0', 'TESTC:1')
  x, wt = Tensor(a, device='TESTC').shard(devs, 0), Tensor(w, device='TESTC').to(devs)
  close((x @ wt).sum(0), (a @ w).sum(0), rtol=1e-4)
  close(x.T.to('TESTC:1'), a.T)

from test_backend import testc  # noqa: E402,F401  (the fixture)


def test_jit_replays_a_shard_made_inside_it_and_keys_on_the_sharded_axis():
  calls = []
  @Tensor.jit
  def f(x, w):
    calls.append(1)
    return (x.shard(DEVS, 0) @ w).sum(1).realize()
  w = Tensor(rnd(3, 2 * NDEV), device=DEV)
  for i in range(3):
    a = rnd(2 * NDEV, 3)
    close(f(Tensor(a, device=DEV), w.shard(DEVS, 1)), (a @ w.numpy()).sum(1), rtol=1e-5)
  assert len(calls) == 1
  a = rnd(2 * NDEV, 3)
  close(f(Tensor(a, device=DEV), w.to(DEVS)), (a @ w.numpy()).sum(1), rtol=1e-5)  # another sharding: traced again
  assert len(calls) == 2


def test_loading_nccl_turns_nvlink_multicast_off_and_a_missing_library_is_a_clear_error(monkeypatch):
  from tgc.runtime import nccl
  monkeypatch.setattr(nccl, '_lib', None)
  monkeypatch.delenv('NCCL_NVLS_ENABLE', raising=False)
  monkeypatch.setenv('TGC_NCCL_LIB', '/nonexistent/libnccl.so.2')
  with pytest.raises(nccl.NCCLError, match="NCCL unavailable: cannot load /nonexistent/libnccl.so.2"): nccl.lib()
  assert os.environ['NCCL_NVLS_ENABLE'] == '0'  # set before the library loads
  monkeypatch.setenv('NCCL_NVLS_ENABLE', '1')  # a user's own setting wins
  with pytest.raises(nccl.NCCLError): nccl.lib()
  assert os.environ['NCCL_NVLS_ENABLE'] == '1'


def test_nccl_from_the_wheel_gives_its_version_and_ids():
  from tgc.runtime import nccl
  if not os.path.exists(nccl.library_path()): pytest.skip("the nvidia-nccl wheel is not installed here")
  assert nccl.version() >= (2, 0, 0)
  a, b = nccl.unique_id(), nccl.unique_id()
  assert len(a) == 128 and a != b


def test_tensor_parallel_training_keeps_weights_and_optimizer_state_sharded():
  Tensor.manual_seed(3)
  base = _MLP()
  x, y = rnd(8, 16), RNG.integers(0, 4, 8)
  split = {'l1.weight': 1, 'l1.bias': 0, 'l2.weight': 0, 'l2.bias': None}
  def train(model, xt, yt):
    opt = optim.Adam(get_parameters(model), lr=0.01)
    @Tensor.jit
    def step(xt, yt):
      opt.zero_grad()
      loss = model(xt).sparse_categorical_crossentropy(yt)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      return loss
    return [step(xt, yt).item() for _ in range(4)], opt
  one, _ = train(_clone(base), Tensor(x, device=DEV), Tensor(y, device=DEV))
  tp = _clone(base, DEVS, split)
  many, opt = train(tp, Tensor(x, device=DEV).to(DEVS), Tensor(y, device=DEV).to(DEVS))
  np.testing.assert_allclose(many, one, rtol=1e-5)
  assert [p.sharding for p in (tp.l1.weight, tp.l1.bias, tp.l2.weight, tp.l2.bias)] == [1, 0, 0, None]
  assert [m.sharding for m in opt.m] == [p.sharding for p in opt.params]


def test_a_convolution_on_a_sharded_batch_equals_one_device():
  a, w = rnd(2 * NDEV, 3, 8, 8), rnd(4, 3, 3, 3)
  def run(x, wt):
    wt.requires_grad = True
    y = x.conv2d(wt, padding=1).relu().max_pool2d(2)
    y.square().mean().backward()
    return y.numpy(), wt.grad.numpy()
  want = run(Tensor(a, device=DEV), Tensor(w, device=DEV))
  got = run(Tensor(a, device=DEV).shard(DEVS, 0), Tensor(w, device=DEV).to(DEVS))
  for g, wnt in zip(got, want): np.testing.assert_allclose(g, wnt, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('split', ['batch', 'filters'])
def test_a_sharded_convolution_stays_sharded(split):
  # the batch split (replicated filters) convolves each device's images, the filters split each device's output
  # channels: no device gathers the other's operand, and the result is split along the batch or the channels
  a, w = rnd(2 * NDEV, 3, 6, 6), rnd(2 * NDEV, 3, 3, 3)
  want = Tensor(a, device=DEV).conv2d(Tensor(w, device=DEV), padding=1).numpy()
  x, wt = Tensor(a, device=DEV), Tensor(w, device=DEV)
  x, wt = (x.shard(DEVS, 0), wt.to(DEVS)) if split == 'batch' else (x.to(DEVS), wt.shard(DEVS, 0))
  y = x.conv2d(wt, padding=1)
  assert 'tensor.allgather' not in y.to_ir() and y.sharding == (0 if split == 'batch' else 1)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
