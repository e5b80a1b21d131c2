"""Dialect `uop`: the linear form emitters read top to bottom (the seeds' UOps).

Loops are `uop.range` .. `uop.endrange` pairs in the flat list; an accumulator is `uop.define_acc`
(initial value, and the ranges it accumulates over) updated with `uop.phi` inside the loop: the value of
the phi is the accumulator's value from then on, so the store after `uop.endrange` uses the phi.
"""
from __future__ import annotations
from tgc.ir.core import Operation, PURE, CONSTANT, FUNCTION, FORWARD_REFS, SCOPE_OPEN, SCOPE_CLOSE
from tgc.ir.types import PtrType, VecType, elem
from tgc.ir.dtypes import DType
from tgc.ir import dtypes as D
from tgc.dialects.alu import define_alu_ops
from tgc.dialects.tensor import check_scalar

define_alu_ops('uop', False, globals())

SPECIAL_AXES = ('gidx', 'lidx')


class UopFuncOp(Operation):
  """uop.func @r_2() attributes {global_size = [...], local_size = [...]} { flat list }."""
  name = 'uop.func'
  RESULTS = 0
  # contract: float multiplies and adds may fuse into fma (linearize sets it on optimised CPU kernels)
  ATTRS = {'sym_name': 'symbol', 'global_size': 'ints?', 'local_size': 'ints?', 'opts': 'records?', 'contract': 'any?'}
  TRAITS = {FUNCTION}
  @property
  def sym_name(self) -> str: return self.attrs['sym_name']
  def verify(self):
    if self.body.args: raise self.error("takes no arguments: buffers are uop.define_global ops")
    for k in ('global_size', 'local_size'):  # what every runtime's launch takes (the CPU's gidx0 bounds are i32)
      s = self.attrs.get(k, ())
      if len(s) > 3 or any(not 1 <= x < 2**31 for x in s): raise self.error(f"{k} must be at most 3 sizes from 1 to 2**31 - 1, got {list(s)}")

  def verify_body(self):
    """Ranges and ifs nest and close; each endrange closes the innermost open range. A value defined
    inside a range or if is not visible after its close, except the accumulator's uop.phi."""
    stack: list[Operation] = []
    inner: list[set] = []   # values defined in each open scope
    hidden: dict = {}       # value -> the op that closed its scope
    for op in self.body.ops:
      if op.dialect != 'uop' and not op.has(FUNCTION): raise op.error("is not allowed in a uop.func: its body is uop ops")
      for i, v in enumerate(op.operands):
        if v in hidden:
          closer = hidden[v]
          raise op.error(f"operand #{i} is not visible here: it is defined inside the {closer.name.replace('end', '')} closed at line {closer.loc.line if closer.loc else '?'}")
      if op.name in ('uop.range', 'uop.if'):
        stack.append(op); inner.append(set()); continue
      if op.name == 'uop.endrange':
        if op.range.op is None or op.range.op.name != 'uop.range': continue  # reported by the op's own verify
        if not stack or stack[-1].name != 'uop.range' or stack[-1].results[0] is not op.range:
          raise op.error("does not close the innermost open uop.range")
        stack.pop()
        for v in inner.pop(): hidden[v] = op
      elif op.name == 'uop.endif':
        if not stack or stack[-1].name != 'uop.if': raise op.error("has no open uop.if to close")
        stack.pop()
        for v in inner.pop(): hidden[v] = op
      elif inner and op.name != 'uop.phi':
        inner[-1].update(op.results)
    if stack: raise stack[-1].error("is never closed")


def _ptr(op, v, what='buffer'):
  t = v.type
  if not isinstance(t, PtrType) or v.op is None or v.op.name not in ('uop.define_global', 'uop.define_local'):
    raise op.error(f"{what} must come from uop.define_global or uop.define_local, got {t}")
  return t

def _int(op, v, what):
  if not isinstance(v.type, DType) or not v.type.is_int: raise op.error(f"{what} must be an integer scalar, got {v.type}")

def _bool(op, v, what):
  if v.type is not D.bool_: raise op.error(f"{what} must be i1, got {v.type}")


