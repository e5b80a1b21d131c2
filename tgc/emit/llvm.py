"""The LLVM emitter: a uop.func -> LLVM IR text (opaque pointers), written directly (Builder: llvmlite.binding parses
it; building llvmlite.ir objects and printing them took twice as long, three times on the median kernel).

A kernel becomes `void @name(ptr %data0, ..., ptr %dataN, i32 %start, i32 %end)` that loops itself over
its launch grid: gidx0 (from start to end, so a runtime may split it across threads), then gidx1, gidx2,
lidx0..2. Every op means exactly what tgc.ir.alu says: integer division, modulo and shifts close their
holes with selects (no UB, no traps), float min/max follow numpy (NaN propagates), and no fast-math flag
is set, so LLVM may not reassociate or contract. Registers hold a dtype's compute type: i1 as i1 (stored
as a byte), f16 as `half`, the emulated floats (bf16, f8*) as a `float` already rounded to them (stored as their
bits: tgc.ir.dtypes.encode/decode, step for step).
"""
from __future__ import annotations
import struct
import numpy as np
from tgc.errors import TgcError
from tgc.dialects.uop_bounds import unproven_accesses, no_signed_wrap
from tgc.ir import alu, dtypes as D
from tgc.ir.types import VecType, elem
from tgc.dialects.uop import const_value, launch_dims, buffer_signature, acc_init_points, WARP_OPS


# ---- LLVM IR as text: types, values, instructions (what the emitter needs of LLVM's IR builder, printed directly) ----
class Ty:
  """An LLVM type: `text` as LLVM prints it; `kind` int | float | ptr | void | vec; `width` (bits of an int or
  float), `count` and `element` (a vector's). Made once per distinct type (ty())."""
  __slots__ = ('text', 'kind', 'width', 'count', 'element', 'intrinsic_name')
  def __init__(self, text, kind, width=0, count=None, element=None):
    self.text, self.kind, self.width, self.count, self.element = text, kind, width, count, element
    self.intrinsic_name = {'half': 'f16', 'float': 'f32', 'double': 'f64'}.get(text) or (f"i{width}" if kind == 'int' else '')
  def __repr__(self): return self.text
  @property
  def is_vec(self) -> bool: return self.count is not None

_TYPES: dict = {}

def int_ty(bits: int) -> Ty:
  t = _TYPES.get(bits)
  if t is None: t = _TYPES[bits] = Ty(f"i{bits}", 'int', bits)
  return t

def vec_ty(t: Ty, n: int | None) -> Ty:
  if n is None: return t
  v = _TYPES.get((t, n))
  if v is None: v = _TYPES[(t, n)] = Ty(f"<{n} x {t.text}>", 'vec', t.width, n, t)
  return v

I1, I8, I16, I32, I64 = (int_ty(n) for n in (1, 8, 16, 32, 64))
PTR, VOID = Ty('ptr', 'ptr'), Ty('void', 'void')
_FLOAT = {'f16': Ty('half', 'float', 16), 'f32': Ty('float', 'float', 32), 'f64': Ty('double', 'float', 64)}
F32, F64 = _FLOAT['f32'], _FLOAT['f64']


class Val:
  """An LLVM value: its type and how an operand names it (`%x`, a constant's text); an instruction's name is given
  when the function is printed (`name`: the one asked for, else a number)."""
  __slots__ = ('type', 'ref', 'name')
  def __init__(self, type: Ty, ref: str | None = None, name: str | None = None): self.type, self.ref, self.name = type, ref, name
  def __str__(self): return self.ref
  @property
  def typed(self) -> str: return f"{self.type.text} {self.ref}"


class Phi(Val):
  __slots__ = ('incoming',)
  def add_incoming(self, v: Val, block: 'Block') -> None: self.incoming.append((v, block))


class Alloca(Val):
  __slots__ = ('allocated_type',)


class Block:
  __slots__ = ('name', 'lines', 'label')
  def __init__(self, name: str): self.name, self.lines, self.label = name, [], None


def _double_hex(x: float) -> str: return f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"

_CONSTS: dict = {}

def constant(t: Ty, v) -> Val:
  """A constant of type t (a vector: every lane v); v an int, a float, True/False, or None (zeroinitializer)."""
  k = (t, v if not isinstance(v, float) else _double_hex(v))
  c = _CONSTS.get(k)
  if c is None:
    if v is None: ref = 'zeroinitializer'
    else:
      e = t.element if t.is_vec else t
      one = ('true' if v else 'false') if e is I1 else str(int(v)) if e.kind == 'int' else _double_hex(float(v))
      ref = f"<{', '.join([f'{e.text} {one}'] * t.count)}>" if t.is_vec else one
    c = _CONSTS[k] = Val(t, ref)
  return c

def undef(t: Ty) -> Val: return Val(t, 'undef')

_ICMP = {('s', '<'): 'slt', ('s', '>'): 'sgt', ('s', '<='): 'sle', ('s', '>='): 'sge', ('u', '<'): 'ult', ('u', '>'): 'ugt',
         ('u', '<='): 'ule', ('u', '>='): 'uge', ('s', '=='): 'eq', ('u', '=='): 'eq', ('s', '!='): 'ne', ('u', '!='): 'ne'}
_FCMP = {'<': 'lt', '>': 'gt', '<=': 'le', '>=': 'ge', '==': 'eq', '!=': 'ne'}


