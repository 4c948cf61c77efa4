// The warp variant of the split-KV MLA decode's run (mla_decode.h; <= 3 heads): the kernel in
// its ring forms (shallow, deep, lean, lean-burst, lean-prefetch, lean-ahead) and the launcher
// that picks the form.
#include <cooperative_groups.h>

#include "mla/mla_decode_sm90.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_decode_detail;

// The wide ring (MlaDecodeRing::kLeanWide*, cluster form only): 5 stages of 16 tokens.
constexpr int kWideStages = 5;
constexpr int kWideTokens = kWideStages * kTile;
inline size_t wide_shared_bytes() { return static_cast<size_t>(kWideTokens) * kMaxEntry * sizeof(float); }

// MlaDecodeMerge::kCluster's merge, after each CTA of the cluster (one row's items) wrote its
// partial (o normalised, lse in log2 units) to its own shared memory: one cluster barrier
// (release / acquire: the peers' partials are visible), then CTA r of n merges elements
// [r s, (r + 1) s) of the row's NH x lat (s = ceil(NH lat / n)), one a thread, loading all n
// peers' lse and values at once (independent distributed-shared-memory loads), and writes the
// output; a second barrier keeps every CTA (its shared memory) alive until its peers have read
// it. out = sum_q 2^(lse_q - m) o_q / sum_q 2^(lse_q - m), m = max_q lse_q, q in rank order
// (the separate merge normalises the weights first: the same sum up to rounding). A row whose
// items all have lse -inf (no tokens, or all pages negative) writes zeros.
template <int NH>
__device__ __forceinline__ void cluster_merge(const MlaDecodeArgs& a, int row, bool live, const float* s_part, const float* s_lse, int lat) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int n = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int per = NH * lat, slice = (per + n - 1) / n, j1 = min(per, (rank + 1) * slice);
  for (int j = rank * slice + static_cast<int>(threadIdx.x); live && j < j1; j += kThreads) {
    const int h = j / lat;
    float lse[kMlaClusterMaxCtas], v[kMlaClusterMaxCtas];
#pragma unroll
    for (int q = 0; q < kMlaClusterMaxCtas; ++q) {
      if (q < n) {
        lse[q] = *cluster.map_shared_rank(s_lse + h, q);
        v[q] = *cluster.map_shared_rank(s_part + j, q);
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int q = 0; q < kMlaClusterMaxCtas; ++q)
      if (q < n) m = fmaxf(m, lse[q]);
    float sum = 0.0f, o = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int q = 0; q < kMlaClusterMaxCtas; ++q) {
        if (q < n) {
          const float wq = exp2f(lse[q] - m);
          sum += wq;
          o = fmaf(wq, v[q], o);
        }
      }
    }
    a.o_lat[static_cast<int64_t>(row) * per + j] = sum > 0.0f ? o / sum : 0.0f;
  }
  cluster.sync();
}

