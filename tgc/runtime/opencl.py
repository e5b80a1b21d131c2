"""The OPENCL device: tgc.emit.opencl source run through pyopencl.

The platform is the one whose name contains $OPENCL_PLATFORM, else the first whose name contains "Portable"
or "pocl" (PoCL's CPU device), else the first. Programs are cached by source; numpy buffers are copied
in before a launch and every buffer the kernel writes is copied back after it.
"""
from __future__ import annotations
import os, threading
import numpy as np
from tgc.errors import TgcError
from tgc.runtime.interp import buffer_signature, check_buffers, launch_dims

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


class OpenCLProgram:
  def __init__(self, dev: 'OpenCLDevice', fn):
    from tgc.emit.opencl import render_opencl_kernel
    self.dev, self.fn, self.name = dev, fn, fn.sym_name
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"OPENCL: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    self.signature = buffer_signature(fn)
    self.global_size, self.local_size = launch_dims(fn)
    self.src = render_opencl_kernel(fn)
    self.kernel = getattr(dev.build(self.src), self.name)
    self.written = sorted({op.buf.op.attrs['index'] for op in fn.body.ops if op.name == 'uop.store' and op.buf.op.name == 'uop.define_global'})

  def __call__(self, *bufs: np.ndarray) -> None:
    cl = self.dev.cl
    check_buffers(self.fn, bufs, self.signature)
    mf, q = cl.mem_flags, self.dev.queue
    # a CPU device (PoCL) works in the numpy arrays' own memory (USE_HOST_PTR: no copy in, a map to read the
    # results back); another device gets copies. A zero-size buffer still needs a device buffer (OpenCL refuses 0).
    host = mf.USE_HOST_PTR if self.dev.is_cpu else mf.COPY_HOST_PTR
    def dbuf(i, b):
      if not b.nbytes: return cl.Buffer(self.dev.ctx, mf.READ_WRITE, 4)
      if host == mf.USE_HOST_PTR and not b.flags.writeable: return cl.Buffer(self.dev.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
      return cl.Buffer(self.dev.ctx, (mf.READ_WRITE if i in self.written else mf.READ_ONLY) | host, hostbuf=b)
    dbufs = [dbuf(i, b) for i, b in enumerate(bufs)]
    gs = [g * l for g, l in zip(self.global_size, self.local_size)]
    self.kernel(q, gs, list(self.local_size), *dbufs)
    for i in self.written:
      if not bufs[i].nbytes: continue
      if host == mf.USE_HOST_PTR:  # mapping makes the device's writes visible in the host memory; unmap at once
        m, _ = cl.enqueue_map_buffer(q, dbufs[i], cl.map_flags.READ, 0, bufs[i].shape, bufs[i].dtype)
        m.base.release(q)
      else: cl.enqueue_copy(q, bufs[i], dbufs[i])
    q.finish()


class OpenCLDevice:
  """Device "OPENCL": pyopencl on the chosen platform's first device."""
  name = 'OPENCL'
  def __init__(self):
    try: import pyopencl as cl
    except ImportError as e: raise TgcError(f"OPENCL device unavailable: {e}") from None
    self.cl = cl
    self.platform = pick_platform(cl)
    self.device = self.platform.get_devices()[0]
    self.is_cpu = bool(self.device.type & cl.device_type.CPU)
    self.processor = 'cpu' if self.is_cpu else 'gpu'  # kernel-opt's tiles for this device (compiler.compile_module)
    self.ctx = cl.Context([self.device])
    self.queue = cl.CommandQueue(self.ctx)
    self._programs: dict[str, object] = {}

  def build(self, src: str):
    with _lock:
      prg = self._programs.get(src)
      if prg is None:
        try: prg = self.cl.Program(self.ctx, src).build()
        except self.cl.RuntimeError as e: raise TgcError(f"opencl: the device rejected the emitted source: {e}\n{src}") from None
        self._programs[src] = prg
      return prg

  def compile(self, fn) -> OpenCLProgram: return OpenCLProgram(self, fn)
