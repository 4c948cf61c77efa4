// tiktoken.model: one "base64(token bytes) rank" line per token, ranks 0..n-1.
#include <fstream>
#include <sstream>

#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::tokenizer {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool base64_decode(std::string_view in, std::string* out) {
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kB64[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out->clear();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = table[static_cast<unsigned char>(c)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return bits < 6;  // a single leftover sextet cannot come from whole bytes
}

std::string base64_encode(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], kB64[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], '='};
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> read_tiktoken_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  std::vector<std::string> ranks;
  std::vector<bool> seen;
  std::string line, tok;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) return data_loss(path + ":" + std::to_string(lineno) + ": expected 'base64 rank'");
    if (!base64_decode(std::string_view(line).substr(0, sp), &tok) || tok.empty())
      return data_loss(path + ":" + std::to_string(lineno) + ": bad base64 token");
    char* end = nullptr;
    const long rank = std::strtol(line.c_str() + sp + 1, &end, 10);
    if (end == line.c_str() + sp + 1 || *end != '\0' || rank < 0 || rank > (1 << 30))
      return data_loss(path + ":" + std::to_string(lineno) + ": bad rank");
    if (static_cast<size_t>(rank) >= ranks.size()) {
      ranks.resize(rank + 1);
      seen.resize(rank + 1, false);
    }
    if (seen[rank]) return data_loss(path + ":" + std::to_string(lineno) + ": rank " + std::to_string(rank) + " repeats");
    seen[rank] = true;
    ranks[rank] = tok;
  }
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) return data_loss(path + ": ranks are not contiguous, " + std::to_string(r) + " is missing");
  if (ranks.empty()) return data_loss(path + ": no tokens");
  return ranks;
}

Status write_tiktoken_model(const std::string& path, const std::vector<std::string>& ranks) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("cannot write " + path);
  for (size_t r = 0; r < ranks.size(); ++r) f << base64_encode(ranks[r]) << ' ' << r << '\n';
  f.close();
  if (!f) return io_error("write failed: " + path);
  return Status::ok();
}

}  // namespace pdserve::tokenizer
