// Shared pieces of the chunked KDA prefill: job tables, the workspace layout between the
// intra-chunk kernel and the state-passing kernel, and the mma.sync fragment helpers (tf32,
// 3xTF32, bf16).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pdserve::cuda::kda_chunk {

constexpr int C = 64;  // chunk length (kKdaChunk)

// Tensor-core operand precision of every matmul (accumulation and the state stay fp32).
enum Math : int { kTf32 = 0, k3xTf32 = 1, kBf16 = 2 };

// One chunk of one sequence (the intra kernel's blockIdx.x).
struct ChunkJob {
  int64_t row0;  // first token row in q/k/v/g
  int32_t len;   // valid rows, 1..C
  int32_t pad;
};
// One sequence's run of chunks in this pass (the state kernel's blockIdx.z).
struct SeqJob {
  int64_t row0;      // first token row
  int64_t rows;      // tokens in this pass
  int64_t slot_off;  // floats from the pool base to this sequence's slot (the kernels add the
                     // layer offset, so one table serves every KDA layer of a step)
  int32_t chunk0;     // pass-local index of its first chunk
  int32_t chunks;
};

// Per (chunk, head) intermediates, fp32, written by the intra kernel:
//   w   [C][D]  (I + A)^-1 (beta k exp(G))        the WY key side
//   u   [C][D]  (I + A)^-1 (beta v)               the WY value side
//   qg  [C][D]  q exp(G)                          queries decayed from the chunk start
//   kg  [C][D]  k exp(G_last - G)                 keys decayed to the chunk end
//   aqk [C][C]  (q_i k_j exp(G_i - G_j)), j <= i  the causal intra-chunk scores
//   gl  [D]     exp(G_last)                       the chunk's total decay
// and, with the output in its own pass (KdaChunkOutput::kSeparate), by the state kernel:
//   u   becomes v_new = u - w S^T in place (each state block overwrites its own columns)
//   s   [D][D]  S^T at the chunk's start (row = key channel, column = value row)
// G is the cumulative log decay inside the chunk (G_i = g_0 + ... + g_i).
// Packed bf16 workspace (bf16 math, output in the state kernel; `packed` in the launchers): w,
// qg, aqk as bf16 [rows][k] and kg transposed as bf16 [D][C] (key channel, token), each in
// the first half of its fp32 region, so every 32-bit word holds an mma A fragment's k pair
// (2 tig, 2 tig + 1) and the state kernel stages them as they are, in half the shared memory;
// u, gl stay fp32 (v_new = u - w S^T subtracts in fp32). The B operands then pair k the same
// way (FragB from rows k + 2 tig, k + 2 tig + 1).
template <int D>
struct Layout {
  static constexpr int64_t w = 0, u = C * D, qg = 2 * C * D, kg = 3 * C * D, aqk = 4 * C * D, gl = 4 * C * D + C * C;
  static constexpr int64_t s = 4 * C * D + C * C + D;
  static constexpr int64_t floats = 4 * C * D + C * C + D + D * D;  // multiple of 4: 16-byte aligned blocks
};

