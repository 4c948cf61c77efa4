// The OpenAI-compatible HTTP client: builds request bodies, sends one request (streaming or
// not) and records what happened and when. One OpenAiClient per worker thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pdserve/bench/config.h"
#include "pdserve/bench/dataset.h"
#include "pdserve/bench/sse.h"
#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"

namespace httplib {
class Client;
}

namespace pdserve::bench {

using Clock = std::chrono::steady_clock;

// "http://host:port/prefix" -> origin "http://host:port" and path prefix "/prefix" (may be empty).
struct BaseUrl {
  std::string origin;
  std::string prefix;
};
Result<BaseUrl> parse_base_url(const std::string& url);

// "/v1/completions" or "/v1/chat/completions".
const char* endpoint_path(EndpointKind e);

// The JSON body: max_tokens = output_len, ignore_eos (exact lengths), and for streaming
// stream_options.include_usage so the server reports its token counts.
Result<std::string> build_request_body(const BenchPrompt& p, EndpointKind e, const std::string& model, bool stream);

// Everything known about one request. Written to requests.jsonl as-is.
struct RequestRecord {
  int64_t index = 0;
  bool warmup = false;
  std::string category;
  int64_t input_len = -1;  // tokens sent, when the client knows (token-id prompts)
  int64_t expected_output_len = 0;
  bool stream = true;

  bool completed = false;  // a whole, well-formed response arrived (HTTP 200, [DONE] if streaming)
  std::string error;       // why not, when !completed
  int http_status = 0;
  double start_s = 0;  // send time, relative to the start of its phase
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;
  bool saw_done = false;
  std::optional<Usage> usage;
  int64_t token_chunks = 0;    // streamed chunks that carried a generated token (TTFT / ITL points)
  int64_t content_chunks = 0;  // of those, the ones with non-empty text
  int64_t output_chunks = 0;   // choices chunks of any kind but the chat role header
  std::string finish_reason;
  std::string output_text;
  std::vector<std::string> check_failures;  // filled by checks.h

  Json to_json() const;
};

struct ClientOptions {
  EndpointKind endpoint = EndpointKind::kCompletions;
  std::string api_key;
  double connect_timeout_s = 5.0;
  double read_timeout_s = 600.0;
};

class OpenAiClient {
 public:
  static Result<std::unique_ptr<OpenAiClient>> create(const std::string& base_url, const ClientOptions& opts);
  ~OpenAiClient();
  OpenAiClient(const OpenAiClient&) = delete;
  OpenAiClient& operator=(const OpenAiClient&) = delete;

  // GET prefix + path, parsed as JSON. kUnavailable when nothing answers at the address.
  Result<Json> get_json(const std::string& path);
  // POSTs body; fills rec's outcome fields. start_s is measured from phase_start.
  void send(const std::string& body, bool stream, Clock::time_point phase_start, RequestRecord& rec);

 private:
  OpenAiClient(BaseUrl url, ClientOptions opts);
  BaseUrl url_;
  ClientOptions opts_;
  std::unique_ptr<httplib::Client> http_;
};

// cpp-httplib's version, for manifest.json.
const char* http_client_version();

// Fails fast with a message naming the URL when nothing listens there. Returns the id of the
// first model that /v1/models lists ("" if the server has no such route).
Result<std::string> preflight(const std::string& base_url, const ClientOptions& opts);

}  // namespace pdserve::bench
