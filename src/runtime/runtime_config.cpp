#include "pdserve/runtime/runtime_config.h"

#include "pdserve/model/cache_pools.h"

namespace pdserve::runtime {

void RuntimeConfig::resolve(const ModelConfig& model) {
  if (max_model_len == 0) max_model_len = model.max_position_embeddings;
  if (step_token_budget == 0) step_token_budget = chunk_size;
  // Auto pool: every running request can hold a full-length reservation, so admission
  // only ever waits for a running place.
  if (num_pages == 0 && page_size > 0) num_pages = max_running * ((max_model_len + page_size - 1) / page_size);
}

namespace {
Status bad(const char* field, const std::string& what) {
  return invalid_argument(std::string("config ") + field + ": " + what);
}
}  // namespace

Status RuntimeConfig::validate() const {
  if (page_size < 1 || page_size > 4096) return bad("page_size", "must be in [1, 4096]");
  if (max_running < 1) return bad("max_running", "must be >= 1");
  if (chunk_size < 1) return bad("chunk_size", "must be >= 1");
  if (step_token_budget < 1)
    return bad("step_token_budget", "must be >= 1, or 0 for the chunk size (resolve() fills 0), got " + std::to_string(step_token_budget));
  if (max_queue < 0) return bad("max_queue", "must be >= 0");
  if (max_model_len < 2) return bad("max_model_len", "must be >= 2 (resolve() fills 0 from the model)");
  if (num_pages < 1) return bad("num_pages", "must be >= 1");
  if (!(request_timeout_s >= 0)) return bad("request_timeout_s", "must be >= 0 (0: no deadline)");
  if (kv_cache_dtype != DType::kF32 && kv_cache_dtype != DType::kBF16)
    return bad("kv_cache_dtype", "must be float32 or bfloat16, got " + std::string(dtype_name(kv_cache_dtype)));
  return Status::ok();
}

Status parse_kv_cache_dtype(std::string_view name, DType* out) {
  if (!kv_cache_dtype_from_name(name, out))
    return bad("kv_cache_dtype", "must be \"float32\" or \"bfloat16\", got \"" + std::string(name) + "\"");
  return Status::ok();
}

Json RuntimeConfig::to_json() const {
  return Json{{"page_size", page_size},       {"num_pages", num_pages},
              {"max_running", max_running},   {"chunk_size", chunk_size},
              {"step_token_budget", step_token_budget}, {"max_queue", max_queue},
              {"max_model_len", max_model_len}, {"request_timeout_s", request_timeout_s},
              {"kv_cache_dtype", kv_cache_dtype_name(kv_cache_dtype)}};
}

}  // namespace pdserve::runtime
