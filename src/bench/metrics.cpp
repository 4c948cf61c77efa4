#include "pdserve/bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace pdserve::bench {

std::optional<double> tpot_s(const RequestSample& r) {
  if (!r.streamed || r.output_tokens <= 1) return std::nullopt;
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  if (values.empty()) return d;
  d.count = static_cast<int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.median = percentile(values, 50);
  d.p95 = percentile(values, 95);
  d.p99 = percentile(values, 99);
  auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  d.min = *mn;
  d.max = *mx;
  return d;
}

int64_t peak_concurrent_requests(const std::vector<RequestSample>& reqs, double bucket_s) {
  std::map<int64_t, int64_t> per_bucket;
  for (const auto& r : reqs) {
    const double end = r.start_s + r.e2e_s;
    const auto first = static_cast<int64_t>(std::floor(r.start_s / bucket_s));
    // Half-open interval: a request that ends exactly on a boundary is not in the next bucket.
    auto last = static_cast<int64_t>(std::ceil(end / bucket_s)) - 1;
    last = std::max(last, first);
    for (int64_t b = first; b <= last; ++b) ++per_bucket[b];
  }
  int64_t peak = 0;
  for (const auto& [b, n] : per_bucket) peak = std::max(peak, n);
  return peak;
}

MetricsSummary summarize(const std::vector<RequestSample>& reqs, double duration_s) {
  MetricsSummary s;
  s.completed = static_cast<int64_t>(reqs.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  double e2e_sum = 0;
  for (const auto& r : reqs) {
    s.input_tokens += r.input_tokens;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    e2e_sum += r.e2e_s;
    if (auto t = tpot_s(r)) tpot.push_back(*t);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  if (duration_s > 0) {
    s.input_tps = static_cast<double>(s.input_tokens) / duration_s;
    s.output_tps = static_cast<double>(s.output_tokens) / duration_s;
    s.total_tps = s.input_tps + s.output_tps;
    s.concurrency = e2e_sum / duration_s;
  }
  s.peak_concurrent = peak_concurrent_requests(reqs);
  s.ttft_s = distribution(ttft);
  s.tpot_s = distribution(tpot);
  s.itl_s = distribution(itl);
  s.e2e_s = distribution(e2e);
  return s;
}

namespace {
Json dist_ms(const Distribution& d) {
  if (d.count == 0) return Json{{"count", 0}};  // undefined: no mean/median to report
  return Json{{"count", d.count},     {"mean_ms", d.mean * 1e3}, {"median_ms", d.median * 1e3},
              {"p95_ms", d.p95 * 1e3}, {"p99_ms", d.p99 * 1e3},   {"min_ms", d.min * 1e3},
              {"max_ms", d.max * 1e3}};
}
}  // namespace

Json MetricsSummary::to_json() const {
  return Json{{"completed", completed},
              {"duration_s", duration_s},
              {"input_tokens", input_tokens},
              {"output_tokens", output_tokens},
              {"input_tps", input_tps},
              {"output_tps", output_tps},
              {"total_tps", total_tps},
              {"concurrency", concurrency},
              {"peak_concurrent_requests", peak_concurrent},
              {"ttft", dist_ms(ttft_s)},
              {"tpot", dist_ms(tpot_s)},
              {"itl", dist_ms(itl_s)},
              {"e2e", dist_ms(e2e_s)}};
}

}  // namespace pdserve::bench
