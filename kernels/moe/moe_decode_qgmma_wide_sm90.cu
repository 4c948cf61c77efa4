// kWeightsAPdlQgmmaWide (contract: moe_decode.h; weights in Mxfp4DecodeBits::kFp8): the E4M3
// warpgroup-MMA step of kWeightsAPdlQgmma on 64-row units, so that every warp of a warpgroup works
// on the same chunk and keeps all of its accumulator (no chunk pairs, no selects, no dropped half).
//
// Unit: 8 decode-layout tiles at one expert. Gated: gate tiles n..n+3 (warps w' = 0, 1 of each
// warpgroup: tiles 2w', 2w' + 1) and up tiles n..n+3 (w' = 2, 3), 32 activation rows; down: tiles
// n..n+7 (w': 2w', 2w' + 1), 64 output rows. Warpgroup G takes chunks G, G + 4, G + 8, ... (K3: 7
// rounds at gate/up, 6 at down, equal for every warpgroup); per round and 32-input group one
// wgmma.m64n8k32 (A = the 4 warps' 16 rows each, from registers; B = the pass's 4 tokens as hi / lo
// columns, moe_decode_qgmma.cuh's staging), a fresh accumulator a group, its E8M0 scale by fp32
// multiply-add (two commit groups a round: groups 0, 1 are summed while 2, 3 run). Each (unit, block
// of up to 4 rows; of 8 from kMoeDecodeQgmmaMultiMinCapacity pairs, two passes sharing the round's
// dequantised A registers) is an item; the CTAs split items evenly (not units: an expert with more
// rows than a block repeats its units). A warp keeps kQRing rounds of words in registers ahead of
// the one it computes, across item boundaries, so the loads of the next item are in flight while
// this one ends (its reduction through shared memory, one barrier an item). The walk over items is
// stepped (no division a unit), the load addresses one wide multiply-add each. Down is a
// programmatic dependent launch: it loads its first rounds, then waits for gate/up.
#include <cstdint>
#include <type_traits>
#if PDS_MOE_DECODE_TRACE
#include <cstdio>
#endif

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_qgmma.cuh"
#include "moe/moe_decode_wa.cuh"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

using moe_prefill_detail::wgmma_commit;
using moe_prefill_detail::wgmma_fence;
using moe_prefill_detail::wgmma_wait;

constexpr int kQRing = 4;       // rounds of words a warp holds ahead of its compute (5: no faster)
constexpr int kQMultiRows = 8;  // rows an item from kMoeDecodeQgmmaMultiMinCapacity pairs (two passes)

// Start-up phases, stamped beside the items with negative codes: the list read, the item scan, the
// ring's first loads issued (down: and its dependency wait), the first staging begun, the first
// round's MMAs done (its words and tokens landed); inside the first staging (q_stage_rows): -6 its
// maxima loaded, -7 their barrier passed, -8 the rows converted.
enum TracePhase : int { kTraceListed = -1, kTraceScanned = -2, kTraceIssued = -3, kTraceStaging = -4, kTraceFirstMma = -5 };
#if PDS_MOE_DECODE_TRACE
// Per-item timelines (moe_decode_bench_trace, -DPDSERVE_MOE_TRACE=ON; tools/kernels/moe_trace_timeline.py):
// thread 0 stamps %globaltimer at the CTA's start, at the start-up phases (TracePhase, negative codes)
// and at each item's first round (after any staging), then prints "QT gated cta start_ns end_10ns
// at_10ns:code ..." (an item's code: slot * 1000 + unit).
constexpr int kTraceItems = 48;
__device__ __forceinline__ uint64_t trace_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Decimal digits of v at buf + o; the new end.
__device__ __forceinline__ int trace_digits(char* buf, int o, uint64_t v) {
  char tmp[20];
  int m = 0;
  do tmp[m++] = char('0' + v % 10), v /= 10;
  while (v);
  while (m) buf[o++] = tmp[--m];
  return o;
}
__device__ void trace_print(bool gated, const uint64_t* at, const int* what, int n) {
  const uint64_t t0 = at[kTraceItems], t1 = trace_ns();
  char buf[32 * kTraceItems + 1];
  int o = 0;
  for (int q = 0; q < n && q < kTraceItems; ++q) {
    o = trace_digits(buf, o, (at[q] - t0) / 10);
    buf[o++] = ':';
    if (what[q] < 0) buf[o++] = '-';  // a start-up phase (TracePhase)
    o = trace_digits(buf, o, uint64_t(what[q] < 0 ? -what[q] : what[q]));
    buf[o++] = ' ';
  }
  buf[o] = 0;
  printf("QT %d %d %llu %llu %s\n", int(gated), int(blockIdx.x), (unsigned long long)t0, (unsigned long long)((t1 - t0) / 10), buf);
}
#define PDS_QT_STAMP(code)                                                                                             \
  do {                                                                                                                 \
    if (threadIdx.x == 0 && n_trace < kTraceItems) s_trace_at[n_trace] = trace_ns(), s_trace_what[n_trace] = (code); \
    ++n_trace;                                                                                                         \
  } while (0)
