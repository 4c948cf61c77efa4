// Reading OpenAI-style responses: an incremental Server-Sent-Events splitter and the
// interpretation of one completion chunk or one non-streaming body.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "pdserve/bench/config.h"
#include "pdserve/core/json_util.h"

namespace pdserve::bench {

// Feed bytes as they arrive (any split); on_data gets each event's data payload (multi-line
// data joined by '\n'). Comments, "event:" and "id:" lines are ignored.
class SseParser {
 public:
  using OnData = std::function<void(const std::string& data)>;
  explicit SseParser(OnData on_data) : on_data_(std::move(on_data)) {}
  void feed(const char* data, size_t n);
  // End of stream: an event without its closing blank line is still delivered.
  void finish();

 private:
  void take_line(std::string line);
  OnData on_data_;
  std::string buffer_;
  std::string pending_;
  bool has_pending_ = false;
};

struct Usage {
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
};

// What one streamed chunk says.
struct ChunkInfo {
  std::string text;           // choices[0].text (completions) or delta.content (chat)
  bool carries_token = false;  // counts toward the streamed token count (see sse.cpp)
  bool is_output = false;      // a choices chunk other than the chat role header
  std::string finish_reason;
  std::optional<Usage> usage;
  std::string error;  // a {"error": ...} chunk
};
Result<ChunkInfo> interpret_chunk(const std::string& data, EndpointKind endpoint);

struct FullResponse {
  std::string text;
  std::string finish_reason;
  std::optional<Usage> usage;
};
Result<FullResponse> interpret_response(const std::string& body, EndpointKind endpoint);

}  // namespace pdserve::bench
