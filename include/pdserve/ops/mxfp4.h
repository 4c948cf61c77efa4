// MXFP4 weights as stored by compressed-tensors (format "mxfp4-pack-quantized"):
//   weight_packed [out, in/2] U8: byte j of a row holds element 2j (low nibble) and 2j+1 (high)
//   weight_scale  [out, in/32] U8: E8M0 exponent per group of 32 consecutive inputs
// value = E2M1[nibble] * 2^(scale - 127). CPU reference: dequantise a row, then fp32 dot.
#pragma once

#include <cstdint>
#include <vector>

namespace pdserve::ops {

struct Mxfp4Matrix {
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features (multiple of 32)
  const uint8_t* packed = nullptr;
  const uint8_t* scales = nullptr;
};

void mxfp4_dequant_row(const Mxfp4Matrix& w, int64_t r, float* out);
void mxfp4_dequant(const Mxfp4Matrix& w, float* out);  // [rows, cols]
void mxfp4_matmul_nt(const float* x, int64_t m, const Mxfp4Matrix& w, float* y);

// Quantise fp32 rows to MXFP4 (scale = smallest power of two with amax/scale <= 6, elements
// rounded to the nearest E2M1 value, ties to the even code). Used by make-model and tests.
void mxfp4_quantize(const float* w, int64_t rows, int64_t cols, std::vector<uint8_t>* packed, std::vector<uint8_t>* scales);

}  // namespace pdserve::ops
