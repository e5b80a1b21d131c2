"""A rank of a data-parallel step (run by tests/test_multi_device.py as `python dist_worker.py` with torchrun's
variables set): the gradients of this rank's half of the batch, averaged over the ranks with
tgc.distributed.all_reduce, must equal the whole batch's on one process."""
import sys
import numpy as np
import tgc.distributed as dist
from tgc import Tensor

g = dist.init(timeout=float(sys.argv[1]) if len(sys.argv) > 1 else 60)
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
