"""Dialect `uop`: the linear form emitters read top to bottom (tinygrad's UOps).

Loops are `uop.range` .. `uop.endrange` pairs in the flat list; an accumulator is `uop.define_acc`
(initial value, and the ranges it accumulates over) updated with `uop.phi` inside the loop: the value of
the phi is the accumulator's value from then on, so the store after `uop.endrange` uses the phi.

Below the ops, the facts about a uop.func that emitters, runtimes and the reference interpreter all read (its
launch grid, buffers, constants, where accumulators start), so that each means one thing everywhere.
"""
from __future__ import annotations
import numpy as np
from tgc.errors import TgcError
from tgc.ir.attrs import HexInt
from tgc.ir.core import Operation, PURE, CONSTANT, FUNCTION, FORWARD_REFS, SCOPE_OPEN, SCOPE_CLOSE
from tgc.ir.types import PtrType, VecType, elem
from tgc.ir.dtypes import DType
from tgc.ir import dtypes as D
from tgc.dialects.alu import define_alu_ops
from tgc.dialects.tensor import check_softcap
from tgc.dialects.tensor import check_scalar
from tgc.dialects.builtin import written_args

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
    inside a range or if, and the range's own loop value, is not visible after its close, except the accumulator's
    uop.phi."""
    stack: list[Operation] = []
    inner: list[set] = []   # values defined in each open scope
    hidden: dict = {}       # value -> the op that closed its scope
    for op in self.body.ops:
      if op.dialect != 'uop' and not op.has(FUNCTION): raise op.error("is not allowed in a uop.func: its body is uop ops")
      for i, v in enumerate(op.operands):
        if v in hidden and op.name != 'uop.endrange':  # (an endrange of a closed range: its own error below)
          closer = hidden[v]
          raise op.error(f"operand #{i} is not visible here: it is defined inside the {closer.name.replace('end', '')} closed at line {closer.loc.line if closer.loc else '?'}")
      if op.name in ('uop.range', 'uop.if'):  # (a range's own value is its loop's: not visible after its endrange)
        stack.append(op); inner.append(set(op.results) if op.name == 'uop.range' else set()); continue
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
    glob: dict = {}  # buffers are numbered 0..n-1 by their define_globals, one dtype each (every runtime's signature)
    for op in self.body.ops:
      if op.name == 'uop.define_global' and isinstance(op.results[0].type, PtrType):
        i, dt = op.attrs['index'], op.results[0].type.dtype
        if glob.setdefault(i, dt) is not dt: raise op.error(f"buffer {i} is defined with two dtypes, {glob[i]} and {dt}")
    missing = next((i for i in range(len(glob)) if i not in glob), None)
    if missing is not None: raise self.error(f"buffer argument {missing} has no uop.define_global (buffers are numbered from 0 without gaps)")
    self.verify_launch()
    from tgc.dialects.uop_bounds import outside_accesses
    for op, buf, size, lo, hi in outside_accesses(self):
      what = f"buffer {buf.op.attrs['index']}" if buf.op.name == 'uop.define_global' else f"local buffer {buf.op.attrs['sym']}"
      verb = 'writes' if op.name == 'uop.store' or (op.name == 'uop.copy_async' and buf is op.dst) else 'reads'
      raise op.error(f"{verb} elements {_num(lo)}..{_num(hi)} of {what}, which declares {size}: "
                     f"an index the verifier sees must stay inside its buffer (gate it, or declare a larger size)")

  def verify_launch(self):
    """The launch runs exactly the indices its uop.specials range over: each axis's size in global_size (local_size)
    is the extent of every special on that axis (a thread past it would index as the analysis never sees). An axis
    no special names runs once (launch_dims)."""
    seen: dict = {}
    for op in self.body.ops:
      if op.name != 'uop.special' or not isinstance(op.attrs.get('size'), int): continue
      ax = op.attrs['axis']
      k = int(ax[4]) if ax[4:].isdigit() else -1
      given = self.attrs.get('global_size' if ax.startswith('gidx') else 'local_size') or ()
      if 0 <= k < len(given) and given[k] != op.size:
        attr = 'global_size' if ax.startswith('gidx') else 'local_size'
        raise op.error(f"extent {op.size} differs from the launch's {attr}[{k}] = {given[k]}: a launch runs exactly the {ax} values its specials range over")
      if seen.setdefault(ax, op).size != op.size:
        raise op.error(f"extent {op.size} differs from another {ax}'s {seen[ax].size} (line {seen[ax].loc.line if seen[ax].loc else '?'}): the specials of one axis share its extent")


def _num(x) -> str: return str(int(x)) if abs(x) != float('inf') else ('-inf' if x < 0 else 'inf')


def _ptr(op, v, what='buffer'):
  t = v.type
  if not isinstance(t, PtrType) or v.op is None or v.op.name not in ('uop.define_global', 'uop.define_local'):
    raise op.error(f"{what} must come from uop.define_global or uop.define_local, got {t}")
  return t

def _int(op, v, what):
  if not isinstance(v.type, DType) or not v.type.is_int: raise op.error(f"{what} must be an integer scalar, got {v.type}")

def _bool(op, v, what):
  if v.type is not D.bool_: raise op.error(f"{what} must be i1, got {v.type}")


def _gate(op, v, t):
  """A load's or store's gate: i1 for the whole access, or a vec<N x i1> of one lane per lane of a vec<N> access (each
  lane is read or written where its own gate is true: a masked vector access)."""
  if isinstance(v.type, VecType) and v.type.dtype is D.bool_:
    if not isinstance(t, VecType) or t.count != v.type.count: raise op.error(f"a vector gate {v.type} must have one lane per lane of the access, a {t}")
  else: _bool(op, v, 'gate')


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
  ATTRS = {'sym': 'ident', 'size': 'int', 'align': 'int?'}  # align: bytes (16 unless given; wgmma's swizzled tiles: 1024)
  FORMAT = '$sym $size : type($result)'
  def verify(self):
    t = self.results[0].type
    if not isinstance(t, PtrType) or not t.local: raise self.error(f"defines a local pointer !uop.ptr<..., local>, got {t}")
    if self.size <= 0: raise self.error(f"size must be positive, got {self.size}")
    al = self.attrs.get('align', 16)
    if al < 16 or al > 4096 or al & (al - 1): raise self.error(f"align must be a power of two from 16 to 4096 bytes, got {al}")


class DefineVarOp(Operation):
  name = 'uop.define_var'
  ATTRS = {'sym': 'ident', 'min': 'int', 'max': 'int'}
  TRAITS = {PURE}
  FORMAT = '$sym $min $max : type($result)'
  def verify(self):
    if not isinstance(self.results[0].type, DType) or not self.results[0].type.is_int: raise self.error("defines an integer variable")
    if self.attrs['min'] > self.attrs['max']: raise self.error(f"range [{self.attrs['min']}, {self.attrs['max']}] is empty")


class SpecialOp(Operation):
  """A launch index. `read = N` (N >= 1): its axis read again, a value of its own that cse keeps apart from the
  other reads and that emitters read from the device anew (what is computed from an earlier read is not carried to
  where this one is used)."""
  name = 'uop.special'
  ATTRS = {'axis': 'ident', 'size': 'int', 'read': 'int?'}
  TRAITS = {PURE}
  FORMAT = '$axis $size : type($result)'
  def verify(self):
    a = self.axis
    if not (a[:4] in SPECIAL_AXES and a[4:].isdigit() and int(a[4:]) < 3):
      raise self.error(f"axis must be gidx0..gidx2 or lidx0..lidx2, got '{a}'")
    if self.size < 1: raise self.error(f"size must be positive, got {self.size}")
    if self.attrs.get('read', 1) < 1: raise self.error(f"read must be positive (a later read of its axis), got {self.attrs['read']}")
    _int(self, self.results[0], 'result')
    t = self.results[0].type
    if self.size - 1 > D.min_max(t)[1]: raise self.error(f"size {self.size} does not fit its type {t}: an index past {D.min_max(t)[1]} would wrap")


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
  ADDRESSES = ((0, 1),)
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
      _gate(self, self.gate, r)
      if self.alt.type != r: raise self.error(f"alternative value type {self.alt.type} does not match {r}")


class LdmatrixOp(Operation):
  """A warp reads `count` 8x8 matrices of 16-bit elements from shared memory into tensor-core fragments (PTX
  ldmatrix): lanes 8j..8j+7 give the addresses of matrix j's 8 rows (8 contiguous elements each), and each lane gets
  two neighbouring elements of every matrix, at row lane/4 and column 2*(lane%4) (transposed with `trans`), as
  mma.sync's a and b fragments hold them. Collective, like uop.wmma: every lane of the warp takes part."""
  name = 'uop.ldmatrix'
  OPERANDS = ('buf', 'idx')
  ATTRS = {'count': 'int', 'trans': 'int'}
  ADDRESSES = ((0, 1),)
  TRAITS = frozenset()  # reads memory a store may change
  FORMAT = '$count $trans $buf[$idx] : type($result)'
  def verify(self):
    p = _ptr(self, self.buf)
    _int(self, self.idx, 'index')
    if not p.local: raise self.error(f"reads shared memory (a uop.define_local pointer), got {p}")
    if p.dtype.bits != 16: raise self.error(f"reads 16-bit elements, got {p.dtype}")
    if self.count not in (1, 2, 4) or self.trans not in (0, 1): raise self.error(f"count must be 1, 2 or 4 and trans 0 or 1, got {self.count} and {self.trans}")
    if self.results[0].type != VecType(2 * self.count, p.dtype): raise self.error(f"gives vec<{2 * self.count}x{p.dtype}>, got {self.results[0].type}")


