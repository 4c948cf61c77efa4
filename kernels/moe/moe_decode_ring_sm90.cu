// kWeightsAPdlRing* (branch moedec14; contract: moe_decode.h): kWeightsAPdlF32's two launches
// (blocked units, the down launch a programmatic dependent one, the fp32-scale MMA step, the
// reduction through shared memory) with the weights streamed through shared memory by a
// PER-WARP bulk-copy ring instead of the register double buffer.
//
// Plan. Warp w owns chunks [kCpw w, kCpw w + kCpw) of every unit (kCpw = 2: 14 warps at K3's
// gate/up, 28 chunks, and 12 at its down, 24 chunks, so every warp carries the same work and the
// per-unit barrier waits on no 2-chunk warp while 1-chunk warps idle; kCpw = 1: 28 / 24 warps, 72
// registers a thread). It has its own kRingStages slots in shared memory and an mbarrier a slot;
// its lane 0 copies a unit's part with 8 cp.async.bulk (the kCpw contiguous chunks of each of the
// 4 tiles: packed, then scales) into a slot. No producer warp, no CTA-wide barrier for loads. Per
// unit the warp waits on its slot, reads its words with 16-byte shared loads into registers
// (kCpw x 4 x (16 + 4) bytes: 40 registers at kCpw = 2, where the register double buffer held two
// units, 80), re-arms the slot for the unit kRingStages on and only then runs the MMAs, so the
// next two units' copies are in flight during this unit's MMAs. The CTA has at least 8 warps
// (the reduction's 256 threads); warps with no chunk (small dims) only join the barriers.
// Down: the first kRingStages units' copies are issued before griddepcontrol.wait.
// `pull` (kWeightsAPdlRingL2*): gate/up's last unit pulls the first two units of the down CTA of
// its index into L2, as kWeightsAPdlL2.
// Measured on the H200 (docs/perf.md, branch moedec14): correct; long-scoreboard stalls fall from
// 2.0-2.5 to 0.6-1.0 warp cycles an issue at B 16-64, but 14 / 12 warps issue no faster than 16
// (0.44-0.46 a cycle a scheduler) and the ring adds 5-13% instructions: 0.87-0.90x kWeightsAPdlL2 /
// F32 at B 1-64; one chunk a warp (7 warps a scheduler, 72 registers) 1.5-1.6x the instructions,
// 0.72-0.79x. Opt-in; kAuto never takes them.
#include <algorithm>
#include <cstdint>

#include "common/pdl_bulk.cuh"
#include "common/per_device.h"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wa.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

constexpr int kRingStages = 2;
constexpr int kRingMinWarps = 8;
constexpr uint32_t kTileBytes = 512u + 32u;  // packed + scales of one 8-row x 128-input tile

template <int kCpw>
struct Ring {
  static constexpr int kMaxWarps = kCpw == 1 ? 28 : 14;  // 28 chunks (dim, inter <= 3584): 72 or 144 registers a thread
  static constexpr int kMaxThreads = kMaxWarps * 32;
  static constexpr uint32_t kSlotBytes = uint32_t(kCpw) * 4u * kTileBytes;
  static constexpr uint32_t kScaleOff = uint32_t(kCpw) * 4u * 512u;  // the slot's scale bytes
};

// Dynamic shared memory: x_s (8 token rows), the reduction buffers (nbuf x warps x 4 x 8 x 8
// fp32), the rings (warps x stages x slot), the mbarriers (warps x stages).
struct RingGeo {
  uint32_t red_off, ring_off, bar_off, total;
  int nbuf;
};

template <int kCpw>
RingGeo ring_geo(int64_t cols, int warps, int nbuf) {
  RingGeo g{};
  g.nbuf = nbuf;
  g.red_off = static_cast<uint32_t>((size_t(kWaTokens) * (cols + kStagedPad) * sizeof(uint16_t) + 127) / 128 * 128);
  g.ring_off = g.red_off + uint32_t(nbuf) * uint32_t(warps) * 4u * kWaTokens * 8u * 4u;
  g.bar_off = g.ring_off + uint32_t(warps) * kRingStages * Ring<kCpw>::kSlotBytes;
  g.total = g.bar_off + uint32_t(warps) * kRingStages * 8u;
  return g;
}

