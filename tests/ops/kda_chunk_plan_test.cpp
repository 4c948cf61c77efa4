// The chunked KDA prefill's host sizing (kernels/kda/kda_chunk_plan.h) on the CPU: the pass
// count the launcher will use, and the backend's workspace policy at Kimi-K3's prefill-rank
// shape (TP4: 24 KDA heads of 128, 8K-token steps), so CI covers the one-pass decision.
#include "kda/kda_chunk_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace pdserve::cuda {
namespace {

constexpr int64_t kH = 24, kD = 128, kStep = 8192;

std::vector<int64_t> cu_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu{0};
  for (int64_t n : lens) cu.push_back(cu.back() + n);
  return cu;
}

int64_t chunks_of(const std::vector<int64_t>& lens) {
  const std::vector<int64_t> cu = cu_of(lens);
  return kda_chunk_count(cu.data(), static_cast<int64_t>(lens.size()));
}

// Passes the backend's call makes for this batch with a step of (tokens, seqs) configured.
int64_t backend_passes(const std::vector<int64_t>& lens, int64_t step_tokens, int64_t step_seqs) {
  const int64_t chunks = chunks_of(lens);
  const size_t ws = kda_prefill_workspace_bytes(kH, kD, chunks, kda_prefill_workspace_cap(kH, kD, step_tokens, step_seqs));
  return kda_chunk_pass_count(kH, kD, chunks, ws);
}

TEST(KdaChunkPlan, PassCountFollowsCapacity) {
  const int64_t total = 10;
  EXPECT_EQ(kda_chunk_pass_count(kH, kD, total, kda_chunk_workspace_bytes(kH, kD, total)), 1);
  // The tables of the whole batch stay at the front: room for 4 chunks' intermediates besides them.
  const size_t four = kda_chunk_table_bytes(total) + (kda_chunk_workspace_bytes(kH, kD, 4) - kda_chunk_table_bytes(4));
  EXPECT_EQ(kda_chunk_pass_capacity(kH, kD, total, four), 4);
  EXPECT_EQ(kda_chunk_pass_count(kH, kD, total, four), 3);
  EXPECT_EQ(kda_chunk_pass_count(kH, kD, total, four - 1), 4);
  EXPECT_EQ(kda_chunk_pass_count(kH, kD, total, kda_chunk_table_bytes(total)), 0);
}

TEST(KdaChunkPlan, MaxChunksBoundsEveryBatchAndIsReached) {
  EXPECT_EQ(kda_prefill_max_chunks(kStep, 1), chunks_of({kStep}));
  EXPECT_EQ(kda_prefill_max_chunks(0, 4), 0);
  std::mt19937 rng(7);
  for (int64_t seqs : {1, 2, 4, 16, 64}) {
    // Reached: seqs - 1 sequences of 65 tokens (two chunks each), the rest in the last.
    std::vector<int64_t> worst(static_cast<size_t>(seqs - 1), 65);
    worst.push_back(kStep - 65 * (seqs - 1));
    EXPECT_EQ(chunks_of(worst), kda_prefill_max_chunks(kStep, seqs)) << seqs;
    for (int trial = 0; trial < 200; ++trial) {  // bounded: random splits of at most kStep tokens
      std::vector<int64_t> lens;
      int64_t left = kStep;
      for (int64_t s = 0; s < seqs && left > 0; ++s) {
        const int64_t n = s + 1 == seqs ? left : std::uniform_int_distribution<int64_t>(1, left)(rng);
        lens.push_back(n), left -= n;
      }
      EXPECT_LE(chunks_of(lens), kda_prefill_max_chunks(kStep, seqs));
    }
  }
}

// The reason for the policy: at K3's prefill-rank shape an 8K-token step needs more than the
// old fixed 512 MiB, which split it into passes below the multicast pick's 128 chunks.
TEST(KdaChunkPlan, K3PrefillRankStepIsOnePass) {
  const std::vector<int64_t> one{kStep}, four{2048, 2048, 2048, 2048}, ragged{1000, 3000, 77, 4115};
  EXPECT_GT(kda_chunk_workspace_bytes(kH, kD, chunks_of(one)), kKdaPrefillWorkspaceFloor);
  EXPECT_GT(backend_passes(one, 0, 1), 1);  // the floor alone: the old split
  for (int64_t max_running : {1, 4, 16, 256}) {
    EXPECT_EQ(backend_passes(one, kStep, max_running), 1) << max_running;
    if (max_running >= 4) {
      EXPECT_EQ(backend_passes(four, kStep, max_running), 1) << max_running;
      EXPECT_EQ(backend_passes(ragged, kStep, max_running), 1) << max_running;
    }
  }
  // The allocation is the batch's need, not the cap: a short step asks for its own passes' bytes.
  const int64_t c = chunks_of({300});
  EXPECT_EQ(kda_prefill_workspace_bytes(kH, kD, c, kda_prefill_workspace_cap(kH, kD, kStep, 16)), kda_chunk_workspace_bytes(kH, kD, c));
  // Longer steps than configured still run, in several passes.
  EXPECT_GT(backend_passes({4 * kStep}, kStep, 1), 1);
}

TEST(KdaChunkPlan, CapNeverBelowFloorAndOneChunkAtLeast) {
  EXPECT_EQ(kda_prefill_workspace_cap(2, 32, kStep, 16), kKdaPrefillWorkspaceFloor);
  EXPECT_EQ(kda_prefill_workspace_cap(kH, kD, 0, 1), kKdaPrefillWorkspaceFloor);
  EXPECT_EQ(kda_prefill_workspace_bytes(kH, kD, 0, kKdaPrefillWorkspaceFloor), kda_chunk_workspace_bytes(kH, kD, 1));
}

}  // namespace
}  // namespace pdserve::cuda
