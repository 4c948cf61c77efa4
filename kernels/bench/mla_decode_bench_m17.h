// mla_decode_bench m17 (seventeenth version, docs/perf.md): a bf16 cache on the tensor cores
// (MlaDecodeBf16Math::kTensorCores, mla_decode_mma_sm90.cu) against the cuda-core bf16 forms and the
// fp32 cache, graphs of 20 steps back to back (pdl, the plan's ring / merge / trigger / slice), five
// interleaved rounds, the median round. Columns: c0 fp32; c1 bf16 cuda cores; c2 bf16 tensor cores;
// c3 bf16 default (MlaDecodeBf16Math::kAuto); c4 / c5 = c1 / c2 on kLeanEarly (the CUDA backend's
// ring). TB/s over the bytes each reads (fp32 2304, bf16 1152 bytes a token); floors = those bytes
// / g_bw. "tc err": max |c2 - c1| / max |c1| over the step's outputs.
// Included by mla_decode_bench.cu (inside its anonymous namespace, after graph_launch_us and
// shuffled_page_tables).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pdserve/core/dtype.h"

inline void bench_m17_shape(int64_t batch, int64_t ctx_tokens) {
  DtypeStep st(batch, ctx_tokens);  // mla_decode_bench_m16.h
  const MlaDecodeWork& w = st.w;
  const MlaDecodePlan& plan = st.plan;
  constexpr int kCfg = 6;
  MlaDecodeWork cw[kCfg];
  bool bf[kCfg];
  for (int o = 0; o < kCfg; ++o) cw[o] = w, bf[o] = o > 0;
  constexpr auto kCuda = MlaDecodeBf16Math::kCudaCores, kTc = MlaDecodeBf16Math::kTensorCores;
  cw[1].bf16_math = kCuda, cw[2].bf16_math = kTc, cw[3].bf16_math = MlaDecodeBf16Math::kAuto;
  cw[4].bf16_math = kCuda, cw[4].ring = MlaDecodeRing::kLeanEarly, cw[5].bf16_math = kTc, cw[5].ring = MlaDecodeRing::kLeanEarly;
  auto launch = [&](int o, cudaStream_t stream, int i) { st.run(cw[o], bf[o], stream, i, "mla_decode_run (m17)"); };
  std::vector<double> rounds[kCfg];
  for (int r = 0; r < 5; ++r)
    for (int o = 0; o < kCfg; ++o) rounds[o].push_back(graph_launch_us([&](cudaStream_t s, int i) { launch(o, s, i); }, 20));
  double med[kCfg];
  for (int o = 0; o < kCfg; ++o) std::sort(rounds[o].begin(), rounds[o].end()), med[o] = rounds[o][2];
  // The tensor-core output against the cuda-core one on the same step (NaN-filled first).
  auto output_of = [&](int o) {
    check(cudaMemset(st.out.get(), 0xff, st.out.size() * 4), "nan fill");
    launch(o, nullptr, 0);
    check(cudaDeviceSynchronize(), "sync");
    std::vector<float> h(st.out.size());
    check(cudaMemcpy(h.data(), st.out.get(), h.size() * 4, cudaMemcpyDeviceToHost), "out");
    return h;
  };
  const std::vector<float> cuda_out = output_of(1), tc_out = output_of(2);
  double diff = 0.0, mag = 0.0;
  bool finite = true;
  for (size_t i = 0; i < cuda_out.size(); ++i) {
    finite = finite && std::isfinite(tc_out[i]);
    diff = std::max(diff, static_cast<double>(std::fabs(tc_out[i] - cuda_out[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(cuda_out[i])));
  }
  const double bytes32 = st.bytes32, bytes16 = st.bytes16, floor32 = bytes32 / g_bw * 1e6, floor16 = bytes16 / g_bw * 1e6;
  std::printf("| %4ld | %6ld | %5ld | %2d | %8.2f / %8.2f |", static_cast<long>(batch), static_cast<long>(ctx_tokens),
              static_cast<long>(plan.num_items), static_cast<int>(plan.ring), floor32, floor16);
  for (int o = 0; o < kCfg; ++o) std::printf(" %8.2f (%4.2f) |", med[o], (bf[o] ? bytes16 : bytes32) / med[o] * 1e-6);
  std::printf(" %5.3f | %5.3f | %5.3f | %5.3f | %5.2f | %.2e%s |\n", med[2] / med[1], med[3] / std::min(med[1], med[2]), med[5] / med[4],
              med[2] / med[0], med[2] / floor16, mag > 0 ? diff / mag : diff, finite ? "" : " NON-FINITE");
  std::fflush(stdout);
}

inline void bench_m17() {
  std::printf("m17 rows (graph us/step (TB/s over the bytes read), pdl, the plan's ring / merge / trigger / slice; median of 5 interleaved "
              "rounds): | batch | ctx | items | plan ring (enum) | floor us fp32 / bf16 | c0 fp32 | c1 bf16 cuda cores | "
              "c2 bf16 tensor cores | c3 bf16 default (kAuto) | c4 bf16 cuda cores lean-early | c5 bf16 tensor cores lean-early | "
              "c2 / c1 | c3 / min(c1, c2) | c5 / c4 | c2 / c0 | c2 / bf16 floor | tc err (c2 vs c1) |\n");
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64},    {1, 1024},   {1, 4096},    {1, 16384},   {1, 65536}, {1, 131072},
                                                {8, 16384}, {32, 16384}, {64, 4096},   {128, 16384}, {256, 16384}};
  // PDS_M17_ONLY=BxCTX (e.g. 64x4096): that shape alone (for profilers).
  const char* only = std::getenv("PDS_M17_ONLY");
  for (const auto& [b, c] : shapes)
    if (!only || std::to_string(b) + "x" + std::to_string(c) == only) bench_m17_shape(b, c);
}
