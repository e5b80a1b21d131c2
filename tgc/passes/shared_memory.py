"""Shared memory's lowering, linearize's SMEM action: each staged load's tile (Schedule.tile_layout: padded rows, or
the tensor cores' swizzled layout) in a ring of stages, the work-group's copies into it (16 bytes a copy where it
can, asynchronously where the target can, running `ahead` steps of the reduce loop ahead of the math), the barriers
between, and the reads from it. These methods lower it as part of linearize's Lowerer, whose builder and indices
they use.
"""
from __future__ import annotations
import functools, math
from tgc.ir.types import PtrType, VecType


class SharedMemoryLowering:
  """The Lowerer's shared-memory methods (a mixin of linearize.Lowerer)."""

  @property
  def ahead(self) -> int:
    """How many steps ahead SMEM's copies run: stages - 1, or stages - 2 where a warpgroup keeps one step's wgmma
    group running past the step's end (a slot is free again only once the group that read it is done)."""
    S = self.sched.stages
    return S - 1 - (self.sched.warpgroup and S >= 3)

  def shared_buffer(self, dt, size: int, align: int | None = None):
    """A new shared-memory buffer (temp0, temp1, ...) of `size` elements, declared at the top of the kernel (OpenCL
    allows no other place)."""
    b = self.b
    attrs = {'sym': f'temp{self.n_locals}', 'size': size, **({'align': align} if align else {})}
    buf = b.emit('define_local', [], PtrType(dt, True), attrs, pure=False)
    self.n_locals += 1
    b.ops.insert(next(j for j, o in enumerate(b.ops) if o.name not in ('uop.define_global', 'uop.define_local')), b.ops.pop())
    return buf

  def stage_tiles(self, loads, idx):
    """SMEM, before the reduce loop: shared memory for each load's tiles (a ring of `stages` of them) and, with
    stages, the copies of the first stages - 1 steps (`idx`: the point before the loop, its reduce axis 0), one
    group each."""
    b, S = self.b, self.sched.stages
    for op in loads:
      lay, n = self.sched.tile_layout(op)
      slot = n if S == 1 and isinstance(lay, dict) else self.sched.slot_elems(op)
      buf = self.shared_buffer(op.results[0].type, slot * S, None if isinstance(lay, dict) else 1024)  # (a swizzle's period)
      self.tiles[op] = (buf, lay, slot)
    if S > 1:  # (`ahead` groups even where the loop has fewer steps: a step's wait counts on them, empty or not)
      for step in range(self.ahead):
        if step < self.reduce_steps(): self.copy_tiles(loads, {**idx, **self.reduce_point(b.const(step))}, b.const(step))
        if self.t.async_copy: b.emit('async_commit', [], None, pure=False)

  def stage_step(self, loads, idx):
    """SMEM, at the top of a step of the reduce loop. One buffer: the work-group copies the step's tiles between two
    barriers (the first waits for the last step's reads). Stages: this step's copies (started `ahead` steps ago)
    are waited for, one barrier shows them to the work-group and says the reads of the slot the copies go to next are
    done, and the copies of the step `ahead` steps ahead go into that slot."""
    b, S = self.b, self.sched.stages
    # (wgmma reads shared memory through the async proxy: each thread fences its own writes before the barrier)
    fence = lambda: self.sched.warpgroup and b.emit('fence_async_shared', [], None, pure=False)
    if S == 1:
      self.slot = b.const(0)
      b.emit('barrier', [], None, pure=False)
      self.copy_tiles(loads, idx, self.slot)
      fence()
      b.emit('barrier', [], None, pure=False)
      return
    if self.t.async_copy: b.emit('async_wait', [], None, {'pending': self.ahead - 1}, pure=False)
    fence()
    b.emit('barrier', [], None, pure=False)
    ahead, steps = b.add(self.step, b.const(self.ahead)), self.reduce_steps()
    if self.sched.warpgroup and self.t.async_copy:
      # no branch around the copies past the loop's end: gated off, they zero-fill a slot nothing reads again (ptxas
      # serializes a warpgroup's wgmmas across a branch it cannot prove uniform: on an H100's 4096 f16 matmul, ...)
      self.copy_tiles(loads, {**idx, **self.reduce_point(b.alu('min', ahead, b.const(steps - 1)))}, b.mod(ahead, b.const(S)), b.lt(ahead, b.const(steps)))
    else:
      b.open_if(b.lt(ahead, b.const(steps)))
      self.copy_tiles(loads, {**idx, **self.reduce_point(ahead)}, b.mod(ahead, b.const(S)))
      b.close_if()
    if self.t.async_copy: b.emit('async_commit', [], None, pure=False)
    self.slot = b.mod(self.step, b.const(S))

  def copy_tiles(self, loads, idx, slot, gate=None):
    """The work-group copies the tile of each load that its threads' lanes read in the step at `idx`
    (Schedule.tile_axes) into ring slot `slot`: neighbouring threads copy neighbouring addresses, 16 bytes at a
    time where they are contiguous and aligned, asynchronously where the target can (and stages are asked for)."""
    b, full, kinds = self.b, self.full, self.kinds
    loc = [i for i in range(len(full)) if kinds[i] in ('local', 'group') and full[i] > 1]
    tc = 'tck' in kinds  # the warp's lanes are threads too (lidx0), the local dims count warps
    tid, st = (self.lane, 32) if tc else (b.const(0), 1)
    for i in reversed(loc): tid = b.add(tid, b.mul(self.idx[i], b.const(st))); st *= full[i]
    T = st
    for op in loads:
      rs, axes = self.views[op].real_strides(ignore_valid=True), self.sched.tile_axes(op)
      buf, lay, slot_elems = self.tiles[op]
      base = b.mul(slot, b.const(slot_elems))
      dt = op.results[0].type
      def at(e, cw):  # the point of the tile's element (group of cw along the fastest axis) e, and its place in the tile
        coords = {}
        for a in reversed(axes):
          n = full[a] // cw if a == axes[-1] else full[a]
          coords[a] = b.mul(b.mod(e, b.const(n)), b.const(cw)) if a == axes[-1] else b.mod(e, b.const(n))
          e = b.idiv(e, b.const(n))
        pos = b.add(base, self.tile_offset(lay, coords))
        return [coords[a] if a in coords else idx[a] if kinds[a] in ('global', 'reduce') and full[a] > 1 else b.const(0) for a in range(len(full))], pos
      # 16 bytes a copy where the tile's fastest axis is contiguous and the addresses aligned, else 8 or 4; the
      # first element's mask gates all of it, so no mask may cut a copy in two (a PADTO bound, a padded conv input's
      # edge: the view's validity must be the same across each aligned group)
      fast = axes[-1] if axes and rs[axes[-1]] == 1 else None
      cw = next((w for w in (16 // dt.itemsize, 8 // dt.itemsize, 4 // dt.itemsize) if w > 1 and fast is not None and full[fast] % w == 0
                 and self.views[op].mask_aligned(fast, w) and self.aligned(self.views[op].to_indexed(at(tid, w)[0], b)[0], w)), 1)
      copy_async = self.t.async_copy and self.sched.stages > 1 and cw * dt.itemsize in (4, 8, 16)
      n = math.prod(full[a] for a in axes) // cw
      # (a warpgroup's copies take no branch, which would serialize its wgmmas: the threads past the tile's end copy
      # an element another thread copies too, the same bytes to the same place; a gated-off copy would write zeros)
      branchless = copy_async and self.sched.warpgroup
      for j in range(-(-n // T)):
        e = b.add(tid, b.const(T * j))
        tail = (j + 1) * T > n
        if tail and not branchless: b.open_if(b.lt(e, b.const(n)))
        if tail and branchless: e = b.mod(e, b.const(n))
        point, pos = at(e, cw)
        i, valid = self.views[op].to_indexed(point, b)
        if gate is not None and copy_async: valid = gate if b.cval(valid) == 1 else b.and_(valid, gate)  # (`gate`: the copy is wanted at all)
        t = VecType(cw, dt) if cw > 1 else dt
        zero = b.emit('vectorize', [b.const(0, dt)] * cw, t) if cw > 1 else b.const(0, dt)
        cv = b.cval(valid)
        if copy_async and cv != 0:
          b.emit('copy_async', [buf, pos, self.buf[op.buf], i] + ([] if cv == 1 else [valid]), None, {'bytes': cw * dt.itemsize}, pure=False)
        else:
          x = b.emit('load', [self.buf[op.buf], i], t) if cv == 1 else zero if cv == 0 else b.emit('load', [self.buf[op.buf], i, valid, zero], t)
          b.emit('store', [buf, pos, x], None, pure=False)
        if tail and not branchless: b.close_if()

  def tile_pos(self, op, ix, swizzle=True):
    """A point's place in the load's tile (in this step's slot of the ring)."""
    buf, lay, slot_elems = self.tiles[op]
    return self.b.add(self.b.mul(self.slot, self.b.const(slot_elems)), self.tile_offset(lay, ix, swizzle))

  def tile_offset(self, lay, ix, swizzle=True):
    """A point's place in a tile of layout `lay` ({axis: stride}, or a SwizzledTile; without `swizzle`, where it
    would lie unswizzled: a wgmma descriptor's start, which the hardware swizzles itself)."""
    b = self.b
    lin = lambda terms: functools.reduce(b.add, [b.mul(ix[a], b.const(s)) for a, s in terms], b.const(0))
    if isinstance(lay, dict): return lin(lay.items())
    r, c = lin(lay.rows), lin(lay.cols)
    cm = b.mod(c, b.const(64))
    if swizzle: cm = b.add(b.mul(b.alu('xor', b.idiv(cm, b.const(8)), b.mod(r, b.const(8))), b.const(8)), b.mod(cm, b.const(8)))
    return b.add(b.add(b.mul(b.idiv(c, b.const(64)), b.const(lay.n_rows * 64)), b.mul(r, b.const(64))), cm)

  def load_tile(self, op, idx, lane_axes, c):
    """A staged load in the reduce loop: from its tile in shared memory (a vector where the vector axis runs
    along the tile's fastest axis)."""
    b, dt = self.b, op.results[0].type
    buf, strides, _ = self.tiles[op]
    pos = lambda lane, c=c: self.tile_pos(op, self.at(idx, lane_axes, c, lane))
    vs = strides.get(self.vec, 0) if self.vec is not None and self.W > 1 else 0
    fast = next((a for a, s in strides.items() if s == 1), None)
    if vs == 0 and fast in lane_axes and self.full[fast] % 4 == 0:
      # the lanes along the tile's fastest axis come 4 at a time (one 16-byte read; the same read serves 4 lanes)
      j = lane_axes.index(fast)
      c4 = c[:j] + (c[j] - c[j] % 4,) + c[j + 1:]
      p = pos(0, c4)
      if self.aligned(p, 4): return b.emit('gep', [b.emit('load', [buf, p], VecType(4, dt))], dt, {'index': c[j] % 4})
    if vs == 0: return b.emit('load', [buf, pos(0)], dt)
    if vs == 1 and self.aligned(pos(0)): return b.emit('load', [buf, pos(0)], VecType(self.W, dt))
    return b.emit('vectorize', [b.emit('load', [buf, pos(l)], dt) for l in range(self.W)], VecType(self.W, dt))
