"""The CUDA device: tgc.emit.cuda source compiled and launched through pycuda (the `cuda` extra).

Memory is the device's: buffers are plain driver allocations (cuMemAlloc, never managed memory) from a caching
allocator, copied in when a tensor is made and out when it is read. Launches are queued on the device's one stream
(the driver's cuLaunchKernel through ctypes): the host returns at once and waits only in `synchronize()` or a copy
out. Sources become cubins for the device's architecture (sm_90a where they hold wgmma) through NVRTC
(`cuda.bindings.nvrtc`, in process: no compiler to start), or nvcc where NVRTC is not importable; cubins are kept in
the disk cache (tgc.cache, kind `cuda`) and a function's kernels are compiled on the compile workers. Modules are
loaded by the driver and cached by source in the process. On a machine without pycuda or a GPU, opening the device
raises TgcError("CUDA device unavailable: ...").
"""
from __future__ import annotations
import os, shutil, subprocess, sys, tempfile, threading
from tgc.errors import TgcError
from tgc.runtime.buffer import Allocator
from tgc.runtime.device import BaseDevice, Program

_lock = threading.Lock()


def _nvrtc():
  """cuda.bindings.nvrtc (cuda-python), or None where it is not installed or finds no libnvrtc."""
  try:
    from cuda.bindings import nvrtc
    err, *_ = nvrtc.nvrtcVersion()
    return nvrtc if int(err) == 0 else None
  except Exception: return None  # (ImportError, or the library not found: cuda.pathfinder's own error)


def nvcc_path() -> str | None:
  return shutil.which('nvcc') or next((p for p in ('/usr/local/cuda/bin/nvcc', '/usr/local/bin/nvcc') if os.path.exists(p)), None)


_compiler_ids: dict[str, str] = {}

def compiler_id(which: str) -> str:
  """The CUDA compiler's name and version (part of the disk cache's key)."""
  if which not in _compiler_ids:
    if which == 'nvrtc':
      _, major, minor = _nvrtc().nvrtcVersion()
      _compiler_ids[which] = f"nvrtc {major}.{minor}"
    else:
      try: v = subprocess.run([nvcc_path(), '--version'], capture_output=True, text=True, timeout=60).stdout.strip().split('\n')[-1]
      except (OSError, subprocess.SubprocessError, TypeError): v = '?'
      _compiler_ids[which] = f"nvcc {v}"
  return _compiler_ids[which]


_toolkit: str | None = None

def toolkit_id() -> str:
  """The CUDA compiler a function's binaries come from, as a disk cache key names it, read without loading the compiler
  (a process that finds its functions in the disk cache never compiles: importing cuda-python's NVRTC took 0.19 s of
  a GPT step's 0.5 s warm start): the versions of the cuda-python and NVRTC distributions where cuda-python is
  installed, else nvcc's."""
  global _toolkit
  if _toolkit is None:
    from importlib import metadata
    vs = []
    for d in ('cuda-bindings', 'cuda-python', 'nvidia-cuda-nvrtc', 'nvidia-cuda-nvrtc-cu12', 'nvidia-cuda-nvrtc-cu13'):
      try: vs.append(f"{d} {metadata.version(d)}")
      except metadata.PackageNotFoundError: pass
    _toolkit = 'nvrtc: ' + ', '.join(vs) if vs and vs[0].startswith('cuda-bindings') else compiler_id('nvcc')
  return _toolkit


def include_dirs() -> list[str]:
  """Where the CUDA headers the sources include (cuda_fp16.h, cuda_bf16.h) are: NVRTC has no search path of its own.
  $CUDA_HOME or $CUDA_PATH, nvcc's toolkit, /usr/local/cuda, and the pip wheels' (nvidia/cu13, nvidia/cuda_runtime)."""
  import sys
  roots = [os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), nvcc_path() and os.path.dirname(os.path.dirname(os.path.realpath(nvcc_path()))), '/usr/local/cuda']
  for d in sys.path:
    for sub in ('nvidia/cu13', 'nvidia/cu12', 'nvidia/cuda_runtime', 'nvidia/cuda_nvcc'): roots.append(os.path.join(d or '.', sub))
  out = []
  for r in roots:
    inc = r and os.path.join(r, 'include')
    if inc and os.path.isfile(os.path.join(inc, 'cuda_fp16.h')) and inc not in out: out.append(inc)
  return out


def compiler_messages(compiler: str, log: str) -> None:
  """What the CUDA compiler said about a kernel it compiled (ptxas's warnings: a wgmma serialized, C7514): on stderr
  with DEBUG=4 or more, beside the generated source; never otherwise, a user's terminal is not the compiler's."""
  try: level = int(os.environ.get('DEBUG') or 0)
  except ValueError: level = 0
  if log and level >= 4: print(f"tgc: {compiler}: {log}", file=sys.stderr)


