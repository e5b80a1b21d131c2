"""The C99 target: `void name(T* restrict data0, ..., int start, int end)` looping over its own launch grid,
as the llvm target does (gidx0 from start to end, so a runtime may split it; then gidx1, gidx2, lidx0..2).
bf16 is stored as its 16 bits and computed as float; vectors are structs of an array. Built by the system
C compiler with -std=c99 -fwrapv -ffp-contract=off (tgc/runtime/c.py), so signed overflow wraps and
`a*b+c` is never fused."""
from __future__ import annotations
from tgc.emit.cstyle import Lang, render_module, render_kernel


class CLang(Lang):
  name = 'c'
  native_vecs = ()  # C99 has no vector types: `typedef struct { float v[4]; } float4;`


def render_c(module) -> str: return render_module(module, CLang())
def render_c_kernel(fn) -> str: return render_kernel(fn, CLang())
