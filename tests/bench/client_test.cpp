// run_bench against an in-process fake OpenAI server: healthy runs pass and write every
// artifact; each deliberately broken backend fails the check that names its fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_server.h"
#include "pdserve/bench/bench.h"
#include "pdserve/core/sha256.h"
#include "pdserve/core/file_util.h"

namespace pdserve::bench {
namespace {

namespace fs = std::filesystem;
using testing::FakeOpenAiServer;
using testing::FakeServerOptions;

FakeServerOptions options(void (*set)(FakeServerOptions&)) {
  FakeServerOptions o;
  set(o);
  return o;
}

class BenchClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pds_bench_client_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  BenchConfig config(const FakeOpenAiServer& s, int64_t n, int64_t c, int64_t in, int64_t out) {
    BenchConfig cfg;
    cfg.base_url = s.base_url();
    cfg.num_prompts = n;
    cfg.concurrency = c;
    cfg.input_len = in;
    cfg.output_len = out;
    cfg.out_dir = (dir_ / "run").string();
    return cfg;
  }

  Result<BenchOutcome> run(const BenchConfig& cfg) {
    std::ostringstream log;
    return run_bench(cfg, {"pdserve", "bench", "--out", cfg.out_dir}, log);
  }

  std::vector<Json> requests_jsonl(const BenchConfig& cfg) {
    std::ifstream in(fs::path(cfg.out_dir) / "requests.jsonl");
    std::vector<Json> out;
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
    return out;
  }

  fs::path dir_;
};

TEST_F(BenchClientTest, StreamingExactCountsPassAndWriteEveryArtifact) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.token_delay_ms = 2; }));
  BenchConfig cfg = config(server, 6, 3, 16, 5);
  cfg.chunk_check = ChunkCheck::kExact;
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const RunReport& r = out->report;
  EXPECT_TRUE(r.passed()) << r.failure_message();
  EXPECT_EQ(r.model, "fake-model");  // taken from /v1/models
  EXPECT_EQ(r.metrics.completed, 6);
  EXPECT_EQ(r.metrics.input_tokens, 6 * 16);
  EXPECT_EQ(r.metrics.output_tokens, 6 * 5);
  EXPECT_EQ(r.metrics.tpot_s.count, 6);
  EXPECT_EQ(r.metrics.itl_s.count, 6 * 4);  // 5 token chunks -> 4 gaps each
  EXPECT_LE(server.max_in_flight(), 3);
  EXPECT_EQ(server.requests(), 6);

  Json sent = Json::parse(server.last_body());
  EXPECT_EQ(sent["prompt"].size(), 16u);
  EXPECT_EQ(sent["ignore_eos"], true);
  EXPECT_EQ(sent["max_tokens"], 5);
  EXPECT_EQ(sent["model"], "fake-model");

  for (const char* f : {"requests.jsonl", "summary.json", "summary.md", "command.txt", "manifest.json",
                        "inputs.jsonl", "inputs.sha256", "plot.svg"})
    EXPECT_TRUE(fs::exists(fs::path(cfg.out_dir) / f)) << f;
  auto reqs = requests_jsonl(cfg);
  ASSERT_EQ(reqs.size(), 6u);
  for (const auto& j : reqs) {
    EXPECT_EQ(j["token_chunks"], 5);
    EXPECT_EQ(j["completion_tokens"], 5);
    EXPECT_EQ(j["itl_ms"].size(), 4u);
    EXPECT_TRUE(j.contains("tpot_ms"));
  }
  // inputs.sha256 is what `sha256sum -c` expects, over the exact bodies sent.
  auto inputs = read_file((fs::path(cfg.out_dir) / "inputs.jsonl").string());
  auto sums = read_file((fs::path(cfg.out_dir) / "inputs.sha256").string());
  EXPECT_EQ(*sums, sha256_hex(*inputs) + "  inputs.jsonl\n");
  EXPECT_EQ(*read_file((fs::path(cfg.out_dir) / "command.txt").string()), "pdserve bench --out " + cfg.out_dir + "\n");
  Json summary = Json::parse(*read_file((fs::path(cfg.out_dir) / "summary.json").string()));
  EXPECT_EQ(summary["passed"], true);
  EXPECT_EQ(summary["requests"]["completed"], 6);
  Json manifest = Json::parse(*read_file((fs::path(cfg.out_dir) / "manifest.json").string()));
  EXPECT_TRUE(manifest["environment"].contains("hostname"));
  EXPECT_TRUE(manifest["environment"]["gpus"].is_array());
  EXPECT_EQ(manifest["config"]["num_prompts"], 6);
  std::string md = *read_file((fs::path(cfg.out_dir) / "summary.md").string());
  EXPECT_NE(md.find("| 16 -> 5, C3 | 6 |"), std::string::npos) << md;
}

