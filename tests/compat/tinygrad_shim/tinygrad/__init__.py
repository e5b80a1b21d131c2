"""A `tinygrad` package over tgc, for running tinygrad's own test files against tgc.

It supplies test infrastructure only (env flags, Context, the Device registry's shape, a renderer class to test
`isinstance` against); every Tensor op, dtype and device is tgc's own.
"""
from tgc.tensor import Tensor, dtypes
from tinygrad.device import Device

TinyJit = Tensor.jit

__all__ = ['Tensor', 'dtypes', 'Device', 'TinyJit']
