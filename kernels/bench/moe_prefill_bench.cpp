// Prefill MoE on one EP4 rank (224 of 896 experts, expert 3584 -> 3072 -> 3584 in MXFP4,
// SiTU(4, 25)), an 8K-token chunk with top-16: about 32K routed rows here. Times
// moe_expert_mlp_prefill (moe_prefill.h: gate/up + SiTU, then down) on three row
// distributions of 32768 rows: uniform (146-147 a expert), Zipf (expert e gets rows in
// proportion to 1/(e+1): 5470 down to 24) and one hot expert (8192 rows, every token, the
// rest uniform), and random (each row's expert drawn uniformly: binomial counts around 146, so
// some experts pass 160 rows and keep a short tail tile, as real routing does). FLOPs = 2 * rows * 3 * 3072 * 3584; the floor
// is the larger of FLOPs / 790 TFLOP/s and the touched experts' MXFP4 bytes (packed + scales) / 4.2 TB/s (the
// bytes bound up to 50 rows an expert: at --rows 3584 it is 936 us, the FLOPs' 300).
// The torch anchor (moe_prefill_torch.py) builds the same distributions and times the same
// work in bf16. Each distribution runs every main loop picked by --kernels (default all:
// mma.sync, wgmma, wgmma-wN, wgmma-smemW, wgmma-smemWd, wgmma-tma, wgmma-tma4, wgmma-prod, wgmma-160 =
// MoePrefillKernel::kMmaSync, kWgmma, kWgmmaWideN, kWgmmaSmemW, kWgmmaSmemWDeep, kWgmmaTma, kWgmmaTma4, kWgmmaProducer, kWgmma160, kWgmmaG2, kWgmmaSmemWG2, kWgmmaCarry, kWgmmaCarry6, kWgmmaTmaMc (wgmma-tma-mc), kWgmmaPingpong (wgmma-pingpong), kWgmmaTma160 (wgmma-tma-160), kWgmmaTma160W (wgmma-tma-160w), kWgmmaTmaNarrow (wgmma-tma-narrow); the input order does not change the time) under both tile schedules (moe_prefill.h: the
// dynamic queue in a workspace, as the backend calls it, and the static stride). Also the crossover against moe_expert_mlp_decode (kAuto) at 2..64 rows a
// expert on uniform and random rows, which sets the backend's switch (cuda_layers.cpp). CUDA events, 3 warm-ups,
// median of --reps. Weight bytes are random (scales 2^-7..2^-3), tiled from a 64 MB pattern.
//
//   moe_prefill_bench [--reps N] [--quick 1] [--kernels wgmma,wgmma-smemW] [--routing uniform,random] [--crossover 0]
//                     [--crossover-experts 28] [--ablate 1,2,4] [--rows 448]
//   (--quick: uniform only, queue only; --routing: these distributions only (default all four; `single`, every row on expert 0,
//   runs only when named); --crossover 0: no crossover lines;
//   --crossover-experts: the crossover on the first N local experts (28: an EP32 decode rank; default 224); --rows: R routed rows
//   instead of 32768 in the four distributions (448: 2 rows an expert, the narrowest tiles); --ablate: kWgmma with
//   parts of its main loop removed, moe_prefill_bench_ablate only: docs/perf.md "Bare wgmma loop")
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/cuda_check.h"
#include "moe/moe_decode.h"
#include "moe/moe_prefill.h"

