// The split-KV MLA decode (mla/mla_decode.h): the plan builder on the CPU (runs everywhere),
// and the run + merge against the CPU reference ops::mla_attend_latent on fresh random
// inputs (skips itself, saying so, without an sm_90 GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "glue/glue.h"
#include "mla/mla_decode.h"
#include "pdserve/ops/mla.h"
#include "mla_decode_test_util.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using ktest::dev;
using ktest::host;
using ktest::nerr;
using ktest::randn;
using ktest::replay_two_step_graph;

struct PlanView {
  const MlaDecodePlan& p;
  const int32_t* item(int64_t i) const { return p.image.data() + 4 + 4 * i; }
  const int32_t* row(int64_t b) const { return p.image.data() + 4 + 4 * p.capacity + 4 * b; }
};

// Every row's items are consecutive, in token order, granule-aligned, and cover [0, ctx) once
// (a row without tokens: one empty item, written directly); the merge tree takes every item
// of a split row once, in one step up to fan_in items, never more than 64 partials a step.
void expect_plan_covers(const MlaDecodePlan& plan, const std::vector<int32_t>& ctx, int64_t page, int64_t fan_in = kMlaMergeFanIn) {
  PlanView v{plan};
  ASSERT_EQ(plan.image[0], plan.num_items);
  ASSERT_LE(plan.num_items, plan.capacity);
  int64_t next_item = 0, longest_item = 0;
  for (int64_t i = 0; i < plan.num_items; ++i) longest_item = std::max<int64_t>(longest_item, v.item(i)[2] - v.item(i)[1]);
  // kLeanPrefetch's count: at least one tile, never more than the longest item holds, and
  // within the step's budget unless one tile an item already exceeds it.
  const int32_t prefetch = plan.image[3];
  EXPECT_GE(prefetch, 1);
  EXPECT_LE(prefetch, std::max<int64_t>(1, (longest_item + kMlaTileTokens - 1) / kMlaTileTokens));
  if (prefetch > 1) {
    EXPECT_LE(prefetch * plan.num_items, kMlaPrefetchTileBudget);
  }
  for (size_t b = 0; b < ctx.size(); ++b) {
    const int32_t first = v.row(b)[0], n = v.row(b)[1], group = v.row(b)[2], groups = v.row(b)[3];
    EXPECT_EQ(first, next_item) << "row " << b;
    next_item += n;
    ASSERT_GE(n, 1) << "row " << b;
    ASSERT_GE(group, 1) << "row " << b;
    EXPECT_EQ(groups, (n + group - 1) / group) << "row " << b;
    if (n <= fan_in) {
      EXPECT_EQ(groups, 1) << "row " << b;
    }
    EXPECT_LE(group, kMlaMaxMergeFanIn) << "row " << b;
    EXPECT_LE(groups, kMlaMaxMergeFanIn) << "row " << b;
    if (ctx[b] <= 0) {
      EXPECT_EQ(n, 1) << "row " << b;
      const int32_t* it = v.item(first);
      EXPECT_EQ(it[0], static_cast<int32_t>(b));
      EXPECT_EQ(it[1], 0);
      EXPECT_EQ(it[2], 0);
      EXPECT_EQ(it[3], -1);
      continue;
    }
    int32_t pos = 0;
    for (int32_t i = first; i < first + n; ++i) {
      const int32_t* it = v.item(i);
      EXPECT_EQ(it[0], static_cast<int32_t>(b));
      EXPECT_EQ(it[1], pos) << "row " << b << " item " << i;
      EXPECT_GT(it[2], it[1]);
      EXPECT_EQ(it[1] % mla_decode_granule(page), 0);
      EXPECT_EQ(it[3], n > 1 ? i : -1);
      pos = it[2];
    }
    EXPECT_EQ(pos, ctx[b]) << "row " << b;
  }
  EXPECT_EQ(next_item, plan.num_items);
}

TEST(MlaDecodePlan, SplitsCoverEachRowOnceWithinCapacity) {
  const int64_t page = 64;
  const std::vector<std::vector<int32_t>> cases = {
      {1}, {131072}, {0, 0}, {1, 63, 64, 65, 4097, 0, 32, 100000}, std::vector<int32_t>(256, 1024), std::vector<int32_t>(256, 65537)};
  for (const auto& ctx : cases) {
    const int64_t rows = ctx.size(), cap = mla_decode_plan_capacity(rows);
    MlaDecodePlan plan;
    ASSERT_TRUE(build_mla_decode_plan(ctx.data(), rows, page, cap, &plan).is_ok());
    EXPECT_EQ(static_cast<int64_t>(plan.image.size()), mla_decode_plan_words(rows, cap));
    expect_plan_covers(plan, ctx, page);
    MlaDecodePlan again;
    ASSERT_TRUE(build_mla_decode_plan(ctx.data(), rows, page, cap, &again).is_ok());
    EXPECT_EQ(plan.image, again.image);  // deterministic
  }
}

TEST(MlaDecodePlan, SmallBatchLongContextSplitsToFillTheGpu) {
  // One-wave plans (the counts below are those of one wave of kMlaTargetItems).
  const std::vector<int32_t> ctx = {32768};
  MlaDecodePlan plan;
  ASSERT_TRUE(build_mla_decode_plan(ctx.data(), 1, 64, mla_decode_plan_capacity(1, 1), &plan, 1).is_ok());
  EXPECT_GE(plan.num_items, kMlaTargetItems / 2);
  // A short single row still spreads: 1K tokens -> 64 items of one 16-token tile.
  const std::vector<int32_t> short_row = {1024};
  MlaDecodePlan small;
  ASSERT_TRUE(build_mla_decode_plan(short_row.data(), 1, 64, mla_decode_plan_capacity(1, 1), &small, 1).is_ok());
  EXPECT_EQ(small.num_items, 1024 / kMlaTileTokens);
  EXPECT_LE(plan.num_items, kMlaTargetItems);
  EXPECT_TRUE(plan.any_split);
  // Many rows of short context: one item each, nothing to merge.
  const std::vector<int32_t> many(256, 1024);
  ASSERT_TRUE(build_mla_decode_plan(many.data(), 256, 64, mla_decode_plan_capacity(256, 1), &plan, 1).is_ok());
  EXPECT_EQ(plan.num_items, 256);
  EXPECT_FALSE(plan.any_split);
  EXPECT_FALSE(plan.any_empty);
}

