"""Dialect `kernel`: one AST per fused kernel (loads and stores through view stacks, ALU, reduce),
and the host side of the schedule (alloc, launch) that lives in the func.func after kernelize."""
from __future__ import annotations
import math
from tgc.ir.core import Operation, PURE, CONSTANT, FUNCTION
from tgc.ir.types import BufType, TensorType, VecType
from tgc.ir.dtypes import DType
from tgc.ir import alu
from tgc.ir import dtypes as D
from tgc.dialects.alu import define_alu_ops
from tgc.dialects.tensor import ScanBase, check_scalar, check_softcap

define_alu_ops('kernel', False, globals())


class KernelFuncOp(Operation):
  """kernel.func @E_4_4(%data0: !kernel.buf<...>, ...) attributes {opts = [...]} { ... }: outputs first."""
  name = 'kernel.func'
  RESULTS = 0
  ATTRS = {'sym_name': 'symbol', 'opts': 'records?'}
  TRAITS = {FUNCTION}

  @property
  def sym_name(self) -> str: return self.attrs['sym_name']
  def verify(self):
    for a in self.body.args:
      if not isinstance(a.type, BufType): raise self.error(f"arguments must be !kernel.buf, got {a.type}")

  def verify_body(self):
    """Loads walk the full iteration shape (below a reduce) or the stored shape (after it)."""
    for op in self.body.ops:  # linearize lowers the AST's ops; the host's alloc and launch live in a func.func
      if not op.has(FUNCTION) and (op.dialect != 'kernel' or op.name in ('kernel.alloc', 'kernel.launch')):
        raise op.error("is not allowed in a kernel.func: its body is the kernel's AST (kernel ops but alloc and launch)")
    whole = [op for op in self.body.ops if op.name in WHOLE_KERNELS]
    if whole:  # a kernel the target writes whole: that op alone, on the kernel's buffers
      if len(self.body.ops) != 1: raise whole[0].error(f"is a kernel of its own: the only op of its kernel.func, which has {len(self.body.ops)}")
      ops_, args = list(whole[0].operands), list(self.body.args)
      if len(set(ops_)) != len(ops_) or set(ops_) != set(args): raise whole[0].error(f"takes each of @{self.sym_name}'s arguments once, and nothing else")
      return
    stores = [op for op in self.body.ops if op.name == 'kernel.store']
    if not stores: raise self.error(f"@{self.sym_name} stores nothing")
    reduces = [op for op in self.body.ops if op.name == 'kernel.reduce']
    scans = [op for op in self.body.ops if op.name == 'kernel.scan']
    if scans: return self.verify_scan(scans, reduces, stores)
    axes = tuple(reduces[0].axes) if reduces else ()
    # a reduce kernel stores at the stored shape (1 along the reduced axes) what comes after its reduces, and may
    # also store at its iteration shape (an epilogue after the reduces: softmax's exp(x - max) / sum)
    at_full = lambda st: any(st.view.shape[a] != 1 for a in axes if 0 <= a < len(st.view.shape))  # (a bad axis: reported below)
    reduced = [st for st in stores if not at_full(st)]
    out = (reduced or stores)[0].view.shape
    for st in reduced[1:]:
      if st.view.shape != out: raise st.error(f"view shape {list(st.view.shape)} differs from the first store's {list(out)}")
    for op in reduces:
      if tuple(op.axes) != axes: raise op.error(f"reduces axes {list(op.axes)}, another reduce of the kernel {list(axes)}: a kernel's reduces share their axes")
      for a in op.axes:
        if not 0 <= a < len(out): raise op.error(f"axis {a} is out of range for the iteration rank {len(out)}")
    if not reduced: out = tuple(1 if i in axes else n for i, n in enumerate(out))
    full = None
    for op in self.body.ops:
      if op.name not in ('kernel.load', 'kernel.index'): continue
      sh = op.view.shape
      if len(sh) != len(out): raise op.error(f"view rank {len(sh)} differs from the kernel's iteration rank {len(out)}")
      if sh != out:
        if not reduces: raise op.error(f"view shape {list(sh)} differs from the stored shape {list(out)}")
        if full is None: full = sh
        elif sh != full: raise op.error(f"view shape {list(sh)} differs from the kernel's iteration shape {list(full)}")
        if any(o != (1 if i in axes else f) for i, (o, f) in enumerate(zip(out, sh))):
          raise op.error(f"view shape {list(sh)} does not reduce to the stored shape {list(out)} (1 along the reduced axes {list(axes)}, the same along the others)")
    for st in stores:
      sh = st.view.shape
      if len(sh) != len(out): raise st.error(f"view rank {len(sh)} differs from the kernel's iteration rank {len(out)}")
      if st in reduced: continue
      if full is None: full = sh
      if sh != full: raise st.error(f"view shape {list(sh)} differs from the kernel's iteration shape {list(full)}")
      if any(o != (1 if i in axes else f) for i, (o, f) in enumerate(zip(out, sh))):
        raise st.error(f"view shape {list(sh)} does not reduce to the stored shape {list(out)} (1 along the reduced axes {list(axes)}, the same along the others)")
    if reduces:  # a value read at the iteration shape reaches the stored shape only through a reduce
      below: set = set()
      for op in self.body.ops:
        if op.name == 'kernel.reduce': continue
        if (op.name in ('kernel.load', 'kernel.index') and op.view.shape != out) or any(v in below for v in op.operands): below.update(op.results)
      for st in reduced:
        if st.value in below: raise st.error(f"stores a value of the iteration shape {list(full or out)}: a reduce kernel stores what comes after its reduce")

  def verify_scan(self, scans, reduces, stores):
    """A scan kernel: one scan, no reduce; it stores at its iteration shape (every step of the scan), its loads walk
    that shape or the shape with 1 along the scanned axis (what the scan's init reads: one value a row)."""
    if len(scans) > 1: raise scans[1].error("a kernel computes one scan")
    if reduces: raise reduces[0].error("a scan kernel computes no reduce")
    sc = scans[0]
    full = stores[0].view.shape
    if not sc.axis < len(full): raise sc.error(f"axis {sc.axis} is out of range for the iteration rank {len(full)}")
    out = tuple(1 if i == sc.axis else n for i, n in enumerate(full))
    for st in stores:
      if st.view.shape != full: raise st.error(f"view shape {list(st.view.shape)} differs from the first store's {list(full)}: a scan kernel stores at its iteration shape")
    at_full: set = set()
    for op in self.body.ops:
      if op.name in ('kernel.load', 'kernel.index'):
        sh = op.view.shape
        if sh != full and sh != out: raise op.error(f"view shape {list(sh)} is neither the scan kernel's iteration shape {list(full)} nor its row shape {list(out)}")
        if sh == full and full != out: at_full.update(op.results)
      elif op.results and any(v in at_full for v in op.operands): at_full.update(op.results)
    if sc.init is not None and sc.init in at_full: raise sc.error(f"init varies along the scanned axis {sc.axis}: it must be read at the row shape {list(out)}")


