"""Devices: a registry of name -> "module:Class", imported on first use, and Device.DEFAULT from $DEVICE.

Registering a device is one line in DEVICES (or a call to register_device); each device has `name` and
`compile(uop_func) -> program`, a program being callable with numpy arrays (outputs written in place).
"""
from __future__ import annotations
import importlib, os
from tgc.errors import TgcError

DEVICES: dict[str, str] = {
  'CPU': 'tgc.runtime.cpu:CPUDevice',
  'INTERP': 'tgc.runtime.interp:InterpDevice',
  'C': 'tgc.runtime.c:CDevice',
  'OPENCL': 'tgc.runtime.opencl:OpenCLDevice',
  'CUDA': 'tgc.runtime.cuda:CUDADevice',
}
_opened: dict[str, object] = {}


def register_device(name: str, path: str) -> None:
  """`register_device("OPENCL", "tgc.runtime.opencl:OpenCLDevice")`: imported when first asked for."""
  DEVICES[name.upper()] = path
  _opened.pop(name.upper(), None)


def get_device(name: str | None = None):
  """The device object of that name (case-insensitive; None: Device.DEFAULT), opened once per process."""
  key = (name or Device.DEFAULT).upper().split(':')[0]
  dev = _opened.get(key)
  if dev is None:
    if key not in DEVICES: raise TgcError(f"unknown device '{name}' (known: {', '.join(sorted(DEVICES))})")
    mod, cls = DEVICES[key].split(':')
    dev = _opened[key] = getattr(importlib.import_module(mod), cls)()
  return dev


class _DeviceRegistry:
  """`Device.DEFAULT` (from $DEVICE, default CPU; assignable) and `Device["CPU"]`, as in tinygrad."""
  _default: str | None = None
  @property
  def DEFAULT(self) -> str: return (self._default or os.environ.get('DEVICE') or 'CPU').upper()
  @DEFAULT.setter
  def DEFAULT(self, v: str) -> None: self._default = v
  def __getitem__(self, name: str): return get_device(name)
  def canonicalize(self, name: str | None) -> str: return (name or self.DEFAULT).upper().split(':')[0]


Device = _DeviceRegistry()

__all__ = ['Device', 'DEVICES', 'get_device', 'register_device', 'time_kernel']


def time_kernel(kernel_func, opts, target: str, device: str, runs: int = 3) -> float:
  """Seconds one launch of a kernel.func takes with these opts on `device` (best of `runs` after a warm-up),
  on random buffers of its argument shapes. kernel-opt's search measures candidates with it."""
  import time
  import numpy as np
  from tgc.ir.core import Module
  from tgc.ir.rewrite import clone_op
  from tgc.passes.linearize import linearize_kernel
  from tgc.passes.manager import parse_pipeline, PassManager
  k = clone_op(kernel_func, {})
  k.attrs['opts'] = tuple(opts)
  fn = linearize_kernel(k, target)
  m = Module([fn])
  PassManager(parse_pipeline('uop-simplify,cse,dce')).run(m)
  prg = get_device(device).compile(fn)
  rng = np.random.default_rng(0)
  bufs = []
  for a in kernel_func.body.args:
    t = a.type
    bufs.append(rng.standard_normal(t.shape).astype(t.dtype.np) if t.dtype.is_float and t.dtype.name != 'bf16' else np.zeros(t.shape, t.dtype.np))
  prg(*bufs)
  best = float('inf')
  for _ in range(runs):
    t0 = time.perf_counter(); prg(*bufs); best = min(best, time.perf_counter() - t0)
  return best
