// Chunked KDA prefill, part 2 with the output in its own pass (KdaChunkOutput::kSeparate):
// the serial kernel carries only the state. A block owns VT value rows of one (sequence, head)
// state and walks the sequence's chunks; per chunk, with S the state at the chunk's start,
//   store S^T                         (the output kernel's carried-state operand)
//   v_new = u - w S^T                 (stored in place of u: the output kernel's other operand)
//   S^T   = diag(gl) S^T + kg^T v_new
// Two matmul phases and three barriers a chunk instead of the in-state kernel's four phases
// (kda_chunk_state_sm90.cu): q exp(G) S^T and Aqk v_new move to kda_chunk_output_sm90.cu,
// which runs over all chunks at once. Without q exp(G) and Aqk the shared memory shrinks, so
// single-buffered blocks fit two an SM (tile 16: 256 blocks at H = 32 on 132 SMs).
// Loads as in the in-state kernel: cp.async groups (w [+ u] | [u +] kg, gl), double-buffered w
// where asked for. Grid (D / VT, H, sequences), 8 warps.
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

template <int D, int VT, bool DB>
struct SplitSmem {
  static constexpr int WS = D + 4;   // w: A operand (row i, col c)
  static constexpr int KGS = D + 8;  // kg: A operand transposed (row c, col j)
  static constexpr int VS = VT + 8;  // u, v_new, S^T: B operand (row k, col n)
  static constexpr int ROWBUF = C * WS;
  static constexpr int floats = (DB ? 2 : 1) * ROWBUF + C * KGS + 2 * C * VS + D * VS + D;
  static constexpr size_t bytes = floats * sizeof(float);
  static constexpr bool fits = bytes <= 227 * 1024;
  static constexpr int MTILES = D / 16, NTILES = VT / 8;
  static constexpr int WM = MTILES < 8 ? MTILES : 8, WN = 8 / WM, MT = MTILES / WM, NT = NTILES / WN;
  static_assert(WM * WN == 8 && MT * WM == MTILES && NT >= 1 && NT * WN == NTILES, "state tiles must split over 8 warps");
  static constexpr int VNT = NTILES / 2;
  static_assert(VNT >= 1, "VT must be at least 16");
};

