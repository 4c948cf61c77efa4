// Shared device helpers and constants of the split-KV MLA decode's translation units
// (mla_decode_sm90.cu, mla_decode_warp_sm90.cu, mla_decode_merge_sm90.cu) and the launchers
// they call across files. Internal: mla_decode.h stays the contract.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/per_device.h"
#include "common/pdl_bulk.cuh"
#include "mla/mla_decode.h"

namespace pdserve::cuda::mla_decode_detail {

using namespace pdl_bulk;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kMlaTileTokens;         // tokens per shared-memory stage (2 per warp when scoring)
constexpr int kStages = 3;                    // tiles in shared memory: two in flight while one is used
constexpr int kMaxEntry = 576;                // latent + key floats per token, at most
constexpr int kSlots = kMaxEntry / 64;        // float2 per lane covering one token's entry
constexpr int kMaxHeadGroup = 4;              // heads scored together (their q in registers)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
// Bench-only timeline (MlaDecodeWork::timeline, layout in mla_decode.h): event e of the CTA's
// record, by the calling thread.
__device__ __forceinline__ void timeline_stamp(uint64_t* rec, int e) {
  uint64_t gt;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(gt)::"memory");
  rec[2 * e] = gt;
  rec[2 * e + 1] = static_cast<uint64_t>(clock64());
}
__device__ __forceinline__ void timeline_open(uint64_t* rec) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
  rec[10] = sm;
  rec[11] = 1;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }
