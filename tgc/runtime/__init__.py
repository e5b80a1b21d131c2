"""Devices: a registry of name -> "module:Class", imported on first use, and Device.DEFAULT from $DEVICE.

Registering a device is one line in DEVICES (or a call to register_device). A device is named by its kind and
an index, `CPU:1`, `CUDA:3` (as tinygrad and torch name them; `CUDA` is `CUDA:0`, and the canonical name of index
0 is the bare kind): each index is its own device object, opened once. A device (tgc.runtime.device) has a `name`,
its `index`, the `target` it compiles for, an `allocator` that owns its memory (tgc.runtime.buffer),
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
  for k in [k for k in _opened if k.upper().partition(':')[0] == name.upper()]: del _opened[k]


def split_name(name: str) -> tuple[str, int]:
  """`"cuda:1"` -> ("CUDA", 1), `"CPU"` -> ("CPU", 0); a TgcError for an index that is not a number >= 0."""
  kind, _, idx = name.upper().partition(':')
  if not idx: return kind, 0
  if not idx.isdigit(): raise TgcError(f"bad device index in '{name}': expected KIND or KIND:N with N >= 0 (e.g. CUDA:1)")
  return kind, int(idx)


def canonical_name(name: str) -> str:
  """The one spelling of a device: upper case, index 0 as the bare kind (`cpu:0` -> `CPU`, `cuda:2` -> `CUDA:2`)."""
  kind, idx = split_name(name)
  return f"{kind}:{idx}" if idx else kind


def device_class_path(name: str) -> str | None:
  """The "module:Class" registered for a device's kind (None where none is)."""
  return DEVICES.get(name.upper().partition(':')[0])


def get_device(name: str | None = None):
  """The device object of that name (case-insensitive, `KIND` or `KIND:N`; None: Device.DEFAULT), opened once per
  process and index. The device's class sees its `name` and `index` set before its __init__ runs."""
  name = name or Device.DEFAULT
  dev = _opened.get(name)
  if dev is not None: return dev
  key = canonical_name(name)
  dev = _opened.get(key)
  if dev is None:
    kind, idx = split_name(key)
    if kind not in DEVICES: raise TgcError(f"unknown device '{name}' (known: {', '.join(sorted(DEVICES))})")
    mod, cls_name = DEVICES[kind].split(':')
    cls = getattr(importlib.import_module(mod), cls_name)
    dev = cls.__new__(cls)
    dev.name, dev.index = key, idx
    dev.__init__()
    _opened[key] = dev
  if name != key: _opened[name] = dev
  return dev


class _DeviceRegistry:
  """`Device.DEFAULT` (from $DEVICE, default CPU; assignable) and `Device["CPU"]`, as in tinygrad."""
  _default: str | None = None
  @property
  def DEFAULT(self) -> str: return (self._default or os.environ.get('DEVICE') or 'CPU').upper()
  @DEFAULT.setter
  def DEFAULT(self, v: str) -> None: self._default = v
  def __getitem__(self, name: str): return get_device(name)
  def canonicalize(self, name):
    """`cuda:0` -> `CUDA`, `cpu:1` -> `CPU:1`; a tuple of names (a sharded tensor's devices) name by name."""
    if isinstance(name, (tuple, list)): return tuple(canonical_name(n) for n in name)
    return canonical_name(name or self.DEFAULT)


Device = _DeviceRegistry()

from tgc.runtime.buffer import Allocator, Buffer, HostAllocator  # noqa: E402  (after Device: they look devices up)
from tgc.runtime.device import BaseDevice, HostDevice, Program  # noqa: E402

__all__ = ['Device', 'DEVICES', 'get_device', 'split_name', 'canonical_name', 'device_class_path', 'register_device', 'Buffer', 'Allocator', 'HostAllocator', 'BaseDevice', 'HostDevice', 'Program']
