// pack_runs / unpack_runs (transfer/transfer.h) against the plain memcpy loop below, on
// fresh random pools and run lists, fp32 and bf16 elements: any alignment, lengths from 1
// element to several chunks, MLA latent pages (fp32 and bf16). Bound: exact (a copy of the
// bits), and every element outside the runs untouched.
// The GPU cases skip themselves, saying so, without an sm_90 GPU; the planning cases run
// everywhere the CUDA backend is built.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "pdserve/core/dtype.h"
#include "test_util.h"
#include "transfer/transfer.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using Transfer = GpuTest;

// Elements of the pools under test: fp32 (the KDA state, the fp32 latent cache) and bf16 bit
// patterns (the bf16 latent cache; any 16-bit pattern, copied as bits). Poison: a marker that
// shows staging the pack never wrote.
template <typename T>
T poison() {
  if constexpr (sizeof(T) == 4) return T(-12345.0f);
  else return T(0xdead);
}
template <typename T>
std::vector<T> random_pool(int64_t n, uint32_t seed) {
  const auto f = randn(n, seed);
  if constexpr (sizeof(T) == 4) {
    return f;
  } else {
    std::vector<T> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = pdserve::f32_to_bf16(f[i]);
    return out;
  }
}

// The CPU reference: the staging layout of plan_transfer_chunks (runs at multiples of 16
// bytes), filled run by run.
template <typename T>
std::vector<T> pack_reference(const std::vector<T>& pool, const std::vector<TransferRun>& runs, int64_t staging_elems) {
  constexpr int64_t kAlign = 16 / sizeof(T);
  std::vector<T> staging(staging_elems, poison<T>());
  int64_t at = 0;
  for (const auto& r : runs) {
    std::copy(&pool[r.src_offset], &pool[r.src_offset] + r.length, &staging[at]);
    at += (r.length + kAlign - 1) / kAlign * kAlign;
  }
  return staging;
}

template <typename T>
void unpack_reference(const std::vector<T>& staging, const std::vector<TransferRun>& runs, std::vector<T>& pool) {
  constexpr int64_t kAlign = 16 / sizeof(T);
  int64_t at = 0;
  for (const auto& r : runs) {
    std::copy(&staging[at], &staging[at] + r.length, &pool[r.dst_offset]);
    at += (r.length + kAlign - 1) / kAlign * kAlign;
  }
}

// Random runs: sources anywhere (overlap allowed), destinations disjoint and shuffled.
std::vector<TransferRun> random_runs(int64_t pool_elems, int n, uint32_t seed) {
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
  EXPECT_LE(at, pool_elems);
  std::vector<TransferRun> runs(n);
  for (int i = 0; i < n; ++i) runs[i] = {int64_t(g() % (pool_elems - len[i])), dst[i], len[i]};
  return runs;
}

template <typename T>
void round_trip(const std::vector<TransferRun>& runs, int64_t pool_elems, uint32_t seed) {
  constexpr int64_t kBytes = sizeof(T);
  int64_t staging_elems = 0;
  const auto chunks = plan_transfer_chunks(runs, &staging_elems, kBytes);
  const auto src = random_pool<T>(pool_elems, seed), dst0 = random_pool<T>(pool_elems, seed + 1);
  const auto staging_ref = pack_reference(src, runs, staging_elems);
  auto dst_ref = dst0;
  unpack_reference(staging_ref, runs, dst_ref);

  auto dsrc = dev(src), ddst = dev(dst0);
  auto dstaging = dev(std::vector<T>(staging_elems, poison<T>()));
  auto dchunks = dev(chunks);
  ASSERT_TRUE(pack_runs(dsrc.get(), kBytes, dchunks.get(), chunks.size(), dstaging.get(), nullptr).is_ok());
  const auto staging = host(dstaging);
  ASSERT_EQ(staging.size(), staging_ref.size());
  EXPECT_EQ(0, std::memcmp(staging.data(), staging_ref.data(), staging.size() * kBytes)) << "pack, " << kBytes << "-byte elements";
  ASSERT_TRUE(unpack_runs(dstaging.get(), kBytes, dchunks.get(), chunks.size(), ddst.get(), nullptr).is_ok());
  const auto got = host(ddst);
  EXPECT_EQ(0, std::memcmp(got.data(), dst_ref.data(), got.size() * kBytes)) << "unpack, " << kBytes << "-byte elements";
}

