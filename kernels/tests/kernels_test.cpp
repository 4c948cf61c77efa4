// Every CUDA kernel against its CPU reference (ops/) on fresh random inputs.
// Bound: normalised error max|gpu - cpu| / max|cpu| <= 1e-5 for element-wise and reduction
// kernels (fp32 on both sides; only reduction order differs), 1e-4 for the KDA recurrence
// and MLA attention (long dot products). Skips itself, saying so, without an sm_90 GPU.
#include <cmath>
#include <random>

#include "activation/activation.h"
#include "attn_res/attn_res.h"
#include "embedding/embedding.h"
#include "kda/kda.h"
#include "mla/mla.h"
#include "norm/norm.h"
#include "pdserve/core/dtype.h"
#include "pdserve/ops/attn_res.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/kda.h"
#include "pdserve/ops/mla.h"
#include "pdserve/ops/moe_routing.h"
#include "routing/routing.h"
#include "sampling/sampling.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using Kernels = GpuTest;

TEST_F(Kernels, RmsNormPlainWeightlessAndGated) {
  const int64_t rows = 7, dim = 7168;
  auto x = randn(rows * dim, 1), w = randn(dim, 2), gate = randn(rows * dim, 3);
  std::vector<float> ref(rows * dim);
  auto dx = dev(x), dw = dev(w), dg = dev(gate);
  DeviceBuffer<float> dy(rows * dim);
  ops::rms_norm(x.data(), rows, dim, w.data(), 1e-5f, ref.data());
  ASSERT_TRUE(rms_norm(dx.get(), rows, dim, dw.get(), 1e-5f, dy.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dy), ref), 1e-5);
  ops::rms_norm(x.data(), rows, dim, nullptr, 1e-6f, ref.data());
  ASSERT_TRUE(rms_norm(dx.get(), rows, dim, nullptr, 1e-6f, dy.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dy), ref), 1e-5);
  const int64_t heads = rows * 56, hd = 128;
  ops::gated_rms_norm(x.data(), gate.data(), heads, hd, w.data(), 1e-5f, ref.data());
  ASSERT_TRUE(gated_rms_norm(dx.get(), dg.get(), heads, hd, dw.get(), 1e-5f, dy.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dy), ref), 1e-5);
}

TEST_F(Kernels, SiluAndSituMul) {
  const int64_t n = 3 * 3072 + 5;
  auto g = randn(n, 4, 3.0f), u = randn(n, 5, 30.0f);
  std::vector<float> ref(n);
  auto dg = dev(g), du = dev(u);
  DeviceBuffer<float> out(n);
  ops::silu_mul(g.data(), u.data(), n, ref.data());
  ASSERT_TRUE(silu_mul(dg.get(), du.get(), n, out.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(out), ref), 1e-5);
  ops::situ_mul(g.data(), u.data(), n, 4.0f, 25.0f, ref.data());
  ASSERT_TRUE(situ_mul(dg.get(), du.get(), n, 4.0f, 25.0f, out.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(out), ref), 1e-5);
}

TEST_F(Kernels, EmbeddingBf16) {
  const int64_t vocab = 1000, dim = 256;
  auto table = randn(vocab * dim, 6);
  std::vector<uint16_t> bf(vocab * dim);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(table[i]);
  std::vector<int32_t> ids = {0, 999, 5, 5, 123};
  auto dt = dev(bf);
  auto di = dev(ids);
  DeviceBuffer<float> out(ids.size() * dim);
  ASSERT_TRUE(embedding_bf16(dt.get(), vocab, dim, di.get(), ids.size(), out.get(), nullptr).is_ok());
  auto got = host(out);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(got[t * dim + i], bf16_to_f32(bf[ids[t] * dim + i]));
}

