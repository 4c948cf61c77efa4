// Benchmark prompts: random token ids (exact or ranged lengths) or a SPEED-Bench style JSONL.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/bench/config.h"
#include "pdserve/core/status.h"

namespace pdserve::bench {

struct BenchPrompt {
  std::vector<int64_t> ids;  // a token-id prompt, sent as-is (exact input length)
  std::string text;          // a text prompt, used when ids is empty
  int64_t output_len = 0;    // max_tokens; with ignore_eos the exact output length
  std::string category;

  bool is_ids() const { return !ids.empty(); }
  // The prompt length when the client knows it (ids); -1 for text (the server counts).
  int64_t known_input_len() const { return is_ids() ? static_cast<int64_t>(ids.size()) : -1; }
};

// Uniform token ids in [0, vocab); lengths uniform in [max(1, len * ratio), len].
// Deterministic in seed. ratio 1.0 gives exact lengths.
std::vector<BenchPrompt> random_id_prompts(int64_t count, int64_t input_len, int64_t output_len,
                                           double range_ratio, int64_t vocab_size, uint64_t seed);

// One JSON object per line: {"prompt": str} | {"prompt_ids": [int]} | {"turns": [str, ...]}
// (the first turn is sent), optional "category" and "output_len". Blank lines are skipped;
// anything else is an error that names `where` and the line number.
Result<std::vector<BenchPrompt>> parse_jsonl_prompts(const std::string& text, const std::string& where,
                                                     int64_t default_output_len);

// `count` prompts for the configured dataset; a JSONL shorter than count is cycled.
Result<std::vector<BenchPrompt>> make_prompts(const BenchConfig& cfg, int64_t count);

}  // namespace pdserve::bench
