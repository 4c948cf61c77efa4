// A deterministic tiny Kimi-format tokenizer for test models (pdserve make-model): the same
// files and code path as the real one, with num_ranks BPE tokens learned from an embedded
// multilingual corpus, and the 256 specials at num_ranks + Kimi's offsets.
#pragma once

#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::tokenizer {

inline constexpr int kTinyDefaultRanks = 1024;

// Writes DIR/tiktoken.model and DIR/tokenizer_config.json (DIR must exist).
// Vocabulary size = num_ranks + 256. Same inputs give byte-identical files.
Status write_tiny_tokenizer(const std::string& dir, int num_ranks = kTinyDefaultRanks);

// The pieces, for tests and tools.
Result<std::vector<std::string>> train_tiny_ranks(int num_ranks);
Status write_tokenizer_config(const std::string& path, int num_ranks);

}  // namespace pdserve::tokenizer
