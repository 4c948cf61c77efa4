// Private: the embedded training text for the tiny tokenizer.
#pragma once

#include <cstddef>
#include <string>

namespace pdserve::tokenizer {

// Deterministic; the same bytes on every platform for the same target size.
std::string tiny_training_corpus(size_t target_bytes);

}  // namespace pdserve::tokenizer
