// The tensor-core MLA prefill (mla/mla_prefill.h): the plan on the CPU (runs everywhere), and the
// whole run (gather, up-projection, causal flash attention) against the model layer's fp32
// absorbed reference (ops::mla_attend_latent + W_vb) on fresh random inputs: ragged batches,
// chunks of 1, 63, 64, 65 tokens, prefixes ending mid-page; from fp32 pages and from bf16 pages
// (MlaPrefillArgs::cache_bf16: bit-identical outputs to the fp32 pages holding the same
// bf16-representable values, every variant). Skips the GPU part without sm_90.
//
// Bound: normalised error max|gpu - cpu| / max|cpu| <= 1.5e-2. The kernel rounds q, the latents,
// kv_b, the expanded K/V and the probabilities to bf16 (8-bit mantissa, 2^-9 relative) and
// accumulates in fp32; the measured errors are printed and recorded in docs/perf.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "pdserve/core/dtype.h"
#include "pdserve/ops/mla.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using ktest::dev;
using ktest::host;
using ktest::nerr;
using ktest::randn;

constexpr double kBound = 1.5e-2;

struct Dims {
  int64_t heads, nope, rope, v, lat, page;
};
struct SeqSpec {
  int64_t cached, fresh;
};

// The model layer's prefill math (detail::mla_layer) for the given q and cache, in fp32.
std::vector<float> reference(const Dims& d, const std::vector<SeqSpec>& specs, const std::vector<std::vector<int32_t>>& pages,
                             const std::vector<float>& q, const std::vector<float>& cache, const std::vector<float>& kv_b, float scale) {
  const int64_t qk = d.nope + d.rope, per_head = d.nope + d.v, ed = d.lat + d.rope;
  std::vector<float> out;
  std::vector<float> q_lat(d.heads * d.lat), q_rot(d.heads * d.rope), o_lat(d.heads * d.lat);
  int64_t row = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    ops::PagedLatentView view{cache.data(), d.page, ed, pages[s].data()};
    for (int64_t i = 0; i < specs[s].fresh; ++i, ++row) {
      std::fill(q_lat.begin(), q_lat.end(), 0.0f);
      for (int64_t h = 0; h < d.heads; ++h) {
        const float* qn = &q[(row * d.heads + h) * qk];
        for (int64_t k = 0; k < d.nope; ++k)
          for (int64_t j = 0; j < d.lat; ++j) q_lat[h * d.lat + j] += qn[k] * kv_b[(h * per_head + k) * d.lat + j];
        for (int64_t k = 0; k < d.rope; ++k) q_rot[h * d.rope + k] = qn[d.nope + k];
      }
      ops::mla_attend_latent(q_lat.data(), q_rot.data(), d.heads, d.lat, d.rope, view, specs[s].cached + i + 1, scale, o_lat.data());
      for (int64_t h = 0; h < d.heads; ++h)
        for (int64_t k = 0; k < d.v; ++k) {
          double acc = 0;
          for (int64_t j = 0; j < d.lat; ++j) acc += double(kv_b[(h * per_head + d.nope + k) * d.lat + j]) * o_lat[h * d.lat + j];
          out.push_back(static_cast<float>(acc));
        }
    }
  }
  return out;
}

// The kernel variants every GPU case runs: mma.sync with 128- and 64-row tiles, wgmma (overlapped,
// pingpong, serial, and the two forms fed by a TMA producer warp).
// All but the last run the default up-projection (wgmma); the last the mma.sync one.
struct Variant {
  int64_t tile_rows;
  MlaPrefillKernel kernel;
  const char* name;
  MlaPrefillExpand expand = kMlaPrefillDefaultExpand;
};
const Variant kVariants[] = {{128, MlaPrefillKernel::kMmaSync, "mma.sync 128-row"},
                             {64, MlaPrefillKernel::kMmaSync, "mma.sync 64-row"},
                             {128, MlaPrefillKernel::kWgmma, "wgmma 128-row"},
                             {128, MlaPrefillKernel::kWgmmaPingpong, "wgmma pingpong 128-row"},
                             {128, MlaPrefillKernel::kWgmmaSerial, "wgmma serial 128-row"},
                             {128, MlaPrefillKernel::kWgmmaTma, "wgmma tma-producer 128-row"},
                             {128, MlaPrefillKernel::kWgmmaTmaPingpong, "wgmma tma-producer pingpong 128-row"},
                             {128, MlaPrefillKernel::kWgmmaTmaPingpong, "wgmma tma-producer pingpong, mma.sync expand",
                              MlaPrefillExpand::kMmaSync}};