TEST(MlaDecodePlan, RandomRaggedBatchesStayWithinCapacity) {
  std::mt19937 gen(41);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t rows = 1 + gen() % 300, page = int64_t{1} << (gen() % 7), waves = 1 + trial % 4;
    const int64_t fan_in = trial % 3 == 0 ? 1 + gen() % kMlaMaxMergeFanIn : kMlaMergeFanIn;
    std::vector<int32_t> ctx(rows);
    for (auto& c : ctx) c = static_cast<int32_t>(gen() % 5 == 0 ? 0 : gen() % (1 + (gen() % 2 ? 200 : 70000)));
    MlaDecodePlan plan;
    ASSERT_TRUE(
        build_mla_decode_plan(ctx.data(), rows, page, mla_decode_plan_capacity(rows, waves), &plan, waves, fan_in).is_ok());
    expect_plan_covers(plan, ctx, page, fan_in);
  }
}

TEST(MlaDecodePlan, MoreWavesSplitLongRowsFiner) {
  // 8 rows x 16K: one wave keeps <= 264 items; two waves take more, shorter ones.
  const std::vector<int32_t> ctx(8, 16384);
  MlaDecodePlan one, two;
  ASSERT_TRUE(build_mla_decode_plan(ctx.data(), 8, 64, mla_decode_plan_capacity(8, 1), &one, 1).is_ok());
  ASSERT_TRUE(build_mla_decode_plan(ctx.data(), 8, 64, mla_decode_plan_capacity(8, 2), &two, 2).is_ok());
  EXPECT_LE(one.num_items, kMlaTargetItems);
  EXPECT_GT(two.num_items, kMlaTargetItems);
  EXPECT_LE(two.num_items, 2 * kMlaTargetItems);
  expect_plan_covers(two, ctx, 64);
  MlaDecodePlan bad;
  EXPECT_FALSE(build_mla_decode_plan(ctx.data(), 8, 64, mla_decode_plan_capacity(8), &bad, 0).is_ok());
}

TEST(MlaDecodePlan, ASmallerCapacityMeansLongerChunksAndTooSmallIsAnError) {
  const std::vector<int32_t> one = {64 * 1000};
  MlaDecodePlan plan;
  ASSERT_TRUE(build_mla_decode_plan(one.data(), 1, 64, 10, &plan).is_ok());
  EXPECT_LE(plan.num_items, 10);
  expect_plan_covers(plan, one, 64);
  const std::vector<int32_t> three = {5, 0, 7};  // three rows (one empty) need three items at least
  EXPECT_FALSE(build_mla_decode_plan(three.data(), 3, 64, 2, &plan).is_ok());
}

TEST(MlaDecodePlan, LongRowsMergeInTwoStepsOfAboutSqrtItems) {
  // 1 x 16K: 256 items of 64 tokens; the fused merge takes them as 16 groups of 16.
  const std::vector<int32_t> ctx = {16384};
  MlaDecodePlan plan;
  ASSERT_TRUE(build_mla_decode_plan(ctx.data(), 1, 64, mla_decode_plan_capacity(1), &plan).is_ok());
  PlanView v{plan};
  EXPECT_EQ(v.row(0)[1], 256);
  EXPECT_EQ(v.row(0)[2], 16);
  EXPECT_EQ(v.row(0)[3], 16);
  // A fan-in of 64 keeps up to 64 items in one step; 0 or past 64 is refused.
  const std::vector<int32_t> mid = {1024};  // 64 items of one tile
  ASSERT_TRUE(build_mla_decode_plan(mid.data(), 1, 64, mla_decode_plan_capacity(1), &plan, 1, 64).is_ok());
  EXPECT_EQ(v.row(0)[1], 64);
  EXPECT_EQ(v.row(0)[3], 1);
  ASSERT_TRUE(build_mla_decode_plan(mid.data(), 1, 64, mla_decode_plan_capacity(1), &plan, 1, 16).is_ok());
  EXPECT_EQ(v.row(0)[2], 8);
  EXPECT_EQ(v.row(0)[3], 8);
  EXPECT_FALSE(build_mla_decode_plan(mid.data(), 1, 64, mla_decode_plan_capacity(1), &plan, 1, 0).is_ok());
  EXPECT_FALSE(build_mla_decode_plan(mid.data(), 1, 64, mla_decode_plan_capacity(1), &plan, 1, 65).is_ok());
  // More than 64 x 64 items in a row cannot merge in two steps: an error, not a wrong answer.
  // (16 waves: 4200 items of one tile.)
  const std::vector<int32_t> huge = {16 * 4200};
  EXPECT_FALSE(build_mla_decode_plan(huge.data(), 1, 64, mla_decode_plan_capacity(1, 16), &plan, 16).is_ok());
}

