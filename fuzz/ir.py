"""Differential fuzzer of random kernel- and uop-level programs (IR text) across CPU, C, INTERP and OPENCL.

`python -m fuzz.ir --seed 1 --seconds 600 --out fuzz-out`. A case is a module: either kernel.funcs (loads through
random in-bounds views, masked views and view stacks, ALU ops of every kind, casts and bitcasts, a reduce) launched
one after another by a host func.func, or a hand-made uop.func (gidx, a loop with an accumulator, index arithmetic,
gated loads). A third of the cases then lie about a size (fuzz.hostile: a launch's global_size, a special's extent,
a view's shape, strides, offset or mask, a type's dimension, one entry more or less in a list): the verifier must
refuse the module, or every device must run it and agree (host buffers between guard pages: fuzz.guard_pages). It is compiled with tgc.compile on every device, all in this one process, so that the devices' program
caches are shared across cases as a user's are; every device's results must equal the reference interpreter's
(INTERP) bit for bit for integers and bools, and within a tolerance for floats. A float reaches a cast to an integer,
a comparison or a bitcast only where every device must compute it exactly (loads, constants, neg, max, min, trunc,
where, exact casts), so that contraction (fma) and transcendental approximations never flip a bit that counts.
"""
from __future__ import annotations
import math, sys
from fuzz.hostile import mutate_text

NAME = 'ir'
INTS = ('i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64')
FLOATS = ('f16', 'bf16', 'f32', 'f64', 'f8e4m3', 'f8e5m2')
NARROW = ('f16', 'bf16', 'f8e4m3', 'f8e5m2')  # an integer cast to them may round
BITS = {'i1': 1, 'i8': 8, 'u8': 8, 'i16': 16, 'u16': 16, 'f16': 16, 'bf16': 16, 'i32': 32, 'u32': 32, 'f32': 32, 'i64': 64, 'u64': 64, 'f64': 64,
        'f8e4m3': 8, 'f8e5m2': 8}
DEVICES: list[str] = []
WORKER_INFO = ''


# ---------------------------------------------------------------- kernel level
def _view(r, shape, numel):
  """A view of `shape` over a buffer of `numel` elements that stays inside it where its mask lets it read."""
  nd = len(shape)
  for _ in range(20):
    strides = [0 if s == 1 or r.random() < 0.25 else r.choice((1, -1, 2, 3, -2, 5)) * (1 if r.random() < 0.7 else math.prod(shape[i + 1:]) or 1)
               for i, s in enumerate(shape)]
    mask = None
    if r.random() < 0.3:
      mask = []
      for s in shape:
        lo = r.randrange(s)
        mask.append((lo, r.randrange(lo + 1, s + 1)))
    rng = mask or [(0, s) for s in shape]
    lo = sum(a * st if st >= 0 else (b - 1) * st for (a, b), st in zip(rng, strides))
    hi = sum((b - 1) * st if st >= 0 else a * st for (a, b), st in zip(rng, strides))
    if hi - lo <= numel - 1:
      off = r.randrange(-lo, numel - hi)
      m = f", mask = [{', '.join(f'({a}, {b})' for a, b in mask)}]" if mask else ''
      return f"view(shape = {list(shape)}, strides = {strides}, offset = {off}{m})"
  return f"view(shape = {list(shape)}, strides = {[0] * nd}, offset = {r.randrange(numel)})"


def _views(r, shape, numel):
  """One view, or now and then a reshape under it: a two-view stack (the lowest view indexes the buffer)."""
  n = math.prod(shape)
  if r.random() < 0.25 and n > 1:
    low = []
    m = n
    for p in (2, 3, 5, 7):
      while m % p == 0 and r.random() < 0.7: low.append(p); m //= p
    low = (low + [m]) if m > 1 else (low or [1])
    r.shuffle(low)
    top = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return f"{_view(r, low, numel)}, view(shape = {list(shape)}, strides = {top}, offset = 0)"
  return _view(r, shape, numel)


