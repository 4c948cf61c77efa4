// The chunked KDA prefill (kda_chunk.h) against the CPU token recurrence (ops::kda_recurrent)
// on fresh random inputs: a ragged batch whose lengths straddle the chunk boundaries, nonzero
// initial states in scattered slots of a multi-layer pool, the whole pool checked afterwards
// (written states and untouched bytes), state carried across two calls equals one pass, and a
// workspace small enough to force several passes equals one pass; both places of the output
// (in the serial state kernel, or its own parallel pass) and job tables reused by a second
// layer.
// Bound: normalised error max|gpu - cpu| / max|cpu| on outputs and states <= 1e-4 in the
// default 3xTF32 mode (about fp32: reduction orders and the chunked form differ from the
// token recurrence) and <= 5e-3 in plain tf32 (10-bit mantissa, ~5e-4 relative per operand;
// the UT transform and the state carry compound a few such roundings); <= 2e-2 in the opt-in
// bf16 mode (8-bit mantissa, ~4e-3 relative per operand: fla chunk_kda's class, whose own
// error against the same kind of reference is ~5e-3 .. 7e-3, docs/perf.md).
// Skips itself, saying so, without an sm_90 GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "kda/kda_chunk.h"
#include "pdserve/ops/kda.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using KdaChunk = GpuTest;

constexpr double kBoundPrecise = 1e-4, kBoundTf32 = 5e-3, kBoundBf16 = 2e-2;

// The matmul precision of a run (KdaChunkArgs::precise, ::bf16).
enum class Mode { kTf32, k3xTf32, kBf16 };
Mode mode_of(bool precise) { return precise ? Mode::k3xTf32 : Mode::kTf32; }
double bound(Mode m) { return m == Mode::k3xTf32 ? kBoundPrecise : m == Mode::kTf32 ? kBoundTf32 : kBoundBf16; }

struct Problem {
  int64_t H, D;
  std::vector<int64_t> lens;
  float min_log_decay = -5.0f;  // g in (min, 0)
  int64_t slots = 16, layers = 2, layer = 1;
  int64_t T() const { return std::accumulate(lens.begin(), lens.end(), int64_t{0}); }
  int64_t state_floats() const { return H * D * D; }
  int64_t slot_floats() const { return layers * (state_floats() + 64); }  // + other per-layer bytes
  int64_t layer_offset() const { return layer * (state_floats() + 64) + 64; }
};

struct Inputs {
  std::vector<float> q, k, v, g, beta;
};

Inputs make_inputs(const Problem& p, uint32_t seed) {
  const int64_t n = p.T() * p.H * p.D;
  Inputs in{randn(n, seed), randn(n, seed + 1), randn(n, seed + 2), randn(n, seed + 3), randn(p.T() * p.H, seed + 4)};
  ops::l2_normalize(in.q.data(), p.T() * p.H, p.D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(p.D)));
  ops::l2_normalize(in.k.data(), p.T() * p.H, p.D, 1e-6f, 1.0f);
  for (float& x : in.g) x = p.min_log_decay / (1.0f + std::exp(-x));  // K3's bounded gate shape
  for (float& x : in.beta) x = 1.0f / (1.0f + std::exp(-x));
  return in;
}

std::vector<int64_t> cu_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  for (size_t s = 0; s < lens.size(); ++s) cu[s + 1] = cu[s] + lens[s];
  return cu;
}

