"""The CUDA device: tgc.emit.cuda source compiled and launched through pycuda (the `cuda` extra).

pycuda's SourceModule runs nvcc (its disk cache makes a second compile of the same source cheap); a launch
is grid = global_size, block = local_size; buffers are copied to the device before it and the written ones
back after it. Modules are cached by source in the process. On a machine without pycuda or a GPU,
opening the device raises TgcError("CUDA device unavailable: ...").
"""
from __future__ import annotations
import os, tempfile, threading
import numpy as np
from tgc.errors import TgcError
from tgc.runtime.interp import buffer_signature, buffer_sizes, check_buffers, launch_dims

_lock = threading.Lock()


class CUDADevice:
  """Device "CUDA": pycuda on device 0, with its own context."""
  name = 'CUDA'
  def __init__(self):
    try:
      import pycuda.driver as cuda
      cuda.init()
      if cuda.Device.count() == 0: raise TgcError("CUDA device unavailable: no GPU")
      self.dev = cuda.Device(0)
      self.ctx = self.dev.retain_primary_context()
      self.ctx.push()
      import atexit
      atexit.register(self.ctx.pop)  # pycuda aborts at exit when a context is still on the stack
    except ImportError as e: raise TgcError(f"CUDA device unavailable: pycuda is not installed ({e}); pip install '.[cuda]' on a GPU machine") from None
    except TgcError: raise
    except Exception as e: raise TgcError(f"CUDA device unavailable: {e}") from None
    self.cuda = cuda
    major, minor = self.dev.compute_capability()
    self.arch = f"sm_{major}{minor}"
    self._modules: dict[str, object] = {}

  def module(self, src: str):
    from pycuda.compiler import SourceModule
    with _lock:
      m = self._modules.get(src)
      if m is None:
        # one compiler cache per process: pycuda's shared one races when several processes fill it at once
        cache = os.path.join(tempfile.gettempdir(), f"tgc-pycuda-{os.getpid()}")
        os.makedirs(cache, exist_ok=True)
        try: m = SourceModule(src, no_extern_c=True, arch=self.arch, options=['--fmad=false'], cache_dir=cache)
        except Exception as e: raise TgcError(f"cuda: nvcc rejected the emitted source:\n{e}\n{src}") from None
        self._modules[src] = m
      return m

  def compile(self, fn) -> 'CUDAProgram': return CUDAProgram(self, fn)


class CUDAProgram:
  def __init__(self, dev: CUDADevice, fn):
    from tgc.emit.cuda import render_cuda_kernel
    self.dev, self.fn, self.name = dev, fn, fn.sym_name
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"CUDA: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    self.signature, self.sizes = buffer_signature(fn), buffer_sizes(fn)
    self.global_size, self.local_size = launch_dims(fn)
    self.src = render_cuda_kernel(fn)
    self.func = dev.module(self.src).get_function(self.name)
    self.written = sorted({op.buf.op.attrs['index'] for op in fn.body.ops if op.name == 'uop.store' and op.buf.op.name == 'uop.define_global'})

  def __call__(self, *bufs: np.ndarray) -> None:
    cuda = self.dev.cuda
    check_buffers(self.fn, bufs, self.signature, self.sizes)
    devbufs = []
    try:
      for b in bufs:
        d = cuda.mem_alloc(max(b.nbytes, 4))
        devbufs.append(d)
        if b.nbytes: cuda.memcpy_htod(d, b)
      self.func(*devbufs, grid=tuple(int(x) for x in self.global_size), block=tuple(int(x) for x in self.local_size))
      cuda.Context.synchronize()
      for i in self.written:
        if bufs[i].nbytes: cuda.memcpy_dtoh(bufs[i], devbufs[i])
    except cuda.Error as e: raise TgcError(f"cuda: @{self.name}: {e}") from None
    finally:
      for d in devbufs: d.free()
