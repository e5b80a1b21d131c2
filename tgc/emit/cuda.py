"""The CUDA target: `extern "C" __global__ void __launch_bounds__(N) name(float* data0, ...)`, N the
work-group size; gidx/lidx are blockIdx/threadIdx (a launch is grid = global_size, block = local_size).
half and bf16 are cuda_fp16.h's `half` and cuda_bf16.h's `__nv_bfloat16`; the f8 types are emulated as in C
(bytes, computed as float, the prelude's conversions: the same bits as every target, saturating as cuda_fp8.h's satfinite); vectors of them and of bool
(which CUDA lacks) are small structs with tg_make_ functions, defined in the prelude (cuda_bf16.h has a make_bfloat162
of its own)."""
from __future__ import annotations
import math
from tgc.ir import dtypes as D
from tgc.emit.cstyle import Lang, F8, XYZW, render_module, render_kernel
from tgc.dialects.uop import shared_layout
from tgc.emit.cuda_attention import attention_functions, attention_call, attention_grad_call, grad_blocks, BLOCKS, KEY_ROWS, GRAD_DIMS

STATIC_SHARED = 48 << 10  # the shared memory a kernel's static arrays may take; beyond it a launch asks for it
MOST_SHARED_ALIGN = 1024  # the dynamic shared memory's declared alignment (wgmma's 128-byte swizzled tiles ask it)

_AS_INT = {'f32': ('__float_as_int', '__int_as_float'), 'f64': ('__double_as_longlong', '__longlong_as_double'),
           'f16': ('__half_as_short', '__short_as_half'), 'bf16': ('__bfloat16_as_short', '__short_as_bfloat16')}
_BUILTIN_VEC = ('char', 'uchar', 'short', 'ushort', 'int', 'uint', 'longlong', 'ulonglong', 'float', 'double')

def _header_vec(base: str, n: int) -> bool:
  """Whether a vector type (and its make_ function) comes with CUDA: the builtin ones of 2 to 4 lanes, half2."""
  return (base in _BUILTIN_VEC and 2 <= n <= 4) or (base, n) == ('half', 2)


