// Chunked KDA prefill, part 2: the only serial part. A block owns VT value rows of one
// (sequence, head) state (rows of S[V][K] evolve independently given w and k) and walks the
// sequence's chunks: per chunk, with S the state at the chunk's start,
//   v_new = u - w S^T                 (the delta rule's corrected values, C x VT)
//   o     = qg S^T + Aqk v_new        (the carried state's part plus the intra-chunk part)
//   S^T   = diag(gl) S^T + kg^T v_new (decay to the chunk end, add the chunk's updates)
// The block's slice of S^T (D x VT fp32) lives in the mma accumulators across the whole
// sequence and is staged in shared memory once per chunk as the B operand. The chunk's
// inputs arrive by cp.async in two groups (w, qg, u | Aqk, kg, gl), each prefetched while the
// other group's matmuls run. Double-buffered (DB, where shared memory allows): w and qg get
// two buffers and u joins the second group, so chunk n + 2's w, qg load during all of chunk
// n + 1 instead of only its second half. Grid (D / VT, H, sequences), NW warps (8, or 16 at
// D = 128 with VT >= 32: twice the warps an SM to hide the serial chain's latencies, each with
// half the tiles): the row-side matmuls split 4 row tiles x NW / 4 column groups, the state
// tiles split over all NW. PK (bf16 math; 8 warps, or 16 at D = 128 with VT >= 32 - opt-in: at
// VT = 64 the 16-warp CTA's chunk took as long as the 8-warp one's, ~1.4x the VT = 32 CTA's,
// docs/perf.md "Packed state kernel on 16 warps"): the packed bf16 workspace (w, qg, Aqk, kg^T
// in bf16, kda_chunk_common.cuh) staged as it is, and the B operands S^T and v_new staged as
// transposed bf16 words (one 32-bit load a fragment, the rounding FragB(float, float) would do,
// so bit-identical): 83.5 KB single-buffered at D = 128, VT = 32 instead of 157.5 KB (117.5 / 223.5
// KB double-buffered), so an intra CTA (112 KB) fits beside it.
#include "common/pdl_bulk.cuh"
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

template <int D, int VT, bool DB, int NW = 8, bool PK = false>
struct StateSmem {
  // Row strides in 4-byte words. Packed (bf16 pairs a word): a stride of 4 mod 32 words keeps
  // the A fragments' word reads (rows gid, words tig) conflict-free, and the B operands' row
  // pairs (2 tig, 2 tig + 1) want 2 VS = 8 mod 32.
  static constexpr int WS = PK ? D / 2 + 4 : D + 4;   // w, qg: A operand (row i, col c)
  static constexpr int KGS = PK ? C / 2 + 4 : D + 8;  // kg: A operand transposed (fp32: row j, col c; PK: row c, col j)
  static constexpr int KG_FLOATS = PK ? D * KGS : C * KGS;
  static constexpr int AS = PK ? C / 2 + 4 : C + 4;   // Aqk: A operand
  static constexpr int VS = PK ? VT + 4 : VT + 8;     // u, v_new, S^T: B operand (row k, col n)
  static constexpr int ROWBUF = 2 * C * WS;  // one buffer of w and qg
  // v_new and S^T, the B operands: PK stages them transposed as bf16 [VT][k] (row = value
  // column, one 32-bit word a k pair: a fragment is one load, no conversion), else fp32 [k][VT].
  static constexpr int VNW = C / 2 + 4, STW = D / 2 + 4;  // PK word strides (4 mod 32: conflict-free)
  static constexpr int VN_FLOATS = PK ? VT * VNW : C * VS;
  static constexpr int ST_FLOATS = PK ? VT * STW : D * VS;
  static constexpr int floats = (DB ? 2 : 1) * ROWBUF + KG_FLOATS + C * AS + C * VS + VN_FLOATS + ST_FLOATS + D;
  static constexpr size_t bytes = floats * sizeof(float);
  static constexpr bool fits = bytes <= 227 * 1024;  // the sm_90 per-block opt-in limit
  // The state slice's tiles over NW warps: WM x WN warps, MT x NT tiles of 16 x 8 each.
  static constexpr int MTILES = D / 16, NTILES = VT / 8;
  static constexpr int WM = MTILES < NW ? MTILES : NW, WN = NW / WM, MT = MTILES / WM, NT = NTILES / WN;
  static_assert(WM * WN == NW && MT * WM == MTILES && NT >= 1 && NT * WN == NTILES, "state tiles must split over the warps");
  static constexpr int VNT = NTILES / (NW / 4);  // n tiles of a warp in the row-side matmuls (its column group)
  static_assert(VNT >= 1 && VNT * (NW / 4) == NTILES, "VT must give every column group at least one n tile");
};