class DefineGlobalOp(Operation):
  name = 'uop.define_global'
  ATTRS = {'index': 'int', 'size': 'int?'}  # size: elements, when known; emitters guard what they cannot prove inside it
  TRAITS = frozenset()  # a kernel parameter: kept even when unused, so the signature stays
  FORMAT = '$index : type($result)'
  def verify(self):
    t = self.results[0].type
    if not isinstance(t, PtrType) or t.local: raise self.error(f"defines a global pointer !uop.ptr<...>, got {t}")
    if self.index < 0: raise self.error(f"index must be non-negative, got {self.index}")
    if self.attrs.get('size', 0) < 0: raise self.error(f"size must be non-negative, got {self.attrs['size']}")


class DefineLocalOp(Operation):
  name = 'uop.define_local'
  ATTRS = {'sym': 'ident', 'size': 'int'}
  FORMAT = '$sym $size : type($result)'
  def verify(self):
    t = self.results[0].type
    if not isinstance(t, PtrType) or not t.local: raise self.error(f"defines a local pointer !uop.ptr<..., local>, got {t}")
    if self.size <= 0: raise self.error(f"size must be positive, got {self.size}")


class DefineVarOp(Operation):
  name = 'uop.define_var'
  ATTRS = {'sym': 'ident', 'min': 'int', 'max': 'int'}
  TRAITS = {PURE}
  FORMAT = '$sym $min $max : type($result)'
  def verify(self):
    if not isinstance(self.results[0].type, DType) or not self.results[0].type.is_int: raise self.error("defines an integer variable")
    if self.attrs['min'] > self.attrs['max']: raise self.error(f"range [{self.attrs['min']}, {self.attrs['max']}] is empty")


class SpecialOp(Operation):
  name = 'uop.special'
  ATTRS = {'axis': 'ident', 'size': 'int'}
  TRAITS = {PURE}
  FORMAT = '$axis $size : type($result)'
  def verify(self):
    a = self.axis
    if not (a[:4] in SPECIAL_AXES and a[4:].isdigit() and int(a[4:]) < 3):
      raise self.error(f"axis must be gidx0..gidx2 or lidx0..lidx2, got '{a}'")
    if self.size < 1: raise self.error(f"size must be positive, got {self.size}")
    _int(self, self.results[0], 'result')


class ConstOp(Operation):
  name = 'uop.const'
  ATTRS = {'value': 'number'}
  TRAITS = {PURE, CONSTANT}
  FORMAT = '$value : type($result)'
  def verify(self):
    t = self.results[0].type
    if not isinstance(t, (DType, VecType)): raise self.error(f"result must be a scalar or vector type, got {t}")
    check_scalar(self, self.attrs['value'], elem(t))


class DefineAccOp(Operation):
  name = 'uop.define_acc'
  OPERANDS = ('init', 'ranges*')
  TRAITS = {FORWARD_REFS}
  FORMAT = '$init ($ranges) : type($result)'
  def verify(self):
    if self.init.type != self.results[0].type: raise self.error(f"initial value type {self.init.type} does not match {self.results[0].type}")
    for r in self.ranges:
      if r.op is None or r.op.name != 'uop.range': raise self.error("accumulates over uop.range values only")


class RangeOp(Operation):
  name = 'uop.range'
  OPERANDS = ('start', 'end')
  TRAITS = {SCOPE_OPEN}
  FORMAT = '$start, $end : type($result)'
  def verify(self):
    _int(self, self.start, 'start'); _int(self, self.end, 'end')
    if not (self.start.type == self.end.type == self.results[0].type): raise self.error("start, end and result must have one integer type")


class EndRangeOp(Operation):
  name = 'uop.endrange'
  OPERANDS = ('range',)
  RESULTS = 0
  TRAITS = {SCOPE_CLOSE}
  FORMAT = '$range'
  def verify(self):
    if self.range.op is None or self.range.op.name != 'uop.range': raise self.error("closes a uop.range value")


class LoadOp(Operation):
  name = 'uop.load'
  OPERANDS = ('buf', 'idx', 'gated*')
  TRAITS = frozenset()  # reads memory a store may change: never merged or moved by cse
  FORMAT = '$buf[$idx]?{, $gated} : type($result)'
  @property
  def gate(self): return self.operands[2] if len(self.operands) == 4 else None
  @property
  def alt(self): return self.operands[3] if len(self.operands) == 4 else None
  def verify(self):
    p = _ptr(self, self.buf)
    _int(self, self.idx, 'index')
    r = self.results[0].type
    if elem(r) != p.dtype: raise self.error(f"loads {r} through a pointer to {p.dtype}")
    if len(self.operands) not in (2, 4): raise self.error("takes a buffer, an index, and optionally a gate and an alternative value")
    if self.gate is not None:
      _bool(self, self.gate, 'gate')
      if self.alt.type != r: raise self.error(f"alternative value type {self.alt.type} does not match {r}")


