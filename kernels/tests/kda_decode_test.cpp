// The fused KDA decode step against the CPU layer's maths (ops/, in the order of
// src/model/attention_layers.cpp) and against the correct-first per-sequence kernels, on fresh
// random inputs over a scattered slot pool, several consecutive steps, every launch shape.
// Bound: normalised error max|gpu - cpu| / max|cpu| <= 1e-4 on outputs and on the whole pool
// (fp32 both sides; reduction orders differ), 1e-5 against the correct-first kernels.
// Skips itself, saying so, without an sm_90 GPU.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "glue/glue.h"
#include "kda/kda.h"
#include "norm/norm.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/kda.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using KdaDecode = GpuTest;

struct Shape {
  int64_t B, H, D, K = 4;
  bool lower_bound = true;
  int64_t slots = 0, layers = 2, layer = 1;  // the step runs on `layer` of a multi-layer slot
  int64_t P() const { return H * D; }
  int64_t conv_floats() const { return 3 * P() * (K - 1); }
  int64_t layer_floats() const { return conv_floats() + H * D * D; }
  int64_t slot_floats() const { return layers * layer_floats(); }
};

struct Weights {
  std::vector<float> conv_q, conv_k, conv_v, a_log, dt_bias, o_norm;
};
struct Inputs {
  std::vector<float> q, k, v, f, beta, gate;
};

Weights make_weights(const Shape& s, uint32_t seed) {
  return {randn(s.P() * s.K, seed, 0.5f), randn(s.P() * s.K, seed + 1, 0.5f), randn(s.P() * s.K, seed + 2, 0.5f),
          randn(s.H, seed + 3, 0.5f),     randn(s.P(), seed + 4, 0.5f),        randn(s.D, seed + 5)};
}
Inputs make_inputs(const Shape& s, uint32_t seed) {
  const int64_t n = s.B * s.P();
  return {randn(n, seed), randn(n, seed + 1), randn(n, seed + 2), randn(n, seed + 3), randn(s.B * s.H, seed + 4), randn(n, seed + 5)};
}

// The CPU layer between the projections and the o projection, for T = 1 per row.
std::vector<float> cpu_step(const Shape& s, const Weights& w, const Inputs& in, const std::vector<int32_t>& slots,
                            std::vector<float>& pool, float eps) {
  const int64_t P = s.P(), H = s.H, D = s.D, K = s.K, cb = P * (K - 1);
  std::vector<float> q(P), k(P), v(P), g(P), o(s.B * P);
  for (int64_t b = 0; b < s.B; ++b) {
    if (slots[b] < 0) continue;  // padding row: output zero, no state
    float* conv = &pool[slots[b] * s.slot_floats() + s.layer * s.layer_floats()];
    ops::causal_conv1d_silu(&in.q[b * P], 1, P, w.conv_q.data(), K, conv, q.data());
    ops::causal_conv1d_silu(&in.k[b * P], 1, P, w.conv_k.data(), K, conv + cb, k.data());
    ops::causal_conv1d_silu(&in.v[b * P], 1, P, w.conv_v.data(), K, conv + 2 * cb, v.data());
    ops::l2_normalize(q.data(), H, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)));
    ops::l2_normalize(k.data(), H, D, 1e-6f, 1.0f);
    ops::kda_gate(&in.f[b * P], 1, H, D, w.a_log.data(), w.dt_bias.data(), s.lower_bound, -5.0f, g.data());
    std::vector<float> beta(H);
    for (int64_t h = 0; h < H; ++h) beta[h] = ops::sigmoidf(in.beta[b * H + h]);
    ops::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), 1, H, D, conv + 3 * cb, &o[b * P]);
  }
  ops::gated_rms_norm(o.data(), in.gate.data(), s.B * H, D, w.o_norm.data(), eps, o.data());
  return o;
}

