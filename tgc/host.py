"""The CPU a kernel will run on: the facts kernel-opt's CPU tiles are chosen from, read from the machine.

A CPU's register tile (how many rows and vectors of a matmul one loop iteration keeps in registers) is right
for one machine and spills on another: 8 rows of two AVX-512 vectors fill half of 32 zmm registers, the same
tile in AVX2's 16 ymm registers spills every accumulator. So the facts come from the host (LLVM's view of it,
the one its JIT compiles for, and the cache sizes Linux lists in sysfs), never from constants; a pipeline can
name a kind of CPU instead (`kernel-opt{cpu=avx2}`), which makes its output the same on every machine (lit tests).

This module imports nothing of tgc but its errors.
"""
from __future__ import annotations
import functools, glob, os
from dataclasses import dataclass
from tgc.errors import TgcError


@dataclass(frozen=True)
class CPUFacts:
  """What kernel-opt asks of a CPU: the bytes of one vector register, how many there are, and a core's L2."""
  vector_bytes: int
  vector_registers: int
  l2_bytes: int

  def lanes(self, itemsize: int = 4) -> int: return max(1, self.vector_bytes // itemsize)


# kinds of CPU a pipeline may name (cpu=...), so that its tiles do not depend on the machine it runs on
CPU_KINDS = {'avx512': CPUFacts(64, 32, 1 << 20), 'avx2': CPUFacts(32, 16, 512 << 10), 'sse': CPUFacts(16, 16, 256 << 10),
             'neon': CPUFacts(16, 32, 1 << 20)}


def _l2_bytes(default: int) -> int:
  """A core's L2 cache from sysfs (Linux); `default` where it is not listed."""
  for d in sorted(glob.glob('/sys/devices/system/cpu/cpu0/cache/index*')):
    try:
      if open(os.path.join(d, 'level')).read().strip() != '2': continue
      s = open(os.path.join(d, 'size')).read().strip().upper()
      return int(s[:-1]) << {'K': 10, 'M': 20, 'G': 30}[s[-1]] if s[-1] in 'KMG' else int(s)
    except (OSError, ValueError): continue
  return default


@functools.cache
def host_cpu() -> CPUFacts:
  """The facts of the machine this process runs on (read once)."""
  import llvmlite.binding as llvm
  feats = {k for k, v in llvm.get_host_cpu_features().items() if v}
  if 'avx512f' in feats: kind = CPU_KINDS['avx512']
  elif 'avx' in feats: kind = CPU_KINDS['avx2']
  elif 'neon' in feats or 'asimd' in feats or llvm.get_process_triple().startswith(('aarch64', 'arm64')): kind = CPU_KINDS['neon']
  else: kind = CPU_KINDS['sse']
  return CPUFacts(kind.vector_bytes, kind.vector_registers, _l2_bytes(kind.l2_bytes))


def cpu_facts(name: str) -> CPUFacts:
  """`host` (this machine) or a kind of CPU by name; a TgcError naming the known ones otherwise."""
  if name == 'host': return host_cpu()
  if name not in CPU_KINDS: raise TgcError(f"unknown cpu '{name}' (known: host, {', '.join(CPU_KINDS)})")
  return CPU_KINDS[name]


__all__ = ['CPUFacts', 'CPU_KINDS', 'host_cpu', 'cpu_facts']
