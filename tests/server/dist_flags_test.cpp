// --nnodes / --node-rank / --dist-init-addr in the role's config: inconsistent values are
// refused naming the flag; the server itself serves only as node 0 (followers run
// run_node_follower); every role spans nodes, --pp with whole stages per node.
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
}

// Pipeline stages over nodes: whole stages per node (--pp a multiple of --nnodes), TP inside
// a node (so --tp need not split over the nodes), the CPU backend for now.
TEST(DistFlags, PipelineStagesSplitWholeOverTheNodes) {
  ServeConfig c = two_node_config();
  c.device = "cpu";
  c.role = ServerRole::kPrefill;
  c.pp = 2;
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
  c.tp = 1;
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
  c.pp = 8;
  c.tp = 4;
  c.nnodes = 4;  // the seed's prefill: PP8 x TP4 on 4 nodes, two stages each
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
  c.pp = 3;
  c.nnodes = 2;  // a stage would straddle two nodes
  EXPECT_NE(why(c).find("3 pipeline stages do not split evenly over 2 nodes"), std::string::npos) << why(c);
  c.pp = 2;
  c.nnodes = 4;  // fewer stages than nodes
  c.node_rank = 3;
  EXPECT_NE(why(c).find("2 pipeline stages do not split evenly over 4 nodes"), std::string::npos) << why(c);
  c = two_node_config();
  c.tp = 1;
  c.pp = 2;  // --device cuda
  EXPECT_NE(why(c).find("run on --device cpu for now"), std::string::npos) << why(c);
  c.device = "cpu";
  c.role = ServerRole::kDecode;
  EXPECT_NE(why(c).find("decode takes --tp only"), std::string::npos) << why(c);
}

TEST(DistFlags, TheServerIsNodeZeroOnlyAndStagesSplitWhole) {
  auto s = HttpServer::create(two_node_config());  // node 1: a follower runs no server
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("only node 0 serves HTTP"), std::string::npos) << s.status().message();
  // Every role spans nodes, pipeline stages only whole.
  ServeConfig c = two_node_config();
  c.node_rank = 0;
  c.role = ServerRole::kPrefill;
  c.device = "cpu";
  c.pp = 3;
  s = HttpServer::create(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("pp (--pp) with nnodes (--nnodes)"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace pdserve::server
