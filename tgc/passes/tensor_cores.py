"""Tensor cores' lowering, linearize's TC action: a warp per 16x8 output tile (mma.sync, uop.wmma), its fragments
loaded from memory or from SMEM's tiles (one uop.ldmatrix a fragment where it can), or a warpgroup per 64 rows
(Hopper's wgmma, uop.wgmma) reading both operands from their swizzled SMEM tiles; then each lane's results go
through the rest of the kernel. Schedule.check has said first that the tc action applies (Schedule.tc_operands,
check_warpgroup); these methods lower it as part of linearize's Lowerer, whose builder, indices and SMEM tiles
(tgc/passes/shared_memory.py) they use.
"""
from __future__ import annotations
import math
from tgc.ir.types import VecType
from tgc.ir import dtypes as D
from tgc.passes.schedule import feeding


class TensorCoreLowering:
  """The Lowerer's tensor-core methods (a mixin of linearize.Lowerer)."""

  def lower_tc(self, reduces, name):
    """TC: a warp per (16 x 8) output tile. Per step of 16 along k, lane 4g + t loads its fragment of A (8 values
    at m = g + 8*(i>>1 & 1), k = 2t + (i&1) + 8*(i>>2)) and of B (4 at k = 2t + (i&1) + 8*(i>>1), n = g), as the
    PTX ISA lays out mma.m16n8k16's operands; uop.wmma accumulates the tile, and each lane's 4 results (at
    m = g + 8*(i>>1), n = 2t + (i&1)) go through the rest of the kernel (a bias, a cast) to the store."""
    b, full, kinds, ops = self.b, self.full, self.kinds, self.ops_list
    self.vals = {}
    tcs = self.t.tensor_cores
    r, (xa, ca), (xb, cb) = self.sched.tc_operands(self.spec)  # (checked: Schedule.check)
    m_in, n_in, k_in = (kinds.index(x) for x in ('tcm', 'tcn', 'tck'))
    acc_dt = r.results[0].type
    if self.sched.warpgroup: return self.lower_wgmma(r, (xa, ca), (xb, cb), m_in, n_in, k_in, name)
    zero, lane = b.const(0), self.lane
    g, t2 = b.idiv(lane, b.const(4)), b.mul(b.mod(lane, b.const(4)), b.const(2))
    plus = lambda e, c: b.add(e, b.const(c))
    # upcast axes of the grid of tiles: a warp computes several tiles, each with its accumulator (fragments that
    # repeat, A's along n and B's along m, are the same loads: the builder merges them)
    up = [i for i in range(len(full)) if kinds[i] == 'upcast' and full[i] > 1]
    tiles = [{a: b.const(c) for a, c in zip(up, combo)} for combo in self.combos(up)]
    acc_t = VecType(4, acc_dt)
    init = b.emit('vectorize', [b.const(0, acc_dt)] * 4, acc_t)
    accs = [b.emit('define_acc', [init], acc_t, pure=False) for _ in tiles]
    staged = [op for op in self.smem if op in ca or op in cb]
    loop_idx, ranges = {**self.idx, **{a: zero for a in range(len(full)) if kinds[a] == 'reduce'}}, []
    if staged: self.stage_tiles(staged, loop_idx)
    ranges = self.open_reduce_loops(loop_idx, bool(staged))
    for acc in accs: acc.op.operands = [init] + ranges
    if staged: self.stage_step(staged, loop_idx)
    def fragment(v, chain, tile, at):  # the factor at each (m, n, k) position of this lane, as one vector
      if len(chain) == 1 and chain[0] in self.tiles: return staged_fragment(v, chain[0], tile, at)
      vals = []
      for mi, ni, ki in at:
        for op in chain: self.lower_op(op, {**loop_idx, **tile, m_in: mi, n_in: ni, k_in: ki}, [], above=False)
        vals.append(self.vals[v][()])
      return b.emit('vectorize', vals, VecType(len(vals), v.type))
    from tgc.passes.uop_simplify import terms
    def staged_fragment(v, load, tile, at):  # from its tile: two neighbouring positions are one 2-lane read
      buf, strides, _ = self.tiles[load]
      pos = lambda mi, ni, ki: self.tile_pos(load, self.at({**loop_idx, **tile, m_in: mi, n_in: ni, k_in: ki}, [], ()))
      if tcs.ldmatrix and v.type.bits == 16:  # one ldmatrix: each lane gives the address of one 8-element row
        l8, j = b.mod(lane, b.const(8)), b.idiv(lane, b.const(8))
        if len(at) == 8 and strides.get(k_in) == 1:  # A, k contiguous: matrices (m 0-7, 8-15) x (k 0-7, 8-15)
          p, n, trans = pos(b.add(l8, b.mul(b.mod(j, b.const(2)), b.const(8))), zero, b.mul(b.idiv(j, b.const(2)), b.const(8))), 4, 0
        elif len(at) == 4 and strides.get(n_in) == 1:  # B, n contiguous: rows k 0-15 of 8 n each, transposed
          p, n, trans = pos(zero, zero, b.mod(lane, b.const(16))), 2, 1
        elif len(at) == 4 and strides.get(k_in) == 1:  # B, k contiguous: rows n 0-7 of k 0-7, then of k 8-15
          p, n, trans = pos(zero, l8, b.mul(b.mod(j, b.const(2)), b.const(8))), 2, 0
        else: p = None
        # B's fragments of two neighbouring tiles along n (an upcast of the tile grid) are one ldmatrix of 4
        # matrices, lanes 16-31 pointing at the second tile's rows: half the reads through MIO
        pair = None if p is None or n != 2 else next((u for u in tile if u in strides and self.full[u] % 2 == 0), None)
        if pair is not None:
          c = b.cval(tile[pair])
          row = dict(zip((m_in, n_in, k_in), (zero, zero, b.mod(lane, b.const(16))) if trans else (zero, l8, b.mul(b.mod(j, b.const(2)), b.const(8)))))
          p0 = self.tile_pos(load, self.at({**loop_idx, **tile, pair: b.const(c - c % 2), **row}, [], ()))
          p4 = b.add(p0, b.mul(b.idiv(lane, b.const(16)), b.const(strides[pair])))
          if self.aligned(p4, 8):
            x4 = b.emit('ldmatrix', [buf, p4], VecType(8, v.type), {'count': 4, 'trans': trans})
            return b.emit('vectorize', [b.emit('gep', [x4], v.type, {'index': 4 * (c % 2) + i}) for i in range(4)], VecType(4, v.type))
        if p is not None and self.aligned(p, 8): return b.emit('ldmatrix', [buf, p], VecType(2 * n, v.type), {'count': n, 'trans': trans})
      ps, vals, i = [pos(*x) for x in at], [], 0
      while i < len(ps):
        if i + 1 < len(ps):
          (t0, c0), (t1, c1) = terms(ps[i], {}), terms(ps[i + 1], {})
          if sorted(t0, key=id) == sorted(t1, key=id) and c1 == c0 + 1 and self.aligned(ps[i], 2):
            pair = b.emit('load', [buf, ps[i]], VecType(2, v.type))
            vals += [b.emit('gep', [pair], v.type, {'index': 0}), b.emit('gep', [pair], v.type, {'index': 1})]
            i += 2; continue
        vals.append(b.emit('load', [buf, ps[i]], v.type)); i += 1
      return b.emit('vectorize', vals, VecType(len(vals), v.type))
    # unrolled steps of k (UNROLL after tc): each tile's accumulator takes one mma per step, in order
    un = [i for i in range(len(full)) if kinds[i] == 'unroll' and full[i] > 1]
    steps = [{a: b.const(c) for a, c in zip(un, combo)} for combo in self.combos(un)]
    # step by step, every tile in each: a step's fragments serve all tiles and then die (registers), and the mmas
    # that follow one another are independent (a tile's chain of steps would wait on each mma's latency)
    ds = list(accs)
    for step in steps:
      for j, tile in enumerate(tiles):
        at = {**tile, **step}
        fa = fragment(xa, ca, at, [(plus(g, 8 * ((i >> 1) & 1)), zero, plus(t2, (i & 1) + 8 * (i >> 2))) for i in range(8)])
        fb = fragment(xb, cb, at, [(zero, g, plus(t2, (i & 1) + 8 * (i >> 1))) for i in range(4)])
        ds[j] = b.emit('wmma', [fa, fb, ds[j]], acc_t, {'dims': tcs.dims, 'target': self.t.name})
    results = [b.emit('phi', [acc, d], acc_t, pure=False) for acc, d in zip(accs, ds)]
    for rr in reversed(ranges): b.close_range(rr)
    self.tiles = {}
    self.tc_epilogue(r, [(tile, res, 0) for tile, res in zip(tiles, results)], m_in, n_in)

  def after_reduce(self, r) -> list:
    """The ops of the kernel after a TC reduce, with what they use from before it (a constant), in order."""
    ops = self.ops_list
    need = feeding([v for op in ops[ops.index(r) + 1:] for v in op.operands], stop={r})
    return [op for n, op in enumerate(ops) if n > ops.index(r) or op in need]

  def tc_epilogue(self, r, tiles, m_in, n_in):
    """The rest of the kernel after a TC reduce, and what it uses from before the reduce (a constant), per result
    of each 16x8 tile: `tiles` holds (the tile's upcast indices, its accumulator, where its 4 values start in it);
    lane 4g + t has them at m = g + 8*(i>>1), n = 2t + (i&1)."""
    b = self.b
    g, t2 = b.idiv(self.lane, b.const(4)), b.mul(b.mod(self.lane, b.const(4)), b.const(2))
    plus = lambda e, c: b.add(e, b.const(c))
    after = self.after_reduce(r)
    for tile, res, first in tiles:
      for i in range(4):
        self.vals[r.results[0]] = {(): b.emit('gep', [res], r.results[0].type, {'index': first + i})}
        at = {**self.idx, **tile, m_in: plus(g, 8 * (i >> 1)), n_in: plus(t2, i & 1)}
        for op in after: self.lower_op(op, at, [], above=True)

  def lower_wgmma(self, r, a, bb, m_in, n_in, k_in, name):
    """TC on warpgroups (wgmma): the local axis just outside the tile's m counts warps, each 16 rows, 4 of them a
    warpgroup of 64 rows; the upcast axis just outside its n gives a warpgroup's N (8 a tile); any other upcast axis
    repeats the whole. Per step of 16 along k a warpgroup issues one uop.wgmma per repeat, reading both operands from
    their SMEM tiles (SwizzledTile); at the step's end it waits for the step before's group (with 3 stages or more,
    the copies then running a step less ahead: `ahead`; else for its own), so that a barrier later the slot that group
    read may be copied into. A warp's N/2 results per repeat are mma.sync's 16x8 tiles along n, each then as
    lower_tc's."""
    b, full, kinds = self.b, self.full, self.kinds
    (xa, ca), (xb, cb) = a, bb  # (checked: Schedule.check_warpgroup)
    la, lb = ca[0], cb[0]
    wm, nu = m_in - 1, n_in - 1
    N = 8 * (full[nu] if kinds[nu] == 'upcast' else 1)
    zero = b.const(0)
    up = [i for i in range(len(full)) if kinds[i] == 'upcast' and full[i] > 1 and i != nu]
    groups = [{a_: b.const(c) for a_, c in zip(up, combo)} for combo in self.combos(up)]
    acc_t = VecType(N // 2, D.f32)
    init = b.emit('vectorize', [b.const(0, D.f32)] * (N // 2), acc_t)
    accs = [b.emit('define_acc', [init], acc_t, pure=False) for _ in groups]
    loop_idx = {**self.idx, **{a_: zero for a_ in range(len(full)) if kinds[a_] == 'reduce'}}
    self.stage_tiles([la, lb], loop_idx)
    ranges = self.open_reduce_loops(loop_idx, True)
    for acc in accs: acc.op.operands = [init] + ranges
    self.stage_step([la, lb], loop_idx)
    b.emit('wgmma_fence', [], None, pure=False)
    lays = {op: self.tiles[op][1] for op in (la, lb)}
    attrs = {'dims': (64, N, 16), 'a_layout': lays[la].descriptor(), 'b_layout': lays[lb].descriptor()}
    first_warp = b.mul(b.idiv(self.idx[wm], b.const(4)), b.const(4))  # the warpgroup's: its 64 rows start there
    un = [i for i in range(len(full)) if kinds[i] == 'unroll' and full[i] > 1]
    ds = list(accs)
    for combo in self.combos(un):
      for j, grp in enumerate(groups):
        at = {**loop_idx, **grp, **{a_: b.const(c) for a_, c in zip(un, combo)}, wm: first_warp, m_in: zero, n_in: zero, k_in: zero}
        if kinds[nu] == 'upcast': at[nu] = zero
        point = self.at(at, [], ())
        ai, bi = self.tile_pos(la, point, swizzle=False), self.tile_pos(lb, point, swizzle=False)
        ds[j] = b.emit('wgmma', [self.tiles[la][0], ai, self.tiles[lb][0], bi, ds[j]], acc_t, attrs, pure=False)
    b.emit('wgmma_commit', [], None, pure=False)
    lag = self.sched.stages - 1 - self.ahead  # (one group may run on while the next step's copies are waited for)
    b.emit('wgmma_wait', [], None, {'pending': lag}, pure=False)
    results = [b.emit('phi', [acc, d], acc_t, pure=False) for acc, d in zip(accs, ds)]
    for rr in reversed(ranges): b.close_range(rr)
    if lag: b.emit('wgmma_wait', [], None, {'pending': 0}, pure=False)
    self.index_variables(True, again=True)  # (the epilogue's indices from the specials read again, after the loop)
    self.tiles = {}
    if self.staged_epilogue(r, list(zip(groups, results)), N, m_in, n_in, nu): return
    tiles = [({**grp, **({nu: b.const(u)} if kinds[nu] == 'upcast' else {})}, res, 4 * u) for grp, res in zip(groups, results) for u in range(N // 8)]
    self.tc_epilogue(r, tiles, m_in, n_in)

  def staged_epilogue(self, r, parts, N, m_in, n_in, nu) -> bool:
    """A warpgroup kernel's epilogue through shared memory, where its one store runs contiguously along n: each warp
    writes its 16 rows' values (the rest of the kernel computed on each result: a bias, a cast) into its own rows of a
    buffer, then stores them 16 bytes a thread, a warp's store a contiguous run of the output. From the accumulators'
    layout a thread would store 2 or 4 bytes at a time, 8 rows apart: the 2- and 4-byte stores of a short product
    (attention's scores, k = 64) took 0.48 ms on an H200 for 256 MB. The columns go in passes as wide as the shared
    memory left beside the operand tiles holds (within half of it where the tiles leave room for two work-groups a
    multiprocessor). `parts`: (the repeat's upcast indices, its accumulator). False where this does not apply (then
    tc_epilogue): several stores, a store strided along n or not aligned to 16 bytes, no room."""
    b, full, kinds = self.b, self.full, self.kinds
    after = self.after_reduce(r)
    stores = [op for op in after if op.name == 'kernel.store']
    if len(stores) != 1: return False
    st = stores[0]
    dt = st.value.type
    if dt.itemsize not in (2, 4) or self.views[st].real_strides(ignore_valid=True)[n_in] != 1: return False
    cw = 16 // dt.itemsize
    loc = [a for a in range(len(full)) if kinds[a] == 'local' and full[a] > 1]
    warps = math.prod(full[a] for a in loc)
    used = sum(self.sched.tile_bytes(op) for op in self.sched.smem)
    limit = self.spec.smem_budget
    room = (limit // 2 if 2 * used <= limit else limit) - used
    bounds = self.sched.store_bounds
    # the epilogue's loads of a whole tile of another buffer (attention's backward reads the scores, a residual's
    # add reads the residual), contiguous along n: read 16 bytes a lane along its rows into shared memory as the
    # store goes out, then each accumulator's value from there. From the accumulators' layout each would be a 2- or
    # 4-byte read a value, 8 rows apart, issued among the epilogue's math (the attention backward's dS kernel ran at
    # 0.86 TB/s on an H200)
    staged = [op for op in after if op.name == 'kernel.load' and op.gather is None and op.results[0].type.itemsize in (2, 4)
              and self.views[op].real_strides(ignore_valid=True)[n_in] == 1 and self.views[op].real_strides(ignore_valid=True)[m_in] != 0] if not bounds else []
    cws = [16 // op.results[0].type.itemsize for op in staged]
    # a pass: Nc columns (whole tiles of 8, a whole number of 16-byte chunks a lane), rows padded by a chunk
    fits = lambda c: N % c == 0 and c % 8 == 0 and all((16 * c // w) % 32 == 0 for w in [cw] + cws) and \
        warps * 16 * ((c + cw) * dt.itemsize + sum((c + w) * op.results[0].type.itemsize for op, w in zip(staged, cws))) <= room
    Nc = next((c for c in (N >> s for s in range(N.bit_length())) if c and fits(c)), None)
    if Nc is None: return False
    upcast_n = kinds[nu] == 'upcast'
    lane, zero = self.lane, b.const(0)
    per_row, stride = Nc // cw, Nc + cw
    chunk = lambda j: (b.idiv(b.add(lane, b.const(32 * j)), b.const(per_row)), b.mod(b.add(lane, b.const(32 * j)), b.const(per_row)))
    def point(grp, row, q, p, l=0):  # the kernel's point of lane l of chunk q of a row of this warp's block in pass p
      per_tile = 8 // cw  # (in whole terms of q: the bounds analysis then sees each axis's true range)
      return {**self.idx, **grp, **({nu: b.add(b.idiv(q, b.const(per_tile)), b.const(p * Nc // 8))} if upcast_n else {}),
              n_in: b.add(b.mul(b.mod(q, b.const(per_tile)), b.const(cw)), b.const(l)), m_in: row}
    row0, q0 = chunk(0)
    i0, _ = self.index(st, point(parts[0][0], row0, q0, 0), [], ())  # (a padded axis's validity: store_bounds, below)
    if not self.aligned(i0, cw): return False
    def load_chunk(grp, w, j, p):  # a staged load's j-th 16-byte chunk of this lane in pass p (w lanes): row, chunk, point
      row, q = b.idiv(b.add(lane, b.const(32 * j)), b.const(Nc // w)), b.mod(b.add(lane, b.const(32 * j)), b.const(Nc // w))
      pt = point(grp, row, q, p)
      if upcast_n: pt[nu] = b.add(b.idiv(q, b.const(8 // w)), b.const(p * Nc // 8))
      pt[n_in] = b.mul(b.mod(q, b.const(8 // w)), b.const(w))
      return row, q, pt
    for op, w in zip(staged, cws):  # (each chunk's read must be aligned to its 16 bytes and valid, else no staging)
      i, valid = self.index(op, load_chunk(parts[0][0], w, 0, 0)[2], [], ())
      if not self.aligned(i, w) or b.cval(valid) != 1: return False
    warp = zero
    for a in loc: warp = b.add(b.mul(warp, b.const(full[a])), self.idx[a])
    sbuf = self.shared_buffer(dt, warps * 16 * stride)
    base = b.mul(warp, b.const(16 * stride))
    lbufs = [(self.shared_buffer(op.results[0].type, warps * 16 * (Nc + w)), b.mul(warp, b.const(16 * (Nc + w)))) for op, w in zip(staged, cws)]
    g, t2 = b.idiv(lane, b.const(4)), b.mul(b.mod(lane, b.const(4)), b.const(2))
    n_bounded = any(a in (n_in, nu) for terms, _ in bounds for a, _ in terms)
    gate = lambda pt: self.bounds_gate(bounds, pt, [], ())
    first = True
    for grp, res in parts:
      for p in range(N // Nc):
        if not first: b.emit('barrier', [], None, pure=False)  # (the last pass's reads of the buffers are done)
        first = False
        for op, w, (lb, lbase) in zip(staged, cws, lbufs):  # this pass's tiles of the staged loads, 16 bytes a lane
          for j in range(16 * (Nc // w) // 32):
            row, q, pt = load_chunk(grp, w, j, p)
            x = b.emit('load', [self.buf[op.buf], self.index(op, pt, [], ())[0]], VecType(w, op.results[0].type))
            b.emit('store', [lb, b.add(lbase, b.add(b.mul(row, b.const(Nc + w)), b.mul(q, b.const(w)))), x], None, pure=False)
        if staged: b.emit('barrier', [], None, pure=False)
        for u in range(p * Nc // 8, (p + 1) * Nc // 8):
          for i in range(4):
            self.vals[r.results[0]] = {(): b.emit('gep', [res], r.results[0].type, {'index': 4 * u + i})}
            at = {**self.idx, **grp, **({nu: b.const(u)} if upcast_n else {}), m_in: b.add(g, b.const(8 * (i >> 1))), n_in: b.add(t2, b.const(i & 1))}
            for op, w, (lb, lbase) in zip(staged, cws, lbufs):
              col = b.const((u - p * Nc // 8) * 8 + (i & 1))
              self.vals[op.results[0]] = {(): b.emit('load', [lb, b.add(lbase, b.add(b.mul(b.add(g, b.const(8 * (i >> 1))), b.const(Nc + w)), b.add(col, t2)))], op.results[0].type, pure=False)}
            for op in after:
              if op is not st and op not in staged: self.lower_op(op, at, [], above=True)
            pos = b.add(base, b.add(b.mul(b.add(g, b.const(8 * (i >> 1))), b.const(stride)), b.add(b.const((u - p * Nc // 8) * 8 + (i & 1)), t2)))
            b.emit('store', [sbuf, pos, self.vals[st.value][()]], None, pure=False)
        b.emit('barrier', [], None, pure=False)
        for j in range(16 * per_row // 32):
          row, q = chunk(j)
          x = b.emit('load', [sbuf, b.add(base, b.add(b.mul(row, b.const(stride)), b.mul(q, b.const(cw))))], VecType(cw, dt), pure=False)
          pt = point(grp, row, q, p)
          i, _ = self.index(st, pt, [], ())
          if n_bounded:  # (a lane each: the padding of n may cut a chunk)
            gs = [gate(point(grp, row, q, p, l)) for l in range(cw)]
            g_ = b.emit('vectorize', gs, VecType(cw, D.bool_))
          else: g_ = gate(pt)
          b.emit('store', [self.buf[st.buf], i, x] + ([g_] if g_ is not None and b.cval(g_) != 1 else []), None, pure=False)
    return True
