#include "pdserve/transfer/metrics.h"

#include <algorithm>

namespace pdserve::transfer {

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void TransferMetrics::batch_started() {
  std::lock_guard lk(mu_);
  if (s_.queue_length++ == 0) busy_since_ = Clock::now();
}

void TransferMetrics::batch_withdrawn() {
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  if (s_.queue_length > 0 && --s_.queue_length == 0) s_.busy_seconds += seconds(now - busy_since_);
}

void TransferMetrics::batch_finished(bool ok, uint64_t bytes, Clock::time_point submitted) {
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  if (s_.queue_length > 0 && --s_.queue_length == 0) s_.busy_seconds += seconds(now - busy_since_);
  if (!ok) {
    ++s_.batches_failed;
    return;
  }
  ++s_.batches_ok;
  s_.bytes_sent += bytes;
  const double lat = seconds(now - submitted);
  s_.latency_sum_seconds += lat;
  s_.latency_max_seconds = std::max(s_.latency_max_seconds, lat);
  if (lat > 0) s_.last_batch_gbps = bytes / lat / 1e9;
}

void TransferMetrics::received(uint64_t bytes) {
  std::lock_guard lk(mu_);
  s_.bytes_received += bytes;
}
void TransferMetrics::refused() {
  std::lock_guard lk(mu_);
  ++s_.writes_refused;
}
void TransferMetrics::notified() {
  std::lock_guard lk(mu_);
  ++s_.notifications;
}
void TransferMetrics::frame_rejected() {
  std::lock_guard lk(mu_);
  ++s_.frames_rejected;
}

MetricsSnapshot TransferMetrics::snapshot() const {
  std::lock_guard lk(mu_);
  MetricsSnapshot out = s_;
  // Count the current busy stretch too, so a snapshot mid-transfer is not inflated.
  if (out.queue_length > 0) out.busy_seconds += seconds(Clock::now() - busy_since_);
  return out;
}

}  // namespace pdserve::transfer
