"""tgc: a tensor compiler whose every level is a textual IR dialect.

`import tgc` is cheap: the Tensor API, the passes and the emitters load on first use.
"""
from tgc.errors import TgcError, ShapeError, DTypeError, AxisError, IndexingError
from tgc.ir.diagnostics import Diagnostic
from tgc.ir import core as _core

# the IR core's registry: the dialects that register its ops and the parser of its text, imported when first asked for
_core.DIALECT_MODULES.append('tgc.dialects')
_core.PARSER = 'tgc.parser:parse'

__version__ = '0.1.0'

_LAZY = {
  'Tensor': ('tgc.tensor', 'Tensor'), 'dtypes': ('tgc.tensor', 'dtypes'), 'Device': ('tgc.runtime', 'Device'),
  'compile': ('tgc.compiler', 'compile'), 'ir': ('tgc.ir', None), 'passes': ('tgc.passes', None), 'emit': ('tgc.emit', None),
  'runtime': ('tgc.runtime', None), 'target': ('tgc.target', None), 'nn': ('tgc.nn', None), 'onnx': ('tgc.onnx', None),
  # as torch's: 'high' lets f32 matmuls and convs run on tensor cores as TF32 (CUDA), 'highest' (the default) not
  'set_float32_matmul_precision': ('tgc.target', 'set_float32_matmul_precision'),
  'get_float32_matmul_precision': ('tgc.target', 'get_float32_matmul_precision'),
}

def __getattr__(name):
  if name in _LAZY:
    import importlib
    mod, attr = _LAZY[name]
    m = importlib.import_module(mod)
    v = getattr(m, attr) if attr else m
    globals()[name] = v
    return v
  raise AttributeError(f"module 'tgc' has no attribute '{name}'")

__all__ = ['TgcError', 'ShapeError', 'DTypeError', 'AxisError', 'IndexingError', 'Diagnostic', *_LAZY]
