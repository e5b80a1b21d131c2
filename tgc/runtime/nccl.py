"""NCCL, the collectives of the CUDA devices, through ctypes over libnccl.so.2.

ctypes rather than a binding package: NCCL's C API is a dozen stable functions (ids, communicators, the
collectives, groups, errors), the library ships as a wheel (`nvidia-nccl-cu13`, the one torch installs) or with the
system, and nothing is compiled; a binding (nccl4py) would add a dependency for those dozen calls.

- The library: $TGC_NCCL_LIB, else `nvidia/nccl/lib/libnccl.so.2` of the installed wheel (found through the
  `nvidia` package's path), else the system's `libnccl.so.2`.
- NVLink multicast (NVLS) stays off: `NCCL_NVLS_ENABLE=0` is set in this process's environment before the library
  loads, unless the user set it (multicast objects can take a host's shared GPUs out of service); tgc never
  calls cuMulticastCreate.
- One process driving all its GPUs: `NCCLCollectives(devices)` makes one communicator a GPU (ncclCommInitAll) and
  runs a batch of calls as one group (ncclGroupStart/End), each on its device's stream, so they queue behind the
  kernels that make their inputs and before those that read their results. One process per GPU (tgc.distributed):
  the same engine over the one communicator of this rank (ncclCommInitRank with an id the ranks exchanged).
- Nothing hangs: a watchdog thread follows every batch by an event per device; a batch not done after the
  timeout ($TGC_NCCL_TIMEOUT seconds, 300), or an asynchronous NCCL error, aborts the communicators (which ends the
  kernels waiting on them) and every later use raises a TgcError naming the devices and the batch.
"""
from __future__ import annotations
import ctypes, glob, os, threading, time, weakref
from tgc.errors import TgcError
from tgc.runtime.collectives import Collectives, check_call

_lib = None

class NCCLError(TgcError, RuntimeError):
  """An NCCL call failed or timed out."""


class UniqueId(ctypes.Structure):
  _fields_ = [('internal', ctypes.c_char * 128)]


def library_path() -> str:
  """Where libnccl.so.2 is: $TGC_NCCL_LIB, the nvidia-nccl wheel's, or the system's (by its soname)."""
  if os.environ.get('TGC_NCCL_LIB'): return os.environ['TGC_NCCL_LIB']
  try:
    import nvidia  # (a namespace package: the CUDA wheels put their libraries under nvidia/<name>/lib)
    for root in nvidia.__path__:
      hits = sorted(glob.glob(os.path.join(root, 'nccl', 'lib', 'libnccl.so*')))
      if hits: return hits[0]
  except ImportError: pass
  return 'libnccl.so.2'


def lib():
  """libnccl, loaded once, with NVLink multicast off unless the environment says otherwise."""
  global _lib
  if _lib is None:
    os.environ.setdefault('NCCL_NVLS_ENABLE', '0')  # before NCCL reads its environment (when it loads and inits)
    path = library_path()
    try: L = ctypes.CDLL(path)
    except OSError as e:
      raise NCCLError(f"NCCL unavailable: cannot load {path} ({e}); pip install nvidia-nccl-cu13, or set TGC_NCCL_LIB") from None
    P, I, S, V = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    sigs = {
      'ncclGetVersion': [ctypes.POINTER(I)], 'ncclGetUniqueId': [ctypes.POINTER(UniqueId)],
      'ncclCommInitRank': [ctypes.POINTER(P), I, UniqueId, I], 'ncclCommInitAll': [ctypes.POINTER(P), I, ctypes.POINTER(I)],
      'ncclCommDestroy': [P], 'ncclCommAbort': [P], 'ncclCommGetAsyncError': [P, ctypes.POINTER(I)],
      'ncclAllReduce': [V, V, S, I, I, P, P], 'ncclAllGather': [V, V, S, I, P, P], 'ncclReduceScatter': [V, V, S, I, I, P, P],
      'ncclBroadcast': [V, V, S, I, I, P, P], 'ncclGroupStart': [], 'ncclGroupEnd': [],
    }
    for name, args in sigs.items():
      f = getattr(L, name); f.argtypes, f.restype = args, I
    L.ncclGetErrorString.argtypes, L.ncclGetErrorString.restype = [I], ctypes.c_char_p
    L.ncclGetLastError.argtypes, L.ncclGetLastError.restype = [P], ctypes.c_char_p
    _lib = L
  return _lib


