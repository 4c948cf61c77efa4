// pack_runs / unpack_runs (transfer/transfer.h) against the plain memcpy loop below, on
// fresh random pools and run lists: any alignment, lengths from 1 float to several chunks,
// MLA latent pages. Bound: exact (a copy), and every float outside the runs untouched.
// The GPU cases skip themselves, saying so, without an sm_90 GPU; the planning cases run
// everywhere the CUDA backend is built.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "test_util.h"
#include "transfer/transfer.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using Transfer = GpuTest;

constexpr float kPoison = -12345.0f;

// The CPU reference: the staging layout of plan_transfer_chunks, filled run by run.
std::vector<float> pack_reference(const std::vector<float>& pool, const std::vector<TransferRun>& runs, int64_t staging_floats) {
  std::vector<float> staging(staging_floats, kPoison);
  int64_t at = 0;
  for (const auto& r : runs) {
    std::copy(&pool[r.src_offset], &pool[r.src_offset] + r.length, &staging[at]);
    at += (r.length + 3) / 4 * 4;
  }
  return staging;
}

void unpack_reference(const std::vector<float>& staging, const std::vector<TransferRun>& runs, std::vector<float>& pool) {
  int64_t at = 0;
  for (const auto& r : runs) {
    std::copy(&staging[at], &staging[at] + r.length, &pool[r.dst_offset]);
    at += (r.length + 3) / 4 * 4;
  }
}

// Random runs: sources anywhere (overlap allowed), destinations disjoint and shuffled.
std::vector<TransferRun> random_runs(int64_t pool_floats, int n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> len(n);
  for (auto& l : len) {
    const uint32_t kind = g() % 4;  // tiny, odd, page-like, multi-chunk
    l = kind == 0 ? 1 + g() % 7 : kind == 1 ? 1 + g() % 3000 : kind == 2 ? 4 * (1 + g() % 2048) : 1 + g() % 30000;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), g);
  std::vector<int64_t> dst(n);
  int64_t at = g() % 5;
  for (int i : order) {
    dst[i] = at;
    at += len[i] + g() % 9;  // gaps stay untouched
  }
  EXPECT_LE(at, pool_floats);
  std::vector<TransferRun> runs(n);
  for (int i = 0; i < n; ++i) runs[i] = {int64_t(g() % (pool_floats - len[i])), dst[i], len[i]};
  return runs;
}

void round_trip(const std::vector<TransferRun>& runs, int64_t pool_floats, uint32_t seed) {
  int64_t staging_floats = 0;
  const auto chunks = plan_transfer_chunks(runs, &staging_floats);
  const auto src = randn(pool_floats, seed), dst0 = randn(pool_floats, seed + 1);
  const auto staging_ref = pack_reference(src, runs, staging_floats);
  auto dst_ref = dst0;
  unpack_reference(staging_ref, runs, dst_ref);

  auto dsrc = dev(src), ddst = dev(dst0);
  auto dstaging = dev(std::vector<float>(staging_floats, kPoison));
  auto dchunks = dev(chunks);
  ASSERT_TRUE(pack_runs(dsrc.get(), dchunks.get(), chunks.size(), dstaging.get(), nullptr).is_ok());
  const auto staging = host(dstaging);
  ASSERT_EQ(staging.size(), staging_ref.size());
  EXPECT_EQ(0, std::memcmp(staging.data(), staging_ref.data(), staging.size() * sizeof(float))) << "pack";
  ASSERT_TRUE(unpack_runs(dstaging.get(), dchunks.get(), chunks.size(), ddst.get(), nullptr).is_ok());
  const auto got = host(ddst);
  EXPECT_EQ(0, std::memcmp(got.data(), dst_ref.data(), got.size() * sizeof(float))) << "unpack";
}

TEST(TransferPlan, ChunksCoverRunsAndStagingIsPadded) {
  const std::vector<TransferRun> runs = {{10, 0, 5}, {0, 100, kTransferChunkFloats * 2 + 3}, {7, 50, 4}, {3, 60, 0}};
  int64_t staging = 0;
  const auto chunks = plan_transfer_chunks(runs, &staging);
  EXPECT_EQ(staging, 8 + (kTransferChunkFloats * 2 + 4) + 4);
  ASSERT_EQ(chunks.size(), 1u + 3u + 1u);
  EXPECT_EQ(chunks[1].staging_offset, 8);
  EXPECT_EQ(chunks[3].length, 3);
  EXPECT_EQ(chunks[3].src_offset, 2 * kTransferChunkFloats);
  EXPECT_EQ(chunks[3].dst_offset, 100 + 2 * kTransferChunkFloats);
  EXPECT_EQ(chunks[4].staging_offset, 8 + kTransferChunkFloats * 2 + 4);
  const auto pages = mla_page_runs(2, 1000, 10, {3, 7}, {0, 1});
  ASSERT_EQ(pages.size(), 4u);
  EXPECT_EQ(pages[3].src_offset, 1000 + 70);
  EXPECT_EQ(pages[3].dst_offset, 1000 + 10);
  EXPECT_EQ(pages[3].length, 10);
}

TEST_F(Transfer, RandomRunsAnyAlignment) {
  const int64_t pool = 8 << 20;
  for (uint32_t seed : {1u, 2u, 3u}) round_trip(random_runs(pool, 500, seed), pool, seed * 10);
}

TEST_F(Transfer, MlaLatentPages) {
  // 3 layers of 48 pages of 64 x 576 floats; 17 pages move to other page ids.
  const int64_t layers = 3, pages = 48, page_floats = 64 * 576, stride = pages * page_floats;
  std::vector<int32_t> ids(pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 g(5);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<int32_t> src(ids.begin(), ids.begin() + 17);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<int32_t> dst(ids.begin(), ids.begin() + 17);
  round_trip(mla_page_runs(layers, stride, page_floats, src, dst), layers * stride, 42);
}

TEST_F(Transfer, EmptyListIsANoOp) {
  EXPECT_TRUE(pack_runs(nullptr, nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(unpack_runs(nullptr, nullptr, 0, nullptr, nullptr).is_ok());
}

}  // namespace
}  // namespace pdserve::cuda
