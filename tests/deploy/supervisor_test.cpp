// The supervisor with plain commands: exits and signals are reported, stop_all leaves no
// process behind (grandchildren included), a child that ignores SIGTERM is killed after the grace.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pdserve/deploy/supervisor.h"

namespace pdserve::deploy {
namespace {

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

// Polls until `pid` (not our child) is gone.
bool gone_within(pid_t pid, double s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (std::chrono::steady_clock::now() < end) {
    if (!alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !alive(pid);
}

std::string tmp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pds-sup-" + std::to_string(getpid()) + "-" + name)).string();
}

pid_t read_pid(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(path);
    pid_t p = 0;
    if (in >> p && p > 0) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

TEST(Supervisor, ReportsChildExitWithStatusAndLog) {
  Supervisor s;
  const std::string log = tmp_file("exit.log");
  ASSERT_TRUE(s.spawn({"quits", {"sh", "-c", "echo about to fail; exit 3"}, {}, log}).is_ok());
  auto ev = s.wait(10);
  ASSERT_EQ(ev.kind, Supervisor::Event::kChildExited);
  EXPECT_EQ(ev.exit.name, "quits");
  EXPECT_EQ(ev.exit.describe(), "exited with status 3");
  EXPECT_FALSE(ev.exit.clean());
  EXPECT_EQ(tail_lines(log, 5), "about to fail\n");
  EXPECT_EQ(s.running(), 0u);
  std::filesystem::remove(log);
}

TEST(Supervisor, PassesEnvironment) {
  Supervisor s;
  const std::string log = tmp_file("env.log");
  ASSERT_TRUE(s.spawn({"env", {"sh", "-c", "echo $PDS_TEST_VAR"}, {"PDS_TEST_VAR=hello"}, log}).is_ok());
  auto ev = s.wait(10);
  ASSERT_EQ(ev.kind, Supervisor::Event::kChildExited);
  EXPECT_TRUE(ev.exit.clean());
  EXPECT_EQ(tail_lines(log, 1), "hello\n");
  std::filesystem::remove(log);
}

TEST(Supervisor, ReportsStopSignal) {
  Supervisor s;
  ASSERT_TRUE(s.spawn({"sleeper", {"sleep", "30"}, {}, ""}).is_ok());
  kill(getpid(), SIGTERM);  // blocked by the supervisor, so it is queued, not fatal
  auto ev = s.wait(10);
  ASSERT_EQ(ev.kind, Supervisor::Event::kSignal);
  EXPECT_EQ(ev.signal, SIGTERM);
  auto ends = s.stop_all(5);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_TRUE(ends[0].clean()) << ends[0].describe();
}

TEST(Supervisor, TimeoutWithNothingHappening) {
  Supervisor s;
  ASSERT_TRUE(s.spawn({"sleeper", {"sleep", "30"}, {}, ""}).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.wait(0.3).kind, Supervisor::Event::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
}

TEST(Supervisor, StopAllKillsGrandchildrenAndStubbornChildren) {
  const std::string pidfile = tmp_file("grandchild.pid");
  pid_t stubborn, parent;
  pid_t grandchild;
  {
    Supervisor s;
    // A shell that ignores SIGTERM; and one whose background grandchild would outlive it.
    auto a = s.spawn({"stubborn", {"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}, {}, ""});
    auto b = s.spawn({"parent", {"sh", "-c", "sleep 60 & echo $! > " + pidfile + "; wait"}, {}, ""});
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    stubborn = *a;
    parent = *b;
    grandchild = read_pid(pidfile);
    ASSERT_GT(grandchild, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the trap be set
    auto t0 = std::chrono::steady_clock::now();
    auto ends = s.stop_all(0.5);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(450));  // waited the grace
    ASSERT_EQ(ends.size(), 2u);
    for (const auto& e : ends) {
      if (e.name == "stubborn") EXPECT_EQ(e.describe(), "killed by signal 9 (Killed)");
      else EXPECT_TRUE(e.clean()) << e.describe();
    }
  }
  EXPECT_FALSE(alive(stubborn));
  EXPECT_FALSE(alive(parent));
  EXPECT_TRUE(gone_within(grandchild, 5)) << "grandchild " << grandchild << " survived";
  std::filesystem::remove(pidfile);
}

TEST(Supervisor, ChildDiesWhenSupervisorIsKilled) {
  // A supervisor process that is SIGKILLed cannot clean up; PR_SET_PDEATHSIG must.
  const std::string pidfile = tmp_file("orphan.pid");
  pid_t sup_pid = fork();
  ASSERT_GE(sup_pid, 0);
  if (sup_pid == 0) {
    Supervisor s;
    auto p = s.spawn({"child", {"sleep", "60"}, {}, ""});
    std::ofstream(pidfile) << (p.is_ok() ? *p : -1) << std::endl;
    pause();
    _exit(0);
  }
  pid_t child = read_pid(pidfile);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(alive(child));
  kill(sup_pid, SIGKILL);
  waitpid(sup_pid, nullptr, 0);
  EXPECT_TRUE(gone_within(child, 5)) << "child " << child << " outlived its SIGKILLed supervisor";
  std::filesystem::remove(pidfile);
}

TEST(Supervisor, RefusesMissingExecutable) {
  Supervisor s;
  auto r = s.spawn({"ghost", {"/nonexistent/pdserve", "prefill"}, {}, ""});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "ghost: /nonexistent/pdserve is not an executable file");
}

}  // namespace
}  // namespace pdserve::deploy
