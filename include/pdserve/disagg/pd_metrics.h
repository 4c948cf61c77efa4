// Per-role transfer metrics (Prometheus names in docs/operations.md): rooms in flight
// (the transfer queue), failures, bytes and runs, each room's transfer time, totals per
// peer, and the last rooms one by one (GET /transfers), so an operator can check a single
// request's bytes and GB/s against the state-size formula and the transport's counters.
//
// Time means different things per role, both measured, never estimated: prefill counts a
// room from its first write to the acknowledgement of its last (the time spent moving
// bytes); decode counts from reserving the room to the KV landing (what a request waited).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"

namespace pdserve::disagg {

// One room as it ended.
struct RoomRecord {
  uint64_t room = 0;
  uint64_t request_id = 0;
  std::string peer;     // prefill: decode's transfer address; decode: prefill's bootstrap address
  bool ok = false;
  uint64_t bytes = 0;   // payload bytes of pages, state runs and the aux row
  uint64_t runs = 0;    // write operations (contiguous runs) that carried them
  uint64_t batches = 0; // transport batches (prefill: one per chunk plus the last)
  double seconds = 0;
  std::string error;    // why it failed; empty when ok
  double gb_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }
  Json to_json() const;
};

struct PeerTransferTotals {
  uint64_t rooms_ok = 0, rooms_failed = 0, bytes = 0, runs = 0;
  double seconds = 0;  // over ok rooms
  double gb_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }
  Json to_json() const;
};

struct PdMetricsSnapshot {
  int64_t rooms_in_flight = 0;
  uint64_t rooms_succeeded = 0;
  uint64_t rooms_failed = 0;
  uint64_t bytes = 0;
  uint64_t runs = 0;
  uint64_t batches = 0;
  double transfer_seconds = 0;  // sum over ok rooms
  double max_room_seconds = 0;
  std::map<std::string, PeerTransferTotals> peers;
  double gb_per_s() const { return transfer_seconds > 0 ? bytes / transfer_seconds / 1e9 : 0.0; }
  Json to_json() const;
};

class PdMetrics {
 public:
  static constexpr size_t kRecentRooms = 256;

  void room_started() { in_flight_.fetch_add(1); }
  // A room ended (it was counted by room_started).
  void room_ended(const RoomRecord& r);
  PdMetricsSnapshot snapshot() const;
  // The last rooms that ended, newest first, at most `limit` (and kRecentRooms).
  std::vector<RoomRecord> recent(size_t limit) const;

 private:
  std::atomic<int64_t> in_flight_{0};
  mutable std::mutex mu_;
  PdMetricsSnapshot totals_;
  std::deque<RoomRecord> recent_;
};

}  // namespace pdserve::disagg
