#include "bpe.h"

#include <cstring>
#include <queue>

namespace pdserve::tokenizer {

uint64_t RankTable::hash(std::string_view s) {
  // Most lookups are 2..8-byte pairs: read them with fixed-size loads (wyhash's trick of
  // overlapping reads) instead of a variable-length memcpy; longer keys fold 8 bytes at a time.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto load32 = [](const unsigned char* q) { uint32_t v; std::memcpy(&v, q, 4); return static_cast<uint64_t>(v); };
  auto load64 = [](const unsigned char* q) { uint64_t v; std::memcpy(&v, q, 8); return v; };
  uint64_t h = n * kMul;
  if (n <= 8) {
    uint64_t w;
    if (n >= 4) w = (load32(p) << 32) | load32(p + n - 4);
    else if (n > 0) w = (uint64_t(p[0]) << 16) | (uint64_t(p[n >> 1]) << 8) | p[n - 1];
    else w = 0;
    h = (h ^ w) * kMul;
  } else {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      h = (h ^ load64(p + i)) * kMul;
      h ^= h >> 29;
    }
    h = (h ^ load64(p + n - 8)) * kMul;  // the tail, overlapping the last full word
  }
  return h ^ (h >> 32);
}

bool RankTable::build(const std::vector<std::string>& tokens) {
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  arena_.clear();
  offsets_.clear();
  for (const auto& t : tokens) {
    offsets_.push_back(static_cast<uint32_t>(arena_.size()));
    arena_ += t;
  }
  offsets_.push_back(static_cast<uint32_t>(arena_.size()));
  for (Rank r = 0; r < tokens.size(); ++r) {
    const std::string_view b = bytes(r);
    const uint64_t h = hash(b);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.rank == kNoRank) break;
      if (s.len == b.size() && std::memcmp(arena_.data() + s.offset, b.data(), b.size()) == 0) return false;
    }
    slots_[i] = Slot{static_cast<uint32_t>(h), static_cast<uint32_t>(b.size()), offsets_[r], r};
  }
  return true;
}

namespace {

// tiktoken's loop: repeatedly merge the adjacent pair whose concatenation has the lowest rank,
// the leftmost one on ties. Quadratic, but the fastest choice for the short pieces that
// make up almost all text.
void merge_small(const RankTable& t, std::string_view piece, std::vector<int32_t>* out) {
  struct Part {
    uint32_t start;
    Rank rank;
  };
  const size_t n = piece.size();
  Part stack_parts[130];
  std::vector<Part> heap_parts;
  Part* parts = stack_parts;
  if (n + 1 > 130) {
    heap_parts.resize(n + 1);
    parts = heap_parts.data();
  }
  size_t count = n + 1;
  for (size_t i = 0; i + 1 < n; ++i) parts[i] = {static_cast<uint32_t>(i), t.find(piece.substr(i, 2))};
  parts[n - 1] = {static_cast<uint32_t>(n - 1), kNoRank};
  parts[n] = {static_cast<uint32_t>(n), kNoRank};

  auto rank_at = [&](size_t i) -> Rank {  // rank of parts[i] merged with parts[i+1], after removal of i+1
    if (i + 3 < count) return t.find(piece.substr(parts[i].start, parts[i + 3].start - parts[i].start));
    return kNoRank;
  };
  while (count > 2) {
    Rank best = kNoRank;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < count; ++i) {
      if (parts[i].rank < best) {
        best = parts[i].rank;
        bi = i;
      }
    }
    if (best == kNoRank) break;
    parts[bi].rank = rank_at(bi);
    if (bi > 0) parts[bi - 1].rank = rank_at(bi - 1);
    std::memmove(parts + bi + 1, parts + bi + 2, (count - bi - 2) * sizeof(Part));
    --count;
  }
  for (size_t i = 0; i + 1 < count; ++i)
    out->push_back(static_cast<int32_t>(t.find(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start))));
}

// Same choice rule with a heap and a linked list, for long pieces (runs of Han characters or
// spaces) where the quadratic loop would dominate. Ties break on the start offset, so the
// merge order equals merge_small's.
void merge_large(const RankTable& t, std::string_view piece, std::vector<int32_t>* out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  struct Node {
    uint32_t next;  // start of the following part, n at the end
    uint32_t prev;  // start of the previous part, UINT32_MAX at the front
    Rank rank;      // rank of this part merged with the next, kNoRank if none
    bool alive;
  };
  std::vector<Node> nodes(n);
  using Entry = std::pair<Rank, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t i = 0; i < n; ++i) {
    nodes[i] = {i + 1, i == 0 ? UINT32_MAX : i - 1, i + 1 < n ? t.find(piece.substr(i, 2)) : kNoRank, true};
    if (nodes[i].rank != kNoRank) heap.push({nodes[i].rank, i});
  }
  auto pair_rank = [&](uint32_t s) -> Rank {
    const uint32_t nx = nodes[s].next;
    if (nx >= n) return kNoRank;
    const uint32_t end = nodes[nx].next;
    return t.find(piece.substr(s, end - s));
  };
  while (!heap.empty()) {
    auto [r, s] = heap.top();
    heap.pop();
    if (!nodes[s].alive || nodes[s].rank != r) continue;  // stale entry
    const uint32_t victim = nodes[s].next;
    nodes[victim].alive = false;
    nodes[s].next = nodes[victim].next;
    if (nodes[s].next < n) nodes[nodes[s].next].prev = s;
    nodes[s].rank = pair_rank(s);
    if (nodes[s].rank != kNoRank) heap.push({nodes[s].rank, s});
    if (nodes[s].prev != UINT32_MAX) {
      const uint32_t p = nodes[s].prev;
      nodes[p].rank = pair_rank(p);
      if (nodes[p].rank != kNoRank) heap.push({nodes[p].rank, p});
    }
  }
  for (uint32_t s = 0; s < n; s = nodes[s].next)
    out->push_back(static_cast<int32_t>(t.find(piece.substr(s, nodes[s].next - s))));
}

}  // namespace

void bpe_encode_piece(const RankTable& table, std::string_view piece, std::vector<int32_t>* out) {
  const Rank whole = table.find(piece);
  if (whole != kNoRank) {
    out->push_back(static_cast<int32_t>(whole));
    return;
  }
  if (piece.size() <= 128) {
    merge_small(table, piece, out);
  } else {
    merge_large(table, piece, out);
  }
}

}  // namespace pdserve::tokenizer
