// mxfp4_repack_decode / mxfp4_unpack_decode (layout: moe_decode.h). Host code, run once
// per layer at load time; both walk the same index map, so one is the other's inverse.
#include <string>

#include "moe/moe_decode.h"

namespace pdserve::cuda {

namespace {

// Stored bit position of bit b (0..2 magnitude, 3 sign) of the weight with word-local
// index w (0..7): out_j = (w / 2), half = w % 2 (+16 for the high half, mod 32: out2 and
// out3 come from rotations of the word).
int stored_bit_bf16(int w, int b) {
  static constexpr int kPos[4][4] = {{6, 7, 8, 15}, {2, 3, 4, 11}, {28, 29, 30, 5}, {16, 9, 10, 17}};
  return (kPos[w / 2][b] + 16 * (w % 2)) % 32;
}

// Mxfp4DecodeBits::kFp8 (moe_decode.h): input w < 4 sits where E4M3 byte w wants it (mantissa
// 2, exponent 3-4, sign 7); input 4 + j where the two rotates put it into byte j (sign and
// exponent bit 0 by rotl 6, mantissa and exponent bit 1 by rotl 4).
int stored_bit_fp8(int w, int b) {
  static constexpr int kLo[4] = {2, 3, 4, 7}, kHi[4] = {-2, -3, 0, 1};
  const int j = w % 4;
  return (8 * j + (w < 4 ? kLo[b] : kHi[b]) + 32) % 32;
}

int stored_bit(Mxfp4DecodeBits bits, int w, int b) { return bits == Mxfp4DecodeBits::kFp8 ? stored_bit_fp8(w, b) : stored_bit_bf16(w, b); }

uint32_t shuffle_word(Mxfp4DecodeBits bits, const uint8_t codes[8]) {
  uint32_t q = 0;
  for (int w = 0; w < 8; ++w)
    for (int b = 0; b < 4; ++b) q |= uint32_t((codes[w] >> b) & 1u) << stored_bit(bits, w, b);
  return q;
}

void unshuffle_word(Mxfp4DecodeBits bits, uint32_t q, uint8_t codes[8]) {
  for (int w = 0; w < 8; ++w) {
    codes[w] = 0;
    for (int b = 0; b < 4; ++b) codes[w] |= uint8_t(((q >> stored_bit(bits, w, b)) & 1u) << b);
  }
}

Status check_shape(int64_t experts, int64_t rows, int64_t cols, const char* what) {
  if (experts <= 0 || !decode_layout_fits(rows, cols))
    return invalid_argument(std::string(what) + ": needs experts > 0, rows % 8 == 0 and cols % 128 == 0");
  return Status::ok();
}

// Calls f(src_row, src_col0, dst_word_byte, dst_scale_byte, scale_src_index) for every
// word of every tile: the one index map both directions share.
template <typename F>
void for_each_word(int64_t experts, int64_t rows, int64_t cols, F&& f) {
  const int64_t chunks = cols / 128, tiles = rows / 8;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t n = 0; n < tiles; ++n)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t tile = (e * tiles + n) * chunks + c;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const int64_t row = e * rows + n * 8 + g;
          for (int i = 0; i < 4; ++i) {
            const int64_t col0 = c * 128 + 32 * i + 8 * t;
            const int64_t word_byte = tile * 512 + lane * 16 + i * 4;
            const int64_t scale_byte = tile * 32 + g * 4 + i;
            f(row, col0, word_byte, t == 0 ? scale_byte : -1, row * (cols / 32) + col0 / 32);
          }
        }
      }
}

}  // namespace

Result<bool> mxfp4_repack_decode(const uint8_t* packed, const uint8_t* scales, int64_t experts, int64_t rows, int64_t cols,
                                 std::vector<uint8_t>* packed_out, std::vector<uint8_t>* scales_out, Mxfp4DecodeBits bits) {
  PDS_RETURN_IF_ERROR(check_shape(experts, rows, cols, "mxfp4_repack_decode"));
  packed_out->assign(experts * rows * cols / 2, 0);
  scales_out->assign(experts * rows * cols / 32, 0);
  for_each_word(experts, rows, cols, [&](int64_t row, int64_t col0, int64_t wb, int64_t sb, int64_t si) {
    uint8_t codes[8];
    const uint8_t* src = packed + row * (cols / 2) + col0 / 2;
    for (int w = 0; w < 8; ++w) codes[w] = (src[w / 2] >> (4 * (w % 2))) & 0xfu;
    const uint32_t q = shuffle_word(bits, codes);
    for (int b = 0; b < 4; ++b) (*packed_out)[wb + b] = uint8_t(q >> (8 * b));
    if (sb >= 0) (*scales_out)[sb] = scales[si];
  });
  return mxfp4_scales_wide(scales, experts * rows * cols / 32);
}

Status mxfp4_unpack_decode(const uint8_t* packed, const uint8_t* scales, int64_t experts, int64_t rows, int64_t cols,
                           std::vector<uint8_t>* packed_out, std::vector<uint8_t>* scales_out, Mxfp4DecodeBits bits) {
  PDS_RETURN_IF_ERROR(check_shape(experts, rows, cols, "mxfp4_unpack_decode"));
  packed_out->assign(experts * rows * cols / 2, 0);
  scales_out->assign(experts * rows * cols / 32, 0);
  for_each_word(experts, rows, cols, [&](int64_t row, int64_t col0, int64_t wb, int64_t sb, int64_t si) {
    uint32_t q = 0;
    for (int b = 0; b < 4; ++b) q |= uint32_t(packed[wb + b]) << (8 * b);
    uint8_t codes[8];
    unshuffle_word(bits, q, codes);
    uint8_t* dst = packed_out->data() + row * (cols / 2) + col0 / 2;
    for (int w = 0; w < 8; w += 2) dst[w / 2] = uint8_t(codes[w] | (codes[w + 1] << 4));
    if (sb >= 0) (*scales_out)[si] = scales[sb];
  });
  return Status::ok();
}

}  // namespace pdserve::cuda