TEST_F(BenchClientTest, NonStreamingHasTtftButNoTpot) {
  FakeOpenAiServer server(FakeServerOptions{});
  BenchConfig cfg = config(server, 2, 1, 32, 4);
  cfg.stream = false;
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_TRUE(out->report.passed()) << out->report.failure_message();
  EXPECT_EQ(out->report.metrics.ttft_s.count, 2);
  EXPECT_EQ(out->report.metrics.tpot_s.count, 0);
  EXPECT_NE(summary_row(cfg.resolved().case_name, 2, out->report.metrics).find("| N/A |"), std::string::npos);
  EXPECT_EQ(Json::parse(server.last_body())["stream"], false);
}

TEST_F(BenchClientTest, ChatEndpointWithJsonlTextPrompts) {
  FakeOpenAiServer server(FakeServerOptions{});
  const std::string path = (dir_ / "speed.jsonl").string();
  std::ofstream(path) << "{\"prompt\": \"one two three\", \"category\": \"qa\"}\n"
                         "{\"turns\": [\"four five\"], \"category\": \"coding\", \"output_len\": 3}\n";
  BenchConfig cfg = config(server, 4, 2, 0, 6);
  cfg.dataset = DatasetKind::kJsonl;
  cfg.dataset_path = path;
  cfg.endpoint = EndpointKind::kChat;
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_TRUE(out->report.passed()) << out->report.failure_message();
  auto reqs = requests_jsonl(cfg);
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[1]["category"], "coding");
  EXPECT_EQ(reqs[1]["completion_tokens"], 3);  // the line's own output_len
  EXPECT_EQ(reqs[2]["category"], "qa");         // cycled
  EXPECT_EQ(out->report.metrics.input_tokens, 2 * 3 + 2 * 2);  // the server's word counts
}

TEST_F(BenchClientTest, ShortOutputBackendFailsTheOutputCheck) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.short_by = 2; }));
  auto out = run(config(server, 4, 2, 8, 6));
  ASSERT_TRUE(out.is_ok());
  EXPECT_FALSE(out->report.passed());
  const std::string msg = out->report.failure_message();
  EXPECT_NE(msg.find("check output_tokens failed for 4/4 requests"), std::string::npos) << msg;
  EXPECT_NE(msg.find("completion_tokens 4, expected 6"), std::string::npos) << msg;
}

TEST_F(BenchClientTest, UsageClaimingMoreThanStreamedFailsTheExactCheck) {
  // Streams 3 tokens but claims max_tokens = 4: only one-chunk-per-token can tell.
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.short_by = 1; o.completion_tokens_delta = 1; }));
  BenchConfig cfg = config(server, 2, 1, 8, 4);
  cfg.chunk_check = ChunkCheck::kExact;
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  const std::string msg = out->report.failure_message();
  EXPECT_NE(msg.find("check streamed_tokens failed for 2/2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("streamed 3 token chunks, usage says 4"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("check output_tokens"), std::string::npos) << msg;  // usage itself looks right
}

TEST_F(BenchClientTest, MergedChunksPassAtMostButNotExact) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.merge_every = 3; }));
  BenchConfig cfg = config(server, 2, 1, 8, 7);  // chunks of 3, 3, 1 tokens
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  EXPECT_TRUE(out->report.passed()) << out->report.failure_message();
  EXPECT_EQ(out->report.metrics.output_tokens, 14);  // from usage, not from the chunk count
  EXPECT_EQ(out->report.metrics.itl_s.count, 2 * 2);
  cfg.chunk_check = ChunkCheck::kExact;
  cfg.overwrite = true;
  out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->report.failure_message().find("streamed 3 token chunks, usage says 7"), std::string::npos);
}

TEST_F(BenchClientTest, MoreChunksThanUsageFailsEvenAtMost) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.completion_tokens_delta = -1; }));
  auto out = run(config(server, 1, 1, 8, 4));
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->report.failure_message().find("streamed 4 token chunks, usage says 3"), std::string::npos)
      << out->report.failure_message();
}

