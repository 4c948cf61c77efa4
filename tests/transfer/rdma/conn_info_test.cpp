#include "pdserve/transfer/rdma/conn_info.h"

#include <gtest/gtest.h>

#include <random>

namespace pdserve::transfer::rdma {
namespace {

ConnInfo sample() {
  ConnInfo c;
  for (uint32_t n = 0; n < 2; ++n) {
    QpEndpoint e;
    e.qpn = 0x1234 + n, e.psn = 0xabcdef, e.lid = static_cast<uint16_t>(7 + n), e.mtu = 4096, e.gid_index = 3;
    e.gid[10] = e.gid[11] = 0xff, e.gid[15] = static_cast<uint8_t>(n + 1);
    c.nics.push_back(e);
  }
  c.regions.push_back({1000, 0x7f0000000000, 1ull << 30, {11, 12}});
  c.regions.push_back({3000, 0x7f1000000000, 4096, {21, 22}});
  return c;
}

TEST(ConnInfo, RoundTrips) {
  const ConnInfo c = sample();
  auto d = decode_conn_info(encode_conn_info(c));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_EQ(d->nics.size(), 2u);
  EXPECT_EQ(d->nics[1].qpn, 0x1235u);
  EXPECT_EQ(d->nics[1].psn, 0xabcdefu);
  EXPECT_EQ(d->nics[1].lid, 8);
  EXPECT_EQ(d->nics[1].gid, c.nics[1].gid);
  ASSERT_EQ(d->regions.size(), 2u);
  EXPECT_EQ(d->regions[0].addr, 0x7f0000000000u);
  EXPECT_EQ(d->regions[0].size, 1ull << 30);
  EXPECT_EQ(d->regions[1].rkeys, (std::vector<uint32_t>{21, 22}));
}

TEST(ConnInfo, RefusesWhatCannotBeTrusted) {
  const std::string good = encode_conn_info(sample());
  auto why = [](const std::string& b) { return decode_conn_info(b).status().message(); };
  EXPECT_NE(why(good.substr(0, 5)).find("shorter than its header"), std::string::npos);
  EXPECT_NE(why(good.substr(0, good.size() - 1)).find("counts say"), std::string::npos);
  EXPECT_NE(why(good + "x").find("counts say"), std::string::npos);
  std::string b = good;
  b[0] = 'X';
  EXPECT_NE(why(b).find("magic"), std::string::npos);
  b = good;
  b[4] = 9;
  EXPECT_NE(why(b).find("version 9"), std::string::npos);
  auto with = [](auto edit) {
    ConnInfo c = sample();
    edit(c);
    return decode_conn_info(encode_conn_info(c)).status().message();
  };
  EXPECT_NE(with([](ConnInfo& c) { c.nics[0].qpn = 1u << 24; }).find("24-bit"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.nics[0].qpn = 0; }).find("24-bit"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.nics[1].mtu = 1500; }).find("MTU 1500"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.regions[1].id = 1000; }).find("twice"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.regions[0].addr = UINT64_MAX - 10; }).find("wraps"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.regions[0].size = 0; }).find("empty"), std::string::npos);
  EXPECT_NE(with([](ConnInfo& c) { c.nics.clear(); }).find("0 NICs"), std::string::npos);
}

TEST(ConnInfo, RandomBytesNeverReadOutOfBounds) {
  std::mt19937 rng(3);
  const std::string good = encode_conn_info(sample());
  for (int i = 0; i < 2000; ++i) {
    std::string b = good;
    for (int k = 0; k < 1 + i % 4; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    if (i % 3 == 0) b.resize(rng() % (b.size() + 8), '\0');
    (void)decode_conn_info(b);  // must not read out of bounds (the sanitizer build checks)
  }
}

}  // namespace
}  // namespace pdserve::transfer::rdma
