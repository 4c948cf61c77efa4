// Everything `pdserve serve`, `pdserve prefill` and `pdserve decode` are configured with,
// in one validated struct (the roles differ only in `role` and the disagg block).
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/disagg/disagg_config.h"
#include "pdserve/runtime/runtime_config.h"

namespace pdserve::server {

enum class ServerRole { kUnified, kPrefill, kDecode };
const char* server_role_name(ServerRole r);  // "unified", "prefill", "decode"

struct ServeConfig {
  ServerRole role = ServerRole::kUnified;
  std::string model_dir;                      // required
  int tp = 1;                                 // tensor-parallel ranks (threads on the CPU backend)
  int pp = 1;                                 // pipeline stages of tp ranks each (CPU backend; unified or prefill role)
  std::string device = "cpu";                 // "cpu" or "cuda" (the CUDA backend: tp 1, any role)
  int nnodes = 1;                             // nodes one instance spans (--nnodes; tp splits evenly over them)
  int node_rank = 0;                          // this node's place, 0 = the leader (--node-rank)
  std::string dist_init_addr;                 // HOST:PORT of the leader's control stream (--dist-init-addr)
  double dist_timeout_s = 300;                // how long the nodes wait for each other at startup (--dist-timeout)
  bool cuda_graphs = true;                    // cuda: decode steps replay a CUDA graph per batch bucket
  bool cuda_bf16_mla_prefill = false;         // cuda: prefill MLA attention on bf16 tensor cores (--bf16-mla-prefill)
  bool cuda_bf16_kda_prefill = false;         // cuda: chunked KDA prefill in bf16 mode (--bf16-kda-prefill)
  bool cuda_e4m3_moe_decode = true;           // cuda, decode role: MoE experts on E4M3 tensor cores (--no-e4m3-moe-decode)
  std::string served_model_name;              // "": the model directory's base name
  std::string host = "127.0.0.1";
  int port = 8000;                            // 0: any free port (printed at startup)
  std::string api_key;                        // "": no auth; else /v1/* need "Bearer KEY"
  int64_t max_body_bytes = 8 * 1024 * 1024;   // larger request bodies get 413
  int64_t http_threads = 0;                   // 0: max_running + max_queue + 8 (capped at 1024)
  int64_t max_prompt_tokens = 0;              // 0: only max_model_len limits the prompt
  int64_t max_completion_tokens = 0;          // 0: only max_model_len limits max_tokens
  double drain_timeout_s = 30;                // SIGTERM: in-flight requests get this long to finish
  runtime::RuntimeConfig runtime;
  disagg::DisaggConfig disagg;                // prefill and decode roles only

  Status validate() const;  // names the bad field; runtime fields are checked by the engine
  int64_t resolved_http_threads() const;
  Json to_json() const;     // the API key is redacted
};

}  // namespace pdserve::server
