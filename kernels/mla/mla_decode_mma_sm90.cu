// The tensor-core form of the split-KV MLA decode's run on a bf16 cache (mla_decode.h,
// MlaDecodeBf16Math::kTensorCores; seventeenth version, docs/perf.md). The cuda-core forms
// (mla_decode_warp_sm90.cu) spend ~185 warp instructions a cached token on a bf16 cache, a third
// of them conversions, and stream at 2.2-3.15 TB/s; here a token costs ~30: the bf16 entries go
// from shared memory to the tensor cores as they are (ldmatrix, mma.sync m16n8k16).
//
// One CTA per plan item (the same plan, partials and merge as the other forms), 8 warps, tiles of
// 16 tokens in a ring of kMlaMmaStages (5) stages, two CTAs an SM. A tile arrives as ONE bulk tensor
// copy (cp.async.bulk.tensor.3d; a tensor map over the cache as [token][9 lines][64 bf16], encoded
// at each launch) with the 128-byte swizzle, which puts 8 consecutive tokens' same 16 bytes in 8
// distinct bank groups, so ldmatrix reads without conflicts. (A bulk copy a token into rows padded
// to 1168 bytes, the first form, was 4-25% slower from 1 x 16K up: 3.27 TB/s at 256 x 16K against
// 4.11; docs/perf.md, seventeenth version.)
// Per tile:
//  1. Scores on the tensor cores, S^T[token][n] = K[token][e] Q^T[e][n]: A = the tile (16 tokens x
//     16 dims a k-step, ldmatrix), B = q, n = 8 columns: column 2h holds head h's q rounded to bf16
//     (hi), column 2h + 1 the rest (lo = bf16(q - hi)), so hi + lo carries ~16 significant bits of
//     the fp32 q and one mma gives both halves of up to 4 heads. The 36 k-steps (576 dims) are
//     spread over the 8 warps (5 or 4 each, q's fragments in registers); each warp writes its
//     partial sums (hi + lo) to shared memory.
//  2. One barrier; the online softmax of the tile's 16 tokens x heads by 16 threads a head (warps
//     0-1): the partials summed, tokens past the tile's valid count masked, the running max / sum,
//     p written as P^T in bf16 hi / lo rows again (columns 2h, 2h + 1), the correction factor.
//  3. One barrier; P x V on the tensor cores, O^T[dim][n] += V^T[dim][token] P^T[token][n]: A = the
//     tile's latent read transposed (ldmatrix.trans), warp w owns dims [64 w, 64 w + 64) (4 mma a
//     tile), its accumulators scaled by the head's correction first. Column pairs (2h, 2h + 1) sum
//     to head h's output at the end.
// Every sum is fp32 (the tensor cores' accumulate); the entries are the cache's exact bf16 values;
// q and p are carried to ~2^-17 relative (hi + lo): the outputs are within ~1e-5 (normalised) of
// the fp32 forms, not bit-identical (mla_decode_bf16_test.cpp states the bound).
// Rows past a tile's valid tokens (an item's last tile, a negative page) hold stale shared memory:
// their scores are masked, and their latent is zeroed before P x V (0 x a stale NaN would be NaN).
// EARLY (the rings kLeanEarly / kLeanBlockEarly): the prologue's page-table reads, its barriers
// armed, and the copies of its tiles whose valid tokens are all stable issued before the pdl wait
// (MlaDecodeWork::new_tokens); the other tiles' copies after it. A box always copies the whole tile:
// its rows past the row's end lie in the tile's page and are zeroed before use.
#include "common/tensor_map.h"
#include "common/per_device.h"
#include "mla/mla_decode_sm90.cuh"
#include "mla/mma_bf16.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_decode_detail;

