"""ONNX import: a ModelProto becomes a tensor-dialect func.func (text plus its weights), or a callable.

The graph is traced through tgc's lazy Tensor API (the ops in tgc.frontend.onnx_ops): graph inputs are
placeholder buffers of the specialised shapes, initializers are weight buffers, small constants are inline
`tensor.const`s. Values a shape depends on (Shape, Reshape's target, Slice's starts) are computed at import
time; a shape that depends on the inputs' values cannot be specialised and is an error."""
from __future__ import annotations
import math, os, re
import numpy as np
from tgc.tensor import Tensor, _Node, _toposort, _build_module, _dense_value
from tgc.ir import dtypes as D
from tgc.errors import TgcError
from tgc.frontend.onnx_ops import OPS, OnnxError, EMPTY

INLINE_MAX = 16  # constants with at most this many elements print inline; larger ones are weights
DOMAINS = ('', 'ai.onnx.preview', 'ai.onnx.preview.training', 'ai.onnx.ml')  # the op sets tgc takes ops from

def _onnx():
  try: import onnx
  except ImportError: raise OnnxError("ONNX import needs the onnx package: pip install 'tgc[onnx]'") from None
  return onnx

def _dtypes() -> dict:
  T = _onnx().TensorProto
  return {T.FLOAT: D.f32, T.DOUBLE: D.f64, T.FLOAT16: D.f16, T.BFLOAT16: D.bf16, T.BOOL: D.bool_, T.INT8: D.i8, T.INT16: D.i16,
          T.INT32: D.i32, T.INT64: D.i64, T.UINT8: D.u8, T.UINT16: D.u16, T.UINT32: D.u32, T.UINT64: D.u64,
          T.FLOAT8E4M3FN: D.f8e4m3, T.FLOAT8E5M2: D.f8e5m2, T.FLOAT8E4M3FNUZ: D.f8e4m3fnuz, T.FLOAT8E5M2FNUZ: D.f8e5m2fnuz,
          T.INT4: D.i4, T.UINT4: D.u4, T.INT2: D.i2, T.UINT2: D.u2}

def _dtype(elem: int):
  T, m = _onnx().TensorProto, _dtypes()
  if elem not in m: raise OnnxError(f"ONNX dtype {T.DataType.Name(elem) if elem in T.DataType.values() else elem} is not supported by tgc")
  return m[elem]

def _elem(dt) -> int: return next(k for k, v in _dtypes().items() if v is dt)

# ---- the numpy boundary: ONNX hands the emulated floats and the sub-byte ints over as ml_dtypes arrays (unpacked; an
# onnx dependency); tgc keeps the floats' bits and the ints' values, a byte each
_ML = {'bf16': 'bfloat16', 'f8e4m3': 'float8_e4m3fn', 'f8e5m2': 'float8_e5m2', 'f8e4m3fnuz': 'float8_e4m3fnuz', 'f8e5m2fnuz': 'float8_e5m2fnuz',
       'i4': 'int4', 'u4': 'uint4', 'i2': 'int2', 'u2': 'uint2'}

def _storage(arr: np.ndarray, dt) -> np.ndarray:
  """A graph input or constant -> what a tgc buffer of dt holds (an ml_dtypes array of dt: its bits or values, as they are)."""
  if arr.dtype.name == _ML.get(dt.name): return np.ascontiguousarray(arr).view(dt.np) if dt.fmt else arr.astype(dt.np)
  if dt.fmt: arr = arr.astype(np.float32)
  return D.to_storage(arr, dt)

def _tensor(arr: np.ndarray, dt, device) -> Tensor:
  if dt.name not in _ML: return Tensor(arr, dtype=dt, device=device)
  from tgc.runtime.buffer import Buffer
  return Tensor(_Node('BUFFER', (), None, tuple(arr.shape), dt, device, Buffer.from_numpy(device, _storage(arr, dt).reshape(-1), dt)))

def _result(bits: np.ndarray, dt) -> np.ndarray:
  """A result buffer's contents -> the numpy array ONNX expects (ml_dtypes for the emulated floats and sub-byte ints)."""
  if dt.name not in _ML: return bits
  import ml_dtypes
  m = getattr(ml_dtypes, _ML[dt.name])
  return bits.view(m) if dt.fmt else bits.astype(m)

