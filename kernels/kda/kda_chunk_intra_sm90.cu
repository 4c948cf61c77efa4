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
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

template <int D>
struct IntraSmem {
  static constexpr int KS = D + 4;      // k, q, G rows: fragment reads (row, col) conflict-free
  static constexpr int RS = 2 * D + 8;  // [beta k exp(G) | beta v] rows: read as B (k = row)
  static constexpr int AS = C + 4;      // A and T = (I + A)^-1
  static constexpr int floats = 3 * C * KS + C * RS + 2 * C * AS + C;
  static constexpr size_t bytes = floats * sizeof(float);
};

__device__ __forceinline__ float bounded_exp(float x) { return __expf(fminf(x, 80.0f)); }

template <int D, bool P>
__global__ void __launch_bounds__(256) intra_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                    const float* __restrict__ v, const float* __restrict__ g,
                                                    const float* __restrict__ beta, int64_t H, const ChunkJob* __restrict__ jobs,
                                                    float* __restrict__ ws) {
  using S = IntraSmem<D>;
  using L = Layout<D>;
  constexpr int KS = S::KS, RS = S::RS, AS = S::AS;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);
  float* sq = sk + C * KS;
  float* sG = sq + C * KS;
  float* rhs = sG + C * KS;
  float* sA = rhs + C * RS;
  float* sT = sA + C * AS;
  float* sb = sT + C * AS;

  const ChunkJob job = jobs[blockIdx.x];
  const int64_t h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  float* out = ws + (static_cast<int64_t>(blockIdx.x) * H + h) * L::floats;

  // 1. Load the chunk (rows past the sequence's end are zero: no score, no update, no decay).
  constexpr int D4 = D / 4;
  for (int idx = tid; idx < C * D4; idx += 256) {
    const int i = idx / D4, c = (idx % D4) * 4;
    float4 kk = make_float4(0, 0, 0, 0), qq = kk, vv = kk, gg = kk;
    if (i < job.len) {
      const int64_t off = ((job.row0 + i) * H + h) * D + c;
      kk = *reinterpret_cast<const float4*>(k + off);
      qq = *reinterpret_cast<const float4*>(q + off);
      vv = *reinterpret_cast<const float4*>(v + off);
      gg = *reinterpret_cast<const float4*>(g + off);
    }
    *reinterpret_cast<float4*>(sk + i * KS + c) = kk;
    *reinterpret_cast<float4*>(sq + i * KS + c) = qq;
    *reinterpret_cast<float4*>(sG + i * KS + c) = gg;
    *reinterpret_cast<float4*>(rhs + i * RS + D + c) = vv;
  }
  if (tid < C) sb[tid] = tid < job.len ? beta[(job.row0 + tid) * H + h] : 0.0f;
  for (int idx = tid; idx < C * AS; idx += 256) sT[idx] = 0.0f;
  __syncthreads();

  // 2. Cumulative log decay per channel.
  for (int c = tid; c < D; c += 256) {
    float acc = 0.0f;
    for (int i = 0; i < C; ++i) {
      acc += sG[i * KS + c];
      sG[i * KS + c] = acc;
    }
  }
  __syncthreads();

  // 3. Elementwise pieces: the WY right-hand side, qg, kg, gl.
  for (int idx = tid; idx < C * D4; idx += 256) {
    const int i = idx / D4, c = (idx % D4) * 4;
    const float b = sb[i];
    float4 qg, kg;
    float* qgp = &qg.x;
    float* kgp = &kg.x;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float G = sG[i * KS + c + e], Gl = sG[(C - 1) * KS + c + e], kv = sk[i * KS + c + e];
      const float eg = __expf(G);
      rhs[i * RS + c + e] = b * kv * eg;
      rhs[i * RS + D + c + e] *= b;
      qgp[e] = sq[i * KS + c + e] * eg;
      kgp[e] = kv * __expf(Gl - G);
    }
    *reinterpret_cast<float4*>(out + L::qg + i * D + c) = qg;
    *reinterpret_cast<float4*>(out + L::kg + i * D + c) = kg;
  }
  for (int c = tid; c < D; c += 256) out[L::gl + c] = __expf(sG[(C - 1) * KS + c]);

  // 4. Score blocks (reads sk, sq, sG only: no barrier needed after step 3). Warp pair I owns
  //    rows [16I, 16I+16): warp 2I the key-key block A, warp 2I+1 the query-key block.
  {
    const int I = warp >> 1;
    const bool qk = warp & 1;
    const float* X = qk ? sq : sk;
    const int r0 = I * 16 + gid, r1 = r0 + 8, rf = I * 16, rm = I * 16 + 8;
    const int ntiles = 2 * I + 2;
    float acc[8][4] = {};
    for (int kb = 0; kb < D; kb += 8) {
      const int c0 = kb + tig, c1 = c0 + 4;
      const float gf0 = sG[rf * KS + c0], gf1 = sG[rf * KS + c1], gm0 = sG[rm * KS + c0], gm1 = sG[rm * KS + c1];
      const float G00 = sG[r0 * KS + c0], G10 = sG[r1 * KS + c0], G01 = sG[r0 * KS + c1], G11 = sG[r1 * KS + c1];
      const float x00 = X[r0 * KS + c0], x10 = X[r1 * KS + c0], x01 = X[r0 * KS + c1], x11 = X[r1 * KS + c1];
      const FragA<P> aoff(x00 * bounded_exp(G00 - gf0), x10 * bounded_exp(G10 - gf0), x01 * bounded_exp(G01 - gf1),
                          x11 * bounded_exp(G11 - gf1));
      const FragA<P> adia(x00 * bounded_exp(G00 - gm0), x10 * bounded_exp(G10 - gm0), x01 * bounded_exp(G01 - gm1),
                          x11 * bounded_exp(G11 - gm1));
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (nt < ntiles) {
          const bool dia = nt >= 2 * I;
          const int j = nt * 8 + gid;
          const float ref0 = dia ? gm0 : gf0, ref1 = dia ? gm1 : gf1;
          const FragB<P> b(sk[j * KS + c0] * bounded_exp(ref0 - sG[j * KS + c0]), sk[j * KS + c1] * bounded_exp(ref1 - sG[j * KS + c1]));
          mma(acc[nt], dia ? adia : aoff, b);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = half ? r1 : r0, col = nt * 8 + 2 * tig;
        float v0 = nt < ntiles ? acc[nt][2 * half] : 0.0f, v1 = nt < ntiles ? acc[nt][2 * half + 1] : 0.0f;
        if (qk) {
          v0 = col <= row ? v0 : 0.0f;
          v1 = col + 1 <= row ? v1 : 0.0f;
          *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(v0, v1);
        } else {
          const float b = sb[row];
          sA[row * AS + col] = col < row ? b * v0 : 0.0f;
          sA[row * AS + col + 1] = col + 1 < row ? b * v1 : 0.0f;
        }
      }
    }
  }
  __syncthreads();

  // 5. T = (I + A)^-1, A strictly lower. Diagonal 16x16 blocks by forward substitution, one
  //    warp a block, one lane a column (all in registers).
  if (warp < 4 && lane < 16) {
    const int b0 = warp * 16, c = lane;
    float t[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float x = r == c ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < r; ++j) x -= sA[(b0 + r) * AS + b0 + j] * t[j];
      t[r] = x;
      sT[(b0 + r) * AS + b0 + c] = x;
    }
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
        float acc = 0.0f;
        for (int m = J * 16; m < I * 16; ++m) acc += sA[(I * 16 + r) * AS + m] * sT[m * AS + J * 16 + cc];
        x[J] = acc;
      }
