// DP through the router over two real `pdserve serve` replicas on the tiny model equals
// calling a replica directly; a small concurrent run ends with no errors and no pages or
// slots left in use on either replica. The replicas are the real binary (PDSERVE_BINARY, or
// PDSERVE_SERVE_BINARY to try another build); the router runs in-process.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <future>

#include "router_test_util.h"

extern char** environ;

namespace pdserve::router::testing {
namespace {

class Process {
 public:
  explicit Process(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
  }
  ~Process() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  bool ok() const { return pid_ > 0; }
  // Runs to completion; the exit status (or -1).
  static int run_to_end(std::vector<std::string> args) {
    Process p(std::move(args));
    if (!p.ok()) return -1;
    int st = 0;
    waitpid(p.pid_, &st, 0);
    p.pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  pid_t pid_ = -1;
};

bool wait_healthy(int port) {
  return eventually([&] {
    auto r = get(port, "/health");
    return r && r->status == 200;
  });
}

// The parts of an answer that must not depend on the path taken (ids and times do).
Json essence(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices")) return Json{{"raw", body}};
  Json out = {{"usage", j.value("usage", Json())}, {"choices", Json::array()}};
  for (const auto& c : j["choices"]) {
    Json e = c;
    e.erase("logprobs");
    out["choices"].push_back(e);
  }
  return out;
}

std::string stream_text(int port, const std::string& path, const std::string& body) {
  std::string raw, text;
  post_stream(port, path, body, [&](const std::string& c) { raw += c; });
  size_t pos = 0;
  while ((pos = raw.find("data: ", pos)) != std::string::npos) {
    size_t end = raw.find("\n\n", pos);
    std::string ev = raw.substr(pos + 6, end - pos - 6);
    pos = end;
    if (ev == "[DONE]") {
      text += "[DONE]";
      break;
    }
    Json j = Json::parse(ev, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (c.contains("text")) text += c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
      text += c["delta"]["content"].get<std::string>();
  }
  return text;
}

TEST(RouterServe, DpOverTwoRealReplicasEqualsDirect) {
  namespace fs = std::filesystem;
  const char* override_bin = std::getenv("PDSERVE_SERVE_BINARY");
  const std::string bin = override_bin ? override_bin : PDSERVE_BINARY;
  const fs::path dir = fs::temp_directory_path() / ("pds-router-e2e-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "tiny").string();
  ASSERT_EQ(Process::run_to_end({bin, "make-model", "--preset", "tiny-k3", "--out", model}), 0);
  const int p1 = dead_port(), p2 = dead_port();
  Process s1({bin, "serve", "--model", model, "--host", "127.0.0.1", "--port", std::to_string(p1)});
  Process s2({bin, "serve", "--model", model, "--host", "127.0.0.1", "--port", std::to_string(p2)});
  ASSERT_TRUE(wait_healthy(p1));
  ASSERT_TRUE(wait_healthy(p2));
  auto cfg = fast_config();
  cfg.workers = {"http://127.0.0.1:" + std::to_string(p1), "http://127.0.0.1:" + std::to_string(p2)};
  cfg.health.interval_s = 0.2;
  auto router = start_router(cfg);
  ASSERT_TRUE(router);
  const int pr = router->port();

  const std::string completion = R"({"model":"tiny","prompt":"The quick brown fox","max_tokens":8,"temperature":0})";
  const std::string chat =
      R"({"model":"tiny","messages":[{"role":"user","content":"hi there"}],"max_tokens":8,"temperature":0})";
  // Several times, so round robin sends some to each replica; each must match direct.
  for (int i = 0; i < 4; ++i) {
    auto direct = post(p1, "/v1/completions", completion);
    auto routed = post(pr, "/v1/completions", completion);
    ASSERT_TRUE(direct && routed);
    ASSERT_EQ(direct->status, 200) << direct->body;
    EXPECT_EQ(routed->status, 200);
    EXPECT_EQ(essence(routed->body), essence(direct->body));
    auto dchat = post(p2, "/v1/chat/completions", chat);
    auto rchat = post(pr, "/v1/chat/completions", chat);
    ASSERT_TRUE(dchat && rchat);
    EXPECT_EQ(rchat->status, dchat->status);
    EXPECT_EQ(essence(rchat->body), essence(dchat->body));
  }
  std::string sbody = completion;
  sbody.insert(sbody.size() - 1, R"(,"stream":true)");
  const std::string direct_stream = stream_text(p1, "/v1/completions", sbody);
  EXPECT_NE(direct_stream.find("[DONE]"), std::string::npos);
  EXPECT_EQ(stream_text(pr, "/v1/completions", sbody), direct_stream);

  // A worker's own 4xx reaches the client unchanged.
  const std::string bad = R"({"model":"tiny","prompt":"x","max_tokens":-3})";
  auto dbad = post(p1, "/v1/completions", bad);
  auto rbad = post(pr, "/v1/completions", bad);
  ASSERT_TRUE(dbad && rbad);
  EXPECT_GE(dbad->status, 400);
  EXPECT_EQ(rbad->status, dbad->status);
  EXPECT_EQ(rbad->body, dbad->body);

  // Concurrent requests through the router: no errors, and nothing left allocated after.
  std::vector<std::future<int>> fs_;
  for (int c = 0; c < 8; ++c)
    fs_.push_back(std::async(std::launch::async, [&] {
      int errors = 0;
      for (int i = 0; i < 8; ++i) {
        auto r = post(pr, "/v1/completions", i % 2 ? completion : sbody);
        if (!r || r->status != 200) errors++;
      }
      return errors;
    }));
  int errors = 0;
  for (auto& f : fs_) errors += f.get();
  EXPECT_EQ(errors, 0);
  for (int port : {p1, p2}) {
    EXPECT_TRUE(eventually([&] {
      auto r = get(port, "/get_server_info");
      if (!r || r->status != 200) return false;
      Json pools = Json::parse(r->body)["pools"];
      return pools["kv_pages_used"] == 0 && pools["kda_slots_used"] == 0;
    })) << get(port, "/get_server_info")->body;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace pdserve::router::testing
