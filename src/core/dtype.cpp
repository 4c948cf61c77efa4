#include "pdserve/core/dtype.h"

#include <cmath>
#include <limits>

namespace pdserve {

int dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kU8: case DType::kI8: case DType::kBool: return 1;
    case DType::kI64: case DType::kF64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
    case DType::kF64: return "F64";
  }
  return "?";
}

bool dtype_from_name(std::string_view n, DType* out) {
  static constexpr struct { std::string_view name; DType t; } kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"U8", DType::kU8},
      {"I8", DType::kI8},   {"I32", DType::kI32}, {"I64", DType::kI64},   {"BOOL", DType::kBool},
      {"F64", DType::kF64}};
  for (const auto& e : kTable) {
    if (e.name == n) { *out = e.t; return true; }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  // Adequate for fixtures and tests; not on a hot path.
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < std::ldexp(1.0f, -24)) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp16 = e - 1 + 15;
  if (exp16 <= 0) {
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  float man = std::ldexp(a, -(e - 1)) - 1.0f;  // [0, 1)
  int m = static_cast<int>(std::nearbyint(man * 1024.0f));
  if (m == 1024) { m = 0; ++exp16; }
  if (exp16 >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exp16 << 10) | static_cast<uint16_t>(m);
}

float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

}  // namespace pdserve