def read_model(src):
  """A ModelProto from a path, bytes or a ModelProto; a malformed file is an OnnxError."""
  onnx = _onnx()
  if isinstance(src, onnx.ModelProto): return src
  try:
    if isinstance(src, (bytes, bytearray)): return onnx.load_from_string(bytes(src))
    if not os.path.exists(src): raise OnnxError(f"cannot open '{src}': no such file")
    m = onnx.load(src)
  except OnnxError: raise
  except Exception as e: raise OnnxError(f"'{src}' is not a valid ONNX model: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
  if not m.graph.node and not m.graph.output: raise OnnxError(f"'{src}' is not a valid ONNX model: it has no graph")
  return m

def opset_of(model) -> int:
  for o in model.opset_import:
    if o.domain in ('', 'ai.onnx'): return o.version
  return 1

def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
  """'NAME=1x3x224x224' -> ('NAME', (1, 3, 224, 224))."""
  name, sep, dims = spec.rpartition('=')
  try:
    if not sep or not name: raise ValueError
    return name, tuple(int(d) for d in dims.split('x')) if dims else ()
  except ValueError: raise OnnxError(f"--input-shape expects NAME=1x3x224x224, got '{spec}'") from None


def parse_value(spec: str) -> tuple[str, np.ndarray]:
  """'NAME=16000', 'NAME=1,2,3' or 'NAME=file.npy' -> (NAME, its values): a graph input fixed at import."""
  name, sep, text = spec.partition('=')
  if not sep or not name or not text: raise OnnxError(f"--input-value expects NAME=VALUE[,VALUE...] or NAME=FILE.npy, got '{spec}'")
  if text.endswith('.npy'):
    try: return name, np.load(text, allow_pickle=False)
    except (OSError, ValueError) as e: raise OnnxError(f"--input-value {name}: cannot read '{text}': {e}") from None
  try: return name, np.array([float(v) if any(c in v for c in '.eEnN') else int(v) for v in text.split(',')])
  except ValueError: raise OnnxError(f"--input-value {name}: '{text}' is not a comma-separated list of numbers") from None


def fixed_inputs(model, values: dict, shapes: dict) -> dict[str, np.ndarray]:
  """The values of the graph inputs fixed at import ({name: array}), cast to the input's dtype and shaped to its
  shape (one value fills it)."""
  elem = {i.name: i.type.tensor_type.elem_type for i in model.graph.input if i.type.HasField('tensor_type')}
  out = {}
  for name, v in values.items():
    if name not in elem: raise OnnxError(f"--input-value names '{name}', which is not a graph input (inputs: {', '.join(elem) or 'none'})")
    shp = shapes[name]
    if v.size == 1: v = np.full(shp, v.reshape(-1)[0])
    elif v.size != math.prod(shp): raise OnnxError(f"--input-value {name}: {v.size} values for its shape {list(shp)}")
    out[name] = v.reshape(shp).astype(_dtype(elem[name]).np)
  return out


class _Ctx:
  """What an op function sees: the node, the opset, and the import-time values of constant tensors."""
  def __init__(self, opset: int, device: str, placeholders: dict, fed: bool):
    # placeholders: node -> input name; fed: they hold the values of a call, which a shape may then depend on
    self.opset, self.device, self.placeholders, self.fed, self.node, self.used = opset, device, placeholders, fed, None, set()
  def dtype(self, elem: int): return _dtype(elem)
  def const(self, arr: np.ndarray) -> Tensor:
    arr = np.asarray(arr)
    ml = next((D.BY_NAME[k] for k, v in _ML.items() if v == arr.dtype.name), None)
    if ml is not None: return _tensor(arr, ml, self.device)
    if arr.dtype.kind not in 'biuf': raise OnnxError(f"node {self._where()}: constant of numpy dtype {arr.dtype} is not supported")
    from tgc.tensor import to_dtype
    dt = to_dtype(arr.dtype)
    flat = arr.reshape(-1).view(f'u{arr.dtype.itemsize}')  # (by bits: -0.0 is not 0.0, a NaN is itself)
    if arr.size and dt is not D.bf16 and (flat == flat[0]).all():
      # one value repeated (a Mul's scale of shape [1], ConstantOfShape): a splat, which the kernels inline as a
      # literal, where a dense constant is a buffer each kernel loads
      return Tensor._const(arr.reshape(-1)[0].item(), arr.shape, dt, self.device)
    if 0 < arr.size <= INLINE_MAX and dt is not D.bf16:
      return Tensor(_Node('const', (), {'value': _dense_value(arr, dt)}, tuple(arr.shape), dt, self.device))
    return Tensor(arr, device=self.device)
  def is_const(self, t: Tensor) -> bool: return not any(n in self.placeholders for n in _toposort([t.node]))
  def array(self, t: Tensor) -> np.ndarray:
    """The value of t at import time: from constants, or from the fed inputs (the compiled code is then specialised to them)."""
    if not self.is_const(t):
      if self.fed:
        self.used |= {self.placeholders[n] for n in _toposort([t.node]) if n in self.placeholders}
        return t.numpy().reshape(t.shape)
      raise OnnxError(f"node {self._where()}: a shape or an index depends on the values of the graph inputs; tgc specialises shapes at import time")
    if t.node.op == 'const':
      v = t.node.attrs['value']
      return np.array(v, t.dtype.np).reshape(t.shape) if isinstance(v, tuple) else np.full(t.shape, v, t.dtype.np)
    return t.numpy().reshape(t.shape)
  def ints(self, t: Tensor) -> list[int]: return [int(v) for v in self.array(t).reshape(-1)]
  def _where(self): return f"'{self.node.name or '?'}' ({self.node.op_type})"


def _attrs(node) -> dict:
  onnx = _onnx()
  out = {}
  for a in node.attribute:
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes): v = v.decode()
    elif isinstance(v, onnx.TensorProto): v = onnx.numpy_helper.to_array(v)
    elif isinstance(v, list) and v and isinstance(v[0], bytes): v = [x.decode() for x in v]
    out[a.name] = v
  return out


