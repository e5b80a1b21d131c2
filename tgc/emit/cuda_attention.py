"""The CUDA target's fused attention kernel (tgc.target.FusedAttention; uop.attention renders as a call of it):
softmax(q k^T * scale) v for one head and a block of 64 or 128 queries a work-group (4 or 8 warps), the scores and
probabilities kept in registers (flash attention's online softmax).

Each warp takes 16 query rows; keys go by tiles of 64. The query tile, and two buffers each of key and value tiles
(the next tile's copies, cp.async, run while this one is used: the block's warps share them), lie in shared memory in
wgmma's 128-byte swizzled layout: 64-column blocks of rows of 16-byte chunks whose column is XORed with the row (ldmatrix
reads 8 rows of a column without bank conflicts). With `warpgroup` (sm_90a) each 4 warps are a warpgroup: S = Q K^T
and O += P V are wgmma.mma_async, Q, K and V read through descriptors, P from registers; a tile's S is issued with
the last tile's P V, whose product runs on while the tile's softmax does (FlashAttention-3's overlap within a
warpgroup), and the key and value tiles have three slots, so that a tile's copies start a whole step before it is
used. Without, they are mma.sync m16n8k16 (Q's fragments by ldmatrix once, K's and V's by ldmatrix a step), two
slots. The running max (of the raw scores: the
scale is positive) and sum of each row live in the registers of the 4 threads that hold it, p = 2^(s scale - max) is
one fma and one ex2 an element, the output's accumulators are rescaled when a row's max grows, and the probabilities'
accumulators, rounded to the input type, are directly the A fragments of P V. Rows are masked past the keys (and,
causal, where a key comes after the query); with causal masking the later blocks of queries, which see the most keys,
run first. A bias (an attention mask) is read from global memory through its layout, each thread's part of a tile
loaded before the tile's products, and added to the raw scores over the scale; with grouped-query attention a q
head reads the k and v head of its group; soft-capped (softcap > 0: Gemma 2's), the scores are scaled and capped,
softcap * tanh(s * scale / softcap), before the bias, and the backward multiplies ds by tanh's derivative. The
backward's dq and dk/dv kernels (_GRAD) recompute the probabilities from the rows' log-sum-exp; the dk/dv kernel of a
k head sums the gradients of its group's q heads. Their products are the forward's two forms: with `warpgroup`, both
score products of a tile (S and dP, from tiles by descriptors) are issued together, and the sums over the tile (dQ; dV
and dK) take the probabilities' or ds's accumulators as A fragments from registers (without, mma.sync: heads of 128
then spill, and ran at a third of the rate).
"""
from __future__ import annotations
import math

# what every instance shares: the swizzled tile addressing, the copies, the matrix loads (sm_80 and later)
_COMMON = r'''__device__ __forceinline__ unsigned tg_fa_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tg_fa_copy16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(tg_fa_smem(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
// ok ? a : b as one select (nvcc made a branch of some such choices of pointers, inside the kernel's loop)
__device__ __forceinline__ const void* tg_fa_pick(bool ok, const void* a, const void* b) {
  const void* r;
  asm("{ .reg .pred q; setp.ne.b32 q, %3, 0; selp.b64 %0, %1, %2, q; }" : "=l"(r) : "l"(a), "l"(b), "r"((int)ok));
  return r;
}
__device__ __forceinline__ void tg_fa_ldsm(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tg_fa_smem(p)));
}
// chunk c (8 elements) of row r of a tile of R rows of HD elements: 64-column blocks, one after another, each R rows of 128 bytes
// whose chunks are XORed with the row's low 3 bits (ldmatrix reads 8 rows of a chunk column without bank conflicts;
// with the tile 1024-byte aligned it is wgmma's 128-byte swizzled layout)
#define TG_FA_AT(tile, R, r, c, HD) ((tile) + (r) * 64 + ((HD) > 64 ? ((c) >> 3) * (R) * 64 + ((((c) & 7) ^ ((r) & 7)) << 3) : ((c) ^ ((r) & 7)) << 3))
// a wgmma descriptor of a 128-byte swizzled tile at p: lbo and sbo bytes between 64-column blocks and 8-row groups
__device__ __forceinline__ unsigned long long tg_fa_desc(const void* p, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((tg_fa_smem(p) & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}
// a row's log-sum-exp in log2 units for exp2(s - it): +inf where the row sees no key (lse -inf: its probabilities 0)
__device__ __forceinline__ float tg_fa_lse2(float lse) { return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f; }
// tanh on the special function unit (sm_75 and later): a soft-capped score, c * tanh(s / c)
__device__ __forceinline__ float tg_fa_tanh(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// 2^x on the special function unit, subnormal results flushed to zero (exp2f also scales them back: more instructions)
__device__ __forceinline__ float tg_fa_ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ void tg_fa_ldsm_t(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tg_fa_smem(p)));
}'''

