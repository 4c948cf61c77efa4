// Device half of the split-KV MLA decode (mla_decode.h): the run kernel (one CTA per plan
// item, all heads of its row over shared page tiles) and the merge of split rows.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"
#include "mla/mla_decode.h"

namespace pdserve::cuda {

namespace {

using namespace pdl_bulk;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kMlaTileTokens;         // tokens per shared-memory stage (2 per warp when scoring)
constexpr int kStages = 3;                    // tiles in shared memory: two in flight while one is used
constexpr int kMaxEntry = 576;                // latent + key floats per token, at most
constexpr int kSlots = kMaxEntry / 64;        // float2 per lane covering one token's entry
constexpr int kMaxHeadGroup = 4;              // heads scored together (their q in registers)
constexpr float kLog2e = 1.4426950408889634f;
// kAuto's loader: bulk, from the H200 measurement (docs/perf.md, "MLA split-KV latent decode
// on the H200", fourth version).
constexpr bool kMlaDefaultLoaderIsBulk = true;
// MlaDecodeRing::kAuto in the run (callers pass the plan's pick instead): the shallow ring.
constexpr MlaDecodeRing kMlaDefaultRing = MlaDecodeRing::kShallow;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
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
__device__ void merge_partials(const float* part_o, const float* part_lse, int first, int n, int stride, int H, int lat,
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
__device__ void fused_merge_tail(const MlaDecodeArgs& a, const int32_t* plan, int row, int item, float* part_o, float* part_lse,
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

// Scores are kept in log2 units (q pre-scaled by scale * log2 e), so exp2f does the softmax.
// The block variant: any head count up to 32; the block shares each tile's scores and
// probabilities through shared memory (three barriers a tile).
template <int HMAX>
__global__ void __launch_bounds__(kThreads, HMAX <= 8 ? 2 : 1)
    mla_decode_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan, float* part_o, float* part_lse,
                      int32_t* counters, bool late_trigger) {
  extern __shared__ float4 smem_raw[];
  float* tiles = reinterpret_cast<float*>(smem_raw);  // [kStages][kTile][entry]
  constexpr int kHeadGroup = HMAX < kMaxHeadGroup ? HMAX : kMaxHeadGroup;
  __shared__ __align__(16) float s_p[HMAX][kTile];    // scores, then probabilities, of the tile
  __shared__ float s_m[HMAX], s_l[HMAX], s_corr[HMAX];
  const int item = blockIdx.x;
  if (item >= plan[0]) return;  // a graph launches the capacity; the step may use fewer items
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int row = it.x, begin = it.y, end = it.z, slot = it.w;
  const int H = static_cast<int>(a.heads), lat = static_cast<int>(a.latent_dim), entry = lat + static_cast<int>(a.rope_dim);
  const int ps = static_cast<int>(a.page_size);
  const int32_t* table = a.page_table + static_cast<int64_t>(row) * a.max_pages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  pdl_wait();  // q and the cache may come from the kernels before (only the plan is read above)
  if (!late_trigger) pdl_trigger();  // MlaDecodeTrigger::kEarly

  auto load_tile = [&](int t0, float* dst) { load_tile_async(a, table, end, t0, dst); };

  if (threadIdx.x < HMAX) {
    s_m[threadIdx.x] = -INFINITY;
    s_l[threadIdx.x] = 0.0f;
  }
  const float qscale = a.scale * kLog2e;
  const float* q_lat = a.q_lat + static_cast<int64_t>(row) * H * lat;
  const float* q_rot = a.q_rot + static_cast<int64_t>(row) * H * a.rope_dim;
  float2 q[kHeadGroup][kSlots];
  auto load_q = [&](int g) {
#pragma unroll
    for (int hh = 0; hh < kHeadGroup; ++hh)
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int h = g + hh, e = 64 * k + 2 * lane;
        float2 v = make_float2(0.0f, 0.0f);
        if (h < H && e < entry) v = e < lat ? *reinterpret_cast<const float2*>(q_lat + h * lat + e)
                                            : *reinterpret_cast<const float2*>(q_rot + h * a.rope_dim + (e - lat));
        q[hh][k] = make_float2(v.x * qscale, v.y * qscale);
      }
  };
  if constexpr (HMAX <= kMaxHeadGroup) load_q(0);

  const int col2 = 2 * threadIdx.x;  // this thread's two latent dims of every head's output
  float2 acc[HMAX];
#pragma unroll
  for (int h = 0; h < HMAX; ++h) acc[h] = make_float2(0.0f, 0.0f);

  // Group g = tile g (empty groups past the end keep the count exact): before tile i is used,
  // tiles 0..i+1 are committed and "all but the newest one" means tile i has landed.
  const int ntiles = (end - begin + kTile - 1) / kTile;  // 0: an empty row's item, which writes zeros
  if (ntiles > 0) load_tile(begin, tiles);
  else cp_async_commit();
  if (ntiles > 1) load_tile(begin + kTile, tiles + kTile * entry);
  else cp_async_commit();
  for (int i = 0; i < ntiles; ++i) {
    const int t0 = begin + i * kTile;
    const float* tile = tiles + (i % kStages) * kTile * entry;
    cp_async_wait_one();
    __syncthreads();  // tile i visible; everyone is past iteration i-1, so its stage and s_p are free
    if (i + 2 < ntiles) load_tile(t0 + 2 * kTile, tiles + ((i + 2) % kStages) * kTile * entry);
    else cp_async_commit();

    // Scores: warp w takes tokens w and w + kWarps, all heads, kHeadGroup at a time.
    const float* r0 = tile + warp * entry;
    const float* r1 = tile + (warp + kWarps) * entry;
#pragma unroll
    for (int g = 0; g < HMAX; g += kHeadGroup) {
      if (g >= H) break;
      if constexpr (HMAX > kMaxHeadGroup) load_q(g);
      float s0[kHeadGroup] = {}, s1[kHeadGroup] = {};
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int e = 64 * k + 2 * lane;
        if (e < entry) {
          const float2 v0 = *reinterpret_cast<const float2*>(r0 + e), v1 = *reinterpret_cast<const float2*>(r1 + e);
#pragma unroll
          for (int hh = 0; hh < kHeadGroup; ++hh) {
            s0[hh] = fmaf(q[hh][k].x, v0.x, fmaf(q[hh][k].y, v0.y, s0[hh]));
            s1[hh] = fmaf(q[hh][k].x, v1.x, fmaf(q[hh][k].y, v1.y, s1[hh]));
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeadGroup; ++hh) {
        s0[hh] = warp_sum(s0[hh]);
        s1[hh] = warp_sum(s1[hh]);
        if (lane == 0 && g + hh < H) {
          s_p[g + hh][warp] = s0[hh];
          s_p[g + hh][warp + kWarps] = s1[hh];
        }
      }
    }
    __syncthreads();

    // Online softmax: warp w owns heads w, w + kWarps, ...; lane t owns token t of the tile.
    bool valid = false;
    if (lane < kTile) {
      const int tok = t0 + lane;
      valid = tok < end && table[tok / ps] >= 0;
    }
    for (int h = warp; h < H; h += kWarps) {
      const float s = valid ? s_p[h][lane] : -INFINITY;
      const float m_old = s_m[h], m_new = fmaxf(m_old, warp_max(s));
      const float corr = m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
      const float p = valid ? exp2f(s - m_new) : 0.0f;
      const float sum = warp_sum(p);
      if (lane < kTile) s_p[h][lane] = p;
      if (lane == 0) {
        s_m[h] = m_new;
        s_l[h] = s_l[h] * corr + sum;
        s_corr[h] = corr;
      }
    }
    __syncthreads();

    // Accumulate: every head's o over the tile's latents, this thread's two dims.
    if (col2 < lat) {
#pragma unroll
      for (int h = 0; h < HMAX; ++h)
        if (h < H) acc[h] = make_float2(acc[h].x * s_corr[h], acc[h].y * s_corr[h]);
#pragma unroll 2
      for (int t = 0; t < kTile; t += 4) {
        float2 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = *reinterpret_cast<const float2*>(tile + (t + u) * entry + col2);
#pragma unroll
        for (int h = 0; h < HMAX; ++h)
          if (h < H) {
            const float4 p = *reinterpret_cast<const float4*>(&s_p[h][t]);
            acc[h].x = fmaf(p.x, v[0].x, fmaf(p.y, v[1].x, fmaf(p.z, v[2].x, fmaf(p.w, v[3].x, acc[h].x))));
            acc[h].y = fmaf(p.x, v[0].y, fmaf(p.y, v[1].y, fmaf(p.z, v[2].y, fmaf(p.w, v[3].y, acc[h].y))));
          }
      }
    }
  }

  // An empty row's item runs no tile, so no barrier of the loop orders the state's
  // initialisation (threads < HMAX) before these reads (compute-sanitizer racecheck, H200).
  __syncthreads();
  if (col2 < lat) {
#pragma unroll
    for (int h = 0; h < HMAX; ++h) {
      if (h >= H) break;
      const float l = s_l[h], inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float2 o = make_float2(acc[h].x * inv, acc[h].y * inv);
      float* dst = slot < 0 ? a.o_lat + (static_cast<int64_t>(row) * H + h) * lat
                            : part_o + (static_cast<int64_t>(slot) * H + h) * lat;
      *reinterpret_cast<float2*>(dst + col2) = o;
    }
  }
  if (slot >= 0 && threadIdx.x < H) {
    const float l = s_l[threadIdx.x];
    part_lse[static_cast<int64_t>(slot) * H + threadIdx.x] = l > 0.0f ? s_m[threadIdx.x] + log2f(l) : -INFINITY;
  }
  if (slot >= 0 && counters) {
    asm volatile("cp.async.wait_all;\n" ::);  // the tile stages become the merge's weights
    fused_merge_tail(a, plan, row, item, part_o, part_lse, counters, tiles);
  }
  if (late_trigger) pdl_trigger();  // MlaDecodeTrigger::kLate: the merge launches as the run's CTAs finish
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
template <int NH, bool BULK, int TILE, int STAGES, bool LEAN = false, bool FILL = false>
__global__ void __launch_bounds__(kThreads, 2)
    mla_decode_warp_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan, float* part_o, float* part_lse,
                           int32_t* counters, bool dynamic_tiles, bool late_trigger) {
  extern __shared__ float4 smem_raw[];
  static_assert(TILE % kWarps == 0 && TILE <= kTile * 2 && TILE * STAGES <= kTile * kStages, "the ring fits run_shared_bytes");
  constexpr int kPerWarp = TILE / kWarps;  // tokens of a tile each warp scores
  float* tiles = reinterpret_cast<float*>(smem_raw);  // [STAGES][TILE][entry]; then the warps' states
  __shared__ float s_m[kWarps][NH], s_l[kWarps][NH];
  __shared__ __align__(8) uint64_t s_full[STAGES];  // BULK: stage s's tile has landed
  __shared__ int s_t0[STAGES];                      // dynamic tiles: the token stage s starts at (-1: none left)
  __shared__ int s_valid[STAGES];                   // LEAN: stage s's tokens to score (0: a negative page)
  static_assert(!LEAN || BULK, "the lean kernel takes the bulk loader");
  const int item = blockIdx.x;
  if (item >= plan[0]) return;
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
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
  pdl_wait();  // q and the cache may come from the kernels before (only the plan is read above)
  if (!late_trigger) pdl_trigger();  // MlaDecodeTrigger::kEarly
  // Tile [t0, t0 + TILE) into stage `st`: kCpAsync = one commit group (every thread);
  // BULK = thread 0 arms the stage's barrier with the valid bytes (pages hold whole tiles).
  auto issue = [&](int t0, int st) {
    float* dst = tiles + st * TILE * entry;
    if constexpr (BULK) {
      if (threadIdx.x == 0) {
        const int page = table[t0 / ps];
        const unsigned bytes = page < 0 ? 0u : static_cast<unsigned>(min(TILE, end - t0) * entry * 4);
        // Read by the scoring warps after the barrier of the tile's arrival (the stage's last
        // reader passed the barrier before this issue).
        if constexpr (LEAN) s_valid[st] = page < 0 ? 0 : min(TILE, end - t0);
        if (bytes > 0) {
          mbar_arrive_expect_tx(&s_full[st], bytes);
          bulk_copy(dst, a.cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, bytes, &s_full[st]);
        } else {
          mbar_arrive(&s_full[st]);
        }
      }
    } else {
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
      const unsigned bytes = static_cast<unsigned>(min(TILE, end - t0) * entry * 4);
      mbar_arrive_expect_tx(&s_full[st], bytes);
      bulk_copy(tiles + st * TILE * entry, a.cache + (static_cast<int64_t>(page) * ps + t0 % ps) * entry, bytes, &s_full[st]);
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
  constexpr int kAhead = STAGES > kStages || FILL ? STAGES : STAGES - 1;
  if (dynamic) {
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
    }
    const float* tile = tiles + (i % STAGES) * TILE * entry;
    __syncthreads();  // tile i visible; every warp is past tile i-1, so its stage is free
    const bool issued = i + STAGES - 1 < kAhead;  // in the prologue already
    if (dynamic) {
      if (threadIdx.x == 0 && !issued) issue_dynamic((i + STAGES - 1) % STAGES);
    } else if (!issued && i + STAGES - 1 < ntiles) {
      issue(t0 + (STAGES - 1) * TILE, (i + STAGES - 1) % STAGES);
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
      const float* r = tile + t * entry;
#pragma unroll
      for (int h = 0; h < NH; ++h) s[u][h] = 0.0f;
      if constexpr (LEAN) continue;  // scored below, the warp's tokens side by side
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int e = 64 * k + 2 * lane;
        if (e < entry) {
          const float2 v = *reinterpret_cast<const float2*>(r + e);
#pragma unroll
          for (int h = 0; h < NH; ++h) s[u][h] = fmaf(q[h][k].x, v.x, fmaf(q[h][k].y, v.y, s[u][h]));
        }
      }
    }
    if constexpr (LEAN) {
      // Slot-major: both tokens' loads of a slot are issued together (two in flight, not one).
      const float* r = tile + warp * entry + 2 * lane;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        float2 v[kPerWarp];
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u) v[u] = *reinterpret_cast<const float2*>(r + u * kWarps * entry + 64 * k);
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
      const float* r = tile + (warp + u * kWarps) * entry;
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
        const float4 v = *reinterpret_cast<const float4*>(r + d);
#pragma unroll
        for (int h = 0; h < NH; ++h)
          acc[h][k] = make_float4(fmaf(p[h], v.x, acc[h][k].x), fmaf(p[h], v.y, acc[h][k].y), fmaf(p[h], v.z, acc[h][k].z),
                                  fmaf(p[h], v.w, acc[h][k].w));
      }
    }
  }

