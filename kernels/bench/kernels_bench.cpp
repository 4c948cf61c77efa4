// Times every kernel family at Kimi-K3 per-rank shapes against its floor (the dense, MLA,
// KDA, routing and sampling kernels in bench_layers.cpp; MoE and transfer here)
// (fewest bytes / bandwidth; docs/perf.md). CUDA events, warm-up first, median of the
// repeats; weights and pools rotate over sets larger than L2 (60 MB) so repeats do not time
// the cache. Random data, never zeros. Prints one table; exits non-zero on a CUDA error.
//
//   kernels_bench [--bw BYTES_PER_S] [--reps N] [--only layers|moe|transfer]
//
// Shapes (../shared/docs/kimi-k3.md): MoE on one EP32 rank = 28 of 896 experts, top-16,
// expert 3584 -> 3072 -> 3584 in MXFP4, SiTU(4, 25). MLA latent pages: 24 layers, page
// 64 x 576 fp32. KDA state: 69 layers, 96 heads of 128, conv tail 3, prefill TP4 -> decode
// TP32 as planned by disagg::plan_state_copy, the runs that decode rank 0 receives.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/cuda_check.h"
#include "moe/moe.h"
#include "pdserve/disagg/state_slicing.h"
#include "transfer/transfer.h"

namespace pdserve::cuda {
namespace {

using namespace bench;

void bench_moe() {
  const int64_t experts = 896, local = 28, k = 16, dim = 3584, inter = 3072, sets = 3;
  const int64_t per_expert = 3 * inter * dim / 2 + 3 * inter * dim / 32;  // packed + scales bytes
  std::vector<uint8_t> p13(local * inter * dim / 2), s13(local * inter * dim / 32), p2(local * dim * inter / 2),
      s2(local * dim * inter / 32);
  std::vector<DeviceBuffer<uint8_t>> bufs;
  std::vector<MoeExpertWeights> w(sets);
  for (int64_t s = 0; s < sets; ++s) {
    uint64_t seed = 1000 + 10 * s;
    for (auto* v : {&p13, &s13, &p13, &s13, &p2, &s2}) {
      const bool scale = v == &s13 || v == &s2;
      fill_bytes(*v, seed++, scale ? 120 : 0, scale ? 5 : 0);
      bufs.push_back(upload(*v));
    }
    auto* b = &bufs[bufs.size() - 6];
    w[s].w1 = {b[0].get(), b[1].get(), inter, dim};
    w[s].w3 = {b[2].get(), b[3].get(), inter, dim};
    w[s].w2 = {b[4].get(), b[5].get(), dim, inter};
    w[s].activation = MoeActivation::kSiTU;
    w[s].situ_beta = 4.0f;
    w[s].situ_linear_beta = 25.0f;
  }
  std::printf("\nMoE, one EP32 rank (28 of 896 experts, top-16, 3584->3072->3584 MXFP4, SiTU); floor = MXFP4 bytes of the\n"
              "touched experts / %.2f TB/s\n\n| case | us | floor us | ratio | effective | note\n|---|---|---|---|---|---\n",
              g_bw * 1e-12);
  std::mt19937 g(7);
  for (int64_t tokens : {1, 8, 64, 256, 2048}) {
    std::vector<int32_t> ids(tokens * k);
    std::vector<float> wts(tokens * k);
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t t = 0; t < tokens; ++t) {
      std::shuffle(all.begin(), all.end(), g);
      if (tokens == 1) {  // exactly one local expert, as performance.md's B=1 floor assumes
        std::stable_partition(all.begin(), all.end(), [&](int32_t e) { return e >= local; });
        std::swap(all[0], all[experts - 1]);
      }
      for (int64_t j = 0; j < k; ++j) ids[t * k + j] = all[j], wts[t * k + j] = 0.05f + 0.01f * j;
    }
    std::vector<bool> touched(local, false);
    int64_t rows = 0;
    for (int32_t e : ids)
      if (e < local) touched[e] = true, ++rows;
    const int64_t nt = std::count(touched.begin(), touched.end(), true);
    const double bytes = double(nt) * per_expert, floor_us = bytes / g_bw * 1e6;
    const int64_t cap = tokens * k;
    auto di = upload(ids);
    auto dw = upload(wts);
    auto dx = upload(randn(tokens * dim, 9));
    DeviceBuffer<int32_t> off(local + 1), sorted(cap), prow(cap);
    DeviceBuffer<float> xs(cap * dim), act(cap * inter), os(cap * dim), y(tokens * dim);
    const MoePlan plan{off.get(), sorted.get(), prow.get()};
    auto permute = [&](int) { check(moe_permute(di.get(), tokens, k, 0, local, dx.get(), dim, plan, xs.get(), nullptr), "permute"); };
    auto expert = [&](int i) {
      check(moe_expert_mlp(w[i % sets], off.get(), local, cap, xs.get(), act.get(), os.get(), nullptr), "expert");
    };
    auto combine = [&](int) { check(moe_combine(os.get(), prow.get(), dw.get(), tokens, k, dim, y.get(), nullptr), "combine"); };
    const double tp = median_us(permute), te = median_us(expert), tc = median_us(combine);
    const double tall = median_us([&](int i) { permute(i), expert(i), combine(i); });
    const std::string note = std::to_string(nt) + " experts touched, " + std::to_string(rows) + " rows";
    const double flops = 2.0 * rows * 3 * inter * dim;
    char tf[64];
    std::snprintf(tf, sizeof tf, ", %.1f TFLOP/s in experts", flops / te * 1e-6);
    row("B=" + std::to_string(tokens) + " permute+experts+combine", tall, bytes, floor_us, note);
    row("B=" + std::to_string(tokens) + "   permute", tp, 0, floor_us);
    row("B=" + std::to_string(tokens) + "   expert MLP", te, bytes, floor_us, tf);
    row("B=" + std::to_string(tokens) + "   combine", tc, 0, floor_us);
  }
}

// pack then unpack of `runs` between two pools, rotating over `sets` run lists.
void bench_runs(const std::string& name, const std::vector<std::vector<TransferRun>>& sets, int64_t src_floats, int64_t dst_floats) {
  std::vector<DeviceBuffer<TransferChunk>> chunks;
  std::vector<int64_t> counts;
  int64_t staging = 0, bytes = 0;
  for (const auto& runs : sets) {
    int64_t s = 0;
    auto c = plan_transfer_chunks(runs, &s);
    staging = std::max(staging, s);
    counts.push_back(c.size());
    chunks.push_back(upload(c));
    bytes = 0;
    for (const auto& r : runs) bytes += r.length * 4;
  }
  DeviceBuffer<float> src(src_floats), dst(dst_floats), stage(staging), copy_dst(staging);
  std::vector<uint8_t> junk(size_t(src_floats) * 4);
  fill_bytes(junk, 3, 0x30, 16);  // finite floats
  check(cuda_status(cudaMemcpy(src.get(), junk.data(), junk.size(), cudaMemcpyHostToDevice), "fill"), "fill");
  const size_t n = sets.size();
  const double floor_us = 2.0 * bytes / g_bw * 1e6;  // every byte read once and written once
  const double tp = median_us([&](int i) { check(pack_runs(src.get(), chunks[i % n].get(), counts[i % n], stage.get(), nullptr), "pack"); });
  const double tu = median_us([&](int i) { check(unpack_runs(stage.get(), chunks[i % n].get(), counts[i % n], dst.get(), nullptr), "unpack"); });
  const double tm = median_us([&](int) { cudaMemcpyAsync(copy_dst.get(), stage.get(), bytes, cudaMemcpyDeviceToDevice, nullptr); });
  const std::string note = std::to_string(sets[0].size()) + " runs, " + std::to_string(bytes >> 20) + " MiB";
  row(name + " pack", tp, 2.0 * bytes, floor_us, note);
  row(name + " unpack", tu, 2.0 * bytes, floor_us, note);
  row(name + " cudaMemcpy D2D, same bytes (anchor)", tm, 2.0 * bytes, floor_us, "contiguous");
}

void bench_transfer() {
  std::printf("\nTransfer pack/unpack; floor = bytes read + written / %.2f TB/s\n\n| case | us | floor us | ratio | effective | "
              "note\n|---|---|---|---|---|---\n",
              g_bw * 1e-12);
  // MLA: a 4096-token request = 64 pages in each of 24 layers; pools of 256 pages a layer.
  const int64_t layers = 24, pages = 256, page_floats = 64 * 576, stride = pages * page_floats;
  std::mt19937 g(11);
  std::vector<std::vector<TransferRun>> mla;
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> ids(pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    std::vector<int32_t> src(ids.begin(), ids.begin() + 64);
    std::shuffle(ids.begin(), ids.end(), g);
    std::vector<int32_t> dst(ids.begin(), ids.begin() + 64);
    mla.push_back(mla_page_runs(layers, stride, page_floats, src, dst));
  }
  bench_runs("MLA 4K-token request, 24 layers", mla, layers * stride, layers * stride);

  // KDA: decode rank 0's share of a TP4 prefill slot; sets = different source slots.
  const disagg::KdaStateShape shape{69, 96, 128, 3};
  auto plan = disagg::plan_state_copy(shape, 4, 32);
  check(plan.status(), "plan_state_copy");
  const int64_t src_slot = disagg::slot_floats(shape, 4), dst_slot = disagg::slot_floats(shape, 32);
  std::vector<std::vector<TransferRun>> kda(8);
  for (int s = 0; s < 8; ++s)
    for (const auto& r : *plan)
      if (r.dst_rank == 0) kda[s].push_back({s * src_slot + r.src_offset, r.dst_offset, r.length});
  bench_runs("KDA TP4->TP32 slot share, 69 layers", kda, 8 * src_slot, dst_slot);
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  std::string only;  // "moe", "transfer" or "layers": one table only
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--bw")) pdserve::cuda::bench::g_bw = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) pdserve::cuda::bench::g_reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    std::printf("kernels_bench: no CUDA device\n");
    return 1;
  }
  std::printf("device: %s, %d SMs, L2 %d MB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
  if (only.empty() || only == "layers") pdserve::cuda::bench::bench_layers();
  if (only.empty() || only == "moe") pdserve::cuda::bench_moe();
  if (only.empty() || only == "transfer") pdserve::cuda::bench_transfer();
  return 0;
}
