// The two token mixers: MLA over the paged latent cache and KDA over the state slots.
#include <cmath>
#include <vector>

#include "forward_internal.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/kda.h"
#include "pdserve/ops/linear.h"
#include "pdserve/ops/mla.h"

namespace pdserve::detail {

using ops::matmul_nt;

void mla_layer(const ModelConfig& c, const MlaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, MlaKvPool& kv, const float* x, float* out) {
  const int64_t nope = c.qk_nope_head_dim, qd = c.q_head_dim();
  const int64_t T = lay.total_rows, nh = w.kv_b.rows / (nope + c.v_head_dim);  // this rank's heads
  const int64_t rope = c.qk_rope_head_dim, lat = c.kv_lora_rank, vd = c.v_head_dim, ed = c.mla_cache_dim();
  const float eps = static_cast<float>(c.mla_lora_norm_eps);

  std::vector<float> q(T * nh * qd);
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(T * c.q_lora_rank);
    matmul_nt(x, T, w.q_a, qa.data());
    ops::rms_norm(qa.data(), T, c.q_lora_rank, w.q_a_norm.data(), eps, qa.data());
    matmul_nt(qa.data(), T, w.q_b, q.data());
  } else {
    matmul_nt(x, T, w.q, q.data());
  }
  std::vector<float> kva(T * ed);
  matmul_nt(x, T, w.kv_a, kva.data());
  for (int64_t t = 0; t < T; ++t) ops::rms_norm(&kva[t * ed], 1, lat, w.kv_a_norm.data(), eps, &kva[t * ed]);

  // Absorb W_kb into the queries: q_lat[h] = W_kb[h]^T q_nope[h].
  std::vector<float> q_lat(T * nh * lat, 0.0f), q_rot(T * nh * rope);
  const int64_t per_head = nope + vd;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h) {
      const float* qn = &q[(t * nh + h) * qd];
      float* ql = &q_lat[(t * nh + h) * lat];
      for (int64_t d = 0; d < nope; ++d) {
        const float* wrow = w.kv_b.row(h * per_head + d);
        const float s = qn[d];
        for (int64_t j = 0; j < lat; ++j) ql[j] += s * wrow[j];
      }
      for (int64_t d = 0; d < rope; ++d) q_rot[(t * nh + h) * rope + d] = qn[nope + d];
    }

  const float scale = 1.0f / std::sqrt(static_cast<float>(qd));
  std::vector<float> o_lat(nh * lat), attn(T * nh * vd), wide;
  static constexpr int32_t kFirstPage = 0;  // a widened context is one page
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceInput& seq = batch.seqs[s];
    const bool bf16 = kv.dtype() == DType::kBF16;
    ops::PagedLatentView view{bf16 ? nullptr : kv.layer_base(pool_layer), kv.page_size(), ed, seq.pages.data(),
                              bf16 ? kv.layer_base_bf16(pool_layer) : nullptr};
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    // Write this chunk's latents first: token i attends to itself and everything before.
    // A bf16 cache stores each value rounded to nearest even.
    for (int64_t i = 0; i < n; ++i) {
      const float* src = &kva[(lay.row_begin[s] + i) * ed];
      if (bf16) {
        uint16_t* dst = const_cast<uint16_t*>(view.row_bf16(seq.cached_len + i));
        for (int64_t d = 0; d < ed; ++d) dst[d] = f32_to_bf16(src[d]);
      } else {
        float* dst = const_cast<float*>(view.row(seq.cached_len + i));
        std::copy(src, src + ed, dst);
      }
    }
    // A bf16 cache: the sequence's entries widened once (exact), then every row attends over
    // them as one contiguous page, instead of each row widening its whole prefix again.
    ops::PagedLatentView attend_view = view;
    if (bf16) {
      const int64_t ctx = seq.cached_len + n;
      wide.resize(static_cast<size_t>(ctx * ed));
      ops::widen_latents(view, ctx, wide.data());
      attend_view = ops::PagedLatentView{wide.data(), ctx, ed, &kFirstPage};
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = lay.row_begin[s] + i;
      ops::mla_attend_latent(&q_lat[t * nh * lat], &q_rot[t * nh * rope], nh, lat, rope, attend_view, seq.cached_len + i + 1,
                             scale, o_lat.data());
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t d = 0; d < vd; ++d)
          attn[(t * nh + h) * vd + d] = ops::dot(w.kv_b.row(h * per_head + nope + d), &o_lat[h * lat], lat);
    }
  }
  if (c.mla_output_gate) {
    std::vector<float> g(T * nh * vd);
    matmul_nt(x, T, w.gate, g.data());
    for (size_t i = 0; i < g.size(); ++i) attn[i] *= ops::sigmoidf(g[i]);
  }
  matmul_nt(attn.data(), T, w.o, out);
}

