// The block-softmax form of the split-KV MLA decode's run (mla_decode.h, MlaDecodeRing::kLeanBlock
// / kLeanBlockPrefetch; <= 3 heads, K3's latent 512 + key 64, bulk loader, fixed tile ranges).
// Built for short items (one or two tiles: batch 1 at 1K-4K), where the warp variant's time after
// its tile lands is two latency chains (each warp's online softmax over its 2 tokens, then the 8
// warps' states combined through 48 KB of shared memory) rather than work.
#include "mla/mla_decode_sm90.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_decode_detail;

constexpr int kLat = 512, kRope = 64, kEntry = kLat + kRope;
constexpr int kPerWarp = kTile / kWarps;  // tokens of a tile each warp scores

// One CTA an item, kLean's ring (16-token tiles, 3 stages, one bulk copy a tile on an mbarrier;
// every stage filled at the start, so an item of up to 3 tiles is one burst). Per tile:
// 1. scores: warp w scores tokens w and w + 8 for all heads, exactly as kLean (same sums);
//    lane j of the warp writes score j to shared memory; one block barrier.
// 2. softmax: EVERY warp reads the tile's 16 x NH scores (lane = token) and updates the same
//    block-wide running max / sum per head (identical bits in every warp: same inputs, same
//    operations), so no state is ever combined across warps.
// 3. P x V: thread t owns latent dims 2t, 2t + 1 of every head (512 = 256 x 2) over all the
//    tile's valid tokens (probabilities from the warp's own copy in shared memory).
// After the last tile each thread writes its own dims of the output or partial (o / l) and
// thread h < NH the partial's lse: no epilogue combine. Correct for items of any length (the
// ring turns like kLean's: tile i + 2 is issued into tile i - 1's stage after tile i's barrier),
// so a graph captured with it stays correct as contexts grow; only its speed is for short items.
// The summation order differs from the warp variant's (per tile: max first, then one exp per
// token; each dim sums its tokens in order), within fp32 rounding of it.
// PREFETCH (kLeanBlockPrefetch): kLeanPrefetch's pre-wait L2 hints (plan word 3 tiles an item).
// EARLY (kLeanBlockEarly): the prologue's page reads and bulk copies of the stable tokens before
// the pdl wait, the rest after it (early_issue_stable / early_issue_rest; mla_decode.h).
// TL: the bench's timeline stamps (mla_decode.h), as the warp variant's.
// BF (a bf16 cache, MlaDecodeArgs::cache_bf16: kCvtShift / kCvtPrmt, 0 = fp32): the tiles hold bf16
// entries (1152 bytes a token), each pair turned into fp32 as it is read from shared memory; the
// sums are the fp32 form's on those values. STAGES: the ring's 16-token stages (3, or 6 with bf16:
// the same shared memory, twice the tiles in flight); every stage filled at the start.
template <int NH, bool PREFETCH, bool EARLY, bool TL, int BF = 0, int STAGES = kStages>
__global__ void __launch_bounds__(kThreads, 2)
    mla_decode_block_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan, float* part_o, float* part_lse,
                            int32_t* counters, bool late_trigger, int64_t cache_pages, int new_tokens, uint64_t* timeline) {
  using T = CacheElem<BF>;
  static_assert(STAGES * kTile * sizeof(T) <= kStages * kTile * sizeof(float), "the ring fits run_shared_bytes");
  static_assert(!(PREFETCH && BF), "a bf16 cache has no prefetch form");
  extern __shared__ float4 smem_raw[];
  T* tiles = reinterpret_cast<T*>(smem_raw);  // [STAGES][kTile][kEntry]
  const T* const cache = cache_base<BF>(a);
  __shared__ __align__(8) uint64_t s_full[STAGES];
  __shared__ int s_valid[STAGES];                         // stage s's tokens to use (0: a negative page)
  __shared__ __align__(16) float s_s[2][NH][kTile];        // the tile's scores, by tile parity
  __shared__ __align__(16) float s_p[kWarps][NH][kTile];   // each warp's copy of the tile's probabilities
  const int item = blockIdx.x;
  uint64_t* const rec = TL ? timeline + item * kMlaTimelineWords : nullptr;
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 0);
  }
  // The item and the next one (EARLY) loaded with the item count, in one round trip: both in the
  // image (item < launch_items <= capacity, and the row table follows the items).
  const int num_items = plan[0];
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int4 next = EARLY ? reinterpret_cast<const int4*>(plan + 4)[item + 1] : it;
  if (item >= num_items) return;  // a graph launches the capacity
  const int row = it.x, begin = it.y, end = it.z, slot = it.w;
  const int ps = static_cast<int>(a.page_size);
  const int32_t* table = a.page_table + static_cast<int64_t>(row) * a.max_pages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int st = 0; st < STAGES; ++st) mbar_init(&s_full[st], 1);
    mbar_init_fence();
  }
  __syncthreads();
  if constexpr (PREFETCH) {  // hints only (mla_decode.h, kLeanPrefetch): the table through L2
    const int t0 = begin + static_cast<int>(threadIdx.x) * kTile;
    if (static_cast<int>(threadIdx.x) < plan[3] && t0 < end) {
      const int page = __ldcg(table + t0 / ps);
      if (page >= 0 && page < cache_pages)
        bulk_prefetch_l2(a.cache + (static_cast<int64_t>(page) * ps + t0 % ps) * kEntry, static_cast<unsigned>(min(kTile, end - t0) * kEntry * 4));
    }
  }
  EarlyPrologue<STAGES, T> early;
  if constexpr (EARLY) {
    if (threadIdx.x == 0)
      early_issue_stable<kTile, STAGES, kEntry>(a, cache, plan, table, item, num_items, next, row, begin, end, new_tokens, tiles, s_full, s_valid,
                                                 early);
  }
  pdl_wait();  // q and the cache may come from the kernels before (EARLY: the row's newest new_tokens only)
  if (!late_trigger) pdl_trigger();
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 1);
  }
  const int ntiles = (end - begin + kTile - 1) / kTile;  // 0: an empty row's item, which writes zeros
  // Thread 0: tile [t0, t0 + kTile) into stage st, its valid tokens published with the arrival.
  auto issue = [&](int t0, int st) {
    const int page = table[t0 / ps];
    const int valid = page < 0 ? 0 : min(kTile, end - t0);
    s_valid[st] = valid;
    if (valid > 0) {
      const unsigned bytes = static_cast<unsigned>(valid * kEntry * sizeof(T));
      mbar_arrive_expect_tx(&s_full[st], bytes);
      bulk_copy(tiles + st * kTile * kEntry, cache + (static_cast<int64_t>(page) * ps + t0 % ps) * kEntry, bytes, &s_full[st]);
    } else {
      mbar_arrive(&s_full[st]);
    }
  };
  if (threadIdx.x == 0) {
    if constexpr (EARLY) early_issue_rest<kTile, STAGES, kEntry>(tiles, s_full, early);
    else
      for (int st = 0; st < STAGES && st < ntiles; ++st) issue(begin + st * kTile, st);
  }

  const float qscale = a.scale * kLog2e;
  float2 q[NH][kSlots];