// Distinct slots scattered over the pool; with `pad`, rows 1, 4, 7, ... and the last row are
// padding (slot -1), as a CUDA-graph bucket pads a batch.
std::vector<int32_t> scattered_slots(const Shape& s, uint32_t seed, bool pad = false) {
  std::vector<int32_t> all(s.slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  std::vector<int32_t> slots(all.begin(), all.begin() + s.B);
  for (int64_t b = 0; pad && b < s.B; ++b)
    if (b % 3 == 1 || b == s.B - 1) slots[b] = -1;
  return slots;
}

struct DeviceStep {
  DeviceBuffer<float> q, k, v, f, beta, gate, out;
  DeviceBuffer<int32_t> slots;
  void upload(const Inputs& in, const std::vector<int32_t>& sl) {
    ASSERT_TRUE(q.upload(in.q).is_ok() && k.upload(in.k).is_ok() && v.upload(in.v).is_ok() && f.upload(in.f).is_ok() &&
                beta.upload(in.beta).is_ok() && gate.upload(in.gate).is_ok() && slots.upload(sl).is_ok());
  }
};

KdaDecodeArgs args_for(const Shape& s, const DeviceBuffer<float>* wq, DeviceStep& st, float* pool, int32_t* tickets,
                       KdaDecodeShape shape) {
  KdaDecodeArgs a;
  a.q_raw = st.q.get(), a.k_raw = st.k.get(), a.v_raw = st.v.get(), a.f = st.f.get(), a.beta_logit = st.beta.get();
  a.out_gate = st.gate.get();
  a.conv_q = wq[0].get(), a.conv_k = wq[1].get(), a.conv_v = wq[2].get(), a.a_log = wq[3].get(), a.dt_bias = wq[4].get();
  a.o_norm = wq[5].get();
  a.has_lower_bound = s.lower_bound, a.lower_bound = -5.0f, a.norm_eps = 1e-6f;
  a.slots = st.slots.get(), a.state = pool, a.slot_stride = s.slot_floats(), a.layer_offset = s.layer * s.layer_floats();
  a.batch = s.B, a.heads = s.H, a.head_dim = s.D, a.conv_kernel = s.K, a.tickets = tickets;
  a.plan = shape.plan, a.rows_per_warp = shape.rows_per_warp, a.warps = shape.warps, a.stages = shape.stages;
  a.out = st.out.get();
  return a;
}

// Runs `steps` consecutive steps (fresh inputs each) with one launch shape, optionally
// replaying one captured graph, and checks outputs and the whole pool against the CPU.
// `pad`: some rows are padding (zero outputs, no state touched); `items`: the stream plan's
// items a block (0: its default).
void check_steps(const Shape& s, KdaDecodeShape plan, bool graph, uint32_t seed, bool pad = false, int items = 0) {
  SCOPED_TRACE(::testing::Message() << "B=" << s.B << " H=" << s.H << " D=" << s.D << " plan=" << static_cast<int>(plan.plan)
                                    << " rw=" << plan.rows_per_warp << " warps=" << plan.warps << " stages=" << plan.stages
                                    << " items=" << items << " graph=" << graph << " pad=" << pad << " lb=" << s.lower_bound);
  const bool tickets = plan.plan == KdaDecodePlan::kTickets;
  const Weights w = make_weights(s, seed);
  DeviceBuffer<float> wd[6];
  for (int i = 0; i < 6; ++i) {
    const std::vector<float>* v[6] = {&w.conv_q, &w.conv_k, &w.conv_v, &w.a_log, &w.dt_bias, &w.o_norm};
    ASSERT_TRUE(wd[i].upload(*v[i]).is_ok());
  }
  std::vector<float> pool = randn(s.slots * s.slot_floats(), seed + 10, 0.1f);
  auto dpool = dev(pool);
  DeviceBuffer<int32_t> dtickets;
  ASSERT_TRUE(dtickets.upload(std::vector<int32_t>(s.B * s.H, 0)).is_ok());
  const std::vector<int32_t> slots = scattered_slots(s, seed + 11, pad);
  DeviceStep st;
  st.upload(make_inputs(s, seed + 20), slots);
  ASSERT_TRUE(st.out.resize(s.B * s.P()).is_ok());
  KdaDecodeArgs a = args_for(s, wd, st, dpool.get(), tickets ? dtickets.get() : nullptr, plan);
  a.stream_items = items;

  cudaStream_t stream = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_TRUE(cuda_status(cudaStreamCreate(&stream), "stream").is_ok());
  if (graph) {
    cudaGraph_t g = nullptr;
    ASSERT_TRUE(cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture").is_ok());
    ASSERT_TRUE(kda_decode_step(a, stream).is_ok());
    ASSERT_TRUE(cuda_status(cudaStreamEndCapture(stream, &g), "end capture").is_ok());
    ASSERT_TRUE(cuda_status(cudaGraphInstantiate(&exec, g, 0), "instantiate").is_ok());
    cudaGraphDestroy(g);
  }
  for (int step = 0; step < 3; ++step) {
    const Inputs in = make_inputs(s, seed + 30 + 10 * step);
    st.upload(in, slots);  // same buffers: the graph reads the new values
    ASSERT_TRUE(st.out.upload(std::vector<float>(s.B * s.P(), NAN)).is_ok());  // unwritten outputs fail
    const Status launched = graph ? cuda_status(cudaGraphLaunch(exec, stream), "graph launch") : kda_decode_step(a, stream);
    ASSERT_TRUE(launched.is_ok()) << launched.message();
    ASSERT_TRUE(cuda_status(cudaStreamSynchronize(stream), "sync").is_ok());
    const std::vector<float> ref = cpu_step(s, w, in, slots, pool, 1e-6f);
    const std::vector<float> got = host(st.out);
    EXPECT_LT(nerr(got, ref), 1e-4) << "step " << step;
    for (int64_t b = 0; b < s.B; ++b) {  // padding rows: exact zeros (nerr alone would pass a near-zero)
      if (slots[b] >= 0) continue;
      for (int64_t c = 0; c < s.P(); ++c) ASSERT_EQ(got[b * s.P() + c], 0.0f) << "padding row " << b << " step " << step;
    }
  }
  EXPECT_LT(nerr(host(dpool), pool), 1e-4) << "pool after the steps";
  if (tickets) {
    EXPECT_EQ(host(dtickets), std::vector<int32_t>(s.B * s.H, 0)) << "tickets left at zero";
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(stream);
}

constexpr KdaDecodePlan kCluster = KdaDecodePlan::kCluster, kTickets = KdaDecodePlan::kTickets,
                        kOneBlock = KdaDecodePlan::kOneBlock, kPush = KdaDecodePlan::kPush;

TEST_F(KdaDecode, TpRankShapesEveryLaunchShape) {
  for (int64_t B : {1, 3, 256}) {
    const Shape s{B, 3, 128, 4, true, B == 256 ? 260 : 40};
    const uint32_t seed = 100 + 1000 * static_cast<uint32_t>(B);
    check_steps(s, {}, false, seed);       // the automatic pick
    check_steps(s, {}, true, seed + 1);    // the same, as graph replays over new inputs
    for (int rw : {2, 4, 8, 16}) check_steps(s, {kCluster, rw}, false, seed + 10 + rw);
    for (int rw : {1, 2, 4, 8, 16}) check_steps(s, {kTickets, rw}, false, seed + 40 + rw);
    for (int rw : {4, 8}) check_steps(s, {kOneBlock, rw}, false, seed + 70 + rw);
  }
}

// The push plan (D = 128, K = 4): every block shape, at batch 1 and 3 (also under
// compute-sanitizer) and at 256 rows.
void check_push_plans(int64_t B) {
  const Shape s{B, 3, 128, 4, true, B == 256 ? 260 : 40};
  const uint32_t seed = 700 + 1000 * static_cast<uint32_t>(B);
  for (int warps : {4, 8})
    for (int rw : {2, 4, 8, 16}) check_steps(s, {kPush, rw, warps}, false, seed + 20 * warps + rw);
  check_steps(s, {kPush, 8, 16}, false, seed + 500);
}
TEST_F(KdaDecode, PushPlanSmallBatches) {
  check_push_plans(1);
  check_push_plans(3);
  check_steps(Shape{5, 1, 128, 4, false, 9}, {kPush, 2, 4}, false, 401);  // softplus gate
  check_steps(Shape{5, 1, 128, 4, false, 9}, {kPush, 16, 8}, false, 404);
}
TEST_F(KdaDecode, PushPlanLargeBatch) {
  check_push_plans(256);
  check_steps(Shape{40, 1, 128, 4, false, 45}, {}, false, 402);  // past the push plan's switch
}

// The stream plan (D = 128, K = 4, large batches): every ring shape, one and several items a
// block (a block's items cross head and row boundaries; 5 does not divide the items).
TEST_F(KdaDecode, StreamPlan) {
  const KdaDecodePlan kStream = KdaDecodePlan::kStream;
  const KdaDecodeShape shapes[] = {{kStream, 4, 4, 4}, {kStream, 4, 4, 6}, {kStream, 2, 4, 6}, {kStream, 8, 4, 3}, {kStream, 4, 8, 3}};
  for (int64_t B : {1, 3, 256}) {
    const Shape s{B, 3, 128, 4, true, B == 256 ? 260 : 40};
    const uint32_t seed = 900 + 1000 * static_cast<uint32_t>(B);
    for (const KdaDecodeShape& shape : shapes) check_steps(s, shape, false, seed + 10 * shape.rows_per_warp + shape.warps + shape.stages);
    for (int items : {1, 4, 5}) check_steps(s, shapes[0], false, seed + 100 + items, false, items);
  }
  check_steps(Shape{7, 2, 128, 4, false, 9}, {kStream, 4, 4, 4}, true, 950, false, 3);  // softplus gate, graph replays
}

// The stream plan as programmatic dependent launches (KdaDecodeArgs::pdl): a chain of steps
// over disjoint slot sets, each step's q projection being the previous step's output, so a
// step that read its inputs before the previous kernel finished would fail; eager and as one
// captured graph (the launches become programmatic graph edges).
void check_pdl_chain(const Shape& s, KdaDecodeShape plan, bool graph, uint32_t seed, int items = 0) {
  SCOPED_TRACE(::testing::Message() << "pdl chain B=" << s.B << " rw=" << plan.rows_per_warp << " warps=" << plan.warps
                                    << " stages=" << plan.stages << " items=" << items << " graph=" << graph);
  constexpr int kChain = 3;
  const Weights w = make_weights(s, seed);
  DeviceBuffer<float> wd[6];
  for (int i = 0; i < 6; ++i) {
    const std::vector<float>* v[6] = {&w.conv_q, &w.conv_k, &w.conv_v, &w.a_log, &w.dt_bias, &w.o_norm};
    ASSERT_TRUE(wd[i].upload(*v[i]).is_ok());
  }
  std::vector<float> pool = randn(s.slots * s.slot_floats(), seed + 10, 0.1f);
  auto dpool = dev(pool);
  std::vector<int32_t> all(s.slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed + 11));
  DeviceStep st[kChain];
  Inputs in[kChain];
  std::vector<int32_t> slots[kChain];
  KdaDecodeArgs a[kChain];
  for (int j = 0; j < kChain; ++j) {
    slots[j].assign(all.begin() + j * s.B, all.begin() + (j + 1) * s.B);
    in[j] = make_inputs(s, seed + 20 + 10 * j);
    st[j].upload(in[j], slots[j]);
    ASSERT_TRUE(st[j].out.upload(std::vector<float>(s.B * s.P(), NAN)).is_ok());
    a[j] = args_for(s, wd, st[j], dpool.get(), nullptr, plan);
    a[j].stream_items = items;
    a[j].pdl = true;
    if (j > 0) a[j].q_raw = st[j - 1].out.get();  // written by the kernel just before
  }
  cudaStream_t stream = nullptr;
  ASSERT_TRUE(cuda_status(cudaStreamCreate(&stream), "stream").is_ok());
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_TRUE(cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture").is_ok());
    for (int j = 0; j < kChain; ++j) ASSERT_TRUE(kda_decode_step(a[j], stream).is_ok());
    ASSERT_TRUE(cuda_status(cudaStreamEndCapture(stream, &g), "end capture").is_ok());
    ASSERT_TRUE(cuda_status(cudaGraphInstantiate(&exec, g, 0), "instantiate").is_ok());
    ASSERT_TRUE(cuda_status(cudaGraphLaunch(exec, stream), "graph launch").is_ok());
    ASSERT_TRUE(cuda_status(cudaStreamSynchronize(stream), "sync").is_ok());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  } else {
    for (int j = 0; j < kChain; ++j) ASSERT_TRUE(kda_decode_step(a[j], stream).is_ok());
    ASSERT_TRUE(cuda_status(cudaStreamSynchronize(stream), "sync").is_ok());
  }
  for (int j = 0; j < kChain; ++j) {
    const std::vector<float> ref = cpu_step(s, w, in[j], slots[j], pool, 1e-6f);
    EXPECT_LT(nerr(host(st[j].out), ref), 1e-4) << "step " << j;
    if (j + 1 < kChain) in[j + 1].q = ref;
  }
  EXPECT_LT(nerr(host(dpool), pool), 1e-4) << "pool after the chain";
  cudaStreamDestroy(stream);
}

TEST_F(KdaDecode, ProgrammaticLaunchChain) {
  const KdaDecodePlan kStream = KdaDecodePlan::kStream;
  for (int64_t B : {1, 5, 256}) {
    const Shape s{B, 3, 128, 4, true, 3 * B + 7};
    const uint32_t seed = 1500 + 10 * static_cast<uint32_t>(B);
    check_pdl_chain(s, {kStream, 4, 4, 6}, false, seed);
    check_pdl_chain(s, {kStream, 4, 4, 6}, true, seed + 1);
    check_pdl_chain(s, {kStream, 4, 8, 3}, true, seed + 2, 1);
    check_pdl_chain(s, {KdaDecodePlan::kPush, 4, 4}, true, seed + 3);  // clusters of 8 blocks
    check_pdl_chain(s, {KdaDecodePlan::kPush, 16, 8}, false, seed + 4);  // one block a head
  }
  // The automatic pick with pdl set (the flag only changes the stream plan's launch).
  check_pdl_chain(Shape{256, 3, 128, 4, true, 800}, {}, true, 1590);
}

// Padding rows (slot -1, as the decode graphs' buckets pad a batch): zero outputs, the pool
// untouched apart from the real rows' slots, with every plan, as graph replays too, and a
// batch of padding rows only (the graphs' scratch-sizing pass).
TEST_F(KdaDecode, PaddingRowsEveryPlan) {
  for (int64_t B : {5, 256}) {
    const Shape s{B, 3, 128, 4, true, B == 256 ? 260 : 40};
    const uint32_t seed = 1300 + static_cast<uint32_t>(B);
    check_steps(s, {}, false, seed, true);
    check_steps(s, {}, true, seed + 1, true);
    check_steps(s, {kCluster, 4}, false, seed + 2, true);
    check_steps(s, {kTickets, 4}, false, seed + 3, true);
    check_steps(s, {kOneBlock, 4}, false, seed + 4, true);
    check_steps(s, {kPush, 4, 4}, false, seed + 5, true);
    check_steps(s, {kPush, 8, 8}, false, seed + 6, true);
    check_steps(s, {kPush, 16, 8}, false, seed + 7, true);  // one block a head: no cluster
    check_steps(s, {KdaDecodePlan::kStream, 4, 4, 4}, false, seed + 8, true);
    check_steps(s, {KdaDecodePlan::kStream, 4, 4, 4}, false, seed + 9, true, 4);
  }
  check_steps(Shape{6, 4, 32, 4, true, 13}, {}, true, 1320, true);  // the tiny models' heads, as graphs
  check_steps(Shape{6, 4, 32, 4, true, 13}, {kTickets, 2}, false, 1321, true);
  check_steps(Shape{3, 2, 64, 4, true, 7}, {kOneBlock, 8}, false, 1322, true);
  check_steps(Shape{4, 2, 256, 4, true, 7}, {kCluster, 8}, false, 1323, true);
  check_steps(Shape{1, 3, 128, 4, true, 4}, {}, false, 1324, true);  // every row padding
  check_steps(Shape{64, 3, 32, 4, true, 70}, {}, false, 1325, true);
}

TEST_F(KdaDecode, OtherHeadCountsDimsAndGateForms) {
  check_steps(Shape{5, 1, 128, 4, false, 9}, {}, false, 400);  // Kimi-Linear's softplus gate
  check_steps(Shape{4, 8, 128, 3, true, 11}, {}, false, 403);    // K = 3: the older plans
  check_steps(Shape{4, 8, 128, 3, true, 11}, {kCluster, 2}, false, 405);
  check_steps(Shape{4, 8, 128, 3, true, 11}, {kTickets, 4}, false, 410);
  check_steps(Shape{6, 4, 32, 4, true, 13}, {}, false, 415);  // the tiny test models' head size
  check_steps(Shape{6, 4, 32, 4, false, 13}, {kCluster, 8}, false, 416);
  check_steps(Shape{6, 4, 32, 4, false, 13}, {kTickets, 2}, false, 417);
  check_steps(Shape{3, 2, 64, 4, true, 7}, {}, false, 420);
  check_steps(Shape{3, 2, 64, 4, true, 7}, {kCluster, 8}, false, 425);
  check_steps(Shape{3, 2, 64, 4, true, 7}, {kOneBlock, 8}, false, 430);
  check_steps(Shape{2, 2, 256, 4, true, 5}, {}, false, 440);
  check_steps(Shape{2, 2, 256, 4, true, 5}, {kTickets, 2}, false, 445);
  check_steps(Shape{2, 2, 256, 2, false, 5}, {kOneBlock, 8}, false, 450);
}

// The fused step equals the correct-first kernels the backend used per sequence.
TEST_F(KdaDecode, EqualsCorrectFirstKernels) {
  const Shape s{3, 3, 128, 4, true, 12};
  const Weights w = make_weights(s, 500);
  DeviceBuffer<float> wd[6];
  const std::vector<float>* wv[6] = {&w.conv_q, &w.conv_k, &w.conv_v, &w.a_log, &w.dt_bias, &w.o_norm};
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(wd[i].upload(*wv[i]).is_ok());
  const std::vector<float> pool = randn(s.slots * s.slot_floats(), 501, 0.1f);
  auto fused_pool = dev(pool), ref_pool = dev(pool);
  const std::vector<int32_t> slots = scattered_slots(s, 502);
  DeviceBuffer<int32_t> tickets;
  ASSERT_TRUE(tickets.upload(std::vector<int32_t>(s.B * s.H, 0)).is_ok());
  DeviceStep st;
  ASSERT_TRUE(st.out.resize(s.B * s.P()).is_ok());
  const int64_t P = s.P(), H = s.H, D = s.D, cb = P * (s.K - 1);
  DeviceBuffer<float> qc(P), kc(P), vc(P), g(s.B * P), beta(s.B * H), o(s.B * P);
  for (int step = 0; step < 3; ++step) {
    st.upload(make_inputs(s, 510 + 10 * step), slots);
    ASSERT_TRUE(kda_decode_step(args_for(s, wd, st, fused_pool.get(), tickets.get(), {}), nullptr).is_ok());
    // The old path: per row conv, norms, gate, sigmoid, recurrence; then one gated norm.
    ASSERT_TRUE(kda_gate(st.f.get(), s.B, H, D, wd[3].get(), wd[4].get(), true, -5.0f, g.get(), nullptr).is_ok());
    ASSERT_TRUE(cuda_status(cudaMemcpy(beta.get(), st.beta.get(), s.B * H * 4, cudaMemcpyDeviceToDevice), "copy").is_ok());
    ASSERT_TRUE(sigmoid_inplace(beta.get(), s.B * H, nullptr).is_ok());
    for (int64_t b = 0; b < s.B; ++b) {
      float* conv = ref_pool.get() + slots[b] * s.slot_floats() + s.layer * s.layer_floats();
      ASSERT_TRUE(causal_conv1d_silu(st.q.get() + b * P, 1, P, wd[0].get(), s.K, conv, qc.get(), nullptr).is_ok());
      ASSERT_TRUE(causal_conv1d_silu(st.k.get() + b * P, 1, P, wd[1].get(), s.K, conv + cb, kc.get(), nullptr).is_ok());
      ASSERT_TRUE(causal_conv1d_silu(st.v.get() + b * P, 1, P, wd[2].get(), s.K, conv + 2 * cb, vc.get(), nullptr).is_ok());
      ASSERT_TRUE(l2_normalize(qc.get(), H, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)), nullptr).is_ok());
      ASSERT_TRUE(l2_normalize(kc.get(), H, D, 1e-6f, 1.0f, nullptr).is_ok());
      ASSERT_TRUE(kda_recurrent(qc.get(), kc.get(), vc.get(), g.get() + b * P, beta.get() + b * H, 1, H, D, conv + 3 * cb,
                                o.get() + b * P, nullptr)
                      .is_ok());
    }
    ASSERT_TRUE(gated_rms_norm(o.get(), st.gate.get(), s.B * H, D, wd[5].get(), 1e-6f, o.get(), nullptr).is_ok());
    EXPECT_LT(nerr(host(st.out), host(o)), 1e-5) << "step " << step;
  }
  EXPECT_LT(nerr(host(fused_pool), host(ref_pool)), 1e-5);
}

TEST_F(KdaDecode, RejectsWhatItCannotRun) {
  KdaDecodeArgs a;
  a.batch = 1, a.heads = 1, a.head_dim = 48;
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
  a.head_dim = 128, a.plan = KdaDecodePlan::kCluster, a.rows_per_warp = 1;  // 32 blocks: past a cluster
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
  a.plan = KdaDecodePlan::kTickets, a.rows_per_warp = 4;  // no tickets given
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
  a.plan = KdaDecodePlan::kPush, a.rows_per_warp = 4, a.warps = 4, a.conv_kernel = 3;  // push needs K = 4
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
  a.conv_kernel = 4, a.warps = 2;  // no such block
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
  a.warps = 4, a.plan = KdaDecodePlan::kAuto, a.slot_stride = 6;
  EXPECT_FALSE(kda_decode_step(a, nullptr).is_ok());
}

}  // namespace
}  // namespace pdserve::cuda
