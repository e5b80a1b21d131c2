"""A rank of a data-parallel step (run by tests/test_multi_device.py as `python dist_worker.py [timeout] [jit]` with
torchrun's variables set): the gradients of this rank's half of the batch, averaged over the ranks with
tgc.distributed.all_reduce, must equal the whole batch's on one process. With `jit`: a jitted training step that
averages its gradients with all_reduce_coalesced trains as the whole batch does on one process."""
import sys
import numpy as np
import tgc.distributed as dist
from tgc import Tensor

g = dist.init(timeout=float(sys.argv[1]) if len(sys.argv) > 1 else 60)

if sys.argv[2:] == ['jit']:
  from tgc import nn
  from tgc.nn import optim
  from tgc.nn.state import get_parameters
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)
  def train(xs, ys, group=None, steps=4):
    Tensor.manual_seed(0)
    model = nn.Linear(6, 3)
    params = get_parameters(model)
    opt = optim.AdamW(params, lr=0.05)
    calls = []
    @Tensor.jit
    def step(xt, yt):
      calls.append(1)
      opt.zero_grad()
      loss = model(xt).tanh().sparse_categorical_crossentropy(yt)
      loss.backward()
      if group is not None: group.all_reduce_coalesced([*(p.grad for p in params), loss], 'avg')
      Tensor.realize(loss, *opt.schedule_step())
      return loss
    xt, yt = Tensor(xs), Tensor(ys)
    losses = [step(xt, yt).item() for _ in range(steps)]
    assert len(calls) < steps, calls  # the later steps were replays, the all-reduce with them
    return losses, [p.numpy() for p in params]
  n = len(x) // g.world_size
  mine, wm = train(x[g.rank * n:(g.rank + 1) * n], y[g.rank * n:(g.rank + 1) * n], g)
  whole, ww = train(x, y)
  assert whole[-1] < whole[0], whole
  np.testing.assert_allclose(mine, whole, rtol=1e-5)
  for a, b in zip(wm, ww): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  dist.destroy()
  print(f"rank {g.rank} ok")
  sys.exit(0)
rng = np.random.default_rng(0)
x, w = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
n = len(x) // g.world_size
def grad(xs):
  wt = Tensor(w, requires_grad=True)
  ((Tensor(xs) @ wt).tanh().square().sum() / len(x)).backward()
  return wt.grad
mine = grad(x[g.rank * n:(g.rank + 1) * n])
dist.all_reduce(mine, 'sum')
np.testing.assert_allclose(mine.numpy(), grad(x).numpy(), rtol=1e-5, atol=1e-6)
a, b = grad(x[g.rank * n:(g.rank + 1) * n]) * g.world_size, Tensor(np.full(3, g.rank + 1.0, np.float32))
dist.all_reduce_coalesced([a, b], 'avg')  # one batch: the averaged gradient, and the mean of 1..world
np.testing.assert_allclose(a.numpy(), grad(x).numpy(), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(b.numpy(), np.full(3, (g.world_size + 1) / 2, np.float32))
both = dist.all_gather(Tensor(np.full((2,), g.rank, np.float32))).numpy()
np.testing.assert_array_equal(both, np.repeat(np.arange(g.world_size, dtype=np.float32), 2))
part = dist.reduce_scatter(Tensor(np.arange(2 * g.world_size, dtype=np.float32)), 'max').numpy()
np.testing.assert_array_equal(part, np.arange(2 * g.world_size, dtype=np.float32)[2 * g.rank:2 * g.rank + 2])
dist.destroy()
print(f"rank {g.rank} ok")