// All but the newest N commit groups have landed.
template <int N>
__device__ __forceinline__ void cp_async_wait_all_but() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// All-reduce of N values over the warp in 2 log2(P) - ... shuffles instead of 5 N (P = N
// rounded up to a power of two <= 8): each butterfly step first halves the values a lane
// keeps (lanes of the upper half keep the upper values and send the lower ones), so after
// log2(P) steps lane l holds one partial of value l / (32 / P), finished by the remaining
// plain steps and broadcast back (N shuffles). Every lane ends with the same bits of each sum.
template <int N>
__device__ __forceinline__ void warp_sum_many(float (&v)[N]) {
  static_assert(N >= 1 && N <= 8, "up to 8 values");
  constexpr int P = N == 1 ? 1 : N == 2 ? 2 : N <= 4 ? 4 : 8;
  const int lane = threadIdx.x & 31;
  float x[P];
#pragma unroll
  for (int j = 0; j < P; ++j) x[j] = j < N ? v[j] : 0.0f;
  int offset = 16;
#pragma unroll
  for (int cnt = P; cnt > 1; cnt /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int j = 0; j < cnt / 2; ++j) {
      const float keep = upper ? x[j + cnt / 2] : x[j], send = upper ? x[j] : x[j + cnt / 2];
      x[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
#pragma unroll
  for (; offset > 0; offset /= 2) x[0] += __shfl_xor_sync(0xffffffffu, x[0], offset);
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = __shfl_sync(0xffffffffu, x[0], j * (32 / P));
}

// Tile [t0, t0 + kTile) of a row into shared memory (one commit group). Tokens past `end` or
// on a negative page are zero-filled (src size 0) and masked by the caller. Items start on a
// tile boundary (mla_decode_granule), so with pages a multiple of the tile a tile is one run
// of contiguous memory in one page: no per-chunk page lookup.
template <int TILE = kTile>
__device__ __forceinline__ void load_tile_async(const MlaDecodeArgs& a, const int32_t* table, int end, int t0, float* dst) {
  const int ps = static_cast<int>(a.page_size), entry = static_cast<int>(a.latent_dim + a.rope_dim);
  const int chunks_per_token = entry / 4, tile_chunks = TILE * chunks_per_token;
  if (ps % TILE == 0) {
    const int page = table[t0 / ps];
    const int valid_chunks = page < 0 ? 0 : min(TILE, end - t0) * chunks_per_token;
    const float* base = a.cache + (static_cast<int64_t>(page < 0 ? 0 : page) * ps + t0 % ps) * entry;
    for (int c = threadIdx.x; c < tile_chunks; c += kThreads) {
      const bool ok = c < valid_chunks;
      cp_async16(dst + c * 4, ok ? base + c * 4 : a.cache, ok ? 16 : 0);
    }
  } else {
    for (int c = threadIdx.x; c < tile_chunks; c += kThreads) {
      const int t = c / chunks_per_token, col = c - t * chunks_per_token, tok = t0 + t;
      const float* src = a.cache;
      int bytes = 0;
      if (tok < end) {
        const int page = table[tok / ps];
        if (page >= 0) {
          src = a.cache + (static_cast<int64_t>(page) * ps + tok % ps) * entry + col * 4;
          bytes = 16;
        }
      }
      cp_async16(dst + t * entry + col * 4, src, bytes);
    }
  }
  cp_async_commit();
}

// The fused merge (MlaDecodeMerge::kFused). After every thread of the CTA wrote its share
// of a partial: one arrival on `counter` (thread 0, an acquire-release atomic after the
// block barrier: the CTA's partial is released with it, and the last arrival acquires every
// other CTA's); true in the CTA that arrives last of `expected`, which resets the counter (no
// one else touches it in this launch) for the next launch. Partials are then read from L2.
__device__ __forceinline__ bool arrive_last(int32_t* counter, int expected) {
  __shared__ int s_last;
  __syncthreads();  // the CTA's partial is written (and nobody still reads s_last)
  if (threadIdx.x == 0) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
    const bool last = old == expected - 1;
    if (last) atomicExch(counter, 0);
    s_last = last;
  }
  __syncthreads();
  return s_last;
}

// out = sum_i w_i part[first + i stride] with w_i = 2^(lse_i - m) / sum_j 2^(lse_j - m) per
// head; out_lse (if given) = m + log2 sum. n <= kMlaMaxMergeFanIn; smem: smem_floats of
// shared memory (at least n x H). out may be the slot `first` itself (the group step writes
// in place): every input is read before any output is written. Where all n partials fit in
// shared memory (n <= 17 at 3 heads x 512), they are fetched at once with 16-byte cp.async
// (one round trip to L2 instead of one per few items); else read item by item.
inline __device__ void merge_partials(const float* part_o, const float* part_lse, int first, int n, int stride, int H, int lat,
                               float* out, float* out_lse, float* smem, int smem_floats) {
  const int per = H * lat, weights = (n * H + 3) & ~3;
  float* s_w = smem;
  float* s_vals = smem + weights;  // [n][H][lat] when staged
  const bool staged = per % 4 == 0 && weights + n * per <= smem_floats;
  if (staged) {
    const int chunks = per / 4;
    for (int idx = threadIdx.x; idx < n * chunks; idx += kThreads) {
      const int i = idx / chunks, c = idx - i * chunks;
      cp_async16(s_vals + i * per + 4 * c, part_o + static_cast<int64_t>(first + i * stride) * per + 4 * c, 16);
    }
    cp_async_commit();
  }
  for (int idx = threadIdx.x; idx < n * H; idx += kThreads)
    s_w[idx] = __ldcg(part_lse + static_cast<int64_t>(first + (idx / H) * stride) * H + idx % H);
  if (staged) asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int h = warp; h < H; h += kWarps) {  // a lane touches only its own items' weights
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, s_w[i * H + h]);
    m = warp_max(m);
    float sum = 0.0f;
    if (m != -INFINITY)
      for (int i = lane; i < n; i += 32) sum += exp2f(s_w[i * H + h] - m);
    sum = warp_sum(sum);
    const float inv = m == -INFINITY ? 0.0f : 1.0f / sum;
    for (int i = lane; i < n; i += 32) s_w[i * H + h] = m == -INFINITY ? 0.0f : exp2f(s_w[i * H + h] - m) * inv;
    if (out_lse && lane == 0) out_lse[h] = m == -INFINITY ? -INFINITY : m + log2f(sum);
  }
  __syncthreads();
  const int total = per / 2;  // float2 (lat is even)
  if (staged) {
    for (int c = threadIdx.x; c < total; c += kThreads) {
      const int h = (2 * c) / lat;
      float2 acc = make_float2(0.0f, 0.0f);
      for (int i = 0; i < n; ++i) {
        const float2 v = reinterpret_cast<const float2*>(s_vals + i * per)[c];
        const float w = s_w[i * H + h];
        acc = make_float2(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y));
      }
      reinterpret_cast<float2*>(out)[c] = acc;
    }
    return;
  }
  // Four float2 a thread at once, items unrolled: many independent L2 loads in flight.
  for (int c0 = threadIdx.x; c0 < total; c0 += 4 * kThreads) {
    float2 acc[4];
    int head[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc[k] = make_float2(0.0f, 0.0f);
      head[k] = min((2 * (c0 + k * kThreads)) / lat, H - 1);
    }
#pragma unroll 4
    for (int i = 0; i < n; ++i) {
      const float2* src = reinterpret_cast<const float2*>(part_o + static_cast<int64_t>(first + i * stride) * per);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = c0 + k * kThreads;
        if (c < total) {
          const float2 v = __ldcg(src + c);
          const float w = s_w[i * H + head[k]];
          acc[k] = make_float2(fmaf(w, v.x, acc[k].x), fmaf(w, v.y, acc[k].y));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c0 + k * kThreads < total) reinterpret_cast<float2*>(out)[c0 + k * kThreads] = acc[k];
  }
}

