// The kernels the device forward added (gemm, glue, MLA prefill glue, dense MoE experts)
// against CPU references on fresh random inputs. Bound 1e-5 normalised error (fp32 both
// sides, only summation order differs); the latent writes bit-exact (fp32 and the bf16 cache).
// Skips itself without an sm_90 GPU.
#include <cstring>

#include "gemm/gemm.h"
#include "glue/glue.h"
#include "mla/mla.h"
#include "mla/mla_absorb.h"
#include "moe/moe.h"
#include "pdserve/core/dtype.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/linear.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using BackendOps = GpuTest;

TEST_F(BackendOps, MatmulNtMatchesCpu) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1280, 64}, {37, 96, 64}, {130, 33, 517}}) {
    auto x = randn(m * k, 31), w = randn(n * k, 32);
    ops::DenseMatrix W{n, k, w};
    std::vector<float> ref(m * n);
    ops::matmul_nt(x.data(), m, W, ref.data());
    auto dx = dev(x), dw = dev(w);
    DeviceBuffer<float> dy(m * n);
    ASSERT_TRUE(matmul_nt(dx.get(), m, dw.get(), n, k, dy.get(), nullptr).is_ok());
    EXPECT_LT(nerr(host(dy), ref), 1e-5) << m << "x" << n << "x" << k;
  }
}

TEST_F(BackendOps, GlueKernels) {
  const int64_t rows = 9, width = 70;
  auto src = randn(rows * width, 33), g = randn(rows * width, 34);
  std::vector<int32_t> idx = {8, 0, 3, 3};
  auto ds = dev(src), dg = dev(g);
  auto di = dev(idx);
  DeviceBuffer<float> out(idx.size() * width);
  ASSERT_TRUE(gather_rows(ds.get(), width, di.get(), idx.size(), out.get(), nullptr).is_ok());
  auto got = host(out);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < width; ++j) ASSERT_EQ(got[i * width + j], src[idx[i] * width + j]);
  std::vector<float> ref(src);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = (ref[i] + g[i]) * ops::sigmoidf(g[i]);
  ASSERT_TRUE(add_inplace(ds.get(), dg.get(), rows * width, nullptr).is_ok());
  ASSERT_TRUE(mul_sigmoid(ds.get(), dg.get(), rows * width, nullptr).is_ok());
  EXPECT_LT(nerr(host(ds), ref), 1e-5);
  for (float& v : ref) v = ops::sigmoidf(v);
  ASSERT_TRUE(sigmoid_inplace(ds.get(), rows * width, nullptr).is_ok());
  EXPECT_LT(nerr(host(ds), ref), 1e-5);
}

