#include "worker.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace pdserve::router {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void LatencyHistogram::add(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void LatencyHistogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  char le[32];
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    if (i < kBounds.size()) std::snprintf(le, sizeof(le), "%g", kBounds[i]);
    else std::snprintf(le, sizeof(le), "+Inf");
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof(sum), "%.6f", sum_us_.load(std::memory_order_relaxed) / 1e6);
  out += name + "_sum{" + labels + "} " + sum + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(cumulative) + "\n";
}

std::shared_ptr<httplib::Client> ConnPool::acquire(bool* reused) {
  {
    std::lock_guard lk(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      if (reused) *reused = true;
      return c;
    }
  }
  if (reused) *reused = false;
  return open_new();
}

std::shared_ptr<httplib::Client> ConnPool::open_new() const {
  auto c = std::make_shared<httplib::Client>(host_, port_);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // SSE chunks are small; Nagle would hold them back
  return c;
}

void ConnPool::release(std::shared_ptr<httplib::Client> c, bool reusable) {
  if (!reusable || !c->is_socket_open()) return;
  std::lock_guard lk(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

void Worker::call_finished(double seconds, bool error, bool connect_failure) {
  outstanding_--;
  if (error) errors_++;
  if (connect_failure) connect_failures_++;
  latency_.add(seconds);
}

void Worker::touch() { last_progress_ns_.store(now_ns(), std::memory_order_relaxed); }

bool Worker::record_check(bool ok, bool timed_out, const std::string& error, const HealthConfig& cfg) {
  std::lock_guard lk(health_mu_);
  if (!ok && timed_out && healthy()) {
    // A worker busy with a long prefill may answer /health late (sglang#22511); if it sent
    // us bytes within the last interval it is alive, so the timeout does not count.
    int64_t quiet_ns = now_ns() - last_progress_ns_.load(std::memory_order_relaxed);
    if (quiet_ns < static_cast<int64_t>(cfg.interval_s * 1e9)) return false;
  }
  if (ok) {
    consecutive_fail_ = 0;
    ++consecutive_ok_;
  } else {
    checks_failed_++;
    consecutive_ok_ = 0;
    ++consecutive_fail_;
    last_check_error_ = error;
  }
  const bool was = healthy();
  if (was && consecutive_fail_ >= cfg.failure_threshold) {
    healthy_ = false;
    spdlog::warn("router: {} worker {} leaves the rotation after {} failed health checks: {}", role_name(role_),
                 addr_.url, consecutive_fail_, error);
  } else if (!was && consecutive_ok_ >= cfg.success_threshold) {
    healthy_ = true;
    spdlog::info("router: {} worker {} is healthy again after {} good checks", role_name(role_), addr_.url,
                 consecutive_ok_);
  }
  return was != healthy();
}

Json Worker::info() const {
  std::lock_guard lk(health_mu_);
  Json j = {{"url", addr_.url},
            {"role", role_name(role_)},
            {"state", healthy() ? "healthy" : "unhealthy"},
            {"outstanding", outstanding()},
            {"requests", requests_.load()},
            {"errors", errors_.load()},
            {"connect_failures", connect_failures_.load()},
            {"resends", resends_.load()},
            {"health_checks_failed", checks_failed_.load()},
            {"consecutive_failures", consecutive_fail_},
            {"consecutive_successes", consecutive_ok_},
            {"last_health_error", last_check_error_}};
  if (role_ == WorkerRole::kPrefill) j["bootstrap_port"] = addr_.bootstrap_port;
  return j;
}

Worker::Counters Worker::counters() const {
  return {requests_.load(), errors_.load(), connect_failures_.load(), outstanding(), healthy() ? 1 : 0,
          checks_failed_.load(), resends_.load()};
}

}  // namespace pdserve::router
