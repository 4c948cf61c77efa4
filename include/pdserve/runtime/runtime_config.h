// The serving runtime's knobs in one validated struct (no 50-argument constructors).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pdserve/core/dtype.h"
#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/model/config.h"

namespace pdserve::runtime {

struct RuntimeConfig {
  int64_t page_size = 64;        // MLA tokens per page
  int64_t num_pages = 0;         // 0: enough for max_running requests of max_model_len each
  int64_t max_running = 16;      // requests holding pages + a KDA slot at once (= KDA slots)
  int64_t chunk_size = 8192;     // longest prefill chunk of one request in one step
  int64_t step_token_budget = 0; // tokens per forward call (decode + prefill); 0: chunk_size
  int64_t max_queue = 256;       // waiting requests; beyond that submit() says kUnavailable
  int64_t max_model_len = 0;     // prompt + completion; 0: the model's max_position_embeddings
  // A request still running this long after submit is finished with kDeadlineExceeded and
  // its pages and slot freed (a stuck client or peer must not hold them forever). 0: off.
  double request_timeout_s = 3600;
  // Element type of the MLA latent cache (every MLA pool: ranks, stages, transfer): kF32 or
  // kBF16 (half the bytes per token; values rounded to nearest even when written). JSON and
  // CLI (--kv-cache-dtype) spell it "float32" / "bfloat16". The KDA state stays fp32.
  DType kv_cache_dtype = DType::kF32;

  // Fills the 0 ("auto") fields from the model; call before validate().
  void resolve(const ModelConfig& model);
  // Names the first bad field.
  Status validate() const;
  Json to_json() const;
};

// "float32" / "bfloat16" into *out, or kInvalidArgument naming the field and the value.
Status parse_kv_cache_dtype(std::string_view name, DType* out);

}  // namespace pdserve::runtime
