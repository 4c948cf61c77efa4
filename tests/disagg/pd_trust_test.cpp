// Issue 16's startup guarantees: decode is unhealthy until a real transfer with every
// configured prefill peer checked out byte for byte; the transport policy never falls back
// silently.
#include <gtest/gtest.h>

#include <httplib.h>

#include "pd_fixture.h"
#include "pdserve/router/router.h"

namespace pdserve::server::testing {
namespace {

using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return f();
}

// A transport that advertises a port nothing listens on (a decode behind NAT, or with
// --transfer-host set to the wrong interface); everything else is the real TCP transport.
class WrongAddress : public transfer::Transport {
 public:
  explicit WrongAddress(std::unique_ptr<transfer::Transport> t) : t_(std::move(t)) {}
  transfer::TransportCaps capabilities() const override { return t_->capabilities(); }
  transfer::PeerAddress local_address() const override { return {"127.0.0.1", 1}; }
  Status register_region(const transfer::MemoryRegion& r) override { return t_->register_region(r); }
  Status unregister_region(transfer::RegionId id) override { return t_->unregister_region(id); }
  Status grant(const transfer::Grant& g) override { return t_->grant(g); }
  Status revoke(transfer::RoomId room) override { return t_->revoke(room); }
  void set_callbacks(transfer::ReceiverCallbacks cb) override { t_->set_callbacks(std::move(cb)); }
  Result<transfer::PeerId> open_peer(const transfer::PeerAddress& a) override { return t_->open_peer(a); }
  Status close_peer(transfer::PeerId p) override { return t_->close_peer(p); }
  Result<std::shared_ptr<transfer::TransferBatch>> submit(transfer::PeerId p, const transfer::BatchRequest& b) override {
    return t_->submit(p, b);
  }
  transfer::MetricsSnapshot metrics() const override { return t_->metrics(); }
  void shutdown() override { t_->shutdown(); }

 private:
  std::unique_ptr<transfer::Transport> t_;
};

TEST(PdSelfTest, DecodeTurnsHealthyOnlyAfterARealTransferWithEachPeer) {
  LiveServer prefill(pd_config(ServerRole::kPrefill, 2));
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.disagg.prefill_peers = {"127.0.0.1:" + std::to_string(prefill.server().prefill()->bootstrap_port())};
  dc.disagg.selftest_retry_s = 0.1;
  LiveServer decode(dc);
  ASSERT_TRUE(eventually([&] { return decode.get("/health").first == 200; })) << decode.get("/health").second;
  const Json peers = decode.info()["disaggregation"]["prefills"];
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0]["selftest"], "passed");
  EXPECT_EQ(peers[0]["tp"], 2);
}

TEST(PdSelfTest, AnUnreachableTransferAddressKeepsDecodeUnhealthyWithTheReason) {
  LiveServer prefill(pd_config(ServerRole::kPrefill, 1));
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.disagg.prefill_peers = {"127.0.0.1:" + std::to_string(prefill.server().prefill()->bootstrap_port())};
  dc.disagg.selftest_retry_s = 0.1;
  // Decode listens on 127.0.0.1 but advertises an address prefill cannot reach: the classic
  // misconfiguration, which must show up at startup, not on the first user request.
  auto factory = [](const transfer::TcpConfig& c) -> Result<std::unique_ptr<transfer::Transport>> {
    PDS_ASSIGN_OR_RETURN(auto inner, transfer::make_tcp_transport(c));
    return std::unique_ptr<transfer::Transport>(std::make_unique<WrongAddress>(std::move(inner)));
  };
  LiveServer decode(dc, factory);
  std::this_thread::sleep_for(500ms);
  auto [status, body] = decode.get("/health");
  EXPECT_EQ(status, 503);
  EXPECT_NE(body.find("self-test with prefill"), std::string::npos) << body;
  EXPECT_NE(decode.info()["disaggregation"]["prefills"][0]["selftest"].get<std::string>(), "passed");
}

