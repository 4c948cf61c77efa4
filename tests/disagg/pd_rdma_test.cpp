// Prefill + decode servers switched from TCP to RDMA by configuration alone
// (--transfer-backend rdma --rdma-nics ...), over the in-process fake fabric: a real
// request's KV pages, KDA state and aux row move through RdmaTransport, and the decoded
// tokens equal the TCP pair's, token for token. No NIC is needed; nothing here says the
// verbs fabric works on a real one (docs/disaggregation.md, "RDMA").
#include <gtest/gtest.h>

#include <future>

#include "model/test_models.h"
#include "pd_fixture.h"
#include "transfer/rdma/fake_fabric.h"

namespace pdserve::server::testing {
namespace {

namespace rdma = transfer::rdma;
using pdserve::testing::random_ids;

// The NICs the fake fabric stands for, as a probe of a healthy RoCE host would report them.
struct FakeNics {
  rdma::testing::FakeWire wire;
  bool fabric_opens = true;

  HttpServer::RdmaHooks hooks() {
    HttpServer::RdmaHooks h;
    h.list_devices = [] { return rdma::DeviceList{{"fake_0", "fake_1"}, ""}; };
    h.probe_nics = [](const std::vector<rdma::NicName>& nics, int) {
      std::vector<rdma::PortReport> out;
      for (const rdma::NicName& n : nics) {
        rdma::PortReport r;
        r.nic = n;
        r.device_found = n.device.rfind("fake_", 0) == 0;
        r.port_found = r.device_found;
        r.active = r.device_found;
        r.state = r.device_found ? "ACTIVE" : "";
        r.link = rdma::LinkLayer::kEthernet;
        r.active_mtu = 4096;
        rdma::GidEntry g;
        g.index = 3;
        g.type = rdma::GidType::kRoceV2;
        g.gid[10] = g.gid[11] = 0xff;
        g.gid[12] = 10;
        g.gid[15] = static_cast<uint8_t>(1 + out.size());
        r.gids = {g};
        if (r.device_found) r.gid = g;
        out.push_back(r);
      }
      return out;
    };
    h.make_fabric = [this](const std::vector<rdma::NicName>& nics, int) -> Result<std::unique_ptr<rdma::Fabric>> {
      if (!fabric_opens) return Status(ErrorCode::kUnavailable, "ibv_open_device fake_0:1: No such device");
      return std::unique_ptr<rdma::Fabric>(new rdma::testing::FakeFabric(&wire, static_cast<int>(nics.size())));
    };
    return h;
  }
};

ServeConfig rdma_config(ServerRole role, int tp) {
  ServeConfig c = pd_config(role, tp);
  c.disagg.transfer_backend = "rdma";
  c.disagg.rdma_nics = {"fake_0", "fake_1"};
  return c;
}

Json completion_body(const std::vector<int32_t>& prompt, int max_tokens) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}};
}

PdResult run_pair(LiveServer& prefill, LiveServer& decode, const Json& body, uint64_t room) {
  Json b = body;
  b["bootstrap_host"] = "127.0.0.1";
  b["bootstrap_port"] = prefill.server().prefill()->bootstrap_port();
  b["bootstrap_room"] = room;
  const std::string text = b.dump();
  auto p = std::async(std::launch::async, [&] { return prefill.post("/v1/completions", text); });
  auto d = decode.post("/v1/completions", text);
  auto pr = p.get();
  return {pr.first, d.first, pr.second, d.second};
}

Json tokens_of(const std::string& body) {
  const Json j = Json::parse(body);
  return Json{j["choices"][0]["text"], j["choices"][0]["logprobs"]["tokens"], j["choices"][0]["logprobs"]["token_logprobs"],
              j["usage"]};
}

class PdRdma : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(PdRdma, DecodesTheSameTokensAsTheTcpPair) {
  const auto [ptp, dtp] = GetParam();
  FakeNics nics;
  LiveServer rp(rdma_config(ServerRole::kPrefill, ptp), {}, {}, nics.hooks());
  LiveServer rd(rdma_config(ServerRole::kDecode, dtp), {}, {}, nics.hooks());
  PdPair tcp(ptp, dtp);
  // Both RDMA roles say what they run on, and that it is rdma.
  for (LiveServer* s : {&rp, &rd}) {
    const Json info = s->info()["disaggregation"];
    EXPECT_EQ(info["transport_choice"].get<std::string>().rfind("rdma (asked for", 0), 0u) << info["transport_choice"];
    EXPECT_EQ(info["layout"]["transfer"]["backend"], "rdma") << info["layout"].dump();
    EXPECT_EQ(info["layout"]["transfer"]["nics"], 2);
  }
  uint64_t room = 5000;
  uint64_t moved = 0;
  for (size_t n : {1, 16, 47, 200}) {
    SCOPED_TRACE("prompt length " + std::to_string(n));
    const Json body = completion_body(random_ids(n, static_cast<uint32_t>(n) + 7), 10);
    PdResult want = tcp.request("/v1/completions", body, ++room);
    ASSERT_EQ(want.decode_status, 200) << want.decode_body;
    PdResult got = run_pair(rp, rd, body, room);
    ASSERT_EQ(got.decode_status, 200) << got.decode_body;
    ASSERT_EQ(got.prefill_status, 200) << got.prefill_body;
    EXPECT_EQ(tokens_of(got.decode_body), tokens_of(want.decode_body));
    EXPECT_TRUE(PdPair::pools_free(rp)) << "prefill still holds pages or slots";
    EXPECT_TRUE(PdPair::pools_free(rd)) << "decode still holds pages or slots";
    const uint64_t bytes = rd.info()["disaggregation"]["transfer"]["bytes"].get<uint64_t>();
    EXPECT_GT(bytes, moved) << "the room moved no bytes";
    moved = bytes;
  }
  // Every payload byte crossed the (fake) NICs, as RDMA WRITEs, on both of them.
  const Json t = rd.info()["disaggregation"]["transfer"];
  EXPECT_EQ(t["rooms_succeeded"].get<int64_t>(), 4);
  EXPECT_EQ(t["rooms_failed"].get<int64_t>(), 0);
  EXPECT_EQ(rp.info()["disaggregation"]["transfer"]["bytes"], t["bytes"]);
  EXPECT_GE(nics.wire.bytes_on(0) + nics.wire.bytes_on(1), t["bytes"].get<uint64_t>());
  EXPECT_GT(nics.wire.writes_on(0), 0u);
  EXPECT_GT(nics.wire.writes_on(1), 0u);
}

