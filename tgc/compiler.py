"""From IR text (or a Module) to a callable: the pipeline the tools and the Tensor API share.

compile(text, device) runs `lower-to-uop` with the device's target, compiles every uop.func on the
device, and returns a CompiledFunction that runs the host schedule (alloc, launch, host reshapes and
constants) on the device's Buffers. DEBUG levels print each stage, as tinygrad's do; DEBUG=2 prints each
launch's device time (CUDA events on CUDA; elsewhere the host's clock around a launch and a synchronize).
"""
from __future__ import annotations
import copy, importlib, math, operator, os, sys, threading, time
from tgc.errors import TgcError
from tgc.ir.core import Module, Operation
from tgc.ir.types import TensorType
from tgc.target import Target, DeviceSpec, get_target, tf32_matmul
from tgc.lowering import lower, gc_paused
from tgc import cache
from tgc.runtime.device import BaseDevice

def device_target(device: str | None, dev=None) -> Target:
  """The Target a device runs: the one it names (`dev.target`; without `dev`, its class's, so that asking does not
  open the device). Every device names one (tgc.runtime.device.BaseDevice: llvm unless it says otherwise)."""
  from tgc.runtime import Device, device_class_path
  if isinstance(device, tuple): device = device[0]  # (a sharded tensor's devices: one kind, one target)
  path = device_class_path(Device.canonicalize(device))
  if dev is None and path is not None:  # (graph building asks per conv and matmul: the class looked up once per path)
    dev = _CLASSES.get(path)
    if dev is None:
      mod, cls = path.split(':')
      dev = _CLASSES[path] = getattr(importlib.import_module(mod), cls)
  t = dev.target
  return t if isinstance(t, Target) else get_target(t)

_CLASSES: dict[str, type] = {}


def device_spec(device: str | None) -> DeviceSpec:
  """The DeviceSpec a device lowers for: the device's own (BaseDevice.spec; asking opens it, once per process); one
  that does not open here (no GPU on this machine: graphs lowered to be printed) is taken to be its target's newest
  architecture, as kernel-opt takes it."""
  from tgc.runtime import get_device, Device
  if isinstance(device, tuple): device = device[0]
  try: return get_device(device).spec
  except TgcError: return DeviceSpec(device_target(device), device=Device.canonicalize(device), tf32=tf32_matmul(device_target(device)))


# every CompiledFunction.run reads DEBUG: os.environ.get costs half a microsecond (a KeyError inside it while DEBUG is
# unset), a look in the dict behind it a tenth of that (os.environ updates that dict: setting DEBUG takes effect at once)
try: _ENV, _DEBUG = os.environ._data, os.environ.encodekey('DEBUG')
except AttributeError: _ENV, _DEBUG = None, None

def debug_level() -> int:
  v = _ENV.get(_DEBUG) if _ENV is not None else os.environ.get('DEBUG')
  try: return int(v or 0)  # (int takes the dict's bytes too)
  except ValueError: return 0


from tgc.profiler import profile  # noqa: E402  (tgc.compiler.profile: launches timed, a Chrome trace)
from tgc import profiler as _profiler  # noqa: E402


class Stats:
  """Launch counters for the DEBUG=2 totals line."""
  def __init__(self): self.kernels, self.ops, self.bytes, self.time = 0, 0, 0, 0.0
GLOBAL_STATS = Stats()
_opened_logged: set[str] = set()


class Kernel:
  """One kernel of a CompiledFunction: its uop.func (or, loaded from the disk cache, what lowers it again when first
  asked for), its Program, and the launch points and float ops per point that DEBUG=2 and profiles report (counted
  when first asked for, or kept with the function)."""
  def __init__(self, fn, program, device: str, counts: tuple[int, int] | None = None, name: str | None = None):
    """name: what the host calls it by, where its program was compiled for a kernel of the same body and another name."""
    self._fn, self.program, self.device, self.name = fn, program, device, name or program.name
    self._points, self._flops = counts or (None, None)
  @property
  def fn(self) -> Operation:
    f = self._fn
    if callable(f): f = self._fn = f()
    return f
  @property
  def points(self) -> int:
    if self._points is None: self._points = launch_points(self.fn)
    return self._points
  @property
  def flops_per_point(self) -> int:
    if self._flops is None: self._flops = count_flops(self.fn)
    return self._flops


def launch_points(fn) -> int:
  """The threads a launch of uop.func fn runs (its grid times its work-group)."""
  return math.prod(fn.attrs.get('global_size', (1,))) * math.prod(fn.attrs.get('local_size', (1,)))