def version() -> tuple[int, int, int]:
  v = ctypes.c_int()
  check(lib().ncclGetVersion(ctypes.byref(v)), 'ncclGetVersion')
  n = v.value
  return (n // 10000, n // 100 % 100, n % 100) if n >= 10000 else (n // 1000, n // 100 % 10, n % 100)


def check(rc: int, what: str, comm=None) -> None:
  if rc:
    L = lib()
    detail = (L.ncclGetLastError(comm) or b'').decode(errors='replace')
    raise NCCLError(f"nccl: {what}: {L.ncclGetErrorString(rc).decode()} ({rc}){': ' + detail if detail else ''}")


def unique_id() -> bytes:
  """A new communicator id (rank 0 makes it, the others receive it)."""
  uid = UniqueId()
  check(lib().ncclGetUniqueId(ctypes.byref(uid)), 'ncclGetUniqueId')
  return ctypes.string_at(ctypes.addressof(uid), 128)  # (all 128 bytes: .internal would stop at the first zero)


# ncclDataType_t and ncclRedOp_t
_DTYPES = {'i8': 0, 'u8': 1, 'i1': 1, 'i32': 2, 'u32': 3, 'i64': 4, 'u64': 5, 'f16': 6, 'f32': 7, 'f64': 8, 'bf16': 9}
_OPS = {'add': 0, 'mul': 1, 'max': 2, 'min': 3}


def _dtype(dt, kind: str) -> tuple[int, int]:
  """(NCCL's type, elements per tgc element): other types are gathered as bytes; a reduction needs NCCL's type."""
  t = _DTYPES.get(dt.name)
  if t is not None: return t, 1
  if kind == 'allgather': return 1, dt.itemsize
  raise NCCLError(f"{kind}: NCCL cannot reduce {dt.name} (it reduces {', '.join(_DTYPES)})")


class NCCLCollectives(Collectives):
  """The collectives of CUDA devices through NCCL: `devices` are this process's GPUs (all ranks, when one process
  drives them; its one GPU, in a process of a group), `comms` their communicators (made here with ncclCommInitAll
  when not given), `nranks` the ranks of the whole group."""
  def __init__(self, devices, comms=None, nranks: int | None = None, timeout: float | None = None):
    from tgc.runtime import get_device
    super().__init__(devices)
    self.devs = [get_device(d) for d in self.devices]
    self.nranks = nranks or len(self.devices)
    self.timeout = timeout if timeout is not None else float(os.environ.get('TGC_NCCL_TIMEOUT', '300'))
    L = lib()
    if comms is None:
      n = len(self.devs)
      arr, ids = (ctypes.c_void_p * n)(), (ctypes.c_int * n)(*[d.index for d in self.devs])
      check(L.ncclCommInitAll(arr, n, ids), f"ncclCommInitAll on {', '.join(self.devices)}")
      comms = list(arr)
    self.comms = [ctypes.c_void_p(c) for c in comms]
    self.broken: str | None = None
    self.batches = 0
    self._pending: list = []  # (time queued, batch number, [(device, event)]) of batches not seen done
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._watchdog = threading.Thread(target=_watch, args=(weakref.ref(self), self._stop), daemon=True, name='tgc-nccl-watchdog')
    self._watchdog.start()
    import atexit
    atexit.register(self.close)

  def check(self) -> None:
    if self.broken: raise NCCLError(self.broken)

  def run(self, calls):
    from tgc.runtime.buffer import Buffer
    self.check()
    L, out, n = lib(), [], self.nranks
    for kind, op, bufs in calls: check_call(kind, op, bufs, len(self.devices), n)
    # the results first (allocation may synchronize a device: never inside a group)
    for kind, op, bufs in calls:
      size = bufs[0].size * n if kind == 'allgather' else bufs[0].size // n if kind == 'reduce_scatter' else bufs[0].size
      out.append([Buffer(d, size, bufs[0].dtype) for d in self.devs])
    check(L.ncclGroupStart(), 'ncclGroupStart')
    try:
      for (kind, op, bufs), res in zip(calls, out):
        t, per = _dtype(bufs[0].dtype, kind)
        for dev, comm, b, r in zip(self.devs, self.comms, bufs, res):
          stream = ctypes.c_void_p(dev.stream.handle)
          if kind == 'allreduce': rc = L.ncclAllReduce(b.arg, r.arg, b.size * per, t, _OPS[op], comm, stream)
          elif kind == 'allgather': rc = L.ncclAllGather(b.arg, r.arg, b.size * per, t, comm, stream)
          else: rc = L.ncclReduceScatter(b.arg, r.arg, r.size * per, t, _OPS[op], comm, stream)
          check(rc, f"{kind} of {b.size}x{b.dtype.name} on {dev.name}", comm)
    finally:
      rc = L.ncclGroupEnd()
    check(rc, f"a group of {len(calls)} collectives on {', '.join(self.devices)}")
    self._follow([(kind, bufs[0].size, bufs[0].dtype.name) for kind, _, bufs in calls])
    return out

  def _follow(self, what) -> None:
    """Hand the batch to the watchdog: an event recorded after it on each device's stream."""
    evs = []
    for dev in self.devs:
      ev = ctypes.c_void_p()
      dev.make_current()
      dev.check(dev.lib.cuEventCreate(ctypes.byref(ev), 2), 'cuEventCreate')  # (CU_EVENT_DISABLE_TIMING)
      dev.check(dev.lib.cuEventRecord(ev, ctypes.c_void_p(dev.stream.handle)), 'cuEventRecord')
      evs.append((dev, ev))
    with self._lock:
      self.batches += 1
      self._pending.append((time.monotonic(), self.batches, what, evs))

  def _poll(self) -> None:
    """(the watchdog) Drop the batches done; abort on one past the timeout or on an asynchronous error."""
    with self._lock:
      while self._pending:
        t0, num, what, evs = self._pending[0]
        done = True
        for dev, ev in evs:
          dev.lib.cuCtxSetCurrent(ctypes.c_void_p(dev.ctx.handle))
          rc = dev.lib.cuEventQuery(ev)
          if rc == 600: done = False; break  # (CUDA_ERROR_NOT_READY)
        err = self._async_error()
        if err: self._abort(f"nccl: an asynchronous error on {', '.join(self.devices)} ({err}) during batch {num} {what}"); return
        if not done:
          if time.monotonic() - t0 > self.timeout:
            self._abort(f"nccl: collectives on {', '.join(self.devices)} did not finish within {self.timeout:g} s (batch {num}: {what}); "
                        "a rank that never joined, or a device that hung; the communicators were aborted")
          return
        for dev, ev in evs: dev.lib.cuEventDestroy_v2(ev)
        self._pending.pop(0)

  def _async_error(self) -> str | None:
    L, r = lib(), ctypes.c_int()
    for c in self.comms:
      if L.ncclCommGetAsyncError(c, ctypes.byref(r)) == 0 and r.value not in (0, 7):  # (7: ncclInProgress)
        return L.ncclGetErrorString(r.value).decode()
    return None

  def _abort(self, msg: str) -> None:
    self.broken = msg
    self._pending.clear()
    for c in self.comms: lib().ncclCommAbort(c)
    self.comms = []

  def close(self) -> None:
    """Destroy the communicators (after the work queued on them) and stop the watchdog."""
    self._stop.set()
    if not self.comms: return
    try:
      for d in self.devs: d.synchronize()
    except Exception: pass
    for c in self.comms: lib().ncclCommDestroy(c)
    self.comms = []
    self.broken = self.broken or f"nccl: the communicators of {', '.join(self.devices)} were closed"


def _watch(ref, stop: threading.Event) -> None:
  while not stop.wait(0.05):
    eng = ref()
    if eng is None or eng.broken: return
    try: eng._poll()
    except Exception as e: eng.broken = f"nccl: the watchdog failed: {e}"; return
    del eng


__all__ = ['NCCLCollectives', 'NCCLError', 'lib', 'library_path', 'version', 'unique_id']
