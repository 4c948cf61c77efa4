// --nnodes / --node-rank / --dist-init-addr in the role's config: inconsistent values are
// refused naming the flag; the server itself serves only as node 0 (followers run
// run_node_follower); every role spans nodes, --pp with whole stages per node.
#include <gtest/gtest.h>

#include "pdserve/server/http_server.h"
#include "pdserve/server/node_serving.h"
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
// a node (so --tp need not split over the nodes); on --device cuda one GPU a stage (--tp 1).
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
  c.pp = 2;  // --device cuda: one GPU a stage, the stages' NCCL group over both nodes
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
  c.role = ServerRole::kPrefill;
  EXPECT_TRUE(c.validate().is_ok()) << why(c);
  c.tp = 2;  // PP x TP on the GPU is not built, on one node or several
  EXPECT_NE(why(c).find("on --device cuda a pipeline stage is one GPU (--tp 1)"), std::string::npos) << why(c);
  c.nnodes = 1;
  c.node_rank = 0;
  c.dist_init_addr.clear();
  EXPECT_NE(why(c).find("on --device cuda a pipeline stage is one GPU (--tp 1)"), std::string::npos) << why(c);
  c = two_node_config();
  c.tp = 1;
  c.pp = 2;
  c.device = "cpu";
  c.role = ServerRole::kDecode;
  EXPECT_NE(why(c).find("decode takes --tp only"), std::string::npos) << why(c);
}

// What each node runs (node_share): with --pp every stage on exactly one node, whole and in
// order (node n: stages n * P/N ..), every TP rank of it, so a CUDA stage's NCCL rank (its
// global stage) is first_stage + local index; with --pp 1 the TP ranks split in order.
TEST(DistFlags, EveryStageOrRankRunsOnExactlyOneNodeInOrder) {
  for (int nnodes : {1, 2, 4})
    for (int pp : {1, 2, 4, 8})
      for (int tp : {1, 2, 4}) {
        ServeConfig c;
        c.model_dir = "/m";
        c.device = "cpu";
        c.role = ServerRole::kPrefill;
        c.tp = tp;
        c.pp = pp;
        c.nnodes = nnodes;
        c.dist_init_addr = nnodes > 1 ? "10.0.0.1:29500" : "";
        std::vector<int> stage_node(static_cast<size_t>(pp), -1), rank_node(static_cast<size_t>(tp), -1);
        for (int n = 0; n < nnodes; ++n) {
          c.node_rank = n;
          if (!c.validate().is_ok()) continue;  // a split the flags refuse (e.g. pp 2 over 4 nodes)
          const NodeShare s = node_share(c);
          const std::string at = "pp " + std::to_string(pp) + " tp " + std::to_string(tp) + " node " + std::to_string(n) + " of " + std::to_string(nnodes);
          ASSERT_GE(s.stages, 1) << at;
          ASSERT_GE(s.ranks, 1) << at;
          EXPECT_EQ(s.gpus(), s.stages * s.ranks) << at;
          if (pp > 1) {
            EXPECT_EQ(s.ranks, tp) << at;  // TP never spans nodes when the stages do
            EXPECT_EQ(s.first_rank, 0) << at;
          } else {
            EXPECT_EQ(s.stages, 1) << at;
            EXPECT_EQ(s.first_stage, 0) << at;
          }
          for (int i = 0; i < s.stages && pp > 1; ++i) {  // with --pp 1 every node runs the one stage
            ASSERT_LT(s.first_stage + i, pp) << at;
            EXPECT_EQ(stage_node[static_cast<size_t>(s.first_stage + i)], -1) << at << ": stage " << s.first_stage + i << " on two nodes";
            stage_node[static_cast<size_t>(s.first_stage + i)] = n;
          }
          for (int i = 0; i < s.ranks && pp == 1; ++i) {
            ASSERT_LT(s.first_rank + i, tp) << at;
            EXPECT_EQ(rank_node[static_cast<size_t>(s.first_rank + i)], -1) << at << ": rank " << s.first_rank + i << " on two nodes";
            rank_node[static_cast<size_t>(s.first_rank + i)] = n;
          }
        }
        c.node_rank = 0;
        if (!c.validate().is_ok()) continue;
        // Every stage (pp > 1) or rank (pp 1) placed, on nodes in non-decreasing order: node 0
        // holds stage 0 (and the NCCL root), the last node the last stage.
        const std::vector<int>& placed = pp > 1 ? stage_node : rank_node;
        for (size_t i = 0; i < placed.size(); ++i) {
          EXPECT_NE(placed[i], -1) << "pp " << pp << " tp " << tp << " nnodes " << nnodes << ": " << i << " on no node";
          if (i > 0) {
            EXPECT_LE(placed[i - 1], placed[i]) << "pp " << pp << " tp " << tp << " nnodes " << nnodes;
          }
        }
        if (pp > 1) {
          EXPECT_EQ(placed.back(), nnodes - 1);
        }
      }
  ServeConfig c = two_node_config();  // cuda TP 4 over two nodes: ranks 2, 3 on node 1
  EXPECT_EQ(node_share(c).first_rank, 2);
  EXPECT_EQ(node_share(c).gpus(), 2);
  c.tp = 1;
  c.pp = 4;  // cuda PP 4 over two nodes: stages 2, 3 (NCCL ranks 2, 3) on node 1's GPUs 0, 1
  EXPECT_EQ(node_share(c).first_stage, 2);
  EXPECT_EQ(node_share(c).gpus(), 2);
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
