"""func.func and func.return: functions of the tensor level, and the host schedule after kernelize."""
from __future__ import annotations
from tgc.ir.core import Operation, FUNCTION, TERMINATOR
from tgc.ir.types import TensorType


class FuncOp(Operation):
  name = 'func.func'
  RESULTS = 0
  ATTRS = {'sym_name': 'symbol', 'result_types': 'any?'}
  TRAITS = {FUNCTION}

  @property
  def sym_name(self) -> str: return self.attrs['sym_name']
  @property
  def arg_types(self): return [a.type for a in self.body.args]
  @property
  def result_types(self): return list(self.attrs.get('result_types', ()))

  def verify(self):
    for a in self.body.args:
      if not isinstance(a.type, TensorType): raise self.error(f"arguments must be tensors, got {a.type}")

  def verify_body(self):
    ops = self.body.ops
    if not ops or ops[-1].name != 'func.return':
      raise self.error(f"body of @{self.sym_name} must end with 'func.return'")
    ret = ops[-1]
    got = [v.type for v in ret.operands]
    if got != self.result_types:
      raise ret.error(f"returns ({', '.join(map(str, got))}) but @{self.sym_name} is declared to return ({', '.join(map(str, self.result_types))})")
    for op in ops[:-1]:
      if op.has(TERMINATOR): raise op.error("must be the last op of its function")


class ReturnOp(Operation):
  name = 'func.return'
  OPERANDS = ('values*',)
  RESULTS = 0
  TRAITS = {TERMINATOR}
  FORMAT = '$values : type($values)'
