"""The CPU device: LLVM IR from tgc.emit.llvm, JIT-compiled with llvmlite MCJIT, called through ctypes.

Every kernel is rendered under one symbol name, so its LLVM IR text is its body alone: machine code is cached by
that text, and kernels that differ in name only (a model's repeated blocks) are compiled once per process. The
kernels a CompiledFunction needs are compiled together, as one LLVM module (one optimisation and code generation
run instead of one per kernel), whose object file is kept on disk for the next process. The engines are kept alive
for the process (a function pointer outlives nothing it came from). Buffers are host memory: a launch passes their
addresses and runs before it returns; it runs on one thread or split across the cores (see HostKernelProgram).
"""
from __future__ import annotations
import ctypes, hashlib, os, sys, threading, time
import numpy as np
from tgc.errors import TgcError
from tgc.runtime.buffer import HostAllocator
from tgc.runtime.device import BaseDevice, HostDevice, Program
from tgc.dialects.uop import launch_info

_lock = threading.Lock()
_tm = None
SYMBOL = 'kernel'                       # the name every kernel is rendered under (its text is then its body)
_code: dict[str, int] = {}              # kernel_symbol(LLVM IR text) -> address of its machine code: each text is compiled once
_cache: dict[tuple, 'CPUProgram'] = {}  # (name, kernel symbol, dtypes, sizes, grid) -> program (see compile_llvm_all)
_engines: list = []                     # every MCJIT engine made: never freed while functions may be called
stats = {'compiles': 0, 'cache_hits': 0, 'disk_hits': 0, 'launches': 0}  # (compiles, disk_hits: kernel texts)
_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer


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

def _target_machine():
  """Initialise llvmlite once; a target machine for this host's CPU and its features, opt level 2."""
  global _tm
  if _tm is None:
    import llvmlite.binding as llvm
    llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    _tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2, jit=True)
  return _tm


# The SLP vectorizer finds vectors in a kernel's scalar code (a small kernel's loads and stores side by side); in an
# unrolled kernel it searches for long (three times the rest of LLVM's pipeline on the 500-2000-line kernels of a small
# GPT training step: 4.1 s of its 8.6 s first step; 1.5 s at 3900 lines, 8 s at 12000) and finds little: kernel-opt
# made their vectors already. The ONNX models' steady calls (bench/onnx.py, one thread, CPU time) moved within their
# noise with it held to 600 lines instead of 3000, where their first calls and the GPT step's compile took 25 % less.
SLP_MAX_LINES = 600


def _optimize(mod, tm, slp: bool = True) -> None:
  import llvmlite.binding as llvm
  if hasattr(llvm, 'create_pass_builder'):  # the new pass manager (llvmlite >= 0.44)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    # kernel-opt vectorises explicitly (vec<N> values); LLVM's loop vectorizer adds little to that and can
    # take seconds (28 s on a 17-long max reduce) on the short constant-trip loops kernels are made of
    pto.loop_vectorization, pto.slp_vectorization = False, slp
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


_codegen_id: str | None = None

def codegen_id() -> str:
  """What machine code depends on besides the IR: LLVM's and llvmlite's versions, the target (triple, CPU, its
  features: code for another CPU must never load here) and how it is optimised (_optimize's own text)."""
  global _codegen_id
  if _codegen_id is None:
    import inspect, llvmlite, llvmlite.binding as llvm
    tm = _target_machine()
    try: opt = inspect.getsource(_optimize)
    except (OSError, TypeError): opt = '?'
    _codegen_id = '|'.join([llvmlite.__version__, '.'.join(map(str, llvm.llvm_version_info)), tm.triple, llvm.get_host_cpu_name(),
                            llvm.get_host_cpu_features().flatten(), f'opt=2 jit slp<={SLP_MAX_LINES}', opt])
  return _codegen_id


def kernel_symbol(text: str) -> str:
  """The name a kernel text's function takes in machine code (distinct texts: distinct names)."""
  return f"k{hashlib.sha1(text.encode()).hexdigest()[:24]}"


def compile_object(text: str) -> bytes:
  """One kernel text (an LLVM module defining @kernel) -> an object file defining it as kernel_symbol(text),
  optimised (tgc's pipeline) and compiled for this host's CPU; a TgcError naming the kernel where it does not verify."""
  import llvmlite.binding as llvm
  tm = _target_machine()
  try:
    mod = llvm.parse_assembly(text); mod.verify()
  except RuntimeError as e: raise TgcError(f"llvm: the emitted IR does not verify: {e}\n{text}") from None
  mod.get_function(SYMBOL).name = kernel_symbol(text)
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  _optimize(mod, tm, slp=text.count('\n') <= SLP_MAX_LINES)
  return tm.emit_object(mod)


def load_objects(objs: list[bytes], names: list[str]) -> list[int]:
  """Object files -> the addresses of the named functions, all loaded into one engine (kept for the process)."""
  import llvmlite.binding as llvm
  ee = llvm.create_mcjit_compiler(llvm.parse_assembly(''), _target_machine())
  for o in objs: ee.add_object_file(llvm.ObjectFileRef.from_data(o))
  ee.finalize_object()
  _engines.append(ee)
  addrs = [ee.get_function_address(n) for n in names]
  if not all(addrs): raise TgcError("llvm: compiled kernels are missing from their object files")
  return addrs