TEST(MlaDecodePlan, ShortAndLongItemsPickTheirRings) {
  // The pick follows the plan's chunk: 1 x 16K (256 items of 64 tokens), 8 x 1K (32) and
  // 32 x 1K (128) are short items; 1 x 64K (256 tokens), 8 x 16K (512) and 256 x 4K (whole
  // rows) are long ones.
  const std::pair<int64_t, int32_t> deep[] = {{1, 16384}, {8, 1024}, {32, 1024}};
  // 1 x 1K (64 items) and 1 x 4K (256) hold one 16-token tile an item.
  const std::pair<int64_t, int32_t> one_tile[] = {{1, 1024}, {1, 4096}};
  const std::pair<int64_t, int32_t> shallow[] = {{1, 65536}, {8, 16384}, {256, 4096}, {128, 16384}};
  MlaDecodePlan plan;
  for (const auto& [rows, ctx] : deep) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    const int64_t chunk = plan.image[4 + 2] - plan.image[4 + 1];  // item 0 holds a whole chunk here
    EXPECT_EQ(plan.ring, chunk <= kMlaEarlyMaxChunk          ? MlaDecodeRing::kLeanBlockEarly
                         : chunk <= kMlaBlockSoftmaxMaxChunk ? MlaDecodeRing::kLeanBlock
                                                             : kMlaShortItemRing)
        << rows << " x " << ctx;
    EXPECT_EQ(plan.trigger, kMlaDefaultTrigger) << rows << " x " << ctx;
    EXPECT_EQ(plan.merge_slice, 0) << rows << " x " << ctx;
  }
  for (const auto& [rows, ctx] : one_tile) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    EXPECT_EQ(plan.ring, kMlaEarlyMaxChunk >= kMlaTileTokens          ? MlaDecodeRing::kLeanBlockEarly
                         : kMlaBlockSoftmaxMaxChunk >= kMlaTileTokens ? MlaDecodeRing::kLeanBlockPrefetch
                                                                      : kMlaOneTileItemRing)
        << rows << " x " << ctx;
    EXPECT_EQ(plan.image[3], 1) << rows << " x " << ctx;  // the item's one tile
    EXPECT_EQ(plan.trigger, kMlaOneTileTrigger) << rows << " x " << ctx;
    EXPECT_EQ(plan.merge_slice, 64) << rows << " x " << ctx;
  }
  for (const auto& [rows, ctx] : shallow) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    EXPECT_EQ(plan.ring, kMlaLongItemRing) << rows << " x " << ctx;
    EXPECT_EQ(plan.trigger, kMlaDefaultTrigger) << rows << " x " << ctx;
    EXPECT_EQ(plan.merge_slice, 0) << rows << " x " << ctx;
  }
  // The block-softmax form up to kMlaBlockSoftmaxMaxChunk tokens an item (its early form up to
  // kMlaEarlyMaxChunk, else its prefetch form at one tile).
  auto short_pick = [](int64_t chunk, MlaDecodeRing otherwise) {
    if (chunk > kMlaBlockSoftmaxMaxChunk) return otherwise;
    if (chunk <= kMlaEarlyMaxChunk) return MlaDecodeRing::kLeanBlockEarly;
    return chunk <= kMlaTileTokens ? MlaDecodeRing::kLeanBlockPrefetch : MlaDecodeRing::kLeanBlock;
  };
  EXPECT_EQ(mla_decode_pick_ring(kMlaTileTokens), short_pick(kMlaTileTokens, kMlaOneTileItemRing));
  EXPECT_EQ(mla_decode_pick_ring(2 * kMlaTileTokens), short_pick(2 * kMlaTileTokens, kMlaShortItemRing));
  EXPECT_EQ(mla_decode_pick_ring(3 * kMlaTileTokens), short_pick(3 * kMlaTileTokens, kMlaShortItemRing));
  EXPECT_EQ(mla_decode_pick_ring(kMlaDeepRingMaxChunk), kMlaShortItemRing);
  EXPECT_EQ(mla_decode_pick_ring(kMlaDeepRingMaxChunk + kMlaTileTokens), kMlaLongItemRing);
}

TEST(MlaDecodePlan, RowsOfManyItemsPickTheEarlyMerge) {
  // 1 x 4K / 16K / 64K: one row of 256 items (the early-load merge); 8 x 16K (32 a row), 128 x
  // 16K (2 a row), 256 x 4K (1): the chained one (kAuto); 1 x 1K (64 items of one tile), 1 x 2K
  // (128), 8 x 1K (32 of two): the short early-load one, with the block-softmax ring, up to
  // kMlaShortMergeMaxItems items a row.
  const std::pair<int64_t, int32_t> early[] = {{1, 4096}, {1, 16384}, {1, 65536}};
  const std::pair<int64_t, int32_t> chained[] = {{8, 16384}, {128, 16384}, {256, 4096}};
  MlaDecodePlan plan;
  for (const auto& [rows, ctx] : {std::pair<int64_t, int32_t>{1, 1024}, {1, 2048}, {8, 1024}, {1, 64}}) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    const bool block = plan.ring == MlaDecodeRing::kLeanBlock || plan.ring == MlaDecodeRing::kLeanBlockPrefetch ||
                       plan.ring == MlaDecodeRing::kLeanBlockEarly;
    EXPECT_EQ(plan.merge, block && plan.num_items / rows <= kMlaShortMergeMaxItems ? MlaDecodeMerge::kSeparateShort : MlaDecodeMerge::kAuto)
        << rows << " x " << ctx;
  }
  for (const auto& [rows, ctx] : early) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    EXPECT_EQ(plan.merge, MlaDecodeMerge::kSeparate) << rows << " x " << ctx;
  }
  for (const auto& [rows, ctx] : chained) {
    const std::vector<int32_t> c(rows, ctx);
    ASSERT_TRUE(build_mla_decode_plan(c.data(), rows, 64, mla_decode_plan_capacity(rows), &plan).is_ok());
    EXPECT_EQ(plan.merge, MlaDecodeMerge::kAuto) << rows << " x " << ctx;
  }
  // A ragged batch: one long row is enough.
  const std::vector<int32_t> ragged = {100, 65536, 3};
  ASSERT_TRUE(build_mla_decode_plan(ragged.data(), 3, 64, mla_decode_plan_capacity(3), &plan).is_ok());
  EXPECT_EQ(plan.merge, MlaDecodeMerge::kSeparate);
}

