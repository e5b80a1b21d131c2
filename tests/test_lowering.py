"""The one lowering entry (tgc.lowering.lower) and its stages, the level a module is at, the DeviceSpec a device
declares and its round trip through pipeline text, Schedule.check (legality in one place), and what Tensor.to_ir
prints being what a compile for the device runs."""
import glob, os, re
import numpy as np
import pytest
import tgc
from tgc import Tensor
from tgc.ir.core import Module
from tgc.lowering import lower, level_of
from tgc.target import DeviceSpec, get_target
from tgc.passes.manager import PassManager, parse_pipeline
from tgc.passes.pipelines import lower_to_uop_steps, stage_steps, STAGES
from tgc.runtime import BaseDevice, register_device, DEVICES, _opened

H100_SHARED = 232448
SOFTMAX = """func.func @main(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %m = tensor.reduce max %x [1] : tensor<4x32xf32> -> tensor<4x1xf32>
  %e = tensor.expand %m : tensor<4x1xf32> -> tensor<4x32xf32>
  %d = tensor.sub %x, %e : tensor<4x32xf32>
  %p = tensor.exp2 %d : tensor<4x32xf32>
  %s = tensor.reduce add %p [1] : tensor<4x32xf32> -> tensor<4x1xf32>
  %t = tensor.expand %s : tensor<4x1xf32> -> tensor<4x32xf32>
  %r = tensor.fdiv %p, %t : tensor<4x32xf32>
  func.return %r : tensor<4x32xf32>
}
"""


def test_stages_and_levels():
  """lower takes a module stage by stage from the level it is at; the stages one at a time give what one call gives."""
  m = tgc.ir.parse(SOFTMAX)
  assert level_of(m) == 'tensor' and STAGES == ('tensor', 'kernel', 'opt', 'uop', 'source', 'binary')
  lower(m, 'llvm', 'kernel')
  assert level_of(m) == 'kernel' and m.functions('kernel.func') and not any('opts' in k.attrs for k in m.functions('kernel.func'))
  lower(m, 'llvm', 'opt', noopt=False)
  assert level_of(m) == 'kernel' and any('opts' in k.attrs for k in m.functions('kernel.func'))
  lower(m, 'llvm', 'uop', noopt=False)
  assert level_of(m) == 'uop' and not m.functions('kernel.func')
  whole = lower(tgc.ir.parse(SOFTMAX), 'llvm', 'uop', noopt=False)
  assert whole.print() == m.print()
  from tgc import emit
  assert lower(m, 'llvm', 'source') == emit.render(m, 'llvm')
  assert level_of(Module([])) == 'uop'
  with pytest.raises(tgc.TgcError, match="unknown stage 'ptx'"): lower(m, 'llvm', 'ptx')