def input_shapes(model, shapes: dict | None) -> dict[str, tuple]:
  """The graph inputs (those not initializers) with their specialised shapes."""
  shapes = dict(shapes or {})
  inits = {i.name for i in model.graph.initializer}
  names = [i.name for i in model.graph.input if i.name not in inits]
  params = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim}
  for k, v in shapes.items():
    if k not in names and k not in params:
      raise OnnxError(f"--input-shape names '{k}', which is not a graph input (inputs: {', '.join(names) or 'none'})")
    dims = v if isinstance(v, (tuple, list)) else (v,)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
      raise OnnxError(f"--input-shape {k}: dimensions are whole numbers of 0 or more, got {tuple(dims)}")
  out = {}
  for i in model.graph.input:
    if i.name in inits: continue
    if not i.type.HasField('tensor_type'): continue  # a sequence or an optional: its values give its shapes (trace)
    if i.name in shapes: out[i.name] = tuple(shapes[i.name]); continue
    dims = []
    for k, d in enumerate(i.type.tensor_type.shape.dim):
      if d.HasField('dim_value') and d.dim_value >= 0: dims.append(d.dim_value)
      elif d.dim_param in shapes:  # a symbolic dimension by its name: N=2 (or N=(2,))
        v = shapes[d.dim_param]
        dims.append(int(v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v))
      else: raise OnnxError(f"graph input '{i.name}': dimension {k} is symbolic ('{d.dim_param or '?'}'); give its shape: --input-shape {i.name}=...")
    out[i.name] = tuple(dims)
  return out


