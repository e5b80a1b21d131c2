"""The CPU device: LLVM IR from tgc.emit.llvm, JIT-compiled with llvmlite MCJIT, called through ctypes.

Every kernel is rendered under one symbol name, so its LLVM IR text is its body alone: machine code is cached by
that text, and kernels that differ in name only (a model's repeated blocks) are compiled once per process. The
kernels a CompiledFunction needs are compiled together, as one LLVM module (one optimisation and code generation
run instead of one per kernel). The engines are kept alive for the process (a function pointer outlives nothing
it came from). Buffers are host memory: a launch passes their addresses and runs before it returns.
"""
from __future__ import annotations
import ctypes, hashlib, os, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from tgc.errors import TgcError
from tgc.runtime.buffer import HostAllocator
from tgc.runtime.device import BaseDevice, HostDevice, Program
from tgc.dialects.uop import buffer_signature, buffer_sizes, launch_dims

_lock = threading.Lock()
_tm = None
SYMBOL = 'kernel'                       # the name every kernel is rendered under (its text is then its body)
_code: dict[str, int] = {}              # LLVM IR text -> address of its machine code: each text is compiled once
_cache: dict[tuple, 'CPUProgram'] = {}  # (name, LLVM IR text, dtypes, sizes, grid) -> program (see compile_llvm_all)
_engines: list = []                     # every MCJIT engine made: never freed while functions may be called
stats = {'compiles': 0, 'cache_hits': 0, 'launches': 0}
_pool: ThreadPoolExecutor | None = None
_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer
PARALLEL_MIN_BYTES = 1 << 20  # below this a launch is too short to be worth a thread hand-off


_CORES = os.cpu_count() or 1
_threads_env: tuple[str | None, int] = ('', _CORES)

def threads() -> int:
  """Worker threads for one launch: $CPU_THREADS, else the core count (read per launch, parsed once per value)."""
  global _threads_env
  v = os.environ.get('CPU_THREADS')
  if v != _threads_env[0]:
    try: n = max(1, int(v)) if v else _CORES
    except ValueError: n = _CORES
    _threads_env = (v, n)
  return _threads_env[1]

def _get_pool(n: int) -> ThreadPoolExecutor:
  global _pool
  if _pool is None or _pool._max_workers < n: _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix='tgc-cpu')
  return _pool

def run_split(cfn, ptrs: list[int], start: int, end: int, nbytes: int) -> None:
  """Call a kernel `cfn(*ptrs, start, end)` over gidx0 in [start, end): split across the cores when the launch
  touches enough memory to be worth a thread hand-off (ctypes releases the GIL during each call)."""
  n = min(threads(), end - start) if nbytes >= PARALLEL_MIN_BYTES else 1  # (small launches skip the env lookup)
  if n > 1:
    cuts = [start + (end - start) * i // n for i in range(n + 1)]
    futs = [_get_pool(n).submit(cfn, *ptrs, cuts[i], cuts[i + 1]) for i in range(1, n)]
    cfn(*ptrs, cuts[0], cuts[1])
    for f in futs: f.result()
  else: cfn(*ptrs, start, end)


def _target_machine():
  """Initialise llvmlite once; a target machine for this host's CPU and its features, opt level 2."""
  global _tm
  if _tm is None:
    import llvmlite.binding as llvm
    llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    _tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2, jit=True)
  return _tm


def _optimize(mod, tm) -> None:
  import llvmlite.binding as llvm
  if hasattr(llvm, 'create_pass_builder'):  # the new pass manager (llvmlite >= 0.44)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    # kernel-opt vectorises explicitly (vec<N> values); LLVM's loop vectorizer adds little to that and can
    # take seconds (28 s on a 17-long max reduce) on the short constant-trip loops kernels are made of
    pto.loop_vectorization, pto.slp_vectorization = False, True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
  else:  # pragma: no cover  (older llvmlite: the legacy pass manager)
    pmb = llvm.PassManagerBuilder(); pmb.opt_level = 2
    pm = llvm.ModulePassManager(); pmb.populate(pm); pm.run(mod)


def jit(ir_text: str, names: list[str]) -> dict[str, int]:
  """Compile LLVM IR text; the addresses of the named functions. The engine lives as long as the process."""
  import llvmlite.binding as llvm
  tm = _target_machine()
  try:
    mod = llvm.parse_assembly(ir_text); mod.verify()
  except RuntimeError as e: raise TgcError(f"llvm: the emitted IR does not verify: {e}") from None
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  _optimize(mod, tm)
  ee = llvm.create_mcjit_compiler(mod, tm)
  ee.finalize_object()
  _engines.append(ee)
  return {n: ee.get_function_address(n) for n in names}