def nvrtc_cubin(src: str, arch: str, fmad: bool = False) -> bytes:
  """CUDA C++ source -> a cubin for `arch` (sm_90a, ...) through NVRTC; a TgcError with NVRTC's log where it refuses."""
  nvrtc = _nvrtc()
  err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b'tgc.cu', 0, [], [])
  if int(err): raise TgcError(f"cuda: nvrtc could not take the source ({err})")
  try:
    opts = [f'--gpu-architecture={arch}'.encode(), f'--fmad={str(fmad).lower()}'.encode(), *(f'-I{d}'.encode() for d in include_dirs())]
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    log = bytearray(max(n, 1))  # NVRTC writes into it: never a bytes object (b' ' * 1 is CPython's shared b' ')
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors='replace').rstrip(chr(0)).strip()
    if int(err): raise TgcError(f"cuda: nvrtc rejected the emitted source:\n{log}\n{src}")
    compiler_messages('nvrtc', log)
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = bytearray(n)
    err, = nvrtc.nvrtcGetCUBIN(prog, cubin)
    if int(err): raise TgcError(f"cuda: nvrtc made no cubin ({err})")
    return bytes(cubin)
  finally: nvrtc.nvrtcDestroyProgram(prog)


def nvcc_cubin(src: str, arch: str, fmad: bool = False) -> bytes:
  """CUDA C++ source -> a cubin for `arch` through nvcc (a subprocess); a TgcError with its messages where it refuses."""
  nvcc = nvcc_path()
  if nvcc is None: raise TgcError("cuda: neither NVRTC (pip install cuda-python) nor nvcc is available to compile kernels")
  with tempfile.TemporaryDirectory() as td:
    cu, out = os.path.join(td, 'k.cu'), os.path.join(td, 'k.cubin')
    with open(cu, 'w') as f: f.write(src)
    p = subprocess.run([nvcc, '--cubin', f'-arch={arch}', f'--fmad={str(fmad).lower()}', '-o', out, cu], capture_output=True, text=True, timeout=600)
    if p.returncode != 0: raise TgcError(f"cuda: nvcc rejected the emitted source:\n{p.stderr}\n{src}")
    compiler_messages('nvcc', (p.stdout + p.stderr).strip())
    with open(out, 'rb') as f: return f.read()


def compile_cuda(src: str, arch: str, fmad: bool = False, compiler: str | None = None) -> bytes:
  """CUDA C++ source -> a cubin for a device of `arch` (sm_90: sm_90a where the source holds wgmma), from the disk
  cache (keyed by the source, the architecture, fmad and the compiler's version) or compiled: by NVRTC, or nvcc where
  NVRTC is not importable (`compiler` picks one: 'nvrtc' or 'nvcc')."""
  from tgc import cache
  from tgc.emit.cuda import nvcc_arch
  arch = nvcc_arch(src, arch)
  compiler = compiler or ('nvrtc' if _nvrtc() is not None else 'nvcc')
  k = cache.key(src, arch, f'fmad={fmad}', compiler_id(compiler))
  cubin = cache.get('cuda', k)
  if cubin is None:
    cubin = (nvrtc_cubin if compiler == 'nvrtc' else nvcc_cubin)(src, arch, fmad)
    cache.put('cuda', k, cubin)
  return cubin


class CUDAAllocator(Allocator):
  """cuMemAlloc'd blocks (pycuda DeviceAllocations); copies and launches in the order of the device's stream."""
  def __init__(self, dev: 'CUDADevice'):
    super().__init__(dev.name)
    self.owner, self.cuda, self.stream, self.current = dev, dev.cuda, dev.stream, dev.make_current
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
  def _transfer(self, dst, src_allocator, src, nbytes):
    """GPU to GPU on this device's stream once the source's queued work is done: over NVLink or PCIe where the pair
    allows peer access (enabled once per pair), else the driver stages it."""
    if not isinstance(src_allocator, CUDAAllocator): return False
    import ctypes
    src_allocator.synchronize()
    me, peer = self.owner, src_allocator.owner
    self.current()
    lib, V = me.lib, ctypes.c_void_p
    if peer.index not in me.peers:
      me.peers.add(peer.index)
      ok, a, b = ctypes.c_int(0), ctypes.c_int(), ctypes.c_int()
      lib.cuDeviceGet(ctypes.byref(a), me.index); lib.cuDeviceGet(ctypes.byref(b), peer.index)
      if lib.cuDeviceCanAccessPeer(ctypes.byref(ok), a, b) == 0 and ok.value:
        lib.cuCtxEnablePeerAccess(V(peer.ctx.handle), ctypes.c_uint(0))  # (already enabled, or refused: the driver stages the copy)
    me.check(lib.cuMemcpyPeerAsync(ctypes.c_uint64(int(dst)), V(me.ctx.handle), ctypes.c_uint64(int(src)), V(peer.ctx.handle),
                                   ctypes.c_size_t(nbytes), V(self.stream.handle)), f"copy {peer.name} -> {me.name}")
    return True
  def _arg(self, handle): return int(handle)
  def _mem_info(self): self.current(); return self.cuda.mem_get_info()
  def synchronize(self): self.current(); self.stream.synchronize()


