#include "pdserve/ops/linear.h"

namespace pdserve::ops {

float dot(const float* a, const float* b, int64_t n) {
  // Four partial sums: lets the compiler vectorise while the order stays fixed.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void matmul_nt_rows(const float* x, int64_t m, const DenseMatrix& w, int64_t row_begin, int64_t row_end, float* y) {
  const int64_t n = row_end - row_begin;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * w.cols;
    float* yi = y + i * n;
    for (int64_t r = row_begin; r < row_end; ++r) yi[r - row_begin] = dot(xi, w.row(r), w.cols);
  }
}

void matmul_nt(const float* x, int64_t m, const DenseMatrix& w, float* y) { matmul_nt_rows(x, m, w, 0, w.rows, y); }

}  // namespace pdserve::ops
