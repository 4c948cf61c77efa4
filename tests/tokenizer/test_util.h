// Shared fixtures: tiny tokenizers written once per test process into a temp directory.
#pragma once

#include <string>
#include <vector>

#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::tokenizer::testing {

// Directory holding a tokenizer written by write_tiny_tokenizer(dir, num_ranks).
const std::string& tiny_dir(int num_ranks);
const Tokenizer& tiny(int num_ranks);
std::string source_path(const std::string& rel);  // PDSERVE_SOURCE_DIR/rel
std::string read_file(const std::string& path);
// A varied set of UTF-8 strings (scripts, emoji, whitespace, code, digits) for round trips.
std::vector<std::string> sample_texts();

}  // namespace pdserve::tokenizer::testing
