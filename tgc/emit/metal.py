"""The Metal target: `kernel void name(device int* data0, const device int* data1, ..., uint3 gid
[[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])`, as tinygrad prints it.
Metal has no double: f64 is an error. bf16 is Metal 3.1's `bfloat`, its math done in float; the f8 types are
emulated as in C (uchar, computed as float). Loads from
threadgroup memory are built lane by lane (no pointer casts into threadgroup space), which also lets the
C++ shim of the tests (tests/metal_shim.h) model threadgroup arrays as statics."""
from __future__ import annotations
from tgc.emit.cstyle import Lang, F8, render_module, render_kernel


class MetalLang(Lang):
  name = 'metal'
  types = {'i1': 'bool', 'i8': 'char', 'i16': 'short', 'i32': 'int', 'i64': 'long', 'u8': 'uchar', 'u16': 'ushort', 'u32': 'uint',
           'u64': 'ulong', 'f16': 'half', 'bf16': 'bfloat', 'f32': 'float'}
  vec_base = {**Lang.vec_base, 'bf16': 'bfloat'}
  emulated = set(F8)
  fn_qual = 'inline'
  missing = {'f64': 'Metal has no double'}
  int64_sfx = ('l', 'ul')
  true_false = ('true', 'false')
  specials = {'gidx': 'gid.{x}', 'lidx': 'lid.{x}'}

  def signature(self, k):
    args = [f"{'' if i in k.written else 'const '}device {self.mem(dt)}* data{i}" for i, dt in enumerate(k.sig)]
    args += [f"constant {self.reg(dt)}& {n} [[buffer({len(k.sig) + j})]]" for j, (n, dt) in enumerate(k.vars)]
    args += ['uint3 gid [[threadgroup_position_in_grid]]', 'uint3 lid [[thread_position_in_threadgroup]]']
    return f"kernel void {k.name}({', '.join(args)})"
  def grid_open(self, k): return []
  def grid_close(self, k): return 0
  def define_local(self, k, op): return f"threadgroup {self.reg(op.results[0].type.dtype)} {op.attrs['sym']}[{op.attrs['size']}];"
  def render_barrier(self, k, op): return 'threadgroup_barrier(mem_flags::mem_threadgroup);'
  def lane(self, name, i, t): return f"{name}.{'xyzw'[i]}" if t.count <= 4 else f"{name}.v[{i}]"
  def ctor(self, t, lanes): return f"{self.vtype(t)}({','.join(lanes)})" if t.count <= 4 else f"{self.vtype(t)}{{{','.join(lanes)}}}"
  def space(self, buf_op, written): return 'threadgroup ' if buf_op.name == 'uop.define_local' else 'device ' if written else 'const device '
  def vec_load(self, buf, idx, t, space):
    if space == 'threadgroup ': return self.ctor(t, [f"{buf}[{idx}+{i}]" for i in range(t.count)])
    return super().vec_load(buf, idx, t, space)
  def vec_store(self, buf, idx, v, t, space):
    if space == 'threadgroup ':
      return ' '.join(f"{buf}[{idx}+{i}] = {self.lane(v, i, t)};" for i in range(t.count)) if v.isidentifier() else \
        f"{{ {self.vtype(t)} tg_v = {v}; " + ' '.join(f"{buf}[{idx}+{i}] = {self.lane('tg_v', i, t)};" for i in range(t.count)) + ' }'
    return super().vec_store(buf, idx, v, t, space)
  def math_fn(self, op, dt, args):
    if dt.name == 'bf16': return f"{self.math[op]}({', '.join(f'(float)({a})' for a in args)})"
    return f"{self.math[op]}({', '.join(args)})"
  def bitcast_native(self, x, src, dst): return f"as_type<{self.reg(dst)}>({x})"
  def prelude(self):
    out = ['#include <metal_stdlib>', 'using namespace metal;'] + self.emu_functions()
    for _, base, reg, n in sorted(x for x in self.needs if isinstance(x, tuple)):
      if n > 4: out.append(f"struct {base}{n} {{ {reg} v[{n}]; }};")
    return out


def render_metal(module) -> str: return render_module(module, MetalLang())
def render_metal_kernel(fn) -> str: return render_kernel(fn, MetalLang())