# the work below which a batch is not worth starting worker processes for (about a tenth of a second of it: LLVM
# compiles some 500 KB of kernel text a second, and the emitter some 30 uops a millisecond)
POOL_MIN_TEXT, POOL_MIN_UOPS = 64_000, 3_000


def jit_kernels(texts: list[str], done=None) -> list[int]:
  """Kernel texts (each an LLVM module defining @kernel) -> the addresses of their machine code. Each text is its own
  object file, kept in the disk cache (the next process, or another program with the same kernel, loads it); those not
  cached are compiled on the compile workers (tgc.runtime.workers: processes), the longest first, and stored by this
  process. `done(i, seconds)` is called as each is compiled or found."""
  from tgc import cache
  from tgc.runtime import workers
  _target_machine()  # (made before the workers fork: each has it)
  keys = [cache.key(t, codegen_id()) for t in texts]
  _disk_keys.update(zip(map(kernel_symbol, texts), keys))
  objs = [cache.get('llvm', k) for k in keys]
  miss = [i for i, o in enumerate(objs) if o is None]
  for i, o in enumerate(objs):
    if o is not None and done: done(i, 0.0)
  new = workers.run(_object_of, len(miss), ([texts[i] for i in miss],), cost=lambda j: len(texts[miss[j]]), min_cost=POOL_MIN_TEXT,
                    done=done and (lambda j, dt: done(miss[j], dt)))
  for i, o in zip(miss, new): objs[i] = o; cache.put('llvm', keys[i], o)
  stats['compiles'] += len(miss); stats['disk_hits'] += len(texts) - len(miss)
  return load_objects(objs, [kernel_symbol(t) for t in texts])

def _object_of(i: int, texts: list[str]) -> bytes: return compile_object(texts[i])

_disk_keys: dict[str, str] = {}  # kernel symbol -> its object file's key in the disk cache (save_programs reads it there)


