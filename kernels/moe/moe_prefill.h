// Prefill-time routed experts: a grouped GEMM over the local experts on bf16 tensor cores
// (fp32 accumulate), MXFP4 weights dequantised in registers on the way. Fifteen main loops
// (MoePrefillKernel below): fourteen warpgroup-MMA ones (kWgmma the default) and the mma.sync
// kernel this comment describes; the wgmma tiles are in docs/design.md.
// It replaces step 2 of moe.h for many rows per expert; steps 1 and 3 stay, so a prefill
// chunk runs
//   moe_permute_bf16 -> moe_expert_mlp_prefill -> moe_combine
// with the row count left on the device (no host sync; graph-capturable).
//
// Weights: moe_decode.h's decode layout, unchanged (the backend stores only that one). Its
// 8-row x 128-input tiles of 512 contiguous bytes are what one warp needs for one A operand
// half: lane (g, t)'s 16 bytes are row g's inputs 32i + 8t .. +7 of each 32-input group i.
// Two adjacent tiles form the MMA's A (16 weight rows), the tokens are B (8 a column
// block), so the token dimension of a tile can be cut in steps of 8: a short expert (the
// last tile of every expert, and most experts under skew) wastes little tensor-core work.
//
// Tiles and schedule: a CTA tile is up to 64 tokens of one expert x (gate/up) 256 outputs of each
// of w1 and w3, or (down) 512 outputs of w2, over all inputs in 128-input chunks; 8 warps,
// each 32 gate + 32 up outputs (or 64 down outputs) x the 64 tokens: 4 A operands x 8 token
// blocks = 32 MMAs a k-step, 128 fp32 accumulators a thread; a tile of fewer tokens runs a
// variant with 2, 4 or 6 column blocks (no branches inside the MMA loops). Each chunk's weight tiles,
// scales and bf16 token rows go through a 4-stage cp.async ring in shared memory (50 KB a
// stage). Gate/up's epilogue stages the fp32 sums in the drained ring and applies the
// activation in one rolled, coalesced loop (the unrolled version thrashed the instruction
// cache). Persistent CTAs: each one computes the tile list itself from `offsets` (a scan
// of ceil(rows_e / 64) x output tiles in shared memory), starts at tile blockIdx.x and then
// claims tiles from a queue in the caller's workspace or strides by the grid; within an
// expert the token tiles of one output tile are adjacent, so CTAs running at the same time
// share weight tiles in L2, in an order that rotates per output tile (moe_prefill_schedule.h).
//
// Precision: x and act are bf16 (rounded once: x in moe_permute_bf16, act in the gate/up
// epilogue), weights exact in bf16 after dequantisation, fp32 accumulation; out_sorted is
// fp32. Against the fp32 CPU reference the normalised error (max|gpu - cpu| / max|cpu|) is
// a few 1e-3 (two bf16 roundings of relative 2^-9 on the activations); tests bound it 1e-2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moe/moe_decode.h"
#include "pdserve/core/status.h"

