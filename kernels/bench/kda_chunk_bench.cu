// Chunked KDA prefill (kda_chunk.h) timings against the floor, at the issue's shapes:
// B1 H32 D128 at T = 16K and 64K (fla's chunk_kda, kda_chunk_fla.py, is the anchor in the same
// run) and the TP4 prefill rank's 24 heads at the same lengths, each continuing from a state.
// Floor: max(bytes / 4.2 TB/s, FLOPs / 790 TF/s); bytes = q, k, v, g read and o written once
// (fp32) plus beta and the state read and written; FLOPs = the chunked form's matmuls,
// 5 C^2 D + 6 C D^2 per chunk and head (C = 64). Median of 20 timed calls after 3 warm-ups;
// then the intra-chunk, state-passing and (output in its own pass) output kernels timed alone
// (where the time goes).
//   kda_chunk_bench --packed [picks]: bf16 mode's fp32 vs packed bf16 workspace, plain and
//   pipelined, then the launcher's picks (with "picks": the former default and the picks only).
//   kda_chunk_bench --engine [max_running]: the backend's call at the K3 prefill rank's 8K step
//   (old 512 MiB workspace cap vs the step-sized one, 3xTF32 and bf16; passes, us per layer).
//   kda_chunk_bench --pipeline: plain vs the pipelined schedule (4 and 8 blocks) at those shapes,
//   every precision (the launcher's pick of the output place), with the grids.
//   kda_chunk_bench [T H state_tile math state_buffers output warps blocks ws intra prefetch mma]   (math 0: tf32, 1: 3xTF32,
//   2: bf16; output 1: in the state kernel, 2: its own pass; warps of the in-state kernel, 8 or
//   16; blocks: pipelined block counts to time beside the plain schedule, e.g. 4,8; ws: bf16
//   mode's workspace, 0 pick, 1 fp32, 2 packed bf16; warps 0: the launcher's pick (8); 16 is
//   the packed kernel's too at tiles 32 / 64; intra: bf16 mode's intra kernel,
//   KdaChunkArgs::bf16_intra, 0 pick (1), 1 fp32 k / q staging, 2 bf16 k / q; prefetch: the
//   packed state kernel's L2 prefetch distance, KdaChunkArgs::state_prefetch, 0 pick, -1 off; mma:
//   the packed state kernel, KdaChunkArgs::state_mma, 0 pick, 1 mma.sync, 2 wgmma, 3 / 4 wgmma with cluster multicast; no
//   arguments: the issue's shapes (T 16K / 64K, H 32 / 24), every precision, the output in the
//   state kernel (8 and 16 warps) and in its own pass at tile 32 with two buffers;
//   kda_chunk_bench --accuracy DIR: ours and fla's error on the inputs kda_chunk_fla.py dumped;
//   KDA_CHUNK_BENCH_RECURRENT=1 adds the token recurrence once)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "kda/kda.h"
#include "kda/kda_chunk.h"
#include "kda/kda_chunk_common.cuh"
#include "pdserve/ops/kda.h"

namespace pdserve::cuda {
namespace {

using bench::check;

__device__ float hash_uniform(uint64_t i, uint32_t seed) {  // in [-1, 1)
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}
// kind 0: plain, 1: log decay in (-5, 0) (K3's bounded gate), 2: sigmoid (beta).
__global__ void fill(float* p, int64_t n, uint32_t seed, int kind) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = 3.0f * hash_uniform(i, seed);
    p[i] = kind == 0 ? u : kind == 1 ? -5.0f / (1.0f + __expf(-u)) : 1.0f / (1.0f + __expf(-u));
  }
}

DeviceBuffer<float> random_buffer(int64_t n, uint32_t seed, int kind) {
  DeviceBuffer<float> b(n);
  fill<<<1024, 256>>>(b.get(), n, seed, kind);
  return b;
}

const char* math_name(kda_chunk::Math m) { return m == kda_chunk::kBf16 ? "bf16  " : m == kda_chunk::k3xTf32 ? "3xtf32" : "tf32  "; }