// The fused merge after a split row's item wrote its partial: the last CTA of the item's group
// merges the group (into the output when the row is one group, else in place into the
// group's first slot); the last group of the row merges the groups into the output.
inline __device__ void fused_merge_tail(const MlaDecodeArgs& a, const int32_t* plan, int row, int item, float* part_o, float* part_lse,
                                 int32_t* counters, float* smem) {
  const int capacity = plan[2];
  const int4 info = reinterpret_cast<const int4*>(plan + 4 + 4 * capacity)[row];  // first, n, group, groups
  const int first = info.x, n = info.y, group = info.z, groups = info.w;
  const int g = (item - first) / group, gfirst = first + g * group, gn = min(group, n - g * group);
  const int H = static_cast<int>(a.heads), lat = static_cast<int>(a.latent_dim);
  const int smem_floats = max(kStages * kTile * (lat + static_cast<int>(a.rope_dim)), static_cast<int>(kMlaMaxMergeFanIn) * H);  // run_shared_bytes
  float* out_row = a.o_lat + static_cast<int64_t>(row) * H * lat;
  // The row's tile queue (dynamic tiles): every CTA of the row is past its loop once the
  // row's last arrival is known, so that CTA resets it for the next launch.
  int32_t* queue = counters + capacity + plan[1] + row;
  if (!arrive_last(counters + gfirst, gn)) return;
  if (groups == 1) {
    if (threadIdx.x == 0) atomicExch(queue, 0);
    merge_partials(part_o, part_lse, gfirst, gn, 1, H, lat, out_row, nullptr, smem, smem_floats);
    return;
  }
  merge_partials(part_o, part_lse, gfirst, gn, 1, H, lat, part_o + static_cast<int64_t>(gfirst) * H * lat,
                 part_lse + static_cast<int64_t>(gfirst) * H, smem, smem_floats);
  if (!arrive_last(counters + capacity + row, groups)) return;
  if (threadIdx.x == 0) atomicExch(queue, 0);
  merge_partials(part_o, part_lse, first, groups, group, H, lat, out_row, nullptr, smem, smem_floats);
}

