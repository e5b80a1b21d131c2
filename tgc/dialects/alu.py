"""The ALU op family, shared by the three dialects: one table of names and dtype rules.

`define_alu_ops(dialect, shaped)` declares, in a dialect, every unary, binary, compare, ternary, cast and
bitcast op with the same names (`tensor.add`, `kernel.add`, `uop.add`), the same custom forms and the
same verifiers; only what a value's type looks like differs (tensor<...> vs a scalar or vec<...>).
"""
from __future__ import annotations
from tgc.ir import alu
from tgc.ir.core import Operation, PURE, COMMUTATIVE, ELEMENTWISE
from tgc.ir.types import TensorType, VecType, elem
from tgc.ir.dtypes import DType
from tgc.ir import dtypes as D

FLOAT_ONLY = {'exp2', 'log2', 'sin', 'sqrt', 'recip', 'fdiv'}
INT_OR_BOOL = {'not', 'and', 'or', 'xor'}
INT_ONLY = {'shl', 'shr', 'idiv'}
NOT_BOOL = {'neg', 'mod', 'trunc'}


def check_dtype(op: Operation, name: str, dt: DType):
  if name in FLOAT_ONLY and not dt.is_float: raise op.error(f"requires a float type, got {dt}")
  if name in INT_OR_BOOL and dt.is_float: raise op.error(f"requires an integer or bool type, got {dt}")
  if name in INT_ONLY and not dt.is_int: raise op.error(f"requires an integer type, got {dt}")
  if name in NOT_BOOL and dt.is_bool: raise op.error(f"is not defined on bool (i1)")

def same_shape(a, b) -> bool:
  if isinstance(a, TensorType) and isinstance(b, TensorType): return a.shape == b.shape
  if isinstance(a, VecType) or isinstance(b, VecType): return isinstance(a, VecType) and isinstance(b, VecType) and a.count == b.count
  return isinstance(a, DType) and isinstance(b, DType)

def shape_text(t) -> str: return str(t)

def check_valid_type(op: Operation, t, shaped: bool):
  ok = isinstance(t, TensorType) if shaped else isinstance(t, (DType, VecType))
  if not ok: raise op.error(f"expects {'tensor' if shaped else 'scalar or vector'} types, got {t}")


def define_alu_ops(dialect: str, shaped: bool, namespace: dict):
  """Declare the ALU family in `dialect`; the classes are put in `namespace` as e.g. `AddOp`."""

  class ElementwiseOp(Operation):
    TRAITS = {PURE, ELEMENTWISE}
    def verify(self):
      r = self.results[0].type
      check_valid_type(self, r, shaped)
      for v in self.operands:
        t = v.type
        check_valid_type(self, t, shaped)
        if not same_shape(t, r):
          raise self.error(f"operands have different shapes: {self._first()} and {t}" if t != self._first() else f"result {r} does not match operand type {t}")
        if t != r: raise self.error(f"operand types differ: {self._first()} and {t}" if t != self._first() else f"result type {r} does not match operand type {t}")
      check_dtype(self, self.opname, elem(r))
    def _first(self): return self.operands[0].type if self.operands else None

  class BinaryBase(ElementwiseOp):
    OPERANDS = ('lhs', 'rhs')
    FORMAT = '$lhs, $rhs : type($result)'
    def verify(self):
      a, b = self.operands[0].type, self.operands[1].type
      if a != b:
        check_valid_type(self, a, shaped); check_valid_type(self, b, shaped)
        raise self.error(f"operands have different shapes: {a} and {b}" if not same_shape(a, b) else f"operands have different types: {a} and {b}")
      if a != self.results[0].type: raise self.error(f"result type {self.results[0].type} does not match operand type {a}")
      super().verify()

  class UnaryBase(ElementwiseOp):
    OPERANDS = ('src',)
    FORMAT = '$src : type($result)'

  class CompareBase(Operation):
    OPERANDS = ('lhs', 'rhs')
    TRAITS = {PURE, ELEMENTWISE}
    FORMAT = '$lhs, $rhs : type($lhs) -> type($result)'
    def verify(self):
      a, b, r = self.operands[0].type, self.operands[1].type, self.results[0].type
      for t in (a, b, r): check_valid_type(self, t, shaped)
      if a != b: raise self.error(f"operands have different shapes: {a} and {b}" if not same_shape(a, b) else f"operands have different types: {a} and {b}")
      if not same_shape(a, r) or elem(r) is not D.bool_: raise self.error(f"result must be i1 of the operands' shape, got {r} for {a}")

  class WhereOp(ElementwiseOp):
    OPERANDS = ('cond', 'true_value', 'false_value')
    FORMAT = '$cond, $true_value, $false_value : type($result)'
    opname = 'where'
    def verify(self):
      c, x, y, r = self.operands[0].type, self.operands[1].type, self.operands[2].type, self.results[0].type
      for t in (c, x, y, r): check_valid_type(self, t, shaped)
      if not same_shape(c, r): raise self.error(f"condition has a different shape: {c} and {r}")
      if elem(c) is not D.bool_: raise self.error(f"condition must be i1, got {c}")
      if x != r or y != r: raise self.error(f"operands have different types: {x}, {y} and result {r}")

  class MulAccOp(ElementwiseOp):
    OPERANDS = ('a', 'b', 'c')
    FORMAT = '$a, $b, $c : type($result)'
    opname = 'mulacc'

  class CastBase(Operation):
    OPERANDS = ('src',)
    TRAITS = {PURE, ELEMENTWISE}
    FORMAT = '$src : type($src) -> type($result)'
    def verify(self):
      a, r = self.operands[0].type, self.results[0].type
      check_valid_type(self, a, shaped); check_valid_type(self, r, shaped)
      if not same_shape(a, r): raise self.error(f"changes the shape: {a} -> {r}")
      if self.opname == 'bitcast' and (elem(a).bits != elem(r).bits or elem(a).is_bool or elem(r).is_bool):
        raise self.error(f"needs types of the same bit width, got {a} -> {r}")

  def make(base, opname, extra_traits=()):
    cls = type(f"{opname.capitalize()}Op", (base,), {'name': f"{dialect}.{opname}", 'opname': opname,
               'TRAITS': base.TRAITS | set(extra_traits), '__module__': namespace['__name__']})
    namespace[cls.__name__] = cls
    return cls

  for n in alu.UNARY: make(UnaryBase, n)
  for n in alu.BINARY: make(BinaryBase, n, [COMMUTATIVE] if n in alu.COMMUTATIVE else [])
  for n in alu.COMPARE: make(CompareBase, n, [COMMUTATIVE] if n in alu.COMMUTATIVE else [])
  for cls, n in ((WhereOp, 'where'), (MulAccOp, 'mulacc')): make(cls, n)
  for n in ('cast', 'bitcast'): make(CastBase, n)
