"""The CUDA device: tgc.emit.cuda source compiled and launched through pycuda (the `cuda` extra).

Memory is the device's: buffers are plain driver allocations (cuMemAlloc, never managed memory) from a caching
allocator, copied in when a tensor is made and out when it is read. Launches are prepared calls queued on the
device's one stream: the host returns at once and waits only in `synchronize()` or a copy out. pycuda's
SourceModule runs nvcc (its disk cache makes a second compile of the same source cheap); modules are cached by
source in the process. On a machine without pycuda or a GPU, opening the device raises
TgcError("CUDA device unavailable: ...").
"""
from __future__ import annotations
import os, tempfile, threading
from tgc.errors import TgcError
from tgc.runtime.buffer import Allocator
from tgc.runtime.device import BaseDevice, Program

_lock = threading.Lock()


class CUDAAllocator(Allocator):
  """cuMemAlloc'd blocks (pycuda DeviceAllocations); copies and launches in the order of the device's stream."""
  def __init__(self, dev: 'CUDADevice'):
    super().__init__(dev.name)
    self.cuda, self.stream, self.current = dev.cuda, dev.stream, dev.make_current
  def _alloc(self, nbytes):
    self.current()
    try: return self.cuda.mem_alloc(max(nbytes, 4))  # (the driver refuses 0 bytes)
    except self.cuda.MemoryError as e: raise MemoryError(str(e)) from None
  def _free(self, handle): self.current(); handle.free()
  def _copyin(self, handle, arr):
    # from pageable host memory the driver stages the data before the call returns: arr may go away after it
    self.current(); self.cuda.memcpy_htod_async(handle, arr, self.stream)
  def _copyout(self, arr, handle):
    self.current(); self.cuda.memcpy_dtoh_async(arr, handle, self.stream); self.stream.synchronize()
  def _copy(self, dst, src, nbytes): self.current(); self.cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)
  def _arg(self, handle): return int(handle)
  def _mem_info(self): self.current(); return self.cuda.mem_get_info()
  def synchronize(self): self.current(); self.stream.synchronize()


