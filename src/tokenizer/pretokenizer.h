// Kimi's pre-tokenisation regex, run through PCRE2 (JIT, UTF + UCP).
// Private to the tokenizer library.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "pdserve/core/status.h"

namespace pdserve::tokenizer {

// The pattern as Kimi's tokenization_kimi.py writes it (fancy-regex syntax, uses `&&`).
extern const char* const kKimiPatternReference;
// The same language in PCRE2 syntax: see pretokenizer.cpp for the translation.
extern const char* const kKimiPatternPcre2;

class PreTokenizer {
 public:
  static Result<std::shared_ptr<const PreTokenizer>> create(const std::string& pattern);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls f(piece) for every match, left to right, like tiktoken's find_iter.
  // `text` must be valid UTF-8. Returns an error only if PCRE2 itself fails.
  template <typename F>
  Status for_each_piece(std::string_view text, F&& f) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start, end;
      int rc = find(text, pos, &start, &end);
      if (rc == 0) break;
      if (rc < 0) return internal_error("pre-tokeniser regex failed (PCRE2 error " + std::to_string(rc) + ")");
      f(text.substr(start, end - start));
      pos = end > start ? end : end + 1;  // never loop on an empty match
    }
    return Status::ok();
  }

 private:
  PreTokenizer() = default;
  // 1: match in [*start, *end); 0: no more matches; <0: PCRE2 error code.
  int find(std::string_view text, size_t pos, size_t* start, size_t* end) const;

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace pdserve::tokenizer
