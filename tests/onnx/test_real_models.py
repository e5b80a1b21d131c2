"""Real models with trained weights vs onnxruntime, within 1e-4 relative (of the output's largest magnitude).

Slow (the CNNs compile 100-150 kernels each): runs with TGC_ONNX=models or TGC_ONNX=all (docs/onnx.md); needs the wheels
rapidocr-onnxruntime and silero-vad (pip install --no-deps) and onnxruntime."""
import os
import numpy as np
import pytest
pytest.importorskip('onnx', reason="the onnx package is not installed")
ort = pytest.importorskip('onnxruntime', reason="onnxruntime is not installed (the reference)")
from tgc.frontend.onnx_models import MODELS
import tgc

pytestmark = pytest.mark.skipif(os.environ.get('TGC_ONNX') not in ('models', 'all'), reason="real models run with TGC_ONNX=models")

@pytest.mark.parametrize('name', sorted(MODELS))
def test_real_model_matches_onnxruntime(name):
  make, package = MODELS[name]
  path, feeds = make()
  if path is None: pytest.skip(f"{package} is not installed (pip install --no-deps {package})")
  ours = tgc.onnx.load(path)(**feeds)
  ref = ort.InferenceSession(path, providers=['CPUExecutionProvider']).run(None, feeds)
  assert len(ours) == len(ref)
  for a, b in zip(ours, ref):
    assert a.shape == b.shape
    assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max(), (name, np.abs(a - b).max(), np.abs(b).max())