# ---- running one launch across the cores ----
# A launch splits gidx0 into chunks that the calling thread and the pool's workers claim one at a time from a shared
# counter (a compare-and-swap): a worker that is late (asleep, or its core busy with another process) takes fewer
# chunks, and the caller never waits for a worker that has not started, only for a chunk one is running. The workers
# and the hand-off are machine code (below, JIT-compiled once), so that handing a launch over costs no Python and no
# GIL: one ctypes call posts the launch, runs the caller's chunks and waits. A worker spins for SPIN_S after a job
# (the next split launch of a call comes a few microseconds of host work later), then sleeps on a condition variable.
SPIN_S = 100e-6
_CTL = 640          # the control block's bytes; the launch's arguments follow it
MAX_ARGS = 256      # buffers a split launch can pass (a kernel with more runs on one thread)
_POOL_IR = r'''
; ctl: 0 the job word (job id << 32 | chunks << 16 | next chunk), 64 chunks done, 128 thunk, 136 kernel, 144 args,
; 152 start (i32), 156 end (i32), 160 workers wanted (i32), 192 workers asleep, 200 spin (ns), 208 clock id (i32),
; 212 the caller's CPU (i32), 216 keep workers off it (i32), 256 mutex,
; 384 condition variable (128 bytes each: any libc's fits), 512 the CPUs the process may use (a cpu_set_t),
; 640 the launch's arguments
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @sched_yield()
declare i32 @clock_gettime(i32, ptr)

define void @pause() {
  PAUSE
  ret void
}

define void @noop(ptr %fn, ptr %args, i32 %s, i32 %e) {
  ret void
}

; the clock (CLOCK_MONOTONIC: its id at ctl + 208), in nanoseconds
define i64 @now(ptr %ctl) {
  %ts = alloca [2 x i64], align 8
  %pc = getelementptr i8, ptr %ctl, i64 208
  %c = load i32, ptr %pc, align 4
  %r = call i32 @clock_gettime(i32 %c, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %pn = getelementptr i8, ptr %ts, i64 8
  %n = load i64, ptr %pn, align 8
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}

; claim chunks of the posted job until none is left; run each through the job's thunk
define void @run_chunks(ptr %ctl) {
entry:
  %w0 = load atomic i64, ptr %ctl acquire, align 8
  br label %try
try:
  %w = phi i64 [%w0, %entry], [%seen, %claim], [%w1, %run]
  %nn = lshr i64 %w, 16
  %n = and i64 %nn, 65535
  %c = and i64 %w, 65535
  %left = icmp ult i64 %c, %n
  br i1 %left, label %claim, label %out
claim:
  %w2 = add i64 %w, 1
  %r = cmpxchg ptr %ctl, i64 %w, i64 %w2 acq_rel acquire
  %seen = extractvalue { i64, i1 } %r, 0
  %ok = extractvalue { i64, i1 } %r, 1
  br i1 %ok, label %run, label %try
run:
  %pth = getelementptr i8, ptr %ctl, i64 128
  %thunk = load ptr, ptr %pth, align 8
  %pfn = getelementptr i8, ptr %ctl, i64 136
  %fn = load ptr, ptr %pfn, align 8
  %pa = getelementptr i8, ptr %ctl, i64 144
  %args = load ptr, ptr %pa, align 8
  %ps = getelementptr i8, ptr %ctl, i64 152
  %s32 = load i32, ptr %ps, align 4
  %pe = getelementptr i8, ptr %ctl, i64 156
  %e32 = load i32, ptr %pe, align 4
  %s = sext i32 %s32 to i64
  %e = sext i32 %e32 to i64
  %len = sub i64 %e, %s
  %lo0 = mul i64 %len, %c
  %lo1 = udiv i64 %lo0, %n
  %lo = add i64 %s, %lo1
  %c1 = add i64 %c, 1
  %hi0 = mul i64 %len, %c1
  %hi1 = udiv i64 %hi0, %n
  %hi = add i64 %s, %hi1
  %lo32 = trunc i64 %lo to i32
  %hi32 = trunc i64 %hi to i32
  call void %thunk(ptr %fn, ptr %args, i32 %lo32, i32 %hi32)
  %pd = getelementptr i8, ptr %ctl, i64 64
  %old = atomicrmw add ptr %pd, i64 1 release
  %w1 = load atomic i64, ptr %ctl acquire, align 8
  br label %try
out:
  ret void
}

; a worker thread (pthread_create's start routine; %arg: {ctl, its index, the last job id when it was made (not the
; job word read when the thread gets to run: a job posted before then would be lost): i64 each, a cpu_set_t}): waits
; for a new job id, spinning, then asleep; helps with the job if its index is below the workers the job wants. The
; spin yields the core every 64 pauses (where the caller shares it: another process took the other core, or more
; threads than cores, a spinning worker would hold it from the caller for the whole spin) and ends by the clock
; (yields to a busy thread on the core take time slices: a spin of so many pauses would last as many)
define ptr @worker(ptr %arg) {
entry:
  %ctl = load ptr, ptr %arg, align 8
  %pidx = getelementptr i8, ptr %arg, i64 8
  %idx = load i64, ptr %pidx, align 8
  %pact = getelementptr i8, ptr %ctl, i64 160
  %psl = getelementptr i8, ptr %ctl, i64 192
  %pspin = getelementptr i8, ptr %ctl, i64 200
  %mu = getelementptr i8, ptr %ctl, i64 256
  %cv = getelementptr i8, ptr %ctl, i64 384
  %pid0 = getelementptr i8, ptr %arg, i64 16
  %id0 = load i64, ptr %pid0, align 8
  br label %wait
wait:
  %last = phi i64 [%id0, %entry], [%id, %got], [%id, %help]
  %spin = load atomic i64, ptr %pspin monotonic, align 8
  %t0 = call i64 @now(ptr %ctl)
  br label %spinning
spinning:
  %i = phi i64 [0, %wait], [%i1, %again], [%i1, %yld]
  %w = load atomic i64, ptr %ctl acquire, align 8
  %idw = lshr i64 %w, 32
  %new = icmp ne i64 %idw, %last
  br i1 %new, label %got, label %more
more:
  %i1 = add i64 %i, 1
  %k = and i64 %i1, 63
  %check = icmp eq i64 %k, 0
  br i1 %check, label %yld, label %again
again:
  call void @pause()
  br label %spinning
yld:
  %y = call i32 @sched_yield()
  %t = call i64 @now(ptr %ctl)
  %dt = sub i64 %t, %t0
  %tired = icmp sge i64 %dt, %spin
  br i1 %tired, label %sleep, label %spinning
sleep:
  %l = call i32 @pthread_mutex_lock(ptr %mu)
  %a = atomicrmw add ptr %psl, i64 1 seq_cst
  br label %sleeping
sleeping:
  %ws = load atomic i64, ptr %ctl seq_cst, align 8
  %ids = lshr i64 %ws, 32
  %news = icmp ne i64 %ids, %last
  br i1 %news, label %woke, label %waitcv
waitcv:
  %cw = call i32 @pthread_cond_wait(ptr %cv, ptr %mu)
  br label %sleeping
woke:
  %b = atomicrmw sub ptr %psl, i64 1 seq_cst
  %u = call i32 @pthread_mutex_unlock(ptr %mu)
  br label %got
got:
  %id = phi i64 [%idw, %spinning], [%ids, %woke]
  KEEP_OFF
  %act = load i32, ptr %pact, align 4
  %act64 = sext i32 %act to i64
  %mine = icmp slt i64 %idx, %act64
  br i1 %mine, label %help, label %wait
help:
  call void @run_chunks(ptr %ctl)
  br label %wait
}

; post a job of %n chunks over [%start, %end) for %active workers, wake those asleep, run chunks too (unless %help is
; 0: the calibration's) and wait until every chunk is done (yielding the core every 64 pauses: to a worker that
; shares it)
define void @dispatch(ptr %ctl, ptr %thunk, ptr %fn, i32 %start, i32 %end, i32 %n, i32 %active, i32 %help) {
entry:
  %pth = getelementptr i8, ptr %ctl, i64 128
  store ptr %thunk, ptr %pth, align 8
  %pfn = getelementptr i8, ptr %ctl, i64 136
  store ptr %fn, ptr %pfn, align 8
  %args = getelementptr i8, ptr %ctl, i64 640
  %pa = getelementptr i8, ptr %ctl, i64 144
  CALLER_CPU
  store ptr %args, ptr %pa, align 8
  %ps = getelementptr i8, ptr %ctl, i64 152
  store i32 %start, ptr %ps, align 4
  %pe = getelementptr i8, ptr %ctl, i64 156
  store i32 %end, ptr %pe, align 4
  %pact = getelementptr i8, ptr %ctl, i64 160
  store i32 %active, ptr %pact, align 4
  %pd = getelementptr i8, ptr %ctl, i64 64
  store atomic i64 0, ptr %pd monotonic, align 8
  %w = load atomic i64, ptr %ctl monotonic, align 8
  %id = lshr i64 %w, 32
  %id1 = add i64 %id, 1
  %idsh = shl i64 %id1, 32
  %n64 = zext i32 %n to i64
  %nsh = shl i64 %n64, 16
  %job = or i64 %idsh, %nsh
  store atomic i64 %job, ptr %ctl seq_cst, align 8
  %psl = getelementptr i8, ptr %ctl, i64 192
  %sl = load atomic i64, ptr %psl seq_cst, align 8
  %asleep = icmp ne i64 %sl, 0
  br i1 %asleep, label %wake, label %go
wake:
  %mu = getelementptr i8, ptr %ctl, i64 256
  %cv = getelementptr i8, ptr %ctl, i64 384
  %l = call i32 @pthread_mutex_lock(ptr %mu)
  %b = call i32 @pthread_cond_broadcast(ptr %cv)
  %u = call i32 @pthread_mutex_unlock(ptr %mu)
  br label %go
go:
  %h = icmp ne i32 %help, 0
  br i1 %h, label %work, label %join
work:
  call void @run_chunks(ptr %ctl)
  br label %join
join:
  %i = phi i64 [0, %go], [0, %work], [%i1, %waiting], [%i1, %yld]
  %d = load atomic i64, ptr %pd acquire, align 8
  %fin = icmp uge i64 %d, %n64
  br i1 %fin, label %out, label %waiting
waiting:
  call void @pause()
  %i1 = add i64 %i, 1
  %k = and i64 %i1, 63
  %yield = icmp eq i64 %k, 0
  br i1 %yield, label %yld, label %join
yld:
  %y = call i32 @sched_yield()
  br label %join
out:
  ret void
}
'''

