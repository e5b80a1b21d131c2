"""Collectives over one Buffer per device: all-reduce, all-gather, reduce-scatter.

A `Collectives` object serves one tuple of devices (rank i is devices[i]) and runs a batch of calls at once:
`run([(kind, op, [buf per device]), ...])` returns, per call, the result Buffer of each device. Buffers are flat;
an all-gather concatenates the ranks' buffers in rank order, a reduce-scatter gives rank i the i-th of n equal
chunks of the reduction (NCCL's definitions). `for_devices(devices)` picks the engine: NCCL for CUDA GPUs
(tgc.runtime.nccl: the device streams, one grouped call a batch), the host (numpy) for everything else, the host
devices' memory used in place.
"""
from __future__ import annotations
import numpy as np
from tgc.errors import TgcError

KINDS = ('allreduce', 'allgather', 'reduce_scatter')
REDUCE_OPS = ('add', 'max', 'min', 'mul')


def check_call(kind: str, op: str | None, bufs: list, ndev: int, nranks: int | None = None) -> None:
  """The same dtype and size on every local device, one buffer a device, a known kind and op, a reduce-scatter's
  buffers in `nranks` equal chunks; else a TgcError naming the devices and sizes."""
  if kind not in KINDS: raise TgcError(f"unknown collective '{kind}' (expected one of {', '.join(KINDS)})")
  if kind != 'allgather' and op not in REDUCE_OPS: raise TgcError(f"{kind}: unknown reduction '{op}' (expected one of {', '.join(REDUCE_OPS)})")
  if len(bufs) != ndev: raise TgcError(f"{kind}: {len(bufs)} buffers for {ndev} devices")
  b0 = bufs[0]
  for b in bufs[1:]:
    if b.size != b0.size or b.dtype is not b0.dtype:
      raise TgcError(f"{kind}: mismatched shards: {b0.size}x{b0.dtype.name} on {b0.device} and {b.size}x{b.dtype.name} on {b.device}")
  nranks = nranks or ndev
  if kind == 'reduce_scatter' and b0.size % nranks:
    raise TgcError(f"reduce_scatter: {b0.size} elements do not split into {nranks} equal chunks ({', '.join(b.device for b in bufs)})")


class Collectives:
  """The collectives of one tuple of devices (by name, rank order)."""
  def __init__(self, devices: tuple[str, ...]): self.devices = tuple(devices)
  def run(self, calls: list) -> list[list]: raise NotImplementedError
  def allreduce(self, bufs, op='add'): return self.run([('allreduce', op, bufs)])[0]
  def allgather(self, bufs): return self.run([('allgather', None, bufs)])[0]
  def reduce_scatter(self, bufs, op='add'): return self.run([('reduce_scatter', op, bufs)])[0]
  def close(self) -> None: pass
  def check(self) -> None:
    """Raise the error that broke this engine (a collective that timed out), if one did."""


_NP_REDUCE = {'add': np.add, 'max': np.maximum, 'min': np.minimum, 'mul': np.multiply}

class HostCollectives(Collectives):
  """Through the host: each rank's values as a numpy array (its own memory on a host device, a copy from any
  other), the reduction in numpy in rank order (in float32 for the 16- and 8-bit floats), the results copied to each
  device. CI tests the sharding semantics on CPU:N with it."""
  def run(self, calls):
    from tgc.ir import dtypes as D
    from tgc.runtime.buffer import Buffer
    out = []
    for kind, op, bufs in calls:
      check_call(kind, op, bufs, len(self.devices))
      dt = bufs[0].dtype
      vals = [b.as_numpy() for b in bufs]
      if kind == 'allgather': res = [np.concatenate(vals)] * len(bufs)
      else:
        xs = [D.from_storage(v, dt) for v in vals] if dt.fmt else vals
        with np.errstate(all='ignore'):
          acc = xs[0].copy()
          for x in xs[1:]: _NP_REDUCE[op](acc, x, out=acc)
        if dt.fmt: acc = D.encode(acc.astype(np.float32), dt.fmt)
        acc = acc.astype(dt.np, copy=False)
        res = [acc] * len(bufs) if kind == 'allreduce' else np.split(acc, len(bufs))
      out.append([Buffer.from_numpy(d, r, dt) for d, r in zip(self.devices, res)])
    return out


_ENGINES: dict[tuple, Collectives] = {}

def check_engine(devices) -> None:
  """Raise where the collectives of these devices failed (a timeout, an NCCL error): what they made is not valid."""
  eng = _ENGINES.get(tuple(devices))
  if eng is not None: eng.check()

def for_devices(devices) -> Collectives:
  """The collectives engine of these devices (made once per tuple): NCCL where they are CUDA GPUs, else the host."""
  devices = tuple(devices)
  eng = _ENGINES.get(devices)
  if eng is None:
    from tgc.runtime import get_device
    from tgc.runtime.cuda import CUDADevice
    if isinstance(get_device(devices[0]), CUDADevice):
      from tgc.runtime.nccl import NCCLCollectives
      eng = NCCLCollectives(devices)
    else: eng = HostCollectives(devices)
    _ENGINES[devices] = eng
  return eng


__all__ = ['KINDS', 'REDUCE_OPS', 'Collectives', 'HostCollectives', 'for_devices', 'check_call', 'check_engine']
