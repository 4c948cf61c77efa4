// An in-process OpenAI-compatible server for the bench tests. Its faults are switches, so a
// test can build a deliberately broken backend and see the bench catch it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace pdserve::bench::testing {

struct FakeServerOptions {
  int64_t short_by = 0;           // generate this many fewer tokens than max_tokens (usage is honest)
  int64_t completion_tokens_delta = 0;  // usage.completion_tokens off by this much
  int64_t merge_every = 1;        // tokens per streamed chunk (a server that merges tokens)
  int fail_every = 0;             // every Nth request (1-based) answers HTTP 500
  bool omit_done = false;         // streams end without "data: [DONE]"
  bool omit_usage = false;
  int64_t prompt_tokens_delta = 0;  // usage.prompt_tokens off by this much
  int first_token_delay_ms = 0;
  int token_delay_ms = 0;
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerOptions opts);
  ~FakeOpenAiServer();
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int64_t requests() const { return requests_.load(); }
  int64_t max_in_flight() const { return max_in_flight_.load(); }
  std::string last_body() const;

 private:
  FakeServerOptions opts_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> max_in_flight_{0};
  mutable std::mutex mu_;
  std::string last_body_;
};

}  // namespace pdserve::bench::testing
