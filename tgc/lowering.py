"""The one way down: `lower(module, target, until=STAGE)` takes a module from the level it is at to a named stage,
for one device (a DeviceSpec: the Target and the device's capabilities). tgc.compile, Tensor.to_ir, tgc-translate,
tgc-opt's lower-to-uop and kernel-opt's search all lower through it (or, tgc-opt, through the same stage_steps), so
that what one prints is what another runs.

Stages, in order: tensor (the graph), kernel (kernelized: one kernel.func per fused kernel and the host schedule),
opt (kernel-opt's actions chosen, as each kernel's `opts`), uop (linearized and simplified: what emitters read),
source (the target's emitter's text) and binary (the device's compiled Programs).
"""
from __future__ import annotations
import contextlib, gc
from tgc import profiler
from tgc.errors import TgcError
from tgc.ir.core import Module
from tgc.target import Target, DeviceSpec
from tgc.passes.pipelines import STAGES, stage_steps


def level_of(m: Module) -> str:
  """The stage a module is lowered from: the lowest of its functions' levels (passes.manager.module_levels: tensor
  for a func.func that launches no kernels, kernel for kernel.funcs, uop for uop.funcs alone or nothing to lower). A
  kernel-level module whose kernels already hold their opts is lowered from kernel all the same: kernel-opt leaves
  such kernels alone."""
  from tgc.passes.manager import module_levels
  levels = module_levels(m)
  return 'tensor' if 'tensor' in levels else 'kernel' if 'kernel' in levels else 'uop'


@contextlib.contextmanager
def gc_paused():
  """Python's cyclic garbage collector off while a compile runs (on where it was on, after). Lowering makes some
  hundred thousand ops, each in a cycle with its results, most of which live on: the collector's passes over that
  growing heap took half of a GPT step's lowering and emitting, where refcounting frees all but the dead ops' cycles,
  which the first collection after takes (one pass). Compile workers forked meanwhile run without it too (their
  parent's heap is not traversed, nor its pages copied)."""
  if not gc.isenabled():
    yield; return
  gc.disable()
  try: yield
  finally: gc.enable()


def lower(m: Module, target: str | Target | DeviceSpec, until: str = 'uop', noopt: bool | None = None, trace=None,
          verify_each: bool = False, progress=None, **capabilities):
  """Lower `m` in place from its level (level_of) to stage `until`, for `target`: a DeviceSpec, or a target (its name
  or a Target) with the device's capabilities as keywords (DeviceSpec's: processor, local_memory, warpgroup, cpu,
  processors, device, tf32). noopt=None: as NOOPT says. `trace(stage, m)`: called as m reaches each stage on the way (tgc.compile's
  DEBUG printing). verify_each: verify after every pass (the tools'), else once at the end. progress: a
  tgc.runtime.workers.Progress the binary stage steps. Returns the module for
  the IR stages, the source text for `source`, the compiled Programs (of the uop.funcs, in order) for `binary`."""
  if until not in STAGES: raise TgcError(f"unknown stage '{until}' (expected {', '.join(STAGES)})")
  with gc_paused(): return _lower(m, DeviceSpec.of(target, **capabilities), until, noopt, trace, verify_each, progress)


def _lower(m: Module, spec: DeviceSpec, until: str, noopt, trace, verify_each: bool, progress):
  from tgc.passes.manager import PassManager, PassFailure, parse_pipeline
  level = level_of(m)
  if STAGES.index(until) > STAGES.index(level):
    stops = [s for s in STAGES[STAGES.index(level) + 1:STAGES.index(until) + 1] if s in ('kernel', 'opt', 'uop')]
    at, inst = level, profiler.instrumentation()  # (None unless a profile is open: then every pass is a span)
    for s in stops:
      steps = stage_steps(spec, at, s, noopt)
      if steps: PassManager(parse_pipeline(','.join(steps)), verify=verify_each).run(m, inst)
      at = s
      if trace is not None: trace(s, m)
    if inst is not None: profiler.record_passes(inst)
    if stops and not verify_each:
      # (the API verifies its input and the lowered result; the tools verify after every pass, a debugging aid that
      # costs a third of the compile time)
      try: m.verify()
      except TgcError as e: raise PassFailure('lower-to-uop', f"the pipeline left invalid IR:\n{e}") from e
  if until == 'source':
    from tgc import emit
    return emit.render(m, spec.name)
  if until == 'binary':
    from tgc.runtime import get_device
    dev = get_device(spec.runtime_device)
    fns = m.functions('uop.func')
    if progress is None: return dev.compile_all(fns)
    import inspect  # (a device of another package may take the kernels alone)
    return dev.compile_all(fns, progress=progress) if 'progress' in inspect.signature(dev.compile_all).parameters else dev.compile_all(fns)
  return m


__all__ = ['STAGES', 'level_of', 'lower', 'gc_paused']
