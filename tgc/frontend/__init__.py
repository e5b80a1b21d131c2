"""Front ends: other formats that become tensor-dialect text (ONNX in tgc.frontend.onnx)."""