  // Combine the warps: states through shared memory (the tile stages are free once drained).
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  float* s_acc = tiles;  // [kWarps][NH][lat]; fits: 8 NH lat <= 48 entry for NH <= 6
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
      float* dst = slot < 0 ? a.o_lat + (static_cast<int64_t>(row) * NH + h) * lat : part_o + (static_cast<int64_t>(slot) * NH + h) * lat;
      *reinterpret_cast<float2*>(dst + col2) = make_float2(o.x * inv, o.y * inv);
    }
    if (slot >= 0 && threadIdx.x == 0) part_lse[static_cast<int64_t>(slot) * NH + h] = L > 0.0f ? mx + log2f(L) : -INFINITY;
  }
  // The combine's states (s_acc) are read before arrive_last's barrier; then tiles hold the weights.
  if (slot >= 0 && counters) fused_merge_tail(a, plan, row, item, part_o, part_lse, counters, tiles);
  if (late_trigger) pdl_trigger();  // MlaDecodeTrigger::kLate: the merge launches as the run's CTAs finish
}

// Grid (row, head, 64-dim slice): rows with one item were written by the run; rows with none
// get zeros; rows with several combine their partials weighted by 2^(lse - max). The 8 warps
// split the items (a warp reads 256 contiguous bytes of each), lane = two dims.
constexpr int kMergeStaged = 1024;  // the merge kernel keeps up to this many items' weights in shared memory