namespace pdserve::cuda {

// Whether the weights fit the prefill kernel: cols % 128 == 0 for every projection and gate/up/down
// agree (w2 is dim x inter), so every projection's rows are a multiple of 128 too (a warp's 32 or
// 64 output rows are all real or all past the end); every projection in the kBf16 bit shuffle.
bool moe_prefill_fits(const MoeDecodeWeights& w);

// The main loop: kMmaSync (mma.sync m16n8k16, 8 warps, 64-token tiles), or warpgroup MMA
// (two consumer warpgroups, wgmma.m64nNk16 with the dequantised weights as the register A
// operand and the tokens as B from a swizzled shared-memory ring; docs/design.md): kWgmma
// (two m64 blocks a warpgroup, token tiles of 128 in order) or kWgmmaWideN (one m64 block
// a warpgroup, an expert's rows in equal token tiles of at most 192), kWgmmaSmemW (kWgmma with
// the packed weights and scales through the shared-memory ring, two chunks ahead, instead of
// global -> registers one chunk ahead) and kWgmmaSmemWDeep (kWgmmaSmemW leaving two wgmma
// groups running while the next k-step dequantises, not one). The wgmma kernels keep
// x_sorted and act with the inputs of each 32-input group in the order their MMA fragments
// take (moe_prefill_schedule.h, wgmma_k_position), so moe_permute_bf16 and
// moe_expert_mlp_prefill of one chunk must be given the same kernel. kAuto resolves to
// moe_prefill_choice(): kWgmmaTma160W, or kWgmmaTmaNarrow for a chunk whose routed rows average at
// most kMoePrefillNarrowMaxRowsPerExpert a local expert (docs/perf.md has the measurements behind it).
// kWgmmaTma (kWgmma's tiles and MMAs, the tokens by bulk tensor copies from one thread into
// an mbarrier ring, no CTA barrier in the main loop) and kWgmmaTma4 (the same with four
// warpgroups of one m64 block each instead of two of two): outputs bit-identical to kWgmma.
// kWgmmaProducer: a producer warpgroup dequantises each weight chunk once into shared memory
// (bf16) and brings the tokens by bulk copies; two consumer warpgroups run wgmma with both
// operands in shared memory on the same 128 weight rows and token halves of a tile of up to
// 256 (moe_prefill_producer_sm90.cu); the packed weights reach the producer by bulk copies
// into a shared-memory ring. Same input order and dequantisation as kWgmma: bit-identical.
// kWgmma160: kWgmma with token tiles of up to 160 cut in order (N 32..160), so an expert of
// 129..160 rows (EP4's ~146) dequantises each weight chunk once, not for a 128 tile and again
// for its tail; 160 fp32 accumulators a thread. Bit-identical to kWgmma (same k order).
// kWgmmaG2 / kWgmmaSmemWG2: kWgmma / kWgmmaSmemW with one wgmma commit group per two k-steps
// (both k-steps dequantised first), so up to four wgmmas stay queued a warpgroup. Same k order
// on every output: bit-identical to kWgmma.
// kWgmmaTmaMc: kWgmmaTma on 2-CTA clusters computing two adjacent output tiles of the same
// (expert, token tile), each CTA bringing half of every token chunk by a multicast bulk copy into
// both CTAs' rings (half the token bytes from L2). Bit-identical to kWgmma.
// kWgmmaCarry / kWgmmaCarry6: kWgmma with the cp.async ring and the weight prefetch carried
// across the persistent tile loop (the next tile's first chunks fetched during this tile's last
// k-steps and epilogue; the gate/up activation applied in registers and staged as bf16 in one
// ring slot); 5 / 6 ring slots. Same MMAs in the same k order: bit-identical to kWgmma.
// kWgmmaPingpong: two warpgroups a CTA each owning a whole tile (gate/up 64 gate + 64 up rows,
// down 128 rows, x up to 128 tokens), taking alternate tiles, their k-loops ordered by named
// barriers so one warpgroup's drain and epilogue overlap the other's MMAs; tokens by bulk copies
// into a 3-slot ring a warpgroup (moe_prefill_pingpong_sm90.cu). Bit-identical to kWgmma;
// 0.78-0.90x kWgmma on the H200 (docs/perf.md, "Pingpong consumer warpgroups"), opt-in.
// kWgmmaTma160: kWgmmaTma whose last token tile of an expert takes a tail of up to 32 rows (tiles
// of 128 in order, the last up to 160: an expert of 129..160 rows is one tile, its weights
// dequantised once), kWgmma160's half-chunk refill of the packed words, and L2 pulls of the words
// two chunks ahead; the bulk copies leave no per-thread copy addresses. Bit-identical to kWgmma.
// kWgmmaTma160W: kWgmmaTma160 whose packed words ride the token ring (one bulk tensor copy of the
// CTA tile's words a matrix into each stage, read back from shared memory half a word at a time),
// with token tiles of 160 in order:
// no thread loads or prefetches words from global memory; the ring is 4 stages of 56 KB instead
// of 5 of 40 KB. Up to kMoePrefillWordsMaxExperts local experts (the tile starts share the
// ring's shared memory); beyond that it runs kWgmmaTma160. Bit-identical to kWgmma.
// kWgmmaTmaNarrow: kWgmmaTma160W's ring and k-step loop on token tiles of at most 64 (an expert of
// more rows takes several), 3 stages of 32 KB and 128 registers a thread, so two CTAs share an SM:
// for chunks whose experts hold few rows each. Bit-identical to kWgmma.
enum class MoePrefillKernel {
  kAuto, kMmaSync, kWgmma, kWgmmaWideN, kWgmmaSmemW, kWgmmaSmemWDeep, kWgmmaTma, kWgmmaTma4, kWgmmaProducer, kWgmma160,
  kWgmmaG2, kWgmmaSmemWG2, kWgmmaCarry, kWgmmaCarry6, kWgmmaTmaMc, kWgmmaPingpong, kWgmmaTma160, kWgmmaTma160W, kWgmmaTmaNarrow
};
// kWgmmaTma160W's limit: its ring (4 x 56 KB + the alignment slack) leaves 1.9 KB of the SM's 227 KB
// for the tile starts, 4 bytes an expert; 448 = K3's 896 experts at EP2.
constexpr int64_t kMoePrefillWordsMaxExperts = 448;
// kAuto's switch to kWgmmaTmaNarrow: 1.16-1.18x kWgmmaTma160W at 2-32 rows an expert on even rows,
// 1.05-1.18x on random ones, but 0.82-0.87x on random rows averaging 64 (experts past 64 rows take
// two tiles) (docs/perf.md, "Two CTAs an SM on narrow tiles").
constexpr int64_t kMoePrefillNarrowMaxRowsPerExpert = 32;
// The kernel `kernel` stands for: itself, or kAuto's pick for a chunk whose routed rows average
// `rows_per_expert` a local expert (negative: not known, taken as many).
MoePrefillKernel moe_prefill_choice(MoePrefillKernel kernel = MoePrefillKernel::kAuto, int64_t rows_per_expert = -1);

// moe_permute (moe.h) writing the sorted rows as bf16 bits (round to nearest even):
// x_sorted [capacity, dim] uint16, each row's inputs in `kernel`'s order (the wgmma kernels:
// permuted within 32-input groups, so dim % 32 == 0 there).
Status moe_permute_bf16(const int32_t* ids, int64_t tokens, int64_t k, int64_t expert_begin, int64_t local_experts, const float* x,
                        int64_t dim, const MoePlan& plan, uint16_t* x_sorted, cudaStream_t stream,
                        MoePrefillKernel kernel = MoePrefillKernel::kAuto);

// moe_expert_mlp's contract on decode-layout weights with bf16 activations: per local
// expert e, over its rows [offsets[e], offsets[e+1]): act = act_fn(x W1^T, x W3^T) (bf16
// bits [capacity, inter]), out_sorted = act W2^T (fp32 [capacity, dim]). Two launches. The
// first call per kernel variant queries occupancy and raises its shared-memory limit;
// later calls make no such calls (capture-safe after a warm-up).
// Tile schedule: CTA i starts at tile i. With a `workspace` (moe_decode.h's, at least 8
// bytes, zero before the first call; the fused decode kernel's queue can be shared, calls
// being ordered on one stream) each CTA then claims the next unclaimed tile from its first
// two words (an atomic counter; the last CTA of each launch zeroes them again), so long
// tiles (a hot expert, Zipf's head) no longer hold up the tiles striding left to their CTA.
// Without one, CTAs stride by the grid. Calls that may overlap in time need separate
// workspaces. Every tile is computed the same way under both: bit-identical outputs.
// x_sorted as moe_permute_bf16 wrote it for the same `kernel`; act is that kernel's scratch.
Status moe_expert_mlp_prefill(const MoeDecodeWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                              const uint16_t* x_sorted, uint16_t* act, float* out_sorted, cudaStream_t stream,
                              MoeDecodeWorkspace workspace = {}, MoePrefillKernel kernel = MoePrefillKernel::kAuto);

}  // namespace pdserve::cuda
