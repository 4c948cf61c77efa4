// router_bench backend --port P [--events N]
//   A fixed-answer OpenAI-ish backend: JSON for plain requests, N SSE events for stream=true.
// router_bench router --port P --worker URL
//   The pdserve router library in DP mode (same code as `pdserve router --worker URL`).
// router_bench load --port P [--concurrency C] [--requests N] [--stream] [--warmup W]
//   Closed loop, one kept-alive connection per client thread; prints one JSON line:
//   {"requests", "errors", "seconds", "rps", "p50_us", "p90_us", "p99_us"}.
// Used to compare the router with nginx in front of the same backend (docs/perf.md).
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pdserve/router/router.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}
bool flag(int argc, char** argv, const char* name) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

class Server : public httplib::Server {
 public:
  void raise_backlog() { ::listen(svr_sock_, 1024); }  // the .so listens with 5
};

int backend(int port, int events) {
  Server svr;
  svr.new_task_queue = [] { return new httplib::ThreadPool(256); };
  svr.set_keep_alive_max_count(100000);
  svr.set_tcp_nodelay(true);
  const std::string answer =
      R"({"id":"cmpl-bench","object":"text_completion","created":0,"model":"tiny","choices":[{"index":0,"text":" jumps over the lazy dog","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}})";
  const std::string event =
      R"(data: {"id":"cmpl-bench","object":"text_completion","choices":[{"index":0,"text":" tok"}]})" "\n\n";
  auto gen = [&](const httplib::Request& req, httplib::Response& res) {
    if (req.body.find("\"stream\":true") == std::string::npos) {
      res.set_content(answer, "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [&, events](size_t, httplib::DataSink& sink) {
      for (int i = 0; i < events; ++i) sink.write(event.data(), event.size());
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
      return true;
    });
  };
  svr.Post("/v1/completions", gen);
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  if (!svr.bind_to_port("127.0.0.1", port)) return std::fprintf(stderr, "cannot bind %d\n", port), 1;
  svr.raise_backlog();
  std::fprintf(stderr, "backend on 127.0.0.1:%d\n", port);
  svr.listen_after_bind();
  return 0;
}

int load(int port, int concurrency, int requests, int warmup, bool stream) {
  const std::string body = std::string(R"({"model":"tiny","prompt":"The quick brown fox","max_tokens":8)") +
                           (stream ? R"(,"stream":true})" : "}");
  std::atomic<int> next{-warmup}, errors{0};
  std::vector<std::vector<double>> lat(concurrency);
  Clock::time_point t0{};
  std::atomic<bool> t0_set{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      cli.set_read_timeout(30, 0);
      for (int i; (i = next++) < requests;) {
        if (i == 0 && !t0_set.exchange(true)) t0 = Clock::now();
        auto start = Clock::now();
        auto res = cli.Post("/v1/completions", body, "application/json");
        double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        bool ok = res && res->status == 200 && (!stream || res->body.find("[DONE]") != std::string::npos);
        if (i < 0) continue;  // warm-up
        if (!ok) errors++;
        lat[c].push_back(us);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, size_t(p * all.size()))]; };
  std::printf(
      "{\"requests\": %zu, \"errors\": %d, \"concurrency\": %d, \"stream\": %s, \"seconds\": %.3f, \"rps\": %.0f, "
      "\"p50_us\": %.0f, \"p90_us\": %.0f, \"p99_us\": %.0f}\n",
      all.size(), errors.load(), concurrency, stream ? "true" : "false", seconds, all.size() / seconds, pct(0.50),
      pct(0.90), pct(0.99));
  return errors.load() ? 1 : 0;
}

int router(int port, const std::string& worker) {
  pdserve::router::RouterConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = port;
  cfg.workers = {worker};
  cfg.max_in_flight = 1024;
  auto r = pdserve::router::Router::create(cfg);
  if (!r.is_ok()) return std::fprintf(stderr, "%s\n", r.status().to_string().c_str()), 1;
  if (auto st = (*r)->start(); !st.is_ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: router_bench backend|load --port P ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int port = std::atoi(arg(argc, argv, "--port", "0"));
  if (mode == "backend") return backend(port, std::atoi(arg(argc, argv, "--events", "16")));
  if (mode == "router") return router(port, arg(argc, argv, "--worker", ""));
  if (mode == "load")
    return load(port, std::atoi(arg(argc, argv, "--concurrency", "1")), std::atoi(arg(argc, argv, "--requests", "5000")),
                std::atoi(arg(argc, argv, "--warmup", "200")), flag(argc, argv, "--stream"));
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
