"""The lazy Tensor: tinygrad's API over the `tensor` dialect.

A Tensor holds a node of a lazy graph. A node is either a realized leaf (a numpy buffer in the storage
dtype of its DType; bfloat16 is stored as its uint16 bits) or an op of the tensor dialect (name without
the `tensor.` prefix, sources, attributes, shape, dtype). The API does what numpy does implicitly, in the
graph: broadcasting becomes `reshape` + `expand`, dtype promotion becomes `cast`, scalars become splat
`const`s of the broadcast shape. `realize()` turns the graph reachable from a tensor into one
`func.func` (its arguments are the realized leaves), compiles it once per (graph structure, device) and runs
it on the leaves' device Buffers; the nodes computed become leaves holding the result Buffers.

Choices worth knowing:
- `rand/randn/uniform/randint` draw from numpy's PCG64 Generator (seeded with `seed=`, else with the
  generator `Tensor.manual_seed` set) on the host and upload the values as a leaf.
- `arange` is a dense `tensor.const` (its values depend only on its arguments); `eye` compares two aranges.
- `Tensor.jit` replays what a function realized and assigned, per input signature (shapes, dtypes, devices);
  tensors the function captures are baked in as they were on the first call, except those it `assign`s
  (weights, optimizer state), which are read and updated (tgc/autograd.py's Capture).
- Autograd (`backward`, `gradient`) is the autodiff pass on the graph's func.func (tgc/autograd.py).
"""
from __future__ import annotations
import functools, math, itertools, struct
from threading import get_ident
from typing import Any, Callable
import numpy as np
from tgc.errors import TgcError, ShapeError, DTypeError, DTypeNameError, AxisError, IndexingError, SliceStepError, ArgumentError, UnsupportedError, OutOfMemory
from tgc.tensor_api import TensorAPI
from tgc.ir import dtypes as _D
from tgc.ir.dtypes import DType
from tgc.ir.types import TensorType
from tgc.runtime import Buffer, DEVICES, Device as _Device, device_class_path
from tgc.target import get_float32_matmul_precision as _f32_precision
from tgc import autograd as _autograd
from tgc.shape.pool import pool as _pool_view, pool_shape as _pool_shape

__all__ = ['Tensor', 'dtypes', 'DType', 'least_upper_dtype']


class DeviceError(TgcError, ValueError):
  """An unknown device, or tensors on different devices in one op."""



# ---------------------------------------------------------------- dtypes

class _DTypes:
  """`tgc.dtypes`: the DType objects of tgc.ir.dtypes under tinygrad's names."""
  def __init__(self):
    for n in ('bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float16', 'bfloat16',
              'fp8e4m3', 'fp8e5m2', 'fp8e4m3fnuz', 'fp8e5m2fnuz', 'float32', 'float64', 'half', 'float', 'double', 'int', 'long', 'uint', 'char', 'uchar', 'short', 'ushort', 'ulong'):
      setattr(self, n, _D.BY_API[n])
    self.default_float, self.default_int = _D.f32, _D.i32
    self.all = tuple(_D.BY_API[n] for n in ('bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64',
                                             'float16', 'bfloat16', 'float32', 'float64'))
  @staticmethod
  def is_float(dt: DType) -> bool: return dt.is_float
  @staticmethod
  def is_int(dt: DType) -> bool: return dt.is_int
  @staticmethod
  def is_unsigned(dt: DType) -> bool: return dt.kind == 'u'
  @staticmethod
  def from_np(x) -> DType: return to_dtype(np.dtype(x))
  def __repr__(self): return 'tgc.dtypes'

dtypes = _DTypes()

_PRIORITY = {d: i for i, d in enumerate((_D.bool_, _D.i8, _D.u8, _D.i16, _D.u16, _D.i32, _D.u32, _D.i64, _D.u64,
                                         _D.f8e4m3fnuz, _D.f8e5m2fnuz, _D.f8e4m3, _D.f8e5m2, _D.f16, _D.bf16, _D.f32, _D.f64))}
# the f8 types sit below f16 and bf16; the ints still meet the floats at f16/bf16 (tinygrad's lattice sends them
# through fp8, which makes int64 + uint64 fp8e4m3)
_LATTICE = {_D.bool_: (_D.i8, _D.u8), _D.i8: (_D.i16,), _D.i16: (_D.i32,), _D.i32: (_D.i64,), _D.i64: (_D.f16, _D.bf16),
            _D.u8: (_D.i16, _D.u16), _D.u16: (_D.i32, _D.u32), _D.u32: (_D.i64, _D.u64), _D.u64: (_D.f16, _D.bf16),
            **{d: (_D.f16, _D.bf16) for d in (_D.f8e4m3, _D.f8e5m2, _D.f8e4m3fnuz, _D.f8e5m2fnuz)},
            _D.f16: (_D.f32,), _D.bf16: (_D.f32,), _D.f32: (_D.f64,), _D.f64: ()}
_PARENTS: dict[DType, frozenset] = {}

def _parents(d: DType) -> frozenset:
  p = _PARENTS.get(d)
  if p is None:
    p = _PARENTS[d] = frozenset({d}).union(*[_parents(x) for x in _LATTICE[d]])
  return p

def least_upper_dtype(*ds: DType) -> DType:
  """tinygrad's (JAX's) promotion lattice: int with float takes the float; int8 + uint8 is int16."""
  if len(ds) == 2 and ds[0] is ds[1]: return ds[0]  # the common case, on every binary op
  return min(frozenset.intersection(*[_parents(d) for d in ds]), key=_PRIORITY.__getitem__)

def _upper_float(dt: DType) -> DType: return dt if dt.is_float else _D.f32

def _sum_acc(dt: DType) -> DType:
  if dt.kind == 'u': return least_upper_dtype(dt, _D.u32)
  if dt.is_int or dt.is_bool: return least_upper_dtype(dt, _D.i32)
  return least_upper_dtype(dt, _D.f32)

def to_dtype(x) -> DType:
  """A DType, its name ('float32', 'f32', 'half'), a numpy dtype, or float/int/bool."""
  if isinstance(x, DType): return x
  if x is float: return _D.f32
  if x is int: return _D.i32
  if x is bool: return _D.bool_
  if isinstance(x, str):
    if x in _D.BY_API: return _D.BY_API[x]
    if x in _D.BY_NAME: return _D.BY_NAME[x]
    raise DTypeNameError(f"unknown dtype '{x}'")
  try: return _D.from_numpy(np.dtype(x))
  except (TypeError, KeyError) as e: raise DTypeError(f"unsupported dtype {x!r}") from e


# ---------------------------------------------------------------- devices

_CANON: dict[str, str] = {}  # a device name as given -> its canonical name (known kinds only: every creation asks)

def _canon_device(device):
  """A device's canonical name (`cuda:0` -> `CUDA`), or for a tuple of names (a sharded tensor's) the tuple of
  theirs; a DeviceError for an unknown kind, a bad index, or a tuple that repeats a device or mixes kinds."""
  if device is None: device = _Device.DEFAULT  # (read each time: assignable, and $DEVICE)
  if type(device) is str and (d := _CANON.get(device)) is not None: return d
  if isinstance(device, (tuple, list)):
    devs = tuple(_canon_device(d) for d in device)
    if not devs: raise DeviceError("a tuple of devices must name at least one device")
    if len(set(devs)) != len(devs): raise DeviceError(f"devices {devs} repeat a device")
    if len({device_class_path(d) for d in devs}) != 1: raise DeviceError(f"devices {devs} are of different kinds")
    return devs
  if not isinstance(device, str): raise DeviceError(f"device must be a string, got {device!r}")
  try: d = _Device.canonicalize(device)
  except TgcError as e: raise DeviceError(str(e)) from None
  if device_class_path(d) is None:
    raise DeviceError(f"unknown device '{device}' (known: {', '.join(sorted(DEVICES))})")
  if len(_CANON) < 1024: _CANON[device] = d
  return d


# ---------------------------------------------------------------- the graph

class _Node:
  """One value of the lazy graph: op 'BUFFER' (a realized leaf with `buf`) or a tensor-dialect op."""
  __slots__ = ('op', 'srcs', 'attrs', 'shape', 'dtype', 'device', 'buf', 'entry', '__weakref__')
  def __init__(self, op: str, srcs: tuple, attrs, shape: tuple, dtype: DType, device: str, buf=None):
    self.op, self.srcs, self.attrs, self.shape, self.dtype, self.device, self.buf = op, srcs, attrs, shape, dtype, device, buf
    self.entry = None  # its part of _graph_key (_entry), made once (a node does not change until it is realized)
    if _RECORD is not None and _RECORD[0] == get_ident(): _RECORD[1].append(self)
  @property
  def realized(self) -> bool: return self.op == 'BUFFER'


_RECORD: tuple | None = None  # (thread id, list): while a graph template records, the _Nodes that thread makes

def _graph_template(fn):
  """For a method that only builds graph nodes from its tensor arguments (no realize, no host data, no random draws)
  and whose graph depends only on their shapes, dtypes and devices and on its other arguments' values: the nodes
  its first call per such signature makes are recorded, and later calls make the same nodes again directly, their
  cache-key entries made, without the method's Python (a conv2d's 24 nodes cost 70 us through the API). A call
  whose nodes do not come from its arguments alone (a leaf made inside, a node from elsewhere) records nothing."""
  cache: dict = {}
  @functools.wraps(fn)
  def wrapped(*args, **kw):
    global _RECORD
    ins = [*args, *kw.values()] if kw else args
    try:
      # the signature: a tensor's shape, dtype and device (and which argument it first was: x.f(x) is not x.f(y)),
      # another argument's type and value (typed: 1 and True, 0.0 and -0.0 make different graphs); the keywords' names
      key, first = [tuple(kw)] if kw else [], {}
      for i, a in enumerate(ins):
        if isinstance(a, Tensor): n = a.node; key.append((n.shape, n.dtype, n.device, DEVICES.get(n.device), first.setdefault(id(n), i)))
        elif isinstance(a, np.generic): key.append((type(a), a.tobytes()))
        else: key.append((type(a), _freeze(a)))
      tpl = cache.get(tuple(key))
    except TypeError: return fn(*args, **kw)  # (an argument that does not hash)
    if tpl is not None: return tpl(ins)
    outer = _RECORD
    if outer is not None and outer[0] != get_ident(): return fn(*args, **kw)  # (another thread records)
    rec = outer if outer is not None else (get_ident(), [])
    start = len(rec[1])
    _RECORD = rec
    try: out = fn(*args, **kw)
    finally: _RECORD = outer
    tpl = _template(rec[1][start:], ins, out)
    if tpl is not None: cache[tuple(key)] = tpl  # (else the next such call records again: a key holding a list's values stays out)
    return out
  return wrapped

def _template(made: list, ins, out):
  """The nodes `made` as a replay function of the arguments (_replayer); None where they do not come from the
  arguments alone. Each node: op, sources (numbered as made, >= 0, or as an argument, ~i), attrs, shape, dtype, device,
  key entry, whether detached; then the outputs, numbered alike."""
  pos = {id(n): j for j, n in enumerate(made)}
  for i, a in enumerate(ins):
    if isinstance(a, Tensor): pos.setdefault(id(a.node), ~i)
  steps = []
  for n in made:
    if n.op == 'BUFFER' or any(id(s_) not in pos for s_ in n.srcs): return None
    steps.append((n.op, tuple([pos[id(s_)] for s_ in n.srcs]), n.attrs, n.shape, n.dtype, n.device, _entry(n), n in _autograd._DETACHED))
  outs = out if isinstance(out, tuple) else (out,)
  if not all(isinstance(o, Tensor) and id(o.node) in pos for o in outs): return None
  return _replayer(steps, tuple([pos[id(o.node)] for o in outs]), isinstance(out, tuple))

