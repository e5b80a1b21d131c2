"""Tensors on several devices: sharded (split along one axis, a shard per device) or replicated (whole on each).

A multi-device tensor is an ordinary lazy graph whose nodes have a tuple of devices and the *global* shape; its
realized leaves hold a `MultiBuffer` (one Buffer per device and the axis they split, None: replicated). So every op,
the autodiff pass and the optimizers see one graph, as on one device. `realize` partitions that graph into one
graph per device (SPMD, as GSPMD and MLIR's mesh dialect do) and puts collectives where the shards must meet:

- elementwise ops run shard by shard; a replicated operand of a sharded one is cut to each device's shard locally;
- a scan along another axis than the sharded one scans each shard (along the sharded axis: gathered first);
- a reduce over the sharded axis reduces each shard, then all-reduces (the result is replicated); over other axes
  it stays sharded;
- a matmul whose contracted axis is sharded is a partial matmul per device plus an all-reduce (a row-split linear
  layer); split rows (a batch) or split columns (a column-split layer) stay sharded;
- a conv of an input split along the batch (its filters replicated) stays split so, one of split filters (the input
  replicated, no groups) is split along the output channels;
- reshape, permute and expand follow the sharded axis where it maps to one axis of the result; a movement that
  cuts across shards (pad or shrink of the sharded axis, a flip of it, a reshape that merges it with the axes
  before it) first gathers the shards (an all-gather: the value becomes replicated), which is always correct.

Gradients of replicated weights in a data-parallel step come out of the same rules: the backward of the expand of a
weight over a sharded batch is a sum over the sharded axis, which becomes an all-reduce.

The per-device graphs run in levels: everything the collectives of one level need is realized (one compiled
function per device, launches queued on each device's stream), the level's collectives run as one batch (one NCCL
group on GPUs), and the next level goes on from their results; the roots last. `Tensor.jit` records and replays
each step (the per-device realizations, the collectives, the shards made and assembled).
"""
from __future__ import annotations
import math, weakref
import numpy as np
from tgc.errors import TgcError, ShapeError

_KEEP_AXIS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> the sharding its result must have


def keep_sharding(node, axis) -> None:
  """The value of `node` is assigned to a tensor sharded along `axis` (None: replicated): realized, it is put in that
  sharding (an assign does not move a weight or an optimizer state to other shards)."""
  _KEEP_AXIS[node] = axis


class MultiBuffer:
  """A tensor's value on several devices: `bufs[i]` on `devices[i]`, the whole tensor on each (`axis` None) or its
  i-th slice along `axis` (all slices of one size)."""
  __slots__ = ('devices', 'bufs', 'axis', 'shape', 'dtype', '__weakref__')
  def __init__(self, devices, bufs, axis, shape, dtype):
    self.devices, self.bufs, self.axis, self.shape, self.dtype = tuple(devices), list(bufs), axis, tuple(shape), dtype

  @property
  def device(self): return self.devices
  @property
  def size(self) -> int: return math.prod(self.shape)
  @property
  def nbytes(self) -> int: return sum(b.nbytes for b in self.bufs)
  @property
  def local_shape(self) -> tuple[int, ...]: return local_shape(self.shape, self.axis, len(self.devices))

  def shard_numpy(self, i: int) -> np.ndarray:
    return self.bufs[i].numpy().reshape(self.local_shape)

  def numpy(self) -> np.ndarray:
    """The whole tensor, flat (the shards joined along the axis; a replicated one from its first device)."""
    from tgc.runtime.collectives import check_engine
    check_engine(self.devices)
    if self.axis is None: return self.bufs[0].numpy()
    return np.concatenate([self.shard_numpy(i) for i in range(len(self.bufs))], axis=self.axis).reshape(-1)

  def free(self) -> None:
    for b in self.bufs: b.free()

  def __repr__(self):
    return f"<MultiBuffer {self.shape} {self.dtype.name} axis={self.axis} on {', '.join(self.devices)}>"


