// Steps 1-2 of the MLA prefill (mla_prefill.h) and its run: gather the context's latents from the
// pages (an fp32 or a bf16 cache), up-project them per head on tensor cores into bf16 K/V, then
// the attention step. The up-projection here is the mma.sync form (MlaPrefillExpand::kMmaSync);
// the default wgmma form is in mla_prefill_expand_wgmma_sm90.cu.
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "mla/mma_bf16.cuh"

namespace pdserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

// Workspace carve-up, bf16 buffers aligned to 256 bytes.
struct Carve {
  size_t q = 0, k = 0, v = 0, lat = 0, w = 0, end = 0;
};
size_t align256(size_t b) { return (b + 255) / 256 * 256; }
Carve carve(const MlaPrefillArgs& a, int64_t rows, int64_t ctx) {
  const size_t qk = a.nope + a.rope;
  Carve c;
  c.k = c.q + align256(rows * a.heads * qk * 2);
  c.v = c.k + align256(ctx * a.heads * qk * 2);
  c.lat = c.v + align256(ctx * a.heads * a.v_dim * 2);
  c.w = c.lat + align256(ctx * a.latent_dim * 2);
  c.end = c.w + align256(a.heads * (a.nope + a.v_dim) * a.latent_dim * 2);
  return c;
}

__global__ void to_bf16_kernel(const float* __restrict__ x, int64_t n, bf16* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = __float2bfloat16(x[i]);
}

// The gather: each context token's latent -> lat [t][latent], its key part -> every head's K
// tail. T = float: rounded to nearest even (__float2bfloat16); T = uint16_t (a bf16 cache): the
// bits copied.
__device__ __forceinline__ uint16_t bf16_of(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
__device__ __forceinline__ uint16_t bf16_of(uint16_t x) { return x; }
__device__ __forceinline__ uint2 bf16x4_of(const float* p) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  return make_uint2(bf16_of(v.x) | uint32_t(bf16_of(v.y)) << 16, bf16_of(v.z) | uint32_t(bf16_of(v.w)) << 16);
}
__device__ __forceinline__ uint2 bf16x4_of(const uint16_t* p) { return *reinterpret_cast<const uint2*>(p); }

// Element form (any dims): one block per token.
template <typename T>
__global__ void gather_kernel(const T* __restrict__ cache, const int32_t* __restrict__ entries, int lat_dim, int rope, int nope,
                              int heads, uint16_t* __restrict__ lat, uint16_t* __restrict__ kb) {
  const int64_t t = blockIdx.x;
  const T* e = cache + int64_t(entries[t]) * (lat_dim + rope);
  const int qk = nope + rope;
  for (int i = threadIdx.x; i < lat_dim; i += blockDim.x) lat[t * lat_dim + i] = bf16_of(e[i]);
  for (int i = threadIdx.x; i < heads * rope; i += blockDim.x) {
    const int h = i / rope, d = i % rope;
    kb[(t * heads + h) * qk + nope + d] = bf16_of(e[lat_dim + d]);
  }
}

