"""One C-style renderer for the c, cuda, opencl and metal targets: a uop.func read top to bottom.

As tinygrad's renderer: ALU ops are a table of templates, and what differs between languages is data on
a `Lang` subclass (type names, kernel signature, buffer address spaces, thread indices, vector types and
constructors, shared memory, barrier, bitcasts, literals). Names follow tinygrad's: `gidx0`/`lidx0`,
`ridx0` loops, `acc0` accumulators, `val0` loads, `alu0` intermediates, `cast0` casts. A pure value used
once is inlined into its user's expression (`acc0 = (acc0+(val0*val1));`) unless that would move its
reading of an accumulator past the accumulator's update, or its user's template repeats operands.

Semantics are tgc.ir.alu's: integer division, modulo and shifts close their holes with ternaries where the
divisor or shift is not a constant known safe; float max/min propagate NaN (numpy); sub-int integers and
16-bit floats are cast back to their type after every op (C promotes them; _Float16 keeps excess
precision otherwise). A dtype a language lacks natively is either emulated (bf16 in C and OpenCL, the f8
types everywhere, half in OpenCL: stored as their bits, computed as float, rounded after every op; the
conversions are helper functions that compute tgc.ir.dtypes.encode/decode step for step) or a TgcError naming it.
Vector ops are rendered lane by lane (`make_float4((val0.x+val1.x),...)`, as the CUDA seed), so every
language gets the same semantics from scalar templates.
"""
from __future__ import annotations
import math
import numpy as np
from tgc.errors import TgcError
from tgc.ir import alu, dtypes as D
from tgc.ir.types import PtrType, VecType, elem
from tgc.dialects.uop import const_value, launch_dims, buffer_signature
from tgc.dialects.builtin import written_args

NARROW = ('i8', 'i16', 'u8', 'u16', 'f16', 'bf16')   # C promotes these in arithmetic: cast results back
DUP = ('max', 'min', 'idiv', 'mod', 'shl', 'shr')   # templates that repeat operands: operands must be names
INLINE = set(alu.UNARY + alu.BINARY + alu.COMPARE + alu.TERNARY) | {'cast', 'bitcast', 'gep', 'vectorize'}
BINOP = {'add': '+', 'sub': '-', 'mul': '*', 'fdiv': '/', 'and': '&', 'or': '|', 'xor': '^', 'cmplt': '<', 'cmpne': '!=', 'cmpeq': '=='}
XYZW = 'xyzw'
F8 = tuple(d.name for d in D.EMULATED if d.bits == 8)


def bare(e: str) -> str:
  """e without one pair of enclosing parentheses (`if ((a==0))` draws a warning)."""
  if not (e.startswith('(') and e.endswith(')')): return e
  depth = 0
  for i, ch in enumerate(e):
    depth += ch == '('; depth -= ch == ')'
    if depth == 0 and i < len(e) - 1: return e
  return e[1:-1]