#else
#define PDS_QT_STAMP(code) \
  do {                     \
  } while (0)
#endif

// d = A B (m64n8k32, E4M3, the accumulator not read).
__device__ __forceinline__ void qgmma8(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 0, 1, 1;\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
               : "memory");
}

// A completed accumulator into the warp's sums: (row g, token t) and (row g + 8, token t), hi + lo.
__device__ __forceinline__ void q8_take(float (&d)[4], float f0, float f1, float (&acc)[2]) {
  float v0 = d[0], v1 = d[1], v2 = d[2], v3 = d[3];
  asm volatile("" : "+f"(v0), "+f"(v1), "+f"(v2), "+f"(v3)::"memory");
  acc[0] = fmaf(v0 + v1, f0, acc[0]);
  acc[1] = fmaf(v2 + v3, f1, acc[1]);
}

// One round's words of a warp: rows g and g + 8 of its two tiles at its chunk.
struct QSlot {
  uint4 q[2];
  uint32_t s[2];
};

// The CTA's items in order, one round at a time (a load-side and a compute-side copy): an item is a
// block of up to kBlock rows of one expert on one unit of its weights, `rounds` rounds; an expert's
// items go unit by unit, each unit's blocks in turn (the same weights again, from L2). The item is
// (slot, l, blk): expert list[slot], its l-th unit, block blk; stepped, never divided.
struct QWalk {
  uint32_t slot, l, left;  // left: items after this one
  uint32_t rd, blk, nblk;
  uint32_t tile;  // the warp's first tile at round rd's chunk
  uint32_t n;     // the unit's first output tile
  uint32_t live;  // a word, not a bool: ptxas packs bools into bytes of one register (PRMT a test)
};

struct QSpace {
  const int* list;
  const int* begin;  // the listed experts' first rows, and the last one's end (count + 1, shared memory)
  const int* first;  // the listed experts' first items, and the total (count + 1, shared memory)
  uint32_t count, tiles, chunks, per_expert, rounds;
};

// Blocks of kBlock rows of listed expert `slot` (each unit of its weights runs once a block).
template <int kBlock>
__device__ __forceinline__ uint32_t q_blocks(const QSpace& sp, uint32_t slot) {
  return (uint32_t(sp.begin[slot + 1] - sp.begin[slot]) + kBlock - 1) / kBlock;
}

template <bool kGated, int kBlock>
__device__ __forceinline__ void q_open(const QSpace& sp, QWalk& c, uint32_t w, uint32_t G) {
  const uint32_t e = uint32_t(sp.list[c.slot]);
  c.nblk = q_blocks<kBlock>(sp, c.slot);
  c.n = c.l * (kGated ? 4u : 8u);
  c.tile = (e * sp.tiles + c.n + 2u * (kGated ? (w & 1u) : w)) * sp.chunks + G;
  c.rd = 0, c.blk = 0;
}

// Items [i, end) of the CTA: the slot holding item i by binary search over the first items.
template <bool kGated, int kBlock>
__device__ __forceinline__ void q_start(const QSpace& sp, QWalk& c, uint32_t i, uint32_t end, uint32_t w, uint32_t G) {
  c.live = i < end;
  if (!c.live) return;
  uint32_t lo = 0, hi = sp.count - 1;  // first[lo] <= i < first[hi + 1]
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (uint32_t(sp.first[mid]) <= i) lo = mid;
    else hi = mid - 1;
  }
  const uint32_t rel = i - uint32_t(sp.first[lo]), nblk = q_blocks<kBlock>(sp, lo);
  c.slot = lo, c.l = rel / nblk, c.left = end - i - 1;
  q_open<kGated, kBlock>(sp, c, w, G);
  c.blk = rel - c.l * nblk;
}

