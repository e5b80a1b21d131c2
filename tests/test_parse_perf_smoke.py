"""Smoke tests of the fast parse path (tgc/parser/parser.py's engine, tgc/ir/format.py's generated
formats, the printer): the round-trip law on a large generated module, the engine accepting exactly what
lark accepts, and a start-up that imports neither lark nor numpy for an empty input."""
from __future__ import annotations
import os, random, re, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'bench'))
import parse_bench  # noqa: E402

from tgc.parser import parse  # noqa: E402
from tgc.parser import parser as P  # noqa: E402


def test_round_trip_law_generated_module():
  text = parse_bench.tensor_module(2000, seed=3)
  m = parse(text)
  assert sum(1 for _ in m.walk()) == 2001  # the func.func and its 2000 ops
  for generic in (False, True):
    once = m.print(generic=generic)
    twice = parse(once).print(generic=generic)
    assert once == twice
  assert parse(m.print(generic=True)).print() == m.print()


def test_custom_and_generic_agree_on_every_tensor_op():
  text = parse_bench.tensor_module(500, seed=5)
  m = parse(text)
  g = parse(m.print(generic=True))
  assert [op.name for op in m.walk()] == [op.name for op in g.walk()]
  assert [op.attrs for op in m.walk()] == [op.attrs for op in g.walk()]


class _Null:
  """A builder that builds nothing: the engine then decides acceptance by the grammar alone."""
  def __getattr__(self, name): return lambda *a: None


def _mutants(text: str, n: int, seed: int):
  rng = random.Random(seed)
  toks = list(re.finditer(r'\S+', text))
  for _ in range(n):
    p = rng.randrange(len(text))
    r = rng.random()
    if r < 0.3: m = rng.choice(toks); yield text[:m.start()] + text[m.end():]
    elif r < 0.55: yield text[:p] + rng.choice('%@,:()[]{}<>=-"x0 \n\t\r/!#.;') + text[p:]
    elif r < 0.75: yield text[:p] + text[p + 1:]
    elif r < 0.85: yield text[:p]
    else:
      a, b = rng.choice(toks), rng.choice(toks)
      yield text[:a.start()] + b.group() + text[a.end():]


def test_engine_accepts_what_lark_accepts():
  from lark.exceptions import UnexpectedInput
  eng, lk = P._get_engine(), P._parser()
  base = [parse_bench.tensor_module(40, seed=1),
          'module {\n  func.func @f(%a: tensor<2xf32>) -> (tensor<2xf32>) attributes {x = [(1, 2)], y = v(a = 1)} {\n'
          '    %0 = "tensor.neg"(%a) {k = "s\\"q"} : (tensor<2xf32>) -> tensor<2xf32> loc("f.tgc":2:3)\n'
          '    // comment\n    %1 = tensor.const 0x7f800000 : tensor<2xf32>  // trailing\r\n'
          '    return %0 : tensor<2xf32>\n  } loc("f.tgc":1:1)\n}\n']
  for i, text in enumerate(base):
    for s in _mutants(text, 400, seed=i):
      s = s if s.endswith('\n') else s + '\n'
      try: eng.run(s, _Null()); fast = True
      except P._SyntaxError: fast = False
      try: lk.parse(s); slow = True
      except UnexpectedInput: slow = False
      assert fast == slow, repr(s)


def test_syntax_errors_are_diagnostics():
  from tgc.ir.diagnostics import Diagnostic
  for text, want in (('func.func @f() {\n  %0 = tensor.add %a,, %b : tensor<4xf32>\n}\n', "2:22: error: expected"),
                     ('func.func @f( {\n}\n', 'error: expected'),
                     ('func.func @f() {\n  %0 = tensor.neg $ : tensor<4xf32>\n}\n', "unexpected character '$'")):
    with pytest.raises(Diagnostic) as e: parse(text, 'f.tgc')
    assert want in e.value.format(), e.value.format()


def test_start_up_imports_neither_lark_nor_numpy():
  code = ("import sys; from tgc.parser import parse; parse(''); "
          "print(sorted(m for m in ('lark', 'numpy') if m in sys.modules))")
  for _ in range(2):  # the first run may build the table cache (with lark)
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == '[]'
