#include "fake_worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <thread>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace pdserve::router::testing {

using nlohmann::json;

std::string FakeWorker::json_answer(const std::string& name, const std::string& body, const std::string& rid) {
  json in = json::parse(body, nullptr, false);
  json out = {{"id", "cmpl-" + rid},
              {"object", "text_completion"},
              {"worker", name},
              {"request_id", rid},
              {"choices", {{{"index", 0}, {"text", "hello from " + name}, {"finish_reason", "stop"}}}},
              {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}}};
  if (in.is_object() && in.contains("prompt")) out["prompt_echo"] = in["prompt"];
  return out.dump();
}

std::vector<std::string> FakeWorker::sse_events(const std::string& name) {
  std::vector<std::string> ev;
  for (int i = 0; i < 3; ++i)
    ev.push_back("data: " + json{{"object", "text_completion"}, {"choices", {{{"index", 0}, {"text", name + std::to_string(i)}}}}}.dump() + "\n\n");
  ev.push_back("data: [DONE]\n\n");
  return ev;
}

void FakeWorker::on_generate(Handler h) {
  std::lock_guard lk(mu_);
  handler_ = std::move(h);
}

std::vector<Seen> FakeWorker::seen() const {
  std::lock_guard lk(mu_);
  return seen_;
}

void FakeWorker::handle(const httplib::Request& req, httplib::Response& res) {
  in_flight++;
  count_++;
  Handler h;
  {
    std::lock_guard lk(mu_);
    seen_.push_back({req.path, req.body, req.get_header_value("X-Request-Id"), req.get_header_value("Authorization")});
    h = handler_;
  }
  if (h) {
    h(req, res);
  } else {
    json in = json::parse(req.body, nullptr, false);
    if (in.is_object() && in.value("stream", false)) {
      auto events = sse_events(name_);
      res.set_chunked_content_provider("text/event-stream", [events](size_t, httplib::DataSink& sink) {
        for (const auto& e : events) sink.write(e.data(), e.size());
        sink.done();
        return true;
      });
    } else {
      res.set_content(json_answer(name_, req.body, req.get_header_value("X-Request-Id")), "application/json");
    }
  }
  in_flight--;
}

namespace {
// httplib listens with a backlog of 5; a burst of 64 connects overflows it and some clients
// see their first request fail. listen() again on the bound socket raises it.
class Server : public httplib::Server {
 public:
  void raise_backlog() { ::listen(svr_sock_, 1024); }
};
}  // namespace

void FakeWorker::start(int port) {
  auto svr = std::make_unique<Server>();
  Server* raw = svr.get();
  svr_ = std::move(svr);
  // stop() joins the threads serving kept-alive connections; the router's 50 ms health
  // checks keep one busy, so cap requests and idle time per connection to let stop() end.
  raw->set_keep_alive_max_count(4);
  raw->set_keep_alive_timeout(1);
  // Kept-alive router connections each hold a server thread; give plenty.
  svr_->new_task_queue = [] { return new httplib::ThreadPool(160); };
  auto gen = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
  svr_->Post("/v1/completions", gen);
  svr_->Post("/v1/chat/completions", gen);
  svr_->Post("/generate", gen);
  svr_->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  svr_->Get("/health_generate", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  svr_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"object", "list"}, {"data", {{{"id", "tiny"}, {"owned_by", name_}}}}}.dump(), "application/json");
  });
  if (port == 0) port_ = svr_->bind_to_any_port("127.0.0.1");
  else if (!svr_->bind_to_port("127.0.0.1", port)) port_ = -1;
  else port_ = port;
  if (port_ <= 0) throw std::runtime_error("fake worker " + name_ + ": cannot bind");
  raw->raise_backlog();
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it, or a quick stop() hangs join().
  for (int i = 0; i < 1000 && !svr_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void FakeWorker::stop() {
  if (!svr_) return;
  svr_->stop();
  if (thread_.joinable()) thread_.join();
  svr_.reset();
}

int dead_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("dead_port: bind failed");
  ::close(fd);  // never listened: connecting is refused
  return ntohs(a.sin_port);
}

}  // namespace pdserve::router::testing
