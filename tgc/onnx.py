"""ONNX models in tgc: `tgc.onnx.load(model)` gives a callable, `import_text` the tensor-dialect text and its
weights, and `prepare` / `run_model` / `supports_device` / `backend()` are ONNX's backend interface (docs/onnx.md).
The importer itself is tgc.frontend.onnx; this module is its public surface."""
from tgc.frontend.onnx import OnnxModel, OnnxError, load, import_text, backend, prepare, run_model, supports_device

__all__ = ['OnnxModel', 'OnnxError', 'load', 'import_text', 'backend', 'prepare', 'run_model', 'supports_device']
