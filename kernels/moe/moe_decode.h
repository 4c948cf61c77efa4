// Decode-time routed experts: a Marlin-style MXFP4 kernel for 1 to a few rows per expert
// that streams each touched expert's weight bytes once, all local experts in one launch.
// It replaces step 2 of moe.h (moe_expert_mlp) on weights repacked at load time; steps 1
// (moe_permute) and 3 (moe_combine) are unchanged, so a decode step is
//   moe_permute -> moe_expert_mlp_decode -> moe_combine
// with the row count left on the device (no host sync; graph-capturable).
//
// Repacked layout ("decode layout"), per projection, stacked over the local experts; a
// matrix of `rows` outputs x `cols` inputs (rows % 8 == 0, cols % 128 == 0) is cut into
// tiles of 8 output rows x 128 inputs. Tile (n, c) (n = row tile, c = 128-input chunk,
// c fastest) is 512 packed bytes followed in the scale array by 32 scale bytes:
//   packed[e][n][c][lane 0..31][16 bytes]   scales[e][n][c][g 0..7][4 bytes]
// Lane = 4*g + t holds output row 8n + g; its 16 bytes are 4 words, word i = the 8 inputs
// 128c + 32i + 8t .. +7 (E2M1 nibbles, bit-shuffled as below), and scale byte i of row g
// is that row's E8M0 scale of inputs 128c + 32i .. +31, the group that word i lies in.
// So a warp reads one tile as 512 contiguous bytes (four fully used 128-byte lines, one
// 16-byte load per lane) plus 32 contiguous scale bytes (one 4-byte load per lane, 4 lanes
// a word), and the tiles of one row tile follow each other: a CTA streams a row tile's
// 128-input chunks as one contiguous run. Byte counts equal the checkpoint's.
//
// Why those inputs per lane: in mma.m16n8k16 a lane (g, t) holds B elements k = 2t, 2t+1,
// 2t+8, 2t+9 of column n = g. A dot product may take its k in any order, as long as the
// activations (A) use the same one, so the kernel maps those four k slots of k-step s to
// inputs 8t + 4s + 0..3: each lane reads 8 consecutive inputs (one word of weights, two
// float4 of activations) for two k-steps, and one word = one scale group of one row.
//
// Bit shuffle: word bits give four bf16x2 B registers, out_j = (k-slots of step j/2, pair
// j%2) = (input 2j, input 2j+1) in (low, high) half, each as a bf16 whose bits 6..8 hold
// the code's magnitude bits and bit 15 its sign. That bf16 is the E2M1 value times 2^-126
// (exactly, a subnormal for codes 0 and 1), so one bf16x2 multiply by 2^(s-1) = 2^126 *
// 2^(s-127) gives the dequantised weight exactly. Stored positions (per half, +16 mod 32
// for the high one; v0..v3 = the code's bits, v3 the sign; rotl = rotate left):
//   out0: v0..v2 at 6..8, v3 at 15    -> out0 = q & mask
//   out1: at 2..4, 11                 -> out1 = (q << 4) & mask
//   out2: at 28..30, 5                -> out2 = rotl(q, 10) & mask
//   out3: v0 at 16; v1, v2 at 9, 10; v3 at 17
//                                     -> out3 = (rotl(q, 22) & v0's bits) | (rotl(q, 30) & the rest)
// 9 bit operations a word (the layout before moedq took 11: out3 from three shifts); no
// layout of a 32-bit word (shifts, rotates or byte permutes) gets every output from one move.
// The scale 2^(s-1) is a bf16 for s <= 128; larger scales (|w| > 12, not seen in trained
// weights) take a two-multiply path chosen at repack time (Mxfp4Decode::wide_scales).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "moe/moe.h"
#include "pdserve/core/status.h"

