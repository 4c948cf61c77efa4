// The prefill MoE grouped GEMM (moe/moe_prefill.h): moe_permute_bf16 ->
// moe_expert_mlp_prefill -> moe_combine against the routed part of moe_forward on the CPU
// (moe_reference.h), fresh random inputs each case. GPU tests skip without an sm_90 GPU.
// Cases: the K3 expert shape (3584 -> 3072 -> 3584, SiTU(4, 25)) with real top-16 routing;
// single experts of 1 .. 385 rows beside empty ones (token tiles of 64 / 128 / 160 / balanced up
// to 192, column blocks of 8 / wgmma N of 32..192, rows between the multiples of 32), at widths that leave the last output tile part-filled; one hot
// expert (skew); uniform routing under SiLU and SiTU; scales above 2^1 (two-multiply
// path); the tile queue against the static schedule, call after call; no local rows; a CUDA-graph replay that must give the eager launch's bits.
// Every GPU case runs every main loop (MoePrefillKernel::kMmaSync and the seven kWgmma*; the
// shared-memory-weight, bulk-copy and producer ones must give kWgmma's bits exactly: the same
// bf16 values meet in the same k16 order whether A comes from registers or shared memory); a CPU test checks the wgmma kernels' input order against the MMA fragment it must match.
// Bound: normalised error max|gpu - cpu| / max|cpu| < 1e-2. x and act are rounded to bf16
// once each (relative 2^-9), weights exact, fp32 accumulation; runs print the measured
// error (a few 1e-3 expected).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "moe/moe_prefill.h"
#include "moe/moe_prefill_schedule.h"
#include "moe_reference.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using MoePrefill = GpuTest;

constexpr MoePrefillKernel kKernels[] = {MoePrefillKernel::kMmaSync, MoePrefillKernel::kWgmma, MoePrefillKernel::kWgmmaWideN,
                                         MoePrefillKernel::kWgmmaSmemW, MoePrefillKernel::kWgmmaSmemWDeep, MoePrefillKernel::kWgmmaTma,
                                         MoePrefillKernel::kWgmmaTma4, MoePrefillKernel::kWgmmaProducer, MoePrefillKernel::kWgmma160,
                                         MoePrefillKernel::kWgmmaG2, MoePrefillKernel::kWgmmaSmemWG2,
                                         MoePrefillKernel::kWgmmaCarry, MoePrefillKernel::kWgmmaCarry6, MoePrefillKernel::kWgmmaTmaMc,
                                         MoePrefillKernel::kWgmmaPingpong, MoePrefillKernel::kWgmmaTma160,
                                         MoePrefillKernel::kWgmmaTma160W, MoePrefillKernel::kWgmmaTmaNarrow};
const char* name_of(MoePrefillKernel k) {
  switch (k) {
    case MoePrefillKernel::kWgmma: return "wgmma";
    case MoePrefillKernel::kWgmmaWideN: return "wgmma-wideN";
    case MoePrefillKernel::kWgmmaSmemW: return "wgmma-smemW";
    case MoePrefillKernel::kWgmmaSmemWDeep: return "wgmma-smemW-deep";
    case MoePrefillKernel::kWgmmaTma: return "wgmma-tma";
    case MoePrefillKernel::kWgmmaTma4: return "wgmma-tma4";
    case MoePrefillKernel::kWgmmaProducer: return "wgmma-producer";
    case MoePrefillKernel::kWgmma160: return "wgmma-160";
    case MoePrefillKernel::kWgmmaG2: return "wgmma-g2";
    case MoePrefillKernel::kWgmmaCarry: return "wgmma-carry";
    case MoePrefillKernel::kWgmmaCarry6: return "wgmma-carry6";
    case MoePrefillKernel::kWgmmaTmaMc: return "wgmma-tma-mc";
    case MoePrefillKernel::kWgmmaPingpong: return "wgmma-pingpong";
    case MoePrefillKernel::kWgmmaTma160: return "wgmma-tma-160";
    case MoePrefillKernel::kWgmmaTma160W: return "wgmma-tma-160w";
    case MoePrefillKernel::kWgmmaTmaNarrow: return "wgmma-tma-narrow";
    case MoePrefillKernel::kWgmmaSmemWG2: return "wgmma-smemW-g2";
    default: return "mma.sync";
  }
}

struct DevWeights {
  std::vector<DeviceBuffer<uint8_t>> bufs;
  MoeDecodeWeights w;
};