std::vector<int32_t> scattered_slots(const Problem& p, uint32_t seed) {
  std::vector<int32_t> all(p.slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  return {all.begin(), all.begin() + static_cast<int64_t>(p.lens.size())};
}

// CPU: each sequence's recurrence from its slot's state; returns o, updates the pool.
std::vector<float> cpu_prefill(const Problem& p, const Inputs& in, const std::vector<int32_t>& slots, std::vector<float>& pool) {
  const int64_t H = p.H, D = p.D;
  std::vector<float> o(in.q.size());
  const std::vector<int64_t> cu = cu_of(p.lens);
  for (size_t s = 0; s < p.lens.size(); ++s) {
    const int64_t r0 = cu[s], n = p.lens[s];
    float* st = &pool[slots[s] * p.slot_floats() + p.layer_offset()];
    ops::kda_recurrent(&in.q[r0 * H * D], &in.k[r0 * H * D], &in.v[r0 * H * D], &in.g[r0 * H * D], &in.beta[r0 * H], n, H, D, st,
                       &o[r0 * H * D]);
  }
  return o;
}

struct DeviceRun {
  DeviceBuffer<float> q, k, v, g, beta, o;
  DeviceBuffer<uint8_t> ws;
  DeviceBuffer<uint8_t>* other_ws = nullptr;  // set: run in another run's workspace (and tables)
  int bf16_intra = 0;                          // KdaChunkArgs::bf16_intra
  int state_mma = 0;                           // KdaChunkArgs::state_mma
  int state_prefetch = 0;                      // KdaChunkArgs::state_prefetch
  explicit DeviceRun(const Inputs& in, size_t ws_bytes) {
    EXPECT_TRUE(q.upload(in.q).is_ok() && k.upload(in.k).is_ok() && v.upload(in.v).is_ok() && g.upload(in.g).is_ok() &&
                beta.upload(in.beta).is_ok() && o.resize(in.q.size()).is_ok() && ws.resize(ws_bytes).is_ok());
  }
  // Runs sequences with lengths `lens` whose rows start at row `row0` of the inputs.
  Status run(const Problem& p, const std::vector<int64_t>& lens, int64_t row0, const std::vector<int32_t>& slots, float* pool,
             int state_tile = 0, bool precise = true, int state_buffers = 0, KdaChunkOutput output = KdaChunkOutput::kPick,
             bool tables_uploaded = false, bool bf16 = false, int state_warps = 0, int bf16_workspace = 0) {
    std::vector<int64_t> cu = cu_of(lens);
    const int64_t off = row0 * p.H * p.D;
    KdaChunkArgs a;
    a.q = q.get() + off, a.k = k.get() + off, a.v = v.get() + off, a.g = g.get() + off, a.beta = beta.get() + row0 * p.H;
    a.o = o.get() + off;
    a.heads = p.H, a.head_dim = p.D, a.num_seqs = static_cast<int64_t>(lens.size()), a.cu_seqlens = cu.data();
    a.slots = slots.data(), a.state = pool, a.slot_stride = p.slot_floats(), a.layer_offset = p.layer_offset();
    DeviceBuffer<uint8_t>& w = other_ws ? *other_ws : ws;
    a.workspace = w.get(), a.workspace_bytes = w.size() * sizeof(uint8_t), a.state_tile = state_tile, a.precise = precise;
    a.state_buffers = state_buffers, a.output = output, a.tables_uploaded = tables_uploaded, a.bf16 = bf16;
    a.state_warps = state_warps, a.bf16_workspace = bf16_workspace, a.bf16_intra = bf16_intra;
    a.state_mma = state_mma, a.state_prefetch = state_prefetch;
    return kda_chunk_prefill(a, nullptr);
  }
};

size_t full_workspace(const Problem& p) {
  const std::vector<int64_t> cu = cu_of(p.lens);
  return kda_chunk_workspace_bytes(p.H, p.D, kda_chunk_count(cu.data(), static_cast<int64_t>(p.lens.size())));
}

// One call over the ragged batch vs the CPU: outputs and the whole pool.
void check_one_pass_in(Mode mode, const Problem& p, uint32_t seed, int state_tile = 0, size_t ws_bytes = 0, int state_buffers = 0,
                       KdaChunkOutput output = KdaChunkOutput::kPick, int state_warps = 0) {
  const bool precise = mode == Mode::k3xTf32, bf16 = mode == Mode::kBf16;
  SCOPED_TRACE(::testing::Message() << "H=" << p.H << " D=" << p.D << " tile=" << state_tile << " ws=" << ws_bytes << " precise=" << precise
                                    << " bf16=" << bf16 << " buffers=" << state_buffers << " output=" << static_cast<int>(output)
                                    << " warps=" << state_warps);
  const Inputs in = make_inputs(p, seed);
  const std::vector<int32_t> slots = scattered_slots(p, seed + 7);
  std::vector<float> pool = randn(p.slots * p.slot_floats(), seed + 8, 0.1f);
  auto dpool = dev(pool);
  DeviceRun d(in, ws_bytes ? ws_bytes : full_workspace(p));
  ASSERT_TRUE(d.run(p, p.lens, 0, slots, dpool.get(), state_tile, precise, state_buffers, output, false, bf16, state_warps).is_ok());
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  const double eo = nerr(host(d.o), o), es = nerr(host(dpool), pool);
  std::printf("  H=%ld D=%ld tile=%d precise=%d bf16=%d buffers=%d output=%d warps=%d T=%ld: output nerr %.2e, pool nerr %.2e\n",
              static_cast<long>(p.H), static_cast<long>(p.D), state_tile, precise, bf16, state_buffers, static_cast<int>(output), state_warps,
              static_cast<long>(p.T()), eo, es);
  EXPECT_LE(eo, bound(mode));
  EXPECT_LE(es, bound(mode));
}

void check_one_pass(const Problem& p, uint32_t seed, int state_tile = 0, size_t ws_bytes = 0, bool precise = true, int state_buffers = 0,
                    KdaChunkOutput output = KdaChunkOutput::kPick) {
  check_one_pass_in(mode_of(precise), p, seed, state_tile, ws_bytes, state_buffers, output);
}

TEST_F(KdaChunk, RaggedBatchD128MatchesRecurrence) {
  check_one_pass({4, 128, {1, 63, 64, 65, 200, 1000}}, 11);
}

TEST_F(KdaChunk, PlainTf32WithinItsBound) {
  check_one_pass({4, 128, {1, 63, 64, 65, 200, 1000}}, 11, 0, 0, false);
  check_one_pass({2, 32, {7, 64, 65, 333}}, 14, 16, 0, false);
}

// The opt-in bf16 mode: ragged batch across chunk boundaries, both output places, every state
// tile and buffering, the smaller head dims, gates at the contract's bound and several passes.
TEST_F(KdaChunk, Bf16WithinItsBound) {
  for (KdaChunkOutput out : {KdaChunkOutput::kInState, KdaChunkOutput::kSeparate}) {
    check_one_pass_in(Mode::kBf16, {4, 128, {1, 63, 64, 65, 200, 1000}}, 11, 0, 0, 0, out);
    for (int tile : {16, 64}) check_one_pass_in(Mode::kBf16, {2, 128, {1, 64, 65, 129, 300}}, 61, tile, 0, 1, out);
    check_one_pass_in(Mode::kBf16, {2, 64, {1, 65, 300}}, 62, 0, 0, 0, out);
    check_one_pass_in(Mode::kBf16, {2, 32, {7, 64, 65, 333}}, 63, 0, 0, 0, out);
    Problem strong{2, 128, {100, 257}};
    strong.min_log_decay = kKdaChunkMinLogDecay;
    check_one_pass_in(Mode::kBf16, strong, 64, 0, 0, 0, out);
    const Problem p{2, 128, {1, 200, 63, 400}};
    check_one_pass_in(Mode::kBf16, p, 65, 0, kda_chunk_workspace_bytes(p.H, p.D, 3), 0, out);
  }
}

// The in-state kernel on 16 warps (D = 128, tiles 32 / 64, one and two buffers) in every
// precision, and asked for where it does not apply (D = 64, tile 16, the separate output:
// 8 warps instead); several passes.
TEST_F(KdaChunk, SixteenStateWarpsMatch) {
  for (Mode m : {Mode::k3xTf32, Mode::kTf32, Mode::kBf16}) {
    for (int buffers : {1, 2})
      for (int tile : {32, 64})
        check_one_pass_in(m, {2, 128, {1, 64, 65, 128, 129, 300}}, 71, tile, 0, buffers, KdaChunkOutput::kInState, 16);
    check_one_pass_in(m, {4, 128, {1, 63, 64, 65, 200, 1000}}, 72, 0, 0, 0, KdaChunkOutput::kInState, 16);
    const Problem p{2, 128, {1, 200, 63, 400}};
    check_one_pass_in(m, p, 73, 0, kda_chunk_workspace_bytes(p.H, p.D, 3), 0, KdaChunkOutput::kInState, 16);
  }
  check_one_pass_in(Mode::k3xTf32, {2, 64, {1, 65, 300}}, 74, 0, 0, 0, KdaChunkOutput::kInState, 16);
  check_one_pass_in(Mode::k3xTf32, {2, 128, {65, 300}}, 75, 16, 0, 0, KdaChunkOutput::kInState, 16);
  check_one_pass_in(Mode::kBf16, {2, 128, {65, 300}}, 76, 0, 0, 0, KdaChunkOutput::kSeparate, 16);
}

// bf16 mode's two workspace formats (KdaChunkArgs::bf16_workspace: fp32, packed bf16) on the
// same inputs: each within the bf16 bound of the CPU recurrence, and close to each other (the
// same bf16 operands summed in another k order); ragged batch, tiles 16 / 32 / 64 at one and
// two buffers, D = 64 / 32, gates at the bound, several passes, 8 and 16 warps at tiles 32 / 64
// (the packed kernel has both since kdastate16).
void packed_vs_fp32(const Problem& p, uint32_t seed, int tile, int buffers, size_t ws_bytes = 0, int warps = 0) {
  SCOPED_TRACE(::testing::Message() << "H=" << p.H << " D=" << p.D << " tile=" << tile << " buffers=" << buffers << " ws=" << ws_bytes
                                    << " warps=" << warps);
  const Inputs in = make_inputs(p, seed);
  const std::vector<int32_t> slots = scattered_slots(p, seed + 7);
  std::vector<float> pool = randn(p.slots * p.slot_floats(), seed + 8, 0.1f);
  auto pool32 = dev(pool), pool16 = dev(pool);
  const size_t bytes = ws_bytes ? ws_bytes : full_workspace(p);
  DeviceRun d32(in, bytes), d16(in, bytes);
  ASSERT_TRUE(d32.run(p, p.lens, 0, slots, pool32.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, warps, 1).is_ok());
  ASSERT_TRUE(d16.run(p, p.lens, 0, slots, pool16.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, warps, 2).is_ok());
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  const double e32 = nerr(host(d32.o), o), s32 = nerr(host(pool32), pool), e16 = nerr(host(d16.o), o), s16 = nerr(host(pool16), pool);
  const double eo = nerr(host(d16.o), host(d32.o)), es = nerr(host(pool16), host(pool32));
  std::printf("  bf16 H=%ld D=%ld tile=%d buffers=%d warps=%d: fp32 ws output / pool nerr %.2e / %.2e, packed %.2e / %.2e, packed vs fp32 %.2e / %.2e\n",
              static_cast<long>(p.H), static_cast<long>(p.D), tile, buffers, warps, e32, s32, e16, s16, eo, es);
  for (double e : {e32, s32, e16, s16}) EXPECT_LE(e, kBoundBf16);
  EXPECT_LE(eo, kBoundBf16 / 4);
  EXPECT_LE(es, kBoundBf16 / 4);
}

TEST_F(KdaChunk, PackedBf16WorkspaceMatchesFp32Workspace) {
  for (int buffers : {1, 2})
    for (int tile : {16, 32, 64}) packed_vs_fp32({2, 128, {1, 63, 64, 65, 129, 300}}, 81, tile, buffers);
  packed_vs_fp32({4, 128, {1, 63, 64, 65, 200, 1000}}, 82, 0, 0);
  packed_vs_fp32({2, 64, {1, 65, 300}}, 83, 0, 1);
  packed_vs_fp32({2, 32, {7, 64, 65, 333}}, 84, 0, 2);
  Problem strong{2, 128, {100, 257}};
  strong.min_log_decay = kKdaChunkMinLogDecay;
  packed_vs_fp32(strong, 85, 0, 0);
  const Problem p{2, 128, {1, 200, 63, 400}};
  packed_vs_fp32(p, 86, 0, 1, kda_chunk_workspace_bytes(p.H, p.D, 3));
  packed_vs_fp32({2, 128, {65, 300}}, 87, 32, 0, 0, 16);
  for (int buffers : {1, 2})
    for (int warps : {8, 16}) packed_vs_fp32({2, 128, {1, 63, 64, 65, 129, 300}}, 88, 64, buffers, 0, warps);
  packed_vs_fp32({3, 128, {5, 700, 64}}, 89, 64, 0, kda_chunk_workspace_bytes(3, 128, 4), 16);  // several passes
}

// The packed workspace's state kernel on wgmma (KdaChunkArgs::state_mma = 2) against the
// mma.sync one (1) on the same inputs: each within the bf16 bound of the CPU recurrence and
// close to each other (the same bf16 operands, summed in the tensor core's order); tiles 32 / 64
// at one and two stages, ragged batches with partial chunks, gates at the bound, several passes;
// and where it does not apply (D = 64, tile 16, 16 warps asked for) the mma.sync kernel runs.
void wgmma_vs_mma(const Problem& p, uint32_t seed, int tile, int buffers, size_t ws_bytes = 0, int warps = 0) {
  SCOPED_TRACE(::testing::Message() << "H=" << p.H << " D=" << p.D << " tile=" << tile << " buffers=" << buffers << " ws=" << ws_bytes
                                    << " warps=" << warps);
  const Inputs in = make_inputs(p, seed);
  const std::vector<int32_t> slots = scattered_slots(p, seed + 7);
  std::vector<float> pool = randn(p.slots * p.slot_floats(), seed + 8, 0.1f);
  auto pool_mma = dev(pool), pool_wg = dev(pool);
  const size_t bytes = ws_bytes ? ws_bytes : full_workspace(p);
  DeviceRun dm(in, bytes), dw(in, bytes);
  dm.state_mma = 1, dw.state_mma = 2;
  ASSERT_TRUE(dm.run(p, p.lens, 0, slots, pool_mma.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, warps, 2).is_ok());
  ASSERT_TRUE(dw.run(p, p.lens, 0, slots, pool_wg.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, warps, 2).is_ok());
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  const double em = nerr(host(dm.o), o), sm = nerr(host(pool_mma), pool), ew = nerr(host(dw.o), o), sw = nerr(host(pool_wg), pool);
  const double eo = nerr(host(dw.o), host(dm.o)), es = nerr(host(pool_wg), host(pool_mma));
  std::printf("  bf16 packed H=%ld D=%ld tile=%d buffers=%d warps=%d: mma.sync output / pool nerr %.2e / %.2e, wgmma %.2e / %.2e, wgmma vs mma.sync %.2e / %.2e\n",
              static_cast<long>(p.H), static_cast<long>(p.D), tile, buffers, warps, em, sm, ew, sw, eo, es);
  for (double e : {em, sm, ew, sw}) EXPECT_LE(e, kBoundBf16);
  EXPECT_LE(eo, kBoundBf16 / 4);
  EXPECT_LE(es, kBoundBf16 / 4);
}

TEST_F(KdaChunk, WgmmaStateKernelMatchesMmaSync) {
  for (int buffers : {1, 2})
    for (int tile : {32, 64}) wgmma_vs_mma({2, 128, {1, 63, 64, 65, 129, 300}}, 91, tile, buffers);
  wgmma_vs_mma({4, 128, {1, 63, 64, 65, 200, 1000}}, 92, 0, 0);
  Problem strong{2, 128, {100, 257}};
  strong.min_log_decay = kKdaChunkMinLogDecay;
  wgmma_vs_mma(strong, 93, 64, 0);
  const Problem p{2, 128, {1, 200, 63, 400}};
  wgmma_vs_mma(p, 94, 32, 1, kda_chunk_workspace_bytes(p.H, p.D, 3));  // several passes
  wgmma_vs_mma({3, 128, {5, 700, 64}}, 95, 64, 2, kda_chunk_workspace_bytes(3, 128, 4));
  wgmma_vs_mma({2, 128, {1, 63, 64, 65, 129, 300}}, 99, 32, 3);    // three stages
  wgmma_vs_mma({2, 128, {1, 63, 64, 65, 129, 300}}, 100, 64, 3);   // three asked at tile 64: two
  wgmma_vs_mma({3, 128, {5, 700, 64}}, 101, 32, 3, kda_chunk_workspace_bytes(3, 128, 4));
  wgmma_vs_mma({2, 64, {1, 65, 300}}, 96, 0, 0);                   // D = 64: mma.sync
  wgmma_vs_mma({2, 128, {65, 300}}, 97, 16, 0);                    // tile 16: mma.sync
  wgmma_vs_mma({2, 128, {65, 300}}, 98, 64, 0, 0, 16);             // 16 warps: mma.sync
}

// The wgmma state kernel with a head's CTAs as one cluster loading the shared inputs once by
// TMA multicast (state_mma = 3, 4: a cluster barrier a chunk / per-stage empty mbarriers) against the plain wgmma kernel (2): bit-identical o and pool
// (the same operands in the same shared-memory layout, the same wgmma sequence); tiles 32 / 64
// (clusters of 4 / 2), 1 (run as 2), 2 and 3 stages, ragged batches with partial chunks and
// empty sequences' neighbours, several passes, the L2 prefetch on.
void multicast_vs_wgmma(const Problem& p, uint32_t seed, int tile, int buffers, size_t ws_bytes, int prefetch, int mma) {
  SCOPED_TRACE(::testing::Message() << "H=" << p.H << " tile=" << tile << " buffers=" << buffers << " ws=" << ws_bytes << " pf=" << prefetch
                                    << " mma=" << mma);
  const Inputs in = make_inputs(p, seed);
  const std::vector<int32_t> slots = scattered_slots(p, seed + 7);
  std::vector<float> pool = randn(p.slots * p.slot_floats(), seed + 8, 0.1f);
  auto pool_wg = dev(pool), pool_mc = dev(pool);
  const size_t bytes = ws_bytes ? ws_bytes : full_workspace(p);
  DeviceRun dw(in, bytes), dc(in, bytes);
  dw.state_mma = 2, dc.state_mma = mma;
  dw.state_prefetch = dc.state_prefetch = prefetch;
  ASSERT_TRUE(dw.run(p, p.lens, 0, slots, pool_wg.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, 0, 2).is_ok());
  ASSERT_TRUE(dc.run(p, p.lens, 0, slots, pool_mc.get(), tile, false, buffers, KdaChunkOutput::kInState, false, true, 0, 2).is_ok());
  const std::vector<float> ow = host(dw.o), oc = host(dc.o), sw = host(pool_wg), sc = host(pool_mc);
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  std::printf("  bf16 packed H=%ld tile=%d buffers=%d pf=%d mma=%d: multicast output / pool nerr %.2e / %.2e, vs wgmma %.2e / %.2e\n",
              static_cast<long>(p.H), tile, buffers, prefetch, mma, nerr(oc, o), nerr(sc, pool), nerr(oc, ow), nerr(sc, sw));
  EXPECT_LE(nerr(oc, o), kBoundBf16);
  ASSERT_EQ(ow.size(), oc.size());
  EXPECT_EQ(std::memcmp(ow.data(), oc.data(), ow.size() * sizeof(float)), 0) << "output differs";
  EXPECT_EQ(std::memcmp(sw.data(), sc.data(), sw.size() * sizeof(float)), 0) << "pool differs";
}

void multicast_vs_wgmma(const Problem& p, uint32_t seed, int tile, int buffers, size_t ws_bytes = 0, int prefetch = 0) {
  for (int mma : {3, 4}) multicast_vs_wgmma(p, seed, tile, buffers, ws_bytes, prefetch, mma);
}

TEST_F(KdaChunk, WgmmaStateMulticastMatchesWgmma) {
  for (int buffers : {1, 2, 3})
    for (int tile : {32, 64}) multicast_vs_wgmma({2, 128, {1, 63, 64, 65, 129, 300}}, 111, tile, buffers);
  multicast_vs_wgmma({4, 128, {1, 63, 64, 65, 200, 1000}}, 112, 0, 0);
  Problem strong{2, 128, {100, 257}};
  strong.min_log_decay = kKdaChunkMinLogDecay;
  multicast_vs_wgmma(strong, 113, 64, 0);
  const Problem p{2, 128, {1, 200, 63, 400}};
  multicast_vs_wgmma(p, 114, 32, 2, kda_chunk_workspace_bytes(p.H, p.D, 3));  // several passes
  multicast_vs_wgmma({3, 128, {5, 700, 64}}, 115, 32, 3, kda_chunk_workspace_bytes(3, 128, 4), 2);
}

// The launcher's warp rule (kda_chunk_state_warps): 16 only where asked for, at D = 128 with
// tiles 32 / 64; the pick is 8.
TEST(KdaChunkRules, StateWarps) {
  EXPECT_EQ(kda_chunk_state_warps(0, 128, 64), 8);
  EXPECT_EQ(kda_chunk_state_warps(0, 128, 32), 8);
  EXPECT_EQ(kda_chunk_state_warps(8, 128, 64), 8);
  EXPECT_EQ(kda_chunk_state_warps(16, 128, 64), 16);
  EXPECT_EQ(kda_chunk_state_warps(16, 128, 32), 16);
  EXPECT_EQ(kda_chunk_state_warps(16, 128, 16), 8);
  EXPECT_EQ(kda_chunk_state_warps(16, 64, 64), 8);
  EXPECT_EQ(kda_chunk_state_warps(16, 32, 32), 8);
}

// bf16 mode's two intra kernels (KdaChunkArgs::bf16_intra: k and q staged as fp32, as bf16) on
// the same inputs: each within the bf16 bound of the CPU recurrence and close to each other
// (they differ by k and q's bf16 rounding before their decays); both workspace formats, D = 128
// / 64 / 32, gates at the bound, a partial last chunk in every sequence but one.
void bf16_intra_kernels_agree(const Problem& p, uint32_t seed, int bf16_workspace) {
  SCOPED_TRACE(::testing::Message() << "H=" << p.H << " D=" << p.D << " ws=" << bf16_workspace);
  const Inputs in = make_inputs(p, seed);
  const std::vector<int32_t> slots = scattered_slots(p, seed + 7);
  std::vector<float> pool = randn(p.slots * p.slot_floats(), seed + 8, 0.1f);
  auto pool_old = dev(pool), pool_new = dev(pool);
  DeviceRun d_old(in, full_workspace(p)), d_new(in, full_workspace(p));
  d_old.bf16_intra = 1, d_new.bf16_intra = 2;
  ASSERT_TRUE(d_old.run(p, p.lens, 0, slots, pool_old.get(), 0, false, 0, KdaChunkOutput::kInState, false, true, 0, bf16_workspace).is_ok());
  ASSERT_TRUE(d_new.run(p, p.lens, 0, slots, pool_new.get(), 0, false, 0, KdaChunkOutput::kInState, false, true, 0, bf16_workspace).is_ok());
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  const double eo_old = nerr(host(d_old.o), o), es_old = nerr(host(pool_old), pool);
  const double eo_new = nerr(host(d_new.o), o), es_new = nerr(host(pool_new), pool);
  const double eo = nerr(host(d_new.o), host(d_old.o)), es = nerr(host(pool_new), host(pool_old));
  std::printf("  bf16 intra H=%ld D=%ld ws=%d: fp32 k/q output / pool nerr %.2e / %.2e, bf16 k/q %.2e / %.2e, between %.2e / %.2e\n",
              static_cast<long>(p.H), static_cast<long>(p.D), bf16_workspace, eo_old, es_old, eo_new, es_new, eo, es);
  for (double e : {eo_old, es_old, eo_new, es_new}) EXPECT_LE(e, kBoundBf16);
  EXPECT_LE(eo, kBoundBf16 / 2);
  EXPECT_LE(es, kBoundBf16 / 2);
}

TEST_F(KdaChunk, Bf16IntraKernelsAgree) {
  for (int ws : {1, 2}) {
    bf16_intra_kernels_agree({4, 128, {1, 63, 64, 65, 200, 1000}}, 91, ws);
    bf16_intra_kernels_agree({2, 64, {1, 65, 300}}, 92, ws);
    bf16_intra_kernels_agree({2, 32, {7, 64, 65, 333}}, 93, ws);
    Problem strong{2, 128, {100, 257}};
    strong.min_log_decay = kKdaChunkMinLogDecay;
    bf16_intra_kernels_agree(strong, 94, ws);
  }
}

TEST_F(KdaChunk, EveryStateTileMatches) {
  for (int tile : {16, 32, 64}) check_one_pass({2, 128, {65, 300}}, 12, tile);
  check_one_pass({2, 64, {65, 300}}, 12, 64);
}

// The state kernel single- and double-buffered (the latter's wait counts differ with 1, 2 and
// many chunks per sequence; D = 128 at tile 64 falls back to one buffer).
TEST_F(KdaChunk, BothStateBufferingsMatch) {
  for (int buffers : {1, 2}) {
    for (int tile : {16, 32, 64}) check_one_pass({2, 128, {1, 64, 65, 128, 129, 300}}, 31, tile, 0, true, buffers);
    check_one_pass({2, 64, {1, 65, 300}}, 32, 64, 0, true, buffers);
    check_one_pass({2, 32, {7, 64, 65, 333}}, 33, 0, 0, false, buffers);
    check_one_pass({2, 128, {1, 200, 63, 400}}, 34, 0, 0, true, buffers);
  }
}

// Both places of the output: in the serial state kernel and in its own pass, over the tiles,
// bufferings, head dims, precisions and several passes.
TEST_F(KdaChunk, BothOutputPlacesMatch) {
  for (KdaChunkOutput out : {KdaChunkOutput::kInState, KdaChunkOutput::kSeparate}) {
    for (int buffers : {1, 2})
      for (int tile : {16, 32, 64}) check_one_pass({2, 128, {1, 64, 65, 128, 129, 300}}, 41, tile, 0, true, buffers, out);
    check_one_pass({2, 64, {1, 65, 300}}, 42, 16, 0, true, 1, out);
    check_one_pass({2, 32, {7, 64, 65, 333}}, 43, 0, 0, true, 2, out);
    check_one_pass({4, 128, {1, 63, 64, 65, 200, 1000}}, 44, 0, 0, false, 0, out);
    const Problem p{2, 128, {1, 200, 63, 400}};
    check_one_pass(p, 45, 0, kda_chunk_workspace_bytes(p.H, p.D, 3), true, 0, out);
  }
}

// The job tables uploaded by one layer's call serve the next layer's (tables_uploaded: only
// the layer offset and the tensors differ), also when the batch needs several passes.
TEST_F(KdaChunk, UploadedTablesServeTheNextLayer) {
  for (int64_t chunks : {int64_t{0}, int64_t{3}}) {
    Problem p0{2, 128, {1, 200, 63, 400}};
    p0.layer = 0;
    Problem p1 = p0;
    p1.layer = 1;
    SCOPED_TRACE(::testing::Message() << "workspace chunks " << chunks);
    const size_t ws_bytes = chunks ? kda_chunk_workspace_bytes(p0.H, p0.D, chunks) : full_workspace(p0);
    const Inputs in0 = make_inputs(p0, 51), in1 = make_inputs(p1, 52);
    const std::vector<int32_t> slots = scattered_slots(p0, 53);
    std::vector<float> pool = randn(p0.slots * p0.slot_floats(), 54, 0.1f);
    auto dpool = dev(pool);
    DeviceRun d0(in0, ws_bytes), d1(in1, 0);
    ASSERT_TRUE(d0.run(p0, p0.lens, 0, slots, dpool.get()).is_ok());
    // Layer 1's call: its own tensors, layer 0's workspace (and tables).
    d1.other_ws = &d0.ws;
    ASSERT_TRUE(d1.run(p1, p1.lens, 0, slots, dpool.get(), 0, true, 0, KdaChunkOutput::kPick, true).is_ok());
    const std::vector<float> o0 = cpu_prefill(p0, in0, slots, pool), o1 = cpu_prefill(p1, in1, slots, pool);
    const double e0 = nerr(host(d0.o), o0), e1 = nerr(host(d1.o), o1), es = nerr(host(dpool), pool);
    std::printf("  reused tables (ws chunks %ld): layer 0 output nerr %.2e, layer 1 %.2e, pool %.2e\n", static_cast<long>(chunks), e0, e1,
                es);
    EXPECT_LE(e0, kBoundPrecise);
    EXPECT_LE(e1, kBoundPrecise);
    EXPECT_LE(es, kBoundPrecise);
  }
}

TEST_F(KdaChunk, SmallHeadDims) {
  check_one_pass({3, 64, {1, 64, 129, 500}}, 13);
  check_one_pass({2, 32, {7, 64, 65, 333}}, 14);
  check_one_pass({2, 32, {130}}, 15, 16);
}

TEST_F(KdaChunk, StrongDecayAtTheBound) {
  Problem p{2, 128, {100, 257}};
  p.min_log_decay = kKdaChunkMinLogDecay;
  check_one_pass(p, 16);
}

// A workspace for 3 chunks: the batch runs in several passes, long sequences split across
// them (their state through the slot); equals the CPU like one pass does.
TEST_F(KdaChunk, SeveralPassesMatch) {
  const Problem p{2, 128, {1, 200, 63, 400}};
  check_one_pass(p, 17, 0, kda_chunk_workspace_bytes(p.H, p.D, 3));
}

// Prefill in two calls (the first ends mid-chunk for some sequences) equals one call.
void carried_across_calls(KdaChunkOutput out, Mode mode = Mode::k3xTf32) {
  const bool precise = mode == Mode::k3xTf32, bf16 = mode == Mode::kBf16;
  const double b = bound(mode);
  const Problem p{2, 128, {150, 64, 1000}};
  const Inputs in = make_inputs(p, 21);
  const std::vector<int32_t> slots = scattered_slots(p, 22);
  const std::vector<float> pool0 = randn(p.slots * p.slot_floats(), 23, 0.1f);
  auto one = dev(pool0), two = dev(pool0);
  DeviceRun d1(in, full_workspace(p)), d2(in, full_workspace(p));
  ASSERT_TRUE(d1.run(p, p.lens, 0, slots, one.get(), 0, precise, 0, out, false, bf16).is_ok());
  // Call split: sequence s's first cut[s] tokens, then the rest. Rows of one call must be
  // packed, so each sequence's pieces run as their own calls in order.
  const std::vector<int64_t> cut = {37, 64, 700};
  const std::vector<int64_t> cu = cu_of(p.lens);
  for (size_t s = 0; s < p.lens.size(); ++s) {
    ASSERT_TRUE(d2.run(p, {cut[s]}, cu[s], {slots[s]}, two.get(), 0, precise, 0, out, false, bf16).is_ok());
    ASSERT_TRUE(d2.run(p, {p.lens[s] - cut[s]}, cu[s] + cut[s], {slots[s]}, two.get(), 0, precise, 0, out, false, bf16).is_ok());
  }
  const double eo = nerr(host(d2.o), host(d1.o)), es = nerr(host(two), host(one));
  std::printf("  two calls vs one (bf16=%d): output nerr %.2e, pool nerr %.2e\n", bf16, eo, es);
  EXPECT_LE(eo, b);
  EXPECT_LE(es, b);
  std::vector<float> pool = pool0;
  const std::vector<float> o = cpu_prefill(p, in, slots, pool);
  EXPECT_LE(nerr(host(d2.o), o), b);
  EXPECT_LE(nerr(host(two), pool), b);
}

TEST_F(KdaChunk, StateCarriedAcrossCallsEqualsOnePass) {
  for (KdaChunkOutput out : {KdaChunkOutput::kInState, KdaChunkOutput::kSeparate}) {
    SCOPED_TRACE(::testing::Message() << "output " << static_cast<int>(out));
    carried_across_calls(out);
    carried_across_calls(out, Mode::kBf16);
  }
}

TEST(KdaChunkContract, RefusesUnsupportedShapes) {
  EXPECT_FALSE(kda_chunk_supported(16));
  EXPECT_FALSE(kda_chunk_supported(256));
  EXPECT_TRUE(kda_chunk_supported(128));
  KdaChunkArgs a;
  a.heads = 2, a.head_dim = 16, a.num_seqs = 1;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.head_dim = 128;  // no tables, no workspace
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.state_buffers = 4;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.state_buffers = 0;
  a.state_warps = 12;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.state_warps = 0;
  a.output = static_cast<KdaChunkOutput>(7);
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.output = KdaChunkOutput::kPick;
  a.bf16_workspace = 3;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.bf16_workspace = 0;
  a.bf16_intra = 3;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.bf16_intra = 0;
  a.state_mma = 3;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.state_mma = -1;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  const int64_t cu[3] = {0, 64, 129};
  EXPECT_EQ(kda_chunk_count(cu, 2), 1 + 2);
  EXPECT_GT(kda_chunk_workspace_bytes(2, 128, 3), kda_chunk_workspace_bytes(2, 128, 2));
}

}  // namespace
}  // namespace pdserve::cuda