// The early rings (MlaDecodeRing::kLeanBlockEarly / kLeanEarly; the contract: MlaDecodeWork::
// new_tokens). Thread 0, BEFORE the pdl wait: for each of the item's first STAGES tiles (tile g
// into stage g), its page-table entry, its valid tokens (published in s_valid), the stage's
// barrier armed with all of them, and the bulk copy of those before the row's stable bound
// (row end - new_tokens). The row's end: this item's where it is the row's last (a row's items are
// consecutive in the plan); else `next` (item + 1's plan entry, loaded with this item's: always in
// the image, the row table follows the items) ends at or before it, which settles most items
// without another round trip; only where that bound is too short (new_tokens longer than the
// next item) the row's last item's end is read. early_issue_rest, after the wait: the copies of the
// rest, on the same barriers.
// T: the cache's element (float, or uint16_t for a bf16 cache: MlaDecodeArgs::cache_bf16); `cache`
// its base, `tiles` the stages in that element.
// The early rings' stable bound: tokens of the row before it may be read before the pdl wait
// (the row's end - new_tokens; MlaDecodeWork::new_tokens). The row's end: this item's where it is
// the row's last (a row's items are consecutive in the plan); else `next` (item + 1's plan entry,
// loaded with this item's) ends at or before it, which settles most items without another round
// trip; only where that bound is too short the row's last item's end is read.
__device__ __forceinline__ int early_stable_end(const int32_t* plan, int item, int num_items, int4 next, int row, int end, int new_tokens) {
  int row_end = end;  // the row's last item (a row of one item included)
  if (item + 1 < num_items && next.x == row) {
    row_end = next.z;                 // a later item of the row ends at or before the row's end
    if (row_end - new_tokens < end) {         // not enough to settle it: the row's last item's end
      const int2 info = *reinterpret_cast<const int2*>(plan + 4 + 4 * plan[2] + 4 * row);  // first item, items
      row_end = plan[4 + 4 * (info.x + info.y - 1) + 2];
    }
  }
  return row_end - new_tokens;
}
template <int STAGES, typename T = float>
struct EarlyPrologue {
  const T* src[STAGES];            // the tile's first entry in the cache
  int valid[STAGES], pre[STAGES];  // tokens to copy; of those, copied before the wait
};
template <int TILE, int STAGES, int ENTRY, typename T>
__device__ __forceinline__ void early_issue_stable(const MlaDecodeArgs& a, const T* cache, const int32_t* plan, const int32_t* table, int item,
                                                   int num_items, int4 next, int row, int begin, int end, int new_tokens, T* tiles,
                                                   uint64_t* full, int* s_valid, EarlyPrologue<STAGES, T>& e) {
  const int stable = early_stable_end(plan, item, num_items, next, row, end, new_tokens), ps = static_cast<int>(a.page_size);
  constexpr unsigned kBytes = ENTRY * sizeof(T);  // a token's entry
#pragma unroll
  for (int st = 0; st < STAGES; ++st) {
    const int t0 = begin + st * TILE;
    e.valid[st] = e.pre[st] = 0;
    e.src[st] = cache;
    if (t0 >= end) continue;
    const int page = table[t0 / ps];
    const int valid = page < 0 ? 0 : min(TILE, end - t0);
    s_valid[st] = valid;  // read by the scoring warps after the stage's barrier completes
    if (valid == 0) {
      mbar_arrive(&full[st]);
      continue;
    }
    const int pre = max(0, min(valid, stable - t0));
    e.src[st] = cache + (static_cast<int64_t>(page) * ps + t0 % ps) * ENTRY;
    e.valid[st] = valid, e.pre[st] = pre;
    mbar_arrive_expect_tx(&full[st], static_cast<unsigned>(valid) * kBytes);
    if (pre > 0) bulk_copy(tiles + st * TILE * ENTRY, e.src[st], static_cast<unsigned>(pre) * kBytes, &full[st]);
  }
}
template <int TILE, int STAGES, int ENTRY, typename T>
__device__ __forceinline__ void early_issue_rest(T* tiles, uint64_t* full, const EarlyPrologue<STAGES, T>& e) {
#pragma unroll
  for (int st = 0; st < STAGES; ++st)
    if (e.valid[st] > e.pre[st])
      bulk_copy(tiles + (st * TILE + e.pre[st]) * ENTRY, e.src[st] + e.pre[st] * ENTRY,
                static_cast<unsigned>(e.valid[st] - e.pre[st]) * ENTRY * static_cast<unsigned>(sizeof(T)), &full[st]);
}

