"""Targets: one frozen description per backend language, registered once by name.

A Target is what passes, emitters and kernel-opt's search ask about a backend: whether it is a CPU or a GPU
language, the widest vector kernel-opt makes, whether vector memory accesses need aligned addresses, its
work-group limits, its tensor cores, the choices lower-to-uop makes for it, the emitter that renders it and the
runtime device that measures it. Pass options name a target (`linearize{target=cuda}`); the names valid there
are the registry's. A device (tgc/runtime) names the target it runs and declares what it has beyond the language:
a DeviceSpec, the one object the lowering asks every device question (another kind of processor than the language's
own: an OpenCL device on a CPU; its shared memory; whether it has warpgroup tensor cores; the CPU whose registers
fit; whether f32 products may use TF32 tensor cores). A DeviceSpec travels in pipeline text as pass options
(`kernel-opt{target=opencl processor=cpu}`, `linearize{target=cuda tf32=true}`), so a pipeline printed from a run
replays it.

The float32 matmul precision (set_float32_matmul_precision, as torch's) is a switch of the user's that reaches the
lowering through the DeviceSpec: 'highest' (the default) keeps f32 products exact; 'high' lets a device whose tensor
cores multiply TF32 (10-bit mantissas, f32 sums: CUDA's sm_80 and later) compute f32 matmuls and convs on them. A
device's spec takes it when it is made (BaseDevice.spec), so it is part of every compile and cache key; other targets
ignore it.

This module imports nothing of tgc but its errors: dialects, passes and emitters all read it.
"""
from __future__ import annotations
import os
from dataclasses import dataclass, fields, replace
from tgc.errors import TgcError, ArgumentError


@dataclass(frozen=True)
class TensorCores:
  """A tensor-core instruction, as kernel-opt's TC action and the emitters know it: the (m, n, k) tile, the lanes
  of the a, b and c fragments each thread of a warp holds, and the (input, accumulator) dtype names it takes."""
  dims: tuple[int, int, int]
  lanes: tuple[int, int, int]
  dtypes: tuple[tuple[str, str], ...]
  ldmatrix: bool = False  # fragments of a staged (shared-memory) tile come from one uop.ldmatrix a fragment
  warpgroup: bool = False  # tc with amount 1: a warpgroup's 64xNx16 from shared memory (uop.wgmma: Hopper's wgmma,
                           # on the newest architecture the target knows; a device says whether it has them)
  tf32: bool = False       # f32 factors summed in f32 as TF32 (mma.sync m16n8k8 .tf32, two a 16-deep step), where the
                           # device's spec allows it (DeviceSpec.tf32: the float32 matmul precision 'high')


@dataclass(frozen=True)
class FusedAttention:
  """A target's fused attention kernel (tensor.attention as one kernel: the scores and probabilities never leave the
  chip): the dtype names and head sizes (q's and v's last axis, the same) it takes, and the work-groups it comes in,
  (rows, threads): a work-group takes `rows` queries of one head. Its shared memory holds its queries' tile and two
  buffers each of `key_rows`-key tiles of k and v (three on warpgroups, whose products run on while the next tile's
  copies land), rows of head-size elements."""
  dtypes: tuple[str, ...]
  head_dims: tuple[int, ...]
  blocks: tuple[tuple[int, int], ...]
  key_rows: int = 64
  grad_head_dims: tuple[int, ...] = ()  # the head sizes its backward kernels take (dq; dk and dv): 64 rows of 128
                                        # threads, its six tiles in shared memory

  def smem_bytes(self, rows: int, head_dim: int, itemsize: int, warpgroup: bool = False) -> int:
    return (rows + 2 * self.kv_slots(warpgroup) * self.key_rows) * head_dim * itemsize
  @staticmethod
  def kv_slots(warpgroup: bool) -> int: return 3 if warpgroup else 2  # (uop.attention's smem holds as many of each)
  def blocks_for(self, head_dim: int, itemsize: int, smem: int, warpgroup: bool = False) -> list[tuple[int, int]]:
    """The work-groups (rows, threads) whose tiles fit in `smem` bytes."""
    return [(r, t) for r, t in self.blocks if self.smem_bytes(r, head_dim, itemsize, warpgroup) <= smem]


