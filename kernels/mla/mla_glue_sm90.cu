// mla_absorb_q, mla_v_up, mla_write_latents(_bf16) (contract: mla.h), mla_absorb_q_early
// (mla_absorb.h). Correct-first: one thread per output element, the CPU's summation order; the
// latent writes 4 values an access where the shapes and addresses allow.
#include <string>

#include "common/bf16_bits.cuh"
#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"
#include "mla/mla.h"
#include "mla/mla_absorb.h"

namespace pdserve::cuda {

namespace {

// Block (row, head); threads over the latent dims (then the rope dims for q_rot).
// TRIGGER (mla_absorb_q_early): griddepcontrol.launch_dependents first, so a programmatic
// dependent launch after it may start at once (a no-op when the next kernel is not one).
template <bool TRIGGER>
__global__ void absorb_kernel(const float* __restrict__ q, const float* __restrict__ kv_b, int64_t heads, int64_t nope, int64_t rope,
                              int64_t v_dim, int64_t lat, float* __restrict__ q_lat, float* __restrict__ q_rot) {
  if constexpr (TRIGGER) pdl_bulk::pdl_trigger();
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, qd = nope + rope;
  const float* qn = q + (b * heads + h) * qd;
  const float* w = kv_b + h * (nope + v_dim) * lat;
  for (int64_t j = threadIdx.x; j < lat; j += blockDim.x) {
    float acc = 0.0f;
    for (int64_t d = 0; d < nope; ++d) acc += qn[d] * w[d * lat + j];
    q_lat[(b * heads + h) * lat + j] = acc;
  }
  for (int64_t d = threadIdx.x; d < rope; d += blockDim.x) q_rot[(b * heads + h) * rope + d] = qn[nope + d];
}

__global__ void v_up_kernel(const float* __restrict__ o_lat, const float* __restrict__ kv_b, int64_t heads, int64_t nope,
                            int64_t v_dim, int64_t lat, float* __restrict__ out) {
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads;
  const float* o = o_lat + (b * heads + h) * lat;
  for (int64_t d = threadIdx.x; d < v_dim; d += blockDim.x) {
    const float* w = kv_b + (h * (nope + v_dim) + nope + d) * lat;
    float acc = 0.0f;
    for (int64_t j = 0; j < lat; ++j) acc += w[j] * o[j];
    out[(b * heads + h) * v_dim + d] = acc;
  }
}

// One block of kWriteThreads per row. T = float: a copy; T = uint16_t: bf16 bits rounded as the
// host (common/bf16_bits.cuh). VEC (latent_dim, rope_dim multiples of 4, latent_dim / 4 and
// rope_dim / 4 <= kWriteThreads, the latent / key bases 16-byte aligned, the cache aligned to 4
// values: the launcher checks): thread i loads latent chunk i and key chunk i (float4) before
// reading the row's entry, so the three loads are in flight together, then stores 4 values.
// Otherwise element by element.
constexpr int kWriteThreads = 128;
__device__ __forceinline__ void put1(float* e, float v) { *e = v; }
__device__ __forceinline__ void put1(uint16_t* e, float v) { *e = static_cast<uint16_t>(bf16_bits_rne(v)); }
__device__ __forceinline__ void put4(float* e, float4 v) { *reinterpret_cast<float4*>(e) = v; }
__device__ __forceinline__ void put4(uint16_t* e, float4 v) {
  *reinterpret_cast<uint2*>(e) = make_uint2(bf16x2_bits_rne(v.x, v.y), bf16x2_bits_rne(v.z, v.w));
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(kWriteThreads) write_kernel(const float* __restrict__ latent, const float* __restrict__ key, int64_t lat,
                                                              int64_t rope, const int32_t* __restrict__ dst_entry, T* cache) {
  const int64_t b = blockIdx.x;
  const float* l = latent + b * lat;
  const float* k = key + b * rope;
  if constexpr (VEC) {
    const int i = threadIdx.x;
    const bool has_l = i < lat / 4, has_k = i < rope / 4;
    float4 lv = {}, kv = {};
    if (has_l) lv = reinterpret_cast<const float4*>(l)[i];
    if (has_k) kv = reinterpret_cast<const float4*>(k)[i];
    const int32_t entry = dst_entry[b];
    if (entry < 0) return;  // a padding row of a decode graph bucket
    T* e = cache + int64_t(entry) * (lat + rope);
    if (has_l) put4(e + 4 * i, lv);
    if (has_k) put4(e + lat + 4 * i, kv);
  } else {
    const int32_t entry = dst_entry[b];
    if (entry < 0) return;
    T* e = cache + int64_t(entry) * (lat + rope);
    for (int64_t i = threadIdx.x; i < lat; i += blockDim.x) put1(e + i, l[i]);
    for (int64_t i = threadIdx.x; i < rope; i += blockDim.x) put1(e + lat + i, k[i]);
  }
}

template <typename T>
Status launch_write(const float* latent, const float* key, int64_t rows, int64_t lat, int64_t rope, const int32_t* dst_entry, T* cache,
                    cudaStream_t stream, const char* what) {
  if (rows == 0) return Status::ok();
  if (rows > INT32_MAX) return invalid_argument(std::string(what) + ": too many rows");
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool vec = lat % 4 == 0 && rope % 4 == 0 && lat / 4 <= kWriteThreads && rope / 4 <= kWriteThreads &&
                   ((addr(latent) | addr(key)) & 15u) == 0 && (addr(cache) & (4 * sizeof(T) - 1)) == 0;
  const unsigned grid = static_cast<unsigned>(rows);
  if (vec)
    write_kernel<T, true><<<grid, kWriteThreads, 0, stream>>>(latent, key, lat, rope, dst_entry, cache);
  else
    write_kernel<T, false><<<grid, kWriteThreads, 0, stream>>>(latent, key, lat, rope, dst_entry, cache);
  return last_launch_status(what);
}

bool grid_ok(int64_t blocks) { return blocks <= INT32_MAX; }

}  // namespace

namespace {

// A plain launch in both forms (never a programmatic dependent one): it starts only once every
// kernel before it on the stream has completed, which mla_absorb_q_early's contract rests on.
template <bool TRIGGER>
Status launch_absorb(const float* q, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                     int64_t latent_dim, float* q_lat, float* q_rot, cudaStream_t stream) {
  if (rows * heads == 0) return Status::ok();
  if (!grid_ok(rows * heads)) return invalid_argument("mla_absorb_q: too many rows");
  absorb_kernel<TRIGGER><<<static_cast<unsigned>(rows * heads), 128, 0, stream>>>(q, kv_b, heads, nope, rope, v_dim, latent_dim, q_lat,
                                                                                   q_rot);
  return last_launch_status("mla_absorb_q");
}

}  // namespace

Status mla_absorb_q(const float* q, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                    int64_t latent_dim, float* q_lat, float* q_rot, cudaStream_t stream) {
  return launch_absorb<false>(q, kv_b, rows, heads, nope, rope, v_dim, latent_dim, q_lat, q_rot, stream);
}

Status mla_absorb_q_early(const float* q, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                          int64_t latent_dim, float* q_lat, float* q_rot, cudaStream_t stream) {
  return launch_absorb<true>(q, kv_b, rows, heads, nope, rope, v_dim, latent_dim, q_lat, q_rot, stream);
}

Status mla_v_up(const float* o_lat, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t v_dim, int64_t latent_dim,
                float* out, cudaStream_t stream) {
  if (rows * heads == 0) return Status::ok();
  if (!grid_ok(rows * heads)) return invalid_argument("mla_v_up: too many rows");
  v_up_kernel<<<static_cast<unsigned>(rows * heads), 128, 0, stream>>>(o_lat, kv_b, heads, nope, v_dim, latent_dim, out);
  return last_launch_status("mla_v_up");
}

Status mla_write_latents(const float* latent, const float* key, int64_t rows, int64_t latent_dim, int64_t rope_dim,
                         const int32_t* dst_entry, float* cache, cudaStream_t stream) {
  return launch_write(latent, key, rows, latent_dim, rope_dim, dst_entry, cache, stream, "mla_write_latents");
}

Status mla_write_latents_bf16(const float* latent, const float* key, int64_t rows, int64_t latent_dim, int64_t rope_dim,
                              const int32_t* dst_entry, uint16_t* cache, cudaStream_t stream) {
  return launch_write(latent, key, rows, latent_dim, rope_dim, dst_entry, cache, stream, "mla_write_latents_bf16");
}

}  // namespace pdserve::cuda
