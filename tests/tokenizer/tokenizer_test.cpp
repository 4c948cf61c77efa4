#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "pdserve/tokenizer/special_tokens.h"
#include "pdserve/tokenizer/tiny_tokenizer.h"
#include "pdserve/tokenizer/tokenizer.h"
#include "pdserve/tokenizer/utf8.h"
#include "test_util.h"

namespace pdserve::tokenizer {
namespace {

using testing::read_file;
using testing::sample_texts;
using testing::tiny;
using testing::tiny_dir;

TEST(TinyTokenizer, WriterIsDeterministic) {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("pdserve_tok_det_" + std::to_string(::getpid()));
  fs::create_directories(d);
  ASSERT_TRUE(write_tiny_tokenizer(d.string(), 1024).is_ok());
  EXPECT_EQ(read_file(d / "tiktoken.model"), read_file(tiny_dir(1024) + "/tiktoken.model"));
  EXPECT_EQ(read_file(d / "tokenizer_config.json"), read_file(tiny_dir(1024) + "/tokenizer_config.json"));
  fs::remove_all(d);
}

TEST(TinyTokenizer, SpecialsSitAtKimiOffsets) {
  for (int n : {1024, 8192}) {
    const Tokenizer& t = tiny(n);
    EXPECT_EQ(t.num_ranks(), n);
    EXPECT_EQ(t.vocab_size(), n + 256);
    EXPECT_EQ(t.special_id(kBos), n + 0);
    EXPECT_EQ(t.special_id(kEos), n + 1);
    EXPECT_EQ(t.special_id(kEndOfMsg), n + 2);
    EXPECT_EQ(t.special_id(kOpen), n + 3);
    EXPECT_EQ(t.special_id(kClose), n + 4);
    EXPECT_EQ(t.special_id(kSep), n + 5);
    EXPECT_EQ(t.special_id(kMediaPad), n + 21);
    EXPECT_EQ(t.special_id(kUnk), n + 254);
    EXPECT_EQ(t.special_id(kPad), n + 255);
    EXPECT_EQ(t.special_id("<|reserved_token_" + std::to_string(n + 100) + "|>"), n + 100);
    EXPECT_EQ(t.bos_id(), n);
    EXPECT_EQ(t.eos_id(), n + 1);
    EXPECT_EQ(t.pad_id(), n + 255);
    EXPECT_FALSE(t.special_id("<|nope|>").has_value());
    EXPECT_TRUE(t.is_special(n + 7));
    EXPECT_FALSE(t.is_special(n - 1));
  }
}

TEST(TinyTokenizer, RanksStartWithTheBytesThenLearnedMerges) {
  auto ranks = read_tiktoken_model(tiny_dir(8192) + "/tiktoken.model");
  ASSERT_TRUE(ranks.is_ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->size(), 8192u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ((*ranks)[b], std::string(1, static_cast<char>(b)));
  size_t multi_byte_han = 0;
  for (size_t r = 256; r < ranks->size(); ++r) {
    EXPECT_GE((*ranks)[r].size(), 2u);
    if ((*ranks)[r].size() >= 6 && static_cast<unsigned char>((*ranks)[r][0]) >= 0xE4) ++multi_byte_han;
  }
  EXPECT_GT(multi_byte_han, 20u) << "expected merged CJK tokens from the multilingual corpus";
  auto cfg = nlohmann::json::parse(read_file(tiny_dir(1024) + "/tokenizer_config.json"));
  EXPECT_EQ(cfg["added_tokens_decoder"].size(), 256u);
  EXPECT_EQ(cfg["added_tokens_decoder"]["1026"]["content"], "<|end_of_msg|>");
  EXPECT_EQ(cfg["eos_token"], "[EOS]");
}

TEST(TinyTokenizer, RejectsImpossibleSizes) {
  EXPECT_FALSE(write_tiny_tokenizer("/nonexistent-dir-pdserve", 1024).is_ok());
  EXPECT_EQ(train_tiny_ranks(100).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Tokenizer, LoadErrorsAreStatuses) {
  namespace fs = std::filesystem;
  EXPECT_EQ(Tokenizer::load("/nonexistent-dir-pdserve").status().code(), ErrorCode::kNotFound);
  const fs::path d = fs::temp_directory_path() / ("pdserve_tok_bad_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::copy_file(tiny_dir(1024) + "/tokenizer_config.json", d / "tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(d / "tiktoken.model") << "!!notbase64 0\n";
  EXPECT_EQ(Tokenizer::load(d.string()).status().code(), ErrorCode::kDataLoss);
  std::ofstream(d / "tiktoken.model") << "YQ== 0\nYg== 2\n";  // rank 1 missing
  EXPECT_EQ(Tokenizer::load(d.string()).status().code(), ErrorCode::kDataLoss);
  std::ofstream(d / "tiktoken.model") << "YQ== 0\nYg== 1\n";  // lacks most single bytes
  auto st = Tokenizer::load(d.string()).status();
  EXPECT_EQ(st.code(), ErrorCode::kDataLoss);
  EXPECT_NE(st.message().find("256 bytes"), std::string::npos) << st.message();
  fs::remove_all(d);
}

TEST(Tokenizer, RoundTripsText) {
  for (int n : {1024, 8192}) {
    const Tokenizer& t = tiny(n);
    for (const auto& s : sample_texts()) {
      auto ids = t.encode(s);
      auto back = t.decode(ids);
      ASSERT_TRUE(back.is_ok());
      EXPECT_EQ(*back, s) << "n=" << n;
      for (auto id : ids) EXPECT_LT(id, n);  // plain text never yields special ids
    }
  }
}

TEST(Tokenizer, MergesFire) {
  const Tokenizer& t = tiny(8192);
  const std::string s = "the model and the server understand the request";
  EXPECT_LT(t.encode(s).size(), s.size() / 2);
}

TEST(Tokenizer, SpecialTextIsPlainUnlessAllowed) {
  const Tokenizer& t = tiny(1024);
  const TokenId open = *t.special_id(kOpen), eom = *t.special_id(kEndOfMsg);
  const std::string s = "hi <|open|>system<|sep|> x<|end_of_msg|>";
  auto plain = t.encode(s, /*allow_special=*/false);
  for (auto id : plain) EXPECT_LT(id, t.num_ranks());
  EXPECT_EQ(*t.decode(plain), s);
  auto allowed = t.encode(s, /*allow_special=*/true);
  EXPECT_NE(std::find(allowed.begin(), allowed.end(), open), allowed.end());
  EXPECT_EQ(allowed.back(), eom);
  EXPECT_EQ(*t.decode(allowed), s);
  EXPECT_EQ(t.encode("<|open|>", true), std::vector<TokenId>{open});
  // The text around a special is encoded on its own, as tiktoken does.
  auto left = t.encode("hi ", false);
  EXPECT_TRUE(std::equal(left.begin(), left.end(), allowed.begin()));
}

TEST(Tokenizer, InvalidUtf8IsReplacedPerMaximalSubpart) {
  const Tokenizer& t = tiny(1024);
  // \xE4\xB8 is a truncated 3-byte sequence (one U+FFFD); \xFF is one; \xED\xA0\x80 (a UTF-8
  // surrogate) is three, as Python's decode(errors="replace") gives.
  const std::string bad = "a\xE4\xB8" "b\xFF" "c\xED\xA0\x80";
  const std::string fixed = "a\uFFFDb\uFFFDc\uFFFD\uFFFD\uFFFD";
  EXPECT_EQ(utf8::sanitize(bad), fixed);
  EXPECT_EQ(t.encode(bad), t.encode(fixed));
  EXPECT_EQ(*t.decode(t.encode(bad)), fixed);
}

TEST(Tokenizer, LongRunsAreCutLikeKimi) {
  const Tokenizer& t = tiny(1024);
  // Kimi cuts runs of more than 25,000 same-kind characters before tiktoken sees them.
  const std::string a(30000, 'a');
  auto ids = t.encode(a);
  auto head = t.encode(std::string(25000, 'a'));
  auto tail = t.encode(std::string(5000, 'a'));
  head.insert(head.end(), tail.begin(), tail.end());
  EXPECT_EQ(ids, head);
  const std::string spaces = std::string(60000, ' ') + "x" + std::string(26000, '\n');
  EXPECT_EQ(*t.decode(t.encode(spaces)), spaces);
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer& t = tiny(1024);
  std::vector<TokenId> ids{1, t.vocab_size()};
  EXPECT_EQ(t.decode(ids).status().code(), ErrorCode::kInvalidArgument);
  ids = {-1};
  EXPECT_FALSE(t.decode(ids).is_ok());
  EXPECT_TRUE(t.token_bytes(t.vocab_size()).empty());
  EXPECT_EQ(t.token_bytes(*t.special_id(kSep)), kSep);
}

}  // namespace
}  // namespace pdserve::tokenizer