def _check_view(op, buf_t: BufType, vs, gather=None):
  """The lowest view (the one that indexes the buffer) stays inside it, and each view above it inside the shape of
  the one below (the linear index it makes is that view's), where its mask lets it read. A gather's (stride, size)
  adds 0 .. (size - 1) * stride to the buffer index (the lowest view's)."""
  glo, ghi = (0, 0) if gather is None else sorted((0, (gather[1] - 1) * gather[0]))
  for i, v in enumerate(vs.views):
    rng = v.mask or tuple((0, s) for s in v.shape)
    if all(a < b for a, b in rng):  # (else it reads nothing)
      lo = v.offset + sum(a * st if st >= 0 else (b - 1) * st for (a, b), st in zip(rng, v.strides))
      hi = v.offset + sum((b - 1) * st if st >= 0 else a * st for (a, b), st in zip(rng, v.strides))
      n = buf_t.numel if i == 0 else math.prod(vs.views[i - 1].shape)
      if i == 0: lo, hi = lo + glo, hi + ghi
      if lo < 0 or hi >= n:
        if i == 0: raise op.error(f"view reads elements {lo}..{hi}, outside {buf_t} ({buf_t.numel} elements)")
        raise op.error(f"view #{i} makes indices {lo}..{hi}, outside the {n} elements of the view below it {list(vs.views[i - 1].shape)}")
    # every point's index is computed, so it must fit the widest index a kernel has
    reach = v.reach(i < len(vs.views) - 1)
    if reach >= 2**63: raise op.error(f"view #{i} makes indices up to {reach} in magnitude, past what 64-bit indices hold")