DevWeights upload(const HostExperts& h, MoeActivation act, float beta, float lb) {
  DevWeights d;
  d.bufs.reserve(6);
  auto put = [&](const std::vector<uint8_t>& p, const std::vector<uint8_t>& s, int64_t rows, int64_t cols, Mxfp4Decode* out) {
    std::vector<uint8_t> rp, rs;
    auto wide = mxfp4_repack_decode(p.data(), s.data(), h.experts, rows, cols, &rp, &rs);
    EXPECT_TRUE(wide.is_ok());
    d.bufs.push_back(dev(rp));
    d.bufs.push_back(dev(rs));
    *out = {d.bufs[d.bufs.size() - 2].get(), d.bufs.back().get(), rows, cols, wide.is_ok() && wide.value()};
  };
  put(h.p1, h.s1, h.inter, h.dim, &d.w.w1);
  put(h.p3, h.s3, h.inter, h.dim, &d.w.w3);
  put(h.p2, h.s2, h.dim, h.inter, &d.w.w2);
  d.w.activation = act;
  d.w.situ_beta = beta;
  d.w.situ_linear_beta = lb;
  return d;
}

// The device pipeline's buffers for one routing.
struct Buffers {
  DeviceBuffer<int32_t> ids, off, sorted, prow;
  DeviceBuffer<float> wts, x, os, y;
  DeviceBuffer<uint16_t> xs, act;
  MoePlan plan() { return {off.get(), sorted.get(), prow.get()}; }
};

// The tile queue's workspace, as the backend passes one: zeroed once, left zero by every
// call (calls here never overlap). Never freed: it outlives the CUDA context's users.
MoeDecodeWorkspace queue_workspace() {
  static DeviceBuffer<uint32_t>* buf = [] {
    auto* d = new DeviceBuffer<uint32_t>(2);
    EXPECT_EQ(cudaMemset(d->get(), 0, 8), cudaSuccess);
    return d;
  }();
  return {buf->get(), 8};
}

Status pipeline(Buffers& b, const DevWeights& dw, int64_t tokens, int64_t k, int64_t begin, int64_t local, cudaStream_t st,
                MoePrefillKernel kernel) {
  const int64_t dim = dw.w.w1.cols, cap = tokens * k;
  PDS_RETURN_IF_ERROR(moe_permute_bf16(b.ids.get(), tokens, k, begin, local, b.x.get(), dim, b.plan(), b.xs.get(), st, kernel));
  PDS_RETURN_IF_ERROR(
      moe_expert_mlp_prefill(dw.w, b.off.get(), local, cap, b.xs.get(), b.act.get(), b.os.get(), st, queue_workspace(), kernel));
  return moe_combine(b.os.get(), b.prow.get(), b.wts.get(), tokens, k, dim, b.y.get(), st);
}