TEST_F(BackendOps, MlaAbsorbVUpAndWrite) {
  const int64_t rows = 5, heads = 3, nope = 16, rope = 8, vd = 12, lat = 40, ps = 4;
  auto q = randn(rows * heads * (nope + rope), 35), kvb = randn(heads * (nope + vd) * lat, 36), ol = randn(rows * heads * lat, 37);
  std::vector<float> ql(rows * heads * lat, 0.0f), qr(rows * heads * rope), vu(rows * heads * vd);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const float* qn = &q[(b * heads + h) * (nope + rope)];
      for (int64_t d = 0; d < nope; ++d)
        for (int64_t j = 0; j < lat; ++j) ql[(b * heads + h) * lat + j] += qn[d] * kvb[(h * (nope + vd) + d) * lat + j];
      for (int64_t d = 0; d < rope; ++d) qr[(b * heads + h) * rope + d] = qn[nope + d];
      for (int64_t d = 0; d < vd; ++d)
        vu[(b * heads + h) * vd + d] = ops::dot(&kvb[(h * (nope + vd) + nope + d) * lat], &ol[(b * heads + h) * lat], lat);
    }
  auto dq = dev(q), dk = dev(kvb), dol = dev(ol);
  DeviceBuffer<float> dql(ql.size()), dqr(qr.size()), dvu(vu.size());
  ASSERT_TRUE(mla_absorb_q(dq.get(), dk.get(), rows, heads, nope, rope, vd, lat, dql.get(), dqr.get(), nullptr).is_ok());
  ASSERT_TRUE(mla_v_up(dol.get(), dk.get(), rows, heads, nope, vd, lat, dvu.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(dql), ql), 1e-5);
  EXPECT_EQ(host(dqr), qr);
  EXPECT_LT(nerr(host(dvu), vu), 1e-5);
  // mla_absorb_q_early (mla_absorb.h): the same kernel behind a trigger of its dependents, the same bits.
  DeviceBuffer<float> eql(ql.size()), eqr(qr.size());
  ASSERT_TRUE(mla_absorb_q_early(dq.get(), dk.get(), rows, heads, nope, rope, vd, lat, eql.get(), eqr.get(), nullptr).is_ok());
  EXPECT_EQ(host(eql), host(dql));
  EXPECT_EQ(host(eqr), qr);
  // Latents of 5 rows into entries of an 8-page layer; the rest stays as it was.
  auto latent = randn(rows * lat, 38), key = randn(rows * rope, 39), cache = randn(8 * ps * (lat + rope), 40);
  std::vector<int32_t> entry = {5, 6, 7, 28, 1};
  std::vector<float> want(cache);
  for (int64_t b = 0; b < rows; ++b) {
    std::copy(&latent[b * lat], &latent[(b + 1) * lat], &want[entry[b] * (lat + rope)]);
    std::copy(&key[b * rope], &key[(b + 1) * rope], &want[entry[b] * (lat + rope) + lat]);
  }
  auto dl = dev(latent), dkey = dev(key), dc = dev(cache);
  auto de = dev(entry);
  ASSERT_TRUE(mla_write_latents(dl.get(), dkey.get(), rows, lat, rope, de.get(), dc.get(), nullptr).is_ok());
  EXPECT_EQ(host(dc), want);
}