class CUDADevice(BaseDevice):
  """Device "CUDA:N" ("CUDA" = "CUDA:0"): pycuda on GPU N, in its primary context (the one torch and the runtime API
  use), with its own stream, allocator and modules (compiled for its own architecture)."""
  name, target = 'CUDA', 'cuda'
  def __init__(self):
    try:
      import pycuda.driver as cuda
      cuda.init()
      count = cuda.Device.count()
      if count == 0: raise TgcError("CUDA device unavailable: no GPU")
      if self.index >= count: raise TgcError(f"{self.name}: no such device: this machine has {count} GPU(s) (CUDA:0 to CUDA:{count - 1})")
      self.dev = cuda.Device(self.index)
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
    self.warpgroup_mma = (major, minor) == (9, 0)  # wgmma (tc with amount 1): Hopper's sm_90a alone
    # the shared memory a block may ask for (kernel-opt's tiles fit it: compiler.compile_module passes it on)
    self.local_memory = self.dev.get_attribute(cuda.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    self.processors = self.dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)  # (a long product's split)
    self.stream = cuda.Stream()
    self._libcuda = None
    self._hold = None
    self._modules: dict[tuple, object] = {}
    self._cubins: dict[int, bytes] = {}  # a loaded module's handle -> its cubin (save_programs)
    self.peers: set[int] = set()  # the GPUs whose memory this one's context was given access to
    super().__init__(CUDAAllocator(self))

  @property
  def lib(self):
    """libcuda through ctypes, for the calls a launch makes: pycuda's Function keeps its handle to itself, and its
    launch goes through a private method (`_launch_kernel`). (On an H100 machine's host a launch costs 5 us either
    way: the driver's own time.)"""
    if self._libcuda is None:
      import ctypes
      lib = ctypes.CDLL('libcuda.so.1')
      self._cur, self._mine = ctypes.c_void_p(), ctypes.c_void_p(self.ctx.handle)
      self._cur_ref = ctypes.byref(self._cur)
      lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
      self._libcuda = lib
    return self._libcuda

  def check(self, rc: int, what: str) -> None:
    """A driver call's result: a TgcError with the driver's words for it where it failed."""
    if rc:
      import ctypes
      msg = ctypes.c_char_p()
      self.lib.cuGetErrorString(rc, ctypes.byref(msg))
      raise TgcError(f"cuda: {what}: {(msg.value or b'error').decode()} ({rc})")

  def make_current(self):
    """Make tgc's context current on this thread where another library's is (tinygrad runs in a context of its own
    and sets it current: tgc's allocations would land there and its launches fail, 'invalid resource handle'); a
    driver call to read the current one (pycuda binds no cuCtxSetCurrent)."""
    lib = self.lib
    lib.cuCtxGetCurrent(self._cur_ref)
    if self._cur.value != self._mine.value: lib.cuCtxSetCurrent(self._mine)

  def hold_stream(self, us: int = 50) -> None:
    """Queue a kernel that only waits `us` microseconds (the device's nanosecond timer), so that what is queued behind
    it within that time starts back to back: timed launches measure the device, not the host's queueing."""
    import ctypes
    if self._hold is None:
      src = ('extern "C" __global__ void tgc_hold(unsigned long long ns) {\n'
             '  unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));\n'
             '  for (unsigned long long t = t0; t - t0 < ns;) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));\n}\n')
      ns = ctypes.c_uint64()
      self._hold = (self.function(self.module(src), 'tgc_hold'), ns, (ctypes.c_void_p * 1)(ctypes.addressof(ns)))
    fn, ns, params = self._hold
    ns.value = us * 1000
    one = ctypes.c_uint(1)
    self.check(self.lib.cuLaunchKernel(fn, one, one, one, one, one, one, ctypes.c_uint(0), ctypes.c_void_p(self.stream.handle), params, None), 'hold_stream')

  def _close(self):
    try:
      self.stream.synchronize()
      self.allocator.trim()
    except Exception: pass  # the process is ending: the driver frees what is left
    self.ctx.pop()

  def module(self, src: str | None, fmad: bool = False, cubin: bytes | None = None):
    """The loaded module (a CUmodule) of this source; fmad: mul+add may fuse into fma (kernels marked `contract`),
    else exact. Its cubin: `cubin` where the caller compiled it, else compile_cuda's (the disk cache, NVRTC, nvcc).
    src=None: the module of `cubin` (a function's disk cache entry keeps cubins, not sources)."""
    import ctypes, hashlib
    key = (src, fmad) if src is not None else ('cubin', hashlib.sha256(cubin).digest())
    with _lock:
      m = self._modules.get(key)
      if m is None:
        if cubin is None: cubin = compile_cuda(src, self.arch, fmad)
        self.make_current()
        m = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(m), cubin), 'loading a module')
        self._modules[key] = m
        self._cubins[m.value] = cubin
      return m

  def function(self, module, name: str):
    """A kernel of a loaded module (a CUfunction)."""
    import ctypes
    f = ctypes.c_void_p()
    self.check(self.lib.cuModuleGetFunction(ctypes.byref(f), module, name.encode()), f"@{name}")
    return f

  def compile(self, fn) -> 'CUDAProgram': return CUDAProgram(self, fn)

  def compile_all(self, fns, progress=None) -> list:
    """A function's kernels in a few modules (those allowed fma and the others apart, each cut into one module a
    compile worker): a compiler's start-up and the driver's load once a module, not once a kernel (PP-OCR's
    classifier, 99 kernels: 58 s on an H100 one by one), the modules compiled side by side on the workers."""
    from tgc.runtime import workers
    import time
    st, t0, cpu0 = workers.STATS, time.perf_counter(), time.process_time()
    groups: dict[bool, list] = {}
    for fn in fns: groups.setdefault(bool(fn.attrs.get('contract')), []).append(fn)
    n = workers.workers()
    parts = [(fmad, g[i::n]) for fmad, g in sorted(groups.items()) for i in range(min(n, len(g)))]
    spec = self.spec
    srcs = [spec.render(list(g)) for _, g in parts]
    t1 = time.perf_counter(); st.add('emit', t1 - t0)
    st.emit_per_kernel += [(time.process_time() - cpu0) / max(len(fns), 1)] * len(fns)
    if progress is not None: progress.phase('compile', len(fns))
    compiler_id('nvrtc' if _nvrtc() is not None else 'nvcc')  # (found before the workers fork: each has it)
    cubins = workers.run(_cubin_of, len(parts), (srcs, [f for f, _ in parts], self.arch), cost=lambda i: len(srcs[i]),
                         done=progress and (lambda i, dt: progress.step(len(parts[i][1]))))
    mod = {}
    for (fmad, g), src, cubin in zip(parts, srcs, cubins):
      m = self.module(src, fmad, cubin)
      for fn in g: mod[id(fn)] = m
    st.add('compile', time.perf_counter() - t1)
    return [CUDAProgram(self, fn, mod[id(fn)]) for fn in fns]

  saves_programs = True
  def binary_id(self) -> str: return f"cuda {self.arch} {toolkit_id()}"

  def save_programs(self, progs: list):
    """The cubins of the programs' modules, each once, and which one each kernel is in (with its dynamic shared
    memory): what load_programs takes back in another process."""
    if not all(isinstance(p, CUDAProgram) and p.module.value in self._cubins for p in progs): return None
    idx: dict[int, int] = {}
    for p in progs: idx.setdefault(p.module.value, len(idx))
    return {'kernels': [idx[p.module.value] for p in progs], 'shared': [p.shared for p in progs]}, [self._cubins[h] for h in idx]

  def build_programs(self, fns: list) -> tuple:
    """One module for the kernels allowed fma and one for the others, compiled (NVRTC, nvcc) without the driver."""
    from tgc.emit.cuda import dynamic_shared_bytes
    from tgc.runtime import workers
    import time
    spec, groups = self.spec, {}
    for i, fn in enumerate(fns): groups.setdefault(bool(fn.attrs.get('contract')), []).append(i)
    which, srcs, st, c0 = [0] * len(fns), [], workers.STATS, time.process_time()
    for fmad, idx in sorted(groups.items()):
      for i in idx: which[i] = len(srcs)
      srcs.append((spec.render([fns[i] for i in idx]), fmad))
    c1 = time.process_time()
    st.add('emit', c1 - c0); st.emit_per_kernel += [(c1 - c0) / max(len(fns), 1)] * len(fns)
    blobs = [compile_cuda(src, self.arch, fmad) for src, fmad in srcs]
    st.add('compile', time.process_time() - c1)
    return {'kernels': which, 'shared': [dynamic_shared_bytes(fn) for fn in fns]}, blobs

  def load_programs(self, fns: list, infos: list, meta: dict, blobs: list) -> list:
    which, shared = meta['kernels'], meta['shared']
    if len(which) != len(fns) or len(shared) != len(fns) or not all(isinstance(j, int) and 0 <= j < len(blobs) for j in which):
      raise TgcError("a cached function's cubins do not match its kernels")
    mods = [self.module(None, cubin=b) for b in blobs]
    return [CUDAProgram(self, fn, mods[j], info, sh) for fn, info, j, sh in zip(fns, infos, which, shared)]


