"""The C device: tgc.emit.c source, built by the system C compiler into a shared library, called through ctypes.

Libraries are cached by source text, in process and on disk (tgc.cache: keyed by the source, the compiler, its
version and flags, and the host CPU), so an identical kernel is compiled once. The kernel loops over its own grid: one call runs
gidx0 in [start, end) (all of it by default).
"""
from __future__ import annotations
import ctypes, os, re, subprocess, tempfile, threading
from tgc.errors import TgcError
from tgc.runtime.device import BaseDevice, HostDevice
from tgc.runtime.cpu import HostKernelProgram, HostPointerAllocator

CC = os.environ.get('CC', 'cc')
# C99; -fwrapv: signed overflow wraps (tgc's semantics); -ffp-contract=off: a*b+c is never fused into an fma
CFLAGS = ['-std=c99', '-O2', '-shared', '-fPIC', '-march=native', '-fwrapv', '-fno-strict-aliasing', '-ffp-contract=off', '-fno-math-errno']


_fp16_checked = False

def _no_avx512fp16() -> None:
  """-march=native on a CPU with AVX512-FP16 lets gcc emit masked `vmovsh` for _Float16 selects, which the assembler
  of the same toolchain generation refuses ("unsupported masking for vmovsh"): where the compiler enables it for this
  CPU, f16 kernels compile without it (their arithmetic is float's, converted, as on every other CPU). Asked once."""
  global _fp16_checked
  if _fp16_checked: return
  _fp16_checked = True
  try: out = subprocess.run([CC, '-march=native', '-Q', '--help=target'], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError): return
  if re.search(r'-mavx512fp16\s+\[enabled\]', out): CFLAGS.append('-mno-avx512fp16')
_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}


_host_id: str | None = None

def host_id() -> str:
  """What -march=native builds for: the machine and its CPU's model and flags. Part of the disk cache's key, so that
  a cache directory shared between machines (a networked home) never loads a library built for another CPU."""
  global _host_id
  if _host_id is None:
    import platform
    cpu = ''
    try:
      with open('/proc/cpuinfo') as f: cpu = ''.join(l for l in f.read().split('\n\n')[0].split('\n') if l.startswith(('model name', 'flags', 'Features', 'CPU part')))
    except OSError: pass
    _host_id = f"{platform.machine()}|{platform.processor()}|{cpu}"
  return _host_id


_cc_version: str | None = None

def cc_version() -> str:
  """The C compiler's own account of its version (`cc --version`'s first line): part of the disk cache's key."""
  global _cc_version
  if _cc_version is None:
    try: _cc_version = subprocess.run([CC, '--version'], capture_output=True, text=True, timeout=30).stdout.split('\n')[0]
    except (OSError, subprocess.SubprocessError): _cc_version = '?'
  return _cc_version


def build_library(src: str) -> bytes:
  """C source -> the bytes of a shared library built by the system C compiler (a TgcError where it refuses)."""
  with tempfile.TemporaryDirectory() as td:
    cfile, lib = os.path.join(td, 'k.c'), os.path.join(td, 'k.so')
    with open(cfile, 'w') as f: f.write(src)
    _no_avx512fp16()
    try: p = subprocess.run([CC, *CFLAGS, cfile, '-o', lib, '-lm'], capture_output=True, text=True, timeout=120)
    except FileNotFoundError: raise TgcError(f"C device unavailable: no C compiler '{CC}'") from None
    if p.returncode != 0: raise TgcError(f"c: the C compiler rejected the emitted source:\n{p.stderr}\n{src}")
    with open(lib, 'rb') as f: return f.read()


def load_library(data: bytes) -> ctypes.CDLL:
  """A shared library's bytes, loaded (from a file of this process's own, removed once loaded)."""
  fd, path = tempfile.mkstemp(suffix='.so', prefix='tgc-c-')
  try:
    with os.fdopen(fd, 'wb') as f: f.write(data)
    return ctypes.CDLL(path)
  finally: os.unlink(path)


def compile_c(src: str) -> ctypes.CDLL:
  """C source -> a loaded shared library: cached by source in the process, and on disk (tgc.cache, kind `c`, keyed
  by the source, the compiler, its version and flags, and the host CPU -march=native builds for)."""
  from tgc import cache
  with _lock:
    lib = _libs.get(src)
    if lib is not None: return lib
    _no_avx512fp16()
    k = cache.key(src, CC, cc_version(), ' '.join(CFLAGS), host_id())
    data = cache.get('c', k)
    if data is not None:
      try: lib = load_library(data)
      except OSError: data = None  # (whole, yet not a library this machine loads: built anew below)
    if data is None:
      data = build_library(src)
      cache.put('c', k, data)
      lib = load_library(data)
    _libs[src] = lib
    return lib


class CProgram(HostKernelProgram):
  """One kernel built by the system C compiler; launched as the CPU's are (threads over gidx0)."""
  def __init__(self, device, fn):
    super().__init__(device, fn)
    if any(op.name == 'uop.define_var' for op in fn.body.ops): raise TgcError(f"C: @{self.name}: kernels with uop.define_var take scalar arguments this runtime does not pass")
    self.src = device.spec.render([fn])
    f = getattr(compile_c(self.src), self.name)
    f.argtypes = [ctypes.c_void_p] * len(self.signature) + [ctypes.c_int, ctypes.c_int]
    f.restype = None
    self._cfn = f


class CDevice(HostDevice):
  """Device "C": the c target built by the system C compiler."""
  name, target = 'C', 'c'
  def __init__(self): BaseDevice.__init__(self, HostPointerAllocator(self.name))
  def compile(self, fn) -> CProgram: return CProgram(self, fn)