void run_shape(int64_t T, int64_t H, int tile, kda_chunk::Math math, int buffers, int output, int warps = 8,
               const std::vector<int>& pipeline = {}, int bf16_ws = 0, int bf16_intra = 0, int prefetch = 0, int state_mma = 0) {
  const int64_t D = 128, n = T * H * D;
  DeviceBuffer<float> q = random_buffer(n, 1, 0), k = random_buffer(n, 2, 0), v = random_buffer(n, 3, 0);
  DeviceBuffer<float> g = random_buffer(n, 4, 1), beta = random_buffer(T * H, 5, 2), o(n);
  DeviceBuffer<float> state = random_buffer(H * D * D, 6, 0);
  check(l2_normalize(q.get(), T * H, D, 1e-6f, 1.0f / std::sqrt(float(D)), nullptr), "l2 q");
  check(l2_normalize(k.get(), T * H, D, 1e-6f, 1.0f, nullptr), "l2 k");
  const int64_t cu[2] = {0, T};
  const int32_t slot = 0;
  DeviceBuffer<uint8_t> ws(kda_chunk_workspace_bytes(H, D, kda_chunk_count(cu, 1)));
  KdaChunkArgs a;
  a.q = q.get(), a.k = k.get(), a.v = v.get(), a.g = g.get(), a.beta = beta.get(), a.o = o.get();
  a.heads = H, a.head_dim = D, a.num_seqs = 1, a.cu_seqlens = cu, a.slots = &slot;
  a.state = state.get(), a.slot_stride = H * D * D, a.layer_offset = 0;
  a.workspace = ws.get(), a.workspace_bytes = ws.size(), a.state_tile = tile;
  a.precise = math == kda_chunk::k3xTf32, a.bf16 = math == kda_chunk::kBf16, a.state_buffers = buffers, a.output = static_cast<KdaChunkOutput>(output);
  a.state_warps = warps, a.bf16_workspace = bf16_ws, a.bf16_intra = bf16_intra, a.state_prefetch = prefetch;
  a.state_mma = state_mma;
  a.pipeline_blocks = 1;  // plain (bf16's pick is pipelined)
  // The launcher's state kernel for the plain call, the one the kernels timed alone below run.
  const int64_t nch = (T + 63) / 64;
  const KdaChunkStatePlan plan = kda_chunk_plan_state(a, 1, nch, nch);
  const bool packed = plan.packed, wgmma = plan.wgmma;
  const int vt = plan.vt, multicast = plan.multicast;
  const double us = bench::median_us([&](int) { check(kda_chunk_prefill(a, nullptr), "kda_chunk_prefill"); });
  check(cuda_status(cudaDeviceSynchronize(), "sync"), "sync");
  // The pipelined schedule (KdaChunkArgs::pipeline_blocks) on the same buffers, and the grids
  // that decide whether its two kernels can share the SMs.
  std::vector<double> us_pipe;
  for (int blocks : pipeline) {
    a.pipeline_blocks = blocks;
    us_pipe.push_back(bench::median_us([&](int) { check(kda_chunk_prefill(a, nullptr), "kda_chunk_prefill (pipelined)"); }));
    check(cuda_status(cudaDeviceSynchronize(), "sync"), "sync");
  }
  a.pipeline_blocks = 1;
  // The kernels alone (the same tables kda_chunk_prefill builds for one sequence).
  std::vector<kda_chunk::ChunkJob> cj;
  for (int64_t c = 0; c < nch; ++c) cj.push_back({c * 64, static_cast<int32_t>(std::min<int64_t>(64, T - c * 64)), 0});
  const kda_chunk::SeqJob sj{0, T, 0, 0, static_cast<int32_t>(nch)};
  DeviceBuffer<kda_chunk::ChunkJob> dchunks(cj.size());
  DeviceBuffer<kda_chunk::SeqJob> dseq(1);
  check(cuda_status(cudaMemcpy(dchunks.get(), cj.data(), cj.size() * sizeof(cj[0]), cudaMemcpyHostToDevice), "tables"), "tables");
  check(cuda_status(cudaMemcpy(dseq.get(), &sj, sizeof(sj), cudaMemcpyHostToDevice), "tables"), "tables");
  DeviceBuffer<float> inter(static_cast<size_t>(nch * H) * kda_chunk::Layout<128>::floats);
  const int state_warps = kda_chunk_state_warps(warps, D, vt);  // the launcher's (0: its pick, 8)
  const double us_intra = bench::median_us([&](int) {
    check(cuda_status(kda_chunk_intra_launch(128, math, a.q, a.k, a.v, a.g, a.beta, H,
                                             dchunks.get(), nch, inter.get(), nullptr, packed, bf16_intra == 2),
                      "intra"),
          "intra");
  });
  // (The separate-output state kernel overwrites u with v_new: repeated runs time the same
  // work on drifting values.)
  const bool separate = plan.separate;
  const double us_state = bench::median_us([&](int) {
    if (separate)
      check(cuda_status(kda_chunk_state_split_launch(128, vt, math, buffers != 1, inter.get(), H, dseq.get(), 1, a.state, 0, nullptr), "state"),
            "state");
    else if (wgmma)
      check(cuda_status(kda_chunk_state_wgmma_launch(128, vt, buffers == 0 ? 2 : buffers, inter.get(), H, dseq.get(), 1, a.state, 0, a.o, nullptr,
                                                     prefetch == 0 ? kKdaChunkStatePrefetch : std::max(prefetch, 0), multicast, nch),
                        "state"),
            "state");
    else
      check(cuda_status(kda_chunk_state_launch(128, vt, state_warps, math, buffers != 1, inter.get(), H, dseq.get(), 1, a.state, 0, a.o, nullptr, packed,
                                                prefetch == 0 ? kKdaChunkStatePrefetch : std::max(prefetch, 0)), "state"),
            "state");
  });
  const double us_out = !separate ? 0.0 : bench::median_us([&](int) {
    check(cuda_status(kda_chunk_output_launch(128, math, inter.get(), H, dchunks.get(), nch, a.o, nullptr), "output"), "output");
  });
  const double C = 64, chunks = double((T + 63) / 64) * H;
  const double flops = chunks * (5 * C * C * D + 6 * C * D * D);
  const double bytes = 4.0 * (5.0 * n + T * H + 2.0 * H * D * D);
  const double floor_us = std::max(bytes / bench::g_bw, flops / bench::g_flops) * 1e6;
  std::printf("chunk %s%s%s pf=%d %s %s w%-2d buf=%d T=%6ld H=%2ld D=%ld tile=%2d  %9.1f us (intra %8.1f, state %8.1f, output %7.1f)  floor %7.1f us (%s)  x%.2f floor  %6.1f TF/s  %6.0f GB/s  ws %.0f MB\n",
              math_name(math), multicast == 1 ? " wgmma-mc" : multicast == 2 ? " wgmma-mcl" : wgmma ? " wgmma" : "", math != kda_chunk::kBf16 ? "" : bf16_intra != 2 ? " intra=fp32kq" : " intra=bf16kq",
              prefetch == 0 ? kKdaChunkStatePrefetch : std::max(prefetch, 0), packed ? "ws16" : "ws32", separate ? "sep" : "ins", separate ? 8 : state_warps, buffers, static_cast<long>(T), static_cast<long>(H), static_cast<long>(D), tile, us, us_intra, us_state, us_out, floor_us,
              bytes / bench::g_bw > flops / bench::g_flops ? "bytes" : "flops", us / floor_us, flops / us * 1e-6, bytes / us * 1e-3,
              ws.size() / 1e6);
  if (!pipeline.empty()) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "props");
    a.pipeline_blocks = 0;  // the pick's pipelined pass (its tile: the multicast pick's where it applies)
    const int pick_vt = kda_chunk_plan_state(a, 1, nch, nch).vt;
    a.pipeline_blocks = 1;
    std::printf("  grids: intra %ld x %ld CTAs of 256 (%ld a block of %d chunks at 8 blocks), state %ld x %ld CTAs of 256, "
                "%d SMs, %zu B shared memory an SM\n",
                static_cast<long>(nch), static_cast<long>(H), static_cast<long>(nch / 8 * H), static_cast<int>(nch / 8),
                static_cast<long>(D / pick_vt), static_cast<long>(H), prop.multiProcessorCount, prop.sharedMemPerMultiprocessor);
    for (size_t i = 0; i < pipeline.size(); ++i)
      std::printf("  pipelined %2d blocks: %9.1f us (plain %9.1f us, x%.3f)\n", pipeline[i], us_pipe[i], us, us_pipe[i] / us);
  }
}