void kda_layer(const ModelConfig& c, const KdaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, KdaStatePool& state, const ForwardOptions& opts, const float* x, float* out) {
  // This rank's heads; the state pool holds the same slice.
  const int64_t T = lay.total_rows, H = w.b.rows, D = c.kda_head_dim, P = H * D, K = c.conv_kernel;
  std::vector<float> qr(T * P), kr(T * P), vr(T * P), q(T * P), k(T * P), v(T * P);
  matmul_nt(x, T, w.q, qr.data());
  matmul_nt(x, T, w.k, kr.data());
  matmul_nt(x, T, w.v, vr.data());
  std::vector<float> fa(T * D), f(T * P), g(T * P), beta(T * H), go(T * P);
  matmul_nt(x, T, w.f_a, fa.data());
  matmul_nt(fa.data(), T, w.f_b, f.data());
  ops::kda_gate(f.data(), T, H, D, w.a_log.data(), w.dt_bias.data(), c.has_gate_lower_bound,
                static_cast<float>(c.gate_lower_bound), g.data());
  matmul_nt(x, T, w.b, beta.data());
  for (float& b : beta) b = ops::sigmoidf(b);
  if (c.kda_full_rank_output_gate) {
    matmul_nt(x, T, w.g, go.data());
  } else {
    std::vector<float> ga(T * D);
    matmul_nt(x, T, w.g_a, ga.data());
    matmul_nt(ga.data(), T, w.g_b, go.data());
  }

  std::vector<float> o(T * P);
  const int64_t conv_block = P * (K - 1);
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceInput& seq = batch.seqs[s];
    const int64_t n = static_cast<int64_t>(seq.tokens.size()), r0 = lay.row_begin[s];
    float* conv = state.conv(seq.state_slot, pool_layer);
    float* rec = state.recurrent(seq.state_slot, pool_layer);
    ops::causal_conv1d_silu(&qr[r0 * P], n, P, w.conv_q.data(), K, conv, &q[r0 * P]);
    ops::causal_conv1d_silu(&kr[r0 * P], n, P, w.conv_k.data(), K, conv + conv_block, &k[r0 * P]);
    ops::causal_conv1d_silu(&vr[r0 * P], n, P, w.conv_v.data(), K, conv + 2 * conv_block, &v[r0 * P]);
    ops::l2_normalize(&q[r0 * P], n * H, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)));
    ops::l2_normalize(&k[r0 * P], n * H, D, 1e-6f, 1.0f);
    if (n == 1) {
      ops::kda_recurrent(&q[r0 * P], &k[r0 * P], &v[r0 * P], &g[r0 * P], &beta[r0 * H], n, H, D, rec, &o[r0 * P]);
    } else {
      ops::kda_chunked(&q[r0 * P], &k[r0 * P], &v[r0 * P], &g[r0 * P], &beta[r0 * H], n, H, D, opts.kda_chunk, rec,
                       &o[r0 * P]);
    }
  }
  ops::gated_rms_norm(o.data(), go.data(), T * H, D, w.o_norm.data(), static_cast<float>(c.rms_norm_eps), o.data());
  matmul_nt(o.data(), T, w.o, out);
}

}  // namespace pdserve::detail
