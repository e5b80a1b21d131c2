"""The exceptions tgc raises for a user's mistakes. Everything a user can get wrong is a TgcError.

Each is also the builtin exceptions tinygrad and torch raise for the same mistake, so code written for either
catches it: a RuntimeError always (torch's error for a bad op), and the builtin that names the kind of mistake.
"""
from __future__ import annotations


class TgcError(Exception):
  """Base of every error caused by the user's input (IR text, API arguments, flags)."""

class ShapeError(TgcError, ValueError, RuntimeError):
  """Shapes that do not fit the operation."""

class DTypeError(TgcError, TypeError, RuntimeError):
  """A dtype the operation or the device does not support."""

class DTypeNameError(DTypeError, AttributeError):
  """A dtype name that names none (an AttributeError too: tinygrad looks names up as attributes of dtypes)."""

class AxisError(TgcError, IndexError, RuntimeError):
  """An axis out of range, or repeated."""

class IndexingError(TgcError, IndexError, RuntimeError):
  """A bad index or slice."""

class SliceStepError(IndexingError, ValueError):
  """A slice step of 0 (a ValueError too, as Python's own slices raise)."""

class ArgumentError(TgcError, ValueError, RuntimeError):
  """A bad argument that is neither a shape, a dtype, an axis nor an index (e.g. a step of 0)."""

class UnsupportedError(ArgumentError, NotImplementedError):
  """An option value that names no mode tgc implements (an unknown pad mode)."""

class OutOfMemory(TgcError, MemoryError):
  """A device (the host's memory for the CPU devices) could not hold a buffer (a MemoryError too)."""
