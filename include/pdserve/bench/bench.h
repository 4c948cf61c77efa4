// `pdserve bench` end to end: prompts -> requests -> checks -> metrics -> files in the run dir.
//
// Run dir layout: command.txt, manifest.json, inputs.jsonl (+ warmup_inputs.jsonl),
// inputs.sha256, requests.jsonl, summary.json, summary.md, plot.svg. See docs/bench.md.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "pdserve/bench/config.h"
#include "pdserve/bench/report.h"
#include "pdserve/core/status.h"

namespace pdserve::bench {

struct BenchOutcome {
  RunReport report;
  std::string out_dir;
};

// Errors (bad config, unreachable endpoint, bad dataset, unwritable out dir) come back before
// any request is sent. A run whose checks fail is still an outcome: report.passed() is false
// and every artifact is written. argv goes to command.txt.
Result<BenchOutcome> run_bench(const BenchConfig& cfg, const std::vector<std::string>& argv, std::ostream& log);

}  // namespace pdserve::bench