template <bool kGated, int kBlock>
__device__ __forceinline__ void q_step(const QSpace& sp, QWalk& c, uint32_t w, uint32_t G) {
  if (++c.rd < sp.rounds) {
    c.tile += 4u;
    return;
  }
  c.rd = 0;
  if (c.left == 0) {
    c.live = false;
    return;
  }
  --c.left;
  if (++c.blk < c.nblk) {  // the unit again for the next block of rows
    c.tile -= 4u * (sp.rounds - 1u);
    return;
  }
  if (++c.l == sp.per_expert) c.l = 0, ++c.slot;
  q_open<kGated, kBlock>(sp, c, w, G);
}

// The warp's two tiles' words at the walk's round (kRagged: chunks % 4 != 0, a chunk past the
// matrix gives zero codes, so a zero A; else every round of a live walk is inside the matrix).
template <bool kRagged>
__device__ __forceinline__ void q8_load(const uint4* wq, const uint32_t* ws, uint32_t chunks, const QWalk& c, uint32_t G, QSlot& r) {
  if (!c.live) return;  // never computed
  if (kRagged && G + 4u * c.rd >= chunks) {
    r.q[0] = r.q[1] = make_uint4(0u, 0u, 0u, 0u), r.s[0] = r.s[1] = 0u;
    return;
  }
  const uint32_t t1 = c.tile + chunks;
  r.q[0] = load_stream(wq + size_t(c.tile) * 32u);  // one wide multiply-add each
  r.s[0] = __ldg(ws + size_t(c.tile) * 8u);
  r.q[1] = load_stream(wq + size_t(t1) * 32u);
  r.s[1] = __ldg(ws + size_t(t1) * 8u);
}

// kBlockRows = kQMultiRows: items of up to 8 rows whose 2 passes share each round's A registers
// (several rows an expert); kQTokens: items of one pass, straight-line (the common decode case).
template <bool kGated, int kBlockRows, bool kRagged>
__global__ void __launch_bounds__(Q::kThreads, 1) decode_gemm_q8(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                                  const float* __restrict__ x, float* __restrict__ y, MoeAct act) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_list[kMaxExperts], s_begin[kMaxExperts + 1], s_first[kMaxExperts + 1];
  __shared__ int s_count;
  __shared__ float s_inv[kQStage], s_wmax[Q::kWarps];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), xs_addr = (raw + kQAtom - 1) & ~(kQAtom - 1);
  uint8_t* xs = smem_raw + (xs_addr - raw);
  // After the 4 passes' atoms: the reduction's two buffers [warp][tile 2w' + j][token][row].
  constexpr int kBlock = kBlockRows, kPassesMax = kBlock / kQTokens;
  constexpr bool kMulti = kBlock > kQTokens;
  using Red = float[Q::kWarps][2][kBlock][8];
  // One-pass items: a static 8 KB pair (measured faster than the dynamic placement); kMulti's 16 KB
  // pair follows the atoms in dynamic shared memory.
  __shared__ __align__(16) float s_red_small[kMulti ? 1 : 2][Q::kWarps][2][kQTokens][8];
  Red* s_red = kMulti ? reinterpret_cast<Red*>(xs + (kQStage / kQTokens) * size_t(a.cols / 128) * kQAtom) : reinterpret_cast<Red*>(s_red_small);
#if PDS_MOE_DECODE_TRACE
  __shared__ uint64_t s_trace_at[kTraceItems + 1];
  __shared__ int s_trace_what[kTraceItems];
  int n_trace = 0;
  if (threadIdx.x == 0) s_trace_at[kTraceItems] = trace_ns();