def local_shape(shape, axis, n: int) -> tuple[int, ...]:
  return tuple(s // n if i == axis else s for i, s in enumerate(shape))


def check_shardable(shape, axis, devices) -> None:
  if axis is not None and shape[axis] % len(devices):
    raise ShapeError(f"cannot shard shape {tuple(shape)} along axis {axis} over {len(devices)} devices ({', '.join(devices)}): "
                     f"{shape[axis]} does not split into {len(devices)} equal shards")


def shard_buffer(buf, shape, dtype, devices, axis) -> MultiBuffer:
  """A one-device Buffer (or a MultiBuffer) of `shape` as a MultiBuffer on `devices`: split along `axis`, or copied
  whole to each (axis None). A device's shard is copied from the source without the host where the devices allow."""
  from tgc.runtime import Buffer
  if isinstance(buf, MultiBuffer):
    if buf.devices == tuple(devices) and buf.axis == axis: return buf
    if buf.axis is None: buf = buf.bufs[0]
    else: buf = Buffer.from_numpy(buf.devices[0], buf.numpy(), dtype)
  n = len(devices)
  check_shardable(shape, axis, devices)
  if axis is None: return MultiBuffer(devices, [buf if buf.device == d else buf.copy_to(d) for d in devices], None, shape, dtype)
  arr = buf.numpy().reshape(shape)
  parts = np.split(arr, n, axis=axis)
  return MultiBuffer(devices, [Buffer.from_numpy(d, np.ascontiguousarray(p).reshape(-1), dtype) for d, p in zip(devices, parts)], axis, shape, dtype)


def gather_buffer(mb: MultiBuffer, device: str):
  """The whole tensor as one Buffer on `device` (a replica copied from a device, shards joined on the host)."""
  from tgc.runtime import Buffer
  if mb.axis is None:
    src = mb.bufs[mb.devices.index(device)] if device in mb.devices else mb.bufs[0]
    return src if src.device == device else src.copy_to(device)
  return Buffer.from_numpy(device, mb.numpy(), mb.dtype)


# ---------------------------------------------------------------- partitioning a global graph per device

class _Collective:
  """One collective of the partitioned graph: its kind, reduction, the input node of each device, and the nodes
  of its results (placeholders of op `kind` until it runs); its level (collectives on the path to it)."""
  __slots__ = ('kind', 'op', 'ins', 'outs', 'level')
  def __init__(self, kind, op, ins, outs, level): self.kind, self.op, self.ins, self.outs, self.level = kind, op, ins, outs, level


class Partition:
  """The per-device graphs of a global graph on `devices`: `parts[global node] = (axis, [local node per device])`."""
  def __init__(self, devices):
    self.devices, self.n = tuple(devices), len(devices)
    self.parts: dict = {}
    self.level: dict = {}  # local node -> its level
    self.collectives: list[_Collective] = []
    self.leaves: list = []  # (global leaf, its local nodes)

  # -- making local nodes
  def _mk(self, i, op, srcs, attrs, shape, dtype):
    from tgc.tensor import _Node
    n = _Node(op, tuple(srcs), attrs, tuple(shape), dtype, self.devices[i])
    lv = self.level
    self.level[n] = max([lv.get(s, 0) for s in srcs], default=0)
    return n

  def local(self, op, srcs_per_dev, attrs, shape, dtype) -> list:
    """One op per device on that device's sources (`srcs_per_dev[i]`), each of the local `shape`."""
    return [self._mk(i, op, srcs_per_dev[i], attrs, shape, dtype) for i in range(self.n)]

  def collective(self, kind, op, ins, shape) -> list:
    lvl = max(self.level.get(x, 0) for x in ins)
    outs = []
    for i, x in enumerate(ins):
      attrs = {'op': op, 'devices': self.devices, 'rank': i} if op else {'devices': self.devices, 'rank': i}
      o = self._mk(i, kind, (x,), attrs, shape, x.dtype)
      self.level[o] = lvl + 1
      outs.append(o)
    self.collectives.append(_Collective(kind, op, list(ins), outs, lvl))
    return outs

  # -- changing a value's sharding
  def to_axis(self, axis, nodes, gshape, want):
    """Local nodes of a value sharded along `axis` (None: replicated) as sharded along `want` (None: replicated)."""
    if axis == want: return nodes
    if axis is not None: nodes, axis = self.gather(axis, nodes, gshape), None
    if want is None: return nodes
    dtype, lshape = nodes[0].dtype, local_shape(gshape, want, self.n)
    step = gshape[want] // self.n
    out = []
    for i, x in enumerate(nodes):
      if x.op == 'const' and not isinstance(x.attrs['value'], tuple): out.append(self._mk(i, 'const', (), x.attrs, lshape, dtype)); continue
      bounds = tuple((i * step, (i + 1) * step) if a == want else (0, s) for a, s in enumerate(gshape))
      out.append(self._mk(i, 'shrink', (x,), {'bounds': bounds}, lshape, dtype))
    return out

  def gather(self, axis, nodes, gshape):
    """All-gather of shards along `axis`: the axis moved to the front locally (an all-gather joins flat buffers in
    rank order), gathered, and moved back."""
    r, dtype = len(gshape), nodes[0].dtype
    lshape = local_shape(gshape, axis, self.n)
    if axis:
      order = (axis, *[a for a in range(r) if a != axis])
      nodes = self.local('permute', [(x,) for x in nodes], {'order': order}, tuple(lshape[a] for a in order), dtype)
      gfront = tuple(gshape[a] for a in order)
      nodes = self.collective('allgather', None, nodes, gfront)
      back = tuple(order.index(a) for a in range(r))
      return self.local('permute', [(x,) for x in nodes], {'order': back}, gshape, dtype)
    return self.collective('allgather', None, nodes, gshape)

  # -- the rules
  def lower(self, roots):
    """Partition the graphs of `roots` (global nodes on self.devices)."""
    from tgc.tensor import _toposort
    for g in _toposort(roots):
      if g not in self.parts: self.parts[g] = self._lower(g)
    return [self.parts[r] for r in roots]

  def _lower(self, g):
    from tgc.ir.core import REGISTRY, ELEMENTWISE
    n, op, shape, dtype = self.n, g.op, g.shape, g.dtype
    if op == 'BUFFER':
      mb = g.buf
      if not isinstance(mb, MultiBuffer) or mb.devices != self.devices:
        raise TgcError(f"internal: a leaf of {shape} on {g.device} holds {mb!r}")
      nodes = [self._mk(i, 'BUFFER', (), None, mb.local_shape, dtype) for i in range(n)]
      for x, b in zip(nodes, mb.bufs): x.buf = b
      self.leaves.append((g, nodes))
      return mb.axis, nodes
    srcs = [self.parts[s] for s in g.srcs]
    attrs = g.attrs
    if op in ('const', 'empty'): return None, self.local(op, [()] * n, attrs, shape, dtype)
    if ELEMENTWISE in REGISTRY['tensor.' + op].TRAITS:
      axis = next((a for a, _ in srcs if a is not None), None)
      ins = [self.to_axis(a, xs, s.shape, axis) for (a, xs), s in zip(srcs, g.srcs)]
      return axis, self.local(op, list(zip(*ins)), attrs, local_shape(shape, axis, n), dtype)
    if op == 'matmul': return self._matmul(g, srcs)
    if op == 'conv' and srcs[1][0] is None and srcs[0][0] == 0:  # the batch split: each device its own images
      return 0, self.local(op, list(zip(srcs[0][1], srcs[1][1])), attrs, local_shape(shape, 0, n), dtype)
    if op == 'conv' and srcs[0][0] is None and srcs[1][0] == 0 and attrs['groups'] == 1:  # the filters split
      return 1, self.local(op, list(zip(srcs[0][1], srcs[1][1])), attrs, local_shape(shape, 1, n), dtype)
    if len(srcs) != 1:  # an op of several operands without a rule: on the whole values
      ins = [self.to_axis(a, xs, s.shape, None) for (a, xs), s in zip(srcs, g.srcs)]
      return None, self.local(op, list(zip(*ins)), attrs, shape, dtype)
    (a, xs), s = srcs[0], g.srcs[0]
    if op == 'contiguous': return a, self.local(op, [(x,) for x in xs], attrs, local_shape(shape, a, n), dtype)
    if a is None:  # a replicated operand: the op itself on every device
      return None, self.local(op, [(x,) for x in xs], attrs, shape, dtype)
    if op == 'reduce':
      red = self.local(op, [(x,) for x in xs], attrs, local_shape(shape, a, n) if a not in attrs['axes'] else shape, dtype)
      if a not in attrs['axes']: return a, red
      return None, self.collective('allreduce', attrs['kind'], red, shape)
    if op == 'permute': return attrs['order'].index(a), self.local(op, [(x,) for x in xs], attrs, local_shape(shape, attrs['order'].index(a), n), dtype)
    if op == 'expand': return a, self.local(op, [(x,) for x in xs], attrs, local_shape(shape, a, n), dtype)
    if op == 'reshape':
      b = reshape_axis(s.shape, shape, a, n)
      if b is not None: return b, self.local(op, [(x,) for x in xs], attrs, local_shape(shape, b, n), dtype)
    elif op == 'pad' and tuple(attrs['pads'][a]) == (0, 0) or op == 'shrink' and tuple(attrs['bounds'][a]) == (0, s.shape[a]):
      key = 'pads' if op == 'pad' else 'bounds'
      loc = tuple((0, s.shape[a] // n) if i == a and op == 'shrink' else tuple(p) for i, p in enumerate(attrs[key]))
      return a, self.local(op, [(x,) for x in xs], {key: loc}, local_shape(shape, a, n), dtype)
    elif op == 'flip' and a not in attrs['axes']: return a, self.local(op, [(x,) for x in xs], attrs, local_shape(shape, a, n), dtype)
    elif op in ('scan', 'argmax') and a != attrs['axis']: return a, self.local(op, [(x,) for x in xs], attrs, local_shape(shape, a, n), dtype)
    # a movement across the shards (or an op without a rule): the whole value on every device first
    full = self.gather(a, xs, s.shape)
    return None, self.local(op, [(x,) for x in full], attrs, shape, dtype)

  def _matmul(self, g, srcs):
    (pa, xa), (pb, xb) = srcs
    A, B = g.srcs
    r, n, shape, dtype = len(g.shape), self.n, g.shape, g.dtype
    batch = set(range(r - 2))
    if pa == r - 1 or pb == r - 2:  # the contracted axis split: partial products, summed over the devices
      xa, xb = self.to_axis(pa, xa, A.shape, r - 1), self.to_axis(pb, xb, B.shape, r - 2)
      part = self.local('matmul', list(zip(xa, xb)), g.attrs, shape, dtype)
      return None, self.collective('allreduce', 'add', part, shape)
    if pa in batch or pb in batch:  # one batch axis split: both operands along it
      ax = pa if pa in batch else pb
      xa, xb = self.to_axis(pa, xa, A.shape, ax), self.to_axis(pb, xb, B.shape, ax)
      axis = ax
    elif pa == r - 2 and pb is None: axis = r - 2  # rows split (a batch folded into rows)
    elif pa is None and pb == r - 1: axis = r - 1  # columns split (a column-split layer)
    elif pa is None and pb is None: axis = None
    else:  # rows of one and columns of the other split: the result would be split along both; gather the columns
      xb, axis = self.to_axis(pb, xb, B.shape, None), r - 2
    return axis, self.local('matmul', list(zip(xa, xb)), g.attrs, local_shape(shape, axis, n), dtype)


def reshape_axis(old, new, axis, n: int):
  """The axis of `new` that the shards of `old` along `axis` stay whole along (the elements before it and the axis'
  own split line up), or None."""
  before = math.prod(old[:axis])
  p = 1
  for b, s in enumerate(new):
    if p == before and s % n == 0 and s > 1 and math.prod(new[b:]) == math.prod(old[axis:]): return b
    p *= s
    if p > before: return None
  return None


# ---------------------------------------------------------------- running the partition

def realize(group) -> None:
  """Realize global nodes of one tuple of devices: partition, run the levels of collectives, then the roots; each
  root becomes a leaf holding a MultiBuffer."""
  from tgc import autograd
  from tgc.tensor import _realize_nodes
  devices = group[0].device
  p = Partition(devices)
  parts = p.lower(group)
  for i, g in enumerate(group):  # an assigned value keeps its tensor's sharding
    want = _KEEP_AXIS.get(g, parts[i][0])
    if want != parts[i][0]: parts[i] = (want, p.to_axis(parts[i][0], parts[i][1], g.shape, want))
  for g, nodes in p.leaves: autograd.record(('multi_leaf', g, nodes, g.buf.axis))
  roots = [x for _, xs in parts for x in xs]
  run_collectives(p, roots)
  _realize_nodes(roots)
  for g, (axis, xs) in zip(group, parts):
    g.op, g.srcs, g.attrs, g.entry = 'BUFFER', (), None, None
    g.buf = MultiBuffer(devices, [x.buf for x in xs], axis, g.shape, g.dtype)
    autograd.record(('multi_out', g, xs, axis))


# ops a later level recomputes rather than reads back (nothing, or a view of what it reads)
_CHEAP = frozenset({'const', 'empty', 'reshape', 'expand', 'permute', 'shrink', 'pad', 'flip', 'cast', 'bitcast', 'BUFFER'})


def _needed_later(roots, level) -> dict:
  """For each local node: the highest level of the computations that read it (through views and casts: a node read
  by a reshape that a level-2 op reads is needed at level 2)."""
  from tgc.tensor import _toposort
  later: dict = {}
  for x in reversed(_toposort(roots)):
    lx = level.get(x, 0)
    need = max(lx, later.get(x, -1)) if x.op in _CHEAP else lx
    for s in x.srcs:
      if later.get(s, -1) < need: later[s] = need
  return later


def run_collectives(p: Partition, roots=()) -> None:
  """Run the partition's collectives level by level. A level realizes what its collectives read and, with it, the
  values it computes on the way that a later level reads too (a training step's activations, which the backward
  reads after the all-reduce of a loss's normaliser): computed once, not again in the next level's functions."""
  from tgc import autograd
  from tgc.tensor import _realize_nodes, _toposort
  from tgc.runtime.collectives import for_devices
  if not p.collectives: return
  eng = for_devices(p.devices)
  later = _needed_later(list(roots) + [o for c in p.collectives for o in c.outs], p.level)
  for lvl in sorted({c.level for c in p.collectives}):
    cs = [c for c in p.collectives if c.level == lvl]
    targets = [x for c in cs for x in c.ins]
    keep = set(targets)
    extra = [x for x in _toposort(targets) if x not in keep and x.op not in _CHEAP and later.get(x, -1) > lvl]
    _realize_nodes(targets + extra)
    calls = [(c.kind, c.op, [x.buf for x in c.ins]) for c in cs]
    for c, bufs in zip(cs, eng.run(calls)):
      for o, b in zip(c.outs, bufs): o.op, o.srcs, o.attrs, o.buf, o.entry = 'BUFFER', (), None, b, None
    autograd.record(('collectives', eng, [(c.kind, c.op, c.ins, c.outs) for c in cs]))


def replay(e, buf, env) -> None:
  """A jit's replay of one recorded multi-device step; `buf(node)` is a node's Buffer in the replay."""
  kind = e[0]
  if kind == 'multi_leaf':
    _, g, nodes, axis = e
    mb = buf(g)
    if mb.axis != axis: mb = shard_buffer(mb, g.shape, g.dtype, g.device, axis)  # (as the recorded functions read it)
    for x, b in zip(nodes, mb.bufs): env[x] = b
  elif kind == 'multi_out':
    _, g, nodes, axis = e
    env[g] = MultiBuffer(g.device, [buf(x) for x in nodes], axis, g.shape, g.dtype)
  elif kind == 'collectives':
    _, eng, calls = e
    res = eng.run([(k, op, [buf(x) for x in ins]) for k, op, ins, _ in calls])
    for (_, _, _, outs), bufs in zip(calls, res):
      for o, b in zip(outs, bufs): env[o] = b
  elif kind == 'shard':
    _, src, g, devices, axis = e
    env[g] = shard_buffer(buf(src), g.shape, g.dtype, devices, axis)


def partition_ir(roots, name: str = 'main') -> str:
  """The per-device functions of a multi-device graph as tensor-dialect text (nothing runs): one func.func a device,
  `@{name}_{device}`, with the collectives as `tensor.allreduce` / `allgather` ops that name the devices."""
  from tgc.tensor import _build_module
  devices = roots[0].device
  p = Partition(devices)
  parts = p.lower(roots)
  texts = []
  for i, d in enumerate(devices):
    m, _ = _build_module([xs[i] for _, xs in parts], f"{name}_{d.replace(':', '_')}")
    m.verify()
    texts.append(m.print())
  return '\n'.join(texts)


__all__ = ['MultiBuffer', 'Partition', 'realize', 'shard_buffer', 'gather_buffer', 'local_shape', 'reshape_axis', 'partition_ir']