// 3 layers of 48 pages of 64 x 576 elements; 17 pages move to other page ids.
template <typename T>
void mla_pages_round_trip() {
  const int64_t layers = 3, pages = 48, page_elems = 64 * 576, stride = pages * page_elems;
  std::vector<int32_t> ids(pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 g(5);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<int32_t> src(ids.begin(), ids.begin() + 17);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<int32_t> dst(ids.begin(), ids.begin() + 17);
  round_trip<T>(mla_page_runs(layers, stride, page_elems, src, dst), layers * stride, 42);
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

TEST(TransferPlan, Bf16ElementsChunkAndPadInBytes) {
  // 2-byte elements: chunks of 32 KiB = 16384 elements, runs padded to 16 bytes = 8 elements.
  const std::vector<TransferRun> runs = {{10, 0, 5}, {1, 101, kTransferChunkBytes + 3}, {7, 50, 8}};
  int64_t staging = 0;
  const auto chunks = plan_transfer_chunks(runs, &staging, 2);
  EXPECT_EQ(staging, 8 + (kTransferChunkBytes + 8) + 8);
  ASSERT_EQ(chunks.size(), 1u + 3u + 1u);
  EXPECT_EQ(chunks[1].staging_offset, 8);
  EXPECT_EQ(chunks[1].length, kTransferChunkBytes / 2);
  EXPECT_EQ(chunks[3].length, 3);
  EXPECT_EQ(chunks[3].src_offset, 1 + kTransferChunkBytes);
  EXPECT_EQ(chunks[4].staging_offset, 8 + kTransferChunkBytes + 8);
  EXPECT_TRUE(plan_transfer_chunks(runs, &staging, 3).empty());  // no such element size
  EXPECT_EQ(staging, 0);
  // A bf16 latent page in bf16 elements: half the bytes of the fp32 page, the same runs.
  const auto pages = mla_page_runs(2, 48 * 64 * 576, 64 * 576, {3}, {0});
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[1].src_offset, 48 * 64 * 576 + 3 * 64 * 576);
}

TEST_F(Transfer, RandomRunsAnyAlignment) {
  const int64_t pool = 8 << 20;
  for (uint32_t seed : {1u, 2u, 3u}) round_trip<float>(random_runs(pool, 500, seed), pool, seed * 10);
}

// bf16 pools: runs at odd element offsets (2-byte aligned only), padding of 8 elements.
TEST_F(Transfer, Bf16RandomRunsAnyAlignment) {
  const int64_t pool = 8 << 20;
  for (uint32_t seed : {4u, 5u}) round_trip<uint16_t>(random_runs(pool, 500, seed), pool, seed * 10);
}

TEST_F(Transfer, MlaLatentPages) { mla_pages_round_trip<float>(); }

TEST_F(Transfer, Bf16MlaLatentPages) { mla_pages_round_trip<uint16_t>(); }

TEST_F(Transfer, EmptyListIsANoOp) {
  EXPECT_TRUE(pack_runs(nullptr, nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(unpack_runs(nullptr, nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(pack_runs(nullptr, 2, nullptr, 0, nullptr, nullptr).is_ok());
  std::vector<TransferChunk> one = {{0, 0, 0, 1}};
  auto dc = dev(one);
  DeviceBuffer<float> a(1), b(1);
  EXPECT_FALSE(pack_runs(a.get(), 8, dc.get(), 1, b.get(), nullptr).is_ok());  // no such element size
}

}  // namespace
}  // namespace pdserve::cuda
