// The topology reader and validator: every error names the file, the key and the bad value;
// the shipped configs parse; launch commands carry exactly what the topology says.
#include <gtest/gtest.h>

#include <algorithm>

#include "pdserve/deploy/topology.h"

namespace pdserve::deploy {
namespace {

const std::string kOneHost = R"(# one host
MODEL_PATH=/models/tiny
GPUS_PER_NODE=0
BIND_HOST=127.0.0.1
PREFILL_NODES=127.0.0.1
DECODE_NODES="127.0.0.1"
PAGE_SIZE=64
)";

std::string error_of(const std::string& text) {
  auto t = parse_topology(text, "t.env");
  EXPECT_FALSE(t.is_ok()) << "accepted:\n" << text;
  return t.is_ok() ? "" : t.status().message();
}

bool has(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

TEST(Topology, ParsesShellSubset) {
  auto t = parse_topology(kOneHost + "export CHUNK_SIZE=4096  # trailing comment\nRDMA_NICS='mlx5_0 mlx5_1',mlx5_2\n",
                          "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->model_path, "/models/tiny");
  EXPECT_EQ(t->chunk_size, 4096);
  EXPECT_EQ(t->rdma_nics, (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_2"}));
  EXPECT_EQ(t->prefill.page_size, 64);
  EXPECT_EQ(t->router_host(), "127.0.0.1");
  EXPECT_EQ(t->router_port, 31000);
}

TEST(Topology, KeysOnlyTheDeployScriptReadsAreAccepted) {
  // scripts/deploy_pd.sh sources the file and reads these; the roles ignore them.
  for (const char* kv : {"STOP_GRACE_S=30", "READY_TIMEOUT_S=1800", "MAX_CLOCK_SKEW_MS=500", "GPU_IDLE_MIB=4096"}) {
    auto t = parse_topology(kOneHost + kv + "\n", "t.env");
    EXPECT_TRUE(t.is_ok()) << kv << ": " << t.status().to_string();
  }
}

TEST(Topology, ErrorsNameFileKeyAndValue) {
  EXPECT_EQ(error_of(kOneHost + "PREFILL_TP=four\n"), "t.env: PREFILL_TP='four' is not an integer");
  EXPECT_EQ(error_of(kOneHost + "ROUTER_PORT=70000\n"), "t.env: ROUTER_PORT=70000 must be in [1, 65535]");
  EXPECT_EQ(error_of(kOneHost + "PREFIL_TP=4\n"), "t.env:8: unknown key PREFIL_TP (did you mean PREFILL_TP?)");
  EXPECT_EQ(error_of(kOneHost + "PAGE_SIZE=32\n"), "t.env:8: PAGE_SIZE is set twice (first on line 7)");
  EXPECT_EQ(error_of("MODEL_PATH = /m\n"), "t.env:1: expected KEY=VALUE with no spaces around '=', got 'MODEL_PATH = /m'");
  EXPECT_NE(error_of(kOneHost + "CHUNK_SIZE=$CHUNK\n").find("'$' means something to the shell"), std::string::npos);
  EXPECT_NE(error_of(kOneHost + "IMAGE=\"pdserve:$TAG\"\n").find("would be expanded by the shell"), std::string::npos);
  EXPECT_NE(error_of(kOneHost + "DECODE_EXTRA_ARGS=--a --b\n").find("unexpected text after the value"), std::string::npos);
  EXPECT_NE(error_of(kOneHost + "IMAGE='unterminated\n").find("unterminated ' quote"), std::string::npos);
  EXPECT_EQ(error_of("PREFILL_NODES=a\nDECODE_NODES=b\n"), "t.env: MODEL_PATH is missing or empty");
}

TEST(Topology, CrossKeyRules) {
  EXPECT_EQ(error_of(kOneHost + "DECODE_PAGE_SIZE=32\n"),
            "t.env: page size mismatch: PREFILL_PAGE_SIZE=64 but DECODE_PAGE_SIZE=32 (decode refuses every transfer "
            "from a prefill with another page size)");
  EXPECT_EQ(error_of(kOneHost + "DECODE_PP=2\n"),
            "t.env: DECODE_PP=2 is not supported: decode runs every token through all layers, so it must be 1");
  EXPECT_EQ(error_of(kOneHost + "PREFILL_TP=4\nDECODE_TP=6\n"),
            "t.env: PREFILL_TP=4 and DECODE_TP=6: one must divide the other for the state to be sliced between them");
  EXPECT_EQ(error_of(kOneHost + "PREFILL_TP=4\nPREFILL_EP=2\n"),
            "t.env: PREFILL_EP=2 must equal PREFILL_TP=4 (pdserve splits the experts over the TP ranks)");
  EXPECT_EQ(error_of(kOneHost + "DECODE_PORT=30000\n"), "t.env: PREFILL_PORT and DECODE_PORT are both 30000 on node 127.0.0.1");
  EXPECT_EQ(error_of(kOneHost + "ROUTER_PORT=8998\n"), "t.env: BOOTSTRAP_PORT and ROUTER_PORT are both 8998 on node 127.0.0.1");
  EXPECT_EQ(error_of("MODEL_PATH=/m\nPREFILL_NODES='a a'\nDECODE_NODES=b\n"), "t.env: PREFILL_NODES lists a twice");
  // Eight GPUs per node: PP3 x TP4 = 12 GPUs do not fill whole nodes.
  EXPECT_EQ(error_of("MODEL_PATH=/m\nPREFILL_NODES='a b'\nDECODE_NODES=c\nPREFILL_PP=3\nPREFILL_TP=4\n"),
            "t.env: PREFILL_PP x PREFILL_TP = 12 GPUs do not fill whole nodes of GPUS_PER_NODE=8");
  EXPECT_EQ(error_of("MODEL_PATH=/m\nPREFILL_NODES='a b c'\nDECODE_NODES=d\nPREFILL_PP=8\nPREFILL_TP=4\n"),
            "t.env: PREFILL_NODES has 3 nodes, but one PP8 x TP4 instance spans 4 nodes of 8 GPUs");
  EXPECT_EQ(error_of("MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=a\nPREFILL_TP=8\nDECODE_TP=4\n"),
            "t.env: node a runs prefill and decode, which need 12 GPUs, more than GPUS_PER_NODE=8");
  // All problems at once for preflight.
  auto t = parse_topology_fields(kOneHost + "DECODE_PAGE_SIZE=32\nDECODE_PORT=30000\n", "t.env");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(topology_problems(*t).size(), 2u);
}

TEST(Topology, SeedEightNodeLaunch) {
  auto t = load_topology(std::string(PDSERVE_SOURCE_DIR) + "/configs/seed-8node.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->nodes_per_instance(t->prefill), 4);
  EXPECT_EQ(t->nodes_per_instance(t->decode), 4);
  auto p = launch_specs(*t, Role::kPrefill);
  ASSERT_TRUE(p.is_ok());
  ASSERT_EQ(p->size(), 4u);
  const LaunchSpec& p2 = (*p)[2];
  EXPECT_TRUE(has(p2.args, {"--pp", "8"}));
  EXPECT_TRUE(has(p2.args, {"--tp", "4"}));
  EXPECT_FALSE(has(p2.args, {"--ep", "4"}));  // EP is TP: no role takes --ep
  EXPECT_TRUE(has(p2.args, {"--chunk-size", "8192"}));
  EXPECT_TRUE(has(p2.args, {"--page-size", "64"}));
  EXPECT_TRUE(has(p2.args, {"--nnodes", "4", "--node-rank", "2", "--dist-init-addr", (*p)[0].node + ":29500"}));
  EXPECT_TRUE(has(p2.args, {"--rdma-nics", "mlx5_0,mlx5_1,mlx5_2,mlx5_3"}));
  EXPECT_EQ(p2.env, (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"}));
  EXPECT_TRUE(has(p2.args, {"--device", "cuda"}));  // GPUS_PER_NODE > 0: the CUDA backend
  EXPECT_EQ(p2.url, "");  // only an instance's first node serves HTTP
  EXPECT_EQ((*p)[0].url, "http://" + (*p)[0].node + ":30000");
  auto d = launch_specs(*t, Role::kDecode);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(has(d->front().args, {"decode", "--model"}));
  EXPECT_TRUE(has(d->front().args, {"--tp", "32"}));
  EXPECT_FALSE(has(d->front().args, {"--ep", "32"}));
  EXPECT_FALSE(has(d->front().args, {"--pp", "1"}));
  EXPECT_TRUE(has(d->front().args, {"--device", "cuda"}));
  // Decode takes rooms only from the one prefill instance, named as the router names it.
  EXPECT_TRUE(has(d->front().args, {"--allow-prefill", (*p)[0].node + ":8998"}));
  EXPECT_EQ(std::count(d->front().args.begin(), d->front().args.end(), "--allow-prefill"), 1);
  auto r = launch_specs(*t, Role::kRouter);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->front().node, d->front().node);  // MiniLB on the first decode node, as in the seed
  EXPECT_TRUE(has(r->front().args, {"--prefill", "http://" + (*p)[0].node + ":30000@8998"}));
  EXPECT_TRUE(has(r->front().args, {"--decode", "http://" + d->front().node + ":30001"}));
  EXPECT_TRUE(has(r->front().args, {"--port", "31000"}));
}

TEST(Topology, OneHostConfigLaunch) {
  auto t = load_topology(std::string(PDSERVE_SOURCE_DIR) + "/configs/one-host.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto p = launch_specs(*t, Role::kPrefill);
  ASSERT_TRUE(p.is_ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_TRUE(p->front().env.empty());  // CPU: no GPU pinning
  // Only flags every role has: no --pp/--ep/--nnodes/--rdma-nics on one CPU host.
  for (const char* f : {"--pp", "--ep", "--nnodes", "--rdma-nics", "--device"})
    EXPECT_EQ(std::find(p->front().args.begin(), p->front().args.end(), f), p->front().args.end()) << f;
  EXPECT_TRUE(has(p->front().args, {"--bootstrap-port", "8998"}));
  EXPECT_EQ(std::find(p->front().args.begin(), p->front().args.end(), "--allow-prefill"), p->front().args.end());
}

// One --allow-prefill per prefill instance (its first node), and the router's --prefill
// URLs name the same hosts and bootstrap port.
TEST(Topology, DecodeAllowsExactlyTheTopologysPrefills) {
  auto t = parse_topology("MODEL_PATH=/m\nPREFILL_NODES='p1 p2 p3 p4'\nDECODE_NODES=d\nPREFILL_TP=16\nBOOTSTRAP_PORT=9100\n", "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(prefill_bootstrap_addresses(*t), (std::vector<std::string>{"p1:9100", "p3:9100"}));
  auto d = launch_specs(*t, Role::kDecode);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(has(d->front().args, {"--allow-prefill", "p1:9100", "--allow-prefill", "p3:9100"}));
  EXPECT_EQ(prefill_urls(*t), (std::vector<std::string>{"http://p1:30000@9100", "http://p3:30000@9100"}));
}

TEST(Topology, ADeviceInExtraArgsIsNotGivenTwice) {
  const std::string base = "MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=b\nGPUS_PER_NODE=1\n";
  auto t = parse_topology(base + "PREFILL_EXTRA_ARGS=--device=cpu\nDECODE_EXTRA_ARGS=\"--device cpu\"\n", "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  for (Role role : {Role::kPrefill, Role::kDecode}) {
    auto l = launch_specs(*t, role);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_FALSE(has(l->front().args, {"--device", "cuda"})) << role_name(role);
  }
}

TEST(Topology, TransferBackendAndGidIndexReachBothRoles) {
  const std::string base = "MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=b\nRDMA_NICS=mlx5_0,mlx5_1\n";
  auto t = parse_topology(base + "TRANSFER_BACKEND=rdma\nRDMA_GID_INDEX=3\n", "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_TRUE(topology_problems(*t).empty());
  for (Role role : {Role::kPrefill, Role::kDecode}) {
    auto l = launch_specs(*t, role);
    ASSERT_TRUE(l.is_ok());
    EXPECT_TRUE(has(l->front().args, {"--transfer-backend", "rdma"}));
    EXPECT_TRUE(has(l->front().args, {"--rdma-gid-index", "3"}));
  }
  auto bad = parse_topology_fields(base + "TRANSFER_BACKEND=pigeon\n", "t.env");
  ASSERT_TRUE(bad.is_ok());
  auto problems = topology_problems(*bad);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("TRANSFER_BACKEND must be tcp, rdma or auto"), std::string::npos) << problems[0];
  auto no_nics = parse_topology_fields("MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=b\nTRANSFER_BACKEND=rdma\n", "t.env");
  ASSERT_TRUE(no_nics.is_ok());
  problems = topology_problems(*no_nics);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("needs RDMA_NICS"), std::string::npos) << problems[0];
  EXPECT_FALSE(parse_topology_fields(base + "RDMA_GID_INDEX=300\n", "t.env").is_ok());
  EXPECT_FALSE(parse_topology(base + "TRANSFER_BACKEND=pigeon\n", "t.env").is_ok());
  // Not set: not passed, so the roles keep their own default.
  auto plain = parse_topology(base, "t.env");
  auto l = launch_specs(*plain, Role::kPrefill);
  EXPECT_EQ(std::find(l->front().args.begin(), l->front().args.end(), "--transfer-backend"), l->front().args.end());
}

TEST(Topology, KvCacheDtypeReachesBothRolesOrIsRefused) {
  const std::string base = "MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=b\n";
  auto t = parse_topology(base + "KV_CACHE_DTYPE=bfloat16\n", "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  for (Role role : {Role::kPrefill, Role::kDecode}) {
    auto l = launch_specs(*t, role);
    ASSERT_TRUE(l.is_ok());
    EXPECT_TRUE(has(l->front().args, {"--kv-cache-dtype", "bfloat16"}));
  }
  auto bad = parse_topology_fields(base + "KV_CACHE_DTYPE=bf16\n", "t.env");
  ASSERT_TRUE(bad.is_ok());
  auto problems = topology_problems(*bad);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("KV_CACHE_DTYPE must be float32 or bfloat16"), std::string::npos) << problems[0];
  auto plain = parse_topology(base, "t.env");  // not set: not passed (the roles' float32)
  auto l = launch_specs(*plain, Role::kDecode);
  EXPECT_EQ(std::find(l->front().args.begin(), l->front().args.end(), "--kv-cache-dtype"), l->front().args.end());
}

TEST(Topology, SharedNodeSplitsGpus) {
  auto t = parse_topology("MODEL_PATH=/m\nPREFILL_NODES=a\nDECODE_NODES=a\nPREFILL_TP=2\nDECODE_TP=4\n", "t.env");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(launch_specs(*t, Role::kPrefill)->front().env.front(), "CUDA_VISIBLE_DEVICES=0,1");
  EXPECT_EQ(launch_specs(*t, Role::kDecode)->front().env.front(), "CUDA_VISIBLE_DEVICES=2,3,4,5");
}

TEST(Topology, ShellQuote) {
  EXPECT_EQ(shell_quote("/a/b-c_d.e:1@2"), "/a/b-c_d.e:1@2");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_join({"x", "a b"}), "x 'a b'");
}

}  // namespace
}  // namespace pdserve::deploy
