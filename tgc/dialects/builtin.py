"""func.func and func.return: functions of the tensor level, and the host schedule after kernelize."""
from __future__ import annotations
from tgc.ir.core import Operation, FUNCTION, TERMINATOR, REGISTRY
from tgc.ir.types import TensorType


HOST_OPS = ('kernel.alloc', 'kernel.launch', 'kernel.reshape')  # what kernelize leaves beside host constants


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
      # (an unregistered op, parsed with --allow-unregistered-dialect, is opaque: nothing is known to refuse it)
      if op.dialect not in ('tensor', 'func') and op.name not in HOST_OPS and not op.has(FUNCTION) and REGISTRY.get(op.name) is type(op):
        raise op.error(f"is not allowed in a func.func: its body is tensor ops and the host schedule's {', '.join(HOST_OPS)}")

  def verify_symbols(self, module):
    self._verify_allocs_written(module)

  def _verify_allocs_written(self, module):
    """A host schedule reads a kernel.alloc (passes it to a launch as an input, returns it) only after a launch
    has written it as one of its outputs (the buffers its kernel stores to): memory no one wrote has no value on
    any device."""
    from tgc.ir.diagnostics import Note
    unwritten: dict = {}  # value (an alloc or a host reshape of one) -> its kernel.alloc
    for op in self.body.ops:
      if op.name == 'kernel.alloc':
        t = op.results[0].type
        if isinstance(t, TensorType) and t.numel: unwritten[op.results[0]] = op
        continue
      if op.name in ('kernel.reshape', 'tensor.reshape') and op.operands and op.operands[0] in unwritten:
        unwritten[op.results[0]] = unwritten[op.operands[0]]; continue
      outs = set()
      if op.name == 'kernel.launch':
        k = module.lookup(op.callee)
        bad = k is None or (k.name == 'kernel.func' and len(k.body.args) != len(op.operands)) or malformed_globals(k)  # (their own errors say so)
        outs = set(range(len(op.operands))) if bad else written_args(k)
      for i, v in enumerate(op.operands):
        if v in unwritten and i not in outs:
          what = 'returns' if op.name == 'func.return' else f"reads operand #{i}:"
          d = op.error(f"{what} a kernel.alloc that no kernel.launch has written: its contents are undefined")
          d.notes.append(Note('note', 'allocated here', unwritten[v].loc))
          raise d
      for i in outs:
        alloc = unwritten.get(op.operands[i]) if 0 <= i < len(op.operands) else None
        for v in [v for v, a in unwritten.items() if a is alloc and alloc is not None]: del unwritten[v]


def malformed_globals(k) -> bool:
  """Whether a uop.func's define_globals are not all global pointers of indices from 0 (its own verifier's errors): a
  launch of it is checked no further."""
  from tgc.ir.types import PtrType
  return k.name == 'uop.func' and any(not isinstance(d.results[0].type, PtrType) or not isinstance(d.attrs.get('index'), int) or d.attrs['index'] < 0
                                      for d in k.body.ops if d.name == 'uop.define_global')


def written_args(k) -> set[int]:
  """The argument positions a kernel writes: the buffers its ops' `written` (a tuple) names (kernel.store,
  kernel.attention), at the uop level those of them that are define_globals (their index)."""
  if k.name not in ('kernel.func', 'uop.func'): return {0}
  ws = [w for op in k.body.ops for w in getattr(op, 'written', ())]
  if k.name == 'kernel.func':
    args = {a: i for i, a in enumerate(k.body.args)}
    return {args[w] for w in ws if w in args}
  return {w.op.attrs['index'] for w in ws if w.op is not None and w.op.name == 'uop.define_global'}


class ReturnOp(Operation):
  name = 'func.return'
  OPERANDS = ('values*',)
  RESULTS = 0
  TRAITS = {TERMINATOR}
  FORMAT = '$values : type($values)'
