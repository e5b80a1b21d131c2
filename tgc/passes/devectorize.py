"""devectorize: split vector values wider than a target has into chunks of `width` lanes (1: scalars), and with
`bytes`, of at most that many bytes (cuda: 16, a float4 or 8 halfs).

Every op on a wide value becomes one op per chunk; loads and stores become loads and stores at
idx + k*width (a vector gate, one bit a lane, split with them: a chunk of one lane takes a scalar gate);
accumulators and their phis split alike; `uop.vectorize` regroups its sources and `uop.gep` picks the lane from its
chunk. Nothing of the wide type is left but the operands of `uop.wmma` (a tensor-core fragment has the instruction's
shape: built by one `uop.vectorize` or load, passed whole) and a `uop.wgmma`'s accumulator (its define_acc, the vectorize that starts it and its phi stay whole: the instruction
runs asynchronously on those very registers).
"""
from __future__ import annotations
from tgc.ir.core import REGISTRY, Value
from tgc.ir.types import VecType
from tgc.passes.manager import Pass, PipelineError

U = lambda n: REGISTRY[f'uop.{n}']


def devectorize_function(fn, lanes_max: int, stats, bytes_max: int = 0) -> None:
  out: list = []
  chunks: dict[Value, list[Value]] = {}   # wide value -> its chunks, in lane order
  subst: dict[Value, Value] = {}          # a gep of a wide value -> the chunk lane it names
  wide = lambda t: isinstance(t, VecType) and t.count > W(t)
  chunk_t = lambda t: t.dtype if W(t) == 1 else VecType(W(t), t.dtype)
  def part(v, k):
    if v not in chunks and wide(v.type):  # a whole wide value (a uop.wmma's result): its chunks are geps of it
      width = W(v.type)
      lanes = [add('gep', [v], v.type.dtype, {'index': i}, None) for i in range(v.type.count)]
      chunks[v] = lanes if width == 1 else [add('vectorize', lanes[j:j + width], chunk_t(v.type), None, None) for j in range(0, len(lanes), width)]
    return chunks[v][k] if v in chunks else v
  def add(name, operands, t, attrs=None, loc=None):
    op = U(name)(operands, [t] if t is not None else [], attrs, loc)
    out.append(op)
    return op.results[0] if op.results else None
  wholes: dict[Value, Value] = {}
  def whole(v):
    if v not in chunks: return v
    if v not in wholes:
      width = W(v.type)
      lanes = chunks[v] if width == 1 else [add('gep', [c], v.type.dtype, {'index': i}, None) for c in chunks[v] for i in range(width)]
      wholes[v] = add('vectorize', lanes, v.type, None, None)
    return wholes[v]
  # a tensor-core fragment is one value of the instruction's shape (8 halfs for mma m16n8k16): never split
  fragments = {v for op in fn.body.ops if op.name == 'uop.wmma' for v in op.operands}
  accs = {v for op in fn.body.ops if op.name == 'uop.wgmma' for v in (op.c, op.results[0])}
  for op in fn.body.ops:  # (the phis and define_accs come after and before the wgmmas they carry values of)
    if op.name == 'uop.phi' and (op.value in accs or op.acc in accs): accs.update((op.acc, op.value, op.results[0]))
  for op in fn.body.ops:
    if op.name == 'uop.define_acc' and op.results[0] in accs: accs.add(op.operands[0])
  # the lanes a chunk keeps: lanes_max, and no more than bytes_max bytes of the widest element type the function's
  # vectors have (16: a float4, 8 halfs), one width for every vector so that a cast or a compare meets chunks of its own
  # width (a kernel of halfs alone keeps 8 lanes, one that casts them to float 4); the values kept whole (fragments, a
  # wgmma's accumulator, read lane by lane) do not count
  vts = [v.type for op in fn.body.ops for v in op.results if isinstance(v.type, VecType) and v not in accs and v not in fragments]
  width = min(lanes_max, max(1, bytes_max // max(t.dtype.itemsize for t in vts))) if bytes_max and vts else lanes_max
  W = lambda t: width
  for op in fn.body.ops:
    op.operands = [subst.get(v, v) for v in op.operands]
    res = op.results[0] if op.results else None
    n = op.name
    if n == 'uop.wmma' or res in accs:  # the instruction's shape, whole: a fragment that was split (an op on fragments) is regrouped
      op.operands = [whole(v) for v in op.operands]
      out.append(op); continue
    if (res in fragments and n in ('uop.vectorize', 'uop.load')) or n == 'uop.ldmatrix':  # (ldmatrix: a fragment by its nature)
      out.append(op); continue
    if n == 'uop.gep' and op.vec in chunks:
      i, width = op.attrs['index'], W(op.vec.type)
      src = chunks[op.vec][i // width]
      subst[res] = src if width == 1 else add('gep', [src], res.type, {'index': i % width}, op.loc)
      continue
    vt = res.type if res is not None and wide(res.type) else op.value.type if n == 'uop.store' and wide(op.value.type) else None
    if vt is None:
      out.append(op); continue
    width = W(vt)
    if vt.count % width: raise PipelineError(f"devectorize: {vt} does not split into chunks of {width}")
    stats['ops split'] += 1
    k_n = vt.count // width
    if n == 'uop.vectorize':
      chunks[res] = [op.srcs[k] if width == 1 else add('vectorize', op.srcs[k * width:(k + 1) * width], chunk_t(vt), None, op.loc) for k in range(k_n)]
    elif n in ('uop.load', 'uop.store'):
      vals = []
      for k in range(k_n):
        idx = op.idx if k == 0 else add('add', [op.idx, add('const', [], op.idx.type, {'value': k * width}, op.loc)], op.idx.type, None, op.loc)
        if n == 'uop.load':
          vals.append(add('load', [op.buf, idx] + ([part(op.gate, k), part(op.alt, k)] if op.gate is not None else []), chunk_t(vt), None, op.loc))
        else: add('store', [op.buf, idx, part(op.value, k)] + ([part(op.gate, k)] if op.gate is not None else []), None, None, op.loc)
      if n == 'uop.load': chunks[res] = vals
    else:  # elementwise ops, define_acc and phi: one per chunk; scalar operands are shared
      new = [type(op)([part(v, k) for v in op.operands], [chunk_t(res.type)], dict(op.attrs), op.loc) for k in range(k_n)]
      out += new
      chunks[res] = [o.results[0] for o in new]
  fn.body.ops = out


class Devectorize(Pass):
  name = 'devectorize'
  summary = 'split vectors wider than the target has (width=1: scalars)'
  reads = leaves = 'uop'
  options = {'width': (int, 1, 'the widest vector kept, in lanes'),
             'bytes': (int, 0, 'the widest vector kept, in bytes, whatever its lanes (0: lanes alone)')}
  def run(self, m):
    if self.width < 1: raise PipelineError(f"devectorize: width must be >= 1, got {self.width}")
    if self.bytes < 0: raise PipelineError(f"devectorize: bytes must be >= 0, got {self.bytes}")
    for fn in m.functions('uop.func'): devectorize_function(fn, self.width, self.stats, self.bytes)
