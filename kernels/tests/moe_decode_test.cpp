// The decode MoE kernel (moe/moe_decode.h) and its weight layout.
// CPU tests (run everywhere): the repack round-trips, and every repacked word, decoded the
// way the kernel decodes it (bit shuffle -> bf16 -> times 2^(s-1)), gives the checkpoint's
// value at the input the layout assigns to it.
// GPU tests (skip without an sm_90 GPU): moe_permute -> moe_expert_mlp_decode ->
// moe_combine against the routed part of moe_forward on the CPU (moe_reference.h), fresh
// random inputs: K3 expert shape with top-16 routing at batch 1, 4 and 64, skewed routing
// (one expert with 40 rows, the rest empty), a single row, B = 1-3 on 1-3 experts of a wide
// gate/up (1-3 units a CTA), scales above 2^1 (the
// two-multiply path), both activations; each case on every kernel (kStreamed, kStaged,
// kWeightsA and its two schedule variants, kFused, kFusedSplit, kFusedSplitPdl, the two
// 24-warp split forms, kFusedSplitStaggered, the two-launch PDL forms and the per-warp ring
// forms kWeightsAPdlRing* of moedec14: 3-chunk dims give a 1-chunk warp, 1-2 chunk dims warps
// with no words) and on kAuto (with a queue workspace, as the backend calls it). Each
// fused form also: repeated launches and CUDA-graph replays (of permute -> decode, from
// cleared permute outputs) give the first launch's bits and leave the workspace zero (so do the
// E4M3 forms kWeightsAPdlQgmma / kWeightsAPdlQgmmaWide, which also run every differential case on
// the same weights repacked with Mxfp4DecodeBits::kFp8, with kAuto on them); two
// calls (kFused, then kFusedSplit24Warps) on two streams with separate
// workspaces, eager and replayed from graphs without a host sync in between, each give
// their solo bits; a call without a workspace or with too small a one is refused; kAuto's
// choice follows the capacity rule.
// Bound: normalised error max|gpu - cpu| / max|cpu| < 1e-2. The kernel rounds the
// activations (x, then act) to bf16 for the tensor cores (relative 2^-9 each; the E4M3 forms:
// an E4M3 hi + lo pair, about 2^-8) while the weights are exact; fp32 accumulation. Measured
// values are printed by each run. CPU tests also check the kFp8 shuffle word by word. The E4M3
// forms' token conversion alone (hi = E4M3(x), lo = E4M3(x - hi), two values a conversion) is
// checked bit for bit against a host rounding rule (GPU).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/moe_decode_bits.h"
#include "moe/moe_decode.h"
#include "moe_decode_test_kernels.h"
#include "moe_reference.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using MoeDecode = GpuTest;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo = 0, int span = 256) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(lo + g() % span);
  return v;
}

TEST(MoeDecodeLayout, RepackRoundTrips) {
  for (auto [experts, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 128}, {3, 24, 384}, {2, 40, 256}}) {
    const auto p = random_bytes(experts * rows * cols / 2, 1 + rows), s = random_bytes(experts * rows * cols / 32, 2 + rows, 100, 29);
    std::vector<uint8_t> rp, rs, up, us;
    auto wide = mxfp4_repack_decode(p.data(), s.data(), experts, rows, cols, &rp, &rs);
    ASSERT_TRUE(wide.is_ok());
    EXPECT_FALSE(wide.value());  // scale bytes 100..128
    EXPECT_NE(rp, p);            // a real shuffle
    ASSERT_TRUE(mxfp4_unpack_decode(rp.data(), rs.data(), experts, rows, cols, &up, &us).is_ok());
    EXPECT_EQ(up, p);
    EXPECT_EQ(us, s);
  }
  auto s = random_bytes(8 * 128 / 32, 3, 100, 29);
  s[5] = 129;
  const auto p = random_bytes(8 * 128 / 2, 4);
  std::vector<uint8_t> rp, rs;
  auto wide = mxfp4_repack_decode(p.data(), s.data(), 1, 8, 128, &rp, &rs);
  ASSERT_TRUE(wide.is_ok());
  EXPECT_TRUE(wide.value());
  EXPECT_FALSE(mxfp4_repack_decode(p.data(), s.data(), 1, 8, 96, &rp, &rs).is_ok());
  EXPECT_FALSE(mxfp4_repack_decode(p.data(), s.data(), 1, 4, 128, &rp, &rs).is_ok());
}

