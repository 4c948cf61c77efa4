// mla_decode_bench m16 (sixteenth version, docs/perf.md): the split-KV decode on an fp32 cache
// against a bf16 cache (MlaDecodeArgs::cache_bf16) at the plan's pick, graphs of 20 steps back to
// back (pdl, the plan's ring / merge / trigger / slice), five interleaved rounds, the median round.
// Columns: c0 fp32; c1 bf16 (the default depth, kMlaBf16Stages); c2 bf16 on 3 stages; c3 bf16 on
// 6 stages; c4 bf16 kLean's form, shift / mask conversion; c5 = c4 by prmt (c4 / c5 compare the
// conversions where the plan's form is not kLean's); c6 bf16 kLeanBlock's form (the block softmax
// at every item length); c7 bf16 kLeanEarly (the CUDA backend's ring); c8 fp32 kLeanEarly. TB/s over the bytes each reads (fp32 2304,
// bf16 1152 bytes a token); floors = those bytes / g_bw. Included by mla_decode_bench.cu (inside
// its anonymous namespace, after graph_launch_us and shuffled_page_tables).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "pdserve/core/dtype.h"

// One step's shape on both caches (shared by m16 and m17): an fp32 and a bf16 pool holding the same
// values, rotated page tables, q, the plan and its work options at the plan's pick.
struct DtypeStep {
  static constexpr int64_t kHeads = 3;
  int64_t batch, copies = 0, pool_pages = 0;
  double bytes32 = 0, bytes16 = 0;
  DeviceBuffer<float> c32, out, part_o, part_lse, ql, qr;
  DeviceBuffer<uint16_t> c16;
  DeviceBuffer<int32_t> dctx, dplan;
  std::vector<DeviceBuffer<int32_t>> tables;
  MlaDecodePlan plan;
  MlaDecodeArgs a;
  MlaDecodeWork w;
  DtypeStep(int64_t rows, int64_t ctx_tokens) : batch(rows) {
    const int64_t pages_per_row = (ctx_tokens + kPage - 1) / kPage, step_pages = batch * pages_per_row;
    bytes32 = static_cast<double>(batch) * ctx_tokens * kEntry * 4, bytes16 = bytes32 / 2;
    // Copies of distinct pages so consecutive steps read different memory (>= 256 MB of fp32 rotated).
    copies = std::min<int64_t>(32, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(256e6 / bytes32))));
    pool_pages = copies * step_pages;
    const int64_t total = pool_pages * kPage * kEntry;
    check(c32.resize(total), "fp32 cache");
    check(c16.resize(total), "bf16 cache");
    {
      const auto block = randn(1 << 18, 5);
      std::vector<uint16_t> block16(block.size());
      for (size_t i = 0; i < block.size(); ++i) block16[i] = pdserve::f32_to_bf16(block[i]);
      auto d32 = upload(block);
      auto d16 = upload(block16);
      for (int64_t off = 0; off < total; off += static_cast<int64_t>(block.size())) {
        const int64_t n = std::min<int64_t>(block.size(), total - off);
        cudaMemcpy(c32.get() + off, d32.get(), n * 4, cudaMemcpyDeviceToDevice);
        cudaMemcpy(c16.get() + off, d16.get(), n * 2, cudaMemcpyDeviceToDevice);
      }
    }
    tables = shuffled_page_tables(pool_pages, copies, step_pages);
    const std::vector<int32_t> ctx(batch, static_cast<int32_t>(ctx_tokens));
    check(dctx.upload(ctx), "ctx");
    check(ql.upload(randn(batch * kHeads * kLat, 6)), "q_lat");
    check(qr.upload(randn(batch * kHeads * kRope, 7)), "q_rot");
    check(out.resize(batch * kHeads * kLat), "out");
    const int64_t cap = mla_decode_plan_capacity(batch);
    check(build_mla_decode_plan(ctx.data(), batch, kPage, cap, &plan), "plan");
    check(dplan.upload(plan.image), "plan image");
    check(part_o.resize(cap * kHeads * kLat), "part_o");
    check(part_lse.resize(cap * kHeads), "part_lse");
    a.q_lat = ql.get(), a.q_rot = qr.get(), a.ctx_len = dctx.get();
    a.rows = batch, a.heads = kHeads, a.latent_dim = kLat, a.rope_dim = kRope, a.page_size = kPage, a.max_pages = pages_per_row;
    a.scale = 1.0f / std::sqrt(192.0f), a.o_lat = out.get();
    w.plan = dplan.get(), w.capacity = cap, w.launch_items = plan.num_items, w.merge = plan.any_split || plan.any_empty;
    w.part_o = part_o.get(), w.part_lse = part_lse.get(), w.pdl = true, w.ring = plan.ring, w.merge_mode = plan.merge;
    w.cache_pages = pool_pages, w.trigger = plan.trigger, w.merge_slice = plan.merge_slice;
  }
  // Step i (its page-table copy) with `wk` on the bf16 or the fp32 pool.
  void run(const MlaDecodeWork& wk, bool bf16, cudaStream_t stream, int i, const char* what) {
    MlaDecodeArgs ai = a;
    ai.page_table = tables[i % copies].get();
    if (bf16) ai.cache_bf16 = c16.get();
    else ai.cache = c32.get();
    check(mla_decode_run(ai, wk, stream), what);
  }
};