template <bool kGated, bool kWide, int kCpw>
__global__ void __launch_bounds__(Ring<kCpw>::kMaxThreads, 1)
    decode_gemm_wr(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts, const float* __restrict__ x,
                   float* __restrict__ y, MoeAct act, Mxfp4Decode next, uint32_t next_grid, RingGeo geo) {
  using R = Ring<kCpw>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  uint16_t* x_s = reinterpret_cast<uint16_t*>(smem);
  float* red = reinterpret_cast<float*>(smem + geo.red_off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, g = lane >> 2, t = lane & 3;
  uint8_t* my_ring = smem + geo.ring_off + uint32_t(warp) * kRingStages * R::kSlotBytes;
  uint64_t* my_bar = reinterpret_cast<uint64_t*>(smem + geo.bar_off) + warp * kRingStages;
  if constexpr (kGated) pdl_bulk::pdl_trigger();  // the down launch may be scheduled now
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kRingStages; ++s) pdl_bulk::mbar_init(&my_bar[s], 1);
    pdl_bulk::mbar_init_fence();
  }
  list_touched_experts(offsets, experts, s_list, &s_count);
  __syncthreads();
  const uint32_t tiles = static_cast<uint32_t>(a.rows / 8), chunks = static_cast<uint32_t>(a.cols / 128);
  const WaSpace sp{s_list, tiles, chunks, kGated ? tiles / 2 : tiles / 4};
  const uint32_t all = uint32_t(s_count) * sp.per_expert, per = (all + gridDim.x - 1) / gridDim.x;
  const uint32_t u0 = blockIdx.x * per, units = min(all, u0 + per);
  if (kGated && next_grid && u0 >= units) wa_prefetch_next_start<kL2First>(next, s_list, s_count, next_grid, threadIdx.x);  // idle CTA
  const uint32_t c0 = uint32_t(warp) * kCpw;
  const uint32_t nch = c0 < chunks ? min(uint32_t(kCpw), chunks - c0) : 0u;
  // The whole warp (uniform): unit v's part of this warp into slot `slot`. Lane 0 arms the slot's
  // mbarrier with the byte count, then lanes 0-7 issue one bulk copy each (lane 2k: tile k's packed
  // bytes, lane 2k + 1 its scales), so the address work is spread over lanes, not serial in one.
  auto issue = [&](uint32_t v, int slot) {
    int e;
    uint32_t n;
    wa_unit<kGated>(sp, v, &e, &n);
    if (lane == 0) pdl_bulk::mbar_arrive_expect_tx(&my_bar[slot], nch * 4u * kTileBytes);
    __syncwarp();
    if (lane < 8) {
      const int k = lane >> 1;
      const bool sc = lane & 1;
      const bool second = kGated && k >= 2;
      const uint8_t* base = sc ? (second ? b.scales : a.scales) : (second ? b.packed : a.packed);
      const size_t tile = size_t((uint32_t(e) * tiles + n) * chunks + c0) + size_t(kGated ? (k & 1) : k) * chunks;
      uint8_t* dst = my_ring + uint32_t(slot) * R::kSlotBytes + (sc ? R::kScaleOff + uint32_t(k * kCpw * 32) : uint32_t(k * kCpw * 512));
      pdl_bulk::bulk_copy(dst, base + tile * (sc ? 32u : 512u), nch * (sc ? 32u : 512u), &my_bar[slot]);
    }
  };
  if (nch)
    for (int s = 0; s < kRingStages; ++s)
      if (u0 + s < units) issue(u0 + s, s);
  bool waited = false;
  int staged_e = -1, staged_r0 = -1, buf = 0;
  const uint32_t cols = static_cast<uint32_t>(a.cols), stride = cols + kStagedPad;
  const uint16_t* xg = x_s + g * stride + 8 * t;
  for (uint32_t v = u0, it = 0; v < units; ++v, ++it) {
    const int slot = int(it % kRingStages);
    uint4 q[kCpw][4];
    uint32_t s[kCpw][4];
    if (nch) {
      pdl_bulk::mbar_wait(&my_bar[slot], (it / kRingStages) & 1u);
      const uint8_t* src = my_ring + uint32_t(slot) * R::kSlotBytes;
#pragma unroll
      for (int j = 0; j < kCpw; ++j)
        if (uint32_t(j) < nch) {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            q[j][k] = *reinterpret_cast<const uint4*>(src + (k * kCpw + j) * 512 + lane * 16);
            s[j][k] = *reinterpret_cast<const uint32_t*>(src + R::kScaleOff + (k * kCpw + j) * 32 + g * 4);
          }
        }
      __syncwarp();  // every lane's reads of the slot are done: it may be refilled
      if (v + kRingStages < units) issue(v + kRingStages, slot);
    }
    if (kGated && next_grid && v + 1 >= units) wa_prefetch_next_start<kL2First>(next, s_list, s_count, next_grid, threadIdx.x);
    if (!kGated && !waited) pdl_bulk::pdl_wait(), waited = true;  // the first units' copies are out: now x may be read
    int e;
    uint32_t n;
    wa_unit<kGated>(sp, v, &e, &n);
    const int begin = offsets[e], end = offsets[e + 1];
    for (int r0 = begin; r0 < end; r0 += kWaTokens) {
      const int nrows = min(kWaTokens, end - r0);
      if (staged_e != e || staged_r0 != r0) {  // uniform; the last pass's barrier ended all x_s reads
        stage_rows<false, !kWide>(x, r0, nrows, cols, stride, x_s, threadIdx.x, blockDim.x);
        staged_e = e, staged_r0 = r0;
        __syncthreads();
      }
      float(*s_red)[4][kWaTokens][8] = reinterpret_cast<float(*)[4][kWaTokens][8]>(red + buf * nwarps * (4 * kWaTokens * 8));
      if (geo.nbuf == 2) buf ^= 1;
      float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      if (!kWide && nch == uint32_t(kCpw)) {  // every chunk: one accumulator set each, so the chunks' chains are independent
        float accs[kCpw][2][4];
#pragma unroll
        for (int j = 0; j < kCpw; ++j) {
#pragma unroll
          for (int p = 0; p < 2; ++p)
#pragma unroll
            for (int r = 0; r < 4; ++r) accs[j][p][r] = 0.0f;
          wa_chunk_f32(q[j], s[j], xg + (c0 + j) * 128, accs[j]);
        }
#pragma unroll
        for (int j = 0; j < kCpw; ++j)
#pragma unroll
          for (int p = 0; p < 2; ++p)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[p][r] += accs[j][p][r];
      } else {
#pragma unroll
        for (int j = 0; j < kCpw; ++j) {
          if (uint32_t(j) >= nch) break;
          const uint32_t c = c0 + j;
          if constexpr (kWide)
            wa_chunk<true>(q[j], s[j], xg + c * 128, g < nrows, acc);
          else
            wa_chunk_f32(q[j], s[j], xg + c * 128, acc);
        }
      }
      wa_store_partials(acc, s_red[warp], g, t);
      __syncthreads();
      const int k = threadIdx.x / (kWaTokens * 8), tok = (threadIdx.x / 8) % kWaTokens, rr = threadIdx.x % 8;
      if (k < (kGated ? 2 : 4) && tok < nrows) {
        float va = 0.0f, vb = 0.0f;
#pragma unroll
        for (int w = 0; w < R::kMaxWarps; ++w) {
          if (w >= nwarps) break;
          va += s_red[w][k][tok][rr];
          if constexpr (kGated) vb += s_red[w][k + 2][tok][rr];
        }
        y[int64_t(r0 + tok) * a.rows + int64_t(n + k) * 8 + rr] = kGated ? act(va, vb) : va;
      }
      if (geo.nbuf == 1) __syncthreads();  // one reduction buffer: its reads end before the next pass writes
    }
  }
  if (!kGated && !waited) pdl_bulk::pdl_wait();  // no work: still complete only after gate/up
}