class LoadOp(Operation):
  """`kernel.load %buf [views] : f32` reads the element the view stack makes of each iteration point.
  `kernel.load %buf [views] (%index, stride, size) : f32` is a gather: a load whose index is a computed value (another
  buffer's contents: an embedding's token ids) adds clamp(%index, 0, size - 1) * stride to the view's index, so that
  no index value can read outside the buffer (the view addresses the point's other coordinates, stride 0 along the
  gathered one; the gathered axis's size elements lie stride apart)."""
  name = 'kernel.load'
  OPERANDS = ('buf', 'index?')
  ATTRS = {'view': 'views', 'stride': 'int?', 'size': 'int?'}
  TRAITS = {PURE}
  FORMAT = '$buf $view?{ ($index, $stride, $size)} : type($result)'
  @property
  def gather(self) -> tuple[int, int] | None:
    """(stride, size) of a gather's computed index, or None for a plain load."""
    return (self.attrs['stride'], self.attrs['size']) if len(self.operands) == 2 else None
  def verify(self):
    b, r = self.buf.type, self.results[0].type
    if not isinstance(b, BufType): raise self.error(f"loads from a !kernel.buf, got {b}")
    if r != b.dtype: raise self.error(f"result type {r} does not match the buffer's element type {b.dtype}")
    has = [k for k in ('stride', 'size') if k in self.attrs]
    if (len(self.operands) == 2) != (len(has) == 2) or (has and len(has) != 2):
      raise self.error("a gather takes an index operand, a stride and a size together")
    g = self.gather
    if g is not None:
      t = self.index.type
      if not isinstance(t, DType) or t.is_float or t.is_bool: raise self.error(f"index must be an integer scalar, got {t}")
      if g[1] < 1: raise self.error(f"gathers along an axis of size {g[1]}: at least 1")
    _check_view(self, b, self.view, g)


class IndexOp(Operation):
  """`kernel.index [views] : i32`: the index the view stack makes of each iteration point, as a value: a load without
  a buffer (0 where a mask leaves the point out). Its lowest view names the axis it counts along (stride 1, the others
  0): a position (an arange, a scan of ones) is computed in the kernel, not read from memory."""
  name = 'kernel.index'
  ATTRS = {'view': 'views'}
  TRAITS = {PURE}
  FORMAT = '$view : type($result)'
  def verify(self):
    r = self.results[0].type
    if not isinstance(r, DType) or not r.is_int: raise self.error(f"result must be an integer scalar type, got {r}")
    reach = max(v.reach(i < len(self.view.views) - 1) for i, v in enumerate(self.view.views))
    if reach >= 2**63: raise self.error(f"view makes indices up to {reach} in magnitude, past what 64-bit indices hold")
    # (the value is the lowest view's index: it must fit the result's type, as a constant of it must)
    top = self.view.views[0].reach()
    if top > D.min_max(r)[1]: raise self.error(f"view makes index values up to {top} in magnitude, past what {r} holds")


