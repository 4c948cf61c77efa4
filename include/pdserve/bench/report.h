// Text forms of a finished run: the seed's Markdown row and table, summary.json, and the
// exact command line (shell-quoted, api key redacted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/bench/checks.h"
#include "pdserve/bench/config.h"
#include "pdserve/bench/metrics.h"
#include "pdserve/core/json_util.h"

namespace pdserve::bench {

// "| Case | Requests | Input TPS | TTFT P50 / P95 | TPOT P50 / P95 |" plus the alignment row.
std::string summary_table_header();
// "| 16K -> 512, C8 | 40 | 2544.27 | 18.755 / 23.182 s | 63.20 / 66.55 ms |"; Requests reads
// "completed/sent" when some failed; undefined figures read "N/A".
std::string summary_row(const std::string& case_name, int64_t sent, const MetricsSummary& m);

struct RunReport {
  BenchConfig config;
  std::string model;
  int64_t measured = 0;  // requests in the measured phase
  int64_t warmup = 0;
  MetricsSummary metrics;
  CheckReport checks;
  bool passed() const { return checks.all_passed() && metrics.completed > 0; }
  // Why the run failed, naming each failed check; empty when it passed.
  std::string failure_message() const;
  Json summary_json() const;
  std::string summary_markdown() const;
};

// Shell-quotes argv into one line a user can paste; the value of --api-key becomes <redacted>.
std::string shell_join(const std::vector<std::string>& argv);
// This process's argv from /proc/self/cmdline (empty when unavailable).
std::vector<std::string> current_argv();

}  // namespace pdserve::bench
