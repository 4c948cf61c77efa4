#include "pdserve/ops/kda.h"

#include <cmath>
#include <vector>

#include "pdserve/ops/elementwise.h"

namespace pdserve::ops {

void causal_conv1d_silu(const float* x, int64_t T, int64_t D, const float* weight, int64_t K, float* state, float* out) {
  const int64_t S = K - 1;
  std::vector<float> window(K);
  for (int64_t c = 0; c < D; ++c) {
    float* st = state + c * S;
    const float* w = weight + c * K;
    for (int64_t t = 0; t < T; ++t) {
      // window = [st[0..S), x_t]
      float acc = 0;
      for (int64_t j = 0; j < S; ++j) acc += w[j] * st[j];
      acc += w[S] * x[t * D + c];
      out[t * D + c] = silu(acc);
      for (int64_t j = 0; j + 1 < S; ++j) st[j] = st[j + 1];
      if (S > 0) st[S - 1] = x[t * D + c];
    }
  }
}

void l2_normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss) + eps);
    for (int64_t i = 0; i < dim; ++i) xr[i] *= inv * scale;
  }
}

void kda_gate(const float* f, int64_t T, int64_t H, int64_t D, const float* a_log, const float* dt_bias,
              bool has_lower_bound, float lower_bound, float* g) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(a_log[h]);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = (t * H + h) * D + d;
        const float x = f[i] + dt_bias[h * D + d];
        g[i] = has_lower_bound ? lower_bound * sigmoidf(a * x) : -a * softplus(x);
      }
    }
}

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int64_t T, int64_t H, int64_t D, float* state, float* o) {
  std::vector<float> decay(D);
  for (int64_t h = 0; h < H; ++h) {
    float* S = state + h * D * D;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t base = (t * H + h) * D;
      const float* qt = q + base;
      const float* kt = k + base;
      const float* vt = v + base;
      for (int64_t c = 0; c < D; ++c) decay[c] = std::exp(g[base + c]);
      const float b = beta[t * H + h];
      for (int64_t r = 0; r < D; ++r) {
        float* row = S + r * D;
        float ks = 0;
        for (int64_t c = 0; c < D; ++c) {
          row[c] *= decay[c];
          ks += row[c] * kt[c];
        }
        const float u = b * (vt[r] - ks);
        float out = 0;
        for (int64_t c = 0; c < D; ++c) {
          row[c] += kt[c] * u;
          out += row[c] * qt[c];
        }
        o[base + r] = out;
      }
    }
  }
}

void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t T, int64_t H, int64_t D, int64_t chunk, float* state, float* o) {
  if (chunk <= 0) chunk = 64;
  std::vector<float> G(chunk * D), A(chunk * chunk), W(chunk * D), kdec(D);
  for (int64_t h = 0; h < H; ++h) {
    float* S = state + h * D * D;
    for (int64_t s = 0; s < T; s += chunk) {
      const int64_t C = std::min(chunk, T - s);
      auto at = [&](const float* base, int64_t i) { return base + ((s + i) * H + h) * D; };
      // Cumulative log decay inside the chunk.
      for (int64_t i = 0; i < C; ++i)
        for (int64_t c = 0; c < D; ++c) G[i * D + c] = at(g, i)[c] + (i ? G[(i - 1) * D + c] : 0.0f);
      // A[i][j] = beta_i * sum_c k_i[c] k_j[c] exp(G_i - G_j), j < i (all exponents <= 0).
      for (int64_t i = 0; i < C; ++i) {
        const float bi = beta[(s + i) * H + h];
        for (int64_t j = 0; j < i; ++j) {
          float acc = 0;
          for (int64_t c = 0; c < D; ++c) acc += at(k, i)[c] * at(k, j)[c] * std::exp(G[i * D + c] - G[j * D + c]);
          A[i * chunk + j] = bi * acc;
        }
      }
      // W = (I + A)^-1 * beta * (V - (K * exp(G)) S^T), by forward substitution.
      for (int64_t i = 0; i < C; ++i) {
        const float bi = beta[(s + i) * H + h];
        for (int64_t c = 0; c < D; ++c) kdec[c] = at(k, i)[c] * std::exp(G[i * D + c]);
        for (int64_t r = 0; r < D; ++r) {
          float ks = 0;
          const float* row = S + r * D;
          for (int64_t c = 0; c < D; ++c) ks += row[c] * kdec[c];
          float w = bi * (at(v, i)[r] - ks);
          for (int64_t j = 0; j < i; ++j) w -= A[i * chunk + j] * W[j * D + r];
          W[i * D + r] = w;
        }
      }
      // Outputs: the carried state's contribution plus the intra-chunk one.
      for (int64_t i = 0; i < C; ++i) {
        std::vector<float> qk(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          float acc = 0;
          for (int64_t c = 0; c < D; ++c) acc += at(q, i)[c] * at(k, j)[c] * std::exp(G[i * D + c] - G[j * D + c]);
          qk[j] = acc;
        }
        for (int64_t c = 0; c < D; ++c) kdec[c] = at(q, i)[c] * std::exp(G[i * D + c]);
        float* oi = const_cast<float*>(at(o, i));
        for (int64_t r = 0; r < D; ++r) {
          float acc = 0;
          const float* row = S + r * D;
          for (int64_t c = 0; c < D; ++c) acc += row[c] * kdec[c];
          for (int64_t j = 0; j <= i; ++j) acc += qk[j] * W[j * D + r];
          oi[r] = acc;
        }
      }
      // Carry the state to the chunk's end.
      const float* Gl = &G[(C - 1) * D];
      for (int64_t r = 0; r < D; ++r) {
        float* row = S + r * D;
        for (int64_t c = 0; c < D; ++c) {
          float acc = row[c] * std::exp(Gl[c]);
          for (int64_t j = 0; j < C; ++j) acc += W[j * D + r] * at(k, j)[c] * std::exp(Gl[c] - G[j * D + c]);
          row[c] = acc;
        }
      }
    }
  }
}

}  // namespace pdserve::ops