float bf16_bits_to_float(uint32_t h) {
  const uint32_t b = h << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The kernel's dequant_word on the host, in exact float arithmetic: out_j's halves are
// the word's inputs 2j (low) and 2j + 1 (high).
void decode_word_host(uint32_t q, uint32_t s, float out[8]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  auto rotl = [](uint32_t v, int n) { return (v << n) | (v >> (32 - n)); };
  const uint32_t b[4] = {q & kMask, (q << 4) & kMask, rotl(q, 10) & kMask, (rotl(q, 22) & 0x00400040u) | (rotl(q, 30) & 0x81808180u)};
  const float scale = std::ldexp(1.0f, static_cast<int>(s) - 127) * std::ldexp(1.0f, 126);
  for (int j = 0; j < 4; ++j) {
    out[2 * j] = bf16_bits_to_float(b[j] & 0xffffu) * scale;
    out[2 * j + 1] = bf16_bits_to_float(b[j] >> 16) * scale;
  }
}

TEST(MoeDecodeLayout, Fp8BitsRoundTripAndDiffer) {
  const int64_t experts = 2, rows = 16, cols = 256;
  const auto p = random_bytes(experts * rows * cols / 2, 21), s = random_bytes(experts * rows * cols / 32, 22, 100, 29);
  std::vector<uint8_t> rb, sb, rq, sq, up, us;
  ASSERT_TRUE(mxfp4_repack_decode(p.data(), s.data(), experts, rows, cols, &rb, &sb).is_ok());
  ASSERT_TRUE(mxfp4_repack_decode(p.data(), s.data(), experts, rows, cols, &rq, &sq, Mxfp4DecodeBits::kFp8).is_ok());
  EXPECT_NE(rq, rb);  // another shuffle of the same words
  EXPECT_EQ(sq, sb);  // the scale bytes are laid out alike
  ASSERT_TRUE(mxfp4_unpack_decode(rq.data(), sq.data(), experts, rows, cols, &up, &us, Mxfp4DecodeBits::kFp8).is_ok());
  EXPECT_EQ(up, p);
  EXPECT_EQ(us, s);
}

// E4M3 byte -> float (no NaN / inf among the bytes the shuffle makes).
float e4m3_to_float(uint32_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (b & 0x80u) ? -v : v;
}

// The E4M3 forms' dequantisation on the host: the two E4M3 registers of a word (inputs 0..3 and
// 4..7, byte j = input j of the register), times 2^6 x 2^(s - 127).
void decode_word_fp8_host(uint32_t q, uint32_t s, float out[8]) {
  auto rotl = [](uint32_t v, int n) { return (v << n) | (v >> (32 - n)); };
  const uint32_t reg[2] = {q & 0x9C9C9C9Cu, (rotl(q, 6) & 0x88888888u) | (rotl(q, 4) & 0x14141414u)};
  const float scale = std::ldexp(1.0f, static_cast<int>(s) - 127 + 6);
  for (int w = 0; w < 8; ++w) out[w] = e4m3_to_float((reg[w / 4] >> (8 * (w % 4))) & 0xffu) * scale;
}

// Repacks random weights with `bits` and checks that every word, decoded the kernel's way
// (`decode(word, scale byte, out)`), gives the checkpoint's value at the input the layout assigns.
template <typename Decode>
void expect_words_decode(Mxfp4DecodeBits bits, uint32_t seed, int scale_lo, int scale_span, Decode&& decode) {
  const int64_t experts = 2, rows = 16, cols = 256;
  const auto p = random_bytes(experts * rows * cols / 2, seed), s = random_bytes(experts * rows * cols / 32, seed + 1, scale_lo, scale_span);
  std::vector<float> want(experts * rows * cols);
  ops::mxfp4_dequant({experts * rows, cols, p.data(), s.data()}, want.data());
  std::vector<uint8_t> rp, rs;
  ASSERT_TRUE(mxfp4_repack_decode(p.data(), s.data(), experts, rows, cols, &rp, &rs, bits).is_ok());
  const int64_t tiles = rows / 8, chunks = cols / 128;
  int64_t checked = 0;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t n = 0; n < tiles; ++n)
      for (int64_t c = 0; c < chunks; ++c)
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 4; ++i) {
            const int64_t tile = (e * tiles + n) * chunks + c;
            uint32_t q;
            std::memcpy(&q, &rp[tile * 512 + lane * 16 + i * 4], 4);
            float got[8];
            decode(q, rs[tile * 32 + (lane / 4) * 4 + i], got);
            const int64_t row = e * rows + n * 8 + lane / 4, col0 = c * 128 + 32 * i + 8 * (lane % 4);
            for (int w = 0; w < 8; ++w, ++checked)
              ASSERT_EQ(got[w], want[row * cols + col0 + w]) << "row " << row << " col " << col0 + w;
          }
  EXPECT_EQ(checked, experts * rows * cols);
}

TEST(MoeDecodeLayout, Fp8WordsDecodeToTheCheckpointValues) { expect_words_decode(Mxfp4DecodeBits::kFp8, 31, 110, 19, decode_word_fp8_host); }