// The warp variant (<= 3 heads, latent_dim % 4 == 0): each warp runs its own online softmax
// over its two tokens of every tile, for all heads, with a private accumulator (lane = 16
// latent dims x NH heads in registers), so a tile costs one barrier (its arrival) instead of
// three; the 8 warps' states are combined once at the end of the item. BULK: tiles arrive by
// one bulk copy each (thread 0 issues it), completing on the stage's mbarrier; tokens past the
// end or on a negative page are not copied (their stale rows are masked like in kCpAsync).
// TILE tokens a stage (TILE / 8 per warp), STAGES stages: STAGES - 1 tiles in flight while one
// is scored (MlaDecodeRing: 16 x 3 = kShallow, 8 x 6 = kDeep; both 48 tokens of shared memory).
// LEAN (MlaDecodeRing::kLean / kLeanDeep; bulk loader, fixed tiles, K3's latent 512 + key 64 only): the
// entry's width fixed at compile time (no per-slot bounds tests, constant row strides), each
// tile's valid tokens published by the issuing thread in shared memory (no page lookup or
// division per token), and the 2 x NH scores of a tile reduced together (warp_sum_many: 15
// shuffles for 3 heads instead of 30 in one dependent chain each).
// FILL (MlaDecodeRing::kLeanBurst): the prologue issues a tile into every stage (three, not
// two: a larger first burst), its page-table lines prefetched to L2 before the pdl wait; the
// steady state is unchanged.
// PREFETCH (MlaDecodeRing::kLeanPrefetch): before the pdl wait, thread j < plan[3] aims one L2
// prefetch at the item's tile j (its page read early: only a hint, mla_decode.h); the steady
// state is unchanged.
// AHEAD (MlaDecodeRing::kLeanAhead): after the wait, the L2 runs plan[3] tiles ahead of the
// shared-memory ring: thread 0 prefetches (cp.async.bulk.prefetch.L2) tiles [kAhead, kAhead +
// P) in the prologue and tile j + P whenever it issues tile j's bulk copy, so a CTA has P more
// tiles in flight than its stages hold (the table entries are read after the wait, as the
// copies' own are).
// TL (bench only, MlaDecodeWork::timeline): thread 0 stamps the CTA's record (mla_decode.h);
// false everywhere else, where the stamps compile to nothing.
// CLUSTER (MlaDecodeMerge::kCluster): the CTA's partial goes to its own shared memory, and the
// cluster (= the row's items) merges them through distributed shared memory (cluster_merge).
// EARLY (MlaDecodeRing::kLeanEarly; LEAN, fixed tiles): the prologue fills every stage (as FILL),
// its page reads and the bulk copies of the row's stable tokens issued before the pdl wait, the
// rest after it (early_issue_stable / early_issue_rest; mla_decode.h); the steady state is kLean's.
// BF (a bf16 cache, MlaDecodeArgs::cache_bf16: kCvtShift / kCvtPrmt, 0 = fp32; LEAN and EARLY-or-plain
// kLean only): the stages hold bf16 entries (1152 bytes a token), each pair turned into fp32 as it is
// read from shared memory (the scores: one 32-bit word a lane a slot; P x V: 8 bytes a lane); the
// sums are the fp32 form's on those values. With STAGES 6 (16-token tiles) every stage is filled at
// the start and the ring keeps five tiles in flight in kLean's shared memory.
template <int NH, bool BULK, int TILE, int STAGES, bool LEAN = false, bool FILL = false, bool PREFETCH = false, bool AHEAD = false,
          bool TL = false, bool CLUSTER = false, bool EARLY = false, int BF = 0>