// A bf16 cache (MlaDecodeArgs::cache_bf16): two bf16 of one 32-bit word (element 2i in the low
// half, 2i + 1 in the high) as their exact fp32 values. kCvtShift: a shift and a mask;
// kCvtPrmt: two byte permutes (prmt, the ALU pipe, never the FMA pipe an IMAD.SHL could take).
// The bf16 instantiations' template argument BF: 0 = an fp32 cache, else one of these.
constexpr int kCvtShift = 1, kCvtPrmt = 2;
template <int BF>
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t w) {
  uint32_t lo, hi;
  if constexpr (BF == kCvtPrmt) {
    asm("prmt.b32 %0, %1, %2, 0x1044;\n" : "=r"(lo) : "r"(w), "r"(0u));
    asm("prmt.b32 %0, %1, %2, 0x3244;\n" : "=r"(hi) : "r"(w), "r"(0u));
  } else {
    lo = w << 16;
    hi = w & 0xffff0000u;
  }
  return make_float2(__uint_as_float(lo), __uint_as_float(hi));
}
// The cache's element and base for BF (0: fp32).
template <int BF>
using CacheElem = std::conditional_t<BF == 0, float, uint16_t>;
template <int BF>
__device__ __forceinline__ const CacheElem<BF>* cache_base(const MlaDecodeArgs& a) {
  if constexpr (BF == 0) return a.cache;
  else return a.cache_bf16;
}
// Two consecutive elements (e even) of a tile in shared memory as fp32.
template <int BF>
__device__ __forceinline__ float2 load2(const CacheElem<BF>* p) {
  if constexpr (BF == 0) return *reinterpret_cast<const float2*>(p);
  else return bf16x2_to_float2<BF>(*reinterpret_cast<const uint32_t*>(p));
}
// Four consecutive elements (16-byte aligned for fp32, 8 for bf16).
template <int BF>
__device__ __forceinline__ float4 load4(const CacheElem<BF>* p) {
  if constexpr (BF == 0) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    const float2 x = bf16x2_to_float2<BF>(w.x), y = bf16x2_to_float2<BF>(w.y);
    return make_float4(x.x, x.y, y.x, y.y);
  }
}

// A bf16 cache's stage count (MlaDecodeWork::bf16_stages: 3 or 6, 0 = kMlaBf16Stages).
inline int mla_decode_bf16_stages(const MlaDecodeWork& w) { return w.bf16_stages == 0 ? kMlaBf16Stages : w.bf16_stages; }

// Whether a bf16 cache's run takes the tensor-core form (MlaDecodeBf16Math; never with the fused
// merge's counters).
inline bool mla_decode_bf16_tensor_cores(const MlaDecodeWork& w, const int32_t* counters, MlaDecodeRing ring) {
  if (counters != nullptr || w.bf16_math == MlaDecodeBf16Math::kCudaCores) return false;
  if (w.bf16_math == MlaDecodeBf16Math::kTensorCores) return true;
  return ring != MlaDecodeRing::kLeanBlock && ring != MlaDecodeRing::kLeanBlockPrefetch && ring != MlaDecodeRing::kLeanBlockEarly;
}

// MlaDecodeWork::new_tokens as the kernels take it (an int; a row never holds INT_MAX tokens).
inline int early_new_tokens(const MlaDecodeWork& w) { return static_cast<int>(std::min<int64_t>(w.new_tokens, INT32_MAX)); }

// The tile stages; at least the fused merge's weights (kMlaMaxMergeFanIn x heads floats). A bf16
// cache's rings take the same bytes (3 stages of 16 tokens use half, 6 all of it), so the warp
// variant's combine and the fused merge find the room they have with fp32.
inline size_t run_shared_bytes(const MlaDecodeArgs& a) {
  return std::max<size_t>(kStages * kTile * (a.latent_dim + a.rope_dim), kMlaMaxMergeFanIn * a.heads) * sizeof(float);
}

// The warp variant's run (mla_decode_warp_sm90.cu): heads <= 3, latent_dim % 4 == 0.
Status launch_warp_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, int32_t* counters,
                           cudaStream_t stream);
// MlaDecodeRing::kLeanBlock / kLeanBlockPrefetch's run (mla_decode_block_sm90.cu): heads <= 3, K3's
// widths, bulk loader, fixed tile ranges (the caller checks); counters: the fused merge's, or null.
Status launch_block_softmax_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, int32_t* counters,
                                    cudaStream_t stream);
// MlaDecodeMerge::kCluster's one launch (mla_decode_warp_sm90.cu): the warp variant's run, rows x
// w.cluster CTAs in clusters of w.cluster, merged through distributed shared memory.
Status launch_cluster_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, cudaStream_t stream);
// A bf16 cache's tensor-core form (mla_decode_mma_sm90.cu): heads <= 4 (the run takes <= 3), K3's widths, bulk loader,
// fixed tiles, no fused merge (the caller checks); the early prologue for kLeanEarly / kLeanBlockEarly.
Status launch_mma_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, cudaStream_t stream);
// The separate merge of split rows (mla_decode_merge_sm90.cu), grid (row, head, 64-dim slice).
Status launch_merge(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream);

}  // namespace pdserve::cuda::mla_decode_detail
