"""tensor-decompose: composite tensor ops into primitives, as tinygrad builds them.

matmul (..., n, k) @ (..., k, m): reshape/expand both to (..., n, m, k), multiply, reduce add over k,
reshape away the kept axis. The multiply and the reduce fuse into one kernel. conv: the padded input's windows as a
view (tgc/shape/pool.py), times the weight, summed over the input channels and the kernel. What depends on the device
is chosen here from its spec (the pass's options), so the tensor level stays the same for every device: a CPU's
packed column panels (pack), on a target with tensor cores the rows of a half-precision product padded to 16 bytes,
and a conv's layout (channels last on CPUs and on tensor cores, the copies of its input and weight).

Any other op whose class has a `decompose(rw)` method (a composite an extension declares: docs/extending.md) is
replaced by what it returns, the primitives it creates with `rw.create`.
"""
from __future__ import annotations
import math
from tgc.ir.core import REGISTRY, MOVEMENT, ELEMENTWISE
from tgc.ir.types import TensorType
from tgc.ir import dtypes as D
from tgc.shape.view import ViewStack
from tgc.dialects.tensor import conv_acc
from tgc.ir.rewrite import PatternMatcher, apply_patterns
from tgc.passes.manager import Pass
from tgc.target import DeviceSpec, DEVICE_OPTIONS
from tgc.shape.pool import pool


PACK_MIN = 1 << 16  # pack the right operand when it has at least this many elements
PACK = 16           # columns per panel: one AVX-512 vector of f32, two AVX2 ones (the tile is two vectors wide)
PANEL_WASTE = 8     # columns padded to whole panels where that adds at most 1/PANEL_WASTE of them

