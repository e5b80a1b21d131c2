"""One process per device: `tgc.distributed.init()` as torchrun (or mpirun, or a script) starts the processes.

Each process reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (torchrun's variables; Open MPI's
OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK stand in for the first three), takes the device `CUDA:<LOCAL_RANK>`
(backend "nccl") or the host (backend "host"), and joins the group:

- rank 0 serves a small key-value store over TCP at MASTER_ADDR:MASTER_PORT (`TCPStore`: set, get that waits, add,
  wait-until; our own, a few dozen lines over the socket module); every rank is its client;
- backend "nccl": rank 0 makes the NCCL id, the others read it from the store, and every rank makes its
  communicator (ncclCommInitRank) over its one GPU (tgc.runtime.nccl; NVLink multicast off);
- backend "host": the collectives go through the store itself (each rank's values are posted and read by the
  others): slow, but it runs the same programs on a machine without GPUs (the tests use it).

`all_reduce(t)` (in place, as torch.distributed's; `all_reduce_coalesced(ts)` for many at once, one NCCL group),
`all_gather(t)` and `reduce_scatter(t)` (new tensors along axis 0), `barrier()`, `destroy()`. Data parallelism across processes: each rank computes the gradients of its part of
the batch and all-reduces them (op="avg") before the optimizer step; inside a `Tensor.jit` the collectives are
recorded and replayed with the rest of the step. Every wait has a timeout (`timeout=`, default
$TGC_DIST_TIMEOUT or 300 s): a missing rank is a TgcError naming it, never a hang.
"""
from __future__ import annotations
import base64, json, os, socket, socketserver, threading, time
from tgc.errors import TgcError


class DistributedError(TgcError, RuntimeError):
  """A process group that cannot form or a collective that failed: names the rank, the address, what it waited for."""


# ---------------------------------------------------------------- the store

class _Handler(socketserver.StreamRequestHandler):
  def handle(self):
    srv = self.server
    for line in self.rfile:
      req = json.loads(line)
      op, k = req['op'], req.get('k')
      with srv.cond:
        if op == 'set': srv.data[k] = req['v']; srv.cond.notify_all(); rep = {'ok': True}
        elif op == 'add':
          srv.data[k] = str(int(srv.data.get(k, '0')) + req['n']); srv.cond.notify_all(); rep = {'v': int(srv.data[k])}
        elif op in ('get', 'wait'):
          until = time.monotonic() + req['timeout']
          ready = (lambda: k in srv.data) if op == 'get' else (lambda: int(srv.data.get(k, '0')) >= req['n'])
          while not ready() and time.monotonic() < until: srv.cond.wait(min(1.0, max(0.0, until - time.monotonic())))
          rep = {'v': srv.data[k]} if op == 'get' and ready() else {'ok': ready()}
        elif op == 'delete': srv.data.pop(k, None); rep = {'ok': True}
        else: rep = {'error': f"unknown store request '{op}'"}
      self.wfile.write((json.dumps(rep) + '\n').encode()); self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
  daemon_threads = True
  allow_reuse_address = True


