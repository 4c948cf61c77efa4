#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "pdserve/tokenizer/tiny_tokenizer.h"

namespace pdserve::tokenizer::testing {

namespace {
struct TempDirs {  // removed when the test process exits
  std::map<int, std::string> dirs;
  ~TempDirs() {
    for (auto& [n, d] : dirs) std::filesystem::remove_all(d);
  }
};
}  // namespace

const std::string& tiny_dir(int num_ranks) {
  static std::mutex mu;
  static TempDirs temp;
  auto& dirs = temp.dirs;
  std::lock_guard<std::mutex> lock(mu);
  auto it = dirs.find(num_ranks);
  if (it != dirs.end()) return it->second;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("pdserve_tok_" + std::to_string(::getpid()) + "_" + std::to_string(num_ranks));
  fs::create_directories(dir);
  Status st = write_tiny_tokenizer(dir.string(), num_ranks);
  if (!st.is_ok()) ADD_FAILURE() << st.to_string();
  return dirs.emplace(num_ranks, dir.string()).first->second;
}

const Tokenizer& tiny(int num_ranks) {
  static std::mutex mu;
  static std::map<int, Tokenizer> toks;
  const std::string& dir = tiny_dir(num_ranks);
  std::lock_guard<std::mutex> lock(mu);
  auto it = toks.find(num_ranks);
  if (it != toks.end()) return it->second;
  auto t = Tokenizer::load(dir);
  if (!t.is_ok()) {
    ADD_FAILURE() << t.status().to_string();
    std::abort();
  }
  return toks.emplace(num_ranks, std::move(t).value()).first->second;
}

std::string source_path(const std::string& rel) { return std::string(PDSERVE_SOURCE_DIR) + "/" + rel; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> sample_texts() {
  return {
      "",
      "Hello, world! It's a test; we'LL see what'S happening.",
      "  leading and trailing spaces   ",
      "tabs\tand\nnewlines\r\n\r\n\n\n    indented",
      "我们的模型可以理解中文和英文，今天天气很好。",
      "日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
      "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flag 🇯🇵 rainbow 🏳️‍🌈",
      "combining: e\u0301 a\u0308\u0323 Z\u0351\u0356\u0360\u036e q\u0307",
      "Ελληνικά και русский текст, עברית ו-العربية, हिन्दी, ภาษาไทย",
      "digits 1234567890 3.14159 ١٢٣ ７８９ ² ½ Ⅻ",
      "int main() {\n    std::vector<int> v{1, 2, 3};\n    return v.size() > 2 ? 0 : 1;\n}\n",
      "def f(x):\n\treturn x ** 2  # square\n\n\nprint(f(3))",
      std::string(300, ' ') + "x" + std::string(200, '\n'),
      "ſ ǅungla ǈ ﬁne Kelvin K Ångström Å",
      "<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>",
      "\u00a0nbsp\u2028line\u2029para\u3000ideographic\u0085nel\u180emvs",
      std::string(1000, 'a') + "我" + std::string(500, '9'),
  };
}

}  // namespace pdserve::tokenizer::testing