// The worst normalised error of the main loops on the same case.
double run_prefill(const Routing& r, int64_t tokens, int64_t k, int64_t begin, const HostExperts& h, MoeActivation act, uint32_t seed,
                   const std::string& what) {
  const float beta = 4.0f, lb = 25.0f;
  const int64_t dim = h.dim, inter = h.inter, local = h.experts, cap = tokens * k;
  const auto x = randn(tokens * dim, seed);
  const auto ref = routed_reference(h, r, tokens, k, begin, x, act, beta, lb);
  const DevWeights dw = upload(h, act, beta, lb);
  Buffers b{dev(r.ids), DeviceBuffer<int32_t>(local + 1), DeviceBuffer<int32_t>(cap), DeviceBuffer<int32_t>(cap),
        dev(r.weights), dev(x), DeviceBuffer<float>(cap * dim), DeviceBuffer<float>(tokens * dim),
        DeviceBuffer<uint16_t>(cap * dim), DeviceBuffer<uint16_t>(cap * inter)};
  int64_t rows = 0;
  for (int32_t id : r.ids) rows += id >= begin && id < begin + local;
  EXPECT_GT(rows, 0) << what << ": the case should route some rows here";
  double worst = 0.0;
  // kWgmma's output: the shared-memory-weight, bulk-copy, producer, 160-token-tile and two-k-step-group loops run the same
  // MMAs in the same k order on each output (kWgmma160: N = 160 where kWgmma runs 128 + 32;
  // bit-identical on every case on the H200, docs/perf.md "Token tiles of 160")
  std::vector<float> y_wgmma;
  for (const MoePrefillKernel kernel : kKernels) {
    EXPECT_EQ(cudaMemset(b.y.get(), 0xff, tokens * dim * sizeof(float)), cudaSuccess);  // NaN: a row the kernel skipped shows
    const Status s = pipeline(b, dw, tokens, k, begin, local, nullptr, kernel);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    const std::vector<float> y = host(b.y);
    if (kernel == MoePrefillKernel::kWgmma) y_wgmma = y;
    if (kernel == MoePrefillKernel::kWgmmaSmemW || kernel == MoePrefillKernel::kWgmmaSmemWDeep || kernel == MoePrefillKernel::kWgmmaTma ||
        kernel == MoePrefillKernel::kWgmmaTma4 || kernel == MoePrefillKernel::kWgmmaProducer || kernel == MoePrefillKernel::kWgmma160 ||
        kernel == MoePrefillKernel::kWgmmaG2 || kernel == MoePrefillKernel::kWgmmaSmemWG2 || kernel == MoePrefillKernel::kWgmmaCarry ||
        kernel == MoePrefillKernel::kWgmmaCarry6 || kernel == MoePrefillKernel::kWgmmaTmaMc ||
        kernel == MoePrefillKernel::kWgmmaPingpong || kernel == MoePrefillKernel::kWgmmaTma160 ||
        kernel == MoePrefillKernel::kWgmmaTma160W || kernel == MoePrefillKernel::kWgmmaTmaNarrow) {
      EXPECT_TRUE(y == y_wgmma) << what << " [" << name_of(kernel) << "]: not bit-identical to wgmma";
    }
    const double err = nerr(y, ref);
    std::printf("prefill MoE %s [%s]: tokens=%lld local=%lld k=%lld rows=%lld dim=%lld inter=%lld: normalised error %.3g\n", what.c_str(),
                name_of(kernel), (long long)tokens, (long long)local, (long long)k, (long long)rows, (long long)dim, (long long)inter, err);
    EXPECT_LT(err, 1e-2) << what << " [" << name_of(kernel) << "]";
    worst = std::isnan(err) ? 1.0 : std::max(worst, err);
  }
  return worst;
}

