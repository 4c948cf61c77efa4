// One upstream server as the router sees it: address, health, counters and a pool of
// kept-alive connections. Workers are fixed at startup and shared by pointer.
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"
#include "pdserve/router/config.h"

namespace pdserve::router {

// Prometheus-style cumulative histogram of seconds; lock-free adds.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,      2.5,   5,    10,    30,   120,  600};
  void add(double seconds);
  // Writes `name_bucket{labels,le=..}`, `name_sum` and `name_count` lines.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};  // last: +Inf
  std::atomic<uint64_t> sum_us_{0};
};

// Kept-alive httplib clients to one worker. A client is used by one call at a time.
class ConnPool {
 public:
  ConnPool(std::string host, int port, size_t max_idle) : host_(std::move(host)), port_(port), max_idle_(max_idle) {}
  // *reused says whether the client comes from the idle list (its socket may have been closed
  // by the worker meanwhile) rather than being new.
  std::shared_ptr<httplib::Client> acquire(bool* reused = nullptr);
  // A new client, never one from the idle list.
  std::shared_ptr<httplib::Client> open_new() const;
  // Reusable: the call ended cleanly, so the connection holds no half-read response.
  void release(std::shared_ptr<httplib::Client> c, bool reusable);

 private:
  std::string host_;
  int port_;
  size_t max_idle_;
  std::mutex mu_;
  std::vector<std::shared_ptr<httplib::Client>> idle_;
};

class Worker {
 public:
  Worker(WorkerRole role, WorkerAddress addr, size_t max_idle)
      : role_(role), addr_(std::move(addr)), conns_(addr_.host, addr_.port, max_idle) {}

  WorkerRole role() const { return role_; }
  const WorkerAddress& addr() const { return addr_; }
  const std::string& url() const { return addr_.url; }
  ConnPool& conns() { return conns_; }

  bool healthy() const { return healthy_.load(std::memory_order_relaxed); }
  int64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }

  // Called by the proxy around every upstream call.
  void call_started() { requests_++; outstanding_++; }
  void call_finished(double seconds, bool error, bool connect_failure);
  // A call was sent again on a new connection after its pooled one broke before any answer.
  void call_resent() { resends_++; }
  // Bytes arrived from this worker: it is alive even if a health check times out.
  void touch();

  // Applies one active health check; returns true when the healthy flag flipped.
  bool record_check(bool ok, bool timed_out, const std::string& error, const HealthConfig& cfg);

  struct Counters {
    int64_t requests, errors, connect_failures, outstanding, healthy, checks_failed, resends;
  };
  Counters counters() const;
  const LatencyHistogram& latency() const { return latency_; }
  Json info() const;

 private:
  const WorkerRole role_;
  const WorkerAddress addr_;
  ConnPool conns_;

  // Optimistic start: a worker is in the rotation until checks say otherwise; connect
  // failures meanwhile are retried on another worker.
  std::atomic<bool> healthy_{true};
  std::atomic<int64_t> outstanding_{0}, requests_{0}, errors_{0}, connect_failures_{0};
  std::atomic<int64_t> checks_failed_{0}, resends_{0};
  std::atomic<int64_t> last_progress_ns_{0};
  LatencyHistogram latency_;

  mutable std::mutex health_mu_;  // the fields below
  int consecutive_ok_ = 0, consecutive_fail_ = 0;
  std::string last_check_error_;
};

}  // namespace pdserve::router
