// Splits a Kimi-K3 assistant completion back into API fields: reasoning_content (think
// channel), content (response channel) and tool calls (the <|open|>tools<|sep|> block).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pdserve::tokenizer {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, the form OpenAI clients expect
};

struct ParsedAssistant {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool finished = false;  // the message close (or <|end_of_msg|>) was seen
};

// `text` is the generated text after the generation prompt, with special tokens decoded to
// their literal text. `opened_think`: the prompt ended in <|open|>think<|sep|> (thinking
// mode); otherwise it ended in <|open|>response<|sep|>. Never fails: text that does not follow
// the framing ends up in content (or reasoning while the think channel is still open).
ParsedAssistant parse_k3_assistant_output(std::string_view text, bool opened_think = true);

}  // namespace pdserve::tokenizer