#endif
  const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, t = lane & 3u;
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x >> 5), 0);
  const uint32_t w = uint32_t(warp) & 3u, G = uint32_t(warp) >> 2;
  // Gate/up is a programmatic dependent launch after the permute (its CTAs become resident while the
  // permute runs): wait for it before the first read of offsets, and only then let down launch, whose
  // item list reads offsets before its own wait (pdl_bulk.cuh's rule: trigger after wait).
  if constexpr (kGated) {
    pdl_bulk::pdl_wait();
    pdl_bulk::pdl_trigger();
  }
  // The listed experts' first rows with the list (untouched experts have no rows: one's end is the
  // next one's begin): one dependent read of offsets and one barrier, not two of each.
  list_touched_experts(offsets, experts, s_list, &s_count, s_begin);
  __syncthreads();
  PDS_QT_STAMP(kTraceListed);
  const uint32_t count = uint32_t(s_count);
  const uint32_t tiles = static_cast<uint32_t>(a.rows / 8), chunks = static_cast<uint32_t>(a.cols / 128);
  const uint32_t per_expert = kGated ? tiles / 4 : tiles / 8;
  const QSpace sp{s_list, s_begin, s_first, count, tiles, chunks, per_expert, (chunks + 3) / 4};  // s_first: filled next
  // The CTAs split items, not units: an expert with more rows than a block has its units' work
  // once a block (at B = 128 unit shares left some CTAs twice the work of others).
  if (warp == 0) {
    uint32_t base = 0;
    for (uint32_t c0 = 0; c0 < count; c0 += 32) {
      const uint32_t i = c0 + lane;
      uint32_t v = i < count ? per_expert * q_blocks<kBlock>(sp, i) : 0u;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= uint32_t(o)) v += n;
      }
      if (i < count) s_first[i + 1] = int(base + v);
      base += __shfl_sync(0xffffffffu, v, 31);
    }
    if (lane == 0) s_first[0] = 0;
  }
  __syncthreads();
  PDS_QT_STAMP(kTraceScanned);
  const uint32_t all = uint32_t(s_first[count]), per = (all + gridDim.x - 1) / gridDim.x;
  const uint32_t i0 = blockIdx.x * per, i1 = min(all, i0 + per);
  // The warp's matrix (gated: warps w' = 2, 3 of each warpgroup read up), chosen once.
  const bool second = kGated && w >= 2u;
  const uint4* wq = reinterpret_cast<const uint4*>(second ? b.packed : a.packed) + lane;
  const uint32_t* ws = reinterpret_cast<const uint32_t*>(second ? b.scales : a.scales) + g;
  // Opaque from here: each load's address is then one wide multiply-add of the tile index (ptxas
  // otherwise folds the lane back into the index and needs 64-bit adds).
  asm volatile("" : "+l"(wq), "+l"(ws));
  const uint32_t xs_desc = (xs_addr >> 4) | (1u << 16), cols = chunks * 128u;
  QWalk ld, cp;
  q_start<kGated, kBlock>(sp, ld, i0, i1, w, G);
  cp = ld;
  QSlot ring[kQRing];
#pragma unroll
  for (int j = 0; j < kQRing; ++j) {
    q8_load<kRagged>(wq, ws, chunks, ld, G, ring[j]);
    if (ld.live) q_step<kGated, kBlock>(sp, ld, w, G);
  }
  if constexpr (!kGated) pdl_bulk::pdl_wait();  // the first rounds' loads are out: now the activations may be read
  PDS_QT_STAMP(kTraceIssued);
#if PDS_MOE_DECODE_TRACE
  bool trace_first = true;  // the first round's phases still to stamp
  auto stamp_first = [&](int code) {
    if (trace_first) PDS_QT_STAMP(code);
  };
#else
  const QNoStamp stamp_first{};
#endif
  int staged_slot = -1, staged_r0 = 0, buf = 0;
  int r0 = 0, nrows = 0;  // the item's rows (set at its first round)
  uint32_t dlo = 0;  // the round's B descriptor, low word (group 0)
  float acc[kPassesMax][2];
