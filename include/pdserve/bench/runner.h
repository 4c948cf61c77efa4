// Load generation: warm-up requests first, then the measured requests at a fixed concurrency,
// optionally released on a Poisson schedule (request rate with a concurrency cap).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "pdserve/bench/client.h"

namespace pdserve::bench {

struct PreparedRequest {
  RequestRecord record;  // index, warmup, category, lengths filled in; outcome empty
  std::string body;      // built before the clock starts, so JSON work is not timed
};

// Release times in seconds from the start of the phase: cumulative exponential gaps with mean
// 1/rate (Poisson arrivals), deterministic in seed; rate <= 0 releases everything at 0.
std::vector<double> poisson_arrivals(size_t count, double rate, uint64_t seed);

struct LoadOptions {
  int64_t concurrency = 1;
  double request_rate = 0;
  uint64_t seed = 0;
  bool stream = true;
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  double duration_s = 0;  // first send to last completion
};

// Runs one phase: at most `concurrency` requests in flight, each worker thread with its own
// connection. Every request yields a record, whatever happened to it.
PhaseResult run_phase(const std::string& base_url, const ClientOptions& client_opts, const LoadOptions& load,
                      std::vector<PreparedRequest> requests, std::ostream& progress, const std::string& label);

}  // namespace pdserve::bench