constexpr int kLat = 512, kEntry = 576;
constexpr int kRowBytes = kEntry * 2;          // one token's bf16 entry
constexpr int kLines = kEntry / 64;             // its 128-byte lines (9)
constexpr int kStageBytes = kTile * kRowBytes;  // a tile: one box of 18,432 bytes (18 KiB)
constexpr int kRing = kMlaMmaStages;  // the ring's stages
// Byte offset in a stage of token t's 16 bytes from element e (a multiple of 8): the box holds
// token t's element e in 128-byte line L = 9 t + e / 64, whose 16-byte chunks are XOR-swizzled with
// L mod 8 (CU_TENSOR_MAP_SWIZZLE_128B; the stage 1024-byte aligned). 9 = 1 mod 8, so 8 consecutive
// tokens at the same e land in 8 distinct chunk positions: ldmatrix's rows hit distinct banks.
__device__ __forceinline__ int stage_offset(int t, int e) {
  const int line = t * kLines + e / 64;
  return line * 128 + ((((e % 64) / 8) ^ (line & 7)) << 4);
}
// Token t's latent: its first 8 lines, 1024 contiguous bytes (the swizzle permutes within a line).
__device__ __forceinline__ int latent_offset(int t) { return t * kLines * 128; }
constexpr int kKSteps = kEntry / 16;                              // the scores' k-steps
constexpr int kStepsPerWarp = (kKSteps + kWarps - 1) / kWarps;    // 5 (warps 4-7 use 4)
constexpr int kDimTiles = kLat / 16 / kWarps;                     // P x V: 16-dim tiles a warp
constexpr int kMaxHeads = 4;                                      // 8 columns: hi / lo of 4 heads
constexpr int kSoftmaxThreads = kMaxHeads * kTile;                // warps 0-1
constexpr int kIssueWarp = kWarps - 1;                            // issues the copies (no softmax)
constexpr int kZeroThreads = kThreads - kSoftmaxThreads - 32;     // warps 2-6 zero stale rows
static_assert(kTile == 16 && kSoftmaxThreads == 64 && kDimTiles * 16 * kWarps == kLat, "the fragment layout assumes these");

// x rounded to bf16 (lo false) or the rest x - bf16(x) rounded to bf16 (lo true), as bits. Range: |x|
// below bf16's largest finite value (~3.39e38), else hi is inf and the pair an inf - inf NaN; x is
// q x scale x log2(e), and scale = 1/sqrt(qk head dim) keeps it within that for every finite q (K3:
// 0.104). A guard (isinf on hi) cost 1.6 us a step at batch 1 on the H200 (the q fragments then
// left registers), so the range is a documented precondition instead.
__device__ __forceinline__ uint32_t split_half(float x, bool lo) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(x);
  return __bfloat16_as_ushort(lo ? __float2bfloat16_rn(x - __bfloat162float(hi)) : hi);
}
// Two consecutive k elements as one B-fragment register (the lower k in the low half).
__device__ __forceinline__ uint32_t split_pair(float x0, float x1, bool lo) { return split_half(x0, lo) | (split_half(x1, lo) << 16); }

// One box of the cache (64 elements x 9 lines x 16 tokens from token `token`) into dst.
__device__ __forceinline__ void tma_tile(void* dst, const CUtensorMap* map, int token, uint64_t* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                   smem_u32(dst)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(0), "r"(token), "r"(smem_u32(bar))
               : "memory");
}

