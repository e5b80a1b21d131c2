"""Pass rates of a node-suite run: `python tests/onnx/scope.py run.xml` (pytest's --junitxml) prints the rate on
the in-scope ops (those in SCOPE below, with their _expanded variants) and on the whole suite, and with
--exclusions writes the failures as exclusions.txt lines (pattern  # the error's first line)."""
import re, sys, warnings
import xml.etree.ElementTree as ET

SCOPE = set('''Add Sub Mul Div Pow Neg Abs Sqrt Reciprocal Exp Log Erf Tanh Sigmoid HardSigmoid HardSwish Relu LeakyRelu Elu
Gelu Clip Where Equal Less Greater Not Cast Min Max Sum Mean MatMul Gemm Conv ConvTranspose BatchNormalization
LayerNormalization InstanceNormalization MaxPool AveragePool GlobalAveragePool Softmax LogSoftmax ReduceSum ReduceMean
ReduceMax ReduceMin ArgMax Reshape Transpose Flatten Squeeze Unsqueeze Concat Split Slice Gather Expand Pad Tile Shape
Size Range ConstantOfShape Constant Identity Dropout Trilu Resize'''.split())

def in_scope() -> set[str]:
  """Node tests whose model's ops are all in scope; an _expanded test counts with the op it expands."""
  warnings.simplefilter('ignore')
  from onnx.backend.test.case import node
  ops = {c.name: {n.op_type for n in c.model.graph.node} for c in node.collect_testcases(None)}
  base = lambda n: re.sub(r'_expanded(_ver\d+)?$', '', n)
  return {n for n in ops if ops.get(base(n), ops[n]) <= SCOPE}

def main(path: str, write_exclusions: bool = False) -> None:
  import os
  here = os.path.dirname(os.path.abspath(__file__))
  excluded = [re.compile(l.split('#', 1)[0].strip()) for l in open(os.path.join(here, 'exclusions.txt')) if l.split('#', 1)[0].strip()]
  scope, res = in_scope(), {}
  for tc in ET.parse(path).getroot().iter('testcase'):
    name = re.sub(r'_cpu$', '', tc.get('name'))
    if not tc.get('name').endswith('_cpu'): continue
    if tc.find('skipped') is not None:  # an excluded test counts as failed; the rest (the CUDA copies) not at all
      if any(p.search(tc.get('name')) for p in excluded): res[name] = 'excluded'
      continue
    f = tc.find('failure') if tc.find('failure') is not None else tc.find('error')
    msg = ((f.get('message') or '').splitlines() or [''])[0] if f is not None else None
    if msg is not None:  # the importer's errors say what they are without their class; a mismatch says so
      msg = msg.replace('tgc.frontend.onnx_ops.OnnxError: ', '')
      res[name] = 'AssertionError: values differ' if msg.startswith('AssertionError') and not msg[15:].strip() else msg[:140]
    else: res[name] = None
  for label, names in (('in scope', [n for n in res if n in scope]), ('whole suite', list(res))):
    ok = sum(res[n] is None for n in names)
    print(f"{label}: {ok}/{len(names)} passed ({100 * ok / max(1, len(names)):.1f} %)")
  if write_exclusions:
    for n in sorted(res):
      if res[n] is not None: print(f"^{n}_cpu$ # {'IN SCOPE: ' if n in scope else ''}{res[n]}")

if __name__ == '__main__': main(sys.argv[1], '--exclusions' in sys.argv)
