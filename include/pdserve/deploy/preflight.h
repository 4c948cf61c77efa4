// The checks `pdserve preflight` runs on one node before a deployment starts: the topology
// (every rule at once), the model directory against its index, and the ports this node will
// listen on, and the RDMA NICs of RDMA_NICS (device, port state, link layer, GID). GPU, driver, NCCL and clock checks need the node's tools and live in
// scripts/deploy_pd.sh. Each problem is one line that says what to fix.
#pragma once

#include <string>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/deploy/topology.h"

namespace pdserve::deploy {

struct PreflightOptions {
  // Nodes whose processes run here; empty: this host's name, localhost, 127.0.0.1.
  std::vector<std::string> nodes;
  bool all_nodes = false;  // every process runs here (deploy_pd.sh's local mode)
};

struct PreflightReport {
  std::vector<std::string> problems;
  // What was found that is not a problem: each RDMA NIC's state, or that no process of the
  // topology runs on this host (then only the topology was checked).
  std::vector<std::string> notes;
  int checks = 0;
};

PreflightReport run_preflight(const Topology& t, const PreflightOptions& opt);

// Each missing or empty shard, a missing config.json, then what the loader says of the rest.
std::vector<std::string> model_dir_problems(const std::string& dir);
// kUnavailable naming the port when something already listens on host:port.
Status check_port_free(const std::string& host, int port, const std::string& key);
// RDMA_NICS on this node: a note per usable NIC (state, link layer, GID) or "empty" and the
// device list; a problem per NIC that is missing, has no active port or no usable GID.
void check_rdma_nics(const std::vector<std::string>& nics, PreflightReport* r, int gid_index = -1,
                     const std::string& backend = "");

}  // namespace pdserve::deploy