def _replayer(steps, outs, many):
  """One Python function that makes the steps' nodes (their key entries set, the detached ones marked) from its
  arguments and returns the outputs, written out step by step: a loop over the steps, unpacking each, took as long
  again as making the nodes."""
  env = {'N': _Node, 'DETACHED': _autograd._DETACHED, 'new': _tensor_new, 'Tensor': Tensor}
  lines = ['def replay(ins):']
  for i, (op, srcs, attrs, shape, dtype, dev, entry, detached) in enumerate(steps):
    env.update({f'o{i}': op, f'a{i}': attrs, f's{i}': shape, f'd{i}': dtype, f'v{i}': dev})
    src = ''.join(f'n{j}, ' if j >= 0 else f'ins[{~j}].node, ' for j in srcs)
    lines.append(f'  n{i} = N(o{i}, ({src}), a{i}, s{i}, d{i}, v{i}); n{i}.entry = {entry}')
    if detached: lines.append(f'  DETACHED.add(n{i})')  # (a detach() inside the method: the replayed node passes no gradient either)
  res = []
  for k, j in enumerate(outs):  # (an output that is an argument is that Tensor itself)
    if j >= 0: lines.append(f'  t{k} = new(Tensor); t{k}.node = n{j}'); res.append(f't{k}')
    else: res.append(f'ins[{~j}]')
  lines.append(f'  return ({", ".join(res)},)' if many else f'  return {res[0]}')
  exec('\n'.join(lines), env)
  return env['replay']


def _toposort(roots) -> list[_Node]:
  order, seen = [], set()
  for r in roots:
    if r in seen: continue
    stack = [(r, False)]
    while stack:
      n, done = stack.pop()
      if done: order.append(n); continue
      if n in seen: continue
      seen.add(n)
      stack.append((n, True))
      for s in reversed(n.srcs):
        if s not in seen: stack.append((s, False))
  return order


def _build_module(roots: list[_Node], name: str = 'main'):
  """The func.func computing `roots` from the realized leaves it reaches: (module, leaves in argument order)."""
  from tgc.ir.core import Module, Block, Value, REGISTRY, load_dialects
  load_dialects()
  Func, Ret = REGISTRY['func.func'], REGISTRY['func.return']
  vals, args, leaves, ops = {}, [], [], []
  for n in _toposort(roots):
    t = TensorType(n.shape, n.dtype)
    if n.op == 'BUFFER':
      v = Value(t, hint=f"arg{len(args)}")
      args.append(v); leaves.append(n)
    else:
      op = REGISTRY['tensor.' + n.op]([vals[s] for s in n.srcs], [t], n.attrs)
      ops.append(op); v = op.results[0]
    vals[n] = v
  ret = Ret([vals[r] for r in roots], [])
  fn = Func([], [], {'sym_name': name, 'result_types': tuple(TensorType(r.shape, r.dtype) for r in roots)}, None, Block(args, ops + [ret]))
  return Module([fn]), leaves


_PLAIN = (int, str, bool, type(None))

def _freeze(x):
  """An attribute value as a hashable key that tells apart what the IR tells apart (-0.0 from 0.0, NaN payloads)."""
  t = type(x)
  if t is int or t is str: return x
  if t is float: return ('f', _pack_d(x))
  if t is dict: return tuple([(k, v if type(v) in _PLAIN else _freeze(v)) for k, v in x.items()])
  if t is tuple or t is list:  # (shapes and axes, the most common: plain ints as they are)
    for v in x:
      if type(v) is not int: return tuple([_freeze(v) for v in x])
    return tuple(x)
  if isinstance(x, float): return ('f', _pack_d(x))
  if isinstance(x, dict): return tuple([(k, _freeze(v)) for k, v in x.items()])
  if isinstance(x, (list, tuple)): return tuple([_freeze(v) for v in x])
  return x

_pack_d = struct.Struct('<d').pack

_ENTRIES: dict[tuple, int] = {}  # a node's (op, attributes, shape, dtype) -> its number: keys hash and compare numbers
_NUMBERS = itertools.count()  # (next() is one atomic step: two threads never get one number)

def _entry(n: _Node) -> int:
  a = n.attrs
  e = (n.op, None if a is None else _freeze(a), n.shape, n.dtype.name)
  i = _ENTRIES.get(e)
  return _ENTRIES.setdefault(e, next(_NUMBERS)) if i is None else i


def _graph_key(roots: list[_Node], numbered: dict | None = None):
  """The structure of the graph computing `roots` (everything its func.func's text holds, without printing it):
  the compile cache's key; and the realized leaves in argument order, as _build_module numbers them. One pass in
  _toposort's order (depth first, sources in order, each node after its sources), recursive: half the time of
  the loop with a stack below, which takes graphs deeper than Python's recursion limit. `numbered`: a dict that
  is given every node -> its number in that order (the key's sources refer to nodes by it)."""
  ids, entries, leaves = {} if numbered is None else numbered, [], []
  try:
    for r in roots:
      if r not in ids: _visit(r, ids, entries, leaves)
  except RecursionError:
    ids.clear()
    return _graph_key_deep(roots, ids)
  return (tuple(entries), tuple([ids[r] for r in roots])), leaves

def _visit(n, ids, entries, leaves):
  # (a module function, not a closure: a closure that calls itself is a reference cycle, which would keep the
  # graph's buffers until the garbage collector runs)
  srcs = n.srcs
  for s in srcs:
    if s not in ids: _visit(s, ids, entries, leaves)
  ids[n] = len(entries)
  if n.op == 'BUFFER': leaves.append(n); entries.append((n.shape, n.dtype.name)); return
  e = n.entry
  if e is None: e = n.entry = _entry(n)
  entries.append((e, tuple([ids[s] for s in srcs])))


def _graph_key_deep(roots: list[_Node], ids: dict | None = None):
  """_graph_key without recursion: a node is numbered once its sources are."""
  ids, entries, leaves = {} if ids is None else ids, [], []
  for r in roots:
    stack = [r]
    while stack:
      n = stack.pop()
      if n in ids: continue
      srcs = n.srcs
      if srcs:
        todo = [s for s in srcs if s not in ids]
        if todo:  # (its sources first, the first on top; it comes back after them)
          stack.append(n); todo.reverse(); stack += todo; continue
      ids[n] = len(entries)
      if n.op == 'BUFFER': leaves.append(n); entries.append((n.shape, n.dtype.name)); continue
      e = n.entry
      if e is None: e = n.entry = _entry(n)
      entries.append((e, tuple([ids[s] for s in srcs])))
  return (tuple(entries), tuple([ids[r] for r in roots])), leaves


_COMPILED: dict[tuple, Any] = {}  # (graph key, device, float32 matmul precision) -> CompiledFunction
_TWINS: dict[tuple, Any] = {}  # (graph key, _twin(device)) -> the first device's CompiledFunction of that graph

def forget_compiled() -> None:
  """Forget the compiled functions of the graphs realized so far: the next realize of each compiles it again."""
  _COMPILED.clear(); _TWINS.clear()

def _twin(dev: str) -> tuple:
  """What a compiled function depends on besides its graph: the device's class, target and architecture."""
  from tgc.runtime import get_device
  d = get_device(dev)
  return ('twin', type(d), d.target, getattr(d, 'arch', None), getattr(d, 'processor', None), getattr(d, 'local_memory', None), _f32_precision())

def _realize_nodes(nodes) -> None:
  if len(nodes) == 1: todo = [] if nodes[0].op == 'BUFFER' else nodes  # (one tensor: every eager call)
  else: todo = list(dict.fromkeys(n for n in nodes if n.op != 'BUFFER'))
  by_dev: dict[str, list[_Node]] = {}
  for n in todo:
    # nothing to compute: an empty result (its contents are unspecified) or no elements at all.
    # (An `empty` root also makes kernelize loop forever: tests/repro/kernelize_empty_result_hangs.tgc.)
    if (n.op == 'empty' or 0 in n.shape) and type(n.device) is not tuple:
      n.op, n.srcs, n.attrs, n.buf = 'BUFFER', (), None, Buffer.from_numpy(n.device, np.zeros(math.prod(n.shape), n.dtype.np), n.dtype)
    else: by_dev.setdefault(n.device, []).append(n)
  for dev, group in by_dev.items():
    if type(dev) is tuple:  # several devices: one graph per device and the collectives between them (tgc/multi.py)
      from tgc.multi import realize as realize_multi
      realize_multi(group); continue
    key, leaves = _graph_key(group)
    dk = (key, dev, _f32_precision())  # (the precision is part of the device's spec: TF32 or not, another program)
    fn = _COMPILED.get(dk)
    if fn is None:
      twin = _twin(dev)  # (devices of one kind and target share the lowering: CUDA:1 compiles CUDA:0's kernels)
      fn = _TWINS.get((key, twin))
      if fn is not None: fn = _COMPILED[dk] = fn.on_device(dev)
    if fn is None:
      from tgc.compiler import compile_module  # (here, not per call: the hit path skips the import machinery)
      m, args = _build_module(group)
      if args != leaves: raise TgcError("internal: _graph_key and _build_module number the leaves differently")
      fn = _COMPILED[dk] = _TWINS[key, twin] = compile_module(m, dev, verify=True)
    outs = fn.run([l.buf for l in leaves], check=False)  # (the key holds each leaf's shape and dtype, and the device)
    # after the launches (queued: on a GPU this overlaps them): the computed nodes become leaves of their results
    for n, o in zip(group, outs): n.op, n.srcs, n.attrs, n.buf, n.entry = 'BUFFER', (), None, o, None
    _autograd.record(('realize', fn, leaves, group))  # a jit's first call records what it computes


# ---------------------------------------------------------------- helpers

def _is_scalar(x) -> bool:
  return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)) and not isinstance(x, Tensor)

def _scalar_dtype(x) -> DType:
  if isinstance(x, (bool, np.bool_)): return _D.bool_
  if isinstance(x, (int, np.integer)): return _D.i32
  return _D.f32

def _const_value(v, dt: DType):
  """A Python scalar as the `value` of a tensor.const of dtype dt (ints wrap, floats round to dt)."""
  if dt.is_bool: return int(bool(v))
  if dt.is_int:
    if isinstance(v, (float, np.floating)):
      if not math.isfinite(v): return 0
      v = math.trunc(v)
    lo, hi = _D.min_max(dt)
    return (int(v) - lo) % (hi - lo + 1) + lo
  f = float(v)
  if dt is _D.f64 or not math.isfinite(f): return f
  if dt is _D.f32:  # (the C cast struct does rounds to nearest even as numpy's does; beyond float32's range it raises)
    try: return _unpack_f(_pack_f(f))[0]
    except OverflowError: pass
  key = (_pack_d(f), dt)  # (bytes: -0.0 is not 0.0)
  r = _ROUNDED.get(key)
  if r is None:
    if len(_ROUNDED) > 4096: _ROUNDED.clear()
    with np.errstate(over='ignore'): r = _ROUNDED[key] = float(_D.round_to(np.float64(f), dt))
  return r

