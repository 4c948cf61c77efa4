#include "pdserve/ops/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "pdserve/core/dtype.h"
#include "pdserve/ops/linear.h"

namespace pdserve::ops {

void widen_latents(const PagedLatentView& cache, int64_t ctx_len, float* out) {
  const int64_t ed = cache.entry_dim;
  for (int64_t j = 0; j < ctx_len; ++j) {
    const uint16_t* src = cache.row_bf16(j);
    for (int64_t d = 0; d < ed; ++d) out[j * ed + d] = bf16_to_f32(src[d]);
  }
}

void mla_attend_latent(const float* q_lat, const float* q_rot, int64_t heads, int64_t latent_dim, int64_t rope_dim,
                       const PagedLatentView& cache, int64_t ctx_len, float scale, float* o_lat) {
  std::vector<float> scores(ctx_len);
  // A bf16 cache is widened once per call (exact), then the fp32 arithmetic below runs
  // unchanged on it: the result equals the fp32 path over the rounded entries bit for bit.
  std::vector<float> wide;
  if (cache.bf16()) {
    wide.resize(static_cast<size_t>(ctx_len * cache.entry_dim));
    widen_latents(cache, ctx_len, wide.data());
  }
  auto row = [&](int64_t j) { return wide.empty() ? cache.row(j) : wide.data() + j * cache.entry_dim; };
  for (int64_t h = 0; h < heads; ++h) {
    const float* ql = q_lat + h * latent_dim;
    const float* qr = q_rot + h * rope_dim;
    float mx = -INFINITY;
    for (int64_t j = 0; j < ctx_len; ++j) {
      const float* e = row(j);
      scores[j] = (dot(ql, e, latent_dim) + dot(qr, e + latent_dim, rope_dim)) * scale;
      mx = std::max(mx, scores[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < ctx_len; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
    float* out = o_lat + h * latent_dim;
    std::fill(out, out + latent_dim, 0.0f);
    for (int64_t j = 0; j < ctx_len; ++j) {
      const float p = scores[j] / sum;
      const float* e = row(j);
      for (int64_t d = 0; d < latent_dim; ++d) out[d] += p * e[d];
    }
  }
}

}  // namespace pdserve::ops