// One case's inputs and the fp32 reference. bf16_values: the cache holds bf16-representable
// values (each rounded once, core/dtype.h f32_to_bf16), cache16 their bf16 bits.
struct Case {
  std::vector<std::vector<int32_t>> pages;
  std::vector<MlaPrefillSeq> seqs;
  std::vector<float> cache, q, kv_b, want;
  std::vector<uint16_t> cache16;
  int64_t rows = 0;
  float scale = 1.0f;
};

Case make_case(const Dims& d, const std::vector<SeqSpec>& specs, uint32_t seed, bool bf16_values) {
  const int64_t qk = d.nope + d.rope, ed = d.lat + d.rope;
  Case c;
  int64_t total_pages = 0;
  for (const SeqSpec& s : specs) total_pages += (s.cached + s.fresh + d.page - 1) / d.page, c.rows += s.fresh;
  total_pages += 3;  // pages nobody owns: a wrong page id reads values the reference never sees
  std::vector<int32_t> ids(total_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(ids.begin(), ids.end(), gen);
  int64_t next = 0, row = 0;
  for (const SeqSpec& s : specs) {
    const int64_t np = (s.cached + s.fresh + d.page - 1) / d.page;
    c.pages.emplace_back(ids.begin() + next, ids.begin() + next + np);
    next += np;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    c.seqs.push_back({row, specs[i].fresh, specs[i].cached, c.pages[i].data()});
    row += specs[i].fresh;
  }
  c.cache = randn(total_pages * d.page * ed, seed + 1);
  if (bf16_values) {
    c.cache16.resize(c.cache.size());
    for (size_t i = 0; i < c.cache.size(); ++i) c.cache16[i] = f32_to_bf16(c.cache[i]), c.cache[i] = bf16_to_f32(c.cache16[i]);
  }
  c.q = randn(c.rows * d.heads * qk, seed + 2);
  c.kv_b = randn(d.heads * (d.nope + d.v) * d.lat, seed + 3, 1.0f / std::sqrt(static_cast<float>(d.lat)));
  c.scale = 1.0f / std::sqrt(static_cast<float>(qk));
  c.want = reference(d, specs, c.pages, c.q, c.cache, c.kv_b, c.scale);
  return c;
}

// The whole run on the device: from the fp32 pages (bf16_cache false) or the bf16 ones.
std::vector<float> run_gpu(const Dims& d, const Case& c, const Variant& var, bool bf16_cache) {
  MlaPrefillPlan plan;
  EXPECT_TRUE(build_mla_prefill_plan(c.seqs, d.page, &plan, var.tile_rows, var.kernel).is_ok());
  plan.expand = var.expand;
  auto dq = dev(c.q), dkvb = dev(c.kv_b);
  DeviceBuffer<float> dcache;
  DeviceBuffer<uint16_t> dcache16;
  EXPECT_TRUE(bf16_cache ? dcache16.upload(c.cache16).is_ok() : dcache.upload(c.cache).is_ok());
  auto dplan = dev(plan.image);
  auto dout = dev(std::vector<float>(c.rows * d.heads * d.v, NAN));  // NaN: a row never written fails
  MlaPrefillArgs a;
  a.q = dq.get(), a.kv_b = dkvb.get();
  if (bf16_cache)
    a.cache_bf16 = dcache16.get();
  else
    a.cache = dcache.get();
  a.heads = d.heads, a.nope = d.nope, a.rope = d.rope, a.v_dim = d.v, a.latent_dim = d.lat, a.scale = c.scale, a.out = dout.get();
  DeviceBuffer<unsigned char> ws(mla_prefill_workspace_bytes(a, plan.rows, plan.ctx_total));
  const Status st = mla_prefill_run(a, plan, dplan.get(), ws.get(), nullptr);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return host(dout);
}

// Random pages (shuffled ids, so no sequence's pages are contiguous), random cache, q and kv_b;
// runs both sides and returns the normalised error.
double run_case(const Dims& d, const std::vector<SeqSpec>& specs, uint32_t seed, const Variant& var) {
  const Case c = make_case(d, specs, seed, false);
  return nerr(run_gpu(d, c, var, false), c.want);
}

// The bf16 latent cache (MlaPrefillArgs::cache_bf16): for a cache of bf16-representable values,
// every variant's output from the bf16 pages is bit-identical to its output from the fp32 pages
// holding the same values, and within the bound of the fp32 reference on those values.
void bf16_cache_case(const Dims& d, const std::vector<SeqSpec>& specs, uint32_t seed, const char* what) {
  const Case c = make_case(d, specs, seed, true);
  for (const Variant& v : kVariants) {
    const auto from32 = run_gpu(d, c, v, false), from16 = run_gpu(d, c, v, true);
    const double e = nerr(from16, c.want);
    const bool same = from32.size() == from16.size() && std::memcmp(from32.data(), from16.data(), from32.size() * 4) == 0;
    std::printf("%s, bf16 cache, %s: normalised error %.3e, %s the fp32 cache's output\n", what, v.name, e,
                same ? "bit-identical to" : "DIFFERENT from");
    EXPECT_LE(e, kBound) << what << ", " << v.name;
    EXPECT_TRUE(same) << what << ", " << v.name << ": the bf16 cache's output differs from the fp32 cache's";
  }
}

TEST(MlaPrefillPlan, TilesCoverEveryRowLongestFirst) {
  std::vector<int32_t> p0 = {5, 2, 9}, p1 = {1, 7, 3, 4};
  // Seq 0: 1 new token after 100 cached (pages of 64); seq 1: 130 new tokens after 65 cached.
  std::vector<MlaPrefillSeq> seqs = {{0, 1, 100, p0.data()}, {1, 130, 65, p1.data()}};
  MlaPrefillPlan plan;
  ASSERT_TRUE(build_mla_prefill_plan(seqs, 64, &plan, /*tile_rows=*/64, MlaPrefillKernel::kMmaSync).is_ok());
  EXPECT_EQ(plan.seqs, 2);
  EXPECT_EQ(plan.tiles, 1 + 3);
  EXPECT_EQ(plan.ctx_total, 101 + 195);
  EXPECT_EQ(plan.rows, 131);
  const int32_t* tiles = plan.image.data() + 4 + 4 * 2;
  // Keys visited: seq 1's tiles 129 (rows 0..63), 193 (64..127), 195 (128, 129); seq 0's 101.
  const std::vector<int32_t> want = {1, 128, 1, 64, 1, 0, 0, 0};
  EXPECT_EQ(std::vector<int32_t>(tiles, tiles + 8), want);
  const int32_t* entries = tiles + 2 * plan.tiles;
  EXPECT_EQ(entries[0], 5 * 64);            // seq 0 position 0
  EXPECT_EQ(entries[99], 2 * 64 + 35);      // seq 0 position 99
  EXPECT_EQ(entries[101 + 64], 7 * 64);     // seq 1 position 64
  EXPECT_EQ(entries[101 + 194], 4 * 64 + 2);
}

TEST(MlaPrefillPlan, RejectsEmptyChunks) {
  std::vector<int32_t> p = {0};
  MlaPrefillPlan plan;
  EXPECT_FALSE(build_mla_prefill_plan({{0, 0, 0, p.data()}}, 64, &plan).is_ok());
  EXPECT_FALSE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 0, &plan).is_ok());
  EXPECT_FALSE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 64, &plan, 32).is_ok());  // no such kernel variant
  EXPECT_FALSE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 64, &plan, 64, MlaPrefillKernel::kWgmma).is_ok());
  EXPECT_FALSE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 64, &plan, 64).is_ok());  // the default is a wgmma form
  ASSERT_TRUE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 64, &plan).is_ok());
  EXPECT_EQ(plan.kernel, MlaPrefillKernel::kWgmmaTmaPingpong);  // the default, measured fastest (docs/perf.md)
  EXPECT_EQ(plan.expand, MlaPrefillExpand::kWgmma);
}

