"""The OpenCL C 1.2 target: `__kernel void name(__global float* data0, __global const float* data1, ...)`,
gidx/lidx are get_group_id/get_local_id (enqueue global = global_size * local_size, local = local_size).
half is stored as half and computed as float through the core vload_half/vstore_half_rte, so no device needs
cl_khr_fp16 (PoCL on a CPU has none); bf16 and the f8 types are stored as their bits and computed as float; bool buffers are
uchar (a kernel argument may not point to bool), bool vectors uchar vectors. FP_CONTRACT is off."""
from __future__ import annotations
from tgc.errors import TgcError
from tgc.ir import dtypes as D
from tgc.ir.types import VecType
from tgc.emit.cstyle import Lang, render_module, render_kernel


class OpenCLLang(Lang):
  name = 'opencl'
  types = {'i1': 'bool', 'i8': 'char', 'i16': 'short', 'i32': 'int', 'i64': 'long', 'u8': 'uchar', 'u16': 'ushort', 'u32': 'uint',
           'u64': 'ulong', 'f32': 'float', 'f64': 'double'}
  vec_base = {**Lang.vec_base, 'i1': 'uchar'}
  emulated = {'f16', *Lang.emulated}
  fn_qual = 'inline'
  native_vecs = (2, 3, 4, 8, 16)
  int64_sfx = ('L', 'UL')
  true_false = ('true', 'false')
  specials = {'gidx': 'get_group_id({k})', 'lidx': 'get_local_id({k})'}

  def check_vec(self, t, where):
    if t.count not in self.native_vecs: raise TgcError(f"opencl: {where}: vec<{t.count}x{t.dtype}> has no OpenCL vector type (2, 3, 4, 8, 16 lanes)")
  def mem(self, dt): return 'uchar' if dt.is_bool else 'half' if dt is D.f16 else super().mem(dt)
  def signature(self, k):
    args = [f"__global {'' if i in k.written else 'const '}{self.mem(dt)}* data{i}" for i, dt in enumerate(k.sig)]
    return f"__kernel void {k.name}({', '.join(args + [f'const {self.reg(dt)} {n}' for n, dt in k.vars])})"
  def grid_open(self, k): return []
  def grid_close(self, k): return 0
  def define_local(self, k, op):
    dt = op.results[0].type.dtype
    return f"__local {self.mem(dt)} {op.attrs['sym']}[{op.attrs['size']}];"
  def render_barrier(self, k, op): return 'barrier(CLK_LOCAL_MEM_FENCE);'
  vector_ops = ('add', 'sub', 'mul', 'fdiv')
  signed_wraps = False  # OpenCL C has no -fwrapv: see Lang.signed_wraps
  def vector_operators(self, t):  # OpenCL C's vector types take arithmetic operators; floats only (signed overflow is UB)
    return t.count in self.native_vecs and t.dtype.name in ('f32', 'f64')
  def lane(self, name, i, t): return f"{name}.{'xyzw'[i]}" if t.count <= 4 else f"{name}.s{i:x}"
  def ctor(self, t, lanes): return f"({self.vtype(t)})({','.join(lanes)})"
  # exp2 and trunc pass a NaN through themselves: PoCL's (SLEEF's) exp2 and trunc convert their argument to an integer,
  # and where LLVM can tell the argument is NaN (a NaN constant, x*NaN, fmod(x, 0)) it folds that conversion to poison
  # and the call returns an undefined value (a denormal, 0.0, any finite number); the select folds away for such an
  # argument, and costs a compare otherwise
  nan_guarded = ('exp2', 'trunc')
  def math_fn(self, op, dt, args):
    if op in self.nan_guarded: return f"(isnan({args[0]}) ? {args[0]} : {self.math[op]}({args[0]}))"
    return f"{self.math[op]}({', '.join(args)})"
  # vloadN/vstoreN move at most 32 bytes at once: PoCL on a CPU without AVX-512 passes a 64-byte vector (float16,
  # double8) to and from its builtins by another ABI than the kernel's, and vload16 of floats returns its low 8 lanes
  # and garbage (or a vstore's kernel fails to build); wider vectors are loaded and stored as halves
  max_vec_bytes = 32
  def vec_load(self, buf, idx, t, space):
    if t.count * t.dtype.itemsize <= self.max_vec_bytes: return f"vload{t.count}(0, {buf}+{idx})"
    h = VecType(t.count // 2, t.dtype)
    return f"({self.vtype(t)})({self.vec_load(buf, idx, h, space)}, {self.vec_load(buf, f'{idx}+{h.count}', h, space)})"
  def vec_store(self, buf, idx, v, t, space):
    if t.count * t.dtype.itemsize <= self.max_vec_bytes: return f"vstore{t.count}({v}, 0, {buf}+{idx});"
    h = VecType(t.count // 2, t.dtype)
    return f"{self.vec_store(buf, idx, f'({v}).lo', h, space)} {self.vec_store(buf, f'{idx}+{h.count}', f'({v}).hi', h, space)}"
  def wrap(self, dt, e):
    if dt is D.f16: self.needs.add('halfemu'); return f"tg_half_round({e})"
    return super().wrap(dt, e)
  def emu_load(self, dt, buf, idx):
    if dt is D.f16: return f"vload_half({idx}, {buf})"
    return super().emu_load(dt, buf, idx)
  def emu_store(self, dt, buf, idx, v):
    if dt is D.f16: return f"vstore_half_rte({v}, {idx}, {buf});"
    return super().emu_store(dt, buf, idx, v)
  def to_bits(self, x, dt):
    if dt is D.f16: self.needs.add('halfemu'); return f"tg_half_bits({x})"
    return super().to_bits(x, dt)
  def from_bits(self, x, dt):
    if dt is D.f16: self.needs.add('halfemu'); return f"tg_half_from_bits({x})"
    return super().from_bits(x, dt)
  def bitcast_native(self, x, src, dst): return f"as_{self.reg(dst)}({x})"
  def prelude(self):
    out = ['#pragma OPENCL FP_CONTRACT OFF']
    if 'f64' in self.needs: out.append('#pragma OPENCL EXTENSION cl_khr_fp64 : enable')
    if 'halfemu' in self.needs:
      out += ['inline float tg_half_round(float x) { ushort h; vstore_half_rte(x, 0, (half*)&h); return vload_half(0, (half*)&h); }',
              'inline ushort tg_half_bits(float x) { ushort h; vstore_half_rte(x, 0, (half*)&h); return h; }',
              'inline float tg_half_from_bits(ushort h) { return vload_half(0, (half*)&h); }']
    return out + self.emu_functions()


def render_opencl(module) -> str: return render_module(module, OpenCLLang())
def render_opencl_kernel(fn) -> str: return render_kernel(fn, OpenCLLang())