TEST_F(Kernels, AttnResMix) {
  const int64_t tokens = 9, dim = 7168;
  for (int count : {0, 1, 8}) {
    auto bank = randn(std::max(1, count) * tokens * dim, 7), part = randn(tokens * dim, 8), sv = randn(dim, 9, 0.05f);
    std::vector<float> ref(tokens * dim);
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<const float*> src;
      for (int s = 0; s < count; ++s) src.push_back(&bank[(s * tokens + t) * dim]);
      src.push_back(&part[t * dim]);
      ops::attn_res_mix(src.data(), count + 1, dim, sv.data(), 1e-5f, &ref[t * dim]);
    }
    auto db = dev(bank), dp = dev(part), ds = dev(sv);
    DeviceBuffer<float> out(tokens * dim);
    ASSERT_TRUE(attn_res_mix(db.get(), count, dp.get(), tokens, dim, ds.get(), 1e-5f, out.get(), nullptr).is_ok());
    EXPECT_LT(nerr(host(out), ref), 1e-5) << count << " bank entries";
  }
}

TEST_F(Kernels, RoutingTopK) {
  const int64_t tokens = 33, experts = 896, k = 16;
  auto logits = randn(tokens * experts, 10), bias = randn(experts, 11, 0.1f);
  std::vector<int32_t> ref_ids(tokens * k);
  std::vector<float> ref_w(tokens * k);
  ops::RoutingParams p{experts, k, true, 2.5f};
  for (int64_t t = 0; t < tokens; ++t) ops::route_sigmoid_topk(&logits[t * experts], bias.data(), p, &ref_ids[t * k], &ref_w[t * k]);
  auto dl = dev(logits), db = dev(bias);
  DeviceBuffer<int32_t> ids(tokens * k);
  DeviceBuffer<float> w(tokens * k);
  ASSERT_TRUE(route_sigmoid_topk(dl.get(), db.get(), tokens, experts, k, true, 2.5f, ids.get(), w.get(), nullptr).is_ok());
  EXPECT_EQ(host(ids), ref_ids);
  EXPECT_LT(nerr(host(w), ref_w), 1e-5);
}

TEST_F(Kernels, KdaConvGateNormAndRecurrence) {
  const int64_t T = 37, H = 3, D = 128, P = H * D, K = 4;
  auto x = randn(T * P, 12), w = randn(P * K, 13, 0.5f), st0 = randn(P * (K - 1), 14);
  std::vector<float> st_ref = st0, out_ref(T * P);
  ops::causal_conv1d_silu(x.data(), T, P, w.data(), K, st_ref.data(), out_ref.data());
  auto dx = dev(x), dw = dev(w), dst = dev(st0);
  DeviceBuffer<float> dout(T * P);
  ASSERT_TRUE(causal_conv1d_silu(dx.get(), T, P, dw.get(), K, dst.get(), dout.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dout), out_ref), 1e-5);
  EXPECT_LT(nerr(host(dst), st_ref), 1e-6);

  auto f = randn(T * P, 15), alog = randn(H, 16, 0.5f), dt = randn(P, 17, 0.5f);
  for (bool lb : {true, false}) {
    std::vector<float> g_ref(T * P);
    ops::kda_gate(f.data(), T, H, D, alog.data(), dt.data(), lb, -5.0f, g_ref.data());
    auto df = dev(f), da = dev(alog), ddt = dev(dt);
    DeviceBuffer<float> dg(T * P);
    ASSERT_TRUE(kda_gate(df.get(), T, H, D, da.get(), ddt.get(), lb, -5.0f, dg.get(), nullptr).is_ok());
    EXPECT_LT(nerr(host(dg), g_ref), 1e-5) << "lower bound " << lb;
  }

  auto q = randn(T * P, 18), k = randn(T * P, 19), v = randn(T * P, 20), beta = randn(T * H, 21);
  for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
  std::vector<float> g(T * P);
  ops::kda_gate(f.data(), T, H, D, alog.data(), dt.data(), true, -5.0f, g.data());
  auto dq = dev(q), dk = dev(k);
  ASSERT_TRUE(l2_normalize(dq.get(), T * H, D, 1e-6f, 1.0f / std::sqrt(float(D)), nullptr).is_ok());
  ASSERT_TRUE(l2_normalize(dk.get(), T * H, D, 1e-6f, 1.0f, nullptr).is_ok());
  ops::l2_normalize(q.data(), T * H, D, 1e-6f, 1.0f / std::sqrt(float(D)));
  ops::l2_normalize(k.data(), T * H, D, 1e-6f, 1.0f);
  EXPECT_LT(nerr(host(dq), q), 1e-5);
  auto s0 = randn(H * D * D, 22, 0.1f);
  std::vector<float> s_ref = s0, o_ref(T * P);
  ops::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, H, D, s_ref.data(), o_ref.data());
  auto dv = dev(v), dgg = dev(g), dbeta = dev(beta), ds = dev(s0);
  DeviceBuffer<float> dout2(T * P);
  ASSERT_TRUE(kda_recurrent(dq.get(), dk.get(), dv.get(), dgg.get(), dbeta.get(), T, H, D, ds.get(), dout2.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dout2), o_ref), 1e-4);
  EXPECT_LT(nerr(host(ds), s_ref), 1e-4);
}

