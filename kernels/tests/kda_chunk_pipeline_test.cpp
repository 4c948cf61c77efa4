// The chunked KDA prefill's pipelined schedule (KdaChunkArgs::pipeline_blocks; bf16's pick) against
// the plain schedule: the same kernels and per-chunk tables, the state carried from block to
// block through the slot, so o and the whole pool must be bit-identical (memcmp, not a bound)
// in every precision (3xTF32, tf32, bf16) and both output places, at lengths spanning many
// blocks; also where passes split a long sequence (each pass pipelined), where a pass holds
// several sequences (the plain schedule), and replayed from a captured CUDA graph; and the packed
// state kernel's L2 prefetch distances (a hint) against prefetch off.
// The block split and the argument check run without a GPU; the rest skips itself without one.
#include <cstring>
#include <numeric>
#include <utility>

#include "kda/kda_chunk.h"
#include "pdserve/ops/kda.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using KdaChunkPipeline = GpuTest;

enum class Mode { kTf32, k3xTf32, kBf16 };
const char* name(Mode m) { return m == Mode::kBf16 ? "bf16" : m == Mode::k3xTf32 ? "3xtf32" : "tf32"; }

constexpr int64_t kSlots = 4, kLayers = 2, kLayer = 1;

struct Problem {
  int64_t H = 4, D = 128;
  std::vector<int64_t> lens;
  int64_t T() const { return std::accumulate(lens.begin(), lens.end(), int64_t{0}); }
  int64_t slot_floats() const { return kLayers * H * D * D; }
  int64_t chunks() const {
    int64_t n = 0;
    for (int64_t l : lens) n += (l + kKdaChunk - 1) / kKdaChunk;
    return n;
  }
};

struct Inputs {
  DeviceBuffer<float> q, k, v, g, beta;
};

Inputs make_inputs(const Problem& p, uint32_t seed) {
  const int64_t n = p.T() * p.H * p.D;
  std::vector<float> q = randn(n, seed), k = randn(n, seed + 1), v = randn(n, seed + 2), g = randn(n, seed + 3),
                     beta = randn(p.T() * p.H, seed + 4);
  ops::l2_normalize(q.data(), p.T() * p.H, p.D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(p.D)));
  ops::l2_normalize(k.data(), p.T() * p.H, p.D, 1e-6f, 1.0f);
  for (float& x : g) x = -5.0f / (1.0f + std::exp(-x));
  for (float& x : beta) x = 1.0f / (1.0f + std::exp(-x));
  return {dev(q), dev(k), dev(v), dev(g), dev(beta)};
}

struct Outcome {
  std::vector<float> o, pool;
};

KdaChunkArgs args_for(const Problem& p, const Inputs& in, const std::vector<int64_t>& cu, const std::vector<int32_t>& slots, float* o,
                      float* pool, DeviceBuffer<uint8_t>& ws, Mode mode, KdaChunkOutput output, int blocks, int prefetch = 0,
                      int tile = 0, int warps = 0, int mma = 0) {
  KdaChunkArgs a;
  a.q = in.q.get(), a.k = in.k.get(), a.v = in.v.get(), a.g = in.g.get(), a.beta = in.beta.get(), a.o = o;
  a.heads = p.H, a.head_dim = p.D, a.num_seqs = static_cast<int64_t>(p.lens.size()), a.cu_seqlens = cu.data(), a.slots = slots.data();
  a.state = pool, a.slot_stride = p.slot_floats(), a.layer_offset = kLayer * p.H * p.D * p.D;
  a.workspace = ws.get(), a.workspace_bytes = ws.size();
  a.precise = mode == Mode::k3xTf32, a.bf16 = mode == Mode::kBf16, a.output = output, a.pipeline_blocks = blocks;
  a.state_prefetch = prefetch, a.state_tile = tile, a.state_warps = warps;
  a.state_mma = mma;
  return a;
}

