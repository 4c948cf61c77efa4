// bf16 bit patterns on the device with the host's bits (core/dtype.h f32_to_bf16): round to
// nearest even in integer arithmetic. Finite values and +-Inf round as __float2bfloat16_rn
// (overflow to +-Inf, subnormals kept); a NaN keeps its sign and top payload bits with the
// quiet bit set, where cvt.rn.bf16.f32 gives the canonical NaN. Writers of caches the host also
// reads (the bf16 MLA latent cache) use this so CPU and GPU pools hold the same bits.
#pragma once

#include <cstdint>

namespace pdserve::cuda {

__device__ __forceinline__ uint32_t bf16_bits_rne(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// Two values -> one word, the first in the low half (the lower address in memory).
__device__ __forceinline__ uint32_t bf16x2_bits_rne(float lo, float hi) { return bf16_bits_rne(lo) | (bf16_bits_rne(hi) << 16); }

}  // namespace pdserve::cuda
