// Chunked KDA prefill, part 1: everything inside one chunk that does not need the state, for
// all chunks of the pass at once (grid: chunk x head, 8 warps). Writes the per-(chunk, head)
// intermediates of kda_chunk::Layout: the WY pair w, u (the UT transform), q and k decayed
// to the chunk's ends, the causal score block and the chunk's total decay.
//
// Decay in the score blocks: exp(G_i - G_j) for j <= i is split into a row factor and a
// column factor about a reference row r between them, exp(G_i - G_r) * exp(G_r - G_j), so
// the per-channel product becomes a tensor-core matmul. For 16-row blocks I > J the reference
// is I's first row: both exponents are <= 0. On the diagonal blocks it is the block's middle
// row: each exponent spans at most 8 tokens, so |exponent| <= 8 * |g|max (kda_chunk.h bounds g).
//
// Shared memory is 112 KB (two blocks an SM, so one block's serial phases overlap the
// other's): k, q then v, G as unpadded [C][D] rows and A then T in place as [C][C], each with
// an XOR swizzle (column ^ 4 * (row % 8)) that keeps the mma fragment reads conflict-free.
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

template <int D>
struct IntraSmem {
  static constexpr int floats = 3 * C * D + C * C + C;  // k (then beta k exp(G)), q then v, G, A then T, beta
  static constexpr size_t bytes = floats * sizeof(float);
};

// Swizzled offset of (row, col) in a [rows][W] array, W a multiple of 32.
template <int W>
__device__ __forceinline__ int at(int row, int col) {
  return row * W + (col ^ ((row & 7) << 2));
}

__device__ __forceinline__ float bounded_exp(float x) { return __expf(fminf(x, 80.0f)); }

