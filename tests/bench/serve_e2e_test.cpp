// The validation suite at small scale against a live `pdserve serve` on the tiny model:
// it must pass its own checks and leave every artifact. Skips when the binary has no serve.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"

extern char** environ;

namespace pdserve::bench {
namespace {

namespace fs = std::filesystem;

int shell(const std::string& cmd, std::string* output) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A child `pdserve serve` on a free port, stopped with SIGTERM when the test ends.
class ServeProcess {
 public:
  ServeProcess(const fs::path& model, const fs::path& dir) : out_(dir / "serve.out"), log_(dir / "serve.log") {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {PDSERVE_BINARY, "serve", "--model", model.string(), "--port", "0"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, PDSERVE_BINARY, &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ServeProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  // "http://127.0.0.1:PORT" once the server prints its listening line; "" if it never does.
  std::string wait_for_url(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::regex listening(R"(listening on (http://[^\s]+))");
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(out_);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::smatch m;
      if (std::regex_search(text, m, listening)) return m[1];
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return {};
  }
  const fs::path& log() const { return log_; }

 private:
  fs::path out_, log_;
  pid_t pid_ = -1;
};

TEST(ServeEndToEnd, ValidationSuiteAtSmallScaleOnTheTinyModel) {
  std::string help;
  if (shell(std::string("'") + PDSERVE_BINARY + "' serve --help", &help) != 0)
    GTEST_SKIP() << "this pdserve has no serve command yet";
  const fs::path dir = fs::temp_directory_path() / ("pds_bench_e2e_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string out;
  ASSERT_EQ(shell(std::string("'") + PDSERVE_BINARY + "' make-model --preset tiny-k3 --out '" + (dir / "model").string() + "'", &out), 0) << out;

  ServeProcess serve(dir / "model", dir);
  const std::string url = serve.wait_for_url(std::chrono::seconds(120));
  ASSERT_FALSE(url.empty()) << *read_file(serve.log().string());

  // SCALE=128: 16K -> 128 input tokens, 512 -> 4 output tokens, 40 requests at C8 -> 8.
  out.clear();
  const int rc = shell("RUN_ID=e2e BASE_URL=" + url + " SCALE=128 RESULTS_ROOT='" + (dir / "results").string() +
                           "' PDSERVE_BIN='" + PDSERVE_BINARY + "' LOG_DIRS='" + serve.log().string() + "' bash '" +
                           PDSERVE_SOURCE_DIR + "/scripts/run_pd_validation.sh' all",
                       &out);
  EXPECT_EQ(rc, 0) << out;
  const fs::path run = dir / "results" / "e2e";
  for (const char* c : {"smoke-64-8-c1", "smoke-1k-16-c1-nostream", "prefill-16k-1-c1", "prefill-16k-1-c8",
                        "decode-16k-512-c1", "decode-16k-512-c8"}) {
    for (const char* f : {"requests.jsonl", "summary.json", "summary.md", "command.txt", "manifest.json",
                          "inputs.jsonl", "inputs.sha256", "plot.svg"})
      EXPECT_TRUE(fs::exists(run / c / f)) << c << "/" << f;
    auto summary = read_file((run / c / "summary.json").string());
    ASSERT_TRUE(summary.is_ok()) << c;
    Json s = Json::parse(*summary);
    EXPECT_EQ(s["passed"], true) << c << "\n" << out;
    EXPECT_EQ(s["requests"]["failed"], 0) << c;
  }
  const std::string md = *read_file((run / "summary.md").string());
  EXPECT_NE(md.find("| 128 -> 4, C8 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Result: PASS"), std::string::npos) << md;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pdserve::bench
