"""The IR core: types, values, ops, blocks, modules, attributes, printing and verification."""
from tgc.ir.core import Operation, Value, Block, Module, REGISTRY, lookup_op
from tgc.ir.types import TensorType, VecType, BufType, PtrType, parse_type
from tgc.ir.diagnostics import Diagnostic, DiagnosticList, Location
from tgc.ir import dtypes


def parse(text: str, filename: str = '<stdin>', verify: bool = True, allow_unregistered: bool = False) -> Module:
  """Text -> a verified Module; raises tgc.Diagnostic on bad input."""
  import importlib
  from tgc.ir import core
  mod, fn = core.PARSER.split(':')
  return getattr(importlib.import_module(mod), fn)(text, filename, verify=verify, allow_unregistered=allow_unregistered)


__all__ = ['Operation', 'Value', 'Block', 'Module', 'REGISTRY', 'lookup_op', 'TensorType', 'VecType', 'BufType', 'PtrType',
           'parse_type', 'Diagnostic', 'DiagnosticList', 'Location', 'dtypes', 'parse']
