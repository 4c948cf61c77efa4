// Decode MoE on one EP32 rank (28 of 896 experts, top-16, expert 3584 -> 3072 -> 3584 in
// MXFP4, SiTU(4, 25)) at batch 1, 4, 16, 64, 256 (then 2, 8, 32, 48, 96, 128, 192 for the
// crossovers; the first five keep their routing draws): moe_expert_mlp_decode against the floor
// (MXFP4 bytes of the touched experts, packed + scales, / --bw) and against the anchor in
// the same run, moe_expert_mlp (moe.h) on the same bytes. Every decode kernel is timed
// (streamed, staged, weights-on-A in three schedules, the one-launch fused kernel) and
// kAuto with a queue workspace, as the backend calls it (its choice is printed). Also the whole routed step
// (permute -> decode experts -> combine), eagerly and replayed from a CUDA graph, and a
// device-to-device copy of the touched bytes as a bandwidth reference at that size, and a read-only
// stream of them (bench/stream_read.h: what reading them alone costs at that size, by bulk copies
// and by the decode kernels' own 16-byte loads, with and without the L2::256B hint). CUDA
// events, warm-up first, median of --reps; weights rotate over 3 sets (1.5 GB) so repeats
// do not time L2. Writes, per batch, the rows of each touched expert to --routes FILE for
// the torch anchor (moe_decode_torch.py), so it times the same work.
//
// --kernels picks the timed kernels by name (comma-separated; default all): staged, streamed,
// wa, wa-noprefetch, wa-strided, fused, fused-split, fused-split-pdl, fused-split24,
// fused-split24-stagger, fused-split-stagger, wa-pdl, wa-pdl-l2,
// wa-pdl-l2all, wa-pdl-splitk, wa-pdl-f32, wa-pdl-l2-stagger, wa-pdl-f32-stagger, wa-pdl-wgmma,
// wa-pdl-wgmma3, wa-pdl-ring, wa-pdl-ring-l2, wa-pdl-ring1, wa-pdl-ring1-l2, wa-pdl-qgmma, wa-pdl-qgmma-wide (the same
// random bytes read as the Mxfp4DecodeBits::kFp8 shuffle; its whole routed step from a graph too);
// kAuto is always timed.
//
// --graph-steps N (default 20, 0 = off): the E4M3 wide form, its routed step and the read-only
// stream also timed as N steps back to back in one graph, as a decode step's layers run in the
// engine (the single-step replays pay the graph's submission each time); us a step.
//
//   moe_decode_bench [--bw BYTES_PER_S] [--reps N] [--routes FILE] [--only BATCH] [--batches LIST] [--kernels LIST] [--graph-steps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "bench/stream_read.h"
#include "common/cuda_check.h"
#include "moe/moe.h"
#include "moe/moe_decode.h"