// The cluster plan: exactly `cluster` items a row, at row x cluster + r, consecutive in token
// order, granule-aligned, covering [0, ctx) once (empty items only past the row's end), each
// item's slot its index; the plan with allow_cluster picks it only where it fits (and only if
// kMlaPickCluster).
TEST(MlaDecodePlan, ClusterPlanGivesEachRowItsClusterOfItems) {
  const int64_t page = 64;
  const std::vector<std::vector<int32_t>> cases = {{1}, {63}, {64}, {65}, {1024}, {4096}, {0}, {1, 63, 64, 65}, {1024, 0, 33}, {100000}};
  for (int cluster : {16, 8, 4, 1}) {
    for (const auto& ctx : cases) {
      const int64_t rows = ctx.size(), cap = mla_decode_plan_capacity(rows);
      MlaDecodePlan plan;
      ASSERT_TRUE(build_mla_decode_cluster_plan(ctx.data(), rows, page, cap, cluster, &plan).is_ok());
      EXPECT_EQ(plan.merge, MlaDecodeMerge::kCluster);
      EXPECT_EQ(plan.cluster, cluster);
      EXPECT_EQ(plan.num_items, rows * cluster);
      EXPECT_EQ(plan.image[0], rows * cluster);
      EXPECT_GE(plan.image[3], 1);
      PlanView v{plan};
      for (int64_t b = 0; b < rows; ++b) {
        EXPECT_EQ(v.row(b)[0], b * cluster);
        EXPECT_EQ(v.row(b)[1], cluster);
        int32_t pos = 0, nonempty = 0;
        for (int r = 0; r < cluster; ++r) {
          const int32_t* it = v.item(b * cluster + r);
          EXPECT_EQ(it[0], b);
          EXPECT_EQ(it[1], pos) << "row " << b << " item " << r;
          EXPECT_GE(it[2], it[1]);
          if (it[2] > it[1]) {
            EXPECT_EQ(nonempty, r) << "an empty item before a non-empty one";
            ++nonempty;
            EXPECT_EQ(it[1] % mla_decode_granule(page), 0);
          }
          EXPECT_EQ(it[3], b * cluster + r);
          pos = it[2];
        }
        EXPECT_EQ(pos, std::max(ctx[b], 0)) << "row " << b;
      }
    }
  }
  // The cluster plan's ring and trigger by rows (the thirteenth version's fastest forms).
  for (int64_t rows : {1, 2, 3, 4, 5, 8}) {
    const std::vector<int32_t> c(rows, 1024);
    MlaDecodePlan p;
    ASSERT_TRUE(build_mla_decode_cluster_plan(c.data(), rows, page, mla_decode_plan_capacity(rows), 16, &p).is_ok());
    EXPECT_EQ(p.ring, rows <= kMlaClusterWideMaxRows ? MlaDecodeRing::kLeanWidePrefetch
                      : rows <= kMlaClusterMaxRows   ? MlaDecodeRing::kLeanPrefetch
                                                     : MlaDecodeRing::kLean)
        << rows;
    EXPECT_EQ(p.trigger, MlaDecodeTrigger::kEarly);
  }
  // Refused: a cluster past 16, or more items than the capacity.
  const std::vector<int32_t> one = {1024};
  MlaDecodePlan plan;
  EXPECT_FALSE(build_mla_decode_cluster_plan(one.data(), 1, page, 64, 17, &plan).is_ok());
  EXPECT_FALSE(build_mla_decode_cluster_plan(one.data(), 1, page, 8, 16, &plan).is_ok());
  // The pick: only with allow_cluster, only rows of at most kMlaClusterMaxTokens, at most
  // kMlaClusterMaxRows rows.
  ASSERT_TRUE(build_mla_decode_plan(one.data(), 1, page, mla_decode_plan_capacity(1), &plan).is_ok());
  EXPECT_NE(plan.merge, MlaDecodeMerge::kCluster);
  ASSERT_TRUE(build_mla_decode_plan(one.data(), 1, page, mla_decode_plan_capacity(1), &plan, 1, kMlaMergeFanIn, true).is_ok());
  EXPECT_EQ(plan.merge == MlaDecodeMerge::kCluster, kMlaPickCluster && kMlaClusterMaxTokens >= 1024);
  const std::vector<int32_t> longer = {static_cast<int32_t>(kMlaClusterMaxTokens) + 1};
  ASSERT_TRUE(build_mla_decode_plan(longer.data(), 1, page, mla_decode_plan_capacity(1), &plan, 1, kMlaMergeFanIn, true).is_ok());
  EXPECT_NE(plan.merge, MlaDecodeMerge::kCluster);
  expect_plan_covers(plan, longer, page);
  const std::vector<int32_t> many(kMlaClusterMaxRows + 1, 64);
  ASSERT_TRUE(build_mla_decode_plan(many.data(), many.size(), page, mla_decode_plan_capacity(many.size()), &plan, 1, kMlaMergeFanIn, true).is_ok());
  EXPECT_NE(plan.merge, MlaDecodeMerge::kCluster);
}

class MlaDecode : public ktest::GpuTest {};

struct Case {
  int64_t heads, lat, rope, page;
  std::vector<int32_t> ctx;
  bool graph_launch = false;     // launch the full capacity and always merge, as a graph does
  int64_t negative_row = -1;     // this row's page table is all -1: its output must be zero
  bool cluster_only = false;     // only the cluster forms (run_cluster_forms), one plan
  bool block_only = false;       // only the block-softmax forms (kLeanBlock*), then a captured graph of them
};