template <int D, int VT, Math P, bool DB>
__global__ void __launch_bounds__(256) state_split_kernel(float* __restrict__ ws, int64_t H, const SeqJob* __restrict__ jobs,
                                                          float* __restrict__ state, int64_t layer_offset) {
  using Sm = SplitSmem<D, VT, DB>;
  using L = Layout<D>;
  constexpr int WS = Sm::WS, KGS = Sm::KGS, VS = Sm::VS, MT = Sm::MT, NT = Sm::NT, WM = Sm::WM, VNT = Sm::VNT;
  extern __shared__ float4 smem4[];
  float* sw0 = reinterpret_cast<float*>(smem4);  // DB: a second w buffer follows
  float* skg = sw0 + (DB ? 2 : 1) * Sm::ROWBUF;
  float* su = skg + C * KGS;
  float* svn = su + C * VS;
  float* sS = svn + C * VS;
  float* sgl = sS + D * VS;

  const SeqJob job = jobs[blockIdx.z];
  const int64_t h = blockIdx.y;
  const int v0 = blockIdx.x * VT;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int wm = warp % WM, wn = warp / WM;
  float* S = state + job.slot_off + layer_offset + h * D * D;  // [V][K]

  float sacc[MT][NT][4];  // S^T[c][v0 + v], as in the in-state kernel
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = (wm * MT + mi) * 16 + gid + (e >> 1) * 8, vv = (wn * NT + ni) * 8 + 2 * tig + (e & 1);
        sacc[mi][ni][e] = S[static_cast<int64_t>(v0 + vv) * D + c];
      }

  auto chunk_base = [&](int n) { return ws + (static_cast<int64_t>(job.chunk0 + n) * H + h) * L::floats; };
  auto rows_buf = [&](int n) { return sw0 + (DB ? (n & 1) * Sm::ROWBUF : 0); };
  auto issue_u = [&](const float* b) {
    constexpr int V4 = VT / 4;
    for (int idx = tid; idx < C * V4; idx += 256) {
      const int i = idx / V4, c = (idx % V4) * 4;
      cp_async16(su + i * VS + c, b + L::u + i * D + v0 + c);
    }
  };
  auto issue_rows = [&](int n) {  // w (+ u when single-buffered)
    const float* b = chunk_base(n);
    float* bw = rows_buf(n);
    constexpr int D4 = D / 4;
    for (int idx = tid; idx < C * D4; idx += 256) {
      const int i = idx / D4, c = (idx % D4) * 4;
      cp_async16(bw + i * WS + c, b + L::w + i * D + c);
    }
    if constexpr (!DB) issue_u(b);
    cp_async_commit();
  };
  auto issue_update = [&](int n) {  // kg, gl (+ u when double-buffered)
    const float* b = chunk_base(n);
    constexpr int D4 = D / 4;
    if constexpr (DB) issue_u(b);
    for (int idx = tid; idx < C * D4; idx += 256) {
      const int i = idx / D4, c = (idx % D4) * 4;
      cp_async16(skg + i * KGS + c, b + L::kg + i * D + c);
    }
    for (int idx = tid; idx < D4; idx += 256) cp_async16(sgl + idx * 4, b + L::gl + idx * 4);
    cp_async_commit();
  };

  // Group order as in the in-state kernel: R0 U0 [R1], then per chunk n: U(n+1) [R(n+2)].
  if (job.chunks > 0) {
    issue_rows(0);
    issue_update(0);
    if constexpr (DB) {
      if (job.chunks > 1)
        issue_rows(1);
      else
        cp_async_commit();
    }
  }
  const int mrow = warp & 3, n0 = (warp >> 2) * VNT * 8;
  const int r0 = mrow * 16 + gid, r1 = r0 + 8;
  for (int n = 0; n < job.chunks; ++n) {
    cp_async_wait<DB ? 2 : 1>();  // rows(n) landed
    float* base = chunk_base(n);
    const float* sw = rows_buf(n);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        const int c = (wm * MT + mi) * 16 + gid, vv = (wn * NT + ni) * 8 + 2 * tig;
        *reinterpret_cast<float2*>(sS + c * VS + vv) = make_float2(sacc[mi][ni][0], sacc[mi][ni][1]);
        *reinterpret_cast<float2*>(sS + (c + 8) * VS + vv) = make_float2(sacc[mi][ni][2], sacc[mi][ni][3]);
      }
    __syncthreads();
    {  // S^T at the chunk's start, this block's columns, for the output kernel (coalesced rows)
      constexpr int V4 = VT / 4;
      float* gs = base + L::s + v0;
      for (int idx = tid; idx < D * V4; idx += 256) {
        const int c = idx / V4, vv = (idx % V4) * 4;
        *reinterpret_cast<float4*>(gs + c * D + vv) = *reinterpret_cast<const float4*>(sS + c * VS + vv);
      }
    }

    // v_new = u - w S^T, this warp's rows and columns.
    float vacc[VNT][4] = {};
    auto w_a = [&](int k) {
      return FragA<P>(sw[r0 * WS + k + tig], sw[r1 * WS + k + tig], sw[r0 * WS + k + tig + 4], sw[r1 * WS + k + tig + 4]);
    };
    auto cols_b = [&](const float* X, int col, int k) { return FragB<P>(X[(k + tig) * VS + col], X[(k + tig + 4) * VS + col]); };
#pragma unroll 2
    for (int kb = 0; kb < D; kb += 16) {
      const FragA<P> aw0 = w_a(kb), aw1 = w_a(kb + 8);
#pragma unroll
      for (int nt = 0; nt < VNT; ++nt) {
        const int col = n0 + nt * 8 + gid;
        mma(vacc[nt], aw0, aw1, cols_b(sS, col, kb), cols_b(sS, col, kb + 8));
      }
    }
    if constexpr (DB) {
      cp_async_wait<1>();  // update(n), with u, landed; rows(n+1) may be in flight
      __syncthreads();
    }
    float* gu = base + L::u + v0;  // v_new replaces u (only this block reads these columns)
#pragma unroll
    for (int nt = 0; nt < VNT; ++nt) {
      const int col = n0 + nt * 8 + 2 * tig;
      const float2 a = make_float2(su[r0 * VS + col] - vacc[nt][0], su[r0 * VS + col + 1] - vacc[nt][1]);
      const float2 b = make_float2(su[r1 * VS + col] - vacc[nt][2], su[r1 * VS + col + 1] - vacc[nt][3]);
      *reinterpret_cast<float2*>(svn + r0 * VS + col) = a;
      *reinterpret_cast<float2*>(svn + r1 * VS + col) = b;
      *reinterpret_cast<float2*>(gu + r0 * D + col) = a;
      *reinterpret_cast<float2*>(gu + r1 * D + col) = b;
    }
    if constexpr (DB) {
      __syncthreads();  // v_new complete
    } else {
      __syncthreads();  // v_new complete; w, u free
      if (n + 1 < job.chunks)
        issue_rows(n + 1);
      else
        cp_async_commit();
      cp_async_wait<1>();  // update(n) landed
      __syncthreads();
    }

    // S^T = diag(gl) S^T + kg^T v_new.
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const int c = (wm * MT + mi) * 16 + gid;
      const float gl0 = sgl[c], gl1 = sgl[c + 8];
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        sacc[mi][ni][0] *= gl0;
        sacc[mi][ni][1] *= gl0;
        sacc[mi][ni][2] *= gl1;
        sacc[mi][ni][3] *= gl1;
      }
    }
    auto kg_a = [&](int c, int k) {  // kg^T's fragment: rows c, c + 8 (key channels), k tokens
      return FragA<P>(skg[(k + tig) * KGS + c], skg[(k + tig) * KGS + c + 8], skg[(k + tig + 4) * KGS + c], skg[(k + tig + 4) * KGS + c + 8]);
    };
