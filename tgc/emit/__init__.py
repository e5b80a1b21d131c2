"""Emitters: render(module, target) renders with the target's emitter (its Target's `renderer`, imported lazily).

An emitter is a function taking a Module (every uop.func in it) and returning the source text of all its
kernels; a Target in tgc/target.py names it as "module:function".
"""
from __future__ import annotations
import importlib
from tgc.target import get_target


def render(module, target: str = 'llvm') -> str:
  """Every uop.func of `module` -> source text for `target`."""
  mod, fn = get_target(target).renderer.split(':')
  return getattr(importlib.import_module(mod), fn)(module)


__all__ = ['render']