def trace(model, shapes: dict | None = None, device: str | None = None, feeds: dict | None = None, values: dict | None = None):
  """Run the graph on placeholders (holding `feeds` where given): (inputs {key: Tensor}, outputs [(name, value)],
  names {leaf node: name}, the inputs whose values the result was specialised to). A key is an input's name, or
  (name, i) for element i of a sequence input; a value is a Tensor, a list of them (a sequence) or EMPTY."""
  from tgc.tensor import _canon_device
  dev = _canon_device(device)
  opset = opset_of(model)
  newest = _onnx().defs.onnx_opset_version()
  if opset > newest: raise OnnxError(f"the model's opset {opset} is newer than this onnx package knows ({newest}): its ops' meanings are not known")
  g = model.graph
  vals: dict[str, Tensor] = {}
  inputs, names = {}, {}
  def place(key, label, dt, value):
    t = inputs[key] = _tensor(value, dt, dev)
    names[t.node] = label
    return t
  elem = {i.name: i.type.tensor_type.elem_type for i in g.input}
  in_shapes = input_shapes(model, shapes)
  fixed = fixed_inputs(model, values or {}, in_shapes)  # (constants: the graph's shapes and branches may read them)
  for name, shp in in_shapes.items():
    dt = _dtype(elem[name])
    if name in fixed: vals[name] = _tensor(fixed[name], dt, dev); continue
    vals[name] = place(name, name, dt, np.zeros(shp, dt.np) if feeds is None else feeds[name])
  inits = {i.name for i in g.initializer}
  for i in g.input:  # sequences and optionals: placeholders for the values fed (a list, an array or None)
    if i.name in inits or i.type.HasField('tensor_type'): continue
    if feeds is None: raise OnnxError(f"graph input '{i.name}' is a {i.type.WhichOneof('value').replace('_type', '')}: tgc takes one only in the Python callable, from the values it is called with")
    v, tp = feeds.get(i.name), i.type.optional_type.elem_type if i.type.HasField('optional_type') else i.type
    if v is None: vals[i.name] = EMPTY; continue
    if tp.HasField('sequence_type'):
      dt = _dtype(tp.sequence_type.elem_type.tensor_type.elem_type)
      vals[i.name] = [place((i.name, k), f"{i.name}_{k}", dt, a) for k, a in enumerate(v)]
    else: vals[i.name] = place(i.name, i.name, _dtype(tp.tensor_type.elem_type), v)
  ctx = _Ctx(opset, dev, {t.node: k if isinstance(k, str) else k[0] for k, t in inputs.items()}, feeds is not None)
  ctx.names, ctx.domains = names, {('' if o.domain == 'ai.onnx' else o.domain): o.version for o in model.opset_import}
  _run_graph(ctx, g, vals)
  outputs = []
  for o in g.output:
    if o.name not in vals: raise OnnxError(f"graph output '{o.name}' is not computed by any node")
    t = vals[o.name]
    if o.type.tensor_type.elem_type: t = t.cast(_dtype(o.type.tensor_type.elem_type))
    outputs.append((o.name, t))
  return inputs, outputs, names, ctx.used


def _run_graph(ctx: _Ctx, g, vals: dict) -> None:
  """Trace graph g's initializers and nodes into vals (name -> Tensor); an If whose condition is known at import
  time traces its branch in place."""
  onnx = _onnx()
  for init in g.initializer:
    if init.name in vals and vals[init.name].node in ctx.placeholders: continue  # an input with a default
    _dtype(init.data_type)
    try: arr = onnx.numpy_helper.to_array(init)
    except Exception as e: raise OnnxError(f"initializer '{init.name}' ({list(init.dims)}) does not hold its data: {e}") from None
    t = ctx.const(arr)
    if t.node.op == 'BUFFER': ctx.names[t.node] = init.name
    vals[init.name] = t
  for node in g.node:
    ctx.node, ctx.vals = node, vals
    dom = '' if node.domain == 'ai.onnx' else node.domain
    opset = ctx.domains.get(dom, 1)
    if dom not in DOMAINS:
      raise OnnxError(f"node '{node.name}': op {node.domain}.{node.op_type} (opset {opset}) is not supported by tgc: only the domains {', '.join(repr(d) for d in DOMAINS)} are")
    fn = OPS.get(f"{dom}.{node.op_type}" if dom else node.op_type)
    fn = {'If': _if, 'Loop': _loop, 'Scan': _scan}.get(node.op_type, fn) if not dom else fn
    if fn is None and _function_body(ctx, node, None) is not None: fn = _expand
    if fn is None: raise OnnxError(f"node '{node.name}': op {node.domain + '.' if dom else ''}{node.op_type} (opset {opset}) is not supported by tgc")
    ins = []
    for n in node.input:
      if n and n not in vals: raise OnnxError(f"node '{node.name}' ({node.op_type}) uses '{n}', which no node or input defines")
      ins.append(vals[n] if n else None)
    while ins and ins[-1] is None: ins.pop()
    try: outs = fn(ctx, _attrs(node), *ins)
    except OnnxError: raise
    except TgcError as e: raise OnnxError(f"node '{node.name}' ({node.op_type}, opset {opset}): {e}") from None
    except (TypeError, KeyError, IndexError, ValueError, AttributeError, ZeroDivisionError) as e:
      # a missing attribute or input, an empty shape or axis tensor, a sequence where a tensor goes: the model's fault
      raise OnnxError(f"node '{node.name}' ({node.op_type}, opset {opset}): bad inputs or attributes: {type(e).__name__}: {e}") from None
    outs = outs if isinstance(outs, tuple) else (outs,)
    for n, t in zip(node.output, outs):
      if n and t is not None: vals[n] = t
      if n and isinstance(t, Tensor) and t.node.realized and t.node not in ctx.names: ctx.names[t.node] = n  # a Constant's weight: its output's name


