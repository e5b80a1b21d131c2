"""Value ranges of uop integers, and which loads and stores can be proven to stay inside their buffer.

`bounds(v)` gives [vmin, vmax] by interval arithmetic from specials, ranges, constants and variables.
uop-simplify uses it to fold index algebra; emitters use `unproven_accesses` to guard every load and
store that the analysis cannot prove in bounds (a gate's comparisons narrow the values they test), so
that no kernel, however it was written, touches memory outside the buffers it declares.
"""
from __future__ import annotations
from tgc.ir.core import Value
from tgc.ir.types import PtrType, VecType
from tgc.ir import dtypes as D

INF = float('inf')


def bounds(v: Value, memo: dict, narrow: dict | None = None) -> tuple:
  """[vmin, vmax] of an integer/bool value (floats: (-inf, inf)); `narrow` overrides some values' ranges."""
  if narrow and v in narrow: return narrow[v]
  r = memo.get(v) if not narrow else None
  if r is not None: return r
  r = _bounds(v, memo, narrow)
  if not narrow: memo[v] = r
  return r

def _bounds(v, memo, narrow):
  t = v.type
  if not isinstance(t, D.DType) or t.is_float: return (-INF, INF)
  lo_t, hi_t = D.min_max(t)
  op = v.op
  if op is None: return (lo_t, hi_t)
  n = op.name
  if n in ('uop.const', 'uop.special', 'uop.define_var', 'uop.range'):
    if n == 'uop.const':
      c = op.attrs['value']
      if not isinstance(c, int): return (lo_t, hi_t)
      c = (c - lo_t) % (hi_t - lo_t + 1) + lo_t  # what the device holds: an integer wraps to its type (0xff : i8 is -1)
      r = (c, c)
    elif n == 'uop.special': r = (0, op.attrs['size'] - 1)
    elif n == 'uop.define_var': r = (op.attrs['min'], op.attrs['max'])
    else:
      a, b = bounds(op.operands[0], memo, narrow), bounds(op.operands[1], memo, narrow)
      r = (a[0], max(a[0], b[1] - 1))
    return r if lo_t <= r[0] and r[1] <= hi_t else (lo_t, hi_t)  # (a value its type cannot hold: know nothing)
  opn = getattr(op, 'opname', None)
  if opn == 'cast' and isinstance(op.operands[0].type, D.DType) and op.operands[0].type.is_int:  # (a gather's clamped index)
    a0, a1 = bounds(op.operands[0], memo, narrow)
    return (a0, a1) if lo_t <= a0 and a1 <= hi_t else (lo_t, hi_t)
  if opn in ('cmplt', 'cmpne', 'cmpeq', 'and', 'or', 'xor') and t.is_bool: return (0, 1)
  if opn == 'cast':
    s = op.operands[0].type
    if not isinstance(s, D.DType) or s.is_float: return (lo_t, hi_t)
    r = bounds(op.operands[0], memo, narrow)
    return r if lo_t <= r[0] and r[1] <= hi_t else (lo_t, hi_t)  # a value the new type holds is unchanged
  if opn == 'where':
    (a0, a1), (b0, b1) = bounds(op.operands[1], memo, narrow), bounds(op.operands[2], memo, narrow)
    return (min(a0, b0), max(a1, b1))
  if opn in ('xor', 'or') and len(op.operands) == 2:  # of values that are not negative: below the next power of two
    (a0, a1), (b0, b1) = bounds(op.operands[0], memo, narrow), bounds(op.operands[1], memo, narrow)
    if a0 < 0 or b0 < 0: return (lo_t, hi_t)
    r = (0 if opn == 'xor' else max(a0, b0), (1 << max(a1, b1).bit_length()) - 1)
    return r if r[1] <= hi_t else (lo_t, hi_t)
  if opn is None or len(op.operands) != 2 or opn not in _INT_ALU: return (lo_t, hi_t)
  (a0, a1), (b0, b1) = bounds(op.operands[0], memo, narrow), bounds(op.operands[1], memo, narrow)
  if opn in ('shl', 'shr', 'and'):  # by a constant amount (shifts) or mask, of a value that is not negative
    if not (b0 == b1 and a0 >= 0 and b0 >= 0 and (opn == 'and' or b0 < t.bits)): return (lo_t, hi_t)
    r = (a0 << b0, a1 << b0) if opn == 'shl' else (a0 >> b0, a1 >> b0) if opn == 'shr' else (0, min(a1, b0))
  elif opn == 'add': r = (a0 + b0, a1 + b1)
  elif opn == 'sub': r = (a0 - b1, a1 - b0)
  elif opn == 'mul':
    c = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]; r = (min(c), max(c))
  elif opn == 'max': r = (max(a0, b0), max(a1, b1))
  elif opn == 'min': r = (min(a0, b0), min(a1, b1))
  elif opn == 'idiv':
    if b0 == b1 and b0 > 0 and a0 >= 0: r = (a0 // b0, a1 // b0)
    else: return (lo_t, hi_t)
  elif opn == 'mod':
    if b0 == b1 and b0 > 0 and a0 >= 0: r = (0, min(a1, b0 - 1)) if a1 >= b0 else (a0, a1)
    else: return (lo_t, hi_t)
  if r[0] < lo_t or r[1] > hi_t: return (lo_t, hi_t)  # might wrap: know nothing
  return r


_INT_ALU = ('add', 'sub', 'mul', 'idiv', 'mod', 'max', 'min', 'shl', 'shr', 'and')
_LEAVES = ('uop.special', 'uop.define_var', 'uop.const')  # (and uop.range, over its visible bounds)


def visible(v: Value, memo: dict) -> bool:
  """Whether the analysis models every op v is computed from: launch indices, loop counters, constants, variables
  and the integer ops over them, so that its bounds are the verifier's to check. A value read from memory, an
  accumulator or a float's cast is data: an access it indexes is guarded at run time instead."""
  key = ('visible', v)
  r = memo.get(key)
  if r is None:
    op = v.op
    t = v.type
    if op is None or not isinstance(t, D.DType) or t.is_float: r = False
    elif op.name in _LEAVES: r = True
    elif op.name == 'uop.range': r = all(visible(x, memo) for x in op.operands)
    else:
      opn = getattr(op, 'opname', None)
      src = op.operands[1:] if opn == 'where' else op.operands
      r = (opn in _INT_ALU or opn in ('cast', 'where')) and all(visible(x, memo) for x in src)
    memo[key] = r
  return r


def no_signed_wrap(op, memo: dict) -> bool:
  """Whether a signed integer add, sub or mul provably stays inside its type (LLVM's `nsw`: index algebra that
  LLVM may then widen to 64 bits, folding the sign extension of every address into the addressing)."""
  t = op.results[0].type
  if not isinstance(t, D.DType) or not t.is_int or not t.is_signed or len(op.operands) != 2: return False
  lo_t, hi_t = D.min_max(t)
  (a0, a1), (b0, b1) = bounds(op.operands[0], memo), bounds(op.operands[1], memo)
  if op.opname == 'add': c = (a0 + b0, a1 + b1)
  elif op.opname == 'sub': c = (a0 - b1, a1 - b0)
  elif op.opname == 'mul': c = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
  else: return False
  return lo_t <= min(c) and max(c) <= hi_t


def _conditions(g: Value, out: list):
  """The comparisons a gate is the conjunction of."""
  op = g.op
  if op is None: return
  if op.name == 'uop.and':
    for x in op.operands: _conditions(x, out)
  elif op.name == 'uop.cmplt': out.append(op)

def narrowed(gates: list, memo: dict) -> dict:
  """Ranges implied by the gates being true: `x < c` caps x, `c < x` floors it (x any value)."""
  conds: list = []
  for g in gates: _conditions(g, conds)
  nar: dict = {}
  for _ in range(2):  # a value tested twice (lower and upper bound) takes both
    for c in conds:
      a, b = c.operands
      (a0, a1), (b0, b1) = bounds(a, memo, nar), bounds(b, memo, nar)
      if b0 == b1 and b0 != INF: nar[a] = (a0, min(a1, b1 - 1))
      if a0 == a1 and a0 != -INF: nar[b] = (max(b0, a0 + 1), b1)
  return nar


def access_range(op, memo: dict, enclosing: list = ()) -> tuple:
  """[lo, hi] of the elements a load or store touches (vector lanes included), under its gate and the conditions
  of the uop.ifs around it."""
  gate = op.gate if op.name == 'uop.load' else (op.operands[3] if len(op.operands) == 4 else None)
  t = op.results[0].type if op.name == 'uop.load' else op.value.type
  if gate is not None and isinstance(gate.type, VecType):
    # a vector gate: lane l touches idx + l where its own gate holds (a lane whose gate is the constant false, none)
    g = gate.op
    if g is None or g.name != 'uop.vectorize': return _range(op.idx, t.count, list(enclosing), memo)
    los, his = [], []
    for l, x in enumerate(g.operands):
      if x.op is not None and x.op.name == 'uop.const' and not x.op.attrs['value']: continue
      lo, hi = _range(op.idx, 1, list(enclosing) + [x], memo)
      los.append(lo + l); his.append(hi + l)
    return (min(los), max(his)) if los else _range(op.idx, 1, list(enclosing), memo)
  return _range(op.idx, t.count if isinstance(t, VecType) else 1, list(enclosing) + ([gate] if gate is not None else []), memo)

def _range(idx, lanes: int, gates: list, memo) -> tuple:
  lo, hi = _index_bounds(idx, memo, narrowed(gates, memo) if gates else None)
  return lo, hi + lanes - 1

def _index_bounds(idx, memo, nar):
  if not nar: return bounds(idx, memo)
  # re-derive through the ops between the narrowed values and the index
  return bounds(idx, {}, nar)


def accesses(fn, memo: dict, unconditional: bool = False):
  """(op, buffer, index, declared size or None, lo, hi, conditional) for each access of a uop.func to memory: the elements
  it may touch under its gate and the uop.ifs around it, the size its define_global or define_local declares, and
  whether a gate or a uop.if decides if it happens. Loads and stores; a uop.copy_async's write to shared memory
  (always: a false gate writes zeros) and its read of global memory. `unconditional`: those a gate or uop.if does not
  decide, alone (their ranges need no narrowing: the others' are the costly part)."""
  ifs = []
  size = lambda b: b.op.attrs.get('size') if b.op is not None and b.op.name in ('uop.define_global', 'uop.define_local') else None
  for op in fn.body.ops:
    if op.name == 'uop.if': ifs.append(op.operands[0])
    elif op.name == 'uop.endif' and ifs: ifs.pop()
    if op.name in ('uop.load', 'uop.store'):
      n = size(op.buf)
      cond = bool(ifs) or len(op.operands) == 4  # (a gated load: buf, idx, gate, alt; a gated store: buf, idx, value, gate)
      if cond and unconditional: continue
      yield (op, op.buf, op.idx, n, *(access_range(op, memo, ifs) if n is not None else (None, None)), cond)
    elif op.name == 'uop.copy_async' and isinstance(op.dst.type, PtrType):
      lanes = max(1, op.attrs['bytes'] // op.dst.type.dtype.itemsize)
      for buf, idx, gated in ((op.dst, op.didx, False), (op.src, op.sidx, op.gate is not None)):
        n = size(buf)
        gates = list(ifs) + ([op.gate] if gated else [])
        if gates and unconditional: continue
        yield (op, buf, idx, n, *(_range(idx, lanes, gates, memo) if n is not None else (None, None)), bool(gates))


def unproven_accesses(fn, memo: dict | None = None) -> set:
  """Loads and stores of a uop.func not provably inside their define_global's size (a missing size: all)."""
  memo = {} if memo is None else memo
  return {op for op, _, _, size, lo, hi, _ in accesses(fn, memo)
          if op.name in ('uop.load', 'uop.store') and (size is None or not (lo >= 0 and hi < size))}


def outside_accesses(fn, memo: dict | None = None) -> list:
  """(op, buffer, size, lo, hi) of the unconditional accesses whose index the analysis sees whole (`visible`) and
  cannot keep inside the size their buffer declares: what the verifier rejects. The rest are proven, or guarded at
  run time: a data-dependent index, or a gate (or uop.if) whose condition the analysis cannot narrow the index by
  (a padded tile's `m < 20 && n < 7` over the index m * 7 + n); a guarded access outside its buffer behaves as if
  its gate were false (a load gives its alternative value, or zero; a store writes nothing), on every device."""
  memo = {} if memo is None else memo
  return [(op, buf, size, lo, hi) for op, buf, idx, size, lo, hi, cond in accesses(fn, memo, unconditional=True)
          if size is not None and not (lo >= 0 and hi < size) and visible(idx, memo)]


def covered(fn, sizes: dict) -> set:
  """The define_global indices i of `sizes` (index -> elements) whose every element a store of `fn` provably writes
  on every launch: stores neither gated nor under a uop.if, in loops of constant bounds that run, at an affine index
  over specials and those loops (lanes of a vector store and stores of one index but for a constant are axes too)
  whose axes' strides are a layout's of exactly [0, size). Anything else is not proven (a hand-written kernel that
  stores part of a result: the compiler defines the rest)."""
  memo, found, opened = {}, {}, []  # opened: a uop.range (None: a uop.if, or a loop that may not run)
  for op in fn.body.ops:
    n = op.name
    if n == 'uop.range':
      s, e = (v.op.attrs['value'] if v.op is not None and v.op.name == 'uop.const' else None for v in (op.start, op.end))
      opened.append(op if isinstance(s, int) and isinstance(e, int) and e > s else None)
    elif n == 'uop.if': opened.append(None)
    elif n in ('uop.endrange', 'uop.endif') and opened: opened.pop()
    elif n == 'uop.store' and op.gate is None and None not in opened and op.buf.op is not None and op.buf.op.name == 'uop.define_global':
      i = op.buf.op.attrs['index']
      if i not in sizes or (a := _affine(op.idx, opened)) is None: continue
      lo, hi = bounds(op.idx, memo)
      lanes = op.value.type.count if isinstance(op.value.type, VecType) else 1
      if lo < 0 or hi + lanes > sizes[i]: continue  # (might wrap, or reaches outside: the guards drop it)
      terms, c0 = a
      if lanes > 1: terms = {**terms, ('lane',): (1, lanes)}
      found.setdefault(i, {}).setdefault(tuple(sorted((k, c) for k, (c, _) in terms.items())), (terms, []))[1].append(c0)
  out = set()
  for i, groups in found.items():
    for terms, c0s in groups.values():
      c0s = sorted(set(c0s))
      d = c0s[1] - c0s[0] if len(c0s) > 1 else 1
      if any(b - a != d for a, b in zip(c0s, c0s[1:])): continue
      axes = sorted((abs(c), m) for c, m in [*terms.values(), (d, len(c0s))] if m > 1 and c)
      step = 1
      for c, m in axes:
        if c != step: break
        step *= m
      else:
        if step == sizes[i] and c0s[0] + sum(min(0, c * (m - 1)) for c, m in terms.values()) == 0: out.add(i)
  return out


def _affine(v: Value, opened: list):
  """v as ({axis: (coefficient, extent)}, constant) over specials and the open loops, or None."""
  op = v.op
  if op is None: return None
  n = op.name
  if n == 'uop.const': return ({}, op.attrs['value']) if isinstance(op.attrs['value'], int) else None
  if n == 'uop.special': return {('special', op.attrs['axis']): (1, op.attrs['size'])}, 0
  if n == 'uop.range':
    if op not in opened: return None
    s, e = op.start.op.attrs['value'], op.end.op.attrs['value']
    return {('range', id(op)): (1, e - s)}, s
  opn = getattr(op, 'opname', None)
  if opn == 'cast' and isinstance(op.operands[0].type, D.DType) and op.operands[0].type.is_int: return _affine(op.operands[0], opened)
  if opn not in ('add', 'sub', 'mul', 'shl') or len(op.operands) != 2: return None
  a, b = _affine(op.operands[0], opened), _affine(op.operands[1], opened)
  if a is None or b is None: return None
  if opn in ('mul', 'shl'):
    if opn == 'shl':
      if b[0] or not 0 <= b[1] < 63: return None
      b = ({}, 1 << b[1])
    if b[0] and a[0]: return None
    (t, c), k = (a, b[1]) if not b[0] else (b, a[1])
    return {x: (cx * k, m) for x, (cx, m) in t.items()}, c * k
  sign = 1 if opn == 'add' else -1
  terms = dict(a[0])
  for x, (cx, m) in b[0].items():
    cx = terms.get(x, (0, m))[0] + sign * cx
    if cx: terms[x] = (cx, m)
    else: terms.pop(x, None)
  return terms, a[1] + sign * b[1]
