"""kernelize: the tensor graph -> one kernel.func per fused kernel, and the host schedule.

Which values become buffers (tinygrad's rules, ir.md):
  - function results (a reshape of a buffer stays a host-side reshape), `tensor.contiguous`;
  - where a reduce's result reaches a movement op or another reduce through elementwise ops (its consumers
    would need it at another shape): the value at that point when there is one such point (the elementwise
    ops up to it are the reduce kernel's epilogue: a matmul's bias and relu), else the reduce's result;
    elementwise ops after a reduce otherwise fuse into its kernel;
  - a value with several consumers when its fused graph contains a reduce (recomputing would repeat the
    reduction), or when its consumers would read the buffers it reads at its own size more often than storing it
    and reading it back costs (a residual stream: n buffers read by k consumers, n * k > n + 1 + k); other
    elementwise values are recomputed in each consumer instead, as tinygrad does;
  - a computed value under a pad (padding must read 0, not f(0));
  - a factor of a sum of products that it reads broadcast RECOMPUTE (16) times or more per element and that costs
    several ALU ops and loads a point (a 1x1 conv's input after batch norms and activations, a matmul's input that is
    a layernorm of a residual sum): computed once, not per output;
  - a computed factor of a sum of products, read broadcast RECOMPUTE times or more through movement ops no one view
    composes (an attention's heads moved beside its tokens and merged): the value below the first such movement, so
    that its copy is a plain transpose and the product reads one view.
A buffer that is a reduce whose result a later reduce over the same rows reads back as a broadcast (softmax's
max under its exp-sum) is computed and stored by that later reduce's kernel, in a stage before its own; an
elementwise value over those rows that reads their results as broadcasts is the kernel's epilogue (softmax is one
kernel); a later reduce that reads such a kernel's results joins it in one more stage (choose_fusions). An
elementwise buffer that a later elementwise kernel reads point by point is computed and stored by that kernel too
(choose_siblings: Adam's moments beside the parameter's update); elementwise results of one shape that no kernel reads
are one kernel (choose_horizontal: the updates of an optimizer's parameters of one shape).
Constants and movement ops never make a kernel: movement ops fold into the view stacks of the loads,
splat constants become kernel.const (under a mask: a one-element host buffer read through it), dense constants stay
on the host as buffers.
"""
from __future__ import annotations
import math
from tgc.ir.core import Operation, Module, Value, Block, REGISTRY, MOVEMENT, ELEMENTWISE
from tgc.ir.types import TensorType, BufType
from tgc.ir import dtypes as D
from tgc.ir.attrs import Symbol
from tgc.shape import ViewStack, View
from tgc.passes.manager import Pass
from tgc.target import DeviceSpec, DEVICE_OPTIONS
from tgc.ir.diagnostics import Diagnostic
from tgc.passes.tensor_decompose import decompose_patterns, declared_patterns, partial_reduce
from tgc.ir.rewrite import apply_patterns, PatternMatcher

K = lambda n: REGISTRY[f'kernel.{n}']


class _Realize(Exception):
  """Raised while building a kernel: this value must become a buffer first."""
  def __init__(self, v): self.v = v


def _movement_base(v: Value) -> Value:
  while v.op is not None and MOVEMENT in v.op.TRAITS: v = v.op.operands[0]
  return v

