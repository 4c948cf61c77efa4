// The node control stream's decoders on arbitrary bytes: the first 12 bytes as a frame
// header, the rest as each message's payload. Whatever is accepted must re-encode to the
// same payload (so the decoder never accepts more than the format says) and stay within
// the limits (so a follower never allocates from a forged count).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "pdserve/transfer/node_control.h"

namespace {

using namespace pdserve::transfer::node;

template <typename M>
void same_payload(const M& m, const uint8_t* p, size_t n) {
  const std::string f = encode(m);
  if (f.size() != kHeaderBytes + n || f.compare(kHeaderBytes, n, std::string(reinterpret_cast<const char*>(p), n)) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kHeaderBytes) {
    auto h = decode_header(data);
    if (h.is_ok() && h->length > kMaxPayload) std::abort();
  }
  const uint8_t* p = size >= kHeaderBytes ? data + kHeaderBytes : data;
  const size_t n = size >= kHeaderBytes ? size - kHeaderBytes : size;
  if (auto m = decode_step(p, n); m.is_ok()) {
    for (const auto& s : m->seqs)
      if (s.slot < 0 || s.cached_len < 0 || s.tokens.size() > n || s.pages.size() > n) std::abort();
    same_payload(*m, p, n);
  }
  if (auto m = decode_hello(p, n); m.is_ok()) {
    if (m->group_id.size() > kMaxGroupId) std::abort();
    same_payload(*m, p, n);
  }
  if (auto m = decode_start(p, n); m.is_ok()) same_payload(*m, p, n);
  if (auto m = decode_ready(p, n); m.is_ok()) same_payload(*m, p, n);
  if (auto m = decode_shutdown(p, n); m.is_ok()) same_payload(*m, p, n);
  if (auto m = decode_cache(p, n); m.is_ok()) {
    const bool bf16 = m->dtype == pdserve::DType::kBF16;
    if (m->id < 0 || m->kind > CacheData::kStateLayer || m->data.size() > n || (!bf16 && m->dtype != pdserve::DType::kF32) ||
        (bf16 && m->kind != CacheData::kPage) || m->data.size() % static_cast<size_t>(pdserve::dtype_size(m->dtype)) != 0)
      std::abort();
    same_payload(*m, p, n);
  }
  if (auto m = decode_fetch(p, n); m.is_ok()) {
    if (m->slot < -1 || m->pages.size() > n) std::abort();
    same_payload(*m, p, n);
  }
  if (auto m = decode_fetch_done(p, n); m.is_ok()) same_payload(*m, p, n);
  if (auto m = decode_round(p, n); m.is_ok()) {
    if (m->seqs.size() > n || m->logits.size() > n / sizeof(float)) std::abort();
    same_payload(*m, p, n);
  }
  return 0;
}
