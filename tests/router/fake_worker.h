// In-process stand-ins for pdserve workers: an httplib server on a free loopback port with
// OpenAI-ish JSON and SSE answers, a replaceable generate handler, a record of what it got,
// and kill / restart on the same port.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pdserve::router::testing {

struct Seen {
  std::string path, body, request_id;
  std::string authorization;  // the Authorization header the worker got ("" if none)
};

class FakeWorker {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit FakeWorker(std::string name) : name_(std::move(name)) {}
  ~FakeWorker() { stop(); }

  // Listens on `port` (0: a free one; the same port again after stop() for a restart).
  void start(int port = 0);
  void stop();  // "kill": the listener and its connections go away
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& name() const { return name_; }

  // Replaces the answer of POST /v1/completions, /v1/chat/completions and /generate.
  void on_generate(Handler h);
  std::vector<Seen> seen() const;
  size_t count() const { return count_.load(); }
  std::atomic<int> in_flight{0};

  // The default answers, usable from custom handlers.
  static std::string json_answer(const std::string& name, const std::string& body, const std::string& rid);
  static std::vector<std::string> sse_events(const std::string& name);

 private:
  void handle(const httplib::Request& req, httplib::Response& res);

  std::string name_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  mutable std::mutex mu_;
  Handler handler_;
  std::vector<Seen> seen_;
  std::atomic<size_t> count_{0};
};

// A loopback port with nothing listening on it (bound, then closed).
int dead_port();

}  // namespace pdserve::router::testing