__global__ void __launch_bounds__(kThreads, 2)
    mla_decode_warp_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan, float* part_o, float* part_lse,
                           int32_t* counters, bool dynamic_tiles, bool late_trigger, int64_t cache_pages, int new_tokens, uint64_t* timeline) {
  extern __shared__ float4 smem_raw[];
  using T = CacheElem<BF>;
  static_assert(TILE % kWarps == 0 && TILE <= kTile * 2 &&
                    (TILE * STAGES * sizeof(T) <= kTile * kStages * sizeof(float) || (CLUSTER && TILE * STAGES <= kWideTokens)),
                "the ring fits run_shared_bytes (the cluster's wide ring: wide_shared_bytes)");
  static_assert(BF == 0 || (LEAN && !CLUSTER && !FILL && !PREFETCH && !AHEAD && !TL), "a bf16 cache: kLean / kLeanEarly only");
  constexpr int kPerWarp = TILE / kWarps;  // tokens of a tile each warp scores
  T* tiles = reinterpret_cast<T*>(smem_raw);  // [STAGES][TILE][entry]; then the warps' states
  const T* const cache = cache_base<BF>(a);
  __shared__ float s_m[kWarps][NH], s_l[kWarps][NH];
  __shared__ __align__(8) uint64_t s_full[STAGES];  // BULK: stage s's tile has landed
  __shared__ int s_t0[STAGES];                      // dynamic tiles: the token stage s starts at (-1: none left)
  __shared__ int s_valid[STAGES];                   // LEAN: stage s's tokens to score (0: a negative page)
  static_assert(!LEAN || BULK, "the lean kernel takes the bulk loader");
  static_assert(!EARLY || (LEAN && !CLUSTER && !FILL && !PREFETCH && !AHEAD), "the early ring is kLean's (fixed tiles)");
  const int item = blockIdx.x;
  uint64_t* const rec = TL ? timeline + item * kMlaTimelineWords : nullptr;
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 0);
  }
  // CLUSTER: no CTA may leave before the cluster's barriers; one past the plan's items (a plan
  // that does not match the launch) runs an empty item of row 0 and writes nothing.
  const bool live = item < plan[0];
  if (!CLUSTER && !live) return;
  const int4 it = live ? reinterpret_cast<const int4*>(plan + 4)[item] : make_int4(0, 0, 0, -1);
  const int row = it.x, begin = it.y, slot = it.w;
  int end = it.z;
  // Dynamic tiles (bulk loader, fused merge, split rows): the row's CTAs share its tiles
  // instead of taking fixed ranges. CTA j of n takes tiles j and j + n, then the next free one
  // from the row's queue (an atomic counter), so CTAs that stream faster take more: no CTA
  // idles while another still has a fixed range left. Softmax states merge in any order.
  const bool dynamic = BULK && dynamic_tiles && counters != nullptr && slot >= 0;
  int split_index = 0, splits = 1;
  int32_t* queue = nullptr;
  if (dynamic) {
    const int capacity = plan[2];
    const int2 info = reinterpret_cast<const int2*>(plan + 4 + 4 * capacity + 4 * row)[0];
    split_index = item - info.x, splits = info.y;
    end = plan[4 + 4 * (info.x + info.y - 1) + 2];  // the row's last token + 1
    queue = counters + capacity + plan[1] + row;
  }
  // LEAN: K3's widths as constants (the launcher checks the shape).
  const int lat = LEAN ? 512 : static_cast<int>(a.latent_dim), rope = LEAN ? 64 : static_cast<int>(a.rope_dim), entry = lat + rope;
  const int ps = static_cast<int>(a.page_size);
  const int32_t* table = a.page_table + static_cast<int64_t>(row) * a.max_pages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (BULK) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int st = 0; st < STAGES; ++st) mbar_init(&s_full[st], 1);
      mbar_init_fence();
    }
    __syncthreads();
  }
  // FILL: warm L2 with the page-table entries of the prologue's tiles while the kernel before
  // drains. A prefetch returns nothing to the thread (L2 is the point of coherence), so it
  // cannot read a stale value even if that kernel still writes the table.
  if constexpr (FILL) {
    if (threadIdx.x == 0 && end > begin) {
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(table + begin / ps));
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(table + (min(begin + STAGES * TILE, end) - 1) / ps));
    }
  }
  // PREFETCH: the table entry through L2 only (ld.global.cg), so the issuing thread's load
  // after the wait cannot hit a stale L1 line of it.
  if constexpr (PREFETCH) {
    const int t0 = begin + static_cast<int>(threadIdx.x) * TILE;
    if (static_cast<int>(threadIdx.x) < plan[3] && t0 < end) {
      const int page = __ldcg(table + t0 / ps);
      if (page >= 0 && page < cache_pages)
        bulk_prefetch_l2(a.cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, static_cast<unsigned>(min(TILE, end - t0) * entry * 4));
    }
  }
  EarlyPrologue<STAGES, T> early;
  if constexpr (EARLY) {  // fixed tiles (the launcher runs LEAN only without dynamic tiles)
    if (threadIdx.x == 0)
      early_issue_stable<TILE, STAGES, 576>(a, cache, plan, table, item, plan[0], reinterpret_cast<const int4*>(plan + 4)[item + 1], row, begin,
                                            end, new_tokens, tiles, s_full, s_valid, early);
  }
  pdl_wait();  // q and the cache may come from the kernels before (only the plan is read above;
               // PREFETCH: the table too, for hints only; EARLY: all but the rows' newest new_tokens)
  if (!late_trigger) pdl_trigger();  // MlaDecodeTrigger::kEarly
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 1);
  }
  // Tile [t0, t0 + TILE) into stage `st`: kCpAsync = one commit group (every thread);
  // BULK = thread 0 arms the stage's barrier with the valid bytes (pages hold whole tiles).
  auto issue = [&](int t0, int st) {
    T* dst = tiles + st * TILE * entry;
    if constexpr (BULK) {
      if (threadIdx.x == 0) {
        const int page = table[t0 / ps];
        const unsigned bytes = page < 0 ? 0u : static_cast<unsigned>(min(TILE, end - t0) * entry * sizeof(T));
        // Read by the scoring warps after the barrier of the tile's arrival (the stage's last
        // reader passed the barrier before this issue).
        if constexpr (LEAN) s_valid[st] = page < 0 ? 0 : min(TILE, end - t0);
        if (bytes > 0) {
          mbar_arrive_expect_tx(&s_full[st], bytes);
          bulk_copy(dst, cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, bytes, &s_full[st]);
        } else {
          mbar_arrive(&s_full[st]);
        }
      }
    } else if constexpr (BF == 0) {
      load_tile_async<TILE>(a, table, end, t0, dst);
    }
  };
  auto empty_group = [] {
    if constexpr (!BULK) cp_async_commit();
  };
  // Dynamic tiles, thread 0: the next tile into stage `st` and its start in s_t0 (published by
  // the barrier's arrival); -1 once the row has none left (an arrival without bytes). The
  // queue is asked one tile ahead (`pending`), so the atomic's round trip overlaps a tile. An
  // answer is never dropped while it could be a tile: answers only grow, and the CTA stops
  // asking once one of its tiles is past the row's end.
  int taken = 0, pending = 0;
  bool dry = false;
  auto issue_dynamic = [&](int st) {
    int t0 = -1;
    if (!dry) {
      const int k = taken++;
      const int t = k == 0 ? split_index : k == 1 ? split_index + splits : 2 * splits + pending;
      t0 = t * TILE < end ? t * TILE : -1;
      dry = t0 < 0;
      if (!dry && k != 1) pending = atomicAdd(queue, 1);  // the answer for this CTA's next queue tile
    }
    s_t0[st] = t0;
    const int page = t0 < 0 ? -1 : table[t0 / ps];
    if (page >= 0) {
      const unsigned bytes = static_cast<unsigned>(min(TILE, end - t0) * entry * sizeof(T));
      mbar_arrive_expect_tx(&s_full[st], bytes);
      bulk_copy(tiles + st * TILE * entry, cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, bytes, &s_full[st]);
    } else {
      mbar_arrive(&s_full[st]);
    }
  };

  const float qscale = a.scale * kLog2e;
  float2 q[NH][kSlots];
