// Split-KV MLA latent decode (mla/mla_decode.h) vs the old one-block-per-(row, head) kernel
// (mla_attend_latent) at K3 decode shapes: latent 512 + key 64 fp32 per token, pages of 64,
// random non-contiguous page tables. Effective bandwidth = cache bytes the step must read
// (rows x ctx x 576 x 4) / device time; floor = those bytes / 4.2 TB/s. Inputs rotate over
// enough copies of the page tables (distinct pages) that the 50 MB L2 never holds a step.
//   mla_decode_bench [quick | focus | tune | ring | pf] [noold]   (quick: a smoke run; focus: the 3-head shapes; noold: skip the
//   old kernel; tune: only the merge/tile options table, graphs, at the 3-head shapes; ring: only the
//   ring table: the lean ring with the chained / early / fused merge, the burst ring, the run alone, the copy ring
//   alone, at the small-batch / long-context shapes; ninth version; pf: the L2 prefetch rings
//   (lead over the ring, pre-wait), tenth version; timeline: per-CTA start / end stamps of the run and the merge
//   over a graph of back-to-back steps, where batch 1's time goes, eleventh version ("timeline short": 1 x 1K and
//   1 x 64K only); m12: the separate merge's slices (16 / 32 / 64 dims a CTA) and the early trigger, twelfth version;
//   m13: the one-launch cluster form against the plan's pick, and the launch floors, thirteenth version; m14: the block-softmax
//   form (kLeanBlock*) against the thirteenth pick, the floors, and at 1 x 1K both forms' timelines, fourteenth version;
//   m15: the early forms (kLeanBlockEarly, kLeanEarly) against the fourteenth pick, fifteenth version; m16: an fp32 against
//   a bf16 cache (MlaDecodeArgs::cache_bf16), sixteenth version: mla_decode_bench_m16.h; m17: the bf16 cache on tensor cores,
//   seventeenth version: mla_decode_bench_m17.h; m18: the load path alone, copies only, beside the runs: mla_decode_bench_m18.h;
//   skel: the bf16 step beside its skeleton, the same bytes moved with no math: mla_decode_bench_skel.h)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "bench/bench_util.h"
#include "bench/mla_decode_bench_kernels.cuh"
#include "bench/mla_decode_timeline.h"
#include "common/pdl_bulk.cuh"
#include "common/tensor_map.h"
#include "mla/mma_bf16.cuh"
#include "mla/mla_decode.h"
#include "pdserve/core/dtype.h"

using namespace pdserve::cuda;
using namespace pdserve::cuda::bench;