class CUDADevice(BaseDevice):
  """Device "CUDA": pycuda on device 0, in its primary context (the one torch and the runtime API use)."""
  name, target = 'CUDA', 'cuda'
  def __init__(self):
    try:
      import pycuda.driver as cuda
      cuda.init()
      if cuda.Device.count() == 0: raise TgcError("CUDA device unavailable: no GPU")
      self.dev = cuda.Device(0)
      self.ctx = self.dev.retain_primary_context()
      self.ctx.push()
      import atexit
      atexit.register(self._close)  # pycuda aborts at exit when a context is still on the stack
    except ImportError as e: raise TgcError(f"CUDA device unavailable: pycuda is not installed ({e}); pip install '.[cuda]' on a GPU machine") from None
    except TgcError: raise
    except Exception as e: raise TgcError(f"CUDA device unavailable: {e}") from None
    self.cuda = cuda
    major, minor = self.dev.compute_capability()
    self.arch = f"sm_{major}{minor}"
    # the shared memory a block may ask for (kernel-opt's tiles fit it: compiler.compile_module passes it on)
    self.local_memory = self.dev.get_attribute(cuda.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    self.stream = cuda.Stream()
    self._libcuda = None
    self._modules: dict[tuple[str, bool], object] = {}
    super().__init__(CUDAAllocator(self))

  def make_current(self):
    """Make tgc's context current on this thread where another library's is (tinygrad runs in a context of its own
    and sets it current: tgc's allocations would land there and its launches fail, 'invalid resource handle'); a
    driver call to read the current one (pycuda binds no cuCtxSetCurrent)."""
    lib = self._libcuda
    if lib is None:
      import ctypes
      lib = self._libcuda = ctypes.CDLL('libcuda.so.1')
      self._cur, self._mine = ctypes.c_void_p(), ctypes.c_void_p(self.ctx.handle)
      self._cur_ref = ctypes.byref(self._cur)
    lib.cuCtxGetCurrent(self._cur_ref)
    if self._cur.value != self._mine.value: lib.cuCtxSetCurrent(self._mine)

  def _close(self):
    try:
      self.stream.synchronize()
      self.allocator.trim()
    except Exception: pass  # the process is ending: the driver frees what is left
    self.ctx.pop()

  def module(self, src: str, fmad: bool = False):
    """The loaded module of this source; fmad: mul+add may fuse into fma (kernels marked `contract`), else exact."""
    from pycuda.compiler import SourceModule
    with _lock:
      m = self._modules.get((src, fmad))
      if m is None:
        self.make_current()
        # one compiler cache per process: pycuda's shared one races when several processes fill it at once
        cache = os.path.join(tempfile.gettempdir(), f"tgc-pycuda-{os.getpid()}")
        os.makedirs(cache, exist_ok=True)
        try: m = SourceModule(src, no_extern_c=True, arch=self.arch, options=[f'--fmad={str(fmad).lower()}'], cache_dir=cache)
        except Exception as e: raise TgcError(f"cuda: nvcc rejected the emitted source:\n{e}\n{src}") from None
        self._modules[(src, fmad)] = m
      return m

  def compile(self, fn) -> 'CUDAProgram': return CUDAProgram(self, fn)

  def compile_all(self, fns) -> list:
    """A function's kernels in one module a compile (those allowed fma and the others apart): nvcc's start-up and
    the driver's load once, not once a kernel (PP-OCR's classifier, 99 kernels: 58 s on an H100 one by one)."""
    from tgc.emit.cuda import render_cuda
    groups: dict[bool, list] = {}
    for fn in fns: groups.setdefault(bool(fn.attrs.get('contract')), []).append(fn)
    mods = {fmad: self.module(render_cuda(list(g)), fmad) for fmad, g in groups.items() if len(g) > 1}
    return [CUDAProgram(self, fn, mods.get(bool(fn.attrs.get('contract')))) for fn in fns]


class CUDAProgram(Program):
  """A kernel of a loaded module, prepared once (its argument format), launched asynchronously on the stream."""
  def __init__(self, dev: CUDADevice, fn, module=None):
    from tgc.emit.cuda import render_cuda_kernel
    super().__init__(dev, fn)
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"CUDA: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    from tgc.emit.cuda import dynamic_shared_bytes
    if module is None: module = dev.module(render_cuda_kernel(fn), bool(fn.attrs.get('contract')))  # (module: compiled with others)
    self.func = module.get_function(self.name)
    self.func.prepare('P' * len(self.signature))
    self.shared = dynamic_shared_bytes(fn)
    if self.shared:
      if self.shared > dev.local_memory: raise TgcError(f"CUDA: @{self.name}: takes {self.shared} bytes of shared memory, more than the {dev.local_memory} a block of this {dev.arch} device may have")
      self.func.set_attribute(dev.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared)
    self.grid = tuple(int(x) for x in self.global_size)
    self.block = tuple(int(x) for x in self.local_size)
    self._start = self._end = None

  def launch(self, args) -> None:
    self.device.make_current()
    try: self.func.prepared_async_call(self.grid, self.block, self.device.stream, *args, shared_size=self.shared)
    except self.device.cuda.Error as e: raise TgcError(f"cuda: @{self.name}: {e}") from None

  def launcher(self):
    # what prepared_async_call does, made once: its argument format as a compiled Struct (pycuda imports its packer
    # and checks its keywords on every call) and the bound launch of the function (cuLaunchKernel)
    import struct
    launch = getattr(self.func, '_launch_kernel', None)  # (pycuda's stateless launch, since CUDA 4)
    if launch is None: return self.launch
    pack, grid, block, shared, stream, err = struct.Struct(self.func.arg_format).pack, self.grid, self.block, self.shared, self.device.stream, self.device.cuda.Error
    current = self.device.make_current
    def f(args):
      try: launch(grid, block, pack(*args), shared, stream)
      except err as e:
        # (another library's context current: the allocator's calls make ours current again, a launch right after
        # that library's call finds out here, once)
        current()
        try: launch(grid, block, pack(*args), shared, stream)
        except err: raise TgcError(f"cuda: @{self.name}: {e}") from None
    return f

  def timed_launch(self, args) -> float:
    """The launch's device time from CUDA events recorded around it on the stream."""
    cuda, stream = self.device.cuda, self.device.stream
    if self._start is None: self._start, self._end = cuda.Event(), cuda.Event()
    self._start.record(stream); self.launch(args); self._end.record(stream)
    self._end.synchronize()
    return self._start.time_till(self._end) * 1e-3