# Linux: a worker woken from its sleep may be placed on the CPU of the thread that woke it (a KVM guest takes an idle
# vCPU the host descheduled for a busy one), where it waits until the caller's chunks are done: no split at all (a
# 720 us launch, one thread's 690, after 50 ms idle on this box). The caller notes its CPU with each job; a worker on
# it takes that CPU out of its affinity (the others the process may use stay), which moves it at once.
_KEEP_OFF_IR = r'''
declare i32 @sched_getcpu()
declare i32 @sched_setaffinity(i32, i64, ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
define void @keep_off_caller(ptr %ctl, ptr %arg) {
entry:
  %pon = getelementptr i8, ptr %ctl, i64 216
  %on = load i32, ptr %pon, align 4
  %enabled = icmp ne i32 %on, 0
  br i1 %enabled, label %chk, label %out
chk:
  %me = call i32 @sched_getcpu()
  %pmc = getelementptr i8, ptr %ctl, i64 212
  %mc = load atomic i32, ptr %pmc monotonic, align 4
  %same = icmp eq i32 %me, %mc
  %inmask = icmp ult i32 %mc, 1024
  %move = and i1 %same, %inmask
  br i1 %move, label %off, label %out
off:
  %mask = getelementptr i8, ptr %arg, i64 24
  %allowed = getelementptr i8, ptr %ctl, i64 512
  call void @llvm.memcpy.p0.p0.i64(ptr %mask, ptr %allowed, i64 128, i1 false)
  %wi = lshr i32 %mc, 6
  %wi64 = zext i32 %wi to i64
  %pw = getelementptr i64, ptr %mask, i64 %wi64
  %word = load i64, ptr %pw, align 8
  %b = and i32 %mc, 63
  %b64 = zext i32 %b to i64
  %bit = shl i64 1, %b64
  %nbit = xor i64 %bit, -1
  %word2 = and i64 %word, %nbit
  store i64 %word2, ptr %pw, align 8
  %r = call i32 @sched_setaffinity(i32 0, i64 128, ptr %mask)
  br label %out
out:
  ret void
}
'''
_KEEP_OFF = ('  %mc = call i32 @sched_getcpu()\n  %pmc = getelementptr i8, ptr %ctl, i64 212\n  store atomic i32 %mc, ptr %pmc monotonic, align 4',
             '  call void @keep_off_caller(ptr %ctl, ptr %arg)')

_PAUSE = {'x86_64': ('declare void @llvm.x86.sse2.pause()', 'call void @llvm.x86.sse2.pause()'),
          'aarch64': ('declare void @llvm.aarch64.hint(i32)', 'call void @llvm.aarch64.hint(i32 1)')}  # (others: a bare spin)
CHUNKS = 16         # chunks per thread a split launch is cut into: a thread slowed by another process takes fewer
PROBES = 3          # timed launches of each way (one thread, split) before a kernel settles
STALLS = 3          # split launches slower than one thread before a kernel times both ways again

def _split_ir(k: int) -> str:
  """For kernels of k buffers: @thunk<k>(kernel, args, start, end) calls the kernel with the k pointers at args, and
  @split<k>(ctl, kernel, ptr x k, start, end, chunks, workers) stores them in the control block and dispatches."""
  ps = ''.join(f"  %q{i} = getelementptr i8, ptr %args, i64 {8 * i}\n  %a{i} = load ptr, ptr %q{i}, align 8\n" for i in range(k))
  st = ''.join(f"  %q{i} = getelementptr i8, ptr %ctl, i64 {_CTL + 8 * i}\n  store ptr %a{i}, ptr %q{i}, align 8\n" for i in range(k))
  av = ''.join(f"ptr %a{i}, " for i in range(k))
  return (f"declare void @dispatch(ptr, ptr, ptr, i32, i32, i32, i32, i32)\n"
          f"define void @thunk{k}(ptr %fn, ptr %args, i32 %s, i32 %e) {{\n{ps}  call void %fn({av}i32 %s, i32 %e)\n  ret void\n}}\n"
          f"define void @split{k}(ptr %ctl, ptr %fn, {av}i32 %s, i32 %e, i32 %n, i32 %w) {{\n{st}"
          f"  call void @dispatch(ptr %ctl, ptr @thunk{k}, ptr %fn, i32 %s, i32 %e, i32 %n, i32 %w, i32 1)\n  ret void\n}}\n")