@dataclass(frozen=True)
class Target:
  """A backend language: its facts, and the choices the lowering pipeline makes for it."""
  name: str
  processor: str                  # 'cpu' | 'gpu': the kind of processor the language is for
  renderer: str                   # "module:function" taking a Module, returning source text; imported when used
  max_upcast: int                 # the widest vector (lanes) kernel-opt makes (on a CPU: at most the CPU's register)
  aligned_vectors: bool = False   # vector loads and stores need addresses aligned to the vector (float4 on CUDA, Metal)
  masked_vectors: bool = False    # a vector load or store takes a gate a lane (AVX-512's and AVX2's masked moves): an
                                  # axis padded to whole vectors (PADTO) is read and written a vector at a time
  max_threads: int = 1            # the work-group size kernel-opt stays within (1: no work-groups)
  local_memory: int = 0           # bytes of shared memory a work-group may hold
  local_memory_optin: int = 0     # bytes it may hold by asking at launch (CUDA's opt-in dynamic shared memory, on the
                                  # newest architecture the target knows; a device checks its own limit at launch)
  tensor_cores: TensorCores | None = None
  pack_matmul: bool = False       # tensor-decompose{pack=true}: big matmuls read their right operand in panels
  transcendentals: str = ''       # decompose-transcendentals{ops=...} in the optimised pipeline ('': none)
  devectorize: int = 0            # devectorize{width=N}: split vectors wider than N (0: none)
  fp_contract: bool = False       # optimised kernels are marked `contract`: mul+add may fuse into fma
  async_copy: bool = False        # uop.copy_async: SMEM's stages fill shared memory without holding registers
  device: str | None = None       # the runtime device kernel-opt's search times candidates on (None: no search)
  max_vector_bytes: int = 0       # the widest vector kernel-opt makes, in bytes, whatever the device (0: no cap)
  warp_size: int = 0              # threads of a warp that exchange registers (uop.shuffle_xor: GROUP's partials meet
                                  # in registers, then once in shared memory); 0: no shuffles
  shuffle_bytes: tuple = (4, 8)   # the sizes of the values a shuffle exchanges (others meet in shared memory alone)
  attention: FusedAttention | None = None  # the fused attention kernel its emitter writes (None: attention decomposes)
  max_grid: tuple = ()            # the most work-groups a launch takes along grid dim 0, 1, 2 (the last given: the rest);
                                  # (): no limit but a launch's 2**31 - 1

  def __post_init__(self):
    if self.processor not in ('cpu', 'gpu'): raise TgcError(f"target '{self.name}': processor must be cpu or gpu, got '{self.processor}'")

  @property
  def is_cpu(self) -> bool: return self.processor == 'cpu'
  @property
  def max_local_memory(self) -> int: return max(self.local_memory, self.local_memory_optin)

  def upcast(self, processor: str = 'auto', cpu_lanes: int = 16, itemsize: int = 4) -> int:
    """The widest vector for a device of that kind (auto: the language's own): on a CPU, one of its vector
    registers (`cpu_lanes`, from tgc.host), at most what a CPU language itself makes; a GPU language on a CPU
    (OpenCL on PoCL) gets the CPU's registers, a CPU language is never asked for a GPU's; never more than
    max_vector_bytes of `itemsize`-byte lanes."""
    lanes = min(cpu_lanes, self.max_upcast) if self.is_cpu else cpu_lanes if processor == 'cpu' else self.max_upcast
    return min(lanes, max(1, self.max_vector_bytes // itemsize)) if self.max_vector_bytes else lanes


TARGETS: dict[str, Target] = {}


def register_target(t: Target) -> Target:
  """Make `t` known by its name (a second registration of a name replaces the first)."""
  TARGETS[t.name] = t
  return t


def get_target(name: str) -> Target:
  """The registered target of that name; a TgcError naming the known ones otherwise."""
  t = TARGETS.get(name)
  if t is None: raise TgcError(f"unknown target '{name}' (known: {', '.join(sorted(TARGETS))})")
  return t


def tensor_core_targets() -> list[Target]:
  """The registered targets that have tensor cores, in registration order."""
  return [t for t in TARGETS.values() if t.tensor_cores is not None]


register_target(Target('llvm', 'cpu', 'tgc.emit.llvm:render_llvm_module', max_upcast=16, pack_matmul=True, masked_vectors=True,
                       transcendentals='exp2+log2', fp_contract=True, device='CPU'))  # polynomials vectorise, libm calls do not
register_target(Target('c', 'cpu', 'tgc.emit.c:render_c', max_upcast=8, pack_matmul=True, fp_contract=True, device='C'))
# (16 bytes is its widest memory access: a float4, 8 halfs; a wider vector is split into such chunks)
register_target(Target('cuda', 'gpu', 'tgc.emit.cuda:render_cuda', max_upcast=8, max_vector_bytes=16, aligned_vectors=True, max_threads=256,
                       local_memory=48 << 10, local_memory_optin=227 << 10, devectorize=8, device='CUDA', fp_contract=True, async_copy=True, warp_size=32, shuffle_bytes=(2, 4, 8),
                       max_grid=(2**31 - 1, 65535, 65535),
                       tensor_cores=TensorCores((16, 8, 16), (8, 4, 4), (('f16', 'f32'), ('f16', 'f16'), ('bf16', 'f32')), ldmatrix=True, warpgroup=True, tf32=True),  # mma.sync m16n8k16, wgmma
                       attention=FusedAttention(('f16', 'bf16'), (64, 128), ((64, 128), (128, 256)), grad_head_dims=(64, 128))))  # (tgc/emit/cuda_attention.py: a warp a 16 rows)
# (PoCL's OpenCL C builtins are built for 256-bit vectors: on an AVX-512 host, an AMD EPYC here, a float16 vload or
# sqrt and a double8 vstore abort its LLVM ("Do not know how to scalarize this operator's operand"))
register_target(Target('opencl', 'gpu', 'tgc.emit.opencl:render_opencl', max_upcast=4, max_threads=256, local_memory=32 << 10,
                       device='OPENCL', max_vector_bytes=32))
register_target(Target('metal', 'gpu', 'tgc.emit.metal:render_metal', max_upcast=4, aligned_vectors=True, max_threads=256,
                       local_memory=32 << 10, devectorize=4))  # no device here: emission only


# the pass options that carry a DeviceSpec (its fields but the device's name), in the order pipeline text writes them
DEVICE_OPTIONS = {'target': (str, 'llvm', 'the target (tgc/target.py): the language, its limits and vector width'),
                  'processor': (str, 'auto', 'the device kind the tiles are chosen for: cpu | gpu | auto (by target; OpenCL on a CPU: cpu)'),
                  'local_memory': (int, 0, "the shared memory a work-group may take, in bytes: the device's (0: the target's default)"),
                  'warpgroup': (bool, True, "the device has warpgroup tensor cores (Hopper's wgmma), where the target does (false: a device without)"),
                  'cpu': (str, 'host', 'the CPU whose registers and cache CPU tiles fit: host (this machine) | avx512 | avx2 | sse | neon'),
                  'processors': (int, 0, "the device's multiprocessors (a GPU's SMs, compute units) that blocks spread over (0: unknown)"),
                  'tf32': (bool, False, "f32 products on the tensor cores as TF32, where the target's take it (the float32 matmul precision 'high')")}


@dataclass(frozen=True)
class DeviceSpec:
  """One device as the lowering sees it, as tinygrad's Renderer: its Target (the language) and the capabilities the
  device declares beyond it. Every device-dependent choice of the lowering asks it; nothing probes a device object.
  A device that does not open here (no GPU) is its target's newest architecture: the defaults."""
  target: Target
  processor: str = 'auto'   # the kind of processor the tiles are for: cpu | gpu | auto (the language's own)
  local_memory: int = 0     # the shared memory a work-group may take on this device, in bytes (0: the target's default)
  warpgroup: bool = True    # the device has the target's warpgroup tensor cores (a CUDA GPU before Hopper has not)
  cpu: str = 'host'         # the CPU whose registers and caches CPU tiles fit (tgc.host: host, or a kind by name)
  processors: int = 0       # the device's multiprocessors that work-groups spread over (a GPU's SMs; 0: unknown)
  device: str | None = None # the runtime device (None: the target's own, Target.device): what search times, binaries run on
  tf32: bool = False        # f32 products may run on the tensor cores as TF32 (where the target's take it: has_tf32)

  @staticmethod
  def of(target: 'str | Target | DeviceSpec', **capabilities) -> 'DeviceSpec':
    """A spec from a target's name, a Target or a spec, with these capabilities (DEVICE_OPTIONS' names) replaced."""
    if isinstance(target, DeviceSpec): return replace(target, **capabilities) if capabilities else target
    return DeviceSpec(target if isinstance(target, Target) else get_target(target), **capabilities)

  @staticmethod
  def from_options(opts: dict) -> 'DeviceSpec':
    """The spec a pass's options carry (a pass's `opts`: the DEVICE_OPTIONS among them; the others are ignored)."""
    return DeviceSpec.of(opts.get('target', 'llvm'), **{k: v for k, v in opts.items() if k in DEVICE_OPTIONS and k != 'target'})

  def options(self) -> str:
    """The spec as pass options text: the target, then the capabilities that differ from the defaults."""
    default = {f.name: f.default for f in fields(self)}
    return ' '.join([f'target={self.target.name}'] + [f'{k}={str(v).lower() if isinstance(v, bool) else v}'
                                                       for k in DEVICE_OPTIONS if k != 'target' and (v := getattr(self, k)) != default[k]])

  def render(self, fns) -> str:
    """These uop.funcs (a Module or a list) as one source text in the target's language: what a runtime compiles."""
    from tgc.emit import render
    return render(fns, self.target)

  @property
  def name(self) -> str: return self.target.name
  @property
  def gpu(self) -> bool:
    """Whether the tiles are a GPU's (register tiles, reductions, loop order); work-groups follow the target."""
    return not self.target.is_cpu if self.processor == 'auto' else self.processor == 'gpu'
  @property
  def has_warpgroup(self) -> bool:
    """The target's warpgroup tensor cores (wgmma), on this device."""
    tc = self.target.tensor_cores
    return tc is not None and tc.warpgroup and self.warpgroup
  @property
  def has_tf32(self) -> bool:
    """f32 products on the target's tensor cores as TF32, on this device (the user asked for it: tf32)."""
    tc = self.target.tensor_cores
    return tc is not None and tc.tf32 and self.tf32
  @property
  def tc_dtypes(self) -> tuple[tuple[str, str], ...]:
    """The (input, accumulator) dtype names the tensor cores multiply on this device: the target's, and f32 into f32
    where has_tf32."""
    tc = self.target.tensor_cores
    return () if tc is None else tc.dtypes + ((('f32', 'f32'),) if self.has_tf32 else ())
  def fused_attention(self, dtype, head_dim: int, value_dim: int) -> bool:
    """Whether this device computes an attention of q/k/v of this dtype (a tgc.ir.dtypes.DType) and these head sizes
    as one kernel: the target's FusedAttention, its tiles within the device's shared memory (what it may ask for)."""
    fa = self.target.attention
    if fa is None or self.processor == 'cpu' or dtype.name not in fa.dtypes or head_dim != value_dim or head_dim not in fa.head_dims: return False
    return bool(fa.blocks_for(head_dim, dtype.itemsize, self.attention_smem, self.has_warpgroup))
  def fused_attention_grad(self, dtype, head_dim: int, value_dim: int) -> bool:
    """Whether this device computes attention's gradients (dq; dk and dv) in the target's fused backward kernels."""
    fa = self.target.attention
    return self.fused_attention(dtype, head_dim, value_dim) and head_dim in fa.grad_head_dims and \
      6 * fa.key_rows * head_dim * dtype.itemsize <= self.attention_smem
  @property
  def attention_smem(self) -> int:
    """The shared memory a fused attention's work-group may ask for at launch on this device."""
    return min(self.local_memory, self.target.max_local_memory) if self.local_memory else self.target.max_local_memory
  @property
  def smem_budget(self) -> int:
    """The shared memory kernel-opt's tiles may take a work-group: the device's, within the target's opt-in limit,
    where the device says; else the target's default."""
    return min(self.local_memory, self.target.max_local_memory) if self.local_memory else self.target.local_memory
  @property
  def runtime_device(self) -> str | None: return self.device or self.target.device


F32_MATMUL_PRECISIONS = ('highest', 'high', 'medium')
_f32_precision = 'high' if os.environ.get('TGC_TF32', '0') not in ('', '0') else 'highest'  # (TGC_TF32=1: 'high' from the start)


def set_float32_matmul_precision(precision: str) -> None:
  """As torch's: 'highest' (the default) computes f32 matmuls and convs in f32; 'high' (and 'medium', which has no
  bf16 form here) lets them run on tensor cores as TF32 where the device has them (CUDA, sm_80 and later): inputs
  rounded to 10-bit mantissas, products summed in f32. Functions compiled from then on take it; one compiled before
  (tgc.compile's, a jit's capture) keeps the precision it was compiled with. TGC_TF32=1 in the environment makes
  'high' the precision a process starts with."""
  global _f32_precision
  if precision not in F32_MATMUL_PRECISIONS:
    raise ArgumentError(f"set_float32_matmul_precision: {precision!r} is not a precision (known: {', '.join(F32_MATMUL_PRECISIONS)})")
  _f32_precision = precision


def get_float32_matmul_precision() -> str:
  """The float32 matmul precision functions are compiled with now: 'highest', 'high' or 'medium'."""
  return _f32_precision


def tf32_matmul(target: 'str | Target | None' = None) -> bool:
  """Whether f32 products may run as TF32: the precision is not 'highest' (and, given a target, its tensor cores take
  TF32: a device's spec takes it only there, so that other targets' pipelines and cache keys stay as they are)."""
  if _f32_precision == 'highest': return False
  tc = None if target is None else (get_target(target) if isinstance(target, str) else target).tensor_cores
  return target is None or (tc is not None and tc.tf32)


__all__ = ['Target', 'TensorCores', 'FusedAttention', 'TARGETS', 'DeviceSpec', 'DEVICE_OPTIONS', 'register_target', 'get_target', 'tensor_core_targets',
           'set_float32_matmul_precision', 'get_float32_matmul_precision', 'tf32_matmul']