class StoreOp(Operation):
  name = 'kernel.store'
  OPERANDS = ('buf', 'value')
  ATTRS = {'view': 'views'}
  RESULTS = 0
  FORMAT = '$buf $view, $value : type($value)'
  @property
  def written(self): return (self.buf,)
  def verify(self):
    b, t = self.buf.type, self.value.type
    if not isinstance(b, BufType): raise self.error(f"stores to a !kernel.buf, got {b}")
    if t != b.dtype: raise self.error(f"value type {t} does not match the buffer's element type {b.dtype}")
    if len(self.view.views) != 1 or self.view.views[0].mask is not None:
      raise self.error("stores through a single unmasked view")
    _check_view(self, b, self.view)
    v = self.view.views[0]
    n = math.prod(v.shape)  # a launch writes its whole output buffer: none of it is left unwritten
    if n != b.numel: raise self.error(f"view writes {n} elements, {b} has {b.numel}: a store covers its buffer")
    # ... each element once: the axes' strides (largest last, signs aside) are a layout's, so that no element is
    # written twice (by threads in an order no device agrees on) while another keeps what the allocator left
    step = 1
    for st, sz in sorted((abs(st), sz) for sz, st in zip(v.shape, v.strides) if sz > 1):
      if st != step: raise self.error(f"view (shape {list(v.shape)}, strides {list(v.strides)}) writes some elements of {b} more than once: a store writes each element of its buffer once")
      step *= sz


class ConstOp(Operation):
  name = 'kernel.const'
  ATTRS = {'value': 'number'}
  TRAITS = {PURE, CONSTANT}
  FORMAT = '$value : type($result)'
  def verify(self):
    t = self.results[0].type
    if not isinstance(t, DType): raise self.error(f"result must be a scalar type, got {t}")
    check_scalar(self, self.attrs['value'], t)


class ReduceOp(Operation):
  name = 'kernel.reduce'
  OPERANDS = ('src',)
  ATTRS = {'kind': 'ident', 'axes': 'ints'}
  TRAITS = {PURE}
  FORMAT = '$kind $src $axes : type($result)'
  def verify(self):
    if self.kind not in alu.REDUCE_KINDS: raise self.error(f"unknown reduce kind '{self.kind}' (expected one of {', '.join(alu.REDUCE_KINDS)})")
    if self.src.type != self.results[0].type: raise self.error(f"result type {self.results[0].type} does not match operand type {self.src.type}")
    if len(set(self.axes)) != len(self.axes) or not self.axes: raise self.error(f"axes {list(self.axes)} must be distinct and non-empty")


class ScanOp(ScanBase):
  """`kernel.scan add %x 1 : f32` (`kernel.scan add %x 1 (%init)`): the inclusive scan of the kernel's value along
  iteration axis `axis`, a loop that carries the running value (from init, a value at the shape with 1 along the
  axis, else the kind's identity) and yields it at every step (`{exclusive = true}`: the value before the step's
  element joins it). A scan kernel computes one scan and stores at the
  iteration shape."""
  name = 'kernel.scan'
  def verify(self):
    self.check_attrs(self.src.type)
    if self.src.type != self.results[0].type: raise self.error(f"result type {self.results[0].type} does not match operand type {self.src.type}")
    if self.init is not None and self.init.type != self.src.type: raise self.error(f"init type {self.init.type} does not match operand type {self.src.type}")
    if self.axis < 0: raise self.error(f"axis {self.axis} must be non-negative")


def _check_head_views(op, names, types):
  """A fused attention kernel's buffers named `names` (attributes `<name>_view`, of these buffer types): each read
  through one unmasked view of rank 4 (B, H, rows, head size), each row's elements contiguous, inside its buffer."""
  for n, t in zip(names, types):
    vs = op.attrs[f'{n}_view']
    if len(vs.views) != 1 or vs.views[0].mask is not None or len(vs.shape) != 4:
      raise op.error(f"{n} is read through one unmasked view of rank 4 (heads B x H, rows, head size), got {vs}")
    v = vs.views[0]
    if v.shape[3] > 1 and v.strides[3] != 1: raise op.error(f"{n}'s view must hold each row's elements contiguous (stride 1 along the last axis), got strides {list(v.strides)}")
    _check_view(op, t, vs)