def _attention_view(vs: ViewStack, t: TensorType) -> ViewStack | None:
  """A view stack of an attention operand's shape (batch..., rows, E) as the kernel reads it, (B, H, rows, E) with
  H the last batch axis and B the others merged: one unmasked view, each row contiguous, its offset and strides whole
  16-byte chunks (the kernel copies rows 16 bytes at a time); else None."""
  *batch, rows, e = t.shape
  shape = (math.prod(batch[:-1]), batch[-1] if batch else 1, rows, e)
  vs = vs.reshape(shape).simplify()
  if len(vs.views) != 1 or (v := vs.views[0]).mask is not None or (e > 1 and v.strides[3] != 1): return None
  per = max(1, 16 // t.dtype.itemsize)
  return vs if all(x % per == 0 for x in (v.offset, *v.strides[:3])) and all(x >= 0 for x in v.strides) else None


def _bias_view(vs: ViewStack, t: TensorType) -> ViewStack | None:
  """A view stack of an attention's bias (batch..., L, S) as the kernel reads it, (B, H, L, S) as _attention_view's
  heads: one unmasked view, strides of any size (0 along the axes a mask is broadcast over); else None."""
  *batch, rows, keys = t.shape
  vs = vs.reshape((math.prod(batch[:-1]), batch[-1] if batch else 1, rows, keys)).simplify()
  return vs if len(vs.views) == 1 and vs.views[0].mask is None and all(x >= 0 for x in vs.views[0].strides) else None


def softcap_attr(op: Operation) -> dict:
  """An attention op's softcap attribute (as a dict to merge into another's attributes), where it caps the scores."""
  return {'softcap': op.attrs['softcap']} if op.attrs.get('softcap') else {}


def attention_key(op: Operation) -> tuple:
  """What a tensor.attention and a tensor.attention_lse of it share: q, k, the bias, causal, scale and softcap."""
  return (op.q, op.k, op.bias, op.causal, float(op.attrs['scale']), op.softcap or 0.0)


def attention_grad_key(op: Operation) -> tuple:
  """What the tensor.attention_grad ops of one backward share (one dq kernel, one dk and dv kernel): their operands,
  causal, scale and softcap."""
  return (tuple(op.operands), op.causal, float(op.attrs['scale']), op.softcap or 0.0)


def attention_layouts(fn: Operation) -> None:
  """An attention's result that a permute of its heads and rows reads (the next projection's layout) besides other
  readers (a backward's): those others read it back from that permute's result through the inverse permute, so that
  the attention's kernel stores the permuted layout alone (Scheduler.attention_permuted)."""
  users: dict = {}
  for op in fn.body.ops:
    for v in op.operands: users.setdefault(v, []).append(op)
  new = []
  for op in fn.body.ops:
    new.append(op)
    if op.name != 'tensor.permute' or op.order[-1] != len(op.order) - 1 or (src := op.operands[0]).op is None or src.op.name != 'tensor.attention': continue
    others = [u for u in users.get(src, []) if u is not op]
    if not others or any(u.name == 'tensor.permute' and u is not op for u in others): continue
    inv = tuple(sorted(range(len(op.order)), key=op.order.__getitem__))
    back = REGISTRY['tensor.permute']([op.results[0]], [src.type], {'order': inv}, op.loc)
    new.append(back)
    for u in others: u.operands = [back.results[0] if x is src else x for x in u.operands]
    users[src] = [op]
  fn.body.ops = new


def _is_leaf(v: Value) -> bool:
  return v.op is None or v.op.name in ('tensor.const', 'tensor.empty')


def _reduce_under(v: Value):
  """The reduce op that v is computed from through elementwise ops and splat constants alone (a mean: a sum times
  1/n), or None."""
  found, seen, stack = set(), set(), [v]
  while stack:  # (a loop, not recursion: a chain of thousands of ops)
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    op = u.op
    if op is None: return None
    if op.name == 'tensor.reduce': found.add(op); continue
    if op.name == 'tensor.const':
      if isinstance(op.attrs['value'], tuple): return None
      continue
    if not (ELEMENTWISE in op.TRAITS and hasattr(op, 'opname')): return None
    stack += op.operands
  return next(iter(found)) if len(found) == 1 else None


def positions_scan(op) -> bool:
  """A sum scan of one splat constant (an arange: positions along an axis): each kernel that reads it computes it from
  the point's index (kernel.index), c * (i + 1), or c * i exclusive."""
  src = op.src.op
  return op.kind == 'add' and op.init is None and src is not None and src.name == 'tensor.const' and not isinstance(src.attrs['value'], tuple) \
    and (op.results[0].type.dtype.is_int or op.results[0].type.dtype.is_float) and op.results[0].type.numel > 0


def _widens(cast: Operation) -> bool:
  """Whether a cast takes a float to a wider float (every value kept)."""
  a, b = cast.operands[0].type.dtype, cast.results[0].type.dtype
  return a.is_float and b.is_float and b.itemsize > a.itemsize


def _path_views(leaf_shape, path, start: ViewStack | None = None) -> ViewStack:
  """The view stack that reads a buffer of leaf_shape (or through the stack `start`) through the movement ops of
  `path` (the last is applied first)."""
  st = start or ViewStack.from_shape(leaf_shape)
  for op in reversed(path):
    n = op.name
    if n == 'tensor.reshape': st = st.reshape(op.results[0].type.shape)
    elif n == 'tensor.expand': st = st.expand(op.results[0].type.shape)
    elif n == 'tensor.permute': st = st.permute(op.order)
    elif n == 'tensor.pad': st = st.pad(op.pads)
    elif n == 'tensor.shrink': st = st.shrink(op.bounds)
    elif n == 'tensor.flip': st = st.flip(op.axes)
  return st.simplify()


class Scheduler:
  def __init__(self, fn: Operation, used_names: set[str], gpu: bool = False):
    self.fn, self.used_names, self.gpu = fn, used_names, gpu
    self.users: dict[Value, list[Operation]] = {}
    for op in fn.body.ops:
      for v in op.operands: self.users.setdefault(v, []).append(op)
    self.order = {op: i for i, op in enumerate(fn.body.ops)}
    self.R: set[Value] = set()
    self.host_reshape: dict[Value, Value] = {}
    self.fused: dict[Value, Value] = {}  # a reduce result -> the later reduce whose kernel computes and stores it too
    self.unstored: set[Value] = set()     # ... and those of them no other kernel and no result reads: not stored at all
    self.siblings: dict[Value, Value] = {}  # an elementwise buffer -> the later elementwise kernel that computes and stores it too
    self.depth: dict[Value, int] = {}       # a value's chain of ops down to buffers (_bound_depth)
    self.read_by: dict = {}                 # a root (None: the results) -> the buffers its kernel reads (readers)
    self.attention_stores: dict[Value, dict] = {}  # an attention's result -> what its kernel stores: 'out' (it, or its
                                                   # permuted layout: attention_permuted), 'lse' (its rows' log-sum-exp)
    self.stored_by: dict[Value, Value] = {}        # those values (but the result itself) -> the attention
    self.attention_grads: dict[tuple, dict] = {}   # attention_grad's operands and attrs -> {wrt: its result}

  # ---- phase 1: which values are buffers ----
  def compute_ops(self):
    return [op for op in self.fn.body.ops if op.name not in ('func.return',)]

  def eff_uses(self, v: Value) -> int:
    n = 0
    for u in self.users.get(v, []):
      n += self.eff_uses(u.results[0]) if MOVEMENT in u.TRAITS else 1
    return n

  def choose(self):
    ret = self.fn.body.ops[-1]
    for v in ret.operands:
      b = v
      while b.op is not None and b.op.name == 'tensor.reshape': b = b.op.operands[0]
      if b.op is None or _is_leaf(b): continue  # an argument or a host constant, maybe reshaped on the host
      self.R.add(b)
    ops = self.fn.body.ops
    pos = {op: i for i, op in enumerate(ops)}
    later_lse: dict[Value, Value] = {}  # an attention -> the lse before it that its kernel stores
    for op in ops:
      if op.name == 'tensor.contiguous' or (op.name == 'tensor.scan' and not positions_scan(op)): self.R.add(op.results[0])  # (a scan is a kernel of its own)
      if op.name == 'tensor.attention':  # (left whole for the device: a kernel of its own)
        v = op.results[0]
        self.R.add(v)
        st = self.attention_stores[v] = {'out': v}
        if v in later_lse: st['lse'] = later_lse[v]
        if (u := self.attention_permuted(v)) is not None: self.R.add(u); st['out'] = u; self.stored_by[u] = v
        for x in op.operands:  # its operands read where they are computed, through a view, or else copied
          b, _ = self.attention_operand(x, x is op.bias) or (x, None)
          if b.op is not None and not _is_leaf(b): self.R.add(b)
      if op.name == 'tensor.attention_grad':  # (left whole: dq a kernel, dk and dv of the same operands another)
        self.R.add(op.results[0])
        self.attention_grads.setdefault(attention_grad_key(op), {})[op.wrt] = op.results[0]
        for x in op.operands[:4] + op.operands[6:]:
          b, _ = self.attention_operand(x, x is op.bias) or (x, None)
          if b.op is not None and not _is_leaf(b): self.R.add(b)
        for x in op.operands[4:6]:  # (the rows' lse and d: contiguous buffers)
          if x.op is not None and not _is_leaf(x): self.R.add(x)
      if op.name == 'tensor.attention_lse':  # (the kernel of an attention of it before stores it; else one of its own)
        a, r = attention_key(op), op.results[0]
        self.R.add(r)
        v = next((x for x, st in self.attention_stores.items() if attention_key(x.op) == a and 'lse' not in st), None)
        if v is None:  # (an attention of it after it, which everything reading the lse follows: a backward's graph lists
          # the lse that dq reads before the forward that d = rowsum(g * out) reads)
          v = next((o.results[0] for o in ops[pos[op] + 1:] if o.name == 'tensor.attention' and attention_key(o) == a
                    and o.results[0] not in later_lse and all(pos[u] > pos[o] for u in self.users.get(r, []))), None)
          if v is not None: later_lse[v] = r
        if v is not None:
          if v in self.attention_stores: self.attention_stores[v]['lse'] = r
          self.stored_by[r] = v
        else:
          for x in op.operands:
            b, _ = self.attention_operand(x, x is op.bias) or (x, None)
            if b.op is not None and not _is_leaf(b): self.R.add(b)
      if op.name == 'tensor.reduce':
        pts = self._reduce_escapes(op.results[0])
        # one way out: the elementwise ops up to it are the reduce kernel's epilogue (a matmul's bias and relu),
        # as in tinygrad; several: the reduce itself is the buffer
        if pts: self.R.add(next(iter(pts)) if len(pts) == 1 else self._narrowed(op.results[0]))
      if op.name == 'tensor.pad':
        u = _movement_base(op.operands[0])
        if u.op is not None and not _is_leaf(u): self.R.add(u)
    for grp in self.attention_grads.values():  # (dk's kernel stores dv too)
      if 1 in grp and 2 in grp: self.stored_by[grp[2]] = grp[1]
    self._materialize_broadcast_factors()
    has_reduce: dict[Value, bool] = {}
    for op in self.fn.body.ops:
      if not op.results: continue
      v = op.results[0]
      if _is_leaf(v): has_reduce[v] = False; continue
      hr = op.name == 'tensor.reduce' or any(has_reduce.get(s, False) and s not in self.R for s in op.operands)
      has_reduce[v] = hr
      if MOVEMENT in op.TRAITS or v in self.R or (uses := self.eff_uses(v)) < 2 or self._one_sink(v): continue
      # an elementwise value that each of its consumers would compute from n buffers of its size: reading them
      # n * uses times costs more than storing it once (n reads and a write) and reading it back (uses)
      if hr or (ELEMENTWISE in op.TRAITS and self._full_reads(v) * (uses - 1) > uses + 1):
        b = self._unwidened(v)
        self.R.add(b)
        if b is not v: has_reduce[v] = False  # (v: a cast of a buffer, which its readers compute again)
    if self.gpu: self._views_not_copies()
    self._bound_depth()
    self.choose_fusions()
    self.choose_siblings()
    self.choose_horizontal()

  def _views_not_copies(self):
    """GPU: a `contiguous` that only products read as a factor, of a value computed into a buffer anyway (a GELU's
    output, which the next Linear reads, transposed for its weight's gradient; the heads of attention sliced from a qkv
    Linear's output), through slices, reshapes and permutes that one view composes, is no copy of its own: the
    product's tiles read the buffer through that view, as they read a transposed argument (the copies cost the f32 GPT
    step 40 kernels of 6 to 25 MB). A copy of an argument stays (a conv's weight, copied once a call into the layout
    its tiles read)."""
    results = set(self.fn.body.ops[-1].operands)
    for c in [v for v in self.R if v.op.name == 'tensor.contiguous' and v not in results]:
      path, b = [], c.op.operands[0]
      while b not in self.R and b.op is not None and b.op.name in ('tensor.reshape', 'tensor.permute', 'tensor.shrink'): path.append(b.op); b = b.op.operands[0]
      if b not in self.R or len(vs := _path_views(b.type.shape, path).views) > 1: continue
      # (a slice whose rows start off 16 bytes, a head of 36 bf16 values, would take the tiles' copies 2 bytes at a time)
      if any(x * b.type.dtype.itemsize % 16 for x in (vs[0].offset, *(st for st in vs[0].strides if st != 1))): continue
      if all(self._product_factor(u) for u in self.users.get(c, [])): self.R.discard(c)

  def _product_factor(self, op: Operation) -> bool:
    """Whether op's result reaches, through movement ops and casts that widen it (a bf16 factor summed in f32), only
    multiplies that (through casts) are summed."""
    if op.name in ('tensor.reshape', 'tensor.permute', 'tensor.expand') or (op.name == 'tensor.cast' and _widens(op)):
      return all(self._product_factor(u) for u in self.users.get(op.results[0], []))
    if op.name != 'tensor.mul': return False
    v = op.results[0]
    while len(us := self.users.get(v, [])) == 1 and us[0].name == 'tensor.cast': v = us[0].results[0]
    return bool(us) and all(u.name == 'tensor.reduce' and u.kind == 'add' for u in us)

  def _narrowed(self, r: Value) -> Value:
    """The buffer of a reduce read by several kernels: the reduce, or the one cast of it to a narrower float that is
    all that reads it (a half-precision product's float32 sums rounded, as the Tensor API's matmul rounds them): the
    values the readers take, in half the bytes (attention's scores: 8x16x1024x1024 as float32 cost their product's
    kernel 0.48 ms and each reader as much again)."""
    v = r
    while len(us := self.users.get(v, [])) == 1 and us[0].name == 'tensor.reshape' and us[0].results[0] not in self.R: v = us[0].results[0]
    if len(us) == 1 and us[0].name == 'tensor.cast':  # (through the reshapes a matmul's sums take: store views)
      c = us[0].results[0]
      if c.type.dtype.is_float and r.type.dtype.is_float and c.type.dtype.itemsize < r.type.dtype.itemsize: return c
    return r

  def _unwidened(self, v: Value) -> Value:
    """The buffer for a value v that several kernels read: v, or where v only widens a float (a bf16 Linear's output
    cast to f32 for the GELU after it and for its gradient), the narrow value it casts (below reshapes): the readers
    widen it again for free, and it takes half the bytes to write and to read (the bf16 GPT step's MLP kept the f32
    copy: 25 MB a layer)."""
    o = v.op
    if o.name != 'tensor.cast' or not (v.type.dtype.is_float and (s := o.operands[0]).type.dtype.is_float and s.type.dtype.itemsize < v.type.dtype.itemsize):
      return v
    while s.op is not None and s.op.name == 'tensor.reshape' and s not in self.R: s = s.op.operands[0]  # (reshapes: views of it)
    return v if s.op is None or _is_leaf(s) or MOVEMENT in s.op.TRAITS else s

  def _bound_depth(self):
    """A chain of ops deeper than MAX_DEPTH inside one kernel is cut by a buffer every MAX_DEPTH ops: a kernel's
    expression stays small enough to build and compile (a loop of 3000 elementwise steps through the Tensor API
    passed Python's recursion limit here)."""
    depth: dict = {}
    for op in self.fn.body.ops:
      if not op.results: continue
      v = op.results[0]
      d = self.depth[v] = 0 if _is_leaf(v) else 1 + max((depth.get(s, 0) for s in op.operands if s not in self.R), default=0)
      if d > MAX_DEPTH and MOVEMENT not in op.TRAITS: self.R.add(v); d = 0
      depth[v] = d

  def _one_sink(self, v: Value) -> bool:
    """Whether every use of v joins, through elementwise ops and reshapes alone, in one value that is all that leaves
    them (HardSwish's r * clip(r + 3, 0, 6) / 6 of a conv's r): that value's kernel computes v once and uses it twice,
    where a buffer of v would cost a kernel and a round trip through memory."""
    seen, stack, out = {v}, [v], set()
    while stack:
      u = stack.pop()
      for user in self.users.get(u, []):
        w = user.results[0] if user.results else None
        if w is None or not (user.name == 'tensor.reshape' or (ELEMENTWISE in user.TRAITS and hasattr(user, 'opname'))):
          out.add(u); continue
        if w in self.R: out.add(w); continue  # a buffer the uses meet in (relu's where(r > 0, r, 0)) is the sink
        if w not in seen: seen.add(w); stack.append(w)
      if u in self.R and u is not v: out.add(u)
    return len(out) == 1 and next(iter(out)) is not v

  def _materialize_broadcast_factors(self):
    """A factor of a sum of products that the product reads broadcast RECOMPUTE times or more, and that costs several
    ALU ops a point (a 1x1 conv's input: batch norms, activations, residual sums), becomes a buffer: its kernel
    computes it once per point instead of once per output channel."""
    for op in self.fn.body.ops:
      if op.name != 'tensor.reduce' or op.kind != 'add': continue
      mul = op.src.op
      while mul is not None and mul.name == 'tensor.cast': mul = mul.operands[0].op
      if mul is None or mul.name != 'tensor.mul': continue
      for x in mul.operands:
        self._materialize_tangled(x, op)
        b = _movement_base(x)
        if b.op is None or _is_leaf(b) or b in self.R or ELEMENTWISE not in b.op.TRAITS: continue
        if op.src.type.numel >= RECOMPUTE * b.type.numel and self._alu_cost(b) >= 4: self.R.add(b)

  def _materialize_tangled(self, x: Value, red: Operation):
    """A factor of a sum of products that is a computed value read through movement ops no one view composes (an
    attention's output, its heads moved beside the tokens and merged: `transpose(1, 2).reshape(b, t, d)`), read
    broadcast RECOMPUTE times or more: the moved value (below the product's expand) becomes a buffer, a copy in its
    layout, so that the product reads it through one view, its index affine (GPT-2's projection after attention: the
    index of every load a division and remainders, 47 GFLOP/s)."""
    path, v = [], x
    while v.op is not None and MOVEMENT in v.op.TRAITS: path.append(v); v = v.op.operands[0]
    if v.op is None or _is_leaf(v) or red.src.type.numel < RECOMPUTE * v.type.numel: return
    # the value below the first movement that no one view composes with those before it (the permuted heads, below
    # the reshape that merges them with the tokens): its copy is a plain transpose, and the rest a view of it
    for i in range(len(path) - 1, 0, -1):
      # (reshapes and permutes only below it: a copy of v's elements, never of a window's repeats: a conv's pool view)
      if any(u.op.name not in ('tensor.reshape', 'tensor.permute') for u in path[i:]): return
      if len(_path_views(v.type.shape, [u.op for u in path[i - 1:]]).views) > 1:
        if path[i] not in self.R: self.R.add(path[i])
        return

  def _alu_cost(self, v: Value, limit: int = 4) -> int:
    """ALU ops computing v down to buffers and leaves, and the buffers it reads past the first (each a load per point
    where v is recomputed: a layernorm's (x + y - mean) * rstd reads four), at most `limit` counted."""
    n, seen, stack, reads = 0, set(), [v], set()
    while stack and n + max(0, len(reads) - 1) < limit:
      u = stack.pop()
      if u in seen: continue
      seen.add(u)
      if u.op is None or (u in self.R and u is not v): reads.add(u); continue
      if _is_leaf(u) or u.op.name == 'tensor.reduce': continue
      if MOVEMENT in u.op.TRAITS: stack.append(u.op.operands[0]); continue
      if ELEMENTWISE in u.op.TRAITS and hasattr(u.op, 'opname'): n += 1
      stack += u.op.operands
    return n + max(0, len(reads) - 1)

  def _full_reads(self, v: Value, limit: int = 8) -> int:
    """The buffers that computing v through elementwise ops reads at v's own size (a residual stream's terms; a
    broadcast of a smaller buffer, a bias, stays in cache and is not counted), at most `limit` counted."""
    n, seen, stack = 0, set(), [v]
    while stack and n < limit:
      u = stack.pop()
      if u in seen: continue
      seen.add(u)
      if u.op is None or (u in self.R and u is not v) or u.op.name in ('tensor.gather', 'tensor.reduce'):
        n += u.type.numel >= v.type.numel; continue
      if _is_leaf(u): continue
      stack += u.op.operands
    return n

  def reads(self, start) -> dict[Value, list[tuple]]:
    """The buffers (values of R, arguments) that computing the values `start` reads, each with the movement paths
    it is read through (as a kernel computes them: up to the buffers)."""
    out: dict[Value, list[tuple]] = {}
    seen, stack = set(), [(u, ()) for u in start]
    while stack:
      u, path = stack.pop()
      if (u, path) in seen: continue
      seen.add((u, path))
      if u in self.R or u.op is None: out.setdefault(u, []).append(path); continue
      if MOVEMENT in u.op.TRAITS: stack.append((u.op.operands[0], path + (u.op,)))
      else: stack += [(x, path) for x in u.op.operands]
    return out

  def readers(self, r: Value | None) -> dict[Value, list[tuple]]:
    """reads() of root r's kernel (None: of the function's results), walked once when a fusion rule asks (the buffers
    are chosen by then)."""
    if r not in self.read_by:
      self.read_by[r] = self.reads(r.op.operands if r is not None else self.fn.body.ops[-1].operands)
    return self.read_by[r]

  def kernel_reduce(self, root: Value):
    """The reduce op of the kernel that computes root (root itself, or its epilogue of elementwise ops and reshapes)."""
    found, seen, stack = set(), set(), [root]
    while stack:
      u = stack.pop()
      if u in seen or u.op is None or (u in self.R and u is not root): continue
      seen.add(u)
      if u.op.name == 'tensor.reduce': found.add(u.op)
      elif u.op.name == 'tensor.reshape' or (ELEMENTWISE in u.op.TRAITS and hasattr(u.op, 'opname')): stack += u.op.operands
    return next(iter(found)) if len(found) == 1 else None

  def choose_fusions(self):
    """A reduce whose input uses an earlier reduce's result over the same rows (softmax's sum of exp(x - max), a
    variance's sum of squares about the mean) computes that one too, in stages of one kernel that stores both
    (multi-output, as tinygrad fuses them): the rows are read twice by one kernel (the second time from the cache)
    instead of by two. Taken where the earlier one is a plain reduce buffer read only as a broadcast of itself along
    the reduced axes, and no kernel between the two reads it."""
    roots = sorted(self.R, key=lambda v: self.order[v.op])
    readers = self.readers
    for s in roots:
      red = self.kernel_reduce(s)
      if red is None or s.type.numel == 0 or s in self.fused or s in self.fused.values(): continue
      full, axes = red.src.type.shape, tuple(sorted(red.axes))
      for m, paths in self.reads([red.src]).items():
        base = _reduce_under(m)
        if base is None or m in self.fused or m in self.fused.values(): continue
        if base.src.type.shape != full or tuple(sorted(base.axes)) != axes: continue
        want = ViewStack.from_shape(m.type.shape).expand(full).simplify()
        if any(any(o.name not in ('tensor.reshape', 'tensor.expand') for o in p) or _path_views(m.type.shape, p) != want for p in paths): continue
        if any(self.order[r.op] < self.order[s.op] and r is not m and m in readers(r) for r in roots): continue
        self.fused[m] = s
        if not any(m in readers(r) for r in roots if r is not s and r is not m) and m not in readers(None):
          self.unstored.add(m)  # no one else reads it: the kernel computes it and stores nothing of it
    # an elementwise kernel over a reduce kernel's iteration shape that reads its results only as broadcasts along
    # the reduced axes (softmax's exp(x - max) / sum) is that kernel's epilogue: one kernel reads x once from memory
    # and stores at both shapes, as the last stage of its loop
    for s in roots:
      if s.type.numel == 0 or s in self.fused or s in self.fused.values() or s.op.name == 'tensor.scan' or self._has_reduce(s): continue
      reads = self.reads(s.op.operands)
      if MOVEMENT in s.op.TRAITS:  # (the root's own movement is on every path: a flip of x + max(x) reads the max flipped)
        reads = {m: [(s.op,) + p for p in ps] for m, ps in reads.items()}
      reds = [m for m in reads if m in self.R and _reduce_under(m) is not None]
      kern = {self.fused.get(m, m) for m in reds}
      if len(kern) != 1: continue
      t = kern.pop()
      red = self.kernel_reduce(t)
      if red is None or red.src.type.shape != s.type.shape or t.type.numel == 0: continue
      group = [t] + [m for m, k_ in self.fused.items() if k_ is t]
      want = lambda m: ViewStack.from_shape(m.type.shape).expand(s.type.shape).simplify()
      if any(any(o.name not in ('tensor.reshape', 'tensor.expand') for o in p) or _path_views(m.type.shape, p) != want(m)
             for m in group if m in reads for p in reads[m]): continue
      if any(_reduce_under(m) is None or _reduce_under(m).src.type.shape != s.type.shape or tuple(sorted(_reduce_under(m).axes)) != tuple(sorted(red.axes)) for m in group): continue
      # no kernel between the two reads what the epilogue's kernel now computes later
      if any(self.order[t.op] < self.order[r.op] < self.order[s.op] and any(m in readers(r) for m in group) for r in roots): continue
      for m in group:
        self.fused[m] = s
        if not any(m in readers(r) for r in roots if r is not s and r not in group) and m not in readers(None): self.unstored.add(m)
        else: self.unstored.discard(m)
    # a later reduce over the same rows that reads such a kernel's reduces as broadcasts (or its value itself, point by
    # point) and otherwise buffers ready before it (attention's sum of exp(s - max), beside the exp stored for its
    # product with v) is that kernel's too, in one more stage: the rows are not read again by a kernel of their own
    for t in roots:
      red = self.kernel_reduce(t)
      if red is None or t.type.numel == 0 or t in self.fused or t in self.fused.values(): continue
      reads = self.reads([red.src])
      kern = {self.fused[m] for m in reads if m in self.fused} | {m for m in reads if m in self.fused.values()}
      if len(kern) != 1: continue
      e = kern.pop()
      group = [m for m, k_ in self.fused.items() if k_ is e]
      if e.op is None or self._has_reduce(e) or e.type.shape != red.src.type.shape: continue  # (e: an epilogue's root)
      base = _reduce_under(group[0])
      if base is None or base.src.type.shape != e.type.shape or tuple(sorted(base.axes)) != tuple(sorted(red.axes)): continue
      bcast = lambda m: ViewStack.from_shape(m.type.shape).expand(e.type.shape).simplify()
      plain = lambda m, ps, want: all(all(o.name in ('tensor.reshape', 'tensor.expand') for o in p) and _path_views(m.type.shape, p) == want for p in ps)
      if all((m in group and plain(m, ps, bcast(m))) or (m is e and plain(m, ps, ViewStack.from_shape(e.type.shape))) or
             (m not in group and m is not e and (m.op is None or self.order[m.op] < self.order[e.op])) for m, ps in reads.items()):
        self.fused[t] = e
        inside = {e, t, *group}
        for m in group:  # (what only this kernel read is computed and not stored)
          if not any(m in readers(r) for r in roots if r not in inside) and m not in readers(None): self.unstored.add(m)

  def choose_siblings(self):
    """An elementwise buffer that a later elementwise kernel reads point by point, at its own shape (an optimizer's
    new moments, read by the parameter's update), is computed and stored by that kernel too (multi-output, as
    tinygrad fuses them): one launch instead of two, and what both read is read once. Taken where no kernel between
    the two reads it and neither is part of a reduce's kernel."""
    roots = sorted(self.R, key=lambda v: self.order[v.op])
    readers, alone = self.readers, self._elementwise_alone()
    for s in roots:
      if s in self.siblings or not alone(s): continue
      for m, paths in readers(s).items():
        if m not in self.R or m in self.siblings or m in self.siblings.values() or not alone(m) or \
           m.type.shape != s.type.shape or any(paths): continue
        if any(self.order[m.op] < self.order[r.op] < self.order[s.op] and m in readers(r) for r in roots): continue
        if self.depth.get(s, 0) + self.depth.get(m, 0) > MAX_DEPTH: continue  # (the kernel's expression stays bounded)
        self.siblings[m] = s

  def choose_horizontal(self):
    """Elementwise kernels of one shape whose results no kernel reads (an optimizer's updates of the parameters of
    one shape, the function's results) are one kernel while it reads and stores at most MAX_HORIZONTAL_ARGS buffers:
    the last computes and stores the others' values (and their siblings) beside its own. One launch for several: a
    4-layer GPT step's 53 parameter updates take 22."""
    roots = sorted(self.R, key=lambda v: self.order[v.op])
    read, alone = {m for r in roots for m in self.readers(r)}, self._elementwise_alone()
    groups: dict[tuple, list] = {}
    for r in roots:
      if r in read or r in self.siblings or not alone(r): continue
      groups.setdefault(r.type.shape, []).append(r)
    for rs in groups.values():
      kernel, args = [], set()
      for r in rs:
        mine = [r] + [m for m, s_ in self.siblings.items() if s_ is r]
        reads = {m for v in mine for m in self.readers(v)} - set(mine)
        if kernel and len(args | reads) + len(kernel) + len(mine) > MAX_HORIZONTAL_ARGS: kernel, args = [], set()
        kernel += mine; args |= reads
        for v in kernel[:-len(mine)]: self.siblings[v] = r  # (the group so far, computed by the latest root's kernel)

  def _elementwise_alone(self):
    """A test of whether a buffer's kernel is elementwise alone (the fusion rules' choices so far): an ALU op over
    elements, no reduce under it, no part of a reduce's kernel."""
    taken = set(self.fused) | set(self.fused.values())
    return lambda v: v.op is not None and ELEMENTWISE in v.op.TRAITS and hasattr(v.op, 'opname') and v.type.numel > 0 \
      and v not in taken and not self._has_reduce(v)

  def _has_reduce(self, v: Value) -> bool:
    """Whether computing v (down to buffers) takes a reduce."""
    seen, stack = set(), [v]
    while stack:
      u = stack.pop()
      if u in seen or u.op is None or (u in self.R and u is not v): continue
      seen.add(u)
      if u.op.name == 'tensor.reduce': return True
      stack += u.op.operands
    return False

  def _reduce_escapes(self, r: Value) -> set[Value]:
    """Where the reduce's result, through elementwise ops (and reshapes: store views), reaches a movement op or
    a reduce: the values (not movement results) that would have to be buffers there."""
    seen, stack, out = set(), [(r, r)], set()
    while stack:
      v, base = stack.pop()
      for u in self.users.get(v, []):
        if u.name == 'func.return': continue
        if u.name == 'tensor.reshape' and u.results[0] not in self.R:  # a reshape of the output is only a store view
          stack.append((u.results[0], base)); continue
        if MOVEMENT in u.TRAITS or u.name in ('tensor.reduce', 'tensor.scan', 'tensor.matmul', 'tensor.gather'): out.add(base); continue
        if ELEMENTWISE in u.TRAITS and u.results[0] not in seen and u.results[0] not in self.R:
          seen.add(u.results[0]); stack.append((u.results[0], u.results[0]))
    return out

  # ---- phase 2: build the kernels ----
  def build(self):
    while True:
      try: return self._build_all()
      except _Realize as r:
        if r.v in self.R:  # a composite left for tensor-decompose, or an op declared without a kernel form
          raise Diagnostic(f"no kernel can compute '{r.v.op.name}': kernels compute ALU ops (tgc/ir/alu.py), reduces and movement; "
                           f"another op needs a decompose method (docs/extending.md)", r.v.op.loc) from None
        self.R.add(r.v)  # each retry adds a value: this ends

  def _build_all(self):
    roots = sorted(self.R, key=lambda v: self.order[v.op])
    kernels, host = [], []
    self.buffers: dict[Value, Value] = {a: a for a in self.fn.body.args}
    self.splats: dict[Value, Value] = {}  # splat constants read through a mask -> their one-element host buffers
    self.host_consts: dict[Value, Value] = {}
    self.host_ops: list[Operation] = []
    names = set()
    for root in roots:
      if root.type.numel == 0:  # nothing to compute: a launch over no elements would still run its one point
        alloc = K('alloc')([], [root.type], None, root.op.loc)
        alloc.results[0].hint = None
        self.host_ops.append(alloc); self.buffers[root] = alloc.results[0]
        continue
      if root in self.fused or root in self.siblings: continue  # computed and stored by the kernel that uses it
      if root in self.stored_by: continue  # (stored by its attention's kernel)
      outs = [root]  # (and the buffers it also stores: a reduce kernel's earlier reduces, its elementwise siblings)
      if root.op.name in ('tensor.attention', 'tensor.attention_lse'): kfn, inputs, name, outs = self.attention_kernel(root)
      elif root.op.name == 'tensor.attention_grad': kfn, inputs, name, outs = self.attention_grad_kernel(root)
      else:
        kb = _KernelBuilder(self, root, [m for m, s_ in self.fused.items() if s_ is root], [m for m, s_ in self.siblings.items() if s_ is root])
        kfn, inputs = kb.build()
        name = kb.name()
        outs += [m for m in kb.also if m not in self.unstored] + kb.siblings
      base, i = name, 1
      while name in names or name in self.used_names: name, i = f"{base}n{i}", i + 1
      names.add(name)
      kfn.attrs['sym_name'] = Symbol(name)
      kernels.append(kfn)
      allocs = [K('alloc')([], [v.type], None, v.op.loc if v.op else root.op.loc) for v in outs]
      for a in allocs: a.results[0].hint = None
      launch = K('launch')([a.results[0] for a in allocs] + inputs, [], {'callee': Symbol(name)}, root.op.loc)
      self.host_ops += allocs + [launch]
      for v, a in zip(outs, allocs): self.buffers[v] = a.results[0]
    # results: buffers, host reshapes of them, or arguments
    ret = self.fn.body.ops[-1]
    outs = []
    for v in ret.operands:
      chain = []
      b = v
      while b not in self.buffers and b.op is not None and b.op.name == 'tensor.reshape': chain.append(b.op); b = b.op.operands[0]
      buf = self.buffers.get(b) or self.host_buffer(b)
      for op in reversed(chain):
        r = REGISTRY['kernel.reshape']([buf], [op.results[0].type], None, op.loc)
        self.host_ops.append(r); buf = r.results[0]
      outs.append(buf)
    ret.operands = outs
    self.host_ops.append(ret)
    return kernels, self.host_ops

  def attention_permuted(self, v: Value) -> Value | None:
    """The one permute of an attention's result (its heads and rows swapped: the layout the next projection reads,
    the rows' last axis kept) that is all that reads it: the attention's kernel stores that layout (kernelize's
    attention_layouts made the other readers read it back through the inverse permute)."""
    us = self.users.get(v, [])
    if len(us) != 1 or us[0].name != 'tensor.permute' or us[0].order[-1] != len(us[0].order) - 1: return None
    return us[0].results[0]

  def attention_operand(self, x: Value, bias: bool = False) -> tuple[Value, ViewStack] | None:
    """The buffer an attention's operand x (batch..., rows, E) is read from and the view (B, H, rows, E) that reads it
    (movement ops down to a value computed anyway or an argument), where one view does: unmasked, each row contiguous,
    the batch axes merged into two, 16-byte aligned (the kernel's copies are); else None (x is copied). The bias
    (`bias`): its view (B, H, L, S) of any strides (_bias_view: a broadcast mask stays its own size)."""
    path, b = [], x
    while b not in self.R and b.op is not None and b.op.name in ('tensor.reshape', 'tensor.permute', 'tensor.shrink', 'tensor.expand'):
      path.append(b.op); b = b.op.operands[0]
    if b.op is not None and b.op.name == 'tensor.empty': return None
    vs = (_bias_view if bias else _attention_view)(_path_views(b.type.shape, path), x.type)
    return None if vs is None else (b, vs)

  def attention_inputs(self, xs, bias: Value | None) -> tuple[list, list]:
    """The buffers an attention kernel reads q, k, v (and g) from and their views (attention_operand, or the
    value's own buffer), then the bias's where there is one."""
    inputs, views = [], []
    for x in list(xs) + ([bias] if bias is not None else []):
      view_of = _bias_view if x is bias else _attention_view
      b, vs = self.attention_operand(x, x is bias) or (x, view_of(ViewStack.from_shape(x.type.shape), x.type))
      inputs.append(self.buffers.get(b) or self.host_buffer(b)); views.append(vs)
    return inputs, views

  def attention_kernel(self, root: Value):
    """A tensor.attention the device computes whole: a kernel.func of one kernel.attention on the buffers its operands
    are read from (attention_operand) and those it stores (its result, or its permuted layout: attention_permuted;
    the rows' log-sum-exp where a tensor.attention_lse of it is computed). A tensor.attention_lse whose attention is
    not computed here (a backward whose forward's output is a buffer already): the kernel of attention(q, k, k), its
    output a buffer no one reads. Returns the kernel.func, its input buffers, its name and the values it stores."""
    op = root.op
    if op.name == 'tensor.attention_lse':
      st, qkv, rt = {'out': Value(op.q.type), 'lse': root}, (op.q, op.k, op.k), op.q.type
    else: st, qkv, rt = self.attention_stores[root], (op.q, op.k, op.v), root.type
    stored = st['out']
    out_vs = ViewStack.from_shape(stored.type.shape)
    if stored in self.stored_by: out_vs = out_vs.permute(tuple(sorted(range(len(stored.op.order)), key=stored.op.order.__getitem__)))
    inputs, views = self.attention_inputs(qkv, op.bias)
    views = [_attention_view(out_vs, rt)] + views
    outs = [stored] + ([st['lse']] if 'lse' in st else [])
    args = [Value(BufType(v.type.shape, v.type.dtype), hint=f"data{i}") for i, v in enumerate(outs + inputs)]  # (outputs first)
    attrs = {'causal': op.causal, 'scale': op.attrs['scale'], **softcap_attr(op), **{f'{n}_view': vs for n, vs in zip(('out', 'q', 'k', 'v', 'bias'), views)},
             **({'lse_only': 1} if op.name == 'tensor.attention_lse' else {})}  # (its output a scratch buffer no one reads)
    operands = [args[0]] + args[len(outs):] + args[1:len(outs)]  # (out, q, k, v, the bias, then the lse)
    body = Block(args, [K('attention')(operands, [], attrs, op.loc)])
    B, H, L, E = views[1].shape
    name = f"attn{'_lse' if op.name == 'tensor.attention_lse' else ''}{'_causal' if op.causal else ''}{'_bias' if op.bias is not None else ''}{'_cap' if op.softcap else ''}_{B * H}_{L}_{views[2].shape[2]}_{E}"
    return K('func')([], [], {'sym_name': Symbol('k')}, op.loc, body), inputs, name, outs

  def attention_grad_kernel(self, root: Value):
    """A tensor.attention_grad the device computes whole: wrt q, a kernel.func of one kernel.attention_grad that
    writes dq; wrt k or v, one that writes dk and dv (the attention_grad of the other, or a buffer no one reads where
    there is none). q, k, v and g are read as the forward's are (attention_operand), the lse and d as buffers.
    Returns the kernel.func, its input buffers, its name and the values it stores."""
    op = root.op
    grp = self.attention_grads[attention_grad_key(op)]
    part = 0 if op.wrt == 0 else 1
    inputs, views = self.attention_inputs(op.operands[:4], op.bias)
    inputs[4:4] = [self.buffers.get(x) or self.host_buffer(x) for x in (op.lse, op.d)]  # (q, k, v, g, lse, d, the bias)
    outs = [root] if part == 0 else [grp.get(w) or Value(op.operands[w].type) for w in (1, 2)]
    args = [Value(BufType(v.type.shape, v.type.dtype), hint=f"data{i}") for i, v in enumerate(outs + inputs)]  # (outputs first)
    attrs = {'causal': op.causal, 'scale': op.attrs['scale'], **softcap_attr(op), 'part': part, **{f'{n}_view': vs for n, vs in zip(('q', 'k', 'v', 'g', 'bias'), views)}}
    body = Block(args, [K('attention_grad')(args[len(outs):] + args[:len(outs)], [], attrs, op.loc)])
    B, H, L, E = views[0].shape
    name = f"attn_{('dq', 'dkdv')[part]}{'_causal' if op.causal else ''}{'_bias' if op.bias is not None else ''}{'_cap' if op.softcap else ''}_{B * H}_{L}_{views[1].shape[2]}_{E}"
    return K('func')([], [], {'sym_name': Symbol('k')}, op.loc, body), inputs, name, outs

  def host_buffer(self, v: Value) -> Value:
    """A leaf that lives on the host: an argument, a dense (or masked) constant, an empty tensor."""
    if v in self.buffers: return self.buffers[v]
    op = v.op
    if op.name == 'tensor.const':
      c = REGISTRY['tensor.const']([], [v.type], dict(op.attrs), op.loc)
    elif op.name == 'tensor.empty':  # any contents will do: zeros, so that nothing reads memory no one wrote
      c = REGISTRY['tensor.const']([], [v.type], {'value': 0.0 if v.type.dtype.is_float else 0}, op.loc)
    else: raise AssertionError(f"not a host leaf: {op.name}")
    self.host_ops.append(c)
    self.buffers[v] = c.results[0]
    return c.results[0]


  def splat_buffer(self, v: Value) -> Value:
    """A splat constant's value as a host buffer of one element (shape all 1s, v's rank)."""
    if v not in self.splats:
      c = REGISTRY['tensor.const']([], [TensorType((1,) * len(v.type.shape), v.type.dtype)], dict(v.op.attrs), v.op.loc)
      self.host_ops.append(c)
      self.splats[v] = c.results[0]
    return self.splats[v]


class _KernelBuilder:
  def __init__(self, sched: Scheduler, root: Value, also=(), siblings=()):
    self.s, self.root = sched, root
    self.also = list(also)                  # earlier reduces this kernel computes in a stage before root's, and stores
    self.siblings = list(siblings)          # elementwise buffers it computes at each point beside root, and stores
    self.inlined: dict[Value, Value] = {}
    self.ops: list[Operation] = []
    self.memo: dict = {}
    self.inputs: list[Value] = []           # host values, in the order the kernel's args take them
    self.args: dict[Value, Value] = {}      # host value -> kernel block argument
    self.full: tuple[int, ...] | None = None
    self.axes: tuple[int, ...] = ()
    self.loads: list[Operation] = []
    self.after: list[Operation] = []       # loads outside the reduce: they walk the stored shape
    self.out_shape = root.type.shape
    self.scan = False                       # a scan kernel: it stores at its iteration shape, axes holds the scanned axis
    self.const_loads = False                # splat constants below the reduce are read from host buffers
    # an epilogue: an elementwise root at the iteration shape of the reduces it computes (choose_fusions)
    base = _reduce_under(self.also[0]) if self.also else None
    self.epilogue = base is not None and root.op.name != 'tensor.reduce' and not sched._has_reduce(root) and \
      root.type.shape == base.src.type.shape
    if self.epilogue: self.full, self.axes = base.src.type.shape, tuple(sorted(base.axes))

  def name(self):
    shape = self.final_shape
    return ('s_' if self.scan else 'r_' if self.axes else 'E_') + '_'.join(str(s) for s in shape)

  def arg_for(self, host: Value) -> Value:
    a = self.args.get(host)
    if a is None:
      t = host.type
      a = self.args[host] = Value(BufType(t.shape, t.dtype), hint=None)
      self.inputs.append(host)
    return a

  def views(self, leaf_shape, path) -> ViewStack: return _path_views(leaf_shape, path)

  def add(self, op):
    self.ops.append(op)
    return op.results[0]

  def emit(self, v: Value, path: tuple, below: bool) -> Value:
    key = (v, path, below)
    r = self.memo.get(key)
    if r is not None: return r
    r = self.memo[key] = self._emit(v, path, below)
    return r

  def _emit(self, v, path, below):
    s = self.s
    op = v.op
    dt = v.type.dtype
    if v in self.also: return self.inline(v)
    if v is not self.root and v not in self.siblings and (v in s.R or op is None or op.name == 'tensor.empty'):
      if v in s.R and v not in s.buffers: raise AssertionError("buffer used before its kernel")
      return self.load(s.buffers[v] if v in s.buffers else s.host_buffer(v), path, below)
    if op.name == 'tensor.const':
      st = self.views(v.type.shape, path)
      if not isinstance(op.attrs['value'], tuple) and any(w.mask is not None for w in st.views) and not (below and self.const_loads):
        # a splat under a mask (a pad's `inside` of a pad with a value): one element on the host, read broadcast
        # through the mask, not a dense buffer of the whole shape read through the view
        one = s.splat_buffer(v)
        return self.load(one, path, below, start=ViewStack.from_shape(one.type.shape).expand(v.type.shape))
      if isinstance(op.attrs['value'], tuple) or any(w.mask is not None for w in st.views) or (below and self.const_loads):
        return self.load(s.host_buffer(v), path, below)
      return self.add(K('const')([], [dt], {'value': op.attrs['value']}, op.loc))
    if MOVEMENT in op.TRAITS: return self.emit(op.operands[0], path + (op,), below)
    if op.name == 'tensor.contiguous': return self.emit(op.operands[0], path, below)
    if op.name == 'tensor.gather': return self.gather(op, path, below)
    if op.name == 'tensor.scan' and v not in s.R: return self.positions(op, path, below)
    if op.name == 'tensor.scan':  # (a buffer: only a root's kernel computes it)
      self.full, self.axes, self.out_shape, self.scan = op.src.type.shape, (op.axis,), v.type.shape, True
      srcs = [self.emit(op.src, (), True)] + ([self.emit(op.init, (), False)] if op.init is not None else [])
      return self.add(K('scan')(srcs, [dt], {'kind': op.kind, 'axis': op.axis, **({'exclusive': True} if op.exclusive else {})}, op.loc))
    if op.name == 'tensor.reduce':
      if below or any(p.name != 'tensor.reshape' for p in path): raise _Realize(v)
      full, axes = op.src.type.shape, tuple(sorted(op.axes))
      if self.full is not None and (self.full != full or self.axes != axes): raise _Realize(v)
      self.full, self.axes, self.out_shape = full, axes, v.type.shape
      src = self.emit(op.src, (), True)
      return self.add(K('reduce')([src], [dt], {'kind': op.kind, 'axes': axes}, op.loc))
    if ELEMENTWISE in op.TRAITS and hasattr(op, 'opname'):  # an ALU op: its kernel twin (kernel.<opname>)
      srcs = [self.emit(x, path, below) for x in op.operands]
      return self.add(K(op.opname)(srcs, [dt], None, op.loc))
    raise _Realize(v)  # anything else (a composite not decomposed) gets a kernel of its own

  def emit_stored(self) -> Value:
    """The root's value, and the earlier reduces this kernel stores in its stages: also those the root does not read
    (an epilogue that reads only the first of two fused reduces: x * min(x) beside sum(x * min(x)))."""
    val = self.emit(self.root, (), self.epilogue)
    for m in self.also:
      if m not in self.s.unstored: self.inline(m)
    self.sibling_vals = [self.emit(m, (), False) for m in self.siblings]
    return val

  def inline(self, v: Value) -> Value:
    """An earlier reduce (and the elementwise ops after it) computed in this kernel, in a stage before the root's
    reduce (choose_fusions checked its shapes and that it is read as a broadcast along the reduced axes)."""
    r = self.inlined.get(v)
    if r is None:
      op, dt = v.op, v.type.dtype
      if op.name == 'tensor.reduce': r = self.add(K('reduce')([self.emit(op.src, (), True)], [dt], {'kind': op.kind, 'axes': self.axes}, op.loc))
      elif op.name == 'tensor.const': r = self.add(K('const')([], [dt], {'value': op.attrs['value']}, op.loc))
      else: r = self.add(K(op.opname)([self.inline(x) for x in op.operands], [dt], None, op.loc))
      self.inlined[v] = r
    return r

  def positions(self, op, path, below: bool) -> Value:
    """A sum scan of a splat constant c read through `path`: c * (the point's index along its axis + 1), or c times the
    index exclusive; the index is the one a view stack makes (stride 1 along the scanned axis, 0 along the others)."""
    sh, a, dt = op.src.type.shape, op.axis, op.results[0].type.dtype
    base = ViewStack((View.create(sh, tuple(1 if i == a else 0 for i in range(len(sh))), 0, None),))
    it = dt if dt.is_int else (D.i64 if sh[a] > 2**31 - 2 else D.i32)
    ix = K('index')([], [it], {'view': _path_views(sh, path, base)}, op.loc)
    self.loads.append(ix)
    if not below: self.after.append(ix)
    x = self.add(ix)
    if x.type != dt: x = self.add(K('cast')([x], [dt], None, op.loc))
    one = lambda v: self.add(K('const')([], [dt], {'value': v}, op.loc))
    c = op.src.op.attrs['value']
    if not op.exclusive: x = self.add(K('add')([x, one(1 if dt.is_int else 1.0)], [dt], None, op.loc))
    return x if c in (1, 1.0) else self.add(K('mul')([x, one(c)], [dt], None, op.loc))

  def gather(self, op, path, below: bool) -> Value:
    """A gather is a load whose index along its axis is the index operand's value at the point (computed in this
    kernel like any value); its view addresses the point's other coordinates. The source is a buffer read through
    one view without a mask along the axis (that axis's elements lie one stride apart), else it becomes one."""
    s, src, a = self.s, op.src, op.axis
    base, spath = src, ()
    while base not in s.R and base.op is not None and MOVEMENT in base.op.TRAITS: spath += (base.op,); base = base.op.operands[0]
    if not (base in s.R or base.op is None or _is_leaf(base)): raise _Realize(base)
    host = s.buffers[base] if base in s.buffers else s.host_buffer(base)
    sv = _path_views(base.type.shape, spath).views
    if len(sv) != 1 or (sv[0].mask is not None and sv[0].mask[a] != (0, src.type.shape[a])): raise _Realize(src)
    v, out = sv[0], op.results[0].type.shape
    rest = View.create(out, tuple(0 if i == a else st for i, st in enumerate(v.strides)), v.offset,
                       None if v.mask is None else tuple((0, out[a]) if i == a else m for i, m in enumerate(v.mask)))
    ix = self.emit(op.index, path, below)
    return self.load(host, path, below, start=ViewStack((rest,)), gather=(ix, v.strides[a], src.type.shape[a]))

  def load(self, host: Value, path, below: bool, start=None, gather=None) -> Value:
    st = _path_views(host.type.shape, path, start)
    if gather is None: op = K('load')([self.arg_for(host)], [host.type.dtype], {'view': st}, None)
    else: op = K('load')([self.arg_for(host), gather[0]], [host.type.dtype], {'view': st, 'stride': gather[1], 'size': gather[2]}, None)
    self.loads.append(op)
    if not below: self.after.append(op)
    return self.add(op)

  def build(self):
    root = self.root
    val = self.emit_stored()
    if self.axes and all(ld in self.after for ld in self.loads):
      # a reduce over constants only: nothing would give the loop its size; read the constant from a host buffer
      self.__init__(self.s, root, self.also, self.siblings)  # (the reduces it computes in stages too: an epilogue's)
      self.const_loads = True
      val = self.emit_stored()
    # the reduce's output shape (the root may be a reshape of it); an epilogue's root is stored at the iteration shape,
    # a scan's too (its init is read at the shape with 1 along the scanned axis)
    out = tuple(1 if i in self.axes else n for i, n in enumerate(self.full)) if self.epilogue or self.scan else self.out_shape
    full = self.full if self.full is not None else out
    if full == ():  # scalar kernels iterate over one point
      full, out = (1,), (1,)
      for ld in self.loads: ld.attrs['view'] = ld.attrs['view'].reshape((1,))
    for ld in self.after:
      if ld.attrs['view'].shape != out: ld.attrs['view'] = ld.attrs['view'].reshape(out).simplify()
    outs = [(root, val)] + [(m, self.inlined[m]) for m in self.also if m not in self.s.unstored]
    outs += zip(self.siblings, self.sibling_vals)
    store_vs = [ViewStack.from_shape(v.type.shape).reshape(full if v is root and (self.epilogue or self.scan) else out).simplify() for v, _ in outs]
    full, out, store_vs = self.merge_dims(full, out, store_vs)
    self.final_shape = full
    out_args = [Value(BufType(v.type.shape, v.type.dtype)) for v, _ in outs]
    stores = [K('store')([a, x], [], {'view': vs}, v.op.loc if v.op else None) for a, (v, x), vs in zip(out_args, outs, store_vs)]
    kargs = out_args + [self.args[h] for h in self.inputs]
    for i, a in enumerate(kargs): a.hint = f"data{i}"
    body = Block(kargs, self.ops + stores)
    kfn = K('func')([], [], {'sym_name': Symbol('k')}, root.op.loc if root.op else None, body)
    return kfn, self.inputs

  def merge_dims(self, full, out, store_vs):
    """Merge adjacent axes that every view walks as one (tinygrad's simplify_merge_adjacent)."""
    red = set(self.axes)
    i = len(full) - 2
    reduce_ops = [op for op in self.ops if op.name == 'kernel.reduce']
    while i >= 0:
      if (i in red) == (i + 1 in red):
        nf = full[:i] + (full[i] * full[i + 1],) + full[i + 2:]
        no = out[:i] + (out[i] * out[i + 1],) + out[i + 2:]
        new_views, ok = [], True
        for ld in self.loads:
          vs = ld.attrs['view']
          tgt = nf if vs.shape == full else no
          m = vs.reshape(tgt)
          if len(m.views) != len(vs.views): ok = False; break
          new_views.append(m)
        sm = [vs.reshape(nf if vs.shape == full else no) for vs in store_vs]
        if ok and all(len(a.views) == len(b.views) for a, b in zip(sm, store_vs)):
          for ld, vs in zip(self.loads, new_views): ld.attrs['view'] = vs
          store_vs = sm
          full, out = nf, no
          red = {a if a <= i else a - 1 for a in red}
      i -= 1
    self.axes = tuple(sorted(red))
    for op in reduce_ops: op.attrs['axes'] = self.axes
    for op in self.ops:
      if op.name == 'kernel.scan': op.attrs['axis'] = self.axes[0]
    return full, out, store_vs


RECOMPUTE = 16       # a product's factor read this many times per element (or more) is stored once, when it costs ops
MAX_DEPTH = 128      # the longest chain of ops one kernel computes (a longer one is cut by buffers)
MAX_HORIZONTAL_ARGS = 24  # the buffers a kernel of horizontally fused updates reads and stores at most (Metal binds 31)
SPLIT_MIN = 1 << 15   # a reduce of at least this many elements into fewer than SPLIT_OUT outputs is split
SPLIT_OUT = 64

def split_reduce(op, rw):
  """A big reduce into a few outputs is two: (..., n, ...) -> (..., k, n/k, ...) reduced over n/k, then over k,
  so that the first kernel has k*outputs points to spread across cores (tinygrad's split_reduceop); a reduce over
  several axes, over all but its outermost one first."""
  src, t = op.src, op.results[0].type
  stored = lambda v: rw.create(REGISTRY['tensor.contiguous'], [v], [v.type], None, op.loc).results[0]  # (the partials' buffer)
  if math.prod(t.shape) >= SPLIT_OUT: return None
  if len(op.axes) > 1:
    # over several axes (a batch norm's statistics: a channel's sum over batch, rows and columns): the partial sums
    # keep the outermost reduced axis (the batch), each summing the others, then those are summed
    a, shape = op.axes[0], src.type.shape
    if math.prod(shape[i] for i in op.axes) < SPLIT_MIN or shape[a] < 16 or math.prod(shape[i] for i in op.axes[1:]) < 256: return None
    return partial_reduce(src, op, {a: shape[a]}, rw, stored)
  a = op.axes[0]
  n = src.type.shape[a]
  if n < SPLIT_MIN: return None
  # enough partial results to fill a GPU's work-group slots several times over (a CPU's threads too), each still
  # long enough to stream
  k = next((k for k in (4096, 2048, 1024, 512, 256, 128, 64, 32, 16) if n % k == 0 and n // k >= 8192), None) or \
      next((k for k in (256, 128, 64, 32, 16) if n % k == 0 and n // k >= 256), None)
  if k is None: return None
  return partial_reduce(src, op, {a: k}, rw, stored)

split_patterns = PatternMatcher([('tensor.reduce', split_reduce)])


class Kernelize(Pass):
  name = 'kernelize'
  summary = 'fuse the tensor graph into kernel.funcs (views for movement ops) and a host schedule'
  reads, leaves = 'tensor', 'kernel'
  # (the device's spec, DEVICE_OPTIONS: what kernelize chooses for a device)
  options = {**DEVICE_OPTIONS, 'split': (bool, True, 'split a big reduce into few outputs into two kernels, so the first can use every core')}
  def run(self, m: Module):
    apply_patterns(m, decompose_patterns + declared_patterns(DeviceSpec.from_options(self.opts)))
    if self.split: apply_patterns(m, split_patterns, max_sweeps=1)
    used = {op.attrs['sym_name'] for op in m.ops if 'sym_name' in op.attrs}
    kernels = []
    for fn in m.functions('func.func'):
      if any(op.name.startswith('kernel.') for op in fn.body.ops): continue  # already a schedule
      attention_layouts(fn)
      s = Scheduler(fn, used, DeviceSpec.from_options(self.opts).gpu)
      s.choose()
      ks, host = s.build()
      for k in ks: used.add(k.attrs['sym_name'])
      fn.body.ops = host
      kernels += ks
      self.stats['kernels made'] += len(ks)
    m.body.ops = kernels + [op for op in m.ops]
