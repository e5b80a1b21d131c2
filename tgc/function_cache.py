"""Whole functions kept in the disk cache: a process that compiles a function some process compiled before (the same
module text, for the same device, lowering options and tgc source) loads what launching it takes (the host schedule,
each kernel's launch facts, the device's binaries) instead of lowering, emitting and compiling it again.

The key (key()) hashes everything the lowered result depends on: the module's text as it comes (the tensor-level graph:
shapes, dtypes, constants; with nan_bits), the entry function, the DeviceSpec (its Target in full and the device's
capabilities), the CPU facts CPU tiles are chosen from (where the lowering reads them), NOOPT, the device's binary_id
(its compiler, architecture and flags) and a hash of tgc's own source files (source_id: an edited compiler never
reads an entry an older one wrote).

An entry is one tgc.cache entry of kind `function` (its checksum and atomic rename: a damaged or partial entry reads
as missing, concurrent writers are safe): 8 bytes of header length, a JSON header (each kernel's launch_info, launch
points, float ops per point and the name the host calls it by, the device's metadata for its binaries), then the parts
the header gives the lengths of: the host func.func pickled without its source locations (2 ms to load for a GPT
step's 400 launches, where parsing its text takes 50 ms and, in a process that has parsed nothing yet, the parser's
tables), then the device's binaries (BaseDevice.save_programs). The kernels' uop.funcs are not kept:
that step's are 3.2 MB of text, 0.35 s to print and 1.9 s to parse against 3 s of lowering, and launching needs
none of them. What asks for one after a load (Program.fn: a program called on numpy arrays)
gets the function lowered again, once (`relower`). Only devices that save their binaries (BaseDevice.saves_programs:
the CPU's LLVM, CUDA) have their functions kept: for the others a kept function would save the lowering alone, and
cost its printing on every compile.
"""
from __future__ import annotations
import hashlib, json, os, pickle, struct
from tgc import cache
from tgc.errors import TgcError
from tgc.ir import dtypes as D
from tgc.ir.core import Operation

KIND = 'function'
FORMAT = 3  # (the entry layout's version: part of the key)
stats = {'hits': 0, 'misses': 0, 'writes': 0, 'unusable': 0}

_source_id: str | None = None

def source_id() -> str:
  """A hash of tgc's own source (every .py and .lark file of the package), read once per process."""
  global _source_id
  if _source_id is None:
    root, h = os.path.dirname(os.path.abspath(__file__)), hashlib.sha256()
    for d, subs, files in sorted(os.walk(root)):
      subs.sort()
      for f in sorted(files):
        if not f.endswith(('.py', '.lark')): continue
        p = os.path.join(d, f)
        with open(p, 'rb') as fh: data = fh.read()
        rel = os.path.relpath(p, root).encode()
        h.update(len(rel).to_bytes(8, 'little')); h.update(rel); h.update(len(data).to_bytes(8, 'little')); h.update(data)
    _source_id = h.hexdigest()
  return _source_id


def nan_bits(m) -> str:
  """The bit patterns of the NaNs among a module's float attributes, in order: its text prints every NaN as `nan`,
  where the code made of it keeps the NaN's sign and payload (part of key's text)."""
  out: list[str] = []
  def walk(v):
    if type(v) is float:
      if v != v: out.append(struct.pack('<d', v).hex())
    elif type(v) in (tuple, list):
      for x in v: walk(x)
  for op in m.walk():
    for v in op.attrs.values(): walk(v)
  return ' '.join(out)


def key(text: str, entry: str | None, spec, dev) -> str | None:
  """The entry name of a module whose text (as it comes, before lowering, with its nan_bits) is `text`, compiled for
  `spec` on device `dev`; None where the disk cache is off."""
  if cache.cache_dir() is None: return None
  from tgc.host import cpu_facts
  from tgc.passes.pipelines import noopt_from_env
  # kernel-opt reads the CPU's facts where it chooses CPU tiles (a processor that is not a GPU) or a CPU language's
  # vector width; a GPU's lowering does not (nor does its warm process import llvmlite to read them)
  if not spec.gpu or spec.target.is_cpu:
    try: cpu = repr(cpu_facts(spec.cpu))
    except TgcError as e: cpu = f"? {e}"  # (an unknown cpu: the lowering refuses it, and nothing is stored)
  else: cpu = 'gpu'
  return cache.key(KIND, str(FORMAT), source_id(), text, entry or '', repr(spec), cpu, f'noopt={noopt_from_env()}', dev.binary_id())