class TCPStore:
  """A key-value store shared by the ranks: rank 0 serves it (`is_server`), every rank is a client. Values are
  bytes; `get` waits for a key, `add` counts, `wait(key, n)` waits for a count; each wait ends after `timeout`
  seconds with a DistributedError."""
  def __init__(self, host: str, port: int, is_server: bool, timeout: float = 300.0):
    self.host, self.port, self.timeout, self.server = host, int(port), timeout, None
    if is_server:
      try: self.server = _Server(('', self.port), _Handler)  # (every interface, as torch's store: MASTER_ADDR names one of them)
      except OSError as e: raise DistributedError(f"rank 0: cannot serve the store at {host}:{port}: {e}") from None
      self.server.data, self.server.cond = {}, threading.Condition()
      threading.Thread(target=self.server.serve_forever, daemon=True, name='tgc-store').start()
    until = time.monotonic() + timeout
    while True:
      try: self.sock = socket.create_connection((host, self.port), timeout=5); break
      except OSError as e:
        if time.monotonic() > until: raise DistributedError(f"cannot reach the store at {host}:{port} (rank 0's MASTER_ADDR:MASTER_PORT) within {timeout:g} s: {e}") from None
        time.sleep(0.1)
    self.sock.settimeout(None)
    self.file = self.sock.makefile('rwb')
    self.lock = threading.Lock()

  def _ask(self, req: dict) -> dict:
    with self.lock:
      try:
        self.file.write((json.dumps(req) + '\n').encode()); self.file.flush()
        line = self.file.readline()
      except OSError as e: raise DistributedError(f"the store at {self.host}:{self.port} went away: {e}") from None
    if not line: raise DistributedError(f"the store at {self.host}:{self.port} closed the connection (rank 0 ended?)")
    rep = json.loads(line)
    if 'error' in rep: raise DistributedError(rep['error'])
    return rep

  def set(self, key: str, value: bytes) -> None: self._ask({'op': 'set', 'k': key, 'v': base64.b64encode(value).decode()})
  def add(self, key: str, n: int = 1) -> int: return self._ask({'op': 'add', 'k': key, 'n': n})['v']
  def delete(self, key: str) -> None: self._ask({'op': 'delete', 'k': key})
  def get(self, key: str, timeout: float | None = None, who: str = '') -> bytes:
    t = self.timeout if timeout is None else timeout
    rep = self._ask({'op': 'get', 'k': key, 'timeout': t})
    if 'v' not in rep: raise DistributedError(f"timed out after {t:g} s waiting for '{key}'{' from ' + who if who else ''} in the store at {self.host}:{self.port}")
    return base64.b64decode(rep['v'])
  def wait(self, key: str, n: int, timeout: float | None = None, what: str = '') -> None:
    t = self.timeout if timeout is None else timeout
    if not self._ask({'op': 'wait', 'k': key, 'n': n, 'timeout': t})['ok']:
      raise DistributedError(f"timed out after {t:g} s waiting for {what or key} at {self.host}:{self.port}")
  def close(self) -> None:
    try: self.file.close(); self.sock.close()
    except OSError: pass
    if self.server is not None: self.server.shutdown(); self.server.server_close(); self.server = None


# ---------------------------------------------------------------- collectives through the store

class StoreCollectives:
  """Backend "host": each rank posts its buffer to the store and reduces (or joins) all ranks' in rank order."""
  def __init__(self, group: 'ProcessGroup'):
    self.group, self.devices, self.seq = group, (group.device,), 0
  def check(self) -> None: pass
  def run(self, calls):
    import numpy as np
    from tgc.ir import dtypes as D
    from tgc.runtime.buffer import Buffer
    from tgc.runtime.collectives import check_call, _NP_REDUCE
    g, out = self.group, []
    for kind, op, bufs in calls:
      check_call(kind, op, bufs, 1, g.world_size)
      self.seq += 1
      b = bufs[0]; dt = b.dtype
      g.store.set(f"coll/{self.seq}/{g.rank}", b.numpy().tobytes())
      vals = [np.frombuffer(g.store.get(f"coll/{self.seq}/{r}", who=f"rank {r} ({kind} #{self.seq})"), dt.np) for r in range(g.world_size)]
      if g.store.add(f"coll/{self.seq}/read") == g.world_size:  # the last reader cleans up
        for r in range(g.world_size): g.store.delete(f"coll/{self.seq}/{r}")
      if kind == 'allgather': res = np.concatenate(vals)
      else:
        xs = [D.from_storage(v, dt) for v in vals] if dt.fmt else [v.copy() for v in vals]
        acc = xs[0]
        for x in xs[1:]: _NP_REDUCE[op](acc, x, out=acc)
        res = (D.encode(acc.astype(np.float32), dt.fmt) if dt.fmt else acc).astype(dt.np, copy=False)
        if kind == 'reduce_scatter': res = np.split(res, g.world_size)[g.rank]
      out.append([Buffer.from_numpy(g.device, np.ascontiguousarray(res), dt)])
    return out


# ---------------------------------------------------------------- the group

