// Metric math against examples worked out by hand (see the comments for the arithmetic).
#include <gtest/gtest.h>

#include "pdserve/bench/metrics.h"

namespace pdserve::bench {
namespace {

RequestSample req(double start, double ttft, double e2e, int64_t in, int64_t out, std::vector<double> itl = {}) {
  RequestSample r;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.input_tokens = in;
  r.output_tokens = out;
  r.itl_s = std::move(itl);
  return r;
}

TEST(Percentile, LinearInterpolationLikeNumpy) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);   // rank 1.5 between 2 and 3
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 95), 19.5);      // rank 0.95
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Tpot, ExcludesFirstTokenAndNeedsTwoTokens) {
  EXPECT_DOUBLE_EQ(*tpot_s(req(0, 0.5, 2.5, 1, 5)), 0.5);  // (2.5 - 0.5) / (5 - 1)
  EXPECT_FALSE(tpot_s(req(0, 0.5, 0.5, 1, 1)).has_value());
  EXPECT_FALSE(tpot_s(req(0, 0.5, 0.5, 1, 0)).has_value());
  RequestSample non_stream = req(0, 2.0, 2.0, 1, 16);
  non_stream.streamed = false;  // no per-token timing: undefined, not zero
  EXPECT_FALSE(tpot_s(non_stream).has_value());
}

TEST(PeakConcurrency, CountsRequestsTouchingEachOneSecondBucket) {
  // A [0, 2.5) -> buckets 0,1,2; B [0.2, 1.2) -> 0,1; C [1.5, 3.0) -> 1,2. Bucket 1 has 3.
  std::vector<RequestSample> r = {req(0, 0.5, 2.5, 0, 1), req(0.2, 1.0, 1.0, 0, 1), req(1.5, 0.3, 1.5, 0, 1)};
  EXPECT_EQ(peak_concurrent_requests(r), 3);
  // Back to back at concurrency 1: [0, 1) then [1, 2); the boundary belongs to one bucket only.
  EXPECT_EQ(peak_concurrent_requests({req(0, 0.1, 1.0, 0, 1), req(1.0, 0.1, 1.0, 0, 1)}), 1);
  // ... but [0, 0.6) and [0.6, 1.2) share bucket 0: peak 2 although only one was ever in flight.
  EXPECT_EQ(peak_concurrent_requests({req(0, 0.1, 0.6, 0, 1), req(0.6, 0.1, 0.6, 0, 1)}), 2);
  EXPECT_EQ(peak_concurrent_requests({}), 0);
}

TEST(Summarize, HandComputedThreeRequests) {
  std::vector<RequestSample> r = {req(0.0, 0.5, 2.5, 100, 5, {0.5, 0.5, 0.5, 0.5}),
                                  req(0.2, 1.0, 1.0, 50, 1),
                                  req(1.5, 0.3, 1.5, 10, 3, {0.6, 0.6})};
  MetricsSummary s = summarize(r, 3.0);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.input_tokens, 160);
  EXPECT_EQ(s.output_tokens, 9);
  EXPECT_NEAR(s.input_tps, 160.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.output_tps, 3.0, 1e-12);
  EXPECT_NEAR(s.total_tps, 169.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.concurrency, 5.0 / 3.0, 1e-12);  // (2.5 + 1.0 + 1.5) / 3
  EXPECT_EQ(s.peak_concurrent, 3);
  // TTFT {0.3, 0.5, 1.0}: mean 0.6, median 0.5, P95 rank 1.9 -> 0.95, P99 rank 1.98 -> 0.99.
  EXPECT_EQ(s.ttft_s.count, 3);
  EXPECT_NEAR(s.ttft_s.mean, 0.6, 1e-12);
  EXPECT_NEAR(s.ttft_s.median, 0.5, 1e-12);
  EXPECT_NEAR(s.ttft_s.p95, 0.95, 1e-12);
  EXPECT_NEAR(s.ttft_s.p99, 0.99, 1e-12);
  // TPOT: A (2.5-0.5)/4 = 0.5, B undefined (1 token), C (1.5-0.3)/2 = 0.6.
  EXPECT_EQ(s.tpot_s.count, 2);
  EXPECT_NEAR(s.tpot_s.median, 0.55, 1e-12);
  EXPECT_NEAR(s.tpot_s.p95, 0.595, 1e-12);
  // ITL pools every gap: {0.5 x4, 0.6 x2}, mean 3.2 / 6.
  EXPECT_EQ(s.itl_s.count, 6);
  EXPECT_NEAR(s.itl_s.mean, 3.2 / 6.0, 1e-12);
  EXPECT_NEAR(s.itl_s.max, 0.6, 1e-12);
  // E2E {1.0, 1.5, 2.5}.
  EXPECT_NEAR(s.e2e_s.median, 1.5, 1e-12);
  EXPECT_NEAR(s.e2e_s.min, 1.0, 1e-12);
}

TEST(Summarize, NoTpotWhenEveryOutputIsOneToken) {
  MetricsSummary s = summarize({req(0, 1.0, 1.0, 16, 1), req(1.0, 2.0, 2.0, 16, 1)}, 3.0);
  EXPECT_EQ(s.tpot_s.count, 0);
  EXPECT_EQ(s.itl_s.count, 0);
  EXPECT_EQ(s.ttft_s.count, 2);
  EXPECT_FALSE(s.to_json()["tpot"].contains("median_ms"));  // undefined, not 0
  EXPECT_NEAR(s.to_json()["ttft"]["median_ms"].get<double>(), 1500.0, 1e-9);
}

TEST(Summarize, EmptyRunHasNoFigures) {
  MetricsSummary s = summarize({}, 0.0);
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.ttft_s.count, 0);
  EXPECT_EQ(s.input_tps, 0.0);
}

}  // namespace
}  // namespace pdserve::bench