// mla_write_latents and mla_write_latents_bf16 (mla.h) on the 4-wide path (K3 dims: latent 512,
// key 64) and the element path (latent 40, key 6): padding rows (entry < 0) write nothing, every
// entry not written keeps its bits, and the bf16 cache holds exactly the host's rounding
// (core/dtype.h f32_to_bf16) of every value, including ties both ways, subnormals, -0, values
// that overflow to Inf, +-Inf and NaNs of either sign and kind.
TEST_F(BackendOps, MlaWriteLatentsFp32AndBf16MatchHost) {
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  const std::vector<float> special = {from_bits(0x7fc00000u), from_bits(0xffc00001u), from_bits(0x7f800001u), from_bits(0xff812345u),
                                      INFINITY, -INFINITY, 3.4028235e38f, -3.39e38f, from_bits(0x7f7f8000u), from_bits(0x3f808000u),
                                      from_bits(0x3f818000u), from_bits(0xbf808001u), from_bits(0x00008000u), from_bits(0x00018000u),
                                      from_bits(0x807fffffu), -0.0f, 0.0f, 65504.0f, 1e-40f, 1.0f};
  struct Shape {
    int64_t lat, rope;
  };
  for (const Shape sh : {Shape{512, 64}, Shape{40, 6}}) {
    const int64_t rows = 7, ps = 4, pages = 8, ed = sh.lat + sh.rope;
    auto latent = randn(rows * sh.lat, 45), key = randn(rows * sh.rope, 46);
    for (size_t i = 0; i < special.size(); ++i) {
      latent[(i * 37) % latent.size()] = special[i];
      key[(i * 5) % key.size()] = special[special.size() - 1 - i];
    }
    latent[3] = 1e30f, key[0] *= 1e20f;  // large, finite in bf16
    const std::vector<int32_t> entry = {5, -1, 6, 28, -7, 1, 31};  // rows 1 and 4: padding
    const auto cache32 = randn(pages * ps * ed, 47);
    std::vector<uint16_t> cache16(cache32.size());
    for (size_t i = 0; i < cache16.size(); ++i) cache16[i] = f32_to_bf16(cache32[i]);
    std::vector<float> want32(cache32);
    std::vector<uint16_t> want16(cache16);
    for (int64_t b = 0; b < rows; ++b) {
      if (entry[b] < 0) continue;
      for (int64_t i = 0; i < ed; ++i) {
        const float v = i < sh.lat ? latent[b * sh.lat + i] : key[b * sh.rope + i - sh.lat];
        want32[entry[b] * ed + i] = v;
        want16[entry[b] * ed + i] = f32_to_bf16(v);
      }
    }
    auto dl = dev(latent), dkey = dev(key), dc32 = dev(cache32);
    auto dc16 = dev(cache16);
    auto de = dev(entry);
    ASSERT_TRUE(mla_write_latents(dl.get(), dkey.get(), rows, sh.lat, sh.rope, de.get(), dc32.get(), nullptr).is_ok());
    ASSERT_TRUE(mla_write_latents_bf16(dl.get(), dkey.get(), rows, sh.lat, sh.rope, de.get(), dc16.get(), nullptr).is_ok());
    const auto got32 = host(dc32);
    const auto got16 = host(dc16);
    EXPECT_EQ(0, std::memcmp(got32.data(), want32.data(), want32.size() * 4)) << "fp32, latent " << sh.lat;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want16.size(); ++i)
      if (got16[i] != want16[i]) ++bad, first = first < 0 ? int64_t(i) : first;
    EXPECT_EQ(bad, 0) << "bf16, latent " << sh.lat << ": first mismatch at element " << first << " got 0x" << std::hex
                      << (first < 0 ? 0 : got16[first]) << " want 0x" << (first < 0 ? 0 : want16[first]);
  }
  EXPECT_TRUE(mla_write_latents_bf16(nullptr, nullptr, 0, 512, 64, nullptr, nullptr, nullptr).is_ok());  // no rows: no launch
}

TEST_F(BackendOps, DenseExpertMlpMatchesCpu) {
  const int64_t experts = 3, dim = 48, inter = 40;
  const std::vector<int32_t> offsets = {0, 4, 4, 9};  // expert 1 has no rows
  const int64_t rows = offsets.back();
  auto x = randn(rows * dim, 41), w1 = randn(experts * inter * dim, 42, 0.2f), w3 = randn(experts * inter * dim, 43, 0.2f),
       w2 = randn(experts * dim * inter, 44, 0.2f);
  std::vector<float> ref(rows * dim);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::vector<float> g(inter), u(inter), a(inter);
      for (int64_t i = 0; i < inter; ++i) {
        g[i] = ops::dot(&x[r * dim], &w1[(e * inter + i) * dim], dim);
        u[i] = ops::dot(&x[r * dim], &w3[(e * inter + i) * dim], dim);
      }
      ops::situ_mul(g.data(), u.data(), inter, 3.0f, 0.0f, a.data());
      for (int64_t d = 0; d < dim; ++d) ref[r * dim + d] = ops::dot(a.data(), &w2[(e * dim + d) * inter], inter);
    }
  auto dx = dev(x), d1 = dev(w1), d3 = dev(w3), d2 = dev(w2);
  auto doff = dev(offsets);
  DeviceBuffer<float> act(rows * inter), out(rows * dim);
  MoeDenseWeights w{d1.get(), d3.get(), d2.get(), dim, inter, MoeActivation::kSiTU, 3.0f, 0.0f};
  ASSERT_TRUE(moe_expert_mlp_dense(w, doff.get(), experts, rows, dx.get(), act.get(), out.get(), nullptr).is_ok());
  EXPECT_LT(nerr(host(out), ref), 1e-5);
}

}  // namespace
}  // namespace pdserve::cuda
