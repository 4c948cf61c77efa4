#include "pdserve/bench/sse.h"

namespace pdserve::bench {

void SseParser::feed(const char* data, size_t n) {
  buffer_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = buffer_.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    take_line(std::move(line));
  }
  buffer_.erase(0, start);
}

void SseParser::finish() {
  if (!buffer_.empty()) take_line(std::exchange(buffer_, {}));
  take_line("");
}

void SseParser::take_line(std::string line) {
  if (line.empty()) {  // blank line: dispatch the event
    if (has_pending_) on_data_(pending_);
    pending_.clear();
    has_pending_ = false;
    return;
  }
  if (line.rfind("data:", 0) != 0) return;  // ":comment", "event:", "id:", "retry:"
  std::string value = line.substr(5);
  if (!value.empty() && value[0] == ' ') value.erase(0, 1);
  if (has_pending_) pending_ += '\n';
  pending_ += value;
  has_pending_ = true;
}

namespace {

std::optional<Usage> read_usage(const Json& j) {
  if (!j.contains("usage") || !j["usage"].is_object()) return std::nullopt;
  const Json& u = j["usage"];
  Usage usage;
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
    usage.prompt_tokens = u["prompt_tokens"].get<int64_t>();
  if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
    usage.completion_tokens = u["completion_tokens"].get<int64_t>();
  return usage;
}

std::string error_text(const Json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
  return e.dump();
}

std::string string_or_empty(const Json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return {};
  return obj[key].get<std::string>();
}

}  // namespace

Result<ChunkInfo> interpret_chunk(const std::string& data, EndpointKind endpoint) {
  Json j = Json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss("stream chunk is not a JSON object: " + data.substr(0, 200));
  ChunkInfo c;
  if (j.contains("error")) {
    c.error = error_text(j["error"]);
    return c;
  }
  c.usage = read_usage(j);
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return c;  // usage-only chunk
  const Json& choice = j["choices"][0];
  c.finish_reason = string_or_empty(choice, "finish_reason");
  bool role_only = false;
  if (endpoint == EndpointKind::kChat) {
    const Json& delta = choice.contains("delta") ? choice["delta"] : Json::object();
    c.text = string_or_empty(delta, "content");
    role_only = delta.is_object() && delta.contains("role");
  } else {
    c.text = string_or_empty(choice, "text");
  }
  // A chunk is one generated token when it carries text, or when it is an empty-text step
  // (a detokenizer holding back half a UTF-8 character) that is neither the chat role header
  // nor a closing chunk that only reports finish_reason.
  c.carries_token = !c.text.empty() || (!role_only && c.finish_reason.empty());
  c.is_output = c.carries_token || !role_only;
  return c;
}

Result<FullResponse> interpret_response(const std::string& body, EndpointKind endpoint) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss("response is not a JSON object: " + body.substr(0, 200));
  if (j.contains("error")) return Status(ErrorCode::kUnavailable, "server error: " + error_text(j["error"]));
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return data_loss("response has no choices: " + body.substr(0, 200));
  FullResponse r;
  const Json& choice = j["choices"][0];
  r.finish_reason = string_or_empty(choice, "finish_reason");
  r.text = endpoint == EndpointKind::kChat && choice.contains("message") ? string_or_empty(choice["message"], "content")
                                                                        : string_or_empty(choice, "text");
  r.usage = read_usage(j);
  return r;
}

}  // namespace pdserve::bench
