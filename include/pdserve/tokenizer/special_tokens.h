// Names and positions of Kimi's special tokens. The ids are num_ranks + offset, so the same
// table describes the real vocabulary (num_ranks 163584) and the tiny ones make-model writes.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace pdserve::tokenizer {

inline constexpr int32_t kNumReservedSpecialTokens = 256;  // ids num_ranks .. num_ranks+255

inline constexpr std::string_view kBos = "[BOS]";
inline constexpr std::string_view kEos = "[EOS]";
inline constexpr std::string_view kEndOfMsg = "<|end_of_msg|>";  // the chat stop token
inline constexpr std::string_view kOpen = "<|open|>";
inline constexpr std::string_view kClose = "<|close|>";
inline constexpr std::string_view kSep = "<|sep|>";
inline constexpr std::string_view kMediaPad = "<|media_pad|>";
inline constexpr std::string_view kUnk = "[UNK]";
inline constexpr std::string_view kPad = "[PAD]";

struct SpecialSlot {
  int32_t offset;
  std::string_view name;
};

// Offsets from the first special id. The first block is the documented Kimi-K3 set; the
// second are names other public tooling reads off the K3 tokenizer_config.json (unconfirmed
// here, see docs/tokenizer.md). Every other slot is "<|reserved_token_{id}|>".
inline constexpr std::array<SpecialSlot, 16> kKimiSpecialSlots{{
    {0, kBos}, {1, kEos}, {2, kEndOfMsg}, {3, kOpen}, {4, kClose}, {5, kSep},
    {21, kMediaPad}, {254, kUnk}, {255, kPad},
    {6, "[start_header_id]"}, {7, "[end_header_id]"}, {9, "[EOT]"},
    {18, "<|media_begin|>"}, {19, "<|media_content|>"}, {20, "<|media_end|>"},
    {65, "<osagent_mode>"},
}};

}  // namespace pdserve::tokenizer