// The token recurrence the backend used before, once (it is slow), for the record.
void run_recurrent(int64_t T, int64_t H) {
  const int64_t D = 128, n = T * H * D;
  DeviceBuffer<float> q = random_buffer(n, 1, 0), k = random_buffer(n, 2, 0), v = random_buffer(n, 3, 0);
  DeviceBuffer<float> g = random_buffer(n, 4, 1), beta = random_buffer(T * H, 5, 2), o(n), state = random_buffer(H * D * D, 6, 0);
  check(l2_normalize(q.get(), T * H, D, 1e-6f, 1.0f / std::sqrt(float(D)), nullptr), "l2 q");
  check(l2_normalize(k.get(), T * H, D, 1e-6f, 1.0f, nullptr), "l2 k");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  check(kda_recurrent(q.get(), k.get(), v.get(), g.get(), beta.get(), 64, H, D, state.get(), o.get(), nullptr), "warm");
  cudaEventRecord(e0);
  check(kda_recurrent(q.get(), k.get(), v.get(), g.get(), beta.get(), T, H, D, state.get(), o.get(), nullptr), "kda_recurrent");
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  std::printf("recurrent T=%6ld H=%2ld D=%ld  %9.1f us (one call)\n", static_cast<long>(T), static_cast<long>(H), static_cast<long>(D),
              ms * 1e3);
}


