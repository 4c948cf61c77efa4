// Private: a small deterministic byte-level BPE trainer (for the tiny tokenizer only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::tokenizer {

class PreTokenizer;

// Returns num_ranks token byte strings: the 256 single bytes (rank = byte value), then merges
// in the order learned. Each step merges the most frequent adjacent pair inside pre-tokeniser
// pieces; ties go to the lexicographically smaller merged bytes, then the shorter left part.
Result<std::vector<std::string>> train_bpe(const PreTokenizer& pre, std::string_view corpus, int num_ranks);

}  // namespace pdserve::tokenizer
