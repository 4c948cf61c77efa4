// Load-balancing policies, one small struct each, held in a std::variant.
// A policy sees only the usable candidates' outstanding-request counts and returns an index;
// health filtering and exclusion (retries) happen before, in the router.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "pdserve/router/config.h"

namespace pdserve::router {

struct RoundRobin {
  std::atomic<uint64_t> next{0};
};
struct RandomPick {};
// Two distinct random candidates; the one with fewer outstanding requests wins.
struct PowerOfTwo {};
// Fewest outstanding; ties rotate so an idle cluster still spreads load.
struct LeastOutstanding {
  std::atomic<uint64_t> next{0};
};

class Policy {
 public:
  explicit Policy(PolicyKind kind);
  PolicyKind kind() const { return kind_; }
  // outstanding[i]: in-flight requests on candidate i. Returns an index < size; size must be > 0.
  size_t pick(std::span<const int64_t> outstanding);

 private:
  PolicyKind kind_;
  std::variant<RoundRobin, RandomPick, PowerOfTwo, LeastOutstanding> impl_;
};

// Thread-safe uniform 64-bit random numbers (one generator per thread).
uint64_t random_u64();

}  // namespace pdserve::router
