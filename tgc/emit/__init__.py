"""Emitters: render(module, target) renders with the target's emitter (its Target's `renderer`, imported lazily).

An emitter is a function taking a Module (every uop.func in it) and returning the source text of all its
kernels; a Target in tgc/target.py names it as "module:function".
"""
from __future__ import annotations
import importlib
from tgc.target import Target, get_target


def render(module, target: 'str | Target' = 'llvm') -> str:
  """Every uop.func of `module` (a Module, or a list of uop.funcs) -> source text for `target` (a Target or its name)."""
  mod, fn = (target if isinstance(target, Target) else get_target(target)).renderer.split(':')
  return getattr(importlib.import_module(mod), fn)(module)


__all__ = ['render']