#pragma unroll
  for (int p = 0; p < kPassesMax; ++p) acc[p][0] = acc[p][1] = 0.0f;
  while (cp.live) {
#pragma unroll
    for (int j = 0; j < kQRing; ++j) {
      if (!cp.live) break;
      if (cp.rd == 0) {
        r0 = sp.begin[cp.slot] + int(cp.blk) * kBlock, nrows = min(kBlock, sp.begin[cp.slot + 1] - r0);
        if (staged_slot != int(cp.slot) || r0 < staged_r0 || r0 >= staged_r0 + kQStage) {  // uniform: up to 16 rows staged at once
          stamp_first(kTraceStaging);
          q_stage_rows(x, r0, min(kQStage, sp.begin[cp.slot + 1] - r0), cols, chunks, xs, s_inv, s_wmax, stamp_first);
          staged_slot = int(cp.slot), staged_r0 = r0;
          __syncthreads();
        }
        PDS_QT_STAMP(int(cp.slot) * 1000 + int(cp.l));
        // The item's first row in the staged window is a multiple of 4: its pass's atoms.
        dlo = xs_desc + ((uint32_t(r0 - staged_r0) / kQTokens) * chunks + G) * (kQAtom >> 4);
      }
      const int np = kMulti ? (nrows + kQTokens - 1) / kQTokens : 1;
      // This round: chunk G + 4 rd, 4 groups, each a fresh m64n8k32 into d[i].
      const QSlot& r = ring[j];
      // kRagged: a chunk past the matrix has zero A; B reads the pass's last chunk (finite codes).
      const uint32_t dround = kRagged && G + 4u * cp.rd >= chunks ? dlo - (G + 4u * cp.rd - (chunks - 1u)) * (kQAtom >> 4) : dlo;
      constexpr uint32_t dhi = 1u << 30;
      // All 4 groups' A first; then per pass one fence, 4 wgmma in one commit group, one wait, the sums
      // (the A registers serve every pass).
      uint32_t fr[4][4];
      float d[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t w0 = word_of(r.q[0], i), w1 = word_of(r.q[1], i);
        fr[i][0] = fp8_lo(w0);
        fr[i][1] = fp8_lo(w1);
        fr[i][2] = fp8_hi(w0);
        fr[i][3] = fp8_hi(w1);
      }
      float f0[4], f1[4];
      q_multipliers(r.s[0], f0);
      q_multipliers(r.s[1], f1);
      if (!kMulti || np == 1) {  // one pass, two commit groups: groups 0, 1 summed while 2, 3 run
        wgmma_fence();
        qgmma8(d[0], fr[0], q_desc(dround, dhi));
        qgmma8(d[1], fr[1], q_desc(dround + 2u, dhi));
        wgmma_commit();
        qgmma8(d[2], fr[2], q_desc(dround + 4u, dhi));
        qgmma8(d[3], fr[3], q_desc(dround + 6u, dhi));
        wgmma_commit();
        wgmma_wait<1>();
        q8_take(d[0], f0[0], f1[0], acc[0]);
        q8_take(d[1], f0[1], f1[1], acc[0]);
        wgmma_wait<0>();
        stamp_first(kTraceFirstMma);
        q8_take(d[2], f0[2], f1[2], acc[0]);
        q8_take(d[3], f0[3], f1[3], acc[0]);
      } else {
#pragma unroll
        for (int p = 0; p < kPassesMax; ++p) {
          if (p >= np) break;  // uniform
          wgmma_fence();
#pragma unroll
          for (int i = 0; i < 4; ++i) qgmma8(d[i], fr[i], q_desc(dround + uint32_t(p) * chunks * (kQAtom >> 4) + 2u * i, dhi));
          wgmma_commit();
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < 4; ++i) q8_take(d[i], f0[i], f1[i], acc[p]);
        }
      }
      dlo += 4u * (kQAtom >> 4);
#if PDS_MOE_DECODE_TRACE
      trace_first = false;
#endif
      // The slot is free: the round kQRing on (refilled before the MMAs instead, the live registers
      // pass 128 and spill: 0.90x).
      q8_load<kRagged>(wq, ws, chunks, ld, G, ring[j]);
      if (ld.live) q_step<kGated, kBlock>(sp, ld, w, G);
      if (cp.rd + 1 == sp.rounds) {  // the item's last round: reduce over the 4 warpgroups
        Red& red = s_red[buf];
        buf ^= 1;
#pragma unroll
        for (int p = 0; p < kPassesMax; ++p) {
          if (p >= np) break;
          red[warp][0][kQTokens * p + t][g] = acc[p][0];  // row g of tile 2w', token 4p + t
          red[warp][1][kQTokens * p + t][g] = acc[p][1];  // row g of tile 2w' + 1
          acc[p][0] = acc[p][1] = 0.0f;
        }
        __syncthreads();
        constexpr int kOut = (kGated ? 4 : 8) * kBlock * 8;  // (output tile, token, row) of the item
        const int first = r0 - staged_r0;
        for (int idx = threadIdx.x; idx < kOut; idx += Q::kThreads) {
          const int k = idx / (kBlock * 8), tok = (idx / 8) % kBlock, rr = idx % 8;
          if (tok >= nrows) continue;
          float va = 0.0f, vb = 0.0f;
#pragma unroll
          for (int GG = 0; GG < 4; ++GG) {
            va += red[4 * GG + (k >> 1)][k & 1][tok][rr];
            if constexpr (kGated) vb += red[4 * GG + 2 + (k >> 1)][k & 1][tok][rr];
          }
          const float inv = s_inv[first + tok];
          y[int64_t(r0 + tok) * a.rows + int64_t(cp.n + k) * 8 + rr] = kGated ? act(va * inv, vb * inv) : va * inv;
        }
      }
      q_step<kGated, kBlock>(sp, cp, w, G);
    }
  }
