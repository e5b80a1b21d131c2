"""Named pipelines: `lower-to-uop` is the whole way from the tensor level to an optimised uop level,
with a target's choices; `lower-to-uop{noopt=true}` leaves kernel-opt out (NOOPT=1). The Python API and
tgc-run run the same pipeline."""
from __future__ import annotations
import os
from tgc.passes.manager import Pass, get_pass, parse_pipeline

TARGETS = ('llvm', 'c', 'cuda', 'metal', 'opencl')


def lower_to_uop_text(target: str = 'llvm', noopt: bool = False, processor: str = 'auto') -> str:
  pack = '{pack=true}' if target in ('llvm', 'c') and not noopt else ''
  steps = ['canonicalize', f'tensor-decompose{pack}', 'canonicalize', 'cse', 'kernelize']
  if not noopt:
    try:
      get_pass('kernel-opt')
      steps.append(f'kernel-opt{{target={target}}}' if processor == 'auto' else f'kernel-opt{{target={target} processor={processor}}}')
    except Exception: pass  # kernel-opt not available yet: the unoptimised kernels
  steps += [f'linearize{{target={target}}}', 'uop-simplify']
  if target == 'llvm' and not noopt:  # polynomials vectorise where libm calls do not
    steps.append('decompose-transcendentals{ops=exp2+log2}')
  if target in ('cuda', 'metal'): steps.append('devectorize{width=4}')  # float4 is their widest vector
  steps += ['cse', 'dce']
  return ','.join(steps)


class LowerToUop(Pass):
  name = 'lower-to-uop'
  summary = 'named pipeline: tensor level to the uop level (canonicalize ... kernelize, kernel-opt, linearize, uop-simplify)'
  reads, leaves = 'tensor', 'uop'
  options = {'target': (str, 'llvm', 'the target whose choices kernel-opt makes'),
             'noopt': (bool, False, 'skip kernel-opt (as NOOPT=1)'),
             'processor': (str, 'auto', "kernel-opt's device kind: cpu | gpu | auto (by target)")}
  def expand(self):
    from tgc.passes.manager import PipelineError
    if self.target not in TARGETS: raise PipelineError(f"unknown target '{self.target}' (targets: {', '.join(TARGETS)})")
    noopt = self.noopt or os.environ.get('NOOPT', '0') not in ('', '0')
    return parse_pipeline(lower_to_uop_text(self.target, noopt, self.processor))
