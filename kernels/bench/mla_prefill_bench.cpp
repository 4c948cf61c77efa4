// Tensor-core MLA prefill (mla/mla_prefill.h) at the K3 prefill rank: 24 heads, qk 192 / v 128,
// latent 512 + key 64 fp32 per cached token, pages of 64 (shuffled ids).
// Cases: one sequence, `new` tokens after `cached` tokens already in the pages.
// FLOPs (the convention of FlashAttention's causal benchmarks, counted exactly): each
// (query, key) pair a query actually attends to costs 2 x (192 + 128) per head; pairs =
// sum over new tokens i of (cached + i + 1). Floor = FLOPs / 790 TFLOP/s (dense bf16).
// Reported: the attention step alone (on bf16 Q/K/V already expanded; mma.sync with 128-row
// tiles and 64-row tiles, and wgmma), the whole run (gather +
// up-projection GEMM + attention), and the up-projection's own FLOPs (ctx x 512 x 24*256 x 2).
// Then the up-projection GEMM alone in both forms (mma.sync, wgmma) against the floor, and the
// whole run with each (the attention at its default).
//   [MLA_PREFILL_FORMS=wgmma-pingpong,wgmma-tma-pingpong] [MLA_PREFILL_NO_OLD=1] mla_prefill_bench [cached new]...
//   (default: 8192 8192, 16384 8192 and 0 8192; every wgmma form)
//   mla_prefill_bench --cache-bf16 [cached new]...: the bf16 latent cache against the fp32 one
//   (the gather alone, steps 1-2; default 16384 8192) and mla_write_latents vs _bf16 at 256 and
//   8192 rows (bench_cache_bf16 / bench_write_latents below).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "bench/bench_util.h"
#include "mla/mla.h"
#include "mla/mla_decode.h"
#include "mla/mla_prefill.h"

using namespace pdserve::cuda;
using namespace pdserve::cuda::bench;

namespace {

constexpr int64_t kHeads = 24, kNope = 128, kRope = 64, kQk = 192, kV = 128, kLat = 512, kPage = 64;

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    out[i] = static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);  // round to nearest even
  }
  return out;
}

