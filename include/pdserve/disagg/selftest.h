// The startup self-test: before a decode server says it is healthy, every prefill peer named
// in its config writes a known pattern (a page's worth plus a state slot's worth of bytes)
// through the real transport into decode's scratch region, and decode checks it byte for
// byte. It proves the address decode advertises is reachable from prefill, that grants and
// the transport work end to end, and it opens the session the first request would pay for.
//
//   decode: grant(test room, kSelfTestRegion, [0, length)) -> POST /selftest {SelfTestRequest}
//   prefill: fill pattern(nonce) -> submit one batch -> wait -> 200 {"ok": true} or 502 + why
//   decode: verify scratch == pattern(nonce) -> revoke -> peer passed
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/transfer/types.h"

namespace pdserve::disagg {

inline constexpr transfer::RegionId kSelfTestRegion = 4000;
inline constexpr uint64_t kMaxSelfTestBytes = 64ull << 20;

struct SelfTestRequest {
  uint64_t room = 0;
  uint32_t generation = 0;
  std::string transfer_host;
  int transfer_port = 0;
  uint64_t length = 0;
  uint64_t nonce = 0;
  Json to_json() const;
  static Result<SelfTestRequest> from_json(const Json& j);
};

// Deterministic bytes from a nonce (different nonces differ in nearly every word).
void fill_pattern(uint8_t* out, uint64_t n, uint64_t nonce);
// kDataLoss naming the first differing byte.
Status check_pattern(const uint8_t* in, uint64_t n, uint64_t nonce);

}  // namespace pdserve::disagg