template <int D, int VT, Math P, bool DB, int NW, bool PK>
__global__ void __launch_bounds__(NW * 32) state_kernel(const float* __restrict__ ws, int64_t H, const SeqJob* __restrict__ jobs,
                                                        float* __restrict__ state, int64_t layer_offset, float* __restrict__ o,
                                                        int prefetch) {
  static_assert(!PK || P == kBf16, "the packed workspace is bf16");
  using Sm = StateSmem<D, VT, DB, NW, PK>;
  constexpr int NT_THREADS = NW * 32;
  using L = Layout<D>;
  constexpr int WS = Sm::WS, KGS = Sm::KGS, AS = Sm::AS, VS = Sm::VS, MT = Sm::MT, NT = Sm::NT, WM = Sm::WM;
  constexpr int VNT = Sm::VNT, VNW = Sm::VNW, STW = Sm::STW;
  extern __shared__ float4 smem4[];
  float* sw0 = reinterpret_cast<float*>(smem4);  // w then qg; DB: a second pair follows
  float* skg = sw0 + (DB ? 2 : 1) * Sm::ROWBUF;
  float* saqk = skg + Sm::KG_FLOATS;
  float* su = saqk + C * AS;
  float* svn = su + C * VS;
  float* sS = svn + Sm::VN_FLOATS;
  float* sgl = sS + Sm::ST_FLOATS;

  const SeqJob job = jobs[blockIdx.z];
  const int64_t h = blockIdx.y;
  const int v0 = blockIdx.x * VT;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int wm = warp % WM, wn = warp / WM;
  float* S = state + job.slot_off + layer_offset + h * D * D;  // [V][K]

  // The slice S^T[c][v0 + v] in accumulator layout: tile (mi, ni) rows c = (wm*MT+mi)*16 + gid
  // (+8), columns v = (wn*NT+ni)*8 + 2 tig (+1).
  float sacc[MT][NT][4];
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
    for (int idx = tid; idx < C * V4; idx += NT_THREADS) {
      const int i = idx / V4, c = (idx % V4) * 4;
      cp_async16(su + i * VS + c, b + L::u + i * D + v0 + c);
    }
  };
  auto issue_rows = [&](int n) {  // w, qg (+ u when single-buffered)
    const float* b = chunk_base(n);
    float* bw = rows_buf(n);
    float* bq = bw + C * WS;
    if constexpr (PK) {  // bf16 rows: D / 8 16-byte pieces each (4 words)
      constexpr int D8 = D / 8;
      for (int idx = tid; idx < C * D8; idx += NT_THREADS) {
        const int i = idx / D8, c = (idx % D8) * 4;  // c in words
        cp_async16(bw + i * WS + c, b + L::w + i * (D / 2) + c);
        cp_async16(bq + i * WS + c, b + L::qg + i * (D / 2) + c);
      }
    } else {
      constexpr int D4 = D / 4;
      for (int idx = tid; idx < C * D4; idx += NT_THREADS) {
        const int i = idx / D4, c = (idx % D4) * 4;
        cp_async16(bw + i * WS + c, b + L::w + i * D + c);
        cp_async16(bq + i * WS + c, b + L::qg + i * D + c);
      }
    }
    if constexpr (!DB) issue_u(b);
    cp_async_commit();
  };
  auto issue_update = [&](int n) {  // Aqk, kg, gl (+ u when double-buffered)
    const float* b = chunk_base(n);
    constexpr int D4 = D / 4, C4 = C / 4;
    if constexpr (DB) issue_u(b);
    if constexpr (PK) {  // Aqk [C][C] and kg^T [D][C] in bf16: C / 8 pieces a row
      constexpr int C8 = C / 8;
      for (int idx = tid; idx < C * C8; idx += NT_THREADS) {
        const int i = idx / C8, c = (idx % C8) * 4;
        cp_async16(saqk + i * AS + c, b + L::aqk + i * (C / 2) + c);
      }
      for (int idx = tid; idx < D * C8; idx += NT_THREADS) {
        const int r = idx / C8, c = (idx % C8) * 4;
        cp_async16(skg + r * KGS + c, b + L::kg + r * (C / 2) + c);
      }
    } else {
      for (int idx = tid; idx < C * C4; idx += NT_THREADS) {
        const int i = idx / C4, c = (idx % C4) * 4;
        cp_async16(saqk + i * AS + c, b + L::aqk + i * C + c);
      }
      for (int idx = tid; idx < C * D4; idx += NT_THREADS) {
        const int i = idx / D4, c = (idx % D4) * 4;
        cp_async16(skg + i * KGS + c, b + L::kg + i * D + c);
      }
    }
    for (int idx = tid; idx < D4; idx += NT_THREADS) cp_async16(sgl + idx * 4, b + L::gl + idx * 4);
    cp_async_commit();
  };

  // Group order: R0 U0 [R1], then per chunk n: U(n+1) [R(n+2)]; empty groups past the end
  // keep the wait counts uniform.
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
  // PK, opt-in: chunk n's inputs requested into L2 `prefetch` chunks ahead (one lane a region;
  // the head's other state blocks ask for the same lines). Measured 13-17% slower on the H200
  // at distances 1, 2 and 4 (docs/perf.md "State kernel: bf16 B operands, L2 prefetch"): the
  // kernel is not waiting on DRAM.
  auto prefetch_chunk = [&](int n) {
    if (!PK || warp != 0 || lane >= 6 || n >= job.chunks) return;
    const float* b = chunk_base(n);
    const int64_t off = lane == 0 ? L::w : lane == 1 ? L::u : lane == 2 ? L::qg : lane == 3 ? L::kg : lane == 4 ? L::aqk : L::gl;
    const uint32_t bytes = lane == 1 ? C * D * 4 : lane == 4 ? C * C * 2 : lane == 5 ? D * 4 : C * D * 2;  // bf16 but u, gl
    pdl_bulk::bulk_prefetch_l2(b + off, bytes);
  };
  for (int n = 1; n < prefetch; ++n) prefetch_chunk(n);
  // PK: a k pair of the transposed bf16 B operands ([col][k] words) from this lane's values at
  // (k, col) and (k, col + 1); the pair's other k (k ^ 1, row gid ^ 1) is lane ^ 4's. Even k
  // lanes store column col's word, odd ones column col + 1's: bf16x2 as FragB(float, float).
  auto store_pair_t = [&](uint32_t* X, int stride, int k, int col, float a, float b) {
    const bool odd = k & 1;
    const float x = __shfl_xor_sync(0xffffffffu, odd ? a : b, 4);
    if (odd)
      X[(col + 1) * stride + (k - 1) / 2] = bf16x2(x, b);
    else
      X[col * stride + k / 2] = bf16x2(a, x);
  };
  uint32_t* sST = reinterpret_cast<uint32_t*>(sS);   // PK: S^T as bf16 [VT][D]
  uint32_t* sVNT = reinterpret_cast<uint32_t*>(svn);  // PK: v_new as bf16 [VT][C]
  // This warp's part of the row-side matmuls: rows [16 mrow, 16 mrow + 16), columns from n0.
  const int mrow = warp & 3, n0 = (warp >> 2) * VNT * 8;
  const int r0 = mrow * 16 + gid, r1 = r0 + 8;
  for (int n = 0; n < job.chunks; ++n) {
    if (prefetch > 0) prefetch_chunk(n + prefetch);
    cp_async_wait<DB ? 2 : 1>();  // rows(n) landed; update(n) (DB: and rows(n+1)) may be in flight
    const float* sw = rows_buf(n);
    const float* sqg = sw + C * WS;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        const int c = (wm * MT + mi) * 16 + gid, vv = (wn * NT + ni) * 8 + 2 * tig;
        if constexpr (PK) {
          store_pair_t(sST, STW, c, vv, sacc[mi][ni][0], sacc[mi][ni][1]);
          store_pair_t(sST, STW, c + 8, vv, sacc[mi][ni][2], sacc[mi][ni][3]);
        } else {
          *reinterpret_cast<float2*>(sS + c * VS + vv) = make_float2(sacc[mi][ni][0], sacc[mi][ni][1]);
          *reinterpret_cast<float2*>(sS + (c + 8) * VS + vv) = make_float2(sacc[mi][ni][2], sacc[mi][ni][3]);
        }
      }
    __syncthreads();

    // v_new = u - w S^T and the carried part of o, this warp's rows and columns.
    float vacc[VNT][4] = {}, oacc[VNT][4] = {};
    // Fragments of this warp's rows (A: w, qg, Aqk) and of its columns (B: S^T, v_new) at k.
    auto rows_a = [&](const float* X, int stride, int k) {
      if constexpr (PK) {
        const uint32_t* W = reinterpret_cast<const uint32_t*>(X);
        return FragA<P>(W[r0 * stride + k / 2 + tig], W[r1 * stride + k / 2 + tig]);
      } else {
        return FragA<P>(X[r0 * stride + k + tig], X[r1 * stride + k + tig], X[r0 * stride + k + tig + 4], X[r1 * stride + k + tig + 4]);
      }
    };
    // B fragments of S^T (k = key channel) and v_new (k = token); PK: one word, k pair
    // (2 tig, 2 tig + 1) as the packed A operands.
    auto st_b = [&](int col, int k) {
      if constexpr (PK)
        return FragB<P>(sST[col * STW + k / 2 + tig]);
      else
        return FragB<P>(sS[(k + tig) * VS + col], sS[(k + tig + 4) * VS + col]);
    };
    auto vn_b = [&](int col, int k) {
      if constexpr (PK)
        return FragB<P>(sVNT[col * VNW + k / 2 + tig]);
      else
        return FragB<P>(svn[(k + tig) * VS + col], svn[(k + tig + 4) * VS + col]);
    };
