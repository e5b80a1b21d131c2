"""The exceptions tgc raises for a user's mistakes. Everything a user can get wrong is a TgcError."""
from __future__ import annotations


class TgcError(Exception):
  """Base of every error caused by the user's input (IR text, API arguments, flags)."""

class ShapeError(TgcError, ValueError, RuntimeError):
  """Shapes that do not fit the operation (a RuntimeError too, as torch raises for shape mismatches)."""

class DTypeError(TgcError, TypeError):
  """A dtype the operation or the device does not support."""

class AxisError(TgcError, IndexError):
  """An axis out of range, or repeated."""

class IndexingError(TgcError, IndexError):
  """A bad index or slice."""

class ArgumentError(TgcError, ValueError):
  """A bad argument that is neither a shape, a dtype, an axis nor an index (e.g. a step of 0)."""

class OutOfMemory(TgcError, MemoryError):
  """A device (the host's memory for the CPU devices) could not hold a buffer (a MemoryError too)."""