def test_binary_stage_runs():
  """The binary stage gives the device's Programs of the uop.funcs, in order; they compute what numpy does."""
  m = tgc.ir.parse(SOFTMAX)
  (prg,) = lower(m, 'llvm', 'binary', noopt=False, device='CPU')
  x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
  out = np.zeros_like(x)
  prg(out, x)
  e = np.exp2(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_trace_sees_each_stage():
  seen = []
  lower(tgc.ir.parse(SOFTMAX), 'c', 'uop', trace=lambda stage, m: seen.append((stage, len(m.functions('kernel.func')))))
  assert [s for s, _ in seen] == ['kernel', 'opt', 'uop'] and seen[1][1] > 0 and seen[2][1] == 0


@pytest.mark.parametrize('caps,text', [({}, 'target=cuda'), ({'local_memory': H100_SHARED}, f'target=cuda local_memory={H100_SHARED}'),
                                       ({'processor': 'cpu', 'warpgroup': False, 'cpu': 'avx2'}, 'target=cuda processor=cpu warpgroup=false cpu=avx2')])
def test_device_spec_as_options(caps, text):
  """A DeviceSpec is its pass options in pipeline text and back; lower-to-uop's kernel-opt and linearize carry it."""
  spec = DeviceSpec.of('cuda', **caps)
  assert spec.options() == text
  opts = dict(kv.split('=') for kv in text.split())
  (p,) = parse_pipeline(f'kernel-opt{{{text}}}')
  assert DeviceSpec.from_options(p.opts) == spec
  steps = lower_to_uop_steps(spec, noopt=False)
  assert f'kernel-opt{{{text}}}' in steps and f'linearize{{{text}}}' in steps and opts['target'] == 'cuda'


def test_pipeline_text_replays_what_lower_runs():
  """The pipeline text lower-to-uop prints for a device runs the same passes as lower with that device's spec."""
  spec = DeviceSpec.of('cuda', local_memory=H100_SHARED, warpgroup=False)
  a = lower(tgc.ir.parse(SOFTMAX), spec, 'uop', noopt=False)
  b = tgc.ir.parse(SOFTMAX)
  PassManager(parse_pipeline(','.join(lower_to_uop_steps(spec, noopt=False)))).run(b)
  c = tgc.ir.parse(SOFTMAX)
  PassManager(parse_pipeline(f'lower-to-uop{{{spec.options()} noopt=false}}')).run(c)
  assert a.print() == b.print() == c.print()
  assert stage_steps(spec, 'tensor', 'uop', noopt=False) == lower_to_uop_steps(spec, noopt=False)
  assert stage_steps(spec, 'kernel', 'opt', noopt=False) == [f'kernel-opt{{{spec.options()}}}']
  assert stage_steps(spec, 'kernel', 'opt', noopt=True) == []


class SpecDevice(BaseDevice):
  """A device that opens without hardware and declares an H100-like CUDA device without warpgroup tensor cores."""
  name, target = 'SPECTEST', 'cuda'
  local_memory, warpgroup_mma, processors = H100_SHARED, False, 132


@pytest.fixture
def spec_device(monkeypatch):
  monkeypatch.setitem(DEVICES, 'SPECTEST', 'test_lowering:SpecDevice')
  yield 'SPECTEST'
  _opened.pop('SPECTEST', None)


def test_device_declares_its_spec(spec_device):
  from tgc.compiler import device_spec
  spec = device_spec(spec_device)
  assert spec == DeviceSpec(get_target('cuda'), 'auto', H100_SHARED, False, 'host', 132, 'SPECTEST')
  assert not spec.has_warpgroup and spec.smem_budget == H100_SHARED
  assert device_spec('CPU').target.name == 'llvm'


def test_to_ir_prints_what_runs(spec_device):
  """Tensor.to_ir lowers for the device's spec (its shared memory, no warpgroups here): the text a compile runs."""
  a, b = Tensor.empty(256, 128, dtype='half', device=spec_device), Tensor.empty(128, 256, dtype='half', device=spec_device)
  y = a @ b
  uops = y.to_ir('uop')
  m, _ = tgc.tensor._build_module([y.node], 'main')
  assert uops == lower(m, DeviceSpec.of('cuda', local_memory=H100_SHARED, warpgroup=False), 'uop').print()
  assert 'uop.wmma' in uops and 'uop.wgmma' not in uops
  assert 'kernel-opt' not in y.to_ir('kernel') and 'opts = ' in y.to_ir('opt') and '__global__' in y.to_ir('source')
  with pytest.raises(tgc.TgcError, match="unknown level 'binary'"): y.to_ir('binary')


def test_schedule_check_owns_legality():
  """Schedule.check says whether a schedule lowers on a target (linearize and kernel-opt both ask it): tensor cores on
  a target with them and tensor-core dtypes only, and a work-group only on a GPU language."""
  from tgc.passes.schedule import Schedule, Opt, OptError, lowers
  a, b = Tensor.empty(64, 64, dtype='half', device='INTERP'), Tensor.empty(64, 64, dtype='half', device='INTERP')
  m, _ = tgc.tensor._build_module([(a @ b).node], 'main')
  lower(m, 'cuda', 'kernel')
  k = next(k for k in m.functions('kernel.func') if any(op.name == 'kernel.reduce' for op in k.body.ops))
  red = next(op for op in k.body.ops if op.name == 'kernel.reduce').axes[0]
  assert lowers(k, [Opt('tc', red, 0)], get_target('cuda')) and not lowers(k, [Opt('tc', red, 0)], get_target('llvm'))
  with pytest.raises(OptError, match='tensor cores'): Schedule(k, (Opt('tc', red, 0),), get_target('llvm')).check(get_target('llvm'))
  with pytest.raises(OptError, match='need a GPU target'): Schedule(k, (Opt('local', 0, 4),), get_target('c')).check(get_target('c'))
  assert Schedule(k, (Opt('local', 0, 4),), get_target('cuda')).check(DeviceSpec.of('cuda')).kinds.count('local') == 1


def test_search_times_the_lowered_binary(monkeypatch, tmp_path):
  """kernel-opt's search lowers each candidate through tgc.lowering.lower to the binary stage: the code it times is
  the code a compile runs."""
  import tgc.lowering
  from tgc.passes.search import time_kernel
  calls, real = [], tgc.lowering.lower
  monkeypatch.setattr(tgc.lowering, 'lower', lambda m, target, until='uop', **kw: calls.append(until) or real(m, target, until, **kw))
  m = lower(tgc.ir.parse(SOFTMAX), 'llvm', 'kernel')
  (k,) = m.functions('kernel.func')
  assert time_kernel(k, [], 'llvm', 'CPU', runs=1) > 0 and calls == ['binary']


def test_ir_imports_no_dialect_and_no_parser():
  """The IR core is imported by the dialects and the parser, never the other way: its registry is filled by tgc."""
  root = os.path.join(os.path.dirname(__file__), '..', 'tgc', 'ir')
  for path in glob.glob(os.path.join(root, '*.py')):
    src = open(path).read()
    assert not re.search(r'^\s*(from|import) tgc\.(dialects|parser)\b', src, re.M), path


@pytest.mark.parametrize('noopt', [True, False])
def test_grid_dims_within_the_targets_limits(noopt):
  """A launch grid dim past the target's limit (CUDA: 65535 blocks along y and z) is merged into the next inner dim
  (x takes 2**31 - 1): a transposed copy of 70000 x 4 runs on one dim; on OpenCL (no such limit) on two. Either way
  the copy's result is the transpose (run on the CPU's OpenCL where it opens, else checked on the interpreter)."""
  text = """func.func @main(%x: tensor<4x70000xf32>) -> tensor<70000x4xf32> {
  %0 = tensor.permute %x [1, 0] : tensor<4x70000xf32> -> tensor<70000x4xf32>
  %1 = tensor.contiguous %0 : tensor<70000x4xf32>
  func.return %1 : tensor<70000x4xf32>
}"""
  m = lower(tgc.ir.parse(text), 'cuda', 'uop', noopt=noopt)
  for f in m.functions('uop.func'):
    gs = tuple(f.attrs['global_size'])
    assert all(g <= 65535 for g in gs[1:]) and gs[0] < 2**31, gs
  x = np.random.default_rng(0).standard_normal((4, 70000)).astype(np.float32)
  from tgc.compiler import compile_module
  (got,) = compile_module(tgc.ir.parse(text), 'INTERP')(x)
  np.testing.assert_array_equal(got, x.T)
