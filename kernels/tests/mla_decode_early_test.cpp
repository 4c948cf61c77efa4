// The split-KV MLA decode's early rings (mla/mla_decode.h, MlaDecodeRing::kLeanBlockEarly /
// kLeanEarly, MlaDecodeWork::new_tokens): against a kernel just before the run that still writes
// the newest token and q when the run starts (skips itself without an sm_90 GPU). Part of
// mla_decode_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "mla/mla_decode.h"
#include "pdserve/core/dtype.h"
#include "mla_decode_test_kernels.h"
#include "pdserve/ops/mla.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using ktest::dev;
using ktest::host;
using ktest::nerr;
using ktest::randn;

class MlaDecodeEarly : public ktest::GpuTest {};

// The early rings' contract (MlaDecodeWork::new_tokens): a kernel launched just before the run
// in the same stream (the run with pdl) lets the run launch at once, sleeps 50 us, then writes
// each row's newest token (latent + key) into the cache, and q. Every ring is run once before
// (its module loaded and opted in, so the run launches while the writer sleeps). Returns the
// error against the CPU reference over the NEW values; `ring` kAuto: the plan's pick. bf16: the
// cache is bf16 (MlaDecodeArgs::cache_bf16; old and new entries rounded, the reference on their
// exact fp32 values), `bf16_stages` its ring depth.
double late_writer_error(const std::vector<int32_t>& ctx, MlaDecodeRing ring, int64_t new_tokens, uint32_t seed, bool bf16 = false,
                         int bf16_stages = 0, MlaDecodeBf16Math math = MlaDecodeBf16Math::kCudaCores) {
  constexpr int64_t kH = 3, kL = 512, kR = 64, kE = kL + kR, kP = 64;
  const int64_t rows = ctx.size();
  int64_t max_pages = 1, used = 0;
  for (int32_t n : ctx) max_pages = std::max<int64_t>(max_pages, (n + kP - 1) / kP), used += (n + kP - 1) / kP;
  const int64_t pages = 2 * used + 3;
  std::vector<int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<int32_t> table(rows * max_pages, -1), dst;
  int64_t next = 0;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t p = 0; p < (ctx[b] + kP - 1) / kP; ++p) table[b * max_pages + p] = perm[next++];
  for (int64_t b = 0; b < rows; ++b)
    if (ctx[b] > 0) dst.push_back(table[b * max_pages + (ctx[b] - 1) / kP] * kP + (ctx[b] - 1) % kP);
  auto cache_old = randn(pages * kP * kE, seed + 1);
  auto round_bf16 = [&](std::vector<float>& v) {
    if (bf16)
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  };
  round_bf16(cache_old);
  const auto q_old = randn(rows * kH * kL, seed + 3), q_new = randn(rows * kH * kL, seed + 4), qr = randn(rows * kH * kR, seed + 5);
  // The newest entry: a quarter of head 0's new q (latent | key), so head 0 scores it ~10 above
  // the typical token and weighs it heavily at any context: a stale copy shows at 16K too.
  std::vector<float> fresh;
  for (int64_t b = 0; b < rows; ++b) {
    if (ctx[b] <= 0) continue;
    for (int64_t k = 0; k < kL; ++k) fresh.push_back(0.25f * q_new[b * kH * kL + k]);
    for (int64_t k = 0; k < kR; ++k) fresh.push_back(0.25f * qr[b * kH * kR + k]);
  }
  round_bf16(fresh);
  auto cache_new = cache_old;
  for (size_t i = 0; i < dst.size(); ++i) std::copy_n(&fresh[i * kE], kE, &cache_new[dst[i] * kE]);
  const float scale = 1.0f / std::sqrt(192.0f);
  std::vector<float> ref(rows * kH * kL, 0.0f);
  for (int64_t b = 0; b < rows; ++b) {
    if (ctx[b] <= 0) continue;
    ops::PagedLatentView view{cache_new.data(), kP, kE, &table[b * max_pages]};
    ops::mla_attend_latent(&q_new[b * kH * kL], &qr[b * kH * kR], kH, kL, kR, view, ctx[b], scale, &ref[b * kH * kL]);
  }
  const int64_t cap = mla_decode_plan_capacity(rows);
  MlaDecodePlan plan;
  EXPECT_TRUE(build_mla_decode_plan(ctx.data(), rows, kP, cap, &plan).is_ok());
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
  };
  auto dc16 = dev(to_bf16(bf16 ? cache_old : std::vector<float>(kE, 0.0f)));
  auto dfresh16 = dev(to_bf16(fresh.empty() ? std::vector<float>(kE, 0.0f) : fresh));
  auto dc = dev(bf16 ? std::vector<float>(kE, 0.0f) : cache_old), dql = dev(q_old), dqr = dev(qr), dqnew = dev(q_new);
  auto dfresh = dev(fresh.empty() ? std::vector<float>(kE, 0.0f) : fresh);
  auto dplan = dev(plan.image), dt = dev(table), dctx = dev(ctx), ddst = dev(dst.empty() ? std::vector<int32_t>{0} : dst);
  DeviceBuffer<float> out(rows * kH * kL), part_o(cap * kH * kL), part_lse(cap * kH);
  MlaDecodeArgs a;
  a.q_lat = dql.get(), a.q_rot = dqr.get(), a.cache = dc.get(), a.page_table = dt.get(), a.ctx_len = dctx.get();
  a.rows = rows, a.heads = kH, a.latent_dim = kL, a.rope_dim = kR, a.page_size = kP, a.max_pages = max_pages;
  a.scale = scale, a.o_lat = out.get();
  if (bf16) a.cache = nullptr, a.cache_bf16 = dc16.get();
  MlaDecodeWork w;
  w.plan = dplan.get(), w.capacity = cap, w.part_o = part_o.get(), w.part_lse = part_lse.get(), w.launch_items = plan.num_items;
  w.merge = plan.any_split || plan.any_empty, w.pdl = true, w.ring = ring == MlaDecodeRing::kAuto ? plan.ring : ring;
  w.merge_mode = plan.merge, w.trigger = plan.trigger, w.merge_slice = plan.merge_slice ? plan.merge_slice : 64;
  w.cache_pages = pages, w.new_tokens = new_tokens, w.bf16_math = math, w.bf16_stages = bf16_stages;
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  EXPECT_TRUE(mla_decode_run(a, w, stream).is_ok());  // loads and opts in the kernels (old values)
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(out.upload(std::vector<float>(rows * kH * kL, NAN)).is_ok());
  if (bf16)
    EXPECT_TRUE(mla_decode_test::late_writer(dc16.get(), ddst.get(), dfresh16.get(), static_cast<int64_t>(dst.size()), kE, dql.get(),
                                             dqnew.get(), rows * kH * kL, 50000, stream)
                    .is_ok());
  else
    EXPECT_TRUE(mla_decode_test::late_writer(dc.get(), ddst.get(), dfresh.get(), static_cast<int64_t>(dst.size()), kE, dql.get(), dqnew.get(),
                                             rows * kH * kL, 50000, stream)
                    .is_ok());
  EXPECT_TRUE(mla_decode_run(a, w, stream).is_ok());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  return nerr(host(out), ref);
}

