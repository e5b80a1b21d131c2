"""Shared pytest set-up. The Tensor tests (those that use the `_default_device` fixture) run on the device named by $TGC_TEST_DEVICE (default: INTERP, the
reference interpreter); a test with a `dev` parameter runs on that device instead. On the GPU machine,
`TGC_TEST_DEVICE=CUDA python -m pytest tests/test_tensor_*.py` runs the whole matrix on CUDA."""
import os, sys
import pytest
import tgc

sys.path.insert(0, os.path.dirname(__file__))  # test modules import helpers from each other


@pytest.fixture
def _default_device(request):
  cs = getattr(request.node, 'callspec', None)
  base = os.environ.get('TGC_TEST_DEVICE', 'INTERP')
  dev = cs.params.get('dev', base) if cs is not None else base
  old = tgc.Device._default
  tgc.Device.DEFAULT = dev
  yield dev
  tgc.Device._default = old


_unavailable: dict = {}

def device_unavailable(dev: str):
  """Why `dev` cannot run on this machine (its TgcError), or None."""
  if dev not in _unavailable:
    try: tgc.Device[dev]; _unavailable[dev] = None
    except tgc.TgcError as e: _unavailable[dev] = str(e)
  return _unavailable[dev]


@pytest.fixture(autouse=True)
def _device_available(request):
  """A test run on a named device (a `dev` parameter) that this machine cannot open is skipped with the reason
  (tests/run_all.py reports skips apart from passes)."""
  cs = getattr(request.node, 'callspec', None)
  dev = cs.params.get('dev') if cs is not None else None
  why = device_unavailable(dev) if isinstance(dev, str) and dev.isupper() else None
  if why: pytest.skip(why)