def store(k: str, host: Operation, names: list[str], progs: list, counts: list[tuple[int, int]], dev) -> None:
  """Keep a compiled function under key k: its host func.func, and per kernel the name its launches call, its Program
  (launch facts and binary: kernels with the same body share one, under the name it was compiled with) and its (launch
  points, float ops per point). Nothing where the device does not save its programs."""
  image = dev.save_programs(progs)
  if image is None: return
  meta, parts = image
  kernels = [encode_kernel((p.name, p.signature, p.sizes, (p.global_size, p.local_size), p.written), c, n) for n, p, c in zip(names, progs, counts)]
  parts = [_host_bytes(host), *parts]
  header = json.dumps({'kernels': kernels, 'image': meta, 'parts': [len(p) for p in parts]}).encode()
  cache.put(KIND, k, b''.join([struct.pack('<Q', len(header)), header, *parts]))
  stats['writes'] += 1


def encode_kernel(info: tuple, counts: tuple[int, int], callee: str) -> list:
  """A kernel's launch_info, (points, float ops per point) and the name the host calls it by as JSON-able values
  (decode_kernels reads them back)."""
  name, sig, sizes, (g, l), written = info
  return [name, [d.name for d in sig], sorted(sizes.items()), [list(g), list(l)], list(written), *counts, callee]


def decode_kernels(ks: list) -> tuple[list, list, list]:
  """encode_kernel's lists -> (launch_infos, counts, callees)."""
  infos = [(name, [D.get(s_) for s_ in sig], {int(i): int(c) for i, c in sizes}, (tuple(g), tuple(l)), list(written))
           for name, sig, sizes, (g, l), written, *_ in ks]
  return infos, [(int(pts), int(fl)) for *_, pts, fl, _ in ks], [str(c) for *_, c in ks]


def _host_bytes(host: Operation) -> bytes:
  """The host func.func pickled, without its source locations (they would carry the whole module's text along)."""
  from tgc.ir.rewrite import clone_op
  h = clone_op(host, {})
  for op in h.walk(): op.loc = None
  return pickle.dumps(h, protocol=pickle.HIGHEST_PROTOCOL)


class Loaded:
  """A function from the disk cache: `host` (its host func.func), and per kernel (in order of definition) the name its
  launches call (`names`), its uop.func or what makes it (`fns`), launch_info (`infos`), (points, flops per point)
  (`counts`) and Program (`progs`)."""
  def __init__(self, host, names, fns, infos, counts, progs):
    self.host, self.names, self.fns, self.infos, self.counts, self.progs = host, names, fns, infos, counts, progs


def load(k: str, dev, relower) -> Loaded | None:
  """The function kept under key k, for device dev; None where there is none or it cannot be used (a format this
  code does not read, binaries the device refuses), and the caller compiles. `relower()`: the function's uop.funcs by
  name, lowered anew (what a kernel's uop.func is made from when something asks for it)."""
  data = cache.get(KIND, k)
  if data is None: stats['misses'] += 1; return None
  try: out = _decode(data, dev, relower)
  except (TgcError, RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError, ImportError, EOFError,
          struct.error, UnicodeDecodeError, pickle.UnpicklingError):
    stats['unusable'] += 1; stats['misses'] += 1
    return None
  stats['hits'] += 1
  return out


def _decode(data: bytes, dev, relower) -> Loaded:
  n, = struct.unpack_from('<Q', data)
  head = json.loads(bytes(data[8:8 + n]))
  view, at, parts = memoryview(data), 8 + n, []
  for size in head['parts']:
    if size < 0 or at + size > len(data): raise ValueError("entry cut short")
    parts.append(bytes(view[at:at + size])); at += size
  if at != len(data): raise ValueError("entry too long")
  host = pickle.loads(parts.pop(0))
  if not isinstance(host, Operation) or host.name != 'func.func': raise ValueError("no host function")
  infos, counts, names = decode_kernels(head['kernels'])
  lazy = Relowered(relower)
  fns = [lazy.of(n) for n in names]
  return Loaded(host, names, fns, infos, counts, dev.load_programs(fns, infos, head['image'], parts))


class Relowered:
  """The uop.funcs of a loaded function, lowered again the first time one is asked for."""
  def __init__(self, relower): self.relower, self.fns = relower, None
  def of(self, name: str):
    def get() -> Operation:
      if self.fns is None: self.fns = self.relower()
      fn = self.fns.get(name)
      if fn is None: raise TgcError(f"function cache: lowering the function again made no kernel @{name}")
      return fn
    return get