# one instance a (type, head size, block, warpgroup): T the element type, T2 its pair, HD the head size, ROWS the
# block's queries, THREADS its threads (a warp a 16 rows), WG 1 where the products are the warpgroups' (wgmma).
# tg_attention's OUT is false in the calls that store the rows' log-sum-exp alone (no output, no P V): a constant, so
# that the wgmma waits are plain to ptxas
_KERNEL = r'''__device__ __forceinline__ void tg_fa_mma_$NAME(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.$PTX.$PTX.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned tg_fa_pack_$NAME(float lo, float hi) { $T2 h = $PAIR(lo, hi); return *reinterpret_cast<unsigned*>(&h); }
// keys [16 kk, 16 kk + 16) of the probabilities (accumulators s: 8 tiles of 8 keys) rounded to T: the A fragment of a
// product over them (mma.sync's, and wgmma's from registers: the same layout)
__device__ __forceinline__ void tg_fa_pfrag_$NAME(unsigned* a, const float (*s)[4], int kk) {
  a[0] = tg_fa_pack_$NAME(s[2 * kk][0], s[2 * kk][1]); a[1] = tg_fa_pack_$NAME(s[2 * kk][2], s[2 * kk][3]);
  a[2] = tg_fa_pack_$NAME(s[2 * kk + 1][0], s[2 * kk + 1][1]); a[3] = tg_fa_pack_$NAME(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}
// the bias of a tile's 64 keys from key0 at rows row_a and row_a + 8 (as the scores' accumulators: 8 tiles of 8 keys)
// over the scale (the scores stay raw until softmax scales them; -inf stays -inf), 0 past the ends: b a head's rows,
// lb[3] and lb[4] a row's and a key's strides; two adjacent keys a load where the layout keeps them 4-byte aligned.
// Loaded before the tile's products, so that the loads' latency hides behind them.
__device__ __forceinline__ void tg_fa_bias_$NAME(float (*bv)[4], const $T* b, const size_t* lb, int key0, int row_a, int L, int S, int t, float inv_scale) {
  const bool pairs = lb[4] == 1 && ((lb[0] | lb[1] | lb[2] | lb[3]) & 1) == 0;
  #pragma unroll
  for (int n = 0; n < 8; n++) {
    #pragma unroll
    for (int h = 0; h < 2; h++) {
      const int key = key0 + n * 8 + 2 * t, row = row_a + 8 * h;
      const $T* p = b + (size_t)row * lb[3] + (size_t)key * lb[4];
      float x0 = 0.f, x1 = 0.f;
      if (row < L && pairs && key + 1 < S) { float2 f = $T2TOF(*reinterpret_cast<const $T2*>(p)); x0 = f.x; x1 = f.y; }
      else if (row < L) { if (key < S) x0 = $TOF(p[0]); if (key + 1 < S) x1 = $TOF(p[lb[4]]); }
      bv[n][2 * h] = x0 * inv_scale; bv[n][2 * h + 1] = x1 * inv_scale;
    }
  }
}
$WGMMA_FNS// rows [row0, row0 + R) of n rows of HD elements, `ld` apart, into a swizzled tile (rows past n: zeros). A thread copies
// one chunk column (THREADS is a multiple of HD / 8) of every STEP-th row, STEP a multiple of 8: from copy to copy its
// source steps by STEP rows and its place in the tile by STEP * 64 elements (the swizzle, of the row's low 3 bits, stays),
// so that a copy costs two adds, a compare and a select, not a row's 64-bit product and the swizzle again
template <int R> __device__ __forceinline__ void tg_fa_tile_$NAME($T* tile, const $T* src, size_t ld, int row0, int n, int tid) {
  constexpr int C = $HD / 8, STEP = $THREADS / C;
  static_assert(STEP % 8 == 0 && R % STEP == 0, "a thread's rows keep their swizzle");
  const int r0 = tid / C, c = tid % C;
  const $T* p = src + (size_t)(row0 + r0) * ld + c * 8;
  $T* d = TG_FA_AT(tile, R, r0, c, $HD);
  #pragma unroll
  for (int i = 0; i < R / STEP; i++) {
    const bool ok = row0 + r0 + STEP * i < n;
    tg_fa_copy16(d + STEP * 64 * i, tg_fa_pick(ok, p + (size_t)STEP * i * ld, src), ok);
  }
}
// the next pair of tiles' copies (where there is one) start while this pair is used; then wait for this pair (in a
// kernel's prologue: the next pair is its first, and the wait is for the tiles committed before it)
__device__ __forceinline__ void tg_fa_pair_$NAME($T* a, const $T* sa, size_t la, $T* b, const $T* sb, size_t lb, int row0, int n, bool next, int tid) {
  if (next) {
    tg_fa_tile_$NAME<64>(a, sa, la, row0, n, tid);
    tg_fa_tile_$NAME<64>(b, sb, lb, row0, n, tid);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 1;" ::: "memory");
#if $WG
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // (what cp.async wrote, for wgmma's reads)
#endif
  __syncthreads();
}
// A (rows of this warp's 16, from a swizzled tile of R rows) as fragments, one a 16 of HD
template <int R> __device__ __forceinline__ void tg_fa_rows_$NAME(unsigned (*f)[4], const $T* tile, int warp, int lane) {
  #pragma unroll
  for (int kk = 0; kk < $HD / 16; kk++) {
    int r = warp * 16 + (lane % 16), c = kk * 2 + lane / 16;
    tg_fa_ldsm(f[kk], TG_FA_AT(tile, R, r, c, $HD));
  }
}
// s += A tile^T over the head's 16 columns from 16 kk: the warp's 16 rows (a: their A fragment there) against the
// tile's 64 rows
__device__ __forceinline__ void tg_fa_abt_step_$NAME(float (*s)[4], const unsigned* a, const $T* tile, int kk, int lane) {
  #pragma unroll
  for (int n2 = 0; n2 < 4; n2++) {
    int r = n2 * 16 + (lane / 16) * 8 + (lane % 8), c = kk * 2 + (lane / 8) % 2;
    unsigned b[4];
    tg_fa_ldsm(b, TG_FA_AT(tile, 64, r, c, $HD));
    tg_fa_mma_$NAME(s[2 * n2], a, b[0], b[1]);
    tg_fa_mma_$NAME(s[2 * n2 + 1], a, b[2], b[3]);
  }
}
// s = A tile^T: the warp's 16 rows (their fragments, tg_fa_rows) against the tile's 64 rows
__device__ __forceinline__ void tg_fa_abt_$NAME(float (*s)[4], const unsigned (*a)[4], const $T* tile, int lane) {
  #pragma unroll
  for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  #pragma unroll
  for (int kk = 0; kk < $HD / 16; kk++) tg_fa_abt_step_$NAME(s, a[kk], tile, kk, lane);
}
// the same with the warp's rows read from their 64-row tile a 16 columns at a time (the backward's heads of 128: the
// fragments of two 16-row operands would not stay in registers beside its accumulators)
__device__ __forceinline__ void tg_fa_abts_$NAME(float (*s)[4], const $T* atile, int warp, const $T* tile, int lane) {
  #pragma unroll
  for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  #pragma unroll
  for (int kk = 0; kk < $HD / 16; kk++) {
    unsigned a[4];
    tg_fa_ldsm(a, TG_FA_AT(atile, 64, warp * 16 + (lane % 16), kk * 2 + lane / 16, $HD));
    tg_fa_abt_step_$NAME(s, a, tile, kk, lane);
  }
}
// o += p tile: p (16 x 64, accumulators) rounded to T as A fragments, the tile's 64 rows the sum's
__device__ __forceinline__ void tg_fa_ab_$NAME(float (*o)[4], const float (*p)[4], const $T* tile, int lane) {
  #pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    unsigned pa[4];
    tg_fa_pfrag_$NAME(pa, p, kk);
    #pragma unroll
    for (int d2 = 0; d2 < $HD / 16; d2++) {
      int r = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8), c = d2 * 2 + lane / 16;
      unsigned b[4];
      tg_fa_ldsm_t(b, TG_FA_AT(tile, 64, r, c, $HD));
      tg_fa_mma_$NAME(o[2 * d2], pa, b[0], b[1]);
      tg_fa_mma_$NAME(o[2 * d2 + 1], pa, b[2], b[3]);
    }
  }
}
#if $WG
// s += A B^T over the head, issued: the warpgroup's 64 rows of a tile of R rows, from a (its first), against tile b's
// 64 rows, both K-major (read through descriptors), a wgmma a 16 columns
template <int R> __device__ __forceinline__ void tg_fa_wgqk_$NAME(float (*s)[4], const $T* a, const $T* b) {
  #pragma unroll
  for (int kk = 0; kk < $HD / 16; kk++)
    tg_fa_wgs_$NAME(&s[0][0], tg_fa_desc(a + (kk / 4) * R * 64 + (kk % 4) * 16, 16, 1024), tg_fa_desc(b + (kk / 4) * 64 * 64 + (kk % 4) * 16, 16, 1024));
}
// o += P tile, issued: P's A fragments (64 rows x 64, a 16 a fragment) from registers, the tile's 64 rows (HD
// contiguous: MN-major) read through descriptors
__device__ __forceinline__ void tg_fa_wgpvt_$NAME(float (*o)[4], const unsigned (*pa)[4], const $T* tile) {
  #pragma unroll
  for (int kk = 0; kk < 4; kk++) tg_fa_wgpv_$NAME(&o[0][0], pa[kk], tg_fa_desc(tile + kk * 16 * 64, 64 * 128, 1024));
}
#endif
// a tile's scores (8 tiles of 8 keys from key0, at rows row_a and row_b) into its probabilities, in place: soft-capped
// and biased where the call asks, masked past the keys (and, causal, after the row) where `masked`, the rows' running
// max (m, raw scores: the scale is positive, it keeps the order) and this thread's part of their sums (l) carried on;
// a0, a1 the factors the rows' accumulators take (1 where the max did not grow). p = 2^(s * scale_log2 - u), u the
// max in log2 units: one fma and one ex2 an element (a row masked so far: u = 0, no NaN).
__device__ __forceinline__ void tg_fa_softmax_$NAME(float (*s)[4], const float (*bv)[4], bool biased, float softcap, float cap_scale,
    bool masked, bool causal, int key0, int row_a, int row_b, int S, int t, float scale_log2, float& m0, float& m1, float& l0, float& l1, float& a0, float& a1) {
  if (softcap > 0.f) {  // (soft-capped: the scores scaled and capped here, scale_log2 is log2(e) and the bias is not scaled)
    #pragma unroll
    for (int n = 0; n < 8; n++) {
      #pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = softcap * tg_fa_tanh(s[n][e] * cap_scale);
    }
  }
  if (biased) {
    #pragma unroll
    for (int n = 0; n < 8; n++) { s[n][0] += bv[n][0]; s[n][1] += bv[n][1]; s[n][2] += bv[n][2]; s[n][3] += bv[n][3]; }
  }
  float mx0 = m0, mx1 = m1;
  #pragma unroll
  for (int n = 0; n < 8; n++) {
    if (masked) {
      #pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = key0 + n * 8 + 2 * t + (e & 1), row = e < 2 ? row_a : row_b;
        if (key >= S || (causal && key > row)) s[n][e] = -INFINITY;
      }
    }
    mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
    mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float u0 = mx0 == -INFINITY ? 0.f : mx0 * scale_log2, u1 = mx1 == -INFINITY ? 0.f : mx1 * scale_log2;
  a0 = tg_fa_ex2(m0 * scale_log2 - u0); a1 = tg_fa_ex2(m1 * scale_log2 - u1);
  m0 = mx0; m1 = mx1;
  float ps0 = 0.f, ps1 = 0.f;
  #pragma unroll
  for (int n = 0; n < 8; n++) {
    s[n][0] = tg_fa_ex2(fmaf(s[n][0], scale_log2, -u0)); s[n][1] = tg_fa_ex2(fmaf(s[n][1], scale_log2, -u0));
    s[n][2] = tg_fa_ex2(fmaf(s[n][2], scale_log2, -u1)); s[n][3] = tg_fa_ex2(fmaf(s[n][3], scale_log2, -u1));
    ps0 += s[n][0] + s[n][1]; ps1 += s[n][2] + s[n][3];
  }
  l0 = l0 * a0 + ps0; l1 = l1 * a1 + ps1;  // (this thread's part of the row sums: the quad's meet at the end)
}
// the accumulators of rows row_a (o[.][0..1]) and row_b (o[.][2..3]) times a0 and a1 (the warp skips it where no row's
// max grew: after the first tiles, most of the time)
__device__ __forceinline__ void tg_fa_rescale_$NAME(float (*o)[4], float a0, float a1) {
  if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
    #pragma unroll
    for (int d = 0; d < $HD / 8; d++) { o[d][0] *= a0; o[d][1] *= a0; o[d][2] *= a1; o[d][3] *= a1; }
  }
}
// head hd's rows: layout {offset, b's stride, h's stride, a row's stride}, hd = b * H + h; this work-group's head's;
// those of its k and v head, each of which serves `group` q heads (grouped-query attention)
#define TG_FA_HEAD_AT(P, lay, hd) (P + lay[0] + (size_t)((hd) / H) * lay[1] + (size_t)((hd) % H) * lay[2])
#define TG_FA_HEAD(P, lay) TG_FA_HEAD_AT(P, lay, head)
#define TG_FA_KV(P, lay) (P + lay[0] + (size_t)(head / H) * lay[1] + (size_t)((head % H) / group) * lay[2])
template <bool OUT> __device__ __forceinline__ void tg_attention_$NAME($T* __restrict__ O, const $T* __restrict__ Q, const $T* __restrict__ K,
    const $T* __restrict__ V, $T* smem, int head, int block, int tid, int H, int L, int S, int blocks, float scale_log2, bool causal,
    const size_t* lo, const size_t* lq, const size_t* lk, const size_t* lv, float* __restrict__ LSE,
    const $T* __restrict__ BIAS, const size_t* lbias, float inv_scale, int group, float softcap, float cap_scale) {
  constexpr int slots = $WG ? 3 : 2;  // key and value tiles in shared memory (see the loops)
  $T* sQ = smem;                    // ROWS x HD
  $T* sK = sQ + $ROWS * $HD;        // slots x 64 x HD
  $T* sV = sK + slots * 64 * $HD;   // slots x 64 x HD
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int q0 = (causal ? blocks - 1 - block : block) * $ROWS, w0 = q0 + warp * 16;  // w0: the warp's first query
  const $T* Qh = TG_FA_HEAD(Q, lq);
  const $T* Kh = TG_FA_KV(K, lk);
  const $T* Vh = TG_FA_KV(V, lv);
  const $T* Bh = BIAS != 0 ? TG_FA_HEAD(BIAS, lbias) : BIAS;  // (a null BIAS, the calls without one: the code folds away)
  const int all_tiles = (S + 63) / 64;
  const int n_tiles = causal ? min(all_tiles, (q0 + $ROWS + 63) / 64) : all_tiles;
  float o[$HD / 8][4];
  #pragma unroll
  for (int j = 0; j < $HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows g and g + 8 of the warp's 16 (m: raw scores)
  const int row_a = w0 + g, row_b = row_a + 8;
  tg_fa_tile_$NAME<$ROWS>(sQ, Qh, lq[3], q0, L, tid);
  asm volatile("cp.async.commit_group;" ::: "memory");
#if $WG
  // A tile's S = Q K^T is issued together with the last tile's O += P V, and the tile's softmax runs while P V does:
  // three slots, a tile's copies issued a whole step before it is used (into the slot of the tile two before, whose
  // P V every warpgroup has waited for by then). (A warpgroup whose queries all come before a tile's keys, causal
  // with 128 queries, computes it masked: its probabilities are 0.)
  tg_fa_tile_$NAME<64>(sK, Kh, lk[3], 0, S, tid);
  tg_fa_tile_$NAME<64>(sV, Vh, lv[3], 0, S, tid);
  asm volatile("cp.async.commit_group;" ::: "memory");
  unsigned pa[4][4];  // the last tile's P as A fragments (read by its P V, which runs on)
  for (int j = 0; j < n_tiles; j++) {
    const int slot = j % 3;
    asm volatile("cp.async.wait_group 0;" ::: "memory");  // (tile j: the only copies in flight)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // (what cp.async wrote, for wgmma's reads)
    __syncthreads();
    if (j + 1 < n_tiles) {  // (the next tile's copies, before the products: S and P V then issue back to back)
      const int next = (j + 1) % 3;
      tg_fa_tile_$NAME<64>(sK + next * 64 * $HD, Kh, lk[3], (j + 1) * 64, S, tid);
      tg_fa_tile_$NAME<64>(sV + next * 64 * $HD, Vh, lv[3], (j + 1) * 64, S, tid);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    float bv[8][4];
    if (BIAS != 0) tg_fa_bias_$NAME(bv, Bh, lbias, j * 64, row_a, L, S, t, inv_scale);
    float s[8][4];  // S = Q K^T: the warpgroup's 64 queries against the tile's 64 keys, Q and K read where they lie
    #pragma unroll
    for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    tg_fa_wgqk_$NAME<$ROWS>(s, sQ + (warp / 4) * 64 * 64, sK + slot * 64 * $HD);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (OUT && j > 0) {  // O += P V of the last tile: P from registers, V (keys x HD, HD contiguous: MN-major) by descriptor
      tg_fa_wgpvt_$NAME(o, pa, sV + ((j + 2) % 3) * 64 * $HD);
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // (S; P V runs on)
    } else asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // (each wait beside its products: ptxas then
                                                                           // sees S done on every path, none serialized)
    const bool masked = (j + 1) * 64 > S || (causal && (j + 1) * 64 - 1 > w0);
    float a0, a1;
    tg_fa_softmax_$NAME(s, bv, BIAS != 0, softcap, cap_scale, masked, causal, j * 64, row_a, row_b, S, t, scale_log2, m0, m1, l0, l1, a0, a1);
    if (OUT) {  // (P V done: on every path, so that ptxas sees no accumulator of a running product written)
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      tg_fa_rescale_$NAME(o, a0, a1);
      #pragma unroll
      for (int kk = 0; kk < 4; kk++) tg_fa_pfrag_$NAME(pa[kk], s, kk);
    }
  }
  if (OUT && n_tiles > 0) {  // the last tile's P V
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    tg_fa_wgpvt_$NAME(o, pa, sV + ((n_tiles - 1) % 3) * 64 * $HD);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
#else
  // two slots, the next tiles' copies a step ahead (tg_fa_pair waits for this step's, the queries' before the first)
  tg_fa_pair_$NAME(sK, Kh, lk[3], sV, Vh, lv[3], 0, S, true, tid);
  unsigned qf[$HD / 16][4];  // this warp's 16 query rows as A fragments, one a 16 of HD
  tg_fa_rows_$NAME<$ROWS>(qf, sQ, warp, lane);
  for (int j = 0; j < n_tiles; j++) {
    const int buf = j & 1;
    tg_fa_pair_$NAME(sK + (buf ^ 1) * 64 * $HD, Kh, lk[3], sV + (buf ^ 1) * 64 * $HD, Vh, lv[3], (j + 1) * 64, S, j + 1 < n_tiles, tid);
    if (!(causal && j * 64 > w0 + 15)) {  // (causal: a tile whose keys all come after the warp's last query changes none of its rows)
      float bv[8][4];
      if (BIAS != 0) tg_fa_bias_$NAME(bv, Bh, lbias, j * 64, row_a, L, S, t, inv_scale);
      float s[8][4];  // S = Q K^T: 8 tiles of 8 keys
      tg_fa_abt_$NAME(s, qf, sK + buf * 64 * $HD, lane);
      const bool masked = (j + 1) * 64 > S || (causal && (j + 1) * 64 - 1 > w0);
      float a0, a1;
      tg_fa_softmax_$NAME(s, bv, BIAS != 0, softcap, cap_scale, masked, causal, j * 64, row_a, row_b, S, t, scale_log2, m0, m1, l0, l1, a0, a1);
      if (OUT) {
        tg_fa_rescale_$NAME(o, a0, a1);
        tg_fa_ab_$NAME(o, s, sV + buf * 64 * $HD, lane);  // O += P V
      }
    }
    __syncthreads();  // (this tile's buffers are read: the copies two steps on may take them)
  }
#endif
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
  if (LSE != 0 && t == 0) {  // the rows' log-sum-exp of the scores (natural log; m is in log2 units): for a backward
    if (row_a < L) LSE[(size_t)head * L + row_a] = l0 > 0.f ? (m0 * scale_log2 + log2f(l0)) * 0.6931471805599453f : -INFINITY;
    if (row_b < L) LSE[(size_t)head * L + row_b] = l1 > 0.f ? (m1 * scale_log2 + log2f(l1)) * 0.6931471805599453f : -INFINITY;
  }
  if (!OUT) return;
  $T* Oh = TG_FA_HEAD(O, lo);
  #pragma unroll
  for (int d = 0; d < $HD / 8; d++) {
    int col = d * 8 + 2 * t;
    if (row_a < L) *reinterpret_cast<$T2*>(Oh + (size_t)row_a * lo[3] + col) = $PAIR(o[d][0] * i0, o[d][1] * i0);
    if (row_b < L) *reinterpret_cast<$T2*>(Oh + (size_t)row_b * lo[3] + col) = $PAIR(o[d][2] * i1, o[d][3] * i1);
  }
}'''