def _pick(idx):
  """What takes the values of these slots from a call's slot list, as a tuple."""
  return operator.itemgetter(*idx) if len(idx) > 1 else lambda env, i=idx[0]: (env[i],)


class CompiledFunction:
  """A compiled func.func on one device. `run(buffers)` runs its host schedule on Buffers of the device and
  returns the result Buffers (launches queued, nothing copied); calling it with numpy arrays (one per argument)
  copies them in and returns a tuple of numpy arrays."""
  def __init__(self, host: Operation, kernels: dict[str, Kernel], device: str, out=None):
    from tgc.runtime import get_device, Buffer
    self.host, self.kernels, self.device, self.out = host, kernels, device, out
    self.dev, self._Buffer = get_device(device), Buffer
    self.arg_types = [a.type for a in host.body.args]
    self.result_types = host.result_types
    self.name = host.attrs['sym_name']
    self.plan, self._wake = None, None
    self._busy = threading.Lock()  # (a plan's intermediates are one call's at a time)
    from tgc.runtime.device import Program
    self._Program, self._epoch = Program, Program.launcher_epoch

  def on_device(self, device: str) -> 'CompiledFunction':
    """The same function for another device of the same kind and target (CUDA:1 beside CUDA:0, CPU:1 beside CPU):
    its lowered host schedule shared, its kernels compiled there (the device's compile caches make that cheap)."""
    from tgc.runtime import get_device
    dev = get_device(device)
    ks = list(self.kernels.values())
    # (the binaries themselves where the device saves them: a function loaded from the disk cache has no kernel bodies)
    image = self.dev.save_programs([k.program for k in ks]) if type(dev) is type(self.dev) else None
    if image is not None: progs = dev.load_programs([k._fn for k in ks], [k.program.info for k in ks], *image)
    else: progs = dev.compile_all([k.fn for k in ks]) if hasattr(dev, 'compile_all') else [dev.compile(k.fn) for k in ks]
    return CompiledFunction(self.host, {k.name: Kernel(k._fn, p, dev.name, (k._points, k._flops), k.name) for k, p in zip(ks, progs)}, dev.name, self.out)

  def _plan(self, fixed: dict | None = None, keep: bool = False):
    """The host schedule made once into what a call does, over numbered slots (the arguments first) that hold
    launch arguments (Buffer.arg). Per launch: the kernel, its launcher, what picks its arguments from the slots, its
    slots, the blocks allocated just before it (for the slots it is the first to use) and the intermediate blocks
    freed after it (their last use). Then the results (slot, and whether it was made here: those results are
    copies), the results' (size, dtype) by slot (their blocks become Buffers after the last launch), the slots after
    the arguments as a call starts them, the Buffers made here and every slot's bytes. A reshape is its operand's
    slot (buffers are flat); a host constant is a Buffer made here, once. Intermediates are bare blocks of the
    allocator, not Buffers: nothing outside a call sees them, and one goes back to the allocator as soon as its
    last launch is queued; on a device that keeps_intermediates (the host's, whose launches run at once) they are the
    plan's instead where `keep` (a specialized function: a model called again and again), allocated here once and
    shared by slots whose launches do not overlap. `fixed` (argument number -> Buffer): those arguments are these Buffers for good; the
    launches that read nothing else (nor what other launches write) run here, once."""
    from tgc.runtime import Buffer
    nargs = len(self.host.body.args)
    slot = {a: i for i, a in enumerate(self.host.body.args)}
    nbytes = [a.type.numel * a.type.dtype.itemsize for a in self.host.body.args]
    tail, made, sizes, launches, ret = [], set(), {}, [], None
    for op in self.host.body.ops:
      n = op.name
      if n == 'func.return': ret = [slot[v] for v in op.operands]; break
      if n == 'kernel.launch': launches.append((self.kernels[op.attrs['callee']], tuple(slot[v] for v in op.operands))); continue
      r = op.results[0]
      if n in ('kernel.reshape', 'tensor.reshape'): slot[r] = slot[op.operands[0]]; continue
      slot[r] = nargs + len(tail)
      t = r.type
      nbytes.append(t.numel * t.dtype.itemsize)
      if n == 'kernel.alloc': tail.append(None); sizes[slot[r]] = (t.numel, t.dtype)  # every kernel writes all of its output
      elif n == 'tensor.const': tail.append(Buffer.from_numpy(self.device, host_const(op).reshape(-1), t.dtype)); made.add(slot[r])
      else: raise TgcError(f"host op '{n}' cannot run")
    if ret is None: raise TgcError("host schedule without func.return")
    if fixed:  # (an ONNX model's weight re-layouts: a transposed or permuted weight is made once)
      env, known, kept = [fixed[i].arg if i in fixed else None for i in range(nargs)] + [b and b.arg for b in tail], set(fixed) | made, []
      for k, idx in launches:
        out = {idx[i] for i in k.program.written}
        if set(idx) - out <= known and all(s_ in sizes and env[s_] is None for s_ in out):
          for s_ in out:
            tail[s_ - nargs] = b = Buffer(self.dev, *sizes[s_]); env[s_] = b.arg
          self._launch(k, [env[i] for i in idx], [nbytes[i] for i in idx])
          known |= out; made |= out
        else: kept.append((k, idx))
      launches = kept
    first, last = {}, {}
    for i, (_, idx) in enumerate(launches):
      for s_ in idx: first.setdefault(s_, i); last[s_] = i
    allocs, frees, fresh = [[] for _ in range(len(launches) + 1)], [[] for _ in launches], {}
    for s_, (n, dt) in sizes.items():
      if s_ in made: continue
      i = first.get(s_, len(launches))  # (the last: results no launch writes, all the same)
      if s_ in ret: allocs[i].append((s_, nbytes[s_])); fresh[s_] = (n, dt)
      elif i < len(launches): allocs[i].append((s_, nbytes[s_])); frees[last[s_]].append((s_, nbytes[s_]))
    args, held = [b and b.arg for b in tail], list(tail)
    if keep and getattr(self.dev, 'keeps_intermediates', False):
      # the intermediates' blocks are the plan's, allocated once (a block whose last launch is done goes to a later
      # slot of its size): a call allocates and frees only its results' blocks, and launches take fixed arguments
      al, spare = self.dev.allocator, {}
      for i in range(len(launches)):
        for s_, nb in allocs[i]:
          if s_ in fresh: continue
          h = spare[nb].pop() if spare.get(nb) else al.alloc(nb)
          held[s_ - nargs], args[s_ - nargs] = h, al._arg(h)
        for s_, nb in frees[i]: spare.setdefault(nb, []).append(held[s_ - nargs])
        allocs[i], frees[i] = [a for a in allocs[i] if a[0] in fresh], []
      if launches:  # (the results' blocks all at the call's start: the launches between run as one batch)
        allocs = [[a for al_ in allocs for a in al_]] + [[] for _ in launches]
      batch = (nargs + len(args), {nargs + i: a for i, a in enumerate(args) if a is not None}, tuple(range(nargs)) + tuple(fresh))
    else: batch = None
    steps = [(k, k.program.launcher(), _pick(idx), idx, tuple(a), tuple(f)) for (k, idx), a, f in zip(launches, allocs, frees)]
    self._wake = self._waker(launches)
    if allocs[-1]: steps.append((None, None, None, (), tuple(allocs[-1]), ()))
    return self._batched(steps, batch), [(s_, s_ in made) for s_ in ret], fresh, args, held, nbytes, steps, batch

  def _batched(self, steps, batch):
    """The steps with each run of launches the device can make as one native call (a CPU's one-thread kernels, of a plan that keeps its intermediates: their arguments are fixed but the call's own) merged into one
    step. `batch`: (the slots, the fixed slots' addresses, the slots a call sets), or None."""
    make, one = getattr(self.dev, 'batch_launcher', None), getattr(self.dev, 'batchable', None)
    if batch is None or make is None: return steps
    out, run = [], []
    ok = lambda k, frees: k is not None and one(k.program) and not frees
    def flush():
      launch = make([(k.program, idx) for k, _, _, idx, _, _ in run], *batch) if len(run) > 1 else None
      if launch is None: out.extend(run)
      else: out.append((None, launch, _pick(batch[2]), tuple(i for st in run for i in st[3]), run[0][4], ()))
      run.clear()
    for st in steps:
      k, _, _, _, allocs, frees = st
      if ok(k, frees) and (not allocs or not run): run.append(st)
      else:
        flush()
        (run if ok(k, frees) else out).append(st)
    flush()
    return out

  def specialize(self, fixed: dict) -> 'CompiledFunction':
    """This function with the arguments numbered in `fixed` bound to those Buffers for good (an ONNX model's
    weights): what depends on them alone is computed now, once, and a call runs the rest. A call still passes every
    argument; the fixed ones must be the same Buffers. On a host device its intermediates are its own, kept between
    calls (no allocation per launch: a model's per-call cost)."""
    f = copy.copy(self)
    f.plan, f._busy = self._plan(fixed, keep=True), threading.Lock()
    return f

  def run(self, bufs: list, check: bool = True) -> list:
    """Run the host schedule on Buffers of this function's device (one per argument); the result Buffers.
    check=False leaves out the arguments' checks: for callers whose cache key already fixes their sizes, dtypes
    and device (the eager Tensor path)."""
    if check:
      if len(bufs) != len(self.arg_types): raise TgcError(f"@{self.name} takes {len(self.arg_types)} arguments, got {len(bufs)}")
      for i, (t, b) in enumerate(zip(self.arg_types, bufs)):
        if b.size != t.numel or b.dtype is not t.dtype or b.device != self.device:
          raise TgcError(f"argument #{i} of @{self.name} is {b!r}, expected {t} on {self.device}")
    if self.plan is None: self.plan = self._plan()
    if self._epoch != self._Program.launcher_epoch: self._relaunch()
    if self._wake is not None: self._wake()
    steps, ret, fresh, tail, held, nbytes, plain, _ = self.plan
    env, blk = [*[b.arg for b in bufs], *tail], {}
    timed = profile.active is not None or debug_level() >= 2
    if timed: steps = plain  # (each launch timed alone)
    dev, al = self.dev, self.dev.allocator
    alloc, free, arg = al.alloc, al.free, al._arg
    self._busy.acquire()
    try:
      for k, launch, pick, idx, allocs, frees in steps:
        for s, nb in allocs:
          h = blk[s] = alloc(nb); env[s] = arg(h)
        if timed and k is not None: self._launch(k, pick(env), [nbytes[i] for i in idx])
        elif launch is not None: launch(pick(env))
        for s, nb in frees: free(blk.pop(s), nb)
    except BaseException:
      for s, h in blk.items(): free(h, nbytes[s])  # (a failed launch: the blocks still go back)
      raise
    finally: self._busy.release()
    # after the launches (queued: a GPU runs them meanwhile), the results' blocks become Buffers
    adopt = self._Buffer.adopt
    out = {s: adopt(dev, *fresh[s], h, env[s]) for s, h in blk.items()}
    res = []
    for s, copied in ret:
      b = out[s] if s in out else bufs[s] if s < len(bufs) else held[s - len(bufs)]
      res.append(b.copy_to(self.device) if copied else b)
    return res

  def _relaunch(self) -> None:
    """A program's launcher changed (Program.launcher_epoch): the plan's steps take every launcher anew."""
    self._epoch = self._Program.launcher_epoch
    _, ret, fresh, args, held, nbytes, plain, batch = self.plan
    plain = [(k, k.program.launcher() if k is not None else None, *s_[1:]) for k, *s_ in plain]
    self.plan = (self._batched(plain, batch), ret, fresh, args, held, nbytes, plain, batch)
    self._wake = self._waker([(k, None) for k, *_ in plain if k is not None])

  def _waker(self, launches):
    """What a call does first where some launch may be split across threads (a CPU kernel that is split or still
    timed both ways): the device's wake_workers (None where none may)."""
    wake = self.dev.wake_workers
    return wake if wake is not None and any(k.program.split is not False for k, _ in launches) else None

  def _launch(self, k: Kernel, args, nbytes: list) -> None:
    """One launch the slow way: timed (launch and wait) for DEBUG=2, which prints it, and tgc.compiler.profile."""
    if profile.active is None and debug_level() < 2: return k.program.launch(list(args))
    t0 = time.perf_counter()
    dt = k.program.timed_launch(list(args))
    if profile.active is not None: _profiler.record_launch(self, k, t0, time.perf_counter(), dt, sum(nbytes))
    if debug_level() >= 2: self._log_launch(k, nbytes, dt)

  def __call__(self, *args):
    """numpy arrays in (copied to the device; used in place on host devices), a tuple of numpy arrays out."""
    import numpy as np
    from tgc.ir import dtypes as D
    from tgc.runtime import Buffer
    if len(args) != len(self.arg_types):
      raise TgcError(f"@{self.name} takes {len(self.arg_types)} arguments, got {len(args)}")
    bufs = []
    for i, (t, v) in enumerate(zip(self.arg_types, args)):
      arr = np.asarray(v)
      want = t.dtype.np
      if arr.shape != t.shape: raise TgcError(f"argument #{i} of @{self.name} has shape {arr.shape}, expected {t}")
      if arr.dtype != want:
        if t.dtype.fmt and arr.dtype == np.float32: arr = D.encode(arr, t.dtype.fmt)  # (exact for values the dtype holds)
        else: raise TgcError(f"argument #{i} of @{self.name} has dtype {arr.dtype}, expected {t}")
      bufs.append(Buffer.wrap(self.device, arr, t.dtype))
    outs = self.run(bufs)
    return tuple(b.as_numpy().reshape(t.shape) for b, t in zip(outs, self.result_types))

  def _log_launch(self, k: Kernel, sizes: list, dt):
    st = GLOBAL_STATS
    st.kernels += 1
    nbytes = sum(sizes)
    flops = k.flops_per_point * k.points
    st.ops += flops; st.bytes += nbytes; st.time += dt
    out = self.out or sys.stdout
    out.write(f"*** {self.device:<7s} {st.kernels:4d} {k.name:<26s} arg {len(sizes):2d} mem {nbytes / 1e9:6.2f} GB "
              f"tm {dt * 1e6:9.2f}us/{st.time * 1e3:9.2f}ms ({flops / max(dt, 1e-9) / 1e9:9.2f} GFLOPS {nbytes / max(dt, 1e-9) / 1e9:6.1f} GB/s)\n")


