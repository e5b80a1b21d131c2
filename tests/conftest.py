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
