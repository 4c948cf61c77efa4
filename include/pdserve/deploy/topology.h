// A deployment topology: which nodes run prefill and decode, their parallelism, the NICs,
// page and chunk sizes, ports, the router, the model. One file of KEY=VALUE lines
// (configs/*.env) that scripts/deploy_pd.sh sources and every role can read with --config.
// See configs/README.md for the keys.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::deploy {

enum class Role { kPrefill, kDecode, kRouter };
const char* role_name(Role r);
Result<Role> parse_role(std::string_view s);

// One side (prefill or decode) of the deployment.
struct SideSpec {
  std::vector<std::string> nodes;  // hosts, in node-rank order
  int pp = 1, tp = 1;
  int ep = 0;  // 0: not given. Given, it must equal tp: pdserve splits the experts over the TP ranks
  int64_t page_size = 64;
  int port = 30000;                // HTTP port on the first node of each instance
  int64_t max_running = 0;         // 0: the role's default
  std::vector<std::string> extra_args;  // passed to the role verbatim
};

struct Topology {
  std::string source;  // file the topology came from (named in every error)
  std::string model_path;
  std::string bind_host = "0.0.0.0";
  int gpus_per_node = 8;  // 0: CPU backend (no GPU pinning, no GPU checks)
  SideSpec prefill, decode;
  int bootstrap_port = 8998;
  int dist_port = 29500;  // multi-node instances: rendezvous on the instance's first node
  int64_t chunk_size = 8192;
  std::vector<std::string> rdma_nics;  // empty: TCP transport
  std::string transfer_backend;        // tcp | rdma | auto; "": not passed (the roles' default, auto)
  int rdma_gid_index = -1;             // -1: automatic choice (not passed)
  std::string kv_cache_dtype;          // float32 | bfloat16, both roles (they must match); "": not passed
  std::string cluster_secret_file;     // "": no authentication between prefill and decode
  std::string router_node;             // "": the first decode node
  int router_port = 31000;
  std::vector<std::string> router_extra_args;
  // Keys only scripts/deploy_pd.sh reads (DEPLOY_MODE, IMAGE, ...), kept verbatim.
  std::map<std::string, std::string> script_keys;

  // Nodes one instance of a side spans (PP*TP GPUs over gpus_per_node; 1 on CPU).
  int nodes_per_instance(const SideSpec& s) const;
  int instances(const SideSpec& s) const { return static_cast<int>(s.nodes.size()) / nodes_per_instance(s); }
  const std::string& router_host() const { return router_node.empty() ? decode.nodes.front() : router_node; }
};

// Parses KEY=VALUE text (shell subset: comments, `export`, '...' and "..." quoting without
// expansion) and validates it. Errors name `source`, the line or key, and the bad value.
Result<Topology> parse_topology(std::string_view text, const std::string& source);
Result<Topology> load_topology(const std::string& path);
// The same without the cross-key rules, for preflight, which reports them all at once.
Result<Topology> parse_topology_fields(std::string_view text, const std::string& source);
Result<Topology> load_topology_fields(const std::string& path);
// Every cross-key rule (parallelism shapes, page sizes, ports), one message per problem.
std::vector<std::string> topology_problems(const Topology& t);
// The first problem, if any. parse_topology calls it.
Status validate_topology(const Topology& t);
// The one-host topology `pdserve up` uses when given only a model directory.
Topology one_host_topology(const std::string& model_dir);

// How to start one process of a role: on which node, with which environment and arguments
// (after the executable: {"prefill", "--model", ...}).
struct LaunchSpec {
  Role role;
  int node_index = 0;       // index in the role's node list (0 for the router)
  std::string node;
  std::vector<std::string> env;   // NAME=VALUE
  std::vector<std::string> args;
  std::string url;          // "http://node:port" where it answers HTTP; "" for a non-leading node
};

// One spec per node of the role (the router: one). URLs use the node names as written.
Result<std::vector<LaunchSpec>> launch_specs(const Topology& t, Role role);
// The URLs the router is given: "http://P:port@bootstrap" per prefill instance, decode URLs.
std::vector<std::string> prefill_urls(const Topology& t);
std::vector<std::string> decode_urls(const Topology& t);
// "P:bootstrap_port" per prefill instance: the bootstrap_host:bootstrap_port pairs the router
// sends, so decode is launched with them as its only allowed prefills (--allow-prefill).
std::vector<std::string> prefill_bootstrap_addresses(const Topology& t);

// POSIX shell quoting, for printing commands that a shell runs as they are.
std::string shell_quote(const std::string& s);
std::string shell_join(const std::vector<std::string>& words);

}  // namespace pdserve::deploy