#pragma unroll 2
    for (int kb = 0; kb < D; kb += 16) {
      const FragA<P> aw0 = rows_a(sw, WS, kb), aw1 = rows_a(sw, WS, kb + 8);
      const FragA<P> aq0 = rows_a(sqg, WS, kb), aq1 = rows_a(sqg, WS, kb + 8);
#pragma unroll
      for (int nt = 0; nt < VNT; ++nt) {
        const int col = n0 + nt * 8 + gid;
        const FragB<P> b0 = st_b(col, kb), b1 = st_b(col, kb + 8);
        mma(vacc[nt], aw0, aw1, b0, b1);
        mma(oacc[nt], aq0, aq1, b0, b1);
      }
    }
    auto write_vnew = [&] {
#pragma unroll
      for (int nt = 0; nt < VNT; ++nt) {
        const int col = n0 + nt * 8 + 2 * tig;
        const float v00 = su[r0 * VS + col] - vacc[nt][0], v01 = su[r0 * VS + col + 1] - vacc[nt][1];
        const float v10 = su[r1 * VS + col] - vacc[nt][2], v11 = su[r1 * VS + col + 1] - vacc[nt][3];
        if constexpr (PK) {
          store_pair_t(sVNT, VNW, r0, col, v00, v01);
          store_pair_t(sVNT, VNW, r1, col, v10, v11);
        } else {
          svn[r0 * VS + col] = v00, svn[r0 * VS + col + 1] = v01;
          svn[r1 * VS + col] = v10, svn[r1 * VS + col + 1] = v11;
        }
      }
    };
    if constexpr (DB) {
      cp_async_wait<1>();  // update(n), with u, landed; rows(n+1) may be in flight
      __syncthreads();
      write_vnew();
      __syncthreads();  // v_new complete
    } else {
      write_vnew();
      __syncthreads();  // v_new complete; w, qg, u and S^T's staging free
      if (n + 1 < job.chunks)
        issue_rows(n + 1);
      else
        cp_async_commit();  // an empty group keeps the wait counts uniform
      cp_async_wait<1>();   // update(n) landed
      __syncthreads();
    }

    // o += Aqk v_new (Aqk is causal: the K loop stops at the warp's last row).
    for (int kb = 0; kb < 16 * mrow + 16; kb += 16) {
      const FragA<P> a0 = rows_a(saqk, AS, kb), a1 = rows_a(saqk, AS, kb + 8);
#pragma unroll
      for (int nt = 0; nt < VNT; ++nt) {
        const int col = n0 + nt * 8 + gid;
        mma(oacc[nt], a0, a1, vn_b(col, kb), vn_b(col, kb + 8));
      }
    }
    const int64_t row_base = job.row0 + static_cast<int64_t>(n) * C;
    const int64_t valid = job.rows - static_cast<int64_t>(n) * C;
