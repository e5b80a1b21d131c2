"""Named pipelines and the lowering's stages: `lower-to-uop` is the whole way from the tensor level to an optimised
uop level, with a device's choices; `lower-to-uop{noopt=true}` leaves kernel-opt out (NOOPT=1). tgc.lowering.lower
runs these same steps, cut at its stages (stage_steps): the Python API, the tools and search all run one pipeline."""
from __future__ import annotations
import os
from tgc.passes.manager import Pass, parse_pipeline
from tgc.target import DeviceSpec, DEVICE_OPTIONS

# the stages a module passes through, in order; a pass pipeline covers tensor .. uop, an emitter gives source and a
# device's compiler a binary
STAGES = ('tensor', 'kernel', 'opt', 'uop', 'source', 'binary')


def noopt_from_env() -> bool:
  """NOOPT=1 in the environment: the unoptimised pipeline (no kernel-opt). The one place that reads it."""
  return os.environ.get('NOOPT', '0') not in ('', '0')


def lower_to_uop_steps(target: str | DeviceSpec = 'llvm', noopt: bool | None = None, **capabilities) -> list[str]:
  """lower-to-uop for a device (a DeviceSpec, or a target's name with capabilities, DEVICE_OPTIONS' names): its
  passes as text, in order. noopt=None: as NOOPT says. kernel-opt and linearize take the device's spec as options."""
  spec = DeviceSpec.of(target, **capabilities)
  t = spec.target
  opt = not (noopt_from_env() if noopt is None else noopt)
  steps = ['canonicalize'] + ([f'fuse-attention{{{spec.options()}}}'] if t.attention is not None else []) + [f"tensor-decompose{{{spec.options()}{' pack=true' if t.pack_matmul and opt else ''}}}", 'canonicalize', 'cse', f'scan-split{{{spec.options()}}}', f'kernelize{{{spec.options()}}}']
  if opt: steps.append(f'kernel-opt{{{spec.options()}}}')
  steps += [f'linearize{{{spec.options()}}}', 'uop-simplify']
  if opt and t.transcendentals: steps.append(f'decompose-transcendentals{{ops={t.transcendentals}}}')
  if t.devectorize: steps.append(f'devectorize{{width={t.devectorize}' + (f' bytes={t.max_vector_bytes}' if t.max_vector_bytes else '') + '}')
  return steps + ['cse'] + (['reassociate-index'] if opt else []) + ['dce']


def stage_steps(spec: DeviceSpec, start: str, until: str, noopt: bool | None = None) -> list[str]:
  """The passes (as text) that take a module from stage `start` to stage `until` (tensor, kernel, opt or uop;
  `until` past uop: to uop): `kernel` ends with kernelize, `opt` with kernel-opt (where it runs)."""
  steps = lower_to_uop_steps(spec, noopt)
  end = {'tensor': 0, 'kernel': next(i for i, st in enumerate(steps) if st.startswith('kernelize')) + 1, 'uop': len(steps)}
  end['opt'] = end['kernel'] + (steps[end['kernel']].startswith('kernel-opt'))
  return steps[end[start]:end[min(until, 'uop', key=STAGES.index)]]


class LowerToUop(Pass):
  name = 'lower-to-uop'
  summary = 'named pipeline: tensor level to the uop level (canonicalize ... kernelize, kernel-opt, linearize, uop-simplify)'
  reads, leaves = 'tensor', 'uop'
  options = {'target': DEVICE_OPTIONS['target'], 'noopt': (bool, False, 'skip kernel-opt (as NOOPT=1)'),
             **{k: v for k, v in DEVICE_OPTIONS.items() if k != 'target'}}
  def expand(self):
    return parse_pipeline(','.join(stage_steps(DeviceSpec.from_options(self.opts), 'tensor', 'uop', self.noopt or None)))