TEST_F(BenchClientTest, ErroringBackendCountsEveryFailure) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.fail_every = 2; }));
  BenchConfig cfg = config(server, 6, 2, 8, 3);
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  const RunReport& r = out->report;
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.metrics.completed, 3);
  EXPECT_NE(r.failure_message().find("check completed failed for 3/6 requests"), std::string::npos);
  EXPECT_NE(r.failure_message().find("HTTP 500"), std::string::npos);
  auto reqs = requests_jsonl(cfg);
  ASSERT_EQ(reqs.size(), 6u);  // failed requests are listed, not dropped
  int failed = 0;
  for (const auto& j : reqs) failed += j["completed"] == false;
  EXPECT_EQ(failed, 3);
  EXPECT_NE(summary_row("x", 6, r.metrics).find("| 3/6 |"), std::string::npos);
}

TEST_F(BenchClientTest, StreamWithoutDoneOrUsageFails) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.omit_done = true; }));
  auto out = run(config(server, 1, 1, 8, 2));
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->report.failure_message().find("stream ended without 'data: [DONE]'"), std::string::npos);
  FakeOpenAiServer no_usage(options([](FakeServerOptions& o) { o.omit_usage = true; }));
  BenchConfig cfg = config(no_usage, 1, 1, 8, 2);
  cfg.out_dir += "2";
  out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->report.failure_message().find("check usage_reported failed"), std::string::npos);
}

TEST_F(BenchClientTest, TruncatedPromptFailsThePromptCheck) {
  FakeOpenAiServer server(options([](FakeServerOptions& o) { o.prompt_tokens_delta = -1; }));
  auto out = run(config(server, 1, 1, 8, 2));
  ASSERT_TRUE(out.is_ok());
  EXPECT_NE(out->report.failure_message().find("prompt_tokens 7, sent 8"), std::string::npos);
}

TEST_F(BenchClientTest, WarmupIsSentButLeftOutOfTheFigures) {
  FakeOpenAiServer server(FakeServerOptions{});
  BenchConfig cfg = config(server, 3, 2, 8, 2);
  cfg.warmup = 2;
  cfg.request_rate = 200;  // Poisson arrivals path
  auto out = run(cfg);
  ASSERT_TRUE(out.is_ok());
  EXPECT_TRUE(out->report.passed()) << out->report.failure_message();
  EXPECT_EQ(server.requests(), 5);
  EXPECT_EQ(out->report.metrics.completed, 3);
  auto reqs = requests_jsonl(cfg);
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0]["warmup"], true);
  EXPECT_EQ(reqs[4]["warmup"], false);
  EXPECT_TRUE(fs::exists(fs::path(cfg.out_dir) / "warmup_inputs.jsonl"));
}

TEST_F(BenchClientTest, UnreachableEndpointIsAClearErrorBeforeAnyFile) {
  int port;
  {
    FakeOpenAiServer gone(FakeServerOptions{});
    port = gone.port();
  }  // stopped: nothing listens there now
  BenchConfig cfg;
  cfg.base_url = "http://127.0.0.1:" + std::to_string(port);
  cfg.connect_timeout_s = 2;
  cfg.out_dir = (dir_ / "never").string();
  auto out = run(cfg);
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(out.status().message().find("cannot connect to " + cfg.base_url), std::string::npos)
      << out.status().message();
  EXPECT_FALSE(fs::exists(cfg.out_dir));
}

TEST_F(BenchClientTest, ZeroRequestsAndBadDatasetsAreErrorsWithoutTraffic) {
  FakeOpenAiServer server(FakeServerOptions{});
  BenchConfig cfg = config(server, 0, 1, 8, 2);
  auto out = run(cfg);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("--num-prompts must be at least 1"), std::string::npos);

  const std::string path = (dir_ / "bad.jsonl").string();
  std::ofstream(path) << "{\"prompt\": \"ok\"}\n{\"prompt\": oops}\n";
  cfg = config(server, 2, 1, 8, 2);
  cfg.dataset = DatasetKind::kJsonl;
  cfg.dataset_path = path;
  out = run(cfg);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find(path + ":2: not valid JSON"), std::string::npos) << out.status().message();
  EXPECT_EQ(server.requests(), 0);
}

TEST_F(BenchClientTest, RefusesToOverwriteARun) {
  FakeOpenAiServer server(FakeServerOptions{});
  BenchConfig cfg = config(server, 1, 1, 4, 2);
  ASSERT_TRUE(run(cfg).is_ok());
  auto again = run(cfg);
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("already holds a run"), std::string::npos);
  cfg.overwrite = true;
  EXPECT_TRUE(run(cfg).is_ok());
}

}  // namespace
}  // namespace pdserve::bench
