#include "pdserve/disagg/pd_metrics.h"

#include <algorithm>

namespace pdserve::disagg {

Json PdMetricsSnapshot::to_json() const {
  return Json{{"rooms_in_flight", rooms_in_flight}, {"rooms_succeeded", rooms_succeeded},
              {"rooms_failed", rooms_failed},       {"bytes", bytes},
              {"batches", batches},                 {"transfer_seconds", transfer_seconds},
              {"max_room_seconds", max_room_seconds}, {"gb_per_s", gb_per_s()}};
}

void PdMetrics::room_ended(bool ok, uint64_t bytes, uint64_t batches, double seconds) {
  in_flight_.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mu_);
  (ok ? totals_.rooms_succeeded : totals_.rooms_failed) += 1;
  totals_.bytes += bytes;
  totals_.batches += batches;
  if (ok) {
    totals_.transfer_seconds += seconds;
    totals_.max_room_seconds = std::max(totals_.max_room_seconds, seconds);
  }
}

PdMetricsSnapshot PdMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  PdMetricsSnapshot s = totals_;
  s.rooms_in_flight = in_flight_.load();
  return s;
}

}  // namespace pdserve::disagg
