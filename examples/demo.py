"""The demo: a tensor program compiled by tgc and run on the CPU (LLVM JIT), every level printed.

    pip install -e . && python examples/demo.py
"""
import numpy as np
import tgc
from tgc import ir
from tgc.passes import PassManager

SOURCE = """
func.func @softmax_rows(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = tensor.reduce max %x [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %me = tensor.expand %m : tensor<4x1xf32> -> tensor<4x8xf32>
  %d = tensor.sub %x, %me : tensor<4x8xf32>
  %log2e = tensor.const 1.4426950408889634 : tensor<4x8xf32>
  %s = tensor.mul %d, %log2e : tensor<4x8xf32>
  %e = tensor.exp2 %s : tensor<4x8xf32>
  %sum = tensor.reduce add %e [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %se = tensor.expand %sum : tensor<4x1xf32> -> tensor<4x8xf32>
  %o = tensor.fdiv %e, %se : tensor<4x8xf32>
  func.return %o : tensor<4x8xf32>
}
"""

def banner(s): print(f"\n===== {s} " + "=" * (60 - len(s)))

if __name__ == '__main__':
  banner("tensor level (input)")
  m = ir.parse(SOURCE, "demo.tgc"); print(m)
  banner("kernel level: after kernelize")
  PassManager.parse("canonicalize,tensor-decompose,cse,kernelize").run(m); print(m)
  banner("uop level: after linearize, uop-simplify")
  PassManager.parse("linearize,uop-simplify,cse,dce").run(m); print(m)
  banner("LLVM IR of the first kernel")
  print(tgc.emit.render(ir.Module([m.functions('uop.func')[0]]), "llvm"))
  banner("run on the CPU")
  x = np.arange(32, dtype=np.float32).reshape(4, 8) / 8
  (out,) = tgc.compile(SOURCE, device="CPU")(x)
  ref = np.exp(x - x.max(1, keepdims=True)); ref /= ref.sum(1, keepdims=True)
  np.set_printoptions(precision=4, suppress=True)
  print(out)
  print("max |tgc - numpy| =", float(np.abs(out - ref).max()))