_pack_f, _unpack_f = struct.Struct('<f').pack, struct.Struct('<f').unpack
_ROUNDED: dict = {}  # (a double's bytes, a narrow float dtype) -> the double rounded to it: numpy's rounding takes 5 us

def _dense_value(arr: np.ndarray, dt: DType):
  if dt.is_bool: conv = lambda x: int(bool(x))
  elif dt.is_int: conv = int
  else: conv = float
  def tup(x): return tuple(tup(y) for y in x) if isinstance(x, list) else conv(x)
  if dt.is_float: arr = _D.round_to(arr.astype(np.float64), dt)
  return tup(arr.tolist())

def _to_storage(arr: np.ndarray, dt: DType) -> np.ndarray:
  with np.errstate(all='ignore'):
    if dt.fmt: return np.ascontiguousarray(_D.encode(arr.astype(np.float32), dt.fmt))
    return np.asarray(arr, dtype=dt.np, order='C')  # (the device buffer made from it is the copy)

def _shape_arg(shape) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = shape[0]
  for s in shape:
    if type(s) is not int: break
  else: return tuple(shape)  # the common case, without the checks below
  out = []
  for s in shape:
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
      raise ShapeError(f"shape sizes must be integers, got {tuple(shape)}")
    out.append(int(s))
  return tuple(out)

def _new_shape(shape, what: str) -> tuple[int, ...]:
  """A new tensor's shape (creation functions): integers of 0 or more."""
  shape = _shape_arg(shape)
  if any(s < 0 for s in shape): raise ShapeError(f"{what}: negative size in shape {shape}")
  return shape

def broadcasts_to(shape, target) -> bool:
  """Whether a tensor of `shape` broadcasts to `target` (right-aligned, each size equal or 1, no more axes)."""
  return len(shape) <= len(target) and all(m in (1, n) for m, n in zip(shape[::-1], target[::-1]))

_BROADCASTS: dict[tuple, tuple] = {}  # (x's shape, y's) -> (their broadcast shape, x's with leading 1s or None, y's)

def _leading_ones(shape: tuple, rank: int) -> tuple | None:
  """shape with 1s in front up to `rank` axes (what a broadcast to that rank reshapes it to), or None where it has them."""
  return (1,) * (rank - len(shape)) + shape if len(shape) < rank else None

def _broadcast_shape(*shapes) -> tuple[int, ...]:
  if len(shapes) == 2 and len(shapes[0]) == len(shapes[1]):  # (a binary op's: size by size)
    r = []
    for x, y in zip(*shapes):
      if x == y or y == 1: r.append(x)
      elif x == 1: r.append(y)
      else: break
    else: return tuple(r)
  out = tuple(shapes[0]) if shapes else ()
  for sh in shapes[1:]:  # pairwise, right-aligned: equal sizes or a 1 on either side
    if sh == out: continue
    n = max(len(out), len(sh))
    r = []
    for x, y in zip((1,) * (n - len(out)) + out, (1,) * (n - len(sh)) + tuple(sh)):
      if x == y or y == 1: r.append(x)
      elif x == 1: r.append(y)
      else: raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
    out = tuple(r)
  return out

def _pairs(arg, shape, what):
  """pad/shrink arguments: a tuple of (a, b) (or None) per axis of `shape`."""
  if not isinstance(arg, (tuple, list)) or len(arg) != len(shape):
    raise ShapeError(f"{what} of shape {tuple(shape)} needs one (a, b) pair per axis ({len(shape)}), got {arg!r}")
  out = []
  for p in arg:
    if p is None: out.append(None); continue
    if type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int: out.append(p); continue
    if not isinstance(p, (tuple, list)) or len(p) != 2 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in p):
      raise ShapeError(f"{what} needs (a, b) integer pairs, got {arg!r}")
    out.append((int(p[0]), int(p[1])))
  return out

_LOG2_E = 1 / math.log(2)
_LN_2 = math.log(2)


# ---------------------------------------------------------------- Tensor

_tensor_new = object.__new__

