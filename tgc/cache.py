"""The disk cache of compiled binaries (CPU object code, C shared libraries, CUDA cubins), shared by processes.

An entry is one file, `<dir>/<kind>/<key[:2]>/<key>`, whose first 32 bytes are the SHA-256 of the rest: a file cut
short or damaged reads as missing (it is removed, and the caller compiles and writes it anew), never as code. A
writer writes a temporary file of its own and renames it into place, so a concurrent reader sees a whole entry or
none, and two processes that compile the same thing at once both write the same bytes. `key()` hashes what a binary
depends on: the source, the target and its architecture, the compiler's version and flags, tgc's version.

Where: $TGC_CACHE_DIR, else $TGC_CACHE when it names a directory, else $XDG_CACHE_HOME/tgc, else ~/.cache/tgc.
TGC_CACHE=0 turns the cache off (every process compiles everything); a directory that cannot be made turns it off too.
"""
from __future__ import annotations
import hashlib, os, threading

stats = {'hits': 0, 'misses': 0, 'writes': 0, 'corrupt': 0}


def cache_dir() -> str | None:
  """The cache's root directory (made if missing), or None where the cache is off or cannot be made."""
  env = os.environ.get('TGC_CACHE', '')
  if env == '0': return None
  d = os.environ.get('TGC_CACHE_DIR') or (env if env not in ('', '1') else None) or \
      os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'), 'tgc')
  try: os.makedirs(d, exist_ok=True)
  except OSError: return None
  return d


def key(*parts: str | bytes) -> str:
  """The entry name for a binary made from `parts` (source, target, compiler version, flags...) by this tgc."""
  from tgc import __version__
  h = hashlib.sha256(f"tgc {__version__}".encode())
  for p in parts:
    b = p.encode() if isinstance(p, str) else p
    h.update(len(b).to_bytes(8, 'little')); h.update(b)  # (lengths first: ('ab', 'c') and ('a', 'bc') differ)
  return h.hexdigest()


def _path(kind: str, k: str) -> str | None:
  d = cache_dir()
  return d and os.path.join(d, kind, k[:2], k)


def get(kind: str, k: str) -> bytes | None:
  """The bytes stored under (kind, key), or None: missing, the cache off, or a damaged entry (then removed)."""
  p = _path(kind, k)
  if p is None: return None
  try:
    with open(p, 'rb') as f: data = f.read()
  except OSError:
    stats['misses'] += 1; return None
  if len(data) >= 32 and hashlib.sha256(memoryview(data)[32:]).digest() == data[:32]:
    stats['hits'] += 1; return data[32:]
  stats['corrupt'] += 1; stats['misses'] += 1
  try: os.unlink(p)
  except OSError: pass
  return None


def put(kind: str, k: str, data: bytes) -> None:
  """Store data under (kind, key) atomically; a cache that cannot be written is silently skipped."""
  p = _path(kind, k)
  if p is None: return
  tmp = f"{p}.{os.getpid()}.{threading.get_ident()}.tmp"
  try:
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(tmp, 'wb') as f: f.write(hashlib.sha256(data).digest()); f.write(data)
    os.replace(tmp, p)
    stats['writes'] += 1
  except OSError:
    try: os.unlink(tmp)
    except OSError: pass


def entries(kind: str) -> list[str]:
  """The paths of the entries of a kind (tests, tools)."""
  d = cache_dir()
  if d is None: return []
  root = os.path.join(d, kind)
  return sorted(os.path.join(r, f) for r, _, fs in os.walk(root) for f in fs if not f.endswith('.tmp'))
