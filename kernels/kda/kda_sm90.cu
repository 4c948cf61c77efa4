#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "kda/kda.h"

namespace pdserve::cuda {

namespace {

constexpr int kMaxConvTail = 7;  // kernel sizes up to 8
constexpr int kMaxHeadDim = 256;

// slots == nullptr: one sequence, `state` is its state. Else the decode step: blockIdx.y is
// row b (one token), its state at state + slots[b] * slot_stride; slots[b] < 0 is padding.
__global__ void conv_kernel(const float* __restrict__ x, int64_t T, int64_t D, const float* __restrict__ w, int64_t K,
                            float* state, float* out, const int32_t* __restrict__ slots, int64_t slot_stride) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  if (slots) {
    const int64_t b = blockIdx.y;
    x += b * D;
    out += b * D;
    if (slots[b] < 0) {
      out[c] = 0.0f;
      return;
    }
    state += slots[b] * slot_stride;
  }
  const int64_t S = K - 1;
  float win[kMaxConvTail];
  for (int64_t j = 0; j < S; ++j) win[j] = state[c * S + j];
  for (int64_t t = 0; t < T; ++t) {
    const float xt = x[t * D + c];
    float acc = w[c * K + S] * xt;
    for (int64_t j = 0; j < S; ++j) acc += w[c * K + j] * win[j];
    out[t * D + c] = acc * sigmoid(acc);
    for (int64_t j = 0; j + 1 < S; ++j) win[j] = win[j + 1];
    if (S > 0) win[S - 1] = xt;
  }
  for (int64_t j = 0; j < S; ++j) state[c * S + j] = win[j];
}

__global__ void gate_kernel(const float* f, int64_t n, int64_t H, int64_t D, const float* a_log, const float* dt_bias,
                            bool has_lb, float lb, float* g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hd = i % (H * D), h = hd / D;
    const float a = expf(a_log[h]);
    const float x = f[i] + dt_bias[hd];
    g[i] = has_lb ? lb * sigmoid(a * x) : -a * (x > 20.0f ? x : log1pf(expf(x)));
  }
}

__global__ void l2_kernel(float* x, int64_t dim, float eps, float scale) {
  float* r = x + blockIdx.x * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += r[i] * r[i];
  const float inv = rsqrtf(block_sum(ss) + eps) * scale;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) r[i] *= inv;
}

// One block per head, one thread per state row v (D threads).
__global__ void recurrent_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                 const float* __restrict__ g, const float* __restrict__ beta, int64_t T, int64_t H, int64_t D,
                                 float* state, float* o, const int32_t* __restrict__ slots, int64_t slot_stride) {
  __shared__ float sk[kMaxHeadDim], sq[kMaxHeadDim], sdecay[kMaxHeadDim];
  const int64_t h = blockIdx.x, r = threadIdx.x;
  if (slots) {  // as conv_kernel: row blockIdx.y, one token
    const int64_t b = blockIdx.y, off = b * H * D;
    q += off;
    k += off;
    v += off;
    g += off;
    o += off;
    beta += b * H;
    if (slots[b] < 0) {
      o[h * D + r] = 0.0f;
      return;
    }
    state += slots[b] * slot_stride;
  }
  float* row = state + (h * D + r) * D;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t base = (t * H + h) * D;
    sk[r] = k[base + r];
    sq[r] = q[base + r];
    sdecay[r] = expf(g[base + r]);
    __syncthreads();
    float ks = 0.0f;
    for (int64_t c = 0; c < D; ++c) {
      const float s = row[c] * sdecay[c];
      row[c] = s;
      ks += s * sk[c];
    }
    const float u = beta[t * H + h] * (v[base + r] - ks);
    float out = 0.0f;
    for (int64_t c = 0; c < D; ++c) {
      const float s = row[c] + sk[c] * u;
      row[c] = s;
      out += s * sq[c];
    }
    o[base + r] = out;
    __syncthreads();
  }
}

unsigned grid_for(int64_t n, int threads) { return static_cast<unsigned>(n / threads + 1 < 65535 ? n / threads + 1 : 65535); }

}  // namespace

Status causal_conv1d_silu(const float* x, int64_t T, int64_t D, const float* weight, int64_t K, float* state, float* out,
                          cudaStream_t stream) {
  if (K < 1 || K - 1 > kMaxConvTail) return invalid_argument("causal_conv1d_silu: kernel size must be 1..8");
  if (D == 0) return Status::ok();
  conv_kernel<<<static_cast<unsigned>((D + 127) / 128), 128, 0, stream>>>(x, T, D, weight, K, state, out, nullptr, 0);
  return last_launch_status("causal_conv1d_silu");
}

Status kda_gate(const float* f, int64_t T, int64_t H, int64_t D, const float* a_log, const float* dt_bias, bool has_lower_bound,
                float lower_bound, float* g, cudaStream_t stream) {
  const int64_t n = T * H * D;
  if (n == 0) return Status::ok();
  gate_kernel<<<grid_for(n, 256), 256, 0, stream>>>(f, n, H, D, a_log, dt_bias, has_lower_bound, lower_bound, g);
  return last_launch_status("kda_gate");
}

Status l2_normalize(float* x, int64_t rows, int64_t dim, float eps, float scale, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  l2_kernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(x, dim, eps, scale);
  return last_launch_status("l2_normalize");
}

Status kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T, int64_t H,
                     int64_t D, float* state, float* o, cudaStream_t stream) {
  // One thread per state row; block barriers only (no warp reductions), so any D up to 256.
  if (D < 1 || D > kMaxHeadDim) return invalid_argument("kda_recurrent: head_dim must be 1..256");
  if (H == 0 || T == 0) return Status::ok();
  recurrent_kernel<<<static_cast<unsigned>(H), static_cast<unsigned>(D), 0, stream>>>(q, k, v, g, beta, T, H, D, state, o, nullptr, 0);
  return last_launch_status("kda_recurrent");
}

Status causal_conv1d_silu_step(const float* x, int64_t B, int64_t D, const float* weight, int64_t K, float* state_base,
                               const int32_t* slots, int64_t slot_stride, float* out, cudaStream_t stream) {
  if (K < 1 || K - 1 > kMaxConvTail) return invalid_argument("causal_conv1d_silu_step: kernel size must be 1..8");
  if (D == 0 || B == 0) return Status::ok();
  if (B > 65535) return invalid_argument("causal_conv1d_silu_step: at most 65535 rows");
  const dim3 grid(static_cast<unsigned>((D + 127) / 128), static_cast<unsigned>(B));
  conv_kernel<<<grid, 128, 0, stream>>>(x, 1, D, weight, K, state_base, out, slots, slot_stride);
  return last_launch_status("causal_conv1d_silu_step");
}

Status kda_recurrent_step(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B, int64_t H,
                          int64_t D, float* state_base, const int32_t* slots, int64_t slot_stride, float* o, cudaStream_t stream) {
  if (D < 1 || D > kMaxHeadDim) return invalid_argument("kda_recurrent_step: head_dim must be 1..256");
  if (H == 0 || B == 0) return Status::ok();
  if (B > 65535) return invalid_argument("kda_recurrent_step: at most 65535 rows");
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(B));
  recurrent_kernel<<<grid, static_cast<unsigned>(D), 0, stream>>>(q, k, v, g, beta, 1, H, D, state_base, o, slots, slot_stride);
  return last_launch_status("kda_recurrent_step");
}

}  // namespace pdserve::cuda
