// The safetensors header parser on arbitrary bytes: never a crash, and every tensor it
// accepts lies inside the input.
#include <cstdint>
#include <cstdlib>

#include "pdserve/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = pdserve::parse_safetensors(data, size, "fuzz");
  if (!r.is_ok()) return 0;
  for (const auto& t : *r) {
    if (t.nbytes && (t.data < data || t.data + t.nbytes > data + size)) std::abort();
    volatile uint8_t sink = t.nbytes ? t.data[t.nbytes - 1] : 0;  // touch the last byte under ASan
    (void)sink;
  }
  return 0;
}
