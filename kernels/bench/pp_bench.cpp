// Pipeline stage hand-off on this machine's GPUs (docs/perf.md): one micro-batch's
// activations (rows x 7168, the Kimi-K3 residual stream) sent from GPU 0 to GPU 1 with
// ncclSend/ncclRecv, fp32 and bf16, device buffer to device buffer; and the same through
// make_nccl_pipeline's host-staged channel (what the CPU backend's stages use: H2D, send,
// D2H). Reported against the best device-to-device rate seen in the run at 256 MiB
// (the bus as NCCL drives it). CUDA events on the receiver, warm-up first, median of repeats.
// With --model DIR: one prefill forward (TpModelGroup::forward, wall clock, median) of that
// model on one GPU vs two CUDA pipeline stages (make_cuda_pp_forwards) at 1, 2 and 4
// micro-batches.
//
//   pp_bench [--reps N] [--model DIR] [--only-forward]
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
#include "pdserve/model/device_forward.h"
#include "pdserve/model/pipeline.h"
#include "pdserve/model/tp_group.h"

namespace pdserve::cuda {
namespace {

#define CHECK(x)                                                            \
  do {                                                                      \
    Status _s = (x);                                                        \
    if (!_s.is_ok()) {                                                      \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, _s.message().c_str()); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per send of `bytes` GPU 0 -> GPU 1 (median over reps), timed on the receiver.
double device_send(std::vector<std::unique_ptr<DeviceCommunicator>>& comms, size_t bytes, int reps) {
  std::vector<double> times;
  std::vector<void*> buf(2);
  std::vector<cudaStream_t> st(2);
  for (int r = 0; r < 2; ++r) {
    CHECK(cuda_status(cudaSetDevice(r), "set"));
    CHECK(cuda_status(cudaMalloc(&buf[r], bytes), "malloc"));
    CHECK(cuda_status(cudaStreamCreate(&st[r]), "stream"));
  }
  for (int it = 0; it < reps + 3; ++it) {
    double ms = 0;
    std::thread sender([&] {
      cudaSetDevice(0);
      CHECK(comms[0]->send(buf[0], bytes, 1, st[0]));
      cudaStreamSynchronize(st[0]);
    });
    cudaSetDevice(1);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, st[1]);
    CHECK(comms[1]->recv(buf[1], bytes, 0, st[1]));
    cudaEventRecord(b, st[1]);
    cudaEventSynchronize(b);
    float f = 0;
    cudaEventElapsedTime(&f, a, b);
    ms = f;
    sender.join();
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (it >= 3) times.push_back(ms / 1e3);
  }
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(r);
    cudaFree(buf[r]);
    cudaStreamDestroy(st[r]);
  }
  return median(times);
}

// Seconds per host-staged channel message of n floats (wall clock on the receiver).
double staged_send(std::vector<std::unique_ptr<StageChannel>>& p, int64_t n, int reps) {
  std::vector<float> src(static_cast<size_t>(n), 1.0f), dst(static_cast<size_t>(n));
  std::vector<double> times;
  for (int it = 0; it < reps + 2; ++it) {
    std::thread sender([&] { CHECK(p[0]->send(1, src.data(), n)); });
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(p[1]->recv(0, dst.data(), n));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sender.join();
    if (it >= 2) times.push_back(s);
  }
  return median(times);
}

// One prefill forward of `seqs` prompts of `len` tokens (cached_len 0, last-row logits), on
// one GPU (pp 1) or two CUDA stages; milliseconds, median of reps after two warm-ups.
double forward_ms(const std::string& dir, int pp, int micro, int seqs, int64_t len, int reps) {
  const int64_t page = 16, pages_each = (len + page - 1) / page;
  auto g = TpModelGroup::load(dir, 1, pages_each * seqs, page, seqs, pp);
  CHECK(g.status());
  TpModelGroup& grp = **g;
  CudaForwardOptions opts;
  opts.graphs = false;
  if (pp == 1) {
    auto d = make_cuda_tp_forwards({grp.model_ptr(0)}, pages_each * seqs, page, seqs, opts);
    CHECK(d.status());
    CHECK(grp.set_device_forwards(std::move(d).value()));
  } else {
    std::vector<std::shared_ptr<const Model>> stages;
    for (int s = 0; s < pp; ++s) stages.push_back(grp.stage_model_ptr(s, 0));
    auto d = make_cuda_pp_forwards(stages, pages_each * seqs, page, seqs, opts);
    CHECK(d.status());
    CHECK(grp.set_device_forwards(std::move(d).value()));
    grp.set_micro_batches(micro);
  }
  ForwardBatch b;
  for (int s = 0; s < seqs; ++s) {
    SequenceInput in;
    in.pages = grp.allocate_pages(pages_each).value();
    in.state_slot = grp.allocate_slot().value();
    for (int64_t i = 0; i < len; ++i) in.tokens.push_back(static_cast<int32_t>((i * 7 + s * 13) % 1000));
    b.seqs.push_back(in);
  }
  std::vector<double> times;
  for (int it = 0; it < reps + 2; ++it) {
    ForwardOutput o;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(grp.forward(b, &o));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (it >= 2) times.push_back(ms);
  }
  return median(times);
}

void forward_table(const std::string& dir, int reps) {
  std::printf("prefill forward of %s (wall clock, median of %d)\n", dir.c_str(), reps);
  std::printf("%-22s %10s %10s %10s %10s\n", "batch", "PP1 ms", "PP2 mb1", "PP2 mb2", "PP2 mb4");
  for (auto [seqs, len] : {std::pair{1, 2048}, std::pair{4, 512}, std::pair{8, 256}}) {
    const double one = forward_ms(dir, 1, 1, seqs, len, reps);
    const double m1 = forward_ms(dir, 2, 1, seqs, len, reps);
    const double m2 = forward_ms(dir, 2, 2, seqs, len, reps);
    const double m4 = forward_ms(dir, 2, 4, seqs, len, reps);
    char name[48];
    std::snprintf(name, sizeof(name), "%d x %lld tokens", seqs, static_cast<long long>(len));
    std::printf("%-22s %10.2f %10.2f %10.2f %10.2f\n", name, one, m1, m2, m4);
  }
}

int run(int argc, char** argv) {
  int reps = 20;
  std::string model;
  bool only_forward = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!std::strcmp(argv[i], "--only-forward")) only_forward = true;
  }
  std::printf("%s\n", nccl_describe().c_str());
  if (!model.empty()) forward_table(model, reps);
  if (only_forward) return 0;
  auto comms = make_nccl_group(2);
  CHECK(comms.status());
  const double big = 256.0 * 1024 * 1024;
  const double bus = big / device_send(*comms, static_cast<size_t>(big), reps);
  std::printf("device->device 256 MiB: %.1f GB/s (the bus rate used below)\n", bus / 1e9);
  std::printf("%-28s %12s %10s %10s %8s\n", "message", "bytes", "us", "GB/s", "of bus");
  for (int64_t rows : {1, 64, 1024, 8192})
    for (int width : {4, 2}) {
      const size_t bytes = static_cast<size_t>(rows) * 7168 * width;
      const double s = device_send(*comms, bytes, reps);
      char name[64];
      std::snprintf(name, sizeof(name), "d2d %lld x 7168 %s", static_cast<long long>(rows), width == 4 ? "fp32" : "bf16");
      std::printf("%-28s %12zu %10.1f %10.1f %7.0f%%\n", name, bytes, s * 1e6, bytes / s / 1e9, 100.0 * bytes / s / bus);
    }
  comms->clear();
  auto pipe = make_nccl_pipeline(2);
  CHECK(pipe.status());
  for (int64_t rows : {64, 1024, 8192}) {
    const int64_t n = rows * 7168;
    const double s = staged_send(*pipe, n, reps);
    const size_t bytes = static_cast<size_t>(n) * 4;
    char name[64];
    std::snprintf(name, sizeof(name), "staged %lld x 7168 fp32", static_cast<long long>(rows));
    std::printf("%-28s %12zu %10.1f %10.1f %7.0f%%\n", name, bytes, s * 1e6, bytes / s / 1e9, 100.0 * bytes / s / bus);
  }
  return 0;
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) { return pdserve::cuda::run(argc, argv); }
