#include <gtest/gtest.h>

#include "pdserve/tokenizer/stream_detokenizer.h"
#include "pdserve/tokenizer/utf8.h"
#include "test_util.h"

namespace pdserve::tokenizer {
namespace {

std::string expected(const Tokenizer& t, const std::vector<TokenId>& ids) { return utf8::sanitize(*t.decode(ids)); }

// Byte-level ids (in tiny tokenizers rank b is the byte b), to force splits inside characters
// and to produce byte sequences that are not UTF-8 at all.
std::vector<TokenId> byte_ids(const Tokenizer& t, std::string_view bytes) {
  std::vector<TokenId> ids;
  for (char c : bytes) {
    const TokenId id = static_cast<unsigned char>(c);
    EXPECT_EQ(t.token_bytes(id), std::string_view(&c, 1));
    ids.push_back(id);
  }
  return ids;
}

TEST(StreamDetokenizer, EveryPrefixSplitReproducesDecode) {
  const Tokenizer& t = testing::tiny(1024);
  auto texts = testing::sample_texts();
  texts.push_back("broken \xE4\xB8 then \xF0\x9F\x98 then \xFF\xFE end");
  for (const auto& s : texts) {
    for (auto ids : {t.encode(s), byte_ids(t, s)}) {
      const std::string want = expected(t, ids);
      for (size_t k = 0; k <= ids.size(); ++k) {
        StreamDetokenizer d(t);
        std::string got = *d.push(std::span(ids).first(k));
        EXPECT_TRUE(utf8::is_valid(got));
        EXPECT_EQ(want.compare(0, got.size(), got), 0) << "emitted text must be final";
        got += *d.push(std::span(ids).subspan(k));
        got += d.finish();
        ASSERT_EQ(got, want) << "split at " << k << " of " << ids.size();
      }
    }
  }
}

TEST(StreamDetokenizer, OneTokenAtATimeNeverEmitsBrokenUtf8) {
  const Tokenizer& t = testing::tiny(1024);
  const std::string s = "日本語😀é\u0301🇯🇵";
  auto ids = byte_ids(t, s);
  StreamDetokenizer d(t);
  std::string all;
  for (TokenId id : ids) {
    std::string piece = *d.push(id);
    EXPECT_TRUE(utf8::is_valid(piece));
    EXPECT_LE(d.pending_bytes(), 3u);
    all += piece;
  }
  EXPECT_EQ(d.pending_bytes(), 0u);
  all += d.finish();
  EXPECT_EQ(all, s);
}

TEST(StreamDetokenizer, DanglingTailBecomesOneReplacement) {
  const Tokenizer& t = testing::tiny(1024);
  StreamDetokenizer d(t);
  EXPECT_EQ(*d.push(byte_ids(t, "a\xF0\x9F\x98")), "a");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.finish(), "\uFFFD");
}

TEST(StreamDetokenizer, SpecialsCanBeSkipped) {
  const Tokenizer& t = testing::tiny(1024);
  auto ids = t.encode("hi<|end_of_msg|>", true);
  StreamDetokenizer keep(t), skip(t, /*skip_special=*/true);
  EXPECT_EQ(*keep.push(ids) + keep.finish(), "hi<|end_of_msg|>");
  EXPECT_EQ(*skip.push(ids) + skip.finish(), "hi");
}

TEST(StreamDetokenizer, UnknownIdIsAnErrorAndChangesNothing) {
  const Tokenizer& t = testing::tiny(1024);
  StreamDetokenizer d(t);
  EXPECT_EQ(*d.push(byte_ids(t, "\xE4\xB8")), "");
  std::vector<TokenId> bad{t.encode("x")[0], t.vocab_size() + 5};
  EXPECT_FALSE(d.push(bad).is_ok());
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(*d.push(byte_ids(t, "\xAD")), "中");
}

}  // namespace
}  // namespace pdserve::tokenizer