inline void bench_m16_shape(int64_t batch, int64_t ctx_tokens) {
  DtypeStep st(batch, ctx_tokens);
  const MlaDecodeWork& w = st.w;
  const MlaDecodePlan& plan = st.plan;
  constexpr int kCfg = 9;
  MlaDecodeWork cw[kCfg];
  bool bf[kCfg];
  for (int o = 0; o < kCfg; ++o) cw[o] = w, bf[o] = o > 0;
  cw[2].bf16_stages = 3, cw[3].bf16_stages = 6;
  cw[4].ring = MlaDecodeRing::kLean, cw[5].ring = MlaDecodeRing::kLean, cw[5].bf16_prmt = true;
  cw[6].ring = MlaDecodeRing::kLeanBlock, cw[7].ring = MlaDecodeRing::kLeanEarly, cw[8].ring = MlaDecodeRing::kLeanEarly, bf[8] = false;
  auto step_us = [&](int o) { return graph_launch_us([&](cudaStream_t stream, int i) { st.run(cw[o], bf[o], stream, i, "mla_decode_run (m16)"); }, 20); };
  std::vector<double> rounds[kCfg];
  for (int r = 0; r < 5; ++r)
    for (int o = 0; o < kCfg; ++o) rounds[o].push_back(step_us(o));
  double med[kCfg];
  for (int o = 0; o < kCfg; ++o) std::sort(rounds[o].begin(), rounds[o].end()), med[o] = rounds[o][2];
  // The bf16 default's output is finite everywhere (NaN-filled first): a smoke check beside the tests.
  check(cudaMemset(st.out.get(), 0xff, st.out.size() * 4), "nan fill");
  st.run(cw[1], true, nullptr, 0, "mla_decode_run (m16 check)");
  std::vector<float> o16(st.out.size());
  check(cudaMemcpy(o16.data(), st.out.get(), o16.size() * 4, cudaMemcpyDeviceToHost), "out");
  const bool finite = std::all_of(o16.begin(), o16.end(), [](float x) { return std::isfinite(x); });
  const double bytes32 = st.bytes32, bytes16 = st.bytes16, floor32 = bytes32 / g_bw * 1e6, floor16 = bytes16 / g_bw * 1e6;
  std::printf("| %4ld | %6ld | %5ld | %2d | %8.2f / %8.2f |", static_cast<long>(batch), static_cast<long>(ctx_tokens),
              static_cast<long>(plan.num_items), static_cast<int>(plan.ring), floor32, floor16);
  for (int o = 0; o < kCfg; ++o) std::printf(" %8.2f (%4.2f) |", med[o], (bf[o] ? bytes16 : bytes32) / med[o] * 1e-6);
  std::printf(" %5.3f | %5.3f | %5.3f | %5.3f | %s |\n", med[1] / med[0], med[2] / med[3], med[5] / med[4], med[7] / med[8],
              finite ? "ok" : "NON-FINITE");
  std::fflush(stdout);
}

inline void bench_m16() {
  std::printf("m16 rows (graph us/step (TB/s over the bytes read), pdl, the plan's ring / merge / trigger / slice; median of 5 interleaved "
              "rounds): | batch | ctx | items | plan ring (enum) | floor us fp32 / bf16 | c0 fp32 | c1 bf16 default (%d stages) | "
              "c2 bf16 3 stages | c3 bf16 6 stages | c4 bf16 lean, shift/mask | c5 bf16 lean, prmt | c6 bf16 lean-block | "
              "c7 bf16 lean-early | c8 fp32 lean-early | c1 / c0 | c2 / c3 | c5 / c4 | c7 / c8 | "
              "bf16 output finite |\n",
              kMlaBf16Stages);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64},     {1, 1024},   {1, 4096},    {1, 16384},   {1, 65536},
                                                {8, 16384},  {32, 16384}, {128, 16384}, {256, 16384}};
  for (const auto& [b, c] : shapes) bench_m16_shape(b, c);
}
