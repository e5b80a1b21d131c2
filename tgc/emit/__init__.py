"""Emitters: render(module, target) dispatches by target name through TARGETS, importing lazily.

Registering a target is one entry: name -> "module:function", the function taking a Module (every
uop.func in it) and returning the source text of all its kernels.
"""
from __future__ import annotations
import importlib
from tgc.errors import TgcError

TARGETS: dict[str, str] = {
  'llvm': 'tgc.emit.llvm:render_llvm_module',
  'c': 'tgc.emit.c:render_c',
  'cuda': 'tgc.emit.cuda:render_cuda',
  'opencl': 'tgc.emit.opencl:render_opencl',
  'metal': 'tgc.emit.metal:render_metal',
}


def render(module, target: str = 'llvm') -> str:
  """Every uop.func of `module` -> source text for `target`."""
  path = TARGETS.get(target)
  if path is None: raise TgcError(f"unknown target '{target}' (known: {', '.join(sorted(TARGETS))})")
  mod, fn = path.split(':')
  return getattr(importlib.import_module(mod), fn)(module)


__all__ = ['TARGETS', 'render']