#ifdef __CUDACC__  // the device helpers (the host launcher includes this header for the tables)
// x rounded to tf32 (nearest, ties away from zero: cvt.rna's result for finite x) with two
// integer ops: add half a tf32 ulp to the magnitude bits, clear the 13 dropped bits. In place
// of cvt.rna.tf32.f32 this made the state kernel 16% faster in 3xTF32 (its fragment builders
// convert every operand, per warp), bit-identical results (docs/perf.md, kdapre3).
__device__ __forceinline__ uint32_t tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// d += a * b, m16n8k8, tf32 inputs, fp32 accumulators. Fragments (gid = lane / 4, tig = lane % 4):
//   a: (gid, tig) (gid+8, tig) (gid, tig+4) (gid+8, tig+4)   b: (k=tig, n=gid) (k=tig+4, n=gid)
//   d: (gid, 2tig) (gid, 2tig+1) (gid+8, 2tig) (gid+8, 2tig+1)
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Operands for d += a * b in one of three precisions (Math): plain tf32 (10-bit mantissa),
// error-compensated 3xTF32 (x = hi + lo, both tf32, and d += a.lo b.hi + a.hi b.lo + a.hi b.hi,
// about fp32's accuracy for 3x the tensor-core work) or bf16 (8-bit mantissa, m16n8k8 bf16:
// half of tf32's tensor-core time and one conversion per two operands). Every mode takes the
// tf32 fragment positions (rows gid / gid+8, k columns tig / tig+4) and accumulates in fp32.
// bf16 m16n8k8 reads k = 2 tig, 2 tig + 1 from a thread's registers; mapping those to k = tig,
// tig + 4 on both operands only permutes the 8 terms of each dot product, so the same
// fragment positions serve all three modes.
template <Math M>
struct FragA {
  uint32_t hi[4], lo[4];
  __device__ __forceinline__ FragA(float a0, float a1, float a2, float a3) {
    const float x[4] = {a0, a1, a2, a3};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      hi[e] = tf32(x[e]);
      lo[e] = M == k3xTf32 ? tf32(x[e] - __uint_as_float(hi[e])) : 0u;
    }
  }
};
template <Math M>
struct FragB {
  uint32_t hi[2], lo[2];
  __device__ __forceinline__ FragB(float b0, float b1) {
    hi[0] = tf32(b0), hi[1] = tf32(b1);
    lo[0] = M == k3xTf32 ? tf32(b0 - __uint_as_float(hi[0])) : 0u;
    lo[1] = M == k3xTf32 ? tf32(b1 - __uint_as_float(hi[1])) : 0u;
  }
};
// Two floats as bf16x2 (round to nearest even), `lo` in the low half (the smaller k).
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <>
struct FragA<kBf16> {
  uint32_t r[2];  // row gid: (k tig, k tig+4); row gid+8: the same
  __device__ __forceinline__ FragA(float a0, float a1, float a2, float a3) { r[0] = bf16x2(a0, a2), r[1] = bf16x2(a1, a3); }
  // Already-packed pairs (rows gid, gid+8), e.g. 32-bit words of a bf16 row-major array: the
  // packed workspace (Layout) pairs k = 2 tig, 2 tig + 1, mma's own order.
  __device__ __forceinline__ FragA(uint32_t row0, uint32_t row1) { r[0] = row0, r[1] = row1; }
};
template <>
struct FragB<kBf16> {
  uint32_t r;  // column gid: (k tig, k tig+4)
  __device__ __forceinline__ FragB(float b0, float b1) { r = bf16x2(b0, b1); }
  // An already-packed pair (k 2 tig, 2 tig + 1 of column gid), e.g. a word of a bf16 [n][k] array.
  __device__ __forceinline__ explicit FragB(uint32_t packed) { r = packed; }
};
// One float as bf16 bits (round to nearest even).
__device__ __forceinline__ uint16_t bf16_bits(float x) {
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  return r;
}
template <Math M>
__device__ __forceinline__ void mma(float (&d)[4], const FragA<M>& a, const FragB<M>& b) {
  if constexpr (M == kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(b.r));
  } else {
    if constexpr (M == k3xTf32) {
      mma(d, a.lo, b.hi);
      mma(d, a.hi, b.lo);
    }
    mma(d, a.hi, b.hi);
  }
}

// d += a0 * b0 + a1 * b1 over 16 k: the fragments at k0 and k0 + 8. bf16: one m16n8k16 (the
// same k permutation as above, the second pair at k 8..15), so a loop over 16 k issues half the
// mma instructions and half the dependent steps per accumulator; tf32 / 3xTF32: the two k8
// steps in order (bit-identical to stepping by 8).
template <Math M>
__device__ __forceinline__ void mma(float (&d)[4], const FragA<M>& a0, const FragA<M>& a1, const FragB<M>& b0, const FragB<M>& b1) {
  if constexpr (M == kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0.r[0]), "r"(a0.r[1]), "r"(a1.r[0]), "r"(a1.r[1]), "r"(b0.r), "r"(b1.r));
  } else {
    mma(d, a0, b0);
    mma(d, a1, b1);
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// As cp_async16, but writes 16 zero bytes (reading nothing) when !valid.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

}  // namespace pdserve::cuda::kda_chunk

