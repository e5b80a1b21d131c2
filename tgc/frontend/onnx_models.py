"""The real models of the ONNX checks (from pip wheels: rapidocr-onnxruntime, silero-vad) with synthetic inputs."""
from __future__ import annotations
import importlib.util, os
import numpy as np

def _file(package: str, *parts: str) -> str | None:
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations: return None
  p = os.path.join(list(spec.submodule_search_locations)[0], *parts)
  return p if os.path.exists(p) else None

def ppocr_cls():
  """PP-OCR's text direction classifier on a synthetic 48x192 crop: dark strokes on a light background."""
  rng = np.random.default_rng(0)
  img = np.full((48, 192), 0.9, np.float32)
  for k in range(8): img[12:36, 10 + 22 * k:22 + 22 * k] = 0.1 + 0.05 * rng.standard_normal((24, 12))
  x = ((np.stack([img] * 3) - 0.5) / 0.5)[None].astype(np.float32)
  return _file('rapidocr_onnxruntime', 'models', 'ch_ppocr_mobile_v2.0_cls_infer.onnx'), {'x': x}

def silero_vad():
  """silero VAD (op18, ifless) on 512 samples of a 440 Hz tone plus noise at 16 kHz, from a zero state."""
  t = np.arange(512) / 16000
  x = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.random.default_rng(0).standard_normal(512)).astype(np.float32)[None]
  feeds = {'input': x, 'sr': np.array(16000, np.int64), 'state': np.zeros((2, 1, 128), np.float32)}
  return _file('silero_vad', 'data', 'silero_vad_op18_ifless.onnx'), feeds

MODELS = {'ppocr_cls': (ppocr_cls, 'rapidocr-onnxruntime'), 'silero_vad': (silero_vad, 'silero-vad')}
