// config.json validation on arbitrary bytes: errors, never crashes; an accepted config is
// internally consistent (every layer has a kind).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "pdserve/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = pdserve::parse_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!j.is_ok()) return 0;
  auto c = pdserve::parse_model_config(*j, "fuzz");
  if (c.is_ok() && static_cast<int64_t>(c->layer_kinds.size()) != c->num_layers) std::abort();
  return 0;
}
