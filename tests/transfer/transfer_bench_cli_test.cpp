// `pdserve transfer-bench` as an operator runs it, over loopback TCP with a small request:
// it moves exactly the bytes the transfer plan's formula gives, checks they landed, and
// refuses rdma plainly where the RDMA data path cannot run.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "cli_test_util.h"
#include "pdserve/disagg/transfer_plan.h"

namespace {

std::pair<int, std::string> run(const std::string& args) { return pdserve::testing::run_pdserve("transfer-bench " + args); }

TEST(TransferBench, TcpMovesTheFormulasBytesPerRequest) {
  auto [rc, out] = run("--backend tcp --tokens 200 --page-size 64 --requests 2 --decode-run-pages 2");
  ASSERT_EQ(rc, 0) << out;
  // 200 tokens = 4 pages; fp32 pools: 4 x 24 layers x 64 x 576 x 4 B + the KDA slot + one aux row.
  const uint64_t mla = 4ull * 24 * 64 * 576 * 4, kda = 69ull * (3ull * 12288 * 3 + 96ull * 128 * 128) * 4;
  EXPECT_NE(out.find("bytes per request: " + std::to_string(mla + kda + sizeof(pdserve::disagg::AuxRow))), std::string::npos) << out;
  EXPECT_NE(out.find("request  2: "), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
  EXPECT_EQ(out.find("differ"), std::string::npos) << out;
  EXPECT_NE(out.find("of 50 GB/s line rate"), std::string::npos) << out;
}

TEST(TransferBench, RdmaWithoutUsableNicsIsRefusedNotFallenBack) {
  auto [rc, out] = run("--backend rdma --rdma-nics pdsnone_0 --tokens 64 --requests 1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("pdsnone_0:1 not found"), std::string::npos) << out;
  EXPECT_NE(out.find("never falls back"), std::string::npos) << out;
}

}  // namespace
