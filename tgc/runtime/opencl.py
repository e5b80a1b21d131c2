"""The OPENCL device: tgc.emit.opencl source run through pyopencl, on device buffers.

The platform is the one whose name contains $OPENCL_PLATFORM, else the first whose name contains "Portable"
or "pocl" (PoCL's CPU device), else the first. Programs are cached by source, and each kernel of one is retrieved once (a `cl.Kernel` is made per retrieval,
at a cost; pyopencl warns RepeatedKernelRetrieval on the second). Buffers are `cl.Buffer`s that
the device owns, also on a CPU device (PoCL): data is copied in once when a tensor is made and out when it is
read, never around a launch, so the path CI runs on PoCL is the one a GPU's OpenCL driver runs. Launches and
device-to-device copies are queued on one in-order queue.
"""
from __future__ import annotations
import os, threading
from tgc.errors import TgcError
from tgc.runtime.buffer import Allocator
from tgc.runtime.device import BaseDevice, Program

_lock = threading.Lock()


def pick_platform(cl):
  plats = cl.get_platforms()
  if not plats: raise TgcError("OPENCL device unavailable: no OpenCL platform")
  want = os.environ.get('OPENCL_PLATFORM')
  for p in plats:
    if want and want.lower() in p.name.lower(): return p
    if not want and ('portable' in p.name.lower() or 'pocl' in p.name.lower()): return p
  if want: raise TgcError(f"OPENCL device unavailable: no platform matches OPENCL_PLATFORM={want!r} (have: {', '.join(p.name for p in plats)})")
  return plats[0]


class OpenCLAllocator(Allocator):
  """cl.Buffers of the device's context; copies through its queue."""
  def __init__(self, dev: 'OpenCLDevice'):
    super().__init__(dev.name)
    self.cl, self.ctx, self.queue, self.dev = dev.cl, dev.ctx, dev.queue, dev.device
  def _alloc(self, nbytes):
    if nbytes > self.dev.max_mem_alloc_size: raise MemoryError(f"larger than the device's largest allocation, {self.dev.max_mem_alloc_size} bytes")
    try: return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, max(nbytes, 4))  # (OpenCL refuses 0 bytes)
    except self.cl.MemoryError as e: raise MemoryError(str(e)) from None
  def _free(self, handle): handle.release()
  def _copyin(self, handle, arr): self.cl.enqueue_copy(self.queue, handle, arr, is_blocking=True)
  def _copyout(self, arr, handle): self.cl.enqueue_copy(self.queue, arr, handle, is_blocking=True)
  def _copy(self, dst, src, nbytes): self.cl.enqueue_copy(self.queue, dst, src, byte_count=nbytes)
  def _mem_info(self): return None  # OpenCL reports no free memory
  def synchronize(self): self.queue.finish()


class OpenCLProgram(Program):
  def __init__(self, dev: 'OpenCLDevice', fn):
    from tgc.emit.opencl import render_opencl_kernel
    super().__init__(dev, fn)
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"OPENCL: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    self.src = render_opencl_kernel(fn)
    self.kernel = dev.kernel(self.src, self.name)
    self.gs = [g * l for g, l in zip(self.global_size, self.local_size)]
    self.ls = list(self.local_size)

  def launch(self, args) -> None:
    self.kernel(self.device.queue, self.gs, self.ls, *args)


class OpenCLDevice(BaseDevice):
  """Device "OPENCL": pyopencl on the chosen platform's first device."""
  name, target = 'OPENCL', 'opencl'
  def __init__(self):
    try: import pyopencl as cl
    except ImportError as e:
      raise TgcError(f"OPENCL device unavailable: pyopencl is not installed ({e}); pip install 'pyopencl[pocl]' "
                     "(or pip install -e '.[opencl]' in a checkout) installs it with PoCL's CPU device") from None
    self.cl = cl
    self.platform = pick_platform(cl)
    self.device = self.platform.get_devices()[0]
    self.is_cpu = bool(self.device.type & cl.device_type.CPU)
    self.processor = 'cpu' if self.is_cpu else 'gpu'  # kernel-opt's tiles for this device (compiler.compile_module)
    self.ctx = cl.Context([self.device])
    self.queue = cl.CommandQueue(self.ctx)
    self._programs: dict[str, object] = {}
    self._kernels: dict[tuple[str, str], object] = {}
    # a platform whose compiler cannot target this machine (PoCL 3.0's LLVM 14 on a CPU newer than it knows asks
    # for target CPU 'generic' and fails every build) is unavailable, said once, not a failure of every kernel
    try: cl.Program(self.ctx, "__kernel void probe(__global int* a) { a[0] = 1; }").build()
    except cl.Error as e:
      why = next((ln.strip() for ln in str(e).splitlines() if 'error' in ln.lower() and 'clBuildProgram' not in ln), str(e).splitlines()[0])
      raise TgcError(f"OPENCL device unavailable: {self.platform.name} cannot build a kernel for {self.device.name.strip()}: {why}") from None
    super().__init__(OpenCLAllocator(self))

  def build(self, src: str):
    with _lock:
      prg = self._programs.get(src)
      if prg is None:
        try: prg = self.cl.Program(self.ctx, src).build()
        except self.cl.RuntimeError as e: raise TgcError(f"opencl: the device rejected the emitted source: {e}\n{src}") from None
        self._programs[src] = prg
      return prg

  def kernel(self, src: str, name: str):
    """The cl.Kernel `name` of the program built from src, made once. (Its arguments are set at each launch, as
    every launch queued through it does: programs of one source share it.)"""
    with _lock:
      k = self._kernels.get((src, name))
      if k is not None: return k
    prg = self.build(src)
    with _lock: return self._kernels.setdefault((src, name), self.cl.Kernel(prg, name))

  def compile(self, fn) -> OpenCLProgram: return OpenCLProgram(self, fn)