// Warps of a CTA for `chunks` 128-input chunks, 0 where more than the form takes.
template <int kCpw>
int ring_warps(int64_t chunks) {
  const int64_t w = std::max<int64_t>(kRingMinWarps, (chunks + kCpw - 1) / kCpw);
  return w > Ring<kCpw>::kMaxWarps ? 0 : static_cast<int>(w);
}

// The opt-in dynamic shared memory of one CTA (less the kernels' static part), queried once.
Result<uint32_t> ring_smem_limit() {
  static PerDevice<int> optin_on;  // per GPU, thread-safe (common/per_device.h)
  const int optin = optin_on.get([] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
    return v;
  });
  if (optin == 0) return internal_error("moe_expert_mlp_decode: the shared memory opt-in limit could not be read");
  return static_cast<uint32_t>(optin) - uint32_t(kMaxExperts) * 4u - 256u;  // the static part: the expert list and count (4224 bytes)
}

template <int kCpw>
Result<RingGeo> ring_fit(int64_t cols, int warps) {
  PDS_ASSIGN_OR_RETURN(uint32_t limit, ring_smem_limit());
  RingGeo g = ring_geo<kCpw>(cols, warps, 2);
  if (g.total > limit) g = ring_geo<kCpw>(cols, warps, 1);
  if (g.total > limit) return invalid_argument("moe_expert_mlp_decode: the ring form's shared memory does not fit (dim, inter too wide)");
  return g;
}