// tf32 / 3xTF32 (bf16 mode: kda_chunk_intra_bf16_sm90.cu).
template <int D, Math P>
__global__ void __launch_bounds__(256, 2) intra_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                       const float* __restrict__ v, const float* __restrict__ g,
                                                       const float* __restrict__ beta, int64_t H, const ChunkJob* __restrict__ jobs,
                                                       float* __restrict__ ws) {
  using L = Layout<D>;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);
  float* sqv = sk + C * D;
  float* sG = sqv + C * D;
  float* sT = sG + C * D;
  float* sb = sT + C * C;

  const ChunkJob job = jobs[blockIdx.x];
  const int64_t h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  float* out = ws + (static_cast<int64_t>(blockIdx.x) * H + h) * L::floats;
  constexpr int D4 = D / 4;

  // 1. Load k, q, g, every copy in flight at once (rows past the sequence's end are zero: no
  //    score, no update, no decay).
  for (int idx = tid; idx < C * D4; idx += 256) {
    const int i = idx / D4, c = (idx % D4) * 4;
    const bool ok = i < job.len;
    const int64_t off = ok ? ((job.row0 + i) * H + h) * D + c : 0;
    cp_async16_zfill(sk + at<D>(i, c), k + off, ok);
    cp_async16_zfill(sqv + at<D>(i, c), q + off, ok);
    cp_async16_zfill(sG + at<D>(i, c), g + off, ok);
  }
  cp_async_commit();
  if (tid < C) sb[tid] = tid < job.len ? beta[(job.row0 + tid) * H + h] : 0.0f;
  cp_async_wait<0>();
  __syncthreads();

  // 2. Cumulative log decay per channel (16 rows loaded ahead of each dependent run of adds).
  for (int c = tid; c < D; c += 256) {
    float acc = 0.0f;
#pragma unroll
    for (int i0 = 0; i0 < C; i0 += 16) {
      float x[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) x[e] = sG[at<D>(i0 + e, c)];
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        acc += x[e];
        sG[at<D>(i0 + e, c)] = acc;
      }
    }
  }
  __syncthreads();
  for (int c = tid; c < D; c += 256) out[L::gl + c] = __expf(sG[at<D>(C - 1, c)]);

  // 3. Score blocks. Warp pair I owns rows [16I, 16I+16): warp 2I the key-key block A (and
  //    writes kg = k exp(G_last - G) for its rows), warp 2I+1 the query-key block (and writes
  //    qg = q exp(G)).
  {
    const int I = warp >> 1;
    const bool qk = warp & 1;
    const float* X = qk ? sqv : sk;
    float* xg = out + (qk ? L::qg : L::kg);
    const int r0 = I * 16 + gid, r1 = r0 + 8, rf = I * 16, rm = I * 16 + 8;
    float acc[6][4] = {}, dacc[2][4] = {};  // tiles left of the diagonal block, the diagonal block
#pragma unroll 2
    for (int kb = 0; kb < D; kb += 8) {
      const int c0 = kb + tig, c1 = c0 + 4;
      const float gf0 = sG[at<D>(rf, c0)], gf1 = sG[at<D>(rf, c1)], gm0 = sG[at<D>(rm, c0)], gm1 = sG[at<D>(rm, c1)];
      const float G00 = sG[at<D>(r0, c0)], G10 = sG[at<D>(r1, c0)], G01 = sG[at<D>(r0, c1)], G11 = sG[at<D>(r1, c1)];
      const float x00 = X[at<D>(r0, c0)], x10 = X[at<D>(r1, c0)], x01 = X[at<D>(r0, c1)], x11 = X[at<D>(r1, c1)];
      {  // qk warps: q exp(G); kk warps: k exp(G_last - G)
        const float l0 = sG[at<D>(C - 1, c0)], l1 = sG[at<D>(C - 1, c1)];
        const float e00 = x00 * __expf(qk ? G00 : l0 - G00), e10 = x10 * __expf(qk ? G10 : l0 - G10);
        const float e01 = x01 * __expf(qk ? G01 : l1 - G01), e11 = x11 * __expf(qk ? G11 : l1 - G11);
        xg[r0 * D + c0] = e00;
        xg[r1 * D + c0] = e10;
        xg[r0 * D + c1] = e01;
        xg[r1 * D + c1] = e11;
      }
      const FragA<P> aoff(x00 * bounded_exp(G00 - gf0), x10 * bounded_exp(G10 - gf0), x01 * bounded_exp(G01 - gf1),
                          x11 * bounded_exp(G11 - gf1));
      const FragA<P> adia(x00 * bounded_exp(G00 - gm0), x10 * bounded_exp(G10 - gm0), x01 * bounded_exp(G01 - gm1),
                          x11 * bounded_exp(G11 - gm1));
      // Off-diagonal tiles (nt < 2I) against the first-row factors, the two diagonal ones
      // against the middle row's (each mma names its operand: no fragment picked at run time).
#pragma unroll
      for (int nt = 0; nt < 6; ++nt) {
        if (nt < 2 * I) {
          const int j = nt * 8 + gid;
          const FragB<P> b(sk[at<D>(j, c0)] * bounded_exp(gf0 - sG[at<D>(j, c0)]), sk[at<D>(j, c1)] * bounded_exp(gf1 - sG[at<D>(j, c1)]));
          mma(acc[nt], aoff, b);
        }
      }
#pragma unroll
      for (int d = 0; d < 2; ++d) {
        const int j = 16 * I + d * 8 + gid;
        const FragB<P> b(sk[at<D>(j, c0)] * bounded_exp(gm0 - sG[at<D>(j, c0)]), sk[at<D>(j, c1)] * bounded_exp(gm1 - sG[at<D>(j, c1)]));
        mma(dacc[d], adia, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = half ? r1 : r0, col = nt * 8 + 2 * tig;
        // Tile nt: left of the diagonal (acc), on it (dacc), or right of it (zero).
        float v0 = 0.0f, v1 = 0.0f;
        if (nt < 6 && nt < 2 * I) {
          v0 = acc[nt < 6 ? nt : 0][2 * half], v1 = acc[nt < 6 ? nt : 0][2 * half + 1];
        } else if (nt == 2 * I || nt == 2 * I + 1) {
          v0 = dacc[nt & 1][2 * half], v1 = dacc[nt & 1][2 * half + 1];
        }
        if (qk) {
          v0 = col <= row ? v0 : 0.0f;
          v1 = col + 1 <= row ? v1 : 0.0f;
          *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(v0, v1);
        } else {
          const float b = sb[row];
          *reinterpret_cast<float2*>(sT + at<C>(row, col)) = make_float2(col < row ? b * v0 : 0.0f, col + 1 < row ? b * v1 : 0.0f);
        }
      }
    }
  }
  __syncthreads();

  // 4. q is dead: bring v into its buffer (landing while the solve runs), and turn k into the
  //    WY key side beta k exp(G) in place.
  for (int idx = tid; idx < C * D4; idx += 256) {
    const int i = idx / D4, c = (idx % D4) * 4;
    const bool ok = i < job.len;
    const int64_t off = ok ? ((job.row0 + i) * H + h) * D + c : 0;
    cp_async16_zfill(sqv + at<D>(i, c), v + off, ok);
  }
  cp_async_commit();
  for (int idx = tid; idx < C * D; idx += 256) {
    const int i = idx / D, c = idx % D, o = at<D>(i, c);
    sk[o] = sb[i] * sk[o] * __expf(sG[o]);
  }

  // 5. T = (I + A)^-1 in place of A (A strictly lower). Diagonal 16x16 blocks by forward
  //    substitution, one warp a block, one lane a column, all reads before any write.
  if (warp < 4 && lane < 16) {
    const int b0 = warp * 16, c = lane;
    float t[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float x = r == c ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < r; ++j) x -= sT[at<C>(b0 + r, b0 + j)] * t[j];
      t[r] = x;
    }
    __syncwarp(0xffffu);
#pragma unroll
    for (int r = 0; r < 16; ++r) sT[at<C>(b0 + r, b0 + c)] = t[r];
  }
  __syncthreads();
  // Off-diagonal blocks, block row by block row: T_IJ = -T_II * sum_{J<=K<I} A_IK T_KJ (fp32).
  {
    const int r = tid >> 4, cc = tid & 15;
#pragma unroll
    for (int I = 1; I < 4; ++I) {
      float x[3];
#pragma unroll
      for (int J = 0; J < I; ++J) {
        float acc[4] = {};  // four partial sums: independent FMA chains
#pragma unroll
        for (int m = J * 16; m < I * 16; m += 4)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] += sT[at<C>(I * 16 + r, m + e)] * sT[at<C>(m + e, J * 16 + cc)];
        x[J] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
      __syncthreads();  // every read of A's block row I done
#pragma unroll
      for (int J = 0; J < I; ++J) sT[at<C>(I * 16 + r, J * 16 + cc)] = x[J];
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) {
        float acc[4] = {};
#pragma unroll
        for (int m = 0; m < 16; ++m) acc[m & 3] += sT[at<C>(I * 16 + r, I * 16 + m)] * sT[at<C>(I * 16 + m, J * 16 + cc)];
        x[J] = -((acc[0] + acc[1]) + (acc[2] + acc[3]));
      }
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) sT[at<C>(I * 16 + r, J * 16 + cc)] = x[J];
      __syncthreads();
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // 6. [w | u] = T [beta k exp(G) | beta v]: warp (mt, half) owns rows [16mt, 16mt+16) and
  //    half the columns; T is lower triangular, so the K loop stops at the block's last row.
  {
    const int mt = warp & 3, half = warp >> 2;
    const int r0 = mt * 16 + gid, r1 = r0 + 8;
    const float* src = half ? sqv : sk;
    constexpr int NT = D / 8;
    float acc[NT][4] = {};
    auto t_a = [&](int k) {
      return FragA<P>(sT[at<C>(r0, k + tig)], sT[at<C>(r1, k + tig)], sT[at<C>(r0, k + tig + 4)], sT[at<C>(r1, k + tig + 4)]);
    };
    auto src_b = [&](int col, int k) {  // beta v on the value side (beta already in beta k exp(G))
      const float s0 = half ? sb[k + tig] : 1.0f, s1 = half ? sb[k + tig + 4] : 1.0f;
      return FragB<P>(s0 * src[at<D>(k + tig, col)], s1 * src[at<D>(k + tig + 4, col)]);
    };
    for (int kb = 0; kb < 16 * mt + 16; kb += 16) {
      const FragA<P> a0 = t_a(kb), a1 = t_a(kb + 8);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = nt * 8 + gid;
        mma(acc[nt], a0, a1, src_b(col, kb), src_b(col, kb + 8));
      }
    }
    float* dst = out + (half ? L::u : L::w);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * tig;
      *reinterpret_cast<float2*>(dst + r0 * D + col) = make_float2(acc[nt][0], acc[nt][1]);
      *reinterpret_cast<float2*>(dst + r1 * D + col) = make_float2(acc[nt][2], acc[nt][3]);
    }
  }
}