// Accuracy on fla's own inputs (kda_chunk_fla.py --dump DIR writes them with fla's outputs):
// fp32 q, k (L2-normalised, q unscaled), v, g, beta [T][H](D), h0 [H][V][K], fla's o and final
// state. Ours in every mode and fla's, each against the fp32 CPU token recurrence
// (ops::kda_recurrent) on the fp32 inputs: max |x - ref| / max |ref| of the output and state.
std::vector<float> read_floats(const std::string& path, size_t n) {
  std::vector<float> x(n);
  std::ifstream f(path, std::ios::binary);
  if (!f.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(n * sizeof(float)))) {
    std::fprintf(stderr, "accuracy: cannot read %zu floats from %s\n", n, path.c_str());
    std::exit(2);
  }
  return x;
}

double nerr(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(double(x[i]) - ref[i])), mag = std::max(mag, std::fabs(double(ref[i])));
  return diff / mag;
}

void accuracy(const std::string& dir) {
  long T = 0, H = 0, D = 0;
  {
    std::ifstream meta(dir + "/meta.txt");
    if (!(meta >> T >> H >> D)) {
      std::fprintf(stderr, "accuracy: no %s/meta.txt\n", dir.c_str());
      std::exit(2);
    }
  }
  const size_t n = size_t(T) * H * D, ns = size_t(H) * D * D;
  std::vector<float> q = read_floats(dir + "/q.bin", n), k = read_floats(dir + "/k.bin", n), v = read_floats(dir + "/v.bin", n);
  std::vector<float> g = read_floats(dir + "/g.bin", n), beta = read_floats(dir + "/beta.bin", size_t(T) * H);
  const std::vector<float> h0 = read_floats(dir + "/h0.bin", ns);
  const std::vector<float> fla_o = read_floats(dir + "/fla_o.bin", n), fla_s = read_floats(dir + "/fla_state.bin", ns);
  const float scale = 1.0f / std::sqrt(float(D));
  for (float& x : q) x *= scale;  // our contract: q arrives scaled
  std::vector<float> ref_o(n), ref_s = h0;
  ops::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, H, D, ref_s.data(), ref_o.data());
  std::printf("accuracy T=%ld H=%ld D=%ld vs the fp32 CPU recurrence on the fp32 inputs (nerr = max|x - ref| / max|ref|):\n", T, H, D);
  std::printf("  fla chunk_kda bf16 safe_gate   output %.2e  state %.2e\n", nerr(fla_o, ref_o), nerr(fla_s, ref_s));
  DeviceBuffer<float> dq(n), dk(n), dv(n), dg(n), db(size_t(T) * H), dout(n), dst(ns);
  check(cudaMemcpy(dq.get(), q.data(), n * 4, cudaMemcpyHostToDevice), "up");
  check(cudaMemcpy(dk.get(), k.data(), n * 4, cudaMemcpyHostToDevice), "up");
  check(cudaMemcpy(dv.get(), v.data(), n * 4, cudaMemcpyHostToDevice), "up");
  check(cudaMemcpy(dg.get(), g.data(), n * 4, cudaMemcpyHostToDevice), "up");
  check(cudaMemcpy(db.get(), beta.data(), size_t(T) * H * 4, cudaMemcpyHostToDevice), "up");
  const int64_t cu[2] = {0, T};
  const int32_t slot = 0;
  DeviceBuffer<uint8_t> ws(kda_chunk_workspace_bytes(H, D, kda_chunk_count(cu, 1)));
  const std::pair<kda_chunk::Math, int> modes[] = {{kda_chunk::k3xTf32, 0}, {kda_chunk::kTf32, 0}, {kda_chunk::kBf16, 1}, {kda_chunk::kBf16, 2}};
  for (const auto& [m, ws_format] : modes) {
    check(cudaMemcpy(dst.get(), h0.data(), ns * 4, cudaMemcpyHostToDevice), "up");
    KdaChunkArgs a;
    a.q = dq.get(), a.k = dk.get(), a.v = dv.get(), a.g = dg.get(), a.beta = db.get(), a.o = dout.get();
    a.heads = H, a.head_dim = D, a.num_seqs = 1, a.cu_seqlens = cu, a.slots = &slot;
    a.state = dst.get(), a.slot_stride = int64_t(ns), a.workspace = ws.get(), a.workspace_bytes = ws.size();
    a.precise = m == kda_chunk::k3xTf32, a.bf16 = m == kda_chunk::kBf16;
    a.bf16_workspace = ws_format;
    check(kda_chunk_prefill(a, nullptr), "kda_chunk_prefill");
    std::vector<float> o(n), st(ns);
    check(cudaMemcpy(o.data(), dout.get(), n * 4, cudaMemcpyDeviceToHost), "down");
    check(cudaMemcpy(st.data(), dst.get(), ns * 4, cudaMemcpyDeviceToHost), "down");
    std::printf("  ours %s %s              output %.2e  state %.2e\n", math_name(m), m != kda_chunk::kBf16 ? "    " : ws_format == 2 ? "ws16" : "ws32", nerr(o, ref_o), nerr(st, ref_s));
  }
}

