// kernels_bench, the per-layer kernels at one rank's slice of Kimi-K3 under TP32 / EP32
// (../shared/docs/kimi-k3.md, performance.md): hidden 7168; MLA 3 of 96 heads, latent
// 512 + 64, page 64; KDA 3 of 96 heads of 128, conv kernel 4; 896 experts top-16; vocab
// 163840. Decode batches B = 1 and 32 (the performance.md decode-step target) and a
// 256-token prefill slice. Floor = max(bytes / bandwidth, FLOPs / 790 TFLOP/s); bytes are
// what the kernel must read and write at least, fp32 as these correct-first kernels store
// them. Anchor: cudaMemcpy D2D of the same bytes, in the same run.
#include <cstring>

#include "activation/activation.h"
#include "attn_res/attn_res.h"
#include "bench/bench_util.h"
#include "embedding/embedding.h"
#include "gemm/gemm.h"
#include "glue/glue.h"
#include "kda/kda.h"
#include "mla/mla.h"
#include "norm/norm.h"
#include "routing/routing.h"
#include "sampling/sampling.h"

namespace pdserve::cuda::bench {

namespace {

constexpr int64_t kHidden = 7168, kHeads = 3, kLat = 512, kRope = 64, kPage = 64, kKdaD = 128, kExperts = 896, kTopK = 16;
constexpr int64_t kVocab = 163840, kInter = 3072;

// Normal draws for small inputs; large ones get fast finite junk (timing only, never zeros).
DeviceBuffer<float> device_randn(size_t n, uint32_t seed) {
  if (n < (1u << 20)) return upload(randn(n, seed));
  std::vector<uint8_t> bytes(n * 4);
  fill_bytes(bytes, seed, 0x30, 16);
  DeviceBuffer<float> d(n);
  check(cuda_status(cudaMemcpy(d.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "fill"), "fill");
  return d;
}

// Times f, prints its row and the D2D anchor of the same byte count.
void measure(const std::string& name, double bytes, double flops, const std::function<void(int)>& f, const std::string& note = "") {
  const double floor_us = std::max(bytes / g_bw, flops / g_flops) * 1e6;
  row(name, median_us(f), bytes, floor_us, note);
}

void anchor(const std::string& name, double bytes) {
  const size_t half = static_cast<size_t>(bytes / 2);  // read + written
  DeviceBuffer<uint8_t> a(half), b(half);
  row(name + " (anchor: D2D copy, same bytes)", median_us([&](int) { cudaMemcpyAsync(b.get(), a.get(), half, cudaMemcpyDeviceToDevice); }),
      bytes, bytes / g_bw * 1e6);
}

void bench_dense(int64_t B) {
  const std::string b = "B=" + std::to_string(B) + " ";
  auto x = device_randn(B * kHidden, 1), y = device_randn(B * kHidden, 2), w = device_randn(kHidden, 3);
  const double rw = 2.0 * B * kHidden * 4 + kHidden * 4;
  measure(b + "rms_norm 7168", rw, 0, [&](int) { check(rms_norm(x.get(), B, kHidden, w.get(), 1e-5f, y.get(), nullptr), "rms_norm"); });
  auto o = device_randn(B * kHeads * kKdaD, 4), g = device_randn(B * kHeads * kKdaD, 5), ow = device_randn(kKdaD, 6);
  measure(b + "gated_rms_norm 3x128 (KDA out)", 3.0 * B * kHeads * kKdaD * 4, 0,
          [&](int) { check(gated_rms_norm(o.get(), g.get(), B * kHeads, kKdaD, ow.get(), 1e-5f, o.get(), nullptr), "gated"); });
  // Attention residuals: 8 block snapshots + the partial sum (K3's largest mix).
  auto bank = device_randn(8 * B * kHidden, 7);
  measure(b + "attn_res_mix, 9 sources", (9.0 + 1) * B * kHidden * 4, 0,
          [&](int) { check(attn_res_mix(bank.get(), 8, x.get(), B, kHidden, w.get(), 1e-5f, y.get(), nullptr), "attn_res"); });
  auto gate = device_randn(B * kInter, 8), up = device_randn(B * kInter, 9);
  measure(b + "situ_mul 3072", 3.0 * B * kInter * 4, 0,
          [&](int) { check(situ_mul(gate.get(), up.get(), B * kInter, 4.0f, 25.0f, gate.get(), nullptr), "situ"); });
  measure(b + "add_inplace 7168", 3.0 * B * kHidden * 4, 0, [&](int) { check(add_inplace(x.get(), y.get(), B * kHidden, nullptr), "add"); });
  // Embedding: one rank's vocab shard (163840 / 32 rows) in bf16.
  const int64_t shard = kVocab / 32;
  std::vector<uint8_t> table_bytes(shard * kHidden * 2);
  fill_bytes(table_bytes, 4, 0x30, 16);
  auto table = upload(table_bytes);
  std::vector<int32_t> ids(B);
  for (int64_t i = 0; i < B; ++i) ids[i] = static_cast<int32_t>((i * 977) % shard);
  auto dids = upload(ids);
  measure(b + "embedding_bf16 (vocab shard 5120)", B * kHidden * (2.0 + 4), 0, [&](int) {
    check(embedding_bf16(reinterpret_cast<const uint16_t*>(table.get()), shard, kHidden, dids.get(), B, y.get(), nullptr), "embed");
  });
  // Routing over all 896 experts (the router runs replicated).
  auto logits = device_randn(B * kExperts, 10), bias = device_randn(kExperts, 11);
  DeviceBuffer<int32_t> rid(B * kTopK);
  DeviceBuffer<float> rw8(B * kTopK);
  measure(b + "route_sigmoid_topk 896 -> 16", B * kExperts * 4.0 + kExperts * 4 + B * kTopK * 8.0, 0, [&](int) {
    check(route_sigmoid_topk(logits.get(), bias.get(), B, kExperts, kTopK, true, 2.5f, rid.get(), rw8.get(), nullptr), "route");
  });
  // Sampling: greedy over the full vocabulary (after the logits gather).
  auto vlog = device_randn(B * kVocab, 12);
  DeviceBuffer<int32_t> arg(B);
  measure(b + "argmax_rows 163840", B * kVocab * 4.0, 0, [&](int) { check(argmax_rows(vlog.get(), B, kVocab, arg.get(), nullptr), "argmax"); });
  // The fp32 GEMM (correct-first) on q_a (7168 -> 1536), rotating 3 weight sets past L2.
  const int64_t n = 1536;
  std::vector<DeviceBuffer<float>> ws;
  for (int s = 0; s < 3; ++s) ws.push_back(device_randn(n * kHidden, 20 + s));
  DeviceBuffer<float> qa(B * n);
  measure(b + "matmul_nt fp32 7168 -> 1536 (q_a)", (double(n) * kHidden + B * kHidden + B * n) * 4, 2.0 * B * n * kHidden,
          [&](int i) { check(matmul_nt(x.get(), B, ws[i % 3].get(), n, kHidden, qa.get(), nullptr), "matmul"); });
}

void bench_mla(int64_t B, int64_t ctx) {
  const std::string b = "B=" + std::to_string(B) + " ctx " + std::to_string(ctx) + " ";
  const int64_t pages_per = ctx / kPage, pages = B * pages_per, dim = kLat + kRope;
  auto cache = device_randn(pages * kPage * dim, 30);
  auto ql = device_randn(B * kHeads * kLat, 31), qr = device_randn(B * kHeads * kRope, 32);
  DeviceBuffer<float> ol(B * kHeads * kLat);
  std::vector<int32_t> table(B * pages_per), len(B, static_cast<int32_t>(ctx));
  for (int64_t i = 0; i < B * pages_per; ++i) table[i] = static_cast<int32_t>((i * 7919) % pages);  // scattered pages
  auto dt = upload(table), dl = upload(len);
  MlaDecodeArgs a;
  a.q_lat = ql.get();
  a.q_rot = qr.get();
  a.cache = cache.get();
  a.page_table = dt.get();
  a.ctx_len = dl.get();
  a.rows = B;
  a.heads = kHeads;
  a.latent_dim = kLat;
  a.rope_dim = kRope;
  a.page_size = kPage;
  a.max_pages = pages_per;
  a.scale = 0.072f;
  a.o_lat = ol.get();
  const double bytes = double(B) * ctx * dim * 4;
  measure(b + "mla_attend_latent, 3 heads", bytes, 4.0 * B * kHeads * ctx * dim, [&](int) { check(mla_attend_latent(a, nullptr), "mla"); },
          "fp32 latents");
  anchor(b + "mla", 2 * bytes);
}

void bench_kda(int64_t B) {
  const std::string b = "B=" + std::to_string(B) + " ";
  const int64_t P = kHeads * kKdaD, slot = 3 * P * 3 + kHeads * kKdaD * kKdaD;
  const int64_t sets = std::max<int64_t>(2, static_cast<int64_t>(120e6 / (B * slot * 4.0)) + 1);
  // Each row its own slot; sets of slots rotate past L2.
  auto state = device_randn(sets * B * slot, 40);
  std::vector<std::vector<int32_t>> slot_sets(sets, std::vector<int32_t>(B));
  std::vector<DeviceBuffer<int32_t>> dslots;
  for (int64_t s = 0; s < sets; ++s) {
    for (int64_t i = 0; i < B; ++i) slot_sets[s][i] = static_cast<int32_t>(s * B + i);
    dslots.push_back(upload(slot_sets[s]));
  }
  auto x = device_randn(B * P, 41), cw = device_randn(P * 4, 42);
  DeviceBuffer<float> out(B * P);
  measure(b + "causal_conv1d_silu_step 384 ch, k4", B * (P * 3.0 * 2 + 2 * P) * 4, 0, [&](int i) {
    check(causal_conv1d_silu_step(x.get(), B, P, cw.get(), 4, state.get(), dslots[i % sets].get(), slot, out.get(), nullptr), "conv");
  });
  auto q = device_randn(B * P, 43), k = device_randn(B * P, 44), v = device_randn(B * P, 45), g = device_randn(B * P, 46);
  auto beta = device_randn(B * kHeads, 47);
  check(l2_normalize(q.get(), B * kHeads, kKdaD, 1e-6f, 0.088f, nullptr), "l2");
  check(l2_normalize(k.get(), B * kHeads, kKdaD, 1e-6f, 1.0f, nullptr), "l2");
  std::vector<float> small_g(B * P, -0.05f);
  auto dg = upload(small_g);
  const double rec_bytes = 2.0 * B * kHeads * kKdaD * kKdaD * 4;
  measure(b + "kda_recurrent_step 3x128 (one layer)", rec_bytes + 5.0 * B * P * 4, 0, [&](int i) {
    check(kda_recurrent_step(q.get(), k.get(), v.get(), dg.get(), beta.get(), B, kHeads, kKdaD, state.get() + 3 * P * 3,
                             dslots[i % sets].get(), slot, out.get(), nullptr),
          "recurrent");
  });
  anchor(b + "kda state", rec_bytes);
  measure(b + "l2_normalize 3x128", 2.0 * B * P * 4, 0, [&](int) { check(l2_normalize(q.get(), B * kHeads, kKdaD, 1e-6f, 1.0f, nullptr), "l2"); });
  DeviceBuffer<float> gate(B * P);
  auto alog = device_randn(kHeads, 48), dtb = device_randn(P, 49);
  measure(b + "kda_gate 3x128", 2.0 * B * P * 4, 0,
          [&](int) { check(kda_gate(g.get(), B, kHeads, kKdaD, alog.get(), dtb.get(), true, -5.0f, gate.get(), nullptr), "gate"); });
}

}  // namespace

void bench_layers() {
  std::printf("\nPer-layer kernels, one TP32/EP32 rank of K3; floor = max(bytes / %.2f TB/s, FLOPs / %.0f TFLOP/s)\n\n"
              "| case | us | floor us | ratio | effective | note\n|---|---|---|---|---|---\n",
              g_bw * 1e-12, g_flops * 1e-12);
  for (int64_t B : {1, 32, 256}) bench_dense(B);
  for (int64_t B : {8, 64}) bench_mla(B, 16384);
  for (int64_t B : {1, 32, 256}) bench_kda(B);
}

}  // namespace pdserve::cuda::bench
