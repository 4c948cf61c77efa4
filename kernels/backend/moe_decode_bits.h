// Which bit shuffle the CUDA backend repacks a MoE layer's decode-layout experts into
// (moe_decode.h, Mxfp4DecodeBits). Host code, no device calls.
#pragma once

#include <cstdint>

#include "moe/moe_decode.h"

namespace pdserve::cuda {

// kFp8 (kAuto then runs the E4M3 warpgroup-MMA forms: 1.03-1.13x the bf16 forms at B 4-256 at
// K3's EP32 shapes, 0.98-0.99x at B 1-2, closer to the CPU reference; docs/perf.md) where `e4m3` asks
// for it and the 64-row form takes the layer: inter % 32 == 0, dim % 64 == 0, both <= 4096, no
// scale byte above 128 (the E4M3 forms refuse wide scales). Else kBf16, the only shuffle the
// prefill grouped GEMM reads: the backend asks only where no prefill chunk runs (the decode role).
inline Mxfp4DecodeBits moe_decode_bits_for(bool e4m3, int64_t inter, int64_t dim, bool scale_above_128) {
  const bool fits = inter > 0 && dim > 0 && inter % 32 == 0 && dim % 64 == 0 && inter <= 4096 && dim <= 4096;
  return e4m3 && fits && !scale_above_128 ? Mxfp4DecodeBits::kFp8 : Mxfp4DecodeBits::kBf16;
}

}  // namespace pdserve::cuda