def jit_kernels(texts: list[str]) -> list[int]:
  """Kernel texts (each an LLVM module defining @kernel) -> the addresses of their machine code, all compiled as one
  module: LLVM's fixed costs per module (the pass pipeline's set-up, code generation's, an engine) are paid once.
  Each is parsed and verified alone first, so that a bad kernel's error names it."""
  import llvmlite.binding as llvm
  tm = _target_machine()
  mods, names = [], [f"k{hashlib.sha1(t.encode()).hexdigest()[:24]}" for t in texts]  # (distinct texts: distinct names)
  for t, n in zip(texts, names):
    try:
      mod = llvm.parse_assembly(t); mod.verify()
    except RuntimeError as e: raise TgcError(f"llvm: the emitted IR does not verify: {e}\n{t}") from None
    mod.get_function(SYMBOL).name = n
    mods.append(mod)
  mod = mods[0]
  for m in mods[1:]: mod.link_in(m)
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  _optimize(mod, tm)
  ee = llvm.create_mcjit_compiler(mod, tm)
  ee.finalize_object()
  _engines.append(ee)
  return [ee.get_function_address(n) for n in names]


class HostKernelProgram(Program):
  """A kernel compiled to host code `_cfn(*pointers, start, end)` that loops over gidx0 in [start, end) itself (the
  CPU's LLVM and the C compiler's): launch runs the whole grid, split across the cores when it moves enough bytes."""
  _cfn = None
  def __init__(self, device, fn):
    super().__init__(device, fn)
    self.nbytes = sum(self.sizes.get(i, 0) * dt.itemsize for i, dt in enumerate(self.signature))

  def launch(self, args, start: int = 0, end: int | None = None) -> None:
    """Run every point of the grid (or gidx0 in [start, end) only)."""
    g0 = self.global_size[0]
    end = g0 if end is None else end
    if not 0 <= start <= end <= g0: raise TgcError(f"@{self.name}: gidx0 range [{start}, {end}) is outside [0, {g0})")
    run_split(self._cfn, args, start, end, self.nbytes)

  def launcher(self):
    if self.nbytes >= PARALLEL_MIN_BYTES: return self.launch  # (threads: the hand-off costs more than the checks)
    cfn, g0 = self._cfn, self.global_size[0]
    return lambda args: cfn(*args, 0, g0)


class CPUProgram(HostKernelProgram):
  """One kernel JIT-compiled from LLVM IR: `src` (the kernel named @kernel), its machine code at `addr`."""
  def __init__(self, device, fn, src: str, addr: int):
    super().__init__(device, fn)
    self.src, self.addr = src, addr
    self._cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(self.signature)), ctypes.c_int32, ctypes.c_int32)(addr)

  def launch(self, args, start: int = 0, end: int | None = None) -> None:
    super().launch(args, start, end)
    stats['launches'] += 1  # (the CPU device's counter: C launches are not its)

  def launcher(self):
    if self.nbytes >= PARALLEL_MIN_BYTES: return self.launch
    cfn, g0 = self._cfn, self.global_size[0]
    def launch(args):
      cfn(*args, 0, g0); stats['launches'] += 1
    return launch


def compile_llvm_all(device, fns: list) -> list[CPUProgram]:
  """uop.funcs -> their compiled programs. Machine code is shared by LLVM IR text (rendered under one symbol, so two
  kernels that differ in name only share it; the text holds everything the code depends on but the grid's gidx0
  range, which each launch passes); the kernels not compiled before are compiled together, as one module. A
  program is cached by its name and everything a launch checks or runs by: the text, the buffer dtypes (i8 and u8
  kernels can share a text), the sizes the buffers are checked against, and the grid."""
  from tgc.emit.llvm import render_llvm
  keys = []
  for fn in fns:
    src = render_llvm(fn, SYMBOL)
    keys.append((fn.sym_name, src, tuple(d.name for d in buffer_signature(fn)), tuple(sorted(buffer_sizes(fn).items())), launch_dims(fn)))
  with _lock:
    new = list(dict.fromkeys(k[1] for k in keys if k[1] not in _code))
    if new:
      _code.update(zip(new, jit_kernels(new)))
      stats['compiles'] += len(new)
    out = []
    for fn, key in zip(fns, keys):
      prg = _cache.get(key)
      if prg is not None: stats['cache_hits'] += 1
      else: prg = _cache[key] = CPUProgram(device, fn, key[1], _code[key[1]])
      out.append(prg)
    return out


def compile_llvm(device, fn) -> CPUProgram:
  """A uop.func -> its compiled program (compile_llvm_all of one)."""
  return compile_llvm_all(device, [fn])[0]


class HostPointerAllocator(HostAllocator):
  """Host memory whose launch argument is its address (the kernels take raw pointers)."""
  def _arg(self, handle):
    # every allocation asks: ndarray.ctypes.data costs 0.8 us (it makes a helper object), this 0.15
    try: return _addressof(_char_at(handle))
    except (TypeError, ValueError): return handle.ctypes.data  # a read-only or empty array


class CPUDevice(HostDevice):
  """The default device: LLVM through llvmlite's MCJIT on the host CPU. compile() returns the cached program."""
  name, target = 'CPU', 'llvm'
  def __init__(self): BaseDevice.__init__(self, HostPointerAllocator(self.name))
  def compile(self, fn) -> CPUProgram: return compile_llvm(self, fn)
  def compile_all(self, fns: list) -> list[CPUProgram]: return compile_llvm_all(self, fns)
  @property
  def launches(self) -> int: return stats['launches']