// Grid (row, head, 64-dim slice): rows with one item were written by the run; rows with
// several combine their partials weighted by 2^(lse - max). All 256 threads read the lse
// values at once into shared memory (one round trip to L2, then block reductions); the 8 warps
// split the items (a warp reads 256 contiguous bytes of each), lane = two dims.
// EARLY (MlaDecodeMerge::kSeparate, the plan's pick for rows of many items): each warp issues the loads of its first
// kMergeEarly items into registers BEFORE the weights' round trip (they do not depend on it),
// so a row of up to 8 x kMergeEarly items costs one L2 round trip after the run, not one for
// the weights plus one per 8 items a warp (4 more at 256 items: 1 x 16K, 1 x 64K).
// !EARLY (kSeparateChained and kAuto, the eighth version's merge): weights first, then 8 items a warp in flight.
constexpr int kMergeEarly = 32;
template <bool EARLY>
__global__ void __launch_bounds__(kThreads) mla_merge_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan,
                                                             const float* __restrict__ part_o, const float* __restrict__ part_lse) {
  __shared__ float s_w[kMergeStaged];
  __shared__ float s_red[2][kWarps];
  __shared__ float2 s_acc[kWarps][32];
  const int row = blockIdx.x, h = blockIdx.y, capacity = plan[2];
  const int32_t* info = plan + 4 + 4 * capacity + 4 * row;
  const int first = info[0], n = info[1];
  if (n == 1) return;  // written by the run (a row without tokens too: its one empty item)
  pdl_wait();  // the run's partials (and, for the zero rows, nothing before us reads o_lat)
  pdl_trigger();
  const int H = static_cast<int>(a.heads), lat = static_cast<int>(a.latent_dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, d = blockIdx.z * 64 + 2 * lane;
  float* out = a.o_lat + (static_cast<int64_t>(row) * H + h) * lat;
  if (n == 0) {
    if (warp == 0 && d < lat) *reinterpret_cast<float2*>(out + d) = make_float2(0.0f, 0.0f);
    return;
  }
  const float* lse = part_lse + static_cast<int64_t>(first) * H + h;
  const bool staged = n <= kMergeStaged;  // else the weights come from L2 again below
  const float2* src = reinterpret_cast<const float2*>(part_o + (static_cast<int64_t>(first) * H + h) * lat + d);
  const int64_t item_stride = static_cast<int64_t>(H) * lat / 2;  // float2 from one item's partial to the next
  float2 early[EARLY ? kMergeEarly : 1];
  if constexpr (EARLY) {
#pragma unroll
    for (int k = 0; k < kMergeEarly; ++k) {
      const int i = warp + k * kWarps;
      early[k] = d < lat && i < n ? __ldcg(src + i * item_stride) : make_float2(0.0f, 0.0f);
    }
  }
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = lse[static_cast<int64_t>(i) * H];
    if (staged) s_w[i] = v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  if (lane == 0) s_red[0][warp] = mx;
  __syncthreads();
  float m = s_red[0][0];
#pragma unroll
  for (int k = 1; k < kWarps; ++k) m = fmaxf(m, s_red[0][k]);
  float sum = 0.0f;
  if (m != -INFINITY)
    for (int i = threadIdx.x; i < n; i += kThreads) {  // each thread its own items: no barrier needed
      const float w = exp2f((staged ? s_w[i] : lse[static_cast<int64_t>(i) * H]) - m);
      if (staged) s_w[i] = w;
      sum += w;
    }
  sum = warp_sum(sum);
  if (lane == 0) s_red[1][warp] = sum;
  __syncthreads();  // the weights and the partial sums
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) total += s_red[1][k];
  const float inv = m == -INFINITY ? 0.0f : 1.0f / total;
  float2 acc = make_float2(0.0f, 0.0f);
  if (d < lat && m != -INFINITY) {
    int i0 = warp;
    if constexpr (EARLY) {
#pragma unroll
      for (int k = 0; k < kMergeEarly; ++k) {
        const int i = warp + k * kWarps;
        if (i < n) {
          const float w = staged ? s_w[i] : exp2f(lse[static_cast<int64_t>(i) * H] - m);
          acc = make_float2(fmaf(w, early[k].x, acc.x), fmaf(w, early[k].y, acc.y));
        }
      }
      i0 += kMergeEarly * kWarps;
    }
#pragma unroll 8
    for (int i = i0; i < n; i += kWarps) {
      const float w = staged ? s_w[i] : exp2f(lse[static_cast<int64_t>(i) * H] - m);
      const float2 v = *reinterpret_cast<const float2*>(part_o + ((static_cast<int64_t>(first) + i) * H + h) * lat + d);
      acc = make_float2(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y));
    }
  }
  s_acc[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && d < lat) {
    float2 o = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kWarps; ++k) o = make_float2(o.x + s_acc[k][lane].x, o.y + s_acc[k][lane].y);
    *reinterpret_cast<float2*>(out + d) = make_float2(o.x * inv, o.y * inv);
  }
}

