// Byte-pair merge by rank, the algorithm tiktoken's CoreBPE uses, over a flat hash table of
// token bytes. Private to the tokenizer library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pdserve::tokenizer {

using Rank = uint32_t;
inline constexpr Rank kNoRank = 0xFFFFFFFFu;

// bytes -> rank, open addressing; all token bytes live in one arena.
class RankTable {
 public:
  // `tokens[r]` holds the bytes of rank r. Returns false on a duplicate.
  bool build(const std::vector<std::string>& tokens);
  Rank find(std::string_view bytes) const {
    const uint64_t h = hash(bytes);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank == kNoRank) return kNoRank;
      if (s.hash == static_cast<uint32_t>(h) && s.len == bytes.size() &&
          std::char_traits<char>::compare(arena_.data() + s.offset, bytes.data(), bytes.size()) == 0)
        return s.rank;
    }
  }
  std::string_view bytes(Rank r) const { return {arena_.data() + offsets_[r], offsets_[r + 1] - offsets_[r]}; }
  size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }

  static uint64_t hash(std::string_view s);

 private:
  struct Slot {
    uint32_t hash;
    uint32_t len;
    uint32_t offset;
    Rank rank = kNoRank;
  };
  std::string arena_;
  std::vector<uint32_t> offsets_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Appends the ranks of `piece` (one pre-tokeniser match, at least one byte) to `out`.
void bpe_encode_piece(const RankTable& table, std::string_view piece, std::vector<int32_t>* out);

}  // namespace pdserve::tokenizer
