// Runtime events -> OpenAI response bodies and stream chunks (completions and chat).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"
#include "pdserve/runtime/request.h"
#include "pdserve/server/openai_request.h"
#include "pdserve/tokenizer/chat_output.h"
#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::server {

// Splits a growing K3 assistant text into reasoning_content / content deltas. While a framing
// marker is still incomplete its text is held back, so a delta is never taken back.
class ChatDeltaTracker {
 public:
  explicit ChatDeltaTracker(bool opened_think) : opened_think_(opened_think) {}
  struct Delta {
    std::string reasoning, content;
    std::vector<tokenizer::ParsedToolCall> tool_calls;  // only with final
  };
  Delta push(const std::string& more, bool final);
  const std::string& text() const { return text_; }

 private:
  bool opened_think_;
  std::string text_;
  size_t sent_reasoning_ = 0, sent_content_ = 0;
};

// One response under construction: the id, model name and creation time are fixed here.
class ResponseFormatter {
 public:
  ResponseFormatter(const ParsedRequest& req, std::string model, const tokenizer::Tokenizer& tok);

  // Non-streaming: the whole response from the merged event.
  Json full(const runtime::RequestEvent& all);
  // Streaming: the chunks (already "data: ...\n\n") this event produces; the last event
  // also yields the usage chunk (if asked for) and "data: [DONE]".
  std::vector<std::string> chunks(const runtime::RequestEvent& ev);

 private:
  Json base(const char* object) const;
  Json completion_logprobs(const std::vector<runtime::TokenLogprob>& lps);
  Json chat_logprobs(const std::vector<runtime::TokenLogprob>& lps) const;
  std::string token_text(int32_t id) const;
  static Json usage(const runtime::RequestEvent& ev);
  static Json tool_calls_json(const std::vector<tokenizer::ParsedToolCall>& calls);

  const ParsedRequest& req_;
  std::string model_;
  const tokenizer::Tokenizer& tok_;
  std::string id_;
  int64_t created_;
  ChatDeltaTracker chat_;
  bool sent_role_ = false;
  int64_t text_offset_ = 0;  // completions logprobs text_offset
};

const char* api_finish_reason(runtime::FinishReason r);  // stop|length (abort/error: null)

}  // namespace pdserve::server
