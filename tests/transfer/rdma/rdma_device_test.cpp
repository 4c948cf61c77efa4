// Needs a real RDMA device (CTest label `rdma`); skips with a message where there is none.
#include <gtest/gtest.h>

#include "pdserve/transfer/rdma/nic_probe.h"

namespace pdserve::transfer::rdma {
namespace {

TEST(RdmaDevice, EveryListedDeviceProbesWithAPortAndAGidOrAReason) {
  const DeviceList here = list_devices();
  if (here.devices.empty()) GTEST_SKIP() << "no RDMA devices here: " << describe_devices(here);
  std::vector<NicName> nics;
  for (const auto& d : here.devices) nics.push_back({d, 1});
  for (const PortReport& r : probe_nics(nics, kAutoGidIndex)) {
    EXPECT_TRUE(r.device_found) << r.describe(here);
    EXPECT_TRUE(r.port_found) << r.describe(here);
    EXPECT_TRUE(r.gid.has_value() || !r.gid_problem.empty()) << r.describe(here);
    std::cout << "probe: " << r.describe(here) << "\n";
  }
}

TEST(RdmaDevice, AnUnknownNicIsReportedNotFound) {
  const DeviceList here = list_devices();
  if (here.devices.empty()) GTEST_SKIP() << "no RDMA devices here: " << describe_devices(here);
  auto r = probe_nics({{"pdserve_no_such_nic", 1}}, kAutoGidIndex);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].usable());
  EXPECT_NE(r[0].describe(here).find("not found"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::transfer::rdma
