// A bounded load test on loopback: 2,000 requests at concurrency 64, mixed JSON and SSE,
// through DP and PD routers over fake workers. It must end with zero errors and nothing
// left in flight anywhere (router, its per-worker counts, the workers).
#include <thread>

#include "router_test_util.h"

namespace pdserve::router::testing {
namespace {

constexpr int kRequests = 2000;
constexpr int kConcurrency = 64;

struct Tally {
  std::atomic<int> ok{0}, failed{0};
  std::mutex mu;
  std::string first_failure;
  void fail(const std::string& why) {
    failed++;
    std::lock_guard lk(mu);
    if (first_failure.empty()) first_failure = why;
  }
};

void run_load(int port, Tally& t) {
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kConcurrency; ++c) {
    clients.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port);  // one kept-alive connection per client
      cli.set_keep_alive(true);
      cli.set_read_timeout(60, 0);
      int mine = 0;
      for (int i; (i = next++) < kRequests;) {
        ++mine;
        const bool stream = i % 3 == 0;
        const std::string body = std::string(R"({"model":"tiny","prompt":"req )") + std::to_string(i) + "\"" +
                                 (stream ? R"(,"stream":true})" : "}");
        auto res = cli.Post(i % 2 ? "/v1/completions" : "/v1/chat/completions", body, "application/json");
        if (!res) {
          t.fail("transport: " + httplib::to_string(res.error()) + " req " + std::to_string(i) + " client's #" + std::to_string(mine));
        } else if (res->status != 200) {
          t.fail("HTTP " + std::to_string(res->status) + ": " + res->body);
        } else if (stream ? res->body.find("data: [DONE]") == std::string::npos
                          : Json::parse(res->body, nullptr, false).is_discarded()) {
          t.fail("bad body: " + res->body);
        } else {
          t.ok++;
        }
      }
    });
  }
  for (auto& th : clients) th.join();
}

void expect_drained(Router& r, const std::vector<FakeWorker*>& workers) {
  EXPECT_TRUE(eventually([&] {
    const Json info = r.server_info();
    if (info["in_flight"] != 0) return false;
    for (const auto& w : info["workers"])
      if (w["outstanding"] != 0) return false;
    return true;
  })) << r.server_info().dump(2);
  for (auto* w : workers) EXPECT_TRUE(eventually([&] { return w->in_flight.load() == 0; })) << w->name();
}

TEST(RouterLoad, Dp2000RequestsAtConcurrency64) {
  FakeWorker a("a"), b("b");
  a.start();
  b.start();
  auto cfg = fast_config();
  cfg.workers = {a.url(), b.url()};
  auto r = start_router(cfg);
  Tally t;
  run_load(r->port(), t);
  EXPECT_EQ(t.failed.load(), 0) << t.first_failure;
  EXPECT_EQ(t.ok.load(), kRequests);
  EXPECT_EQ(a.count() + b.count(), size_t(kRequests));
  expect_drained(*r, {&a, &b});
}

TEST(RouterLoad, Pd2000RequestsAtConcurrency64) {
  FakeWorker p1("p1"), p2("p2"), d1("d1"), d2("d2");
  for (auto* w : {&p1, &p2, &d1, &d2}) w->start();
  auto cfg = fast_config();
  cfg.mode = RouterMode::kPd;
  cfg.prefill = {p1.url(), p2.url()};
  cfg.decode = {d1.url(), d2.url()};
  cfg.prefill_policy = PolicyKind::kPowerOfTwo;
  auto r = start_router(cfg);
  Tally t;
  run_load(r->port(), t);
  EXPECT_EQ(t.failed.load(), 0) << t.first_failure;
  EXPECT_EQ(t.ok.load(), kRequests);
  EXPECT_EQ(d1.count() + d2.count(), size_t(kRequests));
  EXPECT_TRUE(eventually([&] { return p1.count() + p2.count() == size_t(kRequests); }));
  expect_drained(*r, {&p1, &p2, &d1, &d2});
}

}  // namespace
}  // namespace pdserve::router::testing