TEST(PdSelfTest, APeerThatIsNotAPdserveBootstrapNeverPasses) {
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  LiveServer unified(pd_config(ServerRole::kUnified, 1));  // answers HTTP, but has no /route
  dc.disagg.prefill_peers = {"127.0.0.1:" + std::to_string(unified.port())};
  dc.disagg.selftest_retry_s = 0.1;
  LiveServer decode(dc);
  std::this_thread::sleep_for(400ms);
  auto [status, body] = decode.get("/health");
  EXPECT_EQ(status, 503);
  EXPECT_NE(body.find("/route"), std::string::npos) << body;
}

// --allow-prefill: decode serves rooms naming a listed bootstrap address and refuses any
// other with a 400 naming bootstrap_host, before it contacts that address or holds anything.
TEST(PdAllowList, DecodeTakesRoomsOnlyFromListedPrefills) {
  PdPair pd(1, 1);
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  const std::string listed = "127.0.0.1:" + std::to_string(pd.bootstrap_port());
  dc.disagg.allowed_prefills = {listed};
  pd.decode = std::make_unique<LiveServer>(dc);
  const Json body{{"prompt", "allow list"}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}};
  PdResult ok = pd.request("/v1/completions", body, 41);
  ASSERT_EQ(ok.decode_status, 200) << ok.decode_body;
  EXPECT_EQ(Json::parse(ok.decode_body)["usage"]["completion_tokens"], 3);
  // The same prefill under another name is not on the list: compared as the router sends it.
  for (const std::string host : {"localhost", "10.255.255.1"}) {
    Json other = pd.with_bootstrap(body, 42);
    other["bootstrap_host"] = host;
    auto [status, resp] = pd.decode->post("/v1/completions", other.dump());
    EXPECT_EQ(status, 400) << resp;
    const Json err = Json::parse(resp)["error"];
    EXPECT_EQ(err["param"], "bootstrap_host") << resp;
    EXPECT_NE(err["message"].get<std::string>().find("--allow-prefill"), std::string::npos) << resp;
  }
  // Only the listed prefill was ever looked up; nothing is held.
  const Json peers = pd.decode->info()["disaggregation"]["prefills"];
  ASSERT_EQ(peers.size(), 1u) << peers.dump();
  EXPECT_EQ(peers[0]["bootstrap"], listed) << peers.dump();
  EXPECT_EQ(pd.decode->info()["disaggregation"]["config"]["allowed_prefills"], Json::array({listed}));
  pd.expect_pools_free();
}

