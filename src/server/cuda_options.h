// The CUDA backend's options as the server's config sets them (one place for the one-node
// and the multi-node start paths).
#pragma once

#include <cstdint>

#include "pdserve/model/device_forward.h"
#include "pdserve/server/serve_config.h"

namespace pdserve::server {

inline CudaForwardOptions cuda_forward_options(const ServeConfig& cfg, int64_t graph_max_pages) {
  CudaForwardOptions o;
  o.graphs = cfg.cuda_graphs;
  o.graph_max_pages = graph_max_pages;
  o.bf16_mla_prefill = cfg.cuda_bf16_mla_prefill;
  o.bf16_kda_prefill = cfg.cuda_bf16_kda_prefill;
  o.kv_cache_dtype = cfg.runtime.kv_cache_dtype;  // the device MLA pool holds the host pools' dtype
  // The E4M3 MoE shuffle where no prefill chunk runs: the prefill grouped GEMM reads the bf16 one.
  o.e4m3_moe_decode = cfg.cuda_e4m3_moe_decode && cfg.role == ServerRole::kDecode;
  // The scheduler's step bounds (runtime_config.h): the KDA prefill workspace covers one step in one pass.
  o.prefill_step_tokens = cfg.runtime.step_token_budget > 0 ? cfg.runtime.step_token_budget : cfg.runtime.chunk_size;
  o.prefill_step_seqs = cfg.runtime.max_running;
  return o;
}

}  // namespace pdserve::server