// 4-wide form: kGatherTok tokens a block of kGatherThreads, 4 values an access (a float4 or 8
// bytes of bf16 read, 8 bytes written). Thread i holds latent chunk i and key chunk i % (rope/4)
// of every token in registers, all loads issued before any store (the entry ids first), then
// writes the latent and its key chunk into heads i / (rope/4), i / (rope/4) + threads / (rope/4),
// ... The launcher checks: latent_dim, rope, nope multiples of 4, latent_dim / 4 <= threads,
// threads a multiple of rope / 4, the cache base aligned to 4 values.
constexpr int kGatherThreads = 128, kGatherTok = 4;
template <typename T>
__global__ void __launch_bounds__(kGatherThreads) gather4_kernel(const T* __restrict__ cache, const int32_t* __restrict__ entries,
                                                                 int ctx, int lat_dim, int rope, int nope, int heads,
                                                                 uint16_t* __restrict__ lat, uint16_t* __restrict__ kb) {
  const int tid = threadIdx.x, l4 = lat_dim / 4, r4 = rope / 4, qk = nope + rope, d = tid % r4;
  const int64_t t0 = int64_t(blockIdx.x) * kGatherTok;
  int32_t ent[kGatherTok];
#pragma unroll
  for (int j = 0; j < kGatherTok; ++j) ent[j] = t0 + j < ctx ? entries[t0 + j] : -1;
  uint2 lv[kGatherTok], kv[kGatherTok];
#pragma unroll
  for (int j = 0; j < kGatherTok; ++j) {
    if (ent[j] < 0) continue;
    const T* e = cache + int64_t(ent[j]) * (lat_dim + rope);
    if (tid < l4) lv[j] = bf16x4_of(e + 4 * tid);
    kv[j] = bf16x4_of(e + lat_dim + 4 * d);
  }
#pragma unroll
  for (int j = 0; j < kGatherTok; ++j) {
    if (ent[j] < 0) continue;
    const int64_t t = t0 + j;
    if (tid < l4) *reinterpret_cast<uint2*>(lat + t * lat_dim + 4 * tid) = lv[j];
    for (int h = tid / r4; h < heads; h += kGatherThreads / r4)
      *reinterpret_cast<uint2*>(kb + (t * heads + h) * qk + nope + 4 * d) = kv[j];
  }
}

template <typename T>
void launch_gather(const T* cache, const int32_t* entries, const MlaPrefillArgs& a, int64_t ctx, bf16* lat, bf16* kb,
                   cudaStream_t stream) {
  const int ld = static_cast<int>(a.latent_dim), rope = static_cast<int>(a.rope), nope = static_cast<int>(a.nope);
  const int heads = static_cast<int>(a.heads);
  auto* lat16 = reinterpret_cast<uint16_t*>(lat);
  auto* kb16 = reinterpret_cast<uint16_t*>(kb);
  const bool wide = ld % 4 == 0 && rope % 4 == 0 && nope % 4 == 0 && rope > 0 && ld / 4 <= kGatherThreads &&
                    kGatherThreads % (rope / 4) == 0 && (reinterpret_cast<uintptr_t>(cache) & (4 * sizeof(T) - 1)) == 0;
  if (wide)
    gather4_kernel<T><<<static_cast<unsigned>((ctx + kGatherTok - 1) / kGatherTok), kGatherThreads, 0, stream>>>(
        cache, entries, static_cast<int>(ctx), ld, rope, nope, heads, lat16, kb16);
  else
    gather_kernel<T><<<static_cast<unsigned>(ctx), 128, 0, stream>>>(cache, entries, ld, rope, nope, heads, lat16, kb16);
}

