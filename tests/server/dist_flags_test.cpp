// --nnodes / --node-rank / --dist-init-addr in the role's config: inconsistent values are
// refused naming the flag; the server itself serves only as node 0 (followers run
// run_node_follower); every role spans nodes, --pp does not.
#include <gtest/gtest.h>

#include "pdserve/server/http_server.h"
#include "pdserve/server/serve_config.h"

namespace pdserve::server {
namespace {

ServeConfig two_node_config() {
  ServeConfig c;
  c.model_dir = "/nonexistent-model";
  c.device = "cuda";
  c.tp = 4;
  c.nnodes = 2;
  c.node_rank = 1;
  c.dist_init_addr = "10.0.0.1:29500";
  return c;
}

std::string why(const ServeConfig& c) { return c.validate().message(); }

TEST(DistFlags, AConsistentTwoNodeConfigValidates) {
  EXPECT_TRUE(two_node_config().validate().is_ok()) << why(two_node_config());
  for (ServerRole role : {ServerRole::kPrefill, ServerRole::kDecode}) {
    ServeConfig c = two_node_config();
    c.role = role;
    EXPECT_TRUE(c.validate().is_ok()) << why(c);
  }
}

TEST(DistFlags, InconsistentValuesAreRefusedNamingTheFlag) {
  ServeConfig c = two_node_config();
  c.node_rank = 2;
  EXPECT_NE(why(c).find("--node-rank"), std::string::npos) << why(c);
  c = two_node_config();
  c.tp = 3;
  EXPECT_NE(why(c).find("--tp 3 does not split evenly over --nnodes 2"), std::string::npos) << why(c);
  c = two_node_config();
  c.dist_init_addr.clear();
  EXPECT_NE(why(c).find("--dist-init-addr: required"), std::string::npos) << why(c);
  c = two_node_config();
  c.dist_init_addr = "10.0.0.1:port";
  EXPECT_NE(why(c).find("--dist-init-addr"), std::string::npos) << why(c);
  c = two_node_config();
  c.pp = 2;
  c.device = "cpu";
  EXPECT_NE(why(c).find("--nnodes"), std::string::npos) << why(c);
  EXPECT_NE(why(c).find("--pp"), std::string::npos) << why(c);
  c.pp = 1;  // the CPU backend spans processes through TCP collectives
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
}

TEST(DistFlags, TheServerIsNodeZeroOnlyAndNotWithPipelineStages) {
  auto s = HttpServer::create(two_node_config());  // node 1: a follower runs no server
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("only node 0 serves HTTP"), std::string::npos) << s.status().message();
  // Every role spans nodes, but not with pipeline stages.
  ServeConfig c = two_node_config();
  c.node_rank = 0;
  c.role = ServerRole::kPrefill;
  c.device = "cpu";
  c.pp = 2;
  s = HttpServer::create(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("nnodes (--nnodes) with pp (--pp)"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace pdserve::server