class _Pool:
  """The worker threads of split launches (pthreads running @worker: no Python, no GIL), their control block, and
  what the machine showed at start: `wake_s` (the seconds a job takes to reach a sleeping worker and come back done),
  `post_s` (those a split launch of nothing costs the caller while the workers spin) and from them `breakeven`."""
  def __init__(self):
    import llvmlite.binding as llvm, platform
    tm = _target_machine()
    decl, call = _PAUSE.get(platform.machine().lower().replace('arm64', 'aarch64'), ('', ''))
    linux = sys.platform.startswith('linux') and len(os.sched_getaffinity(0)) > 1
    ir = _POOL_IR.replace('PAUSE', call).replace('CALLER_CPU', _KEEP_OFF[0] if linux else '').replace('KEEP_OFF', _KEEP_OFF[1] if linux else '')
    mod = llvm.parse_assembly(decl + ir + (_KEEP_OFF_IR if linux else '')); mod.verify()
    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)  # (not optimised: spins, atomics and calls, as written)
    self.ee = llvm.create_mcjit_compiler(mod, tm); self.ee.finalize_object(); _engines.append(self.ee)
    self._mem = ctypes.create_string_buffer(_CTL + 8 * MAX_ARGS + 64)  # (alive as long as the pool: the workers read it)
    self.ctl = (ctypes.addressof(self._mem) + 63) & ~63  # the job word and the done count on cache lines of their own
    self.libc = libc = ctypes.CDLL(None)
    for f, n in (('pthread_mutex_init', 2), ('pthread_cond_init', 2), ('pthread_create', 4), ('pthread_detach', 1)): getattr(libc, f).argtypes = [ctypes.c_void_p] * n
    if libc.pthread_mutex_init(self.ctl + 256, None) or libc.pthread_cond_init(self.ctl + 384, None): raise OSError("pthread init failed")
    addr = self.ee.get_function_address
    self.dispatch = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int32] * 5)(addr('dispatch'))
    self.noop = addr('noop')
    self.workers, self._args, self.splits, self.lock = 0, [], {}, threading.Lock()
    ctypes.c_int32.from_address(self.ctl + 208).value = getattr(time, 'CLOCK_MONOTONIC', 1)
    if linux:
      mask = (ctypes.c_uint64 * 16).from_address(self.ctl + 512)
      for c in os.sched_getaffinity(0):
        if c < 1024: mask[c // 64] |= 1 << (c % 64)
      ctypes.c_int32.from_address(self.ctl + 216).value = 1
    self.grow(max(threads() - 1, 1))
    if not self.workers: raise OSError("no worker thread could start")  # (the calibration below waits for one)
    # what a hand-off costs here, at best (load from other processes only adds): a sleeping worker's round trip (an
    # empty job it alone runs; the workers sleep at once with no spin), an empty split launch's while they spin
    wake, post = [], []
    for _ in range(5):
      time.sleep(2e-4)
      t = time.perf_counter(); self.wake(True); wake.append(time.perf_counter() - t)
    ctypes.c_int64.from_address(self.ctl + 200).value = int(SPIN_S * 1e9)
    for _ in range(5):
      t = time.perf_counter(); self.dispatch(self.ctl, self.noop, None, 0, 2, 2, 1, 1); post.append(time.perf_counter() - t)
    self.wake_s, self.post_s = min(wake), min(post)
    # a split launch must pay even where the worker is asleep (a call wakes them at its start, but the first split
    # launch may come sooner, or after a long one-thread stretch): the caller's share outlasts the wake-up,
    # t1 > wake + (t1 - wake) / 2 + twice the hand-off. Below that a kernel is not timed split at all.
    self.breakeven = self.wake_s + 2 * self.post_s

  def wake(self, wait: bool = False) -> None:
    """Wake the workers (they spin for SPIN_S after): with `wait`, until one has run a job (an empty one)."""
    if self.lock.acquire(False):
      try: self.dispatch(self.ctl, self.noop, None, 0, 1, 1, self.workers, 0 if wait else 1)
      finally: self.lock.release()

  def grow(self, n: int) -> None:
    """At least n worker threads."""
    while self.workers < n:
      # (then a cpu_set_t, keep_off_caller's; no job is posted meanwhile: the caller holds the pool)
      arg = (ctypes.c_int64 * 19)(self.ctl, self.workers, ctypes.c_uint64.from_address(self.ctl).value >> 32)
      tid = ctypes.c_void_p()
      if self.libc.pthread_create(ctypes.byref(tid), None, self.ee.get_function_address('worker'), arg): break
      self.libc.pthread_detach(tid)
      self._args.append(arg); self.workers += 1

  def split_fn(self, k: int):
    """@split<k> as a ctypes function (compiled on first use for each number of buffers)."""
    f = self.splits.get(k)
    if f is None:
      import llvmlite.binding as llvm
      tm = _target_machine()
      with _lock:
        mod = llvm.parse_assembly(_split_ir(k)); mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
        self.ee.add_module(mod); self.ee.finalize_object()
      f = self.splits[k] = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (k + 2), *[ctypes.c_int32] * 4)(self.ee.get_function_address(f"split{k}"))
    return f


