// The checks catch each kind of wrong answer, and the report text matches the seed's table.
#include <gtest/gtest.h>

#include "pdserve/bench/checks.h"
#include "pdserve/bench/report.h"
#include "pdserve/bench/svg_plot.h"

namespace pdserve::bench {
namespace {

RequestRecord good(int64_t index, int64_t in, int64_t out) {
  RequestRecord r;
  r.index = index;
  r.input_len = in;
  r.expected_output_len = out;
  r.completed = true;
  r.saw_done = true;
  r.usage = Usage{in, out};
  r.token_chunks = out;
  return r;
}

const CheckResult& find(const CheckReport& rep, const std::string& name) {
  for (const auto& c : rep.checks)
    if (c.name == name) return c;
  throw std::runtime_error("no check " + name);
}

TEST(Checks, AllGoodPasses) {
  std::vector<RequestRecord> recs = {good(0, 64, 8), good(1, 64, 8)};
  CheckReport rep = run_checks(recs);
  EXPECT_TRUE(rep.all_passed());
  EXPECT_EQ(find(rep, "output_tokens").checked, 2);
  EXPECT_EQ(rep.failure_summary(), "");
}

TEST(Checks, EachFaultFailsItsOwnCheck) {
  std::vector<RequestRecord> recs = {good(0, 64, 8), good(1, 64, 8), good(2, 64, 8), good(3, 64, 8), good(4, 64, 8),
                                     good(5, 64, 8)};
  recs[1].usage->completion_tokens = 5;  // short output, honest usage
  recs[1].token_chunks = 5;
  recs[2].token_chunks = 6;  // usage claims 8 but only 6 streamed
  recs[3].usage.reset();
  recs[4].usage->prompt_tokens = 60;  // server truncated the prompt
  recs[5].completed = false;
  recs[5].error = "HTTP 500: injected";
  CheckReport rep = run_checks(recs, ChunkCheck::kExact);
  EXPECT_FALSE(rep.all_passed());
  EXPECT_EQ(find(rep, "output_tokens").failed, 1);
  EXPECT_EQ(find(rep, "output_tokens").failures[0], "request 1: completion_tokens 5, expected 8");
  EXPECT_EQ(find(rep, "streamed_tokens").failed, 1);
  EXPECT_EQ(find(rep, "streamed_tokens").failures[0], "request 2: streamed 6 token chunks, usage says 8");
  EXPECT_EQ(find(rep, "usage_reported").failed, 1);
  EXPECT_EQ(find(rep, "prompt_tokens").failed, 1);
  EXPECT_EQ(find(rep, "completed").failed, 1);
  EXPECT_EQ(find(rep, "completed").failures[0], "request 5: HTTP 500: injected");
  EXPECT_EQ(find(rep, "completed").checked, 6);  // failures are counted, never dropped
  EXPECT_EQ(recs[1].check_failures, (std::vector<std::string>{"output_tokens: completion_tokens 5, expected 8"}));
  const std::string msg = rep.failure_summary();
  EXPECT_NE(msg.find("check output_tokens failed for 1/4 requests"), std::string::npos) << msg;
  EXPECT_NE(msg.find("check completed failed for 1/6 requests"), std::string::npos) << msg;
}

TEST(Checks, AtMostAllowsMergedChunksButNeverMoreChunksThanTokens) {
  std::vector<RequestRecord> recs = {good(0, 8, 8), good(1, 8, 8)};
  recs[0].token_chunks = 5;  // tokens merged into fewer chunks
  recs[1].token_chunks = 9;  // more chunks than the server says it generated
  CheckReport rep = run_checks(recs, ChunkCheck::kAtMost);
  EXPECT_EQ(find(rep, "streamed_tokens").failed, 1);
  EXPECT_EQ(find(rep, "streamed_tokens").failures[0], "request 1: streamed 9 token chunks, usage says 8");
}

TEST(Checks, NonStreamingSkipsTheStreamCountAndWarmupIsNamed) {
  std::vector<RequestRecord> recs = {good(0, 16, 4)};
  recs[0].stream = false;
  recs[0].token_chunks = 0;
  recs[0].warmup = true;
  recs[0].usage->completion_tokens = 3;
  CheckReport rep = run_checks(recs);
  EXPECT_EQ(find(rep, "streamed_tokens").checked, 0);
  EXPECT_EQ(find(rep, "output_tokens").failures[0], "warm-up request 0: completion_tokens 3, expected 4");
}

MetricsSummary seed_like() {
  MetricsSummary m;
  m.completed = 1;
  m.input_tps = 42.1849;
  m.ttft_s = Distribution{1, 1.217, 1.217, 1.217, 1.217, 1.217, 1.217};
  m.tpot_s = Distribution{1, 0.03327, 0.03327, 0.03327, 0.03327, 0.03327, 0.03327};
  return m;
}

TEST(Report, RowInTheSeedsFormat) {
  EXPECT_EQ(summary_table_header(),
            "| Case | Requests | Input TPS | TTFT P50 / P95 | TPOT P50 / P95 |\n|---|---:|---:|---:|---:|\n");
  EXPECT_EQ(summary_row("64 -> 8, C1", 1, seed_like()), "| 64 -> 8, C1 | 1 | 42.18 | 1.217 / 1.217 s | 33.27 / 33.27 ms |");
  MetricsSummary no_tpot = seed_like();
  no_tpot.tpot_s = Distribution{};
  EXPECT_EQ(summary_row("16K -> 1, C1", 1, no_tpot), "| 16K -> 1, C1 | 1 | 42.18 | 1.217 / 1.217 s | N/A |");
  MetricsSummary partial = seed_like();
  partial.completed = 38;
  EXPECT_NE(summary_row("x", 40, partial).find("| 38/40 |"), std::string::npos);
  EXPECT_EQ(summary_row("x", 4, MetricsSummary{}), "| x | 0/4 | N/A | N/A | N/A |");
}

TEST(Report, FailedRunSaysWhichCheck) {
  RunReport r;
  r.config.run_id = "r1";
  r.config.case_name = "c";
  r.measured = 1;
  std::vector<RequestRecord> recs = {good(0, 4, 4)};
  recs[0].usage->completion_tokens = 2;
  r.checks = run_checks(recs);
  r.metrics = seed_like();
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.failure_message().find("check output_tokens failed"), std::string::npos);
  const std::string md = r.summary_markdown();
  EXPECT_NE(md.find("- Result: FAIL"), std::string::npos);
  EXPECT_NE(md.find("- Check output_tokens: FAIL (0/1)"), std::string::npos);
  EXPECT_EQ(r.summary_json()["passed"], false);
  RunReport none;
  none.measured = 3;
  EXPECT_FALSE(none.passed());  // nothing measured is never a pass
  EXPECT_NE(none.failure_message().find("no measured request completed"), std::string::npos);
}

TEST(Report, CommandLineQuotedAndKeyRedacted) {
  EXPECT_EQ(shell_join({"pdserve", "bench", "--case-name", "64 -> 8, C1", "--api-key", "sk-1", "--api-key=sk-2"}),
            "pdserve bench --case-name '64 -> 8, C1' --api-key '<redacted>' '--api-key=<redacted>'");
  EXPECT_EQ(shell_join({"a", "it's"}), "a 'it'\\''s'");
}

TEST(Plot, DrawsBothDistributionsOrSaysNA) {
  std::string svg = render_cdf_svg("run <1>", {{"TTFT", "s", {0.1, 0.2, 0.4}}, {"TPOT", "ms", {}}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("run &lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("TTFT CDF (s), n=3"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("P95 0.38"), std::string::npos);  // rank 1.9 of {0.1, 0.2, 0.4}
  EXPECT_NE(svg.find("N/A (no samples)"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::bench