#pragma unroll
  for (int h = 0; h < NH; ++h)
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int e = 64 * k + 2 * lane;
      float2 v = make_float2(0.0f, 0.0f);
      if (e < entry) v = e < lat ? *reinterpret_cast<const float2*>(a.q_lat + (static_cast<int64_t>(row) * NH + h) * lat + e)
                                 : *reinterpret_cast<const float2*>(a.q_rot + (static_cast<int64_t>(row) * NH + h) * rope + (e - lat));
      q[h][k] = make_float2(v.x * qscale, v.y * qscale);
    }
  constexpr int kDimGroups = 4;  // lane owns dims 128 k + 4 lane + [0, 4), k < 4 (latent <= 512)
  float m[NH], l[NH];
  float4 acc[NH][kDimGroups];
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int k = 0; k < kDimGroups; ++k) acc[h][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  const int ntiles = (end - begin + TILE - 1) / TILE;  // static: 0 for an empty row's item, which writes zeros
  // Tile g goes to stage g % STAGES (cp.async: commit group g; empty groups past the end keep
  // the count). The prologue issues kAhead tiles; iteration i then issues tile i + STAGES - 1
  // into the stage tile i - 1 left (if not issued yet). The deep ring fills every stage at the
  // start (an item's first burst is most of its bytes at small batch); the shallow one keeps
  // its measured schedule (two ahead).
  constexpr int kAhead = STAGES > kStages || FILL || EARLY ? STAGES : STAGES - 1;
  if constexpr (EARLY) {
    if (threadIdx.x == 0) early_issue_rest<TILE, STAGES, 576>(tiles, s_full, early);
  } else if (dynamic) {
    if (threadIdx.x == 0)
#pragma unroll
      for (int st = 0; st < kAhead; ++st) issue_dynamic(st);
  } else {
#pragma unroll
    for (int st = 0; st < kAhead; ++st) {
      if (st < ntiles) issue(begin + st * TILE, st);
      else empty_group();
    }
  }
  // AHEAD: the L2's lead (plan word 3); thread 0 only, tiles past the item's end or on a
  // negative page skipped.
  const int lead = AHEAD ? plan[3] : 0;
  auto prefetch_tile = [&](int g) {
    const int t0 = begin + g * TILE;
    if (g >= ntiles) return;
    const int page = table[t0 / ps];
    if (page >= 0) bulk_prefetch_l2(a.cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, static_cast<unsigned>(min(TILE, end - t0) * entry * 4));
  };
  if constexpr (AHEAD) {
    if (threadIdx.x == 0)
      for (int g = kAhead; g < kAhead + lead; ++g) prefetch_tile(g);
  }
  for (int i = 0;; ++i) {
    int t0;
    if (dynamic) {
      mbar_wait(&s_full[i % STAGES], (i / STAGES) & 1);
      t0 = *reinterpret_cast<volatile int*>(&s_t0[i % STAGES]);
      if (t0 < 0) break;  // the same value in every thread; no copy is left in flight
    } else {
      if (i >= ntiles) break;
      t0 = begin + i * TILE;
      if constexpr (BULK) mbar_wait(&s_full[i % STAGES], (i / STAGES) & 1);
      else cp_async_wait_all_but<kAhead - 1>();
      if constexpr (TL) {
        if (threadIdx.x == 0 && i == 0) timeline_stamp(rec, 2);
      }
    }
    const T* tile = tiles + (i % STAGES) * TILE * entry;
    __syncthreads();  // tile i visible; every warp is past tile i-1, so its stage is free
    const bool issued = i + STAGES - 1 < kAhead;  // in the prologue already
    if (dynamic) {
      if (threadIdx.x == 0 && !issued) issue_dynamic((i + STAGES - 1) % STAGES);
    } else if (!issued && i + STAGES - 1 < ntiles) {
      issue(t0 + (STAGES - 1) * TILE, (i + STAGES - 1) % STAGES);
      if constexpr (AHEAD) {
        if (threadIdx.x == 0) prefetch_tile(i + STAGES - 1 + lead);
      }
    } else {
      empty_group();
    }
    float s[kPerWarp][NH];
    bool valid[kPerWarp];
    int tile_valid = 0;
    if constexpr (LEAN) tile_valid = s_valid[i % STAGES];
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      const int t = warp + u * kWarps, tok = t0 + t;
      if constexpr (LEAN) valid[u] = t < tile_valid;
      else valid[u] = tok < end && table[tok / ps] >= 0;
      const T* r = tile + t * entry;
#pragma unroll
      for (int h = 0; h < NH; ++h) s[u][h] = 0.0f;
      if constexpr (LEAN) continue;  // scored below, the warp's tokens side by side
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int e = 64 * k + 2 * lane;
        if (e < entry) {
          const float2 v = load2<BF>(r + e);
#pragma unroll
          for (int h = 0; h < NH; ++h) s[u][h] = fmaf(q[h][k].x, v.x, fmaf(q[h][k].y, v.y, s[u][h]));
        }
      }
    }
    if constexpr (LEAN) {
      // Slot-major: both tokens' loads of a slot are issued together (two in flight, not one).
      const T* r = tile + warp * entry + 2 * lane;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        float2 v[kPerWarp];
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u) v[u] = load2<BF>(r + u * kWarps * entry + 64 * k);
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u)
#pragma unroll
          for (int h = 0; h < NH; ++h) s[u][h] = fmaf(q[h][k].x, v[u].x, fmaf(q[h][k].y, v[u].y, s[u][h]));
      }
    }
    // The xor butterfly leaves the same bits in every lane, so the branches below are uniform.
    if constexpr (LEAN) {
      float flat[kPerWarp * NH];
#pragma unroll
      for (int j = 0; j < kPerWarp * NH; ++j) flat[j] = s[j / NH][j % NH];
      warp_sum_many(flat);
#pragma unroll
      for (int j = 0; j < kPerWarp * NH; ++j) s[j / NH][j % NH] = flat[j];
    } else {
#pragma unroll
      for (int u = 0; u < kPerWarp; ++u)
#pragma unroll
        for (int h = 0; h < NH; ++h) s[u][h] = warp_sum(s[u][h]);
    }
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      if (!valid[u]) continue;
      const T* r = tile + (warp + u * kWarps) * entry;
      float p[NH];
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        if (s[u][h] > m[h]) {  // rescale only when the running max moves
          const float corr = exp2f(m[h] - s[u][h]);
          m[h] = s[u][h];
          l[h] *= corr;
#pragma unroll
          for (int k = 0; k < kDimGroups; ++k) acc[h][k] = make_float4(acc[h][k].x * corr, acc[h][k].y * corr, acc[h][k].z * corr, acc[h][k].w * corr);
        }
        p[h] = exp2f(s[u][h] - m[h]);
        l[h] += p[h];
      }
