// OpenAI request bodies -> runtime::GenerateRequest, with field-named errors (HTTP 400).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pdserve/core/status.h"
#include "pdserve/runtime/request.h"
#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::server {

enum class ApiKind { kCompletion, kChat };

// Where prefill's bootstrap server is and which room this request is (the router adds these).
struct BootstrapInfo {
  std::string host;
  int port = 0;
  uint64_t room = 0;  // nonzero, below 2^63
};

struct ParsedRequest {
  ApiKind kind = ApiKind::kCompletion;
  runtime::GenerateRequest gen;
  std::string model;           // as the client sent it ("" if absent)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool opened_think = false;   // chat: the prompt opened the think channel
  std::optional<BootstrapInfo> bootstrap;  // all three bootstrap_* fields, or none
};

struct RequestLimits {
  int64_t max_model_len = 0;
  int64_t default_completion_max_tokens = 16;  // OpenAI's default for /v1/completions
  int64_t max_prompt_tokens = 0;      // > 0: longer prompts are a 400 naming prompt / messages
  int64_t max_completion_tokens = 0;  // > 0: a larger max_tokens is a 400; absent ones are capped
};

// Chat without max_tokens gets whatever context is left after the prompt.
Result<ParsedRequest> parse_completion_request(const std::string& body, const tokenizer::Tokenizer& tok,
                                               const RequestLimits& limits);
Result<ParsedRequest> parse_chat_request(const std::string& body, const tokenizer::Tokenizer& tok,
                                         const RequestLimits& limits);

}  // namespace pdserve::server