TEST(MoePrefillShapes, FitsNeedsWidthsOf128) {
  const uint8_t byte = 0;
  MoeDecodeWeights w;
  w.w1 = w.w3 = {&byte, &byte, 3072, 3584, false};
  w.w2 = {&byte, &byte, 3584, 3072, false};
  EXPECT_TRUE(moe_prefill_fits(w));
  w.w1.rows = w.w3.rows = 3072 + 8;  // the decode layout fits (rows % 8); down then has 3080 inputs, not a multiple of 128
  w.w2.cols = 3072 + 8;
  EXPECT_FALSE(moe_prefill_fits(w));
  w.w1.rows = w.w3.rows = 3072;
  w.w2.cols = 3072;
  w.w3.cols = 3584 - 128;  // gate and up must agree
  EXPECT_FALSE(moe_prefill_fits(w));
  w.w3.cols = 3584;
  ASSERT_TRUE(moe_prefill_fits(w));
  w.w2.bits = Mxfp4DecodeBits::kFp8;  // the E4M3 shuffle (the decode role's): the prefill kernel reads kBf16 only
  EXPECT_FALSE(moe_prefill_fits(w));
  const Status st = moe_expert_mlp_prefill(w, nullptr, 1, 0, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
}

TEST(MoePrefillSchedule, TileCoordsAreABijectionPerExpert) {
  for (int mtiles = 1; mtiles <= 5; ++mtiles)
    for (int out_tiles : {1, 7, 12}) {
      std::vector<int> seen(out_tiles * mtiles, 0);
      for (int local = 0; local < out_tiles * mtiles; ++local) {
        int ot = -1, mt = -1;
        moe_prefill_detail::prefill_tile_coords(local, mtiles, &ot, &mt);
        ASSERT_GE(ot, 0);
        ASSERT_LT(ot, out_tiles);
        ASSERT_GE(mt, 0);
        ASSERT_LT(mt, mtiles);
        EXPECT_EQ(ot, local / mtiles) << "token tiles of one output tile must stay adjacent";
        ++seen[ot * mtiles + mt];
      }
      EXPECT_EQ(seen, std::vector<int>(out_tiles * mtiles, 1)) << "mtiles " << mtiles << " out_tiles " << out_tiles;
    }
}

// The K3 EP4 gate/up list at 146-147 rows an expert (token tiles of 64, 64, 18-19), 132
// CTAs striding over it as the kernel does: every CTA gets its share of the short tiles.
TEST(MoePrefillSchedule, StridingCtasShareTheShortTokenTiles) {
  const int experts = 224, out_tiles = 12, ctas = 132, mtiles = 3;
  const int total = experts * out_tiles * mtiles;
  std::vector<int> short_tiles(ctas, 0);
  for (int c = 0; c < ctas; ++c)
    for (int tile = c; tile < total; tile += ctas) {
      int ot, mt;
      moe_prefill_detail::prefill_tile_coords(tile % (out_tiles * mtiles), mtiles, &ot, &mt);
      short_tiles[c] += mt == mtiles - 1;
    }
  const auto [lo, hi] = std::minmax_element(short_tiles.begin(), short_tiles.end());
  std::printf("short token tiles a CTA: %d..%d (of %d tiles a CTA)\n", *lo, *hi, total / ctas);
  EXPECT_LE(*hi - *lo, 2);
}

// kWgmma's input order (wgmma_k_position) is a permutation of each 32-input group that
// keeps pairs adjacent and puts lane t's inputs 8t + 4h + {0,1} / {2,3} (dequant_half's two
// registers of k-step h) at k slots 2t, 2t + 1 / 2t + 8, 2t + 9 of k-step h, as the m16n8k16
// A fragment (and wgmma's register A) takes them.
TEST(MoePrefillSchedule, WgmmaInputOrderMatchesTheAFragment) {
  std::vector<int> seen(32, 0);
  for (int j = 0; j < 32; ++j) {
    const int pos = moe_prefill_detail::wgmma_k_position(j);
    ASSERT_GE(pos, 0);
    ASSERT_LT(pos, 32);
    ++seen[pos];
    if (j % 2 == 0) {
      EXPECT_EQ(moe_prefill_detail::wgmma_k_position(j + 1), pos + 1) << "pairs stay adjacent";
    }
  }
  EXPECT_EQ(seen, std::vector<int>(32, 1));
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(moe_prefill_detail::wgmma_k_position(8 * t + 4 * h), 16 * h + 2 * t);
      EXPECT_EQ(moe_prefill_detail::wgmma_k_position(8 * t + 4 * h + 2), 16 * h + 2 * t + 8);
    }
  EXPECT_EQ(moe_prefill_choice(MoePrefillKernel::kWgmma), MoePrefillKernel::kWgmma);
  EXPECT_NE(moe_prefill_choice(), MoePrefillKernel::kAuto);
}

// kAuto takes the two-CTA narrow form only for chunks of few rows an expert; a named kernel stays.
TEST(MoePrefillSchedule, AutoTakesTheNarrowFormForFewRowsAnExpert) {
  using K = MoePrefillKernel;
  EXPECT_EQ(moe_prefill_choice(K::kAuto, 0), K::kWgmmaTmaNarrow);
  EXPECT_EQ(moe_prefill_choice(K::kAuto, 2), K::kWgmmaTmaNarrow);
  EXPECT_EQ(moe_prefill_choice(K::kAuto, kMoePrefillNarrowMaxRowsPerExpert), K::kWgmmaTmaNarrow);
  EXPECT_EQ(moe_prefill_choice(K::kAuto, kMoePrefillNarrowMaxRowsPerExpert + 1), K::kWgmmaTma160W);
  EXPECT_EQ(moe_prefill_choice(K::kAuto, 146), K::kWgmmaTma160W);
  EXPECT_EQ(moe_prefill_choice(K::kAuto), K::kWgmmaTma160W);  // rows not known
  EXPECT_EQ(moe_prefill_choice(K::kWgmmaTma160W, 2), K::kWgmmaTma160W);
  EXPECT_EQ(moe_prefill_choice(K::kWgmmaTmaNarrow, 146), K::kWgmmaTmaNarrow);
}

TEST_F(MoePrefill, MatchesCpuAtK3ExpertShapeWithTop16) {
  const int64_t experts = 32, local = 4, k = 16, tokens = 40;
  const HostExperts h = make_experts(local, 3072, 3584, 90, false);
  const Routing r = route(tokens, experts, k, 91);
  EXPECT_LT(run_prefill(r, tokens, k, 0, h, MoeActivation::kSiTU, 92, "K3 top-16"), 1e-2);
}

