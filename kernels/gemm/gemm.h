// Dense fp32 GEMM on the device, correct-first: y[m, n] = x[m, k] * W[n, k]^T, the layout of
// ops::matmul_nt (weights row-major [out, in]). Plain fp32 FMA, no TF32: each output is one
// ascending-k dot product, so the result differs from the CPU by rounding order only.
// Why our own and not cuBLAS yet: the binaries we carry to the GPU machine need no library
// beyond cudart, and the fast GEMMs (bf16/wgmma) are their own issue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

// x: [m, k] row stride k; w: [n, k] row stride k; y: [m, n] row stride n. y must not alias x or w.
Status matmul_nt(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y, cudaStream_t stream);

}  // namespace pdserve::cuda
