#include "pdserve/transfer/rdma/nic_probe.h"

#include <gtest/gtest.h>

namespace pdserve::transfer::rdma {
namespace {

TEST(NicProbe, DescribesWhatIsWrongWithEachNic) {
  DeviceList here{{"mlx5_0"}, ""};
  PortReport missing;
  missing.nic = {"mlx5_3", 1};
  EXPECT_EQ(missing.describe(here), "mlx5_3:1 not found (1 RDMA device(s): mlx5_0)");
  PortReport no_port;
  no_port.nic = {"mlx5_0", 2};
  no_port.device_found = true;
  PortReport down = no_port;
  down.nic.port = 1;
  down.port_found = true;
  down.state = "PORT_DOWN";
  down.link = LinkLayer::kInfiniBand;
  PortReport no_gid = down;
  no_gid.active = true;
  no_gid.state = "PORT_ACTIVE";
  no_gid.gid_problem = "InfiniBand port has no GID at index 0";
  auto problems = nic_problems({missing, no_port, down, no_gid}, here);
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_NE(problems[0].find("not found"), std::string::npos);
  EXPECT_NE(problems[1].find("no port 2"), std::string::npos);
  EXPECT_NE(problems[2].find("PORT_DOWN, not ACTIVE"), std::string::npos);
  EXPECT_NE(problems[3].find("no usable GID"), std::string::npos);
  PortReport ok = no_gid;
  ok.gid = GidEntry{0, GidType::kIb, {}};
  ok.gid->gid[0] = 0xfe;
  ok.lid = 7;
  EXPECT_TRUE(nic_problems({ok}, here).empty());
  EXPECT_NE(ok.describe(here).find("LID 7"), std::string::npos);
}

TEST(NicProbe, SaysPlainlyWhenThereAreNoDevices) {
  EXPECT_EQ(describe_devices(DeviceList{}), "no RDMA devices (ibv_get_device_list found none)");
  EXPECT_NE(describe_devices(DeviceList{{}, "ibv_get_device_list failed: x"}).find("no RDMA devices"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::transfer::rdma
