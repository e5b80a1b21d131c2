"""kernel-opt{mode=search}: the opts it picks keep the results, come from the disk cache the second time
(the same text byte for byte), and the chosen opts replay from the printed kernel IR."""
import numpy as np
from tgc import ir
from tgc.passes import PassManager
from tgc.compiler import compile_module

TEXT = """func.func @mm(%a: tensor<16x24xf32>, %b: tensor<24x32xf32>) -> tensor<16x32xf32> {
  %0 = tensor.matmul %a, %b : tensor<16x24xf32>, tensor<24x32xf32> -> tensor<16x32xf32>
  func.return %0 : tensor<16x32xf32>
}"""

def searched(tmp_path, monkeypatch):
  monkeypatch.setenv('TGC_CACHE', str(tmp_path))
  m = ir.parse(TEXT)
  PassManager.parse('canonicalize,kernelize,kernel-opt{mode=search budget=3 beam=2}').run(m)
  return m

def test_search_cache_and_results(tmp_path, monkeypatch):
  m1 = searched(tmp_path, monkeypatch)
  assert (tmp_path / 'search.json').exists()
  m2 = searched(tmp_path, monkeypatch)
  assert m1.print() == m2.print()
  replay = ir.parse(m1.print())  # the opts attribute replays from text
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((24, 32)).astype(np.float32)
  for m in (m1, replay):
    PassManager.parse('linearize,uop-simplify,cse,dce').run(m)
    np.testing.assert_allclose(compile_module(m, 'CPU')(a, b)[0], a @ b, rtol=1e-4, atol=1e-4)


def test_search_candidates_on_a_gpu_include_staging():
  """On a GPU target the search may stage an operand the work-group shares (smem) once local dims exist; every
  candidate is a valid schedule that linearize lowers."""
  from tgc.passes.search import candidates
  from tgc.passes.schedule import Opt
  from tgc.passes.linearize import Lowerer
  from tgc.target import get_target
  m = ir.parse(TEXT)
  PassManager.parse('canonicalize,kernelize').run(m)
  k = m.functions('kernel.func')[0]
  t = get_target('cuda')
  assert not any(o[-1].name == 'smem' for o in candidates(k, [], t))  # no work-group yet: nothing shared
  base = [Opt('local', 1, 8), Opt('local', 0, 4)]
  staged = [o for o in candidates(k, base, t) if o[-1].name == 'smem']
  assert sorted(o[-1].fields['axis'] for o in staged) == [0, 1]
  for o in staged: Lowerer(k, 'cuda', o).run()
