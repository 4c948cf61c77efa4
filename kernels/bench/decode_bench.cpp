// Decode step time of the tiny models on the device, eager vs CUDA graphs (docs/perf.md).
// For each batch size: prefill B sequences of `ctx` tokens, then time `steps` decode steps
// (wall clock around CudaModel::forward, which includes the inputs' upload and the logits'
// copy back: what the engine pays). Median over the steps.
//
//   decode_bench [--preset tiny-k3] [--ctx 128] [--steps 50] [--batches 1,2,4,8,16,32,64]
//   decode_bench --early-mla compare ...: graphs only, CudaForwardOptions::early_mla_decode off
//     and on, twice each in the order off, on, off, on (a fresh model and prefill each), so the
//     spread of the repeats shows the noise (perf.md "The early MLA ring in the engine").
//   decode_bench --kv-cache-dtype compare ...: the same with CudaForwardOptions::kv_cache_dtype
//     float32 and bfloat16 (perf.md "bf16 latent cache in the CUDA backend");
//   --kv-cache-dtype bfloat16: the eager / graphs table on a bf16 cache.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda_model.h"
#include "pdserve/model/make_model.h"

namespace pdserve::cuda {
namespace {

double median_step_us(const std::shared_ptr<const Model>& model, CudaForwardOptions opts, int64_t B, int64_t ctx, int steps) {
  const int64_t page = 64, pages_per = (ctx + steps + page) / page;
  auto m = CudaModel::create(model, B * pages_per, page, B, opts);
  if (!m.is_ok()) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    std::exit(1);
  }
  ForwardBatch batch;
  for (int64_t s = 0; s < B; ++s) {
    SequenceInput in;
    for (int64_t t = 0; t < ctx; ++t) in.tokens.push_back(static_cast<int32_t>((s * 131 + t * 17) % 1000 + 3));
    for (int64_t p = 0; p < pages_per; ++p) in.pages.push_back(static_cast<int32_t>(s * pages_per + p));
    in.state_slot = static_cast<int32_t>(s);
    batch.seqs.push_back(std::move(in));
  }
  ForwardOutput out;
  std::vector<double> t;
  for (int step = 0; step <= steps; ++step) {
    const auto a = std::chrono::steady_clock::now();
    if (Status st = (*m)->forward(batch, &out); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
    const auto b = std::chrono::steady_clock::now();
    if (step > 1) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());  // 0: prefill, 1: capture
    for (auto& s : batch.seqs) {
      s.cached_len += static_cast<int64_t>(s.tokens.size());
      s.tokens = {static_cast<int32_t>((s.cached_len * 7) % 1000 + 3)};
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  std::string preset = "tiny-k3";
  int64_t ctx = 128;
  int steps = 50;
  bool compare_early = false, compare_dtype = false;
  pdserve::DType kv_dtype = pdserve::DType::kF32;
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--early-mla")) compare_early = !std::strcmp(argv[i + 1], "compare");
    if (!std::strcmp(argv[i], "--kv-cache-dtype")) {
      compare_dtype = !std::strcmp(argv[i + 1], "compare");
      if (!compare_dtype && !pdserve::kv_cache_dtype_from_name(argv[i + 1], &kv_dtype)) {
        std::fprintf(stderr, "--kv-cache-dtype: compare, float32 or bfloat16\n");
        return 2;
      }
    }
    if (!std::strcmp(argv[i], "--batches")) {
      batches.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string b; std::getline(list, b, ',');) batches.push_back(std::atoll(b.c_str()));
    }
  }
  const std::string dir = (std::filesystem::temp_directory_path() / ("decode_bench_" + preset)).string();
  if (pdserve::Status st = pdserve::make_model(preset, dir); !st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  auto loaded = pdserve::Model::load(dir);
  if (!loaded.is_ok()) return 1;
  std::shared_ptr<const pdserve::Model> model(std::move(loaded).value());
  using pdserve::CudaForwardOptions;
  // Two forms of one option, A B A B a batch (graphs), so drift between runs shows as the
  // difference between the two runs of a form.
  auto compare = [&](const char* option, const char* a_name, const char* b_name, auto set_form) {
    std::printf("%s, context %lld, median of %d decode steps (forward wall time, graphs), %s %s / %s\n\n"
                "| batch | %s us | %s us | %s us (again) | %s us (again) | %s / %s (means) |\n|---|---|---|---|---|---|\n",
                preset.c_str(), static_cast<long long>(ctx), steps - 1, option, a_name, b_name, a_name, b_name, a_name, b_name, b_name, a_name);
    for (int64_t B : batches) {
      double t[4];
      for (int r = 0; r < 4; ++r) {
        CudaForwardOptions o;
        set_form(o, r % 2 == 1);  // false: form a, true: form b
        t[r] = pdserve::cuda::median_step_us(model, o, B, ctx, steps);
      }
      std::printf("| %lld | %.1f | %.1f | %.1f | %.1f | %.4f |\n", static_cast<long long>(B), t[0], t[1], t[2], t[3], (t[1] + t[3]) / (t[0] + t[2]));
    }
    return 0;
  };
  if (compare_dtype)
    return compare("kv_cache_dtype", "fp32", "bf16",
                   [](CudaForwardOptions& o, bool b) { o.kv_cache_dtype = b ? pdserve::DType::kBF16 : pdserve::DType::kF32; });
  if (compare_early) return compare("early_mla_decode", "off", "on", [](CudaForwardOptions& o, bool b) { o.early_mla_decode = b; });
  std::printf("%s, context %lld, median of %d decode steps (forward wall time)\n\n| batch | eager us | graphs us | speed-up |\n|---|---|---|---|\n",
              preset.c_str(), static_cast<long long>(ctx), steps - 1);
  for (int64_t B : batches) {
    CudaForwardOptions eager, graphs;
    eager.graphs = false;
    eager.kv_cache_dtype = graphs.kv_cache_dtype = kv_dtype;
    const double e = pdserve::cuda::median_step_us(model, eager, B, ctx, steps);
    const double g = pdserve::cuda::median_step_us(model, graphs, B, ctx, steps);
    std::printf("| %lld | %.1f | %.1f | %.2fx |\n", static_cast<long long>(B), e, g, e / g);
  }
  return 0;
}
