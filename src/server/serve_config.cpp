#include "pdserve/server/serve_config.h"

#include <algorithm>

#include "pdserve/transfer/dist_init.h"

namespace pdserve::server {

const char* server_role_name(ServerRole r) {
  switch (r) {
    case ServerRole::kUnified: return "unified";
    case ServerRole::kPrefill: return "prefill";
    case ServerRole::kDecode: return "decode";
  }
  return "?";
}

Status ServeConfig::validate() const {
  if (model_dir.empty()) return invalid_argument("config model_dir: required (--model)");
  if (tp < 1 || tp > 64) return invalid_argument("config tp: must be in [1, 64]");
  if (pp < 1 || pp > 64) return invalid_argument("config pp (--pp): must be in [1, 64], got " + std::to_string(pp));
  if (pp * tp > 256) return invalid_argument("config pp (--pp) x tp (--tp): " + std::to_string(pp * tp) + " ranks, at most 256");
  if (pp > 1 && role == ServerRole::kDecode)
    return invalid_argument("config pp (--pp): pipeline parallelism is for the prefill (or unified) role; decode takes --tp only");
  if (cuda_bf16_mla_prefill && device != "cuda")
    return invalid_argument("config cuda_bf16_mla_prefill (--bf16-mla-prefill): needs --device cuda");
  if (cuda_bf16_kda_prefill && device != "cuda")
    return invalid_argument("config cuda_bf16_kda_prefill (--bf16-kda-prefill): needs --device cuda");
  if (pp > 1 && device == "cuda" && tp > 1)
    return invalid_argument("config pp (--pp) with tp (--tp): on --device cuda a pipeline stage is one GPU (--tp 1) for now; "
                            "stages of several tensor-parallel ranks run on --device cpu");
  if (device != "cpu" && device != "cuda") return invalid_argument("config device: must be \"cpu\" or \"cuda\", got \"" + device + "\"");
  if (runtime.kv_cache_dtype != DType::kF32 && runtime.kv_cache_dtype != DType::kBF16)
    return invalid_argument("config kv_cache_dtype (--kv-cache-dtype): must be float32 or bfloat16");
  // With --pp the nodes split the stages (each node runs whole stages of --tp ranks; on
  // --device cuda one GPU a stage, the check above), else --tp.
  if (nnodes > 1 && pp > 1 && pp % nnodes != 0)
    return invalid_argument("config pp (--pp) with nnodes (--nnodes): " + std::to_string(pp) + " pipeline stages do not split evenly over " +
                            std::to_string(nnodes) + " nodes (every node runs --pp / --nnodes whole stages of --tp ranks)");
  if (Status st = transfer::validate_dist_init({nnodes, node_rank, dist_init_addr}, pp > 1 ? pp : tp); !st.is_ok())
    return invalid_argument("config " + st.message());
  if (!(dist_timeout_s > 0)) return invalid_argument("config dist_timeout (--dist-timeout): must be > 0 seconds");
  if (role != ServerRole::kUnified)
    if (Status st = disagg.validate(); !st.is_ok()) return invalid_argument("config " + st.message());
  if (host.empty()) return invalid_argument("config host: must not be empty");
  if (port < 0 || port > 65535) return invalid_argument("config port: must be in [0, 65535]");
  if (max_body_bytes < 1024) return invalid_argument("config max_body_bytes: must be >= 1024");
  if (http_threads < 0) return invalid_argument("config http_threads: must be >= 0");
  if (max_prompt_tokens < 0) return invalid_argument("config max_prompt_tokens: must be >= 0 (0: max_model_len)");
  if (max_completion_tokens < 0) return invalid_argument("config max_completion_tokens: must be >= 0 (0: max_model_len)");
  if (!(drain_timeout_s >= 0)) return invalid_argument("config drain_timeout_s: must be >= 0");
  if (!(runtime.request_timeout_s >= 0)) return invalid_argument("config request_timeout_s: must be >= 0 (0: no deadline)");
  if (runtime.page_size < 1) return invalid_argument("config page_size: must be >= 1");
  if (runtime.max_running < 1) return invalid_argument("config max_running: must be >= 1");
  if (runtime.chunk_size < 1) return invalid_argument("config chunk_size: must be >= 1");
  if (runtime.step_token_budget < 0)
    return invalid_argument("config step_token_budget (--step-tokens): must be >= 0 (0: the chunk size, --chunk-size), got " +
                            std::to_string(runtime.step_token_budget));
  if (runtime.max_queue < 0) return invalid_argument("config max_queue: must be >= 0");
  if (runtime.num_pages < 0) return invalid_argument("config num_pages: must be >= 0 (0: auto)");
  if (runtime.max_model_len < 0) return invalid_argument("config max_model_len: must be >= 0 (0: the model's)");
  return Status::ok();
}

int64_t ServeConfig::resolved_http_threads() const {
  if (http_threads > 0) return http_threads;
  return std::min<int64_t>(1024, runtime.max_running + runtime.max_queue + 8);
}

Json ServeConfig::to_json() const {
  Json j{{"role", server_role_name(role)},
         {"model_dir", model_dir},
         {"tp", tp},
         {"pp", pp},
         {"device", device},
         {"cuda_graphs", cuda_graphs},
         {"cuda_bf16_mla_prefill", cuda_bf16_mla_prefill},
         {"cuda_bf16_kda_prefill", cuda_bf16_kda_prefill},
         {"cuda_e4m3_moe_decode", cuda_e4m3_moe_decode},
         {"nnodes", nnodes},
         {"node_rank", node_rank},
         {"dist_init_addr", dist_init_addr},
         {"dist_timeout_s", dist_timeout_s},
         {"served_model_name", served_model_name},
         {"host", host},
         {"port", port},
         {"api_key", api_key.empty() ? "" : "<redacted>"},
         {"max_body_bytes", max_body_bytes},
         {"http_threads", resolved_http_threads()},
         {"max_prompt_tokens", max_prompt_tokens},
         {"max_completion_tokens", max_completion_tokens},
         {"drain_timeout_s", drain_timeout_s},
         {"runtime", runtime.to_json()}};
  if (role != ServerRole::kUnified) j["disagg"] = disagg.to_json();
  return j;
}

}  // namespace pdserve::server
