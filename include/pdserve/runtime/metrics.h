// Counters and latency histograms the engine keeps, in a form the server renders as
// Prometheus text. Thread-safe; cheap enough to update per token.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace pdserve::runtime {

struct HistogramSnapshot {
  std::vector<double> bounds;    // upper bounds, seconds
  std::vector<uint64_t> counts;  // per bucket (not cumulative), bounds.size() + 1 (+Inf)
  double sum = 0.0;
  uint64_t count = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  HistogramSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  HistogramSnapshot h_;
};

struct MetricsSnapshot {
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t requests_stop = 0, requests_length = 0, requests_abort = 0, requests_error = 0;
  uint64_t requests_rejected = 0;  // refused at submit (never fits, queue full)
  HistogramSnapshot ttft, itl, e2e;
};

class EngineMetrics {
 public:
  EngineMetrics();
  void add_prompt_tokens(uint64_t n);
  void add_generation_tokens(uint64_t n);
  void count_finish(int reason);  // FinishReason as int
  void count_rejected();
  Histogram& ttft() { return ttft_; }
  Histogram& itl() { return itl_; }
  Histogram& e2e() { return e2e_; }
  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot c_;  // counters only; histograms live below
  Histogram ttft_, itl_, e2e_;
};

}  // namespace pdserve::runtime