// One call from the same initial pool; workspace for `ws_chunks` chunks (0: the whole batch).
Outcome run(const Problem& p, const Inputs& in, Mode mode, KdaChunkOutput output, int blocks, int64_t ws_chunks = 0, int prefetch = 0,
            int tile = 0, int warps = 0, int mma = 0) {
  std::vector<int64_t> cu(p.lens.size() + 1, 0);
  for (size_t s = 0; s < p.lens.size(); ++s) cu[s + 1] = cu[s] + p.lens[s];
  std::vector<int32_t> slots(p.lens.size());
  for (size_t s = 0; s < slots.size(); ++s) slots[s] = static_cast<int32_t>((s * 3 + 1) % kSlots);
  auto pool = dev(randn(kSlots * p.slot_floats(), 99, 0.1f));
  DeviceBuffer<float> o(static_cast<size_t>(p.T() * p.H * p.D));
  EXPECT_TRUE(cuda_status(cudaMemset(o.get(), 0, o.size() * sizeof(float)), "memset").is_ok());
  DeviceBuffer<uint8_t> ws(kda_chunk_workspace_bytes(p.H, p.D, ws_chunks ? ws_chunks : p.chunks()));
  const KdaChunkArgs a = args_for(p, in, cu, slots, o.get(), pool.get(), ws, mode, output, blocks, prefetch, tile, warps, mma);
  EXPECT_TRUE(kda_chunk_prefill(a, nullptr).is_ok());
  return {host(o), host(pool)};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_identical(const Problem& p, int64_t ws_chunks, const std::vector<int>& blocks_list) {
  const Inputs in = make_inputs(p, 5);
  for (Mode mode : {Mode::k3xTf32, Mode::kTf32, Mode::kBf16})
    for (KdaChunkOutput out : {KdaChunkOutput::kInState, KdaChunkOutput::kSeparate, KdaChunkOutput::kPick}) {
      const Outcome plain = run(p, in, mode, out, 1, ws_chunks);  // 1: plain (0 picks pipelined in bf16)
      for (int blocks : blocks_list) {
        SCOPED_TRACE(::testing::Message() << name(mode) << " output " << static_cast<int>(out) << " blocks " << blocks << " T " << p.T()
                                          << " ws chunks " << ws_chunks);
        const Outcome piped = run(p, in, mode, out, blocks, ws_chunks);
        EXPECT_TRUE(same_bits(plain.o, piped.o)) << "output differs";
        EXPECT_TRUE(same_bits(plain.pool, piped.pool)) << "final state (pool) differs";
      }
      std::printf("  %s output=%d T=%ld ws_chunks=%ld: %zu pipelined block counts bit-identical checked\n", name(mode), static_cast<int>(out),
                  static_cast<long>(p.T()), static_cast<long>(ws_chunks), blocks_list.size());
    }
}

TEST(KdaChunkPipelineSplit, BlocksCoverEveryChunkOnce) {
  for (int64_t chunks = 1; chunks <= 300; ++chunks)
    for (int64_t blocks = 1; blocks <= std::min<int64_t>(chunks, kKdaChunkMaxPipelineBlocks); ++blocks) {
      EXPECT_EQ(kda_chunk_pipeline_block_start(chunks, blocks, 0), 0);
      EXPECT_EQ(kda_chunk_pipeline_block_start(chunks, blocks, blocks), chunks);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t n = kda_chunk_pipeline_block_start(chunks, blocks, b + 1) - kda_chunk_pipeline_block_start(chunks, blocks, b);
        EXPECT_GE(n, chunks / blocks);  // near-equal, never empty
        EXPECT_LE(n, chunks / blocks + 1);
      }
    }
}

TEST(KdaChunkPipelineSplit, RefusesBadBlockCounts) {
  KdaChunkArgs a;
  a.heads = 2, a.head_dim = 128, a.num_seqs = 0;  // an empty batch: nothing else to refuse
  a.pipeline_blocks = 8;
  EXPECT_TRUE(kda_chunk_prefill(a, nullptr).is_ok());
  a.pipeline_blocks = -1;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
  a.pipeline_blocks = kKdaChunkMaxPipelineBlocks + 1;
  EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok());
}

TEST(KdaChunkPipelineSplit, RefusesBadStatePrefetch) {
  KdaChunkArgs a;
  a.heads = 2, a.head_dim = 128, a.num_seqs = 0;
  for (int pf : {-1, 0, 1, 8}) {
    a.state_prefetch = pf;
    EXPECT_TRUE(kda_chunk_prefill(a, nullptr).is_ok()) << pf;
  }
  for (int pf : {-2, 9}) {
    a.state_prefetch = pf;
    EXPECT_FALSE(kda_chunk_prefill(a, nullptr).is_ok()) << pf;
  }
}

