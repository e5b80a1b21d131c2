"""The real models of the ONNX checks (from pip wheels: rapidocr-onnxruntime, silero-vad) with synthetic inputs."""
from __future__ import annotations
import importlib.util, math, os
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


# ---- models exported by torch (its legacy TorchScript exporter: the dynamo one needs onnxscript) from small
# configs built here of plain torch.nn modules, random weights (seeded): the kinds of model a model library holds
def _torch_model(name: str, build, feeds: dict):
  """The ONNX file of torch module build() exported on feeds (cached per process in a temporary folder)."""
  try: import torch
  except ImportError: return None, feeds
  import atexit, shutil, tempfile, warnings
  if 'dir' not in _TMP: _TMP['dir'] = tempfile.mkdtemp(prefix='tgc-torch-models-'); atexit.register(shutil.rmtree, _TMP['dir'], True)
  path = os.path.join(_TMP['dir'], name + '.onnx')
  if not os.path.exists(path):
    torch.manual_seed(0)
    m = build(torch.nn).eval()
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with torch.no_grad(), warnings.catch_warnings():
      warnings.simplefilter('ignore')  # (the tracer's warnings about shapes read as Python ints)
      torch.onnx.export(m, args, path, input_names=list(feeds), output_names=['out'], opset_version=17, dynamo=False)
  return path, feeds
_TMP: dict = {}

def _block(nn, d: int, heads: int, causal: bool):
  """A pre-norm transformer block (GPT-2's and ViT's; BERT's is post-norm): attention written out (q k v, softmax, mask)
  as the model libraries write it, so the export shows its MatMuls, Softmax and Where."""
  import torch
  class Block(nn.Module):
    def __init__(self, pre: bool):
      super().__init__()
      self.pre, self.ln1, self.ln2 = pre, nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
      self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate='tanh' if causal else 'none'), nn.Linear(4 * d, d))
    def attn(self, x, mask):
      b, t, _ = x.shape
      q, k, v = self.qkv(x).reshape(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
      s = q @ k.transpose(-1, -2) / math.sqrt(d // heads)
      if causal: s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float('-inf'))
      if mask is not None: s = s + mask
      return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
    def forward(self, x, mask=None):
      if self.pre: x = x + self.attn(self.ln1(x), mask); return x + self.mlp(self.ln2(x))
      x = self.ln1(x + self.attn(x, mask)); return self.ln2(x + self.mlp(x))
  return Block

def gpt2():
  """A GPT-2 style decoder: 2 layers, d 128, 2 heads, vocab 1000, 2x64 tokens -> logits."""
  def build(nn):
    import torch
    class GPT(nn.Module):
      def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(1000, 128), nn.Embedding(64, 128)
        Block = _block(nn, 128, 2, causal=True)
        self.blocks, self.ln = nn.ModuleList([Block(True) for _ in range(2)]), nn.LayerNorm(128)
      def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.blocks: x = b(x)
        return self.ln(x) @ self.wte.weight.T
    return GPT()
  return _torch_model('gpt2', build, {'ids': np.random.default_rng(0).integers(0, 1000, (2, 64))})

def bert():
  """A BERT style encoder: 2 post-norm layers, d 128, 2 heads, vocab 1000, 2x64 tokens with an attention mask."""
  def build(nn):
    import torch
    class Bert(nn.Module):
      def __init__(self):
        super().__init__()
        self.word, self.pos, self.types = nn.Embedding(1000, 128), nn.Embedding(64, 128), nn.Embedding(2, 128)
        self.ln = nn.LayerNorm(128)
        Block = _block(nn, 128, 2, causal=False)
        self.blocks = nn.ModuleList([Block(False) for _ in range(2)])
        self.pool = nn.Linear(128, 128)
      def forward(self, ids, types, mask):
        x = self.ln(self.word(ids) + self.pos(torch.arange(ids.shape[1])) + self.types(types))
        m = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for b in self.blocks: x = b(x, m)
        return torch.tanh(self.pool(x[:, 0]))
    return Bert()
  rng = np.random.default_rng(1)
  mask = np.ones((2, 64), np.int64); mask[1, 48:] = 0
  return _torch_model('bert', build, {'ids': rng.integers(0, 1000, (2, 64)), 'types': (np.arange(64)[None] >= 32).repeat(2, 0).astype(np.int64), 'mask': mask})

def vit():
  """A ViT: 8x8 patches of a 64x64 image (64 tokens and a class token), 2 pre-norm layers, d 128, 2 heads, 10 classes."""
  def build(nn):
    import torch
    class ViT(nn.Module):
      def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 128, 8, 8)
        self.cls, self.pos = nn.Parameter(torch.randn(1, 1, 128) * 0.02), nn.Parameter(torch.randn(1, 65, 128) * 0.02)
        Block = _block(nn, 128, 2, causal=False)
        self.blocks, self.ln, self.head = nn.ModuleList([Block(True) for _ in range(2)]), nn.LayerNorm(128), nn.Linear(128, 10)
      def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks: x = b(x)
        return self.head(self.ln(x)[:, 0])
    return ViT()
  return _torch_model('vit', build, {'img': np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)})

def resnet():
  """A ResNet of basic blocks: a 7x7 stem, max pool, 4 stages (16, 32, 64, 128 channels), a 96x96 image, 10 classes."""
  def build(nn):
    class Basic(nn.Module):
      def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else nn.Identity()
      def forward(self, x): return (self.body(x) + self.skip(x)).relu()
    chans = [16, 32, 64, 128]
    layers = [nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    for i, c in enumerate(chans): layers += [Basic(chans[max(i - 1, 0)], c, 1 if i == 0 else 2), Basic(c, c, 1)]
    m = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    for mod in m.modules():  # BatchNorm's running statistics away from (0, 1), as a trained model's are
      if isinstance(mod, nn.BatchNorm2d): nn.init.uniform_(mod.running_mean, -0.1, 0.1); nn.init.uniform_(mod.running_var, 0.5, 1.5)
    return m
  return _torch_model('resnet', build, {'img': np.random.default_rng(3).standard_normal((1, 3, 96, 96)).astype(np.float32)})

def torch_transformer():
  """torch.nn.TransformerEncoder: 2 layers, d 256, 4 heads, feed-forward 1024, 2x64 tokens (batch first)."""
  def build(nn):
    import torch
    torch.backends.mha.set_fastpath_enabled(False)  # (its fused fast path has no ONNX export)
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
  return _torch_model('torch_transformer', build, {'x': np.random.default_rng(4).standard_normal((2, 64, 256)).astype(np.float32)})

TORCH_MODELS = {'gpt2': (gpt2, 'torch'), 'bert': (bert, 'torch'), 'vit': (vit, 'torch'), 'resnet': (resnet, 'torch'),
                'torch_transformer': (torch_transformer, 'torch')}
MODELS.update(TORCH_MODELS)
