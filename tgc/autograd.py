"""Autograd for the Tensor API, on the autodiff pass.

`gradients(loss, targets)` turns the lazy graph up to `loss` into a tensor-dialect func.func (as realize
does), lets `tgc.passes.autodiff.differentiate` append the backward ops to it, and turns those ops back into
lazy graph nodes over the forward ones: a gradient is a lazy Tensor like any other, so it fuses with what
uses it (an optimizer's update) when realized, and the forward values it needs are computed in the same
function. Gradients flow through every op between the targets and the loss except `detach()`ed values.

Tensors with `requires_grad=True`, and the tensors made from data (whose requires_grad is left unset, None), are
remembered here (by id, weakly), so that `backward()` finds those in the loss's graph: the ones marked
requires_grad=True (torch's rule; an optimizer marks its parameters), or, where none is marked, every float tensor
made from data that is not marked False (tinygrad's rule: backward fills .grad for the tensors in its scope).
"""
from __future__ import annotations
import weakref
from tgc.errors import ShapeError, DTypeError, TgcError

_DETACHED: weakref.WeakSet = weakref.WeakSet()  # graph nodes that pass no gradient (detach())
_TRACKED: dict[int, weakref.ref] = {}            # id -> Tensor with requires_grad set, or made from data


class GradientError(TgcError, RuntimeError):
  """A gradient that cannot be taken: a target not in the loss's graph, a loss that is not a float scalar."""


def track(t) -> None:
  """Remember a tensor that backward() may give a .grad (until it is collected)."""
  i = id(t)
  _TRACKED[i] = weakref.ref(t, lambda _, i=i: _TRACKED.pop(i, None))

def detach_node(node):
  """A node of the same value that gradients do not pass (an identity reshape: canonicalize removes it)."""
  from tgc.tensor import _Node
  n = _Node('reshape', (node,), None, node.shape, node.dtype, node.device)
  _DETACHED.add(n)
  return n

def tracked_in(nodes) -> list:
  """The tensors whose node is one of `nodes` that backward() gives a .grad: those with requires_grad=True, or,
  if there are none, the float ones whose requires_grad is unset."""
  ts = [t for r in list(_TRACKED.values()) if (t := r()) is not None and t.node in nodes]
  return [t for t in ts if t.requires_grad] or [t for t in ts if t.requires_grad is None and t.dtype.is_float]


_BACKWARDS: dict = {}  # (the forward graph's key, its detached nodes and targets by number, the device) -> _backward's steps

def gradients(loss, targets, seed=None, walked=None) -> list:
  """The lazy gradient nodes of `loss` (weighted by the Tensor `seed`, else ones) with respect to each target
  Tensor; None for a target the loss does not depend on. The backward ops depend only on the forward graph's
  structure (the compile cache's key), which of its nodes are detached and which are targets: the first backward of
  such a graph runs the autodiff pass and keeps the nodes it made as steps over the forward nodes' numbers; a later
  one makes them again from those (an eager training step's backward, 1.9 ms through the pass for attention's
  100 nodes, costs its key and its nodes). walked: (the key, the nodes numbered) of the graph up to the loss alone,
  where the caller has walked it (backward, to find its targets)."""
  from tgc.tensor import _graph_key
  if not loss.dtype.is_float: raise DTypeError(f"gradient of a {loss.dtype!r} tensor: only float tensors have gradients")
  if seed is None and loss.numel() != 1: raise ShapeError(f"backward of a tensor of shape {loss.shape} needs a gradient= of that shape (only a scalar loss is seeded with 1)")
  if seed is not None and seed.shape != loss.shape: raise ShapeError(f"gradient of shape {seed.shape} for a tensor of shape {loss.shape}")
  roots = [loss.node] + ([seed.cast(loss.dtype).node] if seed is not None else [])
  if walked is not None and seed is None: graph, ids = walked
  else:
    ids = {}
    graph, _ = _graph_key(roots, ids)
  key = (graph, tuple([i for n, i in ids.items() if n in _DETACHED]), tuple([ids.get(t.node) for t in targets]), loss.device)
  steps = _BACKWARDS.get(key)
  if steps is None:
    steps = _backward(roots, list(ids), targets, seed is not None, loss.device)
    if len(_BACKWARDS) >= 256: _BACKWARDS.clear()
    _BACKWARDS[key] = steps
  return _replay_backward(steps, list(ids), loss.device)


