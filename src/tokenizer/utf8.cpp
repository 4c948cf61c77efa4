#include "pdserve/tokenizer/utf8.h"

namespace pdserve::tokenizer::utf8 {
namespace {

// Result of looking at one sequence start: `len` bytes form a valid code point (valid=true),
// or the first `len` bytes are a maximal ill-formed subpart; `truncated` means the input
// ended while the sequence was still well-formed.
struct Seq {
  size_t len;
  bool valid;
  bool truncated;
};

Seq scan(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {1, true, false};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {i, false, true};
    const unsigned char b = p[i];
    const bool ok = (i == 1) ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {i, false, false};
  }
  return {need, true, false};
}

}  // namespace

bool is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    // ASCII fast path: eight bytes at a time.
    while (i + 8 <= n) {
      unsigned long long w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) { ++i; continue; }
    Seq q = scan(p + i, n - i);
    if (!q.valid) return false;
    i += q.len;
  }
  return true;
}

size_t sanitize_prefix(std::string_view s, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size(), run = 0;
  while (i < n) {
    if (p[i] < 0x80) { ++i; continue; }
    Seq q = scan(p + i, n - i);
    if (q.valid) { i += q.len; continue; }
    if (q.truncated) break;  // may still complete
    out->append(s.data() + run, i - run);
    out->append(kReplacement);
    i += q.len;
    run = i;
  }
  out->append(s.data() + run, i - run);
  return i;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t used = sanitize_prefix(s, &out);
  if (used < s.size()) out.append(kReplacement);  // the truncated tail is one subpart
  return out;
}

bool is_python_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

char32_t next_code_point(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *i;
  if (p[0] < 0x80) { *i += 1; return p[0]; }
  if (p[0] < 0xE0) { *i += 2; return ((p[0] & 0x1F) << 6) | (p[1] & 0x3F); }
  if (p[0] < 0xF0) { *i += 3; return ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F); }
  *i += 4;
  return ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

}  // namespace pdserve::tokenizer::utf8
