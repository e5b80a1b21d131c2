"""Targets (tgc/target.py): one registry that the passes, the emitters, the tools and the compiler all ask; the
lowering pipeline each target gets; the device -> target question."""
import dataclasses, glob, os
import pytest
import tgc
from tgc.target import TARGETS, Target, get_target, register_target
from tgc.passes.pipelines import lower_to_uop_steps


def test_the_registered_targets():
  assert sorted(TARGETS) == ['c', 'cuda', 'llvm', 'metal', 'opencl']
  assert [t.name for t in TARGETS.values() if t.is_cpu] == ['llvm', 'c']
  assert get_target('cuda').tensor_cores.dims == (16, 8, 16) and get_target('llvm').tensor_cores is None
  assert (get_target('llvm').upcast(), get_target('c').upcast(), get_target('opencl').upcast(), get_target('opencl').upcast('cpu')) == (16, 8, 4, 8)
  # on a CPU the machine's vector register decides, at most what the language makes (C: 8)
  assert [get_target(n).upcast('auto', 8) for n in ('llvm', 'c', 'opencl')] == [8, 8, 4] and get_target('opencl').upcast('cpu', 8) == 8
  # OpenCL on PoCL: at most 32 bytes a vector (its builtins' registers), whatever the CPU's
  assert [get_target('opencl').upcast('cpu', 16, isz) for isz in (1, 2, 4, 8)] == [16, 16, 8, 4]
  with pytest.raises(dataclasses.FrozenInstanceError): get_target('llvm').max_upcast = 8


def test_an_unknown_target_names_the_known_ones(monkeypatch):
  with pytest.raises(tgc.TgcError, match=r"unknown target 'vulkan' \(known: c, cuda, llvm, metal, opencl\)"): get_target('vulkan')
  # the list is the registry's: a target registered later is known everywhere a target is named
  monkeypatch.setitem(TARGETS, 'hip', dataclasses.replace(get_target('cuda'), name='hip', renderer='tgc.emit.cuda:render_cuda'))
  with pytest.raises(tgc.TgcError, match=r"\(known: c, cuda, hip, llvm, metal, opencl\)"): get_target('rocm')
  assert 'kernel-opt{target=hip}' in lower_to_uop_steps('hip', noopt=False)
  with pytest.raises(tgc.TgcError, match="unknown target 'vulkan'"): tgc.passes.PassManager.parse('lower-to-uop{target=vulkan}')
  with pytest.raises(tgc.TgcError, match="processor must be cpu or gpu"): register_target(Target('npu', 'npu', 'x:y', 4))


# lower-to-uop as it was spelled before the targets were one registry (and scan-split and, on cuda, fuse-attention came):
# the pipeline must not drift
PIPELINES = {
  ('llvm', False): 'canonicalize,tensor-decompose{target=llvm pack=true},canonicalize,cse,scan-split{target=llvm},kernelize{target=llvm},kernel-opt{target=llvm},linearize{target=llvm},uop-simplify,decompose-transcendentals{ops=exp2+log2},cse,reassociate-index,dce',
  ('llvm', True): 'canonicalize,tensor-decompose{target=llvm},canonicalize,cse,scan-split{target=llvm},kernelize{target=llvm},linearize{target=llvm},uop-simplify,cse,dce',
  ('c', False): 'canonicalize,tensor-decompose{target=c pack=true},canonicalize,cse,scan-split{target=c},kernelize{target=c},kernel-opt{target=c},linearize{target=c},uop-simplify,cse,reassociate-index,dce',
  ('c', True): 'canonicalize,tensor-decompose{target=c},canonicalize,cse,scan-split{target=c},kernelize{target=c},linearize{target=c},uop-simplify,cse,dce',
  ('cuda', False): 'canonicalize,fuse-attention{target=cuda},tensor-decompose{target=cuda},canonicalize,cse,scan-split{target=cuda},kernelize{target=cuda},kernel-opt{target=cuda},linearize{target=cuda},uop-simplify,devectorize{width=8 bytes=16},cse,reassociate-index,dce',
  ('cuda', True): 'canonicalize,fuse-attention{target=cuda},tensor-decompose{target=cuda},canonicalize,cse,scan-split{target=cuda},kernelize{target=cuda},linearize{target=cuda},uop-simplify,devectorize{width=8 bytes=16},cse,dce',
  ('opencl', False): 'canonicalize,tensor-decompose{target=opencl},canonicalize,cse,scan-split{target=opencl},kernelize{target=opencl},kernel-opt{target=opencl},linearize{target=opencl},uop-simplify,cse,reassociate-index,dce',
  ('opencl', True): 'canonicalize,tensor-decompose{target=opencl},canonicalize,cse,scan-split{target=opencl},kernelize{target=opencl},linearize{target=opencl},uop-simplify,cse,dce',
  ('metal', False): 'canonicalize,tensor-decompose{target=metal},canonicalize,cse,scan-split{target=metal},kernelize{target=metal},kernel-opt{target=metal},linearize{target=metal},uop-simplify,devectorize{width=4},cse,reassociate-index,dce',
  ('metal', True): 'canonicalize,tensor-decompose{target=metal},canonicalize,cse,scan-split{target=metal},kernelize{target=metal},linearize{target=metal},uop-simplify,devectorize{width=4},cse,dce',
}

@pytest.mark.parametrize('target,noopt', list(PIPELINES))
def test_lower_to_uop_steps(target, noopt):
  assert ','.join(lower_to_uop_steps(target, noopt)) == PIPELINES[target, noopt]


