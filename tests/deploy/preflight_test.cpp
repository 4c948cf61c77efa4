// Preflight on this node: a missing model shard, a busy port and a page size mismatch are
// each found and named in one line; a sound one-host topology passes.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "pdserve/deploy/preflight.h"

namespace pdserve::deploy {
namespace {

namespace fs = std::filesystem;

// A listening socket on 127.0.0.1 (port 0: any); closes itself.
struct Listener {
  int fd = -1, port = 0;
  explicit Listener(int want = 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(want));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) return;
    socklen_t n = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
};

class Preflight : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("pds-preflight-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const std::string cmd = std::string(PDSERVE_BINARY) + " make-model --preset tiny-k3 --out " + (dir_ / "m").string() +
                            " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  Topology topo(const std::string& model) {
    Topology t = one_host_topology(model);
    // Ports nobody uses: ask the kernel, then let go.
    Listener a, b, c, d;
    t.prefill.port = a.port;
    t.decode.port = b.port;
    t.bootstrap_port = c.port;
    t.router_port = d.port;
    return t;
  }
  static fs::path dir_;
};
fs::path Preflight::dir_;

TEST_F(Preflight, SoundOneHostPasses) {
  auto r = run_preflight(topo((dir_ / "m").string()), {});
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  EXPECT_GE(r.checks, 5);
}

TEST_F(Preflight, FindsMissingShard) {
  const fs::path broken = dir_ / "broken";
  fs::copy(dir_ / "m", broken);
  fs::remove(broken / "model-00002-of-00003.safetensors");
  fs::remove(broken / "model-00003-of-00003.safetensors");
  auto r = run_preflight(topo(broken.string()), {});
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_EQ(r.problems[0], "model shard " + (broken / "model-00002-of-00003.safetensors").string() +
                               " is missing (named by model.safetensors.index.json)");
  EXPECT_NE(r.problems[1].find("model-00003-of-00003.safetensors is missing"), std::string::npos);
}

TEST_F(Preflight, FindsTruncatedShard) {
  const fs::path cut = dir_ / "cut";
  fs::copy(dir_ / "m", cut);
  fs::resize_file(cut / "model-00001-of-00003.safetensors", 4096);
  auto r = run_preflight(topo(cut.string()), {});
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("model-00001-of-00003.safetensors"), std::string::npos) << r.problems[0];
}

TEST_F(Preflight, FindsBusyPort) {
  Topology t = topo((dir_ / "m").string());
  Listener busy;
  t.decode.port = busy.port;
  auto r = run_preflight(t, {});
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0], "port " + std::to_string(busy.port) + " (DECODE_PORT) on 127.0.0.1 is already in use; `ss -ltnp 'sport = :" +
                               std::to_string(busy.port) + "'` shows by what");
}

TEST_F(Preflight, PortsOfOtherNodesAreNotCheckedHere) {
  Topology t = topo((dir_ / "m").string());
  Listener busy;
  t.decode.port = busy.port;
  t.decode.nodes = {"decode-node-elsewhere"};
  EXPECT_TRUE(run_preflight(t, {}).problems.empty());
  EXPECT_EQ(run_preflight(t, {.nodes = {}, .all_nodes = true}).problems.size(), 1u);
}

TEST_F(Preflight, AHostOutsideTheTopologySaysItCheckedOnlyTheTopology) {
  Topology t = topo((dir_ / "m").string());
  t.prefill.nodes = {"prefill-node-elsewhere"};
  t.decode.nodes = {"decode-node-elsewhere"};
  t.router_node = "router-node-elsewhere";
  auto r = run_preflight(t, {.nodes = {"this-node"}, .all_nodes = false});
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("no process of this topology runs on this host (none of its nodes is this-node)"),
            std::string::npos) << r.notes[0];
  // A node of the topology gets its checks and no such note.
  r = run_preflight(t, {.nodes = {"decode-node-elsewhere"}, .all_nodes = false});
  for (const auto& n : r.notes) EXPECT_EQ(n.find("no process of this topology"), std::string::npos) << n;
}

TEST_F(Preflight, FindsPageSizeMismatchWithTheOtherProblems) {
  Topology t = topo((dir_ / "m").string());
  t.source = "x.env";
  t.decode.page_size = 32;
  Listener busy;
  t.router_port = busy.port;
  auto r = run_preflight(t, {});
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_EQ(r.problems[0], "x.env: page size mismatch: PREFILL_PAGE_SIZE=64 but DECODE_PAGE_SIZE=32 (decode refuses "
                           "every transfer from a prefill with another page size)");
  EXPECT_NE(r.problems[1].find("(ROUTER_PORT)"), std::string::npos);
}

TEST_F(Preflight, ReportsRdmaNicsAndNamesAMissingOne) {
  Topology t = topo((dir_ / "m").string());
  auto r = run_preflight(t, {});
  ASSERT_FALSE(r.notes.empty());
  EXPECT_EQ(r.notes.back().rfind("rdma: RDMA_NICS is empty (TCP transfer); ", 0), 0u) << r.notes.back();
  t.rdma_nics = {"pdsnone_0", "pdsnone_1:2"};
  r = run_preflight(t, {});
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_EQ(r.problems[0].rfind("RDMA NIC pdsnone_0:1 not found (", 0), 0u) << r.problems[0];
  EXPECT_EQ(r.problems[1].rfind("RDMA NIC pdsnone_1:2 not found (", 0), 0u) << r.problems[1];
  // Unusable NICs are problems, not notes; the one note says what the roles will do about it.
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0].rfind("rdma: the roles will transfer over tcp (auto: RDMA NIC pdsnone_0:1 not found", 0), 0u) << r.notes[0];
  t.transfer_backend = "rdma";  // asked for: no note, the roles would refuse to start
  r = run_preflight(t, {});
  EXPECT_EQ(r.problems.size(), 2u);
  EXPECT_TRUE(r.notes.empty());
  PreflightReport bad;
  check_rdma_nics({"mlx5_0", "mlx5_0"}, &bad);
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_NE(bad.problems[0].find("listed twice"), std::string::npos);
}

TEST_F(Preflight, MissingModelDirectory) {
  auto r = run_preflight(topo("/nonexistent/model"), {});
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0], "model directory /nonexistent/model does not exist");
}

}  // namespace
}  // namespace pdserve::deploy