class MlaPrefill : public ktest::GpuTest {};

TEST_F(MlaPrefill, K3HeadDimsRaggedBatchMatchesCpu) {
  const Dims d{4, 128, 64, 128, 512, 64};
  // New sequences of 1, 63, 64, 65 tokens; a prefix ending mid-page; longer prefixes + chunks
  // (key tiles of 128 crossing the diagonal at several offsets, warpgroups with no rows).
  for (const Variant& v : kVariants) {
    const double e = run_case(d, {{0, 1}, {0, 63}, {0, 64}, {0, 65}, {32, 65}, {100, 130}, {0, 300}, {520, 197}}, 21, v);
    std::printf("k3 dims, 4 heads, ragged, %s: normalised error %.3e\n", v.name, e);
    EXPECT_LE(e, kBound) << v.name;
  }
}

TEST_F(MlaPrefill, K3PrefillRankTwentyFourHeads) {
  const Dims d{24, 128, 64, 128, 512, 64};
  for (const Variant& v : kVariants) {
    const double e = run_case(d, {{70, 129}, {0, 33}}, 31, v);
    std::printf("k3 dims, 24 heads, %s: normalised error %.3e\n", v.name, e);
    EXPECT_LE(e, kBound) << v.name;
  }
}

TEST_F(MlaPrefill, TinyModelDimsMatchCpu) {
  const Dims d{2, 16, 16, 16, 32, 16};
  // wgmma has no kernel for these dims: its plan falls back to mma.sync (still checked).
  for (const Variant& v : kVariants) {
    const double e = run_case(d, {{0, 1}, {0, 63}, {8, 64}, {17, 65}, {40, 3}, {5, 200}}, 41, v);
    std::printf("tiny dims, %s: normalised error %.3e\n", v.name, e);
    EXPECT_LE(e, kBound) << v.name;
  }
}

