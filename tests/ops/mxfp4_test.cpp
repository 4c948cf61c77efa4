#include <gtest/gtest.h>

#include "pdserve/ops/mxfp4.h"
#include "test_rng.h"

namespace pdserve::ops {
namespace {

TEST(Mxfp4, DequantKnownCodePointsLowNibbleFirst) {
  // One row of 32 values: byte j holds element 2j (low nibble) and 2j+1 (high nibble).
  std::vector<uint8_t> packed(16), scale = {128};  // scale 2^(128-127) = 2
  for (int j = 0; j < 16; ++j) packed[j] = static_cast<uint8_t>((j & 0xf) | (((15 - j) & 0xf) << 4));
  Mxfp4Matrix m{1, 32, packed.data(), scale.data()};
  std::vector<float> out(32);
  mxfp4_dequant_row(m, 0, out.data());
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[2 * j], 2 * e2m1[j]) << j;
    EXPECT_EQ(out[2 * j + 1], 2 * e2m1[15 - j]) << j;
  }
}

TEST(Mxfp4, ScalesApplyPerGroupOf32) {
  std::vector<uint8_t> packed(32, 0x22);  // every element = 1.0 (code 2)
  std::vector<uint8_t> scale = {127, 124};  // groups: 1.0 and 2^-3
  Mxfp4Matrix m{1, 64, packed.data(), scale.data()};
  std::vector<float> out(64);
  mxfp4_dequant_row(m, 0, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[31], 1.0f);
  EXPECT_EQ(out[32], 0.125f);
  EXPECT_EQ(out[63], 0.125f);
}

TEST(Mxfp4, QuantizeRoundTripsRepresentableValues) {
  std::vector<float> w(2 * 64);
  const float codes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (size_t i = 0; i < w.size(); ++i) w[i] = codes[i % 8] * (i % 3 ? 1.0f : -1.0f) * ((i / 32) % 2 ? 0.25f : 4.0f);
  std::vector<uint8_t> packed, scales;
  mxfp4_quantize(w.data(), 2, 64, &packed, &scales);
  Mxfp4Matrix m{2, 64, packed.data(), scales.data()};
  std::vector<float> back(w.size());
  mxfp4_dequant(m, back.data());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(back[i], w[i]) << i;
}

TEST(Mxfp4, MatmulMatchesDequantisedDense) {
  auto w = testing::randn(8 * 64, 3);
  std::vector<uint8_t> packed, scales;
  mxfp4_quantize(w.data(), 8, 64, &packed, &scales);
  Mxfp4Matrix m{8, 64, packed.data(), scales.data()};
  std::vector<float> dense(8 * 64);
  mxfp4_dequant(m, dense.data());
  auto x = testing::randn(3 * 64, 4);
  std::vector<float> y(3 * 8);
  mxfp4_matmul_nt(x.data(), 3, m, y.data());
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 8; ++r) {
      double ref = 0;
      for (int c = 0; c < 64; ++c) ref += static_cast<double>(x[i * 64 + c]) * dense[r * 64 + c];
      EXPECT_NEAR(y[i * 8 + r], ref, 1e-4);
    }
  // Quantisation error is bounded: E2M1 keeps about one significant bit.
  EXPECT_LT(testing::normalized_error(dense, w), 0.35);
}

}  // namespace
}  // namespace pdserve::ops
