// The expert MLP's activation between gate/up and down, on the device: SiLU, or SiTU with
// its bounds (moe.h, MoeActivation). Shared by the prefill expert kernels and the decode ones
// so that both apply the same formula. Internal to kernels/moe.
#pragma once

#include "common/reduce.cuh"
#include "moe/moe.h"

namespace pdserve::cuda {

struct MoeAct {
  MoeActivation kind;
  float beta, linear_beta;
  __device__ float operator()(float g, float u) const {
    if (kind == MoeActivation::kSiLU) return g * sigmoid(g) * u;
    const float a = beta * tanhf(g / beta) * sigmoid(g);
    return a * (linear_beta > 0.0f ? linear_beta * tanhf(u / linear_beta) : u);
  }
};

}  // namespace pdserve::cuda
