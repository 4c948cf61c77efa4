// Chunked KDA prefill, part 3 with the output in its own pass (KdaChunkOutput::kSeparate):
//   o = qg S^T + Aqk v_new
// for every chunk at once, from what the intra kernel (qg, Aqk) and the state kernel (each
// chunk's starting S^T, v_new in place of u) left in the workspace. Grid (chunk, head, D / VO):
// a block computes VO output columns of one chunk and head; 8 warps, each 16 rows x VO / 2
// columns. Two cp.async groups: qg and S^T's slice first, Aqk and v_new landing while the
// first product runs. 104 KB of shared memory at D = 128: two blocks an SM.
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

template <int D>
struct OutSmem {
  static constexpr int VO = D < 64 ? D : 64;  // output columns a block
  static constexpr int QS = D + 4;            // qg: A operand
  static constexpr int AS = C + 4;            // Aqk: A operand
  static constexpr int BS = VO + 8;           // S^T slice, v_new: B operand
  static constexpr int floats = C * QS + D * BS + C * AS + C * BS;
  static constexpr size_t bytes = floats * sizeof(float);
  static constexpr int NTW = VO / 16;  // n tiles a warp
};

template <int D, Math P>
__global__ void __launch_bounds__(256, 2) output_kernel(const float* __restrict__ ws, int64_t H, const ChunkJob* __restrict__ jobs,
                                                        float* __restrict__ o) {
  using Sm = OutSmem<D>;
  using L = Layout<D>;
  constexpr int VO = Sm::VO, QS = Sm::QS, AS = Sm::AS, BS = Sm::BS, NTW = Sm::NTW;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);
  float* sS = sq + C * QS;
  float* sa = sS + D * BS;
  float* sv = sa + C * AS;

  const ChunkJob job = jobs[blockIdx.x];
  const int64_t h = blockIdx.y;
  const int v0 = blockIdx.z * VO;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const float* base = ws + (static_cast<int64_t>(blockIdx.x) * H + h) * L::floats;

  constexpr int D4 = D / 4, V4 = VO / 4, C4 = C / 4;
  for (int idx = tid; idx < C * D4; idx += 256) {
    const int i = idx / D4, c = (idx % D4) * 4;
    cp_async16(sq + i * QS + c, base + L::qg + i * D + c);
  }
  for (int idx = tid; idx < D * V4; idx += 256) {
    const int r = idx / V4, c = (idx % V4) * 4;
    cp_async16(sS + r * BS + c, base + L::s + r * D + v0 + c);
  }
  cp_async_commit();
  for (int idx = tid; idx < C * C4; idx += 256) {
    const int i = idx / C4, c = (idx % C4) * 4;
    cp_async16(sa + i * AS + c, base + L::aqk + i * C + c);
  }
  for (int idx = tid; idx < C * V4; idx += 256) {
    const int i = idx / V4, c = (idx % V4) * 4;
    cp_async16(sv + i * BS + c, base + L::u + i * D + v0 + c);
  }
  cp_async_commit();

  const int mrow = warp & 3, n0 = (warp >> 2) * NTW * 8;
  const int r0 = mrow * 16 + gid, r1 = r0 + 8;
  float acc[NTW][4] = {};
  cp_async_wait<1>();
  __syncthreads();
  auto rows_a = [&](const float* X, int stride, int k) {
    return FragA<P>(X[r0 * stride + k + tig], X[r1 * stride + k + tig], X[r0 * stride + k + tig + 4], X[r1 * stride + k + tig + 4]);
  };
  auto cols_b = [&](const float* X, int col, int k) { return FragB<P>(X[(k + tig) * BS + col], X[(k + tig + 4) * BS + col]); };
#pragma unroll 2
  for (int kb = 0; kb < D; kb += 16) {
    const FragA<P> a0 = rows_a(sq, QS, kb), a1 = rows_a(sq, QS, kb + 8);
#pragma unroll
    for (int nt = 0; nt < NTW; ++nt) {
      const int col = n0 + nt * 8 + gid;
      mma(acc[nt], a0, a1, cols_b(sS, col, kb), cols_b(sS, col, kb + 8));
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  // Aqk is causal: the K loop stops at the warp's last row.
  for (int kb = 0; kb < 16 * mrow + 16; kb += 16) {
    const FragA<P> a0 = rows_a(sa, AS, kb), a1 = rows_a(sa, AS, kb + 8);
#pragma unroll
    for (int nt = 0; nt < NTW; ++nt) {
      const int col = n0 + nt * 8 + gid;
      mma(acc[nt], a0, a1, cols_b(sv, col, kb), cols_b(sv, col, kb + 8));
    }
  }
#pragma unroll
  for (int nt = 0; nt < NTW; ++nt) {
    const int col = v0 + n0 + nt * 8 + 2 * tig;
    if (r0 < job.len) *reinterpret_cast<float2*>(o + ((job.row0 + r0) * H + h) * D + col) = make_float2(acc[nt][0], acc[nt][1]);
    if (r1 < job.len) *reinterpret_cast<float2*>(o + ((job.row0 + r1) * H + h) * D + col) = make_float2(acc[nt][2], acc[nt][3]);
  }
}

template <int D, Math P>
cudaError_t launch_output(const float* ws, int64_t H, const ChunkJob* jobs, int64_t chunks, float* o, cudaStream_t stream) {
  constexpr size_t bytes = OutSmem<D>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(output_kernel<D, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(H), D / OutSmem<D>::VO);
  output_kernel<D, P><<<grid, 256, bytes, stream>>>(ws, H, jobs, o);
  return cudaGetLastError();
}

template <Math P>
cudaError_t output_for(int D, const float* ws, int64_t H, const ChunkJob* jobs, int64_t chunks, float* o, cudaStream_t stream) {
  switch (D) {
    case 32: return launch_output<32, P>(ws, H, jobs, chunks, o, stream);
    case 64: return launch_output<64, P>(ws, H, jobs, chunks, o, stream);
    case 128: return launch_output<128, P>(ws, H, jobs, chunks, o, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t kda_chunk_output_launch(int D, Math math, const float* ws, int64_t H, const ChunkJob* jobs, int64_t chunks, float* o,
                                    cudaStream_t stream) {
  switch (math) {
    case kda_chunk::kTf32: return output_for<kda_chunk::kTf32>(D, ws, H, jobs, chunks, o, stream);
    case kda_chunk::k3xTf32: return output_for<kda_chunk::k3xTf32>(D, ws, H, jobs, chunks, o, stream);
    case kda_chunk::kBf16: return output_for<kda_chunk::kBf16>(D, ws, H, jobs, chunks, o, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pdserve::cuda
