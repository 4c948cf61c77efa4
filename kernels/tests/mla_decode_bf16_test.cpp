// The split-KV MLA decode and its anchor mla_attend_latent on a bf16 latent cache
// (MlaDecodeArgs::cache_bf16; mla/mla_decode.h): against the CPU reference run on the bf16
// cache's exact fp32 expansion (the fp32 path's bound), and against the fp32 path on an fp32
// cache holding the same values (the same sums: bit-identical). Skips without an sm_90 GPU.
// Part of mla_decode_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "glue/glue.h"
#include "mla/mla_decode.h"
#include "pdserve/core/dtype.h"
#include "pdserve/ops/mla.h"
#include "mla_decode_test_util.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using ktest::dev;
using ktest::host;
using ktest::nerr;
using ktest::replay_two_step_graph;
using ktest::randn;

class MlaDecodeBf16 : public ktest::GpuTest {};

struct Bf16Case {
  int64_t heads;
  std::vector<int32_t> ctx;
  bool graph_launch = false;  // launch the full capacity and always merge, as a graph does
  int64_t negative_row = -1;  // this row's page table is all -1: its output must be zero
  bool small = false;         // a few options only (the sanitizers' cases)
};

// The fp32 ring whose sums the bf16 run computes for `ring` (mla_decode.h: the bf16 mapping).
MlaDecodeRing fp32_twin(MlaDecodeRing ring) {
  switch (ring) {
    case MlaDecodeRing::kLeanBlockEarly:
    case MlaDecodeRing::kLeanBlock:
    case MlaDecodeRing::kLeanEarly: return ring;
    case MlaDecodeRing::kLeanBlockPrefetch: return MlaDecodeRing::kLeanBlock;
    default: return MlaDecodeRing::kLean;
  }
}

// The tensor-core form's bound against the reference (normalised): q and p carried as bf16 hi + lo
// (~2^-17 relative) and the tensor cores' fp32 sums; measured up to 9.2e-6 over these cases on the
// H200 (the cuda-core forms meet 2e-5 with bit-identical fp32 sums). A wrong fragment, a stale row
// or a lost correction gives errors of order 1.
constexpr double kTensorCoreBound = 5e-5;
double g_tc_max_err = 0.0;  // the largest seen, printed by the last test

std::string ring_name(MlaDecodeRing r) { return std::to_string(static_cast<int>(r)); }