namespace pdserve::cuda {

// The bit shuffle inside each word of the decode layout (tiles, lanes, words and scale bytes
// are the same for both). kBf16: the shuffle above, for the bf16 tensor-core forms (every form
// but kWeightsAPdlQgmma). kFp8 (kWeightsAPdlQgmma, moe_decode_qgmma_sm90.cu): word i's 8 codes
// (inputs j = 0..7 of the lane's 8) give two registers of four E4M3 bytes each, the code's
// magnitude bits at 2..4 and its sign at 7 of its byte (E4M3's exponent low bits and mantissa
// top bit: the byte is the E2M1 value times 2^-6 exactly, code 0.5 a subnormal): lo = inputs
// 0..3 = q & 0x9C9C9C9C; hi = inputs 4..7 = (rotl(q, 6) & 0x88888888) | (rotl(q, 4) & 0x14141414)
// (5 bit operations a word against kBf16's 9; no layout gets hi from one rotate and mask).
// Stored positions: input j < 4 at 8j + {2, 3, 4} (mantissa, exponent bits), sign 8j + 7; input
// 4 + j at m 8j - 2, e0 8j - 3, e1 8j, sign 8j + 1 (mod 32).
enum class Mxfp4DecodeBits { kBf16, kFp8 };

// One stacked projection in the decode layout (device pointers).
struct Mxfp4Decode {
  const uint8_t* packed = nullptr;  // [experts * rows * cols / 2]
  const uint8_t* scales = nullptr;  // [experts * rows * cols / 32]
  int64_t rows = 0, cols = 0;
  bool wide_scales = false;  // some scale byte > 128: the kernel multiplies twice
  Mxfp4DecodeBits bits = Mxfp4DecodeBits::kBf16;
};

struct MoeDecodeWeights {
  Mxfp4Decode w1, w3;  // gate, up: rows = inter, cols = dim
  Mxfp4Decode w2;      // down: rows = dim, cols = inter
  MoeActivation activation = MoeActivation::kSiLU;
  float situ_beta = 1.0f;
  float situ_linear_beta = 0.0f;
};

// Whether a rows x cols matrix can take the decode layout.
inline bool decode_layout_fits(int64_t rows, int64_t cols) { return rows > 0 && cols > 0 && rows % 8 == 0 && cols % 128 == 0; }

// Whether any of n E8M0 scale bytes exceeds 128 (Mxfp4Decode::wide_scales: its 2^(s-1) is no
// bf16, and the E4M3 forms refuse such weights).
inline bool mxfp4_scales_wide(const uint8_t* scales, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (scales[i] > 128) return true;
  return false;
}

// Host repack of `experts` stacked matrices in ops/mxfp4.h's layout (packed [rows, cols/2],
// scales [rows, cols/32] each) into the decode layout; sizes are unchanged. Returns
// mxfp4_scales_wide of the scales.
Result<bool> mxfp4_repack_decode(const uint8_t* packed, const uint8_t* scales, int64_t experts, int64_t rows, int64_t cols,
                                 std::vector<uint8_t>* packed_out, std::vector<uint8_t>* scales_out,
                                 Mxfp4DecodeBits bits = Mxfp4DecodeBits::kBf16);

// The inverse (tests, debugging): decode layout back to ops/mxfp4.h's.
Status mxfp4_unpack_decode(const uint8_t* packed, const uint8_t* scales, int64_t experts, int64_t rows, int64_t cols,
                           std::vector<uint8_t>* packed_out, std::vector<uint8_t>* scales_out,
                           Mxfp4DecodeBits bits = Mxfp4DecodeBits::kBf16);

// kWeightsA: weights as the MMA's A operand (16 rows: two adjacent tiles of this layout),
// 8 tokens as B, staged in shared memory; needs dim, inter <= 4096, inter % 16 == 0,
// dim % 32 == 0. No zero operand half, half the MMAs per weight of the kernels below.
// Each CTA takes a contiguous run of units and has the TMA unit prefetch the unit after
// next into L2. Kept to measure those choices: kWeightsANoPrefetch (no L2 prefetch) and
// kWeightsAStrided (no prefetch, CTAs stride over the units: the first schedule).
// kStreamed: activations read from global memory per word, 16 rows a pass, any width.
// kStaged: activation rows staged in shared memory as bf16 (8 a pass), the unit's weights
// kept in registers across passes and the next unit's loaded during this one's MMAs;
// needs dim, inter <= 4096. kAuto (the H200 measurements; docs/perf.md): where kFused fits
// and the call has a workspace, kFusedSplit from capacity kMoeDecodeFusedMinCapacity; else where
// kWeightsA's shape rules hold, kWeightsAPdlL2 up to capacity kMoeDecodeL2MaxCapacity,
// kWeightsAPdlF32 below kMoeDecodeFusedMinCapacity (kWeightsAPdl up to 1024 before moedec11)
// and kWeightsAStrided beyond; elsewhere kStaged where it fits and capacity <= 1024, else kStreamed.
// kFused (moe_decode_fused_sm90.cu): the weights-on-A step in ONE launch for gate/up, the
// activation and down; a producer warp per CTA claims units from a queue in the caller's
// MoeDecodeWorkspace and has the TMA unit copy their tiles into a two-slot shared-memory
// ring; down units wait on a per-expert counter of finished gate/up units (same workspace)
// only when they stage their activations, so the down weights load while gate/up finishes.
// Needs the kWeightsA shapes, max(dim, inter) <= 3840 (the ring) and a workspace.
// kFusedSplit: kFused with the 16 MMA warps splitting a unit by (A operand, chunk) rather
// than by chunk, so a pass's warps carry equal work at K3's down shape (24 chunks: 3 items
// each, where by chunk half the warps took 2 and half 1). kFusedSplitPdl: kFusedSplit as a
// programmatic dependent launch (its CTAs start while the previous kernel drains and wait
// with griddepcontrol.wait before reading anything). Same needs as kFused.
// kFusedSplit24Warps: kFusedSplit with 24 MMA warps rather than 16 (6 a scheduler, 72
// registers a thread; the down projection's 24 chunks are 2 items a warp, the gate/up's 28 are
// 3 or 2), for a kernel that waits on latency at one CTA an SM. Kept to measure: on the H200
// it ran 0.95-0.99x kFusedSplit (the register cap costs 14% more instructions than the extra
// warps win back; docs/perf.md, branch moedec6). kFusedSplit24WarpsStaggered: that, with each
// CTA's second ring slot requested only once its first has landed (the launch's first wave
// of copies is one slot an SM, not two): 1.02-1.05x kFusedSplit24Warps at B <= 8.
// kFusedSplitStaggered: the same staggered start on the 16-warp kFusedSplit (branch moedq):
// 1.01-1.05x kFusedSplit at B <= 48, where kAuto runs the blocked kernel (as fast or faster),
// 0.996-1.000x from B = 64, so kAuto does not take it.
// kWeightsAPdl (branch moedec9): kWeightsANoPrefetch's two launches with the down launch a
// programmatic dependent one: its CTAs take SMs as gate/up CTAs leave and load their first
// two units' weights before waiting for the activations. kWeightsAPdlL2: that, with each
// gate/up CTA, once its last weight load is out, having the TMA unit pull the first two units
// of the down CTA of its index into L2 (at most 2 units a CTA: 14 MB at K3's shape, any batch).
// kWeightsAPdlL2All: all of that CTA's units where the touched experts' down weights are at
// most 24 MiB (K3: up to 4 experts), else the first two.
// Same shape rules as kWeightsA; no workspace.
// kWeightsAPdlSplitK (branch moedec10): kWeightsAPdl with the K of every unit, gate/up and
// down, split into kMoeDecodeSplitK slices, so a CTA's run of units is finer. Measured 0.78-0.87x
// kWeightsAPdl at B 1-64 on the H200 (docs/perf.md): the kernel is issue-bound per SM and at
// K3's shape the busiest CTA's work is unchanged (B = 1: 3 gate/up and 2 down units either
// way), while the reduction passes double. Opt-in; kAuto never takes it. Gate/up stores each slice's fp32 sums in the workspace past
// the queue words (moe_decode_splitk_workspace_bytes) and zeroes the output rows; the down
// launch, after its griddepcontrol.wait, sums the slices in slice order, applies the
// activation (to the full K sum, as SiTU needs), writes `act` and stages it, and adds its two
// K halves into the output with atomics (two addends onto zero: the same bits in any order).
// Needs the kWeightsA shapes and that workspace.
// kWeightsAPdlF32 (branch moedec11): kWeightsAPdl with the E8M0 scale applied to fp32 sums
// instead of to the bf16 weights: the MMA takes the codes as E2M1 x 2^-126 (bf16 subnormals
// for codes 0 and 1) against token rows staged as bf16(x) x 2^64, each (16-row A operand,
// 32-input group) into a fresh accumulator, then 4 FFMA by 2^(s-65) a group pair replace 8
// bf16x2 multiplies. Exact in the same way (powers of two); it relies on the tensor core keeping
// bf16 subnormal inputs (the H200 does: moe_decode_test passes on it). Scale
// bytes above 128 (wide_scales) run kWeightsAPdl's two-multiply step. Same needs as kWeightsAPdl.
// Measured 1.001-1.024x kWeightsAPdl at B 1-192 and 6% fewer instructions (docs/perf.md), so
// kAuto takes it from kMoeDecodeL2MaxCapacity to kMoeDecodeFusedMinCapacity pairs.
// kWeightsAPdlL2Stagger / kWeightsAPdlF32Stagger (branch moedec12): kWeightsAPdlL2 / kWeightsAPdlF32
// with a staggered gate/up start: each warp issues its second unit's loads only once its first
// unit's words have landed, so the launch's first wave of DRAM requests is one unit an SM (8 MB
// at K3's shape, 132 CTAs) rather than two and every CTA's first MMAs start about twice as soon;
// later units load during the previous unit's MMAs as before. The down launch is unchanged.
// Same needs as kWeightsAPdl. Measured 0.99-1.01x their base forms at B 1-64 on the H200 (the
// first wave was not a real cost; B = 1 is bound by the MMA warps' issue rate as B = 64 is:
// docs/perf.md), so opt-in; kAuto never takes them.
// kWeightsAPdlWgmma (branch moedec13, moe_decode_wgmma_sm90.cu): kWeightsAPdlL2's two launches,
// units, L2 pull and reduction with the MMA step on warpgroup MMA (wgmma.m64n16k16, A = the
// dequantised weights in registers as in mma.sync, B = the 8 staged tokens in shared memory in
// the 128-byte swizzle; each warpgroup runs two chunks a k16 step through B's two 8-column
// blocks). Same needs as kWeightsAPdl. Measured 0.75-0.86x kWeightsAPdlL2 / kWeightsAPdlF32 at
// B 1-192 on the H200 (more instructions a weight: docs/perf.md), so opt-in. kWeightsAPdlWgmma3:
// the same with 3 warpgroups (12 warps, up to 168 registers: the 16-warp form spills a few
// registers), needs dim, inter <= 3840 besides; 0.76-0.87x.
// kWeightsAPdlRing (branch moedec14, moe_decode_ring_sm90.cu): kWeightsAPdlF32's two launches and
// MMA step with the weights streamed through shared memory by a per-warp bulk-copy ring instead of
// the register double buffer: warp w owns chunks 2w, 2w + 1 of every unit (14 warps at K3's
// gate/up, 12 at its down: equal work a warp), its lane 0 copies the warp's part of a unit
// (cp.async.bulk on the warp's own mbarrier, 2 slots a warp; no producer warp, no CTA-wide barrier
// for loads), and the warp reads its words with 16-byte shared loads, re-arming the slot before
// its MMAs (two units in flight during each unit's MMAs). kWeightsAPdlRing1: one chunk a warp
// (28 / 24 warps, 72 registers a thread; needs dim, inter <= 3584). ...L2: with kWeightsAPdlL2's
// pull of the down CTAs' first units into L2. Needs the kWeightsA shapes and dim, inter <= 3584
// (28 chunks; x rows + 2 slots a warp in shared memory: 209 KB at K3's gate/up). Measured on the
// H200 (docs/perf.md, moedec14): the stall mix of kAuto's forms is led by long scoreboard (the
// words one unit ahead not landed: 2.0-3.7 of 8.6-11.7 warp cycles an issue), then the per-unit
// barrier and fixed-latency waits; the ring cuts long scoreboard to 0.6-1.0 but has 14 / 12 warps
// (3-3.5 a scheduler) and 5-13% more instructions: 0.87-0.90x kAuto's forms at B 1-64, eager and
// from a graph (Ring1: 0.72-0.79x), so all four are opt-in and kAuto never takes them.
// kWeightsAPdlQgmma (moe_decode_qgmma_sm90.cu; weights repacked with Mxfp4DecodeBits::kFp8, the
// only form that takes them, and kAuto's pick for them): kWeightsAPdlWgmma's units, warpgroups,
// chunk pairs, PDL launches and L2 pull with the weights fed to the tensor cores as E4M3 (which
// holds every E2M1 value exactly) through wgmma.m64n16k32.e4m3 (SASS QGMMA, A from registers): 5
// bit operations a word instead of 9 and one MMA per 32 inputs a row pair instead of two. Tokens
// go in as E4M3 too, each split hi + lo (x 2^k_t, a power of two a token so its largest |x| lands
// in [128, 256); hi = e4m3(x 2^k), lo = e4m3(x 2^k - hi): ~2^-8 relative, bf16's class), 4 tokens
// a pass (columns 2t, 2t + 1 of each 8-column block). Each 32-input group runs into a fresh
// accumulator that takes the group's E8M0 scale as an fp32 multiply-add (kWeightsAPdlF32's way).
// Needs the kWeightsA shapes, scale bytes <= 128 (no wide_scales) and dim, inter <= 4096.
// Measured on the H200 (docs/perf.md, "E4M3 warpgroup MMA"): at parity with kAuto's bf16 forms at
// B 1-64 (0.94-1.02x: the select of the warp's accumulator half and the chunk-pair imbalance eat the
// cheaper dequantisation), 0.65-0.68x at B 128-256 (4-token passes); kAuto on kFp8 weights takes it
// below kMoeDecodeQgmmaWideMinCapacity pairs only. Outputs within 0.0016 of the CPU reference in the
// tests (the bf16 forms: 0.0038).
// kWeightsAPdlQgmmaWide (moe_decode_qgmma_wide_sm90.cu; kFp8 weights): the same E4M3 step on
// 64-row units (8 tiles: every warp of a warpgroup on the same chunk, wgmma.m64n8k32, nothing
// dropped or selected; warpgroup G takes chunks G, G + 4, ...: 7 equal rounds at K3's gate/up), a
// warp's words kept 4 rounds ahead in registers across unit boundaries; items (a unit and a block
// of up to 4 rows, or of 8 rows in two passes sharing the dequantised A from
// kMoeDecodeQgmmaMultiMinCapacity pairs) split evenly over the CTAs. Needs inter % 32 == 0,
// dim % 64 == 0, narrow scales. Measured (docs/perf.md, "E4M3 wide form, second version"):
// 1.09-1.13x kAuto's bf16 forms at B 4-64 (2.87 TB/s at B = 64), 1.03x at B = 128, 1.10x at
// B = 256, 0.96x at B = 1 (uneven 64-row units).
enum class MoeDecodeKernel {
  kAuto,
  kStreamed,
  kStaged,
  kWeightsA,
  kWeightsANoPrefetch,
  kWeightsAStrided,
  kFused,
  kFusedSplit,
  kFusedSplitPdl,
  kFusedSplit24Warps,
  kFusedSplit24WarpsStaggered,
  kFusedSplitStaggered,
  kWeightsAPdl,
  kWeightsAPdlL2,
  kWeightsAPdlL2All,
  kWeightsAPdlSplitK,
  kWeightsAPdlF32,
  kWeightsAPdlL2Stagger,
  kWeightsAPdlF32Stagger,
  kWeightsAPdlWgmma,
  kWeightsAPdlWgmma3,
  kWeightsAPdlRing,
  kWeightsAPdlRingL2,
  kWeightsAPdlRing1,
  kWeightsAPdlRing1L2,
  kWeightsAPdlQgmma,
  kWeightsAPdlQgmmaWide
};

// kAuto on Mxfp4DecodeBits::kFp8 weights: kWeightsAPdlQgmmaWide from this many routed pairs (B >= 4
// at top-16), kWeightsAPdlQgmma below (B = 1: the wide form's 64-row units leave the gate/up
// launch's CTAs unevenly loaded, 2 units on some against 1.45 on average; docs/perf.md).
constexpr int64_t kMoeDecodeQgmmaWideMinCapacity = 64;
// From this many pairs (B >= 256 at top-16 and EP32: 4-5 rows an expert) kWeightsAPdlQgmmaWide takes
// items of up to 8 rows whose two passes of 4 share each round's dequantised A registers; below,
// items of one pass, straight-line. Measured (docs/perf.md): 8-row items 1.10x kAuto at B = 256
// (16-row ones 0.97x, one-pass 0.91x); at B = 128 (2-3 rows an expert) one-pass items 1.03x, 8-row
// ones 0.95x, 16-row ones 0.87x; at B <= 64 one-pass items are 5-12% faster than either.
constexpr int64_t kMoeDecodeQgmmaMultiMinCapacity = 4096;

constexpr int kMoeDecodeSplitK = 2;  // K slices of kWeightsAPdlSplitK (2: the atomic sums are exact-order-free)

// kAuto takes a fused form (kFusedSplit since moedec6, whose call ran its K3-shape test at
// B >= 4; given a workspace) from this many routed pairs (tokens * k) on. At K3's EP32 shape
// (top-16) the fused kernel ran 1.33x the strided one (the older choice) at 4096 pairs; since
// moedec11's cheaper step the two-launch PDL forms are 1.06-1.12x faster than kFusedSplit at
// 1024-3072 pairs but 0.53x at 4096 (B = 256: 139 rows on 28 experts; docs/perf.md), so the
// threshold moved from 1024 to 4096. The rule assumes decode sizes (a few rows per expert, as
// the backend guarantees): at 32-64 rows per expert the fused kernel was 1.1-1.6x slower than
// strided, and the prefill GEMM 5-8x faster than both.
constexpr int64_t kMoeDecodeFusedMinCapacity = 4096;

// Below that, kAuto takes the two-launch PDL form (moedec9): with the down weights' first
// units pulled into L2 (kWeightsAPdlL2) up to this many pairs (B <= 8 at top-16, at most 4
// touched experts at K3's EP32 rank: 0-0.8 us faster than without), kWeightsAPdl above it
// (the prefetch cost 0.9-1.2 us at B = 16-48; kWeightsAPdlF32 there since moedec11). Against the blocked kernel kAuto took before:
// 1.04-1.17x eager (main's binary, same run), 1.03-1.08x replayed from a graph (same binary),
// at B = 1-48 (docs/perf.md).
constexpr int64_t kMoeDecodeL2MaxCapacity = 128;

// The fused kernel's queue state: a unit counter, a finished-CTA counter and a finished
// gate/up unit counter per local expert, in device memory the caller owns. It must be zero
// before the first call (moe_decode_workspace_bytes bytes, cudaMemset once at allocation);
// every fused call leaves it zero again (its last CTA resets it), so eager calls and CUDA
// graph replays need nothing more. Calls that may run at the same time (two streams, two
// models on one GPU) need separate workspaces; calls ordered on one stream may share one.
// moe_expert_mlp_prefill's tile queue (moe_prefill.h) uses the first two words the same way.
struct MoeDecodeWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
inline size_t moe_decode_workspace_bytes(int64_t local_experts) { return size_t(2 + local_experts) * sizeof(uint32_t); }
// kWeightsAPdlSplitK's workspace: the queue words (16-byte aligned), then fp32 partial sums
// [capacity][kMoeDecodeSplitK][gate | up][inter] (every call writes all it reads: no zeroing).
inline size_t moe_decode_splitk_part_offset(int64_t local_experts) { return (moe_decode_workspace_bytes(local_experts) + 15) / 16 * 16; }
inline size_t moe_decode_splitk_workspace_bytes(int64_t local_experts, int64_t capacity, int64_t inter) {
  return moe_decode_splitk_part_offset(local_experts) + size_t(capacity) * kMoeDecodeSplitK * 2 * size_t(inter) * sizeof(float);
}

// The kernel a call with these arguments runs (kAuto resolved; `kernel` itself otherwise).
MoeDecodeKernel moe_decode_choice(const MoeDecodeWeights& w, int64_t local_experts, int64_t capacity, bool has_workspace,
                                  MoeDecodeKernel kernel = MoeDecodeKernel::kAuto);

// moe_expert_mlp's contract (moe.h) on decode-layout weights: per local expert, over its
// rows [offsets[e], offsets[e+1]): act = act_fn(x W1^T, x W3^T) (fp32 [*, inter]), then
// out_sorted = act W2^T (fp32 [*, dim]). Activations are rounded to bf16 for the tensor
// cores (weights are exact in bf16), fp32 accumulation. Two launches (gate+up with the
// activation; down), each a loop over units (touched expert, 8-row tile; the staged down
// kernel takes two tiles a unit, kWeightsA four) listed from `offsets` on the device, no host
// sync: the call can be captured in a CUDA graph. The first call per kernel queries
// occupancy (and raises the dynamic shared-memory limit); later calls make no such calls.
// `workspace` (kFused's queue, above) may be empty: kAuto then never takes kFused, and an
// explicit kFused is an invalid_argument.
Status moe_expert_mlp_decode(const MoeDecodeWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                             const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream,
                             MoeDecodeKernel kernel = MoeDecodeKernel::kAuto, MoeDecodeWorkspace workspace = {});

}  // namespace pdserve::cuda
