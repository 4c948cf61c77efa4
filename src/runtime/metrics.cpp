#include "pdserve/runtime/metrics.h"

#include <algorithm>

#include "pdserve/runtime/request.h"

namespace pdserve::runtime {

Histogram::Histogram(std::vector<double> bounds) {
  h_.bounds = std::move(bounds);
  h_.counts.assign(h_.bounds.size() + 1, 0);
}

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t b = static_cast<size_t>(std::lower_bound(h_.bounds.begin(), h_.bounds.end(), seconds) - h_.bounds.begin());
  ++h_.counts[b];
  h_.sum += seconds;
  ++h_.count;
}

HistogramSnapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return h_;
}

namespace {
std::vector<double> latency_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}
}  // namespace

EngineMetrics::EngineMetrics() : ttft_(latency_bounds()), itl_(latency_bounds()), e2e_(latency_bounds()) {}

void EngineMetrics::add_prompt_tokens(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  c_.prompt_tokens += n;
}
void EngineMetrics::add_generation_tokens(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  c_.generation_tokens += n;
}
void EngineMetrics::count_finish(int reason) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (static_cast<FinishReason>(reason)) {
    case FinishReason::kStop: ++c_.requests_stop; break;
    case FinishReason::kLength: ++c_.requests_length; break;
    case FinishReason::kAbort: ++c_.requests_abort; break;
    default: ++c_.requests_error; break;
  }
}
void EngineMetrics::count_rejected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++c_.requests_rejected;
}

MetricsSnapshot EngineMetrics::snapshot() const {
  MetricsSnapshot s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = c_;
  }
  s.ttft = ttft_.snapshot();
  s.itl = itl_.snapshot();
  s.e2e = e2e_.snapshot();
  return s;
}

}  // namespace pdserve::runtime