#pragma unroll
    for (int nt = 0; nt < VNT; ++nt) {
      const int col = v0 + n0 + nt * 8 + 2 * tig;
      if (r0 < valid) *reinterpret_cast<float2*>(o + ((row_base + r0) * H + h) * D + col) = make_float2(oacc[nt][0], oacc[nt][1]);
      if (r1 < valid) *reinterpret_cast<float2*>(o + ((row_base + r1) * H + h) * D + col) = make_float2(oacc[nt][2], oacc[nt][3]);
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
      if constexpr (PK) {
        const uint32_t* W = reinterpret_cast<const uint32_t*>(skg);
        return FragA<P>(W[c * KGS + k / 2 + tig], W[(c + 8) * KGS + k / 2 + tig]);
      } else {
        return FragA<P>(skg[(k + tig) * KGS + c], skg[(k + tig) * KGS + c + 8], skg[(k + tig + 4) * KGS + c], skg[(k + tig + 4) * KGS + c + 8]);
      }
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
          mma(sacc[mi][ni], a0, a1, vn_b(vv, kb), vn_b(vv, kb + 8));
        }
      }
    }
    __syncthreads();  // Aqk, kg, gl, u and v_new free (DB: and this chunk's w, qg buffer)
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

template <int D, int VT, Math P, bool DB, int NW, bool PK>
cudaError_t launch_state_db(const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, float* o,
                            cudaStream_t stream, int prefetch) {
  static_assert(StateSmem<D, VT, DB, NW, PK>::fits, "state kernel shared memory over the per-block limit");
  constexpr size_t bytes = StateSmem<D, VT, DB, NW, PK>::bytes;
  const cudaError_t e =
      cudaFuncSetAttribute(state_kernel<D, VT, P, DB, NW, PK>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(D / VT, static_cast<unsigned>(H), static_cast<unsigned>(seqs));
  state_kernel<D, VT, P, DB, NW, PK><<<grid, NW * 32, bytes, stream>>>(ws, H, jobs, state, lo, o, prefetch);
  return cudaGetLastError();
}

// Double buffering where asked for and shared memory allows (not D = 128 at VT = 64 unpacked).
template <int D, int VT, Math P, int NW = 8, bool PK = false>
cudaError_t launch_state(bool db, const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, float* o,
                         cudaStream_t stream, int prefetch = 0) {
  if constexpr (StateSmem<D, VT, true, NW, PK>::fits) {
    if (db) return launch_state_db<D, VT, P, true, NW, PK>(ws, H, jobs, seqs, state, lo, o, stream, prefetch);
  }
  return launch_state_db<D, VT, P, false, NW, PK>(ws, H, jobs, seqs, state, lo, o, stream, prefetch);
}

// The packed bf16 workspace: 8 warps at every tile; 16 at D = 128 with tiles 32 / 64 (the
// launcher checks).
cudaError_t state_packed(int D, int vt, int warps, bool db, const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state,
                         int64_t lo, float* o, cudaStream_t stream, int pf) {
  if (warps == 16) {
    if (D != 128) return cudaErrorInvalidValue;
    if (vt == 64) return launch_state<128, 64, kBf16, 16, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
    if (vt == 32) return launch_state<128, 32, kBf16, 16, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
    return cudaErrorInvalidValue;
  }
  if (vt == 64) {
    switch (D) {
      case 64: return launch_state<64, 64, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
      case 128: return launch_state<128, 64, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
      default: return cudaErrorInvalidValue;
    }
  }
  if (vt == 16) {
    switch (D) {
      case 64: return launch_state<64, 16, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
      case 128: return launch_state<128, 16, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (D) {
    case 32: return launch_state<32, 32, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
    case 64: return launch_state<64, 32, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
    case 128: return launch_state<128, 32, kBf16, 8, true>(db, ws, H, jobs, seqs, state, lo, o, stream, pf);
    default: return cudaErrorInvalidValue;
  }
}

template <Math P>
cudaError_t state_for(int D, int vt, int warps, bool db, const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state,
                      int64_t lo, float* o, cudaStream_t stream) {
  if (warps == 16) {  // D = 128 at VT 32 / 64 only (the launcher checks)
    if (D != 128) return cudaErrorInvalidValue;
    if (vt == 64) return launch_state<128, 64, P, 16>(db, ws, H, jobs, seqs, state, lo, o, stream);
    if (vt == 32) return launch_state<128, 32, P, 16>(db, ws, H, jobs, seqs, state, lo, o, stream);
    return cudaErrorInvalidValue;
  }
  if (vt == 64) {
    switch (D) {
      case 64: return launch_state<64, 64, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
      case 128: return launch_state<128, 64, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  if (vt == 16) {
    switch (D) {
      case 64: return launch_state<64, 16, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
      case 128: return launch_state<128, 16, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (D) {
    case 32: return launch_state<32, 32, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
    case 64: return launch_state<64, 32, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
    case 128: return launch_state<128, 32, P>(db, ws, H, jobs, seqs, state, lo, o, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t kda_chunk_state_launch(int D, int vt, int warps, Math math, bool double_buffer, const float* ws, int64_t H, const SeqJob* jobs,
                                   int64_t seqs, float* state, int64_t layer_offset, float* o, cudaStream_t stream, bool packed,
                                   int prefetch) {
  if (packed) {  // bf16 only (the launcher checks)
    if (math != kda_chunk::kBf16 || (warps != 8 && warps != 16)) return cudaErrorInvalidValue;
    return state_packed(D, vt, warps, double_buffer, ws, H, jobs, seqs, state, layer_offset, o, stream, prefetch < 0 ? 0 : prefetch);
  }
  switch (math) {
    case kda_chunk::kTf32: return state_for<kda_chunk::kTf32>(D, vt, warps, double_buffer, ws, H, jobs, seqs, state, layer_offset, o, stream);
    case kda_chunk::k3xTf32: return state_for<kda_chunk::k3xTf32>(D, vt, warps, double_buffer, ws, H, jobs, seqs, state, layer_offset, o, stream);
    case kda_chunk::kBf16: return state_for<kda_chunk::kBf16>(D, vt, warps, double_buffer, ws, H, jobs, seqs, state, layer_offset, o, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pdserve::cuda
