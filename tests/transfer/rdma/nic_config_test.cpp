#include "pdserve/transfer/rdma/nic_config.h"

#include <gtest/gtest.h>

namespace pdserve::transfer::rdma {
namespace {

TEST(NicList, ParsesCommasSpacesAndPorts) {
  auto l = parse_nic_list("mlx5_0,mlx5_1  mlx5_2:2,");
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0].to_string(), "mlx5_0:1");
  EXPECT_EQ((*l)[2].device, "mlx5_2");
  EXPECT_EQ((*l)[2].port, 2);
  EXPECT_TRUE(parse_nic_list("").is_ok());
  EXPECT_TRUE(parse_nic_list("")->empty());
}

TEST(NicList, RefusesBadNamesPortsDuplicatesAndTooMany) {
  auto msg = [](const std::string& s) { return parse_nic_list(s).status().message(); };
  EXPECT_NE(msg("mlx5_0;rm").find("character"), std::string::npos);
  EXPECT_NE(msg("mlx5_0:0").find("port"), std::string::npos);
  EXPECT_NE(msg("mlx5_0:x").find("port"), std::string::npos);
  EXPECT_NE(msg(":1").find("empty device name"), std::string::npos);
  EXPECT_NE(msg("mlx5_0 mlx5_0:1").find("twice"), std::string::npos);
  EXPECT_TRUE(parse_nic_list("mlx5_0:1 mlx5_0:2").is_ok());  // two ports of one device are two NICs
  std::string many;
  for (size_t i = 0; i <= kMaxNics; ++i) many += "mlx5_" + std::to_string(i) + " ";
  EXPECT_NE(msg(many).find("at most"), std::string::npos);
}

TEST(RdmaConfig, ValidateNamesTheField) {
  RdmaConfig c;
  c.nics = {"mlx5_0", "mlx5_1"};
  EXPECT_TRUE(c.validate().is_ok());
  RdmaConfig bad = c;
  bad.gid_index = -2;
  EXPECT_NE(bad.validate().message().find("gid_index"), std::string::npos);
  bad = c;
  bad.stripe_alignment = 3000;
  EXPECT_NE(bad.validate().message().find("stripe_alignment"), std::string::npos);
  bad = c;
  bad.max_wr_bytes = (1ull << 31) + 4096;
  EXPECT_NE(bad.validate().message().find("max_wr_bytes"), std::string::npos);
  bad = c;
  bad.nics = {"mlx5_0", "mlx5_0"};
  EXPECT_NE(bad.validate().message().find("nics"), std::string::npos);
  bad = c;
  bad.max_outstanding_wrs = 0;
  EXPECT_NE(bad.validate().message().find("max_outstanding_wrs"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::transfer::rdma
