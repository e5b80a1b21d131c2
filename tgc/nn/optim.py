"""Optimizers with tinygrad's signatures. `step()` assigns the new value of every parameter and state tensor
(lazily: the update fuses with the backward graph that computes the gradients) and realizes them in one
function; `schedule_step()` returns them unrealized, to realize together with, say, the loss."""
from __future__ import annotations
from tgc.tensor import Tensor
from tgc.errors import TgcError

__all__ = ['Optimizer', 'SGD', 'LAMB', 'Adam', 'AdamW']


class Optimizer:
  """Trains the tensors of `params` that require a gradient; those that do not (BatchNorm's running statistics,
  which a forward pass in training assigns) are realized with every step, as tinygrad's optimizers do."""
  def __init__(self, params: list[Tensor], lr: float):
    for p in params:
      if p.requires_grad is None: p.requires_grad = True  # as tinygrad: parameters given to an optimizer train
    self.params = list({id(p): p for p in params if p.requires_grad}.values())
    if not self.params: raise TgcError("the optimizer has no parameters that require a gradient")
    self.lr = lr
    self.untrained = [t for t in {id(p): p for p in params}.values() if not t.requires_grad]
    self.buffers: list[Tensor] = []  # the optimizer's own state (momentum, moments)
    # realized now: a tensor made as a constant (nn's Tensor.ones weights, zeros running statistics) would be folded
    # into the first step's graph and be a buffer from the second on, a different graph compiled again
    lazy = [t for t in self.params + self.untrained if not t.node.realized]
    for t in lazy: t.assign(t.contiguous())
    if lazy: Tensor.realize(*lazy)

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def _grads(self) -> list[Tensor]:
    for p in self.params:
      if p.grad is None: raise TgcError(f"a parameter of shape {p.shape} has no gradient: call backward() first "
                                     "(before the loss is realized: a realized tensor has no graph to differentiate)")
    return [p.grad for p in self.params]

  def _state(self) -> list[Tensor]:
    """Zeros like each parameter, realized (a state tensor to assign); sharded as its parameter is."""
    out = []
    for p in self.params:
      z = Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device).contiguous()
      if type(p.device) is tuple and p.sharding is not None: z = z.shard(p.device, p.sharding)
      out.append(z.realize())
    return out

  def step(self) -> None: Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    self._step(self._grads())
    return self.params + self.buffers + self.untrained

  def _step(self, grads: list[Tensor]) -> None: raise NotImplementedError


class SGD(Optimizer):
  """p -= lr * g, with g = grad + weight_decay * p; with momentum b = momentum * b + g and g = b
  (nesterov: g + momentum * b), as torch's SGD with dampening 0."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = self._state() if momentum else []
    self.buffers = self.b

  def _step(self, grads):
    for i, (p, g) in enumerate(zip(self.params, grads)):
      if self.wd: g = g + self.wd * p.detach()
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
      p.assign(p.detach() - g * self.lr)


class LAMB(Optimizer):
  """Adam's moments with bias correction; with adam=False the update is scaled by the trust ratio
  |p| / |update| (LAMB). weight_decay adds weight_decay * p to the update (decoupled, as AdamW)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    dev = self.params[0].device
    self.b1_t, self.b2_t = (Tensor.ones(1, device=dev).contiguous().realize() for _ in range(2))
    self.m, self.v = self._state(), self._state()
    self.buffers = [self.b1_t, self.b2_t] + self.m + self.v

  def _step(self, grads):
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    for i, (p, g) in enumerate(zip(self.params, grads)):
      self.m[i].assign(self.b1 * self.m[i] + (1 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1 - self.b2) * (g * g))
      m_hat, v_hat = self.m[i] / (1 - self.b1_t), self.v[i] / (1 - self.b2_t)
      up = m_hat / (v_hat.sqrt() + self.eps) + self.wd * p.detach()
      if not self.adam:
        r1, r2 = p.detach().square().sum().sqrt(), up.square().sum().sqrt()
        up = up * ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
      p.assign(p.detach() - self.lr * up)


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)