class Builder:
  """Appends instructions, as text parts, to the current block (what llvmlite's IRBuilder does, without its objects)."""
  def __init__(self, block: Block): self.block = block
  def position_at_end(self, block: Block) -> None: self.block = block
  def _emit(self, t: Ty, *parts, cls=Val) -> Val:
    v = cls(t)
    self.block.lines.append((v, parts))
    return v
  def _do(self, *parts) -> None: self.block.lines.append((None, parts))
  # arithmetic and logic: `op flags type a, b`
  def _bin(self, op, a, b, flags=()): return self._emit(a.type, f"{op}{''.join(' ' + f for f in flags)} {a.type.text} ", a, ', ', b)
  def add(self, a, b, flags=()): return self._bin('add', a, b, flags)
  def sub(self, a, b, flags=()): return self._bin('sub', a, b, flags)
  def mul(self, a, b, flags=()): return self._bin('mul', a, b, flags)
  def fadd(self, a, b, flags=()): return self._bin('fadd', a, b, flags)
  def fsub(self, a, b, flags=()): return self._bin('fsub', a, b, flags)
  def fmul(self, a, b, flags=()): return self._bin('fmul', a, b, flags)
  def fdiv(self, a, b): return self._bin('fdiv', a, b)
  def frem(self, a, b): return self._bin('frem', a, b)
  def sdiv(self, a, b): return self._bin('sdiv', a, b)
  def udiv(self, a, b): return self._bin('udiv', a, b)
  def srem(self, a, b): return self._bin('srem', a, b)
  def urem(self, a, b): return self._bin('urem', a, b)
  def and_(self, a, b): return self._bin('and', a, b)
  def or_(self, a, b): return self._bin('or', a, b)
  def xor(self, a, b): return self._bin('xor', a, b)
  def shl(self, a, b): return self._bin('shl', a, b)
  def lshr(self, a, b): return self._bin('lshr', a, b)
  def ashr(self, a, b): return self._bin('ashr', a, b)
  def fneg(self, a): return self._emit(a.type, f"fneg {a.type.text} ", a)
  def _cmp(self, op, pred, a, b):
    t = vec_ty(I1, a.type.count)
    return self._emit(t, f"{op} {pred} {a.type.text} ", a, ', ', b)
  def icmp_signed(self, op, a, b): return self._cmp('icmp', _ICMP['s', op], a, b)
  def icmp_unsigned(self, op, a, b): return self._cmp('icmp', _ICMP['u', op], a, b)
  def fcmp_ordered(self, op, a, b): return self._cmp('fcmp', 'ord' if op == 'ord' else 'uno' if op == 'uno' else 'o' + _FCMP[op], a, b)
  def fcmp_unordered(self, op, a, b): return self._cmp('fcmp', 'ord' if op == 'ord' else 'uno' if op == 'uno' else 'u' + _FCMP[op], a, b)
  def select(self, c, a, b): return self._emit(a.type, f"select {c.type.text} ", c, f", {a.type.text} ", a, f", {b.type.text} ", b)
  # conversions: `op type x to type`
  def _conv(self, op, x, t): return self._emit(t, f"{op} {x.type.text} ", x, f" to {t.text}")
  def trunc(self, x, t): return self._conv('trunc', x, t)
  def zext(self, x, t): return self._conv('zext', x, t)
  def sext(self, x, t): return self._conv('sext', x, t)
  def fptrunc(self, x, t): return self._conv('fptrunc', x, t)
  def fpext(self, x, t): return self._conv('fpext', x, t)
  def sitofp(self, x, t): return self._conv('sitofp', x, t)
  def uitofp(self, x, t): return self._conv('uitofp', x, t)
  def fptosi(self, x, t): return self._conv('fptosi', x, t)
  def bitcast(self, x, t): return self._conv('bitcast', x, t)
  # vectors
  def insert_element(self, v, x, i): return self._emit(v.type, f"insertelement {v.type.text} ", v, f", {x.type.text} ", x, f", {i.type.text} ", i)
  def extract_element(self, v, i): return self._emit(v.type.element, f"extractelement {v.type.text} ", v, f", {i.type.text} ", i)
  def shuffle_vector(self, a, b, mask):
    return self._emit(vec_ty(a.type.element, mask.type.count), f"shufflevector {a.type.text} ", a, f", {b.type.text} ", b, f", {mask.type.text} ", mask)
  # memory
  def alloca(self, t: Ty, name=None) -> Alloca:
    a = self._emit(PTR, f"alloca {t.text}", cls=Alloca)
    a.allocated_type, a.name = t, name
    return a
  def load(self, p, typ, align=None): return self._emit(typ, f"load {typ.text}, ptr ", p, f", align {align}" if align else '')
  def store(self, v, p, align=None): self._do(f"store {v.type.text} ", v, ', ptr ', p, f", align {align}" if align else '')
  def gep(self, p, idx, source_etype, inbounds=False):
    return self._emit(PTR, f"getelementptr {'inbounds ' if inbounds else ''}{source_etype.text}, ptr ", p, f", {idx.type.text} ", idx)
  # calls and control flow
  def call(self, fn: 'Declared', args):
    parts = [f"call {fn.ret.text} @{fn.name}("]
    for i, a in enumerate(args): parts += [', ' if i else '', f"{a.type.text} ", a]
    return self._emit(fn.ret, *parts, ')')
  def phi(self, t: Ty, name=None) -> Phi:
    p = self._emit(t, f"phi {t.text} ", cls=Phi)
    p.incoming, p.name = [], name
    return p
  def branch(self, target: Block) -> None: self._do('br label ', target)
  def cbranch(self, c, a: Block, b: Block) -> None: self._do('br i1 ', c, ', label ', a, ', label ', b)
  def ret_void(self) -> None: self._do('ret void')


class Declared:
  """A function the kernel calls (an LLVM intrinsic): its name, result type and argument types."""
  __slots__ = ('name', 'ret', 'args')
  def __init__(self, name, ret, args): self.name, self.ret, self.args = name, ret, args