class AttentionOp(Operation):
  """`kernel.attention %out [view], %q [view], %k [view], %v [view] {causal = 1, scale = 0.125}` (` (%bias, [view])`
  after v's view: added to the scaled scores, read through its view of shape (B, H, L, S); `, %lse` at the end: it
  also stores each query row's log-sum-exp of its scores, f32, B x H x L contiguous; with `lse_only = 1` that alone,
  out left unwritten: a backward's log-sum-exp whose forward was computed before): a fused attention
  kernel, the whole body of its kernel.func (the target's FusedAttention writes it): out = softmax(q k^T * scale) v
  for each of B x H heads. Each buffer is read (out written) through one view of shape (B, H, rows, E), q and out L
  rows, k and v S (and H / G heads where each serves a group of G q heads: grouped-query attention), each row's E
  elements contiguous: the layouts the heads have where they are computed (a qkv projection's output, heads side by
  side in a row) without copies. causal 1: query i sees the keys j <= i. The
  scores and probabilities stay on the chip (a running max and sum along the keys)."""
  name = 'kernel.attention'
  OPERANDS = ('out', 'q', 'k', 'v', 'bias?', 'lse?')
  PRESENT_WITH = {'bias': 'bias_view'}
  ATTRS = {'out_view': 'views', 'q_view': 'views', 'k_view': 'views', 'v_view': 'views', 'bias_view': 'views?', 'causal': 'int', 'scale': 'number',
           'softcap': 'number?', 'lse_only': 'int?'}
  RESULTS = 0
  FORMAT = '$out $out_view, $q $q_view, $k $k_view, $v $v_view?{ ($bias, $bias_view)}?{, $lse} : type($out), type($q), type($k), type($v), type($bias)'
  @property
  def written(self): return (self.out,) if self.lse is None else (self.out, self.lse)  # (lse_only: out a scratch it may write)
  def views(self) -> list:
    """The four operands' single views (out, q, k, v)."""
    return [self.attrs[f'{n}_view'].views[0] for n in ('out', 'q', 'k', 'v')]
  def verify(self):
    ts = [v.type for v in self.operands[:4]]
    if not all(isinstance(t, BufType) for t in ts): raise self.error(f"reads and writes !kernel.buf operands, got {', '.join(map(str, ts))}")
    if len({t.dtype for t in ts}) != 1 or not ts[0].dtype.is_float: raise self.error(f"needs buffers of one float type, got {', '.join(map(str, ts))}")
    _check_head_views(self, ('out', 'q', 'k', 'v'), ts)
    o, q, k, v = (vs.shape for vs in self.views())
    if o != q or k != v or q[0] != k[0] or q[1] % k[1] or q[3] != k[3]:
      raise self.error(f"shapes do not fit: q {list(q)}, k {list(k)} and v {list(v)} (B x H x rows x E, k and v alike, their heads dividing q's) and out {list(o)} (as q)")
    if k[2] == 0: raise self.error("needs at least one key")
    if self.causal not in (0, 1): raise self.error(f"causal must be 0 or 1, got {self.causal}")
    check_softcap(self)
    if self.attrs.get('lse_only', 0) not in (0, 1) or (self.attrs.get('lse_only') and self.lse is None):
      raise self.error(f"lse_only = 1 stores the rows' log-sum-exp alone: it needs an lse operand, got lse_only = {self.attrs['lse_only']}{'' if self.lse is not None else ' and none'}")
    _check_bias(self, q, k)
    ov = self.views()[0]  # (each element of out written once, as a store's)
    step = 1
    for st, sz in sorted((abs(st), sz) for sz, st in zip(ov.shape, ov.strides) if sz > 1):
      if st != step: raise self.error(f"out's view (shape {list(ov.shape)}, strides {list(ov.strides)}) writes some elements more than once")
      step *= sz
    if step != ts[0].numel: raise self.error(f"out's view writes {step} elements, {ts[0]} has {ts[0].numel}: it covers its buffer")
    if self.lse is not None:
      t, n = self.lse.type, math.prod(o[:3])
      if not isinstance(t, BufType) or t.dtype is not D.f32 or t.numel != n: raise self.error(f"lse must be a !kernel.buf of {n} f32 (a value a query row), got {t}")


