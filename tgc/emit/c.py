"""The C target: `void name(T* restrict data0, ..., int start, int end)` looping over its own launch grid,
as the llvm target does (gidx0 from start to end, so a runtime may split it; then gidx1, gidx2, lidx0..2).
bf16 is stored as its 16 bits and computed as float. Vectors of numbers are GCC/Clang vector types
(`typedef float float8 __attribute__((vector_size(32), aligned(4)))`: lanes `v[i]`, whole-vector + - * /
that the compiler maps to SIMD instructions; element alignment, so a load from any index is valid); vectors
of bool and 16-bit floats are structs of an array. Built by the system C compiler with -std=c99 -fwrapv
-ffp-contract=off (tgc/runtime/c.py), so signed overflow wraps and `a*b+c` is fused only in kernels marked
`contract` (GCC's optimize attribute)."""
from __future__ import annotations
from tgc.emit.cstyle import Lang, render_module, render_kernel

# element types with GCC vector types, by the name their vector typedef starts with
GNU_VEC = {'float': ('float', 4), 'double': ('double', 8), 'char': ('signed char', 1), 'short': ('short', 2), 'int': ('int', 4),
           'long': ('long long', 8), 'uchar': ('unsigned char', 1), 'ushort': ('unsigned short', 2), 'uint': ('unsigned int', 4),
           'ulong': ('unsigned long long', 8)}


class CLang(Lang):
  name = 'c'
  native_vecs = ()
  vector_ops = ('add', 'sub', 'mul', 'fdiv')

  def gnu(self, base: str, n: int) -> bool: return base in GNU_VEC and n in (2, 4, 8, 16)
  def is_gnu(self, t) -> bool:  # bf16 lanes are computed as float: a float vector
    return self.gnu('float' if t.dtype.name in self.emulated else self.vec_name(t.dtype), t.count)
  def vector_operators(self, t) -> bool:
    # 32/64-bit elements only: narrower and emulated ones are promoted (and rounded back) by the scalar rules
    return self.is_gnu(t) and t.dtype.bits >= 32 and t.dtype.name not in self.emulated
  def signature(self, k):
    # a uop.func marked `contract` (an optimised register tile) may fuse mul+add into fma, as on the llvm target
    return ('__attribute__((optimize("fp-contract=fast")))\n' if k.fn.attrs.get('contract') else '') + super().signature(k)
  def lane(self, name, i, t): return f"{name}[{i}]" if self.is_gnu(t) else f"{name}.v[{i}]"
  def ctor(self, t, lanes):
    return f"(({self.vtype(t)}){{{','.join(lanes)}}})" if self.is_gnu(t) else super().ctor(t, lanes)
  def vec_typedefs(self):
    out = []
    for _, base, reg, n in sorted(x for x in self.needs if isinstance(x, tuple)):
      if self.gnu(base, n):
        ctype, size = GNU_VEC[base]
        out.append(f"typedef {ctype} {base}{n} __attribute__((vector_size({n * size}), aligned({size})));")
      else: out.append(f"typedef struct {{ {reg} v[{n}]; }} {base}{n};")
    return out


def render_c(module) -> str: return render_module(module, CLang())
def render_c_kernel(fn) -> str: return render_kernel(fn, CLang())