class _K:
  """A kernel body being written: SSA lines and what is known of each value (dtype, exact)."""
  def __init__(self): self.lines, self.vals = [], []
  def emit(self, text, dt, exact):
    name = f"%{len(self.vals)}"
    self.lines.append(f"  {name} = {text}"); self.vals.append((name, dt, exact))
    return len(self.vals) - 1


def _alu(r, k: _K, dt: str, pool: list[int]):
  """One ALU op on values of dtype dt from pool (indices into k.vals); returns the new value's index."""
  pick = lambda: r.choice(pool)
  a = pick(); na, _, ea = k.vals[a]
  b = pick(); nb, _, eb = k.vals[b]
  if dt in FLOATS:
    # no recip, and fdiv only by a nonzero constant: max and min of +0.0 and -0.0 may give either (they commute in the
    # passes), and 1/x would turn that sign into +-inf (a known gap: docs/fuzzing.md)
    op = r.choice(('add', 'sub', 'mul', 'fdiv', 'max', 'min', 'mod', 'neg', 'exp2', 'log2', 'sin', 'sqrt', 'trunc', 'where', 'mulacc'))
    # sin, trunc and mod turn a last-bit difference of their operands into any difference of the result (sin(5000)
    # of an f16 one ulp apart; 100 * x + 100 fused into an fma where a kernel allows it, or not): they take values every
    # device computes exactly (C's fused mulacc before a sin: 8 of 8 results apart from INTERP's)
    if op in ('sin', 'trunc', 'mod'):
      ex = [i for i in pool if k.vals[i][2]]
      if not ex: op = 'add'
      else: a = r.choice(ex); na, _, ea = k.vals[a]; b = r.choice(ex); nb, _, eb = k.vals[b]
    if op == 'fdiv':
      c = k.emit(f"kernel.const {r.choice(('0.5', '2.0', '-1.5', '3.0', '100.0'))} : {dt}", dt, True)
      return k.emit(f"kernel.fdiv {na}, {k.vals[c][0]} : {dt}", dt, False)
  elif dt == 'i1': op = r.choice(('and', 'or', 'xor', 'not', 'max', 'min', 'where'))
  else: op = r.choice(('add', 'sub', 'mul', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr', 'neg', 'not', 'where', 'mulacc'))
  if op in ('neg', 'exp2', 'log2', 'sin', 'sqrt', 'recip', 'trunc', 'not'):
    return k.emit(f"kernel.{op} {na} : {dt}", dt, ea and op in ('neg', 'trunc', 'not'))
  if op == 'where':
    c = _cmp(r, k, dt, pool)
    return k.emit(f"kernel.where %{c}, {na}, {nb} : {dt}", dt, ea and eb)
  if op == 'mulacc':
    c = pick()
    return k.emit(f"kernel.mulacc {na}, {nb}, {k.vals[c][0]} : {dt}", dt, dt not in FLOATS)
  return k.emit(f"kernel.{op} {na}, {nb} : {dt}", dt, ea and eb and (dt not in FLOATS or op in ('max', 'min')))


def _cmp(r, k: _K, dt: str, pool):
  ex = [i for i in pool if k.vals[i][2]] or None
  if ex is None:  # compare nothing inexact: a constant with itself
    c = k.emit(f"kernel.const 1 : {dt}" if dt != 'i1' else "kernel.const 1 : i1", dt, True)
    ex = [c]
  a, b = r.choice(ex), r.choice(ex)
  return k.emit(f"kernel.{r.choice(('cmplt', 'cmpne', 'cmpeq'))} {k.vals[a][0]}, {k.vals[b][0]} : {dt} -> i1", 'i1', True)


def _convert(r, k: _K, i: int, to: str) -> int:
  name, dt, ex = k.vals[i]
  if dt == to: return i
  if dt in FLOATS and to not in FLOATS and not ex:  # an inexact float must not decide an integer
    return k.emit(f"kernel.const {r.randrange(-3, 4) if to[0] == 'i' and to != 'i1' else r.randrange(2)} : {to}", to, True)
  if BITS[dt] == BITS[to] and dt != 'i1' and r.random() < 0.3 and (ex or dt not in FLOATS):
    return k.emit(f"kernel.bitcast {name} : {dt} -> {to}", to, ex and to not in FLOATS)
  exact = ex and not (dt not in FLOATS and to in NARROW)
  return k.emit(f"kernel.cast {name} : {dt} -> {to}", to, exact)


def _const(r, dt):
  if dt == 'i1': return str(r.randrange(2))
  if dt in FLOATS: return r.choice(('0.5', '2.0', '-1.5', '3.0', '0.0', '-0.0', '1.0e-3', '100.0'))
  lo, hi = (0, (1 << BITS[dt]) - 1) if dt[0] == 'u' else (-(1 << BITS[dt] - 1), (1 << BITS[dt] - 1) - 1)
  return str(r.choice((0, 1, -1 if lo < 0 else 2, 3, BITS[dt] - 1, BITS[dt], lo, hi, r.randrange(lo, hi + 1))))


def _kernel(r, name, bufs, out_shape, out_dt, reduce_axes):
  """A kernel.func `name` over host buffers bufs [(shape, dtype, exact)] storing out_shape of out_dt: (text, its output)."""
  full = list(out_shape)
  store = list(out_shape)
  if reduce_axes:
    for a in reduce_axes: store[a] = 1
  k = _K()
  args = [f"%data0: !kernel.buf<{'x'.join(map(str, store))}x{out_dt}>" if store else f"%data0: !kernel.buf<{out_dt}>"]
  pool = []
  for j, (shape, dt, ex) in enumerate(bufs):
    args.append(f"%data{j + 1}: !kernel.buf<{'x'.join(map(str, shape)) + 'x' if shape else ''}{dt}>")
    n = math.prod(shape)
    for _ in range(r.randrange(1, 3)):
      li = k.emit(f"kernel.load %data{j + 1} [{_views(r, full, n)}] : {dt}", dt, ex)  # a float a kernel computed inexactly stays so
      pool.append(_convert(r, k, li, out_dt))
  pool.append(k.emit(f"kernel.const {_const(r, out_dt)} : {out_dt}", out_dt, True))
  for _ in range(r.randrange(1, 7)): pool.append(_alu(r, k, out_dt, pool))
  v = pool[-1]
  if reduce_axes:
    kind = r.choice(('add', 'max', 'mul') if out_dt != 'i1' else ('max',))
    red = k.emit(f"kernel.reduce {kind} {k.vals[v][0]} {list(reduce_axes)} : {out_dt}", out_dt, out_dt not in FLOATS or kind == 'max')
    post = [red, k.emit(f"kernel.const {_const(r, out_dt)} : {out_dt}", out_dt, True)]
    for _ in range(r.randrange(0, 3)): post.append(_alu(r, k, out_dt, post))
    v = post[-1]
  strides = [math.prod(store[i + 1:]) for i in range(len(store))]
  k.lines.append(f"  kernel.store %data0 [view(shape = {store}, strides = {strides}, offset = 0)], {k.vals[v][0]} : {out_dt}")
  return f"kernel.func @{name}({', '.join(args)}) {{\n" + '\n'.join(k.lines) + "\n}\n", (store, out_dt, k.vals[v][2] or out_dt not in FLOATS)


def _ttype(shape, dt): return f"tensor<{'x'.join(map(str, shape)) + 'x' if shape else ''}{dt}>"


def gen_kernel_module(r):
  dts = INTS + FLOATS + ('i1',)
  host_args = [([r.choice((1, 2, 3, 4, 5, 7, 8)) for _ in range(r.randrange(0, 4))], r.choice(dts), True) for _ in range(r.randrange(1, 4))]
  values = list(host_args)  # host values: arguments, then kernel outputs
  kernels, host = [], []
  for kn in range(r.randrange(1, 4)):
    nd = r.randrange(1, 4)
    shape = [r.choice((1, 2, 3, 4, 5, 8, 9, 16)) for _ in range(nd)]
    red = sorted(r.sample(range(nd), r.randrange(1, nd + 1))) if r.random() < 0.4 else []
    srcs = sorted(set(r.randrange(len(values)) for _ in range(r.randrange(1, 3))))
    text, out = _kernel(r, f"k{kn}", [values[s] for s in srcs], shape, r.choice(dts), red)
    kernels.append(text)
    host.append(f"  %r{kn} = kernel.alloc : {_ttype(*out[:2])}")
    host.append(f"  kernel.launch @k{kn}(%r{kn}, {', '.join(_hname(s, len(host_args)) for s in srcs)})")
    values.append(out)
  rets = sorted({len(values) - 1} | {r.randrange(len(host_args), len(values)) for _ in range(r.randrange(2))})
  sig = ', '.join(f"%a{i}: {_ttype(*a[:2])}" for i, a in enumerate(host_args))
  res = ', '.join(_ttype(*values[i][:2]) for i in rets)
  host.append(f"  func.return {', '.join(_hname(i, len(host_args)) for i in rets)} : {res}")
  return ''.join(kernels) + f"func.func @main({sig}) -> ({res}) {{\n" + '\n'.join(host) + "\n}\n"


def _hname(i, nargs): return f"%a{i}" if i < nargs else f"%r{i - nargs}"


# ---------------------------------------------------------------- uop level
def gen_uop_module(r):
  dt = r.choice(('i32', 'i64', 'u32', 'i16', 'u8', 'f32', 'f64'))
  n = r.choice((1, 3, 4, 8, 17, 32))
  loop = r.randrange(1, 9) if r.random() < 0.6 else 0
  ins = [r.choice((1, 5, 8, 16, 33)) for _ in range(r.randrange(1, 3))]
  L = [f"  %g0 = uop.define_global 0 {{size = {n}}} : !uop.ptr<{dt}>"]
  L += [f"  %g{i + 1} = uop.define_global {i + 1} {{size = {m}}} : !uop.ptr<{dt}>" for i, m in enumerate(ins)]
  L += [f"  %c0 = uop.const 0 : i32", f"  %gid = uop.special gidx0 {n} : i32"]
  vals, cnt = [], [0]
  def emit(text, ty=dt):
    cnt[0] += 1; name = f"%v{cnt[0]}"; L.append(f"  {name} = {text} : {ty}"); return name
  acc = None
  if loop:
    L.append(f"  %ce = uop.const {loop} : i32")
    if r.random() < 0.7:
      init = emit(f"uop.const {_const(r, dt)}")
      acc = emit(f"uop.define_acc {init} (%rng)")
    L.append("  %rng = uop.range %c0, %ce : i32")
  idxs = ['%gid'] + (['%rng'] if loop else [])
  for j, m in enumerate(ins):
    for _ in range(r.randrange(1, 3)):
      a, b, c = (emit(f"uop.const {r.randrange(0, 7)}", 'i32') for _ in range(3))
      t = emit(f"uop.mul {r.choice(idxs)}, {a}", 'i32')
      t = emit(f"uop.add {t}, {emit(f'uop.mul {r.choice(idxs)}, {b}', 'i32')}", 'i32')
      t = emit(f"uop.add {t}, {c}", 'i32')
      idx = emit(f"uop.mod {t}, {emit(f'uop.const {m}', 'i32')}", 'i32')
      if r.random() < 0.3:
        lim = emit(f"uop.const {r.randrange(m + 1)}", 'i32')
        cnt[0] += 1; gname = f"%v{cnt[0]}"; L.append(f"  {gname} = uop.cmplt {idx}, {lim} : i32 -> i1")
        alt = emit(f"uop.const {_const(r, dt)}")
        vals.append(emit(f"uop.load %g{j + 1}[{idx}], {gname}, {alt}"))
      else: vals.append(emit(f"uop.load %g{j + 1}[{idx}]"))
  vals.append(emit(f"uop.const {_const(r, dt)}"))
  ops = ('add', 'sub', 'mul', 'max', 'min') + (('fdiv', 'sqrt', 'exp2') if dt[0] == 'f' else ('idiv', 'mod', 'and', 'or', 'xor', 'shl', 'shr'))
  for _ in range(r.randrange(1, 6)):
    op = r.choice(ops)
    if op in ('sqrt', 'exp2'): vals.append(emit(f"uop.{op} {r.choice(vals)}"))
    else: vals.append(emit(f"uop.{op} {r.choice(vals)}, {r.choice(vals)}"))
  v = vals[-1]
  if acc is not None:
    s = emit(f"uop.{r.choice(('add', 'max'))} {acc}, {v}")
    v = emit(f"uop.phi {acc}, {s}")
  if loop:
    if acc is None:  # no accumulator: the loop's last iteration stores, one store per iteration
      L.append(f"  uop.store %g0[%gid], {v} : {dt}")
    L.append("  uop.endrange %rng")
  if not loop or acc is not None: L.append(f"  uop.store %g0[%gid], {v} : {dt}")
  fn = f"uop.func @u() attributes {{global_size = [{n}], local_size = [1]}} {{\n" + '\n'.join(L) + "\n}\n"
  sig = ', '.join([f"%a{i}: tensor<{m}x{dt}>" for i, m in enumerate(ins)])
  host = (f"func.func @main({sig}) -> tensor<{n}x{dt}> {{\n  %o = kernel.alloc : tensor<{n}x{dt}>\n"
          f"  kernel.launch @u(%o, {', '.join(f'%a{i}' for i in range(len(ins)))})\n  func.return %o : tensor<{n}x{dt}>\n}}\n")
  return fn + host


def generate(r):
  text = gen_uop_module(r) if r.random() < 0.3 else gen_kernel_module(r)
  case = {'text': text, 'seed': r.randrange(1 << 30)}
  if r.random() < 0.35:  # a size lied about (fuzz.hostile): the verifier refuses it, or every device agrees on it
    for _ in range(r.choice((1, 1, 2))): text = mutate_text(r, text)
    case.update(text=text, mutated=True)
  return case


def shrink(case):
  """Drop one line of a kernel body at a time (the verifier tells apart what still means something), then one device."""
  lines = case['text'].split('\n')
  for i, l in enumerate(lines):
    if l.startswith('  %') and ('kernel.' in l or 'uop.' in l) and 'define_global' not in l and 'alloc' not in l:
      name = l.split('=')[0].strip()
      rest = lines[:i] + lines[i + 1:]
      # uses of the dropped value take the first earlier value of its line's type
      ty = l.rsplit(':', 1)[-1].strip()
      repl = next((x.split('=')[0].strip() for x in reversed(lines[:i]) if x.startswith('  %') and x.rsplit(':', 1)[-1].strip() == ty and '=' in x), None)
      if repl is None: continue
      import re
      yield dict(case, text='\n'.join(re.sub(re.escape(name) + r'\b', repl, x) for x in rest))
  devs = case.get('devices') or WORKER_INFO.replace('devices ', '').split(', ')
  if len(devs) > 2:
    for d in devs:
      if d != 'INTERP': yield dict(case, devices=['INTERP', d])


# ---------------------------------------------------------------- running
def setup() -> str:
  import numpy as np, tgc
  for d in ('CPU', 'C', 'INTERP', 'OPENCL'):
    try:
      if tgc.compile("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = tensor.add %a, %a : tensor<2xf32>\n  func.return %0 : tensor<2xf32>\n}\n", d)(
          np.ones(2, np.float32))[0].tolist() == [2, 2]: DEVICES.append(d)
    except Exception: pass
  return f"devices {', '.join(DEVICES)}"


def _inputs(fn, seed):
  import numpy as np
  from tgc.ir import dtypes as D
  rng = np.random.default_rng(seed)
  out = []
  for t in fn.arg_types:
    dt = t.dtype
    if dt.is_bool: a = rng.integers(0, 2, t.shape).astype(bool)
    elif dt.is_int:
      info = np.iinfo(dt.np)
      a = rng.integers(info.min, info.max, t.shape, dtype=dt.np, endpoint=True) if rng.random() < 0.5 else rng.integers(-4 if dt.is_signed else 0, 9, t.shape).astype(dt.np)
    else:
      a = rng.uniform(-4, 4, t.shape).astype(np.float32)
      a = a if dt.fmt else a.astype(dt.np)  # (the emulated floats: float32 in, rounded at the boundary)
    out.append(a)
  return out


def _same(g, w, dt) -> str | None:
  import numpy as np
  if g.shape != w.shape: return f"shape {g.shape} vs {w.shape}"
  if not dt.is_float:
    bad = g != w
  else:
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    tol = {1: 2 ** -2, 2: 2 ** -6, 4: 1e-4, 8: 1e-9}[dt.itemsize] * (1 if dt.name != 'bf16' else 4)
    # a sum rounds relative to its terms, not to its result: an element where terms of the tensor's magnitude cancel
    # (f32 terms of 1e11 summing to 2.6e7) may differ by an ulp of those terms between summation orders, so each
    # element's tolerance is at least that of 2^-10 of the tensor's largest finite value
    finite = np.abs(w64[np.isfinite(w64)])
    scale = np.maximum(np.abs(w64), max(1.0, float(finite.max()) * 2 ** -10) if finite.size else 1.0)
    # both not finite (inf, -inf, NaN): a contracted a*b+c (fma, which the targets may use where a kernel allows it)
    # does not round the product, so a product that overflows to inf apart stays finite inside an fma, and a sum of
    # +inf and -inf terms (NaN) can become -inf: which non-finite value results is not defined by the program
    both_inf_nan = ~np.isfinite(g64) & ~np.isfinite(w64)
    with np.errstate(invalid='ignore'):
      bad = ~(both_inf_nan | (g64 == w64) | (np.abs(g64 - w64) <= tol * scale))
  if not bad.any(): return None
  i = tuple(int(x) for x in np.argwhere(bad)[0]) if bad.ndim else ()
  return f"{int(bad.sum())} of {bad.size} differ; first at {list(i)}: {g[i]!r} vs INTERP's {w[i]!r}"


def run(case):
  import tgc
  from tgc.errors import TgcError
  from tgc.parser import parse
  devs = case.get('devices') or DEVICES
  results, refused = {}, {}
  for d in devs:
    try:
      m = parse(case['text'], 'case.tgc')
    except TgcError as e: return 'rejected', None  # the generator wrote something the verifier refuses: counted, not a finding
    try:
      fn = tgc.compile(m, d)
      results[d] = (fn(*_inputs(fn, case['seed'])), fn.result_types)
    except TgcError as e:
      if not case.get('mutated'): return 'error', f"{d}: {type(e).__name__}: {e}"
      refused[d] = f"{type(e).__name__}: {e}"  # a lie the lowering finds: every device must find it
    except Exception as e:
      import traceback
      return f"exception:{type(e).__name__}", f"{d}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
  if refused:
    if not results: return 'rejected', None
    d, msg = next(iter(refused.items()))
    return 'error', f"{d} refuses what {', '.join(results)} run{'s' if len(results) == 1 else ''}: {msg}"
  ref = results.get('INTERP')
  if ref is None: return 'ok', None
  for d, (outs, types) in results.items():
    for i, (g, w, t) in enumerate(zip(outs, ref[0], types)):
      err = _same(g, w, t.dtype)
      if err: return 'mismatch', f"{d}: result {i} ({t}): {err}"
  return 'ok', None


def reproducer(case):
  devs = case.get('devices') or DEVICES or ['CPU', 'INTERP']
  head = ''.join(f"//   tgc-run repro.tgc --device={d} --seed {case['seed']}\n" for d in devs)
  return 'tgc', (f"// found by fuzz/ir.py: the devices below disagree on this module, with the inputs fuzz.ir._inputs makes from seed "
                 f"{case['seed']}\n// (from the repository root: python -m fuzz.ir --replay FOLDER/case.json); or with tgc-run's own "
                 f"random inputs, in this folder:\n{head}{case['text']}")


if __name__ == '__main__':
  from fuzz.harness import main
  sys.exit(main(sys.modules[__name__]))