// The packed state kernel's L2 prefetch (KdaChunkArgs::state_prefetch) is a hint: every
// distance, off, and ones past a sequence's end (short sequences, several passes) give the bits
// of prefetch off, plain and pipelined.
TEST_F(KdaChunkPipeline, StatePrefetchBitIdentical) {
  struct Case {
    Problem p;
    int64_t ws_chunks;
  };
  for (const Case& c : {Case{{4, 128, {64 * 41 + 23}}, 0}, Case{{2, 128, {100, 700, 64, 1}}, 10}, Case{{2, 64, {1, 65, 900}}, 0},
                        Case{{2, 32, {333, 7}}, 0}}) {
    const Inputs in = make_inputs(c.p, 13);
    const Outcome off = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, 1, c.ws_chunks, -1);
    for (int blocks : {1, 4})
      for (int pf : {0, 1, 2, 8}) {
        SCOPED_TRACE(::testing::Message() << "prefetch " << pf << " blocks " << blocks << " D " << c.p.D << " T " << c.p.T());
        const Outcome on = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, blocks, c.ws_chunks, pf);
        EXPECT_TRUE(same_bits(off.o, on.o)) << "output differs";
        EXPECT_TRUE(same_bits(off.pool, on.pool)) << "final state (pool) differs";
      }
    std::printf("  bf16 D=%ld T=%ld ws_chunks=%ld: prefetch 0/1/2/8 x plain/4 blocks bit-identical to off checked\n", static_cast<long>(c.p.D),
                static_cast<long>(c.p.T()), static_cast<long>(c.ws_chunks));
  }
}

// bf16's packed state kernel at every warp count it has at D = 128 (tile 64: 16 and 8 warps;
// tile 32: 16; the default tile 32 on 8 above), pipelined against plain: one sequence, and
// passes of a piece each.
TEST_F(KdaChunkPipeline, PackedStateWarpsBitIdentical) {
  struct Case {
    Problem p;
    int64_t ws_chunks;
  };
  for (const Case& c : {Case{{4, 128, {64 * 41 + 23}}, 0}, Case{{2, 128, {1000}}, 10}}) {
    const Inputs in = make_inputs(c.p, 17);
    for (const auto& [tile, warps] : {std::pair{64, 16}, std::pair{64, 8}, std::pair{32, 16}}) {
      const Outcome plain = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, 1, c.ws_chunks, 0, tile, warps);
      for (int blocks : {0, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << "tile " << tile << " warps " << warps << " blocks " << blocks << " T " << c.p.T());
        const Outcome piped = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, blocks, c.ws_chunks, 0, tile, warps);
        EXPECT_TRUE(same_bits(plain.o, piped.o)) << "output differs";
        EXPECT_TRUE(same_bits(plain.pool, piped.pool)) << "final state (pool) differs";
      }
    }
    std::printf("  bf16 packed T=%ld ws_chunks=%ld: tile 64 w16 / w8, tile 32 w16 x 0/4/8 blocks bit-identical to plain checked\n",
                static_cast<long>(c.p.T()), static_cast<long>(c.ws_chunks));
  }
}