// The one-launch cluster form (MlaDecodeMerge::kCluster) on the case's inputs: cluster plans of
// 16, 8, 4 and 2 items a row, the lean, lean-deep, lean-prefetch, wide and wide-prefetch rings (K3's widths; other
// shapes run the plain bulk or cp.async ring), with and without pdl (with: the kernel just
// before writes q), both triggers, the cp.async loader; then a graph of two launches replayed
// twice. The merge order differs from the separate merge's (weights summed, then divided): the
// same bound against the CPU reference. Heads > 3: refused (warp variant only).
void run_cluster_forms(const Case& c, MlaDecodeArgs a, const std::vector<float>& ref, int64_t pages, int64_t cap, DeviceBuffer<float>& dql,
                       DeviceBuffer<float>& dql_src, size_t q_size, DeviceBuffer<float>& out, cudaStream_t stream) {
  const int64_t rows = c.ctx.size();
  struct ClusterOpt {
    int cluster;
    MlaDecodeRing ring;
    bool pdl;
    MlaDecodeTrigger trigger;
    MlaDecodeLoader loader = MlaDecodeLoader::kAuto;
  };
  constexpr auto kLate = MlaDecodeTrigger::kLate, kEarly = MlaDecodeTrigger::kEarly;
  const ClusterOpt opts[] = {{16, MlaDecodeRing::kLean, true, kLate},
                             {16, MlaDecodeRing::kLean, false, kEarly},
                             {16, MlaDecodeRing::kLeanDeep, true, kLate},
                             {16, MlaDecodeRing::kLeanPrefetch, true, kEarly},
                             {8, MlaDecodeRing::kLean, true, kLate},
                             {8, MlaDecodeRing::kLeanDeep, false, kLate},
                             {4, MlaDecodeRing::kLean, true, kEarly},
                             {2, MlaDecodeRing::kLeanPrefetch, false, kLate},
                             {16, MlaDecodeRing::kLean, true, kLate, MlaDecodeLoader::kCpAsync},
                             {16, MlaDecodeRing::kLeanWide, true, kLate},
                             {16, MlaDecodeRing::kLeanWidePrefetch, true, kEarly},
                             {8, MlaDecodeRing::kLeanWidePrefetch, false, kLate},
                             {4, MlaDecodeRing::kLeanWide, true, kEarly}};
  for (const ClusterOpt& o : opts) {
    if (rows * o.cluster > cap) continue;
    MlaDecodePlan plan;
    ASSERT_TRUE(build_mla_decode_cluster_plan(c.ctx.data(), rows, c.page, cap, o.cluster, &plan).is_ok());
    auto dplan = dev(plan.image);
    MlaDecodeWork w;
    w.plan = dplan.get(), w.capacity = cap, w.launch_items = plan.num_items, w.merge_mode = MlaDecodeMerge::kCluster;
    w.cluster = o.cluster, w.ring = o.ring, w.pdl = o.pdl, w.trigger = o.trigger, w.loader = o.loader, w.cache_pages = pages;
    if (c.heads > 3) {
      EXPECT_FALSE(mla_decode_run(a, w, stream).is_ok()) << "the cluster form takes <= 3 heads";
      return;
    }
    ASSERT_TRUE(out.upload(std::vector<float>(rows * c.heads * c.lat, NAN)).is_ok());
    if (o.pdl) {
      ASSERT_TRUE(dql.upload(std::vector<float>(q_size, 0.0f)).is_ok());
      ASSERT_TRUE(add_inplace(dql.get(), dql_src.get(), static_cast<int64_t>(q_size), stream).is_ok());
    }
    ASSERT_TRUE(mla_decode_run(a, w, stream).is_ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto got = host(out);
    EXPECT_LT(nerr(got, ref), 2e-5) << "cluster " << o.cluster << " ring " << static_cast<int>(o.ring) << " pdl " << o.pdl << " trigger "
                                    << static_cast<int>(o.trigger) << " loader " << static_cast<int>(o.loader) << " heads " << c.heads;
    if (c.negative_row >= 0) {
      for (int64_t i = 0; i < c.heads * c.lat; ++i) ASSERT_EQ(got[c.negative_row * c.heads * c.lat + i], 0.0f);
    }
  }
  if (c.heads > 3 || rows * kMlaClusterItems > cap) return;
  // A graph of two steps (pdl, the plan's cluster), replayed twice over NaN-filled outputs.
  MlaDecodePlan plan;
  ASSERT_TRUE(build_mla_decode_cluster_plan(c.ctx.data(), rows, c.page, cap, kMlaClusterItems, &plan).is_ok());
  auto dplan = dev(plan.image);
  MlaDecodeWork w;
  w.plan = dplan.get(), w.capacity = cap, w.launch_items = cap, w.merge_mode = MlaDecodeMerge::kCluster;
  w.cluster = plan.cluster, w.ring = plan.ring, w.pdl = true, w.cache_pages = pages;
  replay_two_step_graph(a, w, stream, out, rows * c.heads * c.lat, ref, "cluster");
}

// The block-softmax form (`ring`: kLeanBlockPrefetch, kLeanBlockEarly, kLeanEarly; pdl, the plan's
// merge, trigger and slice; the full capacity launched and always merged, as the backend's graphs
// do) captured as two steps in a graph, replayed twice over NaN-filled outputs and partials.
void run_block_graph(MlaDecodeArgs a, MlaDecodeWork w, const MlaDecodePlan& plan, int64_t cap, const std::vector<float>& ref,
                     cudaStream_t stream, DeviceBuffer<float>& out, int64_t out_size, int64_t pages, MlaDecodeRing ring) {
  w.variant = MlaDecodeVariant::kAuto, w.loader = MlaDecodeLoader::kAuto, w.pdl = true, w.trigger = plan.trigger;
  w.merge_mode = plan.merge, w.counters = nullptr, w.dynamic_tiles = false, w.ring = ring, w.new_tokens = 1;
  w.cache_pages = pages, w.merge_slice = plan.merge_slice ? plan.merge_slice : 64, w.launch_items = cap, w.merge = true;
  replay_two_step_graph(a, w, stream, out, out_size, ref,
                        "ring " + std::to_string(static_cast<int>(ring)) + ", items " + std::to_string(plan.num_items));
}

void run_case(const Case& c, uint32_t seed) {
  const int64_t rows = c.ctx.size(), entry = c.lat + c.rope;
  int64_t max_pages = 1, used_pages = 0;
  for (int32_t n : c.ctx) {
    max_pages = std::max<int64_t>(max_pages, (n + c.page - 1) / c.page);
    used_pages += (n + c.page - 1) / c.page;
  }
  // Non-contiguous tables: a shuffled pool with spare pages in between.
  const int64_t pages = 2 * used_pages + 3;
  std::vector<int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<int32_t> table(rows * max_pages, -1);
  int64_t next = 0;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t p = 0; p < (c.ctx[b] + c.page - 1) / c.page; ++p) table[b * max_pages + p] = b == c.negative_row ? -1 : perm[next++];
  const auto cache = randn(pages * c.page * entry, seed + 1);
  const auto ql = randn(rows * c.heads * c.lat, seed + 2), qr = randn(rows * c.heads * c.rope, seed + 3);
  const float scale = 1.0f / std::sqrt(192.0f);
  std::vector<float> ref(rows * c.heads * c.lat, 0.0f);
  for (int64_t b = 0; b < rows; ++b) {
    if (b == c.negative_row || c.ctx[b] <= 0) continue;  // nothing to attend to: zeros
    ops::PagedLatentView view{cache.data(), c.page, entry, &table[b * max_pages]};
    ops::mla_attend_latent(&ql[b * c.heads * c.lat], &qr[b * c.heads * c.rope], c.heads, c.lat, c.rope, view, c.ctx[b], scale,
                           &ref[b * c.heads * c.lat]);
  }
  // Plans of one wave and of three (more, shorter items: more rows split and merged), with the
  // fused merge in one step up to 16 or 64 items, or two-step trees from 5 items on.
  const std::pair<int64_t, int64_t> plans[] = {{1, kMlaMergeFanIn}, {3, 4}, {1, kMlaMaxMergeFanIn}};
  for (const auto& [waves, fan_in] : plans) {
    if (c.cluster_only && waves != 1) continue;
    const int64_t cap = mla_decode_plan_capacity(rows, waves);
    MlaDecodePlan plan;
    ASSERT_TRUE(build_mla_decode_plan(c.ctx.data(), rows, c.page, cap, &plan, waves, fan_in).is_ok());
    auto dc = dev(cache), dql = dev(ql), dqr = dev(qr);
    auto dplan = dev(plan.image), dt = dev(table), dctx = dev(c.ctx);
    DeviceBuffer<float> out(rows * c.heads * c.lat), part_o(cap * c.heads * c.lat), part_lse(cap * c.heads);
    auto counters = dev(std::vector<int32_t>(mla_decode_counter_words(rows, cap), 0));
    // Garbage (NaN) in the output before each run: every element must be written.
    MlaDecodeArgs a;
    a.q_lat = dql.get(), a.q_rot = dqr.get(), a.cache = dc.get(), a.page_table = dt.get(), a.ctx_len = dctx.get();
    a.rows = rows, a.heads = c.heads, a.latent_dim = c.lat, a.rope_dim = c.rope, a.page_size = c.page, a.max_pages = max_pages;
    a.scale = scale, a.o_lat = out.get();
    MlaDecodeWork w;
    w.plan = dplan.get(), w.capacity = cap, w.part_o = part_o.get(), w.part_lse = part_lse.get();
    w.launch_items = c.graph_launch ? cap : plan.num_items;
    w.merge = c.graph_launch || plan.any_split || plan.any_empty;
    // Both kernels where both apply (kAuto is the warp variant for <= 3 heads), both loaders
    // (kBulk falls back to cp.async where pages are not a multiple of the tile), and
    // programmatic dependent launches (the run, then the merge, each after a kernel that wrote
    // q: a run reading q before the wait would fail).
    // Both pdl triggers (early: the merge may launch while the run streams; late: as its CTAs end).
    // The merge: the separate kernel, or fused into the run (its counters must be back at zero
    // after every run, or the next run, e.g. a graph replay, would merge too early or never).
    struct Opt {
      MlaDecodeVariant variant;
      MlaDecodeLoader loader;
      bool pdl;
      MlaDecodeTrigger trigger = MlaDecodeTrigger::kEarly;
      MlaDecodeMerge merge = MlaDecodeMerge::kSeparate;
      bool dynamic_tiles = true;  // kFused + bulk: the row's CTAs share its tiles (else fixed ranges)
      MlaDecodeRing ring = MlaDecodeRing::kShallow;  // the warp variant's copy ring (kAuto: the plan's pick)
      // kLeanPrefetch's bound on page ids (MlaDecodeWork::cache_pages): the pool, or half of it
      // (hints past it skipped), or 0 (no hints: kLean itself).
      int64_t cache_pages_div = 1;
      int64_t new_tokens = 1;  // the early rings' newest tokens a row, read after the wait (here nothing writes the cache)
    };
    constexpr auto kDeep = MlaDecodeRing::kDeep, kLean = MlaDecodeRing::kLean, kLeanDeep = MlaDecodeRing::kLeanDeep;
    constexpr auto kBurst = MlaDecodeRing::kLeanBurst, kPrefetch = MlaDecodeRing::kLeanPrefetch, kAhead = MlaDecodeRing::kLeanAhead;
    constexpr auto kChained = MlaDecodeMerge::kSeparateChained, kSeparate = MlaDecodeMerge::kSeparate;
    constexpr auto kLate = MlaDecodeTrigger::kLate, kEarly = MlaDecodeTrigger::kEarly;
    constexpr auto kFused = MlaDecodeMerge::kFused;
    constexpr auto kBlock = MlaDecodeRing::kLeanBlock, kBlockPf = MlaDecodeRing::kLeanBlockPrefetch;
    constexpr auto kBlockEarly = MlaDecodeRing::kLeanBlockEarly, kLeanEarly = MlaDecodeRing::kLeanEarly;
    constexpr auto kShort = MlaDecodeMerge::kSeparateShort;
    const Opt opts[] = {
                        // The early forms (fifteenth version): bulk with and without pdl, both triggers,
                        // the merge forms, new_tokens 1 (decode), 0 (every token early), 40 (tiles and
                        // items split at the stable bound, whole tiles after the wait) and past every row;
                        // kCpAsync keeps kShallow.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kBlockEarly},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, kShort, false, kBlockEarly},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kBlockEarly, 1, 40},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kChained, false, kBlockEarly, 1, 0},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, kSeparate, false, kBlockEarly, 1, 1 << 30},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kLeanEarly},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kChained, false, kLeanEarly},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kLeanEarly, 1, 40},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, kShort, false, kLeanEarly, 1, 0},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, true, kLate, kSeparate, false, kLeanEarly},
                        // The block-softmax form (fourteenth version): bulk with and without pdl, both
                        // triggers, the three merge forms, its pre-wait prefetch with half the pool in
                        // bounds and none; kCpAsync keeps kShallow.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kBlock},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kSeparate, false, kBlock},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, kChained, false, kBlock},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kBlock},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, kChained, false, kBlockPf},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kLate, kSeparate, false, kBlockPf, 2},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kBlockPf, 0},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kEarly, MlaDecodeMerge::kSeparateShort, false, kBlockPf},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, MlaDecodeMerge::kSeparateShort, false, kLean},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, kSeparate, false, kBlock},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kAuto, true, kEarly, MlaDecodeMerge::kAuto, false,
                         MlaDecodeRing::kAuto},  // the plan's pick
{MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, false},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate},
                        {MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, true},
                        {MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, true, kLate},
                        {MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, false, kEarly, kFused},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, kFused},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kFused},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kAuto, true, kLate, MlaDecodeMerge::kAuto, false,
                         MlaDecodeRing::kAuto},  // the defaults, with the plan's ring
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kAuto, true, kEarly, MlaDecodeMerge::kAuto, false,
                         MlaDecodeRing::kAuto},  // ... with the early trigger (the one-tile plans' pick)
                        // The deep ring (8-token tiles, 6 stages): bulk loader (kCpAsync keeps the
                        // shallow ring), with and without pdl, separate and fused merge.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, MlaDecodeMerge::kSeparate, false, kDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, MlaDecodeMerge::kSeparate, false, kDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, MlaDecodeMerge::kSeparate, false, kDeep},
                        // The lean scoring loop (kShallow's ring; K3's widths, else kShallow itself):
                        // bulk with and without pdl, separate and fused merge; kCpAsync keeps kShallow.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, MlaDecodeMerge::kSeparate, false, kLean},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, MlaDecodeMerge::kSeparate, false, kLean},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kLean},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, MlaDecodeMerge::kSeparate, false, kLean},
                        // ... and on the deep ring.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, MlaDecodeMerge::kSeparate, false, kLeanDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, MlaDecodeMerge::kSeparate, false, kLeanDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kLeanDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, MlaDecodeMerge::kSeparate, false, kLeanDeep},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kAuto, true, kLate, kFused},
                        {MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, true, kLate, kFused},
                        // The lean loop with the full first burst (kLeanBurst): bulk with and
                        // without pdl, separate and fused merge; kCpAsync keeps kShallow.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kBurst},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kSeparate, false, kBurst},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kBurst},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, kSeparate, false, kBurst},
                        // The lean loop with pre-wait L2 prefetches (kLeanPrefetch): bulk with and
                        // without pdl (with: the kernel just before writes q), separate and fused
                        // merge, half the pool in bounds, no bound; kCpAsync keeps kShallow.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kPrefetch},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kSeparate, false, kPrefetch},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kChained, false, kPrefetch, 2},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kPrefetch},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kSeparate, false, kPrefetch, 0},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, kSeparate, false, kPrefetch},
                        // The lean loop with the L2 ahead of the ring (kLeanAhead): the same forms.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kSeparate, false, kAhead},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kSeparate, false, kAhead},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kChained, false, kAhead},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kFused, false, kAhead},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kCpAsync, false, kEarly, kSeparate, false, kAhead},
                        // The eighth version's separate merge (weights first, then the partials),
                        // kept to compare; kSeparate above is the early-load one.
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, false, kEarly, kChained, false, kLean},
                        {MlaDecodeVariant::kAuto, MlaDecodeLoader::kBulk, true, kLate, kChained, false, kLean},
                        {MlaDecodeVariant::kBlock, MlaDecodeLoader::kAuto, true, kLate, kChained}};
    // A blocking stream: the uploads below are cudaMemcpy from pageable memory on the legacy
    // stream, whose DMA may still be landing when the call returns; a non-blocking stream would
    // race them (seen on the H200: the zeros landing over the add's q).
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    auto dql_src = dev(ql);  // q is zero until the kernel just before the run adds it in
    for (const Opt& o : opts) {
      if (c.cluster_only) break;
      if (c.block_only && o.ring != kBlock && o.ring != kBlockPf && o.ring != kBlockEarly && o.ring != kLeanEarly &&
          o.ring != MlaDecodeRing::kAuto)
        continue;
      ASSERT_TRUE(out.upload(std::vector<float>(rows * c.heads * c.lat, NAN)).is_ok());
      // And in the partials: a merge that read one before it was written (this run's, not the
      // previous option's identical values) would show as NaN.
      ASSERT_TRUE(part_o.upload(std::vector<float>(cap * c.heads * c.lat, NAN)).is_ok());
      ASSERT_TRUE(part_lse.upload(std::vector<float>(cap * c.heads, NAN)).is_ok());
      w.variant = o.variant, w.loader = o.loader, w.pdl = o.pdl, w.trigger = o.trigger, w.merge_mode = o.merge;
      if (o.merge == MlaDecodeMerge::kAuto) w.merge_mode = plan.merge;  // the defaults: the plan's merge form
      w.counters = o.merge == kSeparate || o.merge == kChained || o.merge == MlaDecodeMerge::kSeparateShort || o.merge == MlaDecodeMerge::kAuto
                       ? nullptr
                       : counters.get();
      w.dynamic_tiles = o.dynamic_tiles;
      w.ring = o.ring == MlaDecodeRing::kAuto ? plan.ring : o.ring;
      w.cache_pages = o.cache_pages_div == 0 ? 0 : pages / o.cache_pages_div;
      w.new_tokens = o.new_tokens;
      w.merge_slice = o.ring == MlaDecodeRing::kAuto ? plan.merge_slice : 64;  // the defaults: the plan's slice
      if (o.pdl) {
        ASSERT_TRUE(dql.upload(std::vector<float>(ql.size(), 0.0f)).is_ok());
        ASSERT_TRUE(add_inplace(dql.get(), dql_src.get(), static_cast<int64_t>(ql.size()), stream).is_ok());
      }
      ASSERT_TRUE(mla_decode_run(a, w, stream).is_ok());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const auto got = host(out);
      EXPECT_LT(nerr(got, ref), 2e-5) << "heads " << c.heads << " items " << plan.num_items << " variant "
                                      << static_cast<int>(o.variant) << " loader " << static_cast<int>(o.loader) << " pdl " << o.pdl
                                      << " trigger " << static_cast<int>(o.trigger) << " merge " << static_cast<int>(o.merge) << " dynamic " << o.dynamic_tiles << " ring " << static_cast<int>(w.ring) << " cache pages " << w.cache_pages
                                      << " waves " << waves << " fan-in " << fan_in << " new tokens " << w.new_tokens;
      if (w.counters) {
        const auto left = host(counters);
        EXPECT_EQ(std::count(left.begin(), left.end(), 0), static_cast<int64_t>(left.size())) << "counters not reset";
      }
      if (c.negative_row >= 0) {
        for (int64_t i = 0; i < c.heads * c.lat; ++i) ASSERT_EQ(got[c.negative_row * c.heads * c.lat + i], 0.0f);
      }
    }
    // The separate merge's slices (16, 32, 64 dims a CTA) sum every element in the same order:
    // bit-identical outputs, both merge forms, with pdl and the plan's ring.
    if (c.block_only) {  // a captured graph of two steps of the block form, replayed twice
      for (MlaDecodeRing r : {kBlockPf, kBlockEarly, kLeanEarly}) run_block_graph(a, w, plan, cap, ref, stream, out, c.heads * c.lat * rows, pages, r);
      cudaStreamDestroy(stream);
      continue;
    }
    for (MlaDecodeMerge form : {kSeparate, kChained, MlaDecodeMerge::kSeparateShort}) {
      if (c.cluster_only) break;
      std::vector<float> wide;
      for (int slice : {64, 16, 32}) {
        ASSERT_TRUE(out.upload(std::vector<float>(rows * c.heads * c.lat, NAN)).is_ok());
        ASSERT_TRUE(part_o.upload(std::vector<float>(cap * c.heads * c.lat, NAN)).is_ok());
        w.variant = MlaDecodeVariant::kAuto, w.loader = MlaDecodeLoader::kAuto, w.pdl = true, w.trigger = kLate;
        w.merge_mode = form, w.counters = nullptr, w.dynamic_tiles = false, w.ring = plan.ring, w.cache_pages = pages, w.new_tokens = 1;
        w.merge_slice = slice;
        ASSERT_TRUE(dql.upload(std::vector<float>(ql.size(), 0.0f)).is_ok());
        ASSERT_TRUE(add_inplace(dql.get(), dql_src.get(), static_cast<int64_t>(ql.size()), stream).is_ok());
        ASSERT_TRUE(mla_decode_run(a, w, stream).is_ok());
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const auto got = host(out);
        EXPECT_LT(nerr(got, ref), 2e-5) << "merge slice " << slice << " form " << static_cast<int>(form);
        if (slice == 64) wide = got;
        else
          EXPECT_EQ(std::memcmp(got.data(), wide.data(), got.size() * sizeof(float)), 0)
              << "merge slice " << slice << " differs from 64, form " << static_cast<int>(form) << " heads " << c.heads;
      }
    }
    w.merge_slice = 7;  // refused, not launched (the slices' loop set a separate merge form)
    if (!c.cluster_only) {
      EXPECT_FALSE(mla_decode_run(a, w, stream).is_ok());
    }
    w.merge_slice = 64;
    if (waves == 1) run_cluster_forms(c, a, ref, pages, cap, dql, dql_src, ql.size(), out, stream);
    cudaStreamDestroy(stream);
  }
}