class AttentionGradOp(Operation):
  """`kernel.attention_grad %q [view], %k [view], %v [view], %g [view], %lse, %d (%bias, [view]), %out (, %out2)
  {causal, scale, part}`: a fused attention backward kernel, the whole body of its kernel.func (the target's
  FusedAttention writes it): part 0 writes dq (out), part 1 dk (out) and dv (out2), each contiguous (B, H, rows, E),
  from q, k, v and the output's gradient g read through one view each, as kernel.attention's, the rows' log-sum-exp
  and d (each query row's sum of g * out), f32, B x H x L contiguous (tensor.attention_grad), and the forward's bias
  where it had one (as kernel.attention's)."""
  name = 'kernel.attention_grad'
  OPERANDS = ('q', 'k', 'v', 'g', 'lse', 'd', 'bias?', 'out', 'out2?')
  PRESENT_WITH = {'bias': 'bias_view'}
  ATTRS = {'q_view': 'views', 'k_view': 'views', 'v_view': 'views', 'g_view': 'views', 'bias_view': 'views?', 'causal': 'int', 'scale': 'number', 'softcap': 'number?', 'part': 'int'}
  RESULTS = 0
  FORMAT = '$q $q_view, $k $k_view, $v $v_view, $g $g_view, $lse, $d?{ ($bias, $bias_view)}, $out?{, $out2} : type($q), type($k), type($v), type($g)'
  @property
  def written(self): return (self.out,) if self.out2 is None else (self.out, self.out2)
  def views(self) -> list:
    """The four inputs' single views (q, k, v, g)."""
    return [self.attrs[f'{n}_view'].views[0] for n in ('q', 'k', 'v', 'g')]
  def verify(self):
    ts = [v.type for v in (self.q, self.k, self.v, self.g, self.lse, self.d, self.out) + ((self.out2,) if self.out2 is not None else ())]
    if not all(isinstance(t, BufType) for t in ts): raise self.error(f"reads and writes !kernel.buf operands, got {', '.join(map(str, ts))}")
    dt = ts[0].dtype
    if len({t.dtype for t in ts[:4]}) != 1 or not dt.is_float: raise self.error(f"needs q, k, v and g of one float type, got {', '.join(map(str, ts[:4]))}")
    _check_head_views(self, ('q', 'k', 'v', 'g'), ts)
    q, k, v, g = (vs.shape for vs in self.views())
    if k != v or q != g or q[0] != k[0] or q[1] % k[1] or q[3] != k[3]: raise self.error(f"shapes do not fit: q {list(q)}, k {list(k)}, v {list(v)} (their heads dividing q's) and g {list(g)}")
    rows = math.prod(q[:3])
    for n, t in (('lse', ts[4]), ('d', ts[5])):
      if t.dtype is not D.f32 or t.numel != rows: raise self.error(f"{n} must be a !kernel.buf of {rows} f32 (a value a query row), got {t}")
    if self.part not in (0, 1) or (self.out2 is None) != (self.part == 0): raise self.error(f"part 0 writes dq (out), part 1 dk and dv (out, out2); got part {self.part} with {len(ts) - 6} outputs")
    want = math.prod(q) if self.part == 0 else math.prod(k)
    for t in ts[6:]:
      if t.dtype != dt or t.numel != want: raise self.error(f"writes {want} elements of {dt}, got {t}")
    if self.causal not in (0, 1): raise self.error(f"causal must be 0 or 1, got {self.causal}")
    check_softcap(self)
    _check_bias(self, q, k)