// The packed state kernel on wgmma (KdaChunkArgs::state_mma = 2) at tiles 32 / 64: pipelined
// (one stage, the pick there) against plain (two stages) at 4 / 8 blocks and with the L2
// prefetch, one sequence and passes of one piece each.
TEST_F(KdaChunkPipeline, WgmmaStateBitIdentical) {
  struct Case {
    Problem p;
    int64_t ws_chunks;
  };
  for (const Case& c : {Case{{4, 128, {64 * 41 + 23}}, 0}, Case{{2, 128, {1000}}, 10}}) {
    const Inputs in = make_inputs(c.p, 19);
    for (int tile : {32, 64}) {
      const Outcome plain = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, 1, c.ws_chunks, 0, tile, 0, 2);
      for (int blocks : {0, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << "tile " << tile << " blocks " << blocks << " T " << c.p.T());
        const Outcome piped = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, blocks, c.ws_chunks, 0, tile, 0, 2);
        EXPECT_TRUE(same_bits(plain.o, piped.o)) << "output differs";
        EXPECT_TRUE(same_bits(plain.pool, piped.pool)) << "final state (pool) differs";
      }
      for (int blocks : {1, 4}) {  // the L2 prefetch (a hint) at 2 and 8 chunks ahead
        for (int pf : {2, 8}) {
          SCOPED_TRACE(::testing::Message() << "tile " << tile << " blocks " << blocks << " prefetch " << pf << " T " << c.p.T());
          const Outcome on = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, blocks, c.ws_chunks, pf, tile, 0, 2);
          EXPECT_TRUE(same_bits(plain.o, on.o)) << "output differs";
          EXPECT_TRUE(same_bits(plain.pool, on.pool)) << "final state (pool) differs";
        }
      }
    }
    std::printf("  bf16 packed wgmma T=%ld ws_chunks=%ld: tiles 32 / 64 x 0/4/8 blocks, prefetch 2/8 bit-identical to plain checked\n",
                static_cast<long>(c.p.T()), static_cast<long>(c.ws_chunks));
  }
}

// The multicast wgmma state kernel (state_mma = 3 / 4; clusters of a head's CTAs): plain and
// pipelined (4 / 8 blocks, one stage asked: run as two) bit-identical to the plain wgmma
// kernel (2), one sequence and passes of one piece each.
TEST_F(KdaChunkPipeline, WgmmaMulticastStateBitIdentical) {
  struct Case {
    Problem p;
    int64_t ws_chunks;
  };
  for (const Case& c : {Case{{4, 128, {64 * 41 + 23}}, 0}, Case{{2, 128, {1000}}, 10}}) {
    const Inputs in = make_inputs(c.p, 23);
    for (int tile : {32, 64}) {
      const Outcome ref = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, 1, c.ws_chunks, 0, tile, 0, 2);
      for (int mma : {3, 4}) {
        for (int blocks : {1, 0, 4, 8}) {
          SCOPED_TRACE(::testing::Message() << "tile " << tile << " blocks " << blocks << " T " << c.p.T() << " mma " << mma);
          const Outcome mc = run(c.p, in, Mode::kBf16, KdaChunkOutput::kPick, blocks, c.ws_chunks, 0, tile, 0, mma);
          EXPECT_TRUE(same_bits(ref.o, mc.o)) << "output differs";
          EXPECT_TRUE(same_bits(ref.pool, mc.pool)) << "final state (pool) differs";
        }
      }
    }
    std::printf("  bf16 packed wgmma multicast T=%ld ws_chunks=%ld: tiles 32 / 64 x 1/0/4/8 blocks bit-identical to plain wgmma checked\n",
                static_cast<long>(c.p.T()), static_cast<long>(c.ws_chunks));
  }
}

// bf16's pick for a one-sequence pass of >= kKdaChunkMulticastMinChunks chunks (D = 128, >= 24 heads): state
// tile 64 on the multicast wgmma kernel, pipelined (4 blocks). It must equal that configuration
// asked for explicitly and the plain tile-32 wgmma call (a value column's state evolves alone, so
// the tile does not change its sums); one chunk short of the threshold it equals the plain call.
TEST_F(KdaChunkPipeline, MulticastSplitPickBitIdentical) {
  for (int64_t chunks : {kKdaChunkMulticastMinChunks, kKdaChunkMulticastMinChunks - 1}) {
    const bool split = chunks >= kKdaChunkMulticastMinChunks;
    const Problem p{24, 128, {chunks * kKdaChunk - (split ? 27 : 0)}};  // 24 heads: the fewest the pick takes
    const Inputs in = make_inputs(p, 29);
    SCOPED_TRACE(::testing::Message() << "T " << p.T());
    const Outcome pick = run(p, in, Mode::kBf16, KdaChunkOutput::kPick, 0);
    // Split: the configuration the pick stands for, and plain tile-32 wgmma; else plain with the picks.
    const Outcome asked = split ? run(p, in, Mode::kBf16, KdaChunkOutput::kPick, 4, 0, 0, 64, 0, 4) : run(p, in, Mode::kBf16, KdaChunkOutput::kPick, 1);
    EXPECT_TRUE(same_bits(pick.o, asked.o)) << "output differs from the configuration asked explicitly";
    EXPECT_TRUE(same_bits(pick.pool, asked.pool)) << "final state differs from the configuration asked explicitly";
    if (!split) continue;
    const Outcome plain32 = run(p, in, Mode::kBf16, KdaChunkOutput::kPick, 1, 0, 0, 32, 0, 2);
    EXPECT_TRUE(same_bits(pick.o, plain32.o)) << "output differs from plain tile 32";
    EXPECT_TRUE(same_bits(pick.pool, plain32.pool)) << "final state differs from plain tile 32";
  }
  std::printf("  bf16 pick at %ld chunks (= tile 64 multicast x 4 blocks = plain tile 32) and one short of it (= plain) checked\n",
              static_cast<long>(kKdaChunkMulticastMinChunks));
}