#pragma unroll
      for (int k = 0; k < kDimGroups; ++k) {
        const int d = 128 * k + 4 * lane;
        if (d >= lat) break;
        const float4 v = load4<BF>(r + d);
#pragma unroll
        for (int h = 0; h < NH; ++h)
          acc[h][k] = make_float4(fmaf(p[h], v.x, acc[h][k].x), fmaf(p[h], v.y, acc[h][k].y), fmaf(p[h], v.z, acc[h][k].z),
                                  fmaf(p[h], v.w, acc[h][k].w));
      }
    }
  }

  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 3);
  }
  // Combine the warps: states through shared memory (the tile stages are free once drained).
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  float* s_acc = reinterpret_cast<float*>(smem_raw);  // [kWarps][NH][lat]; fits: 8 NH lat <= 48 entry for NH <= 6
  float* const s_part = s_acc + kWarps * NH * lat;  // CLUSTER: the CTA's partial [NH][lat] (9 NH lat <= 48 entry)
  __shared__ float s_lse[NH];
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    if (lane == 0) {
      s_m[warp][h] = m[h];
      s_l[warp][h] = l[h];
    }
#pragma unroll
    for (int k = 0; k < kDimGroups; ++k) {
      const int d = 128 * k + 4 * lane;
      if (d < lat) *reinterpret_cast<float4*>(s_acc + (warp * NH + h) * lat + d) = acc[h][k];
    }
  }
  __syncthreads();
  const int col2 = 2 * threadIdx.x;
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][h]);
    float L = 0.0f, wgt[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      wgt[w] = mx == -INFINITY ? 0.0f : exp2f(s_m[w][h] - mx);
      L += s_l[w][h] * wgt[w];
    }
    if (col2 < lat) {
      float2 o = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float2 v = *reinterpret_cast<const float2*>(s_acc + (w * NH + h) * lat + col2);
        o = make_float2(fmaf(wgt[w], v.x, o.x), fmaf(wgt[w], v.y, o.y));
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;
      float* dst = CLUSTER ? s_part + h * lat : slot < 0 ? a.o_lat + (static_cast<int64_t>(row) * NH + h) * lat : part_o + (static_cast<int64_t>(slot) * NH + h) * lat;
      *reinterpret_cast<float2*>(dst + col2) = make_float2(o.x * inv, o.y * inv);
    }
    if constexpr (CLUSTER) {
      if (threadIdx.x == 0) s_lse[h] = L > 0.0f ? mx + log2f(L) : -INFINITY;
    } else {
      if (slot >= 0 && threadIdx.x == 0) part_lse[static_cast<int64_t>(slot) * NH + h] = L > 0.0f ? mx + log2f(L) : -INFINITY;
    }
  }
  if constexpr (CLUSTER) cluster_merge<NH>(a, row, live, s_part, s_lse, lat);
  // The combine's states (s_acc) are read before arrive_last's barrier; then tiles hold the weights.
  if (!CLUSTER && slot >= 0 && counters) fused_merge_tail(a, plan, row, item, part_o, part_lse, counters, s_acc);
  if constexpr (TL) {
    if (threadIdx.x == 0) {
      timeline_stamp(rec, 4);
      timeline_open(rec);
    }
  }
  if (late_trigger) pdl_trigger();  // MlaDecodeTrigger::kLate: the merge launches as the run's CTAs finish
}