def _if(ctx: _Ctx, attrs: dict, cond):
  return tuple(_body(ctx, attrs['then_branch' if bool(ctx.array(cond).reshape(-1)[0]) else 'else_branch'], []))


LOOP_MAX = 4096  # iterations a Loop may unroll to

def _body(ctx: _Ctx, g, ins: list) -> list:
  """Subgraph g traced on the values ins bound to its inputs (in order); it sees the enclosing graph's values too."""
  sub = dict(ctx.vals)
  sub.update({i.name: t for i, t in zip(g.input, ins) if i.name})
  node, outer = ctx.node, ctx.vals
  _run_graph(ctx, g, sub)
  ctx.node, ctx.vals = node, outer
  return [sub[o.name] for o in g.output]


def _loop(ctx: _Ctx, attrs: dict, m=None, cond=None, *carried):
  """A Loop unrolled at import time: its trip count and every iteration's condition must be known then."""
  from tgc.tensor import Tensor
  body = attrs['body']
  n = int(ctx.array(m).reshape(-1)[0]) if m is not None else None
  go = bool(ctx.array(cond).reshape(-1)[0]) if cond is not None else True
  carried, scans, it = list(carried), [], 0
  while go and (n is None or it < n):
    if it == LOOP_MAX: raise OnnxError(f"node {ctx._where()}: Loop runs past {LOOP_MAX} iterations; tgc unrolls loops at import")
    outs = _body(ctx, body, [ctx.const(np.array(it, np.int64)), ctx.const(np.array(go))] + carried)
    go = bool(ctx.array(outs[0]).reshape(-1)[0])
    carried, it = outs[1:1 + len(carried)], it + 1
    scans.append(outs[1 + len(carried):])
  k = len(body.output) - 1 - len(carried)
  if k and not scans: raise OnnxError(f"node {ctx._where()}: a Loop with scan outputs that runs no iteration is not supported")
  return tuple(carried) + tuple(Tensor.stack(*[s[j] for s in scans]) for j in range(k))


def _scan(ctx: _Ctx, attrs: dict, *ins):
  """A Scan unrolled at import time over its scan inputs' static length (opset 8's batch axis: one scan per batch row)."""
  from tgc.tensor import Tensor
  body, nin = attrs['body'], attrs['num_scan_inputs']
  if ctx.opset < 9:
    lens, ins = ins[0], ins[1:]
    nst = len(ins) - nin
    rows = [_scan_rows(ctx, body, [t[b] for t in ins[:nst]], [t[b] for t in ins[nst:]], [0] * nin, [0] * nin,
                       [0] * (len(body.output) - nst), [0] * (len(body.output) - nst)) for b in range(ins[0].shape[0])]
    if lens is not None and any(v != ins[nst].shape[1] for v in ctx.ints(lens)):
      raise OnnxError(f"node {ctx._where()}: Scan sequence_lens shorter than the scan inputs are not supported")
    return tuple(Tensor.stack(*[r[j] for r in rows]) for j in range(len(body.output)))
  nst, nout = len(ins) - nin, len(body.output) - (len(ins) - nin)
  return tuple(_scan_rows(ctx, body, list(ins[:nst]), list(ins[nst:]), attrs.get('scan_input_axes', [0] * nin),
                          attrs.get('scan_input_directions', [0] * nin), attrs.get('scan_output_axes', [0] * nout), attrs.get('scan_output_directions', [0] * nout)))