# the backward's two kernels (an instance a type and head size, 64 rows a work-group of 128 threads; after _KERNEL's
# instance of the same name, whose copies, products and packing they use). dq: a block of queries against each tile
# of keys and values, as the forward, the probabilities from the rows' log-sum-exp: dq = sum_j ds_j k_j. dkdv: a block
# of keys against each tile of queries and output gradients, the scores transposed (keys the rows):
# dv = sum_i p_i^T do_i, dk = sum_i ds_i^T q_i. ds = p * (do v^T - d) * scale, d each query row's sum of do * o.
_GRAD = r'''// the warp's rows of an accumulator (16 x HD) into rows (row_a, row_a + 8) of a contiguous [n, HD] matrix
__device__ __forceinline__ void tg_fa_store_$NAME($T* dst, const float (*o)[4], int row_a, int n, int t) {
  #pragma unroll
  for (int d = 0; d < $HD / 8; d++) {
    int col = d * 8 + 2 * t;
    if (row_a < n) *reinterpret_cast<$T2*>(dst + (size_t)row_a * $HD + col) = $PAIR(o[d][0], o[d][1]);
    if (row_a + 8 < n) *reinterpret_cast<$T2*>(dst + (size_t)(row_a + 8) * $HD + col) = $PAIR(o[d][2], o[d][3]);
  }
}
#if $WG
// s = A B^T and s2 = A2 B2^T over the head, each the warpgroup's 64 rows of a tile against another tile's 64 rows (both
// K-major), issued together and waited for
__device__ __forceinline__ void tg_fa_wgabt2_$NAME(float (*s)[4], const $T* a, const $T* b, float (*s2)[4], const $T* a2, const $T* b2) {
  #pragma unroll
  for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = s2[n][0] = s2[n][1] = s2[n][2] = s2[n][3] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  tg_fa_wgqk_$NAME<64>(s, a, b);
  tg_fa_wgqk_$NAME<64>(s2, a2, b2);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// o += p tile, issued: p (the warpgroup's 64 rows x 64, accumulators) rounded to T as A fragments, the tile's 64 rows
// (HD contiguous: MN-major) the sum's
__device__ __forceinline__ void tg_fa_wgab_$NAME(float (*o)[4], const float (*p)[4], const $T* tile) {
  unsigned pa[4][4];
  #pragma unroll
  for (int kk = 0; kk < 4; kk++) tg_fa_pfrag_$NAME(pa[kk], p, kk);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  tg_fa_wgpvt_$NAME(o, pa, tile);
}
#endif
__device__ __forceinline__ void tg_attention_dq_$NAME($T* __restrict__ DQ, const $T* __restrict__ Q, const $T* __restrict__ K,
    const $T* __restrict__ V, const $T* __restrict__ G, const float* __restrict__ LSE, const float* __restrict__ Dr, $T* smem,
    int head, int block, int tid, int H, int L, int S, int blocks, float scale_log2, float scale, bool causal,
    const size_t* lq, const size_t* lk, const size_t* lv, const size_t* lg, const $T* __restrict__ BIAS, const size_t* lbias, float inv_scale,
    int group, float softcap, float cap_scale) {
  $T* sQ = smem; $T* sG = sQ + 64 * $HD; $T* sK = sG + 64 * $HD; $T* sV = sK + 2 * 64 * $HD;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int q0 = (causal ? blocks - 1 - block : block) * 64;
  const $T* Kh = TG_FA_KV(K, lk);
  const $T* Vh = TG_FA_KV(V, lv);
  const $T* Bh = BIAS != 0 ? TG_FA_HEAD(BIAS, lbias) : BIAS;
  const int all_tiles = (S + 63) / 64;
  const int n_tiles = causal ? min(all_tiles, (q0 + 64 + 63) / 64) : all_tiles;
  tg_fa_tile_$NAME<64>(sQ, TG_FA_HEAD(Q, lq), lq[3], q0, L, tid);
  tg_fa_tile_$NAME<64>(sG, TG_FA_HEAD(G, lg), lg[3], q0, L, tid);
  asm volatile("cp.async.commit_group;" ::: "memory");
  tg_fa_pair_$NAME(sK, Kh, lk[3], sV, Vh, lv[3], 0, S, true, tid);
#if $HD <= 64 && !$WG  // (q's and the output gradient's rows as fragments in registers; heads of 128 read them from their tiles)
  unsigned qf[$HD / 16][4], gf[$HD / 16][4];
  tg_fa_rows_$NAME<64>(qf, sQ, warp, lane);
  tg_fa_rows_$NAME<64>(gf, sG, warp, lane);
#endif
  const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
  const float la = row_a < L ? tg_fa_lse2(LSE[(size_t)head * L + row_a]) : 0.f, lb = row_b < L ? tg_fa_lse2(LSE[(size_t)head * L + row_b]) : 0.f;
  const float da = row_a < L ? Dr[(size_t)head * L + row_a] : 0.f, db = row_b < L ? Dr[(size_t)head * L + row_b] : 0.f;
  float dq[$HD / 8][4];
  #pragma unroll
  for (int d = 0; d < $HD / 8; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.f;
  for (int j = 0; j < n_tiles; j++) {
    const int buf = j & 1;
    tg_fa_pair_$NAME(sK + (buf ^ 1) * 64 * $HD, Kh, lk[3], sV + (buf ^ 1) * 64 * $HD, Vh, lv[3], (j + 1) * 64, S, j + 1 < n_tiles, tid);
    const $T* kt = sK + buf * 64 * $HD;
    float s[8][4], dp[8][4], bv[8][4];
    if (BIAS != 0) tg_fa_bias_$NAME(bv, Bh, lbias, j * 64, row_a, L, S, t, inv_scale);
#if $WG
    tg_fa_wgabt2_$NAME(s, sQ, kt, dp, sG, sV + buf * 64 * $HD);
#elif $HD <= 64
    tg_fa_abt_$NAME(s, qf, kt, lane);
    tg_fa_abt_$NAME(dp, gf, sV + buf * 64 * $HD, lane);
#else
    tg_fa_abts_$NAME(s, sQ, warp, kt, lane);
    tg_fa_abts_$NAME(dp, sG, warp, sV + buf * 64 * $HD, lane);
#endif
    const bool masked = (j + 1) * 64 > S || (causal && (j + 1) * 64 - 1 > q0 + warp * 16);  // (as the forward's)
    #pragma unroll
    for (int n = 0; n < 8; n++) {
      #pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = j * 64 + n * 8 + 2 * t + (e & 1), row = e < 2 ? row_a : row_b;
        float x = s[n][e], dx = scale;  // the score, and its derivative by q k^T
        if (softcap > 0.f) { const float th = tg_fa_tanh(x * cap_scale); x = softcap * th; dx = scale * (1.f - th * th); }
        if (BIAS != 0) x += bv[n][e];
        float p = (masked && (key >= S || (causal && key > row))) ? 0.f : exp2f(x * scale_log2 - (e < 2 ? la : lb));
        s[n][e] = p * (dp[n][e] - (e < 2 ? da : db)) * dx;  // ds
      }
    }
#if $WG
    tg_fa_wgab_$NAME(dq, s, kt);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#else
    tg_fa_ab_$NAME(dq, s, kt, lane);
#endif
    __syncthreads();
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  tg_fa_store_$NAME(DQ + (size_t)head * L * $HD, dq, row_a, L, t);
}
__device__ __forceinline__ void tg_attention_dkdv_$NAME($T* __restrict__ DK, $T* __restrict__ DV, const $T* __restrict__ Q,
    const $T* __restrict__ K, const $T* __restrict__ V, const $T* __restrict__ G, const float* __restrict__ LSE,
    const float* __restrict__ Dr, $T* smem, int head, int block, int tid, int H, int L, int S, float scale_log2, float scale,
    bool causal, const size_t* lq, const size_t* lk, const size_t* lv, const size_t* lg, const $T* __restrict__ BIAS, const size_t* lbias,
    float inv_scale, int group, float softcap, float cap_scale) {
  // (head: a k and v head, b * H / group + h; the gradients of the `group` q heads it serves are summed here)
  $T* sK = smem; $T* sV = sK + 64 * $HD; $T* sQ = sV + 64 * $HD; $T* sG = sQ + 2 * 64 * $HD;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int k0 = block * 64, HK = H / group;
  const int first = causal ? k0 / 64 : 0, n_tiles = (L + 63) / 64;  // (causal: the queries before k0 see none of these keys)
  tg_fa_tile_$NAME<64>(sK, K + lk[0] + (size_t)(head / HK) * lk[1] + (size_t)(head % HK) * lk[2], lk[3], k0, S, tid);
  tg_fa_tile_$NAME<64>(sV, V + lv[0] + (size_t)(head / HK) * lv[1] + (size_t)(head % HK) * lv[2], lv[3], k0, S, tid);
  asm volatile("cp.async.commit_group;" ::: "memory");
#if $HD <= 64 && !$WG  // (k's and v's rows as fragments in registers; heads of 128 read them from their tiles)
  unsigned kf[$HD / 16][4], vf[$HD / 16][4];
#endif
  const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;
  float dk[$HD / 8][4], dv[$HD / 8][4];
  #pragma unroll
  for (int d = 0; d < $HD / 8; d++) dk[d][0] = dk[d][1] = dk[d][2] = dk[d][3] = dv[d][0] = dv[d][1] = dv[d][2] = dv[d][3] = 0.f;
  for (int gi = 0; gi < group; gi++) {
    const int qh = (head / HK) * H + (head % HK) * group + gi;  // (a q head of the group)
    const $T* Qh = TG_FA_HEAD_AT(Q, lq, qh);
    const $T* Gh = TG_FA_HEAD_AT(G, lg, qh);
    const $T* Bh = BIAS != 0 ? TG_FA_HEAD_AT(BIAS, lbias, qh) : BIAS;
    tg_fa_pair_$NAME(sQ, Qh, lq[3], sG, Gh, lg[3], first * 64, L, first < n_tiles, tid);  // (the group's first; k and v waited for)
#if $HD <= 64 && !$WG
    if (gi == 0) {
      tg_fa_rows_$NAME<64>(kf, sK, warp, lane);
      tg_fa_rows_$NAME<64>(vf, sV, warp, lane);
    }
#endif
    const float* Lh = LSE + (size_t)qh * L;
    const float* Dh = Dr + (size_t)qh * L;
    for (int i = first; i < n_tiles; i++) {
      const int buf = (i - first) & 1;
      tg_fa_pair_$NAME(sQ + (buf ^ 1) * 64 * $HD, Qh, lq[3], sG + (buf ^ 1) * 64 * $HD, Gh, lg[3], (i + 1) * 64, L, i + 1 < n_tiles, tid);
      const $T* qt = sQ + buf * 64 * $HD;
      const $T* gt = sG + buf * 64 * $HD;
      float st[8][4], dpt[8][4];  // the scores and do v^T transposed: the warp's keys the rows, the tile's queries the columns
#if $WG
      tg_fa_wgabt2_$NAME(st, sK, qt, dpt, sV, gt);
#elif $HD <= 64
      tg_fa_abt_$NAME(st, kf, qt, lane);
      tg_fa_abt_$NAME(dpt, vf, gt, lane);
#else
      tg_fa_abts_$NAME(st, sK, warp, qt, lane);
      tg_fa_abts_$NAME(dpt, sV, warp, gt, lane);
#endif
      #pragma unroll
      for (int n = 0; n < 8; n++) {
        #pragma unroll
        for (int c = 0; c < 2; c++) {
          int col = i * 64 + n * 8 + 2 * t + c;
          bool in = col < L;
          float l2 = in ? tg_fa_lse2(Lh[col]) : 0.f, d = in ? Dh[col] : 0.f;
          #pragma unroll
          for (int h = 0; h < 2; h++) {
            int e = 2 * h + c, key = h ? key_b : key_a;
            float x = st[n][e], dx = scale;  // the score, and its derivative by q k^T
            if (softcap > 0.f) { const float th = tg_fa_tanh(x * cap_scale); x = softcap * th; dx = scale * (1.f - th * th); }
            if (BIAS != 0 && in && key < S) x = fmaf($TOF(Bh[(size_t)col * lbias[3] + (size_t)key * lbias[4]]), inv_scale, x);
            float p = (!in || (causal && key > col)) ? 0.f : exp2f(x * scale_log2 - l2);
            st[n][e] = p;
            dpt[n][e] = p * (dpt[n][e] - d) * dx;  // ds^T
          }
        }
      }
#if $WG
      tg_fa_wgab_$NAME(dv, st, gt);
      tg_fa_wgab_$NAME(dk, dpt, qt);
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#else
      tg_fa_ab_$NAME(dv, st, gt, lane);
      tg_fa_ab_$NAME(dk, dpt, qt, lane);
#endif
      __syncthreads();
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  tg_fa_store_$NAME(DK + (size_t)head * S * $HD, dk, key_a, S, t);
  tg_fa_store_$NAME(DV + (size_t)head * S * $HD, dv, key_a, S, t);
}'''