template <typename Kernel>
cudaError_t opt_in_shared(Kernel kernel) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kTile * kMaxEntry * sizeof(float));
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
}

// The tile stages; at least the fused merge's weights (kMlaMaxMergeFanIn x heads floats).
size_t run_shared_bytes(const MlaDecodeArgs& a) {
  return std::max<size_t>(kStages * kTile * (a.latent_dim + a.rope_dim), kMlaMaxMergeFanIn * a.heads) * sizeof(float);
}

template <int NH, bool BULK, int TILE, int STAGES, bool LEAN = false, bool FILL = false>
Status launch_warp_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, int32_t* counters, cudaStream_t stream) {
  const size_t smem = run_shared_bytes(a);
  constexpr auto kernel = mla_decode_warp_kernel<NH, BULK, TILE, STAGES, LEAN, FILL>;
  static const cudaError_t opt_in = opt_in_shared(kernel);  // first (eager) call, never in a capture
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (shared memory opt-in)");
  const cudaError_t e = launch_pdl(w.pdl, kernel, dim3(static_cast<unsigned>(w.launch_items)), dim3(kThreads),
                                   smem, stream, a, w.plan, w.part_o, w.part_lse, counters, w.dynamic_tiles,
                                   w.trigger == MlaDecodeTrigger::kLate);
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (warp variant)");
  return last_launch_status("mla_decode_run (warp variant)");
}