def _scan_rows(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs):
  from tgc.tensor import Tensor
  in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, xs)]
  steps = xs[0].shape[in_axes[0]]
  outs = []
  for t in range(steps):
    sl = [x[(slice(None),) * a + (steps - 1 - t if d else t,)] for x, a, d in zip(xs, in_axes, in_dirs)]
    res = _body(ctx, body, states + sl)
    states = res[:len(states)]; outs.append(res[len(states):])
  if not steps: raise OnnxError(f"node {ctx._where()}: a Scan over an empty sequence is not supported")
  ys = []
  for j, (a, d) in enumerate(zip(out_axes, out_dirs)):
    el = [o[j] for o in (outs[::-1] if d else outs)]
    ys.append(Tensor.stack(*el, dim=a + el[0].ndim + 1 if a < 0 else a))
  return states + ys


def _function_body(ctx: _Ctx, node, ins):
  """The FunctionProto that ONNX defines node's op by, if any (what the node tests' _expanded variants inline)."""
  onnx = _onnx()
  try: schema = onnx.defs.get_schema(node.op_type, ctx.domains.get(node.domain, ctx.opset), node.domain)
  except Exception: return None
  if schema.has_function: return schema.function_body
  if not schema.has_context_dependent_function: return None
  if ins is None: return True
  types = [onnx.helper.make_tensor_type_proto(_elem(t.dtype), t.shape).SerializeToString()
           if t is not None else onnx.TypeProto().SerializeToString() for t in ins]
  try: return onnx.FunctionProto.FromString(schema.get_context_dependent_function(node.SerializeToString(), types))
  except Exception: return None


def _expand(ctx: _Ctx, attrs: dict, *ins):
  """An op tgc has no function for, traced through the function body ONNX defines it by."""
  onnx = _onnx()
  node = ctx.node
  fp = _function_body(ctx, node, ins)
  if fp is None or fp is True: raise OnnxError(f"node '{node.name}': op {node.op_type} (opset {ctx.opset}) is not supported by tgc")
  given = {a.name: a for a in node.attribute}
  schema = onnx.defs.get_schema(node.op_type, ctx.domains.get(node.domain, ctx.opset), node.domain)
  defaults = {k: a.default_value for k, a in schema.attributes.items() if a.default_value.type}
  defaults.update({a.name: a for a in fp.attribute_proto})
  body = onnx.GraphProto()
  for n in fp.node:  # the attributes that refer to the caller's resolved
    m = body.node.add(); m.CopyFrom(n); del m.attribute[:]
    for a in n.attribute:
      if a.ref_attr_name:
        src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
        if src is None: continue
        b = m.attribute.add(); b.CopyFrom(src); b.name = a.name
      else: m.attribute.add().CopyFrom(a)
  sub = {k: v for k, v in zip(fp.input, ins) if v is not None}
  _run_graph(ctx, body, sub)
  ctx.node = node
  return tuple(sub.get(o) for o in fp.output)  # (an optional output the body leaves out: None)


def _ident(name: str, used: set) -> str:
  s = re.sub(r'[^A-Za-z0-9_]', '_', name) or 'v'
  if not (s[0].isalpha() or s[0] == '_'): s = 'v' + s
  base, k = s, 1
  while s in used: s = f"{base}_{k}"; k += 1
  used.add(s)
  return s


def _flat(outputs):
  """The output Tensors in order (a sequence's elements in turn; an empty optional none), and each output's slice of them."""
  flat, where = [], []
  for _, v in outputs:
    ts = [] if v is EMPTY else v if isinstance(v, list) else [v]
    where.append((len(flat), len(flat) + len(ts), isinstance(v, list), v is EMPTY)); flat += ts
  return flat, where

def _roots(outputs, bits: bool = False):
  # a graph output that is a buffer itself (an Identity of an input or a weight) is copied, so that every result is computed
  ts = [t.contiguous() if t.node.realized else t for t in _flat(outputs)[0]]
  # bits: an emulated float that is a bitcast of its bits (Cast saturate=0's E5M2 infinities) is returned as those bits,
  # which a kernel's store of the float would round again, saturating
  raw = lambda t: t.node.op == 'bitcast' and t.dtype.fmt and t.node.srcs[0].dtype.is_int and not t.node.srcs[0].realized
  return [Tensor(t.node.srcs[0]) if bits and raw(t) else t for t in ts]


