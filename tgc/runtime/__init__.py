"""Devices: a registry of name -> "module:Class", imported on first use, and Device.DEFAULT from $DEVICE.

Registering a device is one line in DEVICES (or a call to register_device). A device (tgc.runtime.device)
has a `name`, the `target` it compiles for, an `allocator` that owns its memory (tgc.runtime.buffer),
`compile(uop_func) -> Program` and `synchronize()`.
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

from tgc.runtime.buffer import Allocator, Buffer, HostAllocator  # noqa: E402  (after Device: they look devices up)
from tgc.runtime.device import BaseDevice, HostDevice, Program  # noqa: E402

__all__ = ['Device', 'DEVICES', 'get_device', 'register_device', 'Buffer', 'Allocator', 'HostAllocator', 'BaseDevice', 'HostDevice', 'Program']