INSTANTIATE_TEST_SUITE_P(TpPairs, PdRdma, ::testing::Values(std::pair{1, 1}, std::pair{2, 1}),
                         [](const auto& info) { return "P" + std::to_string(info.param.first) + "_D" + std::to_string(info.param.second); });

// A NIC failing mid-transfer (the fake wire's "retry counter exceeded": error completion,
// both QPs in error) fails the room on both sides with every page and slot back, and the
// next request goes through on a new session (the peer re-registered).
TEST(PdRdmaFailure, ANicFailingMidTransferFailsTheRoomAndTheNextOneWorks) {
  FakeNics nics;
  auto quick = [](ServerRole role) {
    ServeConfig c = rdma_config(role, 1);
    c.disagg.bootstrap_timeout_s = 2.0;
    c.disagg.waiting_timeout_s = 2.0;
    c.disagg.release_wait_s = 0.5;
    return c;
  };
  LiveServer rp(quick(ServerRole::kPrefill), {}, {}, nics.hooks());
  LiveServer rd(quick(ServerRole::kDecode), {}, {}, nics.hooks());
  const Json body = completion_body(random_ids(100, 11), 6);
  nics.wire.fail_nic_after(0, 1);  // NIC 0: one write lands, the next fails
  PdResult r = run_pair(rp, rd, body, 901);
  EXPECT_NE(r.decode_status, 200) << r.decode_body;
  EXPECT_NE(r.prefill_status, 200) << r.prefill_body;
  // Decode heard it from the sender (kRoomFailed), not by waiting out waiting_timeout_s.
  EXPECT_NE(r.decode_body.find("sender failed room 901"), std::string::npos) << r.decode_body;
  EXPECT_TRUE(PdPair::pools_free(rp)) << "prefill still holds pages or slots";
  EXPECT_TRUE(PdPair::pools_free(rd)) << "decode still holds pages or slots";
  EXPECT_GE(rd.info()["disaggregation"]["transfer"]["rooms_failed"].get<int64_t>(), 1);
  PdResult ok = run_pair(rp, rd, body, 902);
  EXPECT_EQ(ok.decode_status, 200) << ok.decode_body;
  EXPECT_EQ(ok.prefill_status, 200) << ok.prefill_body;
  EXPECT_TRUE(PdPair::pools_free(rp));
  EXPECT_TRUE(PdPair::pools_free(rd));
}

TEST(PdRdmaStartup, NoUsableNicIsOneClearErrorNamingIt) {
  FakeNics nics;
  ServeConfig c = rdma_config(ServerRole::kDecode, 1);
  c.disagg.rdma_nics = {"fake_0", "mlx5_7"};
  auto s = HttpServer::create(c, {}, {}, nics.hooks());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(s.status().message().find("mlx5_7:1 not found"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("never falls back"), std::string::npos) << s.status().message();
  // The probe says ready but the device will not open: named too, and still no fallback.
  nics.fabric_opens = false;
  auto t = HttpServer::create(rdma_config(ServerRole::kPrefill, 1), {}, {}, nics.hooks());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("cannot open NICs fake_0:1,fake_1:1"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("No such device"), std::string::npos) << t.status().message();
}

TEST(PdRdmaStartup, ATcpPrefillAndAnRdmaDecodeAreRefusedByTheLayoutCheck) {
  FakeNics nics;
  ServeConfig pc = pd_config(ServerRole::kPrefill, 1);
  pc.disagg.bootstrap_timeout_s = 5.0;  // decode's abort should end it sooner
  LiveServer tp(pc);
  LiveServer rd(rdma_config(ServerRole::kDecode, 1), {}, {}, nics.hooks());
  PdResult r = run_pair(tp, rd, completion_body(random_ids(20, 3), 4), 42);
  EXPECT_NE(r.decode_status, 200);
  EXPECT_NE(r.decode_body.find("transfer backend: prefill tcp, decode rdma"), std::string::npos) << r.decode_body;
  EXPECT_TRUE(PdPair::pools_free(rd));
}

}  // namespace
}  // namespace pdserve::server::testing