TEST_F(MoePrefill, OddRowCountsBesideEmptyExperts) {
  // Local experts 0 and 2 get n rows each (k = 2: one pick each per token), 1 and 3 none.
  const int64_t local = 4, begin = 8;
  const HostExperts h = make_experts(local, 384, 640, 100, true);  // 384: 1.5 gate/up tiles; 640: 1.25 down tiles
  for (int64_t n : {1, 15, 17, 40, 64, 65, 90, 110, 120, 129, 140, 146, 160, 161, 190, 280, 288, 289, 321, 385}) {  // 146 .. 321: kWgmma160 / kWgmmaTma160 tile edges (280, 288: a tail absorbed after a full tile); 40 .. 140: tiles short of their N
    Routing r{std::vector<int32_t>(2 * n), std::vector<float>(2 * n)};
    for (int64_t t = 0; t < n; ++t) r.ids[2 * t] = begin + 2, r.ids[2 * t + 1] = begin, r.weights[2 * t] = 0.6f, r.weights[2 * t + 1] = 0.4f;
    EXPECT_LT(run_prefill(r, n, 2, begin, h, MoeActivation::kSiTU, 101 + static_cast<uint32_t>(n), "rows=" + std::to_string(n)), 1e-2);
  }
}

TEST_F(MoePrefill, SkewedAndUniformRouting) {
  const int64_t local = 8, tokens = 300;
  const HostExperts h = make_experts(local, 256, 384, 110, true);
  // Every token's first pick is local expert 3; the second is spread over 16 experts, 8 of
  // them on another rank.
  Routing skew{std::vector<int32_t>(2 * tokens), std::vector<float>(2 * tokens, 0.5f)};
  for (int64_t t = 0; t < tokens; ++t) skew.ids[2 * t] = 3, skew.ids[2 * t + 1] = t % 3 == 0 ? 3 + 8 + t % 8 : (t * 7) % 8 == 3 ? 4 : (t * 7) % 8;
  EXPECT_LT(run_prefill(skew, tokens, 2, 0, h, MoeActivation::kSiTU, 111, "one hot expert"), 1e-2);
  const Routing r = route(tokens, 16, 4, 112);
  EXPECT_LT(run_prefill(r, tokens, 4, 0, h, MoeActivation::kSiLU, 113, "uniform SiLU"), 1e-2);
  EXPECT_LT(run_prefill(r, tokens, 4, 8, h, MoeActivation::kSiTU, 114, "uniform SiTU"), 1e-2);
}

// kWgmmaTma160W keeps its tile starts beside its ring: at its expert limit it runs itself, one expert
// past it kWgmmaTma160 (both bit-identical to kWgmma: run_prefill asserts it for every loop).
TEST_F(MoePrefill, LocalExpertsAtAndPastTheWordRingLimit) {
  for (const int64_t local : {kMoePrefillWordsMaxExperts, kMoePrefillWordsMaxExperts + 1}) {
    const HostExperts h = make_experts(local, 128, 128, 150, true);
    const Routing r = route(600, local, 2, 151);
    EXPECT_LT(run_prefill(r, 600, 2, 0, h, MoeActivation::kSiTU, 152, "local experts " + std::to_string(local)), 1e-2);
  }
}

TEST_F(MoePrefill, ScalesAboveTwoTakeTheTwoMultiplyPath) {
  const HostExperts h = make_experts(4, 256, 256, 120, false, 124, 10);  // scale bytes 124..133
  const Routing r = route(70, 4, 2, 121);
  EXPECT_LT(run_prefill(r, 70, 2, 0, h, MoeActivation::kSiLU, 122, "wide scales"), 1e-2);
}