def test_noopt_and_processor(monkeypatch):
  monkeypatch.setenv('NOOPT', '1')
  assert ','.join(lower_to_uop_steps('llvm')) == PIPELINES['llvm', True]  # noopt=None: as NOOPT says
  assert ','.join(lower_to_uop_steps('llvm', False)) == PIPELINES['llvm', False]
  monkeypatch.setenv('NOOPT', '0')
  assert 'kernel-opt{target=opencl processor=cpu}' in lower_to_uop_steps('opencl', processor='cpu')


class NamedDevice:
  """A device class that names its target, as the runtime's devices do."""
  name, target = 'NAMED', 'c'


def test_device_target(monkeypatch):
  from tgc.compiler import device_target
  from tgc.runtime import DEVICES
  assert [device_target(d).name for d in ('CPU', 'INTERP', 'C', 'OPENCL', 'CUDA')] == ['llvm', 'llvm', 'c', 'opencl', 'cuda']
  monkeypatch.setitem(DEVICES, 'NAMED', 'test_target:NamedDevice')  # asked of the class: the device is not opened
  assert device_target('named').name == 'c'
  assert device_target('CPU', NamedDevice()).name == 'c'


def test_host_cpu_facts_come_from_the_machine():
  from tgc.host import host_cpu, CPU_KINDS, cpu_facts
  h = host_cpu()
  flags = next((l.split(':', 1)[1].split() for l in open('/proc/cpuinfo') if l.startswith(('flags', 'Features'))), None) if os.path.exists('/proc/cpuinfo') else None
  if flags is not None and 'avx512f' in flags: assert (h.vector_bytes, h.vector_registers) == (64, 32)
  elif flags is not None and 'avx' in flags: assert (h.vector_bytes, h.vector_registers) == (32, 16)
  for d in glob.glob('/sys/devices/system/cpu/cpu0/cache/index*'):
    if open(f'{d}/level').read().strip() == '2': assert h.l2_bytes == int(open(f'{d}/size').read().strip()[:-1]) << 10
  assert cpu_facts('avx2') is CPU_KINDS['avx2'] and cpu_facts('host') is h and h.lanes(4) == h.vector_bytes // 4
  with pytest.raises(tgc.TgcError, match="unknown cpu 'z80'"): cpu_facts('z80')


@pytest.mark.parametrize('cpu', ['avx512', 'avx2', 'sse', 'neon'])
def test_cpu_matmul_tiles_fit_the_registers(cpu):
  """A matmul's accumulators (rows x vectors) take at most half the vector registers of the CPU named, and the
  kernel it makes computes the product."""
  import numpy as np
  from tgc.host import cpu_facts
  from tgc.passes.schedule import Schedule
  facts = cpu_facts(cpu)
  src = "func.func @mm(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>) -> tensor<64x128xf32> {\n  %0 = tensor.matmul %a, %b : tensor<64x96xf32>, tensor<96x128xf32> -> tensor<64x128xf32>\n  func.return %0 : tensor<64x128xf32>\n}\n"
  from tgc.ir import parse
  from tgc.passes.manager import PassManager
  from tgc.compiler import compile_module
  m = parse(src)
  PassManager.parse(f'canonicalize,tensor-decompose,kernelize,kernel-opt{{target=llvm cpu={cpu}}}').run(m)
  k = next(f for f in m.functions('kernel.func') if any(op.name == 'kernel.reduce' for op in f.body.ops))
  s = Schedule(k, k.attrs['opts'], get_target('llvm'))
  lanes = [n for n, kd in zip(s.full, s.kinds) if kd == 'upcast']
  assert 16 <= np.prod(lanes) and np.prod(lanes) // facts.lanes(4) <= facts.vector_registers // 2, (cpu, k.attrs['opts'])
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 128)).astype(np.float32)
  out, = compile_module(m, 'CPU')(a, b)
  np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('cpu', ['avx512', 'avx2'])
@pytest.mark.parametrize('hw,cin,cout,accs', [(6, 64, 64, 12), (3, 128, 128, 12), (12, 32, 32, 12), (5, 16, 48, 15)])
def test_cpu_conv_tiles_on_small_images(cpu, hw, cin, cout, accs):
  """A 3x3 conv on a small image (a ResNet's late stages): its register tile takes rows its output columns divide (6
  columns: 6 rows, not 2; 3: 3, none padded) and, where that leaves few accumulators, more vector columns; on
  AVX-512 `accs` accumulators, and never more than half the vector registers; the kernel computes the conv."""
  import numpy as np, torch
  from tgc.host import cpu_facts
  from tgc.passes.schedule import Schedule
  from tgc.ir import parse
  from tgc.passes.manager import PassManager
  from tgc.compiler import compile_module
  from tgc import Tensor
  from tgc.tensor import _build_module
  facts = cpu_facts(cpu)
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((1, cin, hw, hw)).astype(np.float32), rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x, device='CPU'), Tensor(w, device='CPU')
  m, leaves = _build_module([tx.conv2d(tw, padding=1).node], 'cv')
  m = parse(str(m))
  PassManager.parse(f'canonicalize,tensor-decompose,canonicalize,kernelize,kernel-opt{{target=llvm cpu={cpu}}}').run(m)
  k = next(f for f in m.functions('kernel.func') if any(op.name == 'kernel.reduce' for op in f.body.ops))
  s = Schedule(k, k.attrs['opts'], get_target('llvm'))
  acc = np.prod([n for n, kd in zip(s.full, s.kinds) if kd == 'upcast']) // facts.lanes(4)
  assert acc <= facts.vector_registers // 2 and (cpu != 'avx512' or (acc == accs and not s.padded)), (cpu, k.attrs['opts'])
  out, = compile_module(m, 'CPU')(*[(x, w)[next(i for i, t in enumerate((tx, tw)) if t.node is l)] for l in leaves])
  ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-3)
