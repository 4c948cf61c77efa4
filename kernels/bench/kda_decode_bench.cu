// The fused KDA decode step's time per layer (docs/perf.md), TP32 decode rank shape: 3 heads of
// 128, conv kernel 4. Each figure is one CUDA-graph replay of `kSteps` steps divided by kSteps
// (median of kReps replays), so the launch cost is what a graph replay pays per kernel node.
// Steps rotate over 4 disjoint scattered slot sets (4 x 50 MB at batch 256: past the 50-60 MB
// L2), so state reads come from HBM. Effective bandwidth counts the recurrent state read and
// written once (B*H*D*D*4*2 bytes), the floor is those bytes over 4.2 TB/s; the device copy
// ceiling is measured in the same run.
//   kda_decode_bench [heads=3] [batch] [variant]   (batch / variant: only that one, e.g. for ncu)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "kda/kda.h"

using namespace pdserve::cuda;

namespace {

constexpr int kSteps = 64, kReps = 11, kSets = 4;
constexpr int64_t kSlots = 1024;

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void fill(float* p, size_t n, float scale, uint32_t seed) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  for (auto& x : h) x = nd(rng);
  CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
}

float* alloc(size_t n) {
  float* p = nullptr;
  CHECK(cudaMalloc(&p, n * 4));
  return p;
}

// Median milliseconds of one replay of a graph captured from `body`.
template <typename F>
double graph_ms(cudaStream_t s, F body) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  body();
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < kReps; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK(cudaGetLastError());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void empty_kernel() {}

// The bandwidth ceiling as a kernel sees it: a float4 grid-stride copy.
__global__ void copy_kernel(const float4* __restrict__ x, float4* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) y[i] = x[i];
}