namespace pdserve::cuda {
namespace {

bool g_quick = false;
constexpr int64_t kExperts = 224, kInter = 3072, kDim = 3584, kRows = 32768, kTokens = 8192;
constexpr double kPeak = 790e12, kBandwidth = 4.2e12;
// One expert's MXFP4 bytes: w1, w3 and w2, 4 bits a value plus one E8M0 scale byte per 32 values.
constexpr double kExpertBytes = 3.0 * kInter * kDim / 2 + 3.0 * kInter * kDim / 32;

using bench::check;
using bench::fill_bytes;
using bench::g_reps;
using bench::median_us;

// n bytes on the device, a random pattern of at most 64 MB repeated.
DeviceBuffer<uint8_t> random_device(size_t n, uint64_t seed, uint8_t lo = 0, uint8_t span = 0) {
  DeviceBuffer<uint8_t> d(n);
  std::vector<uint8_t> pat(std::min<size_t>(n, size_t(64) << 20));
  fill_bytes(pat, seed, lo, span);
  for (size_t off = 0; off < n; off += pat.size())
    check(cudaMemcpy(d.get() + off, pat.data(), std::min(pat.size(), n - off), cudaMemcpyHostToDevice), "weights");
  return d;
}


// Rows per expert; `total` rows. Remainders go one each to the first experts.
std::vector<int64_t> counts_for(const std::string& kind, int64_t total, int64_t experts = kExperts) {
  std::vector<int64_t> c(experts, 0);
  if (kind == "single") {  // every row on expert 0 (--routing single only): a large expert's tiles alone
    c[0] = total;
    return c;
  }
  std::vector<double> w(experts, 1.0);
  int64_t fixed = 0;
  if (kind == "zipf")
    for (int64_t e = 0; e < experts; ++e) w[e] = 1.0 / double(e + 1);
  if (kind == "hot") c[0] = fixed = std::min(kTokens, total / 4), w[0] = 0.0;  // every token (a quarter of --rows)
  if (kind == "random") {  // xorshift64* (bench_timing.py's moe_prefill_counts draws the same)
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int64_t r = 0; r < total; ++r) {
      s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
      ++c[((s * 0x2545F4914F6CDD1Dull) >> 32) % experts];
    }
    return c;
  }
  double sum = 0;
  for (double v : w) sum += v;
  int64_t given = fixed;
  for (int64_t e = 0; e < experts; ++e)
    if (w[e] > 0) given += c[e] = static_cast<int64_t>(double(total - fixed) * w[e] / sum);
  for (int64_t e = 0; given < total; e = (e + 1) % experts)
    if (w[e] > 0) ++c[e], ++given;
  return c;
}

std::vector<int32_t> offsets_of(const std::vector<int64_t>& c) {
  std::vector<int32_t> off(c.size() + 1, 0);
  for (size_t e = 0; e < c.size(); ++e) off[e + 1] = off[e] + static_cast<int32_t>(c[e]);
  return off;
}

struct NamedKernel {
  const char* name;
  MoePrefillKernel kernel;
  int ablate = 0;  // --ablate: PDS_PREFILL_ABLATE's mask for kWgmma (a -DPDS_PREFILL_ABLATE build only)
};
constexpr NamedKernel kAllKernels[] = {{"mma.sync", MoePrefillKernel::kMmaSync},
                                       {"wgmma", MoePrefillKernel::kWgmma},
                                       {"wgmma-wN", MoePrefillKernel::kWgmmaWideN},
                                       {"wgmma-smemW", MoePrefillKernel::kWgmmaSmemW},
                                       {"wgmma-smemWd", MoePrefillKernel::kWgmmaSmemWDeep},
                                       {"wgmma-tma", MoePrefillKernel::kWgmmaTma},
                                       {"wgmma-tma4", MoePrefillKernel::kWgmmaTma4},
                                       {"wgmma-prod", MoePrefillKernel::kWgmmaProducer},
                                       {"wgmma-160", MoePrefillKernel::kWgmma160},
                                       {"wgmma-g2", MoePrefillKernel::kWgmmaG2},
                                       {"wgmma-smemW-g2", MoePrefillKernel::kWgmmaSmemWG2},
                                       {"wgmma-carry", MoePrefillKernel::kWgmmaCarry},
                                       {"wgmma-carry6", MoePrefillKernel::kWgmmaCarry6},
                                       {"wgmma-tma-mc", MoePrefillKernel::kWgmmaTmaMc},
                                       {"wgmma-pingpong", MoePrefillKernel::kWgmmaPingpong},
                                       {"wgmma-tma-160", MoePrefillKernel::kWgmmaTma160},
                                       {"wgmma-tma-160w", MoePrefillKernel::kWgmmaTma160W},
                                       {"wgmma-tma-narrow", MoePrefillKernel::kWgmmaTmaNarrow}};

// --kernels a,b,c: the main loops to time, by the names above (default: all).
std::vector<NamedKernel> kernels_from(const std::string& list) {
  std::vector<NamedKernel> out;
  for (const NamedKernel& k : kAllKernels)
    if (list.empty() || ("," + list + ",").find(std::string(",") + k.name + ",") != std::string::npos) out.push_back(k);
  if (out.empty()) std::fprintf(stderr, "--kernels %s names none of mma.sync,wgmma,wgmma-wN,wgmma-smemW,wgmma-smemWd,wgmma-tma,wgmma-tma4,wgmma-prod,wgmma-160,wgmma-g2,wgmma-smemW-g2,wgmma-carry,wgmma-carry6,wgmma-tma-mc,wgmma-pingpong,wgmma-tma-160,wgmma-tma-160w,wgmma-tma-narrow\n", list.c_str());
  return out;
}

void run(int argc, char** argv) {
  g_reps = 10;  // this bench's default (--reps): each call is ~10 ms
  std::string kernel_list, ablate_list, routing_list;
  bool crossover = true;
  int64_t crossover_experts = kExperts;
  int64_t rows = kRows;  // --rows: the routed rows of the four distributions (fewer: narrower tiles)
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--reps")) g_reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--quick")) g_quick = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--kernels")) kernel_list = argv[i + 1];
    else if (!std::strcmp(argv[i], "--ablate")) ablate_list = argv[i + 1];
    else if (!std::strcmp(argv[i], "--routing")) routing_list = argv[i + 1];
    else if (!std::strcmp(argv[i], "--crossover")) crossover = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--crossover-experts")) crossover_experts = std::clamp<int64_t>(std::atoll(argv[i + 1]), 1, kExperts);
    else if (!std::strcmp(argv[i], "--rows")) rows = std::clamp<int64_t>(std::atoll(argv[i + 1]), 1, kRows);
  std::vector<NamedKernel> kernels = kernels_from(kernel_list);
  // --ablate 1,2,4: kWgmma again with parts of its main loop removed (timing only; the
  // moe_prefill_wgmma_sm90.cu masks), named wgmma-a<mask>.
  static std::vector<std::string> ablate_names;
  ablate_names.reserve(16);
  for (size_t p = 0; !ablate_list.empty() && p != std::string::npos;) {
    const size_t q = ablate_list.find(',', p);
    const int m = std::atoi(ablate_list.substr(p, q == std::string::npos ? q : q - p).c_str());
    ablate_names.push_back("wgmma-a" + std::to_string(m));
    kernels.push_back({ablate_names.back().c_str(), MoePrefillKernel::kWgmma, m});
    p = q == std::string::npos ? q : q + 1;
  }
  const size_t up_bytes = size_t(kExperts) * kInter * kDim / 2, up_scales = up_bytes / 16;
  auto p1 = random_device(up_bytes, 1), p3 = random_device(up_bytes, 2), p2 = random_device(up_bytes, 3);
  auto s1 = random_device(up_scales, 4, 120, 5), s3 = random_device(up_scales, 5, 120, 5), s2 = random_device(up_scales, 6, 120, 5);
  MoeDecodeWeights w;
  w.w1 = {p1.get(), s1.get(), kInter, kDim, false};
  w.w3 = {p3.get(), s3.get(), kInter, kDim, false};
  w.w2 = {p2.get(), s2.get(), kDim, kInter, false};
  w.activation = MoeActivation::kSiTU;
  w.situ_beta = 4.0f;
  w.situ_linear_beta = 25.0f;
  const int64_t cap = kTokens * 16;  // the backend's capacity: tokens x top-k
  // bf16 activations: random bytes with the exponent field pinned near 1 (|x| in [0.5, 2)).
  DeviceBuffer<uint16_t> x(cap * kDim), act(cap * kInter);
  {
    std::vector<uint16_t> h(size_t(kRows) * kDim);
    std::vector<uint8_t> r(h.size() * 2);
    fill_bytes(r, 7);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(((r[2 * i] & 0x80) << 8) | ((0x7E + (r[2 * i] & 1)) << 7) | (r[2 * i + 1] & 0x7f));
    check(cudaMemcpy(x.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice), "x");
  }
  DeviceBuffer<float> out(cap * kDim);
  DeviceBuffer<int32_t> off(kExperts + 1);
  // The tile queue's workspace (moe_prefill.h), zeroed once as the backend does.
  DeviceBuffer<uint32_t> prefill_ws_buf(2);
  check(cudaMemset(prefill_ws_buf.get(), 0, 8), "prefill workspace");
  const MoeDecodeWorkspace prefill_ws{prefill_ws_buf.get(), 8};
  std::printf("MoE prefill, EP4 rank: %lld local experts, expert %lld -> %lld -> %lld MXFP4, SiTU; %lld tokens x top-16 = %lld rows here\n",
              (long long)kExperts, (long long)kDim, (long long)kInter, (long long)kDim, (long long)kTokens, (long long)kRows);
  for (const std::string kind : {"uniform", "zipf", "hot", "random", "single"}) {
    if (g_quick && kind != "uniform") break;
    const bool named = ("," + routing_list + ",").find("," + kind + ",") != std::string::npos;
    if ((!routing_list.empty() || kind == "single") && !named) continue;
    const auto c = counts_for(kind, rows);
    check(off.upload(offsets_of(c)), "offsets");
    for (const auto& [kernel_name, kernel, ablate] : kernels)
      for (const bool queue : {true, false}) {
        if (ablate) setenv("PDS_PREFILL_ABLATE", std::to_string(ablate).c_str(), 1);
        else unsetenv("PDS_PREFILL_ABLATE");
        if (g_quick && !queue) break;
        const double us = median_us([&] {
          check(moe_expert_mlp_prefill(w, off.get(), kExperts, cap, x.get(), act.get(), out.get(), nullptr,
                                       queue ? prefill_ws : MoeDecodeWorkspace{}, kernel),
                "prefill");
        });
        const double flops = 2.0 * rows * 3 * kInter * kDim;
        const double touched = double(std::count_if(c.begin(), c.end(), [](int64_t n) { return n > 0; }));
        const double floor_us = std::max(flops / kPeak, touched * kExpertBytes / kBandwidth) * 1e6;
        std::printf("prefill %-7s %-12s %-6s rows %lld (max %lld min %lld a expert): %8.1f us  %6.1f TFLOP/s  floor %6.1f us  ours/floor %.2fx\n",
                    kind.c_str(),
                    kernel_name, queue ? "queue" : "static", (long long)rows,
                    (long long)*std::max_element(c.begin(), c.end()), (long long)*std::min_element(c.begin(), c.end()), us,
                    flops / us * 1e-6, floor_us, us / floor_us);
      }
  }
  unsetenv("PDS_PREFILL_ABLATE");
  if (g_quick || !crossover) return;
  // Crossover with the decode kernels (fp32 activations there), uniform rows.
  DeviceBuffer<float> xf(cap * kDim), actf(cap * kInter);
  // kAuto with the fused kernel's queue workspace, as the backend calls it (zero once).
  DeviceBuffer<uint32_t> ws_buf(moe_decode_workspace_bytes(kExperts) / sizeof(uint32_t));
  check(cudaMemset(ws_buf.get(), 0, moe_decode_workspace_bytes(kExperts)), "workspace");
  const MoeDecodeWorkspace ws{ws_buf.get(), moe_decode_workspace_bytes(kExperts)};
  check(cudaMemset(xf.get(), 0, cap * kDim * 4), "xf");
  // Uniform rows, then random ones (the same mean, binomial counts: a real router's spread, which
  // sends some experts past the decode kernels' 8-row items well before the mean gets there).
  const int64_t ne = crossover_experts;
  for (const char* kind : {"uniform", "random"})
    for (int64_t per : {2, 4, 6, 8, 10, 12, 16, 32, 64}) {  // 6 .. 12: where the backend's switch falls
      const int64_t rows = per * ne;
      const std::vector<int64_t> c = counts_for(kind, rows, ne);
      check(off.upload(offsets_of(c)), "offsets");
      const MoePrefillKernel pick = moe_prefill_choice(MoePrefillKernel::kAuto, per);  // as the backend picks (cuda_layers.cpp)
      const double us_p = median_us(
          [&] { check(moe_expert_mlp_prefill(w, off.get(), ne, rows, x.get(), act.get(), out.get(), nullptr, prefill_ws, pick), "prefill"); });
      const double us_d = median_us(
          [&] { check(moe_expert_mlp_decode(w, off.get(), ne, rows, xf.get(), actf.get(), out.get(), nullptr, MoeDecodeKernel::kAuto, ws), "decode"); });
      const MoeDecodeKernel chosen = moe_decode_choice(w, ne, rows, true);
      const bool fused = chosen == MoeDecodeKernel::kFused || chosen == MoeDecodeKernel::kFusedSplit ||
                         chosen == MoeDecodeKernel::kFusedSplitPdl || chosen == MoeDecodeKernel::kFusedSplit24Warps ||
                         chosen == MoeDecodeKernel::kFusedSplit24WarpsStaggered ||
                         chosen == MoeDecodeKernel::kFusedSplitStaggered;  // any one-launch form
      std::printf("crossover %-7s %3lld experts, %3lld rows a expert (%6lld rows, max %3lld): prefill%s %8.1f us  decode(kAuto -> %s) %8.1f us  prefill %.2fx faster\n",
                  kind, (long long)ne, (long long)per, (long long)rows, (long long)*std::max_element(c.begin(), c.end()),
                  pick == MoePrefillKernel::kWgmmaTmaNarrow ? " (narrow)" : "", us_p, fused ? "fused" : "two-launch",
                  us_d, us_d / us_p);
    }
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  pdserve::cuda::run(argc, argv);
  return 0;
}