void run_bf16_case(const Bf16Case& c, uint32_t seed) {
  constexpr int64_t kL = 512, kR = 64, kE = kL + kR, kP = 64;
  const int64_t rows = c.ctx.size(), H = c.heads;
  int64_t max_pages = 1, used = 0;
  for (int32_t n : c.ctx) max_pages = std::max<int64_t>(max_pages, (n + kP - 1) / kP), used += (n + kP - 1) / kP;
  const int64_t pages = 2 * used + 3;
  std::vector<int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<int32_t> table(rows * max_pages, -1);
  int64_t next = 0;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t p = 0; p < (c.ctx[b] + kP - 1) / kP; ++p) table[b * max_pages + p] = b == c.negative_row ? -1 : perm[next++];
  // The bf16 cache (rounded to nearest even) and its exact fp32 expansion. Every entry no row may
  // attend to is NaN: the slots past each row's end in its last page (the tensor-core form copies
  // whole 16-token tiles and must zero those rows before P x V) and the pages no row holds.
  auto raw = randn(pages * kP * kE, seed + 1);
  std::vector<bool> live(pages * kP, false);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < c.ctx[b]; ++t)
      if (table[b * max_pages + t / kP] >= 0) live[table[b * max_pages + t / kP] * kP + t % kP] = true;
  for (int64_t e = 0; e < pages * kP; ++e)
    if (!live[e]) std::fill_n(raw.begin() + e * kE, kE, NAN);
  std::vector<uint16_t> cache16(raw.size());
  std::vector<float> cache32(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) cache16[i] = f32_to_bf16(raw[i]), cache32[i] = bf16_to_f32(cache16[i]);
  const auto ql = randn(rows * H * kL, seed + 2), qr = randn(rows * H * kR, seed + 3);
  const float scale = 1.0f / std::sqrt(192.0f);
  std::vector<float> ref(rows * H * kL, 0.0f);
  for (int64_t b = 0; b < rows; ++b) {
    if (b == c.negative_row || c.ctx[b] <= 0) continue;
    ops::PagedLatentView view{cache32.data(), kP, kE, &table[b * max_pages]};
    ops::mla_attend_latent(&ql[b * H * kL], &qr[b * H * kR], H, kL, kR, view, c.ctx[b], scale, &ref[b * H * kL]);
  }
  auto d16 = dev(cache16);
  auto d32 = dev(cache32), dql = dev(ql), dqr = dev(qr), dql_src = dev(ql);
  auto dt = dev(table), dctx = dev(c.ctx);
  DeviceBuffer<float> out(rows * H * kL);
  MlaDecodeArgs a;
  a.q_lat = dql.get(), a.q_rot = dqr.get(), a.page_table = dt.get(), a.ctx_len = dctx.get();
  a.rows = rows, a.heads = H, a.latent_dim = kL, a.rope_dim = kR, a.page_size = kP, a.max_pages = max_pages;
  a.scale = scale, a.o_lat = out.get();
  // The anchor (mla_attend_latent) on the bf16 pages: the bound of its fp32 test (kernels_test).
  // Not with a negative page-table row: the anchor does not mask negative page ids (fp32 neither).
  if (c.negative_row < 0) {
    MlaDecodeArgs b = a;
    b.cache_bf16 = d16.get();
    ASSERT_TRUE(out.upload(std::vector<float>(rows * H * kL, NAN)).is_ok());
    ASSERT_TRUE(mla_attend_latent(b, nullptr).is_ok());
    EXPECT_LT(nerr(host(out), ref), 1e-4) << "mla_attend_latent on bf16 pages";
  }
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);  // blocking: see mla_decode_test.cpp run_case
  struct Opt {
    MlaDecodeRing ring;  // kAuto: the plan's pick
    MlaDecodeMerge merge;
    bool pdl;
    MlaDecodeTrigger trigger;
    int stages;  // MlaDecodeWork::bf16_stages
    int64_t new_tokens = 1;
    bool prmt = false;
  };
  constexpr auto kLate = MlaDecodeTrigger::kLate, kEarly = MlaDecodeTrigger::kEarly;
  constexpr auto kSep = MlaDecodeMerge::kSeparate, kShort = MlaDecodeMerge::kSeparateShort, kChained = MlaDecodeMerge::kSeparateChained;
  constexpr auto kFused = MlaDecodeMerge::kFused, kPlanMerge = MlaDecodeMerge::kAuto;
  constexpr auto kBE = MlaDecodeRing::kLeanBlockEarly, kB = MlaDecodeRing::kLeanBlock, kBP = MlaDecodeRing::kLeanBlockPrefetch;
  constexpr auto kLE = MlaDecodeRing::kLeanEarly, kLean = MlaDecodeRing::kLean, kAuto = MlaDecodeRing::kAuto;
  const std::vector<Opt> all = {{kAuto, kPlanMerge, true, kLate, 0},  {kAuto, kPlanMerge, true, kEarly, 3},
                                {kBE, kSep, false, kEarly, 3},        {kBE, kShort, true, kEarly, 6},
                                {kBE, kFused, true, kLate, 6, 40},    {kBE, kChained, true, kLate, 3, 0},
                                {kBE, kSep, true, kEarly, 6, 1 << 30}, {kB, kSep, false, kEarly, 6},
                                {kB, kShort, true, kLate, 3},         {kB, kFused, true, kLate, 3},
                                {kBP, kChained, true, kEarly, 6},     {kLean, kSep, false, kEarly, 3},
                                {kLean, kChained, true, kLate, 6},    {kLean, kFused, true, kLate, 6},
                                {kLean, kSep, true, kLate, 6, 1, true}, {kLean, kShort, true, kEarly, 3, 1, true},
                                {kLE, kSep, false, kEarly, 6},        {kLE, kChained, true, kLate, 3},
                                {kLE, kFused, true, kLate, 6, 40},    {kLE, kShort, true, kEarly, 3, 0},
                                {MlaDecodeRing::kShallow, kSep, true, kLate, 0}, {MlaDecodeRing::kLeanPrefetch, kSep, true, kLate, 0},
                                {MlaDecodeRing::kLeanDeep, kChained, false, kEarly, 0}};
  const std::vector<Opt> few = {{kAuto, kPlanMerge, true, kLate, 0}, {kBE, kShort, true, kEarly, 6}, {kB, kFused, true, kLate, 3},
                                {kLean, kSep, true, kLate, 6, 1, true}, {kLE, kChained, true, kLate, 3}};
  // Plans of one wave and of three (more, shorter items: more rows split and merged; two-step
  // fused trees from 5 items on).
  for (const auto& [waves, fan_in] : {std::pair<int64_t, int64_t>{1, kMlaMergeFanIn}, {3, 4}}) {
    const int64_t cap = mla_decode_plan_capacity(rows, waves);
    MlaDecodePlan plan;
    ASSERT_TRUE(build_mla_decode_plan(c.ctx.data(), rows, kP, cap, &plan, waves, fan_in).is_ok());
    auto dplan = dev(plan.image);
    DeviceBuffer<float> part_o(cap * H * kL), part_lse(cap * H);
    auto counters = dev(std::vector<int32_t>(mla_decode_counter_words(rows, cap), 0));
    for (const Opt& o : c.small ? few : all) {
      MlaDecodeWork w;
      w.plan = dplan.get(), w.capacity = cap, w.part_o = part_o.get(), w.part_lse = part_lse.get();
      w.launch_items = c.graph_launch ? cap : plan.num_items;
      w.merge = c.graph_launch || plan.any_split || plan.any_empty;
      w.ring = o.ring == kAuto ? plan.ring : o.ring;
      w.merge_mode = o.merge == kPlanMerge ? plan.merge : o.merge;
      w.counters = o.merge == kFused ? counters.get() : nullptr;
      w.pdl = o.pdl, w.trigger = o.trigger, w.new_tokens = o.new_tokens, w.cache_pages = pages;
      w.merge_slice = o.ring == kAuto && plan.merge_slice ? plan.merge_slice : 64;
      const std::string what = "ring " + ring_name(w.ring) + " merge " + std::to_string(static_cast<int>(w.merge_mode)) + " pdl " +
                               std::to_string(o.pdl) + " stages " + std::to_string(o.stages) + " prmt " + std::to_string(o.prmt) +
                               " new tokens " + std::to_string(o.new_tokens) + " waves " + std::to_string(waves) + " heads " +
                               std::to_string(H) + " items " + std::to_string(plan.num_items);
      // One run of `w` on `args` over NaN-filled outputs and partials (with pdl, the kernel
      // just before writes q: a run reading q before its wait would fail).
      auto run = [&](const MlaDecodeArgs& args, const MlaDecodeWork& wk) {
        EXPECT_TRUE(out.upload(std::vector<float>(rows * H * kL, NAN)).is_ok());
        EXPECT_TRUE(part_o.upload(std::vector<float>(cap * H * kL, NAN)).is_ok());
        EXPECT_TRUE(part_lse.upload(std::vector<float>(cap * H, NAN)).is_ok());
        if (wk.pdl) {
          EXPECT_TRUE(dql.upload(std::vector<float>(ql.size(), 0.0f)).is_ok());
          EXPECT_TRUE(add_inplace(dql.get(), dql_src.get(), static_cast<int64_t>(ql.size()), stream).is_ok());
        }
        EXPECT_TRUE(mla_decode_run(args, wk, stream).is_ok()) << what;
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        return host(out);
      };
      MlaDecodeArgs a16 = a;
      a16.cache_bf16 = d16.get();
      MlaDecodeWork w16 = w;
      w16.bf16_stages = o.stages, w16.bf16_prmt = o.prmt, w16.bf16_math = MlaDecodeBf16Math::kCudaCores;
      const auto got = run(a16, w16);
      EXPECT_LT(nerr(got, ref), 2e-5) << what;
      if (w.counters) {
        const auto left = host(counters);
        EXPECT_EQ(std::count(left.begin(), left.end(), 0), static_cast<int64_t>(left.size())) << "counters not reset, " << what;
      }
      if (c.negative_row >= 0) {
        for (int64_t i = 0; i < H * kL; ++i) ASSERT_EQ(got[c.negative_row * H * kL + i], 0.0f) << what;
      }
      // The fp32 path on the expansion, with the ring whose sums the bf16 form computes: the same bits.
      MlaDecodeArgs a32 = a;
      a32.cache = d32.get();
      MlaDecodeWork w32 = w;
      w32.ring = fp32_twin(w.ring);
      const auto f32 = run(a32, w32);
      EXPECT_LT(nerr(got, f32), 2e-5) << what;
      EXPECT_EQ(std::memcmp(got.data(), f32.data(), got.size() * sizeof(float)), 0) << "bf16 != fp32 bits, " << what;
      // The tensor-core form with the same ring / merge / trigger: within kTensorCoreBound of the
      // reference; with the fused merge the cuda-core form runs (the same bits as above).
      MlaDecodeWork wtc = w16;
      wtc.bf16_math = MlaDecodeBf16Math::kTensorCores;
      const std::string how = "tensor cores, " + what;
      const auto tc = run(a16, wtc);
      const double tc_err = nerr(tc, ref);
      g_tc_max_err = std::max(g_tc_max_err, tc_err);
      EXPECT_LT(tc_err, kTensorCoreBound) << how;
      if (w.counters) {
        EXPECT_EQ(std::memcmp(tc.data(), got.data(), got.size() * sizeof(float)), 0) << "fused: not the cuda-core form, " << how;
      }
      if (c.negative_row >= 0) {
        for (int64_t i = 0; i < H * kL; ++i) ASSERT_EQ(tc[c.negative_row * H * kL + i], 0.0f) << how;
      }
      // kAuto (the default): the cuda-core form for the block-softmax rings, else the tensor cores;
      // both kernels are deterministic, so the bits tell which ran.
      MlaDecodeWork wauto = w16;
      wauto.bf16_math = MlaDecodeBf16Math::kAuto;
      const auto dflt = run(a16, wauto);
      const bool block = w.ring == kB || w.ring == kBE || w.ring == kBP;
      EXPECT_EQ(std::memcmp(dflt.data(), (block ? got : tc).data(), got.size() * sizeof(float)), 0)
          << "the default is not the " << (block ? "cuda-core" : "tensor-core") << " form, " << what;
    }
    // A graph of two steps (pdl, the plan's ring / merge / trigger / slice, the full capacity),
    // captured after one eager run, replayed twice over NaN-filled outputs.
    MlaDecodeArgs a16 = a;
    a16.cache_bf16 = d16.get();
    MlaDecodeWork w;
    w.plan = dplan.get(), w.capacity = cap, w.part_o = part_o.get(), w.part_lse = part_lse.get(), w.launch_items = cap, w.merge = true;
    w.ring = plan.ring, w.merge_mode = plan.merge, w.trigger = plan.trigger, w.merge_slice = plan.merge_slice ? plan.merge_slice : 64;
    w.pdl = true, w.cache_pages = pages;
    w.bf16_math = MlaDecodeBf16Math::kCudaCores;
    for (int stages : {3, 6}) {
      w.bf16_stages = stages;
      replay_two_step_graph(a16, w, stream, out, rows * H * kL, ref,
                            "bf16 stages " + std::to_string(stages) + " ring " + ring_name(plan.ring));
    }
    w.bf16_math = MlaDecodeBf16Math::kTensorCores;
    replay_two_step_graph(a16, w, stream, out, rows * H * kL, ref, "bf16 tensor cores, ring " + ring_name(plan.ring), kTensorCoreBound);
  }
  cudaStreamDestroy(stream);
}