template <typename Kernel>
cudaError_t opt_in_shared(Kernel kernel) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kTile * kMaxEntry * sizeof(float));
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
}

template <int NH, bool BULK, int TILE, int STAGES, bool LEAN = false, bool FILL = false, bool PREFETCH = false, bool AHEAD = false,
          bool EARLY = false, bool TL = false, int BF = 0>
Status launch_warp_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, int32_t* counters, cudaStream_t stream) {
  // The timeline's instantiations: the rings batch 1 runs (kLean, kLeanPrefetch, kLeanEarly) at 3 heads only.
  if constexpr (!TL && BF == 0) {
    if (w.timeline != nullptr) {
      if constexpr (NH == 3 && LEAN && !FILL && !AHEAD && TILE == kTile && STAGES == kStages)
        return launch_warp_run<NH, BULK, TILE, STAGES, LEAN, FILL, PREFETCH, AHEAD, EARLY, true>(a, w, counters, stream);
      else
        return invalid_argument("mla_decode_run: the timeline takes the kLean / kLeanPrefetch / kLeanEarly rings at 3 heads only");
    }
  }
  const size_t smem = run_shared_bytes(a);
  constexpr auto kernel = mla_decode_warp_kernel<NH, BULK, TILE, STAGES, LEAN, FILL, PREFETCH, AHEAD, TL, false, EARLY, BF>;
  static PerDevice<cudaError_t> opted_in;  // each GPU's first (eager) call, never in a capture
  const cudaError_t opt_in = opted_in.get([] { return opt_in_shared(kernel); });
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (shared memory opt-in)");
  const cudaError_t e = launch_pdl(w.pdl, kernel, dim3(static_cast<unsigned>(w.launch_items)), dim3(kThreads),
                                   smem, stream, a, w.plan, w.part_o, w.part_lse, counters, w.dynamic_tiles,
                                   w.trigger == MlaDecodeTrigger::kLate, w.cache_pages, early_new_tokens(w), w.timeline);
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (warp variant)");
  return last_launch_status("mla_decode_run (warp variant)");
}