template <bool EARLY>
__global__ void __launch_bounds__(kThreads, 2)
    mla_decode_mma_kernel(const __grid_constant__ MlaDecodeArgs a, const __grid_constant__ CUtensorMap map, const int32_t* __restrict__ plan,
                          float* part_o, float* part_lse, bool late_trigger, int new_tokens) {
  extern __shared__ float4 smem_raw[];
  // [kRing][kStageBytes], 1024-byte aligned (the swizzle's period; the launch adds the slack).
  unsigned char* const stages =
      reinterpret_cast<unsigned char*>(smem_raw) + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);  // the shared-space address's bits
  __shared__ __align__(8) uint64_t s_full[kRing];      // stage s's tile has landed
  __shared__ int s_valid[kRing];                       // its tokens to score (0: a negative page)
  __shared__ float s_score[kWarps][kMaxHeads][kTile];   // each warp's partial scores
  __shared__ __align__(16) uint16_t s_p[8][kTile];      // P^T: row 2h = head h's p in bf16, 2h + 1 the rest
  __shared__ float s_corr[kMaxHeads], s_m[kMaxHeads], s_l[kMaxHeads];
  const int item = blockIdx.x;
  if (item >= plan[0]) return;  // a graph launches the capacity; the step may use fewer items
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int row = it.x, begin = it.y, end = it.z, slot = it.w;
  const int H = static_cast<int>(a.heads), ps = static_cast<int>(a.page_size);
  const int32_t* table = a.page_table + static_cast<int64_t>(row) * a.max_pages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int st = 0; st < kRing; ++st) mbar_init(&s_full[st], 1);
    mbar_init_fence();
  }
  for (int i = threadIdx.x; i < 8 * kTile; i += kThreads) (&s_p[0][0])[i] = 0;  // rows of absent heads stay zero
  __syncthreads();
  const int ntiles = (end - begin + kTile - 1) / kTile;  // 0: an empty row's item, which writes zeros

  // Tile gt: the cache token its first entry is (page x page_size + offset) and its valid tokens
  // (0 on a negative page).
  auto locate = [&](int gt, int& token) {
    const int t0 = begin + gt * kTile, page = table[t0 / ps];
    token = static_cast<int>(static_cast<int64_t>(page < 0 ? 0 : page) * ps + t0 % ps);  // < the map's extent (launch_mma checks)
    return page < 0 ? 0 : min(kTile, end - t0);
  };
  // Lane 0 of the issuing warp: the stage's barrier armed with the box's bytes (the rows past
  // `valid` too; they lie in the tile's page), published with s_valid; then, where `copy`, the box.
  auto arm = [&](int st, int valid, int token, bool copy) {
    s_valid[st] = valid;  // read after the stage's barrier completes
    if (valid == 0) {
      mbar_arrive(&s_full[st]);
      return;
    }
    mbar_arrive_expect_tx(&s_full[st], kStageBytes);
    if (copy) tma_tile(stages + st * kStageBytes, &map, token, &s_full[st]);
  };
  auto issue = [&](int gt, int st) {  // lane 0 of the issuing warp
    int token;
    const int valid = locate(gt, token);
    arm(st, valid, token, true);
  };

  // EARLY: the prologue's tiles located and armed before the wait, and the copies of those whose
  // valid tokens are all stable; the rest after it.
  int early_token[kRing];
  bool early_late[kRing];  // copied after the wait
  const bool issuer = warp == kIssueWarp && lane == 0;
  if constexpr (EARLY) {
    if (issuer) {
      const int stable = early_stable_end(plan, item, plan[0], reinterpret_cast<const int4*>(plan + 4)[item + 1], row, end, new_tokens);
#pragma unroll
      for (int st = 0; st < kRing; ++st) {
        early_token[st] = 0, early_late[st] = false;
        if (st >= ntiles) continue;
        const int valid = locate(st, early_token[st]);
        early_late[st] = valid > 0 && stable < begin + st * kTile + valid;
        arm(st, valid, early_token[st], !early_late[st]);
      }
    }
  }
  pdl_wait();  // q and the newest cache entries may come from the kernels before
  if (!late_trigger) pdl_trigger();  // MlaDecodeTrigger::kEarly
  if (issuer) {
#pragma unroll
    for (int st = 0; st < kRing; ++st) {
      if (st >= ntiles) break;
      if constexpr (EARLY) {
        if (early_late[st]) tma_tile(stages + st * kStageBytes, &map, early_token[st], &s_full[st]);
      } else {
        issue(st, st);
      }
    }
  }

  // q as B fragments: k-step ks = warp + j kWarps; lane (g, c) holds column g (head g / 2, the hi
  // half for even g), k = 2c, 2c + 1 (b0) and 2c + 8, 2c + 9 (b1); absent heads and k-steps zero.
  const float qscale = a.scale * kLog2e;  // scores in log2 units (exp2f below)
  const int qh = g / 2;
  const bool qlo = (g & 1) != 0;
  uint32_t qb[kStepsPerWarp][2];
#pragma unroll
  for (int j = 0; j < kStepsPerWarp; ++j) {
    const int ks = warp + j * kWarps;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int e = 16 * ks + 2 * c + 8 * half;
      float2 v = make_float2(0.0f, 0.0f);
      if (ks < kKSteps && qh < H)
        v = e < kLat ? *reinterpret_cast<const float2*>(a.q_lat + (static_cast<int64_t>(row) * H + qh) * kLat + e)
                     : *reinterpret_cast<const float2*>(a.q_rot + (static_cast<int64_t>(row) * H + qh) * (kEntry - kLat) + (e - kLat));
      qb[j][half] = split_pair(v.x * qscale, v.y * qscale, qlo);
    }
  }
  float acc[kDimTiles][4];