// Behind the router a refused room ends on both sides at once: the client gets decode's 400,
// and prefill's half ends when the router closes its call, not at --bootstrap-timeout (300 s
// here), although decode posts no abort to an address it does not allow.
TEST(PdAllowList, BehindTheRouterARefusedRoomLeavesNothingOnPrefill) {
  PdPair pd(1, 1);
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.disagg.allowed_prefills = {"localhost:" + std::to_string(pd.bootstrap_port())};  // the router says 127.0.0.1
  pd.decode = std::make_unique<LiveServer>(dc);
  router::RouterConfig rc;
  rc.mode = router::RouterMode::kPd;
  rc.host = "127.0.0.1";
  rc.port = 0;
  rc.health.interval_s = 0.1;
  rc.prefill = {"http://127.0.0.1:" + std::to_string(pd.prefill->port()) + "@" + std::to_string(pd.bootstrap_port())};
  rc.decode = {"http://127.0.0.1:" + std::to_string(pd.decode->port())};
  auto r = router::Router::create(std::move(rc));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_TRUE((*r)->start().is_ok());
  httplib::Client cli("127.0.0.1", (*r)->port());
  cli.set_read_timeout(60, 0);
  const std::string body = Json{{"prompt", "refused"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  int status = 0;
  std::string answer;
  ASSERT_TRUE(eventually([&] {  // until the router's first health checks have passed
    auto res = cli.Post("/v1/completions", body, "application/json");
    status = res ? res->status : 0;
    answer = res ? res->body : "no answer";
    return status != 0 && status != 503;
  })) << answer;
  EXPECT_EQ(status, 400) << answer;
  EXPECT_EQ(Json::parse(answer)["error"]["param"], "bootstrap_host") << answer;
  // Prefill's handler heard the router hang up and let the room go (not at the 300 s timeout).
  EXPECT_TRUE(eventually([&] { return pd.prefill->info()["disaggregation"]["rooms"] == 0; }, 5s))
      << pd.prefill->info()["disaggregation"].dump();
  pd.expect_pools_free();
}

TEST(PdAllowList, SelfTestPeersMustBeAllowedAndAddressesMustParse) {
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.disagg.allowed_prefills = {"p1:8998"};
  dc.disagg.prefill_peers = {"p2:8998"};
  Status st = dc.disagg.validate();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.message().rfind("prefill_peers: 'p2:8998' is not among allowed_prefills", 0), 0u) << st.message();
  for (const char* bad : {"p1", ":8998", "p1:", "p1:0", "p1:65536", "p1:99999999999", "p1:8x"}) {
    dc.disagg.prefill_peers.clear();
    dc.disagg.allowed_prefills = {bad};
    st = dc.disagg.validate();
    ASSERT_FALSE(st.is_ok()) << bad;
    EXPECT_EQ(st.message().rfind("allowed_prefills: '", 0), 0u) << st.message();
  }
  dc.disagg.allowed_prefills = {"p1:8998", "[::1]:8998"};
  dc.disagg.prefill_peers = {"p1:8998"};
  EXPECT_TRUE(dc.disagg.validate().is_ok());
  EXPECT_TRUE(dc.disagg.prefill_allowed("p1", 8998));
  EXPECT_FALSE(dc.disagg.prefill_allowed("p1", 8999));
  EXPECT_FALSE(dc.disagg.prefill_allowed("P1", 8998));
  dc.disagg.allowed_prefills.clear();
  EXPECT_TRUE(dc.disagg.prefill_allowed("anything", 1));
}

TEST(TransportPolicy, RdmaNeverFallsBackAndAutoSaysWhatItChose) {
  ServeConfig rdma = pd_config(ServerRole::kDecode, 1);
  rdma.disagg.transfer_backend = "rdma";
  auto s = HttpServer::create(rdma);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("never falls back"), std::string::npos) << s.status().message();
  ServeConfig bad = pd_config(ServerRole::kDecode, 1);
  bad.disagg.transfer_backend = "carrier-pigeon";
  EXPECT_NE(HttpServer::create(bad).status().message().find("transfer_backend"), std::string::npos);
  ServeConfig missing_nic = pd_config(ServerRole::kDecode, 1);
  missing_nic.disagg.transfer_backend = "rdma";
  missing_nic.disagg.rdma_nics = {"pdsnone_0"};
  auto m = HttpServer::create(missing_nic);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("pdsnone_0:1 not found"), std::string::npos) << m.status().message();
  ServeConfig bad_nic = pd_config(ServerRole::kDecode, 1);
  bad_nic.disagg.rdma_nics = {"mlx5_0;reboot"};
  EXPECT_NE(HttpServer::create(bad_nic).status().message().find("rdma_nics"), std::string::npos);
  ServeConfig auto_nic = pd_config(ServerRole::kDecode, 1);
  auto_nic.disagg.rdma_nics = {"pdsnone_0"};
  LiveServer decode(auto_nic);
  const Json info = decode.info();
  const std::string choice = info["disaggregation"]["transport_choice"];
  EXPECT_NE(choice.find("tcp (auto: RDMA NIC pdsnone_0:1 not found"), std::string::npos) << choice;
  EXPECT_NE(choice.find("RDMA"), std::string::npos) << choice;
  ASSERT_TRUE(info["disaggregation"]["rdma"].is_object()) << info.dump();
  EXPECT_EQ(info["disaggregation"]["rdma"]["nics"].size(), 1u);
  EXPECT_EQ(info["disaggregation"]["rdma"]["nics"][0]["usable"], false);
  EXPECT_EQ(info["disagg"]["rdma_nics"], Json::array({"pdsnone_0"})) << info.dump();
}

}  // namespace
}  // namespace pdserve::server::testing