class Function:
  """A kernel function being built: its arguments, blocks (in program order), the intrinsics it calls."""
  def __init__(self, name: str, args: list[tuple[Ty, str]], attrs: str = ''):
    self.name, self.attrs = name, attrs
    self.args = [Val(t, f"%{n}") for t, n in args]
    self.blocks: list[Block] = []
    self.declared: dict[str, Declared] = {}
    self._names: dict[str, int] = {n: 0 for _, n in args}
  def unique(self, name: str) -> str:
    """name, else name.1, name.2, ...: LLVM's names are the function's, values and blocks alike."""
    n = self._names.get(name)
    if n is None: self._names[name] = 0; return name
    while True:
      n += 1
      cand = f"{name}.{n}"
      if cand not in self._names: self._names[name] = n; self._names[cand] = 0; return cand
  def append_basic_block(self, name: str) -> Block:
    b = Block(name); self.blocks.append(b); return b
  def text(self) -> str:
    """The function's LLVM text: names given (asked-for ones made unique, the others numbered), operands resolved."""
    for b in self.blocks: b.label = '%' + _ident(self.unique(b.name))
    counter = 0
    for b in self.blocks:
      for v, _ in b.lines:
        if v is None: continue
        if v.name: v.ref = '%' + _ident(self.unique(v.name))
        else:
          while f".{counter}" in self._names: counter += 1
          v.ref = f"%.{counter}"; self._names[f".{counter}"] = 0
    out = [f"define void @{self.name}({', '.join(a.typed for a in self.args)}){self.attrs}", '{']
    for b in self.blocks:
      out.append(b.label[1:] + ':')
      for v, parts in b.lines:
        body = ''.join(p if isinstance(p, str) else p.label if isinstance(p, Block) else p.ref for p in parts)
        if isinstance(v, Phi): body += ', '.join(f"[{x.ref}, {blk.label}]" for x, blk in v.incoming)
        out.append(f"  {v.ref} = {body}" if v is not None else f"  {body}")
    out.append('}')
    return '\n'.join(out)


def _ident(name: str) -> str:
  """A local name as LLVM reads it: plain where it may be, else quoted."""
  return name if name and all(c.isalnum() or c in '-$._' for c in name) and not name[0].isdigit() else f'"{name}"'


def reg_type(dt: D.DType) -> Ty:
  """The type a value of dt lives in while computed."""
  return F32 if dt.fmt else _FLOAT[dt.name] if dt.is_float else int_ty(dt.bits)

def mem_type(dt: D.DType) -> Ty:
  """The type a value of dt has in memory: i1 and the sub-byte ints (i4 registers) a byte, an emulated float its bits."""
  return I8 if dt.is_bool or dt.width else int_ty(dt.bits) if dt.fmt else reg_type(dt)

def _vec(t: Ty, n: int | None) -> Ty: return vec_ty(t, n)

def _lanes(t) -> int | None: return t.count if isinstance(t, VecType) else None

MASK_VALUES = 4  # a vector of i1 of at most this many distinct values is built by selects (_Emitter.lane_mask)