_pool = None  # the _Pool, once a launch is timed for splitting; False where one could not start
_pool_lock = threading.Lock()

def pool() -> _Pool | None:
  global _pool
  if _pool is None:
    with _pool_lock:
      if _pool is None:
        try: _pool = _Pool()
        except Exception: _pool = False  # (no pthreads, a JIT without atomics): launches run on one thread
  return _pool or None

def _forget_pool() -> None:
  global _pool
  _pool = None  # a forked child has no workers: a new pool on its first split

if hasattr(os, 'register_at_fork'): os.register_at_fork(after_in_child=_forget_pool)


class HostKernelProgram(Program):
  """A kernel compiled to host code `_cfn(*pointers, start, end)` (at `addr`) that loops over gidx0 in [start, end)
  itself (the CPU's LLVM and the C compiler's): launch runs the whole grid, on one thread or split across the cores.

  Which one is measured, not guessed. The first launch runs on one thread, timed, beside an empty launch (what the
  call itself costs): a kernel under four such calls stays on one thread (without starting the pool), and so does one
  under the pool's breakeven (from a split launch's measured hand-off). Any other alternates split and one-thread
  launches, timed, PROBES of each, and keeps split where its best time beats one thread's by a twentieth (less is
  noise, and not worth a second core). The turns are interleaved, so that load from other processes falls on both
  alike, and go call by call alike for every kernel of a call: a call of split turns keeps the workers awake as a
  call of split kernels does. `split` is None until then, False or True after; settling bumps
  Program.launcher_epoch, so that host schedules take the settled launcher (no timing left on a one-thread launch)."""
  _cfn = None
  addr = 0
  def __init__(self, device, fn, info: tuple | None = None):
    super().__init__(device, fn, info)
    self.split = False if self.global_size[0] < 2 or len(self.signature) > MAX_ARGS else None
    self.times: tuple[list, list] = ([], [])  # (seconds on one thread, seconds split) of the timed launches
    self.stalls = 0  # split launches slower than one thread by half (a worker descheduled mid-chunk): see _split

  def launch(self, args, start: int = 0, end: int | None = None) -> None:
    """Run every point of the grid (or gidx0 in [start, end) only)."""
    g0 = self.global_size[0]
    end = g0 if end is None else end
    if not 0 <= start <= end <= g0: raise TgcError(f"@{self.name}: gidx0 range [{start}, {end}) is outside [0, {g0})")
    if self.split is None and end - start == g0: self._timed(args)
    elif self.split: self._split(args) if end - start == g0 else self._run_split(args, start, end)
    else: self._cfn(*args, start, end)

  def _run_split(self, args, start: int, end: int) -> None:
    p, n = pool(), threads()
    if p is None or n < 2 or end - start < 2 or not p.lock.acquire(False): return self._cfn(*args, start, end)  # (another thread's split launch: this one runs alone)
    try:
      if p.workers < n - 1: p.grow(n - 1)
      if not self.addr: self.addr = ctypes.cast(self._cfn, ctypes.c_void_p).value  # (a C library's function)
      p.split_fn(len(args))(p.ctl, self.addr, *args, start, end, min(end - start, CHUNKS * n, 65535), min(n - 1, p.workers))
    finally: p.lock.release()

  def _timed(self, args) -> None:
    """A launch of the settling (see the class): on one thread or split, in turn, timed."""
    g0, (one, split), cfn, clock = self.global_size[0], self.times, self._cfn, time.perf_counter
    if threads() < 2: return cfn(*args, 0, g0)  # (CPU_THREADS=1: nothing to compare)
    if len(one) <= len(split):
      t = clock(); cfn(*args, 0, g0); one.append(clock() - t)
      if len(one) == 1:
        t = clock(); cfn(*args, 0, 0); call = clock() - t
        if one[0] < 4 * call or pool() is None or one[0] < pool().breakeven: self._settle(False)
    else:
      pool().split_fn(len(args))  # (compiled on first use for so many buffers: not timed)
      t = clock(); self._run_split(args, 0, g0); split.append(clock() - t)
      # split where it wins at the median too, not only at its best: on cores other jobs share, a split launch often
      # waits a time slice for a worker, which a lucky probe does not show (one[0]: the best, for _split)
      if len(split) == PROBES: one.sort(); self._settle(min(split) < 0.95 * one[0] and sorted(split)[PROBES // 2] < 0.95 * one[PROBES // 2])

  def _settle(self, split: bool | None) -> None:
    self.split = split
    Program.launcher_epoch += 1

  def _split(self, args) -> None:
    """A settled split launch, timed: a worker descheduled in the middle of a chunk (another process took its core)
    holds the caller until it runs again, a time slice; after STALLS launches half as slow again as one thread, the
    kernel times both ways anew (and settles on one thread while the cores stay that busy)."""
    t, one = time.perf_counter(), self.times[0]
    self._run_split(args, 0, self.global_size[0])
    if one and time.perf_counter() - t > 1.5 * one[0]:
      self.stalls += 1
      if self.stalls >= STALLS: self.times, self.stalls = ([], []), 0; self._settle(None)

  def launcher(self):
    cfn, g0 = self._cfn, self.global_size[0]
    if self.split is False: return lambda args: cfn(*args, 0, g0)
    return self._timed if self.split is None else self._split


class CPUProgram(HostKernelProgram):
  """One kernel JIT-compiled from LLVM IR: `symbol` (kernel_symbol of its text), its machine code at `addr`."""
  def __init__(self, device, fn, symbol: str, addr: int, info: tuple | None = None):
    super().__init__(device, fn, info)
    self.symbol, self.addr = symbol, addr
    self._cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(self.signature)), ctypes.c_int32, ctypes.c_int32)(addr)

  def launch(self, args, start: int = 0, end: int | None = None) -> None:
    super().launch(args, start, end)
    stats['launches'] += 1  # (the CPU device's counter: C launches are not its)

  def launcher(self):
    cfn, g0 = self._cfn, self.global_size[0]
    if self.split is False:
      def launch(args):
        cfn(*args, 0, g0); stats['launches'] += 1
      return launch
    f = super().launcher()
    def launch(args):
      f(args); stats['launches'] += 1
    return launch