// The deep ring only with the bulk loader (the cp.async form stays the measured kShallow one)
// and without dynamic tiles (their queue is tuned to kShallow's tile).
template <int NH>
Status launch_warp_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, bool bulk, MlaDecodeRing ring, int32_t* counters,
                       cudaStream_t stream) {
  if (!bulk) return launch_warp_run<NH, false, kTile, kStages>(a, w, counters, stream);
  // The lean kernel: K3's widths only, fixed tile ranges; else the same ring without it.
  const bool lean = a.latent_dim == 512 && a.rope_dim == 64 && !(w.dynamic_tiles && counters);
  if (ring == MlaDecodeRing::kLeanDeep && lean) return launch_warp_run<NH, true, kTile / 2, 2 * kStages, true>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kDeep || ring == MlaDecodeRing::kLeanDeep)
    return launch_warp_run<NH, true, kTile / 2, 2 * kStages>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLean && lean) return launch_warp_run<NH, true, kTile, kStages, true>(a, w, counters, stream);
  if (ring == MlaDecodeRing::kLeanBurst && lean) return launch_warp_run<NH, true, kTile, kStages, true, true>(a, w, counters, stream);
  return launch_warp_run<NH, true, kTile, kStages>(a, w, counters, stream);
}

template <int HMAX>
Status launch_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, int32_t* counters, cudaStream_t stream) {
  const size_t smem = run_shared_bytes(a);
  // Above the 48 KiB default (two CTAs of 108 KiB fit an SM): opted in once, on the first
  // (eager) call, never inside a capture.
  static const cudaError_t opt_in = [] {
    const cudaError_t e = cudaFuncSetAttribute(mla_decode_kernel<HMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kStages * kTile * kMaxEntry * sizeof(float));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(mla_decode_kernel<HMAX>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  }();
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (shared memory opt-in)");
  const cudaError_t e = launch_pdl(w.pdl, mla_decode_kernel<HMAX>, dim3(static_cast<unsigned>(w.launch_items)), dim3(kThreads), smem,
                                   stream, a, w.plan, w.part_o, w.part_lse, counters, w.trigger == MlaDecodeTrigger::kLate);
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run");
  return last_launch_status("mla_decode_run");
}

}  // namespace

