// mla_absorb_q, mla_v_up, mla_write_latents (contract: mla.h), mla_absorb_q_early (mla_absorb.h).
// Correct-first: one thread per output element, the CPU's summation order.
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

__global__ void write_kernel(const float* __restrict__ latent, const float* __restrict__ key, int64_t lat, int64_t rope,
                             const int32_t* __restrict__ dst_entry, float* cache) {
  const int64_t b = blockIdx.x;
  if (dst_entry[b] < 0) return;  // a padding row of a decode graph bucket
  float* e = cache + int64_t(dst_entry[b]) * (lat + rope);
  for (int64_t i = threadIdx.x; i < lat; i += blockDim.x) e[i] = latent[b * lat + i];
  for (int64_t i = threadIdx.x; i < rope; i += blockDim.x) e[lat + i] = key[b * rope + i];
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
  if (rows == 0) return Status::ok();
  if (!grid_ok(rows)) return invalid_argument("mla_write_latents: too many rows");
  write_kernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(latent, key, latent_dim, rope_dim, dst_entry, cache);
  return last_launch_status("mla_write_latents");
}

}  // namespace pdserve::cuda
