// Per-role transfer metrics (Prometheus names in docs/operations.md): rooms in flight
// (the transfer queue), failures, bytes, and each room's transfer time from its first
// write to its last, so GB/s is bytes over time actually spent moving them.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "pdserve/core/json_util.h"

namespace pdserve::disagg {

struct PdMetricsSnapshot {
  int64_t rooms_in_flight = 0;
  uint64_t rooms_succeeded = 0;
  uint64_t rooms_failed = 0;
  uint64_t bytes = 0;
  uint64_t batches = 0;
  double transfer_seconds = 0;  // sum over rooms
  double max_room_seconds = 0;
  double gb_per_s() const { return transfer_seconds > 0 ? bytes / transfer_seconds / 1e9 : 0.0; }
  Json to_json() const;
};

class PdMetrics {
 public:
  void room_started() { in_flight_.fetch_add(1); }
  // A room ended (it was counted by room_started).
  void room_ended(bool ok, uint64_t bytes, uint64_t batches, double seconds);
  PdMetricsSnapshot snapshot() const;

 private:
  std::atomic<int64_t> in_flight_{0};
  mutable std::mutex mu_;
  PdMetricsSnapshot totals_;
};

}  // namespace pdserve::disagg
