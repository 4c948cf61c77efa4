#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pdserve/tokenizer/chat_k3.h"
#include "pdserve/tokenizer/chat_output.h"

namespace pdserve::tokenizer {
namespace {

TEST(ChatOutput, SplitsThinkAndResponseChannels) {
  auto p = parse_k3_assistant_output(
      "Let me add.<|close|>think<|sep|><|open|>response<|sep|>It is 4.<|close|>response<|sep|><|close|>message<|sep|>");
  EXPECT_EQ(p.reasoning_content, "Let me add.");
  EXPECT_EQ(p.content, "It is 4.");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_TRUE(p.finished);
}

TEST(ChatOutput, StillThinkingMeansNoContentYet) {
  auto p = parse_k3_assistant_output("hmm, partial thought");
  EXPECT_EQ(p.reasoning_content, "hmm, partial thought");
  EXPECT_EQ(p.content, "");
  EXPECT_FALSE(p.finished);
}

TEST(ChatOutput, NonThinkingPromptStartsInResponse) {
  auto p = parse_k3_assistant_output("Hello there<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>",
                                     /*opened_think=*/false);
  EXPECT_EQ(p.reasoning_content, "");
  EXPECT_EQ(p.content, "Hello there");
  EXPECT_TRUE(p.finished);
  // Truncated by max_tokens: content so far, not finished.
  auto q = parse_k3_assistant_output("Hello th", false);
  EXPECT_EQ(q.content, "Hello th");
  EXPECT_FALSE(q.finished);
}

TEST(ChatOutput, ToolCallsRoundTripThroughTheRenderer) {
  // Render an assistant turn with tool calls, then parse its body back.
  auto msgs = OrderedJson::parse(R"([{"role":"assistant","reasoning_content":"need weather","content":"",
    "tool_calls":[{"id":"1","function":{"name":"get_weather","arguments":"{\"city\":\"Par\\\"is\",\"days\":3,\"opts\":{\"a\":[1,2]},\"x\":null}"}},
                  {"id":"2","function":{"name":"raw","arguments":"{broken"}}]}])");
  ChatOptions opts;
  opts.add_generation_prompt = false;
  opts.thinking_effort = std::nullopt;
  auto segs = render_k3_chat(msgs, nullptr, opts);
  ASSERT_TRUE(segs.is_ok());
  std::string text = join_segments(*segs);
  const std::string prefix = "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
  ASSERT_EQ(text.rfind(prefix, 0), 0u);
  auto p = parse_k3_assistant_output(text.substr(prefix.size()));
  EXPECT_EQ(p.reasoning_content, "need weather");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(p.tool_calls[0].arguments),
            nlohmann::json::parse(R"({"city":"Par\"is","days":3,"opts":{"a":[1,2]},"x":null})"));
  EXPECT_EQ(p.tool_calls[1].name, "raw");
  EXPECT_EQ(p.tool_calls[1].arguments, "{broken");
  EXPECT_TRUE(p.finished);
}

}  // namespace
}  // namespace pdserve::tokenizer