class CopyAsyncOp(Operation):
  """A thread starts copying `bytes` (4, 8 or 16) from global memory to shared memory without waiting for them
  (cp.async); with a false gate the destination gets zeros and nothing is read. The copies a thread starts belong
  to its next uop.async_commit's group; a uop.async_wait then waits for all but the newest groups, and a barrier
  after it shows what arrived to the whole work-group."""
  name = 'uop.copy_async'
  OPERANDS = ('dst', 'didx', 'src', 'sidx', 'gate?')
  ADDRESSES = ((0, 1), (2, 3))
  RESULTS = 0
  ATTRS = {'bytes': 'int'}
  FORMAT = '$bytes $dst[$didx], $src[$sidx]?{, $gate}'
  def verify(self):
    d, s = _ptr(self, self.dst), _ptr(self, self.src)
    _int(self, self.didx, 'destination index'); _int(self, self.sidx, 'source index')
    if not d.local or s.local: raise self.error(f"copies global memory into shared memory (uop.define_local), got {s} to {d}")
    if d.dtype != s.dtype: raise self.error(f"copies between one element type, got {s.dtype} to {d.dtype}")
    if self.bytes not in (4, 8, 16) or self.bytes % d.dtype.itemsize: raise self.error(f"copies 4, 8 or 16 bytes (whole {d.dtype} elements), got {self.bytes}")
    if self.gate is not None: _bool(self, self.gate, 'gate')


