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


def test_search_candidates_from_a_warpgroup_schedule():
  """From the heuristic's wgmma schedule of a matmul with a bias epilogue, the search's candidates (other amounts,
  rings of 2 to 4 stages of the swizzled tiles) are made without error, stage nothing more, and each either lowers or
  is refused by name (OptError: the search then scores it as never finishing)."""
  from tgc.passes.search import candidates
  from tgc.passes.schedule import OptError
  from tgc.passes.linearize import Lowerer
  from tgc.target import get_target
  m = ir.parse("""func.func @mm(%a: tensor<256x512xf16>, %b: tensor<512x256xf16>, %c: tensor<256xf32>) -> tensor<256x256xf32> {
  %0 = tensor.cast %a : tensor<256x512xf16> -> tensor<256x512xf32>
  %1 = tensor.cast %b : tensor<512x256xf16> -> tensor<512x256xf32>
  %2 = tensor.matmul %0, %1 : tensor<256x512xf32>, tensor<512x256xf32> -> tensor<256x256xf32>
  %3 = tensor.reshape %c : tensor<256xf32> -> tensor<1x256xf32>
  %4 = tensor.expand %3 : tensor<1x256xf32> -> tensor<256x256xf32>
  %5 = tensor.add %2, %4 : tensor<256x256xf32>
  func.return %5 : tensor<256x256xf32>
}""")
  PassManager.parse('canonicalize,tensor-decompose,canonicalize,kernelize,kernel-opt{target=cuda local_memory=232448}').run(m)
  (k,) = [f for f in m.functions('kernel.func') if any(o.name == 'kernel.reduce' for o in f.body.ops)]
  opts = list(k.attrs['opts'])
  assert opts[0].name == 'tc' and opts[0].fields['amt'] == 1
  t = get_target('cuda')
  cands = candidates(k, opts, t)
  assert cands and not any(len(c) > len(opts) and c[-1].name == 'smem' for c in cands)
  lowered = 0
  for c in cands:
    try: Lowerer(k, 'cuda', c).run(); lowered += 1
    except OptError: pass
  assert lowered