class Tensor(TensorAPI):
  """A lazy tensor. `Tensor(data, dtype=None, device=None)` from a list, a scalar or a numpy array."""
  __slots__ = ('node', '_requires_grad', '_grad', '__weakref__')
  __array_ufunc__ = None  # numpy defers to the reflected operators: np.float32(2) * t is a Tensor
  _rng = np.random.default_rng()

  def __init__(self, data, dtype=None, device=None, requires_grad: bool | None = None):
    if requires_grad is not None: self.requires_grad = requires_grad
    if isinstance(data, _Node): self.node = data; return
    dt = to_dtype(dtype) if dtype is not None else None
    if isinstance(data, Tensor):
      t = data.cast(dt) if dt is not None else data
      self.node = t.to(device).node if device is not None else t.node
      return
    dev = _canon_device(device)
    if isinstance(data, (np.ndarray, np.generic)):
      arr = np.asarray(data)
      if arr.dtype.kind not in 'biuf': raise DTypeError(f"numpy dtype {arr.dtype} is not supported")
      src = to_dtype(arr.dtype)
      if dt is None: dt = src
    elif _is_scalar(data) or isinstance(data, (list, tuple)):
      try: arr = np.array(data)
      except ValueError as e: raise ShapeError(f"data is not rectangular: {e}") from None
      if arr.dtype.kind not in 'biuf':
        if arr.dtype.kind == 'O': raise ShapeError("data is not rectangular (or holds values that are not numbers)")
        raise DTypeError(f"data of numpy dtype {arr.dtype} is not supported")
      if dt is None: dt = _D.bool_ if arr.dtype.kind == 'b' else _D.i32 if arr.dtype.kind in 'iu' else _D.f32
    else: raise DTypeError(f"cannot make a Tensor from {type(data).__name__}")
    if type(dev) is tuple:  # a tuple of devices: the data replicated on each
      from tgc.multi import shard_buffer
      buf = shard_buffer(Buffer.from_numpy(dev[0], _to_storage(arr, dt).reshape(-1), dt), arr.shape, dt, dev, None)
    else: buf = Buffer.from_numpy(dev, _to_storage(arr, dt).reshape(-1), dt)
    self.node = _Node('BUFFER', (), None, tuple(arr.shape), dt, dev, buf)
    if dt.is_float: _autograd.track(self)  # (backward() may give it a .grad: tgc/autograd.py)

  # ---- properties
  @property
  def shape(self) -> tuple[int, ...]: return self.node.shape
  @property
  def dtype(self) -> DType: return self.node.dtype
  @property
  def device(self) -> str: return self.node.device
  @property
  def ndim(self) -> int: return len(self.node.shape)
  def numel(self) -> int: return math.prod(self.node.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.dtype.itemsize
  def is_floating_point(self) -> bool: return self.dtype.is_float
  def __len__(self):
    if not self.shape: raise ShapeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self):
    n = self.node
    return f"<Tensor {'realized' if n.realized else n.op} shape={n.shape} dtype={n.dtype!r} device={n.device!r}>"
  __hash__ = object.__hash__
  def __bool__(self):
    if self.numel() != 1: raise ShapeError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
    return bool(self.item())
  def __iter__(self):
    if not self.shape: raise ShapeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))

  # ---- building nodes
  def _new(self, op: str, srcs: tuple[Tensor, ...], shape, dtype: DType, attrs=None) -> Tensor:
    nodes = tuple([s.node for s in srcs])
    dev = nodes[0].device if nodes else self.node.device
    for n in nodes[1:]:
      if n.device != dev: raise DeviceError(f"tensors on different devices: {dev} and {n.device}")
    t = _tensor_new(Tensor)  # (what Tensor(node) does, without its argument dispatch: this is every op's path)
    t.node = _Node(op, nodes, attrs, shape if type(shape) is tuple else tuple(shape), dtype, dev)
    return t

  @staticmethod
  def _const(value, shape, dtype: DType, device: str) -> Tensor:
    t = _tensor_new(Tensor)
    t.node = _Node('const', (), {'value': _const_value(value, dtype)}, shape if type(shape) is tuple else tuple(shape), dtype, device)
    return t

  def _c(self, value, dtype: DType | None = None) -> Tensor:
    """A splat constant of this tensor's shape and device."""
    return Tensor._const(value, self.shape, dtype or self.dtype, self.device)

  def _unop(self, op: str) -> Tensor:
    n, t = self.node, _tensor_new(Tensor)
    t.node = _Node(op, (n,), None, n.shape, n.dtype, n.device)
    return t
  def _binop(self, op: str, y: Tensor) -> Tensor:
    n, m, t = self.node, y.node, _tensor_new(Tensor)
    if m.device != n.device: raise DeviceError(f"tensors on different devices: {n.device} and {m.device}")
    t.node = _Node(op, (n, m), None, n.shape, _D.bool_ if op.startswith('cmp') else n.dtype, n.device)
    return t
  def _float(self) -> Tensor: return self if self.dtype.is_float else self.cast(_D.f32)

  # ---- results
  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`, in the same function when on one device); returns self."""
    try: _realize_nodes([self.node, *[o.node for o in others]] if others else [self.node])
    except MemoryError as e:  # (numpy's, for a host buffer or constant: a device's allocator raises OutOfMemory itself)
      if isinstance(e, TgcError): raise
      raise OutOfMemory(f"{self.device}: out of host memory computing a tensor of shape {self.shape}: {e}") from None
    return self

  def numpy(self) -> np.ndarray:
    """A copy of the values (from the device, after the launches that compute them)."""
    self.realize()
    b = self.node.buf.numpy().reshape(self.shape)
    return _D.from_storage(b, self.dtype).reshape(self.shape)

  def tolist(self): return self.numpy().tolist()

  def item(self):
    if self.numel() != 1: raise ShapeError(f"item() needs a tensor of one element, got shape {self.shape}")
    return self.numpy().reshape(()).item()

  def to(self, device) -> Tensor:
    """A copy on another device (peer to peer where the devices allow); to a tuple of devices: replicated on each
    (tinygrad's `to(GPUS)`); a sharded tensor to one device: its shards joined there."""
    dev = _canon_device(device)
    if dev == self.device: return self
    if type(dev) is tuple: return self.shard(dev, None)
    self.realize()
    b = self.node.buf
    if type(self.device) is tuple:
      from tgc.multi import gather_buffer
      return Tensor(_Node('BUFFER', (), None, self.shape, self.dtype, dev, gather_buffer(b, dev)))
    return Tensor(_Node('BUFFER', (), None, self.shape, self.dtype, dev, b.copy_to(dev)))

  def to_(self, device) -> Tensor:
    """`to` in place: this tensor (a weight, its requires_grad kept) takes the copy's value."""
    self.node = self.to(device).node
    return self

  def shard(self, devices, axis: int | None = None) -> Tensor:
    """Split along `axis` over `devices` (a tuple of device names), one equal slice a device; axis None: the whole
    tensor on each (replicated). Elementwise ops then run shard by shard, a reduce over the sharded axis
    all-reduces (tgc/multi.py)."""
    from tgc.multi import shard_buffer
    devs = _canon_device(tuple(devices) if isinstance(devices, (tuple, list)) else (devices,))
    if axis is not None: axis = self._axis(axis)
    self.realize()
    src = self.node
    buf = shard_buffer(src.buf, self.shape, self.dtype, devs, axis)
    if buf is src.buf: return self
    t = Tensor(_Node('BUFFER', (), None, self.shape, self.dtype, devs, buf))
    _autograd.record(('shard', src, t.node, devs, axis))
    return t

  def shard_(self, devices, axis: int | None = None) -> Tensor:
    """`shard` in place."""
    self.node = self.shard(devices, axis).node
    return self

  @property
  def sharding(self) -> int | None:
    """The axis a sharded tensor is split along (None: replicated on its devices, or on one device)."""
    if type(self.device) is not tuple: return None
    self.realize()
    return self.node.buf.axis

  def to_ir(self, level: str = 'tensor', name: str = 'main') -> str:
    """The text of this tensor's graph as a func.func at a stage of its lowering for its device (what realize runs):
    'tensor', 'kernel' (kernelized), 'opt' (kernel-opt's actions chosen), 'uop', or 'source' (the device's source)."""
    from tgc.passes.pipelines import STAGES
    if level not in STAGES[:-1]: raise ArgumentError(f"unknown level '{level}' (expected {', '.join(STAGES[:-1])})")
    if type(self.device) is tuple:  # the per-device functions and their collectives
      if level != 'tensor': raise ArgumentError(f"a tensor on {self.device} prints at level 'tensor' (one function a device)")
      from tgc.multi import partition_ir
      return partition_ir([self.node], name)
    m, _ = _build_module([self.node], name)
    m.verify()
    if level == 'tensor': return m.print()
    from tgc.lowering import lower
    from tgc.compiler import device_spec
    out = lower(m, device_spec(self.device), level)
    return out if level == 'source' else m.print()

  # ---- creation
  @staticmethod
  def empty(*shape, dtype=None, device=None) -> Tensor:
    return Tensor(_Node('empty', (), None, _new_shape(shape, 'empty'), to_dtype(dtype or _D.f32), _canon_device(device)))

  @staticmethod
  def full(shape, fill_value, dtype=None, device=None) -> Tensor:
    shape = _new_shape((shape,) if isinstance(shape, (tuple, list)) else (shape,), 'full')
    if not _is_scalar(fill_value): raise DTypeError(f"fill_value must be a scalar, got {type(fill_value).__name__}")
    return Tensor._const(fill_value, shape, to_dtype(dtype) if dtype is not None else _scalar_dtype(fill_value), _canon_device(device))

  @staticmethod
  def zeros(*shape, dtype=None, device=None) -> Tensor:
    return Tensor.full(_shape_arg(shape), 0, dtype=dtype or _D.f32, device=device)

  @staticmethod
  def ones(*shape, dtype=None, device=None) -> Tensor:
    return Tensor.full(_shape_arg(shape), 1, dtype=dtype or _D.f32, device=device)

  def full_like(self, fill_value, dtype=None, device=None) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device)
  def zeros_like(self, dtype=None, device=None) -> Tensor: return self.full_like(0, dtype, device)
  def ones_like(self, dtype=None, device=None) -> Tensor: return self.full_like(1, dtype, device)

  @staticmethod
  def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    if stop is None: start, stop = 0, start
    for v in (start, stop, step):
      if not _is_scalar(v) or isinstance(v, (bool, np.bool_)): raise DTypeError(f"arange takes numbers, got {v!r}")
    if step == 0: raise ArgumentError("arange step must not be 0")
    if not all(math.isfinite(v) for v in (start, stop, step)): raise ArgumentError(f"arange takes finite numbers, got {start}, {stop}, {step}")
    is_f = any(isinstance(v, (float, np.floating)) for v in (start, stop, step))
    big = not is_f and not all(-2**31 <= v < 2**31 for v in (start, stop - step))
    dt = to_dtype(dtype) if dtype is not None else (_D.f32 if is_f else _D.i64 if big else _D.i32)
    n = max(0, math.ceil((stop - start) / step))
    if n and dt.is_int:  # the first and the last value must fit (torch would wrap)
      lo, hi = _D.min_max(dt)
      if not (lo <= start <= hi and lo <= start + (n - 1) * step <= hi): raise OverflowError(f"arange({start}, {stop}, {step}) does not fit {dt!r}")
    dev = _canon_device(device)
    if not n: return Tensor.zeros(0, dtype=dt, device=dev)
    if not is_f and not dt.is_bool:
      # whole numbers: positions 1..n (a sum scan of ones, which each kernel that reads it computes from its index:
      # no constant of n values, in the graph or in memory) times step, plus start - step (wrapping as the dtype does,
      # exact where the values fit); cast to dt
      it = _D.i64 if big or dt.itemsize == 8 else _D.i32
      p = Tensor._const(1, (n,), it, dev)._scan('add', 0)
      if step != 1: p = p * Tensor._const(step, (n,), it, dev)
      if start != step: p = p + Tensor._const(start - step, (n,), it, dev)
      return p if dt is it else p.cast(dt)
    vals = np.arange(n, dtype=np.float64 if is_f else np.int64) * step + start
    return Tensor(_Node('const', (), {'value': _dense_value(vals, dt)}, (n,), dt, dev))

  @staticmethod
  def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    m = n if m is None else m
    _new_shape((n, m), 'eye')
    r = Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)
    return r.cast(to_dtype(dtype) if dtype is not None else _D.f32)

  @staticmethod
  def manual_seed(seed: int = 0) -> None: Tensor._rng = np.random.default_rng(seed)

  @staticmethod
  def _random(draw, shape, dtype, device, seed) -> Tensor:
    rng = Tensor._rng if seed is None else np.random.default_rng(seed)
    dt = to_dtype(dtype) if dtype is not None else _D.f32
    shape = _new_shape(shape, 'random')
    try: values = draw(rng, shape)
    except MemoryError as e: raise OutOfMemory(f"random: out of host memory drawing a tensor of shape {shape}: {e}") from None
    return Tensor(values, dtype=dt, device=device)

  @staticmethod
  def rand(*shape, dtype=None, device=None, seed=None) -> Tensor:
    """Uniform [0, 1), drawn by numpy's Generator on the host (seed= or Tensor.manual_seed) and uploaded."""
    return Tensor._random(lambda g, s: g.random(s, dtype=np.float32), shape, dtype, device, seed)

  @staticmethod
  def randn(*shape, dtype=None, device=None, seed=None) -> Tensor:
    return Tensor._random(lambda g, s: g.standard_normal(s, dtype=np.float32), shape, dtype, device, seed)

  @staticmethod
  def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None, seed=None) -> Tensor:
    return Tensor._random(lambda g, s: g.uniform(low, high, s).astype(np.float32), shape, dtype, device, seed)

  @staticmethod
  def randint(*shape, low=0, high=10, dtype=None, device=None, seed=None) -> Tensor:
    return Tensor._random(lambda g, s: g.integers(low, high, s), shape, dtype or _D.i32, device, seed)

  # ---- casts
  def cast(self, dtype) -> Tensor:
    dt = dtype if isinstance(dtype, DType) else to_dtype(dtype)
    return self if dt is self.dtype else self._new('cast', (self,), self.shape, dt)

  def bitcast(self, dtype) -> Tensor:
    dt = to_dtype(dtype)
    if dt is self.dtype: return self
    if dt.itemsize != self.dtype.itemsize or dt.is_bool or self.dtype.is_bool:
      raise DTypeError(f"bitcast needs dtypes of the same size, got {self.dtype!r} -> {dt!r}")
    return self._new('bitcast', (self,), self.shape, dt)

  def float(self) -> Tensor: return self.cast(_D.f32)
  def half(self) -> Tensor: return self.cast(_D.f16)
  def double(self) -> Tensor: return self.cast(_D.f64)
  def int(self) -> Tensor: return self.cast(_D.i32)
  def long(self) -> Tensor: return self.cast(_D.i64)
  def bool(self) -> Tensor: return self.cast(_D.bool_)
  def contiguous(self) -> Tensor: return self._new('contiguous', (self,), self.shape, self.dtype)
  def detach(self) -> Tensor: return Tensor(_autograd.detach_node(self.node))

  # ---- broadcasting and promotion
  def _broadcast_to(self, shape) -> Tensor:
    shape = tuple(shape)
    return self._expanded(shape, _leading_ones(self.node.shape, len(shape)))

  def _expanded(self, shape: tuple, ones: tuple | None) -> Tensor:
    """This tensor expanded to `shape` (ones: its shape with the leading 1s `shape` has more, or None where it has
    as many axes: _leading_ones), its nodes made directly."""
    n = self.node
    if n.shape == shape: return self
    if ones is not None: n = _Node('reshape', (n,), None, ones, n.dtype, n.device)
    t = _tensor_new(Tensor)
    t.node = _Node('expand', (n,), None, shape, n.dtype, n.device)
    return t

  def _broadcasted(self, y, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x = self
    if isinstance(y, Tensor):
      xn, yn = x.node, y.node
      if yn.device != xn.device: raise DeviceError(f"tensors on different devices: {xn.device} and {yn.device}")
      if match_dtype and xn.dtype is not yn.dtype:
        dt = least_upper_dtype(xn.dtype, yn.dtype)
        x, y = x.cast(dt), y.cast(dt)
      xs, ys = x.node.shape, y.node.shape
      if xs != ys:  # (the plan of a pair of shapes made once: a bias added to a product's rows is every layer's call)
        plan = _BROADCASTS.get((xs, ys))
        if plan is None:
          shape = _broadcast_shape(xs, ys)
          if len(_BROADCASTS) > 4096: _BROADCASTS.clear()
          plan = _BROADCASTS[xs, ys] = (shape, _leading_ones(xs, len(shape)), _leading_ones(ys, len(shape)))
        x, y = x._expanded(plan[0], plan[1]), y._expanded(plan[0], plan[2])
    elif _is_scalar(y):
      sd = _scalar_dtype(y)
      if not match_dtype: dt = sd if sd is not _D.bool_ or x.dtype.is_bool else x.dtype
      elif sd is _D.bool_: dt = x.dtype
      elif sd is _D.i32: dt = _D.i32 if x.dtype.is_bool else x.dtype
      else: dt = x.dtype if x.dtype.is_float else _D.f32
      if match_dtype: x = x.cast(dt)
      y = x._c(y, dt)
    elif isinstance(y, (list, tuple, np.ndarray)): return x._broadcasted(Tensor(y, device=x.device), reverse, match_dtype)
    else: raise DTypeError(f"cannot combine a Tensor with {type(y).__name__}")
    return (y, x) if reverse else (x, y)

  # ---- unary math
  def neg(self) -> Tensor:
    if self.dtype.is_bool: raise DTypeError("negation of a bool tensor is not supported, use ~ (logical_not)")
    return self._unop('neg')
  def __neg__(self): return self.neg()
  def logical_not(self) -> Tensor: return self.cast(_D.bool_)._unop('not')
  def __invert__(self):
    if self.dtype.is_float: raise DTypeError(f"~ needs an integer or bool tensor, got {self.dtype!r}")
    return self._unop('not')
  def exp2(self) -> Tensor: return self._float()._unop('exp2')
  def log2(self) -> Tensor: return self._float()._unop('log2')
  def _wide(self) -> DType | None:
    # the compositions below compute a narrow float (f16, bf16, the f8s) in float32 and round once: x * log2(e) or
    # 2s - 1 rounded to f16 on the way would cost the result several ulps (exp(-10) by 9)
    return _D.f32 if self.dtype.is_float and self.dtype.itemsize < 4 else None
  def exp(self) -> Tensor:
    if (w := self._wide()): return self.cast(w).exp().cast(self.dtype)
    return (self._float() * _LOG2_E).exp2()
  def log(self) -> Tensor:
    if (w := self._wide()): return self.cast(w).log().cast(self.dtype)
    return self._float().log2() * _LN_2
  def sin(self) -> Tensor: return self._float()._unop('sin')
  @_graph_template
  def cos(self) -> Tensor:
    if (w := self._wide()): return self.cast(w).cos().cast(self.dtype)
    return (math.pi / 2 - self._float()).sin()
  @_graph_template
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def sqrt(self) -> Tensor: return self._float()._unop('sqrt')
  def reciprocal(self) -> Tensor: return self._float()._unop('recip')
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def square(self) -> Tensor: return self * self
  def trunc(self) -> Tensor: return self._unop('trunc') if self.dtype.is_float else self
  @_graph_template
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    b = self.trunc()
    return (self < b).where(b - 1, b)
  @_graph_template
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    b = self.trunc()
    return (self > b).where(b + 1, b)
  @_graph_template
  def round(self) -> Tensor:
    """Round half to even, as numpy: exact (x - trunc(x) is exact in binary floating point)."""
    if not self.dtype.is_float: return self
    t = self.trunc()
    d = (self - t).abs()
    away = t + self.sign()
    odd = t._binop('mod', t._c(2)) != 0
    return (d > 0.5).where(away, ((d == 0.5) & odd).where(away, t))
  @_graph_template
  def abs(self) -> Tensor:
    if self.dtype.kind in 'ub': return self
    if self.dtype.is_float:  # abs(-0.0) is 0.0 and NaN stays NaN; where, not the sign bit: the gradient is sign(x)
      r = (self < 0).where(-self, self)
      return (r == 0).where(r._c(0.0), r)
    return (self < 0).where(-self, self)
  @_graph_template
  def sign(self) -> Tensor:
    if self.dtype.is_bool: return self
    if self.dtype.kind == 'u': return (self != 0).cast(self.dtype)
    r = (self != 0).where((self < 0).where(self._c(-1), self._c(1)), self._c(0))
    return (self != self).where(self, r) if self.dtype.is_float else r  # NaN stays NaN
  @_graph_template
  def relu(self) -> Tensor: return (self <= 0).where(0, self)  # a gradient of 0 at 0, as torch; NaN stays NaN
  @_graph_template
  def sigmoid(self) -> Tensor:
    """1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: e^-|x| never overflows, so neither the value nor the gradient
    meets inf * 0 at extreme inputs."""
    if (w := self._wide()): return self.cast(w).sigmoid().cast(self.dtype)
    x = self._float()
    pos = x >= 0
    e = pos.where(-x, x).exp()  # e^-|x|, with the gradient of the branch taken at 0 too
    r = (1 + e).reciprocal()
    return pos.where(r, e * r)
  def tanh(self) -> Tensor: return self._float()._unop('tanh')  # (tensor.tanh: tgc/dialects/tensor.py)
  def gelu(self, approximate: str = 'tanh') -> Tensor:
    """tinygrad's tanh approximation by default (one tensor.gelu node: tgc/dialects/tensor.py); approximate='none' is
    torch's default (erf)."""
    if approximate == 'tanh': return self._float()._unop('gelu')
    if approximate == 'none': return self._gelu_erf()
    raise ArgumentError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")
  @_graph_template
  def _gelu_erf(self) -> Tensor:
    x = self._float()
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
  @_graph_template
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
  @_graph_template
  def softplus(self, beta: float = 1, threshold: float = 20.0) -> Tensor:
    # above the threshold the identity; below, max(bx, 0) + log(1 + e^-|bx|): no exp overflows, in the value or the
    # gradient of the branch not taken (beta 0: inf, as torch)
    bx = self * beta
    return (bx > threshold).where(self, (bx.relu() + (1 + (-bx.abs()).exp()).log()) / beta)
  @_graph_template
  def elu(self, alpha: float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def hardtanh(self, min_val=-1, max_val=1) -> Tensor: return self.clip(min_val, max_val)

  # ---- binary math
  def _arith(self, op: str, y, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._binop(op, b)

  def add(self, y, reverse=False) -> Tensor: return self._arith('add', y, reverse)
  def sub(self, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if a.dtype.is_bool: raise DTypeError("subtraction of bool tensors is not supported, use ^ (xor)")
    return a._binop('sub', b)
  def mul(self, y, reverse=False) -> Tensor: return self._arith('mul', y, reverse)
  def div(self, y, reverse=False, rounding_mode=None) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if rounding_mode is not None:
      if rounding_mode not in ('trunc', 'floor'): raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
      if not a.dtype.is_float: return a.floordiv(b) if rounding_mode == 'floor' else a._binop('idiv', b)
      q = a._binop('fdiv', b)
      return q.trunc() if rounding_mode == 'trunc' else q.floor()
    dt = _upper_float(a.dtype)
    return a.cast(dt)._binop('fdiv', b.cast(dt))
  def floordiv(self, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if a.dtype.is_bool: raise DTypeError("// of bool tensors is not supported")
    if a.dtype.is_float: return a.div(b).floor()
    q = a._binop('idiv', b)
    if a.dtype.kind == 'u': return q
    r = a._binop('mod', b)
    return ((r != 0) & ((r < 0) != (b < 0))).where(q - 1, q)
  def mod(self, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if a.dtype.is_bool: raise DTypeError("% of bool tensors is not supported")
    r = a._binop('mod', b)
    if a.dtype.kind == 'u': return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def maximum(self, y) -> Tensor: return self._arith('max', y)
  def minimum(self, y) -> Tensor: return self._arith('min', y)
  def clip(self, min_=None, max_=None) -> Tensor:
    if min_ is None and max_ is None: raise ArgumentError("clip needs min_ or max_")
    r = self  # wheres, not maximum/minimum: the gradient is 1 on the bounds too (torch's)
    if min_ is not None: r = (r < min_).where(min_, r)
    if max_ is not None: r = (r > max_).where(max_, r)
    return r
  clamp = clip

  def _bitwise(self, op: str, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if a.dtype.is_float: raise DTypeError(f"bitwise op '{op}' needs integer or bool tensors, got {a.dtype!r}")
    return a._binop(op, b)
  def bitwise_and(self, y, reverse=False): return self._bitwise('and', y, reverse)
  def bitwise_or(self, y, reverse=False): return self._bitwise('or', y, reverse)
  def bitwise_xor(self, y, reverse=False): return self._bitwise('xor', y, reverse)
  def _shift(self, op: str, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    if not a.dtype.is_int: raise DTypeError(f"shifts need integer tensors, got {a.dtype!r}")
    return a._binop(op, b)
  def lshift(self, y, reverse=False): return self._shift('shl', y, reverse)
  def rshift(self, y, reverse=False): return self._shift('shr', y, reverse)

  def pow(self, x, reverse: bool = False) -> Tensor:
    if not reverse and isinstance(x, (float, np.floating)) and not self.dtype.is_float: return self._float().pow(x)
    if not reverse and _is_scalar(x) and not isinstance(x, (bool, np.bool_)) and float(x).is_integer() and abs(x) <= 1024:
      n = int(x)
      base = self
      if n < 0:
        if not self.dtype.is_float: raise DTypeError(f"integers to negative integer powers are not allowed ({self.dtype!r} ** {n})")
        base, n = self.reciprocal(), -n
      if n == 0: return base._c(True, _D.bool_).where(base._c(1), base * 0)  # 1, in x's graph (gradient 0)
      acc, p = None, base
      while n:
        if n & 1: acc = p if acc is None else acc * p
        n >>= 1
        if n: p = p * p
      return acc
    if not reverse and _is_scalar(x) and x == 0.5 and self.dtype.is_float: return self.sqrt()
    b, e = self._broadcasted(x, reverse)
    out = b.dtype
    bf, ef = b._float(), e._float()
    ret = bf._new('pow', (bf, ef), bf.shape, bf.dtype)  # (tensor.pow: tgc/dialects/tensor.py)
    return ret if out.is_float else ret.round().cast(out)

  __add__ = lambda self, y: self.add(y)
  __radd__ = lambda self, y: self.add(y, True)
  __sub__ = lambda self, y: self.sub(y)
  __rsub__ = lambda self, y: self.sub(y, True)
  __mul__ = lambda self, y: self.mul(y)
  __rmul__ = lambda self, y: self.mul(y, True)
  __truediv__ = lambda self, y: self.div(y)
  __rtruediv__ = lambda self, y: self.div(y, True)
  __floordiv__ = lambda self, y: self.floordiv(y)
  __rfloordiv__ = lambda self, y: self.floordiv(y, True)
  __mod__ = lambda self, y: self.mod(y)
  __rmod__ = lambda self, y: self.mod(y, True)
  __pow__ = lambda self, y: self.pow(y)
  __rpow__ = lambda self, y: self.pow(y, True)
  __and__ = lambda self, y: self.bitwise_and(y)
  __rand__ = lambda self, y: self.bitwise_and(y, True)
  __or__ = lambda self, y: self.bitwise_or(y)
  __ror__ = lambda self, y: self.bitwise_or(y, True)
  __xor__ = lambda self, y: self.bitwise_xor(y)
  __rxor__ = lambda self, y: self.bitwise_xor(y, True)
  __lshift__ = lambda self, y: self.lshift(y)
  __rlshift__ = lambda self, y: self.lshift(y, True)
  __rshift__ = lambda self, y: self.rshift(y)
  __rrshift__ = lambda self, y: self.rshift(y, True)
  __abs__ = lambda self: self.abs()
  def __matmul__(self, y): return self.matmul(y)
  def __rmatmul__(self, y): return Tensor(y, device=self.device).matmul(self) if not isinstance(y, Tensor) else y.matmul(self)

  # ---- comparisons
  def _cmp(self, op: str, y, reverse=False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._binop(op, b)
  def __lt__(self, y): return self._cmp('cmplt', y)
  def __gt__(self, y): return self._cmp('cmplt', y, True)
  def __le__(self, y): return self._cmp('cmplt', y) | self._cmp('cmpeq', y)
  def __ge__(self, y): return self._cmp('cmplt', y, True) | self._cmp('cmpeq', y)
  def __eq__(self, y): return self._cmp('cmpeq', y)
  def __ne__(self, y): return self._cmp('cmpne', y)
  def eq(self, y): return self == y
  def ne(self, y): return self != y
  def lt(self, y): return self < y

  @_graph_template
  def where(self, x, y) -> Tensor:
    """self (a bool tensor) ? x : y, with broadcasting and promotion of x and y."""
    if isinstance(x, Tensor) or isinstance(y, Tensor):
      if isinstance(x, Tensor): x, y = x._broadcasted(y)
      else: y, x = y._broadcasted(x)
    else:
      if not (_is_scalar(x) and _is_scalar(y)): x, y = Tensor(x, device=self.device), Tensor(y, device=self.device); return self.where(x, y)
      dx, dy = _scalar_dtype(x), _scalar_dtype(y)
      dt = least_upper_dtype(dx, dy)
      x, y = Tensor._const(x, (), dt, self.device), Tensor._const(y, (), dt, self.device)
    shape = _broadcast_shape(self.shape, x.shape, y.shape)
    c = self.cast(_D.bool_)._broadcast_to(shape)
    x, y = x._broadcast_to(shape), y._broadcast_to(shape)
    return c._new('where', (c, x, y), shape, x.dtype)

  # ---- movement
  def reshape(self, *shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if None in shape: shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    shape = _shape_arg(shape)
    if shape == self.shape: return self  # (the shape it has: nothing below can fail)
    n = self.node
    if shape and min(shape) < 0:
      if shape.count(-1) > 1: raise ShapeError(f"cannot reshape {self.shape} to {shape}: only one size can be -1")
      if min(shape) < -1: raise ShapeError(f"cannot reshape {self.shape} to {shape}: a negative size")
      known = math.prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ShapeError(f"cannot reshape {self.shape} to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
      if shape == n.shape: return self
    if math.prod(shape) != math.prod(n.shape): raise ShapeError(f"cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
    t = _tensor_new(Tensor)
    t.node = _Node('reshape', (n,), None, shape, n.dtype, n.device)
    return t
  view = reshape

  def _axis(self, a, ndim: int | None = None) -> int:
    nd = self.ndim if ndim is None else ndim
    if type(a) is int and -nd <= a < nd: return a % nd  # the common case
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)): raise AxisError(f"axis must be an integer, got {a!r}")
    if not -max(nd, 1) <= a < max(nd, 1) or (nd == 0 and a not in (0, -1)):
      raise AxisError(f"axis {a} is out of range for a tensor of shape {self.shape}")
    return int(a) % nd if nd else 0

  def permute(self, *order) -> Tensor:
    if len(order) == 1 and isinstance(order[0], (tuple, list)): order = tuple(order[0])
    nd = len(self.node.shape)
    o = tuple([a if type(a) is int and 0 <= a < nd else self._axis(a) for a in order])
    if sorted(o) != list(range(nd)): raise AxisError(f"permute order {order} is not a permutation of the axes of shape {self.shape}")
    return self._permuted(o)

  def _permuted(self, o: tuple) -> Tensor:
    """This tensor's axes in order o (a permutation), its node made directly: permute's and transpose's."""
    n = self.node
    if o == tuple(range(len(o))): return self
    t = _tensor_new(Tensor)
    t.node = _Node('permute', (n,), {'order': o}, tuple([n.shape[i] for i in o]), n.dtype, n.device)
    return t

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    nd = len(self.node.shape)
    a = dim0 % nd if type(dim0) is int and -nd <= dim0 < nd else self._axis(dim0)
    b = dim1 % nd if type(dim1) is int and -nd <= dim1 < nd else self._axis(dim1)
    order = list(range(nd))
    order[a], order[b] = order[b], order[a]
    return self._permuted(tuple(order))

  @property
  def T(self) -> Tensor: return self if self.ndim < 2 else self.transpose()

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = self._axis(start_dim), self._axis(end_dim)
    if s > e: raise AxisError(f"flatten: start_dim {start_dim} is after end_dim {end_dim} for shape {self.shape}")
    return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def squeeze(self, dim=None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {self._axis(d) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

  def unsqueeze(self, dim: int) -> Tensor:
    d = self._axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def expand(self, *shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    shape = _shape_arg(shape)
    if len(shape) < self.ndim: raise ShapeError(f"cannot expand {self.shape} to {shape}: fewer axes")
    old = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(o if s == -1 else s for s, o in zip(shape, old))
    for o, n in zip(old, new):
      if o != n and o != 1: raise ShapeError(f"cannot expand {self.shape} to {shape}: only size-1 axes grow")
    return self._broadcast_to(new)

  def pad(self, padding, value=0.0, mode: str = 'constant') -> Tensor:
    """pad(((before, after), ...)) per axis (None: no padding), or torch's flat (left, right, top, bottom, ...);
    mode 'constant' (value), 'reflect', 'replicate' or 'circular'."""
    if mode not in ('constant', 'reflect', 'replicate', 'circular'): raise UnsupportedError(f"pad mode {mode!r} is not constant, reflect, replicate or circular")
    if isinstance(padding, (tuple, list)) and padding and all(isinstance(p, (int, np.integer)) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ShapeError(f"flat padding {padding} does not fit shape {self.shape}")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
    else: pairs = [p or (0, 0) for p in _pairs(padding, self.shape, 'pad')]
    x = self
    if mode in ('reflect', 'replicate') and any(a < 0 or b < 0 for a, b in pairs):
      # negative padding removes, after the edges were copied from the whole tensor (torch's order)
      x = x._pad_mode([(max(a, 0), max(b, 0)) for a, b in pairs], mode)
      return x.shrink(tuple((-min(a, 0), s + min(b, 0)) for (a, b), s in zip(pairs, x.shape)))
    if any(a < 0 or b < 0 for a, b in pairs):  # negative padding removes
      x = x.shrink(tuple((-min(a, 0), s + min(b, 0)) for (a, b), s in zip(pairs, x.shape)))
      pairs = [(max(a, 0), max(b, 0)) for a, b in pairs]
    if all(p == (0, 0) for p in pairs): return x
    if mode != 'constant': return x._pad_mode(pairs, mode)
    shape = tuple(s + a + b for s, (a, b) in zip(x.shape, pairs))
    r = x._new('pad', (x,), shape, x.dtype, {'pads': tuple(pairs)})
    if value == 0: return r
    inside = Tensor._const(True, x.shape, _D.bool_, x.device)
    inside = inside._new('pad', (inside,), shape, _D.bool_, {'pads': tuple(pairs)})
    return inside.where(r, value)

  def shrink(self, arg) -> Tensor:
    shape = self.shape
    bounds = _pairs(arg, shape, 'shrink')
    bounds = tuple([(0, s) if b is None else b for b, s in zip(bounds, shape)])
    out, same = [], True
    for i, ((lo, hi), s) in enumerate(zip(bounds, shape)):
      if not 0 <= lo <= hi <= s: raise ShapeError(f"shrink bounds ({lo}, {hi}) of axis {i} are outside [0, {s}] for shape {self.shape}")
      out.append(hi - lo); same = same and lo == 0 and hi == s
    if same: return self
    return self._new('shrink', (self,), tuple(out), self.dtype, {'bounds': bounds})

  def flip(self, axis=None) -> Tensor:
    if axis is None: axis = tuple(range(self.ndim))
    axes = [self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    if len(set(axes)) != len(axes): raise AxisError(f"flip repeats an axis in {axis}")
    axes = tuple(sorted(a for a in axes if self.shape[a] > 1))
    return self._new('flip', (self,), self.shape, self.dtype, {'axes': axes}) if axes else self

  def __getitem__(self, idx) -> Tensor:
    if not isinstance(idx, tuple): idx = (idx,)
    if any(isinstance(it, (Tensor, list, tuple)) for it in idx): return self._index_tensors(idx)
    for it in idx:
      if isinstance(it, (bool, np.bool_)) or not (it is None or it is Ellipsis or isinstance(it, (int, np.integer, slice))):
        raise IndexingError(f"unsupported index {it!r} (ints, slices, None, ..., integer tensors and lists are supported)")
    if sum(it is Ellipsis for it in idx) > 1: raise IndexingError("an index can only have a single ellipsis (...)")
    used = sum(isinstance(it, (int, np.integer, slice)) for it in idx)
    if used > self.ndim: raise IndexingError(f"too many indices for a tensor of shape {self.shape}: {used} given")
    if Ellipsis in idx:
      i = next(k for k, it in enumerate(idx) if it is Ellipsis)
      idx = idx[:i] + (slice(None),) * (self.ndim - used) + idx[i + 1:]
    else: idx = idx + (slice(None),) * (self.ndim - used)
    bounds, flips, steps, final, dim = [], [], [], [], 0
    pads = []
    for it in idx:
      if it is None: final.append(1); continue
      size = self.shape[dim]
      if isinstance(it, slice):
        try: start, stop, step = it.indices(size)
        except ValueError: raise SliceStepError(f"slice step cannot be zero (axis {dim} of shape {self.shape})") from None
        n = len(range(start, stop, step))
        st = abs(step)
        if n == 0: bounds.append((0, 0)); pads.append(0); steps.append(1); final.append(0)
        elif step > 0:
          hi = start + n * st if st > 1 else start + n
          bounds.append((start, min(hi, size))); pads.append(max(0, hi - size)); steps.append(st); final.append(n)
        else:
          lo = start + 1 - n * st if st > 1 else start + 1 - n
          bounds.append((max(lo, 0), start + 1)); pads.append(max(0, -lo)); steps.append(st); final.append(n); flips.append(dim)
      else:
        i = int(it)
        if not -size <= i < size: raise IndexingError(f"index {i} is out of bounds for axis {dim} with size {size} (shape {self.shape})")
        i %= size
        bounds.append((i, i + 1)); pads.append(0); steps.append(1)
      dim += 1
    x = self.shrink(tuple(bounds)).flip(tuple(flips)) if flips else self.shrink(tuple(bounds))
    if any(s > 1 for s in steps):  # keep every st-th element: split the axis as (n, st) and take [:, 0]
      if any(pads): x = x.pad(tuple((0, p) for p in pads))
      x = x.reshape(tuple(v for s, st in zip(x.shape, steps) for v in (s // st, st)))
      x = x.shrink(tuple(b for k in range(len(steps)) for b in ((0, x.shape[2 * k]), (0, 1))))
    return x.reshape(tuple(final))

  # ---- reductions
  def _axes(self, axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if type(axis) is int and self.ndim: return (self._axis(axis),)  # (one axis: softmax's, a sum's)
    axs = [self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    if len(set(axs)) != len(axs): raise AxisError(f"repeated axis in {axis} for shape {self.shape}")
    return tuple(sorted(a for a in axs if self.ndim))

  def _reduce(self, kind: str, axis, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    keep = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if not axes: ret = self
    elif 0 in self.shape and any(self.shape[i] == 0 for i in axes):
      if kind == 'max' and not self.dtype.is_float and not self.dtype.is_bool: raise ShapeError(f"max of an empty axis of shape {self.shape}")
      # the reduce of one identity element padded onto each empty axis: the value of the empty reduce, and the
      # result stays in self's graph (its gradient is self's empty one)
      ident = {'add': 0, 'mul': 1, 'max': False if self.dtype.is_bool else -math.inf}[kind]  # any() of nothing is False
      ret = self.pad(tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(self.shape)), value=ident)._reduce(kind, axes, True)
    else: ret = self._new('reduce', (self,), keep, self.dtype, {'kind': kind, 'axes': axes})
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  @_graph_template
  def sum(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else _sum_acc(self.dtype)
    ret = self.cast(acc)._reduce('add', axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype.is_float and self.dtype.itemsize < 4 else ret

  @_graph_template
  def prod(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else _sum_acc(self.dtype)
    ret = self.cast(acc)._reduce('mul', axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype.is_float and self.dtype.itemsize < 4 else ret

  @_graph_template
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce('max', axis, keepdim)

  def _inverse(self) -> Tensor:
    return -self if self.dtype.is_float else self.logical_not() if self.dtype.is_bool else ~self

  @_graph_template
  def min(self, axis=None, keepdim: bool = False) -> Tensor: return self._inverse().max(axis, keepdim)._inverse()

  @_graph_template
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    out = self.dtype if self.dtype.is_float else _D.f32
    axes = self._axes(axis)
    n = math.prod(self.shape[i] for i in axes)
    s = self.sum(axis, keepdim)
    return (s.div(n) if n else s.cast(_upper_float(s.dtype)) * math.nan).cast(out)

  @_graph_template
  def var(self, axis=None, keepdim: bool = False, correction=1) -> Tensor:
    axes = self._axes(axis)
    n = math.prod(self.shape[i] for i in axes)
    sq = (self - self.mean(axes, keepdim=True)).square()
    return sq.sum(axes, keepdim).div(max(0, n - correction))

  @_graph_template
  def std(self, axis=None, keepdim: bool = False, correction=1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()

  @_graph_template
  def argmax(self, axis=None, keepdim: bool = False) -> Tensor:
    if axis is None:
      r = self.flatten().argmax(0)
      return r.reshape((1,) * self.ndim) if keepdim else r
    ax = self._axis(axis)
    if self.ndim == 0: return Tensor._const(0, (), _D.i32, self.device)
    n = self.shape[ax]
    if n == 0: raise ShapeError(f"argmax of an empty axis of shape {self.shape}")
    r = self._new('argmax', (self,), tuple(1 if i == ax else d for i, d in enumerate(self.shape)), _D.i32, {'axis': ax})
    return r if keepdim else r.reshape(tuple(d for i, d in enumerate(self.shape) if i != ax))

  def argmin(self, axis=None, keepdim: bool = False) -> Tensor: return self._inverse().argmax(axis, keepdim)

  def any(self, axis=None, keepdim=False) -> Tensor: return self.cast(_D.bool_).max(axis, keepdim)
  def all(self, axis=None, keepdim=False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def _softmax(self, axis):
    x = self._float()
    m = x - x.max(axis, keepdim=True).detach()  # (a shift the value does not depend on: no gradient through max)
    e = m.exp()
    return m, e, e.sum(axis, keepdim=True)

  @_graph_template
  def softmax(self, axis=-1) -> Tensor:
    _, e, ss = self._softmax(axis)
    # times 1/sum, not divided by it: the gradient's sum(g * e) over the axis is then the forward's own sum, and
    # 1/ss - sum(e)/ss^2 cancels to rounding (a division's gradient sums the rounded quotients instead)
    return e * ss.reciprocal()

  @_graph_template
  def log_softmax(self, axis=-1) -> Tensor:
    m, _, ss = self._softmax(axis)
    return m - ss.log()

  @_graph_template
  def logsumexp(self, axis=-1, keepdim: bool = False) -> Tensor:
    x = self._float()
    m = x.max(axis, keepdim=True)
    r = (x - m).exp().sum(axis, keepdim=True).log() + m
    if keepdim: return r
    axes = x._axes(axis)
    return r.reshape(tuple(s for i, s in enumerate(r.shape) if i not in axes))

  @staticmethod
  def _positions(n: int, device: str) -> Tensor:
    """1 .. n in int32: a sum scan of ones, which each kernel reading it computes from its index (no constant buffer)."""
    return Tensor._const(1, (n,), _D.i32, device)._scan('add', 0)

  def _scan(self, kind: str, axis: int, exclusive: bool = False) -> Tensor:
    """The scan along an axis (one tensor.scan): out[i] = x[0] op ... op x[i] (exclusive: up to x[i - 1]), op add,
    mul or max."""
    return self._new('scan', (self,), self.shape, self.dtype, {'kind': kind, 'axis': axis, **({'exclusive': True} if exclusive else {})})

  def _cum(self, kind: str, ax: int, exclusive: bool = False) -> Tensor:
    """A running sum or product along axis ax, accumulated in sum's dtype (half floats in f32, rounded back);
    exclusive: each position's leaves its own element out."""
    r = self.cast(_sum_acc(self.dtype))._scan(kind, ax, exclusive)
    return r.cast(self.dtype) if self.dtype.is_float and self.dtype.itemsize < 4 else r

  def cumsum(self, axis: int = 0) -> Tensor:
    """The running sum along an axis: a scan (tensor.scan add)."""
    ax = self._axis(axis)  # a 0-d tensor takes axis 0 or -1 only
    if self.ndim == 0: return self.sum()
    if self.shape[ax] == 0: return self.cast(_sum_acc(self.dtype)) if not (self.dtype.is_float and self.dtype.itemsize < 4) else self
    return self._cum('add', ax)

  # ---- linear algebra
  def dot(self, w: Tensor) -> Tensor: return self.matmul(w)

  @_graph_template
  def matmul(self, w) -> Tensor:
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, device=x.device)
    if x.ndim == 0 or w.ndim == 0: raise ShapeError(f"matmul needs tensors of at least 1 axis, got shapes {x.shape} and {w.shape}")
    dt = least_upper_dtype(x.dtype, w.dtype)
    if dt.is_float and dt.itemsize < 4: return x.cast(_D.f32).matmul(w.cast(_D.f32)).cast(dt)  # accumulate in f32, as torch and tinygrad
    x, w = x.cast(dt), w.cast(dt)
    k1, k2 = x.shape[-1], (w.shape[-2] if w.ndim > 1 else w.shape[0])
    if k1 != k2: raise ShapeError(f"matmul shapes {self.shape} and {w.shape} do not fit: inner sizes {k1} and {k2}")
    if x.ndim == 1 and w.ndim == 1: return (x * w)._reduce('add', 0, False)
    x2 = x.reshape(1, k1) if x.ndim == 1 else x
    w2 = w.reshape(k2, 1) if w.ndim == 1 else w
    batch = _broadcast_shape(x2.shape[:-2], w2.shape[:-2])
    x2, w2 = x2._broadcast_to(batch + x2.shape[-2:]), w2._broadcast_to(batch + w2.shape[-2:])
    r = x2._new('matmul', (x2, w2), batch + (x2.shape[-2], w2.shape[-1]), dt)
    if x.ndim == 1: r = r.reshape(r.shape[:-2] + r.shape[-1:])
    if w.ndim == 1: r = r.reshape(r.shape[:-1])
    return r

  def _attention(self, key, value, causal: bool, mask=None, gqa: bool = False, scale: float | None = None, softcap: float | None = None):
    """One tensor.attention where the device computes it as one kernel (its spec's fused_attention: the scores and
    probabilities never reach memory), else None: elsewhere the API's composite is the graph its kernels were tuned
    for. q, k and v of one dtype and batch shape (no broadcast), a key at least; a mask (boolean: where a key takes
    part; else added to the scores) that broadcasts to the scores' shape becomes the op's bias, in q's type, computed
    at the mask's own shape and read through the broadcast (a padding mask of batch x keys stays that small). gqa: k
    and v may have fewer heads (axis -3) than q, each shared by a group of q's (read once a group, not repeated);
    softcap: the scaled scores capped (softcap * tanh(s / softcap)) before the mask is added."""
    q, k, v = self, key, value
    heads_fit = q.shape[:-2] == k.shape[:-2] or (gqa and q.ndim >= 3 and q.shape[:-3] == k.shape[:-3] and q.shape[-3] % k.shape[-3] == 0)
    if not (isinstance(q.device, str) and q.ndim >= 2 and q.ndim == k.ndim == v.ndim and heads_fit and k.shape[:-2] == v.shape[:-2]
            and q.dtype == k.dtype == v.dtype and k.shape[-1] == q.shape[-1] and v.shape[-2] == k.shape[-2] >= 1): return None
    from tgc.runtime import get_device
    if not get_device(q.device).spec.fused_attention(q.dtype, q.shape[-1], v.shape[-1]): return None
    operands, scores = (q, k, v), q.shape[:-1] + k.shape[-2:-1]
    if mask is not None:
      if not broadcasts_to(mask.shape, scores): return None
      bias = mask.where(0.0, -math.inf) if mask.dtype.is_bool else mask
      operands += (bias.cast(q.dtype)._broadcast_to(scores),)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    attrs = {'causal': int(causal), 'scale': scale, **({'softcap': float(softcap)} if softcap else {})}
    return q._new('attention', operands, q.shape[:-1] + v.shape[-1:], q.dtype, attrs)

  @_graph_template
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    self._tensors('linear', 'bias', weight=weight, bias=bias)
    if weight.ndim == 2 and self.ndim > 2:
      # the leading axes as rows of one matmul, as torch's linear: a batched matmul would broadcast the weight over them
      # and the kernel that lays it out for the matmul would copy it once per batch element
      x = self.reshape(-1, self.shape[-1]).matmul(weight).reshape(*self.shape[:-1], weight.shape[-1])
    else: x = self * weight if weight.ndim == 1 else self.matmul(weight)
    return x + bias if bias is not None else x

  @_graph_template
  def layernorm(self, axis=-1, eps: float = 1e-5) -> Tensor:
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  # ---- combining
  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    if isinstance(self, (tuple, list)): self, others = self[0], (*self[1:], *others)  # Tensor.cat([a, b])
    ts = [self, *others]
    for t in ts:
      if not isinstance(t, Tensor): raise DTypeError(f"cat takes tensors, got {type(t).__name__}")
      if t.ndim == 0: raise AxisError(f"cat: a tensor of no axes has no axis {dim} to join along, got shapes {[x.shape for x in ts]}")
      if t.ndim != self.ndim: raise ShapeError(f"cat needs tensors of the same rank, got shapes {[x.shape for x in ts]}")
    d = self._axis(dim)
    for t in ts:
      if t.shape[:d] != self.shape[:d] or t.shape[d + 1:] != self.shape[d + 1:]:
        raise ShapeError(f"cat along axis {d}: shapes {[x.shape for x in ts]} differ in another axis")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    total = sum(t.shape[d] for t in ts)
    out, off = None, 0
    for t in ts:
      n = t.shape[d]
      if n:
        p = t.cast(dt).pad(tuple((off, total - off - n) if i == d else (0, 0) for i in range(t.ndim)))
        out = p if out is None else out._binop('or' if dt.is_bool else 'add', p)
      off += n
    return out if out is not None else Tensor.zeros(*self.shape[:d], 0, *self.shape[d + 1:], dtype=dt, device=self.device)

  def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
    if isinstance(self, (tuple, list)):  # Tensor.stack((a, b))
      if others: raise ArgumentError(f"stack takes a sequence of tensors or tensors, not both ({len(others)} after the sequence)")
      self, others = self[0], tuple(self[1:])
    ts = [self, *others]
    for t in ts:
      if not isinstance(t, Tensor): raise DTypeError(f"stack takes tensors, got {type(t).__name__}")
      if t.shape != self.shape: raise ShapeError(f"stack needs tensors of one shape, got {[x.shape for x in ts]}")
    d = self._axis(dim, self.ndim + 1)
    return ts[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in ts[1:]], dim=d)

  def repeat(self, *repeats) -> Tensor:
    reps = _shape_arg(repeats)
    if len(reps) < self.ndim: raise ShapeError(f"repeat {reps} has fewer entries than the axes of shape {self.shape}")
    if any(r < 0 for r in reps): raise ShapeError(f"repeat counts must be non-negative, got {reps}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(tuple(v for s in base for v in (1, s)))
    x = x.expand(tuple(v for r, s in zip(reps, base) for v in (r, s)))
    return x.reshape(tuple(r * s for r, s in zip(reps, base)))

  # ---- pooling and convolution (tinygrad's views)
  def _pool(self, k_, stride=1, dilation=1) -> Tensor: return _pool_view(self, k_, stride, dilation)

  @staticmethod
  def _pads2d(padding, n):
    if isinstance(padding, int): return [padding] * 2 * n
    p = list(padding)
    if len(p) == n: return [v for v in p[::-1] for _ in range(2)]
    if len(p) == 2 * n: return p
    raise ShapeError(f"padding {padding} needs {n} or {2 * n} values")

  def _pad2d(self, flat, value=0.0) -> Tensor:
    """flat (left, right, top, bottom, ...) from the last axis, as torch's F.pad."""
    return self.pad(tuple(flat), value) if any(flat) else self

  def _ceil_pads(self, k, stride, dilation, pads, ceil_mode: bool) -> list:
    """The flat pads plus, with ceil_mode, the extra right/bottom pads that let a last partial window fit
    (torch's rule: a window must start inside the input or its left padding)."""
    if not ceil_mode: return pads
    n = len(k)
    s_ = (stride,) * n if isinstance(stride, int) else tuple(stride)
    d_ = (dilation,) * n if isinstance(dilation, int) else tuple(dilation)
    out = list(pads)
    for j in range(n):
      i, lo, hi = self.shape[-n + j], pads[2 * (n - 1 - j)], pads[2 * (n - 1 - j) + 1]
      span = i + lo + hi - d_[j] * (k[j] - 1) - 1
      o = -(-span // s_[j]) + 1
      if (o - 1) * s_[j] >= i + lo: o -= 1
      out[2 * (n - 1 - j) + 1] += max(0, (o - 1) * s_[j] + d_[j] * (k[j] - 1) + 1 - (i + lo + hi))
    return out

  @_graph_template
  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    """return_indices: also the flat index (in each H*W plane) of each maximum, the first on ties, in tinygrad's
    default int (int32)."""
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    st = stride if stride is not None else k
    lowest = -math.inf if self.dtype.is_float else _D.min_max(self.dtype)[0]  # pad with the dtype's lowest: ints stay ints
    pads = self._ceil_pads(k, st, dilation, Tensor._pads2d(padding, len(k)), ceil_mode)
    axes = tuple(range(-len(k), 0))
    win = self._pad2d(pads, lowest)._pool(k, st, dilation)
    m = win.max(axes)
    if not return_indices: return m
    sp = self.shape[-len(k):]
    idx = Tensor.arange(math.prod(sp), device=self.device).reshape(sp)._pad2d(pads, -1)._pool(k, st, dilation)
    big = math.prod(sp)
    first = (win == m.reshape(m.shape + (1,) * len(k))).where(idx._broadcast_to(win.shape), big).min(axes)
    return m, first.cast(_D.i32)

  @_graph_template
  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True):
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    st = stride if stride is not None else k
    base = Tensor._pads2d(padding, len(k))
    pads = self._ceil_pads(k, st, dilation, base, ceil_mode)
    axes = tuple(range(-len(k), 0))
    if not ceil_mode and (count_include_pad or not any(pads)): return self._pad2d(pads)._pool(k, st, dilation).mean(axes)
    # the divisor: the window's cells inside the input (and its padding, with count_include_pad), never ceil_mode's overhang
    ones = Tensor.ones(*self.shape[-len(k):], device=self.device)
    if count_include_pad: ones = ones._pad2d(base, 1.0)
    extra = [p - b for p, b in zip(pads, base)] if count_include_pad else pads
    cnt = ones._pad2d(extra)._pool(k, st, dilation).sum(axes)
    x = self._float()
    return (x._pad2d(pads)._pool(k, st, dilation).sum(axes) / cnt).cast(x.dtype)

  @_graph_template
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """NCHW input, (cout, cin/groups, kh, kw) weight; padding an int, (ph, pw) or torch's flat (left, right, top, bottom)."""
    self._tensors('conv2d', 'bias', weight=weight, bias=bias)
    if self.ndim != weight.ndim or self.ndim < 3: raise ShapeError(f"conv2d: input {self.shape} and weight {weight.shape} need the same rank >= 3")
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1: raise ArgumentError(f"conv2d: groups must be a positive integer, got {groups!r}")
    groups = int(groups)
    if groups * cin != cin_ or cout % groups:
      raise ShapeError(f"conv2d: input {self.shape} does not fit weight {weight.shape} with groups={groups} ({groups * cin} vs {cin_} channels)")
    pads = [int(p) for p in Tensor._pads2d(padding, len(HW))]
    # pads flat from the last axis: (left, right) of the last spatial axis first
    padded = [s + pads[2 * (len(HW) - 1 - i)] + pads[2 * (len(HW) - 1 - i) + 1] for i, s in enumerate(self.shape[2:])]
    if min(padded) < 0: raise ShapeError(f"conv2d: padding {padding} removes more than the input {self.shape} has")
    s_, d_, oyx = _pool_shape((bs, cin_, *padded), HW, stride, dilation)
    x, w = self, weight
    if x.dtype != w.dtype: x, w = x.cast(dt := least_upper_dtype(x.dtype, w.dtype)), w.cast(dt)  # (as x * w promotes)
    from tgc.dialects.tensor import conv_acc
    if (acc := conv_acc(x.dtype)) is None: raise DTypeError(f"conv2d of {x.dtype!r}: a packed integer type")
    # one tensor.conv: tensor-decompose lays it out for the device it is lowered for (tgc/passes/tensor_decompose.py)
    ret = x._new('conv', (x, w), (bs, cout, *oyx), x.dtype if x.dtype.is_float else acc,
                 {'stride': tuple(int(v) for v in s_), 'dilation': tuple(int(v) for v in d_), 'pads': tuple(pads), 'groups': groups})
    return ret if bias is None else ret + bias.reshape(1, -1, *[1] * len(HW))

  # ---- jit
  @staticmethod
  def jit(fn: Callable) -> Callable: return _Jit(fn)

  # ---- autograd (tgc/autograd.py, on the autodiff pass), training mode, assign
  training: bool = False

  @property
  def requires_grad(self) -> bool | None: return getattr(self, '_requires_grad', None)
  @requires_grad.setter
  def requires_grad(self, v: bool | None):
    self._requires_grad = v
    if v: _autograd.track(self)
  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self
  @property
  def grad(self) -> Tensor | None: return getattr(self, '_grad', None)
  @grad.setter
  def grad(self, g: Tensor | None): self._grad = g

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    """The gradients of this tensor (a scalar, or weighted by `gradient`) with respect to each target, lazy."""
    return self._gradients(targets, gradient, materialize_grads)

  def _gradients(self, targets, gradient, materialize_grads: bool, walked=None) -> list[Tensor]:
    # walked: (the graph's key, its nodes numbered) as _graph_key([self.node]) made them, where the caller has them
    nodes = _autograd.gradients(self, targets, gradient, walked)
    out, graph = [], walked[1] if walked is not None else None
    for t, n in zip(targets, nodes):
      if n is None and not materialize_grads and t.numel():
        # zeros for a target the loss uses only through ops that pass no gradient (compares, ints); an error for
        # one it does not use at all (a tensor without elements has its empty gradient either way)
        graph = graph if graph is not None else set(_toposort([self.node]))
        if t.node not in graph: raise _autograd.GradientError(f"the tensor of shape {t.shape} is not in the graph of the loss")
      out.append(Tensor(n) if n is not None else t.zeros_like(dtype=t.dtype))
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Add the gradient of this tensor to `.grad` of every tensor with requires_grad=True in its graph (if none is,
    of every float tensor made from data in it whose requires_grad is unset, as tinygrad's backward)."""
    ids: dict = {}  # (one walk of the graph finds the targets and keys the backward)
    walked = (_graph_key([self.node], ids)[0], ids)
    targets = _autograd.tracked_in(ids)
    if not targets and self.node.op == 'BUFFER':
      raise _autograd.GradientError("backward() of a realized tensor: realizing it (realize, numpy, item, tolist) replaced its graph by a "
                                    "buffer, so no gradient reaches what it was computed from; call backward() before reading its value")
    for t, g in zip(targets, self._gradients(targets, gradient, True, walked)):
      t.grad = g if t.grad is None else t.grad + g
    return self

  def assign(self, x) -> Tensor:
    """This tensor takes the value of x (lazily; a jit replays it). Other tensors of the old value keep it."""
    x = x if isinstance(x, Tensor) else Tensor(x, dtype=self.dtype, device=self.device)
    if x.shape != self.shape: raise ShapeError(f"assign of shape {x.shape} to a tensor of shape {self.shape}")
    if x.dtype != self.dtype: raise DTypeError(f"assign of {x.dtype!r} to a tensor of {self.dtype!r}")
    if x.device != self.device: raise DeviceError(f"assign from {x.device} to a tensor on {self.device}")
    old, self.node = self.node, x.node
    if type(old.device) is tuple and old.op == 'BUFFER':  # a sharded weight stays sharded as it was
      from tgc.multi import keep_sharding
      keep_sharding(x.node, old.buf.axis)
    _autograd.record(('assign', self, old, x.node))
    return self

  class train:
    """`with Tensor.train():` (or as a decorator): Tensor.training is True inside (dropout drops, BatchNorm
    uses and updates batch statistics); `Tensor.train(False)` sets it False."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.prev
    def __call__(self, fn):
      def wrapped(*a, **k):
        with Tensor.train(self.mode): return fn(*a, **k)
      return wrapped

  def dropout(self, p: float = 0.5) -> Tensor:
    """In training: each element zeroed with probability p, the others scaled by 1/(1-p); else the identity."""
    if not Tensor.training or p == 0: return self
    if not 0 <= p <= 1: raise ArgumentError(f"dropout probability must be in [0, 1], got {p}")
    keep = Tensor.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1 / (1 - p)) if p < 1 else self.zeros_like()


# TensorAPI's members that build nodes from their tensors' shapes and their other arguments alone, recorded once per
# signature as Tensor's own are (_graph_template): an attention call's 40 nodes cost 80 us through the API
for _name in ('tril', 'triu', 'scaled_dot_product_attention', 'cross_entropy', 'nll_loss', 'binary_crossentropy',
              'binary_crossentropy_logits', 'sparse_categorical_crossentropy'):
  setattr(Tensor, _name, _graph_template(getattr(TensorAPI, _name)))

def _jit_arg_key(v):
  """A non-tensor argument by value (arrays by their bytes: a long array's repr elides them); a tensor by its place."""
  if isinstance(v, Tensor): return 'T'
  if isinstance(v, np.ndarray): return ('nd', v.dtype.str, v.shape, v.tobytes())
  return (type(v).__name__, repr(v))


class _Jit:
  """Run fn once per input signature while recording what it realizes and assigns (tgc.autograd.Capture), then
  replay that on the new inputs' buffers: a training step's forward, backward and optimizer updates."""
  def __init__(self, fn):
    self.fn, self.cache = fn, {}
    self.__wrapped__ = fn
  def __call__(self, *args, **kwargs):
    tens = [a for a in args if isinstance(a, Tensor)]
    if kwargs: tens += [kwargs[k] for k in sorted(kwargs) if isinstance(kwargs[k], Tensor)]
    key = tuple((t.node.shape, t.node.dtype.name, t.node.device, getattr(t.node.buf, 'axis', None)) for t in tens)
    if kwargs or len(tens) != len(args):  # other arguments are part of the signature by value, and where each tensor goes
      key = (key, tuple(_jit_arg_key(a) for a in args), tuple((k, _jit_arg_key(kwargs[k])) for k in sorted(kwargs)))
    pending = [t for t in tens if not t.node.realized]
    if pending: Tensor.realize(*pending)
    ent = self.cache.get(key)
    if ent is not None: return ent.replay(tens)
    cap = _autograd.Capture(self.fn, args, kwargs, [t.node for t in tens])
    if cap.ok: self.cache[key] = cap  # else nothing to replay: the results are not tensors
    out, cap.out = cap.out, None  # (the caller's alone: the cache keeps no first results)
    return out