class StoreOp(Operation):
  name = 'uop.store'
  OPERANDS = ('buf', 'idx', 'value', 'gate?')
  RESULTS = 0
  FORMAT = '$buf[$idx], $value?{, $gate} : type($value)'
  def verify(self):
    p = _ptr(self, self.buf)
    _int(self, self.idx, 'index')
    if elem(self.value.type) != p.dtype: raise self.error(f"stores {self.value.type} through a pointer to {p.dtype}")
    if self.gate is not None: _bool(self, self.gate, 'gate')


class PhiOp(Operation):
  name = 'uop.phi'
  OPERANDS = ('acc', 'value')
  FORMAT = '$acc, $value : type($result)'
  def verify(self):
    if self.acc.op is None or self.acc.op.name != 'uop.define_acc': raise self.error("updates a uop.define_acc")
    if not (self.acc.type == self.value.type == self.results[0].type): raise self.error("accumulator, value and result must have one type")


class IfOp(Operation):
  name = 'uop.if'
  OPERANDS = ('cond',)
  RESULTS = 0
  TRAITS = {SCOPE_OPEN}
  FORMAT = '$cond'
  def verify(self): _bool(self, self.cond, 'condition')


class EndIfOp(Operation):
  name = 'uop.endif'
  RESULTS = 0
  TRAITS = {SCOPE_CLOSE}
  FORMAT = ''


class BarrierOp(Operation):
  name = 'uop.barrier'
  RESULTS = 0
  FORMAT = ''


class VectorizeOp(Operation):
  name = 'uop.vectorize'
  OPERANDS = ('srcs*',)
  TRAITS = {PURE}
  FORMAT = '$srcs : type($result)'
  def verify(self):
    r = self.results[0].type
    if not isinstance(r, VecType): raise self.error(f"result must be a vector type, got {r}")
    if len(self.srcs) != r.count: raise self.error(f"builds {r} from {len(self.srcs)} values")
    for v in self.srcs:
      if v.type != r.dtype: raise self.error(f"element type {v.type} does not match {r}")


class GepOp(Operation):
  name = 'uop.gep'
  OPERANDS = ('vec',)
  ATTRS = {'index': 'int'}
  TRAITS = {PURE}
  FORMAT = '$vec $index : type($result)'
  def verify(self):
    t = self.vec.type
    if not isinstance(t, VecType): raise self.error(f"operand must be a vector, got {t}")
    if not 0 <= self.index < t.count: raise self.error(f"index {self.index} is out of range for {t}")
    if self.results[0].type != t.dtype: raise self.error(f"result type must be {t.dtype}, got {self.results[0].type}")


# The tensor-core instructions targets have, as kernel-opt's TC action and the emitters know them: per target the
# (m, n, k) tile, the lanes of the a, b and c fragments each thread holds, and the (input, accumulator) dtypes.
TENSOR_CORES = {'cuda': {'dims': (16, 8, 16), 'lanes': (8, 4, 4), 'dtypes': (('f16', 'f32'), ('f16', 'f16'), ('bf16', 'f32'))}}


class WmmaOp(Operation):
  """A tensor-core fragment multiply-accumulate: c + a @ b over an (m, n, k) tile, per target (TENSOR_CORES).
  It is collective: the threads of a warp hold the tile's fragments between them, each its lanes."""
  name = 'uop.wmma'
  OPERANDS = ('a', 'b', 'c')
  ATTRS = {'dims': 'ints', 'target': 'ident'}
  TRAITS = {PURE}
  FORMAT = '$target $dims $a, $b, $c : type($a), type($b) -> type($result)'
  def verify(self):
    if len(self.dims) != 3 or min(self.dims) < 1: raise self.error(f"dims must be (m, n, k), got {list(self.dims)}")
    if self.c.type != self.results[0].type: raise self.error("accumulator and result types differ")
