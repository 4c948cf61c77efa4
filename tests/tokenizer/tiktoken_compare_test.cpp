// Ids identical to Python tiktoken (set up as Kimi's tokenizer) on >10,000 generated strings,
// for a 1024-rank and an 8192-rank tokenizer from our writer. The expected ids come from
// tools/tokenizer/tiktoken_compare.py; without python3 + tiktoken the test skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "pdserve/tokenizer/tokenizer.h"
#include "test_util.h"

namespace pdserve::tokenizer {
namespace {

std::string b64decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(chars.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
    else { char buf[8]; std::snprintf(buf, sizeof buf, "\\x%02X", c); out += buf; }
  }
  return out;
}

void compare(int num_ranks) {
  const std::string& dir = testing::tiny_dir(num_ranks);
  const std::string out = dir + "/tiktoken_expected.jsonl";
  const std::string cmd = "python3 " + testing::source_path("tools/tokenizer/tiktoken_compare.py") + " --model " +
                          dir + " --out " + out + " 2>" + dir + "/compare.log";
  const int rc = std::system(cmd.c_str());
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code == 77 || code == 127) GTEST_SKIP() << "python3 with tiktoken is not available (pip install tiktoken)";
  ASSERT_EQ(code, 0) << testing::read_file(dir + "/compare.log");

  const Tokenizer& tok = testing::tiny(num_ranks);
  std::ifstream f(out);
  std::string line;
  std::map<std::string, int> per_cat, bad_cat;
  int n = 0, bad = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    const std::string input = b64decode(j["b64"].get<std::string>());
    const auto want = j["ids"].get<std::vector<TokenId>>();
    const auto got = tok.encode(input, j["special"].get<bool>());
    const std::string cat = j["cat"];
    ++n;
    ++per_cat[cat];
    if (got != want) {
      ++bad;
      ++bad_cat[cat];
      if (bad <= 10) {
        size_t k = 0;
        while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
        ADD_FAILURE() << "[" << cat << "] \"" << escape(input) << "\": first difference at id " << k << " (got "
                      << (k < got.size() ? got[k] : -1) << ", tiktoken " << (k < want.size() ? want[k] : -1) << ")";
      }
    }
  }
  EXPECT_GE(n, 10000);
  EXPECT_EQ(bad, 0) << bad << " of " << n << " strings differ";
  for (auto& [c, k] : per_cat) std::cout << "  " << c << ": " << k << " strings, " << bad_cat[c] << " differ\n";
}

TEST(TiktokenCompare, Tiny1024) { compare(1024); }
TEST(TiktokenCompare, Tiny8192) { compare(8192); }

}  // namespace
}  // namespace pdserve::tokenizer