TEST_F(Kernels, MlaPagedLatentAttention) {
  const int64_t heads = 3, lat = 512, rope = 64, entry = lat + rope, page = 64, pages = 40;
  std::vector<int32_t> ctx = {1, 63, 64, 65, 1000};
  const int64_t rows = ctx.size(), max_pages = 16;
  auto cache = randn(pages * page * entry, 23);
  std::vector<int32_t> table(rows * max_pages);
  std::mt19937 gen(3);
  for (auto& p : table) p = static_cast<int32_t>(gen() % pages);
  auto ql = randn(rows * heads * lat, 24, 0.05f), qr = randn(rows * heads * rope, 25, 0.05f);
  std::vector<float> ref(rows * heads * lat);
  const float scale = 1.0f / std::sqrt(192.0f);
  for (int64_t b = 0; b < rows; ++b) {
    ops::PagedLatentView view{cache.data(), page, entry, &table[b * max_pages]};
    ops::mla_attend_latent(&ql[b * heads * lat], &qr[b * heads * rope], heads, lat, rope, view, ctx[b], scale, &ref[b * heads * lat]);
  }
  auto dc = dev(cache), dql = dev(ql), dqr = dev(qr);
  auto dt = dev(table), dctx = dev(ctx);
  DeviceBuffer<float> out(rows * heads * lat);
  MlaDecodeArgs a;
  a.q_lat = dql.get();
  a.q_rot = dqr.get();
  a.cache = dc.get();
  a.page_table = dt.get();
  a.ctx_len = dctx.get();
  a.rows = rows;
  a.heads = heads;
  a.latent_dim = lat;
  a.rope_dim = rope;
  a.page_size = page;
  a.max_pages = max_pages;
  a.scale = scale;
  a.o_lat = out.get();
  ASSERT_TRUE(mla_attend_latent(a, nullptr).is_ok());
  EXPECT_LT(nerr(host(out), ref), 1e-4);
}

TEST_F(Kernels, ArgmaxRowsTiesToLowerId) {
  const int64_t rows = 4, vocab = 163840;
  auto l = randn(rows * vocab, 26);
  l[1 * vocab + 7] = 100.0f;
  l[1 * vocab + 90000] = 100.0f;  // tie: the lower id wins
  std::vector<int32_t> ref(rows);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t b = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (l[r * vocab + v] > l[r * vocab + b]) b = static_cast<int32_t>(v);
    ref[r] = b;
  }
  auto dl = dev(l);
  DeviceBuffer<int32_t> ids(rows);
  ASSERT_TRUE(argmax_rows(dl.get(), rows, vocab, ids.get(), nullptr).is_ok());
  EXPECT_EQ(host(ids), ref);
  EXPECT_EQ(ref[1], 7);
}

}  // namespace
}  // namespace pdserve::cuda
