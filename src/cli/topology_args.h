// `--config FILE` for the roles: a topology file (configs/*.env) fills the settings that were
// not given as flags. Flags win, so `pdserve prefill --config F --port 40000` works as read.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/deploy/topology.h"
#include "pdserve/runtime/runtime_config.h"

namespace pdserve::cli {

// Where a role keeps what a topology can set; null pointers are left alone.
struct RoleFields {
  std::string* model_dir = nullptr;  // MODEL_PATH        (--model)
  std::string* host = nullptr;       // BIND_HOST         (--host)
  int* port = nullptr;               // <SIDE>_PORT       (--port)
  int* bootstrap_port = nullptr;     // BOOTSTRAP_PORT    (--bootstrap-port), prefill only
  int* tp = nullptr;                 // <SIDE>_TP         (--tp)
  runtime::RuntimeConfig* runtime = nullptr;  // <SIDE>_PAGE_SIZE, CHUNK_SIZE, <SIDE>_MAX_RUNNING, KV_CACHE_DTYPE
  std::string* cluster_secret_file = nullptr;  // CLUSTER_SECRET_FILE (--cluster-secret-file), roles only
  std::vector<std::string>* rdma_nics = nullptr;  // RDMA_NICS (--rdma-nics), roles only
  int* pp = nullptr;                 // <SIDE>_PP         (--pp)
  std::vector<std::string>* allowed_prefills = nullptr;  // decode: PREFILL_NODES' instances (--allow-prefill)
};

// Adds `--config FILE` to a subcommand.
CLI::Option* add_config_option(CLI::App* cmd, std::string* path);

// Loads and validates the topology at `path` and fills each field of `f` whose flag was not
// given on `cmd`. role: kPrefill or kDecode read that side's keys; kRouter is not accepted
// here (router_cmd.cpp fills its URLs itself); no role (serve) reads only the shared keys.
// Errors name the file, the key and the value.
Status apply_topology_to_runtime(const CLI::App& cmd, const std::string& path, std::optional<deploy::Role> role,
                                 RoleFields f);

// True when `flag` (e.g. "--page-size") was given on the command line of cmd.
bool flag_given(const CLI::App& cmd, const std::string& flag);

}  // namespace pdserve::cli
