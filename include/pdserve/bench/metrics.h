// Benchmark metric math, exactly as docs/pd-disaggregation.md defines it (SGLang bench_serving).
// Pure functions over plain numbers, so hand-computed examples can test them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pdserve/core/json_util.h"

namespace pdserve::bench {

// One completed request, times in seconds; start_s is relative to the start of the run.
struct RequestSample {
  double start_s = 0;
  double ttft_s = 0;  // send -> first chunk that carries content (non-streaming: whole response)
  double e2e_s = 0;   // send -> end of response ([DONE] when streaming)
  std::vector<double> itl_s;  // gaps between consecutive content chunks
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  bool streamed = true;  // TPOT needs per-chunk timing
};

// (E2E - TTFT) / (output_tokens - 1); only defined for streamed requests with output > 1.
std::optional<double> tpot_s(const RequestSample& r);

// Linear interpolation between closest ranks (numpy's default); p in [0, 100]; non-empty input.
double percentile(std::vector<double> values, double p);

struct Distribution {
  int64_t count = 0;  // 0: every other field is meaningless ("N/A")
  double mean = 0, median = 0, p95 = 0, p99 = 0, min = 0, max = 0;
};
Distribution distribution(const std::vector<double>& values);

// The most requests active in any 1-second bucket [k, k+1), counting [start, start + e2e)
// intervals. It can exceed the client's concurrency: one request ending and another starting
// inside the same second both count in that bucket.
int64_t peak_concurrent_requests(const std::vector<RequestSample>& reqs, double bucket_s = 1.0);

struct MetricsSummary {
  int64_t completed = 0;
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double input_tps = 0, output_tps = 0, total_tps = 0;
  double concurrency = 0;  // sum of E2E / duration
  int64_t peak_concurrent = 0;
  Distribution ttft_s, tpot_s, itl_s, e2e_s;
  Json to_json() const;  // latencies in milliseconds, like bench_serving
};

// duration_s: wall clock of the measured run (first send to last completion); must be > 0.
MetricsSummary summarize(const std::vector<RequestSample>& reqs, double duration_s);

}  // namespace pdserve::bench