class _Emitter:
  def __init__(self, fn):
    if fn.name != 'uop.func': raise TgcError(f"render_llvm expects a uop.func, got '{fn.name}'")
    self.fn = fn
    self.name = fn.sym_name
    self.gs, self.ls = launch_dims(fn)
    self.sig = buffer_signature(fn)
    self.val: dict = {}       # uop Value -> LLVM value
    self.cell: dict = {}      # define_acc / phi result Value -> alloca of the accumulator
    self.loops: dict = {}     # range Value -> (phi, header block, exit block)
    self.ifs: list = []       # merge blocks of open uop.if
    self.bounds_memo: dict = {}
    self.unproven = unproven_accesses(fn, self.bounds_memo)  # loads/stores guarded at run time: no access leaves its buffer
    self.fp_flags = ('contract',) if fn.attrs.get('contract') else ()  # the uop.func allows mul+add -> fma

  def err(self, op, msg):
    """A refusal located at the op (its line in the input, where it came from text)."""
    return op.error(f"{msg} (in @{self.name})")

  # ---- constants and small helpers ----
  def const(self, v, dt: D.DType, lanes: int | None = None) -> Val:
    x = const_value(v, dt)
    if dt.is_bool: return constant(vec_ty(I1, lanes), bool(x))
    if dt.is_int: return constant(vec_ty(reg_type(dt), lanes), int(x))
    if np.isnan(x):  # keep the payload: build the NaN from its bits
      npdt = D.compute_np(dt)
      bits = np.asarray(x, dtype=npdt).view(f'u{npdt.itemsize}')
      t = reg_type(dt)
      one = f"bitcast (i{npdt.itemsize * 8} {int(bits)} to {t.text})"
      return Val(t, one) if lanes is None else Val(vec_ty(t, lanes), f"<{', '.join([f'{t.text} {one}'] * lanes)}>")
    return constant(vec_ty(reg_type(dt), lanes), float(x))

  def splat(self, ty: Ty, v) -> Val:
    """A constant of LLVM type ty (scalar or vector) with every lane v."""
    return constant(ty, float(v) if (ty.element or ty).kind == 'float' else v)

  def intrinsic(self, name: str, ty: Ty, nargs: int = 1) -> Declared:
    full = f"llvm.{name}.{'v' + str(ty.count) if ty.is_vec else ''}{(ty.element or ty).intrinsic_name}"
    d = self.func.declared.get(full)
    if d is None: d = self.func.declared[full] = Declared(full, ty, [ty] * nargs)
    return d

  def to_bits(self, x, dt: D.DType):
    """float (or vector) -> the bits of emulated dt, as tgc.ir.dtypes.encode: to nearest even, NaN -> nan_code."""
    b, f = self.b, dt.fmt
    n = x.type.count
    i32, c = _vec(I32, n), lambda v: self.splat(_vec(I32, n), v)
    u = b.bitcast(x, i32)
    if f.wide:  # bf16: float32's top half (no wrap: only NaN bits could overflow)
      r = b.lshr(b.add(b.add(u, c(0x7FFF)), b.and_(b.lshr(u, c(16)), c(1))), c(16))
    else:
      a, s, sh = b.and_(u, c(0x7FFFFFFF)), b.and_(b.lshr(u, c(24)), c(0x80)), 23 - f.man
      normal = b.lshr(b.add(b.add(b.sub(a, c((127 - f.bias) << 23)), c((1 << (sh - 1)) - 1)), b.and_(b.lshr(a, c(sh)), c(1))), c(sh))
      fl = _vec(F32, n)
      sub = b.sub(b.bitcast(b.fadd(b.bitcast(a, fl), b.bitcast(c(f.magic_bits), fl)), i32), c(f.magic_bits))  # the fadd rounds
      r = b.select(b.icmp_unsigned('<', a, c(f.min_normal_bits)), sub, normal)
      r = b.select(b.icmp_unsigned('>=', a, c(int(np.float32(f.max).view(np.uint32)))), c(f.max_code), r)  # saturate
      if f.kind == 'fnuz': s = b.select(b.icmp_unsigned('==', r, c(0)), c(0), s)
      r = b.or_(r, s)
    r = b.select(b.fcmp_unordered('uno', x, x), c(f.nan_code), r)
    return b.trunc(r, _vec(int_ty(f.bits), n))

  def from_bits(self, h, dt: D.DType):
    """The bits of emulated dt -> float (exact), as tgc.ir.dtypes.decode."""
    b, f = self.b, dt.fmt
    n = h.type.count
    i32, fl, c = _vec(I32, n), _vec(F32, n), lambda v: self.splat(_vec(I32, n), v)
    w = b.zext(h, i32)
    if f.wide: return b.bitcast(b.shl(w, c(16)), fl)
    m, s = b.and_(w, c(0x7F)), b.shl(b.and_(w, c(0x80)), c(24))
    sub = b.bitcast(b.fmul(b.uitofp(m, fl), self.splat(fl, 2.0 ** (1 - f.bias - f.man))), i32)
    r = b.select(b.icmp_unsigned('<', m, c(1 << f.man)), sub, b.add(b.shl(m, c(23 - f.man)), c((127 - f.bias) << 23)))
    if f.kind == 'ieee':
      r = b.select(b.icmp_unsigned('>=', m, c(f.inf_code)), b.select(b.icmp_unsigned('==', m, c(f.inf_code)), c(0x7F800000), c(0x7FC00000)), r)
    if f.kind == 'fn': r = b.select(b.icmp_unsigned('==', m, c(0x7F)), c(0x7FC00000), r)
    r = b.or_(r, s)
    if f.kind == 'fnuz': r = b.select(b.icmp_unsigned('==', w, c(0x80)), c(0x7FC00000), r)
    return b.bitcast(r, fl)

  def f64_to_f32_odd(self, x):
    """double -> float rounded to odd (toward zero, then the last bit set if inexact): a later float -> half
    rounding is then exactly the one correct rounding of the double, as numpy's astype(float16) does."""
    b = self.b
    n = x.type.count
    f, i32, d = _vec(F32, n), _vec(I32, n), _vec(F64, n)
    r = b.fptrunc(x, f)
    fabs = lambda v, t: b.call(self.intrinsic('fabs', t), [v])
    away = b.fcmp_ordered('>', fabs(b.fpext(r, d), d), fabs(x, d))  # rounded away from zero: step back one ulp
    u = b.bitcast(r, i32)
    u = b.select(away, b.sub(u, self.splat(i32, 1)), u)
    inexact = b.fcmp_unordered('!=', b.fpext(b.bitcast(u, f), d), x)
    return b.bitcast(b.select(inexact, b.or_(u, self.splat(i32, 1)), u), f)

  def round_emu(self, x, dt): return self.from_bits(self.to_bits(x, dt), dt)

  def get(self, v):
    c = self.cell.get(v)
    if c is not None: return self.b.load(c, typ=c.allocated_type)
    try: return self.val[v]
    except KeyError: raise TgcError(f"llvm: @{self.name}: value %{v.hint} is used where its definition does not reach") from None

  # ---- control flow ----
  def loop_open(self, start, end, name: str, signed: bool = True):
    b, f = self.b, self.func
    pre, hdr, body, exit_ = b.block, f.append_basic_block(f"{name}.hdr"), f.append_basic_block(f"{name}.body"), f.append_basic_block(f"{name}.end")
    b.branch(hdr); b.position_at_end(hdr)
    i = b.phi(start.type, name=name); i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed('<', i, end) if signed else b.icmp_unsigned('<', i, end), body, exit_)
    b.position_at_end(body)
    return i, hdr, exit_

  def loop_close(self, lp):
    i, hdr, exit_ = lp
    nxt = self.b.add(i, constant(i.type, 1))
    i.add_incoming(nxt, self.b.block)
    self.b.branch(hdr); self.place_last(exit_)

  def place_last(self, block):
    """Continue in `block`, moved after the blocks emitted since it was made: the text reads in program order."""
    self.func.blocks.remove(block); self.func.blocks.append(block)
    self.b.position_at_end(block)

  # ---- the function ----
  def emit(self, symbol: str | None = None) -> Function:
    fn, ops = self.fn, self.fn.body.ops
    symbol = symbol or self.name
    self.func = f = Function(symbol, [(PTR, f"data{i}") for i in range(len(self.sig))] + [(I32, 'start'), (I32, 'end')], ' nounwind')
    for op in ops:  # refuse what a CPU cannot do before building anything
      if op.name in ('uop.define_local', 'uop.define_var') or op.name in WARP_OPS:
        raise self.err(op, "is not supported by the llvm (CPU) target" + (": it has no shared memory" if op.name == 'uop.define_local' else
                       ": it has no tensor cores" if op.name in ('uop.wmma', 'uop.wgmma') else ": it has no warps" if op.name == 'uop.shuffle_xor' else
                       ": kernels take buffers only" if op.name == 'uop.define_var' else ''))
      if op.name == 'uop.barrier' and max(self.ls) > 1: raise self.err(op, "across a work-group of more than one thread is not supported by the llvm (CPU) target")
    entry = f.append_basic_block('entry')
    self.b = b = Builder(entry)
    # accumulators: one alloca each in the entry block (mem2reg makes registers of them)
    init_at = acc_init_points(ops)  # the init is stored before the loops it names (or where it stands)
    for op in ops:
      if op.name == 'uop.define_acc':
        r = op.results[0]
        a = b.alloca(_vec(reg_type(elem(r.type)), _lanes(r.type)), name=r.hint if r.hint and not r.hint[0].isdigit() else 'acc')
        self.cell[r] = a
    for op in ops:  # a phi's result reads the accumulator, even after a loop that ran zero times
      if op.name == 'uop.phi': self.cell[op.results[0]] = self.cell[op.acc]
    # the launch grid: gidx0 runs start..end, the other axes their full size
    idx = {}
    lp0 = self.loop_open(f.args[-2], f.args[-1], 'gidx0')
    idx['gidx0'] = lp0[0]
    inner = []
    for ax, n in [(f"gidx{k}", self.gs[k]) for k in (1, 2)] + [(f"lidx{k}", self.ls[k]) for k in range(3)]:
      if n > 1: lp = self.loop_open(constant(I32, 0), constant(I32, n), ax); inner.append(lp); idx[ax] = lp[0]
      else: idx[ax] = constant(I32, 0)
    self.idx = idx
    for i, op in enumerate(ops):
      for a in init_at.get(i, ()): b.store(self.get(a.init), self.cell[a.results[0]])
      self.op(op)
    for lp in reversed(inner): self.loop_close(lp)
    self.loop_close(lp0)
    b.ret_void()
    return f

  def op(self, op):
    b, nm = self.b, op.name[4:]
    res = op.results[0] if op.results else None
    out = None
    if nm == 'define_global': out = self.func.args[op.attrs['index']]
    elif nm == 'special':
      x, t = self.idx[op.attrs['axis']], reg_type(res.type)
      out = x if t == I32 else b.trunc(x, t) if t.width < 32 else b.zext(x, t)
    elif nm == 'const': out = self.const(op.attrs['value'], elem(res.type), _lanes(res.type))
    elif nm == 'define_acc': pass  # its alloca exists; init is stored before its loops
    elif nm == 'phi':
      b.store(self.get(op.value), self.cell[op.acc])
    elif nm == 'range':
      t = elem(res.type)
      self.loops[res] = lp = self.loop_open(self.get(op.start), self.get(op.end), res.hint if res.hint and not res.hint[0].isdigit() else 'ridx', t.is_signed)
      out = lp[0]
    elif nm == 'endrange': self.loop_close(self.loops[op.range])
    elif nm == 'if':
      then, merge = self.func.append_basic_block('if.then'), self.func.append_basic_block('if.end')
      b.cbranch(self.get(op.cond), then, merge); b.position_at_end(then); self.ifs.append(merge)
    elif nm == 'endif':
      merge = self.ifs.pop(); b.branch(merge); self.place_last(merge)
    elif nm == 'barrier': pass  # one thread per work-group on the CPU: nothing to wait for
    elif nm == 'load': out = self.load(op, res)
    elif nm == 'store': self.store(op)
    elif nm == 'vectorize':
      vt = vec_ty(reg_type(res.type.dtype), res.type.count)
      srcs = [self.get(s) for s in op.srcs]
      if all(s is srcs[0] for s in srcs):  # a splat in LLVM's canonical form: two instructions, not one per lane
        one = b.insert_element(undef(vt), srcs[0], constant(I32, 0))
        out = b.shuffle_vector(one, undef(vt), constant(vec_ty(I32, len(srcs)), None))
      elif res.type.dtype is D.bool_ and (m := self.lane_mask(op.srcs, vt)) is not None: out = m
      else:
        out = undef(vt)
        for k, v in enumerate(srcs): out = b.insert_element(out, v, constant(I32, k))
    elif nm == 'gep': out = b.extract_element(self.get(op.vec), constant(I32, op.attrs['index']))
    elif nm == 'cast': out = self.cast(self.get(op.src), elem(op.src.type), elem(res.type), _lanes(res.type))
    elif nm == 'bitcast': out = self.bitcast(self.get(op.src), elem(op.src.type), elem(res.type), _lanes(res.type))
    elif nm in alu.COMPARE: out = self.compare(nm, elem(op.operands[0].type), *map(self.get, op.operands))
    elif nm == 'where': out = b.select(*map(self.get, op.operands))
    elif nm in alu.UNARY or nm in alu.BINARY or nm == 'mulacc': out = self.alu(op, nm, elem(res.type), [self.get(v) for v in op.operands])
    else: raise self.err(op, "is not supported by the llvm (CPU) target")
    if out is not None:
      if out.ref is None and out.name is None and res.hint and res.hint[0].isalpha():
        out.name = res.hint  # the IR's names (val0, alu1) make the LLVM text readable against the uop listing
      self.val[res] = out

  # ---- memory ----
  def index64(self, op):
    """An access's index as i64 (sign- or zero-extended as its type is)."""
    b, idx = self.b, self.get(op.idx)
    if idx.type.width >= 64: return idx
    return b.sext(idx, I64) if elem(op.idx.type).is_signed else b.zext(idx, I64)

  def address(self, op, t, lane: int = 0):
    """The address an access (or its vector lane `lane`) touches."""
    i = self.index64(op)
    return self.b.gep(self.get(op.buf), self.b.add(i, constant(I64, lane)) if lane else i, mem_type(elem(t)), inbounds=True)

  def guard(self, op, t, gate):
    """The gate, and-ed with `0 <= idx && idx + lanes <= size` where the bounds analysis proved nothing."""
    d = op.buf.op
    size = d.attrs.get('size') if d is not None else None
    if op not in self.unproven or size is None: return gate
    b, n = self.b, _lanes(t) or 1
    i64 = self.index64(op)
    ok = b.and_(b.icmp_signed('>=', i64, constant(I64, 0)), b.icmp_signed('<=', i64, constant(I64, size - n)))
    return ok if gate is None else b.and_(gate, ok)

  def zero(self, t):
    return self.const(0, elem(t), _lanes(t))

  def lane_guard(self, op, t, mask):
    """A vector gate (one i1 a lane), and-ed lane by lane with `0 <= idx + lane < size` where the bounds analysis
    proved nothing: each lane of a masked access is inside its buffer or not on its own."""
    d = op.buf.op
    size = d.attrs.get('size') if d is not None else None
    if op not in self.unproven or size is None: return mask
    b, n, i64 = self.b, t.count, self.index64(op)
    vt = vec_ty(I64, n)
    lanes = b.add(b.shuffle_vector(b.insert_element(undef(vt), i64, constant(I32, 0)), undef(vt), constant(vec_ty(I32, n), None)),
                  Val(vt, f"<{', '.join(f'i64 {l}' for l in range(n))}>"))
    ok = b.and_(b.icmp_signed('>=', lanes, constant(vt, 0)), b.icmp_signed('<', lanes, constant(vt, size)))
    return b.and_(mask, ok)

  def lane_mask(self, srcs, vt: Ty):
    """A vector of i1 built from constants and at most MASK_VALUES distinct values (a masked access's gates: the lanes
    an axis's padding may cut off test one value, the rest are true) as a select of constant masks per value: an
    insertelement a lane makes AVX-512 move each bit through the mask registers (40 instructions a load). None where
    the lanes have more distinct values."""
    b, n = self.b, len(srcs)
    const = [const_value(s.op.attrs['value'], D.bool_) if s.op is not None and s.op.name == 'uop.const' else None for s in srcs]
    vals = list(dict.fromkeys(s for s, c in zip(srcs, const) if c is None))
    if len(vals) > MASK_VALUES: return None
    bits = lambda on: Val(vt, f"<{', '.join('i1 true' if x else 'i1 false' for x in on)}>")
    out = bits([bool(c) for c in const])
    for v in vals:
      lanes = [s is v for s in srcs]
      out = b.select(self.get(v), b.or_(out, bits(lanes)), out)
    return out

  def masked_load_fn(self, vt: Ty, n: int) -> Declared:
    """llvm.masked.load of n lanes of vt's element type: the lanes whose mask bit is false are not read (AVX-512's
    and AVX2's masked moves; LLVM splits them elsewhere)."""
    name = f"llvm.masked.load.v{n}{vt.element.intrinsic_name}.p0"
    d = self.func.declared.get(name)
    if d is None: d = self.func.declared[name] = Declared(name, vt, [PTR, I32, vec_ty(I1, n), vt])
    return d

  def masked_load(self, op, t, dt, n):
    """A load under a vector gate: one masked vector load, the alternative's lanes where the gate is false."""
    b = self.b
    mask = self.lane_guard(op, t, self.get(op.gate))
    mt = _vec(mem_type(dt), n)
    plain = not (dt.is_bool or dt.fmt or dt.width)
    alt = self.get(op.alt)
    x = b.call(self.masked_load_fn(mt, n), [self.address(op, t), constant(I32, dt.itemsize), mask, alt if plain else constant(mt, None)])
    if plain: return x
    if dt.is_bool: x = b.icmp_unsigned('!=', x, self.splat(x.type, 0))
    else: x = self.from_bits(x, dt) if dt.fmt else b.trunc(x, _vec(reg_type(dt), n))
    return b.select(mask, x, alt)

  def masked_store(self, op, t, dt, n):
    """A store under a vector gate. Floats: one llvm.masked.store. Other types lane by lane, each a gated scalar
    store (a branch): LLVM 22's x86 backend stores an integer truncated into the stored type (a u64 computed, a u8
    stored) under a mask of one constant lane as the wide element (8 bytes for 1: memory past the lane
    overwritten), and unrolling makes masks constant; a float is no integer truncation (a bitcast or fptrunc
    between keeps the width right)."""
    b = self.b
    mask = self.lane_guard(op, t, self.get(op.gate))
    v = self.get(op.value)
    if dt.is_float and not dt.fmt:
      name = f"llvm.masked.store.v{n}{v.type.element.intrinsic_name}.p0"
      if name not in self.func.declared: self.func.declared[name] = Declared(name, VOID, [v.type, PTR, I32, vec_ty(I1, n)])
      b._do(f"call void @{name}({v.type.text} ", v, ", ptr ", self.address(op, t), f", i32 {dt.itemsize}, {mask.type.text} ", mask, ")")
      return
    for l in range(n):
      x = b.extract_element(v, constant(I32, l))
      if dt.is_bool or dt.width: x = (b.sext if dt.is_signed else b.zext)(x, I8)
      elif dt.fmt: x = self.to_bits(x, dt)
      st, merge = self.func.append_basic_block('store.lane'), self.func.append_basic_block('store.lane.end')
      b.cbranch(b.extract_element(mask, constant(I32, l)), st, merge); b.position_at_end(st)
      b.store(x, self.address(op, t, l), align=dt.itemsize)
      b.branch(merge); b.position_at_end(merge)

  def load(self, op, res):
    b, t = self.b, res.type
    dt, n = elem(t), _lanes(t)
    if op.gate is not None and isinstance(op.gate.type, VecType): return self.masked_load(op, t, dt, n)
    def raw():
      x = b.load(self.address(op, t), typ=_vec(mem_type(dt), n), align=dt.itemsize)
      if dt.is_bool: return b.icmp_unsigned('!=', x, self.splat(x.type, 0))
      return self.from_bits(x, dt) if dt.fmt else b.trunc(x, _vec(reg_type(dt), n)) if dt.width else x
    gate = self.guard(op, t, self.get(op.gate) if op.gate is not None else None)
    if gate is None: return raw()
    # a gated load touches no memory when the gate is false: a branch, not a select over the loaded value
    alt = self.get(op.alt) if op.alt is not None else self.zero(t)
    cur, ld, merge = b.block, self.func.append_basic_block('load.gated'), self.func.append_basic_block('load.end')
    b.cbranch(gate, ld, merge); b.position_at_end(ld)
    x = raw(); ld_end = b.block
    b.branch(merge); b.position_at_end(merge)
    p = b.phi(x.type); p.add_incoming(x, ld_end); p.add_incoming(alt, cur)
    return p

  def store(self, op):
    b, t = self.b, op.value.type
    dt, n = elem(t), _lanes(t)
    if op.gate is not None and isinstance(op.gate.type, VecType): return self.masked_store(op, t, dt, n)
    def raw():
      v = self.get(op.value)
      if dt.is_bool or dt.width: v = (b.sext if dt.is_signed else b.zext)(v, _vec(I8, n))  # (a byte holds the value)
      elif dt.fmt: v = self.to_bits(v, dt)
      b.store(v, self.address(op, t), align=dt.itemsize)
    gate = self.guard(op, t, self.get(op.gate) if op.gate is not None else None)
    if gate is None: return raw()
    st, merge = self.func.append_basic_block('store.gated'), self.func.append_basic_block('store.end')
    b.cbranch(gate, st, merge); b.position_at_end(st)
    raw(); b.branch(merge); b.position_at_end(merge)

  # ---- ALU ----
  def compare(self, nm, dt, x, y):
    b = self.b
    if dt.is_float: return b.fcmp_ordered('<', x, y) if nm == 'cmplt' else b.fcmp_ordered('==', x, y) if nm == 'cmpeq' else b.fcmp_unordered('!=', x, y)
    cmp = b.icmp_signed if dt.is_signed else b.icmp_unsigned
    return cmp({'cmplt': '<', 'cmpne': '!=', 'cmpeq': '=='}[nm], x, y)

  def alu(self, op, nm, dt, a):
    b, ty = self.b, a[0].type
    if dt.is_float:
      if nm == 'neg': r = b.fneg(a[0])
      elif nm in ('exp2', 'log2', 'sin', 'sqrt', 'trunc'): r = b.call(self.intrinsic(nm, ty), [a[0]])
      elif nm == 'recip': r = b.fdiv(self.splat(ty, 1.0), a[0])
      elif nm == 'add': r = b.fadd(*a, flags=self.fp_flags)
      elif nm == 'sub': r = b.fsub(*a, flags=self.fp_flags)
      elif nm == 'mul': r = b.fmul(*a, flags=self.fp_flags)
      elif nm == 'fdiv': r = b.fdiv(*a)
      elif nm == 'mod': r = b.frem(*a)  # fmod: the dividend's sign
      elif nm == 'idiv': r = b.call(self.intrinsic('trunc', ty), [b.fdiv(*a)])
      elif nm in ('max', 'min'):  # numpy: a if (a >= b or a is NaN) else b; NaN in b comes through the else
        keep = b.or_(b.fcmp_ordered('>=' if nm == 'max' else '<=', a[0], a[1]), b.fcmp_unordered('uno', a[0], a[0]))
        r = b.select(keep, a[0], a[1])
      elif nm == 'mulacc': r = b.fadd(b.fmul(a[0], a[1]), a[2])  # two roundings, as exec_alu: no contract into fma
      else: raise self.err(op, f"is not defined on {dt}")
      return self.round_emu(r, dt) if dt.fmt else r
    if dt.is_bool:
      one = self.splat(ty, 1)
      if nm == 'not': return b.xor(a[0], one)
      if nm in ('and', 'min', 'mul'): return b.and_(*a)
      if nm in ('or', 'max', 'add'): return b.or_(*a)
      if nm in ('xor', 'sub'): return b.xor(*a)
      if nm == 'mulacc': return b.or_(b.and_(a[0], a[1]), a[2])
      raise self.err(op, f"is not defined on {dt}")
    s, zero = dt.is_signed, self.splat(ty, 0)
    if nm == 'neg': return b.sub(zero, a[0])
    if nm == 'not': return b.xor(a[0], self.splat(ty, -1))
    if nm == 'trunc': return a[0]
    if nm == 'mulacc': return b.add(b.mul(a[0], a[1]), a[2])
    if nm in ('add', 'sub', 'mul'):
      flags = ('nsw',) if s and no_signed_wrap(op, self.bounds_memo) else ()
      return (b.add if nm == 'add' else b.sub if nm == 'sub' else b.mul)(*a, flags=flags)
    if nm == 'and': return b.and_(*a)
    if nm == 'or': return b.or_(*a)
    if nm == 'xor': return b.xor(*a)
    if nm in ('max', 'min'):
      cmp = b.icmp_signed if s else b.icmp_unsigned
      return b.select(cmp('>' if nm == 'max' else '<', a[0], a[1]), a[0], a[1])
    if nm in ('idiv', 'mod'):
      x, y = a
      bz = b.icmp_unsigned('==', y, zero)
      bad = bz
      if s:  # INT_MIN / -1 overflows: divide by 1 instead (quotient INT_MIN, remainder 0, as the oracle wraps)
        mn = self.splat(ty, -(1 << (dt.bits - 1)))
        bad = b.or_(bz, b.and_(b.icmp_signed('==', x, mn), b.icmp_signed('==', y, self.splat(ty, -1))))
      y1 = b.select(bad, self.splat(ty, 1), y)
      q = (b.sdiv if s else b.udiv)(x, y1) if nm == 'idiv' else (b.srem if s else b.urem)(x, y1)
      return b.select(bz, zero, q)
    if nm in ('shl', 'shr'):
      x, y = a
      ok = b.icmp_unsigned('<', y, self.splat(ty, dt.bits))  # unsigned: a negative shift is out of range too
      y1 = b.select(ok, y, zero)
      r = b.shl(x, y1) if nm == 'shl' else b.ashr(x, y1) if s else b.lshr(x, y1)
      return b.select(ok, r, zero)
    raise self.err(op, f"is not defined on {dt}")

  def cast(self, x, src: D.DType, dst: D.DType, n):
    b = self.b
    if src is dst: return x
    if dst.is_bool:
      return b.fcmp_unordered('!=', x, self.splat(x.type, 0.0)) if src.is_float else b.icmp_unsigned('!=', x, self.splat(x.type, 0))
    if dst.is_float:
      if not src.is_float:  # numpy goes through float64 (exact for <= 32 bits; i64/u64 round once there)
        x = (b.sitofp if src.is_signed else b.uitofp)(x, _vec(F64, n)); src = D.f64
      if dst.fmt:  # an emulated float rounds from float32 (as tgc.ir.dtypes.round_to does)
        f = _vec(F32, n)
        if src is D.f64: x = b.fptrunc(x, f)
        elif src is D.f16: x = b.fpext(x, f)
        return self.round_emu(x, dst)
      t = _vec(reg_type(dst), n)
      if src is D.f64 and dst is D.f16: x, src = self.f64_to_f32_odd(x), D.f32  # no __truncdfhf2 libcall, one rounding
      sb, db = (32 if src.fmt else src.bits), dst.bits
      return x if sb == db else b.fptrunc(x, t) if sb > db else b.fpext(x, t)
    if src.is_float:
      # numpy: t = trunc(x as f64); NaN/inf -> 0; |t| < 2^63 -> int64(t) wrapped to dst; in dst's range beyond that
      # (only u64 in [2^63, 2^64), and t == -2^63) -> 0x8000000000000000 (x86's answer); else 0
      d, i64 = _vec(F64, n), _vec(I64, n)
      if src.bits < 64: x = b.fpext(x, d)
      t = b.call(self.intrinsic('trunc', d), [x])
      fabs = b.call(self.intrinsic('fabs', d), [t])
      small = b.fcmp_ordered('<', fabs, self.splat(d, 2.0 ** 63))
      lo, hi = D.min_max(dst)
      inr = b.and_(b.fcmp_ordered('>=', t, self.splat(d, float(lo))), b.fcmp_ordered('<=', t, self.splat(d, float(hi))))
      v = b.fptosi(b.select(small, t, self.splat(d, 0.0)), i64)
      v = b.select(small, v, b.select(inr, self.splat(i64, -(1 << 63)), self.splat(i64, 0)))
      return v if dst.bits == 64 else b.trunc(v, _vec(int_ty(dst.bits), n))
    t = _vec(int_ty(dst.bits), n)
    sb = src.bits
    if sb == dst.bits: return x
    if sb > dst.bits: return b.trunc(x, t)
    return b.sext(x, t) if src.is_signed else b.zext(x, t)

  def bitcast(self, x, src: D.DType, dst: D.DType, n):
    b = self.b
    if src.fmt: x = self.to_bits(x, src)
    if dst.fmt:
      t = _vec(int_ty(dst.bits), n)
      return self.from_bits(b.bitcast(x, t) if x.type != t else x, dst)
    t = _vec(reg_type(dst), n)
    return x if x.type == t else b.bitcast(x, t)