namespace {

bool g_no_old = false;  // "noold": skip the old kernel (seconds at long context)
bool g_tune = false;    // "tune": only the options table
bool g_m12 = false;     // "m12": the merge slices and the early trigger (twelfth version)
bool g_ring = false;    // "ring": only the ring / merge table (ninth version)
bool g_pf = false;      // "pf": only the pre-wait prefetch table (tenth version)
bool g_timeline = false;  // "timeline": only the per-CTA timelines (eleventh version)
bool g_m13 = false;       // "m13": the cluster form and the launch floors (thirteenth version)
bool g_m14 = false;       // "m14": the block-softmax form against the thirteenth pick, and the floors (fourteenth version)
bool g_m15 = false;       // "m15": the early forms (kLeanBlockEarly, kLeanEarly) against the fourteenth pick (fifteenth version)
using namespace mla_decode_bench_kernels;  // kLat, kRope, kEntry, kPage and the diagnostic kernels

struct Shape {
  int64_t heads, batch, ctx;
};

// `steps` calls of launch(stream, step) captured in one graph (after one eager call where
// eager_first: the floors' attribute opt-ins), replayed 8 times, the first untimed: median us a step.
template <typename Launch>
double graph_launch_us(const Launch& launch, int steps, bool eager_first = true) {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (eager_first) {
    launch(stream, 0);
    cudaStreamSynchronize(stream);
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture"), "capture");
  for (int i = 0; i < steps; ++i) launch(stream, i);
  check(cuda_status(cudaStreamEndCapture(stream, &graph), "end capture"), "capture");
  check(cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiate"), "instantiate");
  std::vector<double> runs;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int r = 0; r < 8; ++r) {
    cudaEventRecord(e0, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r > 0) runs.push_back(ms * 1e3 / steps);
  }
  check(cuda_status(cudaGetLastError(), "graph replay"), "graph replay");
  std::sort(runs.begin(), runs.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return runs[runs.size() / 2];
}

// `copies` page tables of `step_pages` pages each, disjoint slices of one fixed shuffle of the
// pool's pages: each graph step reads other, scattered pages (none left in L2 by the step before).
std::vector<DeviceBuffer<int32_t>> shuffled_page_tables(int64_t pool_pages, int64_t copies, int64_t step_pages) {
  std::vector<int32_t> perm(pool_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 gen(17);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<DeviceBuffer<int32_t>> tables;
  for (int64_t c = 0; c < copies; ++c)
    tables.push_back(upload(std::vector<int32_t>(perm.begin() + c * step_pages, perm.begin() + (c + 1) * step_pages)));
  return tables;
}

#include "bench/mla_decode_bench_m16.h"  // bench_m16 (uses graph_launch_us, shuffled_page_tables)
#include "bench/mla_decode_bench_m17.h"  // bench_m17 (the same)
#include "bench/mla_decode_bench_m18.h"  // bench_m18 (DtypeStep, graph_launch_us)
#include "bench/mla_decode_bench_skel.h"  // bench_skel (DtypeStep, graph_launch_us, floor_empty_kernel)

void bench_shape(const Shape& s, bool run_old) {
  const int64_t pages_per_row = (s.ctx + kPage - 1) / kPage, step_pages = s.batch * pages_per_row;
  const double bytes = static_cast<double>(s.batch) * s.ctx * kEntry * sizeof(float);
  // Copies (of distinct pages) so consecutive reps read different memory: >= 256 MB rotated.
  const int64_t copies = std::min<int64_t>(32, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(256e6 / bytes))));
  const int64_t pool_pages = copies * step_pages;
  DeviceBuffer<float> cache;
  check(cache.resize(pool_pages * kPage * kEntry), "cache");
  {
    // Random values in place, fast: fill one page pattern per 1 MB and copy device-side.
    const auto block = randn(1 << 18, 5);
    auto d = upload(block);
    const int64_t total = pool_pages * kPage * kEntry;
    for (int64_t off = 0; off < total; off += block.size())
      cudaMemcpy(cache.get() + off, d.get(), std::min<int64_t>(block.size(), total - off) * sizeof(float), cudaMemcpyDeviceToDevice);
  }
  std::vector<DeviceBuffer<int32_t>> tables = shuffled_page_tables(pool_pages, copies, step_pages);
  const std::vector<int32_t> ctx(s.batch, static_cast<int32_t>(s.ctx));
  auto dctx = upload(ctx);
  auto ql = upload(randn(s.batch * s.heads * kLat, 6)), qr = upload(randn(s.batch * s.heads * kRope, 7));
  DeviceBuffer<float> out;
  check(out.resize(s.batch * s.heads * kLat), "out");

  const int64_t cap = mla_decode_plan_capacity(s.batch);
  MlaDecodePlan plan;
  std::vector<double> plan_times;
  for (int r = 0; r < 21; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    check(build_mla_decode_plan(ctx.data(), s.batch, kPage, cap, &plan), "plan");
    plan_times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(plan_times.begin(), plan_times.end());
  const double plan_us = plan_times[plan_times.size() / 2];
  auto dplan = upload(plan.image);
  // Sized for the options' largest plan; the fused merge's counters zeroed once.
  const int64_t big_cap = mla_decode_plan_capacity(s.batch);
  DeviceBuffer<float> part_o, part_lse;
  check(part_o.resize(big_cap * s.heads * kLat), "part_o");
  check(part_lse.resize(big_cap * s.heads), "part_lse");
  DeviceBuffer<int32_t> counters;
  check(counters.resize(mla_decode_counter_words(s.batch, big_cap)), "counters");
  check(cuda_status(cudaMemset(counters.get(), 0, counters.size() * sizeof(int32_t)), "counters"), "counters");
  MlaDecodeArgs a;
  a.q_lat = ql.get(), a.q_rot = qr.get(), a.cache = cache.get(), a.ctx_len = dctx.get();
  a.rows = s.batch, a.heads = s.heads, a.latent_dim = kLat, a.rope_dim = kRope, a.page_size = kPage, a.max_pages = pages_per_row;
  a.scale = 1.0f / std::sqrt(192.0f), a.o_lat = out.get();
  MlaDecodeWork w;
  w.plan = dplan.get(), w.capacity = cap, w.launch_items = plan.num_items, w.merge = plan.any_split || plan.any_empty;
  w.part_o = part_o.get(), w.part_lse = part_lse.get();
  // The defaults as the backend runs them: kAuto merge (the separate kernel), pdl, late trigger.
  w.counters = counters.get(), w.pdl = true;
  w.ring = plan.ring;  // the plan's copy ring, as the backend passes it
  w.merge_mode = plan.merge;  // and the plan's merge form
  w.cache_pages = pool_pages;  // bounds kLeanPrefetch's hints
  w.trigger = plan.trigger;    // the plan's trigger (early for one-tile items), as callers pass it
  w.merge_slice = plan.merge_slice;  // and the merge's slice

  // Largest |difference| of `other`'s output from `ref`'s on table 0 (NaN written first, so a
  // form that leaves any output unwritten shows as inf): the check beside each forms table.
  std::vector<float> ref_out(out.size()), other_out(out.size());
  auto max_diff = [&](const MlaDecodeWork& ref, const MlaDecodeWork& other) {
    a.page_table = tables[0].get();
    check(mla_decode_run(a, ref, nullptr), "reference form");
    check(cuda_status(cudaMemcpy(ref_out.data(), out.get(), ref_out.size() * 4, cudaMemcpyDeviceToHost), "reference out"), "reference out");
    check(cuda_status(cudaMemset(out.get(), 0xff, out.size() * 4), "nan fill"), "nan fill");
    check(mla_decode_run(a, other, nullptr), "compared form");
    check(cuda_status(cudaMemcpy(other_out.data(), out.get(), other_out.size() * 4, cudaMemcpyDeviceToHost), "compared out"), "compared out");
    double d = 0.0;
    for (size_t i = 0; i < ref_out.size(); ++i)
      d = std::max(d, std::isnan(other_out[i]) ? INFINITY : std::fabs(double(ref_out[i]) - other_out[i]));
    return d;
  };
  const double floor_us = bytes / g_bw * 1e6;
  g_reps = 20;
  const double new_us = median_us([&](int i) {
    a.page_table = tables[i % copies].get();
    check(mla_decode_run(a, w, nullptr), "mla_decode_run");
  });
  // Back to back inside one CUDA graph (as the decode step runs it): no launch gaps.
  constexpr int kInGraph = 20;
  // tl: each step of the graph writes its timeline records at tl + step x tl_stride (null: none).
  auto graph_step_us = [&](const MlaDecodeWork& wv, uint64_t* tl = nullptr, int64_t tl_stride = 0) {
    auto step = [&](cudaStream_t stream, int i) {
      a.page_table = tables[i % copies].get();
      MlaDecodeWork wi = wv;
      if (tl) wi.timeline = tl + i * tl_stride;
      check(mla_decode_run(a, wi, stream), "mla_decode_run (capture)");
    };
    return graph_launch_us(step, kInGraph, /*eager_first=*/false);
  };
  // One config's timeline (eleventh version): timed plain (graph us/step), then the instrumented
  // graph replayed 8 times, the last replay's 20 steps summarised under `label`.
  const int64_t recs = mla_decode_timeline_records(s.batch, s.heads, kLat, cap), stride = recs * kMlaTimelineWords;
  auto timeline_of = [&](const MlaDecodeWork& wv, const char* cfg_name) {
    DeviceBuffer<uint64_t> tl;
    check(tl.resize(kInGraph * stride), "timeline");
    const double plain = graph_step_us(wv);
    check(cuda_status(cudaMemset(tl.get(), 0, tl.size() * sizeof(uint64_t)), "timeline clear"), "timeline clear");
    const double instr = graph_step_us(wv, tl.get(), stride);
    std::vector<uint64_t> host(tl.size());
    check(cuda_status(cudaMemcpy(host.data(), tl.get(), host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "timeline copy"), "timeline copy");
    std::vector<TimelineStep> steps;
    for (int i = 0; i < kInGraph; ++i) steps.push_back(parse_timeline_step(host.data() + i * stride, cap, recs));
    char label[200];
    const char* rings[] = {"auto", "shallow", "deep", "lean", "lean-deep", "lean-burst", "lean-prefetch", "lean-ahead",
                           "lean-wide", "lean-wide-prefetch", "lean-block", "lean-block-prefetch", "lean-block-early", "lean-early"};
    std::snprintf(label, sizeof(label), "%ld x %ld, %ld items, ring %s, %s", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                  static_cast<long>(plan.num_items), rings[static_cast<int>(wv.ring)], cfg_name);
    print_timeline(label, steps, plain, instr, floor_us, bytes / static_cast<double>(plan.num_items));
  };
  if (g_timeline) {
    // Eleventh version: the default step (the plan's ring and merge, pdl, late trigger), and
    // the same with the fused merge (no second kernel); each timed plain (graph us/step), then
    // the instrumented graph replayed 8 times, the last replay's 20 steps summarised.
    // Then two contrasts: the early trigger (the merge may launch once every run CTA is past its
    // wait) and the run alone (no merge: wrong output; the kernel before each run is a run).
    constexpr int kCfg = 4;
    MlaDecodeWork tw[kCfg] = {w, w, w, w};
    for (auto& x : tw) x.counters = nullptr, x.trigger = MlaDecodeTrigger::kLate;
    tw[0].trigger = plan.trigger;  // the default: the plan's trigger and merge slice
    tw[1].merge_mode = MlaDecodeMerge::kFused, tw[1].counters = counters.get();
    tw[2].trigger = MlaDecodeTrigger::kEarly;
    tw[3].merge = false;
    const char* cfg_names[] = {"default (the plan's trigger, separate merge)", "fused merge", "early trigger", "run alone (no merge)"};
    for (int c = 0; c < kCfg; ++c) {
      if (c != 0 && !plan.any_split) continue;
      timeline_of(tw[c], cfg_names[c]);
    }
    return;
  }
  if (g_m15) {
    // Fifteenth version, graphs (five interleaved rounds, the median round), all pdl, the plan's
    // trigger and slice: c0 = the fourteenth version's pick (kLeanBlockPrefetch for one-tile items,
    // kLeanBlock for two-tile ones, else kLean; the plan's merge form); c1 = kLeanBlockEarly (c0's
    // merge); c2 = kLean (what the backend runs; its merge: the chained form where the plan picks
    // kSeparateShort); c3 = kLeanEarly (c2's merge); c4 = the new plan's pick (ring and merge);
    // c5 = c1 with new_tokens 0 (every token before the wait: the bound of the idea; correct here only
    // because nothing in these graphs writes the cache); c6 = c1 with new_tokens 2^30 (nothing early:
    // its code path, every copy after the wait). Then max |c1 - c0|, |c3 - c0|; at 1 x 1K the
    // timelines of c0, c1 and c3.
    constexpr int kCfg = 7;
    const int64_t chunk = plan.image[4 + 2] - plan.image[4 + 1];
    MlaDecodeWork mw[kCfg];
    for (int o = 0; o < kCfg; ++o) mw[o] = w, mw[o].counters = nullptr;
    mw[0].ring = chunk <= kMlaTileTokens ? MlaDecodeRing::kLeanBlockPrefetch : chunk <= 2 * kMlaTileTokens ? MlaDecodeRing::kLeanBlock : MlaDecodeRing::kLean;
    mw[1].ring = MlaDecodeRing::kLeanBlockEarly;
    for (int o : {2, 3}) {
      mw[o].ring = o == 2 ? MlaDecodeRing::kLean : MlaDecodeRing::kLeanEarly;
      if (plan.merge == MlaDecodeMerge::kSeparateShort) mw[o].merge_mode = MlaDecodeMerge::kAuto;
    }
    mw[5].ring = MlaDecodeRing::kLeanBlockEarly, mw[5].new_tokens = 0;
    mw[6].ring = MlaDecodeRing::kLeanBlockEarly, mw[6].new_tokens = 1 << 30;
    for (int o = 0; o < kCfg; ++o) check(mla_decode_run(a, mw[o], nullptr), "m15 eager");  // opt-ins outside a capture
    check(cuda_status(cudaDeviceSynchronize(), "m15 eager"), "m15 eager");
    std::vector<double> rounds[kCfg];
    for (int r = 0; r < 5; ++r)
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_step_us(mw[o]));
    const double maxdiff[2] = {max_diff(mw[0], mw[1]), max_diff(mw[0], mw[3])};
    double med[kCfg];
    for (int o = 0; o < kCfg; ++o) std::sort(rounds[o].begin(), rounds[o].end()), med[o] = rounds[o][2];
    std::printf("m15 | %4ld | %6ld | %4ld | %ld | %d | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                static_cast<long>(plan.num_items), static_cast<long>(chunk), static_cast<int>(plan.ring), floor_us);
    for (int o = 0; o < kCfg; ++o) std::printf(" %6.2f |", med[o]);
    std::printf(" %5.3f | %5.3f | %.2e / %.2e |\n", med[0] / med[1], med[2] / med[3], maxdiff[0], maxdiff[1]);
    std::fflush(stdout);
    if (s.batch == 1 && s.ctx == 1024) {
      timeline_of(mw[0], "m15 c0 (14th pick)");
      timeline_of(mw[1], "m15 c1 (block softmax, early)");
      timeline_of(mw[3], "m15 c3 (lean, early)");
    }
    return;
  }
  if (g_m14) {
    // Fourteenth version, graphs (five interleaved rounds, the median round), all pdl, the plan's
    // slice and trigger, the thirteenth version's merge form (the chained one where the new plan
    // picks kSeparateShort) except c1 / c6 / c7: c0 = the thirteenth version's pick (kLeanPrefetch
    // for one-tile items, else kLean); c1 = the new plan's pick (ring and merge: kLeanBlock* for items
    // of <= kMlaBlockSoftmaxMaxChunk tokens, kSeparateShort with it up to 64 items a row, else c0's);
    // c2 = kLeanBlock; c3 = kLeanBlockPrefetch; c4 / c5 = c0 / c2's run alone (no merge: wrong output
    // where rows split; the merge's share); c6 = c1's ring with the short early-load merge
    // (kSeparateShort: 8 loads a chain before the weights) at every shape; c7 = c0 with it. Floors as m13's: fa one empty
    // kernel (the run's grid), fb empty run + merge, fc one tile from DRAM a CTA. Then max |c1 -
    // c0| and |c2 - c0| over the output; at 1 x 1K the timelines of c0 and c3.
    constexpr int kCfg = 8, kFloors = 3;
    const int64_t chunk = plan.image[4 + 2] - plan.image[4 + 1];
    MlaDecodeWork mw[kCfg];
    for (int o = 0; o < kCfg; ++o) {
      mw[o] = w, mw[o].counters = nullptr;
      if (plan.merge == MlaDecodeMerge::kSeparateShort) mw[o].merge_mode = MlaDecodeMerge::kAuto;  // the 13th's form
    }
    mw[1].merge_mode = plan.merge;
    mw[0].ring = chunk <= kMlaTileTokens ? MlaDecodeRing::kLeanPrefetch : MlaDecodeRing::kLean;
    mw[1].ring = plan.ring;
    mw[2].ring = MlaDecodeRing::kLeanBlock;
    mw[3].ring = MlaDecodeRing::kLeanBlockPrefetch;
    mw[4].ring = mw[0].ring, mw[4].merge = false;
    mw[5].ring = MlaDecodeRing::kLeanBlock, mw[5].merge = false;
    mw[6].ring = plan.ring, mw[6].merge_mode = MlaDecodeMerge::kSeparateShort;
    mw[7].ring = mw[0].ring, mw[7].merge_mode = MlaDecodeMerge::kSeparateShort;
    auto graph_fn_us = [&](const auto& launch) { return graph_launch_us(launch, kInGraph); };
    const size_t run_smem = 3 * 16 * kEntry * sizeof(float);
    check(cuda_status(cudaFuncSetAttribute(floor_empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(run_smem)), "floor smem"),
          "floor smem");
    auto launch_pdl_fn = [&](auto kernel, unsigned grid, size_t smem, cudaStream_t st, auto... args) {
      check(cuda_status(pdserve::cuda::pdl_bulk::launch_pdl(true, kernel, dim3(grid), dim3(256), smem, st, args...), "floor launch"), "floor launch");
    };
    const unsigned run_grid = static_cast<unsigned>(plan.num_items);
    const unsigned merge_grid = static_cast<unsigned>(s.batch * s.heads * (kLat / 64));
    DeviceBuffer<float> sink;
    check(sink.resize(std::max<int64_t>(cap, 1)), "sink");
    const int64_t copy_floats = step_pages * kPage * kEntry;
    for (int o = 0; o < kCfg; ++o) check(mla_decode_run(a, mw[o], nullptr), "m14 eager");  // opt-ins outside a capture
    check(cuda_status(cudaDeviceSynchronize(), "m14 eager"), "m14 eager");
    std::vector<double> rounds[kCfg + kFloors];
    for (int r = 0; r < 5; ++r) {
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_step_us(mw[o]));
      rounds[kCfg].push_back(graph_fn_us([&](cudaStream_t st, int) { launch_pdl_fn(floor_empty_kernel, run_grid, run_smem, st); }));
      rounds[kCfg + 1].push_back(graph_fn_us([&](cudaStream_t st, int) {
        launch_pdl_fn(floor_empty_kernel, run_grid, run_smem, st);
        launch_pdl_fn(floor_empty_kernel, merge_grid, 0, st);
      }));
      rounds[kCfg + 2].push_back(graph_fn_us([&](cudaStream_t st, int i) {
        const float* src = cache.get() + (i % copies) * copy_floats;
        launch_pdl_fn(floor_read_kernel, run_grid, 0, st, src, sink.get());
      }));
    }
    const double maxdiff[2] = {max_diff(mw[0], mw[1]), max_diff(mw[0], mw[2])};
    double med[kCfg + kFloors];
    for (int o = 0; o < kCfg + kFloors; ++o) {
      std::sort(rounds[o].begin(), rounds[o].end());
      med[o] = rounds[o][2];
    }
    const char* names[] = {"auto", "shallow", "deep", "lean", "lean-deep", "lean-burst", "lean-prefetch", "lean-ahead",
                           "lean-wide", "lean-wide-prefetch", "lean-block", "lean-block-prefetch", "lean-block-early", "lean-early"};
    std::printf("m14 | %4ld | %6ld | %4ld | %ld | %s | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                static_cast<long>(plan.num_items), static_cast<long>(chunk), names[static_cast<int>(plan.ring)], floor_us);
    for (int o = 0; o < kCfg + kFloors; ++o) std::printf(" %6.2f |", med[o]);
    std::printf(" %5.3f | %5.2f / %5.2f / %5.2f | %.2e / %.2e |\n", med[0] / med[1], med[1] / med[kCfg], med[1] / med[kCfg + 1],
                med[1] / med[kCfg + 2], maxdiff[0], maxdiff[1]);
    std::fflush(stdout);
    if (s.batch == 1 && s.ctx == 1024) {
      timeline_of(mw[0], "m14 c0 (13th pick)");
      timeline_of(mw[3], "m14 c3 (block softmax, prefetch; chained merge)");
      timeline_of(mw[1], "m14 c1 (the new pick: block softmax, prefetch, short early merge)");
    }
    return;
  }
  if (g_m13) {
    // Thirteenth version, graphs (five interleaved rounds, the median round), all pdl: c0 = the
    // plan's pick (ring, merge, slice and trigger: the twelfth version's when measured, the
    // fourteenth version's block-softmax ring and short merge for items of <= 2 tiles since); the cluster form
    // (one launch, MlaDecodeMerge::kCluster) with c1 = 16 items a row, kLean, late trigger;
    // c2 = 16, kLeanDeep, late; c3 = 8, kLean, late; c4 = 16, kLeanPrefetch, early trigger;
    // c5 = c1 with the early trigger; c6 = what the plan with allow_cluster picks (the cluster
    // plan's form where it fits if kMlaPickCluster, else c0: measured as c0); the wide ring (one CTA an SM, the item's tiles in one
    // burst): c7 = 16, kLeanWide, late; c8 = c7, early; c9 = 16, kLeanWidePrefetch, early;
    // c10 = 8, kLeanWidePrefetch, early. A form that cannot launch here prints nan.
    // Floors (the same graphs): fa = one empty kernel, the run's grid (c0's items) and block;
    // fb = two empty kernels, the run's grid then the merge's (rows x heads x latent / 64, pdl);
    // fc = one kernel, the run's grid, each CTA reading one tile of cache bytes from DRAM (the
    // step's own bytes at one-tile items) and writing one value; fd = one empty kernel, c1's
    // grid in clusters of 16, one cluster barrier. Then max |c1 - c0| over the output.
    constexpr int kCfg = 11;
    MlaDecodeWork cw[kCfg];
    std::vector<DeviceBuffer<int32_t>> cplans;
    MlaDecodePlan picked;
    check(build_mla_decode_plan(ctx.data(), s.batch, kPage, cap, &picked, kMlaPlanWaves, kMlaMergeFanIn, true), "plan (pick)");
    for (int o = 0; o < kCfg; ++o) {
      cw[o] = w, cw[o].counters = nullptr;
      if (o == 0 || (o == 6 && picked.merge != MlaDecodeMerge::kCluster)) continue;
      const int cl = o == 3 || o == 10 ? 8 : 16;
      MlaDecodePlan cp;
      if (o == 6) cp = picked;
      else check(build_mla_decode_cluster_plan(ctx.data(), s.batch, kPage, cap, cl, &cp), "cluster plan");
      cplans.push_back(upload(cp.image));
      cw[o].plan = cplans.back().get(), cw[o].launch_items = cp.num_items, cw[o].merge_mode = MlaDecodeMerge::kCluster;
      cw[o].cluster = cp.cluster, cw[o].ring = cp.ring, cw[o].trigger = cp.trigger;
    }
    // The forms as measured on the H200 (mladec13's second call; the cluster plan's own ring and
    // trigger, set from that table, are c9's at 1-2 rows, c4's at 4, c5's beyond).
    for (int o : {1, 2, 3, 5, 7}) cw[o].ring = MlaDecodeRing::kLean, cw[o].trigger = MlaDecodeTrigger::kLate;
    cw[2].ring = MlaDecodeRing::kLeanDeep;
    cw[4].ring = MlaDecodeRing::kLeanPrefetch, cw[4].trigger = MlaDecodeTrigger::kEarly;
    cw[5].trigger = MlaDecodeTrigger::kEarly;
    cw[7].ring = MlaDecodeRing::kLeanWide;
    cw[8].ring = MlaDecodeRing::kLeanWide, cw[8].trigger = MlaDecodeTrigger::kEarly;
    cw[9].ring = MlaDecodeRing::kLeanWidePrefetch, cw[9].trigger = MlaDecodeTrigger::kEarly;
    cw[10].ring = MlaDecodeRing::kLeanWidePrefetch, cw[10].trigger = MlaDecodeTrigger::kEarly;
    auto graph_fn_us = [&](const auto& launch) { return graph_launch_us(launch, kInGraph); };
    const size_t run_smem = 3 * 16 * kEntry * sizeof(float);
    for (auto k : {floor_empty_kernel, floor_cluster_kernel})
      check(cuda_status(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(run_smem)), "floor smem"), "floor smem");
    check(cuda_status(cudaFuncSetAttribute(floor_cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "floor cluster"), "floor cluster");
    auto launch_ex = [&](auto kernel, unsigned grid, dim3 block, size_t smem, unsigned cluster, cudaStream_t st, auto... args) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(grid);
      cfg.blockDim = block;
      cfg.dynamicSmemBytes = smem;
      cfg.stream = st;
      cudaLaunchAttribute attr[2];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      attr[1].id = cudaLaunchAttributeClusterDimension;
      attr[1].val.clusterDim.x = cluster, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = cluster > 1 ? 2 : 1;
      check(cuda_status(cudaLaunchKernelEx(&cfg, kernel, args...), "floor launch"), "floor launch");
    };
    const unsigned run_grid = static_cast<unsigned>(plan.num_items);
    const unsigned merge_grid = static_cast<unsigned>(s.batch * s.heads * (kLat / 64));
    DeviceBuffer<float> sink;
    check(sink.resize(std::max<int64_t>(cap, 1)), "sink");
    const int64_t copy_floats = step_pages * kPage * kEntry;  // the step's pages, one copy of them
    constexpr int kFloors = 4;
    std::vector<double> rounds[kCfg + kFloors];
    // Eager first (the kernels' opt-ins, outside a capture); a form that cannot launch is skipped.
    bool runs[kCfg];
    for (int o = 0; o < kCfg; ++o) {
      const pdserve::Status st = mla_decode_run(a, cw[o], nullptr);
      runs[o] = st.is_ok() && cudaDeviceSynchronize() == cudaSuccess;
      if (!runs[o]) std::printf("m13: c%d does not run here: %s\n", o, st.message().c_str());
      cudaGetLastError();
    }
    for (int r = 0; r < 5; ++r) {
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(runs[o] ? graph_step_us(cw[o]) : NAN);
      rounds[kCfg].push_back(graph_fn_us([&](cudaStream_t st, int) { launch_ex(floor_empty_kernel, run_grid, dim3(256), run_smem, 1, st); }));
      rounds[kCfg + 1].push_back(graph_fn_us([&](cudaStream_t st, int) {
        launch_ex(floor_empty_kernel, run_grid, dim3(256), run_smem, 1, st);
        launch_ex(floor_empty_kernel, merge_grid, dim3(256), 0, 1, st);
      }));
      rounds[kCfg + 2].push_back(graph_fn_us([&](cudaStream_t st, int i) {
        const float* src = cache.get() + (i % copies) * copy_floats;
        launch_ex(floor_read_kernel, run_grid, dim3(256), 0, 1, st, src, sink.get());
      }));
      rounds[kCfg + 3].push_back(graph_fn_us([&](cudaStream_t st, int) {
        launch_ex(floor_cluster_kernel, static_cast<unsigned>(s.batch * 16), dim3(256), run_smem, 16, st);
      }));
    }
    // The cluster forms' outputs (c1, c9) against the twelfth version's (same inputs).
    const double maxdiff[2] = {runs[1] ? max_diff(cw[0], cw[1]) : NAN, runs[9] ? max_diff(cw[0], cw[9]) : NAN};
    double med[kCfg + kFloors];
    for (int o = 0; o < kCfg + kFloors; ++o) {
      std::sort(rounds[o].begin(), rounds[o].end());
      med[o] = rounds[o][2];
    }
    int best = 1;  // the fastest cluster form (c6 is a copy of one of them or of c0)
    for (int o = 1; o < kCfg; ++o)
      if (o != 6 && runs[o] && (!(med[best] <= med[o]))) best = o;
    std::printf("m13 | %4ld | %6ld | %4ld | %s | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx), static_cast<long>(plan.num_items),
                picked.merge == MlaDecodeMerge::kCluster ? "cluster" : "12th", floor_us);
    for (int o = 0; o < kCfg + kFloors; ++o) std::printf(" %6.2f |", med[o]);
    std::printf(" %5.2f / %5.2f / %5.2f | c%d: %5.2f / %5.2f | %5.3f | %.2e / %.2e |\n", med[0] / med[kCfg], med[0] / med[kCfg + 1],
                med[0] / med[kCfg + 2], best, med[best] / med[kCfg + 3], med[best] / med[kCfg + 2], med[0] / med[best], maxdiff[0], maxdiff[1]);
    std::fflush(stdout);
    return;
  }
  if (g_m12) {
    // Twelfth version, same plan, pdl, the plan's ring and merge form, graphs (five interleaved
    // rounds, the median round): c0 = the eleventh version's default (64-dim merge slices, late
    // trigger); c1 / c2 = 16 / 32-dim slices, late; c3 = 64, early trigger; c4 = 16, early;
    // c5 = the plan's slice and trigger (as measured on the H200: the launch's slice, 16 at
    // batch 1, everywhere; the plan now picks 64 for one-tile items, c3 there).
    constexpr int kCfg = 6;
    MlaDecodeWork mw[kCfg];
    for (int o = 0; o < kCfg; ++o) mw[o] = w, mw[o].counters = nullptr, mw[o].trigger = MlaDecodeTrigger::kLate;
    mw[0].merge_slice = 64;
    mw[1].merge_slice = 16;
    mw[2].merge_slice = 32;
    mw[3].merge_slice = 64, mw[3].trigger = MlaDecodeTrigger::kEarly;
    mw[4].merge_slice = 16, mw[4].trigger = MlaDecodeTrigger::kEarly;
    mw[5].merge_slice = plan.merge_slice, mw[5].trigger = plan.trigger;
    std::vector<double> rounds[kCfg];
    for (int r = 0; r < 5; ++r)
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_step_us(mw[o]));
    std::printf("m12 | %4ld | %6ld | %4ld | %d | %s | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                static_cast<long>(plan.num_items), plan.merge_slice ? plan.merge_slice : mla_decode_merge_slice(s.batch, s.heads, kLat),
                plan.trigger == MlaDecodeTrigger::kEarly ? "early" : "late", floor_us);
    for (int o = 0; o < kCfg; ++o) {
      std::sort(rounds[o].begin(), rounds[o].end());
      std::printf(" %8.2f |", rounds[o][2]);
    }
    std::printf(" %5.3f | %8.2f / %8.2f |\n", rounds[0][2] / rounds[5][2], rounds[0][0], rounds[5][0]);
    std::fflush(stdout);
    return;
  }
  if (g_pf) {
    // Tenth version, same plan, pdl + late trigger, the plan's merge form, graphs (three
    // interleaved rounds, the median round): c0 = kLean (the ninth version's default); c1 =
    // kLeanAhead, the L2 the plan's count (image word 3, P) of tiles ahead of the ring; c2 = the
    // same, 2P ahead; c3 = the same, one tile ahead; c4 = kLeanPrefetch (P tiles prefetched
    // before the pdl wait); c5 / c6 = c0 / c1's run alone (no merge: wrong output). Then one
    // launch (median of 20) of c0 and c1.
    constexpr int kCfg = 7;
    const int64_t item_tiles = (s.ctx + 15) / 16;  // an upper bound: the kernel stops at its item's end
    std::vector<int32_t> img2 = plan.image, img1 = plan.image;
    img2[3] = static_cast<int32_t>(std::min<int64_t>(2 * plan.image[3], item_tiles));
    img1[3] = 1;
    auto dplan2 = upload(img2), dplan1 = upload(img1);
    MlaDecodeWork pw[kCfg];
    for (int o = 0; o < kCfg; ++o) pw[o] = w, pw[o].trigger = MlaDecodeTrigger::kLate, pw[o].counters = nullptr;
    pw[0].ring = MlaDecodeRing::kLean;
    pw[1].ring = MlaDecodeRing::kLeanAhead;
    pw[2].ring = MlaDecodeRing::kLeanAhead, pw[2].plan = dplan2.get();
    pw[3].ring = MlaDecodeRing::kLeanAhead, pw[3].plan = dplan1.get();
    pw[4].ring = MlaDecodeRing::kLeanPrefetch;
    pw[5].ring = MlaDecodeRing::kLean, pw[5].merge = false;
    pw[6].ring = MlaDecodeRing::kLeanAhead, pw[6].merge = false;
    std::vector<double> rounds[kCfg];
    for (int r = 0; r < 3; ++r)
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_step_us(pw[o]));
    double launch_us[2];
    for (int o = 0; o < 2; ++o)
      launch_us[o] = median_us([&](int i) {
        a.page_table = tables[i % copies].get();
        check(mla_decode_run(a, pw[o], nullptr), "mla_decode_run (pf)");
      });
    std::printf("pf | %4ld | %6ld | %4ld | %d / %d / 1 | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                static_cast<long>(plan.num_items), plan.image[3], img2[3], floor_us);
    for (int o = 0; o < kCfg; ++o) {
      std::sort(rounds[o].begin(), rounds[o].end());
      std::printf(" %8.2f (%4.2f) |", rounds[o][1], bytes / rounds[o][1] * 1e-6);
    }
    std::printf(" %5.3f |", rounds[0][1] / rounds[1][1]);
    for (int o = 0; o < 2; ++o) std::printf(" %8.2f |", launch_us[o]);
    std::printf("\n");
    std::fflush(stdout);
    return;
  }
  if (g_ring) {
    // Ninth version, same plan, pdl + late trigger, graphs (three interleaved rounds, the median
    // round): c0 = the eighth version's default (kLean, the chained separate merge); c1 = kLean,
    // the early-load separate merge; c2 = kLeanBurst, early merge; c3 = kLean, fused merge;
    // c4 = the plan's ring and merge form (the default path; in the mladec9 call still kAuto = early); c5 = c1's run alone (no
    // merge: wrong output, the merge's share of the step). Then one launch (median of 20) of
    // c0-c2, and the copy ring alone (prologue of two tiles, then of three).
    constexpr int kCfg = 6;
    MlaDecodeWork rw[kCfg];
    for (int o = 0; o < kCfg; ++o) rw[o] = w, rw[o].trigger = MlaDecodeTrigger::kLate, rw[o].counters = nullptr;
    rw[0].ring = MlaDecodeRing::kLean, rw[0].merge_mode = MlaDecodeMerge::kSeparateChained;
    rw[1].ring = MlaDecodeRing::kLean, rw[1].merge_mode = MlaDecodeMerge::kSeparate;  // early loads
    rw[2].ring = MlaDecodeRing::kLeanBurst, rw[2].merge_mode = MlaDecodeMerge::kSeparate;
    rw[3].ring = MlaDecodeRing::kLean, rw[3].merge_mode = MlaDecodeMerge::kFused, rw[3].counters = counters.get();
    rw[4].ring = plan.ring, rw[4].merge_mode = plan.merge;
    rw[5].ring = MlaDecodeRing::kLean, rw[5].merge = false;
    std::vector<double> rounds[kCfg];
    for (int r = 0; r < 3; ++r)
      for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_step_us(rw[o]));
    constexpr int kLaunched = 3;
    double launch_us[kLaunched];
    for (int o = 0; o < kLaunched; ++o)
      launch_us[o] = median_us([&](int i) {
        a.page_table = tables[i % copies].get();
        check(mla_decode_run(a, rw[o], nullptr), "mla_decode_run (ring)");
      });
    // The copy ring alone, one launch between events (median of 20).
    DeviceBuffer<float> sink;
    check(sink.resize(cap), "sink");
    const size_t ring_smem = 3 * 16 * kEntry * sizeof(float);
    double copy_us[2];
    for (int f = 0; f < 2; ++f) {
      auto kernel = f ? copy_ring_kernel<true> : copy_ring_kernel<false>;
      check(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ring_smem)),
                        "copy ring smem"), "copy ring smem");
      copy_us[f] = median_us([&](int i) {
        kernel<<<static_cast<unsigned>(plan.num_items), 256, ring_smem>>>(cache.get(), tables[i % copies].get(), pages_per_row, dplan.get(),
                                                                        sink.get());
      });
    }
    const char* names[] = {"auto", "shallow", "deep", "lean", "lean-deep", "lean-burst", "lean-prefetch", "lean-ahead"};
    std::printf("ring | %4ld | %6ld | %4ld | %s | %7.2f |", static_cast<long>(s.batch), static_cast<long>(s.ctx),
                static_cast<long>(plan.num_items), names[static_cast<int>(plan.ring)], floor_us);
    for (int o = 0; o < kCfg; ++o) {
      std::sort(rounds[o].begin(), rounds[o].end());
      std::printf(" %8.2f (%4.2f) |", rounds[o][1], bytes / rounds[o][1] * 1e-6);
    }
    std::printf(" %5.3f |", rounds[0][1] / rounds[4][1]);  // old default / new default
    for (int o = 0; o < kLaunched; ++o) std::printf(" %8.2f |", launch_us[o]);
    for (int f = 0; f < 2; ++f) std::printf(" %8.2f (%4.2f) |", copy_us[f], bytes / copy_us[f] * 1e-6);
    std::printf("\n");
    std::fflush(stdout);
    return;
  }
  const double graph_us = g_tune ? NAN : graph_step_us(w);
  // The merge / tile / plan options side by side, in graphs (20 steps each, median of 7
  // replays; three interleaved rounds, the median round per option), all with pdl and the late
  // trigger: o0 = the default (separate merge kernel; the fifth version); o1 = fused merge,
  // fixed tile ranges; o2 = o1 + dynamic tiles; o3 = o1 with one merge step up to 64 items;
  // o4 = o0 over a plan of at most rows + 132 items (fewer, longer items: one CTA an SM at
  // batch 1); o5 = o1 over a plan of at most 16 items a row (one merge step a row).
  struct Option {
    MlaDecodeMerge merge;
    bool dynamic;
    int64_t capacity, fan_in;
  };
  const int64_t cap1 = mla_decode_plan_capacity(s.batch);
  const Option opts[] = {{MlaDecodeMerge::kAuto, false, cap1, kMlaMergeFanIn},  // kAuto: the plan's separate form
                         {MlaDecodeMerge::kFused, false, cap1, kMlaMergeFanIn},
                         {MlaDecodeMerge::kFused, true, cap1, kMlaMergeFanIn},
                         {MlaDecodeMerge::kFused, false, cap1, kMlaMaxMergeFanIn},
                         {MlaDecodeMerge::kAuto, false, s.batch + kMlaTargetItems / 2, kMlaMergeFanIn},
                         {MlaDecodeMerge::kFused, false, std::min(cap1, 16 * s.batch), kMlaMergeFanIn}};
  constexpr int kOpts = sizeof(opts) / sizeof(opts[0]);
  std::vector<DeviceBuffer<int32_t>> oplans;
  MlaDecodeWork ow[kOpts];
  int64_t oitems[kOpts];
  for (int o = 0; o < kOpts; ++o) {
    const int64_t ocap = opts[o].capacity;
    MlaDecodePlan op;
    check(build_mla_decode_plan(ctx.data(), s.batch, kPage, ocap, &op, 1, opts[o].fan_in), "plan (options)");
    oitems[o] = op.num_items;
    oplans.push_back(upload(op.image));
    ow[o] = w;
    ow[o].plan = oplans.back().get(), ow[o].capacity = ocap, ow[o].launch_items = op.num_items;
    ow[o].merge = op.any_split || op.any_empty, ow[o].dynamic_tiles = opts[o].dynamic;
    ow[o].merge_mode = opts[o].merge == MlaDecodeMerge::kAuto ? op.merge : opts[o].merge;
    ow[o].pdl = true, ow[o].trigger = MlaDecodeTrigger::kLate;
    if (opts[o].merge != MlaDecodeMerge::kFused) ow[o].counters = nullptr;
  }
  std::vector<double> rounds[kOpts];
  for (int r = 0; r < 3; ++r)
    for (int o = 0; o < kOpts; ++o) rounds[o].push_back(graph_step_us(ow[o]));
  std::printf("opts | %2ld | %4ld | %6ld | %ld/%ld/%ld |", static_cast<long>(s.heads), static_cast<long>(s.batch), static_cast<long>(s.ctx),
              static_cast<long>(oitems[0]), static_cast<long>(oitems[4]), static_cast<long>(oitems[5]));
  for (int o = 0; o < kOpts; ++o) {
    std::sort(rounds[o].begin(), rounds[o].end());
    std::printf(" %8.2f (%4.2f) |", rounds[o][1], bytes / rounds[o][1] * 1e-6);
  }
  std::printf("\n");
  std::fflush(stdout);
  if (g_tune) return;
  // The block variant (any head count) where the warp variant is the default, for comparison.
  double block_us = NAN;
  if (s.heads <= 3) {
    w.variant = MlaDecodeVariant::kBlock;
    block_us = median_us([&](int i) {
      a.page_table = tables[i % copies].get();
      check(mla_decode_run(a, w, nullptr), "mla_decode_run (block)");
    });
    w.variant = MlaDecodeVariant::kAuto;
  }
  double old_us = NAN;
  if (run_old && !g_no_old) {
    g_reps = 3;
    old_us = median_us([&](int i) {
      a.page_table = tables[i % copies].get();
      check(mla_attend_latent(a, nullptr), "mla_attend_latent");
    });
  }
  std::printf(
      "| %2ld | %4ld | %6ld | %4ld | %5.1f | %9.1f | %8.2f | %8.2f | %5.2f TB/s | %8.2f | %5.2f TB/s | %5.2fx | %8.2f | %10.1f | %6.3f TB/s | %7.1fx |\n",
      static_cast<long>(s.heads), static_cast<long>(s.batch), static_cast<long>(s.ctx), static_cast<long>(plan.num_items), plan_us, bytes / 1e6,
      floor_us, new_us, bytes / new_us * 1e-6, graph_us, bytes / graph_us * 1e-6, graph_us / floor_us, block_us, old_us, bytes / old_us * 1e-6,
      old_us / new_us);
  std::fflush(stdout);
}

}  // namespace