TEST_F(MlaPrefill, Bf16CacheK3RaggedBatchBitIdenticalAndMatchesCpu) {
  bf16_cache_case({4, 128, 64, 128, 512, 64}, {{0, 1}, {0, 63}, {0, 64}, {0, 65}, {32, 65}, {100, 130}, {0, 300}, {520, 197}}, 23,
                  "k3 dims, 4 heads, ragged");
}

TEST_F(MlaPrefill, Bf16CacheTinyDimsBitIdenticalAndMatchesCpu) {
  bf16_cache_case({2, 16, 16, 16, 32, 16}, {{0, 1}, {0, 63}, {8, 64}, {17, 65}, {40, 3}, {5, 200}}, 43, "tiny dims");
  // rope 14: the gather's element-wise path (not 4 values an access), both caches.
  bf16_cache_case({2, 18, 14, 16, 32, 16}, {{0, 1}, {8, 64}, {17, 65}, {5, 100}}, 47, "tiny dims, rope 14");
}

// The up-projection GEMM alone (step 2), both forms, against an fp64 product of the same bf16
// inputs: every K nope / V element written once (outputs pre-filled with NaN), the rope tail of K
// left alone (pre-filled with a marker), a partial last token block, and the wgmma form's
// persistent CTAs each walking several tiles (grid capped at 4 CTAs for 9 tiles).
uint16_t bf16_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t h) {
  const uint32_t b = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

TEST_F(MlaPrefill, ExpandGemmMatchesCpuProduct) {
  constexpr int64_t ctx = 333, heads = 3, nope = 128, rope = 64, v = 128, lat = 512, qk = nope + rope, per_head = nope + v;
  std::vector<uint16_t> lat_h(ctx * lat), w_h(heads * per_head * lat);
  const auto lr = randn(lat_h.size(), 51), wr = randn(w_h.size(), 52, 1.0f / std::sqrt(float(lat)));
  for (size_t i = 0; i < lat_h.size(); ++i) lat_h[i] = bf16_bits(lr[i]);
  for (size_t i = 0; i < w_h.size(); ++i) w_h[i] = bf16_bits(wr[i]);
  std::vector<float> want_k(ctx * heads * nope), want_v(ctx * heads * v);
  double mag = 0;
  for (int64_t t = 0; t < ctx; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t n = 0; n < per_head; ++n) {
        double acc = 0;
        for (int64_t j = 0; j < lat; ++j) acc += double(bf16_value(lat_h[t * lat + j])) * bf16_value(w_h[(h * per_head + n) * lat + j]);
        (n < nope ? want_k[(t * heads + h) * nope + n] : want_v[(t * heads + h) * v + n - nope]) = static_cast<float>(acc);
        mag = std::max(mag, std::fabs(acc));
      }
  constexpr uint16_t kNan = 0x7fc0, kMarker = 0x3f80;  // bf16 NaN, 1.0
  std::vector<uint16_t> k_init(ctx * heads * qk, kNan);
  for (int64_t r = 0; r < ctx * heads; ++r) std::fill(k_init.begin() + r * qk + nope, k_init.begin() + (r + 1) * qk, kMarker);
  auto dlat = dev(lat_h), dw = dev(w_h);
  struct Form {
    const char* name;
    MlaPrefillExpand kind;
    int max_ctas;
  };
  for (const Form& f : {Form{"mma.sync", MlaPrefillExpand::kMmaSync, 0}, Form{"wgmma", MlaPrefillExpand::kWgmma, 0},
                        Form{"wgmma, 4 CTAs", MlaPrefillExpand::kWgmma, 4}}) {
    auto dk = dev(k_init), dv = dev(std::vector<uint16_t>(ctx * heads * v, kNan));
    const Status st = f.max_ctas ? mla_prefill_expand_wgmma(dlat.get(), dw.get(), ctx, heads, qk, lat, dk.get(), dv.get(), nullptr, f.max_ctas)
                                 : mla_prefill_expand_gemm(dlat.get(), dw.get(), ctx, heads, nope, rope, v, lat, dk.get(), dv.get(), f.kind, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const auto got_k = host(dk), got_v = host(dv);
    double err = 0;
    int64_t bad_tail = 0;
    for (int64_t r = 0; r < ctx * heads; ++r) {
      for (int64_t n = 0; n < nope; ++n) {
        const double e = std::fabs(double(bf16_value(got_k[r * qk + n])) - want_k[r * nope + n]);
        err = std::isnan(e) ? INFINITY : std::max(err, e);
      }
      for (int64_t n = nope; n < qk; ++n) bad_tail += got_k[r * qk + n] != kMarker;
      for (int64_t n = 0; n < v; ++n) {
        const double e = std::fabs(double(bf16_value(got_v[r * v + n])) - want_v[r * v + n]);
        err = std::isnan(e) ? INFINITY : std::max(err, e);
      }
    }
    std::printf("expand GEMM %s: normalised error %.3e (bf16 output rounding: <= %.1e)\n", f.name, err / mag, 1.0 / 256);
    EXPECT_LE(err / mag, 5e-3) << f.name;  // one bf16 rounding of the output (2^-9) plus fp32 sums
    EXPECT_EQ(bad_tail, 0) << f.name << ": the rope tail of K was overwritten";
  }
}

TEST(MlaPrefillNoGpu, UnsupportedDimsAreAnError) {
  MlaPrefillArgs a;
  a.heads = 2, a.nope = 16, a.rope = 8, a.v_dim = 16, a.latent_dim = 32;
  EXPECT_FALSE(mla_prefill_supported(16, 8, 16, 32));
  std::vector<int32_t> p = {0};
  MlaPrefillPlan plan;
  ASSERT_TRUE(build_mla_prefill_plan({{0, 1, 0, p.data()}}, 16, &plan).is_ok());
  EXPECT_FALSE(mla_prefill_run(a, plan, nullptr, nullptr, nullptr).is_ok());
  // Supported dims but no cache at all (neither fp32 nor bf16 pages): an error, before any launch.
  a.rope = 16, a.latent_dim = 32;
  ASSERT_TRUE(mla_prefill_supported(16, 16, 16, 32));
  EXPECT_FALSE(mla_prefill_run(a, plan, nullptr, nullptr, nullptr).is_ok());
  EXPECT_FALSE(mla_prefill_gather(a, plan, nullptr, nullptr, nullptr).is_ok());
}

}  // namespace
}  // namespace pdserve::cuda