def host_const(op):
  import numpy as np
  from tgc.passes.canonicalize import to_array
  from tgc.ir import dtypes as D
  t = op.results[0].type
  arr = np.broadcast_to(to_array(op.attrs['value'], t), t.shape)
  return np.array(D.to_storage(arr, t.dtype), order='C')  # a copy: the broadcast view is read-only


def count_flops(fn: Operation) -> int:
  """Float ALU operations per launch point (loops by their trip counts, vectors by their lanes): the DEBUG=2
  GFLOPS figure. Integer ops are index arithmetic, not counted."""
  from tgc.ir.types import VecType, elem
  total, mult, stack = 0, 1, []
  for op in fn.body.ops:
    if op.name == 'uop.range':
      lo, hi = (o.op.attrs.get('value', 0) if o.op is not None and o.op.name == 'uop.const' else 0 for o in op.operands)
      stack.append(mult); mult *= max(hi - lo, 1)
    elif op.name == 'uop.endrange': mult = stack.pop() if stack else 1
    elif op.name == 'uop.wmma':  # a warp's m*n*k multiply-adds, shared by its 32 threads
      m_, n_, k_ = op.attrs['dims']; total += mult * 2 * m_ * n_ * k_ // 32
    elif op.name == 'uop.wgmma':  # a warpgroup's, shared by its 128 threads
      m_, n_, k_ = op.attrs['dims']; total += mult * 2 * m_ * n_ * k_ // 128
    elif getattr(op, 'opname', None) not in (None, 'cast', 'bitcast') and op.results and elem(op.results[0].type).is_float:
      t = op.results[0].type
      total += mult * (t.count if isinstance(t, VecType) else 1) * (2 if op.opname == 'mulacc' else 1)
  return total