#pragma unroll
  for (int h = 0; h < NH; ++h)
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int e = 64 * k + 2 * lane;
      const float2 v = e < kLat ? *reinterpret_cast<const float2*>(a.q_lat + (static_cast<int64_t>(row) * NH + h) * kLat + e)
                                : *reinterpret_cast<const float2*>(a.q_rot + (static_cast<int64_t>(row) * NH + h) * kRope + (e - kLat));
      q[h][k] = make_float2(v.x * qscale, v.y * qscale);
    }
  const int col2 = 2 * static_cast<int>(threadIdx.x);  // this thread's two latent dims (512 = 256 x 2)
  float m[NH], l[NH];
  float2 acc[NH];
#pragma unroll
  for (int h = 0; h < NH; ++h) m[h] = -INFINITY, l[h] = 0.0f, acc[h] = make_float2(0.0f, 0.0f);

  for (int i = 0; i < ntiles; ++i) {
    const int st = i % STAGES;
    mbar_wait(&s_full[st], (i / STAGES) & 1);
    if constexpr (TL) {
      if (threadIdx.x == 0 && i == 0) timeline_stamp(rec, 2);
    }
    const T* tile = tiles + st * kTile * kEntry;
    // 1. Scores (kLean's loop: slot-major, both tokens' loads of a slot together).
    float s[kPerWarp * NH];
#pragma unroll
    for (int j = 0; j < kPerWarp * NH; ++j) s[j] = 0.0f;
    const T* r = tile + warp * kEntry + 2 * lane;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      float2 v[kPerWarp];
#pragma unroll
      for (int u = 0; u < kPerWarp; ++u) v[u] = load2<BF>(r + u * kWarps * kEntry + 64 * k);
#pragma unroll
      for (int u = 0; u < kPerWarp; ++u)
#pragma unroll
        for (int h = 0; h < NH; ++h) s[u * NH + h] = fmaf(q[h][k].x, v[u].x, fmaf(q[h][k].y, v[u].y, s[u * NH + h]));
    }
    warp_sum_many(s);
    float* const sc = &s_s[i & 1][0][0];
