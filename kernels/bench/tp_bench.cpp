// Tensor parallelism on this machine's GPUs (docs/perf.md):
//  1. NCCL fp32 all-reduce between two ranks (threads, one GPU each) at the Kimi-K3 slice's
//     activation shapes: rows x 7168 (attention output, dense / shared MLP) and rows x 3584
//     (the latent MoE's routed partial), rows = 1..256 decode batches and an 8192-token
//     prefill chunk; against NCCL's own bus bandwidth on a 256 MiB message in the same run
//     (floor = 2(n-1)/n x bytes / that bandwidth). A K3 MoE layer makes one of each of the
//     three reductions; "per layer" sums them. There is no expert dispatch on the wire: every
//     rank sees all tokens and the combine is folded into the routed partial's all-reduce.
//  2. Decode step time of a tiny model on 1 and 2 GPUs through TpModelGroup (wall clock,
//     median of the steps).
// CUDA events, warm-up first, median of the repeats. Exits non-zero on an error.
//
//   tp_bench [--reps N] [--preset tiny-k3] [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.h"
#include "nccl/device_comm.h"
#include "pdserve/model/make_model.h"
#include "pdserve/model/tp_group.h"

namespace pdserve::cuda {
namespace {

int g_reps = 20;

void check(const Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  std::string name;
  int64_t floats;
};

// Every rank runs the same cases in the same order; returns rank 0's median us per call.
std::vector<double> time_all_reduce(std::vector<std::unique_ptr<DeviceCommunicator>>& comms, const std::vector<Case>& cases) {
  const int n = static_cast<int>(comms.size());
  int64_t most = 0;
  for (const Case& c : cases) most = std::max(most, c.floats);
  std::vector<std::vector<double>> us(n, std::vector<double>(cases.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      check(cuda_status(cudaSetDevice(r), "cudaSetDevice"), "device");
      cudaStream_t s;
      check(cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"), "stream");
      DeviceBuffer<float> buf(most);
      check(cuda_status(cudaMemset(buf.get(), 0, most * sizeof(float)), "memset"), "memset");  // zeros stay finite
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      for (size_t i = 0; i < cases.size(); ++i) {
        const int64_t f = cases[i].floats;
        const int iters = f >= (1 << 24) ? 2 : 20;  // 20 calls a repeat for the small ones
        for (int w = 0; w < 3; ++w) check(comms[r]->all_reduce_sum(buf.get(), f, s), "warm-up");
        std::vector<double> t;
        for (int rep = 0; rep < g_reps; ++rep) {
          cudaEventRecord(a, s);
          for (int k = 0; k < iters; ++k) check(comms[r]->all_reduce_sum(buf.get(), f, s), "all-reduce");
          cudaEventRecord(b, s);
          check(cuda_status(cudaEventSynchronize(b), "sync"), "sync");
          float ms = 0;
          cudaEventElapsedTime(&ms, a, b);
          t.push_back(ms * 1e3 / iters);
        }
        us[r][i] = median(t);
      }
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  return us[0];
}

void bench_all_reduce() {
  auto comms = make_nccl_group(2);
  check(comms.status(), "nccl group");
  const int n = 2;
  const double factor = 2.0 * (n - 1) / n;  // bytes each rank sends and receives, per byte reduced
  std::vector<Case> cases{{"anchor: 256 MiB message", (256ll << 20) / 4}};
  for (int64_t rows : {1, 2, 4, 8, 16, 32, 64, 128, 256, 8192}) {
    cases.push_back({std::to_string(rows) + " x 7168", rows * 7168});
    cases.push_back({std::to_string(rows) + " x 3584", rows * 3584});
  }
  const std::vector<double> us = time_all_reduce(*comms, cases);
  const double anchor_busbw = factor * cases[0].floats * 4.0 / (us[0] * 1e-6);
  std::printf("\n%s; 2 ranks (threads), NCCL_NVLS_ENABLE=%s\n", nccl_describe().c_str(),
              std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "(unset)");
  std::printf("All-reduce fp32; bus bandwidth = 2(n-1)/n x bytes / time (nccl-tests' busbw); floor = that traffic / the anchor's busbw\n\n");
  std::printf("| shape (rows x width) | bytes | us | floor us | ratio | busbw GB/s |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < cases.size(); ++i) {
    const double bytes = cases[i].floats * 4.0;
    const double busbw = factor * bytes / (us[i] * 1e-6);
    const double floor_us = factor * bytes / anchor_busbw * 1e6;
    std::printf("| %s | %.0f | %.1f | %.2f | %.1fx | %.1f |\n", cases[i].name.c_str(), bytes, us[i], floor_us, us[i] / floor_us, busbw * 1e-9);
  }
  std::printf("\nPer K3 MoE layer (attention 7168 + routed latent 3584 + shared 7168), TP2:\n\n| rows | us per layer | x 93 layers (ms) |\n|---|---|---|\n");
  for (size_t i = 1; i + 1 < cases.size(); i += 2) {
    const double layer = 2 * us[i] + us[i + 1];
    std::printf("| %s | %.1f | %.2f |\n", cases[i].name.substr(0, cases[i].name.find(' ')).c_str(), layer, layer * 93 / 1e3);
  }
}

// Decode steps of `batch` sequences after a 32-token prefill; median wall-clock ms a step.
double decode_step_ms(const std::string& dir, int tp, int batch, int steps) {
  const int64_t pages = 16 * batch, ps = 16;
  auto g = TpModelGroup::load(dir, tp, pages, ps, batch);
  check(g.status(), "load");
  TpModelGroup& grp = **g;
  std::vector<std::shared_ptr<const Model>> shards;
  for (int r = 0; r < tp; ++r) shards.push_back(grp.model_ptr(r));
  auto devs = make_cuda_tp_forwards(shards, pages, ps, batch);
  check(devs.status(), "device forwards");
  check(grp.set_device_forwards(std::move(devs).value()), "set device forwards");
  ForwardBatch fb;
  for (int b = 0; b < batch; ++b) {
    SequenceInput s;
    s.pages = grp.allocate_pages(16).value();
    s.state_slot = grp.allocate_slot().value();
    for (int i = 0; i < 32; ++i) s.tokens.push_back((b * 37 + i * 11) % 1000);
    fb.seqs.push_back(s);
  }
  ForwardOutput out;
  check(grp.forward(fb, &out), "prefill");
  std::vector<double> t;
  for (int i = 0; i < steps + 5; ++i) {
    for (auto& s : fb.seqs) {
      s.cached_len += static_cast<int64_t>(s.tokens.size());
      s.tokens = {static_cast<int32_t>((s.cached_len * 7) % 1000)};
    }
    const auto t0 = std::chrono::steady_clock::now();
    check(grp.forward(fb, &out), "decode");
    if (i >= 5) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

void bench_decode(const std::string& preset, int steps) {
  const std::string dir = "/tmp/tp_bench_" + preset;
  check(make_model(preset, dir, 1234), "make_model");
  std::printf("\nDecode step of %s (32-token prompts, %d steps, median wall clock incl. host work and logits copy)\n\n", preset.c_str(), steps);
  std::printf("| batch | 1 GPU ms | 2 GPUs (TP2) ms |\n|---|---|---|\n");
  for (int batch : {1, 8, 32}) {
    const double one = decode_step_ms(dir, 1, batch, steps), two = decode_step_ms(dir, 2, batch, steps);
    std::printf("| %d | %.3f | %.3f |\n", batch, one, two);
  }
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  using namespace pdserve::cuda;
  std::string preset = "tiny-k3";
  int steps = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) g_reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    std::printf("tp_bench: needs two CUDA devices, this machine has %d\n", devices);
    return 0;
  }
  bench_all_reduce();
  bench_decode(preset, steps);
  return 0;
}