#pragma unroll
      for (int J = 0; J < I; ++J) sT[(I * 16 + r) * AS + J * 16 + cc] = x[J];
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) {
        float acc = 0.0f;
#pragma unroll
        for (int m = 0; m < 16; ++m) acc += sT[(I * 16 + r) * AS + I * 16 + m] * sT[(I * 16 + m) * AS + J * 16 + cc];
        x[J] = -acc;
      }
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) sT[(I * 16 + r) * AS + J * 16 + cc] = x[J];
      __syncthreads();
    }
  }

  // 6. [w | u] = T [beta k exp(G) | beta v]: warp (mt, half) owns rows [16mt, 16mt+16) and
  //    half the columns; T is lower triangular, so the K loop stops at the block's last row.
  {
    const int mt = warp & 3, half = warp >> 2;
    const int r0 = mt * 16 + gid, r1 = r0 + 8;
    constexpr int NT = D / 8;
    float acc[NT][4] = {};
    for (int kb = 0; kb < 16 * mt + 16; kb += 8) {
      const FragA<P> a(sT[r0 * AS + kb + tig], sT[r1 * AS + kb + tig], sT[r0 * AS + kb + tig + 4], sT[r1 * AS + kb + tig + 4]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = half * D + nt * 8 + gid;
        const FragB<P> b(rhs[(kb + tig) * RS + col], rhs[(kb + tig + 4) * RS + col]);
        mma(acc[nt], a, b);
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

template <int D, bool P>
cudaError_t launch_intra(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H,
                         const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream) {
  constexpr size_t bytes = IntraSmem<D>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(intra_kernel<D, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  intra_kernel<D, P><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(H)), 256, bytes, stream>>>(q, k, v, g, beta, H, jobs, ws);
  return cudaGetLastError();
}

template <bool P>
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

cudaError_t kda_chunk_intra_launch(int D, bool precise, const float* q, const float* k, const float* v, const float* g, const float* beta,
                                   int64_t H, const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream) {
  return precise ? intra_for<true>(D, q, k, v, g, beta, H, jobs, chunks, ws, stream)
                 : intra_for<false>(D, q, k, v, g, beta, H, jobs, chunks, ws, stream);
}

}  // namespace pdserve::cuda