def compile_module(m: Module, device: str | None = None, entry: str | None = None, out=None, verify: bool = False) -> CompiledFunction:
  """A verified tensor-level (or already lowered) module -> a CompiledFunction for its entry func.func. verify: m is
  not verified yet; it is where it must be lowered (a function the disk cache holds was verified by the process that
  compiled it: its text is the cache's key)."""
  seen = [w(m) for w in COMPILE_WATCHERS]  # (VIZ=1: the pipeline viewer keeps the module as it comes)
  with _profiler.phase('compile function @' + next((f.attrs['sym_name'] for f in m.functions('func.func')), '?')):
    with gc_paused(): cf = _compile_module(m, device, entry, out, verify)
  for keep in seen: keep(cf)
  return cf


def _compile_module(m: Module, device: str | None, entry: str | None, out, verify: bool = False) -> CompiledFunction:
  from tgc.runtime import get_device, Device
  from tgc.ir.core import Module as _M
  dev_name = Device.canonicalize(device)
  dev = get_device(dev_name)
  spec = DeviceSpec.of(dev.spec, device=dev_name)
  target = spec.name
  dbg = debug_level()
  out = out or sys.stdout
  if dbg >= 1 and dev_name not in _opened_logged:
    _opened_logged.add(dev_name); out.write(f"opened device {dev_name} from pid:{os.getpid()}: {spec.options()}\n")  # (its DeviceSpec)
  funcs = m.functions('func.func')
  if not funcs: raise TgcError("no func.func to run")
  host = funcs[0] if entry is None else m.lookup(entry.lstrip('@'))
  if host is None or host.name != 'func.func': raise TgcError(f"no func.func named '{entry}'")
  from tgc.runtime import workers
  from tgc import function_cache
  st, prog, t0, cpu0 = workers.STATS, workers.Progress(dbg), time.perf_counter(), time.process_time()
  # a function compiled before (by any process) is loaded from the disk cache (DEBUG >= 3 prints the stages on the way
  # down: those compile)
  fkey = None
  if dbg < 3 and dev.saves_programs and cache.cache_dir() is not None:
    text = m.print()
    fkey = function_cache.key(text + function_cache.nan_bits(m), entry, spec, dev)
  hit = fkey and function_cache.load(fkey, dev, lambda: _relower(m, entry, spec))
  if hit:
    fhost = hit.host
    kernels = {name: Kernel(fn, p, dev_name, n, name) for name, fn, n, p in zip(hit.names, hit.fns, hit.counts, hit.progs)}
    t1 = time.perf_counter()
    st.add('load', t1 - t0); st.kernels += len(kernels); st.loaded += len(kernels)
    if dbg >= 1: out.write(f"{fhost.attrs['sym_name']}: {len(kernels)} kernels loaded from the disk cache in {t1 - t0:.3f} s\n")
    return CompiledFunction(fhost, kernels, dev_name, out)
  if verify: m.verify()
  if dbg < 3 and _lowers_in_workers(m, dev):
    kernels = _compile_in_workers(m, entry, spec, dev, dev_name, host, prog, st, cpu0)
    t2 = time.perf_counter()
    if fkey:
      with _profiler.phase('store in the disk cache'):
        function_cache.store(fkey, host, list(kernels), [k.program for k in kernels.values()], [(k.points, k.flops_per_point) for k in kernels.values()], dev)
      st.add('store', time.perf_counter() - t2)
    if dbg >= 1:
      out.write(f"{host.attrs['sym_name']}: {sum(1 for o in host.body.ops if o.name == 'kernel.launch')} kernel launches, {len(kernels)} kernels\n")
      ph, wc = st.phases, st.worker_cpu
      out.write(f"{host.attrs['sym_name']}: compiled in {t2 - t0:.3f} s: lower to kernels {ph.get('lower', 0):.3f} s, then {ph.get('workers', 0):.3f} s on "
                f"{workers.workers()} workers (their CPU s: lower {wc.get('lower', 0):.3f}, emit {wc.get('emit', 0):.3f}, "
                f"compile {wc.get('compile', 0):.3f}), load {ph.get('load', 0):.3f} s\n")
    return CompiledFunction(host, kernels, dev_name, out)
  # (the device's spec: an OpenCL device on a CPU gets CPU tiles, a CUDA device SMEM's tiles in the shared memory it allows)
  def trace(stage, m):
    if stage == 'opt' and dbg >= 3:
      for k in m.functions('kernel.func'): out.write(str(k) + '\n')
  prog.phase('lower', 0)
  from tgc.passes.zero_unwritten import zero_unwritten
  given = {f.attrs['sym_name'] for f in m.functions('uop.func')}  # (not lowered from kernel.funcs: they may store part)
  lower(m, spec, 'uop', trace=trace)
  _declare_sizes(m, host)
  zero_unwritten(m, host, given)
  fns = m.functions('uop.func')
  t1 = time.perf_counter()
  st.add('lower', t1 - t0); st.kernels += len(fns)
  st.lower_per_kernel += [(time.process_time() - cpu0) / len(fns)] * len(fns) if fns else []
  for fn in fns:
    if dbg >= 4: out.write(_render(fn, target) + '\n')
    if dbg >= 5: out.write(str(fn) + '\n')
  # all at once where the device can (the CPU: on the compile workers, each kernel source once)
  e0, c0 = st.phases.get('emit', 0.0), st.phases.get('compile', 0.0)
  try:
    with _profiler.phase(f'device compile ({len(fns)} kernels)', kernels=[fn.attrs['sym_name'] for fn in fns]):
      progs = lower(m, spec, 'binary', progress=prog)
  finally: prog.close()
  t2 = time.perf_counter()
  if st.phases.get('emit', 0.0) == e0 and st.phases.get('compile', 0.0) == c0: st.add('compile', t2 - t1)  # (a device that does not split them)
  kernels = {fn.attrs['sym_name']: Kernel(fn, p, dev_name) for fn, p in zip(fns, progs)}
  if fkey:
    with _profiler.phase('store in the disk cache'):
      function_cache.store(fkey, host, list(kernels), progs, [(k.points, k.flops_per_point) for k in kernels.values()], dev)
    st.add('store', time.perf_counter() - t2)
  if dbg >= 1:
    out.write(f"{host.attrs['sym_name']}: {sum(1 for o in host.body.ops if o.name == 'kernel.launch')} kernel launches, {len(kernels)} kernels"
              f"{', f32 products as TF32' if spec.has_tf32 else ''}\n")
    emit, comp = st.phases.get('emit', 0.0) - e0, st.phases.get('compile', 0.0) - c0
    out.write(f"{host.attrs['sym_name']}: compiled in {t2 - t0:.3f} s: lower {t1 - t0:.3f} s, emit {emit:.3f} s, compile {comp:.3f} s\n")
  return CompiledFunction(host, kernels, dev_name, out)


