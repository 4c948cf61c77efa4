// The TCP transport's frame header decoder on arbitrary 80-byte headers: refused, or every
// length and count it accepts is within the limits (so the reader never allocates or reads
// past them).
#include <cstdint>
#include <cstdlib>

#include "pdserve/transfer/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdserve::transfer::wire;
  if (size < kHeaderBytes) return 0;
  Limits limits;
  auto h = decode_header(data, limits);
  if (!h.is_ok()) return 0;
  uint8_t again[kHeaderBytes];
  encode_header(*h, again);
  auto h2 = decode_header(again, limits);
  if (!h2.is_ok()) std::abort();  // what we accept, we can re-encode and accept again
  if (h->type == FrameType::kWrite && h->length > limits.max_write_bytes) std::abort();
  if (h->type == FrameType::kNotify && h->length > limits.max_notify_bytes) std::abort();
  return 0;
}