TEST_F(MlaDecode, RaggedRowsMatchTheCpuReference) {
  for (int64_t heads : {1, 3, 4})
    run_case({heads, 512, 64, 64, {1, 63, 64, 65, 4097, 32, 0, 2000}}, 100 + static_cast<uint32_t>(heads));
}

// The same batch at the block variant's head counts (a test of its own so that the sanitizers
// can run it beside the other).
TEST_F(MlaDecode, RaggedRowsManyHeadsMatchTheCpuReference) {
  for (int64_t heads : {16, 24})
    run_case({heads, 512, 64, 64, {1, 63, 64, 65, 4097, 32, 0, 2000}}, 100 + static_cast<uint32_t>(heads));
}

TEST_F(MlaDecode, GraphLaunchOfTheFullCapacityMatches) {
  run_case({3, 512, 64, 64, {65, 4097, 1, 0, 777}, true}, 7);
}

TEST_F(MlaDecode, NegativePageTableRowWritesZeros) {
  run_case({3, 512, 64, 64, {300, 130, 5000}, false, 1}, 8);
}

TEST_F(MlaDecode, ManyRowsMixOfSingleAndSplitRows) {
  std::mt19937 gen(9);
  std::vector<int32_t> ctx(40);
  for (auto& n : ctx) n = static_cast<int32_t>(gen() % 1500);
  run_case({3, 512, 64, 64, ctx}, 10);
  run_case({8, 512, 64, 64, ctx, true}, 11);
}

