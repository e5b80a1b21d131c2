"""What every device is: a name, the target it compiles for, an allocator that owns its memory, a queue.

A device compiles uop.funcs into Programs. `Program.launch(args)` queues one launch over its buffers' launch
arguments (`Buffer.arg`) and returns at once where the device has a queue; the host waits only in
`synchronize()` or a copy out. Calling a Program with numpy arrays (tests, tools) copies them in, launches,
and copies the written ones back.
"""
from __future__ import annotations
import time
import numpy as np
from tgc.runtime.buffer import Allocator, Buffer, HostAllocator
from tgc.errors import TgcError
from tgc.dialects.uop import buffer_signature, buffer_sizes, launch_info


def check_buffers(fn, bufs, sig=None, sizes=None) -> list[np.ndarray]:
  """Buffers must be C-contiguous numpy arrays of the kernel's dtypes (bf16: uint16 bits), at least as large as
  the kernel declares (its accesses are proven or guarded against those sizes); else a TgcError."""
  sig = buffer_signature(fn) if sig is None else sig
  sizes = buffer_sizes(fn) if sizes is None else sizes
  if len(bufs) != len(sig): raise TgcError(f"@{fn.sym_name} takes {len(sig)} buffers, got {len(bufs)}")
  for i, (b, dt) in enumerate(zip(bufs, sig)):
    if not isinstance(b, np.ndarray): raise TgcError(f"@{fn.sym_name}: buffer {i} must be a numpy array, got {type(b).__name__}")
    if b.dtype != dt.np: raise TgcError(f"@{fn.sym_name}: buffer {i} must have numpy dtype {dt.np} for {dt}, got {b.dtype}")
    if not b.flags['C_CONTIGUOUS']: raise TgcError(f"@{fn.sym_name}: buffer {i} must be C-contiguous")
    if i == 0 and not b.flags['WRITEABLE']: raise TgcError(f"@{fn.sym_name}: output buffer 0 is read-only")
    if b.size < sizes.get(i, 0): raise TgcError(f"@{fn.sym_name}: buffer {i} has {b.size} elements, the kernel declares {sizes[i]}")
  return list(bufs)


class Program:
  """One kernel compiled for a device: its buffer signature, declared sizes, launch grid, written buffers.
  `launcher_epoch` counts the times a program's launcher changed (a CPU kernel settling on one thread or split after
  its first launches were timed): host schedules made before take the launchers anew."""
  launcher_epoch = 0
  split = False  # whether a launch may be split across threads (None: not settled yet; a CPU kernel's)
  def __init__(self, device: 'BaseDevice', fn, info: tuple | None = None):
    """fn: the uop.func; or, with its launch_info as `info`, what makes it when first asked for (a function loaded from
    the disk cache keeps no kernel bodies: they are lowered again only if something reads them)."""
    self.device, self._fn = device, fn
    self.name, self.signature, self.sizes, (self.global_size, self.local_size), self.written = info or launch_info(fn)

  @property
  def info(self) -> tuple:
    """Its launch_info: (name, buffer dtypes, declared sizes, (global_size, local_size), written buffers)."""
    return self.name, self.signature, self.sizes, (self.global_size, self.local_size), self.written

  @property
  def fn(self):
    """The uop.func this program runs."""
    f = self._fn
    if callable(f): f = self._fn = f()
    return f

  def launch(self, args: list, **kw) -> None:
    """Queue one launch over the buffers' launch arguments (in define_global order)."""
    raise NotImplementedError

  def launcher(self):
    """What the host schedule calls per launch: f(args) does what launch(args) does, with what a launch's checks and
    set-up compute made once (a device overrides it where that saves time)."""
    return self.launch

  def timed_launch(self, args: list) -> float:
    """Launch and wait; the seconds the launch took on the device (host time around it where the device has
    no timer of its own)."""
    self.device.synchronize()
    t0 = time.perf_counter(); self.launch(args); self.device.synchronize()
    return time.perf_counter() - t0

  def __call__(self, *arrays: np.ndarray, **kw) -> None:
    """Run on numpy arrays, outputs written in place: host devices use the arrays' memory, others copies."""
    check_buffers(self.fn, arrays, self.signature, self.sizes)
    alloc = self.device.allocator
    if isinstance(alloc, HostAllocator): return self.launch([alloc._arg(a) for a in arrays], **kw)
    bufs = [Buffer.from_numpy(self.device.name, a, dt) for a, dt in zip(arrays, self.signature)]
    self.launch([b.arg for b in bufs], **kw)
    for i in self.written:
      if arrays[i].size: alloc.copyout(arrays[i], bufs[i].handle)


