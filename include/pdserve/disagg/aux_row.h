// The aux row: the small record prefill writes into decode's aux region after the KV and
// state, before it notifies. Decode checks magic, room and generation before it trusts a
// single byte of the room's KV (a stale or mis-addressed row is refused).
#pragma once

#include <cstdint>

#include "pdserve/core/status.h"
#include "pdserve/runtime/engine.h"

namespace pdserve::disagg {

inline constexpr uint32_t kAuxMagic = 0x50445841;  // "AXDP"
inline constexpr int kAuxTopLogprobs = 20;

struct AuxRow {
  uint32_t magic = 0;
  uint32_t generation = 0;
  uint64_t room = 0;
  int64_t cached_tokens = 0;  // prompt tokens folded into the pages and state
  int32_t first_token = -1;
  float logprob = 0.0f;  // of first_token (decode reports it only when asked for logprobs)
  int32_t reserved = 0;
  int32_t num_top = 0;
  int32_t top_ids[kAuxTopLogprobs] = {};
  float top_logprobs[kAuxTopLogprobs] = {};
};
static_assert(sizeof(AuxRow) == 200, "AuxRow is a wire format: keep its size fixed");

AuxRow make_aux_row(uint64_t room, uint32_t generation, int64_t cached_tokens, const runtime::FirstToken& first);
// kDataLoss naming what differs; on success the first token (and its logprobs).
Result<runtime::FirstToken> check_aux_row(const AuxRow& row, uint64_t room, uint32_t generation, int64_t prompt_len);

}  // namespace pdserve::disagg