// The dynamic tile queue hands every tile out once per call and is zeroed for the next
// one: three calls in a row (queue, queue, static) on the same skewed rows give the same
// bits; a queue left non-zero would skip tiles on the second call.
TEST_F(MoePrefill, TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall) {
  const int64_t local = 12, tokens = 700, k = 2, cap = tokens * k, dim = 384, inter = 512;
  const HostExperts h = make_experts(local, inter, dim, 140, true);
  const DevWeights dw = upload(h, MoeActivation::kSiTU, 4.0f, 25.0f);
  // Expert 2 gets every token once (11 token tiles); the other pick spreads over the rest.
  std::vector<int32_t> counts(local, 0);
  for (int64_t t = 0; t < tokens; ++t) ++counts[2], ++counts[t % 7 == 0 ? 5 : (t * 5) % local == 2 ? 3 : (t * 5) % local];
  std::vector<int32_t> offsets(local + 1, 0);
  for (int64_t e = 0; e < local; ++e) offsets[e + 1] = offsets[e] + counts[e];
  DeviceBuffer<int32_t> off = dev(offsets);
  std::vector<uint16_t> xh(cap * dim);
  const auto xf = randn(cap * dim, 141);
  for (size_t i = 0; i < xh.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &xf[i], 4);
    xh[i] = static_cast<uint16_t>(bits >> 16);
  }
  DeviceBuffer<uint16_t> xs = dev(xh), act(cap * inter);
  DeviceBuffer<float> os(cap * dim);
  DeviceBuffer<uint32_t> ws_buf(2);
  ASSERT_EQ(cudaMemset(ws_buf.get(), 0, 8), cudaSuccess);
  const MoeDecodeWorkspace ws{ws_buf.get(), 8};
  for (const MoePrefillKernel kernel : kKernels) {  // x's input order does not matter here: runs are compared with each other
    std::vector<std::vector<float>> outs;
    for (const MoeDecodeWorkspace call_ws : {ws, ws, MoeDecodeWorkspace{}}) {  // queue, queue, static
      ASSERT_EQ(cudaMemset(os.get(), 0xff, cap * dim * sizeof(float)), cudaSuccess);  // NaN: a skipped tile shows
      const Status s = moe_expert_mlp_prefill(dw.w, off.get(), local, cap, xs.get(), act.get(), os.get(), nullptr, call_ws, kernel);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      outs.push_back(host(os));
    }
    const int64_t rows = offsets[local];
    for (int i = 0; i < 3; ++i) outs[i].resize(rows * dim);
    for (float v : outs[2]) ASSERT_TRUE(std::isfinite(v)) << name_of(kernel);
    EXPECT_EQ(host(ws_buf), std::vector<uint32_t>(2, 0u)) << name_of(kernel) << ": the last CTA leaves the queue zero";
    EXPECT_TRUE(outs[0] == outs[2]) << name_of(kernel) << ": first queue call vs static";
    EXPECT_TRUE(outs[1] == outs[2]) << name_of(kernel) << ": second queue call vs static";
  }
}

TEST_F(MoePrefill, NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats) {
  const int64_t local = 6, tokens = 90, k = 2, cap = tokens * k, dim = 384, inter = 256;
  const HostExperts h = make_experts(local, inter, dim, 130, true);
  const DevWeights dw = upload(h, MoeActivation::kSiTU, 4.0f, 25.0f);
  auto make = [&](const Routing& r) {
    return Buffers{dev(r.ids), DeviceBuffer<int32_t>(local + 1), DeviceBuffer<int32_t>(cap), DeviceBuffer<int32_t>(cap),
               dev(r.weights), dev(randn(tokens * dim, 131)), DeviceBuffer<float>(cap * dim), DeviceBuffer<float>(tokens * dim),
               DeviceBuffer<uint16_t>(cap * dim), DeviceBuffer<uint16_t>(cap * inter)};
  };
  const Routing none{std::vector<int32_t>(cap, 40), std::vector<float>(cap, 0.5f)};
  for (const MoePrefillKernel kernel : kKernels) {
    Buffers b0 = make(none);
    ASSERT_TRUE(pipeline(b0, dw, tokens, k, 0, local, nullptr, kernel).is_ok());
    EXPECT_EQ(host(b0.y), std::vector<float>(tokens * dim, 0.0f)) << name_of(kernel);

    Routing r{std::vector<int32_t>(cap), std::vector<float>(cap, 0.5f)};
    for (int64_t t = 0; t < tokens; ++t) r.ids[2 * t] = 1, r.ids[2 * t + 1] = t % 3 == 0 ? 4 : 9;  // experts 0, 2, 3, 5 empty
    Buffers b = make(r);
    ASSERT_TRUE(pipeline(b, dw, tokens, k, 0, local, nullptr, kernel).is_ok());
    const auto first = host(b.y);
    cudaStream_t st;
    ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status captured = pipeline(b, dw, tokens, k, 0, local, st, kernel);
    ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
    ASSERT_TRUE(captured.is_ok()) << captured.to_string();
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(cudaMemsetAsync(b.y.get(), 0, tokens * dim * sizeof(float), st), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
      EXPECT_EQ(host(b.y), first) << name_of(kernel) << ": graph replay " << i + 1;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
  }
}

}  // namespace
}  // namespace pdserve::cuda