namespace pdserve::cuda {
// Launchers of the two kernels for one pass (kda_chunk_intra_sm90.cu, kda_chunk_state_sm90.cu).
// packed (bf16 math only): the packed bf16 workspace (Layout) for the in-state kernel.
// bf16_kq16 (bf16 math only): k and q staged as bf16 (false: the former fp32 staging).
cudaError_t kda_chunk_intra_launch(int D, kda_chunk::Math math, const float* q, const float* k, const float* v, const float* g, const float* beta,
                                   int64_t H, const kda_chunk::ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream,
                                   bool packed = false, bool bf16_kq16 = true);
// The bf16 mode's intra kernel (kda_chunk_intra_bf16_sm90.cu; kda_chunk_intra_launch forwards
// kBf16 to it): the same outputs, fewer instructions a chunk.
cudaError_t kda_chunk_intra_bf16_launch(int D, const float* q, const float* k, const float* v, const float* g, const float* beta,
                                        int64_t H, const kda_chunk::ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream,
                                        bool packed, bool kq16);
// double_buffer: two buffers for each chunk's w and qg where shared memory allows; warps: 8, or
// 16 at D = 128 with vt 32 / 64, packed or not (kda_chunk_state_sm90.cu). prefetch (packed only): > 0, chunk
// n + prefetch's inputs are requested into L2 while chunk n runs; 0: none.
cudaError_t kda_chunk_state_launch(int D, int vt, int warps, kda_chunk::Math math, bool double_buffer, const float* ws, int64_t H,
                                   const kda_chunk::SeqJob* jobs, int64_t seqs, float* state, int64_t layer_offset, float* o,
                                   cudaStream_t stream, bool packed = false, int prefetch = 0);
// The packed bf16 workspace's state kernel on wgmma (kda_chunk_state_wgmma_sm90.cu): D = 128,
// vt 32 / 64, two warpgroups; stages of a chunk's inputs: 1, 2 or 3 (3 at vt 32 only, else 2:
// kda_chunk_state_wgmma_stages); prefetch > 0: chunk n + prefetch's inputs requested into L2.
// multicast 1 / 2: a head's 128 / vt CTAs as one cluster, the inputs they share loaded once by
// TMA multicast (two stages at least); a stage is refilled once every CTA is done with it, known
// by a cluster barrier a chunk (1) or by per-stage mbarriers only thread 0 waits on (2); 0: off.
// ws_chunks: the chunks ws holds (the tensor maps' extent). The same results bit for bit.
bool kda_chunk_state_wgmma_supported(int D, int vt);
int kda_chunk_state_wgmma_stages(int vt, int asked, int multicast = 0);
cudaError_t kda_chunk_state_wgmma_launch(int D, int vt, int stages, const float* ws, int64_t H, const kda_chunk::SeqJob* jobs,
                                         int64_t seqs, float* state, int64_t layer_offset, float* o, cudaStream_t stream, int prefetch = 0,
                                         int multicast = 0, int64_t ws_chunks = 0);
// The output in its own pass: the state kernel carries only the state, storing each chunk's
// starting state and v_new in the workspace (kda_chunk_state_split_sm90.cu); the output kernel
// then computes o = qg S^T + Aqk v_new for all chunks in parallel (kda_chunk_output_sm90.cu).
cudaError_t kda_chunk_state_split_launch(int D, int vt, kda_chunk::Math math, bool double_buffer, float* ws, int64_t H,
                                         const kda_chunk::SeqJob* jobs, int64_t seqs, float* state, int64_t layer_offset,
                                         cudaStream_t stream);
cudaError_t kda_chunk_output_launch(int D, kda_chunk::Math math, const float* ws, int64_t H, const kda_chunk::ChunkJob* jobs, int64_t chunks,
                                    float* o, cudaStream_t stream);
}  // namespace pdserve::cuda