class BaseDevice:
  """A device: `name` (`KIND` or `KIND:N`), `index` (N), `target` (the name of the Target it compiles for),
  `allocator`, `compile(fn)`, and the capabilities it declares beyond its target (`spec`: what the lowering asks).
  tgc.runtime.get_device sets the name and index of the device it opens."""
  name = ''
  index = 0
  target = 'llvm'
  processor = 'auto'     # the kind of processor it is, where another than its target language's (OpenCL on a CPU: cpu)
  local_memory = 0       # the shared memory a work-group may take, in bytes (0: the target's default)
  warpgroup_mma = True   # it has its target's warpgroup tensor cores, where the target has them (wgmma: Hopper alone)
  processors = 0         # the multiprocessors its work-groups spread over (a GPU's SMs; 0: not declared)
  wake_workers = None    # what a call does first where a launch may be split across threads (the CPU's), else None
  def __init__(self, allocator: Allocator | None = None):
    self.allocator = allocator or HostAllocator(self.name)
  @property
  def spec(self):
    """The DeviceSpec the lowering runs for this device: its target and its declared capabilities."""
    from tgc.target import DeviceSpec, tf32_matmul
    return DeviceSpec.of(self.target, processor=self.processor, local_memory=self.local_memory, warpgroup=self.warpgroup_mma,
                         processors=self.processors, device=self.name, tf32=tf32_matmul(self.target))
  def compile(self, fn) -> Program: raise NotImplementedError
  def compile_all(self, fns: list, progress=None) -> list[Program]:
    """Every kernel a function needs, compiled at once (a device whose compiler has a cost per call overrides it);
    `progress` (a tgc.runtime.workers.Progress) is stepped as each is done."""
    from tgc.profiler import phase
    if progress is not None: progress.phase('compile', len(fns))
    out = []
    for fn in fns:
      with phase(f'compile kernel @{fn.sym_name}'): out.append(self.compile(fn))  # (a profile's trace: each kernel's)
      if progress is not None: progress.step()
    return out
  def binary_id(self) -> str:
    """What this device's binaries depend on besides their kernels (its compiler, architecture, flags): a function's
    disk cache entry is keyed by it, so that its binaries never load on another kind of device."""
    return f"{type(self).__module__}.{type(self).__qualname__} {self.target}"
  saves_programs = False  # whether save_programs and load_programs keep its binaries (tgc.function_cache keeps its functions)
  def save_programs(self, progs: list) -> tuple | None:
    """The binaries of compiled programs as (JSON-able metadata, a list of bytes) that load_programs makes programs of
    again in another process (a function's disk cache entry); None where it cannot (not compiled here, the disk
    cache off)."""
    return None
  def build_programs(self, fns: list) -> tuple | None:
    """The binaries of these uop.funcs as save_programs gives them ((meta, blobs), for load_programs), made without
    the device's driver: what a compile worker (a forked process, which must not touch a driver) hands back, so that
    a function's kernels are lowered and compiled side by side. None where this device compiles through its driver:
    its functions are lowered in this process."""
    return None
  def load_programs(self, fns: list, infos: list, meta, blobs: list) -> list[Program]:
    """Programs from save_programs' (meta, blobs), for `fns` (each a uop.func or what makes it) with their launch_info."""
    raise NotImplementedError
  def synchronize(self) -> None:
    """Wait until every queued launch and copy has finished."""
    self.allocator.synchronize()


class HostDevice(BaseDevice):
  """A device whose memory is the host's (CPU, C, INTERP): buffers are numpy arrays, launches run at once, so a
  specialized function's intermediate buffers can be its own, allocated once (keeps_intermediates)."""
  keeps_intermediates = True
  def __init__(self): super().__init__(HostAllocator(self.name))
