"""The CUDA device: tgc.emit.cuda source compiled by NVRTC and launched through the CUDA driver API.

Both libraries are reached with ctypes (libnvrtc, libcuda), so nothing beyond a CUDA driver and toolkit is
needed; pycuda is not required. On a machine without them, opening the device raises
TgcError("CUDA device unavailable: ..."). A launch is grid = global_size, block = local_size; buffers are
copied to the device before it and the written ones back after it. Modules are cached by source.
"""
from __future__ import annotations
import ctypes, ctypes.util, glob, os, threading
import numpy as np
from tgc.errors import TgcError
from tgc.runtime.interp import buffer_signature, check_buffers, launch_dims

_lock = threading.Lock()


def _load(names: list[str], what: str):
  for n in names:
    for cand in [n] + sorted(glob.glob(n), reverse=True):
      try: return ctypes.CDLL(cand)
      except OSError: continue
  raise TgcError(f"CUDA device unavailable: cannot load {what}")


def _cuda_home() -> str:
  for d in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
    if d and os.path.isdir(os.path.join(d, 'include')): return d
  return '/usr/local/cuda'


class CUDADevice:
  """Device "CUDA": NVRTC + the driver API through ctypes, device 0."""
  name = 'CUDA'
  def __init__(self):
    home = _cuda_home()
    self.cu = _load(['libcuda.so.1', 'libcuda.so'], 'libcuda (no NVIDIA driver)')
    self.nvrtc = _load([ctypes.util.find_library('nvrtc') or 'libnvrtc.so', f"{home}/lib64/libnvrtc.so*", f"{home}/targets/x86_64-linux/lib/libnvrtc.so*",
                        '/usr/local/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so*'], 'libnvrtc')
    self.include = os.path.join(home, 'include')
    self.check(self.cu.cuInit(0), 'cuInit')
    dev = ctypes.c_int()
    self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), 'cuDeviceGet')
    major, minor = ctypes.c_int(), ctypes.c_int()
    self.check(self.cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev), 'cuDeviceGetAttribute')
    self.check(self.cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev), 'cuDeviceGetAttribute')
    self.arch = f"sm_{major.value}{minor.value}"
    self.ctx = ctypes.c_void_p()
    self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), 'cuDevicePrimaryCtxRetain')
    self.check(self.cu.cuCtxSetCurrent(self.ctx), 'cuCtxSetCurrent')
    self.cu.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
    self.cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    self.cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    self.cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    self._modules: dict[str, ctypes.c_void_p] = {}

  def check(self, status: int, what: str):
    if status != 0:
      s = ctypes.c_char_p()
      self.cu.cuGetErrorString(status, ctypes.byref(s))
      raise TgcError(f"CUDA device unavailable: {what} failed: {s.value.decode() if s.value else status}" if what.startswith('cu') and what in ('cuInit', 'cuDeviceGet') else f"cuda: {what} failed: {s.value.decode() if s.value else status}")

  def nvrtc_compile(self, src: str) -> bytes:
    n = self.nvrtc
    prog = ctypes.c_void_p()
    if n.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None) != 0: raise TgcError("cuda: nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={self.arch}".encode(), b"--fmad=false", f"-I{self.include}".encode(), b"-default-device"]
    st = n.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    n.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value); n.nvrtcGetProgramLog(prog, log)
    if st != 0: raise TgcError(f"cuda: NVRTC rejected the emitted source:\n{log.value.decode(errors='replace')}\n{src}")
    n.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value); n.nvrtcGetCUBIN(prog, buf)
    return buf.raw

  def module(self, src: str):
    with _lock:
      m = self._modules.get(src)
      if m is None:
        image = self.nvrtc_compile(src)
        m = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(m), image), 'cuModuleLoadData')
        self._modules[src] = m
      return m

  def compile(self, fn) -> 'CUDAProgram': return CUDAProgram(self, fn)


class CUDAProgram:
  def __init__(self, dev: CUDADevice, fn):
    from tgc.emit.cuda import render_cuda_kernel
    self.dev, self.fn, self.name = dev, fn, fn.sym_name
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"CUDA: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    self.signature = buffer_signature(fn)
    self.global_size, self.local_size = launch_dims(fn)
    self.src = render_cuda_kernel(fn)
    self.func = ctypes.c_void_p()
    dev.check(dev.cu.cuModuleGetFunction(ctypes.byref(self.func), dev.module(self.src), self.name.encode()), 'cuModuleGetFunction')
    self.written = sorted({op.buf.op.attrs['index'] for op in fn.body.ops if op.name == 'uop.store' and op.buf.op.name == 'uop.define_global'})

  def __call__(self, *bufs: np.ndarray) -> None:
    cu, dev = self.dev.cu, self.dev
    check_buffers(self.fn, bufs, self.signature)
    ptrs = []
    try:
      for b in bufs:
        p = ctypes.c_uint64()
        dev.check(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(b.nbytes, 4))), 'cuMemAlloc')
        ptrs.append(p)
        if b.nbytes: dev.check(cu.cuMemcpyHtoD_v2(p.value, b.ctypes.data, b.nbytes), 'cuMemcpyHtoD')
      args = (ctypes.c_void_p * len(ptrs))(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in ptrs])
      g, l = self.global_size, self.local_size
      dev.check(cu.cuLaunchKernel(self.func, *[ctypes.c_uint(x) for x in (*g, *l)], ctypes.c_uint(0), None, args, None), 'cuLaunchKernel')
      dev.check(cu.cuCtxSynchronize(), 'cuCtxSynchronize')
      for i in self.written:
        if bufs[i].nbytes: dev.check(cu.cuMemcpyDtoH_v2(bufs[i].ctypes.data, ptrs[i].value, bufs[i].nbytes), 'cuMemcpyDtoH')
    finally:
      for p in ptrs: cu.cuMemFree_v2(p.value)
