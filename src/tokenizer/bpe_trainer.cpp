#include "bpe_trainer.h"

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

#include "pretokenizer.h"

namespace pdserve::tokenizer {
namespace {

uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

struct Candidate {
  int64_t count;
  std::string merged;
  size_t left_len;
  int a, b;
};

// priority_queue pops the largest: higher count first, then smaller bytes, then shorter left.
struct Worse {
  bool operator()(const Candidate& x, const Candidate& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.merged != y.merged) return x.merged > y.merged;
    return x.left_len > y.left_len;
  }
};

}  // namespace

Result<std::vector<std::string>> train_bpe(const PreTokenizer& pre, std::string_view corpus, int num_ranks) {
  if (num_ranks < 256) return invalid_argument("num_ranks must be at least 256, got " + std::to_string(num_ranks));
  std::map<std::string, int64_t> piece_counts;  // ordered: a fixed word order keeps it deterministic
  PDS_RETURN_IF_ERROR(pre.for_each_piece(corpus, [&](std::string_view p) { ++piece_counts[std::string(p)]; }));

  std::vector<std::string> vocab;
  std::unordered_map<std::string, int> index;
  for (int b = 0; b < 256; ++b) {
    vocab.emplace_back(1, static_cast<char>(b));
    index.emplace(vocab.back(), b);
  }
  std::vector<std::vector<int>> words;
  std::vector<int64_t> counts;
  for (auto& [p, c] : piece_counts) {
    std::vector<int> syms;
    for (unsigned char ch : p) syms.push_back(ch);
    words.push_back(std::move(syms));
    counts.push_back(c);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int>> pair_words;
  std::priority_queue<Candidate, std::vector<Candidate>, Worse> heap;
  auto push = [&](uint64_t key) {
    const int a = static_cast<int>(key >> 32), b = static_cast<int>(key & 0xFFFFFFFFu);
    const int64_t c = pair_count[key];
    if (c > 0) heap.push({c, vocab[a] + vocab[b], vocab[a].size(), a, b});
  };
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = pair_key(words[w][i], words[w][i + 1]);
      pair_count[k] += counts[w];
      pair_words[k].push_back(static_cast<int>(w));
    }
  for (auto& [k, c] : pair_count) push(k);

  std::vector<int> stamp(words.size(), -1);
  int step = 0;
  while (static_cast<int>(vocab.size()) < num_ranks) {
    if (heap.empty())
      return resource_exhausted("tiny tokenizer corpus supports only " + std::to_string(vocab.size()) +
                                " ranks, " + std::to_string(num_ranks) + " requested");
    Candidate top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.a, top.b);
    if (pair_count[key] != top.count) continue;  // stale
    int c;
    if (auto it = index.find(top.merged); it != index.end()) {
      c = it->second;  // the same bytes were already learned through another split
    } else {
      c = static_cast<int>(vocab.size());
      vocab.push_back(top.merged);
      index.emplace(top.merged, c);
    }
    ++step;
    std::vector<uint64_t> touched;
    const std::vector<int> where = std::move(pair_words[key]);
    pair_words[key].clear();
    for (int w : where) {
      if (stamp[w] == step) continue;
      stamp[w] = step;
      auto& syms = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < syms.size() && !has; ++i) has = syms[i] == top.a && syms[i + 1] == top.b;
      if (!has) continue;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        const uint64_t k = pair_key(syms[i], syms[i + 1]);
        pair_count[k] -= counts[w];
        touched.push_back(k);
      }
      std::vector<int> merged;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == top.a && syms[i + 1] == top.b) {
          merged.push_back(c);
          ++i;
        } else {
          merged.push_back(syms[i]);
        }
      }
      syms = std::move(merged);
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        const uint64_t k = pair_key(syms[i], syms[i + 1]);
        pair_count[k] += counts[w];
        pair_words[k].push_back(w);
        touched.push_back(k);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) push(k);
  }
  return vocab;
}

}  // namespace pdserve::tokenizer