template <bool kWideGate, bool kWideDown, int kCpw>
Status launch_wr(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out, const MoeAct& fn,
                 cudaStream_t stream, bool pull) {
  const int warps_g = ring_warps<kCpw>(w.w1.cols / 128), warps_d = ring_warps<kCpw>(w.w2.cols / 128);
  if (warps_g == 0 || warps_d == 0) return invalid_argument("moe_expert_mlp_decode: the ring forms take dim, inter <= 3584 (28 chunks)");
  PDS_ASSIGN_OR_RETURN(RingGeo geo_g, ring_fit<kCpw>(w.w1.cols, warps_g));
  PDS_ASSIGN_OR_RETURN(RingGeo geo_d, ring_fit<kCpw>(w.w2.cols, warps_d));
  const auto gate = decode_gemm_wr<true, kWideGate, kCpw>;
  const auto down = decode_gemm_wr<false, kWideDown, kCpw>;
  PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, geo_g.total, experts * (w.w1.rows / 16), warps_g * 32));
  PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, geo_d.total, experts * (w.w2.rows / 32), warps_d * 32));
  gate<<<grid_g, warps_g * 32, geo_g.total, stream>>>(w.w1, w.w3, offsets, static_cast<int>(experts), x, act, fn, w.w2, pull ? grid_d : 0u, geo_g);
  PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up (ring)"));
  PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(warps_d * 32), geo_d.total, stream, w.w2, w.w2, offsets,
                                                       static_cast<int>(experts), static_cast<const float*>(act), out, fn, w.w2, 0u, geo_d),
                                  "moe decode down launch (ring)"));
  return last_launch_status("moe decode down (ring)");
}

template <int kCpw>
Status launch_wr_any(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                     const MoeAct& fn, cudaStream_t stream, bool pull) {
  const bool wg = w.w1.wide_scales || w.w3.wide_scales, wd = w.w2.wide_scales;
  if (wg)
    return wd ? launch_wr<true, true, kCpw>(w, offsets, experts, x, act, out, fn, stream, pull)
              : launch_wr<true, false, kCpw>(w, offsets, experts, x, act, out, fn, stream, pull);
  return wd ? launch_wr<false, true, kCpw>(w, offsets, experts, x, act, out, fn, stream, pull)
            : launch_wr<false, false, kCpw>(w, offsets, experts, x, act, out, fn, stream, pull);
}

}  // namespace

bool decode_ring_fits(int64_t dim, int64_t inter, int chunks_per_warp) {
  if (chunks_per_warp == 1) return ring_warps<1>(dim / 128) > 0 && ring_warps<1>(inter / 128) > 0;
  return ring_warps<2>(dim / 128) > 0 && ring_warps<2>(inter / 128) > 0;
}

Status launch_decode_ring(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                          const MoeAct& fn, cudaStream_t stream, int chunks_per_warp, bool pull) {
  return chunks_per_warp == 1 ? launch_wr_any<1>(w, offsets, experts, x, act, out, fn, stream, pull)
                              : launch_wr_any<2>(w, offsets, experts, x, act, out, fn, stream, pull);
}

}  // namespace pdserve::cuda::moe_decode_detail