namespace pdserve::cuda {
namespace {

int64_t g_only = 0;          // --only B: just that batch (for profilers)
std::string g_batches = "";  // --batches LIST: just those batches (comma-separated), in the bench's order
std::string g_kernels = "";  // --kernels LIST: empty = all
int g_graph_steps = 20;      // --graph-steps N: steps back to back in one graph (0: not timed)

bool wanted(const char* name) {
  if (g_kernels.empty()) return true;
  const std::string list = "," + g_kernels + ",";
  return list.find("," + std::string(name) + ",") != std::string::npos;
}

using bench::check;
using bench::fill_bytes;
using bench::g_bw;
using bench::g_reps;
using bench::median_us;
using bench::upload;

void row(const std::string& what, double us, double bytes, double floor_us, const std::string& note = "") {
  std::printf("| %-48s | %8.1f | %7.1f | %5.2fx | %5.2f TB/s | %s\n", what.c_str(), us, floor_us, us / floor_us, bytes / us * 1e-6,
              note.c_str());
}

void run_bench(const char* routes_path) {
  const int64_t experts = 896, local = 28, k = 16, dim = 3584, inter = 3072, sets = 3;
  const int64_t mat = inter * dim;  // values per projection and expert
  const int64_t per_expert = 3 * mat / 2 + 3 * mat / 32;
  // One set of random bytes serves both kernels (each reads them in its own layout).
  std::vector<uint8_t> packed(local * mat / 2), scales(local * mat / 32);
  std::vector<DeviceBuffer<uint8_t>> bufs;
  std::vector<MoeDecodeWeights> wd(sets);
  std::vector<MoeExpertWeights> wa(sets);
  for (int64_t s = 0; s < sets; ++s) {
    const uint8_t* p[3];
    const uint8_t* sc[3];
    for (int m = 0; m < 3; ++m) {
      fill_bytes(packed, 1000 + 10 * s + 2 * m);
      fill_bytes(scales, 1001 + 10 * s + 2 * m, 118, 6);
      bufs.push_back(upload(packed));
      p[m] = bufs.back().get();
      bufs.push_back(upload(scales));
      sc[m] = bufs.back().get();
    }
    wd[s].w1 = {p[0], sc[0], inter, dim, false};
    wd[s].w3 = {p[1], sc[1], inter, dim, false};
    wd[s].w2 = {p[2], sc[2], dim, inter, false};
    wa[s].w1 = {p[0], sc[0], inter, dim};
    wa[s].w3 = {p[1], sc[1], inter, dim};
    wa[s].w2 = {p[2], sc[2], dim, inter};
    wd[s].activation = wa[s].activation = MoeActivation::kSiTU;
    wd[s].situ_beta = wa[s].situ_beta = 4.0f;
    wd[s].situ_linear_beta = wa[s].situ_linear_beta = 25.0f;
  }
  // kWeightsAPdlQgmma reads the same bytes as its own bit shuffle (random codes either way).
  std::vector<MoeDecodeWeights> wq = wd;
  for (MoeDecodeWeights& w : wq) w.w1.bits = w.w3.bits = w.w2.bits = Mxfp4DecodeBits::kFp8;
  // Bandwidth reference at the same sizes: a device-to-device copy of the touched bytes
  // (it reads them once and writes them once).
  DeviceBuffer<uint8_t> copy_src(local * per_expert), copy_dst(local * per_expert);
  // Sources for the read-only stream when steps run back to back (--graph-steps): one a weight set,
  // so a step reads no bytes the step before it left in L2 (as the decode steps rotate the sets).
  std::vector<DeviceBuffer<uint8_t>> read_src;
  for (int64_t s = 0; g_graph_steps > 0 && s < sets; ++s) read_src.emplace_back(local * per_expert);
  FILE* routes = routes_path ? std::fopen(routes_path, "w") : nullptr;
  std::printf("\nDecode MoE, one EP32 rank (28 of 896 experts, top-16, 3584->3072->3584 MXFP4, SiTU); floor = MXFP4 bytes\n"
              "(packed + scales) of the touched experts / %.2f TB/s; effective = those bytes / time\n\n"
              "| case | us | floor us | ratio | effective | note\n|---|---|---|---|---|---\n",
              g_bw * 1e-12);
  std::mt19937 g(7);
  // The fused kernel's queue, zero once; every call leaves it zero.
  // Sized for kWeightsAPdlSplitK's partial sums at the largest batch too (256 x 16 pairs).
  DeviceBuffer<uint32_t> ws_buf = upload(std::vector<uint32_t>(moe_decode_splitk_workspace_bytes(local, 256 * k, inter) / sizeof(uint32_t), 0u));
  const MoeDecodeWorkspace ws{ws_buf.get(), ws_buf.size() * sizeof(uint32_t)};
  for (int64_t tokens : {1, 4, 16, 64, 256, 2, 8, 32, 48, 96, 128, 192}) {
    if (g_only && tokens != g_only) continue;
    std::vector<int32_t> ids(tokens * k);
    std::vector<float> wts(tokens * k);
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    for (int attempt = 0;; ++attempt) {  // uniform top-16; redraw a batch that leaves this rank idle
      for (int64_t t = 0; t < tokens; ++t) {
        std::shuffle(all.begin(), all.end(), g);
        for (int64_t j = 0; j < k; ++j) ids[t * k + j] = all[j], wts[t * k + j] = 0.05f + 0.01f * j;
      }
      if (std::any_of(ids.begin(), ids.end(), [&](int32_t e) { return e < local; })) break;
    }
    // --batches skips a batch after its routing draw, so the others keep the full run's draws.
    if (!g_batches.empty() && ("," + g_batches + ",").find("," + std::to_string(tokens) + ",") == std::string::npos) continue;
    std::vector<int64_t> count(local, 0);
    int64_t rows = 0;
    for (int32_t e : ids)
      if (e < local) ++count[e], ++rows;
    const int64_t nt = std::count_if(count.begin(), count.end(), [](int64_t c) { return c > 0; });
    if (routes) {
      std::fprintf(routes, "%lld", (long long)tokens);
      for (int64_t c : count)
        if (c) std::fprintf(routes, " %lld", (long long)c);
      std::fprintf(routes, "\n");
    }
    const double bytes = double(nt) * per_expert, floor_us = bytes / g_bw * 1e6;
    const int64_t cap = tokens * k;
    auto di = upload(ids);
    auto dw = upload(wts);
    std::vector<float> x(tokens * dim);
    std::mt19937 gx(9);
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(gx);
    auto dx = upload(x);
    DeviceBuffer<int32_t> off(local + 1), sorted(cap), prow(cap);
    DeviceBuffer<float> xs(cap * dim), act(cap * inter), os(cap * dim), y(tokens * dim);
    const MoePlan plan{off.get(), sorted.get(), prow.get()};
    auto permute = [&](cudaStream_t st) { check(moe_permute(di.get(), tokens, k, 0, local, dx.get(), dim, plan, xs.get(), st), "permute"); };
    auto decode_with = [&](int i, cudaStream_t st, MoeDecodeKernel kern) {
      check(moe_expert_mlp_decode(wd[i % sets], off.get(), local, cap, xs.get(), act.get(), os.get(), st, kern, ws), "decode");
    };
    auto decode = [&](int i, cudaStream_t st) { decode_with(i, st, MoeDecodeKernel::kAuto); };
    auto decode_qk = [&](int i, cudaStream_t st, MoeDecodeKernel kern) {
      check(moe_expert_mlp_decode(wq[i % sets], off.get(), local, cap, xs.get(), act.get(), os.get(), st, kern, ws), "decode (qgmma)");
    };
    auto decode_q = [&](int i, cudaStream_t st) { decode_qk(i, st, MoeDecodeKernel::kWeightsAPdlQgmma); };
    auto decode_qw = [&](int i, cudaStream_t st) { decode_qk(i, st, MoeDecodeKernel::kWeightsAPdlQgmmaWide); };
    auto combine = [&](cudaStream_t st) { check(moe_combine(os.get(), prow.get(), dw.get(), tokens, k, dim, y.get(), st), "combine"); };
    permute(nullptr);
    constexpr double kSkipped = -1.0;
    auto time_kernel = [&](const char* name, MoeDecodeKernel kern) {
      return wanted(name) ? median_us([&](int i) { decode_with(i, nullptr, kern); }) : kSkipped;
    };
    const double td = time_kernel("staged", MoeDecodeKernel::kStaged);
    const double ts = time_kernel("streamed", MoeDecodeKernel::kStreamed);
    const double tw = time_kernel("wa", MoeDecodeKernel::kWeightsA);
    const double twn = time_kernel("wa-noprefetch", MoeDecodeKernel::kWeightsANoPrefetch);
    const double tws = time_kernel("wa-strided", MoeDecodeKernel::kWeightsAStrided);
    const double tf = time_kernel("fused", MoeDecodeKernel::kFused);
    const double tfs = time_kernel("fused-split", MoeDecodeKernel::kFusedSplit);
    const double tfp = time_kernel("fused-split-pdl", MoeDecodeKernel::kFusedSplitPdl);
    const double tf24 = time_kernel("fused-split24", MoeDecodeKernel::kFusedSplit24Warps);
    const double tf24s = time_kernel("fused-split24-stagger", MoeDecodeKernel::kFusedSplit24WarpsStaggered);
    const double tfss = time_kernel("fused-split-stagger", MoeDecodeKernel::kFusedSplitStaggered);
    const double twp = time_kernel("wa-pdl", MoeDecodeKernel::kWeightsAPdl);
    const double twp2 = time_kernel("wa-pdl-l2", MoeDecodeKernel::kWeightsAPdlL2);
    const double twp3 = time_kernel("wa-pdl-l2all", MoeDecodeKernel::kWeightsAPdlL2All);
    const double twk = time_kernel("wa-pdl-splitk", MoeDecodeKernel::kWeightsAPdlSplitK);
    const double twf = time_kernel("wa-pdl-f32", MoeDecodeKernel::kWeightsAPdlF32);
    const double tw2s = time_kernel("wa-pdl-l2-stagger", MoeDecodeKernel::kWeightsAPdlL2Stagger);
    const double twfs = time_kernel("wa-pdl-f32-stagger", MoeDecodeKernel::kWeightsAPdlF32Stagger);
    const double twg = time_kernel("wa-pdl-wgmma", MoeDecodeKernel::kWeightsAPdlWgmma);
    const double twg3 = time_kernel("wa-pdl-wgmma3", MoeDecodeKernel::kWeightsAPdlWgmma3);
    const double trg = time_kernel("wa-pdl-ring", MoeDecodeKernel::kWeightsAPdlRing);
    const double trg2 = time_kernel("wa-pdl-ring-l2", MoeDecodeKernel::kWeightsAPdlRingL2);
    const double trg1 = time_kernel("wa-pdl-ring1", MoeDecodeKernel::kWeightsAPdlRing1);
    const double trg12 = time_kernel("wa-pdl-ring1-l2", MoeDecodeKernel::kWeightsAPdlRing1L2);
    const bool want_q = wanted("wa-pdl-qgmma");
    const double tq = want_q ? median_us([&](int i) { decode_q(i, nullptr); }) : kSkipped;
    const bool want_qw = wanted("wa-pdl-qgmma-wide");
    const double tqw = want_qw ? median_us([&](int i) { decode_qw(i, nullptr); }) : kSkipped;
    // `graphs` graphs, each of `steps` calls work(g * steps + r, stream) captured on a non-blocking
    // stream, replayed in turn: median us a call (a replay's time / steps; no host sync inside).
    auto graph_us = [&](const std::function<void(int, cudaStream_t)>& work, int64_t graphs, int steps) {
      cudaStream_t gs;
      check(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking), "stream");
      std::vector<cudaGraphExec_t> ge(graphs);
      for (int64_t g = 0; g < graphs; ++g) {
        cudaGraph_t graph;
        check(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal), "capture");
        for (int r = 0; r < steps; ++r) work(static_cast<int>(g * steps + r), gs);
        check(cudaStreamEndCapture(gs, &graph), "end capture");
        check(cudaGraphInstantiate(&ge[g], graph, 0), "instantiate");
        cudaGraphDestroy(graph);
      }
      const double us = median_us([&](int i) { check(cudaGraphLaunch(ge[i % graphs], nullptr), "graph launch"); });
      for (auto e : ge) cudaGraphExecDestroy(e);
      cudaStreamDestroy(gs);
      return us / steps;
    };
    // One step a graph, a graph a weight set (the backend's decode graphs; a programmatic dependent
    // launch becomes a programmatic edge).
    auto replay_us = [&](const std::function<void(int, cudaStream_t)>& work) { return graph_us(work, sets, 1); };
    auto time_graph = [&](const char* name, MoeDecodeKernel kern) {
      if (!wanted(name)) return kSkipped;
      return replay_us([&](int set, cudaStream_t st) { decode_with(set, st, kern); });
    };
    const double gwn = time_graph("wa-noprefetch", MoeDecodeKernel::kWeightsANoPrefetch);
    const double gwp = time_graph("wa-pdl", MoeDecodeKernel::kWeightsAPdl);
    const double gwp2 = time_graph("wa-pdl-l2", MoeDecodeKernel::kWeightsAPdlL2);
    const double gwp3 = time_graph("wa-pdl-l2all", MoeDecodeKernel::kWeightsAPdlL2All);
    const double gwk = time_graph("wa-pdl-splitk", MoeDecodeKernel::kWeightsAPdlSplitK);
    const double gwf = time_graph("wa-pdl-f32", MoeDecodeKernel::kWeightsAPdlF32);
    const double gw2s = time_graph("wa-pdl-l2-stagger", MoeDecodeKernel::kWeightsAPdlL2Stagger);
    const double gwfs = time_graph("wa-pdl-f32-stagger", MoeDecodeKernel::kWeightsAPdlF32Stagger);
    const double gwg = time_graph("wa-pdl-wgmma", MoeDecodeKernel::kWeightsAPdlWgmma);
    const double gwg3 = time_graph("wa-pdl-wgmma3", MoeDecodeKernel::kWeightsAPdlWgmma3);
    const double grg = time_graph("wa-pdl-ring", MoeDecodeKernel::kWeightsAPdlRing);
    const double grg2 = time_graph("wa-pdl-ring-l2", MoeDecodeKernel::kWeightsAPdlRingL2);
    const double grg1 = time_graph("wa-pdl-ring1", MoeDecodeKernel::kWeightsAPdlRing1);
    const double grg12 = time_graph("wa-pdl-ring1-l2", MoeDecodeKernel::kWeightsAPdlRing1L2);
    const double gq = want_q ? replay_us([&](int set, cudaStream_t st) { decode_q(set, st); }) : kSkipped;
    const double tgq = want_q ? replay_us([&](int set, cudaStream_t st) { permute(st), decode_q(set, st), combine(st); }) : kSkipped;
    const double gqw = want_qw ? replay_us([&](int set, cudaStream_t st) { decode_qw(set, st); }) : kSkipped;
    const double tgqw = want_qw ? replay_us([&](int set, cudaStream_t st) { permute(st), decode_qw(set, st), combine(st); }) : kSkipped;
    // As the engine runs them: g_graph_steps steps back to back in one graph (a decode step's 92 MoE
    // layers are one graph; no host submission between them), the weight sets in turn; us a step.
    // The single-step replays above also time the graph's submission each time.
    auto steps_us = [&](const std::function<void(int, cudaStream_t)>& work) {
      return g_graph_steps > 0 ? graph_us(work, 1, g_graph_steps) : kSkipped;
    };
    const double sqw = want_qw ? steps_us([&](int r, cudaStream_t st) { decode_qw(r, st); }) : kSkipped;
    const double sqwall = want_qw ? steps_us([&](int r, cudaStream_t st) { permute(st), decode_qw(r, st), combine(st); }) : kSkipped;
    const double tauto = median_us([&](int i) { decode(i, nullptr); });
    const MoeDecodeKernel chosen = moe_decode_choice(wd[0], local, cap, true);
    const char* chosen_name = chosen == MoeDecodeKernel::kFused                ? "fused"
                              : chosen == MoeDecodeKernel::kFusedSplit         ? "fused split"
                              : chosen == MoeDecodeKernel::kFusedSplitPdl      ? "fused split pdl"
                              : chosen == MoeDecodeKernel::kFusedSplit24Warps  ? "fused split, 24 warps"
                              : chosen == MoeDecodeKernel::kFusedSplit24WarpsStaggered ? "fused split, 24 warps, staggered"
                              : chosen == MoeDecodeKernel::kFusedSplitStaggered ? "fused split, staggered"
                              : chosen == MoeDecodeKernel::kWeightsANoPrefetch ? "weights on A, no L2 prefetch"
                              : chosen == MoeDecodeKernel::kWeightsAPdl        ? "weights on A, PDL down"
                              : chosen == MoeDecodeKernel::kWeightsAPdlL2      ? "weights on A, PDL down, down to L2"
                              : chosen == MoeDecodeKernel::kWeightsAPdlL2All   ? "weights on A, PDL down, all down to L2"
                              : chosen == MoeDecodeKernel::kWeightsAPdlSplitK  ? "weights on A, PDL down, split K"
                              : chosen == MoeDecodeKernel::kWeightsAPdlF32     ? "weights on A, PDL down, scale on fp32 sums"
                              : chosen == MoeDecodeKernel::kWeightsAPdlL2Stagger ? "weights on A, PDL down, down to L2, staggered start"
                              : chosen == MoeDecodeKernel::kWeightsAPdlF32Stagger ? "weights on A, PDL down, scale on fp32 sums, staggered start"
                              : chosen == MoeDecodeKernel::kWeightsAPdlWgmma   ? "weights on A, PDL down, wgmma"
                              : chosen == MoeDecodeKernel::kWeightsAPdlWgmma3  ? "weights on A, PDL down, wgmma, 3 warpgroups"
                              : chosen == MoeDecodeKernel::kWeightsAPdlRing    ? "weights on A, PDL down, per-warp ring"
                              : chosen == MoeDecodeKernel::kWeightsAPdlRingL2  ? "weights on A, PDL down, per-warp ring, down to L2"
                              : chosen == MoeDecodeKernel::kWeightsAStrided    ? "weights on A, strided"
                                                                               : "other";
    const double ta = median_us([&](int i) {
      check(moe_expert_mlp(wa[i % sets], off.get(), local, cap, xs.get(), act.get(), os.get(), nullptr), "anchor");
    });
    const double tall = median_us([&](int i) { permute(nullptr), decode(i, nullptr), combine(nullptr); });
    // The same step captured once per weight set and replayed.
    const double tg = replay_us([&](int set, cudaStream_t st) { permute(st), decode(set, st), combine(st); });
    const double tcopy = median_us([&](int) {
      check(cudaMemcpyAsync(copy_dst.get(), copy_src.get(), size_t(bytes), cudaMemcpyDeviceToDevice, nullptr), "copy");
    });
    // What reading those bytes alone costs at this size (launch and ramp included; bench/stream_read.h).
    auto read_us = [&](bench::StreamReadForm form) {
      return median_us([&](int) {
        check(cuda_status(bench::launch_stream_read(copy_src.get(), size_t(bytes) / 16 * 16, nullptr, form), "stream read"),
              "stream read");
      });
    };
    const double tread = read_us(bench::StreamReadForm::kBulk);
    // The same reads back to back in one graph (after the eager reads: the stream's one-time set-up
    // must not run inside a capture), one weight set's worth of memory after another.
    // pdl: each read a programmatic dependent of the one before, waiting for it before its first
    // read (a decode kernel's place after the routing: its launch hidden, its reads not).
    auto read_steps_us = [&](bench::StreamReadForm form, bool pdl) {
      return steps_us([&](int r, cudaStream_t st) {
        check(cuda_status(bench::launch_stream_read(read_src[r % sets].get(), size_t(bytes) / 16 * 16, st, form, pdl), "stream read"),
              "stream read");
      });
    };
    // The same bytes by the decode kernels' own load instruction: does the load form cap them?
    const double tread_ldg = read_us(bench::StreamReadForm::kLdg);
    const double tread_ldg2 = read_us(bench::StreamReadForm::kLdgL2Hint);
    const double sread = read_steps_us(bench::StreamReadForm::kBulk, false);
    const double sread_ldg = read_steps_us(bench::StreamReadForm::kLdg, false);
    const double sread_pdl = read_steps_us(bench::StreamReadForm::kBulk, true);
    const double sread_ldg_pdl = read_steps_us(bench::StreamReadForm::kLdg, true);
    const std::string b = "B=" + std::to_string(tokens);
    const std::string note = std::to_string(nt) + " experts touched, " + std::to_string(rows) + " rows";
    auto krow = [&](const std::string& what, double us, const std::string& note = "") {
      if (us != kSkipped) row(b + " decode expert MLP (" + what + ")", us, bytes, floor_us, note);
    };
    auto ratio = [](double base, double t) { return base > 0 && t > 0 ? std::to_string(base / t).substr(0, 5) : std::string("-"); };
    double best_two = 1e30;
    for (double t : {tw, twn, tws})
      if (t != kSkipped) best_two = std::min(best_two, t);
    krow("staged", td, note);
    krow("streamed", ts);
    krow("weights on A", tw);
    krow("weights on A, no L2 prefetch", twn);
    krow("weights on A, strided", tws);
    krow("fused, TMA ring", tf, ratio(best_two < 1e30 ? best_two : -1, tf) + "x the best two-launch weights-on-A");
    krow("fused, split by operand", tfs, ratio(tf, tfs) + "x fused");
    krow("fused, split by operand, PDL", tfp, ratio(tf, tfp) + "x fused");
    krow("fused, split, 24 MMA warps", tf24, ratio(tfs, tf24) + "x fused split");
    krow("fused, split, 24 MMA warps, staggered start", tf24s, ratio(tfs, tf24s) + "x fused split");
    krow("fused, split, staggered start", tfss, ratio(tfs, tfss) + "x fused split");
    krow("weights on A, PDL down", twp, ratio(twn, twp) + "x no L2 prefetch");
    krow("weights on A, PDL down, down to L2", twp2, ratio(twn, twp2) + "x no L2 prefetch");
    krow("weights on A, PDL down, all down to L2", twp3, ratio(twn, twp3) + "x no L2 prefetch");
    krow("weights on A, PDL down, split K", twk, ratio(twp, twk) + "x PDL down");
    krow("weights on A, PDL down, scale on fp32 sums", twf, ratio(twp, twf) + "x PDL down");
    krow("weights on A, PDL down, down to L2, staggered start", tw2s, ratio(twp2, tw2s) + "x PDL down, down to L2");
    krow("weights on A, PDL down, scale on fp32 sums, staggered start", twfs, ratio(twf, twfs) + "x scale on fp32 sums");
    krow("weights on A, PDL down, wgmma", twg, ratio(twp2, twg) + "x PDL down, down to L2; " + ratio(twf, twg) + "x scale on fp32 sums");
    krow("weights on A, PDL down, wgmma, 3 warpgroups", twg3, ratio(twp2, twg3) + "x PDL down, down to L2; " + ratio(twf, twg3) + "x scale on fp32 sums");
    krow("graph: weights on A, no L2 prefetch", gwn);
    krow("graph: weights on A, PDL down", gwp, ratio(gwn, gwp) + "x no L2 prefetch, graph");
    krow("graph: weights on A, PDL down, down to L2", gwp2, ratio(gwn, gwp2) + "x no L2 prefetch, graph");
    krow("graph: weights on A, PDL down, all down to L2", gwp3, ratio(gwn, gwp3) + "x no L2 prefetch, graph");
    krow("graph: weights on A, PDL down, split K", gwk, ratio(gwp, gwk) + "x PDL down, graph");
    krow("graph: weights on A, PDL down, scale on fp32 sums", gwf, ratio(gwp, gwf) + "x PDL down, graph");
    krow("graph: weights on A, PDL down, down to L2, staggered start", gw2s, ratio(gwp2, gw2s) + "x PDL down, down to L2, graph");
    krow("graph: weights on A, PDL down, scale on fp32 sums, staggered start", gwfs, ratio(gwf, gwfs) + "x scale on fp32 sums, graph");
    krow("graph: weights on A, PDL down, wgmma, 3 warpgroups", gwg3, ratio(gwp2, gwg3) + "x PDL down, down to L2, graph; " + ratio(gwf, gwg3) + "x scale on fp32 sums, graph");
    krow("graph: weights on A, PDL down, wgmma", gwg, ratio(gwp2, gwg) + "x PDL down, down to L2, graph; " + ratio(gwf, gwg) + "x scale on fp32 sums, graph");
    for (auto [what, us, gus] : {std::tuple<const char*, double, double>{"per-warp ring, 2 chunks a warp", trg, grg},
                                 {"per-warp ring, 2 chunks a warp, down to L2", trg2, grg2},
                                 {"per-warp ring, 1 chunk a warp", trg1, grg1},
                                 {"per-warp ring, 1 chunk a warp, down to L2", trg12, grg12}}) {
      krow(std::string("weights on A, PDL down, ") + what, us, ratio(twp2, us) + "x down to L2; " + ratio(twf, us) + "x scale on fp32 sums");
      krow(std::string("graph: weights on A, PDL down, ") + what, gus, ratio(gwp2, gus) + "x down to L2, graph; " + ratio(gwf, gus) + "x scale on fp32 sums, graph");
    }
    krow("weights on A, PDL down, E4M3 QGMMA", tq, ratio(twf, tq) + "x scale on fp32 sums; " + ratio(tauto, tq) + "x kAuto");
    krow("graph: weights on A, PDL down, E4M3 QGMMA", gq, ratio(gwf, gq) + "x scale on fp32 sums, graph");
    krow("weights on A, PDL down, E4M3 QGMMA, 64-row units", tqw, ratio(twf, tqw) + "x scale on fp32 sums; " + ratio(tauto, tqw) + "x kAuto");
    krow("graph: weights on A, PDL down, E4M3 QGMMA, 64-row units", gqw, ratio(gwf, gqw) + "x scale on fp32 sums, graph");
    row(b + " decode expert MLP, kAuto -> " + chosen_name, tauto, bytes, floor_us, "with a workspace, as the backend");
    row(b + " anchor moe_expert_mlp", ta, bytes, floor_us, "kAuto is " + ratio(ta, tauto) + "x faster");
    row(b + " permute+decode+combine", tall, bytes, floor_us, "eager");
    row(b + " permute+decode+combine", tg, bytes, floor_us, "CUDA graph replay");
    if (tgq != kSkipped) row(b + " permute+decode+combine, E4M3 QGMMA", tgq, bytes, floor_us, "CUDA graph replay, " + ratio(tg, tgq) + "x kAuto's");
    if (tgqw != kSkipped)
      row(b + " permute+decode+combine, E4M3 QGMMA, 64-row units", tgqw, bytes, floor_us, "CUDA graph replay, " + ratio(tg, tgqw) + "x kAuto's");
    row(b + " reference: D2D copy of those bytes", tcopy, bytes, floor_us, "reads them once, writes them once");
    row(b + " reference: read-only stream of those bytes", tread, bytes, floor_us,
        "bulk copies into shared memory, nothing computed; kAuto takes " + ratio(tread, tauto) + "x its time");
    for (auto [form, us] : {std::pair{bench::StreamReadForm::kLdg, tread_ldg}, {bench::StreamReadForm::kLdgL2Hint, tread_ldg2}})
      row(b + " reference: read-only stream of those bytes, " + bench::stream_read_form_name(form), us, bytes, floor_us,
          ratio(tread, us) + "x the bulk copies' speed; kAuto takes " + ratio(us, tauto) + "x its time");
    if (g_graph_steps > 0) {
      const std::string steps = "graph of " + std::to_string(g_graph_steps) + " steps, us a step: ";
      if (sqw != kSkipped) row(steps + "E4M3 QGMMA 64-row units", sqw, bytes, floor_us, ratio(gqw, sqw) + "x faster than one step a graph");
      if (sqwall != kSkipped)
        row(steps + "permute+decode+combine, E4M3 QGMMA 64-row units", sqwall, bytes, floor_us, ratio(tgqw, sqwall) + "x faster than one step a graph");
      row(steps + "read-only stream, bulk copies", sread, bytes, floor_us,
          ratio(tread, sread) + "x faster than eager" + (sqw != kSkipped ? "; the E4M3 MLP takes " + ratio(sread, sqw) + "x its time" : ""));
      row(steps + "read-only stream, 16-byte loads", sread_ldg, bytes, floor_us, ratio(tread_ldg, sread_ldg) + "x faster than eager");
      row(steps + "read-only stream, bulk copies, pdl", sread_pdl, bytes, floor_us, ratio(sread, sread_pdl) + "x faster than without pdl");
      row(steps + "read-only stream, 16-byte loads, pdl", sread_ldg_pdl, bytes, floor_us, ratio(sread_ldg, sread_ldg_pdl) + "x faster than without pdl");
    }
  }
  if (routes) std::fclose(routes);
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  const char* routes = nullptr;
  pdserve::cuda::bench::g_reps = 50;  // this bench's default (--reps)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--bw")) pdserve::cuda::bench::g_bw = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) pdserve::cuda::bench::g_reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--routes")) routes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--only")) pdserve::cuda::g_only = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--kernels")) pdserve::cuda::g_kernels = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batches")) pdserve::cuda::g_batches = argv[i + 1];
    else if (!std::strcmp(argv[i], "--graph-steps")) pdserve::cuda::g_graph_steps = std::atoi(argv[i + 1]);
  }
  pdserve::cuda::run_bench(routes);
  return 0;
}
