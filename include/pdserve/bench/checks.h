// Correctness checks over a finished run: every request completed with the requested number
// of tokens, and the server's usage agrees with what was streamed. Failures are counted and
// listed per check, never dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/bench/client.h"
#include "pdserve/core/json_util.h"

namespace pdserve::bench {

struct CheckResult {
  std::string name;
  std::string description;
  int64_t checked = 0;
  int64_t failed = 0;
  std::vector<std::string> failures;  // "request 3: ...", one per failed request
  bool passed() const { return failed == 0; }
};

struct CheckReport {
  std::vector<CheckResult> checks;
  bool all_passed() const;
  // One line per failed check: "check output_tokens failed for 2/8 requests: request 0: ...".
  std::string failure_summary(size_t examples_per_check = 3) const;
  Json to_json() const;
};

// Checks every record (warm-up included) and appends to each record's check_failures.
CheckReport run_checks(std::vector<RequestRecord>& records, ChunkCheck chunk_check = ChunkCheck::kAtMost);

}  // namespace pdserve::bench
