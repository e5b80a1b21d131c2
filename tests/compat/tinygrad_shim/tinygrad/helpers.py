"""tinygrad.helpers' test-facing names: env flags and Context (tgc has no NOOPT-like global knobs, so Context
only records the values for the duration of its block)."""
import contextlib, functools, os, sys


@functools.cache
def getenv(key: str, default=0): return type(default)(os.getenv(key, default))


DEBUG, IMAGE, CI = getenv('DEBUG'), getenv('IMAGE'), bool(getenv('CI', ''))
OSX = sys.platform == 'darwin'


class _Dev:
  """What tinygrad's DEV describes: the device, its interface and renderer (tgc: the device's own names)."""
  def __init__(self):
    from tinygrad.device import Device
    self.device = self.interface = Device.DEFAULT
    self.renderer = "LLVM" if Device.DEFAULT == "CPU" else Device.DEFAULT  # tgc's CPU device is an LLVM JIT


DEV = _Dev()


class ContextVar:
  def __init__(self, key, default): self.key, self.value = key, getenv(key, default)
  def __bool__(self): return bool(self.value)
  def __ge__(self, x): return self.value >= x
  def __gt__(self, x): return self.value > x
  def __lt__(self, x): return self.value < x


@contextlib.contextmanager
def Context(**kwargs):
  yield


def prod(x):
  import math
  return math.prod(x)


def all_same(items): return all(x == items[0] for x in items)
def flatten(x): return [item for sub in x for item in sub]
