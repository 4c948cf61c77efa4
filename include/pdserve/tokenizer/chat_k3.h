// Kimi-K3 chat framing ("XTML"): OpenAI messages -> segments -> ids, as the reference
// encoder (encoding_k3.py build_chat_segments + TikTokenTokenizer._encode_chat_segments)
// does. All of the framing lives in chat_k3.cpp; docs/tokenizer.md says what it matches.
//
// Messages are nlohmann::ordered_json so that tool-call argument order survives: the
// reference renders arguments in the order the client sent them. A server should parse the
// request body with ordered_json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pdserve/core/status.h"
#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

using OrderedJson = nlohmann::ordered_json;

struct ChatSegment {
  std::string text;
  bool allow_special = false;  // true only for the framing's own control tokens
  bool operator==(const ChatSegment&) const = default;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool thinking = true;                                // false: no think channel at all
  std::optional<std::string> thinking_effort = "max";  // low|medium|high|max; nullopt: no preamble
  OrderedJson tool_choice;                             // "required" / "none" add a system note
  OrderedJson response_format;                         // {"type": "json_object" | "json_schema", ...}
};

// Errors are kInvalidArgument with a message naming the offending field (HTTP 400).
// Deliberately stricter than the reference: unknown roles and non-object messages are errors
// there silently skipped; image parts are refused (text-only engine for now).
Result<std::vector<ChatSegment>> render_k3_chat(const OrderedJson& messages, const OrderedJson& tools,
                                                const ChatOptions& opts);
std::string join_segments(const std::vector<ChatSegment>& segments);

// Segment by segment: text segments never turn into special ids, control segments do.
std::vector<TokenId> encode_segments(const Tokenizer& tok, const std::vector<ChatSegment>& segments);
Result<std::vector<TokenId>> encode_k3_chat(const Tokenizer& tok, const OrderedJson& messages,
                                            const OrderedJson& tools = nullptr, const ChatOptions& opts = {});

}  // namespace pdserve::tokenizer