#pragma unroll
    for (int j = 0; j < kPerWarp * NH; ++j)
      if (lane == j) sc[(j % NH) * kTile + warp + (j / NH) * kWarps] = s[j];
    // The tile's scores are in; every warp is past tile i - 1's P x V, so its stage is free:
    // thread 0 refills it with tile i + STAGES - 1 (tiles 0 .. STAGES - 1 were issued before the loop).
    __syncthreads();
    if (threadIdx.x == 0 && i >= 1 && i + STAGES - 1 < ntiles) issue(begin + (i + STAGES - 1) * kTile, (i + STAGES - 1) % STAGES);
    // 2. Softmax over the tile, the same in every warp: lane = token (lanes 16-31 mirror 0-15).
    const int nvalid = s_valid[st];
    const int t = lane & (kTile - 1);
    const bool valid = t < nvalid;
    float sv[NH], mx[NH], p[NH], corr[NH];
#pragma unroll
    for (int h = 0; h < NH; ++h) mx[h] = sv[h] = valid ? sc[h * kTile + t] : -INFINITY;
#pragma unroll
    for (int o = kTile / 2; o > 0; o >>= 1)
#pragma unroll
      for (int h = 0; h < NH; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      const float m_new = fmaxf(m[h], mx[h]);
      corr[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
      p[h] = valid ? exp2f(sv[h] - m_new) : 0.0f;
      m[h] = m_new;
      if (lane < kTile) s_p[warp][h][lane] = p[h];
    }
#pragma unroll
    for (int o = kTile / 2; o > 0; o >>= 1)
#pragma unroll
      for (int h = 0; h < NH; ++h) p[h] += __shfl_xor_sync(0xffffffffu, p[h], o);  // the tile's sum (warp-wide shuffles order s_p too)
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      l[h] = l[h] * corr[h] + p[h];
      acc[h] = make_float2(acc[h].x * corr[h], acc[h].y * corr[h]);
    }
    __syncwarp();
    // 3. P x V: this thread's two dims, the tile's valid tokens in order.
    const T* vb = tile + col2;
    if (nvalid == kTile) {
#pragma unroll
      for (int t4 = 0; t4 < kTile; t4 += 4) {
        float2 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = load2<BF>(vb + (t4 + u) * kEntry);
#pragma unroll
        for (int h = 0; h < NH; ++h) {
          const float4 pp = *reinterpret_cast<const float4*>(&s_p[warp][h][t4]);
          acc[h].x = fmaf(pp.w, v[3].x, fmaf(pp.z, v[2].x, fmaf(pp.y, v[1].x, fmaf(pp.x, v[0].x, acc[h].x))));
          acc[h].y = fmaf(pp.w, v[3].y, fmaf(pp.z, v[2].y, fmaf(pp.y, v[1].y, fmaf(pp.x, v[0].y, acc[h].y))));
        }
      }
    } else {
      for (int u = 0; u < nvalid; ++u) {
        const float2 v = load2<BF>(vb + u * kEntry);
#pragma unroll
        for (int h = 0; h < NH; ++h) {
          const float pu = s_p[warp][h][u];
          acc[h] = make_float2(fmaf(pu, v.x, acc[h].x), fmaf(pu, v.y, acc[h].y));
        }
      }
    }
  }
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 3);
  }
  // Every warp holds the same m and l: each thread writes its own dims, nothing combined.
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    float* dst = slot < 0 ? a.o_lat + (static_cast<int64_t>(row) * NH + h) * kLat : part_o + (static_cast<int64_t>(slot) * NH + h) * kLat;
    *reinterpret_cast<float2*>(dst + col2) = make_float2(acc[h].x * inv, acc[h].y * inv);
    if (slot >= 0 && threadIdx.x == h) part_lse[static_cast<int64_t>(slot) * NH + h] = l[h] > 0.0f ? m[h] + log2f(l[h]) : -INFINITY;
  }
  // The fused merge (counters given): its first barrier orders every warp's last reads of the
  // stages before the merge's weights overwrite them.
  if (slot >= 0 && counters) fused_merge_tail(a, plan, row, item, part_o, part_lse, counters, reinterpret_cast<float*>(smem_raw));
  if constexpr (TL) {
    if (threadIdx.x == 0) {
      timeline_stamp(rec, 4);
      timeline_open(rec);
    }
  }
  if (late_trigger) pdl_trigger();
}

