"""Named pipelines: `lower-to-uop` is the whole way from the tensor level to an optimised uop level,
with a target's choices; `lower-to-uop{noopt=true}` leaves kernel-opt out (NOOPT=1). The Python API and
the tools all run the one pipeline lower_to_uop_steps builds."""
from __future__ import annotations
import os
from tgc.passes.manager import Pass, parse_pipeline
from tgc.target import get_target


def noopt_from_env() -> bool:
  """NOOPT=1 in the environment: the unoptimised pipeline (no kernel-opt). The one place that reads it."""
  return os.environ.get('NOOPT', '0') not in ('', '0')


def lower_to_uop_steps(target: str = 'llvm', noopt: bool | None = None, processor: str = 'auto', local_memory: int = 0,
                       warpgroup: bool = True) -> list[str]:
  """lower-to-uop for a target: its passes as text, in order (kernelize and linearize{...} among them, where callers
  cut it). noopt=None: as NOOPT says; processor: kernel-opt's (an OpenCL device on a CPU asks for cpu);
  local_memory: the shared memory a work-group of the device may take (0: the target's default); warpgroup: whether
  the device has the target's warpgroup tensor cores (a CUDA device before Hopper has not)."""
  t = get_target(target)
  opt = not (noopt_from_env() if noopt is None else noopt)
  steps = ['canonicalize', 'tensor-decompose{pack=true}' if t.pack_matmul and opt else 'tensor-decompose', 'canonicalize', 'cse', 'kernelize']
  extra = (f' processor={processor}' if processor != 'auto' else '') + (f' local_memory={local_memory}' if local_memory else '') + \
          ('' if warpgroup else ' warpgroup=false')
  if opt: steps.append(f'kernel-opt{{target={t.name}{extra}}}')
  steps += [f'linearize{{target={t.name}}}', 'uop-simplify']
  if opt and t.transcendentals: steps.append(f'decompose-transcendentals{{ops={t.transcendentals}}}')
  if t.devectorize: steps.append(f'devectorize{{width={t.devectorize}' + (f' bytes={t.max_vector_bytes}' if t.max_vector_bytes else '') + '}')
  return steps + ['cse', 'dce']


class LowerToUop(Pass):
  name = 'lower-to-uop'
  summary = 'named pipeline: tensor level to the uop level (canonicalize ... kernelize, kernel-opt, linearize, uop-simplify)'
  reads, leaves = 'tensor', 'uop'
  options = {'target': (str, 'llvm', 'the target whose choices kernel-opt makes'),
             'noopt': (bool, False, 'skip kernel-opt (as NOOPT=1)'),
             'processor': (str, 'auto', "kernel-opt's device kind: cpu | gpu | auto (by target)"),
             'local_memory': (int, 0, "kernel-opt's shared memory a work-group may take, in bytes (0: the target's default)"),
             'warpgroup': (bool, True, "kernel-opt's: the device has the target's warpgroup tensor cores (wgmma)")}
  def expand(self):
    return parse_pipeline(','.join(lower_to_uop_steps(self.target, self.noopt or None, self.processor, self.local_memory, self.warpgroup)))
