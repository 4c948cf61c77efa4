#include "pdserve/bench/runner.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

namespace pdserve::bench {

std::vector<double> poisson_arrivals(size_t count, double rate, uint64_t seed) {
  std::vector<double> t(count, 0.0);
  if (rate <= 0) return t;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);  // not the prompt stream
  std::exponential_distribution<double> gap(rate);
  double now = 0;
  for (size_t i = 1; i < count; ++i) {  // the first request goes at once
    now += gap(rng);
    t[i] = now;
  }
  return t;
}

PhaseResult run_phase(const std::string& base_url, const ClientOptions& client_opts, const LoadOptions& load,
                      std::vector<PreparedRequest> requests, std::ostream& progress, const std::string& label) {
  PhaseResult out;
  const size_t n = requests.size();
  if (n == 0) return out;
  const std::vector<double> arrivals = poisson_arrivals(n, load.request_rate, load.seed);
  const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max<int64_t>(1, load.concurrency)));

  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  const size_t report_every = std::max<size_t>(1, n / 10);
  const Clock::time_point phase_start = Clock::now();

  auto worker = [&]() {
    auto client = OpenAiClient::create(base_url, client_opts);
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      RequestRecord& rec = requests[i].record;
      if (!client.is_ok()) {  // cannot happen after validation, but never drop a request
        rec.error = client.status().message();
        done.fetch_add(1);
        continue;
      }
      // Indices are taken in order, so a request waits for its arrival time or for a free
      // worker, whichever is later: a request rate capped by the concurrency.
      std::this_thread::sleep_until(phase_start + std::chrono::duration_cast<Clock::duration>(
                                                      std::chrono::duration<double>(arrivals[i])));
      (*client)->send(requests[i].body, load.stream, phase_start, rec);
      const size_t finished = done.fetch_add(1) + 1;
      if (finished % report_every == 0 || finished == n) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress << label << ": " << finished << "/" << n << " requests finished\n" << std::flush;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (size_t w = 0; w < workers; ++w) threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  double end = 0;
  for (auto& r : requests) {
    end = std::max(end, r.record.start_s + r.record.e2e_s);
    out.records.push_back(std::move(r.record));
  }
  out.duration_s = end;
  return out;
}

}  // namespace pdserve::bench
