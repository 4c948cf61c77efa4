// Element types the engine reads and writes, and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace pdserve {

enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kI8, kI32, kI64, kBool, kF64 };

// Bytes per element.
int dtype_size(DType t);
// safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
bool dtype_from_name(std::string_view name, DType* out);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// MXFP4 (OCP microscaling): E2M1 elements, one E8M0 scale per 32 elements.
inline constexpr int kMxfp4GroupSize = 32;
// Value of an E2M1 nibble (bit 3 sign, bits 2..1 exponent, bit 0 mantissa).
inline float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = kMag[nibble & 7];
  return (nibble & 8) ? -m : m;
}
// 2^(e - 127); e = 255 is NaN in the spec.
float e8m0_to_f32(uint8_t e);

}  // namespace pdserve