TEST_F(MlaDecode, LongSingleRowManySplits) {
  run_case({3, 512, 64, 64, {40000}}, 12);
}

// Batch 1 and a few rows through the cluster form (run_cluster_forms, inside run_case):
// contexts 1, 63, 64, 65, 1K, pages half full (32 of 64 tokens), an all -1 page table row.
TEST_F(MlaDecode, ClusterMergeMatchesTheCpuReference) {
  const std::vector<std::vector<int32_t>> ctxs = {{1}, {63}, {64}, {65}, {1024}, {32}, {1, 63, 64, 65}, {1024, 0, 96}};
  uint32_t seed = 300;
  for (const auto& ctx : ctxs) run_case({3, 512, 64, 64, ctx, false, -1, true}, seed++);
  for (int64_t heads : {1, 2}) run_case({heads, 512, 64, 64, {1024, 65}, false, -1, true}, seed++);
  run_case({3, 512, 64, 64, {300, 1000, 130}, false, 1, true}, seed++);
  run_case({3, 512, 64, 64, {1024, 777}, true, -1, true}, seed++);
  run_case({2, 32, 16, 4, {1, 3, 17, 0}, false, -1, true}, seed++);  // the tiny models' widths (cp.async ring)
  run_case({3, 32, 16, 16, {1, 15, 16, 33, 260}, false, -1, true}, seed++);  // ... bulk, not lean
}