class CUDALang(Lang):
  name = 'cuda'
  types = {**Lang.types, 'f16': 'half', 'bf16': '__nv_bfloat16'}
  vec_base = {**Lang.vec_base, 'i64': 'longlong', 'u64': 'ulonglong', 'bf16': 'bfloat16'}
  emulated = set(F8)
  fn_qual = '__device__ inline'
  true_false = ('true', 'false')
  smem_prefix = '__shared__ '
  specials = {'gidx': 'blockIdx.{x}', 'lidx': 'threadIdx.{x}'}

  def signature(self, k) -> str:
    args = [f"{self.mem(dt)}* data{i}" for i, dt in enumerate(k.sig)] + [f"const {self.reg(dt)} {n}" for n, dt in k.vars]
    blocks = grad_blocks(k.ops)  # (the work-groups a multiprocessor should hold, where a kernel wants more than its registers leave)
    return f'extern "C" __global__ void __launch_bounds__({math.prod(k.ls)}{f", {blocks}" if blocks else ""}) {k.name}({", ".join(args)})'
  def special_again(self, axis, name, reg):
    # (read by an opaque instruction: NVVM would fold a second blockIdx.x into the first, and carry the first read's
    # value, and what is computed from it, across the loop between them)
    sreg = {'gidx': 'ctaid', 'lidx': 'tid'}[axis[:4]] + '.' + XYZW[int(axis[4])]
    return f'{reg} {name}; {{ unsigned int r_; asm volatile("mov.u32 %0, %%{sreg};" : "=r"(r_)); {name} = ({reg})r_; }}'
  def grid_open(self, k): return []
  def grid_close(self, k): return 0
  def define_local(self, k, op):
    dt, sym = self.reg(op.results[0].type.dtype), op.attrs['sym']
    offsets, total = shared_layout(k.fn)
    al = op.attrs.get('align', 16)  # (16: float4 reads of a tile; wgmma's swizzled tiles 1024)
    if total <= STATIC_SHARED: return f"__shared__ __align__({al}) {dt} {sym}[{op.attrs['size']}];"
    # more than a static array may take: carved from the dynamic shared memory the launch sizes (dynamic_shared_bytes);
    # declared aligned as wgmma's swizzled tiles ask (or more where a tile asks more), the same in every kernel of a
    # module (nvcc warns where two declarations of it differ)
    most = max([MOST_SHARED_ALIGN] + [o.attrs.get('align', 16) for o in k.fn.body.ops if o.name == 'uop.define_local'])
    first = f"extern __shared__ __align__({most}) unsigned char tg_shared[]; " if offsets[sym] == min(offsets.values()) else ''
    return f"{first}{dt}* {sym} = ({dt}*)(tg_shared + {offsets[sym]});"
  def render_barrier(self, k, op): return '__syncthreads();'
  def shuffle_xor(self, x, mask, dt): return f"__shfl_xor_sync(0xffffffffu, {x}, {mask})"
  def lane(self, name, i, t): return f"{name}.{'xyzw'[i]}" if t.count <= 4 else f"{name}.v[{i}]"
  def ctor(self, t, lanes):
    vt, base = self.vtype(t), 'float' if t.dtype.name in self.emulated else self.vec_name(t.dtype)
    return f"{'make' if _header_vec(base, t.count) else 'tg_make'}_{vt}({','.join(lanes)})"
  def recip(self, x, dt):
    # float32: the hardware's approximate reciprocal and one Newton step (within 1 ulp, as exp2f's 2), where 1.0f/x is
    # IEEE's division with a call for its rare cases on every element: ptxas orders nothing across the call, and a
    # matmul's gelu epilogue (its sigmoid's 1/(1+e)) took 26 % of the product's time on an H200, 7 % with this
    if dt is not D.f32: return super().recip(x, dt)
    self.needs.add(('rcp',))
    return f"tg_rcp({x})"
  def math_fn(self, op, dt, args):
    if dt.bits == 16:  # cuda_fp16.h / cuda_bf16.h: hexp2, hlog2, hsin, hsqrt, htrunc; fmod through float
      return f"h{self.math[op]}({args[0]})" if op != 'mod' else f"fmodf((float)({args[0]}), (float)({args[1]}))"
    return super().math_fn(op, dt, args)
  def bitcast_native(self, x, src, dst):
    if not src.is_float: x = f"{_AS_INT[dst.name][1]}(({self.bits_type(dst.bits, True)})({x}))"; return x
    bits = f"{_AS_INT[src.name][0]}({x})"
    return f"{_AS_INT[dst.name][1]}({bits})" if dst.is_float else f"(({self.reg(dst)}){bits})"
  def cast(self, x, src, dst):
    if dst.is_float and dst.bits == 16 and src is not D.f32 and not (src.is_float and src.bits == 16 and src is dst):
      x, src = super().cast(x, src, D.f32), D.f32  # half/bf16 constructors from float: the one sure conversion
    return super().cast(x, src, dst)
  # tensor cores: mma.sync m16n8k16 (sm_80 and later), one warp per 16x8 tile; per thread (lane = 4*group + t)
  # a: 8 elements at (group + 8*(i>>1 & 1), 2t + (i&1) + 8*(i>>2)), b: 4 at (k = 2t + (i&1) + 8*(i>>1), n = group),
  # c: 4 at (group + 8*(i>>1), 2t + (i&1)), as the PTX ISA lays the fragments out
  # f32 factors (the device's spec allowed TF32: tgc/target.py) are two mma.sync m16n8k8 .tf32 a 16-deep step, k 0-7
  # then 8-15, from the same fragments: the lane's k slots t and t+4 of each take the tile's k 2t and 2t+1 (a's and b's
  # alike, so each product meets its partner and the sum is the same), its inputs rounded to TF32 (cvt.rna, as cuBLAS)
  MMA = {(D.f16, D.f32): 'f32.f16.f16.f32', (D.f16, D.f16): 'f16.f16.f16.f16', (D.bf16, D.f32): 'f32.bf16.bf16.f32',
         (D.f32, D.f32): 'f32.tf32.tf32.f32'}
  def wmma_helper(self, dims, a, b, c):
    ptx = self.MMA.get((a.dtype, c.dtype))
    if tuple(dims) != (16, 8, 16) or ptx is None or b.dtype is not a.dtype or (a.count, b.count, c.count) != (8, 4, 4): return None
    name = f"tg_mma_m16n8k16_{a.dtype.name}_{c.dtype.name}"
    self.needs.add(('mma', name, ptx, self.vtype(a), self.vtype(b), self.vtype(c)))
    return name
  def ldmatrix_helper(self, count, trans, t):
    name = f"tg_ldmatrix_x{count}{'_trans' if trans else ''}_{t.dtype.name}"
    self.needs.add(('ldmatrix', name, count, trans, self.reg(t.dtype), self.vtype(t)))
    return name
  # wgmma (sm_90a): a warpgroup's 64xNx16 from two shared-memory descriptors: start address / 16 (bits 0-13), lbo / 16
  # (16-29), sbo / 16 (32-45), 128-byte swizzle (62-63); `1, 1` scale a and b by one, then whether each is MN-major
  WGMMA = {D.f16: 'f32.f16.f16', D.bf16: 'f32.bf16.bf16'}
  def wgmma_helper(self, dims, dt, a_layout, b_layout, c):
    if dt not in self.WGMMA: return None
    name = f"tg_wgmma_m64n{dims[1]}k16_{dt.name}_{'km'[a_layout[0]]}{'km'[b_layout[0]]}"
    self.needs.add(('wgmma', name, dims[1], self.WGMMA[dt], self.reg(dt), a_layout[0], b_layout[0], self.vtype(c)))
    self.needs.add(('wgmma_desc',))
    return name
  def attention(self, op, args, global_size):
    dt = op.out.type.dtype.name
    a = op.attrs
    if dt not in ('f16', 'bf16') or a['dim'] not in (64, 128) or (a['block_rows'], a['threads']) not in BLOCKS or a['key_rows'] != KEY_ROWS: return None
    self.needs.add(('attention', dt, a['dim'], a['block_rows'], a.get('warpgroup', 0)))
    return attention_call(dt, op, args, global_size[1])
  def attention_grad(self, op, args, global_size):
    dt, a = op.out.type.dtype.name, op.attrs
    if dt not in ('f16', 'bf16') or a['dim'] not in GRAD_DIMS or (a['block_rows'], a['threads']) != (KEY_ROWS, 2 * KEY_ROWS): return None
    self.needs.add(('attention_grad', dt, a['dim'], a.get('warpgroup', 0)))
    return attention_grad_call(dt, op, args, global_size[1])
  def wgmma_args(self, a_layout, b_layout):
    bits = lambda lay: (lay[1] >> 4) << 16 | (lay[2] >> 4) << 32 | 1 << 62
    return [f"{bits(a_layout):#x}ull", f"{bits(b_layout):#x}ull"]
  def wgmma_sync(self, nm, pending=0):
    return {'wgmma_fence': 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
            'wgmma_commit': 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");',
            'wgmma_wait': f'asm volatile("wgmma.wait_group.sync.aligned {pending};" ::: "memory");',
            'fence_async_shared': 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'}[nm]
  def wgmma_function(self, name, n, ptx, reg, ta, tb, vt) -> list[str]:
    regs = ', '.join(f'%{i}' for i in range(n // 2))
    return [f"__device__ inline void {name}(const {reg}* a, const {reg}* b, {vt}& c, unsigned long long fa, unsigned long long fb) {{",
            f"  unsigned long long da = tg_wgmma_desc(a, fa), db = tg_wgmma_desc(b, fb);",
            f'  asm volatile("{{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned.m64n{n}k16.{ptx} {{{regs}}}, %{n // 2}, %{n // 2 + 1}, p, 1, 1, {ta}, {tb}; }}"',
            f'    : {", ".join(f"{chr(34)}+f{chr(34)}(c.v[{i}])" for i in range(n // 2))} : "l"(da), "l"(db) : "memory");', "}"]
  # cp.async (sm_80 and later): .cg (through L2 only) takes 16 bytes, .ca 4 or 8; a source size of 0 zero-fills
  def copy_async(self, dst, src, nbytes, gate):
    self.needs.add(('cp_async', nbytes))
    return f"tg_cp_async{nbytes}({dst}, {src}{'' if gate is None else f', {gate}'});"
  def async_commit(self): return 'asm volatile("cp.async.commit_group;");'
  def async_wait(self, pending): return f'asm volatile("cp.async.wait_group {pending};" ::: "memory");'
  def cp_async_function(self, nbytes) -> list[str]:
    return [f"__device__ inline void tg_cp_async{nbytes}(void* dst, const void* src, bool gate = true) {{",
            f'  asm volatile("cp.async.{"cg" if nbytes == 16 else "ca"}.shared.global [%0], [%1], {nbytes}, %2;"',
            f'    :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(gate ? {nbytes} : 0) : "memory");', "}"]
  def ldmatrix_function(self, name, count, trans, reg, vt) -> list[str]:
    regs = ', '.join(f'%{i}' for i in range(count))
    return [f"__device__ inline {vt} {name}(const {reg}* p) {{",
            f"  {vt} r; unsigned *u = (unsigned *)&r; unsigned a = (unsigned)__cvta_generic_to_shared(p);",
            f'  asm volatile("ldmatrix.sync.aligned.m8n8.x{count}{".trans" if trans else ""}.shared.b16 {{{regs}}}, [%{count}];"',
            f'    : {", ".join(f"{chr(34)}=r{chr(34)}(u[{i}])" for i in range(count))} : "r"(a));',
            "  return r;", "}"]
  def mma_function(self, name, ptx, ta, tb, tc) -> list[str]:
    if 'tf32' in ptx: return self.mma_tf32_function(name, ptx, ta, tb, tc)
    f32 = ptx.startswith('f32')
    outs = ', '.join(f'"+f"(c.{x})' for x in 'xyzw') if f32 else '"+r"(C[0]), "+r"(C[1])'
    cregs = '{%0, %1, %2, %3}' if f32 else '{%0, %1}'
    n = 4 if f32 else 2
    return [f"__device__ inline {tc} {name}({ta} a, {tb} b, {tc} c) {{",
            f"  const unsigned *A = (const unsigned *)&a, *B = (const unsigned *)&b;" + ('' if f32 else ' unsigned *C = (unsigned *)&c;'),
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.{ptx} {cregs}, {{%{n}, %{n+1}, %{n+2}, %{n+3}}}, {{%{n+4}, %{n+5}}}, {cregs};"',
            f'    : {outs} : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));',
            "  return c;", "}"]
  def mma_tf32_function(self, name, ptx, ta, tb, tc) -> list[str]:
    mma = lambda h: (f'  asm volatile("mma.sync.aligned.m16n8k8.row.col.{ptx} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"',
                     f'    : "+f"(c.x), "+f"(c.y), "+f"(c.z), "+f"(c.w) : "r"(A[{4*h}]), "r"(A[{4*h+2}]), "r"(A[{4*h+1}]), "r"(A[{4*h+3}]), "r"(B[{2*h}]), "r"(B[{2*h+1}]));')
    return [f"__device__ inline {tc} {name}({ta} a, {tb} b, {tc} c) {{",
            "  const float *fa = (const float *)&a, *fb = (const float *)&b; unsigned A[8], B[4];",
            '  for (int i = 0; i < 8; i++) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(A[i]) : "f"(fa[i]));',
            '  for (int i = 0; i < 4; i++) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(B[i]) : "f"(fb[i]));',
            *mma(0), *mma(1), "  return c;", "}"]
  def prelude(self):
    # nvcc's implicit cuda_runtime.h brings math.h's INFINITY and NAN: ours replace them (without a redefinition warning)
    out = ['#undef INFINITY', '#define INFINITY (__int_as_float(0x7f800000))', '#undef NAN', '#define NAN (__int_as_float(0x7fffffff))']
    if 'half' in self.needs: out.append('#include <cuda_fp16.h>')
    if 'bf16' in self.needs: out.append('#include <cuda_bf16.h>')
    out += self.emu_functions()
    if ('rcp',) in self.needs:
      # (0, infinities and NaN: the step would make NaN of them; rcp.approx's own is exact there. The step is computed
      # before the choice: `isfinite(e) ? fmaf(r, e, r) : r` became a branch around the fma, one per element, and ptxas
      # interleaves nothing across branches: a matmul's gelu epilogue then ran its 128 elements a thread one by one)
      out += ["__device__ inline float tg_rcp(float x) {",
              '  float r; asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x));',
              "  float e = fmaf(-x, r, 1.0f), s = fmaf(r, e, r);", "  return isfinite(e) ? s : r;", "}"]
    for _, base, reg, n in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == 'vec'):
      if _header_vec(base, n): continue  # (CUDA's own, and cuda_fp16.h's half2 and make_half2)
      names = list('xyzw'[:n]) if n <= 4 else None
      fields = ', '.join(names) if names else f"v[{n}]"
      al = f"__align__({D.BY_NAME[[k for k, v in self.vec_base.items() if v == base][0]].itemsize * n}) " if n in (2, 4, 8, 16) else ''
      params = ', '.join(f"{reg} a{i}" for i in range(n))
      body = '; '.join(f"r.{names[i] if names else f'v[{i}]'} = a{i}" for i in range(n))
      out.append(f"struct {al}{base}{n} {{ {reg} {fields}; }};")
      # (tg_make_: cuda_bf16.h's make_bfloat162 returns its own __nv_bfloat162; a make_bfloat162 of ours would clash)
      out.append(f"__device__ inline {base}{n} tg_make_{base}{n}({params}) {{ {base}{n} r; {body}; return r; }}")
    for _, *mma in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == 'mma'): out += self.mma_function(*mma)
    for _, *ldm in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == 'ldmatrix'): out += self.ldmatrix_function(*ldm)
    for _, n in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == 'cp_async'): out += self.cp_async_function(n)
    if ('wgmma_desc',) in self.needs:
      out += ["__device__ inline unsigned long long tg_wgmma_desc(const void* p, unsigned long long bits) {",
              "  return bits | (((unsigned long long)__cvta_generic_to_shared(p) & 0x3FFFF) >> 4);", "}"]
    for _, *wg in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == 'wgmma'): out += self.wgmma_function(*wg)
    fa = [tuple(x[1:]) for x in self.needs if isinstance(x, tuple) and x[0] == 'attention']
    fg = [tuple(x[1:]) for x in self.needs if isinstance(x, tuple) and x[0] == 'attention_grad']
    if fa or fg: out += attention_functions(fa, fg)
    return out


def nvcc_arch(src: str, arch: str) -> str:
  """The architecture nvcc builds `src` for on a device of `arch` (sm_90, ...): wgmma is sm_90a's alone, the
  architecture-specific target of the 9.0 device it runs on."""
  return arch + 'a' if 'wgmma.' in src and arch == 'sm_90' else arch


def dynamic_shared_bytes(fn) -> int:
  """The dynamic shared memory a launch of this kernel must ask for (0: its arrays are static)."""
  total = shared_layout(fn)[1]
  return total if total > STATIC_SHARED else 0


def render_cuda(module) -> str: return render_module(module, CUDALang())
def render_cuda_kernel(fn) -> str: return render_kernel(fn, CUDALang())