class Lang:
  """The C99 language; the others override data and a few hooks."""
  name = 'c'
  kernel_prefix = 'void '
  types = {'i1': 'bool', 'i8': 'signed char', 'i16': 'short', 'i32': 'int', 'i64': 'long long', 'u8': 'unsigned char',
           'u16': 'unsigned short', 'u32': 'unsigned int', 'u64': 'unsigned long long', 'f16': '_Float16', 'f32': 'float', 'f64': 'double'}
  vec_base = {'i1': 'bool', 'i8': 'char', 'i16': 'short', 'i32': 'int', 'i64': 'long', 'u8': 'uchar', 'u16': 'ushort', 'u32': 'uint',
              'u64': 'ulong', 'f16': 'half', 'bf16': 'bfloat16', 'f32': 'float', 'f64': 'double'}
  emulated = {'bf16', *F8}     # stored as their bits, computed as float
  missing: dict[str, str] = {}  # dtype -> why the language lacks it
  native_vecs = (2, 3, 4)      # lane counts with builtin vector types (the rest: a struct of an array)
  int64_sfx = ('ll', 'ull')
  true_false = ('1', '0')
  smem_prefix = ''
  fn_qual = 'static inline'    # how the prelude's helper functions are declared
  barrier = ''
  specials = {'gidx': 'gidx{k}', 'lidx': 'lidx{k}'}
  math = {'exp2': 'exp2', 'log2': 'log2', 'sin': 'sin', 'sqrt': 'sqrt', 'trunc': 'trunc', 'mod': 'fmod'}

  def __init__(self): self.needs: set = set()

  # ---- types ----
  def check(self, dt: D.DType, where: str):
    if dt.name in self.missing: raise TgcError(f"{self.name}: {where}: dtype {dt.name} is not supported by the {self.name} target ({self.missing[dt.name]})")
  def check_vec(self, t: VecType, where: str): pass
  def reg(self, dt: D.DType) -> str:
    """The type a value of dt is computed in."""
    if dt.name in self.emulated: return 'float'
    if dt is D.f16: self.needs.add('half')
    if dt is D.f64: self.needs.add('f64')
    if dt is D.bf16: self.needs.add('bf16')
    return self.types[self.byte_name(dt)]
  def byte_name(self, dt: D.DType) -> str: return f"{dt.kind}8" if dt.width else dt.name  # a sub-byte int is held in a byte
  def mem(self, dt: D.DType) -> str:
    """The element type of a buffer of dt."""
    return self.bits_type(dt.bits) if dt.name in self.emulated else self.reg(dt)
  def bits_type(self, bits: int, signed: bool = False) -> str:
    return self.types[f"{'i' if signed else 'u'}{max(bits, 8)}"]
  def vtype(self, t) -> str:
    if not isinstance(t, VecType): return self.reg(t)
    base = 'float' if t.dtype.name in self.emulated else self.vec_name(t.dtype)
    self.reg(t.dtype)
    self.needs.add(('vec', base, self.reg(t.dtype), t.count))
    return f"{base}{t.count}"
  def vec_name(self, dt) -> str: return self.vec_base[self.byte_name(dt)]
  def lane(self, name: str, i: int, t: VecType) -> str: return f"{name}.{XYZW[i]}" if t.count in self.native_vecs else f"{name}.v[{i}]"
  # signed add, sub, mul and neg that may overflow are written in the unsigned type (tgc's signed arithmetic wraps):
  # OpenCL does (PoCL's clang folded -min(INT_MIN, x) to 0). C builds with -fwrapv; CUDA and Metal keep
  # tinygrad's plain operators, their overflow undefined as in tinygrad (docs/design.md, known gaps)
  signed_wraps = True
  vector_ops: tuple = ()  # ALU ops written on whole vectors (`(a+b)`) where vector_operators(t); the rest lane by lane
  def vector_operators(self, t: VecType) -> bool: return False
  def wmma_helper(self, dims, a: VecType, b: VecType, c: VecType) -> str | None:
    """The name of a function (defined in the prelude) for a uop.wmma of these dims and fragment types; None: none."""
    return None
  def shuffle_xor(self, x: str, mask: int, dt: D.DType) -> str | None:
    """A uop.shuffle_xor of x; None: the target has none."""
    return None
  def ldmatrix_helper(self, count: int, trans: int, t: VecType) -> str | None:
    """The name of a function (defined in the prelude) for a uop.ldmatrix; None: the target has no such read."""
    return None
  def copy_async(self, dst: str, src: str, nbytes: int, gate: str | None) -> str | None:
    """The statement of a uop.copy_async (`dst`, `src`: element pointers); None: the target has none."""
    return None
  def async_commit(self) -> str | None: return None
  def async_wait(self, pending: int) -> str | None: return None
  def wgmma_helper(self, dims, dt: D.DType, a_layout, b_layout, c: VecType) -> str | None:
    """The name of a function (defined in the prelude) for a uop.wgmma: (a pointer, b pointer, c, *wgmma_args), c
    updated in place; None: none."""
    return None
  def wgmma_args(self, a_layout, b_layout) -> list[str]: return []
  def attention_grad(self, op, args: dict[str, str], global_size) -> list[str] | None:
    """The statements of a uop.attention_grad (as attention's); None: the target has no such kernel."""
    return None
  def attention(self, op, args: dict[str, str], global_size) -> list[str] | None:
    """The statements of a uop.attention (args: its operands' expressions by name; global_size: the kernel's grid); None: the
    target has no fused attention kernel (of its dtype, head size, block and threads)."""
    return None
  def wgmma_sync(self, nm: str, pending: int = 0) -> str | None:
    """The statement of a uop.wgmma_fence, wgmma_commit, wgmma_wait or fence_async_shared; None: the target has none."""
    return None
  def vector_alu(self, nm: str, t: VecType, a: list[str]) -> str | None:
    return f"({a[0]}{BINOP[nm]}{a[1]})" if nm in self.vector_ops and self.vector_operators(t) else None
  def ctor(self, t: VecType, lanes: list[str]) -> str:
    vt = self.vtype(t)
    return f"make_{vt}({','.join(lanes)})" if t.count in self.native_vecs else f"({vt}){{{{{','.join(lanes)}}}}}"

  # ---- literals ----
  def literal(self, v, dt: D.DType) -> str:
    x = const_value(v, dt)
    if dt.is_bool: return self.true_false[0] if x else self.true_false[1]
    if dt.is_int:
      x = int(x)
      if dt.bits == 64:
        s, u = self.int64_sfx
        return f"({x + 1}{s}-1)" if x == -(1 << 63) else f"({x}{s})" if x < 0 else f"{x}{u if not dt.is_signed else s}"
      if dt is D.i32 and x == -(1 << 31): return "(-2147483647-1)"
      if dt is D.u32: return f"{x}u"
      return f"({x})" if x < 0 else str(x)
    f = float(x)
    if math.isnan(f): s = 'NAN'
    elif math.isinf(f): s = 'INFINITY' if f > 0 else '(-INFINITY)'
    else:
      s = repr(f) if dt is D.f64 else str(np.float32(f))
      if '.' not in s and 'e' not in s and 'n' not in s: s += '.0'
      if dt is not D.f64: s += 'f'
      if f < 0 or s.startswith('-'): s = f"({s})"
    if dt is D.f64: return f"((double){s})" if not math.isfinite(f) else s
    if dt is D.f32 or dt.name in self.emulated: return s
    return f"(({self.reg(dt)}){s})"

  # ---- hooks per language ----
  def signature(self, k: 'KernelRenderer') -> str:
    args = [f"{'const ' if i not in k.written else ''}{self.mem(dt)}* restrict data{i}" for i, dt in enumerate(k.sig)]
    args += [f"{self.reg(dt)} {n}" for n, dt in k.vars] + ['int start', 'int end']
    return f"{self.kernel_prefix}{k.name}({', '.join(args)})"
  def special(self, axis: str) -> str: return self.specials[axis[:4]].format(k=int(axis[4]), x=XYZW[int(axis[4])])
  def special_again(self, axis: str, name: str, reg: str) -> str:
    """The declaration of a later read of a special (linearize reads them again where nothing computed from the
    first reads may be used)."""
    return f"{reg} {name} = {self.special(axis)};"
  def wrap(self, dt: D.DType, e: str) -> str:
    """Round a computed value back to dt."""
    if dt.fmt and dt.name in self.emulated: self.needs.add(f'emu:{dt.name}'); return f"tg_{dt.name}_round({e})"
    if dt.width:  # a sub-byte int: two's complement in its bits (the mask, then the sign bit's weight negated)
      m, h = (1 << dt.bits) - 1, 1 << (dt.bits - 1)
      return f"(({self.reg(dt)})((((int)({e})&{m})^{h})-{h}))" if dt.is_signed else f"(({self.reg(dt)})((int)({e})&{m}))"
    if dt.name in NARROW: return f"(({self.reg(dt)}){e})"
    return e
  def load(self, buf: str, idx: str, t, space: str) -> str:
    dt, n = elem(t), (t.count if isinstance(t, VecType) else None)
    if dt.name in self.emulated:
      one = lambda i: self.emu_load(dt, buf, idx if i == 0 else f"{idx}+{i}")
      return one(0) if n is None else self.ctor(t, [one(i) for i in range(n)])
    if n is None: return f"*({buf}+{idx})"
    return self.vec_load(buf, idx, t, space)
  def vec_load(self, buf, idx, t, space) -> str: return f"*(({space}{self.vtype(t)}*)({buf}+{idx}))"
  def store(self, buf: str, idx: str, v: str, lanes, t, space: str) -> str:
    dt, n = elem(t), (t.count if isinstance(t, VecType) else None)
    if dt.name in self.emulated:
      if n is None: return self.emu_store(dt, buf, idx, v)
      return ' '.join(self.emu_store(dt, buf, f"{idx}+{i}", lanes[i]) for i in range(n))
    if n is None: return f"*({buf}+{idx}) = {v};"
    return self.vec_store(buf, idx, v, t, space)
  def vec_store(self, buf, idx, v, t, space) -> str: return f"*(({space}{self.vtype(t)}*)({buf}+{idx})) = {v};"
  def emu_load(self, dt, buf, idx) -> str: return self.from_bits(f"*({buf}+{idx})", dt)
  def emu_store(self, dt, buf, idx, v) -> str: return f"*({buf}+{idx}) = {self.to_bits(v, dt)};"
  def recip(self, x: str, dt: D.DType) -> str: return f"({self.literal(1.0, dt)}/{x})"
  def math_fn(self, op: str, dt: D.DType, args: list[str]) -> str:
    f = self.math[op] + ('f' if dt is not D.f64 else '')
    return f"{f}({', '.join(args)})"
  def bitcast(self, x: str, src: D.DType, dst: D.DType) -> str:
    if src.name in self.emulated or dst.name in self.emulated:  # through the bits (a float's bits, not its value)
      u = D.BY_NAME[f'u{src.bits}']
      bits = self.to_bits(x, src) if src.name in self.emulated else self.bitcast_native(x, src, u) if src.is_float else f"({self.bits_type(src.bits)})({x})"
      if dst.name in self.emulated: return self.from_bits(bits, dst)
      return self.bitcast_native(bits, u, dst) if dst.is_float else f"(({self.reg(dst)}){bits})"
    if not src.is_float and not dst.is_float: return self.cast(x, src, dst)  # (a sub-byte int wraps)
    return self.bitcast_native(x, src, dst)
  def bitcast_native(self, x, src, dst) -> str:
    return f"((union {{{self.reg(src)} a; {self.reg(dst)} b;}}){{.a = {x}}}).b"
  def to_bits(self, x, dt) -> str: self.needs.add(f'emu:{dt.name}'); return f"tg_f32_to_{dt.name}({x})"
  def from_bits(self, x, dt) -> str: self.needs.add(f'emu:{dt.name}'); return f"tg_{dt.name}_to_f32({x})"
  def emu_functions(self) -> list[str]:
    """The conversions of the emulated floats used: tgc.ir.dtypes.encode/decode, step for step."""
    out = []
    for dt in D.EMULATED:
      if f'emu:{dt.name}' not in self.needs: continue
      f, n, q, U, B = dt.fmt, dt.name, self.fn_qual, self.types['u32'], self.bits_type(dt.bits)
      u2f, f2u, lit = (lambda e: self.bitcast_native(e, D.u32, D.f32)), (lambda e: self.bitcast_native(e, D.f32, D.u32)), (lambda v: self.literal(v, D.f32))
      if f.wide:  # bf16: float32's top half
        dec = f"return {u2f(f'({U})b << 16')};"
        enc = f"if (f != f) return {hex(f.nan_code)}; {U} u = {f2u('f')}; return ({B})((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);"
      else:
        sh, sub = 23 - f.man, f2u(f"(float)m * {lit(2.0 ** (1 - f.bias - f.man))}")
        dec = (f"{U} m = b & 0x7Fu, s = ({U})(b & 0x80u) << 24; {U} r = m < {1 << f.man}u ? {sub} : (m << {sh}) + {(127 - f.bias) << 23}u; "
               + (f"if (m >= {f.inf_code}u) r = m == {f.inf_code}u ? 0x7F800000u : 0x7FC00000u; " if f.kind == 'ieee' else '')
               + ("if (m == 0x7Fu) r = 0x7FC00000u; " if f.kind == 'fn' else '') + ("if (b == 0x80u) s = 0u, r = 0x7FC00000u; " if f.kind == 'fnuz' else '')
               + f"return {u2f('r | s')};")
        magic = f2u(f"{u2f('a')} + {lit(float(np.uint32(f.magic_bits).view(np.float32)))}")  # the float add rounds a subnormal
        enc = (f"{U} u = {f2u('f')}, a = u & 0x7FFFFFFFu, s = (u >> 24) & 0x80u; if (f != f) return {hex(f.nan_code)}; "
               f"if (a >= {int(np.float32(f.max).view(np.uint32))}u) return ({B})(s | {hex(f.max_code)}u); "
               f"{U} r = a < {f.min_normal_bits}u ? {magic} - {f.magic_bits}u : (a - {(127 - f.bias) << 23}u + {(1 << (sh - 1)) - 1}u + ((a >> {sh}) & 1u)) >> {sh}; "
               + ("if (r == 0u) return 0; " if f.kind == 'fnuz' else '') + f"return ({B})(s | r);")
      out += [f"{q} float tg_{n}_to_f32({B} b) {{ {dec} }}", f"{q} {B} tg_f32_to_{n}(float f) {{ {enc} }}",
              f"{q} float tg_{n}_round(float f) {{ return tg_{n}_to_f32(tg_f32_to_{n}(f)); }}"]
    # a float to a 64-bit int as exec_cast defines it (C leaves negatives to unsigned and NaN undefined): truncated,
    # |t| < 2^63 through int64 (wrapped), t == -2^63 or an unsigned t in [2^63, 2^64] 0x8000000000000000, else 0
    for need in sorted(x for x in self.needs if isinstance(x, str) and x.startswith('f2int:')):
      _, sn, dn = need.split(':')
      S, R, q = self.reg(D.BY_NAME[sn]), self.reg(D.BY_NAME[dn]), self.fn_qual
      lo, hi = D.min_max(D.BY_NAME[dn])
      big = f"{1 << 63}{self.int64_sfx[1]}"
      out.append(f"{q} {R} tg_{sn}_to_{dn}({S} x) {{ {S} t = trunc(x); if (fabs(t) < {float(1 << 63)!r}) return ({R})({self.reg(D.i64)})t; "
                 f"return (t >= {float(lo)!r} && t <= {float(hi)!r}) ? ({R}){big} : ({R})0; }}")
    return out
  def cast(self, x: str, src: D.DType, dst: D.DType) -> str:
    if src is dst: return x
    if dst.is_bool: return f"({x}!={self.literal(0, src)})"
    if src.name in self.emulated or (src.is_float and src.bits == 16): x, src = f"(float)({x})", D.f32  # 16-bit floats: through float
    if dst.is_float:
      if src.is_int and src.bits == 64 and dst is not D.f64: x = f"(double)({x})"  # numpy converts through float64
      if dst.fmt and (src is D.f64 or src.is_int): x = f"(float)({x})"         # bf16 and f8 round from float32
      if dst.name in self.emulated: return self.wrap(dst, x if dst.fmt or x.startswith('(float)') else f"(float)({x})")
      return f"(({self.reg(dst)})({x}))"
    if src.is_float:  # numpy's: through int64, wrapped; beyond int64 (or NaN, inf) 0: a C conversion there is undefined
      sn, via = 'f64' if src is D.f64 else 'f32', dst if dst.bits == 64 else D.i64  # (CUDA saturates, PoCL's vectors differ)
      self.needs.add(f'f2int:{sn}:{via.name}')
      if dst.bits == 64: return f"tg_{sn}_to_{dst.name}({x})"
      x = f"tg_{sn}_to_i64({x})"
    return self.wrap(dst, x) if dst.width else f"(({self.reg(dst)})({x}))"
  def prelude(self) -> list[str]:
    out = ['#include <stdbool.h>', '#include <math.h>', '#include <string.h>'] + self.emu_functions()
    out += self.vec_typedefs()
    return out
  def vec_typedefs(self) -> list[str]:
    return [f"typedef struct {{ {reg} v[{n}]; }} {base}{n};" for _, base, reg, n in sorted(x for x in self.needs if isinstance(x, tuple))]
  def grid_open(self, k: 'KernelRenderer') -> list[str]:
    """C: the kernel loops over its launch grid (gidx0 from start to end, as the llvm target)."""
    lines, k.loops = ['for (int gidx0 = start; gidx0 < end; gidx0++) {'], {'gidx0'}
    for ax, n in [(f"gidx{i}", k.gs[i]) for i in (1, 2)] + [(f"lidx{i}", k.ls[i]) for i in range(3)]:
      if n > 1: lines.append(f"for (int {ax} = 0; {ax} < {n}; {ax}++) {{"); k.loops.add(ax)
    return lines
  def grid_close(self, k) -> int: return 1 + sum(1 for n in k.gs[1:] + k.ls if n > 1)
  def define_local(self, k, op) -> str:
    if math.prod(k.ls) > 1: raise op.error(f"in @{k.name}: shared memory across a work-group of more than one thread is not supported by the {self.name} target")
    return f"{self.reg(op.results[0].type.dtype)} {op.attrs['sym']}[{op.attrs['size']}];"
  def render_barrier(self, k, op) -> str:
    if math.prod(k.ls) > 1: raise op.error(f"in @{k.name}: a barrier across a work-group of more than one thread is not supported by the {self.name} target")
    return '/* barrier: one thread per work-group */'
  def space(self, buf_op, written: bool) -> str: return ''


