#include "pdserve/ops/attn_res.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pdserve::ops {

void attn_res_mix(const float* const* sources, int count, int64_t dim, const float* score_vec, float eps, float* out) {
  std::vector<float> scores(count);
  for (int s = 0; s < count; ++s) {
    const float* v = sources[s];
    double ss = 0, dotp = 0;
    for (int64_t i = 0; i < dim; ++i) {
      ss += static_cast<double>(v[i]) * v[i];
      dotp += static_cast<double>(v[i]) * score_vec[i];
    }
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    scores[s] = static_cast<float>(dotp) * inv;
  }
  const float mx = *std::max_element(scores.begin(), scores.end());
  float sum = 0;
  for (float& x : scores) sum += (x = std::exp(x - mx));
  for (int64_t i = 0; i < dim; ++i) out[i] = 0;
  for (int s = 0; s < count; ++s) {
    const float p = scores[s] / sum;
    for (int64_t i = 0; i < dim; ++i) out[i] += p * sources[s][i];
  }
}

}  // namespace pdserve::ops
