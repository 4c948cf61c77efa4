// UTF-8 validation and repair shared by the tokenizer, the streaming detokeniser and the CLI.
// Repair follows Unicode's "maximal subpart" rule, which is what Python's
// bytes.decode("utf-8", errors="replace") does, so our ids match a Python reference that
// decodes the same bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pdserve::tokenizer::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_valid(std::string_view s);

// Every maximal ill-formed subpart becomes one U+FFFD; a truncated final sequence too.
std::string sanitize(std::string_view s);

// Streaming form: appends the repaired text of the longest prefix of `s` whose meaning can
// no longer change, and returns how many bytes of `s` that was. What is left over is an
// incomplete (but so far well-formed) sequence of at most 3 bytes.
size_t sanitize_prefix(std::string_view s, std::string* out);

// Python's str.isspace(), which Kimi's encoder uses to cut long runs and to strip reasoning.
bool is_python_space(char32_t c);

// Decodes the code point at s[i] (s must be valid UTF-8); advances i.
char32_t next_code_point(std::string_view s, size_t* i);

}  // namespace pdserve::tokenizer::utf8