class KernelRenderer:
  def __init__(self, lang: Lang, fn):
    if fn.name != 'uop.func': raise TgcError(f"{lang.name}: expects a uop.func, got '{fn.name}'")
    self.lang, self.fn, self.name = lang, fn, fn.sym_name
    self.gs, self.ls = (list(x) for x in launch_dims(fn))
    self.sig = buffer_signature(fn)
    ops = self.ops = fn.body.ops
    self.written = written_args(fn)
    from tgc.dialects.uop_bounds import unproven_accesses
    self.bounds_memo: dict = {}
    self.unproven = unproven_accesses(fn, self.bounds_memo)  # guarded at run time: no access leaves its buffer
    self.vars = [(op.attrs['sym'], op.results[0].type) for op in ops if op.name == 'uop.define_var']
    self.pos = {r: i for i, op in enumerate(ops) for r in op.results}
    self.users: dict = {}
    for i, op in enumerate(ops):
      for v in op.operands: self.users.setdefault(v, []).append(i)
    self.expr: dict = {}    # Value -> expression text
    self.reads: dict = {}   # a special's axis -> how many times it was read before (its later reads are named apart)
    self.lanes: dict = {}   # vector Value -> lane expressions
    self.count: dict = {}
    self.lines: list[str] = []
    self.depth = 1

  def err(self, op, msg):
    """A refusal located at the op (its line in the input, where it came from text)."""
    return op.error(f"{msg} (in @{self.name})")

  def fresh(self, prefix: str) -> str:
    n = self.count.get(prefix, 0); self.count[prefix] = n + 1
    return f"{prefix}{n}"

  def guarded(self, op, t, gate: str | None) -> str | None:
    """The gate, and-ed with `0 <= idx && idx <= size - lanes` where the bounds analysis proved nothing."""
    d = op.buf.op
    size = d.attrs.get('size') if d is not None else None
    if op not in self.unproven or size is None: return gate
    n = t.count if isinstance(t, VecType) else 1
    idx = self.get(op.idx)
    ok = f"(({idx})>=0&&({idx})<={size - n})"
    return ok if gate is None else f"({gate}&&{ok})"

  def masked(self, op):
    """A load or store under a vector gate, lane by lane: each lane is read (else the alternative's) or written where
    its own gate is true and, where the bounds analysis proved nothing, it lies inside the buffer."""
    L, load = self.lang, op.name == 'uop.load'
    t = op.results[0].type if load else op.value.type
    d, buf, idx, space = op.buf.op, self.get(op.buf), self.get(op.idx), self.space(op.buf)
    size = d.attrs.get('size') if d is not None and op in self.unproven else None
    parts = []
    for l in range(t.count):
      i = f"({idx})+{l}" if l else f"({idx})"
      cond = self.lane(op.gate, l) + (f"&&{i}>=0&&{i}<{size}" if size is not None else '')
      if load: parts.append(f"(({cond})?{L.load(buf, i, t.dtype, space)}:{self.lane(op.alt, l)})")
      else: self.emit(f"if ({cond}) {{ {L.store(buf, i, self.lane(op.value, l), None, t.dtype, space)} }}")
    if load:
      name = self.fresh('val')
      self.emit(f"{L.vtype(t)} {name} = {L.ctor(t, parts)};")
      self.set_name(op.results[0], name)

  def emit(self, line: str):
    if line.startswith('}'): self.depth -= 1
    self.lines.append('  ' * self.depth + line)
    if line.endswith('{'): self.depth += 1

  # ---- which values are inlined ----
  def plan(self):
    ops, acc_of, phis = self.ops, {}, {}
    for i, op in enumerate(ops):
      if op.name == 'uop.define_acc': acc_of[op.results[0]] = op.results[0]
      elif op.name == 'uop.phi':
        a = acc_of.get(op.acc, op.acc); acc_of[op.results[0]] = a; phis.setdefault(a, []).append(i)
    self.inline, accs, start = set(), {}, {}
    for i, op in enumerate(ops):
      if not op.results: continue
      r = op.results[0]
      nm = op.name[4:]
      accs[r] = {acc_of[v] for v in op.operands if v in acc_of} | set().union(*(accs.get(v, set()) for v in op.operands if v in self.inline))
      start[r] = min([i] + [start[v] for v in op.operands if v in self.inline])
      us = self.users.get(r, [])
      if nm not in INLINE or len(us) != 1: continue
      u = ops[us[0]]
      if u.name[4:] in DUP: continue
      if u.name == 'uop.define_acc' and not (nm == 'vectorize' and all(s.op is not None and s.op.name == 'uop.const' for s in op.operands)): continue
      if any(start[r] < p < us[0] for a in accs[r] for p in phis.get(a, ())): continue
      self.inline.add(r)

  # ---- values ----
  def get(self, v) -> str:
    try: return self.expr[v]
    except KeyError: raise TgcError(f"{self.lang.name}: @{self.name}: value %{v.hint} is used where its definition does not reach") from None

  def offset(self, buf, v) -> str:
    """An address's index, to follow `buf+`. Into global memory, an inline add that provably does not wrap is written
    as its terms, each added to the pointer (reassociate-index orders them varying, loop-invariant, constant): the
    compiler adds the varying part to the pointer once a step for all the accesses that share it, and makes each
    one's constant the instruction's offset. Shared memory's indices stay 32-bit sums: its addresses are 32 bits
    where a pointer's are 64 (written as pointer terms too, the TF32 matmul's fragment reads ran 24 % slower)."""
    op = v.op
    if not buf.type.local and v in self.inline and op is not None and op.name == 'uop.add' and isinstance(v.type, D.DType) and v.type.is_signed and self.nsw(op):
      return f"{self.offset(buf, op.operands[0])}+{self.get(op.operands[1])}"
    return self.get(v)

  def lane(self, v, i: int) -> str:
    if isinstance(v.type, VecType): return self.lanes[v][i]
    return self.get(v)  # a scalar broadcast into a vector op

  def bind(self, op, e: str, prefix: str, lanes=None):
    """Give op's result the expression e; declare a variable unless it is inlined."""
    r, t = op.results[0], op.results[0].type
    if r in self.inline:
      self.expr[r] = e
      if lanes is not None: self.lanes[r] = lanes
      return
    name = self.fresh(prefix)
    self.emit(f"{self.lang.vtype(t)} {name} = {e};")
    self.set_name(r, name)

  def set_name(self, r, name: str):
    self.expr[r] = name
    if isinstance(r.type, VecType): self.lanes[r] = [self.lang.lane(name, i, r.type) for i in range(r.type.count)]

  # ---- ALU ----
  def alu(self, nm: str, dt: D.DType, a: list[str], op) -> str:
    L = self.lang
    if nm in alu.COMPARE: return f"({a[0]}{BINOP[nm]}{a[1]})"
    if nm == 'where': return f"({a[0]}?{a[1]}:{a[2]})"
    if dt.is_bool:
      if nm == 'not': return f"(!{a[0]})"
      m = {'and': '&', 'min': '&', 'mul': '&', 'or': '|', 'max': '|', 'add': '|', 'xor': '^', 'sub': '^'}
      if nm in m: return f"({a[0]}{m[nm]}{a[1]})"
      if nm == 'mulacc': return f"(({a[0]}&{a[1]})|{a[2]})"
      raise self.err(op, f"is not defined on {dt}")
    if nm in ('max', 'min'):
      c = '>=' if nm == 'max' else '<='
      # `|`, not `||`: both tests are cheap, and without a short circuit the compiler makes a select, not a branch
      if dt.is_float: return f"((({a[0]}{c}{a[1]})|({a[0]}!={a[0]}))?{a[0]}:{a[1]})"
      return f"(({a[0]}{c[0]}{a[1]})?{a[0]}:{a[1]})"
    if dt.is_float:
      if nm == 'neg': r = f"(-{a[0]})"
      elif nm == 'recip': r = L.recip(a[0], dt)
      elif nm in ('exp2', 'log2', 'sin', 'sqrt', 'trunc', 'mod'): r = L.math_fn(nm, dt, a)
      elif nm == 'idiv': r = L.math_fn('trunc', dt, [f"({a[0]}/{a[1]})"])
      elif nm == 'mulacc': r = f"(({a[0]}*{a[1]})+{a[2]})"
      elif nm in BINOP: r = f"({a[0]}{BINOP[nm]}{a[1]})"
      else: raise self.err(op, f"is not defined on {dt}")
      return L.wrap(dt, r)
    if dt.is_signed and dt.bits >= 32 and not L.signed_wraps and nm in ('neg', 'add', 'sub', 'mul', 'mulacc') and not self.nsw(op):
      # tgc's signed arithmetic wraps; OpenCL C, CUDA and Metal leave overflow undefined (PoCL folded -INT_MIN to 0):
      # compute in the unsigned type, whose conversion back is two's complement on every one of them
      u = lambda x: f"(({L.bits_type(dt.bits)}){x})"
      r = f"(0-{u(a[0])})" if nm == 'neg' else f"({u(a[0])}*{u(a[1])}+{u(a[2])})" if nm == 'mulacc' else f"({u(a[0])}{BINOP[nm]}{u(a[1])})"
      return f"(({L.reg(dt)}){r})"
    if nm == 'neg': r = f"(-{a[0]})"
    elif nm == 'not': r = f"(~{a[0]})"
    elif nm == 'trunc': return a[0]
    elif nm == 'mulacc': r = f"(({a[0]}*{a[1]})+{a[2]})"
    elif nm in ('idiv', 'mod'):
      o = '/' if nm == 'idiv' else '%'
      y = op.operands[1]
      c = self.const_of(y)
      if c is not None and c != 0 and not (dt.is_signed and c == -1): r = f"({a[0]}{o}{a[1]})"
      elif c == 0: r = '0'
      elif dt.is_signed:  # x/0 -> 0; INT_MIN/-1 overflows: the quotient wraps to -x, the remainder is 0
        neg = f"(-{a[0]})" if L.signed_wraps or dt.bits < 32 else f"(({L.reg(dt)})(0-(({L.bits_type(dt.bits)}){a[0]})))"
        r = f"(({a[1]}==0)?0:({a[1]}==(-1))?{neg if nm == 'idiv' else '0'}:({a[0]}{o}{a[1]}))"
      else: r = f"(({a[1]}==0)?0:({a[0]}{o}{a[1]}))"
    elif nm in ('shl', 'shr'):
      c = self.const_of(op.operands[1])
      ut = L.bits_type(max(dt.bits, 32)) if dt.bits < 32 else L.bits_type(dt.bits)
      x = f"(({ut}){a[0]}<<{a[1]})" if nm == 'shl' else f"({a[0]}>>{a[1]})"  # shl in unsigned: no signed overflow
      if c is not None and 0 <= c < dt.bits: r = x
      elif c is not None: r = '0'
      else: r = f"((({L.bits_type(dt.bits)}){a[1]}<{dt.bits}u)?{x}:0)"
      # (a signed shl computed in unsigned is the signed type again: compared with a negative value, it would compare
      # as unsigned)
      if nm == 'shl' and dt.is_signed and dt.bits >= 32: r = f"(({L.reg(dt)}){r})"
    elif nm in BINOP: r = f"({a[0]}{BINOP[nm]}{a[1]})"
    else: raise self.err(op, f"is not defined on {dt}")
    return L.wrap(dt, r) if dt.name in NARROW or dt.width else r

  def nsw(self, op) -> bool:
    """Whether op (an add, sub or mul) provably stays inside its signed type: index arithmetic, written plainly."""
    from tgc.dialects.uop_bounds import no_signed_wrap
    return op is not None and no_signed_wrap(op, self.bounds_memo)

  def const_of(self, v):
    if v.op is not None and v.op.name == 'uop.const' and isinstance(v.type, D.DType): return int(const_value(v.op.attrs['value'], v.type))
    return None

  # ---- the walk ----
  def render(self) -> str:
    L, ops = self.lang, self.ops
    for op in ops:
      for v in list(op.results) + list(op.operands):
        t = v.type
        L.check(t.dtype if isinstance(t, (PtrType, VecType)) else t, f"@{self.name}: '{op.name}'")
        if isinstance(t, VecType): L.check_vec(t, f"@{self.name}: '{op.name}'")
    self.plan()
    acc_at: dict[int, list] = {}
    for i, op in enumerate(ops):
      if op.name == 'uop.define_acc':
        first = min([self.pos[x] for x in op.ranges if x in self.pos] + [i])
        acc_at.setdefault(first, []).append(op)
    for ln in L.grid_open(self): self.emit(ln)
    for i, op in enumerate(ops):
      for a in acc_at.get(i, ()):
        name = self.fresh('acc')
        t = a.results[0].type
        self.emit(f"{L.vtype(t)} {name} = {self.init_of(a.init, t)};")
        self.set_name(a.results[0], name)
      self.op(op)
    for _ in range(L.grid_close(self)): self.emit('}')
    body = '\n'.join(self.lines)
    return f"{L.signature(self)} {{\n{body}\n}}"

  def init_of(self, v, t) -> str:
    if isinstance(t, VecType) and v.op is not None and v.op.name == 'uop.const': return self.lang.ctor(t, [self.lang.literal(v.op.attrs['value'], t.dtype)] * t.count)
    return self.get(v)

  def op(self, op):
    L, nm = self.lang, op.name[4:]
    res = op.results[0] if op.results else None
    t = res.type if res is not None else None
    if nm == 'define_global': self.expr[res] = f"data{op.attrs['index']}"
    elif nm == 'define_local':
      self.emit(L.define_local(self, op)); self.expr[res] = op.attrs['sym']
    elif nm == 'define_var': self.expr[res] = op.attrs['sym']
    elif nm == 'special':
      ax = op.attrs['axis']
      self.expr[res] = ax
      if L.name != 'c':
        n = self.reads[ax] = self.reads.get(ax, -1) + 1  # (an axis read again: its reads are named apart)
        if n: self.expr[res] = name = f"{ax}_{n}"; self.emit(L.special_again(ax, name, L.reg(t)))
        else: self.emit(f"{L.reg(t)} {ax} = {L.special(ax)}; /* {op.attrs['size']} */")
      elif ax not in self.loops: self.expr[res] = '0'
      elif t is not D.i32: self.expr[res] = f"(({L.reg(t)}){ax})"
    elif nm == 'const':
      dt = elem(t)
      if isinstance(t, VecType):
        lanes = [L.literal(op.attrs['value'], dt)] * t.count
        self.expr[res], self.lanes[res] = L.ctor(t, lanes), lanes
      else: self.expr[res] = L.literal(op.attrs['value'], dt)
    elif nm == 'define_acc': pass  # declared before the first loop it accumulates over
    elif nm == 'phi':
      name = self.get(op.acc)
      self.emit(f"{name} = {self.get(op.value)};")
      self.set_name(res, name)
    elif nm == 'range':
      name, ty = self.fresh('ridx'), L.reg(t)
      self.emit(f"for ({ty} {name} = {self.get(op.start)}; {name} < {self.get(op.end)}; {name}++) {{")
      self.expr[res] = name
    elif nm in ('endrange', 'endif'): self.emit('}')
    elif nm == 'if': self.emit(f"if ({bare(self.get(op.cond))}) {{")
    elif nm == 'barrier': self.emit(L.render_barrier(self, op))
    elif nm in ('load', 'store') and op.gate is not None and isinstance(op.gate.type, VecType): self.masked(op)
    elif nm == 'load':
      e = L.load(self.get(op.buf), self.offset(op.buf, op.idx), t, self.space(op.buf))
      cond = self.guarded(op, t, self.get(op.gate) if op.gate is not None else None)
      if cond is not None:
        alt = self.get(op.alt) if op.alt is not None else (L.ctor(t, ['0'] * t.count) if isinstance(t, VecType) else '0')
        e = f"({cond}?{e}:{alt})"
      name = self.fresh('val')
      self.emit(f"{L.vtype(t)} {name} = {e};")
      self.set_name(res, name)
    elif nm == 'store':
      vt = op.value.type
      s = L.store(self.get(op.buf), self.offset(op.buf, op.idx), self.get(op.value), self.lanes.get(op.value), vt, self.space(op.buf))
      cond = self.guarded(op, vt, self.get(op.gate) if op.gate is not None else None)
      self.emit(f"if ({bare(cond)}) {{ {s} }}" if cond is not None else s)
    elif nm == 'vectorize':
      lanes = [self.get(s) for s in op.srcs]
      self.bind(op, L.ctor(t, lanes), 'cast', lanes)
    elif nm == 'gep':
      self.bind(op, self.lanes[op.vec][op.attrs['index']], 'gep')
    elif nm in ('cast', 'bitcast'):
      src, dst = elem(op.src.type), elem(t)
      f = (lambda x: L.cast(x, src, dst)) if nm == 'cast' else (lambda x: L.bitcast(x, src, dst))
      self.vec_or_scalar(op, lambda i: f(self.lane(op.src, i)), 'cast')
    elif nm in INLINE and isinstance(t, VecType) and all(v.type == t for v in op.operands) and \
        (e := L.vector_alu(nm, t, [self.get(v) for v in op.operands])) is not None:
      # its lanes index the whole expression: a user that reads it lane by lane (exp2 on C's vectors) would repeat it
      # in every lane, and a chain of such users grows exponentially (a 94 MB function crashed gcc): a variable then
      if res in self.inline and not self.reads_whole(res): self.inline.discard(res)
      self.bind(op, e, 'alu', [L.lane(e, i, t) for i in range(t.count)])
    elif nm in INLINE:
      dt = elem(op.operands[0].type) if nm in alu.COMPARE else elem(t)
      if nm == 'where': dt = elem(t)
      self.vec_or_scalar(op, lambda i: self.alu(nm, dt, [self.lane(v, i) for v in op.operands], op), 'alu')
    elif nm == 'shuffle_xor':
      e = L.shuffle_xor(self.get(op.value), op.attrs['mask'], t)
      if e is None: raise self.err(op, f"is not supported by the {L.name} target")
      name = self.fresh('shf')
      self.emit(f"{L.vtype(t)} {name} = {e};")
      self.set_name(res, name)
    elif nm == 'ldmatrix':
      fn = L.ldmatrix_helper(op.attrs['count'], op.attrs['trans'], t)
      if fn is None: raise self.err(op, f"is not supported by the {L.name} target")
      name = self.fresh('ldm')
      self.emit(f"{L.vtype(t)} {name} = {fn}({self.get(op.buf)}+{self.offset(op.buf, op.idx)});")
      self.set_name(res, name)
    elif nm in ('copy_async', 'async_commit', 'async_wait'):
      line = L.copy_async(f"{self.get(op.dst)}+{self.offset(op.dst, op.didx)}", f"{self.get(op.src)}+{self.offset(op.src, op.sidx)}", op.attrs['bytes'],
                          None if op.gate is None else bare(self.get(op.gate))) if nm == 'copy_async' else \
             L.async_commit() if nm == 'async_commit' else L.async_wait(op.attrs['pending'])
      if line is None: raise self.err(op, f"is not supported by the {L.name} target")
      self.emit(line)
    elif nm == 'wgmma':
      fn = L.wgmma_helper(tuple(op.attrs['dims']), op.a.type.dtype, tuple(op.attrs['a_layout']), tuple(op.attrs['b_layout']), t)
      if fn is None: raise self.err(op, f"is not supported by the {L.name} target")
      # the accumulator is updated in place where nothing reads it after (its define_acc's phi only names it): a copy of
      # its registers between two asynchronous wgmmas would make ptxas wait for the first before the second
      c, me = op.c, self.ops.index(op)
      in_place = c.op is not None and c.op.name in ('uop.define_acc', 'uop.wgmma') and all(u == me or (self.ops[u].name == 'uop.phi' and self.ops[u].acc is c) for u in self.users[c])
      if in_place: name = self.get(c)
      else:
        name = self.fresh('wg')
        self.emit(f"{L.vtype(t)} {name} = {self.get(c)};")
      args = [f"{self.get(op.a)}+{self.offset(op.a, op.aidx)}", f"{self.get(op.b)}+{self.offset(op.b, op.bidx)}", name] + L.wgmma_args(op.attrs['a_layout'], op.attrs['b_layout'])
      self.emit(f"{fn}({', '.join(args)});")
      self.set_name(res, name)
    elif nm in ('wgmma_fence', 'wgmma_commit', 'wgmma_wait', 'fence_async_shared'):
      line = L.wgmma_sync(nm, op.attrs.get('pending', 0))
      if line is None: raise self.err(op, f"is not supported by the {L.name} target")
      self.emit(line)
    elif nm in ('attention', 'attention_grad'):
      lines = getattr(L, nm)(op, {n: self.get(vs[0]) for n, vs in op.operand_groups().items() if vs}, self.gs)
      if lines is None: raise self.err(op, f"is not supported by the {L.name} target: it has no fused attention kernel of its shape")
      for line in lines: self.emit(line)
    elif nm == 'wmma':
      a, b, c = (v.type for v in op.operands)
      fn = L.wmma_helper(tuple(op.attrs['dims']), a, b, c)
      if fn is None: raise self.err(op, f"{list(op.attrs['dims'])} on {a}, {b} -> {c}: no such tensor-core instruction on the {L.name} target")
      self.bind(op, f"{fn}({', '.join(self.get(v) for v in op.operands)})", 'wmma')
    else: raise self.err(op, f"is not supported by the {L.name} target")

  def reads_whole(self, v) -> bool:
    """Whether v's one user takes it as a whole vector (a vector ALU expression of the target, a store), not lane by lane."""
    u = self.ops[self.users[v][0]]
    un, ut = u.name[4:], (u.results[0].type if u.results else None)
    if un == 'store': return True
    return un in INLINE and isinstance(ut, VecType) and all(w.type == ut for w in u.operands) and \
      self.lang.vector_alu(un, ut, ['x'] * len(u.operands)) is not None

  def vec_or_scalar(self, op, lane_fn, prefix):
    t = op.results[0].type
    if isinstance(t, VecType):
      lanes = [lane_fn(i) for i in range(t.count)]
      self.bind(op, self.lang.ctor(t, lanes), prefix, lanes)
    else: self.bind(op, lane_fn(None), prefix)

  def space(self, buf) -> str:
    return self.lang.space(buf.op, buf.op.name == 'uop.define_global' and buf.op.attrs['index'] in self.written)


def render_module(module, lang: Lang) -> str:
  """Every uop.func of module (a Module or a list of ops) -> one source text: the prelude once, then the kernels in order."""
  fns = [op for op in (module if isinstance(module, list) else module.ops) if op.name == 'uop.func']
  if not fns: raise TgcError(f"{lang.name}: the module has no uop.func to render (lower it to the uop level first)")
  names = [f.sym_name for f in fns]
  if len(set(names)) != len(names): raise TgcError(f"{lang.name}: two kernels share a name")
  kernels = [KernelRenderer(lang, f).render() for f in fns]
  return '\n'.join(lang.prelude() + kernels) + '\n'


def render_kernel(fn, lang: Lang) -> str:
  """One uop.func -> a complete source text (prelude and kernel)."""
  return render_module([fn], lang)
