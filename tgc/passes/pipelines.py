"""Named pipelines: `lower-to-uop` is the whole way from the tensor level to an optimised uop level,
with a target's choices; `lower-to-uop{noopt=true}` leaves kernel-opt out (NOOPT=1). The Python API and
tgc-run run the same pipeline."""
from __future__ import annotations
import os
from tgc.passes.manager import Pass, parse_pipeline
from tgc.target import get_target


def lower_to_uop_text(target: str = 'llvm', noopt: bool = False, processor: str = 'auto') -> str:
  t = get_target(target)
  opt = not noopt
  steps = ['canonicalize', 'tensor-decompose{pack=true}' if t.pack_matmul and opt else 'tensor-decompose', 'canonicalize', 'cse', 'kernelize']
  if opt: steps.append(f'kernel-opt{{target={t.name}}}' if processor == 'auto' else f'kernel-opt{{target={t.name} processor={processor}}}')
  steps += [f'linearize{{target={t.name}}}', 'uop-simplify']
  if opt and t.transcendentals: steps.append(f'decompose-transcendentals{{ops={t.transcendentals}}}')
  if t.devectorize: steps.append(f'devectorize{{width={t.devectorize}}}')
  return ','.join(steps + ['cse', 'dce'])


class LowerToUop(Pass):
  name = 'lower-to-uop'
  summary = 'named pipeline: tensor level to the uop level (canonicalize ... kernelize, kernel-opt, linearize, uop-simplify)'
  reads, leaves = 'tensor', 'uop'
  options = {'target': (str, 'llvm', 'the target whose choices kernel-opt makes'),
             'noopt': (bool, False, 'skip kernel-opt (as NOOPT=1)'),
             'processor': (str, 'auto', "kernel-opt's device kind: cpu | gpu | auto (by target)")}
  def expand(self):
    noopt = self.noopt or os.environ.get('NOOPT', '0') not in ('', '0')
    return parse_pipeline(lower_to_uop_text(self.target, noopt, self.processor))