def compile_llvm_all(device, fns: list, progress=None) -> list[CPUProgram]:
  """uop.funcs -> their compiled programs. Machine code is shared by LLVM IR text (rendered under one symbol, so two
  kernels that differ in name only share it; the text holds everything the code depends on but the grid's gidx0
  range, which each launch passes); the texts not compiled before in this process are rendered and compiled on the
  compile workers (deduplicated: each text once). A program is cached by its name and everything a launch checks or
  runs by: the text, the buffer dtypes (i8 and u8 kernels can share a text), the sizes the buffers are checked
  against, and the grid. `progress`: a workers.Progress to step as kernels finish."""
  from tgc.runtime import workers
  from tgc.profiler import phase
  import tgc.emit.llvm  # noqa: F401  (imported here, before the workers fork: a worker imports nothing)
  st = workers.STATS
  t0 = time.perf_counter()
  if progress is not None: progress.phase('emit', len(fns))
  with phase(f'emit llvm ({len(fns)} kernels)'):  # (a profile's trace)
    srcs = workers.run(_render, len(fns), (fns,), cost=lambda i: len(fns[i].body.ops), min_cost=POOL_MIN_UOPS, done=progress and (lambda i, dt: progress.step()))
  st.emit_per_kernel += [dt for _, dt in srcs]
  from tgc.profiler import record_durations
  record_durations([('emit llvm @' + fn.sym_name, dt) for fn, (_, dt) in zip(fns, srcs)], t0)
  t1 = time.perf_counter(); st.add('emit', t1 - t0)
  keys, texts, infos = [], {}, [launch_info(fn) for fn in fns]
  for (name, sig, sizes, dims, _), (src, _) in zip(infos, srcs):
    sym = kernel_symbol(src); texts[sym] = src
    keys.append((name, sym, tuple(d.name for d in sig), tuple(sorted(sizes.items())), dims))
  with _lock:
    new = [s_ for s_ in texts if s_ not in _code]
    if progress is not None: progress.phase('compile', len(new))
    if new:
      c0 = stats['compiles']
      with phase(f'LLVM jit ({len(new)} new kernels)'): _code.update(zip(new, jit_kernels([texts[s_] for s_ in new], done=progress and (lambda i, dt: progress.step()))))
      st.compiled += stats['compiles'] - c0
    st.add('compile', time.perf_counter() - t1)
    out = []
    for fn, key, info in zip(fns, keys, infos):
      prg = _cache.get(key)
      if prg is not None: stats['cache_hits'] += 1
      else: prg = _cache[key] = CPUProgram(device, fn, key[1], _code[key[1]], info)
      out.append(prg)
    return out


def save_programs(progs: list) -> tuple | None:
  """The machine code of these programs as a function's disk cache entry keeps it (load_programs takes it back): the
  symbols, by kernel, and each distinct symbol's object file (from the kernel disk cache, where compiling put it);
  None where one is not there (the cache off, removed meanwhile, or the kernel compiled by this process under another
  cache directory)."""
  from tgc import cache
  syms = list(dict.fromkeys(p.symbol for p in progs))
  objs = [cache.get('llvm', _disk_keys[s_]) if s_ in _disk_keys else None for s_ in syms]
  if any(o is None for o in objs): return None
  at = {s_: i for i, s_ in enumerate(syms)}
  return {'symbols': syms, 'keys': [_disk_keys[s_] for s_ in syms], 'kernels': [at[p.symbol] for p in progs]}, objs


def build_programs(fns: list) -> tuple:
  """These uop.funcs' object files as save_programs gives them, each text compiled once (or found in the kernel disk
  cache, where it is also stored): what a compile worker hands back."""
  from tgc import cache
  from tgc.runtime import workers
  st, texts = workers.STATS, []
  for i in range(len(fns)):
    t, dt = _render(i, fns)
    texts.append(t); st.emit_per_kernel.append(dt); st.add('emit', dt)
  c0 = time.process_time()
  text_of = {kernel_symbol(t): t for t in texts}  # (distinct texts, in order of first use)
  at = {s_: i for i, s_ in enumerate(text_of)}
  keys, objs = [cache.key(t, codegen_id()) for t in text_of.values()], []
  for t, k in zip(text_of.values(), keys):
    o = cache.get('llvm', k)
    if o is None: o = compile_object(t); cache.put('llvm', k, o)
    objs.append(o)
  st.add('compile', time.process_time() - c0)
  return {'symbols': list(text_of), 'keys': keys, 'kernels': [at[kernel_symbol(t)] for t in texts]}, objs