// Ragged rows (1, 63, 64, 65 tokens, a half-full page of 32, an empty row, split rows) at 1-3 heads.
// The shapes the CUDA backend hands a bf16 cache to the split-KV run for (else mla_attend_latent).
TEST(MlaDecodeBf16Shapes, OnlyTheLeanFormsShapesAreTaken) {
  EXPECT_TRUE(mla_decode_bf16_supported(3, 512, 64, 64));
  EXPECT_TRUE(mla_decode_bf16_supported(1, 512, 64, 16));
  EXPECT_FALSE(mla_decode_bf16_supported(4, 512, 64, 64));  // the block variant has no bf16 form
  EXPECT_FALSE(mla_decode_bf16_supported(3, 32, 16, 64));   // the tiny presets' widths
  EXPECT_FALSE(mla_decode_bf16_supported(3, 512, 0, 64));
  EXPECT_FALSE(mla_decode_bf16_supported(3, 512, 64, 24));  // a tile would cross pages: no bulk loader
  EXPECT_FALSE(mla_decode_bf16_supported(3, 512, 64, 0));
}

TEST_F(MlaDecodeBf16, RaggedRowsMatchTheCpuReferenceAndTheFp32Path) {
  for (int64_t heads : {1, 2, 3}) run_bf16_case({heads, {1, 63, 64, 65, 4097, 32, 0, 2000}}, 900 + static_cast<uint32_t>(heads));
}

