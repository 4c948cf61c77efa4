// Needs a real RDMA device (CTest label `rdma`); skips with a message where there is none.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <condition_variable>

#include "pdserve/transfer/rdma/nic_probe.h"
#include "pdserve/transfer/rdma/rdma_transport.h"
#include "pdserve/transfer/rdma/verbs_fabric.h"

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

// The whole transport over real NICs, both ends in this process (each NIC talks to itself
// through its port): a striped batch lands byte for byte and its notification arrives.
// NICs: PDSERVE_RDMA_TEST_NICS ("mlx5_0,mlx5_1"), else every usable device's port 1.
// Never run: no machine here has an RDMA device.
TEST(RdmaDevice, TransportLoopbackMovesABatchAndNotifies) {
  const DeviceList here = list_devices();
  if (here.devices.empty()) GTEST_SKIP() << "no RDMA devices here: " << describe_devices(here);
  std::vector<NicName> nics;
  if (const char* env = std::getenv("PDSERVE_RDMA_TEST_NICS")) {
    auto parsed = parse_nic_list(std::string(env));
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
    nics = *parsed;
  } else {
    std::vector<NicName> all;
    for (const auto& d : here.devices) all.push_back({d, 1});
    for (const PortReport& r : probe_nics(all, kAutoGidIndex))
      if (r.usable()) nics.push_back(r.nic);
  }
  if (nics.empty()) GTEST_SKIP() << "no usable RDMA port here";
  // Declared before the transports, which write into them until they shut down.
  constexpr uint64_t kBytes = 64ull << 20;
  std::vector<uint8_t> src(kBytes), dst(kBytes, 0);
  for (uint64_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::mutex mu;
  std::condition_variable cv;
  std::string note;
  auto fa = make_verbs_fabric(nics, kAutoGidIndex), fb = make_verbs_fabric(nics, kAutoGidIndex);
  ASSERT_TRUE(fa.is_ok()) << fa.status().message();
  ASSERT_TRUE(fb.is_ok()) << fb.status().message();
  RdmaTransportConfig cfg;
  cfg.control.secret = "device-test";
  auto decode = make_rdma_transport(cfg, std::move(*fa));
  auto prefill = make_rdma_transport(cfg, std::move(*fb));
  ASSERT_TRUE(decode.is_ok()) << decode.status().message();
  ASSERT_TRUE(prefill.is_ok()) << prefill.status().message();
  ReceiverCallbacks cb;
  cb.on_notify = [&](RoomId, const std::string& p) {
    std::lock_guard lk(mu);
    note = p;
    cv.notify_all();
  };
  (*decode)->set_callbacks(cb);
  ASSERT_TRUE((*decode)->register_region({2, dst.data(), dst.size(), "dst"}).is_ok());
  ASSERT_TRUE((*prefill)->register_region({1, src.data(), src.size(), "src"}).is_ok());
  ASSERT_TRUE((*decode)->grant({1, 2, 0, kBytes, 1}).is_ok());
  auto peer = (*prefill)->open_peer((*decode)->local_address());
  ASSERT_TRUE(peer.is_ok()) << peer.status().message();
  auto b = (*prefill)->submit(*peer, {1, 1, {{1, 0, 2, 0, kBytes}}, std::string("done")});
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_TRUE((*b)->wait(Clock::now() + std::chrono::seconds(60)).is_ok());
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return !note.empty(); }));
  EXPECT_EQ(note, "done");
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), kBytes), 0);
  const MetricsSnapshot m = (*prefill)->metrics();
  std::cout << "rdma loopback over " << nics.size() << " NIC(s): " << m.last_batch_gbps << " GB/s for one 64 MiB batch\n";
}

}  // namespace
}  // namespace pdserve::transfer::rdma
