// pdserve dist-check --nnodes N --node-rank R --dist-init-addr HOST:PORT: the multi-node join
// on its own, run on every node of an instance with the flags its role would get. Node 0
// makes the group's NCCL unique id and hands it out over TCP (transfer/dist_init.h, with the
// cluster secret when given); every node's GPUs join as global ranks node_rank * gpus + i and
// run one all-reduce whose answer each rank checks. --device cpu stops after the id exchange
// (no NCCL) and prints the id's digest, which must be the same on every node.
#include <cstdio>
#include <iostream>
#include <random>

#include "commands.h"
#include "pdserve/core/secret_file.h"
#include "pdserve/core/sha256.h"
#include "pdserve/model/dist_check.h"
#include "pdserve/transfer/dist_init.h"

namespace pdserve::cli {

namespace {

struct DistCheckArgs {
  transfer::DistInit dist;
  std::string device = "cuda";
  int gpus_per_node = 0;  // 0: every visible GPU
  std::string cluster_secret_file;
  double timeout_s = 60;
  int64_t elements = 1 << 20;
};

// The leader appends its GPUs per node to the id, so a node with a different count stops
// with a message instead of joining an NCCL group of the wrong size (which would hang).
std::vector<uint8_t> with_gpus(std::vector<uint8_t> id, int gpus) {
  for (int i = 0; i < 4; ++i) id.push_back(static_cast<uint8_t>((static_cast<uint32_t>(gpus) >> (8 * i)) & 0xff));
  return id;
}

int run_dist_check(const DistCheckArgs& a) {
  const std::string who = "dist-check: node " + std::to_string(a.dist.node_rank) + " of " + std::to_string(a.dist.nnodes);
  auto fail = [&](int rc, const std::string& m) {
    std::cerr << who << ": " << m << "\n";
    return rc;
  };
  if (a.device != "cpu" && a.device != "cuda") return fail(2, "--device: must be cpu or cuda, got \"" + a.device + "\"");
  if (!(a.timeout_s > 0)) return fail(2, "--timeout: must be > 0 seconds");
  if (a.gpus_per_node < 0) return fail(2, "--gpus-per-node: must be >= 0 (0: every visible GPU)");
  const bool gpu = a.device == "cuda";
  const int gpus = !gpu ? 1 : a.gpus_per_node > 0 ? a.gpus_per_node : cuda_visible_gpus();
  if (gpus < 1) return fail(1, "no GPU visible; --device cpu checks the id exchange alone");
  if (Status st = transfer::validate_dist_init(a.dist, a.dist.nnodes * gpus); !st.is_ok()) return fail(2, st.message());
  std::string secret;
  if (!a.cluster_secret_file.empty()) {
    auto s = read_secret_file(a.cluster_secret_file);
    if (!s.is_ok()) return fail(2, s.status().message());
    secret = *s;
  }
  if (gpu) std::cout << who << ": " << cuda_nccl_describe() << ", " << gpus << " GPU(s) here" << std::endl;
  auto make_id = [&]() -> Result<std::vector<uint8_t>> {
    if (gpu) {
      PDS_ASSIGN_OR_RETURN(std::vector<uint8_t> id, cuda_nccl_unique_id());
      return with_gpus(std::move(id), gpus);
    }
    std::random_device rd;  // no NCCL: any 128 fresh bytes stand in for the id
    std::vector<uint8_t> id(128);
    for (auto& b : id) b = static_cast<uint8_t>(rd() & 0xff);
    return with_gpus(std::move(id), gpus);
  };
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
  auto shared = transfer::share_group_id(a.dist, secret, timeout, make_id);
  if (!shared.is_ok()) {  // the message already says which node
    std::cerr << "dist-check: " << shared.status().message() << "\n";
    return 1;
  }
  std::vector<uint8_t> id = *shared;
  uint32_t leader_gpus = 0;
  for (int i = 0; i < 4; ++i) leader_gpus |= static_cast<uint32_t>(id[id.size() - 4 + i]) << (8 * i);
  id.resize(id.size() - 4);
  if (static_cast<int>(leader_gpus) != gpus)
    return fail(2, "the leader runs " + std::to_string(leader_gpus) + " GPU(s) per node and this node " + std::to_string(gpus) +
                       " (every node of an instance needs the same count: --gpus-per-node or CUDA_VISIBLE_DEVICES)");
  std::cout << who << ": group id sha256 " << sha256_hex(std::string_view(reinterpret_cast<const char*>(id.data()), id.size())).substr(0, 16)
            << (a.dist.node_rank == 0 ? " (made here, handed to " + std::to_string(a.dist.nnodes - 1) + " node(s))" : " (from " + a.dist.addr + ")")
            << (secret.empty() ? ", unauthenticated" : ", authenticated with the cluster secret") << std::endl;
  if (!gpu) {
    std::cout << who << ": id exchange ok (--device cpu: no NCCL, no collective)" << std::endl;
    return 0;
  }
  const int world = a.dist.nnodes * gpus, first = a.dist.node_rank * gpus;
  auto checks = cuda_dist_all_reduce_check(id, world, first, gpus, a.elements);
  if (!checks.is_ok()) return fail(1, checks.status().message());
  bool all_ok = true;
  for (const auto& c : *checks) {
    char line[256];
    std::snprintf(line, sizeof(line), "rank %d of %d (GPU %d): all-reduce of %lld floats -> %g, want %g: %s, %.3f ms", c.rank, world, c.device,
                  static_cast<long long>(a.elements), c.got, c.want, c.ok ? "ok" : "WRONG", c.ms);
    std::cout << who << ": " << line << (c.ok ? "" : " (" + std::to_string(c.mismatches) + " elements differ)") << std::endl;
    all_ok = all_ok && c.ok;
  }
  std::cout << who << ": " << (all_ok ? "ok" : "FAILED") << std::endl;
  return all_ok ? 0 : 1;
}

}  // namespace

void add_dist_check_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("dist-check", "Join a tensor-parallel group across nodes (NCCL id over TCP) and run one all-reduce");
  auto a = std::make_shared<DistCheckArgs>();
  cmd->add_option("--nnodes", a->dist.nnodes, "Nodes of the instance")->capture_default_str();
  cmd->add_option("--node-rank", a->dist.node_rank, "This node's rank (0: the leader, which hands out the id)")->capture_default_str();
  cmd->add_option("--dist-init-addr", a->dist.addr, "HOST:PORT of node 0's id bootstrap");
  cmd->add_option("--device", a->device, "cuda (join NCCL, all-reduce) or cpu (the id exchange alone)")->capture_default_str();
  cmd->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node (0: every visible GPU; the same on every node)")->capture_default_str();
  cmd->add_option("--cluster-secret-file", a->cluster_secret_file, "The cluster secret (mode 600, the same on every node)");
  cmd->add_option("--timeout", a->timeout_s, "Seconds the leader waits for the others, and they for the leader")->capture_default_str();
  cmd->add_option("--elements", a->elements, "Floats per rank in the all-reduce")->capture_default_str();
  cmd->callback([a]() { std::exit(run_dist_check(*a)); });
}

}  // namespace pdserve::cli