// C[t][n] = lat[t] . w[n] (n over heads x (nope + v)); 64 x 64 tiles, 4 warps of 16 rows, k in
// steps of 32 double-buffered with cp.async. The epilogue scatters C into K's nope part / V.
constexpr int kGT = 64, kGK = 32, kGS = kGK + 8;  // tile, k step, padded row (5 x 16 B: odd)
__global__ void __launch_bounds__(128) expand_kernel(const bf16* __restrict__ lat, const bf16* __restrict__ w, int ctx, int n_total,
                                                     int lat_dim, int nope, int qk, int vd, int heads, bf16* __restrict__ kb,
                                                     bf16* __restrict__ vb) {
  __shared__ __align__(16) bf16 as[2][kGT * kGS];
  __shared__ __align__(16) bf16 bs[2][kGT * kGS];
  const int t0 = blockIdx.y * kGT, n0 = blockIdx.x * kGT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  auto load = [&](int k0, int buf) {
    for (int i = tid; i < kGT * (kGK / 8); i += 128) {
      const int r = i / (kGK / 8), c = i % (kGK / 8);
      const bool ta = t0 + r < ctx, tb = n0 + r < n_total;
      cp_async16(&as[buf][r * kGS + c * 8], lat + int64_t(ta ? t0 + r : 0) * lat_dim + k0 + c * 8, ta ? 16 : 0);
      cp_async16(&bs[buf][r * kGS + c * 8], w + int64_t(tb ? n0 + r : 0) * lat_dim + k0 + c * 8, tb ? 16 : 0);
    }
  };
  float acc[kGT / 8][4] = {};
  const int steps = lat_dim / kGK;
  load(0, 0);
  cp_async_commit();
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<0>();
    __syncthreads();
    if (s + 1 < steps) load((s + 1) * kGK, (s + 1) & 1);
    cp_async_commit();
    const bf16* a_s = as[s & 1];
    const bf16* b_s = bs[s & 1];
#pragma unroll
    for (int k = 0; k < kGK / 16; ++k) {
      uint32_t a[4];
      ldmatrix_x4(a, a_s + (warp * 16 + lane % 16) * kGS + k * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < kGT / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, b_s + (np * 16 + lane % 8 + (lane / 16) * 8) * kGS + k * 16 + ((lane / 8) % 2) * 8);
        mma_bf16(acc[2 * np], a, b[0], b[1]);
        mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
  const int per_head = nope + vd;
#pragma unroll
  for (int t = 0; t < kGT / 8; ++t) {
    const int n = n0 + t * 8 + c4 * 2;  // even; nope and vd are even, so n + 1 is the same head and part
    if (n >= n_total) continue;
    const int h = n / per_head, d = n % per_head;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = t0 + warp * 16 + g + half * 8;
      if (row >= ctx) continue;
      const uint32_t v = pack_bf16(acc[t][2 * half], acc[t][2 * half + 1]);
      if (d < nope)
        *reinterpret_cast<uint32_t*>(kb + (row * heads + h) * qk + d) = v;
      else
        *reinterpret_cast<uint32_t*>(vb + (row * heads + h) * vd + d - nope) = v;
    }
  }
}

}  // namespace

bool mla_prefill_supported(int64_t nope, int64_t rope, int64_t v_dim, int64_t latent_dim) {
  const int64_t qk = nope + rope;
  const bool shape = (qk == 192 && v_dim == 128) || (qk == 32 && v_dim == 16);
  return shape && nope % 2 == 0 && latent_dim > 0 && latent_dim % kGK == 0;
}

size_t mla_prefill_workspace_bytes(const MlaPrefillArgs& a, int64_t rows, int64_t ctx_total) { return carve(a, rows, ctx_total).end; }

Status mla_prefill_expand_gemm(const void* lat, const void* w, int64_t ctx, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                               int64_t latent_dim, void* kb, void* vb, MlaPrefillExpand kind, cudaStream_t stream) {
  if (ctx <= 0) return Status::ok();
  if (!mla_prefill_supported(nope, rope, v_dim, latent_dim)) return invalid_argument("mla_prefill_expand_gemm: no kernel for these head dims");
  const int64_t qk = nope + rope, n_total = heads * (nope + v_dim);
  if (kind == MlaPrefillExpand::kWgmma && mla_prefill_expand_wgmma_has_kernel(nope, v_dim, latent_dim))
    return mla_prefill_expand_wgmma(lat, w, ctx, heads, qk, latent_dim, kb, vb, stream);
  if ((n_total + kGT - 1) / kGT > INT32_MAX || (ctx + kGT - 1) / kGT > 65535 || ctx > INT32_MAX)
    return invalid_argument("mla_prefill_expand_gemm: context too long for one step");
  const dim3 grid(static_cast<unsigned>((n_total + kGT - 1) / kGT), static_cast<unsigned>((ctx + kGT - 1) / kGT));
  expand_kernel<<<grid, 128, 0, stream>>>(static_cast<const bf16*>(lat), static_cast<const bf16*>(w), static_cast<int>(ctx),
                                          static_cast<int>(n_total), static_cast<int>(latent_dim), static_cast<int>(nope),
                                          static_cast<int>(qk), static_cast<int>(v_dim), static_cast<int>(heads), static_cast<bf16*>(kb),
                                          static_cast<bf16*>(vb));
  return last_launch_status("mla_prefill expand");
}