// One sequence of 42 chunks (the last partial), block counts from 2 to more than the chunks.
TEST_F(KdaChunkPipeline, OneSequenceBitIdentical) { expect_identical({4, 128, {64 * 41 + 23}}, 0, {0, 2, 5, 8, 64}); }

// A workspace of 10 chunks: the long sequence runs in passes of one piece each (each pipelined,
// the state carried between passes too); the batch's passes of several sequences stay plain.
TEST_F(KdaChunkPipeline, SeveralPassesAndBatchesBitIdentical) {
  expect_identical({2, 128, {1000}}, 10, {3, 8});
  expect_identical({2, 128, {100, 700, 64, 1}}, 10, {4});
  expect_identical({2, 64, {1500}}, 0, {6});
}

// With the tables uploaded by an earlier call, the pipelined call captures into a graph (its
// second stream forked and joined with events) and the replay equals the eager plain call.
TEST_F(KdaChunkPipeline, CapturedGraphBitIdentical) {
  const Problem p{4, 128, {64 * 20 + 5}};
  const Inputs in = make_inputs(p, 9);
  for (Mode mode : {Mode::k3xTf32, Mode::kTf32, Mode::kBf16}) {
    SCOPED_TRACE(name(mode));
    const Outcome plain = run(p, in, mode, KdaChunkOutput::kPick, 1);
    const std::vector<int64_t> cu = {0, p.T()};
    const std::vector<int32_t> slots = {1};
    const std::vector<float> pool0 = randn(kSlots * p.slot_floats(), 99, 0.1f);
    auto pool = dev(pool0);
    DeviceBuffer<float> o(static_cast<size_t>(p.T() * p.H * p.D));
    DeviceBuffer<uint8_t> ws(kda_chunk_workspace_bytes(p.H, p.D, p.chunks()));
    cudaStream_t s = nullptr;
    ASSERT_TRUE(cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream").is_ok());
    KdaChunkArgs a = args_for(p, in, cu, slots, o.get(), pool.get(), ws, mode, KdaChunkOutput::kPick, 6);
    ASSERT_TRUE(kda_chunk_prefill(a, s).is_ok());  // uploads the tables (and makes the state stream)
    ASSERT_TRUE(cuda_status(cudaStreamSynchronize(s), "sync").is_ok());
    ASSERT_TRUE(pool.upload(pool0).is_ok());
    ASSERT_TRUE(cuda_status(cudaMemset(o.get(), 0, o.size() * sizeof(float)), "memset").is_ok());
    a.tables_uploaded = true;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_TRUE(cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture").is_ok());
    const Status launched = kda_chunk_prefill(a, s);
    ASSERT_TRUE(cuda_status(cudaStreamEndCapture(s, &graph), "end capture").is_ok());
    ASSERT_TRUE(launched.is_ok()) << launched.message();
    ASSERT_TRUE(cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiate").is_ok());
    ASSERT_TRUE(cuda_status(cudaGraphLaunch(exec, s), "graph launch").is_ok());
    ASSERT_TRUE(cuda_status(cudaStreamSynchronize(s), "sync").is_ok());
    EXPECT_TRUE(same_bits(plain.o, host(o))) << "output differs";
    EXPECT_TRUE(same_bits(plain.pool, host(pool))) << "final state (pool) differs";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

}  // namespace
}  // namespace pdserve::cuda
