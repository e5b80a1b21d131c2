"""Targets: one frozen description per backend language, registered once by name.

A Target is what passes, emitters and kernel-opt's search ask about a backend: whether it is a CPU or a GPU
language, the widest vector kernel-opt makes, whether vector memory accesses need aligned addresses, its
work-group limits, its tensor cores, the choices lower-to-uop makes for it, the emitter that renders it and the
runtime device that measures it. Pass options name a target (`linearize{target=cuda}`); the names valid there
are the registry's. A device (tgc/runtime) names the target it runs, and says itself when it is another kind of
processor than the language's own (an OpenCL device on a CPU: kernel-opt{processor=cpu}).

This module imports nothing of tgc but its errors: dialects, passes and emitters all read it.
"""
from __future__ import annotations
from dataclasses import dataclass
from tgc.errors import TgcError


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


@dataclass(frozen=True)
class Target:
  """A backend language: its facts, and the choices the lowering pipeline makes for it."""
  name: str
  processor: str                  # 'cpu' | 'gpu': the kind of processor the language is for
  renderer: str                   # "module:function" taking a Module, returning source text; imported when used
  max_upcast: int                 # the widest vector (lanes) kernel-opt makes (on a CPU: at most the CPU's register)
  aligned_vectors: bool = False   # vector loads and stores need addresses aligned to the vector (float4 on CUDA, Metal)
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


register_target(Target('llvm', 'cpu', 'tgc.emit.llvm:render_llvm_module', max_upcast=16, pack_matmul=True,
                       transcendentals='exp2+log2', fp_contract=True, device='CPU'))  # polynomials vectorise, libm calls do not
register_target(Target('c', 'cpu', 'tgc.emit.c:render_c', max_upcast=8, pack_matmul=True, fp_contract=True, device='C'))
# (16 bytes is its widest memory access: a float4, 8 halfs; a wider vector is split into such chunks)
register_target(Target('cuda', 'gpu', 'tgc.emit.cuda:render_cuda', max_upcast=8, max_vector_bytes=16, aligned_vectors=True, max_threads=256,
                       local_memory=48 << 10, local_memory_optin=227 << 10, devectorize=8, device='CUDA', fp_contract=True, async_copy=True, warp_size=32,
                       tensor_cores=TensorCores((16, 8, 16), (8, 4, 4), (('f16', 'f32'), ('f16', 'f16'), ('bf16', 'f32')), ldmatrix=True, warpgroup=True)))  # mma.sync m16n8k16, wgmma
# (PoCL's OpenCL C builtins are built for 256-bit vectors: on an AVX-512 host, an AMD EPYC here, a float16 vload or
# sqrt and a double8 vstore abort its LLVM ("Do not know how to scalarize this operator's operand"))
register_target(Target('opencl', 'gpu', 'tgc.emit.opencl:render_opencl', max_upcast=4, max_threads=256, local_memory=32 << 10,
                       device='OPENCL', max_vector_bytes=32))
register_target(Target('metal', 'gpu', 'tgc.emit.metal:render_metal', max_upcast=4, aligned_vectors=True, max_threads=256,
                       local_memory=32 << 10, devectorize=4))  # no device here: emission only


__all__ = ['Target', 'TensorCores', 'TARGETS', 'register_target', 'get_target', 'tensor_core_targets']