// Weights and kernel must agree on the bit shuffle; checked before anything runs (no GPU needed).
TEST(MoeDecodeLayout, BitsAndKernelMustAgree) {
  static uint8_t fake[16];
  static int32_t offsets[2];
  MoeDecodeWeights w;
  w.w1 = w.w3 = {fake, fake, 128, 128, false, Mxfp4DecodeBits::kFp8};
  w.w2 = {fake, fake, 128, 128, false, Mxfp4DecodeBits::kFp8};
  float* none = nullptr;
  EXPECT_EQ(moe_expert_mlp_decode(w, offsets, 1, 0, none, none, none, nullptr, MoeDecodeKernel::kWeightsAPdlF32).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(moe_expert_mlp_decode(w, offsets, 1, 0, none, none, none, nullptr, MoeDecodeKernel::kWeightsAPdlQgmma).is_ok());
  EXPECT_EQ(moe_decode_choice(w, 1, 16, false), MoeDecodeKernel::kWeightsAPdlQgmma);
  EXPECT_EQ(moe_decode_choice(w, 1, kMoeDecodeQgmmaWideMinCapacity, false), MoeDecodeKernel::kWeightsAPdlQgmmaWide);
  w.w2.bits = Mxfp4DecodeBits::kBf16;  // mixed
  EXPECT_EQ(moe_expert_mlp_decode(w, offsets, 1, 0, none, none, none, nullptr).code(), ErrorCode::kInvalidArgument);
  w.w1.bits = w.w3.bits = Mxfp4DecodeBits::kBf16;
  EXPECT_EQ(moe_expert_mlp_decode(w, offsets, 1, 0, none, none, none, nullptr, MoeDecodeKernel::kWeightsAPdlQgmma).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(moe_expert_mlp_decode(w, offsets, 1, 0, none, none, none, nullptr, MoeDecodeKernel::kWeightsAPdlF32).is_ok());
}

// The CUDA backend's shuffle (CudaForwardOptions::e4m3_moe_decode): kFp8 only where asked and where
// kAuto then takes the 64-row E4M3 form, which refuses wide scales.
TEST(MoeDecodeLayout, BackendTakesE4m3WhereTheWideFormTakesTheLayer) {
  EXPECT_EQ(moe_decode_bits_for(true, 3072, 3584, false), Mxfp4DecodeBits::kFp8);  // K3's experts
  EXPECT_EQ(moe_decode_bits_for(false, 3072, 3584, false), Mxfp4DecodeBits::kBf16);
  EXPECT_EQ(moe_decode_bits_for(true, 3072, 3584, true), Mxfp4DecodeBits::kBf16);        // a scale byte above 128
  EXPECT_EQ(moe_decode_bits_for(true, 3072 + 16, 3584, false), Mxfp4DecodeBits::kBf16);  // inter % 32
  EXPECT_EQ(moe_decode_bits_for(true, 3072, 3584 + 32, false), Mxfp4DecodeBits::kBf16);  // dim % 64
  EXPECT_EQ(moe_decode_bits_for(true, 3072, 4096 + 64, false), Mxfp4DecodeBits::kBf16);  // dim > 4096
  EXPECT_EQ(moe_decode_bits_for(true, 128, 128, false), Mxfp4DecodeBits::kFp8);
  static uint8_t fake[16];
  MoeDecodeWeights w;
  w.w1 = w.w3 = {fake, fake, 3072, 3584, false, Mxfp4DecodeBits::kFp8};
  w.w2 = {fake, fake, 3584, 3072, false, Mxfp4DecodeBits::kFp8};
  EXPECT_EQ(moe_decode_choice(w, 28, 4 * 16, true), MoeDecodeKernel::kWeightsAPdlQgmmaWide);
}

TEST(MoeDecodeLayout, ShuffledWordsDecodeToTheCheckpointValues) { expect_words_decode(Mxfp4DecodeBits::kBf16, 11, 115, 14, decode_word_host); }

struct DevDecode {
  std::vector<DeviceBuffer<uint8_t>> bufs;
  MoeDecodeWeights w;
};

DevDecode upload_decode(const HostExperts& h, MoeActivation act, float beta, float lb, Mxfp4DecodeBits bits = Mxfp4DecodeBits::kBf16) {
  DevDecode d;
  auto put = [&](const std::vector<uint8_t>& p, const std::vector<uint8_t>& s, int64_t rows, int64_t cols, Mxfp4Decode* out) {
    std::vector<uint8_t> rp, rs;
    auto wide = mxfp4_repack_decode(p.data(), s.data(), h.experts, rows, cols, &rp, &rs, bits);
    EXPECT_TRUE(wide.is_ok());
    d.bufs.push_back(dev(rp));
    d.bufs.push_back(dev(rs));
    *out = {d.bufs[d.bufs.size() - 2].get(), d.bufs.back().get(), rows, cols, wide.is_ok() && wide.value(), bits};
  };
  d.bufs.reserve(6);
  put(h.p1, h.s1, h.inter, h.dim, &d.w.w1);
  put(h.p3, h.s3, h.inter, h.dim, &d.w.w3);
  put(h.p2, h.s2, h.dim, h.inter, &d.w.w2);
  d.w.activation = act;
  d.w.situ_beta = beta;
  d.w.situ_linear_beta = lb;
  return d;
}

// A zeroed queue workspace for the fused kernel (moe_decode.h: zero once at allocation).
// With cap and inter, large enough for kWeightsAPdlSplitK's partial sums too.
DeviceBuffer<uint32_t> zeroed_workspace(int64_t local, int64_t cap = 0, int64_t inter = 0) {
  const size_t bytes = std::max(moe_decode_workspace_bytes(local), moe_decode_splitk_workspace_bytes(local, cap, inter));
  return dev(std::vector<uint32_t>(bytes / sizeof(uint32_t), 0u));
}

MoeDecodeWorkspace workspace_of(DeviceBuffer<uint32_t>& b) { return {b.get(), b.size() * sizeof(uint32_t)}; }

const char* kernel_name(MoeDecodeKernel k) {
  switch (k) {
    case MoeDecodeKernel::kAuto: return "auto";
    case MoeDecodeKernel::kStreamed: return "streamed";
    case MoeDecodeKernel::kStaged: return "staged";
    case MoeDecodeKernel::kWeightsA: return "weights-A";
    case MoeDecodeKernel::kWeightsANoPrefetch: return "weights-A no-prefetch";
    case MoeDecodeKernel::kWeightsAStrided: return "weights-A strided";
    case MoeDecodeKernel::kFused: return "fused";
    case MoeDecodeKernel::kFusedSplit: return "fused split";
    case MoeDecodeKernel::kFusedSplitPdl: return "fused split pdl";
    case MoeDecodeKernel::kFusedSplit24Warps: return "fused split 24 warps";
    case MoeDecodeKernel::kFusedSplit24WarpsStaggered: return "fused split 24 warps staggered";
    case MoeDecodeKernel::kFusedSplitStaggered: return "fused split staggered";
    case MoeDecodeKernel::kWeightsAPdl: return "weights-A pdl";
    case MoeDecodeKernel::kWeightsAPdlL2: return "weights-A pdl l2";
    case MoeDecodeKernel::kWeightsAPdlL2All: return "weights-A pdl l2 all";
    case MoeDecodeKernel::kWeightsAPdlSplitK: return "weights-A pdl split-K";
    case MoeDecodeKernel::kWeightsAPdlF32: return "weights-A pdl f32-scale";
    case MoeDecodeKernel::kWeightsAPdlL2Stagger: return "weights-A pdl l2 staggered";
    case MoeDecodeKernel::kWeightsAPdlF32Stagger: return "weights-A pdl f32-scale staggered";
    case MoeDecodeKernel::kWeightsAPdlWgmma: return "weights-A pdl wgmma";
    case MoeDecodeKernel::kWeightsAPdlWgmma3: return "weights-A pdl wgmma 3 warpgroups";
    case MoeDecodeKernel::kWeightsAPdlRing: return "weights-A pdl ring";
    case MoeDecodeKernel::kWeightsAPdlRingL2: return "weights-A pdl ring l2";
    case MoeDecodeKernel::kWeightsAPdlRing1: return "weights-A pdl ring 1 chunk a warp";
    case MoeDecodeKernel::kWeightsAPdlRing1L2: return "weights-A pdl ring 1 chunk a warp l2";
    case MoeDecodeKernel::kWeightsAPdlQgmma: return "weights-A pdl e4m3 qgmma";
    case MoeDecodeKernel::kWeightsAPdlQgmmaWide: return "weights-A pdl e4m3 qgmma wide";
  }
  return "?";
}

// permute -> decode experts -> combine on the GPU vs `ref` (routed_reference of x); the error.
double run_decode_with(const Routing& r, int64_t tokens, int64_t k, int64_t begin, const HostExperts& h, const DevDecode& dw,
                       const std::vector<float>& x, const std::vector<float>& ref, const char* what, MoeDecodeKernel kernel,
                       int64_t capacity = 0) {
  // capacity: the buffers' rows (>= tokens * k; a larger one changes only what the kernels pick).
  const int64_t dim = h.dim, inter = h.inter, local = h.experts, cap = std::max(capacity, tokens * k);
  auto di = dev(r.ids);
  auto dwt = dev(r.weights), dx = dev(x);
  DeviceBuffer<int32_t> off(local + 1), sorted(cap), prow(cap);
  const MoePlan plan{off.get(), sorted.get(), prow.get()};
  DeviceBuffer<float> xs(cap * dim), a(cap * inter), os(cap * dim), y(tokens * dim);
  auto ws = zeroed_workspace(local, cap, inter);
  EXPECT_TRUE(moe_permute(di.get(), tokens, k, begin, local, dx.get(), dim, plan, xs.get(), nullptr).is_ok());
  EXPECT_TRUE(moe_expert_mlp_decode(dw.w, off.get(), local, cap, xs.get(), a.get(), os.get(), nullptr, kernel, workspace_of(ws)).is_ok());
  EXPECT_TRUE(moe_combine(os.get(), prow.get(), dwt.get(), tokens, k, dim, y.get(), nullptr).is_ok());
  const auto got = host(y);
  int64_t rows = 0;
  for (int32_t id : r.ids) rows += id >= begin && id < begin + local;
  const double err = nerr(got, ref);
  const MoeDecodeKernel ran = moe_decode_choice(dw.w, local, cap, true, kernel);
  std::printf("decode MoE %s (%s) %s: tokens=%lld local=%lld k=%lld rows=%lld dim=%lld inter=%lld: normalised error %.3g\n",
              kernel_name(kernel), kernel_name(ran), what,
              (long long)tokens, (long long)local, (long long)k, (long long)rows, (long long)dim, (long long)inter, err);
  EXPECT_GT(rows, 0) << what << ": the case should route some rows here";
  return err;
}

// Every kernel (and kAuto's choice) on the same inputs; the largest error.
double run_decode(const Routing& r, int64_t tokens, int64_t k, int64_t begin, const HostExperts& h, MoeActivation act, uint32_t seed,
                  const char* what) {
  // The CPU reference and the repacked weights once for all kernels: at the K3 shape they
  // are most of the test's time (per kernel, 9 of them, they overran a 35 s device call).
  const float beta = 4.0f, lb = 25.0f;
  const auto x = randn(tokens * h.dim, seed);
  const auto ref = routed_reference(h, r, tokens, k, begin, x, act, beta, lb);
  const DevDecode dw = upload_decode(h, act, beta, lb);
  double err = 0.0;
  for (MoeDecodeKernel kern : {MoeDecodeKernel::kStreamed, MoeDecodeKernel::kStaged, MoeDecodeKernel::kWeightsA, MoeDecodeKernel::kWeightsANoPrefetch, MoeDecodeKernel::kWeightsAStrided,
                               MoeDecodeKernel::kFused, MoeDecodeKernel::kFusedSplit, MoeDecodeKernel::kFusedSplitPdl, MoeDecodeKernel::kFusedSplit24Warps,
                               MoeDecodeKernel::kFusedSplit24WarpsStaggered, MoeDecodeKernel::kFusedSplitStaggered, MoeDecodeKernel::kWeightsAPdl,
                               MoeDecodeKernel::kWeightsAPdlL2, MoeDecodeKernel::kWeightsAPdlL2All, MoeDecodeKernel::kWeightsAPdlSplitK,
                               MoeDecodeKernel::kWeightsAPdlF32, MoeDecodeKernel::kWeightsAPdlL2Stagger, MoeDecodeKernel::kWeightsAPdlF32Stagger,
                               MoeDecodeKernel::kWeightsAPdlWgmma, MoeDecodeKernel::kWeightsAPdlWgmma3, MoeDecodeKernel::kWeightsAPdlRing,
                               MoeDecodeKernel::kWeightsAPdlRingL2, MoeDecodeKernel::kWeightsAPdlRing1, MoeDecodeKernel::kWeightsAPdlRing1L2,
                               MoeDecodeKernel::kAuto})
    err = std::max(err, run_decode_with(r, tokens, k, begin, h, dw, x, ref, what, kern));
  // The E4M3 form on the same weights in its own bit shuffle (and kAuto, which must take it there);
  // wide scales are refused.
  const DevDecode dq = upload_decode(h, act, beta, lb, Mxfp4DecodeBits::kFp8);
  if (dq.w.w1.wide_scales || dq.w.w3.wide_scales || dq.w.w2.wide_scales) {
    DeviceBuffer<int32_t> off(h.experts + 1);
    DeviceBuffer<float> buf(1);
    const Status st = moe_expert_mlp_decode(dq.w, off.get(), h.experts, 1, buf.get(), buf.get(), buf.get(), nullptr, MoeDecodeKernel::kWeightsAPdlQgmma);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
    return err;
  }
  const bool wide_fits = h.inter % 32 == 0 && h.dim % 64 == 0;
  EXPECT_EQ(moe_decode_choice(dq.w, h.experts, tokens * k, true),
            wide_fits && tokens * k >= kMoeDecodeQgmmaWideMinCapacity ? MoeDecodeKernel::kWeightsAPdlQgmmaWide : MoeDecodeKernel::kWeightsAPdlQgmma);
  for (MoeDecodeKernel kern : {MoeDecodeKernel::kWeightsAPdlQgmma, MoeDecodeKernel::kWeightsAPdlQgmmaWide, MoeDecodeKernel::kAuto}) {
    if (kern == MoeDecodeKernel::kWeightsAPdlQgmmaWide && (h.inter % 32 != 0 || h.dim % 64 != 0)) continue;
    err = std::max(err, run_decode_with(r, tokens, k, begin, h, dq, x, ref, what, kern));
  }
  // The wide form's items of up to 8 rows, which it takes from kMoeDecodeQgmmaMultiMinCapacity
  // pairs: the same routing with buffers of that many rows.
  if (wide_fits) {
    const std::string multi = std::string(what) + " (8-row items)";
    err = std::max(err, run_decode_with(r, tokens, k, begin, h, dq, x, ref, multi.c_str(), MoeDecodeKernel::kWeightsAPdlQgmmaWide,
                                        std::max<int64_t>(tokens * k, kMoeDecodeQgmmaMultiMinCapacity)));
  }
  return err;
}

TEST_F(MoeDecode, MatchesCpuAtK3ExpertShapeWithTop16) {
  // 8 local experts of 256 (the K3 expert, 3584 -> 3072 -> 3584, SiTU(4, 25)); batch 1 puts
  // one or two rows here, 64 a few per expert, some experts empty.
  const int64_t experts = 256, local = 8, k = 16;
  const HostExperts h = make_experts(local, 3072, 3584, 40, false);
  for (int64_t tokens : {1, 4, 64}) {
    const Routing r = route(tokens, experts, k, 41 + static_cast<uint32_t>(tokens));
    const int64_t begin = std::min<int64_t>(r.ids[0], experts - local);  // token 0's first expert is local
    const std::string what = "K3 top-16 B=" + std::to_string(tokens);
    EXPECT_LT(run_decode(r, tokens, k, begin, h, MoeActivation::kSiTU, 42, what.c_str()), 1e-2);
  }
}

TEST_F(MoeDecode, SkewedRoutingOneRowAndEmptyExperts) {
  const int64_t local = 6, begin = 12;
  const HostExperts h = make_experts(local, 256, 384, 50, true);
  // 40 tokens, k = 2: every token's first pick is local expert 3 (three row passes of
  // 16, 16, 8), the second another rank's expert; experts 0-2, 4, 5 get nothing.
  Routing skew{std::vector<int32_t>(80), std::vector<float>(80)};
  for (int t = 0; t < 40; ++t) skew.ids[2 * t] = begin + 3, skew.ids[2 * t + 1] = 100 + t, skew.weights[2 * t] = 0.7f, skew.weights[2 * t + 1] = 0.3f;
  EXPECT_LT(run_decode(skew, 40, 2, begin, h, MoeActivation::kSiTU, 51, "skewed"), 1e-2);
  Routing one{{static_cast<int32_t>(begin + 5)}, {1.0f}};
  EXPECT_LT(run_decode(one, 1, 1, begin, h, MoeActivation::kSiLU, 52, "one row"), 1e-2);
  // Uniform real routing, both activations, 9..16 rows per pass in places.
  const Routing r = route(30, 8, 4, 53);
  const HostExperts h8 = make_experts(8, 128, 256, 54, true);
  EXPECT_LT(run_decode(r, 30, 4, 0, h8, MoeActivation::kSiLU, 55, "uniform SiLU"), 1e-2);
  EXPECT_LT(run_decode(r, 30, 4, 0, h8, MoeActivation::kSiTU, 56, "uniform SiTU"), 1e-2);
}

// Small batches on an expert wide enough that the gate/up launch has 128 units an expert (inter
// 2048) and 132 CTAs: B = 1 touches one expert (one unit a CTA: the staggered start settles and
// issues nothing more, 4 CTAs idle), B = 2 two (two units a CTA), B = 3 three, two rows on one of
// them (three units a CTA, runs across expert boundaries); the other local experts stay empty.
// Dim 256 (2 chunks): 14 of 16 warps load no gate/up words, which the settle step must allow.
TEST_F(MoeDecode, SmallBatchFewUnitsSkewedAndEmptyExperts) {
  const int64_t local = 4, begin = 8, k = 2;
  const HostExperts h = make_experts(local, 2048, 256, 70, true);
  const std::vector<std::vector<int32_t>> picks = {{1}, {1, 3}, {3, 3, 0, 1}};  // local expert of token t's first pick
  for (size_t i = 0; i < picks.size(); ++i) {
    const int64_t tokens = static_cast<int64_t>(std::min<size_t>(picks[i].size(), 3));
    Routing r{std::vector<int32_t>(tokens * k), std::vector<float>(tokens * k)};
    for (int64_t t = 0; t < tokens; ++t) {
      r.ids[t * k] = static_cast<int32_t>(begin + picks[i][t]), r.weights[t * k] = 0.6f;
      // The second pick: off this rank, except B = 3's last token, whose second pick is local expert picks[2][3].
      const bool local_second = i == 2 && t == tokens - 1;
      r.ids[t * k + 1] = local_second ? static_cast<int32_t>(begin + picks[i][3]) : static_cast<int32_t>(100 + t);
      r.weights[t * k + 1] = 0.4f;
    }
    const std::string what = "small batch B=" + std::to_string(tokens);
    EXPECT_LT(run_decode(r, tokens, k, begin, h, MoeActivation::kSiTU, 71 + static_cast<uint32_t>(i), what.c_str()), 1e-2);
  }
}

TEST_F(MoeDecode, ScalesAboveTwoTakeTheTwoMultiplyPath) {
  const HostExperts h = make_experts(4, 128, 256, 60, false, 124, 10);  // scale bytes 124..133
  const Routing r = route(12, 4, 2, 61);
  EXPECT_LT(run_decode(r, 12, 2, 0, h, MoeActivation::kSiLU, 62, "wide scales"), 1e-2);
}

// The fused kernel's queue and counters (the caller's workspace) are reset by the last CTA
// of each launch: a second, third (eager) and graph-replayed launch must redo all the work,
// bit for bit (the reduction order is fixed, whichever CTA claims a unit), and leave the
// workspace zero. Skewed rows (several passes), empty experts, and a different expert
// count between calls. Every fused form (kFused, the split forms, 16 or 24 MMA warps); the graph
// holds permute -> decode and its replays start from cleared permute outputs, so a
// programmatic dependent launch that read them before the permute finished would miss rows.
void fused_repeats_and_replays(MoeDecodeKernel kern);

// The two-launch PDL forms (kWeightsAPdl*) too: their down launch may start before gate/up
// ends, so the replays also clear the activations, which a down CTA reading them before its
// griddepcontrol.wait would take from the last run.
TEST_F(MoeDecode, FusedKernelRepeatsAndReplaysFromAGraph) {
  for (MoeDecodeKernel kern : {MoeDecodeKernel::kFused, MoeDecodeKernel::kFusedSplit, MoeDecodeKernel::kFusedSplitPdl,
                               MoeDecodeKernel::kFusedSplit24Warps, MoeDecodeKernel::kFusedSplit24WarpsStaggered,
                               MoeDecodeKernel::kFusedSplitStaggered, MoeDecodeKernel::kWeightsAPdl, MoeDecodeKernel::kWeightsAPdlL2,
                               MoeDecodeKernel::kWeightsAPdlL2All, MoeDecodeKernel::kWeightsAPdlSplitK, MoeDecodeKernel::kWeightsAPdlF32,
                               MoeDecodeKernel::kWeightsAPdlL2Stagger, MoeDecodeKernel::kWeightsAPdlF32Stagger,
                               MoeDecodeKernel::kWeightsAPdlWgmma, MoeDecodeKernel::kWeightsAPdlWgmma3, MoeDecodeKernel::kWeightsAPdlRing,
                               MoeDecodeKernel::kWeightsAPdlRingL2, MoeDecodeKernel::kWeightsAPdlRing1, MoeDecodeKernel::kWeightsAPdlRing1L2,
                               MoeDecodeKernel::kWeightsAPdlQgmma, MoeDecodeKernel::kWeightsAPdlQgmmaWide}) {
    SCOPED_TRACE(kernel_name(kern));
    fused_repeats_and_replays(kern);
  }
}

void fused_repeats_and_replays(MoeDecodeKernel kern) {
  const int64_t local = 6, tokens = 20, k = 2, cap = tokens * k, dim = 384, inter = 256;
  const HostExperts h = make_experts(local, inter, dim, 80, true);
  Routing r{std::vector<int32_t>(cap), std::vector<float>(cap, 0.5f)};
  for (int t = 0; t < tokens; ++t) r.ids[2 * t] = 1, r.ids[2 * t + 1] = t % 3 == 0 ? 4 : 9;  // experts 0, 2, 3, 5 empty
  DevDecode dw = upload_decode(h, MoeActivation::kSiTU, 4.0f, 25.0f,
                               kern == MoeDecodeKernel::kWeightsAPdlQgmma || kern == MoeDecodeKernel::kWeightsAPdlQgmmaWide
                                   ? Mxfp4DecodeBits::kFp8
                                   : Mxfp4DecodeBits::kBf16);
  auto di = dev(r.ids);
  auto dx = dev(randn(tokens * dim, 81));
  DeviceBuffer<int32_t> off(local + 1), sorted(cap), prow(cap);
  const MoePlan plan{off.get(), sorted.get(), prow.get()};
  DeviceBuffer<float> xs(cap * dim), a(cap * inter), os(cap * dim);
  auto ws = zeroed_workspace(local, cap, inter);
  // The queue words must come back zero; split-K's partial sums past them need not.
  const size_t queue_words = moe_decode_workspace_bytes(local) / sizeof(uint32_t);
  const std::vector<uint32_t> zero_ws(queue_words, 0u);
  auto queue = [&] {
    auto v = host(ws);
    v.resize(queue_words);
    return v;
  };
  // The output starts as a non-zero pattern (0x3f3f3f3f = 0.747) before every call: split-K
  // adds into output rows its gate/up launch zeroes, and rows past the routed ones keep it.
  ASSERT_EQ(cudaMemset(os.get(), 0x3f, cap * dim * sizeof(float)), cudaSuccess);
  ASSERT_TRUE(moe_permute(di.get(), tokens, k, 0, local, dx.get(), dim, plan, xs.get(), nullptr).is_ok());
  auto decode = [&](cudaStream_t st, int64_t experts) {
    return moe_expert_mlp_decode(dw.w, off.get(), experts, cap, xs.get(), a.get(), os.get(), st, kern, workspace_of(ws));
  };
  ASSERT_TRUE(decode(nullptr, local).is_ok());
  const auto first = host(os);
  EXPECT_EQ(queue(), zero_ws) << "the first launch left its queue state behind";
  const auto first_act = host(a);
  float peak = 0.0f;
  for (float v : first) peak = std::max(peak, std::fabs(v));
  ASSERT_GT(peak, 0.0f);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cudaMemset(os.get(), 0x3f, cap * dim * sizeof(float)) == cudaSuccess);
    ASSERT_TRUE(cudaMemset(a.get(), 0, cap * inter * sizeof(float)) == cudaSuccess);
    ASSERT_TRUE(decode(nullptr, i == 0 ? local : 5).is_ok());  // expert 5 is empty: the same rows
    EXPECT_EQ(host(os), first) << "eager launch " << i + 2;
    EXPECT_EQ(host(a), first_act) << "eager launch " << i + 2;
    EXPECT_EQ(queue(), zero_ws) << "eager launch " << i + 2;
  }
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status permuted = moe_permute(di.get(), tokens, k, 0, local, dx.get(), dim, plan, xs.get(), st);
  const Status captured = decode(st, local);
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_TRUE(permuted.is_ok()) << permuted.to_string();
  ASSERT_TRUE(captured.is_ok()) << captured.to_string();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(cudaMemsetAsync(os.get(), 0x3f, cap * dim * sizeof(float), st), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(off.get(), 0, (local + 1) * sizeof(int32_t), st), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(xs.get(), 0, cap * dim * sizeof(float), st), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(a.get(), 0, cap * inter * sizeof(float), st), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(host(os), first) << "graph replay " << i + 1;
    EXPECT_EQ(queue(), zero_ws) << "graph replay " << i + 1;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// Two fused calls at once (two streams, as two roles sharing a GPU would), each with its
// own workspace, different experts and rows: each must give the bits it gives alone, eager
// and from graphs replayed back to back without a host sync. With one shared queue the
// second grid would claim the first's units (or start from a counter not yet reset), and
// its outputs would miss rows. Each call is large enough (K3 shape, 1024 pairs, about 150 us
// on an H200) that the two grids overlap at least in their tails.
TEST_F(MoeDecode, FusedCallsOnTwoStreamsWithSeparateWorkspaces) {
  const int64_t experts = 256, local = 8, k = 16, tokens = 64, cap = tokens * k, dim = 3584, inter = 3072;
  struct Call {
    DevDecode dw;
    DeviceBuffer<int32_t> off, sorted, prow;
    DeviceBuffer<float> xs, a, os;
    DeviceBuffer<uint32_t> ws;
    std::vector<float> solo;
    cudaStream_t st = nullptr;
  };
  Call calls[2];
  for (int c = 0; c < 2; ++c) {
    Call& cl = calls[c];
    const HostExperts h = make_experts(local, inter, dim, 90 + c, false);
    cl.dw = upload_decode(h, MoeActivation::kSiTU, 4.0f, 25.0f);
    const Routing r = route(tokens, experts, k, 92 + c);
    auto di = dev(r.ids);
    auto dx = dev(randn(tokens * dim, 94 + c));
    ASSERT_TRUE(cl.off.resize(local + 1).is_ok() && cl.sorted.resize(cap).is_ok() && cl.prow.resize(cap).is_ok());
    ASSERT_TRUE(cl.xs.resize(cap * dim).is_ok() && cl.a.resize(cap * inter).is_ok() && cl.os.resize(cap * dim).is_ok());
    ASSERT_TRUE(cl.ws.upload(std::vector<uint32_t>(moe_decode_workspace_bytes(local) / sizeof(uint32_t), 0u)).is_ok());
    const int64_t begin = std::min<int64_t>(r.ids[0], experts - local);
    const MoePlan plan{cl.off.get(), cl.sorted.get(), cl.prow.get()};
    ASSERT_TRUE(moe_permute(di.get(), tokens, k, begin, local, dx.get(), dim, plan, cl.xs.get(), nullptr).is_ok());
    ASSERT_EQ(cudaStreamCreateWithFlags(&cl.st, cudaStreamNonBlocking), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the permutes ran on the legacy stream
  for (MoeDecodeKernel kern : {MoeDecodeKernel::kFused, MoeDecodeKernel::kFusedSplit24Warps}) {
    SCOPED_TRACE(kernel_name(kern));
    auto decode = [&](Call& cl) {
      return moe_expert_mlp_decode(cl.dw.w, cl.off.get(), local, cap, cl.xs.get(), cl.a.get(), cl.os.get(), cl.st, kern, workspace_of(cl.ws));
    };
    for (Call& cl : calls) {  // alone
      ASSERT_TRUE(decode(cl).is_ok());
      cl.solo = host(cl.os);
      float peak = 0.0f;
      for (float v : cl.solo) peak = std::max(peak, std::fabs(v));
      ASSERT_GT(peak, 0.0f);
    }
    auto clear = [&] {
      for (Call& cl : calls) ASSERT_EQ(cudaMemset(cl.os.get(), 0, cap * dim * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    };
    auto expect_solo = [&](const char* what) {
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(host(calls[c].os), calls[c].solo) << what << ", call " << c;
        EXPECT_EQ(host(calls[c].ws), std::vector<uint32_t>(calls[c].ws.size(), 0u)) << what << ", call " << c;
      }
    };
    clear();
    for (int round = 0; round < 3; ++round)  // eager, queued back to back on both streams
      for (Call& cl : calls) ASSERT_TRUE(decode(cl).is_ok());
    expect_solo("eager, concurrent");
    cudaGraphExec_t exec[2];
    for (int c = 0; c < 2; ++c) {
      cudaGraph_t graph;
      ASSERT_EQ(cudaStreamBeginCapture(calls[c].st, cudaStreamCaptureModeGlobal), cudaSuccess);
      const Status captured = decode(calls[c]);
      ASSERT_EQ(cudaStreamEndCapture(calls[c].st, &graph), cudaSuccess);
      ASSERT_TRUE(captured.is_ok()) << captured.to_string();
      ASSERT_EQ(cudaGraphInstantiate(&exec[c], graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    clear();
    for (int round = 0; round < 3; ++round)
      for (int c = 0; c < 2; ++c) ASSERT_EQ(cudaGraphLaunch(exec[c], calls[c].st), cudaSuccess);
    expect_solo("graph replays, concurrent");
    for (int c = 0; c < 2; ++c) cudaGraphExecDestroy(exec[c]);
  }
  for (Call& cl : calls) cudaStreamDestroy(cl.st);
}

// Every fused form needs a workspace of moe_decode_workspace_bytes(local) bytes; kAuto takes one only
// with one and from kMoeDecodeFusedMinCapacity rows (the rule is checked without a launch).
TEST_F(MoeDecode, FusedNeedsAWorkspaceAndAutoPicksItByCapacity) {
  const int64_t local = 4, tokens = 12, k = 2, cap = tokens * k;
  const HostExperts h = make_experts(local, 128, 256, 100, true);
  DevDecode dw = upload_decode(h, MoeActivation::kSiLU, 1.0f, 0.0f);
  const Routing r = route(tokens, local, k, 101);
  auto di = dev(r.ids);
  auto dx = dev(randn(tokens * 256, 102));
  DeviceBuffer<int32_t> off(local + 1), sorted(cap), prow(cap);
  const MoePlan plan{off.get(), sorted.get(), prow.get()};
  DeviceBuffer<float> xs(cap * 256), a(cap * 128), os(cap * 256);
  ASSERT_TRUE(moe_permute(di.get(), tokens, k, 0, local, dx.get(), 256, plan, xs.get(), nullptr).is_ok());
  auto ws = zeroed_workspace(local);
  for (MoeDecodeKernel kern : {MoeDecodeKernel::kFused, MoeDecodeKernel::kFusedSplit, MoeDecodeKernel::kFusedSplitPdl,
                               MoeDecodeKernel::kFusedSplit24Warps, MoeDecodeKernel::kFusedSplit24WarpsStaggered,
                               MoeDecodeKernel::kFusedSplitStaggered}) {
    SCOPED_TRACE(kernel_name(kern));
    auto call = [&](MoeDecodeWorkspace w) {
      return moe_expert_mlp_decode(dw.w, off.get(), local, cap, xs.get(), a.get(), os.get(), nullptr, kern, w);
    };
    EXPECT_FALSE(call({}).is_ok());
    EXPECT_FALSE(call({ws.get(), moe_decode_workspace_bytes(local) - 4}).is_ok());
    EXPECT_TRUE(call(workspace_of(ws)).is_ok());
  }
  {  // split-K: the queue words are not enough, its partial sums need the larger size
    auto big = zeroed_workspace(local, cap, 128);
    auto call = [&](MoeDecodeWorkspace w) {
      return moe_expert_mlp_decode(dw.w, off.get(), local, cap, xs.get(), a.get(), os.get(), nullptr, MoeDecodeKernel::kWeightsAPdlSplitK, w);
    };
    EXPECT_FALSE(call({}).is_ok());
    EXPECT_FALSE(call(workspace_of(ws)).is_ok());
    EXPECT_FALSE(call({big.get(), moe_decode_splitk_workspace_bytes(local, cap, 128) - 4}).is_ok());
    EXPECT_TRUE(call(workspace_of(big)).is_ok());
  }
  // Which fused form kAuto takes is the measured rule's business (moe_decode_sm90.cu);
  // that it needs the workspace and the capacity is this test's.
  auto fused = [](MoeDecodeKernel k) {
    return k == MoeDecodeKernel::kFused || k == MoeDecodeKernel::kFusedSplit || k == MoeDecodeKernel::kFusedSplitPdl ||
           k == MoeDecodeKernel::kFusedSplit24Warps || k == MoeDecodeKernel::kFusedSplit24WarpsStaggered ||
           k == MoeDecodeKernel::kFusedSplitStaggered;
  };
  EXPECT_TRUE(fused(moe_decode_choice(dw.w, local, kMoeDecodeFusedMinCapacity, true)));
  EXPECT_FALSE(fused(moe_decode_choice(dw.w, local, kMoeDecodeFusedMinCapacity, false)));
  EXPECT_FALSE(fused(moe_decode_choice(dw.w, local, kMoeDecodeFusedMinCapacity - 1, true)));
  EXPECT_EQ(moe_decode_choice(dw.w, local, 64, true, MoeDecodeKernel::kStaged), MoeDecodeKernel::kStaged);
}

TEST_F(MoeDecode, NoLocalRowsLeavesTheOutputZero) {
  const int64_t tokens = 3, k = 2, local = 2;
  const HostExperts h = make_experts(local, 128, 128, 70, true);
  DevDecode dw = upload_decode(h, MoeActivation::kSiLU, 1.0f, 0.0f);
  Routing r{std::vector<int32_t>(tokens * k, 9), std::vector<float>(tokens * k, 0.5f)};
  auto di = dev(r.ids);
  auto dwt = dev(r.weights), dx = dev(randn(tokens * 128, 71));
  DeviceBuffer<int32_t> off(local + 1), sorted(tokens * k), prow(tokens * k);
  const MoePlan plan{off.get(), sorted.get(), prow.get()};
  DeviceBuffer<float> xs(tokens * k * 128), a(tokens * k * 128), os(tokens * k * 128), y(tokens * 128);
  ASSERT_TRUE(moe_permute(di.get(), tokens, k, 0, local, dx.get(), 128, plan, xs.get(), nullptr).is_ok());
  ASSERT_TRUE(moe_expert_mlp_decode(dw.w, off.get(), local, tokens * k, xs.get(), a.get(), os.get(), nullptr).is_ok());
  ASSERT_TRUE(moe_combine(os.get(), prow.get(), dwt.get(), tokens, k, 128, y.get(), nullptr).is_ok());
  EXPECT_EQ(host(y), std::vector<float>(tokens * 128, 0.0f));
}

// The finite E4M3 code nearest to v, ties to the even code, +-448 beyond (cvt.rn.satfinite): the
// codes of one sign ascend with their values, so the even code is the even mantissa.
uint32_t e4m3_round_host(float v) {
  const float a = std::fabs(v);
  uint32_t best = 0;
  double best_d = INFINITY;
  for (uint32_t c = 0; c <= 0x7Eu; ++c) {  // 0x7F is NaN
    const double d = std::fabs(double(e4m3_to_float(c)) - double(a));
    if (d < best_d || (d == best_d && (c & 1u) == 0)) best = c, best_d = d;
  }
  return (std::signbit(v) ? 0x80u : 0u) | best;
}

// The E4M3 forms stage each token value as hi = E4M3(x) and lo = E4M3(x - hi) (the residual in fp32),
// two values a conversion; against the host rule on exact codes, ties, their neighbours, subnormals,
// saturation and random values of every scale, and with the first value of a pair in the low byte.
TEST_F(MoeDecode, TokenHiLoPairsMatchTheHostE4m3Rounding) {
  std::vector<float> v;
  for (uint32_t c = 0; c <= 0x7Eu; ++c) {
    const float x = e4m3_to_float(c), next = c < 0x7Eu ? e4m3_to_float(c + 1) : 480.0f, mid = 0.5f * (x + next);
    for (float y : {x, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) v.push_back(y), v.push_back(-y);
  }
  for (float y : {448.5f, 479.9f, 480.0f, 481.0f, 1000.0f, 1e30f, 1e-12f, 1.9e-3f, 9.8e-4f}) v.push_back(y), v.push_back(-y);
  std::mt19937 g(2026);
  std::normal_distribution<float> n01;
  std::uniform_int_distribution<int> ex(-12, 9);
  for (int i = 0; i < 4096; ++i) v.push_back(std::ldexp(n01(g), ex(g)));
  std::uniform_real_distribution<float> staged(128.0f, 256.0f);  // the staging's scaled range
  for (int i = 0; i < 1024; ++i) v.push_back((i & 1) ? -staged(g) : staged(g));  // every list above is even: whole pairs
  const int64_t pairs = static_cast<int64_t>(v.size() / 2);
  auto din = dev(v);
  DeviceBuffer<uint32_t> dhi, dlo;
  ASSERT_TRUE(dhi.resize(pairs).is_ok());
  ASSERT_TRUE(dlo.resize(pairs).is_ok());
  ASSERT_TRUE(moe_decode_test::e4m3_hi_lo_pairs(din.get(), pairs, dhi.get(), dlo.get(), nullptr).is_ok());
  const auto hi = host(dhi), lo = host(dlo);
  int64_t bad = 0;
  for (int64_t i = 0; i < 2 * pairs; ++i) {
    const uint32_t want_hi = e4m3_round_host(v[i]);
    const uint32_t want_lo = e4m3_round_host(v[i] - e4m3_to_float(want_hi));
    const uint32_t got_hi = (hi[i / 2] >> (8 * (i % 2))) & 0xFFu, got_lo = (lo[i / 2] >> (8 * (i % 2))) & 0xFFu;
    if ((got_hi != want_hi || got_lo != want_lo) && bad++ < 5)
      ADD_FAILURE() << "value " << v[i] << ": hi " << got_hi << " lo " << got_lo << ", want " << want_hi << " / " << want_lo;
  }
  EXPECT_EQ(bad, 0) << "of " << 2 * pairs << " values";
}

}  // namespace
}  // namespace pdserve::cuda