def _check_bias(op, q, k) -> None:
  """A fused attention kernel's bias (where it has one): q's type, read through one unmasked view (B, H, L, S) of
  the scores' shape (q's (B, H, L) and k's S), any strides (0 where a mask is broadcast), inside its buffer."""
  if op.bias is None: return
  t, vs = op.bias.type, op.attrs['bias_view']
  if not isinstance(t, BufType) or t.dtype != op.q.type.dtype: raise op.error(f"bias must be a !kernel.buf of q's type, got {t}")
  want = (*q[:3], k[2])
  if len(vs.views) != 1 or vs.views[0].mask is not None or tuple(vs.shape) != want:
    raise op.error(f"bias is read through one unmasked view of the scores' shape {list(want)}, got {vs}")
  _check_view(op, t, vs)


WHOLE_KERNELS = ('kernel.attention', 'kernel.attention_grad')  # ops that are a kernel's whole body, written by the target as one piece


# ---- host side ----
class AllocOp(Operation):
  name = 'kernel.alloc'
  FORMAT = ': type($result)'
  TRAITS = frozenset()
  def verify(self):
    if not isinstance(self.results[0].type, TensorType): raise self.error(f"allocates a tensor, got {self.results[0].type}")


class ReshapeOp(Operation):
  """kernel.reshape %buf : tensor<64x64x1xf32> -> tensor<64x64xf32>: a host buffer at another shape of as many
  elements (buffers are flat: no copy, the same memory), for a result or an argument the schedule passes on."""
  name = 'kernel.reshape'
  OPERANDS = ('src',)
  TRAITS = {PURE}
  FORMAT = '$src : type($src) -> type($result)'
  def verify(self):
    s, r = self.src.type, self.results[0].type
    if not isinstance(s, TensorType) or not isinstance(r, TensorType): raise self.error(f"reshapes a host buffer (a tensor), got {s} -> {r}")
    if s.dtype != r.dtype or s.numel != r.numel: raise self.error(f"cannot view {s} ({s.numel} elements) as {r} ({r.numel} elements): a reshape keeps the buffer")


class LaunchOp(Operation):
  name = 'kernel.launch'
  OPERANDS = ('args*',)
  ATTRS = {'callee': 'symbol'}
  RESULTS = 0
  FORMAT = '$callee($args)'
  def verify_symbols(self, module):
    k = module.lookup(self.callee)
    if k is None or k.name not in ('kernel.func', 'uop.func'): raise self.error(f"launches unknown kernel '@{self.callee}'")
    if k.name == 'kernel.func': want = [(a.type.dtype, a.type.numel) for a in k.body.args]
    else:  # after linearize: the kernel's buffers are its define_globals, of the sizes they declare
      from tgc.dialects.builtin import malformed_globals
      if malformed_globals(k): return  # (the kernel's own error, reported there)
      glob = {op.attrs['index']: (op.results[0].type.dtype, op.attrs.get('size')) for op in k.body.ops if op.name == 'uop.define_global'}
      want = [glob[i] for i in sorted(glob)]
    if len(want) != len(self.args): raise self.error(f"passes {len(self.args)} buffers, @{self.callee} takes {len(want)}")
    for i, (v, (dt, n)) in enumerate(zip(self.args, want)):
      t = v.type
      if not isinstance(t, TensorType) or t.dtype != dt or (n is not None and t.numel != n):
        raise self.error(f"argument #{i} is {t}, @{self.callee} expects a buffer of {f'{n} ' if n is not None else ''}{dt}")
    # a buffer the kernel writes is passed once: as another argument too, its threads would read what others write, in
    # an order no two devices need agree on
    from tgc.dialects.builtin import written_args
    root = [_buffer_root(v) for v in self.args]
    for i in sorted(written_args(k)):
      j = next((j for j, r in enumerate(root) if j != i and i < len(root) and r is root[i]), None)
      if j is not None: raise self.error(f"passes the buffer @{self.callee} writes (argument #{i}) also as argument #{j}: a kernel reads no buffer it writes")


def _buffer_root(v):
  """The host buffer a value is (through kernel.reshape and tensor.reshape: the same memory)."""
  while v.op is not None and v.op.name in ('kernel.reshape', 'tensor.reshape'): v = v.op.operands[0]
  return v