// One small case of the cluster forms, for compute-sanitizer racecheck (the whole test above
// is too slow under it).
TEST_F(MlaDecode, ClusterSmallCase) { run_case({3, 512, 64, 64, {1024, 65}, false, -1, true}, 400); }

// Batch 1 and a few rows through the block-softmax form (kLeanBlock*, the opts above and a
// captured graph): contexts 1, 63, 64, 65, 1K, 2K, a half-full page (32), several rows, an all -1
// page-table row, heads 1 and 2, the tiny models' widths (which run the fallback ring).
TEST_F(MlaDecode, BlockSoftmaxMatchesTheCpuReference) {
  const std::vector<std::vector<int32_t>> ctxs = {{1}, {63}, {64}, {65}, {1024}, {2048}, {32}, {1, 63, 64, 65}, {1024, 0, 96}};
  uint32_t seed = 500;
  for (const auto& ctx : ctxs) run_case({3, 512, 64, 64, ctx, false, -1, false, true}, seed++);
  for (int64_t heads : {1, 2}) run_case({heads, 512, 64, 64, {1024, 65}, false, -1, false, true}, seed++);
  run_case({3, 512, 64, 64, {300, 1000, 130}, false, 1, false, true}, seed++);
  run_case({3, 512, 64, 64, {1024, 777, 4097}, true, -1, false, true}, seed++);
  run_case({3, 32, 16, 16, {1, 15, 16, 33, 260}, false, -1, false, true}, seed++);
}

// One small case of the block-softmax form for compute-sanitizer (memcheck, racecheck).
TEST_F(MlaDecode, BlockSoftmaxSmallCase) { run_case({3, 512, 64, 64, {1024, 65, 0}, false, -1, false, true}, 600); }

TEST_F(MlaDecode, TinyModelShapes) {
  // The engine's tiny test models: latent 32, rope 16, small pages.
  run_case({2, 32, 16, 4, {1, 3, 4, 5, 17, 0, 100}}, 13);
  run_case({4, 32, 16, 16, {1, 15, 16, 33, 260}, true}, 14);
}

TEST(MlaDecodeShapes, SupportedShapes) {
  EXPECT_TRUE(mla_decode_supported(3, 512, 64));
  EXPECT_TRUE(mla_decode_supported(32, 32, 16));
  EXPECT_FALSE(mla_decode_supported(33, 512, 64));   // more heads than one CTA holds
  EXPECT_FALSE(mla_decode_supported(3, 512, 66));    // a token row that is not 16-byte aligned
  EXPECT_FALSE(mla_decode_supported(3, 1024, 64));   // more latent dims than threads x 2
}

TEST_F(MlaDecode, WarpVariantRefusesShapesItCannotTake) {
  MlaDecodeArgs a;
  a.rows = 1, a.heads = 4, a.latent_dim = 512, a.rope_dim = 64, a.page_size = 64;
  MlaDecodeWork w;
  w.variant = MlaDecodeVariant::kWarp;
  EXPECT_FALSE(mla_decode_run(a, w, nullptr).is_ok());
  // The fused merge without its counters workspace is refused, not run unmerged.
  a.heads = 3;
  w.variant = MlaDecodeVariant::kAuto;
  w.merge_mode = MlaDecodeMerge::kFused;
  EXPECT_FALSE(mla_decode_run(a, w, nullptr).is_ok());
}

}  // namespace
}  // namespace pdserve::cuda