# what is called with each module compile_module is about to lower; it returns what is called with the
# CompiledFunction (the pipeline viewer, tgc.viz.record: VIZ=1 keeps every compiled function for its page)
COMPILE_WATCHERS: list = []
if os.environ.get('VIZ', '0') not in ('', '0'): importlib.import_module('tgc.viz.record')


def _lowers_in_workers(m: Module, dev) -> bool:
  """Whether a function's kernels are lowered and compiled on the compile workers (each worker a share of the kernels,
  from the kernel level to binaries): where there are workers, the device builds binaries without its driver, the
  module is above the uop level and holds no uop.func, and nothing watches the lowering pass by pass (a profile, the
  pipeline viewer)."""
  from tgc.runtime import workers
  from tgc.lowering import level_of
  return (workers.workers() > 1 and not workers.in_worker() and type(dev).build_programs is not BaseDevice.build_programs
          and not COMPILE_WATCHERS and _profiler.instrumentation() is None and level_of(m) in ('tensor', 'kernel')
          and not m.functions('uop.func'))  # (uop.funcs given as they are: zero_unwritten reads them here)


def _compile_in_workers(m: Module, entry, spec: DeviceSpec, dev, dev_name: str, host, prog, st, cpu0) -> dict[str, Kernel]:
  """Lower m to the kernel level here; kernels whose bodies are the same but for their names (a model's layers) are
  lowered and compiled once. The compile workers take shares of the distinct kernels (a few a worker, the costliest
  first, so that one slow kernel does not hold the rest back) the rest of the way: they lower, render and compile them,
  and hand back their launch facts and binaries (BaseDevice.build_programs), which this process loads. The kernels'
  uop.funcs stay in the workers; one asked for later is lowered again here (as a disk cache hit's)."""
  from tgc.runtime import workers
  from tgc import function_cache
  t0 = time.perf_counter()
  prog.phase('lower', 0)
  lower(m, spec, 'kernel')
  kfns = m.functions('kernel.func')
  same: dict[str, list[str]] = {}  # a body's text (its name left out) -> the kernels of that body
  for k in kfns:
    name = k.attrs['sym_name']
    same.setdefault(str(k).replace('@' + name, '@_', 1), []).append(name)
  firsts = {names[0]: names for names in same.values()}
  reps = [k for k in kfns if k.attrs['sym_name'] in firsts]
  n = min(3 * workers.workers(), len(reps)) or 1
  cost = [sum(1 for _ in k.walk()) for k in reps]
  groups, loads = [[] for _ in range(n)], [0] * n
  for i in sorted(range(len(reps)), key=lambda i: -cost[i]):
    j = loads.index(min(loads)); groups[j].append(i); loads[j] += cost[i]
  if reps: _warm_lowering(reps[cost.index(min(cost))], spec)
  t1 = time.perf_counter(); st.add('lower', t1 - t0)
  prog.phase('compile', len(reps))
  try: res = workers.run(_build_share, n, ([[reps[i] for i in sorted(g)] for g in groups], host, spec, dev), cost=lambda j: loads[j],
                         done=lambda j, dt: prog.step(len(groups[j])))
  finally: prog.close()
  t2 = time.perf_counter(); st.add('workers', t2 - t1)
  lazy = function_cache.Relowered(lambda: _relower(m, entry, spec))
  kernels: dict[str, Kernel] = {}
  for (ks, meta, blobs, secs, per_kernel) in res:
    infos, counts, _ = function_cache.decode_kernels(ks)
    progs = dev.load_programs([lazy.of(info[0]) for info in infos], infos, meta, blobs)
    for info, c, p in zip(infos, counts, progs):
      for name in firsts[info[0]]: kernels[name] = Kernel(lazy.of(name), p, dev_name, c, name)
    for ph, dt in secs.items(): st.worker_cpu[ph] = st.worker_cpu.get(ph, 0.0) + dt
    st.lower_per_kernel += [l for l, _ in per_kernel]; st.emit_per_kernel += [e for _, e in per_kernel]
  st.add('load', time.perf_counter() - t2)
  st.kernels += len(kernels); st.compiled += len(reps)
  return {k.attrs['sym_name']: kernels[k.attrs['sym_name']] for k in kfns}


