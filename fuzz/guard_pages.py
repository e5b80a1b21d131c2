"""Guard pages around every host buffer: a kernel reading or writing outside its buffers on the CPU or C device dies at
once (SIGSEGV) instead of corrupting the heap. A pytest plugin, and what every fuzzer's child process installs:

  TGC_GUARD=after  python -m pytest -p fuzz.guard_pages tests/test_tensor_movement.py   # a buffer ends at a guard page
  TGC_GUARD=before python -m pytest -p fuzz.guard_pages tests/test_tensor_movement.py   # a buffer starts after one

Each block of the host allocator gets its own mapping with an inaccessible page on the chosen side, the block flush
against it: one byte past the end (or before the start) faults. A numpy array a host device would use in place
(Buffer.wrap: a compiled function's arguments) is copied into such a block first. Slower than malloc; for checking.
The fuzzers' children run under it (`after` unless TGC_GUARD says `before`, or `off`).
"""
from __future__ import annotations
import ctypes, mmap, os
import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded(nbytes: int, side: str) -> np.ndarray:
  """A writable uint8 array of nbytes whose end (side='after') or start (side='before') touches a PROT_NONE page."""
  body = -(-max(nbytes, 1) // PAGE) * PAGE
  m = mmap.mmap(-1, body + PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
  whole = np.frombuffer(m, np.uint8)
  base = whole.ctypes.data
  guard = base + body if side == 'after' else base
  if _libc.mprotect(guard, PAGE, 0) != 0: raise OSError(ctypes.get_errno(), 'mprotect')
  start = body - nbytes if side == 'after' else PAGE
  return whole[start:start + nbytes]  # a view: it keeps the mapping alive


def install(side: str) -> None:
  """Every host block from now on between guard pages (side 'after' or 'before'); wrapped arrays copied into one."""
  from tgc.runtime.buffer import HostAllocator, Buffer
  if side not in ('after', 'before'): raise ValueError(f"TGC_GUARD must be after or before, got {side!r}")
  HostAllocator._alloc = lambda self, nbytes: guarded(nbytes, side)
  wrap = Buffer.wrap
  def wrap_guarded(device, arr, dtype=None):
    g = guarded(arr.nbytes, side)
    if arr.nbytes: g[:] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return wrap(device, g.view(arr.dtype).reshape(arr.shape), dtype)
  Buffer.wrap = staticmethod(wrap_guarded)


def pytest_configure(config):
  install(os.environ.get('TGC_GUARD', 'after'))