// Batch 1 at the shapes the plan gives one-tile (kLeanBlockEarly), two-tile (kLeanBlock) and longer
// (kLean) items, a half-full page, a graph launch of the full capacity, an all -1 page-table row.
TEST_F(MlaDecodeBf16, BatchOneSplitRowsGraphsAndNegativePages) {
  const std::vector<std::vector<int32_t>> ctxs = {{1}, {63}, {64}, {65}, {32}, {1024}, {2048}, {40000}};
  uint32_t seed = 910;
  for (const auto& ctx : ctxs) run_bf16_case({3, ctx}, seed++);
  run_bf16_case({3, {65, 4097, 1, 0, 777}, true}, seed++);
  run_bf16_case({3, {300, 130, 5000}, false, 1}, seed++);
}

// One small case for compute-sanitizer (memcheck, racecheck).
TEST_F(MlaDecodeBf16, SmallCase) { run_bf16_case({3, {1024, 65, 0}, false, -1, true}, 950); }

// One process driving two GPUs (TP ranks and pipeline stages are threads of one process): the
// forms that need more than 48 KiB of shared memory are opted in on each GPU, not only on the
// first one a launch ran on (common/per_device.h). Skips with fewer than two GPUs.
TEST_F(MlaDecodeBf16, EveryGpuOfTheProcessRunsTheK3Forms) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < 2) GTEST_SKIP() << "one GPU";
  for (int dev : {0, 1, 0}) {
    ASSERT_EQ(cudaSetDevice(dev), cudaSuccess);
    run_bf16_case({3, {1024, 65, 0}, false, -1, true}, 960 + static_cast<uint32_t>(dev));
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

// What a bf16 cache does not take is refused (mla_decode.h), never run on the wrong bytes.
TEST_F(MlaDecodeBf16, RefusesFormsItCannotTake) {
  const uint16_t dummy = 0;
  MlaDecodeArgs a;
  a.rows = 1, a.heads = 3, a.latent_dim = 512, a.rope_dim = 64, a.page_size = 64, a.cache_bf16 = &dummy;
  MlaDecodeWork w;
  w.capacity = 8, w.launch_items = 1;
  auto refused = [&](MlaDecodeArgs x, MlaDecodeWork y) { return !mla_decode_run(x, y, nullptr).is_ok(); };
  MlaDecodeArgs many = a;
  many.heads = 4;
  EXPECT_TRUE(refused(many, w)) << "more than 3 heads";
  MlaDecodeArgs narrow = a;
  narrow.latent_dim = 32, narrow.rope_dim = 16;
  EXPECT_TRUE(refused(narrow, w)) << "other widths";
  MlaDecodeArgs odd_page = a;
  odd_page.page_size = 8;
  EXPECT_TRUE(refused(odd_page, w)) << "pages not a multiple of 16";
  MlaDecodeWork x = w;
  x.loader = MlaDecodeLoader::kCpAsync;
  EXPECT_TRUE(refused(a, x)) << "cp.async loader";
  x = w, x.variant = MlaDecodeVariant::kBlock;
  EXPECT_TRUE(refused(a, x)) << "block variant";
  x = w, x.merge_mode = MlaDecodeMerge::kCluster;
  EXPECT_TRUE(refused(a, x)) << "cluster merge";
  int32_t counters = 0;
  x = w, x.merge_mode = MlaDecodeMerge::kFused, x.counters = &counters, x.dynamic_tiles = true;
  EXPECT_TRUE(refused(a, x)) << "dynamic tiles";
  x = w, x.bf16_stages = 4;
  EXPECT_TRUE(refused(a, x)) << "4 stages";
  x = w, x.bf16_math = MlaDecodeBf16Math::kTensorCores;
  EXPECT_TRUE(refused(many, x)) << "more than 3 heads on tensor cores";
  std::printf("[ bf16 tensor cores ] largest normalised error against the reference in this run: %.3g\n", g_tc_max_err);
}

}  // namespace
}  // namespace pdserve::cuda
