#include "pdserve/transfer/rdma/stripe_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace pdserve::transfer::rdma {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

WriteOp w(uint64_t local, uint64_t remote, uint64_t len, RegionId lr = 1, RegionId rr = 2) { return {lr, local, rr, remote, len}; }

// Every destination byte is covered exactly once, by the source byte the input wrote there:
// pieces do not overlap, add up to the input, and each lies inside input writes that map its
// destination to its source with the same shift.
void expect_same_bytes(const std::vector<WriteOp>& in, const StripePlan& plan) {
  auto by_dest = [](const WriteOp& a, const WriteOp& b) {
    return a.remote_region != b.remote_region ? a.remote_region < b.remote_region : a.remote_offset < b.remote_offset;
  };
  std::vector<WriteOp> src = in, pieces;
  for (const StripedWrite& s : plan.wrs) pieces.push_back(s.op);
  std::sort(src.begin(), src.end(), by_dest);
  std::sort(pieces.begin(), pieces.end(), by_dest);
  uint64_t in_bytes = 0, out_bytes = 0;
  for (const WriteOp& w : src) in_bytes += w.length;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const WriteOp& p = pieces[i];
    out_bytes += p.length;
    if (i) {
      EXPECT_TRUE(pieces[i - 1].remote_region != p.remote_region || pieces[i - 1].remote_offset + pieces[i - 1].length <= p.remote_offset);
    }
    uint64_t covered = 0;
    for (const WriteOp& w : src) {
      if (w.remote_region != p.remote_region) continue;
      const uint64_t lo = std::max(w.remote_offset, p.remote_offset), hi = std::min(w.remote_offset + w.length, p.remote_offset + p.length);
      if (lo >= hi) continue;
      EXPECT_EQ(w.local_region, p.local_region);
      EXPECT_EQ(w.local_offset + (lo - w.remote_offset), p.local_offset + (lo - p.remote_offset));
      covered += hi - lo;
    }
    EXPECT_EQ(covered, p.length);
  }
  EXPECT_EQ(in_bytes, out_bytes);
}

TEST(StripePlan, MergesContiguousPagesIntoOneRun) {
  std::vector<WriteOp> pages;
  for (uint64_t p = 0; p < 64; ++p) pages.push_back(w(p * 4 * KiB, (100 + p) * 4 * KiB, 4 * KiB));
  std::shuffle(pages.begin(), pages.end(), std::mt19937(1));  // the order of writes does not matter
  auto plan = plan_stripes(pages, 1, {});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->runs, 1u);
  ASSERT_EQ(plan->wrs.size(), 1u);
  EXPECT_EQ(plan->wrs[0].op.remote_offset, 400 * KiB);
  EXPECT_EQ(plan->wrs[0].op.length, 256 * KiB);
}

TEST(StripePlan, DoesNotMergeAcrossGapsOrRegions) {
  std::vector<WriteOp> in = {w(0, 0, 4 * KiB), w(4 * KiB, 8 * KiB, 4 * KiB) /* remote gap */, w(8 * KiB, 12 * KiB, 4 * KiB, 3) /* other source */};
  auto plan = plan_stripes(in, 2, {});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->runs, 3u);
  expect_same_bytes(in, *plan);
}

TEST(StripePlan, SplitsALargeRunAcrossNicsAlignedAndBalanced) {
  StripeOptions opt{4096, 256 * KiB, 1ull << 30};
  std::vector<WriteOp> in = {w(0, 0, 10 * MiB + 12345)};
  auto plan = plan_stripes(in, 4, opt);
  ASSERT_TRUE(plan.is_ok());
  ASSERT_EQ(plan->wrs.size(), 4u);
  for (int nic = 0; nic < 4; ++nic) EXPECT_EQ(plan->nic_wrs[nic], 1);
  for (size_t i = 0; i + 1 < plan->wrs.size(); ++i) EXPECT_EQ(plan->wrs[i].op.length % 4096, 0u) << i;
  const auto [lo, hi] = std::minmax_element(plan->nic_bytes.begin(), plan->nic_bytes.end());
  EXPECT_LE(*hi - *lo, 4 * 4096 + 12345u);
  expect_same_bytes(in, *plan);
}

TEST(StripePlan, SmallRunsStayWholeButSpreadOverNics) {
  std::vector<WriteOp> in;
  for (uint64_t r = 0; r < 8; ++r) in.push_back(w(r * MiB, r * MiB, 64 * KiB));  // 8 separate runs below the stripe size
  auto plan = plan_stripes(in, 4, {});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->wrs.size(), 8u);
  for (int nic = 0; nic < 4; ++nic) EXPECT_EQ(plan->nic_bytes[nic], 128 * KiB);
}

TEST(StripePlan, CutsAtMaxWrBytes) {
  StripeOptions opt{4096, 256 * KiB, 1 * MiB};
  std::vector<WriteOp> in = {w(0, 0, 5 * MiB + 1)};
  auto plan = plan_stripes(in, 1, opt);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->wrs.size(), 6u);
  for (const auto& s : plan->wrs) EXPECT_LE(s.op.length, 1 * MiB);
  expect_same_bytes(in, *plan);
}

TEST(StripePlan, RandomInputsKeepBytesBalanceAndTheWrBound) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int nics = 1 + static_cast<int>(rng() % 8);
    StripeOptions opt{uint64_t{1} << (rng() % 13), 1 + rng() % (64 * KiB), 0};
    opt.max_wr_bytes = opt.alignment * (1 + rng() % 64);
    std::vector<WriteOp> in;
    uint64_t remote = 0;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const uint64_t len = 1 + rng() % (200 * KiB);
      remote += (rng() % 3 == 0) ? rng() % 4096 : 0;  // sometimes a gap
      in.push_back(w(remote + (rng() % 2) * 7, remote, len, 1, static_cast<RegionId>(2 + rng() % 2)));
      remote += len;
    }
    auto plan = plan_stripes(in, nics, opt);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    uint64_t largest = 0, total = 0;
    for (const auto& s : plan->wrs) {
      largest = std::max(largest, s.op.length);
      EXPECT_LE(s.op.length, opt.max_wr_bytes);
      total += s.op.length;
    }
    EXPECT_EQ(total, plan->bytes);
    const auto [lo, hi] = std::minmax_element(plan->nic_bytes.begin(), plan->nic_bytes.end());
    EXPECT_LE(*hi - *lo, largest);
    EXPECT_LE(plan->wrs.size(), plan->runs * nics + plan->bytes / opt.max_wr_bytes + plan->runs);
    expect_same_bytes(in, *plan);
  }
}

TEST(StripePlan, RefusesOverlapsZeroLengthAndBadOptions) {
  EXPECT_NE(plan_stripes({w(0, 0, 8192), w(0, 4096, 8192)}, 2, {}).status().message().find("overlap"), std::string::npos);
  EXPECT_TRUE(plan_stripes({w(0, 0, 8192), w(0, 4096, 8192, 1, 3)}, 2, {}).is_ok());  // other region: no overlap
  EXPECT_FALSE(plan_stripes({w(0, 0, 0)}, 2, {}).is_ok());
  EXPECT_FALSE(plan_stripes({w(0, UINT64_MAX - 1, 4)}, 2, {}).is_ok());
  EXPECT_FALSE(plan_stripes({w(0, 0, 8)}, 0, {}).is_ok());
  EXPECT_FALSE(plan_stripes({w(0, 0, 8)}, 1, StripeOptions{3000, 1, 6000}).is_ok());
  EXPECT_FALSE(plan_stripes({w(0, 0, 8)}, 1, StripeOptions{4096, 1, 6000}).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer::rdma
