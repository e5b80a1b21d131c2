"""decompose-transcendentals: the polynomial exp2, log2 and sin stay within 2 ulp of numpy over their whole
range (infinities, NaN, zeros, subnormals), on the CPU and the interpreter, scalar and vectorised."""
import numpy as np
import pytest
from tgc import ir
from tgc.passes import PassManager
from tgc.compiler import compile_module

N = 2048
CASES = {
  'exp2': (np.exp2, np.concatenate([np.linspace(-160, 130, N - 8), [np.inf, -np.inf, np.nan, 0, -0.0, 1e-30, -149.5, 127.9]])),
  'log2': (np.log2, np.concatenate([np.exp(np.linspace(-100, 88, N - 10)), [0, -1, np.inf, np.nan, 1e-40, 1e-45, 1, 2, 0.5, 3.4e38]])),
  'sin': (np.sin, np.concatenate([np.linspace(-1e4, 1e4, N - 4), [0, np.inf, np.nan, -np.inf]])),
}

def run(fname, x, device, upcast):
  n = len(x)
  text = f"""func.func @f(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = tensor.{fname} %a : tensor<{n}xf32>
  func.return %0 : tensor<{n}xf32>
}}"""
  m = ir.parse(text)
  opt = f"kernel-opt{{upcast={upcast}}}," if upcast else ""
  PassManager.parse(f'canonicalize,kernelize,{opt}linearize,uop-simplify,decompose-transcendentals{{ops={fname}}},cse,dce').run(m)
  assert not any(op.name == f'uop.{fname}' for fn in m.functions('uop.func') for op in fn.body.ops)
  return compile_module(m, device)(x)[0]

@pytest.mark.parametrize("upcast", [0, 8])
@pytest.mark.parametrize("device", ["CPU", "INTERP"])
@pytest.mark.parametrize("fname", list(CASES))
def test_within_2_ulp(fname, device, upcast):
  npf, xs = CASES[fname]
  x = xs.astype(np.float32)
  if device == "INTERP": x = x[::16].copy()
  got = run(fname, x, device, upcast)
  with np.errstate(all='ignore'): want = npf(x)
  same_nonfinite = (got == want) | (np.isnan(got) & np.isnan(want))
  fin = np.isfinite(want)
  assert same_nonfinite[~fin].all(), (x[~fin], got[~fin], want[~fin])
  err = np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
  assert err.max() <= 2.0, (fname, x[fin][err.argmax()], got[fin][err.argmax()], want[fin][err.argmax()])


F16 = {'exp': (np.exp, np.linspace(-16, 11, 4001)), 'log': (np.log, np.exp(np.linspace(-9, 11, 4001))),
       'sigmoid': (lambda v: 1 / (1 + np.exp(-v)), np.linspace(-16, 16, 4001)), 'tanh': (np.tanh, np.linspace(-6, 6, 4001)),
       'cos': (np.cos, np.linspace(-20, 20, 4001))}

@pytest.mark.parametrize("fname", list(F16))
def test_f16_compositions_round_once(fname):
  """Tensor.exp, log, sigmoid, tanh and cos of f16 compute in float32 and round once: within 1 ulp of the exact value
  rounded to f16 (x * log2(e) rounded to f16 on the way cost exp 10 ulp, 2s - 1 tanh 91, pi/2 - x cos thousands)."""
  from tgc import Tensor
  f, xs = F16[fname]
  x = xs.astype(np.float16)
  want = f(x.astype(np.float64)).astype(np.float16)
  got = getattr(Tensor(x), fname)().numpy()
  assert got.dtype == np.float16
  ulps = np.abs(got.view(np.int16).astype(np.int64) - want.view(np.int16).astype(np.int64))
  assert ulps.max() <= 1, (fname, x[ulps.argmax()], got[ulps.argmax()], want[ulps.argmax()])
