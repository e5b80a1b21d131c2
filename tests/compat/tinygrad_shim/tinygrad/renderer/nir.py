from tinygrad.renderer import Renderer


class NIRRenderer(Renderer):
  """No tgc device is a NIR renderer: `isinstance(Device[...].renderer, NIRRenderer)` is False."""
