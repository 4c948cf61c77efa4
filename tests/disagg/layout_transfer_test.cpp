// The layout's optional, versioned "transfer" object: absent for TCP (so TCP layouts are what
// older builds send and accept), round-trips for RDMA, and the pair check refuses a TCP/RDMA
// mix or a different NIC count, naming both sides.
#include <gtest/gtest.h>

#include "pdserve/disagg/layout.h"

namespace pdserve::disagg {
namespace {

KvLayout layout() {
  KvLayout l;
  l.role = "x";
  l.instance_id = "i";
  l.model_fingerprint = "f";
  l.page_size = 4;
  l.mla_layers = 2;
  l.entry_dim = 3;
  l.num_pages = 32;
  l.kda = KdaStateShape{2, 8, 2, 3};
  l.num_slots = 4;
  return l;
}

TransferInfo rdma(int nics) {
  transfer::TransportCaps caps;
  caps.name = "rdma";
  caps.max_streams = nics;
  caps.notify_slots = 64;
  return transfer_info_of(caps);
}

TEST(LayoutTransfer, TcpLayoutsCarryNoTransferObjectAndOlderOnesReadAsTcp) {
  KvLayout l = layout();
  transfer::TransportCaps tcp;
  tcp.name = "fault(tcp)";
  tcp.max_streams = 4;
  l.transfer = transfer_info_of(tcp);
  EXPECT_EQ(l.transfer.backend, "tcp");
  const Json j = l.to_json();
  EXPECT_FALSE(j.contains("transfer")) << j.dump();
  auto back = KvLayout::from_json(j);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->transfer.backend, "tcp");
}

TEST(LayoutTransfer, RdmaRoundTripsAndNewerVersionsAreRead) {
  KvLayout l = layout();
  l.transfer = rdma(4);
  Json j = l.to_json();
  ASSERT_TRUE(j.contains("transfer"));
  EXPECT_EQ(j["transfer"]["version"], kTransferInfoVersion);
  auto back = KvLayout::from_json(j);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->transfer.backend, "rdma");
  EXPECT_EQ(back->transfer.nics, 4);
  EXPECT_EQ(back->transfer.notify_slots, 64);
  // A later version may add fields; this build reads what it knows.
  j["transfer"]["version"] = 7;
  j["transfer"]["something_new"] = "x";
  EXPECT_TRUE(KvLayout::from_json(j).is_ok());
  for (auto [key, bad] : {std::pair<const char*, Json>{"backend", "pigeon"}, {"nics", 0}, {"nics", 99}, {"version", 0},
                          {"notify_slots", -1}}) {
    Json b = l.to_json();
    b["transfer"][key] = bad;
    auto r = KvLayout::from_json(b);
    ASSERT_FALSE(r.is_ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
  Json not_object = l.to_json();
  not_object["transfer"] = "rdma";
  EXPECT_FALSE(KvLayout::from_json(not_object).is_ok());
}

TEST(LayoutTransfer, ThePairCheckRefusesAMixOrADifferentNicCount) {
  KvLayout p = layout(), d = layout();
  EXPECT_TRUE(check_pair(p, d).is_ok());
  d.transfer = rdma(4);
  Status st = check_pair(p, d);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("transfer backend: prefill tcp, decode rdma"), std::string::npos) << st.message();
  p.transfer = rdma(2);
  st = check_pair(p, d);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("RDMA NIC count (--rdma-nics): prefill 2, decode 4"), std::string::npos) << st.message();
  p.transfer = rdma(4);
  EXPECT_TRUE(check_pair(p, d).is_ok());
}

}  // namespace
}  // namespace pdserve::disagg
