#include "pdserve/runtime/stop_matcher.h"

#include <gtest/gtest.h>

namespace pdserve::runtime {
namespace {

TEST(StopMatcher, MatchesAcrossPiecesWithoutLeaking) {
  StopMatcher m({"lo w"});
  auto a = m.push("Hel");
  EXPECT_EQ(a.text, "He");  // "l" may begin "lo w": held back
  auto b = m.push("lo");
  EXPECT_EQ(b.text, "l");   // "lo" is still a possible start
  auto c = m.push(" world");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(a.text + b.text + c.text, "Hel");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more").text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenItStopsMatching) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xab").text, "x");
  EXPECT_EQ(m.push("d").text, "abd");
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.flush(), "a");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  auto o = m.push("hello world");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "hel");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, SingleCharacterPiecesOfAMultibyteStop) {
  StopMatcher m({"\xE4\xB8\xAD\xE6\x96\x87"});  // "中文"
  std::string out;
  bool stopped = false;
  const std::string text = "ab\xE4\xB8\xAD\xE6\x96\x87zz";
  for (char ch : text) {
    auto o = m.push(std::string(1, ch));
    out += o.text;
    stopped = stopped || o.stopped;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "ab");
}

}  // namespace
}  // namespace pdserve::runtime