#if PDS_MOE_DECODE_TRACE
  if (threadIdx.x == 0 && n_trace > 0) trace_print(kGated, s_trace_at, s_trace_what, n_trace);
#endif
}

}  // namespace

Status launch_decode_qgmma_wide(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const float* x,
                                float* act, float* out, const MoeAct& fn, cudaStream_t stream) {
  if (w.w1.rows % 32 != 0 || w.w2.rows % 64 != 0)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmmaWide takes inter % 32 == 0 and dim % 64 == 0");
  if (w.w1.wide_scales || w.w3.wide_scales || w.w2.wide_scales)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmmaWide takes scale bytes <= 128 only (no wide_scales)");
  auto run = [&](auto gate, auto down, int block) -> Status {
    constexpr size_t kPasses = kQStage / kQTokens;
    const size_t red = block > kQTokens ? 2 * sizeof(float) * Q::kWarps * 2 * size_t(block) * 8 : 0;  // kMulti's, dynamic
    const size_t smem_g = kPasses * size_t(w.w1.cols / 128) * kQAtom + kQAtom + red;  // atoms, their alignment, reduction
    const size_t smem_d = kPasses * size_t(w.w2.cols / 128) * kQAtom + kQAtom + red;
    PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, smem_g, experts * (w.w1.rows / 32), Q::kThreads));
    PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, smem_d, experts * (w.w2.rows / 64), Q::kThreads));
    PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, gate, dim3(grid_g), dim3(Q::kThreads), smem_g, stream, w.w1, w.w3, offsets,
                                                         static_cast<int>(experts), x, act, fn),
                                    "moe decode gate/up launch (qgmma wide)"));
    PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up (qgmma wide)"));
    PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(Q::kThreads), smem_d, stream, w.w2, w.w2, offsets,
                                                         static_cast<int>(experts), static_cast<const float*>(act), out, fn),
                                    "moe decode down launch (qgmma wide)"));
    return last_launch_status("moe decode down (qgmma wide)");
  };
  // kRagged where a matrix's chunk count is not a multiple of 4 (K3: 28 and 24 chunks, never).
  const bool ragged = (w.w1.cols / 128) % 4 != 0 || (w.w2.cols / 128) % 4 != 0;
  // Items of 8 rows (two passes sharing the A registers) from kMoeDecodeQgmmaMultiMinCapacity pairs;
  // measured: 1.10x kAuto at B = 256 against 0.97x for 16-row items and 0.91x for one-pass ones.
  const bool multi = capacity >= kMoeDecodeQgmmaMultiMinCapacity;
  if (ragged) {
    if (multi) return run(decode_gemm_q8<true, kQMultiRows, true>, decode_gemm_q8<false, kQMultiRows, true>, kQMultiRows);
    return run(decode_gemm_q8<true, kQTokens, true>, decode_gemm_q8<false, kQTokens, true>, kQTokens);
  }
  if (multi) return run(decode_gemm_q8<true, kQMultiRows, false>, decode_gemm_q8<false, kQMultiRows, false>, kQMultiRows);
  return run(decode_gemm_q8<true, kQTokens, false>, decode_gemm_q8<false, kQTokens, false>, kQTokens);
}

}  // namespace pdserve::cuda::moe_decode_detail