Status mla_decode_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream) {
  if (!mla_decode_supported(a.heads, a.latent_dim, a.rope_dim)) return invalid_argument("mla_decode_run: unsupported shape");
  if (a.page_size <= 0 || w.launch_items > w.capacity) return invalid_argument("mla_decode_run: bad page size or launch count");
  if (a.rows == 0) return Status::ok();
  const bool warp_variant = w.variant == MlaDecodeVariant::kWarp ||
                            (w.variant == MlaDecodeVariant::kAuto && a.heads <= 3 && a.latent_dim % 4 == 0);
  if (warp_variant && (a.heads > 3 || a.latent_dim % 4 != 0))
    return invalid_argument("mla_decode_run: the warp variant takes <= 3 heads and latent_dim % 4 == 0");
  // Bulk copies need a tile to lie inside one page.
  const bool bulk = w.loader != MlaDecodeLoader::kCpAsync && a.page_size % kTile == 0 &&
                    (w.loader == MlaDecodeLoader::kBulk || kMlaDefaultLoaderIsBulk);
  const bool fused = w.merge_mode == MlaDecodeMerge::kFused ||
                     (w.merge_mode == MlaDecodeMerge::kAuto && kMlaDefaultMergeFused && w.counters != nullptr);
  if (fused && w.counters == nullptr) return invalid_argument("mla_decode_run: the fused merge needs the counters workspace");
  int32_t* counters = fused ? w.counters : nullptr;  // null: the run leaves split rows to the separate merge
  const MlaDecodeRing ring = w.dynamic_tiles && fused ? MlaDecodeRing::kShallow  // the queue is tuned to the shallow tile
                             : w.ring == MlaDecodeRing::kAuto ? kMlaDefaultRing
                                                              : w.ring;
  if (w.launch_items > 0 && warp_variant) {
    Status s = a.heads == 1   ? launch_warp_run<1>(a, w, bulk, ring, counters, stream)
               : a.heads == 2 ? launch_warp_run<2>(a, w, bulk, ring, counters, stream)
                              : launch_warp_run<3>(a, w, bulk, ring, counters, stream);
    PDS_RETURN_IF_ERROR(s);
  } else if (w.launch_items > 0) {
    Status s = a.heads <= 3    ? launch_run<3>(a, w, counters, stream)
               : a.heads <= 4  ? launch_run<4>(a, w, counters, stream)
               : a.heads <= 8  ? launch_run<8>(a, w, counters, stream)
               : a.heads <= 16 ? launch_run<16>(a, w, counters, stream)
                               : launch_run<32>(a, w, counters, stream);
    PDS_RETURN_IF_ERROR(s);
  }
  if (fused || !w.merge) return Status::ok();
  const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>(a.heads), static_cast<unsigned>((a.latent_dim + 63) / 64));
  // kSeparate: the early-load form; kAuto and kSeparateChained: the chained one.
  const cudaError_t e = w.merge_mode == MlaDecodeMerge::kSeparate
                            ? launch_pdl(w.pdl, mla_merge_kernel<true>, grid, dim3(kThreads), 0, stream, a, w.plan, w.part_o, w.part_lse)
                            : launch_pdl(w.pdl, mla_merge_kernel<false>, grid, dim3(kThreads), 0, stream, a, w.plan, w.part_o, w.part_lse);
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (merge)");
  return last_launch_status("mla_decode_run (merge)");
}

}  // namespace pdserve::cuda