// The same with four independent 16-byte loads in flight per thread before the first store.
__global__ void copy4_kernel(const float4* __restrict__ x, float4* __restrict__ y, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += 4 * stride) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n) v[u] = __ldcs(x + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n) __stcs(y + i + u * stride, v[u]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t H = argc > 1 ? std::atoi(argv[1]) : 3, D = 128, K = 4, P = H * D;
  const int64_t layer_floats = 3 * P * (K - 1) + H * D * D;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const int64_t only_batch = argc > 2 ? std::atoi(argv[2]) : 0;
  const char* only_variant = argc > 3 ? argv[3] : nullptr;
  if (only_batch == 0) {  // ceilings: a 1 GiB device copy (read + write), and a graph node's own cost
    const size_t n = size_t(1) << 28;
    float *x = alloc(n), *y = alloc(n);
    CHECK(cudaMemset(x, 1, n * 4));
    const double ms = graph_ms(s, [&] { CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, s)); });
    std::printf("copy ceiling: %.2f TB/s (1 GiB cudaMemcpyAsync D2D in a graph, read+write)\n", 2.0 * n * 4 / (ms * 1e-3) / 1e12);
    const double mk = graph_ms(s, [&] { copy_kernel<<<132 * 16, 256, 0, s>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4); });
    std::printf("copy ceiling: %.2f TB/s (1 GiB float4 copy kernel, read+write)\n", 2.0 * n * 4 / (mk * 1e-3) / 1e12);
    for (int per_sm : {4, 8}) {
      const double m4 = graph_ms(s, [&] { copy4_kernel<<<132 * per_sm, 256, 0, s>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4); });
      std::printf("copy ceiling: %.2f TB/s (1 GiB copy, 4 float4 in flight a thread, %d blocks an SM, read+write)\n",
                  2.0 * n * 4 / (m4 * 1e-3) / 1e12, per_sm);
    }
    cudaFree(x);
    cudaFree(y);
    const double e = graph_ms(s, [&] {
      for (int i = 0; i < kSteps; ++i) empty_kernel<<<1, 32, 0, s>>>();
    });
    std::printf("empty kernel node in a graph: %.2f us\n", e * 1e3 / kSteps);
  }

  float* pool = alloc(kSlots * layer_floats);
  fill(pool, kSlots * layer_floats, 0.05f, 1);
  float *cq = alloc(P * K), *ck = alloc(P * K), *cv = alloc(P * K), *alog = alloc(H), *dt = alloc(P), *onorm = alloc(D);
  fill(cq, P * K, 0.5f, 2), fill(ck, P * K, 0.5f, 3), fill(cv, P * K, 0.5f, 4), fill(alog, H, 0.5f, 5), fill(dt, P, 0.5f, 6);
  fill(onorm, D, 1.0f, 7);
  const int64_t max_b = 256;
  float *q = alloc(max_b * P), *k = alloc(max_b * P), *v = alloc(max_b * P), *f = alloc(max_b * P), *beta = alloc(max_b * H),
        *gate = alloc(max_b * P), *out = alloc(max_b * P);
  for (float* p : {q, k, v, f, gate}) fill(p, max_b * P, 1.0f, 8);
  fill(beta, max_b * H, 1.0f, 9);
  int32_t* tickets = nullptr;
  CHECK(cudaMalloc(&tickets, max_b * H * 4));
  CHECK(cudaMemset(tickets, 0, max_b * H * 4));
  // kSets disjoint scattered slot sets.
  std::vector<int32_t> perm(kSlots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(10));
  int32_t* slot_sets = nullptr;
  CHECK(cudaMalloc(&slot_sets, kSlots * 4));
  CHECK(cudaMemcpy(slot_sets, perm.data(), kSlots * 4, cudaMemcpyHostToDevice));

  std::printf("H=%ld D=%ld K=%ld; per step = one graph node; %d steps per replay, median of %d replays\n", long(H), long(D),
              long(K), kSteps, kReps);
  std::printf("%5s %-12s %10s %10s %10s\n", "batch", "plan/rw", "us/step", "state TB/s", "floor us");
  struct Variant {
    KdaDecodePlan plan;
    int rw;
    const char* name;
    int warps = 4;
    int stages = 0, items = 0;  // stream plan: ring depth, items a block (0: defaults)
    bool pdl = false;           // stream plan: programmatic dependent launch (kda.h)
  };
  const Variant variants[] = {{KdaDecodePlan::kAuto, 0, "auto"},       {KdaDecodePlan::kCluster, 2, "cluster/2"},
                              {KdaDecodePlan::kCluster, 4, "cluster/4"}, {KdaDecodePlan::kCluster, 8, "cluster/8"},
                              {KdaDecodePlan::kCluster, 16, "cluster/16"}, {KdaDecodePlan::kTickets, 1, "tickets/1"},
                              {KdaDecodePlan::kTickets, 4, "tickets/4"}, {KdaDecodePlan::kTickets, 8, "tickets/8"},
                              {KdaDecodePlan::kTickets, 16, "tickets/16"}, {KdaDecodePlan::kOneBlock, 4, "oneblock/4"},
                              {KdaDecodePlan::kOneBlock, 8, "oneblock/8"},
                              {KdaDecodePlan::kPush, 2, "push/4x2", 4},  {KdaDecodePlan::kPush, 4, "push/4x4", 4},
                              {KdaDecodePlan::kPush, 8, "push/4x8", 4},  {KdaDecodePlan::kPush, 16, "push/4x16", 4},
                              {KdaDecodePlan::kPush, 2, "push/8x2", 8},  {KdaDecodePlan::kPush, 4, "push/8x4", 8},
                              {KdaDecodePlan::kPush, 8, "push/8x8", 8},  {KdaDecodePlan::kPush, 16, "push/8x16", 8},
                              {KdaDecodePlan::kPush, 8, "push/16x8", 16},
                              {KdaDecodePlan::kStream, 4, "stream/4x4x4", 4, 4},
                              {KdaDecodePlan::kStream, 4, "stream/4x4x6", 4, 6},
                              {KdaDecodePlan::kStream, 2, "stream/4x2x6", 4, 6},
                              {KdaDecodePlan::kStream, 8, "stream/4x8x3", 4, 3},
                              {KdaDecodePlan::kStream, 4, "stream/8x4x3", 8, 3},
                              {KdaDecodePlan::kStream, 4, "s/4x4x4/i1", 4, 4, 1},
                              {KdaDecodePlan::kStream, 4, "s/4x4x4/i4", 4, 4, 4},
                              {KdaDecodePlan::kStream, 4, "s/4x4x6/i1", 4, 6, 1},
                              {KdaDecodePlan::kAuto, 0, "auto/pdl", 4, 0, 0, true},
                              {KdaDecodePlan::kStream, 4, "s/4x4x4/pdl", 4, 4, 0, true},
                              {KdaDecodePlan::kStream, 4, "s/4x4x6/pdl", 4, 6, 0, true},
                              {KdaDecodePlan::kStream, 2, "s/4x2x6/pdl", 4, 6, 0, true},
                              {KdaDecodePlan::kStream, 8, "s/4x8x3/pdl", 4, 3, 0, true},
                              {KdaDecodePlan::kStream, 4, "s/8x4x3/pdl", 8, 3, 0, true},
                              {KdaDecodePlan::kStream, 4, "s/4x4x6/i1/pdl", 4, 6, 1, true},
                              {KdaDecodePlan::kStream, 4, "s/4x4x4/i1/pdl", 4, 4, 1, true},
                              {KdaDecodePlan::kStream, 4, "s/8x4x3/i1/pdl", 8, 3, 1, true},
                              {KdaDecodePlan::kPush, 4, "push/4x4/pdl", 4, 0, 0, true},
                              {KdaDecodePlan::kPush, 8, "push/4x8/pdl", 4, 0, 0, true},
                              {KdaDecodePlan::kPush, 4, "push/8x4/pdl", 8, 0, 0, true}};
  for (int64_t B : {1, 3, 8, 16, 32, 64, 128, 256}) {
    if (only_batch > 0 && B != only_batch) continue;
    const KdaDecodeShape pick = kda_decode_pick(B, H, D, K);
    std::printf("B=%ld auto = plan %d, rows per warp %d, warps %d, stages %d\n", long(B), static_cast<int>(pick.plan), pick.rows_per_warp,
                pick.warps, pick.stages);
    const double bytes = double(B) * H * D * D * 4 * 2;
    for (const Variant& var : variants) {
      if (only_variant && std::strcmp(only_variant, var.name) != 0) continue;
      KdaDecodeArgs a;
      a.q_raw = q, a.k_raw = k, a.v_raw = v, a.f = f, a.beta_logit = beta, a.out_gate = gate;
      a.conv_q = cq, a.conv_k = ck, a.conv_v = cv, a.a_log = alog, a.dt_bias = dt, a.o_norm = onorm;
      a.state = pool, a.slot_stride = layer_floats, a.layer_offset = 0;
      a.batch = B, a.heads = H, a.head_dim = D, a.conv_kernel = K, a.out = out;
      a.plan = var.plan, a.rows_per_warp = var.rw, a.warps = var.warps, a.tickets = tickets;
      a.stages = var.stages, a.stream_items = var.items, a.pdl = var.pdl;
      bool ok = true;
      const double ms = graph_ms(s, [&] {
        for (int i = 0; i < kSteps; ++i) {
          a.slots = slot_sets + (i % kSets) * B;
          ok = ok && kda_decode_step(a, s).is_ok();
        }
      });
      if (!ok) {
        std::printf("launch failed at B=%ld %s\n", long(B), var.name);
        continue;
      }
      const double us = ms * 1e3 / kSteps;
      std::printf("%5ld %-12s %10.2f %10.3f %10.2f\n", long(B), var.name, us, bytes / (us * 1e-6) / 1e12, bytes / 4.2e12 * 1e6);
    }
  }
  return 0;
}