def build(model, shapes: dict | None = None, device: str | None = None, name: str = 'main', feeds: dict | None = None,
          values: dict | None = None, bits: bool = False):
  """(module, leaves, inputs, weights, specialised, where): the func.func whose arguments are the graph inputs (less
  those `values` fixes), then the weights; weights maps argument name -> numpy array (what the `.npz` beside the `.tgc`
  holds); where: each graph output's slice of the results. bits: an emulated float result may be its bits (_roots)."""
  inputs, outputs, names, by_value = trace(model, shapes, device, feeds, values)
  if not _flat(outputs)[0]: raise OnnxError("the graph computes no tensor (its outputs are empty sequences or optionals)")
  m, leaves = _build_module([t.node for t in _roots(outputs, bits)], name)
  fn = m.functions('func.func')[0]
  used, weights = set(), {}
  # the graph inputs first, in the graph's order, then the weights: a user passes the first ones
  innodes = [t.node for t in inputs.values()]
  order = sorted(range(len(leaves)), key=lambda i: innodes.index(leaves[i]) if leaves[i] in innodes else len(innodes) + i)
  fn.body.args, leaves = [fn.body.args[i] for i in order], [leaves[i] for i in order]
  for j, a in enumerate(fn.body.args): a.index = j
  for a, leaf in zip(fn.body.args, leaves):
    a.hint = _ident(names.get(leaf, 'cst'), used)
    if leaf not in innodes: weights[a.hint] = leaf.buf.numpy().reshape(leaf.shape)
  m.verify()
  return m, leaves, inputs, weights, by_value, _flat(outputs)


def import_text(model, shapes: dict | None = None, values: dict | None = None) -> tuple[str, dict]:
  """(the module's text, its weights by argument name); `values` fixes graph inputs ({name: array}) to constants.
  The function's `weights` attribute names the arguments that are weights: tgc-run binds them from the .npz beside
  the text, and a weight it cannot bind is an error."""
  m, _, _, weights, _, _ = build(read_model(model), shapes, values=values)
  if weights: m.functions('func.func')[0].attrs['weights'] = tuple(weights)
  return m.print(), weights