_warmed: set[str] = set()  # the specs whose lowering this process has run (what its forked workers inherit)

def _warm_lowering(k, spec: DeviceSpec) -> None:
  """Once a process and spec: a copy of kernel.func k lowered to the uop level and rendered here, so that the compile
  workers forked after find the passes' and the emitter's modules imported and their one-time tables built. Without
  it each worker of each batch did that first (a GPT step's: 11 batches of 16 workers), its first share waiting."""
  key = spec.options()
  if key in _warmed: return
  _warmed.add(key)
  sub = Module([k]).clone()
  lower(sub, spec, 'uop')
  spec.render(sub)


def _build_share(j: int, shares: list, host, spec: DeviceSpec, dev) -> tuple:
  """On a compile worker: kernel.funcs shares[j] lowered to uop.funcs and compiled by dev.build_programs; returns their
  encoded launch facts and counts, the binaries, the worker's CPU seconds per phase and each kernel's Python seconds
  (lowering's share, its emit)."""
  from tgc import function_cache
  from tgc.runtime import workers
  from tgc.dialects.uop import launch_info
  st, c0 = workers.STATS, time.process_time()
  sub = Module(shares[j])
  if not workers.in_worker(): sub = sub.clone()  # (run here: this process's kernels stay at the kernel level)
  lower(sub, spec, 'uop')
  _declare_sizes(sub, host)
  fns = sub.functions('uop.func')
  c1, phases, emits = time.process_time(), dict(st.phases), len(st.emit_per_kernel)
  meta, blobs = dev.build_programs(fns)
  secs = {k: v - phases.get(k, 0.0) for k, v in st.phases.items() if v != phases.get(k, 0.0)}
  secs['lower'] = c1 - c0
  emit = st.emit_per_kernel[emits:] or [0.0] * len(fns)
  ks = [function_cache.encode_kernel(launch_info(fn), (launch_points(fn), count_flops(fn)),
                                     fn.sym_name) for fn in fns]
  return ks, meta, blobs, secs, [((c1 - c0) / max(len(fns), 1), e) for e in emit]


