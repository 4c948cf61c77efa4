// Everything `pdserve serve` is configured with, in one validated struct.
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/runtime/runtime_config.h"

namespace pdserve::server {

struct ServeConfig {
  std::string model_dir;                      // required
  std::string served_model_name;              // "": the model directory's base name
  std::string host = "127.0.0.1";
  int port = 8000;                            // 0: any free port (printed at startup)
  std::string api_key;                        // "": no auth; else /v1/* need "Bearer KEY"
  int64_t max_body_bytes = 8 * 1024 * 1024;   // larger request bodies get 413
  int64_t http_threads = 0;                   // 0: max_running + max_queue + 8 (capped at 1024)
  runtime::RuntimeConfig runtime;

  Status validate() const;  // names the bad field; runtime fields are checked by the engine
  int64_t resolved_http_threads() const;
  Json to_json() const;     // the API key is redacted
};

}  // namespace pdserve::server