template <typename F>
double time_ms(F&& f, int reps) {
  for (int i = 0; i < 2; ++i) f();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms[r], a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_case(int64_t cached, int64_t fresh) {
  const int64_t ctx = cached + fresh, np = (ctx + kPage - 1) / kPage;
  std::vector<int32_t> pages(np);
  std::iota(pages.begin(), pages.end(), 0);
  std::mt19937 gen(3);
  std::shuffle(pages.begin(), pages.end(), gen);
  MlaPrefillPlan plan, plan64;
  check(build_mla_prefill_plan({{0, fresh, cached, pages.data()}}, kPage, &plan, 128, MlaPrefillKernel::kMmaSync), "plan");
  check(build_mla_prefill_plan({{0, fresh, cached, pages.data()}}, kPage, &plan64, 64, MlaPrefillKernel::kMmaSync), "plan");
  auto dplan = upload(plan.image);
  auto dplan64 = upload(plan64.image);
  auto cache = upload(randn(np * kPage * (kLat + kRope), 1));
  auto q = upload(randn(fresh * kHeads * kQk, 2));
  std::vector<float> w = randn(kHeads * (kNope + kV) * kLat, 3);
  for (float& x : w) x *= 1.0f / std::sqrt(static_cast<float>(kLat));
  auto kv_b = upload(w);
  DeviceBuffer<float> out;
  check(out.resize(fresh * kHeads * kV), "out");
  MlaPrefillArgs a;
  a.q = q.get(), a.cache = cache.get(), a.kv_b = kv_b.get(), a.heads = kHeads, a.nope = kNope, a.rope = kRope, a.v_dim = kV;
  a.latent_dim = kLat, a.scale = 1.0f / std::sqrt(static_cast<float>(kQk)), a.out = out.get();
  DeviceBuffer<unsigned char> ws(mla_prefill_workspace_bytes(a, plan.rows, plan.ctx_total));
  // The attention alone, on its own bf16 inputs (random, the shapes the run expands to).
  auto qb = upload(to_bf16_bits(randn(fresh * kHeads * kQk, 4)));
  auto kb = upload(to_bf16_bits(randn(ctx * kHeads * kQk, 5)));
  auto vb = upload(to_bf16_bits(randn(ctx * kHeads * kV, 6)));

  double pairs = 0;
  for (int64_t i = 0; i < fresh; ++i) pairs += static_cast<double>(cached + i + 1);
  const double attn_flops = pairs * kHeads * 2.0 * (kQk + kV);
  const double expand_flops = static_cast<double>(ctx) * kLat * kHeads * (kNope + kV) * 2.0;
  const double t_attn = time_ms([&] { check(mla_prefill_attend(qb.get(), kb.get(), vb.get(), kHeads, kQk, kV, a.scale, plan, dplan.get(), out.get(), nullptr), "attend"); }, 10);
  const double t_attn64 = time_ms([&] { check(mla_prefill_attend(qb.get(), kb.get(), vb.get(), kHeads, kQk, kV, a.scale, plan64, dplan64.get(), out.get(), nullptr), "attend"); }, 10);
  const double t_run = time_ms([&] { check(mla_prefill_run(a, plan, dplan.get(), ws.get(), nullptr), "run"); }, 10);
  const double floor_ms = attn_flops / g_flops * 1e3;
  std::printf("cached %6lld new %6lld heads %lld | attention %8.3f ms %6.1f TFLOP/s (%.2f of 790 floor %.3f ms) | "
              "whole run %8.3f ms %6.1f TFLOP/s-attn-equiv | gather+expand %7.3f ms (expand %.1f GFLOP)\n",
              static_cast<long long>(cached), static_cast<long long>(fresh), static_cast<long long>(kHeads), t_attn,
              attn_flops / t_attn * 1e-9, floor_ms / t_attn, floor_ms, t_run, attn_flops / t_run * 1e-9, t_run - t_attn,
              expand_flops * 1e-9);
  std::printf("    attention with 64-row tiles (4 warps, 2 CTAs an SM): %8.3f ms %6.1f TFLOP/s\n", t_attn64, attn_flops / t_attn64 * 1e-9);
  std::fflush(stdout);
  // The wgmma forms on the same inputs; each output is compared with mma.sync's (bf16 in, fp32 out).
  {
    check(mla_prefill_attend(qb.get(), kb.get(), vb.get(), kHeads, kQk, kV, a.scale, plan, dplan.get(), out.get(), nullptr), "attend");
    std::vector<float> ref(fresh * kHeads * kV), got(ref.size());
    check(cuda_status(cudaMemcpy(ref.data(), out.get(), ref.size() * 4, cudaMemcpyDeviceToHost), "copy"), "copy");
    DeviceBuffer<float> out_wg;
    check(out_wg.resize(fresh * kHeads * kV), "out");
    // MLA_PREFILL_FORMS (comma-separated names below) picks forms at run time; unset: all of them.
    const std::pair<MlaPrefillKernel, const char*> all_forms[] = {{MlaPrefillKernel::kWgmma, "wgmma"},
                                                                   {MlaPrefillKernel::kWgmmaPingpong, "wgmma-pingpong"},
                                                                   {MlaPrefillKernel::kWgmmaSerial, "wgmma-serial"},
                                                                   {MlaPrefillKernel::kWgmmaTma, "wgmma-tma"},
                                                                   {MlaPrefillKernel::kWgmmaTmaPingpong, "wgmma-tma-pingpong"}};
    const char* pick = std::getenv("MLA_PREFILL_FORMS");
    std::vector<std::pair<MlaPrefillKernel, const char*>> forms;
    for (const auto& f : all_forms) {
      const std::string list = pick ? "," + std::string(pick) + "," : "";
      if (!pick || list.find("," + std::string(f.second) + ",") != std::string::npos) forms.push_back(f);
    }
    for (const auto& [kind, name] : forms) {
      MlaPrefillPlan pw;
      check(build_mla_prefill_plan({{0, fresh, cached, pages.data()}}, kPage, &pw, 128, kind), "plan");
      auto dpw = upload(pw.image);
      check(cudaMemset(out_wg.get(), 0xff, got.size() * 4), "memset");  // NaN: a row never written shows
      check(mla_prefill_attend(qb.get(), kb.get(), vb.get(), kHeads, kQk, kV, a.scale, pw, dpw.get(), out_wg.get(), nullptr), "attend wgmma");
      check(cuda_status(cudaMemcpy(got.data(), out_wg.get(), got.size() * 4, cudaMemcpyDeviceToHost), "copy"), "copy");
      double diff = 0, mag = 0;
      bool finite = true;
      for (size_t i = 0; i < ref.size(); ++i) {
        finite = finite && std::isfinite(got[i]);
        diff = std::max(diff, static_cast<double>(std::fabs(got[i] - ref[i]))), mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
      }
      const double ta = time_ms([&] { check(mla_prefill_attend(qb.get(), kb.get(), vb.get(), kHeads, kQk, kV, a.scale, pw, dpw.get(), out_wg.get(), nullptr), "attend wgmma"); }, 10);
      const double tr = time_ms([&] { check(mla_prefill_run(a, pw, dpw.get(), ws.get(), nullptr), "run wgmma"); }, 10);
      // Printed as each form finishes, so a form that fails or hangs leaves the others' lines.
      std::printf("    attention on %-20s%s (2 warpgroups x 64 rows, key tiles of 128): %8.3f ms %6.1f TFLOP/s (%.2f of floor, %.2fx mma.sync) | "
                  "whole run %8.3f ms %6.1f TFLOP/s-attn-equiv | max|diff| / max|mma.sync| = %.3e%s\n",
                  name, kind == kMlaPrefillDefaultKernel ? " (default)" : "", ta, attn_flops / ta * 1e-9, floor_ms / ta, t_attn / ta, tr,
                  attn_flops / tr * 1e-9, diff / mag, finite ? "" : " (NON-FINITE outputs)");
      std::fflush(stdout);
    }
    check(cuda_status(cudaDeviceSynchronize(), "sync"), "sync");
  }
  {
    // The up-projection GEMM (step 2): mma.sync (the old path) against wgmma (the default), alone on
    // bf16 inputs (TFLOP/s against the 790 floor), as steps 1-2 (gather + conversions + GEMM) and in
    // the whole run with the default attention; outputs compared (bf16 bits, NaN-poisoned first).
    auto latb = upload(to_bf16_bits(randn(ctx * kLat, 7)));
    auto wbits = upload(to_bf16_bits(w));
    DeviceBuffer<uint16_t> ke, ve;
    check(ke.resize(ctx * kHeads * kQk), "k");
    check(ve.resize(ctx * kHeads * kV), "v");
    MlaPrefillPlan pd;
    check(build_mla_prefill_plan({{0, fresh, cached, pages.data()}}, kPage, &pd), "plan");
    auto dpd = upload(pd.image);
    const std::pair<MlaPrefillExpand, const char*> kinds[] = {{MlaPrefillExpand::kMmaSync, "mma.sync"}, {MlaPrefillExpand::kWgmma, "wgmma"}};
    std::vector<float> ref_kv;
    double t_whole_old = 0;
    for (const auto& [kind, name] : kinds) {
      check(cudaMemset(ke.get(), 0xff, ke.size() * 2), "memset");
      check(cudaMemset(ve.get(), 0xff, ve.size() * 2), "memset");
      check(mla_prefill_expand_gemm(latb.get(), wbits.get(), ctx, kHeads, kNope, kRope, kV, kLat, ke.get(), ve.get(), kind, nullptr), "gemm");
      std::vector<uint16_t> hk(ke.size()), hv(ve.size());
      check(cudaMemcpy(hk.data(), ke.get(), hk.size() * 2, cudaMemcpyDeviceToHost), "copy");
      check(cudaMemcpy(hv.data(), ve.get(), hv.size() * 2, cudaMemcpyDeviceToHost), "copy");
      std::vector<float> kv;  // K's nope part and V as floats
      kv.reserve(ctx * kHeads * (kNope + kV));
      auto val = [](uint16_t h) { uint32_t b = uint32_t(h) << 16; float x; std::memcpy(&x, &b, 4); return x; };
      for (int64_t r = 0; r < ctx * kHeads; ++r) {
        for (int64_t n = 0; n < kNope; ++n) kv.push_back(val(hk[r * kQk + n]));
        for (int64_t n = 0; n < kV; ++n) kv.push_back(val(hv[r * kV + n]));
      }
      double diff = 0, mag = 0;
      bool finite = true;
      if (ref_kv.empty()) ref_kv = kv;
      for (size_t i = 0; i < kv.size(); ++i) {
        finite = finite && std::isfinite(kv[i]);
        diff = std::max(diff, static_cast<double>(std::fabs(kv[i] - ref_kv[i]))), mag = std::max(mag, static_cast<double>(std::fabs(ref_kv[i])));
      }
      const double tg = time_ms([&] { check(mla_prefill_expand_gemm(latb.get(), wbits.get(), ctx, kHeads, kNope, kRope, kV, kLat, ke.get(), ve.get(), kind, nullptr), "gemm"); }, 10);
      pd.expand = kind;
      const double tp = time_ms([&] { check(mla_prefill_expand(a, pd, dpd.get(), ws.get(), nullptr), "expand"); }, 10);
      const double tw = time_ms([&] { check(mla_prefill_run(a, pd, dpd.get(), ws.get(), nullptr), "run"); }, 10);
      if (kind == MlaPrefillExpand::kMmaSync) t_whole_old = tw;
      const double gfloor = expand_flops / g_flops * 1e3;
      std::printf("    expand GEMM %-8s%s: %7.3f ms %6.1f TFLOP/s (%.2f of 790 floor %.3f ms) | steps 1-2 (gather + GEMM) %7.3f ms | "
                  "whole run, default attention %7.3f ms %6.1f TFLOP/s-attn-equiv (%.3fx the mma.sync-expand run) | "
                  "max|diff| / max|mma.sync| = %.3e%s\n",
                  name, kind == kMlaPrefillDefaultExpand ? " (default)" : "", tg, expand_flops / tg * 1e-9, gfloor / tg, gfloor, tp, tw,
                  attn_flops / tw * 1e-9, t_whole_old / tw, diff / mag, finite ? "" : " (NON-FINITE outputs)");
      std::fflush(stdout);
    }
  }
  if (cached + fresh <= 16384 && !std::getenv("MLA_PREFILL_NO_OLD")) {
    // Before this kernel the backend ran prefill chunks through the split-KV absorbed decode
    // kernel, one (row, prefix) item per query row, fp32 on CUDA cores: its attention alone.
    std::vector<int32_t> ctx_len(fresh);
    for (int64_t i = 0; i < fresh; ++i) ctx_len[i] = static_cast<int32_t>(cached + i + 1);
    const int64_t cap = mla_decode_plan_capacity(fresh);
    MlaDecodePlan dp;
    check(build_mla_decode_plan(ctx_len.data(), fresh, kPage, cap, &dp), "decode plan");
    auto ddp = upload(dp.image);
    auto dctx = upload(ctx_len);
    std::vector<int32_t> table(fresh * np);
    for (int64_t i = 0; i < fresh; ++i) std::copy(pages.begin(), pages.end(), table.begin() + i * np);
    auto dtable = upload(table);
    DeviceBuffer<float> ql, qr, ol, po, pl;
    check(ql.resize(fresh * kHeads * kLat), "q_lat");
    check(qr.resize(fresh * kHeads * kRope), "q_rot");
    check(ol.resize(fresh * kHeads * kLat), "o_lat");
    check(po.resize(cap * kHeads * kLat), "part_o");
    check(pl.resize(cap * kHeads), "part_lse");
    cudaMemset(ql.get(), 0, fresh * kHeads * kLat * 4);
    cudaMemset(qr.get(), 0, fresh * kHeads * kRope * 4);
    MlaDecodeArgs da;
    da.q_lat = ql.get(), da.q_rot = qr.get(), da.cache = cache.get(), da.page_table = dtable.get(), da.ctx_len = dctx.get();
    da.rows = fresh, da.heads = kHeads, da.latent_dim = kLat, da.rope_dim = kRope, da.page_size = kPage, da.max_pages = np;
    da.scale = a.scale, da.o_lat = ol.get();
    MlaDecodeWork w;
    w.plan = ddp.get(), w.capacity = cap, w.launch_items = dp.num_items, w.merge = dp.any_split || dp.any_empty;
    w.part_o = po.get(), w.part_lse = pl.get();
    const double t_old = time_ms([&] { check(mla_decode_run(da, w, nullptr), "decode run"); }, 3);
    std::printf("    previous backend path (split-KV absorbed fp32 kernel per query row, attention only): %9.3f ms (%.1fx ours)\n", t_old,
                t_old / t_attn);
  }
}

// --cache-bf16: the bf16 latent cache against the fp32 one (docs/perf.md "bf16 latent cache:
// writes and the prefill gather"). The context gather alone (mla_prefill_gather) and steps 1-2
// (mla_prefill_expand: q / kv_b conversions, gather, default up-projection GEMM) from fp32 and
// from bf16 pages holding the same bf16-representable values (whole-run outputs compared: they
// must be bit-identical); the gather's bytes: entries read (576 x 4 or x 2 bytes) + 4-byte
// entry ids + the bf16 latents and every head's K rope tail written.
void bench_cache_bf16(int64_t cached, int64_t fresh) {
  const int64_t ctx = cached + fresh, np = (ctx + kPage - 1) / kPage, ed = kLat + kRope;
  std::vector<int32_t> pages(np);
  std::iota(pages.begin(), pages.end(), 0);
  std::mt19937 gen(3);
  std::shuffle(pages.begin(), pages.end(), gen);
  MlaPrefillPlan plan;
  check(build_mla_prefill_plan({{0, fresh, cached, pages.data()}}, kPage, &plan), "plan");
  auto dplan = upload(plan.image);
  const std::vector<uint16_t> bits = to_bf16_bits(randn(np * kPage * ed, 1));
  std::vector<float> vals(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t b = uint32_t(bits[i]) << 16;
    std::memcpy(&vals[i], &b, 4);
  }
  auto cache32 = upload(vals);
  auto cache16 = upload(bits);
  auto q = upload(randn(fresh * kHeads * kQk, 2));
  std::vector<float> w = randn(kHeads * (kNope + kV) * kLat, 3);
  for (float& x : w) x *= 1.0f / std::sqrt(static_cast<float>(kLat));
  auto kv_b = upload(w);
  DeviceBuffer<float> out32, out16;
  check(out32.resize(fresh * kHeads * kV), "out");
  check(out16.resize(fresh * kHeads * kV), "out");
  MlaPrefillArgs a32;
  a32.q = q.get(), a32.cache = cache32.get(), a32.kv_b = kv_b.get(), a32.heads = kHeads, a32.nope = kNope, a32.rope = kRope;
  a32.v_dim = kV, a32.latent_dim = kLat, a32.scale = 1.0f / std::sqrt(static_cast<float>(kQk)), a32.out = out32.get();
  MlaPrefillArgs a16 = a32;
  a16.cache = nullptr, a16.cache_bf16 = cache16.get(), a16.out = out16.get();
  DeviceBuffer<unsigned char> ws(mla_prefill_workspace_bytes(a32, plan.rows, plan.ctx_total));
  check(mla_prefill_run(a32, plan, dplan.get(), ws.get(), nullptr), "run fp32");
  check(mla_prefill_run(a16, plan, dplan.get(), ws.get(), nullptr), "run bf16");
  std::vector<float> h32(fresh * kHeads * kV), h16(h32.size());
  check(cudaMemcpy(h32.data(), out32.get(), h32.size() * 4, cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(h16.data(), out16.get(), h16.size() * 4, cudaMemcpyDeviceToHost), "copy");
  const bool same = std::memcmp(h32.data(), h16.data(), h32.size() * 4) == 0;
  std::printf("bf16 latent cache, prefill: cached %lld new %lld (context %lld tokens), %lld heads; whole-run outputs %s\n",
              static_cast<long long>(cached), static_cast<long long>(fresh), static_cast<long long>(ctx), static_cast<long long>(kHeads),
              same ? "bit-identical (fp32 vs bf16 pages)" : "DIFFERENT (fp32 vs bf16 pages)");
  const double written = static_cast<double>(ctx) * (kLat + kHeads * kRope) * 2 + ctx * 4.0;
  double t_gather32 = 0, t_exp32 = 0;
  for (const MlaPrefillArgs* a : {&a32, &a16}) {
    const bool bf = a->cache_bf16 != nullptr;
    const double bytes = static_cast<double>(ctx) * ed * (bf ? 2 : 4) + written;
    const double tg = time_ms([&] { check(mla_prefill_gather(*a, plan, dplan.get(), ws.get(), nullptr), "gather"); }, 20) * 1e3;
    const double te = time_ms([&] { check(mla_prefill_expand(*a, plan, dplan.get(), ws.get(), nullptr), "expand"); }, 20) * 1e3;
    const double floor_us = bytes / g_bw * 1e6;
    if (!bf) t_gather32 = tg, t_exp32 = te;
    std::printf("    %s cache: gather %8.1f us, %6.1f MB, %6.2f TB/s (floor %6.1f us at 4.2 TB/s: %.2fx)%s | gather + expand %8.1f us%s\n",
                bf ? "bf16" : "fp32", tg, bytes * 1e-6, bytes / tg * 1e-6, floor_us, tg / floor_us,
                bf ? (" [" + std::to_string(t_gather32 / tg).substr(0, 4) + "x the fp32 gather]").c_str() : "", te,
                bf ? (" [" + std::to_string(t_exp32 / te).substr(0, 4) + "x]").c_str() : "");
  }
  std::fflush(stdout);
}

// mla_write_latents vs mla_write_latents_bf16 at a decode batch and a prefill chunk: rows of
// latent 512 + key 64 fp32 into shuffled cache entries. Inputs and entries rotate over enough
// disjoint sets that the footprint exceeds twice the 50 MB L2. 200 launches per timing, reported
// per launch, twice: eager back to back (host launch cost included: small batches are
// launch-bound) and as one CUDA graph (as the decode graphs run it: the GPU's time).
// Bytes: rows x 576 x 4 read + rows x 576 x (4 or 2) written + 4-byte entry ids.
void bench_write_latents(const std::vector<int64_t>& row_counts) {
  constexpr int kLaunches = 200;
  cudaStream_t st;
  check(cudaStreamCreate(&st), "stream");
  for (const int64_t rows : row_counts) {
    const double set_bytes = static_cast<double>(rows) * (kLat + kRope) * 8;
    const int64_t sets = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(128e6 / set_bytes)), 2, 256);
    const int64_t entries = sets * rows;
    std::vector<int32_t> ids(entries);
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 gen(9);
    std::shuffle(ids.begin(), ids.end(), gen);
    auto dent = upload(ids);
    auto lat = upload(randn(entries * kLat, 11));
    auto key = upload(randn(entries * kRope, 12));
    DeviceBuffer<float> c32;
    DeviceBuffer<uint16_t> c16;
    check(c32.resize(entries * (kLat + kRope)), "cache");
    check(c16.resize(entries * (kLat + kRope)), "cache");
    double t32 = 0, g32 = 0;
    for (const bool bf : {false, true}) {
      auto launches = [&](cudaStream_t s) {
        for (int i = 0; i < kLaunches; ++i) {
          const int64_t set = i % sets;
          const float* l = lat.get() + set * rows * kLat;
          const float* k = key.get() + set * rows * kRope;
          const int32_t* e = dent.get() + set * rows;
          if (bf)
            check(mla_write_latents_bf16(l, k, rows, kLat, kRope, e, c16.get(), s), "write bf16");
          else
            check(mla_write_latents(l, k, rows, kLat, kRope, e, c32.get(), s), "write");
        }
      };
      const double t = time_ms([&] { launches(nullptr); }, 5) * 1e3 / kLaunches;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
      launches(st);
      check(cudaStreamEndCapture(st, &graph), "capture");
      check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      const double g = time_ms([&] { check(cudaGraphLaunch(exec, st), "graph"); }, 5) * 1e3 / kLaunches;
      check(cudaGraphExecDestroy(exec), "graph");
      check(cudaGraphDestroy(graph), "graph");
      const double bytes = static_cast<double>(rows) * (kLat + kRope) * (4 + (bf ? 2 : 4)) + rows * 4.0;
      const double floor_us = bytes / g_bw * 1e6;
      if (!bf) t32 = t, g32 = g;
      std::printf("mla_write_latents%-5s rows %5lld: eager %6.2f us a launch | in a graph %6.2f us, %6.2f MB, %5.2f TB/s "
                  "(floor %5.2f us at 4.2 TB/s: %5.2fx)%s\n",
                  bf ? "_bf16" : "", static_cast<long long>(rows), t, g, bytes * 1e-6, bytes / g * 1e-6, floor_us, g / floor_us,
                  bf ? (" [graph: " + std::to_string(g32 / g).substr(0, 4) + "x the fp32 write; eager " +
                        std::to_string(t32 / t).substr(0, 4) + "x]").c_str()
                     : "");
    }
  }
  check(cudaStreamDestroy(st), "stream");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::strcmp(argv[1], "--cache-bf16") == 0;
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int i = bf16 ? 2 : 1; i + 1 < argc; i += 2) cases.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  if (bf16) {
    if (cases.empty()) cases = {{16384, 8192}};
    for (auto [c, n] : cases) bench_cache_bf16(c, n);
    bench_write_latents({256, 8192});
    return 0;
  }
  if (cases.empty()) cases = {{8192, 8192}, {16384, 8192}, {0, 8192}};
  for (auto [c, n] : cases) bench_case(c, n);
  return 0;
}
