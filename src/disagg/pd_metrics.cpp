#include "pdserve/disagg/pd_metrics.h"

#include <algorithm>

namespace pdserve::disagg {

Json RoomRecord::to_json() const {
  Json j{{"room", room},   {"request_id", request_id}, {"peer", peer},       {"ok", ok},
         {"bytes", bytes}, {"runs", runs},             {"batches", batches}, {"seconds", seconds},
         {"gb_per_s", gb_per_s()}};
  if (!ok) j["error"] = error;
  return j;
}

Json PeerTransferTotals::to_json() const {
  return Json{{"rooms_ok", rooms_ok}, {"rooms_failed", rooms_failed}, {"bytes", bytes},
              {"runs", runs},         {"seconds", seconds},           {"gb_per_s", gb_per_s()}};
}

Json PdMetricsSnapshot::to_json() const {
  Json per_peer = Json::object();
  for (const auto& [k, p] : peers) per_peer[k] = p.to_json();
  return Json{{"rooms_in_flight", rooms_in_flight}, {"rooms_succeeded", rooms_succeeded},
              {"rooms_failed", rooms_failed},       {"bytes", bytes},
              {"runs", runs},                       {"batches", batches},
              {"transfer_seconds", transfer_seconds}, {"max_room_seconds", max_room_seconds},
              {"gb_per_s", gb_per_s()},             {"peers", per_peer}};
}

void PdMetrics::room_ended(const RoomRecord& r) {
  in_flight_.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mu_);
  (r.ok ? totals_.rooms_succeeded : totals_.rooms_failed) += 1;
  totals_.bytes += r.bytes;
  totals_.runs += r.runs;
  totals_.batches += r.batches;
  PeerTransferTotals& p = totals_.peers[r.peer.empty() ? "none" : r.peer];
  (r.ok ? p.rooms_ok : p.rooms_failed) += 1;
  p.bytes += r.bytes;
  p.runs += r.runs;
  if (r.ok) {
    totals_.transfer_seconds += r.seconds;
    totals_.max_room_seconds = std::max(totals_.max_room_seconds, r.seconds);
    p.seconds += r.seconds;
  }
  recent_.push_front(r);
  if (recent_.size() > kRecentRooms) recent_.pop_back();
}

PdMetricsSnapshot PdMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  PdMetricsSnapshot s = totals_;
  s.rooms_in_flight = in_flight_.load();
  return s;
}

std::vector<RoomRecord> PdMetrics::recent(size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = std::min(limit, recent_.size());
  return std::vector<RoomRecord>(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace pdserve::disagg