def _wgmma_functions(name: str, ptx: str, hd: int) -> str:
  """The instance's warpgroup products (sm_90a): S (64 x 64, f32) += Q K^T from two K-major tiles' descriptors, and
  O (64 x hd) += P V with P's A fragments in registers and V's tile MN-major (transposed: trans-b 1)."""
  def fn(kind, n, a_regs):
    outs = ', '.join(f'%{i}' for i in range(n // 2))
    k = n // 2
    a, b = (f'{{%{k}, %{k + 1}, %{k + 2}, %{k + 3}}}', f'%{k + 4}') if a_regs else (f'%{k}', f'%{k + 1}')
    ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)' if a_regs else '"l"(da), "l"(db)'
    flags = '1, 1, 1' if a_regs else '1, 1, 0, 0'  # scale-a, scale-b, (trans-a,) trans-b
    sig = 'const unsigned* a' if a_regs else 'unsigned long long da'
    return (f'__device__ __forceinline__ void tg_fa_{kind}_{name}(float* d, {sig}, unsigned long long db) {{\n'
            f'  asm volatile("{{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{outs}}}, {a}, {b}, p, {flags}; }}"\n'
            f'    : {", ".join(f"{chr(34)}+f{chr(34)}(d[{i}])" for i in range(n // 2))} : {ins} : "memory");\n}}\n')
  return fn('wgs', 64, False) + fn('wgpv', hd, True)


# element type -> (its CUDA name, its pair's, the pair's constructor from two floats, mma.sync's operand type, its
# conversion to float, its pair's to float2)
_TYPES = {'f16': ('half', '__half2', '__floats2half2_rn', 'f16', '__half2float', '__half22float2'),
          'bf16': ('__nv_bfloat16', '__nv_bfloat162', '__floats2bfloat162_rn', 'bf16', '__bfloat162float', '__bfloat1622float2')}


BLOCKS = ((64, 128), (128, 256))  # the work-groups it comes in, (queries, threads): uop.attention's block_rows, threads
KEY_ROWS = 64                     # the keys a tile (uop.attention's key_rows); the backward's work-groups take as many
GRAD_DIMS = (64, 128)             # the head sizes of the backward's kernels


# the work-groups of the backward's kernels (on warpgroups) a multiprocessor should hold, by head size: its
# __launch_bounds__' second number. Heads of 64 took 172 registers a thread in the dk/dv kernel, which leaves room for
# 2 work-groups; held to 168, 3 (an H200, 8x16x1024x64 f16 causal: dk/dv 229 -> 173 us, dq 107 -> 95). Heads of 128
# then spill (dk/dv 130 -> 223 us).
GRAD_BLOCKS = {64: 3}


def grad_blocks(ops) -> int:
  """The work-groups a multiprocessor should hold of a kernel of these uops (0: no hint): GRAD_BLOCKS of its
  uop.attention_grad on warpgroups."""
  return max((GRAD_BLOCKS.get(op.attrs['dim'], 0) for op in ops if op.name == 'uop.attention_grad' and op.attrs.get('warpgroup')), default=0)


def attention_name(dtype: str, head_dim: int, rows: int, warpgroup: int = 0) -> str:
  return f"{dtype}_{head_dim}_{rows}{'_wg' if warpgroup else ''}"


def attention_functions(instances, grads=()) -> list[str]:
  """The device functions of these (dtype name, head size, block rows, warpgroup) instances (warpgroup 1: the
  products on sm_90a's warpgroups), and of the backward's (dtype name, head size) ones, after what they share."""
  out = [_COMMON]
  grads = {(dt, hd, KEY_ROWS, wg) for dt, hd, wg in grads}
  for dt, hd, rows, wg in sorted(set(instances) | grads):
    t, t2, pair, ptx, tof, t2tof = _TYPES[dt]
    name = attention_name(dt, hd, rows, wg)
    text = _KERNEL.replace('$WGMMA_FNS', _wgmma_functions(name, ptx, hd) if wg else '') + ('\n' + _GRAD if (dt, hd, rows, wg) in grads else '')
    for k, v in (('$NAME', name), ('$TOF', tof), ('$T2TOF', t2tof), ('$T2', t2), ('$THREADS', str(dict(BLOCKS)[rows])), ('$T', t), ('$PAIR', pair),
                 ('$PTX', ptx), ('$HD', str(hd)), ('$ROWS', str(rows)), ('$WG', str(wg))): text = text.replace(k, v)
    out.append(text)
  return out


def _layouts(op, names) -> list[str]:
  """The op's layouts as constant arrays tg_l<name> (the bias's where it has one: its five numbers)."""
  return [f"const size_t tg_l{n}[{len(a)}] = {{{', '.join(f'{x}ull' for x in a)}}};" for n in names + ('bias',)
          if (a := op.attrs.get(f'{n}_layout')) is not None]


def _bias(dtype: str, args: dict) -> str:
  return f"{args['bias']}, tg_lbias" if 'bias' in args else f"({_TYPES[dtype][0]}*)0, (size_t*)0"


def _scaling(a: dict) -> tuple[float, float, str]:
  """(scale_log2, the bias's factor, the softcap arguments) of an attention's attributes: the softmax's scores times
  scale_log2 are in log2 units. Raw (q k^T) where they are not capped, the bias over the scale; capped (softcap * tanh(
  q k^T * scale / softcap), the kernel's cap_scale the ratio), they are scaled already and the bias is added as it is."""
  scale, cap = float(a['scale']), float(a.get('softcap', 0))
  if not cap: return scale * math.log2(math.e), 1 / scale, '0.f, 0.f'
  return math.log2(math.e), 1.0, f"{cap!r}f, {scale / cap!r}f"


def attention_call(dtype: str, op, args: dict, blocks: int) -> list[str]:
  """The kernel body's lines that call the instance for uop.attention `op` (args: its operands' expressions by name):
  its layouts as constant arrays, then the call."""
  a, x = op.attrs, args
  scale_log2, inv_scale, cap = _scaling(a)
  out = f"({_TYPES[dtype][0]}*)0" if a.get('lse_only') else x['out']  # (its rows' log-sum-exp alone: no P V, no output)
  head = ', '.join([out] + [x[n] for n in ('q', 'k', 'v', 'smem', 'head', 'block', 'lane')])
  return _layouts(op, ('out', 'q', 'k', 'v')) + [
    f"tg_attention_{attention_name(dtype, a['dim'], a['block_rows'], a.get('warpgroup', 0))}<{'false' if a.get('lse_only') else 'true'}>({head}, {a['heads']}, {a['rows']}, {a['keys']}, {blocks}, "
    f"{scale_log2!r}f, {'true' if a['causal'] else 'false'}, tg_lout, tg_lq, tg_lk, tg_lv, {x.get('lse', '(float*)0')}, {_bias(dtype, x)}, {inv_scale!r}f, {a.get('group', 1)}, {cap});"]


def attention_grad_call(dtype: str, op, args: dict, blocks: int) -> list[str]:
  """The lines that call the backward instance for uop.attention_grad `op` (args: its operands' expressions by
  name): its layouts, then the call."""
  a, x = op.attrs, args
  scale_log2, inv_scale, cap = _scaling(a)
  name, flags = attention_name(dtype, a['dim'], KEY_ROWS, a.get('warpgroup', 0)), f"{scale_log2!r}f, {float(a['scale'])!r}f, {'true' if a['causal'] else 'false'}"
  ins = ', '.join(x[n] for n in ('q', 'k', 'v', 'g', 'lse', 'd', 'smem', 'head', 'block', 'lane'))
  tail = f"{a['heads']}, {a['rows']}, {a['keys']}"
  if a['part'] == 0: call = f"tg_attention_dq_{name}({x['out']}, {ins}, {tail}, {blocks}, {flags}, tg_lq, tg_lk, tg_lv, tg_lg, {_bias(dtype, x)}, {inv_scale!r}f, {a.get('group', 1)}, {cap});"
  else: call = f"tg_attention_dkdv_{name}({x['out']}, {x['out2']}, {ins}, {tail}, {flags}, tg_lq, tg_lk, tg_lv, tg_lg, {_bias(dtype, x)}, {inv_scale!r}f, {a.get('group', 1)}, {cap});"
  return _layouts(op, ('q', 'k', 'v', 'g')) + [call]


__all__ = ['attention_functions', 'attention_call', 'attention_grad_call', 'attention_name', 'grad_blocks', 'BLOCKS', 'KEY_ROWS', 'GRAD_DIMS']