Status mla_prefill_gather(const MlaPrefillArgs& a, const MlaPrefillPlan& p, const int32_t* plan, void* workspace, cudaStream_t stream) {
  if (p.tiles == 0 || p.ctx_total == 0) return Status::ok();
  if (!mla_prefill_supported(a.nope, a.rope, a.v_dim, a.latent_dim))
    return invalid_argument("mla_prefill_gather: no kernel for these head dims");
  if (p.ctx_total > INT32_MAX) return invalid_argument("mla_prefill_gather: context too long for one step");
  if (!a.cache && !a.cache_bf16) return invalid_argument("mla_prefill_gather: no cache (cache and cache_bf16 both null)");
  const Carve c = carve(a, p.rows, p.ctx_total);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* kb = reinterpret_cast<bf16*>(base + c.k);
  auto* lat = reinterpret_cast<bf16*>(base + c.lat);
  const int32_t* entries = plan + 4 + 4 * p.seqs + 2 * p.tiles;
  if (a.cache_bf16)
    launch_gather(a.cache_bf16, entries, a, p.ctx_total, lat, kb, stream);
  else
    launch_gather(a.cache, entries, a, p.ctx_total, lat, kb, stream);
  return last_launch_status("mla_prefill gather");
}

Status mla_prefill_expand(const MlaPrefillArgs& a, const MlaPrefillPlan& p, const int32_t* plan, void* workspace, cudaStream_t stream) {
  if (p.tiles == 0) return Status::ok();
  if (!mla_prefill_supported(a.nope, a.rope, a.v_dim, a.latent_dim))
    return invalid_argument("mla_prefill_expand: no kernel for these head dims");
  if (p.ctx_total > INT32_MAX) return invalid_argument("mla_prefill_expand: context too long for one step");
  if (!a.cache && !a.cache_bf16) return invalid_argument("mla_prefill_expand: no cache (cache and cache_bf16 both null)");
  const int64_t qk = a.nope + a.rope, n_total = a.heads * (a.nope + a.v_dim);
  const Carve c = carve(a, p.rows, p.ctx_total);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* qb = reinterpret_cast<bf16*>(base + c.q);
  auto* kb = reinterpret_cast<bf16*>(base + c.k);
  auto* vb = reinterpret_cast<bf16*>(base + c.v);
  auto* lat = reinterpret_cast<bf16*>(base + c.lat);
  auto* wb = reinterpret_cast<bf16*>(base + c.w);
  to_bf16_kernel<<<1024, 256, 0, stream>>>(a.q, p.rows * a.heads * qk, qb);
  to_bf16_kernel<<<1024, 256, 0, stream>>>(a.kv_b, n_total * a.latent_dim, wb);
  PDS_RETURN_IF_ERROR(mla_prefill_gather(a, p, plan, workspace, stream));
  return mla_prefill_expand_gemm(lat, wb, p.ctx_total, a.heads, a.nope, a.rope, a.v_dim, a.latent_dim, kb, vb, p.expand, stream);
}

Status mla_prefill_run(const MlaPrefillArgs& a, const MlaPrefillPlan& p, const int32_t* plan, void* workspace, cudaStream_t stream) {
  if (p.tiles == 0) return Status::ok();
  PDS_RETURN_IF_ERROR(mla_prefill_expand(a, p, plan, workspace, stream));
  const Carve c = carve(a, p.rows, p.ctx_total);
  auto* base = static_cast<unsigned char*>(workspace);
  return mla_prefill_attend(base + c.q, base + c.k, base + c.v, a.heads, a.nope + a.rope, a.v_dim, a.scale, p, plan, a.out, stream);
}

}  // namespace pdserve::cuda
