#include "pdserve/bench/report.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

namespace pdserve::bench {
namespace {

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// "1.217 / 1.217 s" from seconds, scaled and formatted; "N/A" when there are no samples.
std::string p50_p95(const Distribution& d, double scale, int digits, const char* unit) {
  if (d.count == 0) return "N/A";
  return fixed(d.median * scale, digits) + " / " + fixed(d.p95 * scale, digits) + " " + unit;
}

std::string dist_line(const char* name, const Distribution& d, double scale, const char* unit) {
  if (d.count == 0) return std::string("- ") + name + ": N/A\n";
  return std::string("- ") + name + " mean / P50 / P95 / P99: " + fixed(d.mean * scale, 3) + " / " +
         fixed(d.median * scale, 3) + " / " + fixed(d.p95 * scale, 3) + " / " + fixed(d.p99 * scale, 3) + " " +
         unit + "\n";
}

bool needs_quoting(const std::string& s) {
  if (s.empty()) return true;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string("-_./:=,+@%").find(c) != std::string::npos))
      return true;
  return false;
}

}  // namespace

std::string summary_table_header() {
  return "| Case | Requests | Input TPS | TTFT P50 / P95 | TPOT P50 / P95 |\n"
         "|---|---:|---:|---:|---:|\n";
}

std::string summary_row(const std::string& case_name, int64_t sent, const MetricsSummary& m) {
  const std::string requests =
      m.completed == sent ? std::to_string(sent) : std::to_string(m.completed) + "/" + std::to_string(sent);
  const std::string input_tps = m.completed > 0 ? fixed(m.input_tps, 2) : "N/A";
  return "| " + case_name + " | " + requests + " | " + input_tps + " | " + p50_p95(m.ttft_s, 1.0, 3, "s") + " | " +
         p50_p95(m.tpot_s, 1e3, 2, "ms") + " |";
}

std::string RunReport::failure_message() const {
  if (passed()) return {};
  std::string msg = checks.failure_summary();
  if (metrics.completed == 0) msg += "no measured request completed, so there are no figures\n";
  return msg;
}

Json RunReport::summary_json() const {
  return Json{{"run_id", config.run_id},
              {"case", config.case_name},
              {"model", model},
              {"passed", passed()},
              {"requests", Json{{"measured", measured},
                                {"warmup", warmup},
                                {"completed", metrics.completed},
                                {"failed", measured - metrics.completed}}},
              {"metrics", metrics.to_json()},
              {"checks", checks.to_json()},
              {"row", summary_row(config.case_name, measured, metrics)},
              {"config", config.to_json()}};
}

std::string RunReport::summary_markdown() const {
  std::ostringstream o;
  o << "# pdserve bench: " << config.run_id << "\n\n"
    << summary_table_header() << summary_row(config.case_name, measured, metrics) << "\n\n";
  o << "- Result: " << (passed() ? "PASS, every check held" : "FAIL") << "\n";
  o << "- Endpoint: " << config.base_url << " (" << endpoint_name(config.endpoint) << ", "
    << (config.stream ? "streaming" : "non-streaming") << "), model " << (model.empty() ? "(none)" : model) << "\n";
  o << "- Requests: " << measured << " measured, " << metrics.completed << " completed, " << warmup
    << " warm-up (not in the figures)\n";
  if (metrics.completed > 0) {
    o << "- Duration " << fixed(metrics.duration_s, 3) << " s; input / output / total TPS " << fixed(metrics.input_tps, 2)
      << " / " << fixed(metrics.output_tps, 2) << " / " << fixed(metrics.total_tps, 2) << "\n";
    o << "- Concurrency (sum E2E / duration) " << fixed(metrics.concurrency, 2) << "; peak concurrent requests "
      << metrics.peak_concurrent << "\n";
    o << dist_line("TTFT", metrics.ttft_s, 1e3, "ms") << dist_line("TPOT", metrics.tpot_s, 1e3, "ms")
      << dist_line("ITL", metrics.itl_s, 1e3, "ms") << dist_line("E2E", metrics.e2e_s, 1e3, "ms");
  }
  for (const auto& c : checks.checks)
    o << "- Check " << c.name << ": " << (c.passed() ? "pass" : "FAIL") << " (" << c.checked - c.failed << "/"
      << c.checked << ")\n";
  if (!passed()) {
    o << "\n```\n" << failure_message() << "```\n";
  }
  return o.str();
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  bool redact_next = false;
  for (const auto& raw : argv) {
    std::string a = raw;
    if (redact_next) a = "<redacted>";
    redact_next = a == "--api-key";
    if (a.rfind("--api-key=", 0) == 0) a = "--api-key=<redacted>";
    if (!out.empty()) out += ' ';
    if (!needs_quoting(a)) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::vector<std::string> current_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t nul; (nul = all.find('\0', start)) != std::string::npos; start = nul + 1)
    argv.push_back(all.substr(start, nul - start));
  return argv;
}

}  // namespace pdserve::bench