def _cubin_of(i: int, srcs: list, fmads: list, arch: str) -> bytes: return compile_cuda(srcs[i], arch, fmads[i])


def param_block(n: int):
  """A kernel's parameter block for n pointer arguments: the values (8 bytes each) and cuLaunchKernel's array of
  their addresses."""
  import ctypes
  vals = (ctypes.c_uint64 * max(n, 1))()
  return vals, (ctypes.c_void_p * max(n, 1))(*[ctypes.addressof(vals) + 8 * i for i in range(max(n, 1))])


class CUDAProgram(Program):
  """A kernel of a loaded module, launched asynchronously on the stream by the driver's cuLaunchKernel: its
  arguments (all pointers) written into one parameter block made once."""
  def __init__(self, dev: CUDADevice, fn, module=None, info: tuple | None = None, shared: int | None = None):
    """info, shared: the kernel's launch_info and dynamic shared memory, where fn is not parsed yet (loaded from the
    disk cache: its module too)."""
    from tgc.emit.cuda import dynamic_shared_bytes
    super().__init__(dev, fn, info)
    if info is None and any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"CUDA: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    if module is None: module = dev.module(dev.spec.render([fn]), bool(fn.attrs.get('contract')))  # (module: compiled with others)
    self.module, self.func = module, dev.function(module, self.name)
    self.shared = dynamic_shared_bytes(self.fn) if shared is None else shared
    if self.shared:
      if self.shared > dev.local_memory: raise TgcError(f"CUDA: @{self.name}: takes {self.shared} bytes of shared memory, more than the {dev.local_memory} a block of this {dev.arch} device may have")
      dev.check(dev.lib.cuFuncSetAttribute(self.func, 8, self.shared), f"@{self.name}: dynamic shared memory")  # (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    self.grid = tuple(int(x) for x in self.global_size)
    self.block = tuple(int(x) for x in self.local_size)
    self._vals, self._params = param_block(len(self.signature))
    self._start = self._end = self._launch = None

  def launch(self, args) -> None:
    if self._launch is None: self._launch = self.launcher()
    self._launch(list(args))

  def launcher(self):
    # cuLaunchKernel's arguments as ctypes objects made once; a call writes the buffers' addresses into the block
    import ctypes
    dev = self.device
    launch, current, U = dev.lib.cuLaunchKernel, dev.make_current, ctypes.c_uint
    func, stream, params, vals, none = self.func, ctypes.c_void_p(dev.stream.handle), self._params, self._vals, None
    dims = [U(x) for x in (*self.grid, *(1,) * (3 - len(self.grid)), *self.block, *(1,) * (3 - len(self.block)))]
    gx, gy, gz, bx, by, bz = dims
    shared = U(self.shared)
    n = len(self.signature)
    def f(args):
      vals[:n] = args
      if launch(func, gx, gy, gz, bx, by, bz, shared, stream, params, none):
        # (another library's context current: the allocator's calls make ours current again, a launch right after
        # that library's call finds out here, once)
        current()
        dev.check(launch(func, gx, gy, gz, bx, by, bz, shared, stream, params, none), f"@{self.name}")
    return f

  def timed_launch(self, args) -> float:
    """The launch's device time from CUDA events recorded around it on the stream. The stream is kept busy while the
    launch is queued (CUDADevice.hold_stream): on an idle GPU the start event would fire at once and the interval
    would count the host's time to queue the launch (20 us and more for a 3 us kernel)."""
    cuda, stream = self.device.cuda, self.device.stream
    if self._start is None: self._start, self._end = cuda.Event(), cuda.Event()
    if self._launch is None: self._launch = self.launcher()
    self.device.hold_stream()
    self._start.record(stream); self._launch(list(args)); self._end.record(stream)
    self._end.synchronize()
    return self._start.time_till(self._end) * 1e-3
