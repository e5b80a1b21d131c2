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

def _text_page(rng, h: int, w: int) -> np.ndarray:
  """A light page (h x w, values in [0, 1]) with dark text-like lines: rows of glyph-sized strokes, some joined."""
  img = np.full((h, w), 0.92, np.float32) + 0.02 * rng.standard_normal((h, w)).astype(np.float32)
  for top in range(h // 8, h - 28, 40):
    x = int(rng.integers(8, 32))
    while x < w - 24:
      gw = int(rng.integers(8, 16))
      img[top + 4:top + 24, x:x + 2] = 0.15                             # a glyph: two stems and a bar
      img[top + 4:top + 24, x + gw - 2:x + gw] = 0.15
      img[top + int(rng.integers(6, 20)), x:x + gw] = 0.15
      x += gw + int(rng.integers(3, 8)) + (int(rng.integers(12, 24)) if rng.random() < 0.15 else 0)
  return np.clip(img, 0, 1)

def ppocr_det():
  """PP-OCRv4's text detector (a DB head over a PP-LCNet backbone) on a synthetic 320x320 page of text lines,
  normalised as PP-OCR does for det: (x - ImageNet mean) / ImageNet std, per channel."""
  rng = np.random.default_rng(0)
  img = np.stack([_text_page(rng, 320, 320)] * 3)
  tint = np.array([1.0, 0.97, 0.93], np.float32)[:, None, None]  # a slightly warm page, so the channels differ
  mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
  x = ((img * tint - mean[:, None, None]) / std[:, None, None])[None].astype(np.float32)
  return _file('rapidocr_onnxruntime', 'models', 'ch_PP-OCRv4_det_infer.onnx'), {'x': x}

def ppocr_rec():
  """PP-OCRv4's text recogniser (an SVTR-LCNet: a CNN then attention blocks, a CTC head over 6625 characters) on a
  synthetic 48x320 text line crop, normalised as PP-OCR does for rec: (x - 0.5) / 0.5."""
  rng = np.random.default_rng(1)
  line = _text_page(rng, 48, 320)[None]  # (one line: the first row of glyphs starts at 6)
  x = ((np.concatenate([line] * 3) - 0.5) / 0.5)[None].astype(np.float32)
  return _file('rapidocr_onnxruntime', 'models', 'ch_PP-OCRv4_rec_infer.onnx'), {'x': x}

def silero_vad():
  """silero VAD (op18, ifless) on 512 samples of a 440 Hz tone plus noise at 16 kHz, from a zero state."""
  t = np.arange(512) / 16000
  x = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.random.default_rng(0).standard_normal(512)).astype(np.float32)[None]
  feeds = {'input': x, 'sr': np.array(16000, np.int64), 'state': np.zeros((2, 1, 128), np.float32)}
  return _file('silero_vad', 'data', 'silero_vad_op18_ifless.onnx'), feeds

MODELS = {'ppocr_cls': (ppocr_cls, 'rapidocr-onnxruntime'), 'ppocr_det': (ppocr_det, 'rapidocr-onnxruntime'),
          'ppocr_rec': (ppocr_rec, 'rapidocr-onnxruntime'), 'silero_vad': (silero_vad, 'silero-vad')}