// MlaDecodeMerge::kCluster: rows x w.cluster CTAs in clusters of w.cluster (one row each).
template <int NH, bool BULK, int TILE, int STAGES, bool LEAN = false, bool PREFETCH = false>
Status launch_cluster_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream) {
  constexpr auto kernel = mla_decode_warp_kernel<NH, BULK, TILE, STAGES, LEAN, false, PREFETCH, false, false, true>;
  constexpr bool kWide = TILE * STAGES > kTile * kStages;
  static PerDevice<cudaError_t> opted_in;  // each GPU's first (eager) call, never in a capture
  const cudaError_t opt_in = opted_in.get([] {
    cudaError_t e = opt_in_shared(kernel);
    if (e == cudaSuccess && kWide)
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(wide_shared_bytes()));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  });
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (cluster opt-in)");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(a.rows * w.cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kWide ? wide_shared_bytes() : run_shared_bytes(a);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(w.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = w.pdl ? 2 : 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, a, w.plan, static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                                           static_cast<int32_t*>(nullptr), false, w.trigger == MlaDecodeTrigger::kLate, w.cache_pages,
                                           early_new_tokens(w), static_cast<uint64_t*>(nullptr));
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (cluster)");
  return last_launch_status("mla_decode_run (cluster)");
}

template <int NH>
Status launch_cluster_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, cudaStream_t stream) {
  if (!bulk) return launch_cluster_run<NH, false, kTile, kStages>(a, w, stream);
  const bool lean = a.latent_dim == 512 && a.rope_dim == 64;
  if (!lean) return launch_cluster_run<NH, true, kTile, kStages>(a, w, stream);
  if (ring == MlaDecodeRing::kLeanDeep) return launch_cluster_run<NH, true, kTile / 2, 2 * kStages, true>(a, w, stream);
  if (ring == MlaDecodeRing::kLeanWidePrefetch && w.cache_pages > 0)
    return launch_cluster_run<NH, true, kTile, kWideStages, true, true>(a, w, stream);
  if (ring == MlaDecodeRing::kLeanWide || ring == MlaDecodeRing::kLeanWidePrefetch)
    return launch_cluster_run<NH, true, kTile, kWideStages, true>(a, w, stream);
  if (ring == MlaDecodeRing::kLeanPrefetch && w.cache_pages > 0) return launch_cluster_run<NH, true, kTile, kStages, true, true>(a, w, stream);
  return launch_cluster_run<NH, true, kTile, kStages, true>(a, w, stream);  // kLean (any other ring)
}

// A bf16 cache (mla_decode_run checked the shape, the bulk loader, fixed tiles): the block rings
// to the block-softmax form; kLeanEarly to its bf16 form; every other ring to kLean's. On 3 or 6
// stages of 16 tokens (MlaDecodeWork::bf16_stages); MlaDecodeWork::bf16_prmt: the prmt conversion
// (3 heads, kLean's form only; elsewhere the shift / mask one).
template <int NH, int STAGES>
Status launch_warp_run_bf16(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, int32_t* counters, cudaStream_t stream) {
  if (ring == MlaDecodeRing::kLeanEarly)
    return launch_warp_run<NH, true, kTile, STAGES, true, false, false, false, true, false, kCvtShift>(a, w, counters, stream);
  if constexpr (NH == 3 && STAGES == kMlaBf16Stages) {
    if (w.bf16_prmt) return launch_warp_run<NH, true, kTile, STAGES, true, false, false, false, false, false, kCvtPrmt>(a, w, counters, stream);
  }
  return launch_warp_run<NH, true, kTile, STAGES, true, false, false, false, false, false, kCvtShift>(a, w, counters, stream);
}

