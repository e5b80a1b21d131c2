"""Device memory: a `Buffer` is a flat block of one device's memory; each device has one `Allocator`.

A Buffer holds `size` elements of a DType (bfloat16 as its uint16 bits, as numpy storage does) in memory its
device's allocator gave it; `handle` is the allocator's object (a numpy array on host devices, a `cl.Buffer`, a
CUDA allocation) and `arg` what a kernel launch passes for it (the array, its address, the device pointer).
A Buffer goes back to its allocator once: by `free()` or when the last reference to it goes away.

Allocators cache freed blocks by size and hand them out again, as torch's caching allocator and tinygrad's
LRU allocator do: a device allocation is slow and synchronises, a cache hit costs a dict lookup. Reuse is safe
because each device queues its launches and copies in order on one stream: a block freed after its last launch
was queued is written by the next user only after that launch ran. Blocks go back to the driver only on
`trim()` (after a synchronize), which an allocation that runs out of memory tries once before it fails.
"""
from __future__ import annotations
import sys
from collections import defaultdict
import numpy as np
from tgc.errors import TgcError, OutOfMemory
from tgc.ir.dtypes import DType


class Allocator:
  """Allocations of one device with a cache of freed blocks by size; counts bytes and copies.

  A backend overrides the `_` methods: `_alloc(nbytes)` (nbytes may be 0; raising MemoryError when the device
  is full), `_free`,
  `_copyin(handle, array)`, `_copyout(array, handle)` (synchronous), `_copy(dst, src, nbytes)` (on the device, in
  queue order), `_arg(handle)` and `_mem_info()` ((free, total) bytes, or None)."""
  cache_blocks = True
  tracer = None  # while a profile is open (tgc.profiler): what records allocations, frees and copies

  def __init__(self, device: str):
    self.device = device
    self.cache: dict[int, list] = defaultdict(list)
    self.in_use = self.cached = self.peak = 0
    self.copies_in = self.copies_out = self.copies = 0
    self.allocs = 0  # calls to the backend's _alloc (cache misses)

  def alloc(self, nbytes: int):
    """A block of at least `nbytes` (from the cache when one of that size is there)."""
    blocks = self.cache.get(nbytes)
    if blocks:
      h = blocks.pop(); self.cached -= nbytes
    else:
      try: h = self._alloc(nbytes)
      except MemoryError:
        self.trim()  # the cached blocks go back to the device, then one more try
        try: h = self._alloc(nbytes)
        except MemoryError as e: raise self.out_of_memory(nbytes, e) from None
      self.allocs += 1
    self.in_use += nbytes
    if self.in_use > self.peak: self.peak = self.in_use
    if self.tracer is not None: self.tracer.alloc(self, nbytes)
    return h

  def free(self, handle, nbytes: int) -> None:
    """Give a block back: kept for reuse (device allocators), or released (host memory, numpy's to manage)."""
    self.in_use -= nbytes
    if self.tracer is not None: self.tracer.free(self, nbytes)
    if self.cache_blocks:
      self.cache[nbytes].append(handle); self.cached += nbytes
    else: self._free(handle)

  def trim(self) -> None:
    """Return every cached block to the device (after the queued work that may still use them)."""
    if not self.cached: return
    self.synchronize()
    for blocks in self.cache.values():
      for h in blocks: self._free(h)
    self.cache.clear(); self.cached = 0

  def out_of_memory(self, nbytes: int, cause) -> TgcError:
    info = self._mem_info()
    where = f" ({info[0]} of {info[1]} bytes free)" if info else ''
    return OutOfMemory(f"{self.device}: out of device memory: asked for {nbytes} bytes{where}; tgc holds {self.in_use} bytes in use ({cause})")

  def stats(self) -> dict[str, int]:
    """Bytes in use, cached and at peak; copies in, out and on the device."""
    return {'in_use': self.in_use, 'cached': self.cached, 'peak': self.peak, 'allocs': self.allocs,
            'copies_in': self.copies_in, 'copies_out': self.copies_out, 'copies': self.copies}

  def copyin(self, handle, arr: np.ndarray) -> None:
    self.copies_in += 1
    if self.tracer is None: return self._copyin(handle, arr)
    with self.tracer.copy(self, 'copy in', arr.nbytes): self._copyin(handle, arr)
  def copyout(self, arr: np.ndarray, handle) -> None:
    self.copies_out += 1
    if self.tracer is None: return self._copyout(arr, handle)
    with self.tracer.copy(self, 'copy out', arr.nbytes): self._copyout(arr, handle)
  def copy(self, dst, src, nbytes: int) -> None:
    self.copies += 1
    if self.tracer is None: return self._copy(dst, src, nbytes)
    with self.tracer.copy(self, 'copy', nbytes): self._copy(dst, src, nbytes)
  def transfer(self, dst, src_allocator: 'Allocator', src, nbytes: int) -> bool:
    """Copy `nbytes` from a block of another device's allocator into `dst` without the host (peer to peer), after
    the work queued on the source; False where there is no such path (the caller goes through the host)."""
    if not self._transfer(dst, src_allocator, src, nbytes): return False
    self.copies += 1; return True

  # the backend
  def synchronize(self) -> None: pass
  def _alloc(self, nbytes: int): raise NotImplementedError
  def _free(self, handle) -> None: pass
  def _copyin(self, handle, arr: np.ndarray) -> None: raise NotImplementedError
  def _copyout(self, arr: np.ndarray, handle) -> None: raise NotImplementedError
  def _copy(self, dst, src, nbytes: int) -> None: raise NotImplementedError
  def _transfer(self, dst, src_allocator, src, nbytes: int) -> bool: return False
  def _arg(self, handle): return handle
  def _mem_info(self): return None


