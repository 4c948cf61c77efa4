// Not a test: what the per-unit transfer checksum costs on one core (docs/perf.md), against
// memcpy of the same bytes as the anchor. Usage: bench_checksum [--mib N] [--unit-kib K]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pdserve/disagg/transfer_plan.h"

int main(int argc, char** argv) {
  size_t mib = 256, unit_kib = 144;  // 144 KiB: one K3 page of one layer (64 x 576 x 4 B)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::string(argv[i]) == "--unit-kib") unit_kib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const size_t n = mib << 20, unit = unit_kib << 10;
  std::vector<uint8_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 131 + 7);
  auto time = [&](auto&& f) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  uint64_t sink = 0;
  const double t_hash = time([&] {
    for (size_t off = 0; off + unit <= n; off += unit) {
      pdserve::transfer::WriteOp u{0, 0, 1000, off, unit};
      sink += pdserve::disagg::unit_hash(u, a.data() + off);
    }
  });
  const double t_copy = time([&] { std::memcpy(b.data(), a.data(), n); });
  std::printf("bytes %zu MiB, unit %zu KiB: checksum %.2f GB/s, memcpy %.2f GB/s (sink %llx)\n", mib, unit_kib,
              n / t_hash / 1e9, n / t_copy / 1e9, static_cast<unsigned long long>(sink ^ b[n / 2]));
  return 0;
}