def load_programs(device, fns: list, infos: list, meta: dict, blobs: list) -> list:
  """save_programs' machine code back into programs (`fns`: the uop.funcs, or what makes them; `infos`: their
  launch_info): the object files not loaded in this process yet are loaded into one engine. (Their keys in the kernel
  disk cache come along: this process saves them again for another CPU device, CompiledFunction.on_device.)"""
  syms, keys, which = meta['symbols'], meta['keys'], meta['kernels']
  if len(blobs) != len(syms) or len(keys) != len(syms) or len(which) != len(fns) or not all(isinstance(j, int) and 0 <= j < len(syms) for j in which):
    raise TgcError("a cached function's machine code does not match its kernels")
  with _lock:
    new = [i for i, s_ in enumerate(syms) if s_ not in _code]
    if new: _code.update(zip([syms[i] for i in new], load_objects([blobs[i] for i in new], [syms[i] for i in new])))
    stats['disk_hits'] += len(new)
    _disk_keys.update(zip(syms, keys))
    return [CPUProgram(device, fn, syms[j], _code[syms[j]], info) for fn, info, j in zip(fns, infos, which)]

def _render(i: int, fns: list) -> tuple[str, float]:
  from tgc.emit.llvm import render_llvm
  t = time.process_time()
  return render_llvm(fns[i], SYMBOL), time.process_time() - t


def compile_llvm(device, fn) -> CPUProgram:
  """A uop.func -> its compiled program (compile_llvm_all of one)."""
  return compile_llvm_all(device, [fn])[0]


class HostPointerAllocator(HostAllocator):
  """Host memory whose launch argument is its address (the kernels take raw pointers)."""
  def _arg(self, handle):
    # every allocation asks: ndarray.ctypes.data costs 0.8 us (it makes a helper object), this 0.15
    try: return _addressof(_char_at(handle))
    except (TypeError, ValueError): return handle.ctypes.data  # a read-only or empty array


def batch_launcher(calls: list, nslots: int, fixed: dict, var: tuple):
  """One native function that runs kernels one after another on this thread, as one call from Python: `calls` are
  (program, the slots of its buffers) of settled one-thread CPUPrograms, the slots numbered in an array of nslots
  pointers that holds `fixed` ({slot: address}) for good. The launcher it returns takes the addresses of the `var`
  slots (a call's arguments and results), in that order."""
  import llvmlite.binding as llvm
  tm = _target_machine()
  used = sorted({s_ for _, idx in calls for s_ in idx})
  body = [f"  %p{s_} = getelementptr ptr, ptr %env, i64 {s_}\n  %s{s_} = load ptr, ptr %p{s_}, align 8" for s_ in used]
  for i, (prg, idx) in enumerate(calls):
    body.append(f"  %f{i} = inttoptr i64 {prg.addr} to ptr\n  call void %f{i}({''.join(f'ptr %s{s_}, ' for s_ in idx)}i32 0, i32 {prg.global_size[0]})")
  ir = "define void @batch(ptr %env) {\n" + "\n".join(body) + "\n  ret void\n}\n"
  with _lock:
    mod = llvm.parse_assembly(ir); mod.verify()
    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
    ee = llvm.create_mcjit_compiler(mod, tm); ee.finalize_object(); _engines.append(ee)
  fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ee.get_function_address('batch'))
  env = (ctypes.c_void_p * max(nslots, 1))()
  for s_, a in fixed.items(): env[s_] = a
  n = len(calls)
  def launch(vals):
    for s_, a in zip(var, vals): env[s_] = a
    fn(env); stats['launches'] += n
  return launch


class CPUDevice(HostDevice):
  """The default device: LLVM through llvmlite's MCJIT on the host CPU. compile() returns the cached program."""
  name, target = 'CPU', 'llvm'
  def __init__(self): BaseDevice.__init__(self, HostPointerAllocator(self.name))
  def compile(self, fn) -> CPUProgram: return compile_llvm(self, fn)
  def compile_all(self, fns: list, progress=None) -> list[CPUProgram]: return compile_llvm_all(self, fns, progress)
  saves_programs = True
  def binary_id(self) -> str: return codegen_id()
  def save_programs(self, progs: list): return save_programs(progs)
  def build_programs(self, fns) -> tuple: return build_programs(fns)
  def load_programs(self, fns, infos, meta, blobs) -> list[CPUProgram]: return load_programs(self, fns, infos, meta, blobs)
  def batchable(self, p) -> bool:
    """Whether program p runs on one thread (settled so, or every launch while CPU_THREADS=1): a batch may take it."""
    return isinstance(p, CPUProgram) and (p.split is False or (p.split is None and threads() < 2))
  def batch_launcher(self, calls, nslots, fixed, var):
    """A launcher of several one-thread kernels (batchable) as one native call (see batch_launcher)."""
    return batch_launcher(calls, nslots, fixed, var) if all(self.batchable(p) for p, _ in calls) else None
  def wake_workers(self) -> None:
    """A call with split launches starts: wake the pool's workers now, so that they spin by its first split launch
    (a sleeping worker takes a wake-up to join; one that slept long, on a virtual machine, much longer)."""
    if _pool: _pool.wake()
  @property
  def launches(self) -> int: return stats['launches']