class OnnxModel:
  """A callable ONNX model: model(*arrays) or model(name=array) -> list of numpy arrays, one per graph output.
  Compiled once per input shapes (the first call's shapes where the model has symbolic dimensions)."""
  def __init__(self, src, shapes: dict | None = None, device: str | None = None):
    self.model, self.shapes, self.device = read_model(src), dict(shapes or {}), device
    inits = {i.name for i in self.model.graph.initializer}
    self.input_names = [i.name for i in self.model.graph.input if i.name not in inits]
    self.output_names = [o.name for o in self.model.graph.output]
    self._compiled, self._by_value = {}, set()

  def compile(self, feeds: dict):
    """The compiled function for these inputs' shapes (and the values of those a shape depends on)."""
    shapes = {k: v.shape for k, v in feeds.items() if isinstance(v, np.ndarray)}
    form = lambda v: v.shape if isinstance(v, np.ndarray) else v if v is None else tuple(a.shape for a in v)
    raw = lambda v: v.tobytes() if isinstance(v, np.ndarray) else b'' if v is None else b'|'.join(a.tobytes() for a in v)
    key = (tuple(sorted((k, form(v)) for k, v in feeds.items())), tuple((k, raw(feeds[k])) for k in sorted(self._by_value)))
    if key not in self._compiled:
      from tgc.compiler import compile_module
      m, leaves, inputs, _, used, (flat, where) = build(self.model, {**self.shapes, **shapes}, self.device, feeds=feeds, bits=True)
      if used - self._by_value:
        self._by_value |= used
        return self.compile(feeds)
      pos = {t.node: k for k, t in inputs.items()}
      which, bufs = [pos.get(l) for l in leaves], [l.buf for l in leaves]
      # the weights are these buffers for every call: what is computed from them alone (a weight transposed or
      # permuted for its kernel) is computed here, once
      fn = compile_module(m, self.device).specialize({i: b for i, (k, b) in enumerate(zip(which, bufs)) if k is None})
      self._compiled[key] = (fn, which, bufs, {k: t.dtype for k, t in inputs.items()}, where, [t.dtype for t in flat])
    return self._compiled[key]

  def __call__(self, *arrays, **named):
    from tgc.runtime.buffer import Buffer
    feeds = dict(zip(self.input_names, arrays)); feeds.update(named)
    missing = [n for n in self.input_names if n not in feeds]
    if missing: raise OnnxError(f"missing inputs: {', '.join(missing)}")
    # (ascontiguousarray would make a 0-d input 1-d); a list is a sequence, None an empty optional
    arr = lambda v: np.asarray(v, order='C')
    feeds = {k: None if v is None else [arr(a) for a in v] if isinstance(v, (list, tuple)) else arr(v) for k, v in feeds.items()}
    fn, which, bufs, dts, where, odts = self.compile(feeds)
    fed = lambda k: feeds[k] if isinstance(k, str) else feeds[k[0]][k[1]]
    def arg(k, b):
      v, dt = fed(k), dts[k]
      # an input in its storage dtype already goes in as it is: on a host device its own memory (kernels only read it)
      if v.dtype == dt.np and not dt.fmt and not dt.width: return Buffer.wrap(b.device, v.reshape(-1), dt)
      return Buffer.from_numpy(b.device, _storage(v, dt).reshape(-1), dt)
    # (no argument checks: the key fixes the inputs' shapes, and each input is its argument's dtype here)
    res = fn.run([b if k is None else arg(k, b) for k, b in zip(which, bufs)], check=False)
    # a host device's results are handed out as their own memory (fresh buffers each call; one returned twice is copied)
    outs = [_result(o.numpy() if any(o is p for p in res[:i]) else o.as_numpy(), dt).reshape(t.shape)
            for i, (o, t, dt) in enumerate(zip(res, fn.result_types, odts))]
    return [None if empty else outs[a:b] if seq else outs[a] for a, b, seq, empty in where]


def load(src, shapes: dict | None = None, device: str | None = None) -> OnnxModel:
  """tgc.onnx.load(path_or_proto, shapes={'input': (1, 3, 224, 224)}, device=None) -> a callable on numpy arrays."""
  return OnnxModel(src, shapes, device)


# ---------------------------------------------------------------- ONNX's backend interface

def _backend():
  _onnx()  # (the error that says how to install it)
  from onnx.backend.base import Backend, BackendRep, namedtupledict

  class TgcRep(BackendRep):
    def __init__(self, model: OnnxModel): self.model = model
    def run(self, inputs, **kwargs):
      if isinstance(inputs, dict): outs = self.model(**inputs)
      else: outs = self.model(*(inputs if isinstance(inputs, (list, tuple)) else [inputs]))
      return namedtupledict('Outputs', [_ident(n, set()) for n in self.model.output_names])(*outs)

  class TgcBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = 'CPU', **kwargs):
      super().prepare(model, device, **kwargs)
      return TgcRep(OnnxModel(model, device=_device(device)))
    @classmethod
    def run_model(cls, model, inputs, device: str = 'CPU', **kwargs): return cls.prepare(model, device).run(inputs)
    @classmethod
    def supports_device(cls, device: str) -> bool:
      if device == 'CPU': return True
      if device == 'CUDA':
        try:
          from tgc.runtime import Device
          return 'CUDA' in Device.available() if hasattr(Device, 'available') else False
        except Exception: return False
      return False
  return TgcBackend

def _device(onnx_device: str):
  """ONNX's 'CPU' is tgc's default device (DEVICE= picks another); 'CUDA' is CUDA."""
  return None if onnx_device == 'CPU' else onnx_device.split(':')[0]

_BACKEND = None
def backend():
  global _BACKEND
  if _BACKEND is None: _BACKEND = _backend()
  return _BACKEND

def prepare(model, device: str = 'CPU', **kw): return backend().prepare(model, device, **kw)
def run_model(model, inputs, device: str = 'CPU', **kw): return backend().run_model(model, inputs, device, **kw)
def supports_device(device: str) -> bool: return backend().supports_device(device)