// "4,8" -> {4, 8}: the pipelined block counts to time beside the plain schedule.
std::vector<int> block_counts(const char* list) {
  std::vector<int> out;
  for (const char* p = list; *p;) {
    char* end = nullptr;
    out.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return out;
}

// The CUDA backend's call (kernels/backend/cuda_layers.cpp CudaModel::kda_layer) at one
// step's batch: sequences of `lens` tokens in slots 0.. of a pool, H heads of D = 128, every
// pick left to the launcher, the workspace the backend sizes for the cap, the job tables
// uploaded by the step's first KDA layer and reused by the rest (timed: a later layer's call).
void engine_call(const std::vector<int64_t>& lens, int64_t H, bool bf16, size_t cap, const char* label) {
  const int64_t D = 128, nseq = static_cast<int64_t>(lens.size());
  std::vector<int64_t> cu{0};
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  const int64_t T = cu.back(), n = T * H * D, chunks = kda_chunk_count(cu.data(), nseq);
  std::vector<int32_t> slots(static_cast<size_t>(nseq));
  for (int64_t s = 0; s < nseq; ++s) slots[static_cast<size_t>(s)] = static_cast<int32_t>(s);
  DeviceBuffer<float> q = random_buffer(n, 1, 0), k = random_buffer(n, 2, 0), v = random_buffer(n, 3, 0);
  DeviceBuffer<float> g = random_buffer(n, 4, 1), beta = random_buffer(T * H, 5, 2), o(n);
  DeviceBuffer<float> state = random_buffer(nseq * H * D * D, 6, 0);
  check(l2_normalize(q.get(), T * H, D, 1e-6f, 1.0f / std::sqrt(float(D)), nullptr), "l2 q");
  check(l2_normalize(k.get(), T * H, D, 1e-6f, 1.0f, nullptr), "l2 k");
  const size_t ws_bytes = kda_prefill_workspace_bytes(H, D, chunks, cap);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  KdaChunkArgs a;
  a.q = q.get(), a.k = k.get(), a.v = v.get(), a.g = g.get(), a.beta = beta.get(), a.o = o.get();
  a.heads = H, a.head_dim = D, a.num_seqs = nseq, a.cu_seqlens = cu.data(), a.slots = slots.data();
  a.state = state.get(), a.slot_stride = H * D * D, a.layer_offset = 0;
  a.workspace = ws.get(), a.workspace_bytes = ws_bytes, a.bf16 = bf16;
  check(kda_chunk_prefill(a, nullptr), "kda_chunk_prefill (first layer: uploads)");
  a.tables_uploaded = true;
  const double us = bench::median_us([&](int) { check(kda_chunk_prefill(a, nullptr), "kda_chunk_prefill"); });
  check(cuda_status(cudaDeviceSynchronize(), "sync"), "sync");
  const int64_t passes = kda_chunk_pass_count(H, D, chunks, ws_bytes);
  const int64_t first = std::min(chunks, kda_chunk_pass_capacity(H, D, chunks, ws_bytes));
  const bool mc = passes == 1 && kda_chunk_multicast_pick(a, nseq, first);
  const double C = 64, flops = double(chunks) * H * (5 * C * C * D + 6 * C * D * D);
  const double bytes = 4.0 * (5.0 * n + T * H + 2.0 * nseq * H * D * D);
  const double floor_us = std::max(bytes / bench::g_bw, flops / bench::g_flops) * 1e6;
  std::printf("engine %-22s %s T=%5ld seqs=%ld H=%ld D=128 chunks=%ld  ws %7.1f MiB  passes %ld%s  %8.1f us  floor %6.1f us  x%.2f floor\n", label,
              bf16 ? "bf16  " : "3xtf32", static_cast<long>(T), static_cast<long>(nseq), static_cast<long>(H), static_cast<long>(chunks),
              ws_bytes / 1048576.0, static_cast<long>(passes), mc ? " (multicast pick)" : "", us, floor_us, us / floor_us);
}

// --engine [max_running]: what the backend's KDA prefill gains at the K3 prefill rank (TP4: 24
// heads, D = 128) for an 8K-token step, one sequence and 4 x 2048: the old fixed 512 MiB cap
// vs the cap sized for the step (8192 tokens, max_running sequences), 3xTF32 and bf16.
void engine(int64_t max_running) {
  const int64_t H = 24, step = 8192;
  const size_t old_cap = kKdaPrefillWorkspaceFloor, new_cap = kda_prefill_workspace_cap(H, 128, step, max_running);
  std::printf("kda_chunk_workspace_bytes(24, 128, 128) = %zu B (%.1f MiB, every mode); cap for 8192 tokens x %ld seqs: %zu B (%.1f MiB, %ld chunks)\n",
              kda_chunk_workspace_bytes(H, 128, 128), kda_chunk_workspace_bytes(H, 128, 128) / 1048576.0, static_cast<long>(max_running), new_cap,
              new_cap / 1048576.0, static_cast<long>(kda_prefill_max_chunks(step, max_running)));
  for (const std::vector<int64_t>& lens : {std::vector<int64_t>{step}, std::vector<int64_t>{2048, 2048, 2048, 2048}}) {
    engine_call(lens, H, false, old_cap, "(i) old 512 MiB cap");
    engine_call(lens, H, false, new_cap, "(ii) step cap");
    engine_call(lens, H, true, old_cap, "(bf16) old 512 MiB cap");
    engine_call(lens, H, true, new_cap, "(iii) step cap");
  }
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  using namespace pdserve::cuda;
  if (argc == 3 && std::strcmp(argv[1], "--accuracy") == 0) {
    accuracy(argv[2]);
    return 0;
  }
  if ((argc == 2 || argc == 3) && std::strcmp(argv[1], "--engine") == 0) {
    engine(argc == 3 ? std::atol(argv[2]) : 16);  // 16: RuntimeConfig's max_running default
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--pipeline") == 0) {
    // Plain vs pipelined (4 and 8 blocks) at the issue's shapes, every precision, the
    // launcher's pick of the output place (tile 32, two buffers: its defaults at these shapes).
    const int64_t shapes[][2] = {{16384, 32}, {65536, 32}, {16384, 24}, {65536, 24}};
    for (kda_chunk::Math m : {kda_chunk::kBf16, kda_chunk::kTf32, kda_chunk::k3xTf32})
      for (const auto& sh : shapes) run_shape(sh[0], sh[1], 0, m, 0, m == kda_chunk::k3xTf32 && sh[1] == 24 ? 2 : 1, 8, {4, 8});
    return 0;
  }
  if ((argc == 2 || argc == 3) && std::strcmp(argv[1], "--packed") == 0) {
    // bf16 mode, output in the state kernel, tile 32: the fp32 workspace (the former default,
    // two buffers) vs the packed bf16 one (two and one buffers), plain and pipelined; the
    // separate output single-buffered (the configuration that fit beside the intra kernel before).
    // Then the launcher's picks (tile, buffers, output place, workspace) plain and pipelined.
    const int64_t shapes[][2] = {{16384, 32}, {65536, 32}, {16384, 24}, {65536, 24}};
    const bool all = argc == 2;
    for (const auto& sh : shapes) {
      if (all) {
        run_shape(sh[0], sh[1], 32, kda_chunk::kBf16, 2, 1, 8, {4, 8}, 1);
        run_shape(sh[0], sh[1], 32, kda_chunk::kBf16, 2, 1, 8, {4, 8}, 2);
        run_shape(sh[0], sh[1], 32, kda_chunk::kBf16, 1, 1, 8, {4, 8, 16}, 2);
        if (sh[0] == 16384 && sh[1] == 32) run_shape(sh[0], sh[1], 32, kda_chunk::kBf16, 1, 2, 8, {4, 8});
      } else {
        run_shape(sh[0], sh[1], 32, kda_chunk::kBf16, 2, 1, 8, {}, 1);  // the former default (plain)
      }
      run_shape(sh[0], sh[1], 0, kda_chunk::kBf16, 0, 0, 8, {2, 4, 6, 8}, 0);
    }
    return 0;
  }
  if (argc >= 3) {
    run_shape(std::atol(argv[1]), std::atol(argv[2]), argc > 3 ? std::atoi(argv[3]) : 0,
              static_cast<kda_chunk::Math>(argc > 4 ? std::atoi(argv[4]) : 1),
              argc > 5 ? std::atoi(argv[5]) : 0, argc > 6 ? std::atoi(argv[6]) : 0, argc > 7 ? std::atoi(argv[7]) : 8,
              argc > 8 ? block_counts(argv[8]) : std::vector<int>{}, argc > 9 ? std::atoi(argv[9]) : 0,
              argc > 10 ? std::atoi(argv[10]) : 0, argc > 11 ? std::atoi(argv[11]) : 0, argc > 12 ? std::atoi(argv[12]) : 0);
    return 0;
  }
  // Per precision and shape: the output in the state kernel (the default), then in its own
  // pass, both at tile 32 with two buffers (the best of tiles 16 / 32 and one / two buffers
  // in docs/perf.md; other settings through the arguments).
  struct Shape {
    int64_t T, H;
  };
  const Shape shapes[] = {{16384, 32}, {65536, 32}, {16384, 24}, {65536, 24}};
  for (kda_chunk::Math m : {kda_chunk::k3xTf32, kda_chunk::kTf32, kda_chunk::kBf16})
    for (const Shape& sh : shapes)
      for (int output : {1, 2}) {
        run_shape(sh.T, sh.H, 32, m, 2, output);
        if (output == 1) run_shape(sh.T, sh.H, 32, m, 2, output, 16);  // the in-state kernel on 16 warps
      }
  if (std::getenv("KDA_CHUNK_BENCH_RECURRENT")) run_recurrent(8192, 24);
  return 0;
}