class AsyncCommitOp(Operation):
  """Closes the group of the uop.copy_async ops this thread started since the last commit (possibly none)."""
  name = 'uop.async_commit'
  RESULTS = 0
  FORMAT = ''


class AsyncWaitOp(Operation):
  """Waits until at most `pending` of this thread's committed copy groups are still under way."""
  name = 'uop.async_wait'
  RESULTS = 0
  ATTRS = {'pending': 'int'}
  FORMAT = '$pending'
  def verify(self):
    if not 0 <= self.pending <= 8: raise self.error(f"pending must be 0 to 8, got {self.pending}")


class StoreOp(Operation):
  name = 'uop.store'
  OPERANDS = ('buf', 'idx', 'value', 'gate?')
  ADDRESSES = ((0, 1),)
  RESULTS = 0
  FORMAT = '$buf[$idx], $value?{, $gate} : type($value)'
  @property
  def written(self): return (self.buf,)
  def verify(self):
    p = _ptr(self, self.buf)
    _int(self, self.idx, 'index')
    if elem(self.value.type) != p.dtype: raise self.error(f"stores {self.value.type} through a pointer to {p.dtype}")
    if self.gate is not None: _gate(self, self.gate, self.value.type)


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


class ShuffleXorOp(Operation):
  """Each lane of a warp (a SIMD group: the target's warp_size consecutive threads of a work-group) gets the value of
  the lane whose index is its own xor `mask` (CUDA's __shfl_xor_sync): a butterfly of these reduces across a warp in
  registers. Collective, like uop.wmma: every lane of the warp takes part, none under a condition the others skip."""
  name = 'uop.shuffle_xor'
  OPERANDS = ('value',)
  ATTRS = {'mask': 'int'}
  TRAITS = frozenset()  # collective: never merged with another or moved under an if
  FORMAT = '$value, $mask : type($result)'
  def verify(self):
    t = self.value.type
    if isinstance(t, VecType) or not isinstance(t, DType) or t.itemsize not in (2, 4, 8) or t is D.bool_:
      raise self.error(f"shuffles a 16-, 32- or 64-bit scalar, got {t}")
    if self.results[0].type != t: raise self.error(f"gives the value's type {t}, got {self.results[0].type}")
    if not 0 < self.mask < 1024: raise self.error(f"mask must be 1 to 1023, got {self.mask}")


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


class WmmaOp(Operation):
  """A tensor-core fragment multiply-accumulate: c + a @ b over an (m, n, k) tile, as the target's tensor cores
  (Target.tensor_cores, tgc/target.py) do it. It is collective: the threads of a warp hold the tile's fragments
  between them, each its lanes."""
  name = 'uop.wmma'
  OPERANDS = ('a', 'b', 'c')
  ATTRS = {'dims': 'ints', 'target': 'ident'}
  TRAITS = {PURE}
  FORMAT = '$target $dims $a, $b, $c : type($a), type($b) -> type($result)'
  def verify(self):
    if len(self.dims) != 3 or min(self.dims) < 1: raise self.error(f"dims must be (m, n, k), got {list(self.dims)}")
    if self.c.type != self.results[0].type: raise self.error("accumulator and result types differ")
    for n in ('a', 'b', 'c'):  # (each thread holds its lanes of a fragment: a vector)
      if not isinstance(getattr(self, n).type, VecType): raise self.error(f"operand {n} must be a vector of a fragment's lanes, got {getattr(self, n).type}")



