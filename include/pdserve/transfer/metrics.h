// Transfer counters. Throughput is derived from measured time only: per batch, bytes over
// the batch's own submit-to-ack time; overall, bytes over the time at least one batch was
// in flight. Neither can exceed what was actually moved in the time that actually passed.
#pragma once

#include <cstdint>
#include <mutex>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer {

struct MetricsSnapshot {
  // sender side
  uint64_t bytes_sent = 0;          // payload bytes of batches that completed ok
  uint64_t batches_ok = 0;
  uint64_t batches_failed = 0;
  uint64_t queue_length = 0;        // batches submitted and not yet finished
  double busy_seconds = 0;          // wall time with at least one batch in flight
  double latency_sum_seconds = 0;   // over ok batches
  double latency_max_seconds = 0;
  double last_batch_gbps = 0;       // bytes / elapsed of the last ok batch (1 GB = 1e9 B)
  // receiver side
  uint64_t bytes_received = 0;      // payload bytes written into granted ranges
  uint64_t writes_refused = 0;      // bounds / room / generation / region check failed
  uint64_t notifications = 0;
  uint64_t frames_rejected = 0;     // malformed framing: connection dropped

  double gbps() const { return busy_seconds > 0 ? bytes_sent / busy_seconds / 1e9 : 0; }
  double mean_latency_seconds() const { return batches_ok ? latency_sum_seconds / batches_ok : 0; }
};

class TransferMetrics {
 public:
  void batch_started();
  // A batch counted by batch_started() was refused before anything moved (not a failure).
  void batch_withdrawn();
  void batch_finished(bool ok, uint64_t bytes, Clock::time_point submitted);
  void received(uint64_t bytes);
  void refused();
  void notified();
  void frame_rejected();
  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot s_;
  Clock::time_point busy_since_{};
};

}  // namespace pdserve::transfer
