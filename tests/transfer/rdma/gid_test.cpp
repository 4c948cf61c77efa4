#include "pdserve/transfer/rdma/gid.h"

#include <gtest/gtest.h>

#include "pdserve/transfer/rdma/nic_config.h"

namespace pdserve::transfer::rdma {
namespace {

GidEntry ipv4(int index, GidType t, uint8_t last) {
  GidEntry e{index, t, {}};
  e.gid[10] = e.gid[11] = 0xff;
  e.gid[12] = 10, e.gid[15] = last;
  return e;
}
GidEntry link_local(int index, GidType t) {
  GidEntry e{index, t, {}};
  e.gid[0] = 0xfe, e.gid[1] = 0x80, e.gid[15] = 7;
  return e;
}
GidEntry ipv6(int index, GidType t) {
  GidEntry e{index, t, {}};
  e.gid[0] = 0x20, e.gid[1] = 0x01, e.gid[15] = 9;
  return e;
}

TEST(Gid, Formats) {
  EXPECT_EQ(gid_to_string(ipv4(0, GidType::kRoceV2, 5).gid), "0000:0000:0000:0000:0000:ffff:0a00:0005 (10.0.0.5)");
  EXPECT_TRUE(gid_is_link_local(link_local(0, GidType::kRoceV1).gid));
  EXPECT_FALSE(gid_is_ipv4_mapped(ipv6(0, GidType::kRoceV2).gid));
}

TEST(Gid, RocePrefersV2Ipv4ThenV2ThenV1AndSkipsLinkLocal) {
  // A typical mlx5 RoCE table: v1/v2 link-local, v1/v2 IPv4, v1/v2 IPv6.
  std::vector<GidEntry> t = {link_local(0, GidType::kRoceV1), link_local(1, GidType::kRoceV2), ipv4(2, GidType::kRoceV1, 1),
                             ipv4(3, GidType::kRoceV2, 1),    ipv6(4, GidType::kRoceV1),        ipv6(5, GidType::kRoceV2)};
  auto g = choose_gid(t, LinkLayer::kEthernet, kAutoGidIndex);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->index, 3);
  t.erase(t.begin() + 3);  // no v2 IPv4: v2 IPv6
  EXPECT_EQ(choose_gid(t, LinkLayer::kEthernet, kAutoGidIndex)->index, 5);
  t.pop_back();  // only v1 left among routable entries: the lowest v1
  EXPECT_EQ(choose_gid(t, LinkLayer::kEthernet, kAutoGidIndex)->index, 2);
  std::vector<GidEntry> only_link_local = {link_local(0, GidType::kRoceV1), link_local(1, GidType::kRoceV2)};
  auto none = choose_gid(only_link_local, LinkLayer::kEthernet, kAutoGidIndex);
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(none.status().message().find("--rdma-gid-index"), std::string::npos);
}

TEST(Gid, TiesGoToTheLowestIndex) {
  std::vector<GidEntry> t = {ipv4(7, GidType::kRoceV2, 2), ipv4(3, GidType::kRoceV2, 1)};
  EXPECT_EQ(choose_gid(t, LinkLayer::kEthernet, kAutoGidIndex)->index, 3);
}

TEST(Gid, ConfiguredIndexWinsButMustExist) {
  std::vector<GidEntry> t = {link_local(0, GidType::kRoceV1), ipv4(3, GidType::kRoceV2, 1)};
  EXPECT_EQ(choose_gid(t, LinkLayer::kEthernet, 0)->index, 0);  // the operator's choice, even link-local
  auto missing = choose_gid(t, LinkLayer::kEthernet, 9);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("9"), std::string::npos);
  std::vector<GidEntry> zero = {GidEntry{1, GidType::kRoceV2, {}}};
  EXPECT_NE(choose_gid(zero, LinkLayer::kEthernet, 1).status().message().find("empty"), std::string::npos);
}

TEST(Gid, InfiniBandUsesIndexZero) {
  GidEntry port_gid{0, GidType::kIb, {}};
  port_gid.gid[0] = 0xfe, port_gid.gid[1] = 0x80, port_gid.gid[8] = 0x1c;  // IB port GIDs are link-local
  std::vector<GidEntry> t = {port_gid, ipv4(1, GidType::kIb, 3)};
  EXPECT_EQ(choose_gid(t, LinkLayer::kInfiniBand, kAutoGidIndex)->index, 0);
  EXPECT_FALSE(choose_gid({}, LinkLayer::kInfiniBand, kAutoGidIndex).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer::rdma