class WgmmaOp(Operation):
  """Hopper's warpgroup multiply-accumulate (PTX wgmma.mma_async, sm_90a): the 4 warps of a warpgroup (128 threads
  whose first is a multiple of 128) add a 64 x N x 16 product (`dims`) to their accumulator c, both operands read
  from shared memory by the tensor cores: a's 64 x 16 from element `aidx` of `a`, b's 16 x N from `bidx` of `b`, each
  in the 128-byte-swizzled layout its `*_layout` (major, lbo, sbo) describes (major 0: K-major, 1: MN-major; lbo, sbo
  the bytes from one block of 64 columns to the next and from one 8 rows to the next; tgc/passes/schedule.py's
  SwizzledTile). Thread t of warp w holds N/2 floats: rows 16w + t/4 (+8), as mma.sync's 16x8 accumulator repeated
  along n. It runs asynchronously: uop.wgmma_commit closes the group of those issued, uop.wgmma_wait waits for it,
  and uop.wgmma_fence comes before the first (and after any other write of c). Collective, like uop.wmma."""
  name = 'uop.wgmma'
  OPERANDS = ('a', 'aidx', 'b', 'bidx', 'c')
  ADDRESSES = ((0, 1), (2, 3))
  ATTRS = {'dims': 'ints', 'a_layout': 'ints', 'b_layout': 'ints'}
  TRAITS = frozenset()  # reads memory a store may change, and runs in order with the fences, commits and waits
  FORMAT = '$dims $a_layout $b_layout $a[$aidx], $b[$bidx], $c : type($a), type($result)'
  def verify(self):
    pa, pb = _ptr(self, self.a, 'a'), _ptr(self, self.b, 'b')
    _int(self, self.aidx, 'a index'); _int(self, self.bidx, 'b index')
    if not (pa.local and pb.local): raise self.error(f"reads its operands from shared memory (uop.define_local pointers), got {pa} and {pb}")
    if pa.dtype != pb.dtype or pa.dtype not in (D.f16, D.bf16): raise self.error(f"multiplies f16 or bf16 operands of one type, got {pa.dtype} and {pb.dtype}")
    dims = list(self.dims)
    if len(dims) != 3 or dims[0] != 64 or dims[2] != 16 or not (8 <= dims[1] <= 256 and dims[1] % 8 == 0):
      raise self.error(f"dims must be [64, N, 16] with N a multiple of 8 from 8 to 256, got {dims}")
    for nm in ('a_layout', 'b_layout'):
      lay = list(self.attrs[nm])
      if len(lay) != 3 or lay[0] not in (0, 1) or any(x % 16 or not 0 < x < 2**18 for x in lay[1:]):
        raise self.error(f"{nm} must be [major (0: K, 1: MN), lbo, sbo] with byte offsets multiples of 16 below 2**18, got {lay}")
    t = VecType(dims[1] // 2, D.f32)
    if self.c.type != t or self.results[0].type != t: raise self.error(f"accumulates into {t}, got {self.c.type} -> {self.results[0].type}")


# ---- what a fused attention kernel's work-group indexes stays inside what its launch and buffers declare
def _attention_launch(op, specials, smem_elements: int, per: int = 1) -> int:
  """Its head, block and lane are the launch's gidx0, gidx1 and lidx0, its threads lidx0's extent, its heads (gidx0's
  extent times `per`, where a work-group takes the q heads of a group) a whole number of groups of `heads`, its
  group (q heads a k and v head, 1 without the attribute) dividing `heads`, its shared memory at least
  `smem_elements`: the q heads it runs."""
  a, sp = op.attrs, {}
  if a.get('group', 1) < 1 or a['heads'] % a.get('group', 1): raise op.error(f"group must be a positive divisor of heads ({a['heads']}), got {a['group']}")
  for v, nm, ax in zip(specials, ('head', 'block', 'lane'), ('gidx0', 'gidx1', 'lidx0')):
    if v.op is None or v.op.name != 'uop.special' or v.op.attrs['axis'] != ax: raise op.error(f"{nm} must be the launch's uop.special {ax}")
    sp[nm] = v.op.attrs['size']
  if sp['lane'] != a['threads']: raise op.error(f"runs {a['threads']} threads a work-group, the launch's lidx0 has {sp['lane']}")
  if sp['head'] * per % a['heads']: raise op.error(f"{sp['head'] * per} heads (gidx0{f' times {per}' if per > 1 else ''}) are not a whole number of groups of {a['heads']}")
  if op.smem.op.attrs['size'] < smem_elements: raise op.error(f"its tiles take {smem_elements} elements of shared memory, smem declares {op.smem.op.attrs['size']}")
  return sp['head'] * per

def _layout_ends(op, rows: dict, heads: int) -> dict:
  """Each named operand's `<name>_layout` ([offset, b's stride, h's stride, a row's stride], none negative) and the
  elements its `rows[name]` rows of `dim` a head reach, over `heads` q heads (k's and v's: a head a group of them):
  name -> the size its buffer needs."""
  a, ends = op.attrs, {}
  for nm, n in rows.items():
    lay = list(a[f'{nm}_layout'])
    if len(lay) != 4 or any(x < 0 for x in lay): raise op.error(f"{nm}_layout must be [offset, b's stride, h's stride, a row's stride], none negative, got {lay}")
    hs = a['heads'] // a.get('group', 1) if nm in ('k', 'v') else a['heads']
    ends[nm] = lay[0] + (heads // a['heads'] - 1) * lay[1] + (hs - 1) * lay[2] + (n - 1) * lay[3] + a['dim']
  return ends

def _bias_end(op, heads: int) -> dict:
  """The bias's bias_layout ([offset, b's, h's, a query row's and a key's strides], none negative) and the elements
  its rows x keys a head reach over `heads` heads (as _layout_ends'), where the op has a bias."""
  if op.bias is None: return {}
  a, lay = op.attrs, list(op.attrs['bias_layout'])
  p = _ptr(op, op.bias, 'bias')
  if p.local or p.dtype != op.q.type.dtype: raise op.error(f"bias must be a buffer of q's type in global memory, got {p}")
  if len(lay) != 5 or any(x < 0 for x in lay): raise op.error(f"bias_layout must be [offset, b's stride, h's stride, a row's stride, a key's stride], none negative, got {lay}")
  return {'bias': lay[0] + (heads // a['heads'] - 1) * lay[1] + (a['heads'] - 1) * lay[2] + (a['rows'] - 1) * lay[3] + (a['keys'] - 1) * lay[4] + 1}

def _check_sizes(op, need: dict) -> None:
  """Each named operand's define_global declares at least the elements `need` gives it."""
  for nm, n in need.items():
    size = getattr(op, nm).op.attrs.get('size')
    if size is None or size < n: raise op.error(f"reads and writes {nm} up to element {n - 1}: its uop.define_global must declare a size of at least {n}, got {size}")


class AttentionOp(Operation):
  """`uop.attention %out, %q, %k, %v, %smem, %head, %block, %lane {causal, scale, heads, rows, keys, dim, out_layout,
  q_layout, k_layout, v_layout}`: a fused attention kernel's work-group (the target's FusedAttention, which its
  emitter writes whole): head `head` (b * heads + h) and its queries from `block` times `block_rows` on, thread
  `lane` of its `threads` (the specials of the launch), its tiles in `smem` (its queries' block_rows rows and two
  buffers each of key_rows rows of k and v, three with warpgroup = 1, rows of dim elements).
  q and out have `rows` rows of `dim` elements a head, k and v `keys`; each operand's layout [offset, b's stride, h's
  stride, a row's stride] places a head's rows, each row's elements contiguous (kernel.attention's views), inside its
  buffer's declared size. ` (%bias, [layout])` after v: added to the scaled scores, its bias_layout [offset, b's
  stride, h's stride, a query row's stride, a key's stride] placing its rows x keys a head. `, %lse` at the end: it also stores each query row's log-sum-exp of its scores (f32, at
  head * rows + row). `group = G`: each k and v head serves G q heads (grouped-query attention: k's and v's layouts
  place heads / G heads a batch). `lse_only = 1`: it stores the lse alone (out unwritten, no P V). `warpgroup = 1`: its products on warpgroup tensor cores (wgmma: 4 warps a 64 queries, 16 a
  warp). Collective: every thread of the work-group takes part."""
  name = 'uop.attention'
  OPERANDS = ('out', 'q', 'k', 'v', 'bias?', 'smem', 'head', 'block', 'lane', 'lse?')
  PRESENT_WITH = {'bias': 'bias_layout'}
  ATTRS = {'causal': 'int', 'scale': 'number', 'softcap': 'number?', 'heads': 'int', 'rows': 'int', 'keys': 'int', 'dim': 'int', 'block_rows': 'int',
           'key_rows': 'int', 'threads': 'int', 'out_layout': 'ints', 'q_layout': 'ints', 'k_layout': 'ints', 'v_layout': 'ints',
           'bias_layout': 'ints?', 'warpgroup': 'int?', 'group': 'int?', 'lse_only': 'int?'}
  RESULTS = 0
  TRAITS = frozenset()  # reads and writes memory
  FORMAT = '$out, $q, $k, $v?{ ($bias, $bias_layout)}, $smem, $head, $block, $lane?{, $lse} : type($out)'
  @property
  def written(self): return (self.out,) if self.lse is None else (self.out, self.lse)  # (lse_only: out a scratch it may write)
  def verify(self):
    if self.attrs.get('lse_only', 0) not in (0, 1) or (self.attrs.get('lse_only') and self.lse is None):
      raise self.error(f"lse_only = 1 stores the rows' log-sum-exp alone: it needs an lse operand, got lse_only = {self.attrs['lse_only']}{'' if self.lse is not None else ' and none'}")
    ps = [_ptr(self, v, nm) for v, nm in zip((self.out, self.q, self.k, self.v, self.smem), ('out', 'q', 'k', 'v', 'smem'))]
    if any(p.local for p in ps[:4]) or not ps[4].local: raise self.error("reads q, k and v and writes out in global memory, its tiles in shared memory (smem)")
    if len({p.dtype for p in ps}) != 1 or ps[0].dtype not in (D.f16, D.bf16): raise self.error(f"needs f16 or bf16 buffers of one type, got {', '.join(map(str, ps))}")
    for nm in ('head', 'block', 'lane'): _int(self, getattr(self, nm), nm)
    if self.causal not in (0, 1): raise self.error(f"causal must be 0 or 1, got {self.causal}")
    check_softcap(self)
    for nm in ('heads', 'rows', 'keys', 'dim', 'block_rows', 'key_rows', 'threads'):
      if self.attrs[nm] < 1: raise self.error(f"{nm} must be positive, got {self.attrs[nm]}")
    a = self.attrs
    if not a['scale'] > 0: raise self.error(f"scale must be positive (the kernel takes each row's max before scaling), got {a['scale']}")
    if a.get('warpgroup', 0) not in (0, 1): raise self.error(f"warpgroup must be 0 or 1, got {a['warpgroup']}")
    if a.get('warpgroup') and (a['threads'] % 128 or a['block_rows'] * 2 != a['threads']):
      raise self.error(f"warpgroup = 1 takes 16 queries a warp and whole warpgroups (128 threads), got {a['block_rows']} queries on {a['threads']} threads")
    if a.get('warpgroup') and (self.smem.op.name != 'uop.define_local' or self.smem.op.attrs.get('align', 16) % 1024):
      raise self.error("warpgroup = 1 reads its tiles by wgmma descriptors (128-byte swizzle): smem must be a uop.define_local aligned to 1024 bytes")
    nh = _attention_launch(self, (self.head, self.block, self.lane), (a['block_rows'] + (6 if a.get('warpgroup') else 4) * a['key_rows']) * a['dim'])
    need = _layout_ends(self, {'out': a['rows'], 'q': a['rows'], 'k': a['keys'], 'v': a['keys']}, nh) | _bias_end(self, nh)
    if self.lse is not None:
      p = _ptr(self, self.lse, 'lse')
      if p.local or p.dtype is not D.f32: raise self.error(f"lse must be an f32 buffer in global memory, got {p}")
      need['lse'] = nh * a['rows']
    _check_sizes(self, need)


class AttentionGradOp(Operation):
  """`uop.attention_grad %q, %k, %v, %g, %lse, %d (%bias, [layout]), %out, %smem, %head, %block, %lane (, %out2) {part, causal, scale,
  heads, rows, keys, dim, block_rows, threads, q_layout, k_layout, v_layout, g_layout}`: a fused attention backward
  kernel's work-group (kernel.attention_grad; the target's emitter writes it whole): head `head` (b * heads + h) and
  `block_rows` queries (part 0: dq into out) or keys (part 1: dk into out, dv into out2) from `block` times that on,
  thread `lane` of its `threads`, its six tiles of block_rows rows in `smem`. q and g have `rows` rows a head, k and v
  `keys`, placed by their layouts as uop.attention's; lse and d (f32) and the outputs are contiguous, a head after
  another, inside their buffers' declared sizes; the forward's bias, where it had one, as uop.attention's; `group` as
  uop.attention's (part 1 then runs a work-group a k and v head, its gidx0 the k heads, summing the gradients of the
  q heads of its group; dk and dv have heads / group heads a batch). `warpgroup = 1`: its products on warpgroup
  tensor cores, as uop.attention's (its 64 rows one warpgroup, smem aligned to 1024 bytes). Collective:
  every thread of the work-group takes part."""
  name = 'uop.attention_grad'
  OPERANDS = ('q', 'k', 'v', 'g', 'lse', 'd', 'bias?', 'out', 'smem', 'head', 'block', 'lane', 'out2?')
  PRESENT_WITH = {'bias': 'bias_layout'}
  ATTRS = {'part': 'int', 'causal': 'int', 'scale': 'number', 'softcap': 'number?', 'heads': 'int', 'rows': 'int', 'keys': 'int', 'dim': 'int', 'block_rows': 'int',
           'threads': 'int', 'q_layout': 'ints', 'k_layout': 'ints', 'v_layout': 'ints', 'g_layout': 'ints', 'bias_layout': 'ints?', 'group': 'int?', 'warpgroup': 'int?'}
  RESULTS = 0
  TRAITS = frozenset()  # reads and writes memory
  FORMAT = '$q, $k, $v, $g, $lse, $d?{ ($bias, $bias_layout)}, $out, $smem, $head, $block, $lane?{, $out2} : type($q)'
  @property
  def written(self): return (self.out,) if self.out2 is None else (self.out, self.out2)
  def verify(self):
    a = self.attrs
    ps = {nm: _ptr(self, getattr(self, nm), nm) for nm in ('q', 'k', 'v', 'g', 'lse', 'd', 'out', 'smem')}
    dt = ps['q'].dtype
    if dt not in (D.f16, D.bf16) or any(ps[n].dtype is not dt or ps[n].local for n in ('q', 'k', 'v', 'g', 'out')):
      raise self.error(f"needs f16 or bf16 q, k, v, g and out of one type in global memory, got {', '.join(str(ps[n]) for n in ('q', 'k', 'v', 'g', 'out'))}")
    if any(ps[n].dtype is not D.f32 or ps[n].local for n in ('lse', 'd')): raise self.error(f"lse and d must be f32 buffers in global memory, got {ps['lse']} and {ps['d']}")
    if not ps['smem'].local or ps['smem'].dtype is not dt: raise self.error(f"its tiles are in shared memory of its type, got {ps['smem']}")
    if a['part'] not in (0, 1) or (self.out2 is None) != (a['part'] == 0): raise self.error(f"part 0 writes dq (out), part 1 dk and dv (out, out2), got part {a['part']}")
    if self.out2 is not None and (not isinstance(self.out2.type, PtrType) or self.out2.type != ps['out']): raise self.error(f"out2 must be a buffer as out, got {self.out2.type}")
    for nm in ('heads', 'rows', 'keys', 'dim', 'block_rows', 'threads'):
      if a[nm] < 1: raise self.error(f"{nm} must be positive, got {a[nm]}")
    if a['causal'] not in (0, 1): raise self.error(f"causal must be 0 or 1, got {a['causal']}")
    check_softcap(self)
    if a.get('warpgroup', 0) not in (0, 1): raise self.error(f"warpgroup must be 0 or 1, got {a['warpgroup']}")
    if a.get('warpgroup') and (a['threads'] != 128 or a['block_rows'] != 64):
      raise self.error(f"warpgroup = 1 takes one warpgroup (128 threads) a 64 rows, got {a['block_rows']} rows on {a['threads']} threads")
    if a.get('warpgroup') and (self.smem.op.name != 'uop.define_local' or self.smem.op.attrs.get('align', 16) % 1024):
      raise self.error("warpgroup = 1 reads its tiles by wgmma descriptors (128-byte swizzle): smem must be a uop.define_local aligned to 1024 bytes")
    group = a.get('group', 1)
    nh = _attention_launch(self, (self.head, self.block, self.lane), 6 * a['block_rows'] * a['dim'], group if a['part'] == 1 else 1)
    need = _layout_ends(self, {'q': a['rows'], 'k': a['keys'], 'v': a['keys'], 'g': a['rows']}, nh) | _bias_end(self, nh)
    need.update(lse=nh * a['rows'], d=nh * a['rows'], out=(nh * a['rows'] if a['part'] == 0 else nh // group * a['keys']) * a['dim'])
    if self.out2 is not None: need['out2'] = need['out']
    _check_sizes(self, need)


class WgmmaFenceOp(Operation):
  """Orders the registers a warpgroup wrote (an accumulator's start) before the uop.wgmma ops after it read them."""
  name = 'uop.wgmma_fence'
  RESULTS = 0
  FORMAT = ''


class WgmmaCommitOp(Operation):
  """Closes the group of the uop.wgmma ops this warpgroup issued since the last commit."""
  name = 'uop.wgmma_commit'
  RESULTS = 0
  FORMAT = ''


class WgmmaWaitOp(Operation):
  """Waits until at most `pending` of the warpgroup's committed uop.wgmma groups are still running: their
  accumulators and the shared memory they read are free again."""
  name = 'uop.wgmma_wait'
  RESULTS = 0
  ATTRS = {'pending': 'int'}
  FORMAT = '$pending'
  def verify(self):
    if not 0 <= self.pending <= 7: raise self.error(f"pending must be 0 to 7, got {self.pending}")


class FenceAsyncSharedOp(Operation):
  """This thread's writes to shared memory (a store, a uop.copy_async it waited for) become visible to the tensor
  cores' reads of a uop.wgmma (the async proxy) once a barrier follows."""
  name = 'uop.fence_async_shared'
  RESULTS = 0
  FORMAT = ''

# the ops of a GPU's warps and tensor cores, which a CPU target and the interpreter do not run
WARP_OPS = frozenset({'uop.wmma', 'uop.ldmatrix', 'uop.shuffle_xor', 'uop.wgmma', 'uop.wgmma_fence', 'uop.wgmma_commit',
                      'uop.wgmma_wait', 'uop.fence_async_shared', 'uop.attention', 'uop.attention_grad'})

# ---- facts about a uop.func: what emitters, runtimes and the interpreter read alike
def const_value(v, dt: D.DType):
  """A `uop.const` attribute -> a numpy scalar in dt's compute type (a hex literal is a float's bit pattern)."""
  if dt.is_bool: return np.bool_(bool(v))
  if dt.is_int:
    x = int(v) & ((1 << dt.bits) - 1)  # hex literals and out-of-range ints wrap to the type's bits
    if dt.is_signed and x >= 1 << (dt.bits - 1): x -= 1 << dt.bits
    return dt.np.type(x)
  if isinstance(v, HexInt):
    return D.from_storage(np.array(int(v), dtype=f'u{dt.itemsize}').view(dt.np), dt)[()]
  with np.errstate(all='ignore'):
    return D.round_to(np.float64(v), dt).astype(D.compute_np(dt))[()]


def launch_dims(fn) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(global_size, local_size) a launch runs, padded to 3 axes with 1; a special beyond the attribute gives its own size."""
  g = list(fn.attrs.get('global_size') or ()) + [1] * 3
  l = list(fn.attrs.get('local_size') or ()) + [1] * 3
  named, collective = set(), False
  for op in fn.body.ops:
    if op.name == 'uop.special':
      k, n = int(op.attrs['axis'][4]), op.attrs['size']
      named.add(op.attrs['axis'])
      sizes, given = (g, fn.attrs.get('global_size') or ()) if op.attrs['axis'].startswith('gidx') else (l, fn.attrs.get('local_size') or ())
      if k >= len(given): sizes[k] = max(sizes[k], n)
    collective = collective or op.name in WARP_OPS
  # an axis no special names would run copies of the same work (no op tells them apart): it runs once, but for the
  # lanes of a work-group whose warp-collective ops take every one
  g = [n if f"gidx{k}" in named else 1 for k, n in enumerate(g[:3])]
  l = [n if f"lidx{k}" in named or collective else 1 for k, n in enumerate(l[:3])]
  return tuple(g), tuple(l)


def buffer_signature(fn) -> list[D.DType]:
  """The element dtype of each buffer argument, by define_global index (0 = output)."""
  sig: dict[int, D.DType] = {}
  for op in fn.body.ops:
    if op.name == 'uop.define_global':
      i, dt = op.attrs['index'], op.results[0].type.dtype
      if sig.get(i, dt) is not dt: raise TgcError(f"@{fn.sym_name}: buffer {i} is defined with two dtypes, {sig[i]} and {dt}")
      sig[i] = dt
  n = max(sig) + 1 if sig else 0
  for i in range(n):
    if i not in sig: raise TgcError(f"@{fn.sym_name}: buffer argument {i} has no uop.define_global")
  return [sig[i] for i in range(n)]


def buffer_sizes(fn) -> dict[int, int]:
  """define_global index -> the element count it declares (those that declare one)."""
  return {op.attrs['index']: op.attrs['size'] for op in fn.body.ops if op.name == 'uop.define_global' and 'size' in op.attrs}


def launch_info(fn) -> tuple:
  """What launching a uop.func takes, read from its body once: (name, buffer dtypes, declared sizes, (global_size,
  local_size), the buffers it writes). A runtime's Program is made from these (a function loaded from the disk cache
  keeps them: its kernels' bodies are not kept, and are lowered again only when something asks for one)."""
  written = sorted(written_args(fn))
  return fn.sym_name, buffer_signature(fn), buffer_sizes(fn), launch_dims(fn), written


def shared_layout(fn) -> tuple[dict[str, int], int]:
  """Where each uop.define_local lies in the work-group's shared memory (its byte offset, aligned as it asks: 16 bytes
  unless it says more) and the bytes they take in all: what a runtime that sizes shared memory at launch asks for."""
  offsets, end = {}, 0
  for op in fn.body.ops:
    if op.name == 'uop.define_local':
      al = op.attrs.get('align', 16)
      end = -(-end // al) * al
      offsets[op.attrs['sym']] = end
      end += -(-op.attrs['size'] * op.results[0].type.dtype.itemsize // 16) * 16
  return offsets, end


def acc_init_points(ops) -> dict[int, list]:
  """Op index -> the define_accs whose initial value is set just before that op: before the outermost of
  the loops it names when it comes first, else where it stands (emitters share this rule)."""
  pos = {op.results[0]: i for i, op in enumerate(ops) if op.results}
  out: dict[int, list] = {}
  for i, op in enumerate(ops):
    if op.name == 'uop.define_acc':
      out.setdefault(min([pos[r] for r in op.ranges if r in pos] + [i]), []).append(op)
  return out