def _relower(m: Module, entry: str | None, spec: DeviceSpec) -> dict[str, Operation]:
  """The uop.funcs of a function loaded from the disk cache, made again from (a copy of) the module compile_module got
  as compile_module made them (what asks for a loaded kernel's body: the function cache keeps none)."""
  m = m.clone()
  host = m.functions('func.func')[0] if entry is None else m.lookup(entry.lstrip('@'))
  from tgc.passes.zero_unwritten import zero_unwritten
  given = {f.attrs['sym_name'] for f in m.functions('uop.func')}
  lower(m, spec, 'uop')
  _declare_sizes(m, host)
  zero_unwritten(m, host, given)
  return {fn.attrs['sym_name']: fn for fn in m.functions('uop.func')}


def _declare_sizes(m: Module, host: Operation) -> None:
  """Hand-written uop.funcs may leave out their buffers' sizes: take them from what the host launches them
  with, so that every access is proven in bounds or guarded (a kernel launched with different sizes gets the
  smallest)."""
  for op in host.body.ops:
    if op.name != 'kernel.launch': continue
    k = m.lookup(op.attrs['callee'])
    if k is None or k.name != 'uop.func': continue
    for d in k.body.ops:
      if d.name == 'uop.define_global' and d.attrs['index'] < len(op.operands):
        n = op.operands[d.attrs['index']].type.numel
        d.attrs['size'] = min(d.attrs.get('size', n), n)


def _render(fn, target):
  from tgc import emit
  try: return emit.render(Module([fn]), target)
  except TgcError as e: return f"// no source for target {target}: {e}"


def compile(text_or_module, device: str | None = None, entry: str | None = None, filename: str = '<string>') -> CompiledFunction:
  """`tgc.compile(text, device="CPU")`: a callable fn(*numpy_arrays) -> tuple of numpy arrays."""
  if isinstance(text_or_module, Module): m = text_or_module
  else:
    from tgc.parser import parse
    m = parse(text_or_module, filename)
  return compile_module(m, device, entry)


def print_totals(out=None):
  st = GLOBAL_STATS
  if st.kernels and debug_level() >= 2:
    (out or sys.stdout).write(f"avg: {st.ops / max(st.time, 1e-9) / 1e9:9.2f} GFLOPS {st.bytes / max(st.time, 1e-9) / 1e9:9.2f} GB/s"
                              f"           total: {st.kernels:5d} kernels {st.ops / 1e9:9.2f} GOPS {st.bytes / 1e9:9.2f} GB {st.time * 1e3:9.2f} ms\n")