#pragma unroll 2
    for (int kb = 0; kb < C; kb += 16) {
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        const int c = (wm * MT + mi) * 16 + gid;
        const FragA<P> a0 = kg_a(c, kb), a1 = kg_a(c, kb + 8);
#pragma unroll
        for (int ni = 0; ni < NT; ++ni) {
          const int vv = (wn * NT + ni) * 8 + gid;
          mma(sacc[mi][ni], a0, a1, cols_b(svn, vv, kb), cols_b(svn, vv, kb + 8));
        }
      }
    }
    __syncthreads();  // kg, gl, u, v_new and S^T's staging free (DB: and this chunk's w buffer)
    if (n + 1 < job.chunks)
      issue_update(n + 1);
    else
      cp_async_commit();
    if constexpr (DB) {
      if (n + 2 < job.chunks)
        issue_rows(n + 2);
      else
        cp_async_commit();
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = (wm * MT + mi) * 16 + gid + (e >> 1) * 8, vv = (wn * NT + ni) * 8 + 2 * tig + (e & 1);
        S[static_cast<int64_t>(v0 + vv) * D + c] = sacc[mi][ni][e];
      }
}

template <int D, int VT, Math P, bool DB>
cudaError_t launch_one(float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, cudaStream_t stream) {
  static_assert(SplitSmem<D, VT, DB>::fits, "state kernel shared memory over the per-block limit");
  constexpr size_t bytes = SplitSmem<D, VT, DB>::bytes;
  const cudaError_t e =
      cudaFuncSetAttribute(state_split_kernel<D, VT, P, DB>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(D / VT, static_cast<unsigned>(H), static_cast<unsigned>(seqs));
  state_split_kernel<D, VT, P, DB><<<grid, 256, bytes, stream>>>(ws, H, jobs, state, lo);
  return cudaGetLastError();
}

template <int D, int VT, Math P>
cudaError_t launch_tile(bool db, float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, cudaStream_t stream) {
  if (db) return launch_one<D, VT, P, true>(ws, H, jobs, seqs, state, lo, stream);
  return launch_one<D, VT, P, false>(ws, H, jobs, seqs, state, lo, stream);
}

template <Math P>
cudaError_t split_for(int D, int vt, bool db, float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo,
                      cudaStream_t stream) {
  if (vt == 64) {
    switch (D) {
      case 64: return launch_tile<64, 64, P>(db, ws, H, jobs, seqs, state, lo, stream);
      case 128: return launch_tile<128, 64, P>(db, ws, H, jobs, seqs, state, lo, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  if (vt == 16) {
    switch (D) {
      case 64: return launch_tile<64, 16, P>(db, ws, H, jobs, seqs, state, lo, stream);
      case 128: return launch_tile<128, 16, P>(db, ws, H, jobs, seqs, state, lo, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (D) {
    case 32: return launch_tile<32, 32, P>(db, ws, H, jobs, seqs, state, lo, stream);
    case 64: return launch_tile<64, 32, P>(db, ws, H, jobs, seqs, state, lo, stream);
    case 128: return launch_tile<128, 32, P>(db, ws, H, jobs, seqs, state, lo, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t kda_chunk_state_split_launch(int D, int vt, Math math, bool double_buffer, float* ws, int64_t H, const SeqJob* jobs,
                                         int64_t seqs, float* state, int64_t layer_offset, cudaStream_t stream) {
  switch (math) {
    case kda_chunk::kTf32: return split_for<kda_chunk::kTf32>(D, vt, double_buffer, ws, H, jobs, seqs, state, layer_offset, stream);
    case kda_chunk::k3xTf32: return split_for<kda_chunk::k3xTf32>(D, vt, double_buffer, ws, H, jobs, seqs, state, layer_offset, stream);
    case kda_chunk::kBf16: return split_for<kda_chunk::kBf16>(D, vt, double_buffer, ws, H, jobs, seqs, state, layer_offset, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pdserve::cuda
