// PD: when a pair's decode cannot be reached, the router tells the prefill's bootstrap server
// to drop the room (signed with the cluster secret when it has one), so prefill does not wait
// out its --bootstrap-timeout for a decode that never saw the room.
#include <set>

#include "pdserve/disagg/bootstrap_auth.h"
#include "router_test_util.h"

namespace pdserve::router::testing {
namespace {

const std::string kBody = R"({"model":"tiny","prompt":"hello","max_tokens":4})";

// Stands in for a prefill's bootstrap server: records each /abort and whether its signature
// verifies under `secret` (no secret: whether it came unsigned).
class FakeBootstrap {
 public:
  struct Abort {
    uint64_t room = 0;
    std::string reason;
    bool authentic = false;
  };

  explicit FakeBootstrap(std::string secret) : auth_(std::move(secret)) {
    svr_.Post("/abort", [this](const httplib::Request& req, httplib::Response& res) {
      Abort a;
      const Json j = Json::parse(req.body, nullptr, false);
      if (j.is_object() && j.contains("room")) a.room = j["room"].get<uint64_t>();
      if (j.is_object() && j.contains("reason")) a.reason = j["reason"].get<std::string>();
      if (auth_.enabled())
        a.authentic = auth_.verify("POST", req.path, req.body, req.get_header_value(disagg::kAuthTimestampHeader),
                                   req.get_header_value(disagg::kAuthNonceHeader),
                                   req.get_header_value(disagg::kAuthSignatureHeader))
                          .is_ok();
      else
        a.authentic = !req.has_header(disagg::kAuthSignatureHeader);
      {
        std::lock_guard lk(mu_);
        aborts_.push_back(a);
      }
      res.status = a.authentic ? 200 : 401;
      res.set_content(R"({"ok":true})", "application/json");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeBootstrap() {
    svr_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<Abort> aborts() const {
    std::lock_guard lk(mu_);
    return aborts_;
  }

 private:
  disagg::BootstrapAuth auth_;
  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::vector<Abort> aborts_;
};

RouterConfig unreachable_decode_config(const FakeWorker& p, const FakeBootstrap& b) {
  auto c = fast_config();
  c.mode = RouterMode::kPd;
  c.prefill = {p.url() + "@" + std::to_string(b.port())};
  // Two dead decodes: the first attempt meets one, the retry the other, then none is left.
  c.decode = {"http://127.0.0.1:" + std::to_string(dead_port()), "http://127.0.0.1:" + std::to_string(dead_port())};
  c.health.interval_s = 3600;  // keep the dead decode in rotation: every attempt meets it
  c.max_connect_retries = 2;
  return c;
}

TEST(RouterPdAbort, UnreachableDecodeAbortsEveryRoomOnThePrefill) {
  FakeWorker p("prefill");
  p.start();
  FakeBootstrap boot("");
  auto r = start_router(unreachable_decode_config(p, boot));
  ASSERT_TRUE(r);
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 502) << res->body;
  // One room per attempt (the first and the retry), each aborted once.
  ASSERT_TRUE(eventually([&] { return boot.aborts().size() >= 2; }));
  std::set<uint64_t> aborted;
  for (const auto& a : boot.aborts()) {
    aborted.insert(a.room);
    EXPECT_TRUE(a.authentic) << "no secret configured: the abort must come unsigned";
    EXPECT_NE(a.reason.find("unreachable"), std::string::npos) << a.reason;
  }
  EXPECT_EQ(aborted.size(), 2u);
  for (const auto& s : p.seen())  // every room prefill was given is among them
    EXPECT_EQ(aborted.count(Json::parse(s.body)["bootstrap_room"].get<uint64_t>()), 1u);
  EXPECT_EQ(r->server_info()["counters"]["prefill_rooms_aborted"].get<int>(), 2);
}

TEST(RouterPdAbort, AbortsAreSignedWithTheClusterSecret) {
  FakeWorker p("prefill");
  p.start();
  FakeBootstrap boot("cluster-secret-for-the-test");
  auto cfg = unreachable_decode_config(p, boot);
  cfg.cluster_secret = "cluster-secret-for-the-test";
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  ASSERT_TRUE(eventually([&] { return boot.aborts().size() >= 2; }));
  for (const auto& a : boot.aborts()) EXPECT_TRUE(a.authentic) << "room " << a.room;
}

TEST(RouterPdAbort, AWrongSecretIsRefusedByThePrefillAndTheRouterKeepsServing) {
  FakeWorker p("prefill");
  p.start();
  FakeBootstrap boot("the-real-secret");
  auto cfg = unreachable_decode_config(p, boot);
  cfg.cluster_secret = "a-wrong-secret";
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  for (int i = 0; i < 2; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 502);
  }
  ASSERT_TRUE(eventually([&] { return boot.aborts().size() >= 4; }));
  for (const auto& a : boot.aborts()) EXPECT_FALSE(a.authentic);
}

TEST(RouterPdAbort, AMissingSecretFileIsRefusedAtStartupNamingTheField) {
  auto c = fast_config();
  c.mode = RouterMode::kPd;
  c.prefill = {"http://127.0.0.1:1"};
  c.decode = {"http://127.0.0.1:2"};
  c.cluster_secret_file = "/nonexistent/pdserve-cluster.secret";
  auto r = Router::create(c);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cluster_secret_file"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("/nonexistent/pdserve-cluster.secret"), std::string::npos);
}

TEST(RouterPdAbort, AReachableDecodeCausesNoAbort) {
  FakeWorker p("prefill"), d("decode");
  p.start();
  d.start();
  FakeBootstrap boot("");
  auto c = unreachable_decode_config(p, boot);
  c.decode = {d.url()};
  auto r = start_router(c);
  ASSERT_TRUE(r);
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(boot.aborts().empty());
  EXPECT_EQ(r->server_info()["counters"]["prefill_rooms_aborted"].get<int>(), 0);
}

}  // namespace
}  // namespace pdserve::router::testing
