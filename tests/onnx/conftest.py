"""The fast subset deselects the node tests outside it (ONNX's BackendTest would report each as skipped: thousands of
skips that are not tests of tgc)."""
import os


def pytest_collection_modifyitems(config, items):
  if os.environ.get('TGC_ONNX') == 'all': return
  try: from test_onnx_backend import FAST
  except Exception: return  # onnx missing: that module's own skip says so
  keep = {f'{n}_cpu' for n in FAST}
  chosen, dropped = [], []
  for it in items:
    backend = 'test_onnx_backend' in it.nodeid
    (chosen if not backend or it.name in keep else dropped).append(it)
  if dropped:
    config.hook.pytest_deselected(items=dropped)
    items[:] = chosen