void read_ceiling() {
  const size_t n = size_t(1) << 27;  // float4s: 2 GiB
  DeviceBuffer<float> x, o;
  check(x.resize(n * 4), "ceiling buffer");
  check(o.resize(1), "ceiling out");
  cudaMemset(x.get(), 0x3f, n * 16);
  g_reps = 10;
  for (int per_sm : {8, 16}) {
    const double us = median_us([&](int) { read_kernel<<<132 * per_sm, 256>>>(reinterpret_cast<const float4*>(x.get()), n, o.get()); });
    std::printf("read ceiling: %.2f TB/s (2 GiB float4 read-only kernel, %d x 256-thread blocks an SM)\n", n * 16.0 / us * 1e-6, per_sm);
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
  g_no_old = argc > 1 && std::strcmp(argv[argc - 1], "noold") == 0;
  g_tune = argc > 1 && std::strcmp(argv[1], "tune") == 0;
  g_ring = argc > 1 && std::strcmp(argv[1], "ring") == 0;
  g_pf = argc > 1 && std::strcmp(argv[1], "pf") == 0;
  g_timeline = argc > 1 && std::strcmp(argv[1], "timeline") == 0;
  g_m12 = argc > 1 && std::strcmp(argv[1], "m12") == 0;
  g_m13 = argc > 1 && std::strcmp(argv[1], "m13") == 0;
  g_m14 = argc > 1 && std::strcmp(argv[1], "m14") == 0;
  g_m15 = argc > 1 && std::strcmp(argv[1], "m15") == 0;
  if (argc > 1 && std::strcmp(argv[1], "m16") == 0) {
    bench_m16();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "m17") == 0) {
    bench_m17();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "m18") == 0) {
    bench_m18();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "skel") == 0) {
    bench_skel();
    return 0;
  }
  if (!g_timeline && !g_m12 && !g_m13 && !g_m14 && !g_m15) read_ceiling();
  std::vector<Shape> shapes;
  const bool focus = argc > 1 && std::strcmp(argv[1], "focus") == 0;  // the TP32 rank's shapes only
  if (g_timeline) {
    shapes = {{3, 1, 1024}, {3, 1, 16384}, {3, 1, 65536}, {3, 8, 65536}};
    if (argc > 2 && std::strcmp(argv[2], "short") == 0) shapes = {{3, 1, 1024}, {3, 1, 65536}};
  } else if (g_m15) {
    shapes = {{3, 1, 1024}, {3, 1, 64}, {3, 1, 256}, {3, 1, 2048}, {3, 1, 4096}, {3, 2, 1024}, {3, 4, 1024}, {3, 8, 1024}, {3, 1, 16384}, {3, 8, 16384}};
    std::printf("m15 rows (graph us/step, pdl, the plan's trigger / slice; median of 5 interleaved rounds): | batch | ctx | items | chunk | "
                "new pick (ring enum) | floor us (bytes) | c0 14th pick | c1 lean-block-early | c2 lean | c3 lean-early | c4 new pick | "
                "c5 = c1, every token early | c6 = c1, nothing early | c0 / c1 | c2 / c3 | max abs c1 - c0 / c3 - c0 |\n");
  } else if (g_m14) {
    shapes = {{3, 1, 1024}, {3, 1, 64}, {3, 1, 256}, {3, 1, 2048}, {3, 1, 4096}, {3, 2, 1024}, {3, 4, 1024}, {3, 8, 1024}, {3, 1, 16384}, {3, 8, 16384}};
    std::printf("m14 rows (graph us/step, pdl, the plan's merge form / slice / trigger; median of 5 interleaved rounds): | batch | ctx | items | "
                "chunk | new pick | floor us (bytes) | c0 13th pick | c1 new pick | c2 lean-block | c3 lean-block-prefetch | c4 c0's run alone | "
                "c5 c2's run alone | c6 = c1's ring, short early merge | c7 = c0, short early merge | fa empty kernel | fb empty run + merge | fc one tile from DRAM a CTA | c0 / c1 | c1 / fa, fb, fc | "
                "max abs c1 - c0 / c2 - c0 |\n");
  } else if (g_m13) {
    shapes = {{3, 1, 1024}, {3, 1, 2048}, {3, 1, 4096}, {3, 2, 1024}, {3, 4, 1024}, {3, 1, 512}, {3, 1, 256}, {3, 1, 64}, {3, 8, 1024}};
    std::printf("m13 rows (graph us/step, pdl; median of 5 interleaved rounds): | batch | ctx | items (12th) | pick with allow_cluster | "
                "floor us (bytes) | c0 12th pick | c1 cluster 16, lean | c2 cluster 16, lean-deep | c3 cluster 8, lean | "
                "c4 cluster 16, lean-prefetch, early | c5 = c1, early trigger | c6 allow_cluster pick | c7 cluster 16, wide | "
                "c8 = c7, early | c9 cluster 16, wide-prefetch, early | c10 cluster 8, wide-prefetch, early | fa empty kernel | fb empty run + merge | "
                "fc one tile from DRAM a CTA | fd empty cluster kernel | c0 / fa, fb, fc | best cluster form: / fd, fc | c0 / best | max abs c1 - c0 / c9 - c0 |\n");
  } else if (g_m12) {
    shapes = {{3, 1, 1024}, {3, 1, 4096}, {3, 1, 16384}, {3, 1, 65536}, {3, 8, 16384}, {3, 8, 65536}, {3, 32, 16384}};
    std::printf("m12 rows (graph us/step, pdl, the plan's ring and merge form; median of 5 interleaved rounds): | batch | ctx | items | "
                "auto slice | plan's trigger | floor us | c0 slice 64, late (11th default) | c1 slice 16, late | c2 slice 32, late | "
                "c3 slice 64, early | c4 slice 16, early | c5 new default | c0 / c5 | fastest round c0 / c5 |\n");
  } else if (g_pf) {
    shapes = {{3, 1, 1024}, {3, 1, 4096}, {3, 1, 16384}, {3, 1, 65536}, {3, 8, 1024}, {3, 8, 16384}, {3, 32, 16384},
              {3, 8, 65536}, {3, 32, 1024}, {3, 128, 16384}};
    std::printf("pf rows (graph us/step (TB/s), pdl + late trigger, the plan's merge): | batch | ctx | items | L2 lead c1 / c2 / c3 | "
                "floor us | c0 lean (9th default) | c1 lean-ahead | c2 = c1, 2x lead | c3 = c1, lead 1 | c4 lean-prefetch (pre-wait) | "
                "c5 = c0 run alone | c6 = c1 run alone | c0 / c1 | one launch c0 us | one launch c1 us |\n");
  } else if (g_ring) {
    shapes = {{3, 1, 1024},    {3, 1, 16384},   {3, 1, 65536},   {3, 8, 1024},   {3, 8, 16384},   {3, 8, 65536},
              {3, 32, 16384},  {3, 128, 16384}, {3, 256, 16384}, {3, 32, 1024},  {3, 256, 4096},  {3, 1, 4096}};
    std::printf("ring rows (graph us/step (TB/s), pdl + late trigger): | batch | ctx | items | plan's ring | floor us | "
                "c0 lean + chained merge (8th default) | c1 lean + early merge | c2 lean-burst + early merge | c3 lean + fused merge | "
                "c4 the plan's ring + default merge | c5 = c1's run alone, no merge | c0 / c4 | one launch c0 us | one launch c1 us | "
                "one launch c2 us | copy ring alone, one launch us (TB/s) | copy ring, 3-tile prologue (TB/s) |\n");
  } else if (quick) {
    shapes = {{3, 1, 1024}, {3, 64, 4096}};
  } else if (g_tune) {  // small batches at long context first (the open target), then the large steps
    shapes = {{3, 1, 16384}, {3, 8, 16384}, {3, 32, 16384}, {3, 8, 65536}, {3, 1, 65536}, {3, 1, 1024}, {3, 8, 1024},
              {3, 32, 1024}, {3, 32, 4096}, {3, 128, 1024}, {3, 64, 16384}, {3, 128, 16384}, {3, 256, 4096}, {3, 256, 16384}};
  } else if (focus) {
    for (int64_t b : {1, 8, 32, 128, 256})
      for (int64_t c : {1024, 16384}) shapes.push_back({3, b, c});
    shapes.push_back({3, 256, 4096});
    shapes.push_back({3, 1, 65536});
    shapes.push_back({3, 8, 65536});
  } else {
    for (int64_t b : {1, 8, 32, 64, 128, 256})
      for (int64_t c : {1024, 4096, 16384}) shapes.push_back({3, b, c});
    for (int64_t b : {1, 8}) {
      shapes.push_back({3, b, 32768});
      shapes.push_back({3, b, 65536});
    }
    for (int64_t h : {16, 24})
      for (int64_t b : {1, 32, 128}) shapes.push_back({h, b, 4096});
  }
  std::printf("MLA latent decode, fp32 cache (576 floats/token), page 64; floor = cache bytes / %.1f TB/s\n", g_bw / 1e12);
  std::printf("split-KV us: one launch (the defaults: warp variant for <= 3 heads, separate merge, pdl) between events; graph us: per step, %d "
              "steps back to back in a CUDA graph; block-variant us: one launch of the block variant\n",
              20);
  std::printf("opts rows (graph us/step (TB/s), all pdl + late trigger): | H | batch | ctx | items o0/o4/o5 | o0 separate merge (default) | "
              "o1 fused merge | o2 = o1 + dynamic tiles | o3 = o1 fan-in 64 | o4 = o0, <= rows + 132 items | o5 = o1, <= 16 items a row |\n");
  std::printf("| H | batch | ctx | items | plan us (host) | MB | floor us | split-KV us | BW | graph us | BW | graph / floor | block-variant us | old us | old BW | old / split-KV |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) bench_shape(s, /*run_old=*/true);
  return 0;
}
