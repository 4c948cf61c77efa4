// SIGTERM on a real `pdserve serve` process: in-flight requests finish, new ones get 503
// "draining", /health says so, and the process exits 0; a second signal exits at once.
#include <gtest/gtest.h>

#include <functional>

#include "child_server.h"
#include "server_fixture.h"

namespace pdserve::server::testing {
namespace {

std::vector<std::string> serve_args(const std::string& drain_timeout) {
  return {"serve", "--model", pdserve::testing::tiny_model_dir("tiny-k3"), "--host", "127.0.0.1", "--port", "0",
          "--page-size", "16", "--max-running", "4", "--drain-timeout", drain_timeout};
}

// Long enough (thousands of decode steps) to still be running when the signal lands.
const std::string kLongStream =
    R"({"prompt": "Hello", "max_tokens": 6000, "ignore_eos": true, "temperature": 0, "stream": true})";

// Plain calls to a server in another process.
struct LiveClient {
  int port;
  explicit LiveClient(int p) : port(p) {}
  std::pair<int, std::string> get(const std::string& path) const {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Get(path.c_str());
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  }
  std::pair<int, std::string> post(const std::string& path, const std::string& body) const {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post(path.c_str(), body, "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  }
};

TEST(Drain, SigtermFinishesInFlightRefusesNewAndExitsZero) {
  ChildServer srv(serve_args("120"));
  ASSERT_GT(srv.port(), 0) << srv.log();
  LiveClient c(srv.port());
  RawStream stream;
  ASSERT_TRUE(stream.open(srv.port(), "/v1/completions", kLongStream));
  srv.signal(SIGTERM);
  ASSERT_TRUE(wait_for([&] { return c.get("/health").first == 503; })) << "never started draining";
  auto health = c.get("/health");
  EXPECT_EQ(Json::parse(health.second)["reason"], "draining");
  auto refused = c.post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(refused.first, 503);
  EXPECT_EQ(Json::parse(refused.second)["error"]["code"], "server_draining") << refused.second;
  const std::string& all = stream.read_to_end();
  EXPECT_NE(all.find("\"finish_reason\":\"length\""), std::string::npos) << all.substr(all.size() > 400 ? all.size() - 400 : 0);
  EXPECT_NE(all.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(srv.wait_exit(std::chrono::seconds(60)), 0) << srv.drain_output();
}

TEST(Drain, TimeoutAbortsWhatIsLeftAndStillExitsZero) {
  ChildServer srv(serve_args("0.3"));
  ASSERT_GT(srv.port(), 0) << srv.log();
  RawStream stream;
  ASSERT_TRUE(stream.open(srv.port(), "/v1/completions", kLongStream));
  const auto t0 = std::chrono::steady_clock::now();
  srv.signal(SIGTERM);
  EXPECT_EQ(srv.wait_exit(std::chrono::seconds(30)), 0) << srv.drain_output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  const std::string& all = stream.read_to_end();
  EXPECT_EQ(all.find("\"finish_reason\":\"length\""), std::string::npos) << "the stream should have been cut short";
}

TEST(Drain, SecondSignalExitsAtOnce) {
  ChildServer srv(serve_args("120"));
  ASSERT_GT(srv.port(), 0) << srv.log();
  LiveClient c(srv.port());
  RawStream stream;
  ASSERT_TRUE(stream.open(srv.port(), "/v1/completions", kLongStream));
  srv.signal(SIGTERM);
  ASSERT_TRUE(wait_for([&] { return c.get("/health").first == 503; }));
  srv.signal(SIGINT);
  EXPECT_EQ(srv.wait_exit(std::chrono::seconds(5)), 128 + SIGINT) << srv.drain_output();
}

TEST(Drain, IdleServerExitsZeroAtOnce) {
  ChildServer srv(serve_args("120"));
  ASSERT_GT(srv.port(), 0) << srv.log();
  srv.signal(SIGTERM);
  EXPECT_EQ(srv.wait_exit(std::chrono::seconds(15)), 0) << srv.drain_output();
}

}  // namespace
}  // namespace pdserve::server::testing
