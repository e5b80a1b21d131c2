"""Attribute values: what the parser reads, how each kind is checked and stored, and how it prints.

Stored values are hashable (tuples, not lists) so that cse can compare ops by their attributes.
Kinds: int, number, dense (scalar or nested list), ints, pairs, ident, str, symbol, views, records, any.
"""
from __future__ import annotations
import math


class Ident(str):
  """A bare identifier in the custom form (`add` in `tensor.reduce add`)."""

class Symbol(str):
  """`@name`: a reference to a function or kernel."""
  def __repr__(self): return f"@{str(self)}"

class Record:
  """`name(key = value, ...)`: a structured attribute such as one view of a view stack."""
  __slots__ = ('name', 'fields')
  def __init__(self, name: str, fields: dict):
    self.name, self.fields = name, dict(fields)
  def _key(self): return (self.name, tuple(sorted(self.fields.items())))
  def __eq__(self, o): return isinstance(o, Record) and self._key() == o._key()
  def __hash__(self): return hash(self._key())
  def __repr__(self): return f"Record({self.name}, {self.fields})"

class HexInt(int):
  """An integer literal written in hex: for a float type it is the bit pattern."""

class LList(list):
  """A parsed `[...]`; `depth` guards against hostile nesting."""
  __slots__ = ('depth',)

class Tup(tuple):
  """A parsed `(...)`."""

class Ref:
  """A use of an SSA value in the source, resolved by the parser."""
  __slots__ = ('name', 'line', 'col')
  def __init__(self, name, line, col): self.name, self.line, self.col = name, line, col


class AttrError(ValueError):
  pass


def _is_int(v): return isinstance(v, int) and not isinstance(v, bool)

def _ints(v, what='a list of integers'):
  if not isinstance(v, (list, tuple)) or not all(_is_int(x) for x in v): raise AttrError(f"expected {what}")
  return tuple(int(x) for x in v)

def _dense(v):
  if isinstance(v, (list, tuple)): return tuple(_dense(x) for x in v)
  if isinstance(v, Ident) and v in ('true', 'false'): return int(v == 'true')
  if isinstance(v, bool): return int(v)
  if isinstance(v, (int, float)): return v
  raise AttrError("expected a number or a nested list of numbers")

def normalize(kind: str, v):
  """Check a value against its kind and return its stored form."""
  kind = kind.rstrip('?')
  if kind == 'int':
    if not _is_int(v): raise AttrError("expected an integer")
    return int(v)
  if kind == 'number':
    if isinstance(v, bool): return int(v)
    if isinstance(v, Ident) and v in ('true', 'false'): return int(v == 'true')
    if isinstance(v, HexInt): return v
    if isinstance(v, (int, float)): return v
    raise AttrError("expected a number")
  if kind == 'dense': return _dense(v)
  if kind == 'ints': return _ints(v)
  if kind == 'pairs':
    if not isinstance(v, (list, tuple)): raise AttrError("expected a list of pairs")
    return tuple(_ints(p, 'a pair of integers') if isinstance(p, (list, tuple)) and len(p) == 2 else _bad_pair() for p in v)
  if kind in ('ident', 'str'):
    if not isinstance(v, str): raise AttrError("expected a name" if kind == 'ident' else "expected a string")
    return str(v)
  if kind == 'symbol':
    if not isinstance(v, str): raise AttrError("expected a symbol (@name)")
    return Symbol(v)
  if kind == 'views':
    from tgc.shape import ViewStack
    if isinstance(v, ViewStack): return v
    return views_from_records(v)
  if kind == 'records':
    if not isinstance(v, (list, tuple)) or not all(isinstance(r, Record) for r in v): raise AttrError("expected a list of name(key = value) records")
    return tuple(v)
  return _freeze(v)

def _bad_pair(): raise AttrError("expected a list of pairs (a, b)")

def _freeze(v):
  if isinstance(v, LList): return tuple(_freeze(x) for x in v)
  if isinstance(v, list): return tuple(_freeze(x) for x in v)
  return v

def views_from_records(v):
  from tgc.shape import View, ViewStack
  if isinstance(v, Record): v = [v]
  if not isinstance(v, (list, tuple)) or not v: raise AttrError("expected a view stack: [view(shape = [...], strides = [...], offset = 0)]")
  views = []
  for r in v:
    if not isinstance(r, Record) or r.name != 'view': raise AttrError("expected view(shape = [...], strides = [...], offset = N, mask = [...])")
    unknown = set(r.fields) - {'shape', 'strides', 'offset', 'mask'}
    if unknown: raise AttrError(f"unknown view field '{sorted(unknown)[0]}'")
    shape = _ints(r.fields.get('shape', ()), 'view shape to be a list of integers')
    strides = _ints(r.fields.get('strides', ()), 'view strides to be a list of integers')
    if len(strides) != len(shape): raise AttrError(f"view has {len(shape)} sizes but {len(strides)} strides")
    if any(s < 0 for s in shape): raise AttrError("view sizes must be non-negative")
    off = r.fields.get('offset', 0)
    if not _is_int(off): raise AttrError("view offset must be an integer")
    mask = r.fields.get('mask')
    if mask is not None:
      mask = normalize('pairs', mask)
      if len(mask) != len(shape): raise AttrError(f"view mask has {len(mask)} ranges for {len(shape)} axes")
    views.append(View.create(shape, strides, int(off), mask))
  return ViewStack(tuple(views))


# ---- printing ----
def fmt_float(x: float) -> str:
  if math.isnan(x): return 'nan'
  if math.isinf(x): return 'inf' if x > 0 else '-inf'
  r = repr(float(x))
  return r

def fmt_value(v) -> str:
  """Generic attribute syntax for a stored value."""
  if isinstance(v, bool): return 'true' if v else 'false'
  if isinstance(v, Symbol): return f"@{v}"
  if isinstance(v, str): return '"' + v.replace('\\', '\\\\').replace('"', '\\"') + '"'
  if isinstance(v, float): return fmt_float(v)
  if isinstance(v, HexInt): return hex(v)
  if isinstance(v, int): return str(int(v))
  if isinstance(v, Record): return f"{v.name}(" + ', '.join(f"{k} = {fmt_value(x)}" for k, x in v.fields.items()) + ")"
  if isinstance(v, Tup): return '(' + ', '.join(fmt_value(x) for x in v) + ')'
  if isinstance(v, (tuple, list)): return '[' + ', '.join(fmt_value(x) for x in v) + ']'
  from tgc.shape import ViewStack
  if isinstance(v, ViewStack): return fmt_views(v)
  return str(v)

def fmt_attr(kind: str, v, custom: bool = False) -> str:
  kind = kind.rstrip('?')
  if kind == 'ident' and custom: return str(v)
  if kind == 'pairs': return '[' + ', '.join(f"({a}, {b})" for a, b in v) + ']'
  if kind == 'views': return fmt_views(v)
  return fmt_value(v)

def fmt_views(vs) -> str:
  out = []
  for w in vs.views:
    s = f"view(shape = [{', '.join(map(str, w.shape))}], strides = [{', '.join(map(str, w.strides))}], offset = {w.offset}"
    if w.mask is not None: s += ', mask = [' + ', '.join(f"({a}, {b})" for a, b in w.mask) + ']'
    out.append(s + ')')
  return '[' + ', '.join(out) + ']'
