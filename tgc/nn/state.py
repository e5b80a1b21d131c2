"""A model's tensors by name, and the safetensors file format (read and written here: an 8-byte little-endian
header length, a JSON header of name -> {dtype, shape, data_offsets} (and "__metadata__"), then the raw
little-endian data)."""
from __future__ import annotations
import json, os, struct
from collections import OrderedDict
import numpy as np
from tgc.tensor import Tensor, dtypes
from tgc.errors import TgcError, ShapeError

__all__ = ['get_state_dict', 'get_parameters', 'load_state_dict', 'safe_save', 'safe_load', 'safe_load_metadata']

SAFE_DTYPES = {'BOOL': dtypes.bool, 'U8': dtypes.uint8, 'I8': dtypes.int8, 'U16': dtypes.uint16, 'I16': dtypes.int16,
               'U32': dtypes.uint32, 'I32': dtypes.int32, 'U64': dtypes.uint64, 'I64': dtypes.int64,
               'F16': dtypes.float16, 'BF16': dtypes.bfloat16, 'F32': dtypes.float32, 'F64': dtypes.float64}
_SAFE_NAMES = {v: k for k, v in SAFE_DTYPES.items()}


class SafetensorsError(TgcError, ValueError):
  """A file that is not a well-formed safetensors file."""


def get_state_dict(obj, prefix: str = '') -> dict[str, Tensor]:
  """Every Tensor reachable from obj through attributes, lists, tuples and dicts, by dotted name ('l1.weight')."""
  if isinstance(obj, Tensor): return {prefix.strip('.'): obj}
  if hasattr(obj, '_asdict'): return get_state_dict(obj._asdict(), prefix)  # a namedtuple
  if isinstance(obj, OrderedDict): return get_state_dict(dict(obj), prefix)
  if hasattr(obj, '__dict__'): return get_state_dict(obj.__dict__, prefix)
  out: dict[str, Tensor] = {}
  if isinstance(obj, (list, tuple)):
    for i, x in enumerate(obj): out.update(get_state_dict(x, f"{prefix}{i}."))
  elif isinstance(obj, dict):
    for k, v in obj.items(): out.update(get_state_dict(v, f"{prefix}{k}."))
  return out

def get_parameters(obj) -> list[Tensor]:
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model, state_dict: dict[str, Tensor], strict: bool = True) -> None:
  """Assign each of the model's tensors the one of its name (realized); strict: every name must be there."""
  own = get_state_dict(model)
  missing = [k for k in own if k not in state_dict]
  if strict and missing: raise TgcError(f"state dict has no {', '.join(missing)}")
  for k, v in own.items():
    if k not in state_dict: continue
    new = state_dict[k]
    if v.shape != new.shape: raise ShapeError(f"'{k}' has shape {new.shape} in the state dict, the model's is {v.shape}")
    v.assign(new.to(v.device).cast(v.dtype)).realize()


def safe_save(tensors: dict[str, Tensor], fn: str, metadata: dict[str, str] | None = None) -> None:
  header, blobs, off = {}, [], 0
  if metadata: header['__metadata__'] = metadata
  for k, t in tensors.items():
    data = (t.bitcast(dtypes.uint16) if t.dtype is dtypes.bfloat16 else t).numpy()
    b = np.ascontiguousarray(data).astype(data.dtype.newbyteorder('<'), copy=False).tobytes()
    header[k] = {'dtype': _SAFE_NAMES[t.dtype], 'shape': list(t.shape), 'data_offsets': [off, off + len(b)]}
    blobs.append(b); off += len(b)
  h = json.dumps(header, separators=(',', ':')).encode()
  h += b' ' * (-len(h) % 8)  # the data starts 8-aligned
  with open(fn, 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    for b in blobs: f.write(b)

def _read_header(fn: str) -> tuple[dict, int]:
  size = os.path.getsize(fn)
  with open(fn, 'rb') as f:
    raw = f.read(8)
    if len(raw) < 8: raise SafetensorsError(f"{fn}: too short for a safetensors file ({size} bytes)")
    n = struct.unpack('<Q', raw)[0]
    if n > size - 8: raise SafetensorsError(f"{fn}: header length {n} is past the end of the file ({size} bytes)")
    try: header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError) as e: raise SafetensorsError(f"{fn}: the header is not JSON: {e}") from None
  if not isinstance(header, dict): raise SafetensorsError(f"{fn}: the header is not a JSON object")
  return header, 8 + n

def safe_load_metadata(fn: str) -> dict:
  return _read_header(fn)[0].get('__metadata__', {})

def safe_load(fn: str, device=None) -> dict[str, Tensor]:
  """The file's tensors, read into memory (on `device`)."""
  header, start = _read_header(fn)
  raw = np.fromfile(fn, np.uint8, offset=start)
  out = {}
  for k, v in header.items():
    if k == '__metadata__': continue
    try: dt, shape, (lo, hi) = SAFE_DTYPES[v['dtype']], tuple(v['shape']), v['data_offsets']
    except (KeyError, TypeError, ValueError): raise SafetensorsError(f"{fn}: bad entry for '{k}': {v}") from None
    store = np.dtype(np.uint16 if dt is dtypes.bfloat16 else dt.np).newbyteorder('<')
    if not 0 <= lo <= hi <= raw.size or hi - lo != int(np.prod(shape)) * store.itemsize:
      raise SafetensorsError(f"{fn}: '{k}' of {v['dtype']}{list(shape)} does not fit data_offsets [{lo}, {hi}]")
    arr = raw[lo:hi].view(store).astype(store.newbyteorder('='), copy=True).reshape(shape)
    out[k] = Tensor(arr, device=device).bitcast(dt) if dt is dtypes.bfloat16 else Tensor(arr, dtype=dt, device=device)
  return out