_OPS = {'sum': 'add', 'add': 'add', 'avg': 'add', 'mean': 'add', 'max': 'max', 'min': 'min', 'prod': 'mul', 'mul': 'mul', 'product': 'mul'}


class ProcessGroup:
  """This process's place in the group: `rank`, `world_size`, `local_rank`, `device`, and the collectives."""
  def __init__(self, rank: int, world_size: int, local_rank: int, device: str, store: TCPStore, backend: str):
    self.rank, self.world_size, self.local_rank, self.device, self.store, self.backend = rank, world_size, local_rank, device, store, backend
    self.barriers = 0
    if backend == 'nccl':
      from tgc.runtime import nccl, get_device
      get_device(device).make_current()  # (NCCL makes its communicator on the current device)
      if rank == 0: store.set('nccl/id', nccl.unique_id())
      uid = nccl.UniqueId.from_buffer_copy(store.get('nccl/id', who='rank 0 (the NCCL id)'))
      self.barrier('the ranks to reach ncclCommInitRank')  # (every rank alive before NCCL waits on them without a timeout)
      import ctypes
      get_device(device).make_current()
      comm = ctypes.c_void_p()
      nccl.check(nccl.lib().ncclCommInitRank(ctypes.byref(comm), world_size, uid, rank), f"ncclCommInitRank (rank {rank} of {world_size} on {device})")
      self.engine = nccl.NCCLCollectives((device,), [comm.value], nranks=world_size, timeout=store.timeout)
    elif backend == 'host': self.engine = StoreCollectives(self)
    else: raise DistributedError(f"unknown backend '{backend}' (expected nccl or host)")

  def barrier(self, what: str = 'a barrier') -> None:
    self.barriers += 1
    self.store.add(f"barrier/{self.barriers}")
    self.store.wait(f"barrier/{self.barriers}", self.world_size, what=f"{what}: {self.world_size} ranks (this is rank {self.rank})")

  def _collectives(self, kind: str, op: str | None, ts: list, shapes: list) -> list:
    """One batch (one NCCL group) of a collective over each tensor; new tensors of the results."""
    from tgc import autograd
    from tgc.tensor import Tensor, _Node
    for t in ts:
      if t.device != self.device: raise DistributedError(f"{kind}: a tensor of shape {t.shape} is on {t.device}, this rank's device is {self.device}")
    if ts: Tensor.realize(*ts)
    srcs = [t.node for t in ts]
    bufs = self.engine.run([(kind, op, [n.buf]) for n in srcs])
    outs = [_Node('BUFFER', (), None, shape, n.dtype, self.device, b[0]) for n, shape, b in zip(srcs, shapes, bufs)]
    autograd.record(('collectives', self.engine, [(kind, op, [n], [o]) for n, o in zip(srcs, outs)]))
    return [Tensor(o) for o in outs]

  def _collective(self, kind: str, op: str | None, t, shape): return self._collectives(kind, op, [t], [shape])[0]

  def all_reduce_coalesced(self, ts: list, op: str = 'sum') -> list:
    """all_reduce of every tensor in `ts` at once: one realize, one NCCL group (a data-parallel step's gradients).
    Each tensor takes its result in place; returns ts."""
    if op.lower() not in _OPS: raise DistributedError(f"all_reduce: unknown op '{op}' (expected {', '.join(_OPS)})")
    for t, r in zip(ts, self._collectives('allreduce', _OPS[op.lower()], list(ts), [t.shape for t in ts])):
      t.node = (r / self.world_size).node if op.lower() in ('avg', 'mean') else r.node
    return ts

  def all_reduce(self, t, op: str = 'sum'):
    """t becomes the reduction of every rank's t (in place, as torch.distributed.all_reduce); op sum, avg, max,
    min or prod. Returns t."""
    if op.lower() not in _OPS: raise DistributedError(f"all_reduce: unknown op '{op}' (expected {', '.join(_OPS)})")
    r = self._collective('allreduce', _OPS[op.lower()], t, t.shape)
    if op.lower() in ('avg', 'mean'): r = r / self.world_size
    t.node = r.node
    return t

  def all_gather(self, t):
    """Every rank's t joined along axis 0, in rank order (a new tensor)."""
    if not t.shape: raise DistributedError("all_gather of a 0-d tensor: it joins along axis 0")
    return self._collective('allgather', None, t, (t.shape[0] * self.world_size, *t.shape[1:]))

  def reduce_scatter(self, t, op: str = 'sum'):
    """This rank's slice (axis 0, one of world_size) of the reduction of every rank's t (a new tensor)."""
    if not t.shape or t.shape[0] % self.world_size:
      raise DistributedError(f"reduce_scatter: axis 0 of shape {t.shape} does not split into {self.world_size} ranks")
    r = self._collective('reduce_scatter', _OPS[op.lower()], t, (t.shape[0] // self.world_size, *t.shape[1:]))
    return r / self.world_size if op.lower() in ('avg', 'mean') else r

  def destroy(self) -> None:
    try: self.barrier('the others to finish')
    except TgcError: pass
    if hasattr(self.engine, 'close'): self.engine.close()
    self.store.close()


_group: ProcessGroup | None = None


def _env_int(*names, default=None):
  for n in names:
    v = os.environ.get(n)
    if v is not None:
      try: return int(v)
      except ValueError: raise DistributedError(f"${n} must be an integer, got '{v}'") from None
  return default


def init(backend: str | None = None, rank: int | None = None, world_size: int | None = None, master_addr: str | None = None,
         master_port: int | None = None, device: str | None = None, timeout: float | None = None, set_default: bool = True) -> ProcessGroup:
  """Join the process group (arguments override the environment); the default device becomes this rank's (unless
  set_default=False). Backend: "nccl" where CUDA is the default device kind or a GPU is asked for, else "host"."""
  global _group
  if _group is not None: raise DistributedError("tgc.distributed.init() was already called in this process (destroy() first)")
  rank = _env_int('RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', default=0) if rank is None else rank
  world_size = _env_int('WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', default=1) if world_size is None else world_size
  local_rank = _env_int('LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_RANK', default=rank)
  if not 0 <= rank < world_size: raise DistributedError(f"rank {rank} is out of range for a world of {world_size}")
  addr = master_addr or os.environ.get('MASTER_ADDR', '127.0.0.1')
  port = master_port or _env_int('MASTER_PORT', default=29500)
  timeout = timeout if timeout is not None else float(os.environ.get('TGC_DIST_TIMEOUT', '300'))
  from tgc.runtime import Device, canonical_name
  if backend is None: backend = 'nccl' if (device or Device.DEFAULT).upper().startswith('CUDA') else 'host'
  if device is None: device = f"CUDA:{local_rank}" if backend == 'nccl' else 'CPU'
  device = canonical_name(device)
  store = TCPStore(addr, port, rank == 0, timeout)
  try: _group = ProcessGroup(rank, world_size, local_rank, device, store, backend)
  except BaseException: store.close(); raise
  if set_default: Device.DEFAULT = device
  return _group


def group() -> ProcessGroup:
  if _group is None: raise DistributedError("no process group: call tgc.distributed.init() first")
  return _group

def is_initialized() -> bool: return _group is not None
def get_rank() -> int: return group().rank
def get_world_size() -> int: return group().world_size
def all_reduce(t, op: str = 'sum'): return group().all_reduce(t, op)
def all_reduce_coalesced(ts, op: str = 'sum'): return group().all_reduce_coalesced(ts, op)
def all_gather(t): return group().all_gather(t)
def reduce_scatter(t, op: str = 'sum'): return group().reduce_scatter(t, op)
def barrier() -> None: group().barrier()

def destroy() -> None:
  global _group
  if _group is not None: _group.destroy(); _group = None


__all__ = ['init', 'destroy', 'group', 'is_initialized', 'get_rank', 'get_world_size', 'all_reduce', 'all_reduce_coalesced', 'all_gather', 'reduce_scatter',
           'barrier', 'ProcessGroup', 'TCPStore', 'DistributedError']