// The deep ring only with the bulk loader (the cp.async form stays the measured kShallow one)
// and without dynamic tiles (their queue is tuned to kShallow's tile).
template <int NH>
Status launch_warp_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, int32_t* counters,
                       cudaStream_t stream) {
  if (a.cache_bf16 != nullptr) {
    if (mla_decode_bf16_tensor_cores(w, counters, ring)) return launch_mma_variant(a, w, ring, stream);
    if (ring == MlaDecodeRing::kLeanBlock || ring == MlaDecodeRing::kLeanBlockPrefetch || ring == MlaDecodeRing::kLeanBlockEarly)
      return launch_block_softmax_variant(a, w, ring, counters, stream);
    return mla_decode_bf16_stages(w) == 6 ? launch_warp_run_bf16<NH, 6>(a, w, ring, counters, stream)
                                          : launch_warp_run_bf16<NH, 3>(a, w, ring, counters, stream);
  }
  if (!bulk) return launch_warp_run<NH, false, kTile, kStages>(a, w, counters, stream);
  // The lean kernel: K3's widths only, fixed tile ranges; else the same ring without it.
  const bool lean = a.latent_dim == 512 && a.rope_dim == 64 && !(w.dynamic_tiles && counters);
  if (ring == MlaDecodeRing::kLeanDeep && lean) return launch_warp_run<NH, true, kTile / 2, 2 * kStages, true>(a, w, counters, stream);
  if ((ring == MlaDecodeRing::kLeanBlock || ring == MlaDecodeRing::kLeanBlockPrefetch || ring == MlaDecodeRing::kLeanBlockEarly) && lean)
    return launch_block_softmax_variant(a, w, ring, counters, stream);
  if (ring == MlaDecodeRing::kDeep || ring == MlaDecodeRing::kLeanDeep)
    return launch_warp_run<NH, true, kTile / 2, 2 * kStages>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanWide) ring = MlaDecodeRing::kLean;  // the wide ring: the cluster form only
  if (ring == MlaDecodeRing::kLeanWidePrefetch) ring = MlaDecodeRing::kLeanPrefetch;
  if (ring == MlaDecodeRing::kLean && lean) return launch_warp_run<NH, true, kTile, kStages, true>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanEarly && lean)
    return launch_warp_run<NH, true, kTile, kStages, true, false, false, false, true>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanBurst && lean) return launch_warp_run<NH, true, kTile, kStages, true, true>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanPrefetch && lean) {  // without the cache's size nothing to prefetch: kLean itself
    if (w.cache_pages <= 0) return launch_warp_run<NH, true, kTile, kStages, true>(a, w, counters, stream);
    return launch_warp_run<NH, true, kTile, kStages, true, false, true>(a, w, counters, stream);
  }
  if (ring == MlaDecodeRing::kLeanAhead && lean) return launch_warp_run<NH, true, kTile, kStages, true, false, false, true>(a, w, counters, stream);
  return launch_warp_run<NH, true, kTile, kStages>(a, w, counters, stream);
}

}  // namespace

namespace mla_decode_detail {

Status launch_warp_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, int32_t* counters,
                           cudaStream_t stream) {
  return a.heads == 1   ? launch_warp_run<1>(a, w, bulk, ring, counters, stream)
         : a.heads == 2 ? launch_warp_run<2>(a, w, bulk, ring, counters, stream)
                        : launch_warp_run<3>(a, w, bulk, ring, counters, stream);
}

Status launch_cluster_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, cudaStream_t stream) {
  return a.heads == 1   ? launch_cluster_run<1>(a, w, bulk, ring, stream)
         : a.heads == 2 ? launch_cluster_run<2>(a, w, bulk, ring, stream)
                        : launch_cluster_run<3>(a, w, bulk, ring, stream);
}

}  // namespace mla_decode_detail

}  // namespace pdserve::cuda