def _backward(roots, order, targets, seeded, device):
  """The autodiff pass on the graph up to `roots` (its nodes numbered as `order`): (the new nodes' steps, each its
  op, sources (>= 0: a forward node's number, ~j: the j-th new node), attrs, shape and dtype; the gradients, as
  such references or None)."""
  from tgc.tensor import _build_module
  from tgc.passes.autodiff import differentiate
  m, _ = _build_module(roots, 'grad')
  fn = m.ops[0]
  vals, args, ops = {}, iter(fn.body.args), iter(fn.body.ops)
  for n in order: vals[n] = next(args) if n.op == 'BUFFER' else next(ops).results[0]  # _build_module's order
  stop = {v for n, v in vals.items() if n in _DETACHED}
  if isinstance(device, str):  # attention written out: its fused op, whose gradient is the fused backward
    from tgc.runtime import get_device
    from tgc.passes.fuse_attention import fuse_attention
    fuse_attention(m, get_device(device).spec, keep=stop | {vals[t.node] for t in targets if t.node in vals})
  grads = differentiate(fn, [vals[roots[0]]], [vals[roots[1]] if seeded else None], [vals.get(t.node) for t in targets], stop)
  ref = {v: i for i, v in enumerate(vals.values())}
  steps = []
  for op in fn.body.ops[:-1]:  # (the ops the forward graph has not: the backward's, and what fuse_attention made)
    r = op.results[0]
    if r in ref: continue
    steps.append((op.name.split('.', 1)[1], tuple([ref[s] for s in op.operands]), dict(op.attrs) or None, r.type.shape, r.type.dtype))
    ref[r] = ~(len(steps) - 1)
  return steps, tuple([ref[g] if g is not None else None for g in grads])


def _replay_backward(steps, order, device) -> list:
  from tgc.tensor import _Node
  made = []
  for op, srcs, attrs, shape, dtype in steps[0]:
    made.append(_Node(op, tuple([order[j] if j >= 0 else made[~j] for j in srcs]), attrs and dict(attrs), shape, dtype, device))
  return [None if g is None else order[g] if g >= 0 else made[~g] for g in steps[1]]


# ---------------------------------------------------------------- assign and the jit's capture

_capture: list | None = None  # while a jit records its first call: ('realize', fn, leaves, outs), ('assign', tensor, old, new)
# and a multi-device step's ('multi_leaf' | 'multi_out' | 'collectives' | 'shard', ...) (tgc/multi.py)

def record(entry) -> None:
  if _capture is not None: _capture.append(entry)


def _made(e) -> list:
  """The nodes a recorded step computes (a replay has them from its own run)."""
  kind = e[0]
  if kind == 'realize': return list(e[3])
  if kind == 'multi_leaf': return list(e[2])
  if kind in ('multi_out', 'shard'): return [e[1] if kind == 'multi_out' else e[2]]
  if kind == 'collectives': return [o for c in e[2] for o in c[3]]
  return []


def _drop_stale_grads(olds: set) -> None:
  """A jit's replay runs no Python, so it gives no tensor a new .grad: the lazy gradients its first call left (an
  optimizer consumed them) that read values the call replaced (the parameters before the step) would describe
  those forever and hold them in memory. They become None, as a zero_grad would make them."""
  from tgc.tensor import _toposort
  ts = [t for r in list(_TRACKED.values()) if (t := r()) is not None and t.grad is not None and not t.grad.node.realized]
  if not ts or not olds: return
  reach: dict = {}  # node -> whether its graph reads a replaced value (sources before their users: _toposort's order)
  for n in _toposort([t.grad.node for t in ts]): reach[n] = n in olds or any(reach[s] for s in n.srcs)
  for t in ts:
    if reach[t.grad.node]: t.grad = None


