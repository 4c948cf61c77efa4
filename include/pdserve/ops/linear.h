// Dense linear layers, CPU reference: y[m, out] = x[m, in] * W[out, in]^T in fp32.
// Each output row is computed independently and in a fixed order, so a row's result does
// not depend on which other rows share the batch (the mixed-batch tests rely on this).
#pragma once

#include <cstdint>
#include <vector>

namespace pdserve::ops {

struct DenseMatrix {
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features
  std::vector<float> data;  // row-major [rows, cols]

  bool empty() const { return rows == 0; }
  const float* row(int64_t r) const { return data.data() + r * cols; }
};

float dot(const float* a, const float* b, int64_t n);
void matmul_nt(const float* x, int64_t m, const DenseMatrix& w, float* y);
// Rows [row_begin, row_end) of W only: y[m, row_end-row_begin].
void matmul_nt_rows(const float* x, int64_t m, const DenseMatrix& w, int64_t row_begin, int64_t row_end, float* y);

}  // namespace pdserve::ops