template <int NH, bool PREFETCH, bool EARLY, bool TL = false, int BF = 0, int STAGES = kStages>
Status launch_block_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, int32_t* counters, cudaStream_t stream) {
  if constexpr (!TL && BF == 0) {
    if (w.timeline != nullptr) {
      if constexpr (NH == 3) return launch_block_run<NH, PREFETCH, EARLY, true>(a, w, counters, stream);
      else return invalid_argument("mla_decode_run: the timeline takes 3 heads only");
    }
  }
  constexpr auto kernel = mla_decode_block_kernel<NH, PREFETCH, EARLY, TL, BF, STAGES>;
  static PerDevice<cudaError_t> opted_in;  // each GPU's first (eager) call, never in a capture
  const cudaError_t opt_in = opted_in.get([] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kTile * kMaxEntry * sizeof(float));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  });
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (block softmax opt-in)");
  const cudaError_t e = launch_pdl(w.pdl, kernel, dim3(static_cast<unsigned>(w.launch_items)), dim3(kThreads), run_shared_bytes(a), stream, a,
                                   w.plan, w.part_o, w.part_lse, counters, w.trigger == MlaDecodeTrigger::kLate, w.cache_pages, early_new_tokens(w), w.timeline);
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (block softmax)");
  return last_launch_status("mla_decode_run (block softmax)");
}

// A bf16 cache: kLeanBlockEarly's form, or kLeanBlock's (for kLeanBlock and kLeanBlockPrefetch),
// on 3 or 6 stages (MlaDecodeWork::bf16_stages; mla_decode_run checked it).
template <int NH, int STAGES>
Status launch_block_run_bf16(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, int32_t* counters, cudaStream_t stream) {
  if (ring == MlaDecodeRing::kLeanBlockEarly) return launch_block_run<NH, false, true, false, kCvtShift, STAGES>(a, w, counters, stream);
  return launch_block_run<NH, false, false, false, kCvtShift, STAGES>(a, w, counters, stream);
}

template <int NH>
Status launch_block_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, int32_t* counters, cudaStream_t stream) {
  if (a.cache_bf16 != nullptr)
    return mla_decode_bf16_stages(w) == 6 ? launch_block_run_bf16<NH, 6>(a, w, ring, counters, stream)
                                          : launch_block_run_bf16<NH, 3>(a, w, ring, counters, stream);
  if (ring == MlaDecodeRing::kLeanBlockPrefetch && w.cache_pages > 0) return launch_block_run<NH, true, false>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanBlockEarly) return launch_block_run<NH, false, true>(a, w, counters, stream);
  return launch_block_run<NH, false, false>(a, w, counters, stream);
}

}  // namespace

namespace mla_decode_detail {

Status launch_block_softmax_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, int32_t* counters,
                                    cudaStream_t stream) {
  return a.heads == 1   ? launch_block_run<1>(a, w, ring, counters, stream)
         : a.heads == 2 ? launch_block_run<2>(a, w, ring, counters, stream)
                        : launch_block_run<3>(a, w, ring, counters, stream);
}

}  // namespace mla_decode_detail

}  // namespace pdserve::cuda
