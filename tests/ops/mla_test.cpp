#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "pdserve/core/dtype.h"
#include "pdserve/ops/mla.h"
#include "test_rng.h"

namespace pdserve::ops {
namespace {

// Absorbed latent attention over shuffled pages equals plain attention over expanded K/V.
TEST(Mla, PagedAbsorbedEqualsExpandedAttention) {
  const int64_t heads = 3, lat = 24, rope = 8, nope = 8, vd = 6, ctx = 77;
  for (int64_t page_size : {1, 16, 64, 128}) {
    const int64_t pages = (ctx + page_size - 1) / page_size + 3;
    std::vector<int32_t> table(pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    std::vector<float> cache(pages * page_size * (lat + rope), 0.0f);
    PagedLatentView view{cache.data(), page_size, lat + rope, table.data()};
    auto entries = testing::randn(ctx * (lat + rope), 3);
    for (int64_t j = 0; j < ctx; ++j)
      std::copy(&entries[j * (lat + rope)], &entries[(j + 1) * (lat + rope)], const_cast<float*>(view.row(j)));

    auto wkb = testing::randn(heads * nope * lat, 4, 0.2f), wvb = testing::randn(heads * vd * lat, 5, 0.2f);
    auto q = testing::randn(heads * (nope + rope), 6);
    const float scale = 1.0f / std::sqrt(static_cast<float>(nope + rope));
    std::vector<float> q_lat(heads * lat, 0.0f), q_rot(heads * rope), o_lat(heads * lat);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < nope; ++d)
        for (int64_t j = 0; j < lat; ++j) q_lat[h * lat + j] += q[h * (nope + rope) + d] * wkb[(h * nope + d) * lat + j];
      for (int64_t d = 0; d < rope; ++d) q_rot[h * rope + d] = q[h * (nope + rope) + nope + d];
    }
    mla_attend_latent(q_lat.data(), q_rot.data(), heads, lat, rope, view, ctx, scale, o_lat.data());

    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> s(ctx);
      double mx = -1e300;
      for (int64_t j = 0; j < ctx; ++j) {
        const float* e = &entries[j * (lat + rope)];
        double acc = 0;
        for (int64_t d = 0; d < nope; ++d) {
          double k = 0;
          for (int64_t i = 0; i < lat; ++i) k += wkb[(h * nope + d) * lat + i] * e[i];
          acc += q[h * (nope + rope) + d] * k;
        }
        for (int64_t d = 0; d < rope; ++d) acc += q[h * (nope + rope) + nope + d] * e[lat + d];
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < vd; ++d) {
        double ref = 0, got = 0;
        for (int64_t j = 0; j < ctx; ++j) {
          double v = 0;
          for (int64_t i = 0; i < lat; ++i) v += wvb[(h * vd + d) * lat + i] * entries[j * (lat + rope) + i];
          ref += s[j] / sum * v;
        }
        for (int64_t i = 0; i < lat; ++i) got += wvb[(h * vd + d) * lat + i] * o_lat[h * lat + i];
        EXPECT_NEAR(got, ref, 1e-5) << "page_size " << page_size << " head " << h;
      }
    }
  }
}

// A bf16 cache is read exactly: the result equals the fp32 path over the same entries rounded
// to bf16, bit for bit (kv_cache_dtype bfloat16 changes what is stored, not the arithmetic).
TEST(Mla, Bf16CacheEqualsFp32OverTheRoundedEntries) {
  const int64_t heads = 4, lat = 32, rope = 8, ed = lat + rope, ctx = 45, page_size = 16;
  const int64_t pages = (ctx + page_size - 1) / page_size + 2;
  std::vector<int32_t> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(3));
  std::vector<float> c32(pages * page_size * ed, 0.0f);
  std::vector<uint16_t> c16(pages * page_size * ed, 0);
  PagedLatentView v32{c32.data(), page_size, ed, table.data()};
  PagedLatentView v16{nullptr, page_size, ed, table.data(), c16.data()};
  ASSERT_TRUE(v16.bf16());
  auto entries = testing::randn(ctx * ed, 9);
  for (int64_t j = 0; j < ctx; ++j)
    for (int64_t d = 0; d < ed; ++d) {
      const uint16_t r = f32_to_bf16(entries[j * ed + d]);
      const_cast<uint16_t*>(v16.row_bf16(j))[d] = r;
      const_cast<float*>(v32.row(j))[d] = bf16_to_f32(r);
    }
  auto q_lat = testing::randn(heads * lat, 10), q_rot = testing::randn(heads * rope, 11);
  std::vector<float> o32(heads * lat), o16(heads * lat);
  for (int64_t len : {int64_t{1}, int64_t{17}, ctx}) {
    mla_attend_latent(q_lat.data(), q_rot.data(), heads, lat, rope, v32, len, 0.125f, o32.data());
    mla_attend_latent(q_lat.data(), q_rot.data(), heads, lat, rope, v16, len, 0.125f, o16.data());
    EXPECT_EQ(std::memcmp(o32.data(), o16.data(), o32.size() * sizeof(float)), 0) << "ctx " << len;
  }
}

}  // namespace
}  // namespace pdserve::ops