#pragma unroll
  for (int mt = 0; mt < kDimTiles; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;  // the softmax threads' (warps 0-1) running max / sum of their head
  const int mtx = lane / 8, mrow = lane % 8;  // the 8x8 matrix and row this lane addresses for ldmatrix

  for (int i = 0; i < ntiles; ++i) {
    const int st = i % kRing;
    mbar_wait(&s_full[st], (i / kRing) & 1);
    const unsigned char* tile = stages + st * kStageBytes;
    // 1. This warp's k-steps of the scores: A rows = tokens (matrices: tokens 0-7 / 8-15 x dims
    // k0..k0+7 / k0+8..k0+15), C = S^T[token g, g + 8][column 2c, 2c + 1].
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kStepsPerWarp; ++j) {
      const int ks = warp + j * kWarps;
      if (ks < kKSteps) {
        uint32_t af[4];
        mma::ldmatrix_x4(af, tile + stage_offset((mtx & 1) * 8 + mrow, 16 * ks + (mtx >> 1) * 8));
        mma::mma_bf16(sc, af, qb[j][0], qb[j][1]);
      }
    }
    if (c < H) {  // columns 2c (hi) and 2c + 1 (lo) are head c's
      s_score[warp][c][g] = sc[0] + sc[1];
      s_score[warp][c][g + 8] = sc[2] + sc[3];
    }
    __syncthreads();  // the partial scores are written; every warp is past tile i - 1's P x V
    if (issuer && i >= 1 && i + kRing - 1 < ntiles) issue(i + kRing - 1, (i + kRing - 1) % kRing);  // into tile i - 1's stage
    const int valid = s_valid[st];
    // 2. The online softmax: thread (h, t) of warps 0-1.
    if (warp < 2) {
      const int h = threadIdx.x / kTile, t = threadIdx.x % kTile;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += s_score[w][h][t];
      s = t < valid ? s : -INFINITY;  // a stale row's score may be anything, NaN included
      float mx = s;
#pragma unroll
      for (int o = kTile / 2; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run, mx);
      const float corr = m_new == -INFINITY ? 1.0f : exp2f(m_run - m_new);
      const float p = t < valid ? exp2f(s - m_new) : 0.0f;
      float sum = p;
#pragma unroll
      for (int o = kTile / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l_run = l_run * corr + sum;
      m_run = m_new;
      if (h < H) {
        const __nv_bfloat16 ph = __float2bfloat16_rn(p);
        s_p[2 * h][t] = __bfloat16_as_ushort(ph);
        s_p[2 * h + 1][t] = __bfloat16_as_ushort(__float2bfloat16_rn(p - __bfloat162float(ph)));
        if (t == 0) s_corr[h] = corr;
      }
    } else if (valid < kTile && warp < kIssueWarp) {
      // Stale rows' latent to zero (16-byte stores), ordered before any later bulk copy into the stage.
      const int chunks = (kTile - valid) * (kLat * 2 / 16);
      for (int k = static_cast<int>(threadIdx.x) - kSoftmaxThreads; k < chunks; k += kZeroThreads)
        *reinterpret_cast<uint4*>(stages + st * kStageBytes + latent_offset(valid + k / (kLat * 2 / 16)) + (k % (kLat * 2 / 16)) * 16) =
            make_uint4(0u, 0u, 0u, 0u);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();  // P^T, the corrections and the zeroed rows are visible
    // 3. P x V over this warp's 64 dims: A = V^T (matrices: dims d0..d0+7 / +8..+15 x tokens 0-7 /
    // 8-15, read transposed from token rows), B = P^T[token 2c.., +8][column g].
    const float corr = c < H ? s_corr[c] : 1.0f;
    if (corr != 1.0f) {
#pragma unroll
      for (int mt = 0; mt < kDimTiles; ++mt)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[mt][k] *= corr;
    }
    const uint32_t* prow = reinterpret_cast<const uint32_t*>(s_p[g]);
    const uint32_t b0 = prow[c], b1 = prow[c + 4];
#pragma unroll
    for (int mt = 0; mt < kDimTiles; ++mt) {
      const int d0 = warp * kDimTiles * 16 + mt * 16;
      uint32_t af[4];
      mma::ldmatrix_x4_trans(af, tile + stage_offset((mtx >> 1) * 8 + mrow, d0 + (mtx & 1) * 8));
      mma::mma_bf16(acc[mt], af, b0, b1);
    }
  }

  // The head's running max and sum from its softmax threads (also for an item without tiles).
  if (warp < 2 && threadIdx.x % kTile == 0 && static_cast<int>(threadIdx.x) / kTile < H) {
    s_m[threadIdx.x / kTile] = m_run;
    s_l[threadIdx.x / kTile] = l_run;
  }
  __syncthreads();
  if (c < H) {  // lane (g, c): head c's dims d0 + g and d0 + g + 8 of each tile (hi + lo columns)
    const float l = s_l[c], inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* dst = slot < 0 ? a.o_lat + (static_cast<int64_t>(row) * H + c) * kLat : part_o + (static_cast<int64_t>(slot) * H + c) * kLat;
#pragma unroll
    for (int mt = 0; mt < kDimTiles; ++mt) {
      const int d0 = warp * kDimTiles * 16 + mt * 16;
      dst[d0 + g] = (acc[mt][0] + acc[mt][1]) * inv;
      dst[d0 + g + 8] = (acc[mt][2] + acc[mt][3]) * inv;
    }
  }
  if (slot >= 0 && static_cast<int>(threadIdx.x) < H) {
    const float l = s_l[threadIdx.x];
    part_lse[static_cast<int64_t>(slot) * H + threadIdx.x] = l > 0.0f ? s_m[threadIdx.x] + log2f(l) : -INFINITY;
  }
  if (late_trigger) pdl_trigger();  // MlaDecodeTrigger::kLate: the merge launches as the run's CTAs finish
}

// The cache as a 3-D tensor for the box copies: [tokens][9 lines][64 elements], boxes of 16 tokens.
// The token extent: the pool's (MlaDecodeWork::cache_pages x page_size) where the caller passes it,
// so a page id past the pool reads the copy engine's zeros instead of other memory; else 2^31 - 1
// (page ids are trusted, as with the bulk copies). A box's coordinate is a signed 32-bit token.
Status encode_cache_map(CUtensorMap* map, const MlaDecodeArgs& a, const MlaDecodeWork& w) {
  const int64_t tokens = w.cache_pages > 0 ? w.cache_pages * a.page_size : int64_t{INT32_MAX};
  if (tokens > INT32_MAX) return invalid_argument("mla_decode_run (tensor cores): the cache holds more than 2^31 - 1 tokens a layer");
  const uint64_t extent[3] = {64, kLines, static_cast<uint64_t>(tokens)};
  const uint64_t stride[2] = {128, kRowBytes};
  const uint32_t box[3] = {64, kLines, kTile};
  // 128-byte L2 promotion: 256 bytes held the pages' stream at 4.1-4.2 TB/s (docs/perf.md, eighteenth session).
  return encode_bf16_tensor_map(map, a.cache_bf16, 3, extent, stride, box, "mla decode (tensor cores, tensor map)", L2Promotion::k128);
}

template <bool EARLY>
Status launch_mma(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream) {
  constexpr auto kernel = mla_decode_mma_kernel<EARLY>;
  constexpr size_t kSmem = static_cast<size_t>(kRing) * kStageBytes + 1024;  // + the alignment slack
  static PerDevice<cudaError_t> opted_in;  // each GPU's first (eager) call, never in a capture
  const cudaError_t opt_in = opted_in.get([] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  });
  if (opt_in != cudaSuccess) return cuda_status(opt_in, "mla_decode_run (tensor cores, shared memory opt-in)");
  CUtensorMap map{};
  PDS_RETURN_IF_ERROR(encode_cache_map(&map, a, w));
  const cudaError_t e = launch_pdl(w.pdl, kernel, dim3(static_cast<unsigned>(w.launch_items)), dim3(kThreads), kSmem, stream, a, map, w.plan,
                                   w.part_o, w.part_lse, w.trigger == MlaDecodeTrigger::kLate, early_new_tokens(w));
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (tensor cores)");
  return last_launch_status("mla_decode_run (tensor cores)");
}

}  // namespace

namespace mla_decode_detail {

Status launch_mma_variant(const MlaDecodeArgs& a, const MlaDecodeWork& w, MlaDecodeRing ring, cudaStream_t stream) {
  // What the kernel assumes (mla_decode_run checks these first; kept here so no caller can skip them).
  if (a.heads < 1 || a.heads > kMaxHeads || a.latent_dim != kLat || a.rope_dim != kEntry - kLat || a.page_size % kTile != 0)
    return invalid_argument("mla_decode_run (tensor cores): 1-4 heads, latent 512 + key 64, pages a multiple of 16 tokens");
  const bool early = ring == MlaDecodeRing::kLeanEarly || ring == MlaDecodeRing::kLeanBlockEarly;
  return early ? launch_mma<true>(a, w, stream) : launch_mma<false>(a, w, stream);
}

}  // namespace mla_decode_detail

}  // namespace pdserve::cuda
