// scripts/run_pd_validation.sh and `pdserve bench` as a user runs them, against the fake
// server: a healthy backend passes and leaves every artifact; a short-output backend, an
// unreachable endpoint and a fatal line in a service log each fail with a message naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fake_server.h"
#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"

namespace pdserve::bench {
namespace {

namespace fs = std::filesystem;
using testing::FakeOpenAiServer;
using testing::FakeServerOptions;

struct Ran {
  int rc = -1;
  std::string output;
};

Ran run_shell(const std::string& cmd) {
  Ran r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string q(const std::string& s) { return "'" + s + "'"; }

class ValidationScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pds_bench_script_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "logs");
    std::ofstream(dir_ / "logs" / "prefill.log") << "INFO started\nINFO request done\n";
    std::ofstream(dir_ / "logs" / "decode.log") << "INFO ready\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Ran suite(const std::string& base_url, const std::string& mode, const std::string& run_id) {
    return run_shell("RUN_ID=" + run_id + " BASE_URL=" + base_url + " SCALE=1024 RESULTS_ROOT=" +
                     q((dir_ / "results").string()) + " PDSERVE_BIN=" + q(PDSERVE_BINARY) +
                     " LOG_DIRS=" + q((dir_ / "logs").string()) + " bash " +
                     q(std::string(PDSERVE_SOURCE_DIR) + "/scripts/run_pd_validation.sh") + " " + mode);
  }

  fs::path dir_;
};

TEST_F(ValidationScriptTest, HealthyBackendPassesAndWritesEveryArtifact) {
  FakeOpenAiServer server{FakeServerOptions{}};
  Ran r = suite(server.base_url(), "all", "ok-run");
  ASSERT_EQ(r.rc, 0) << r.output;
  const fs::path run = dir_ / "results" / "ok-run";
  const char* cases[] = {"smoke-64-8-c1", "smoke-1k-16-c1-nostream", "prefill-16k-1-c1",
                         "prefill-16k-1-c8", "decode-16k-512-c1", "decode-16k-512-c8"};
  for (const char* c : cases) {
    for (const char* f : {"requests.jsonl", "summary.json", "summary.md", "command.txt", "manifest.json",
                          "inputs.jsonl", "inputs.sha256", "plot.svg"})
      EXPECT_TRUE(fs::exists(run / c / f)) << c << "/" << f;
    Json s = Json::parse(*read_file((run / c / "summary.json").string()));
    EXPECT_EQ(s["passed"], true) << c;
  }
  // SCALE=1024: 16K -> 16 tokens, 512 -> 2 (TPOT stays defined), 40 requests at C8 -> 8.
  Json c8 = Json::parse(*read_file((run / "decode-16k-512-c8" / "summary.json").string()));
  EXPECT_EQ(c8["config"]["input_len"], 16);
  EXPECT_EQ(c8["config"]["output_len"], 2);
  EXPECT_EQ(c8["config"]["num_prompts"], 8);
  EXPECT_EQ(c8["config"]["concurrency"], 8);
  Json ns = Json::parse(*read_file((run / "smoke-1k-16-c1-nostream" / "summary.json").string()));
  EXPECT_EQ(ns["config"]["stream"], false);

  const std::string md = *read_file((run / "summary.md").string());
  EXPECT_NE(md.find("| Case | Requests | Input TPS | TTFT P50 / P95 | TPOT P50 / P95 |"), std::string::npos);
  EXPECT_NE(md.find("| 16 -> 2, C8 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 -> 2, C1, non-streaming smoke | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 16 -> 1, C8 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Log scan: 1 path(s)"), std::string::npos) << md;
  EXPECT_NE(md.find("clean"), std::string::npos) << md;
  EXPECT_NE(md.find("Result: PASS"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(run / "command.txt"));
  EXPECT_EQ(server.requests(), 1 + 1 + 1 + 8 + 1 + 8);
}

TEST_F(ValidationScriptTest, FatalLineInAServiceLogFailsNamingFileAndLine) {
  FakeOpenAiServer server{FakeServerOptions{}};
  std::ofstream(dir_ / "logs" / "prefill.log", std::ios::app) << "torch.OutOfMemoryError: CUDA out of memory\n";
  Ran r = suite(server.base_url(), "decode512", "fatal-run");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("log scan: 1 line(s) match"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prefill.log:3:torch.OutOfMemoryError: CUDA out of memory"), std::string::npos) << r.output;
  // The requests themselves passed; only the scan failed.
  Json s = Json::parse(*read_file((dir_ / "results" / "fatal-run" / "decode-16k-512-c1" / "summary.json").string()));
  EXPECT_EQ(s["passed"], true);
}

TEST_F(ValidationScriptTest, ShortOutputBackendFailsTheTokenCheck) {
  FakeServerOptions o;
  o.short_by = 1;
  FakeOpenAiServer server{o};
  Ran r = suite(server.base_url(), "decode512-c8", "short-run");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("check output_tokens failed for 8/8 requests"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("case 16 -> 2, C8: pdserve bench exited 1"), std::string::npos) << r.output;
  const std::string md = *read_file((dir_ / "results" / "short-run" / "summary.md").string());
  EXPECT_NE(md.find("Result: FAIL"), std::string::npos);
}

TEST_F(ValidationScriptTest, UnreachableEndpointStopsAtTheFirstCase) {
  int port;
  {
    FakeOpenAiServer gone{FakeServerOptions{}};
    port = gone.port();
  }
  Ran r = suite("http://127.0.0.1:" + std::to_string(port), "standard", "down-run");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("cannot connect to http://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("stopping the suite"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "results" / "down-run" / "smoke-1k-16-c1-nostream"));
}

TEST_F(ValidationScriptTest, BadArgumentsAreUsageErrors) {
  Ran r = run_shell("SCALE=0 bash " + q(std::string(PDSERVE_SOURCE_DIR) + "/scripts/run_pd_validation.sh"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("SCALE must be an integer >= 1"), std::string::npos) << r.output;
  r = run_shell("bash " + q(std::string(PDSERVE_SOURCE_DIR) + "/scripts/run_pd_validation.sh") + " decode1024");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("unknown mode 'decode1024'"), std::string::npos) << r.output;
}

TEST(BenchCli, ExitCodesAndMessages) {
  Ran r = run_shell(q(PDSERVE_BINARY) + " bench --num-prompts 0 --out /tmp/pds_never");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("--num-prompts must be at least 1"), std::string::npos) << r.output;
  r = run_shell(q(PDSERVE_BINARY) + " bench --dataset sharegpt --out /tmp/pds_never");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("unknown dataset 'sharegpt'"), std::string::npos) << r.output;
}

TEST(ValidationScript, ShellcheckClean) {
  if (run_shell("command -v shellcheck").rc != 0) GTEST_SKIP() << "shellcheck is not installed";
  Ran r = run_shell("shellcheck " + q(std::string(PDSERVE_SOURCE_DIR) + "/scripts/run_pd_validation.sh"));
  EXPECT_EQ(r.rc, 0) << r.output;
}

}  // namespace
}  // namespace pdserve::bench
