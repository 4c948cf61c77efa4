#include "pdserve/transfer/rdma/transport_policy.h"

#include <gtest/gtest.h>

namespace pdserve::transfer::rdma {
namespace {

PortReport ready(const std::string& dev, uint8_t ip_last) {
  PortReport r;
  r.nic = {dev, 1};
  r.device_found = r.port_found = r.active = true;
  r.state = "PORT_ACTIVE";
  r.link = LinkLayer::kEthernet;
  GidEntry g{3, GidType::kRoceV2, {}};
  g.gid[10] = g.gid[11] = 0xff;
  g.gid[12] = 10, g.gid[15] = ip_last;
  r.gids = {g};
  r.gid = g;
  return r;
}

struct Fixture {
  std::vector<NicName> nics = {{"mlx5_0", 1}, {"mlx5_1", 1}};
  std::vector<PortReport> reports = {ready("mlx5_0", 1), ready("mlx5_1", 2)};
  DeviceList here{{"mlx5_0", "mlx5_1"}, ""};
};

TEST(TransportPolicy, TcpIsAlwaysTcp) {
  Fixture f;
  auto d = decide_transport("tcp", f.nics, f.reports, f.here, true);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "tcp");
  EXPECT_NE(d->reason.find("asked for"), std::string::npos);
}

TEST(TransportPolicy, AutoPicksRdmaOnlyWhenEveryNicIsReadyAndSaysWhy) {
  Fixture f;
  auto d = decide_transport("auto", f.nics, f.reports, f.here, true, true);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "rdma");
  EXPECT_NE(d->reason.find("mlx5_1:1"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("RoCE v2"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("10.0.0.2"), std::string::npos) << d->reason;
  f.reports[1].active = false;
  f.reports[1].state = "PORT_DOWN";
  d = decide_transport("auto", f.nics, f.reports, f.here, true, true);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "tcp");
  EXPECT_NE(d->reason.find("mlx5_1:1 port is PORT_DOWN"), std::string::npos) << d->reason;
}

TEST(TransportPolicy, AutoStaysOnTcpUntilTheDataPathHasRunOnRealNics) {
  Fixture f;
  auto d = decide_transport("auto", f.nics, f.reports, f.here, true, false);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "tcp");
  EXPECT_NE(d->reason.find("never run on a real NIC"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("--transfer-backend rdma"), std::string::npos) << d->reason;
  // Asked for explicitly, it is honoured, and the log line says it is a first.
  d = decide_transport("rdma", f.nics, f.reports, f.here, true, false);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "rdma");
  EXPECT_NE(d->reason.find("never run on a real NIC"), std::string::npos) << d->reason;
}

TEST(TransportPolicy, AutoWithoutNicsOrDataPathIsTcpAndSaysSo) {
  Fixture f;
  auto d = decide_transport("auto", {}, {}, DeviceList{}, true);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->backend, "tcp");
  EXPECT_NE(d->reason.find("no --rdma-nics"), std::string::npos);
  EXPECT_NE(d->reason.find("no RDMA devices"), std::string::npos);
  d = decide_transport("auto", f.nics, f.reports, f.here, false);
  EXPECT_EQ(d->backend, "tcp");
  EXPECT_NE(d->reason.find("not finished"), std::string::npos);
}

TEST(TransportPolicy, RdmaNeverFallsBackAndNamesTheMissingNic) {
  Fixture f;
  f.reports[0].device_found = false;
  f.here.devices = {"mlx5_1"};
  auto d = decide_transport("rdma", f.nics, f.reports, f.here, true);
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(d.status().message().find("mlx5_0:1 not found"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("never falls back"), std::string::npos);
  Fixture g;
  g.reports[1].gid.reset();
  g.reports[1].gid_problem = "GID index 9 does not exist on this port";
  EXPECT_NE(decide_transport("rdma", g.nics, g.reports, g.here, true).status().message().find("GID index 9"), std::string::npos);
  EXPECT_NE(decide_transport("rdma", {}, {}, g.here, true).status().message().find("--rdma-nics"), std::string::npos);
  Fixture h;
  EXPECT_NE(decide_transport("rdma", h.nics, h.reports, h.here, false).status().message().find("not finished"), std::string::npos);
  EXPECT_EQ(decide_transport("rdma", h.nics, h.reports, h.here, true)->backend, "rdma");
}

TEST(TransportPolicy, RefusesUnknownBackendsAndMismatchedReports) {
  Fixture f;
  EXPECT_EQ(decide_transport("pigeon", f.nics, f.reports, f.here, true).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(decide_transport("auto", f.nics, {}, f.here, true).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer::rdma