def tc_row_pads(op, spec: DeviceSpec) -> tuple | None:
  """For a matmul of half-precision values cast up (the front end's form: products accumulate in f32) on a target whose
  tensor cores take that dtype: the two sources and the zeros that pad k and n to rows of 16 bytes; None where the rows
  are so already or no tensor core applies."""
  tc = spec.target.tensor_cores
  src = [v.op.operands[0] if v.op is not None and v.op.name == 'tensor.cast' else None for v in (op.lhs, op.rhs)]
  if tc is None or None in src or len(src[0].type.shape) < 2 or len(src[1].type.shape) < 2: return None
  dt = src[0].type.dtype
  if src[1].type.dtype is not dt or dt.itemsize >= 4 or not any(dt.name == i for i, _ in tc.dtypes): return None
  q = 16 // dt.itemsize  # (rows of a multiple of 8 bytes copy 8 a time: fast enough to need no copy first)
  k, n = src[0].type.shape[-1], src[1].type.shape[-1]
  if k % (q // 2) == 0 and n % (q // 2) == 0: return None
  return src, -k % q, -n % q


def pad_rows(op, rw, spec: DeviceSpec):
  """cast(matmul(cast(x), cast(w))) back to a half-precision dtype whose rows tc_row_pads pads: tensor cores stage rows
  through shared memory 16 bytes a copy, and rows of an odd length (4095 halves) would copy 2 bytes at a time, so the
  operands are copied once with their rows padded to 16 bytes (zeros add nothing to the sums), and the result's
  padding is cut off after the cast (the cast stays in the product's kernel)."""
  mm = op.operands[0].op
  if mm is None or mm.name != 'tensor.matmul' or (pads := tc_row_pads(mm, spec)) is None: return None
  (xs, ws), pk, pn = pads
  def padded(v, pairs):
    t = v.type
    full = tuple(s + hi for s, (_, hi) in zip(t.shape, pairs))
    v = rw.create(REGISTRY['tensor.pad'], [v], [TensorType(full, t.dtype)], {'pads': pairs}, op.loc).results[0]
    v = rw.create(REGISTRY['tensor.contiguous'], [v], [TensorType(full, t.dtype)], None, op.loc).results[0]
    return rw.create(REGISTRY['tensor.cast'], [v], [TensorType(full, mm.lhs.type.dtype)], None, op.loc).results[0]
  a = padded(xs, ((0, 0),) * (len(xs.type.shape) - 1) + ((0, pk),)) if pk else mm.lhs
  b = padded(ws, ((0, 0),) * (len(ws.type.shape) - 2) + ((0, pk), (0, pn))) if pk or pn else mm.rhs
  shape = op.results[0].type.shape
  r = rw.create(REGISTRY['tensor.matmul'], [a, b], [TensorType(shape[:-1] + (b.type.shape[-1],), mm.results[0].type.dtype)], None, op.loc).results[0]
  r = rw.create(REGISTRY['tensor.cast'], [r], [TensorType(r.type.shape, op.results[0].type.dtype)], None, op.loc).results[0]
  if not pn: return r
  return rw.create(REGISTRY['tensor.shrink'], [r], [TensorType(shape, r.type.dtype)], {'bounds': tuple((0, d) for d in shape)}, op.loc).results[0]


def split_k(shape: tuple, k: int, spec: DeviceSpec | None, tensor_cores: bool = False) -> int:
  """Into how many chunks a GPU splits a product's k (each summed apart, the partial sums added after), where its
  outputs make too few work-groups to keep every multiprocessor busy.
  - Staged f32 tiles (64x64): the count (1, 2, 4, ..., chunks of SPLIT_K_MIN at least) whose work-groups finish
    soonest, where a multiprocessor nears its rate with SATURATE of them at once and shares it among more, and a
    work-group takes its chunk of k plus a pipeline's fill (TILE_FILL steps). A weight's gradient, 384x1536 summed over
    4096 tokens, makes 144 tiles: in 2 chunks 288 work-groups, 3 on some of an H200's 132 multiprocessors and 2 on the
    rest (27 TFLOP/s, 0.6 of torch's kernel, where 1536 such work-groups ran at 35); in 4 chunks 4 or 5
    a multiprocessor.
  - Tensor cores (whose partial sums' stores weigh more beside their faster products): doubled until the outputs
    make WAVES staged tiles' worth a multiprocessor."""
  if spec is None or not spec.gpu or not spec.processors: return 1
  out, counts = math.prod(shape), [1] + [s for s in (2, 4, 8, 16, 32, 64, 128, 256) if k % s == 0 and k // s >= SPLIT_K_MIN]
  if tensor_cores: return next((s for s in counts if out * s >= TILE_OUTPUTS * WAVES * spec.processors), counts[-1])
  tiles = -(-out // TILE_OUTPUTS)
  time = lambda s: max(-(-tiles * s // spec.processors), SATURATE) * (k // s + TILE_FILL)
  best = min(time(s) for s in counts)
  return next(s for s in counts if time(s) <= best * 1.05)  # (the fewest chunks within 5 % of the best: fewer partial sums)

TILE_OUTPUTS = 4096  # the outputs of a GPU matmul's staged tile (64x64)
TILE_FILL = 64       # a work-group's start (its first copies, its ring's fill), in steps along k
SATURATE = 3         # the staged tiles' work-groups (128 threads) a multiprocessor runs at once to near its rate (an H200: 384 of them on 132 ran at 0.94 of the rate of 1536)
WAVES = 2            # the work-groups per multiprocessor a product should have
SPLIT_K_MIN = 256    # the shortest chunk of k a split leaves
FEW_ROWS = 16        # the most rows of a product kernel-opt takes as a matrix-vector product (few_rows), never split


def split_product_reduce(op, rw, spec: DeviceSpec):
  """A sum of products of broadcast factors into too few outputs for a GPU's multiprocessors: over several axes (a
  conv's weight gradient: 32x32x3x3 sums over a batch of 64 images of 32x32 pixels made 3 staged tiles'
  work-groups), partial sums along the summed axes (as the loop below picks their counts), then their sum; over one axis (an
  embedding's gradient, a one-hot of the tokens times their gradients summed over 4096 tokens into 256x384), the
  axis cut into chunks as split_k cuts a matmul's k (split_k's count: a matmul split there is not split again)."""
  src = op.src
  prod = src.op
  while prod is not None and prod.name == 'tensor.cast': prod = prod.operands[0].op
  if op.kind != 'add' or prod is None or prod.name != 'tensor.mul': return None
  # a product's factors each broadcast along some axis (a matmul's, a conv's, a one-hot's): each read is shared by
  # many outputs; an elementwise product summed (a norm's weight gradient) reads its factors once and stays one reduce
  if any(_reads(x) >= src.type.numel for x in prod.operands): return None
  shape, out, t = src.type.shape, math.prod(op.results[0].type.shape), op.results[0].type
  if len(op.axes) > 1:
    target = TILE_OUTPUTS * WAVES * spec.processors
    if out >= target: return None
    # the partial sums' count along each summed axis, outermost first: the outermost axis whole (an image each) where
    # its other axes sum SPLIT_K_MIN elements, else chunks of it that do (4 images of 8x8 pixels); then, while the
    # outputs are still under a quarter of `target`, an inner axis in the fewest chunks that make it, or the most that
    # still sum SPLIT_K_MIN (a first conv's 32x3x3x3 weight gradient: an image's 32x32 pixels in 4 chunks of rows)
    a, parts, n, left = op.axes[0], {}, out, math.prod(shape[i] for i in op.axes)
    # (chunks of the outermost axis only for long sums: a forward conv's 64 channels by a 3x3 window stay one sum)
    if left // shape[a] < SPLIT_K_MIN and left < 8 * SPLIT_K_MIN: return None
    fits = [p for p in range(1, shape[a] + 1) if shape[a] % p == 0 and left // p >= SPLIT_K_MIN]
    if len(fits) < 2: return None
    parts[a] = fits[-1]; n *= fits[-1]; left //= fits[-1]
    for i in op.axes[1:]:  # (while far short: a split of an inner axis stores a computed factor first)
      fits = [p for p in range(2, shape[i] + 1) if shape[i] % p == 0 and left // p >= SPLIT_K_MIN]
      if 4 * n >= target or not fits: break
      parts[i] = next((p for p in fits if n * p >= target), fits[-1]); n *= parts[i]; left //= parts[i]
    # (whole axes kept: the staged tiles compute a computed factor once a tile; chunks reshape the product, behind which
    # kernelize would fuse a computed factor, recomputed for every output it is broadcast to: it is stored first)
    whole = all(p == shape[i] for i, p in parts.items())
    return partial_reduce(src if whole else _with_stored_factors(src, prod, rw, op.loc), op, parts, rw)
  a, = op.axes
  x, w = prod.operands
  if shape[a] and any(_few_rows(_reads(f) // shape[a], m, a, spec) for f, m in ((x, w), (w, x))): return None
  n = split_k(t.shape, shape[a], spec, _on_tensor_cores(x.type.dtype, spec) or _narrowed_pair(x, w, spec) is not None)
  if n < 2: return None
  return _in_chunks(_with_stored_factors(src, prod, rw, op.loc), shape[:a], n, shape[a + 1:], op, rw)


def partial_reduce(src, op, parts: dict, rw, between=None):
  """op's reduce of src as two: partial results along the reduced axes as `parts` counts them (axis -> the whole axis
  kept, or that many chunks of it; an axis not named is reduced in the first), then the reduce of those, in op's
  result type. between: applied to the partial results (kernelize's `contiguous`, a buffer of their own)."""
  shape, t = src.type.shape, op.results[0].type
  cut, inner, outer = [], [], []
  for i, d in enumerate(shape):
    p = parts.get(i, 1) if i in op.axes else None
    if p is None: cut.append(d)
    elif p == 1: inner.append(len(cut)); cut.append(d)
    elif p == d: outer.append(len(cut)); cut.append(d)
    else: outer.append(len(cut)); inner.append(len(cut) + 1); cut += [p, d // p]
  mk = lambda name, x, sh, attrs=None: rw.create(REGISTRY['tensor.' + name], [x], [TensorType(tuple(sh), t.dtype if name == 'reduce' else x.type.dtype)], attrs, op.loc).results[0]
  v = src if len(cut) == len(shape) else mk('reshape', src, cut)
  v = mk('reduce', v, [1 if i in inner else d for i, d in enumerate(cut)], {'kind': op.kind, 'axes': tuple(inner)})
  if between is not None: v = between(v)
  v = mk('reduce', v, [1 if i in outer else d for i, d in enumerate(v.type.shape)], {'kind': op.kind, 'axes': tuple(outer)})
  return v if len(cut) == len(shape) else mk('reshape', v, t.shape)


def _in_chunks(src, pre: tuple, chunks: int, post: tuple, op, rw):
  """src (pre..., reduced elements..., post...) reduced by op's kind over its middle as `chunks` chunks: each chunk,
  then the chunks (into op's result type)."""
  t = op.results[0].type
  cut = pre + (chunks, src.type.numel // (math.prod(pre) * chunks * math.prod(post))) + post
  a = len(pre)
  v = rw.create(REGISTRY['tensor.reshape'], [src], [TensorType(cut, src.type.dtype)], None, op.loc).results[0]
  v = rw.create(REGISTRY['tensor.reduce'], [v], [TensorType(cut[:a + 1] + (1,) + cut[a + 2:], t.dtype)], {'kind': op.kind, 'axes': (a + 1,)}, op.loc).results[0]
  v = rw.create(REGISTRY['tensor.reduce'], [v], [TensorType(cut[:a] + (1, 1) + cut[a + 2:], t.dtype)], {'kind': op.kind, 'axes': (a,)}, op.loc).results[0]
  return rw.create(REGISTRY['tensor.reshape'], [v], [t], None, op.loc).results[0]


def split_column_reduce(op, rw, spec: DeviceSpec, users: dict):
  """A reduce across rows (axes with a run of at least COLUMN_MIN contiguous elements after them: a bias's gradient,
  dy summed over the tokens into its columns) into too few outputs to fill a GPU: the rows are cut into chunks of
  COLUMN_CHUNK, each chunk reduced into its own partial results (a thread a column and a chunk, neighbouring threads
  reading neighbouring columns), then the chunks' results. Reduced in one kernel, its work-groups shared each column
  and read it a row apart per thread: on an H200 a 4096x1536 float32 column sum ran at 0.6 TB/s. A reduce that is a
  stage of a fused kernel stays whole (softmax along columns: its max read back along the reduced rows, its sum of
  exp(x - max) computed from that: one kernel of stages, where the split made five)."""
  shape, axes = op.src.type.shape, tuple(sorted(op.axes))
  if axes != tuple(range(axes[0], axes[-1] + 1)) or _stage_of_rows(op, users): return None
  a, b = axes[0], axes[-1] + 1
  outer, n, inner = math.prod(shape[:a]), math.prod(shape[a:b]), math.prod(shape[b:])
  if inner < COLUMN_MIN or outer * inner >= spec.processors * COLUMN_OUTPUTS or n < COLUMN_ROWS or n % COLUMN_CHUNK: return None
  return _in_chunks(op.src, (outer,), n // COLUMN_CHUNK, (inner,), op, rw)

def _stage_of_rows(op, users: dict) -> bool:
  """Whether reduce op's result is read back broadcast along the rows it reduced (softmax's max, a norm's mean), or
  op's input is computed from such a reduce over the same rows: a stage of kernelize's fused row kernels."""
  full, axes = op.src.type.shape, tuple(sorted(op.axes))
  v = op.results[0]
  while len(us := users.get(v, [])) == 1 and us[0].name == 'tensor.reshape': v = us[0].results[0]
  if any(u.name == 'tensor.expand' and u.results[0].type.shape == full for u in us): return True
  seen, todo = set(), [op.src]
  while todo:
    x = todo.pop()
    if id(x) in seen or x.op is None: continue
    seen.add(id(x))
    if x.op.name == 'tensor.reduce':
      if x.op.src.type.shape == full and tuple(sorted(x.op.axes)) == axes: return True
      continue
    if MOVEMENT in x.op.TRAITS or ELEMENTWISE in x.op.TRAITS: todo += x.op.operands
  return False

COLUMN_MIN = 32       # a column reduce's contiguous run of outputs (a warp's neighbouring loads)
COLUMN_OUTPUTS = 64   # ... into fewer outputs than this many per multiprocessor is split
COLUMN_CHUNK = 32     # the rows each partial result sums
COLUMN_ROWS = 1024    # fewer rows than this are reduced in one kernel (its work-groups sharing a column)


def _with_stored_factors(src, prod, rw, loc):
  """src (the product, through its casts) with each factor that is a computed value broadcast (an expand of an
  elementwise chain: an embedding's token gradients behind a layer norm's backward, broadcast along the vocabulary)
  read from a buffer of its own: fused, the chain ran once per output it is broadcast to (the GPT step's 256 per
  token gradient: 0.26 ms for 1.7 GFLOP at 7 TFLOP/s). (A conv's weight gradient, summed over several axes, keeps
  its factors: its staged tiles compute a factor once a tile, and a ResNet step ran 8 % slower with them stored.)"""
  new = []
  for x in prod.operands:
    chain, u = _chain(x, lambda o: MOVEMENT in o.TRAITS)
    s = _staged(u, rw, loc) if chain and u.type.numel < x.type.numel else u
    new.append(x if s is u else _rebuilt(chain, s, rw, loc))
  if all(a is b for a, b in zip(new, prod.operands)): return src
  v = rw.create(REGISTRY['tensor.mul'], new, [prod.results[0].type], dict(prod.attrs), loc).results[0]
  casts, _ = _chain(src, lambda o: o is not prod)
  return _rebuilt(casts, v, rw, loc)


def _unbroadcast(b, nb: int, mk):
  """b (batch..., k, m) without its nb batch axes where it is one (k, m) expanded along them (a weight broadcast over
  a batch of inputs: its panels are then packed once, not once per batch element); else b."""
  o = b.op
  if not nb or o is None or o.name != 'tensor.expand': return b
  x = o.operands[0]
  if x.type.shape != (1,) * nb + b.type.shape[nb:]: return b
  return mk('reshape', x, b.type.shape[nb:])


def _chain(v, through) -> tuple[list, object]:
  """The one-operand ops `through` accepts that v is made by, outermost first, and the value below them."""
  ops = []
  while v.op is not None and v.op.operands and through(v.op): ops.append(v.op); v = v.op.operands[0]
  return ops, v


def _rebuilt(ops, v, rw, loc):
  """The chain of one-operand ops (outermost first, as _chain gives them) made again on v."""
  for o in reversed(ops): v = rw.create(REGISTRY[o.name], [v], [o.results[0].type], dict(o.attrs), loc).results[0]
  return v


def _reads(v) -> int:
  """The most elements v reads from one tensor: the largest of the values its elementwise ops and movements start
  from (a leaf, an argument, any other op counts at its own size)."""
  seen, todo, most = set(), [v], 0
  while todo:
    x = todo.pop()
    if id(x) in seen: continue
    seen.add(id(x))
    o = x.op
    if o is not None and (MOVEMENT in o.TRAITS or ELEMENTWISE in o.TRAITS) and o.operands: todo.extend(o.operands)
    else: most = max(most, x.type.numel)
  return most


def decompose_matmul(op, rw, pack: bool = False, spec: DeviceSpec | None = None, copies: dict | None = None):
  """copies: the tensor-core operands' narrow copies made so far (_staged), shared by the products that read one."""
  shape = op.results[0].type.shape
  a, b = op.lhs, op.rhs
  tc = spec is not None and _on_tensor_cores(a.type.dtype, spec)
  if spec is not None and spec.gpu and not tc:
    if tc := (pair := _narrowed_pair(a, b, spec)) is not None:  # (mixed precision: f32 sums of bf16 products)
      a, b = (v if (s := _staged(n, rw, op.loc, False, copies)) is n else _rebuilt(ops, s, rw, op.loc) for (ops, n), v in zip(pair, (a, b)))
    else: a, b = _staged(a, rw, op.loc), _staged(b, rw, op.loc)
  few = _few_rows(math.prod(shape[:-1]), b, len(b.type.shape) - 2, spec)
  return _product(rw, a, b, op.loc, pack, 1 if few else split_k(shape, op.lhs.type.shape[-1], spec, tc))


def _few_rows(rows: int, matrix, k: int, spec: DeviceSpec | None) -> bool:
  """Whether a GPU product of `rows` rows by `matrix`, summed along its axis k, is kernel-opt's few_rows case, never
  cut into chunks of k: a few tokens through a Linear (x @ W.T: W's rows read along k) off the tensor cores, the matrix
  read once with every row's sums in registers, where each chunk's work-groups would read it again a row (16 x 4096
  by 4096 x 4096 in f32 on an H200: 2.4 TFLOP/s in 16 chunks, 0.4 of torch's kernel; 7.1 whole, 1.0). A matrix read
  across k (x @ W) keeps the chunks: its staged tiles would make a few work-groups."""
  depth = matrix.type.shape[k]
  if spec is None or not spec.gpu or not 2 <= rows <= FEW_ROWS or not depth or depth % 8: return False
  n = _reads(matrix) // depth  # (the matrix's own rows, however far it is broadcast)
  return n >= 64 and n % 4 == 0 and not _on_tensor_cores(matrix.type.dtype, spec) and _stride_along(matrix, k) == 1


def _stride_along(v, axis: int) -> int | None:
  """v's stride along `axis` in the value its reshapes, expands and permutes start from (row-major), None where
  other ops move it or it does not step evenly."""
  chain, u = _chain(v, lambda o: MOVEMENT in o.TRAITS)
  vs = ViewStack.from_shape(u.type.shape)
  for o in reversed(chain):
    kind = o.name.split('.', 1)[1]
    if kind == 'reshape': vs = vs.reshape(o.results[0].type.shape)
    elif kind == 'expand': vs = vs.expand(o.results[0].type.shape)
    elif kind == 'permute': vs = vs.permute(o.attrs['order'])
    else: return None
  return vs.real_strides()[axis]


def _on_tensor_cores(dt, spec: DeviceSpec) -> bool:
  """Whether a product of dt factors may run on the target's tensor cores (whose tiles compute their operands)."""
  tc = spec.target.tensor_cores
  return tc is not None and (any(dt.name == i for i, _ in tc.dtypes) or (dt == D.f32 and tc.tf32 and spec.tf32))


def _narrowed_pair(a, b, spec: DeviceSpec):
  """(_narrowed(a), _narrowed(b)) where both are casts of one dtype the tensor cores take (a mixed-precision product's
  factors: it runs on the tensor cores with f32 sums), else None."""
  na, nb = _narrowed(a, spec), _narrowed(b, spec)
  return (na, nb) if na is not None and nb is not None and na[1].type.dtype == nb[1].type.dtype else None


def _narrowed(v, spec: DeviceSpec):
  """(the ops, outermost first, and the value) where v is a cast to v's dtype of a value whose dtype the tensor cores
  take, under movement ops alone (a backward product's transposed weight), else None: a product in float32 of bfloat16
  (or half) factors, as a mixed-precision matmul is written, runs on the tensor cores with float32 sums."""
  moves, c = _chain(v, lambda o: MOVEMENT in o.TRAITS)
  o = c.op
  if o is None or o.name != 'tensor.cast': return None
  n = o.operands[0]
  return (moves + [o], n) if n.type.dtype.itemsize < v.type.dtype.itemsize and _on_tensor_cores(n.type.dtype, spec) else None


def _staged(v, rw, loc, through_casts: bool = True, copies: dict | None = None):
  """A GPU matmul's operand that is computed (a scaled gradient, a normalised row), not a plain read or a cast of one,
  made a buffer of its own where the product runs on the CUDA cores: its tiles then stage the operand through shared
  memory as a plain read (computed in the product's kernel, it cost the staged tiles: 2 TFLOP/s for attention's
  backward products where the plain ones run at 25); storing it costs a write and a read of an operand, and its
  inputs are freed sooner (a GPT step's peak: 653 -> 587 MiB). Without `through_casts` a cast is computed too: a
  tensor-core operand is read from memory in its own dtype (a bfloat16 copy of a float32 weight or activation costs
  a write and a read of half the float32 operand). `copies` (v -> its buffer, given for those): one copy for all
  the products that read it (a bfloat16 weight or activation, which a mixed-precision step's forward and backward
  products both read: torch.autocast keeps these casts for the backward pass); a float32 copy is made per product,
  so that none is held from the forward pass to the backward one (held, they raised a float32 GPT step's peak from
  587 to 785 MiB)."""
  if copies is not None and v in copies: return copies[v]
  _, u = _chain(v, lambda o: MOVEMENT in o.TRAITS or (through_casts and o.name == 'tensor.cast'))
  if u.op is None or ELEMENTWISE not in u.op.TRAITS or not u.op.operands: return v
  c = rw.create(REGISTRY['tensor.contiguous'], [v], [v.type], None, loc).results[0]
  if copies is not None: copies[v] = c
  return c


def _product(rw, a, b, loc, pack: bool, split: int = 1):
  """a (..., n, k) @ b (..., k, m) as a multiply and a reduce over k (split: over each of that many chunks of k,
  then over the chunks). b may have no batch axes (one (k, m) for every batch of a)."""
  at, bt = a.type, b.type
  *batch, n, k = at.shape
  m = bt.shape[-1]
  batch, dt = tuple(batch), at.dtype
  def mk(name, src, shape, attrs=None):
    return rw.create(REGISTRY[f'tensor.{name}'], [src], [TensorType(tuple(shape), dt)], attrs, loc).results[0]
  nb = len(batch)
  if pack and m > PACK and k * m >= PACK_MIN and -m % PACK * PANEL_WASTE <= m:
    # b (k, m) -> panels (m/16, k, 16), contiguous: the kernel then reads 16 columns of b as one sequential
    # stream along k instead of one cache line per row (a copy of b buys a matmul that runs out of cache). Columns
    # 16 does not divide are padded with zeros to whole panels and the result cut back (CPU kernels vectorise only
    # whole vectors: PP-OCR's 6625 classes ran at 24 GFLOP/s unpacked). A weight's panels depend on the weight alone:
    # a function specialised to its weights (an ONNX model's) computes them once.
    b = _unbroadcast(b, nb, mk)
    bb, p = b.type.shape[:-2], -(-m // PACK)
    if p * PACK != m: b = mk('pad', b, bb + (k, p * PACK), {'pads': ((0, 0),) * (len(bb) + 1) + ((0, p * PACK - m),)})
    lb = len(bb)
    bp = mk('reshape', b, bb + (k, p, PACK))
    bp = mk('permute', bp, bb + (p, k, PACK), {'order': tuple(range(lb)) + (lb + 1, lb, lb + 2)})
    bp = rw.create(REGISTRY['tensor.contiguous'], [bp], [TensorType(bb + (p, k, PACK), dt)], None, loc).results[0]
    full = batch + (n, p, k, PACK)
    a2 = mk('expand', mk('reshape', a, batch + (n, 1, k, 1)), full)
    b2 = mk('expand', mk('reshape', bp, (1,) * (nb - lb) + bb + (1, p, k, PACK)), full)
    prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, loc).results[0]
    red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(batch + (n, p, 1, PACK), dt)], {'kind': 'add', 'axes': (nb + 2,)}, loc).results[0]
    r = mk('reshape', red, batch + (n, p * PACK))
    return r if p * PACK == m else mk('shrink', r, batch + (n, m), {'bounds': tuple((0, d) for d in batch + (n, m))})
  if len(bt.shape) < nb + 2: b = mk('expand', mk('reshape', b, (1,) * (nb + 2 - len(bt.shape)) + bt.shape), batch + bt.shape[-2:])
  order = tuple(range(nb)) + (nb + 1, nb)
  bt = mk('permute', b, batch + (m, k), {'order': order})
  if split > 1:  # the chunk axis outermost: each chunk's partial sums are one contiguous (n, m) block
    c, first = k // split, tuple(range(nb)) + (nb + 1, nb, nb + 2)
    full = batch + (split, n, m, c)
    a2 = mk('expand', mk('reshape', mk('permute', mk('reshape', a, batch + (n, split, c)), batch + (split, n, c), {'order': first}), batch + (split, n, 1, c)), full)
    b2 = mk('expand', mk('reshape', mk('permute', mk('reshape', bt, batch + (m, split, c)), batch + (split, m, c), {'order': first}), batch + (split, 1, m, c)), full)
  else:
    full = batch + (n, m, k)
    a2 = mk('expand', mk('reshape', a, batch + (n, 1, k)), full)
    b2 = mk('expand', mk('reshape', bt, batch + (1, m, k)), full)
  prod = rw.create(REGISTRY['tensor.mul'], [a2, b2], [TensorType(full, dt)], None, loc).results[0]
  red = rw.create(REGISTRY['tensor.reduce'], [prod], [TensorType(full[:-1] + (1,), dt)], {'kind': 'add', 'axes': (len(full) - 1,)}, loc).results[0]
  if split > 1: red = rw.create(REGISTRY['tensor.reduce'], [red], [TensorType(batch + (1, n, m, 1), dt)], {'kind': 'add', 'axes': (nb,)}, loc).results[0]
  return mk('reshape', red, batch + (n, m))

class Movable:
  """An IR value with the Tensor API's methods that a conv's decomposition (and pool) use, each making the ops the
  Tensor method makes, its no-ops left out as there: the pass builds what the front end built. `mk(name, srcs, type,
  attrs)` makes one tensor op and returns its result."""
  __slots__ = ('v', 'mk')
  def __init__(self, v, mk): self.v, self.mk = v, mk
  @property
  def shape(self) -> tuple: return self.v.type.shape
  @property
  def dtype(self): return self.v.type.dtype
  def _op(self, name, shape, attrs=None, dtype=None, srcs=None) -> 'Movable':
    return Movable(self.mk(name, srcs or [self.v], TensorType(tuple(shape), dtype or self.dtype), attrs), self.mk)
  def reshape(self, *shape) -> 'Movable':
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return self if shape == self.shape else self._op('reshape', shape)
  def permute(self, *order) -> 'Movable':
    return self if order == tuple(range(len(order))) else self._op('permute', [self.shape[i] for i in order], {'order': order})
  def expand(self, *shape) -> 'Movable': return self if shape == self.shape else self._op('expand', shape)
  def pad(self, padding) -> 'Movable':
    """Pairs per axis (None: none), or flat from the last axis (torch's F.pad); negative pads remove."""
    n = len(self.shape)
    if padding and all(isinstance(p, int) for p in padding):
      pairs = [(0, 0)] * n
      for i in range(len(padding) // 2): pairs[n - 1 - i] = (padding[2 * i], padding[2 * i + 1])
    else: pairs = [p or (0, 0) for p in padding]
    x = self
    if any(a < 0 or b < 0 for a, b in pairs):
      x = x.shrink(tuple((-min(a, 0), s + min(b, 0)) for (a, b), s in zip(pairs, x.shape)))
      pairs = [(max(a, 0), max(b, 0)) for a, b in pairs]
    if all(p == (0, 0) for p in pairs): return x
    return x._op('pad', [s + a + b for s, (a, b) in zip(x.shape, pairs)], {'pads': tuple(pairs)})
  def shrink(self, bounds) -> 'Movable':
    bounds = tuple((0, s) if b is None else tuple(b) for b, s in zip(bounds, self.shape))
    if all(b == (0, s) for b, s in zip(bounds, self.shape)): return self
    return self._op('shrink', [hi - lo for lo, hi in bounds], {'bounds': bounds})
  def repeat(self, reps) -> 'Movable':
    base = (1,) * (len(reps) - len(self.shape)) + self.shape
    x = self.reshape(tuple(v for s in base for v in (1, s)))
    x = x.expand(*[v for r, s in zip(reps, base) for v in (r, s)])
    return x.reshape(tuple(r * s for r, s in zip(reps, base)))
  def contiguous(self) -> 'Movable': return self._op('contiguous', self.shape)
  def cast(self, dt) -> 'Movable': return self if dt is self.dtype else self._op('cast', self.shape, dtype=dt)
  def mul(self, y: 'Movable') -> 'Movable':
    shape = tuple(max(a, b) for a, b in zip(self.shape, y.shape))
    a, b = self.expand(*shape), y.expand(*shape)
    return a._op('mul', shape, srcs=[a.v, b.v])
  def sum(self, axes) -> 'Movable':
    """Tensor.sum's ops: half-precision floats summed in f32 and cast back, narrow ints summed in 32 bits."""
    acc, n = conv_acc(self.dtype), len(self.shape)
    axes = tuple(sorted(a % n for a in axes))
    x = self.cast(acc)
    if any(x.shape[a] == 0 for a in axes):  # (an empty axis: the reduce of one zero padded onto it)
      x = x.pad(tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(x.shape)))
    r = x._op('reduce', [1 if i in axes else s for i, s in enumerate(x.shape)], {'kind': 'add', 'axes': axes})
    r = r.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return r.cast(self.dtype) if self.dtype.is_float and self.dtype.itemsize < 4 else r


def conv_primitives(x: Movable, w: Movable, stride, dilation, pads, groups: int, spec: DeviceSpec | None) -> Movable:
  """conv(x, w) as movement ops, a multiply and a sum, laid out for the device `spec` describes; spec None: the plain
  form (NCHW, no copies), the same values on any device."""
  (bs, _), (cout, cin), HW = x.shape[:2], w.shape[:2], w.shape[2:]
  t = spec.target if spec is not None else None
  cpu, tc = t is not None and t.is_cpu, t.tensor_cores if t is not None else None
  # the channels-last form (the padded input copied once, the output channels innermost, the result permuted back)
  # for the CPU targets (register tiles, not work-groups) and for tensor cores (tc on the input channels, m and n
  # the batch and the output channels)
  channels_last = cpu or (tc is not None and any(x.dtype.name == i for i, _ in tc.dtypes) and
                          bs % tc.dims[0] == 0 and cin % tc.dims[2] == 0 and groups == 1)
  if channels_last and not cpu:
    # tensor cores (an implicit GEMM): the padded input copied with its channels innermost (NHWC), so that the tiles'
    # rows (pixels) read their k (input channels) contiguously: 16-byte asynchronous copies into shared memory, with
    # no masks. On an H100 a 3x3 f16 conv (32x64x56x56) ran its five kernels in 95 us so (the conv kernel 62 us),
    # where an im2col copy of the windows and a batched matmul took 139 us (47 and 77 us of it), and a padded NHWC
    # copy made in one kernel from NCHW 29 us (a gather of misaligned halves); reading the unpadded NHWC input
    # through masked copies took 1.3 ms (978 us on an H200) with mma.sync, but 31 us on warpgroups (wgmma)
    n = len(x.shape)
    xl = x.permute(0, *range(2, n), 1).contiguous()  # (bs, *hw, cin): a plain transpose, 16-byte loads and stores
    # padded in that layout (channels innermost: the padding is whole 16-byte vectors, the copy stays vectorised);
    # on warpgroups the conv kernel reads the padding as gated 16-byte copies instead (one 8 us kernel fewer)
    xp = xl.pad((0, 0, *pads)) if any(pads) else xl
    if any(pads) and not spec.has_warpgroup: xp = xp.contiguous()
    x = xp.permute(0, n - 1, *range(1, n - 1))
  else:
    x = x.pad(tuple(pads)) if any(pads) else x
    # the padded input is copied once (a small kernel) so that the conv kernel reads it with no masks: its loads are
    # then plain broadcasts into the register tile, as a matmul's are
    if (channels_last or (t is not None and not cpu)) and any(pads): x = x.contiguous()
  x = pool(x, HW, stride, dilation)  # (bs, groups*cin, *oyx, *HW)
  rcout, oyx = cout // groups, x.shape[2:-len(HW)]
  nd, nk = len(oyx), len(HW)
  sp = [3 + i for i in range(nd)]  # the spatial axes of x below
  x = x.reshape(bs, groups, cin, *oyx, 1, *HW).expand(bs, groups, cin, *oyx, rcout, *HW)
  # the output channels innermost in that form: the register tile's vector runs along them (the weight is
  # read contiguously) and its stores are contiguous; a copy kernel puts the result back in NCHW order
  out_axes = [0, 1, *sp, 3 + nd] if channels_last else [0, 1, 3 + nd, *sp]
  x = x.permute(*out_axes, 2, *[4 + nd + i for i in range(nk)])
  if spec is not None and rcout >= 16 and rcout % 16 == 0:
    # the weight copied with cout innermost: the kernel then reads 16 output channels as one vector (as the
    # column panels of a matmul); the permutes back are views, the values are the same
    n = len(w.shape)
    w = w.permute(*range(1, n), 0).contiguous().permute(n - 1, *range(0, n - 1))
  wshape = (1, groups, *[1] * nd, rcout, cin, *HW) if channels_last else (1, groups, rcout, *[1] * nd, cin, *HW)
  w = w.reshape(wshape)
  if x.dtype.is_float and x.dtype.itemsize < 4:
    # a narrow float's products widened before the sum (as matmul's, and as tensor cores compute them): a product
    # rounded to f16 first would cost the sum an ulp
    ret = x.cast(D.f32).mul(w.cast(D.f32)).sum([-1 - i for i in range(1 + nk)]).cast(x.dtype)
  else: ret = x.mul(w).sum([-1 - i for i in range(1 + nk)])
  if channels_last: ret = ret.contiguous().permute(0, 1, 2 + nd, *[2 + i for i in range(nd)])  # (bs, groups, rcout, *oyx)
  return ret.reshape(bs, cout, *oyx)


def conv_of(op, mk, spec: DeviceSpec | None) -> Movable:
  """The primitives of the tensor.conv `op`, made by mk (Movable's)."""
  return conv_primitives(Movable(op.x, mk), Movable(op.w, mk), op.stride, op.dilation, op.pads, op.groups, spec)


def decompose_conv(op, rw, spec: DeviceSpec | None = None, pack: bool = False):
  mk = lambda name, srcs, t, attrs: rw.create(REGISTRY['tensor.' + name], list(srcs), [t], attrs, op.loc).results[0]
  if pack and (v := _paneled_conv(op, rw, mk, spec)) is not None: return v
  return conv_of(op, mk, spec).v


def _paneled_conv(op, rw, mk, spec: DeviceSpec):
  """A float32 conv on a target that packs a matmul's panels (CPUs: their register tiles are vectors of output
  channels), where a form of its own beats conv_primitives' channels-last one; None elsewhere.
  - A pointwise conv (1x1, stride 1, no padding) is a matmul over the pixels. W @ x (vectors along the pixels) gives
    the result NCHW as computed, so the ops after it fuse into its kernel (the channels-last result is read back
    transposed, one element at a time, by the kernel after it), where half a vector divides the pixels (PP-OCR rec's
    1x40 maps: 71 us, where the channels-last form's transposing kernel took 208 us for the swish after it). Else
    x^T @ W^T, vectors along the output channels, W^T in panels (det's 10x10 maps: 740 -> 210 us plus a 50 us
    transpose).
  - Output channels the vector width does not divide (the channels-last form takes a few of them, upcast 2 for 258,
    4 for 60, and gathers the weights) are padded with zero filters to whole vectors, and the result cut back, where
    the zeros add at most 1/PANEL_WASTE of the work: silero's STFT (258 filters of 256 taps, stride 128) 37 -> 8.5
    us, PP-OCR rec's 1x3 convs 480 -> 60 and 960 -> 60 channels (1x40 maps) 125 -> 48 and 238 -> 85 us, on a 2-core
    Zen 5 (det's 96 -> 24 channel 3x3 convs, a third more work padded to 32, took 2.1 -> 3.9 ms: they keep their
    width).
  A weight's panels and padding depend on the weight alone: a function specialised to its weights computes them once."""
  x, w = Movable(op.x, mk), Movable(op.w, mk)
  if x.dtype is not D.f32 or w.dtype is not D.f32 or op.groups != 1: return None
  (n, ci), co, sp = x.shape[:2], w.shape[0], x.shape[2:]
  if all(v == 1 for v in w.shape[2:] + tuple(op.stride)) and not any(op.pads):
    P = math.prod(sp)
    if P % (PACK // 2) == 0: y = Movable(_product(rw, w.reshape(1, co, ci).expand(n, co, ci).v, x.reshape(n, ci, P).v, op.loc, True), mk)
    else: y = Movable(_product(rw, x.reshape(n, ci, P).permute(0, 2, 1).v, w.reshape(co, ci).permute(1, 0).v, op.loc, True), mk).permute(0, 2, 1)
    return y.reshape(n, co, *sp).v
  if co % PACK and -co % PACK * PANEL_WASTE <= co:
    wp = w.pad(((0, -co % PACK),) + ((0, 0),) * (len(w.shape) - 1))
    y = conv_primitives(x, wp, op.stride, op.dilation, op.pads, 1, spec)
    return y.shrink(((0, n), (0, co)) + tuple((0, v) for v in y.shape[2:])).v
  return None


# without a device: the plain product and conv (kernelize decomposes what is left so)
decompose_patterns = PatternMatcher([('tensor.matmul', decompose_matmul), ('tensor.conv', decompose_conv)])

def declared_patterns(spec: DeviceSpec | None = None) -> PatternMatcher:
  """A rule for every registered op that says how it decomposes (ops may be declared after this module loads), but
  for an op the device computes whole (its `fused(spec)` says so: attention as one kernel)."""
  def rule(op, rw):
    fused = getattr(op, 'fused', None)
    return None if spec is not None and callable(fused) and fused(spec) else op.decompose(rw)
  return PatternMatcher([(name, rule) for name, cls in REGISTRY.items() if callable(getattr(cls, 'decompose', None))])


class TensorDecompose(Pass):
  name = 'tensor-decompose'
  summary = 'rewrite composite tensor ops (matmul, conv, ops with a decompose method) into reshape/expand/mul/reduce'
  reads = leaves = 'tensor'
  # (the device's spec, DEVICE_OPTIONS, among them: what the decompositions choose for a device)
  options = {**DEVICE_OPTIONS,
             'pack': (bool, False, "copy a big matmul's right operand into column panels first (for CPUs: sequential reads)")}
  def run(self, m):
    spec, pack = DeviceSpec.from_options(self.opts), self.pack
    if spec.target.tensor_cores is not None:
      apply_patterns(m, PatternMatcher([('tensor.cast', lambda op, rw: pad_rows(op, rw, spec))]), stats=self.stats)
    copies: dict = {}
    mm = PatternMatcher([('tensor.matmul', lambda op, rw: decompose_matmul(op, rw, pack, spec, copies)),
                         ('tensor.conv', lambda op, rw: decompose_conv(op, rw, spec, pack))])
    apply_patterns(m, mm + declared_patterns(spec), stats=self.stats)
    if spec.gpu and spec.processors:  # (one sweep: the partial sums are not split again)
      users: dict = {}  # (one sweep over the function's own reduces: the uses of their results as they are now)
      for fn in m.ops:
        for o in (fn.body.ops if fn.body is not None else ()):
          for x in o.operands: users.setdefault(x, []).append(o)
      apply_patterns(m, PatternMatcher([('tensor.reduce', lambda op, rw: split_product_reduce(op, rw, spec) or split_column_reduce(op, rw, spec, users))]),
                     max_sweeps=1, stats=self.stats)
