#include "pdserve/router/policy.h"

#include <random>

namespace pdserve::router {

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32)};
  return rng();
}

namespace {

size_t pick_one(RoundRobin& p, std::span<const int64_t> out) {
  return p.next.fetch_add(1, std::memory_order_relaxed) % out.size();
}

size_t pick_one(RandomPick&, std::span<const int64_t> out) { return random_u64() % out.size(); }

size_t pick_one(PowerOfTwo&, std::span<const int64_t> out) {
  const size_t n = out.size();
  if (n == 1) return 0;
  size_t a = random_u64() % n;
  size_t b = random_u64() % (n - 1);
  if (b >= a) ++b;  // distinct from a, still uniform
  return out[b] < out[a] ? b : a;
}

size_t pick_one(LeastOutstanding& p, std::span<const int64_t> out) {
  const size_t n = out.size();
  const size_t start = p.next.fetch_add(1, std::memory_order_relaxed) % n;
  size_t best = start;
  for (size_t k = 1; k < n; ++k) {
    size_t i = (start + k) % n;
    if (out[i] < out[best]) best = i;
  }
  return best;
}

}  // namespace

Policy::Policy(PolicyKind kind) : kind_(kind) {
  switch (kind) {
    case PolicyKind::kRoundRobin: impl_.emplace<RoundRobin>(); break;
    case PolicyKind::kRandom: impl_.emplace<RandomPick>(); break;
    case PolicyKind::kPowerOfTwo: impl_.emplace<PowerOfTwo>(); break;
    case PolicyKind::kLeastOutstanding: impl_.emplace<LeastOutstanding>(); break;
  }
}

size_t Policy::pick(std::span<const int64_t> outstanding) {
  if (outstanding.size() <= 1) return 0;
  return std::visit([&](auto& p) { return pick_one(p, outstanding); }, impl_);
}

}  // namespace pdserve::router