class HostAllocator(Allocator):
  """Host devices (CPU, C, INTERP): a block is a flat uint8 numpy array; kernels read and write it in place.
  Freed blocks are numpy's to reuse (malloc caches small ones, large ones are mapped), so none is kept."""
  cache_blocks = False
  def _alloc(self, nbytes): return np.empty(nbytes, np.uint8)
  def _copyin(self, handle, arr): handle[:arr.nbytes] = arr.reshape(-1).view(np.uint8)
  def _copyout(self, arr, handle): arr.reshape(-1).view(np.uint8)[:] = handle[:arr.nbytes]
  def _copy(self, dst, src, nbytes): dst[:nbytes] = src[:nbytes]
  def _transfer(self, dst, src_allocator, src, nbytes):
    if not isinstance(src_allocator, HostAllocator): return False
    dst[:nbytes] = src[:nbytes]; return True  # (CPU:0 to CPU:1: the same memory, one copy)


class Buffer:
  """`size` elements of `dtype` in the memory of device `device`.

  `Buffer(device, size, dtype)` allocates; `Buffer.from_numpy(device, array)` allocates and copies in; `numpy()`
  copies out (waiting for the device); `copy_to(device)` copies to another device (on the device, peer to peer
  between devices that allow it, else through the host)."""
  __slots__ = ('device', 'size', 'dtype', 'nbytes', 'handle', 'arg', 'allocator', 'owned', '_view', '__weakref__')

  def __init__(self, device, size: int, dtype: DType):
    if isinstance(device, str):  # a name, or the device object itself (the host schedule's allocations: no import)
      from tgc.runtime import get_device
      device = get_device(device)
    self.allocator = al = device.allocator
    self.device, self.size, self.dtype = device.name, int(size), dtype
    self.nbytes = n = self.size * dtype.itemsize
    self.handle = h = al.alloc(n)
    self.arg = al._arg(h)
    self.owned, self._view = True, None

  @staticmethod
  def adopt(dev, size: int, dtype: DType, handle, arg) -> 'Buffer':
    """The Buffer of a block that device object `dev`'s allocator gave for `size` elements of dtype (with its launch
    argument): the host schedule allocates a result before its launch and makes its Buffer after the launches."""
    b = object.__new__(Buffer)
    b.device, b.size, b.dtype, b.allocator = dev.name, size, dtype, dev.allocator
    b.nbytes, b.handle, b.arg, b.owned, b._view = size * dtype.itemsize, handle, arg, True, None
    return b

  @staticmethod
  def from_numpy(device: str, arr: np.ndarray, dtype: DType | None = None) -> 'Buffer':
    """A Buffer holding a copy of `arr` (in its storage dtype: bf16 as uint16 bits)."""
    from tgc.ir import dtypes as D
    b = Buffer(device, arr.size, dtype or D.from_numpy(arr.dtype))
    if arr.size: b.allocator.copyin(b.handle, np.ascontiguousarray(arr))
    return b

  @staticmethod
  def wrap(device: str, arr: np.ndarray, dtype: DType | None = None) -> 'Buffer':
    """On a host device, a Buffer over `arr`'s own memory (C-contiguous; no copy, never freed to the allocator);
    on other devices a copy, as from_numpy."""
    from tgc.runtime import get_device
    from tgc.ir import dtypes as D
    dev = get_device(device)
    if not isinstance(dev.allocator, HostAllocator): return Buffer.from_numpy(device, arr, dtype)
    b = object.__new__(Buffer)
    if not arr.flags.c_contiguous: arr = np.ascontiguousarray(arr)  # (np.require costs a microsecond even when it copies nothing)
    b.device, b.size, b.dtype, b.allocator = dev.name, arr.size, dtype or D.from_numpy(arr.dtype), dev.allocator
    b.nbytes, b.owned = arr.nbytes, False
    b._view = arr.reshape(-1)
    b.handle = b._view.view(np.uint8)
    b.arg = b.allocator._arg(b.handle)
    return b

  @property
  def host_array(self) -> np.ndarray:
    """On a host device: the buffer's own memory as a flat array of its storage dtype (no copy)."""
    if self._view is None:
      if not isinstance(self.handle, np.ndarray): raise TgcError(f"{self.device}: a device buffer has no host array; use numpy()")
      self._view = self.handle[:self.nbytes].view(self.dtype.np)
    return self._view

  def numpy(self) -> np.ndarray:
    """A copy of the contents as a flat numpy array (waits for the launches that write it)."""
    out = np.empty(self.size, self.dtype.np)
    if self.size: self.allocator.copyout(out, self.handle)
    return out

  def as_numpy(self) -> np.ndarray:
    """The contents as a flat array: the buffer's own memory on a host device, a copy from any other."""
    return self.host_array if isinstance(self.allocator, HostAllocator) else self.numpy()

  def copy_to(self, device: str) -> 'Buffer':
    from tgc.runtime import get_device
    dst = Buffer(device, self.size, self.dtype)
    if not self.size: return dst
    if dst.allocator is self.allocator: self.allocator.copy(dst.handle, self.handle, self.nbytes)
    elif not dst.allocator.transfer(dst.handle, self.allocator, self.handle, self.nbytes):
      dst.allocator.copyin(dst.handle, self.numpy())  # no direct path between the devices: through the host
    return dst

  def free(self) -> None:
    """Back to the allocator, once (a second call, or the collector later, does nothing)."""
    h, self.handle, self.arg, self._view = self.handle, None, None, None
    if h is not None and self.owned: self.allocator.free(h, self.nbytes)

  def __del__(self):
    try: h = self.handle
    except AttributeError: return  # (its allocation failed)
    if h is None or not self.owned: return
    try: self.allocator.free(h, self.nbytes)  # (free() without its bookkeeping: the object is going away)
    except Exception:
      if not sys.is_finalizing(): raise  # at exit the device may already be closed

  def __repr__(self): return f"<Buffer {self.device} {self.size}x{self.dtype.name}{'' if self.handle is not None else ' freed'}>"


from tgc import profiler as _profiler  # noqa: E402  (PROFILE=trace.json: a profile open from the first buffer on)
_profiler._from_env()