template <int D, Math P>
cudaError_t launch_intra(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H,
                         const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream) {
  constexpr size_t bytes = IntraSmem<D>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(intra_kernel<D, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  intra_kernel<D, P><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(H)), 256, bytes, stream>>>(q, k, v, g, beta, H, jobs, ws);
  return cudaGetLastError();
}

template <Math P>
cudaError_t intra_for(int D, const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H,
                      const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream) {
  switch (D) {
    case 32: return launch_intra<32, P>(q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case 64: return launch_intra<64, P>(q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case 128: return launch_intra<128, P>(q, k, v, g, beta, H, jobs, chunks, ws, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t kda_chunk_intra_launch(int D, Math math, const float* q, const float* k, const float* v, const float* g, const float* beta,
                                   int64_t H, const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream, bool packed,
                                   bool bf16_kq16) {
  if (packed && math != kda_chunk::kBf16) return cudaErrorInvalidValue;
  switch (math) {
    case kda_chunk::kTf32: return intra_for<kda_chunk::kTf32>(D, q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case kda_chunk::k3xTf32: return intra_for<kda_chunk::k3xTf32>(D, q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case kda_chunk::kBf16: return kda_chunk_intra_bf16_launch(D, q, k, v, g, beta, H, jobs, chunks, ws, stream, packed, bf16_kq16);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pdserve::cuda
