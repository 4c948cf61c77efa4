// Device half of the split-KV MLA decode (mla_decode.h): mla_decode_run's dispatch and the block
// variant's run kernel (one CTA per plan item, all heads of its row over shared page tiles).
// The warp variant and the separate merge: mla_decode_warp_sm90.cu, mla_decode_merge_sm90.cu.
#include "mla/mla_decode_sm90.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_decode_detail;
// kAuto's loader: bulk, from the H200 measurement (docs/perf.md, "MLA split-KV latent decode
// on the H200", fourth version).
constexpr bool kMlaDefaultLoaderIsBulk = true;
// MlaDecodeRing::kAuto in the run (callers pass the plan's pick instead): the shallow ring.
constexpr MlaDecodeRing kMlaDefaultRing = MlaDecodeRing::kShallow;

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

template <int HMAX>
Status launch_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, int32_t* counters, cudaStream_t stream) {
  const size_t smem = run_shared_bytes(a);
  // Above the 48 KiB default (two CTAs of 108 KiB fit an SM): opted in once a GPU, on its first
  // (eager) call, never inside a capture.
  static PerDevice<cudaError_t> opted_in;
  const cudaError_t opt_in = opted_in.get([] {
    const cudaError_t e = cudaFuncSetAttribute(mla_decode_kernel<HMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kStages * kTile * kMaxEntry * sizeof(float));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(mla_decode_kernel<HMAX>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  });
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
  if (w.new_tokens < 0) return invalid_argument("mla_decode_run: new_tokens < 0");
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
  if (w.timeline != nullptr && !warp_variant) return invalid_argument("mla_decode_run: the timeline takes the warp variant only");
  if (a.cache_bf16 != nullptr) {
    // A bf16 cache: the lean forms only (mla_decode.h, MlaDecodeWork::bf16_stages).
    if (!warp_variant) return invalid_argument("mla_decode_run: a bf16 cache takes <= 3 heads (the lean forms; no block variant)");
    if (a.latent_dim != 512 || a.rope_dim != 64) return invalid_argument("mla_decode_run: a bf16 cache takes latent 512 + key 64 only");
    if (!bulk) return invalid_argument("mla_decode_run: a bf16 cache needs the bulk loader (pages a multiple of 16 tokens)");
    if (w.merge_mode == MlaDecodeMerge::kCluster || w.timeline != nullptr || (w.dynamic_tiles && fused))
      return invalid_argument("mla_decode_run: a bf16 cache takes no cluster merge, timeline or dynamic tiles");
    if (w.bf16_stages != 0 && w.bf16_stages != 3 && w.bf16_stages != 6) return invalid_argument("mla_decode_run: bf16_stages must be 0, 3 or 6");
  }
  if (w.merge_mode == MlaDecodeMerge::kCluster) {
    if (!warp_variant) return invalid_argument("mla_decode_run: the cluster merge takes the warp variant (<= 3 heads)");
    if (w.timeline != nullptr) return invalid_argument("mla_decode_run: the timeline does not take the cluster merge");
    if (w.cluster < 1 || w.cluster > kMlaClusterMaxCtas || a.rows * w.cluster > w.capacity)
      return invalid_argument("mla_decode_run: the cluster merge needs 1..16 items a row within the capacity");
    return launch_cluster_variant(a, w, bulk, w.ring == MlaDecodeRing::kAuto ? kMlaClusterRing : w.ring, stream);
  }
  int32_t* counters = fused ? w.counters : nullptr;  // null: the run leaves split rows to the separate merge
  const MlaDecodeRing ring = w.dynamic_tiles && fused ? MlaDecodeRing::kShallow  // the queue is tuned to the shallow tile
                             : w.ring == MlaDecodeRing::kAuto ? (a.cache_bf16 != nullptr ? MlaDecodeRing::kLean : kMlaDefaultRing)
                                                              : w.ring;
  if (w.launch_items > 0 && warp_variant) {
    PDS_RETURN_IF_ERROR(launch_warp_variant(a, w, bulk, ring, counters, stream));
  } else if (w.launch_items > 0) {
    Status s = a.heads <= 3    ? launch_run<3>(a, w, counters, stream)
               : a.heads <= 4  ? launch_run<4>(a, w, counters, stream)
               : a.heads <= 8  ? launch_run<8>(a, w, counters, stream)
               : a.heads <= 16 ? launch_run<16>(a, w, counters, stream)
                               : launch_run<32>(a, w, counters, stream);
    PDS_RETURN_IF_ERROR(s);
  }
  if (fused || !w.merge) return Status::ok();
  return launch_merge(a, w, stream);
}

}  // namespace pdserve::cuda