const std::vector<std::vector<int32_t>> kLateWriterCtx = {{1024}, {4096}, {1, 63, 64, 65, 1024, 0, 2000}, {17, 300}, {16384}};

// Every ring that reads the cache after the wait, and the early rings with new_tokens 1 (decode),
// 3 and 20 (more than a 16-token item: the row's end read from the plan), match the new values.
TEST_F(MlaDecodeEarly, RingsReadTheNewestTokenAfterTheWait) {
  const MlaDecodeRing rings[] = {MlaDecodeRing::kAuto, MlaDecodeRing::kLeanBlockEarly, MlaDecodeRing::kLeanEarly,
                                 MlaDecodeRing::kLeanBlockPrefetch, MlaDecodeRing::kLean};
  uint32_t seed = 700;
  for (const auto& ctx : kLateWriterCtx)
    for (MlaDecodeRing ring : rings)
      for (int64_t nt : {1, 3, 20}) {
        if (nt != 1 && ring != MlaDecodeRing::kLeanBlockEarly && ring != MlaDecodeRing::kLeanEarly) continue;
        EXPECT_LT(late_writer_error(ctx, ring, nt, seed++), 2e-5) << "ring " << static_cast<int>(ring) << " new tokens " << nt << " rows "
                                                                  << ctx.size() << " first ctx " << ctx[0];
      }
}

// The same on a bf16 cache (MlaDecodeArgs::cache_bf16): the cuda-core early forms on 3 and 6 stages,
// the plan's pick and kLean's bf16 form; the tensor-core form (its early prologue for the early
// rings) within its bound (mla_decode_bf16_test.cpp: q and p in bf16 hi + lo).
TEST_F(MlaDecodeEarly, Bf16RingsReadTheNewestTokenAfterTheWait) {
  uint32_t seed = 850;
  for (MlaDecodeBf16Math math : {MlaDecodeBf16Math::kCudaCores, MlaDecodeBf16Math::kTensorCores}) {
    const bool tc = math == MlaDecodeBf16Math::kTensorCores;
    for (const auto& ctx : kLateWriterCtx)
      for (MlaDecodeRing ring : {MlaDecodeRing::kAuto, MlaDecodeRing::kLeanBlockEarly, MlaDecodeRing::kLeanEarly, MlaDecodeRing::kLean})
        for (int stages : {3, 6})
          for (int64_t nt : {1, 20}) {
            if (nt != 1 && ring != MlaDecodeRing::kLeanBlockEarly && ring != MlaDecodeRing::kLeanEarly) continue;
            if (tc && stages == 6) continue;  // the tensor-core ring has one depth
            EXPECT_LT(late_writer_error(ctx, ring, nt, seed++, true, stages, math), tc ? 5e-5 : 2e-5)
                << "bf16 ring " << static_cast<int>(ring) << (tc ? " tensor cores" : " cuda cores") << " stages " << stages
                << " new tokens " << nt << " rows " << ctx.size() << " first ctx " << ctx[0];
          }
  }
}

// The test above can fail: with new_tokens 0 the early rings copy every token of their first
// three tiles, the newest too, before the wait, while the writer still sleeps: the stale entry is
// attended. Not at 1 x 16K (the last set above): its items hold 4 tiles and the newest token is in
// the 4th, which even new_tokens 0 copies after the wait (measured: 3e-6 there, correct). Disabled
// (it shows a broken contract, and depends on the run starting within the writer's 50 us); run
// with --gtest_also_run_disabled_tests.
TEST_F(MlaDecodeEarly, DISABLED_LoadOfTheNewestTokenBeforeTheWaitIsCaught) {
  uint32_t seed = 800;
  for (const auto& ctx : std::vector<std::vector<int32_t>>(kLateWriterCtx.begin(), kLateWriterCtx.end() - 1))
    for (MlaDecodeRing ring : {MlaDecodeRing::kLeanBlockEarly, MlaDecodeRing::kLeanEarly})
      EXPECT_GT(late_writer_error(ctx, ring, 0, seed++), 1e-2) << "ring " << static_cast<int>(ring) << " rows " << ctx.size() << " first ctx "
                                                               << ctx[0];
}

}  // namespace
}  // namespace pdserve::cuda
