"""tinygrad's `Device`: tgc's registry, whose devices answer `.renderer` (tgc has no separate renderer object)."""
from tgc.runtime import Device as _tgc_device
from tgc.tensor import dtypes


class _Renderer:
  """What tinygrad's tests ask a renderer: its name (the tgc target's) and the dtypes it computes in (every tgc
  target takes every dtype of tgc.dtypes.all; the lowering emulates those a language lacks)."""
  def __init__(self, target: str): self.target = target
  def supported_dtypes(self): return set(dtypes.all)
  def __repr__(self): return f'Renderer({self.target})'


class _Opened:
  def __init__(self, dev): self._dev, self.renderer = dev, _Renderer(getattr(dev, 'target', ''))
  def __getattr__(self, name): return getattr(self._dev, name)


class _Device:
  @property
  def DEFAULT(self) -> str: return _tgc_device.DEFAULT
  @DEFAULT.setter
  def DEFAULT(self, v: str) -> None: _tgc_device.DEFAULT = v
  def __getitem__(self, name: str): return _Opened(_tgc_device[name])
  def canonicalize(self, name): return _tgc_device.canonicalize(name)


Device = _Device()