def _subst(x, stand, node_type):
  """x with every graph node in it (through tuples and lists) replaced by stand(node)."""
  if isinstance(x, node_type): return stand(x)
  if isinstance(x, (tuple, list)): return type(x)(_subst(y, stand, node_type) for y in x)
  return x


class Capture:
  """The realizations and assigns of one call of a function, replayed on new inputs: a realization's leaves
  are taken from the new inputs, from what an earlier step of the replay computed, from the current value of
  an assigned tensor, or else as they were (captured constants)."""
  def __init__(self, fn, args, kwargs, inputs):
    global _capture
    from tgc.tensor import Tensor, _Node
    prev, _capture = _capture, []
    try:
      self.out = fn(*args, **kwargs)
      outs = self.out if isinstance(self.out, (tuple, list)) else (self.out,)
      self.ok = bool(outs) and all(isinstance(o, Tensor) for o in outs)
      assigned = [e[1] for e in _capture if e[0] == 'assign']
      if self.ok: Tensor.realize(*outs, *assigned)
      elif assigned: Tensor.realize(*assigned)
      self.log = _capture
    finally: _capture = prev
    assigns = [(t, old, t.node) for kind, t, old, _ in (e for e in self.log if e[0] == 'assign')]
    assigns = list({id(t): (t, old, new) for t, old, new in assigns}.values())  # per tensor: its first old value, its last node
    # What a replay reads it takes from its inputs, the assigned tensors' current values or what it computed before;
    # only the captured constants come from the recorded nodes themselves. So the log keeps stand-ins of its nodes
    # that hold those constants' Buffers and no other: the first call's values (a training step's parameters and
    # optimizer state as it read them and as it wrote them) go away with their tensors, not with the jit.
    made = {n for e in self.log for n in _made(e)}
    olds, ins, sub = {old for _, old, _ in assigns}, set(inputs), {}
    _drop_stale_grads(olds)
    def stand(n):
      s = sub.get(n)
      if s is None:
        keep = n not in ins and n not in olds and n not in made
        s = sub[n] = _Node('BUFFER', (), None, n.shape, n.dtype, n.device, n.buf if keep else None)
      return s
    self.log = [_subst(e, stand, _Node) for e in self.log if e[0] != 'assign']
    self.inputs = {stand(n): i for i, n in enumerate(inputs)}
    self.assigns = [(t, stand(old), stand(new)) for t, old, new in assigns]
    self.olds = {old: t for t, old, _ in reversed(self.assigns)}
    self.outs = [stand(o.node) for o in outs] if self.ok else []
    self.multi = isinstance(self.out, (tuple, list))

  def replay(self, tensors):
    from tgc.tensor import Tensor, _Node
    for t, _, _ in self.assigns:
      if not t.node.realized: t.realize()
    env = {}
    def buf(n):
      if n in env: return env[n]
      if n in self.inputs: return tensors[self.inputs[n]].node.buf
      if n in self.olds: return self.olds[n].node.buf
      return n.buf
    for e in self.log:
      if e[0] == 'realize':
        _, cf, leaves, group = e
        for n, o in zip(group, cf.run([buf(l) for l in leaves])): env[n] = o
      elif e[0] != 'assign':  # a multi-device step: shards, collectives, results (tgc/multi.py)
        from tgc.multi import replay
        replay(e, buf, env)
    for t, _, new in self.assigns: t.node = _Node('BUFFER', (), None, new.shape, new.dtype, new.device, buf(new))
    outs = [Tensor(_Node('BUFFER', (), None, n.shape, n.dtype, n.device, buf(n))) for n in self.outs]
    return tuple(outs) if self.multi else outs[0]