_triple: str | None = None

def _module_text(name: str, funcs: list[Function]) -> str:
  """An LLVM module's text: its header (the process's triple: a nicety, the JIT sets its own), the intrinsics its
  functions call, the functions."""
  global _triple
  if _triple is None:
    try:
      import llvmlite.binding as llvm
      _triple = llvm.get_process_triple()
    except Exception: _triple = ''
  decls = {}
  for f in funcs: decls.update(f.declared)
  out = [f'; ModuleID = "{name}"', f'target triple = "{_triple}"', 'target datalayout = ""', '']
  out += [f"declare {d.ret.text} @{d.name}({', '.join(a.text for a in d.args)})" for d in decls.values()]
  for f in funcs: out += ['', f.text()]
  return '\n'.join(out) + '\n'


def render_llvm(fn, symbol: str | None = None) -> str:
  """One uop.func -> the text of an LLVM module holding its kernel function, named `symbol` if given (the CPU
  runtime names every kernel alike, so that kernels that differ in name only have one text and compile once)."""
  return _module_text(symbol or getattr(fn, 'sym_name', 'kernel'), [_Emitter(fn).emit(symbol)])


def render_llvm_module(module) -> str:
  """Every uop.func of a Module -> one LLVM module's text (kernels in the order they appear)."""
  fns = [op for op in module.ops if op.name == 'uop.func']
  if not fns: raise TgcError("llvm: the module has no uop.func to render (lower it to the uop level first)")
  funcs, names = [], set()
  for fn in fns:
    f = _Emitter(fn).emit()
    if f.name in names: raise TgcError(f"llvm: two kernels are named @{f.name}")
    names.add(f.name); funcs.append(f)
  return _module_text('tgc', funcs)
