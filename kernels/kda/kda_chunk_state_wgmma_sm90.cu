// Chunked KDA prefill, part 2 on warpgroup MMA (sm_90a wgmma): the packed bf16 workspace's
// serial state kernel (kda_chunk_state_sm90.cu, PK) with its three matmuls as wgmma reading
// both operands from shared memory, so one warpgroup instruction (m64 x VT x k16) replaces the
// VT / 8 x 4 mma.sync and their fragment loads that each warp of the mma.sync kernel issues
// (there, every column group reloads the same w / qg A fragments and every row group the same
// S^T B fragments: the SM's shared-memory and issue throughput bound its chunk, docs/perf.md
// "Packed state kernel on 16 warps"). D = 128 only, VT = 32 or 64 value columns a CTA, two
// warpgroups. Per chunk (C = 64 tokens), with S the state at the chunk's start:
//   phase A: WG0 acc = w S^T, WG1 acc = qg S^T          (m64 nVT, k = 128: 8 wgmma each)
//   WG0: v_new = u - acc, stored as the bf16 B operand
//   phase C: WG g: S^T[64 g .. 64 g + 63] = diag(gl) S^T + kg^T v_new (4 wgmma);
//            both acc += Aqk v_new (4 wgmma; WG0's is discarded: a warpgroup-divergent wgmma
//            makes ptxas serialise them all), then WG1 o = acc
// The CTA's slice S^T (128 x VT fp32) lives in the warpgroups' accumulators (rows 64 g ..) for
// the whole sequence and is written once a chunk as the bf16 B operand of phase A. The same
// bf16 roundings as the mma.sync kernel (operands as the intra kernel wrote them, S^T and v_new
// rounded to nearest even), fp32 accumulation; only the tensor core's summation order may
// differ. Every operand lives in shared memory in the 128-byte swizzled K-major layout (rows of
// 64 bf16 in 8-row, 1024-byte atoms, 16-byte piece p of row r at piece p ^ (r % 8)): the packed
// workspace's rows (w, qg [C][D], kg^T [D][C], Aqk [C][C]) are K-major already, so cp.async
// stages them as they are with swizzled destinations; S^T and v_new are stored transposed
// ([VT][k], k contiguous), as the mma.sync kernel does.
// NS stages of a chunk's inputs (2, or 3 at VT = 32: chunk n + NS - 1 loads during chunk n;
// 145 / 211 KB at VT = 32), or one stage in two groups (w, qg | kg^T, Aqk, u, gl), each loaded
// while the other's matmuls run: 79 KB at VT = 32, 99 KB at 64, room for an intra CTA beside it
// in the pipelined schedule. Opt-in L2 prefetch of chunk n + d while chunk n runs.
// Multicast form (MC, 2 or 3 stages): a head's 128 / VT CTAs are one thread-block cluster and
// the inputs they share (w, qg, kg^T, Aqk: 56 KB a chunk) come once per cluster, by bulk tensor
// copies (TMA, 128B swizzle = the layout above) multicast to every CTA: each CTA issues its share
// of the seven 8 KB boxes, each CTA's "full" mbarrier of the stage expects all of them. u's
// columns (the CTA's own) and gl stay cp.async. A stage is refilled only after every CTA of the
// cluster is done with it, before thread 0 issues its boxes of chunk n - 1 + NS: (bars = 0) a
// cluster barrier, arrived (relaxed: a release would wait for the chunk's o stores) at the end of
// each chunk, waited by all threads at the top of the next; or (bars = 1) an "empty" mbarrier a
// stage in each CTA, counting one arrival of every CTA's thread 0 after the chunk, waited by
// thread 0 alone once its phase A wgmma are issued (the wait hides behind them).
#include "common/pdl_bulk.cuh"
#include "common/tensor_map.h"
#include "kda/kda_chunk_common.cuh"
#include "mla/wgmma_bf16.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

// d (+)= A(smem, K-major, 128B swizzle) x B(smem, K-major, 128B swizzle), m64 nN k16 bf16.
template <int N>
struct WgMma;
template <>
struct WgMma<32> {
  static __device__ __forceinline__ void run(float (&d)[16], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(acc)
        : "memory");
  }
};
template <>
struct WgMma<64> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(acc)
        : "memory");
  }
};

template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared memory, bytes from a 1024-byte aligned base. A stage: w, qg (two 64-column panels of
// C rows x 128 B each), kg^T (D rows x 128 B), Aqk (C rows x 128 B), u fp32 [C][VT + 4], gl.
template <int VT, int NS, bool MC = false>
struct WgSmem {
  static constexpr int D = 128;
  static constexpr int VS = VT + 4;  // u's row stride in floats
  static constexpr int W = 0, QG = C * D * 2, KG = 2 * C * D * 2, AQK = KG + D * C * 2, U = AQK + C * C * 2, GL = U + C * VS * 4;
  static constexpr int STAGE = (GL + D * 4 + 1023) / 1024 * 1024;
  static constexpr int ST = NS * STAGE;  // S^T bf16 [VT][D]: two panels of VT rows x 128 B
  static constexpr int ST_PANEL = VT * 128;
  static constexpr int VN = ST + VT * D * 2;  // v_new bf16 [VT][C]: one panel
  static constexpr int BAR = VN + VT * C * 2;  // MC: the stages' "full" mbarriers
  static constexpr int bytes = BAR + (MC ? 16 * NS : 0) + 1024;  // + the base's alignment slack (MC: full, empty)
  static_assert(ST_PANEL % 1024 == 0 && VN % 1024 == 0, "swizzle atoms must be 1024-byte aligned");
  static constexpr bool fits = bytes <= 227 * 1024;  // the sm_90 per-block opt-in limit
};

// Byte offset of the 16-byte piece p (of 8) of row r in a 128B-swizzled panel.
__device__ __forceinline__ int swz(int r, int p) { return r * 128 + ((p ^ (r & 7)) << 4); }

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
// One arrival on the mbarrier at shared offset `bar` of the cluster's CTA `cta`.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
// A 2D box (x, y) of `map` to shared offset `dst` of every CTA in `mask`, completing on the
// mbarrier at the same offset in each.
__device__ __forceinline__ void tma_multicast(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}

// MC: map256 views the workspace as rows of 256 bytes (w, qg: a box is 64 rows x one 64-column
// panel), map128 as rows of 128 bytes (kg^T, Aqk: 64 rows a box).
template <int VT, int NS, bool MC>
__global__ void __launch_bounds__(256, 2) state_wgmma_kernel(const float* __restrict__ ws, int64_t H, const SeqJob* __restrict__ jobs,
                                                             float* __restrict__ state, int64_t layer_offset, float* __restrict__ o,
                                                             int prefetch, const __grid_constant__ CUtensorMap map256,
                                                             const __grid_constant__ CUtensorMap map128, int bars) {
  constexpr bool DB = NS > 1;
  static_assert(!MC || DB, "the multicast form needs two or more stages");
  constexpr int D = 128, NA = VT / 2, NT = VT / 8;  // accumulator floats a thread (m64 x VT over 128), 8-column tiles
  using Sm = WgSmem<VT, NS, MC>;
  static_assert(Sm::fits, "state kernel shared memory over the per-block limit");
  using L = Layout<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  unsigned char* sm = smem_raw + pad;
  const uint32_t sb = raw + pad;

  const SeqJob job = jobs[blockIdx.z];
  const int64_t h = blockIdx.y;
  const int v0 = blockIdx.x * VT;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, gid = lane >> 2, tig = lane & 3;
  const int ra = 16 * (warp & 3) + gid;  // this thread's accumulator rows in its warpgroup's 64: ra, ra + 8
  float* S = state + job.slot_off + layer_offset + h * D * D;  // [V][K]

  // S^T rows (key channels) 64 wg + ra (+ 8), columns 8 t + 2 tig (+ 1): the m64 accumulator layout.
  float sacc[NA], acc[NA];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 64 * wg + ra + (e >> 1) * 8, vv = 8 * t + 2 * tig + (e & 1);
      sacc[4 * t + e] = S[static_cast<int64_t>(v0 + vv) * D + c];
      acc[4 * t + e] = 0.0f;
    }

  auto chunk_base = [&](int n) { return ws + (static_cast<int64_t>(job.chunk0 + n) * H + h) * L::floats; };
  auto stage = [&](int n) { return (n % NS) * Sm::STAGE; };
  // MC: the cluster's CTAs are the head's value tiles (rank = blockIdx.x); barriers initialised
  // and visible cluster-wide before any CTA's copies can land on them.
  constexpr int CS = 128 / VT;
  constexpr uint32_t kShared = 2 * C * D * 2 + D * C * 2 + C * C * 2;  // w, qg, kg^T, Aqk bytes
  static_assert(L::floats * 4 % 256 == 0 && L::qg * 4 % 256 == 0 && L::kg * 4 % 128 == 0 && L::aqk * 4 % 128 == 0,
                "regions must start on the tensor maps' rows");
  uint64_t* full = reinterpret_cast<uint64_t*>(sm + Sm::BAR);
  uint64_t* empty = full + NS;
  uint32_t rank = 0;
  if constexpr (MC) {
    rank = cluster_rank();
    if (tid == 0) {
      for (int s = 0; s < NS; ++s) {
        pdl_bulk::mbar_init(&full[s], 1);
        pdl_bulk::mbar_init(&empty[s], CS);
      }
      pdl_bulk::mbar_init_fence();
    }
    cluster_arrive();
    cluster_wait();
  }
  // Thread 0: this CTA's boxes (b = rank, rank + CS, ..) of chunk n's shared inputs, to all.
  auto issue_shared = [&](int n) {
    const uint32_t s = sb + stage(n), bar = sb + Sm::BAR + (n % NS) * 8;
    pdl_bulk::mbar_arrive_expect_tx(&full[n % NS], kShared);
    const int64_t blk = (static_cast<int64_t>(job.chunk0 + n) * H + h) * L::floats * 4;
    const int y256 = static_cast<int>(blk / 256), y128 = static_cast<int>(blk / 128);
    constexpr uint16_t mask = (1u << CS) - 1;
    for (int b = static_cast<int>(rank); b < 7; b += CS) {
      if (b < 4) {  // w, qg: panel b & 1 (columns 64 (b & 1) ..)
        const int reg = b < 2 ? Sm::W : Sm::QG, y = y256 + static_cast<int>((b < 2 ? L::w : L::qg) * 4 / 256);
        tma_multicast(s + reg + (b & 1) * (C * 128), &map256, 64 * (b & 1), y, bar, mask);
      } else {  // kg^T rows 0 .. 63, 64 .. 127, Aqk
        const int reg = b < 6 ? Sm::KG + (b - 4) * (64 * 128) : Sm::AQK;
        const int y = y128 + static_cast<int>((b < 6 ? L::kg * 4 / 128 + (b - 4) * 64 : L::aqk * 4 / 128));
        tma_multicast(s + reg, &map128, 0, y, bar, mask);
      }
    }
  };
  auto issue_rows = [&](int n) {  // w, qg: C rows of 16 pieces, pieces 8.. in the second panel
    const float* b = chunk_base(n);
    unsigned char* s = sm + stage(n);
    for (int idx = tid; idx < C * 16; idx += 256) {
      const int i = idx >> 4, p = idx & 15;
      const int off = (p >> 3) * (C * 128) + swz(i, p & 7);
      cp_async16(s + Sm::W + off, b + L::w + i * (D / 2) + p * 4);
      cp_async16(s + Sm::QG + off, b + L::qg + i * (D / 2) + p * 4);
    }
  };
  auto issue_update = [&](int n) {  // kg^T, Aqk (rows of 8 pieces; MC: by issue_shared), u's columns, gl
    const float* b = chunk_base(n);
    unsigned char* s = sm + stage(n);
    if constexpr (!MC) {
      for (int idx = tid; idx < D * 8; idx += 256) {
        const int r = idx >> 3, p = idx & 7;
        cp_async16(s + Sm::KG + swz(r, p), b + L::kg + r * (C / 2) + p * 4);
      }
      for (int idx = tid; idx < C * 8; idx += 256) {
        const int r = idx >> 3, p = idx & 7;
        cp_async16(s + Sm::AQK + swz(r, p), b + L::aqk + r * (C / 2) + p * 4);
      }
    }
    constexpr int V4 = VT / 4;
    float* su = reinterpret_cast<float*>(s + Sm::U);
    for (int idx = tid; idx < C * V4; idx += 256) {
      const int i = idx / V4, c = (idx % V4) * 4;
      cp_async16(su + i * Sm::VS + c, b + L::u + i * D + v0 + c);
    }
    float* sgl = reinterpret_cast<float*>(s + Sm::GL);
    for (int idx = tid; idx < D / 4; idx += 256) cp_async16(sgl + idx * 4, b + L::gl + idx * 4);
  };
  // A k pair of a transposed bf16 B operand ([col][k], swizzled, panels of 64 k) from this
  // lane's values at (k, col), (k, col + 1); row k ^ 1's are lane ^ 4's (the mma.sync kernel's
  // store_pair_t, same rounding).
  auto put_pair = [&](int region, int panel_bytes, int k, int col, float a, float b) {
    const bool odd = k & 1;
    const float x = __shfl_xor_sync(0xffffffffu, odd ? a : b, 4);
    const int kk = odd ? k - 1 : k, cc = odd ? col + 1 : col;
    const uint32_t word = odd ? bf16x2(x, b) : bf16x2(a, x);
    const int off = (kk >> 6) * panel_bytes + swz(cc, (kk & 63) >> 3) + (kk & 7) * 2;
    *reinterpret_cast<uint32_t*>(sm + region + off) = word;
  };
  auto desc = [](uint32_t addr) { return wgmma::desc_sw128(addr, 16, 1024); };

  // Groups: NS stages: one a chunk (F0 .. F(NS - 1), then F(n + NS) at the end of chunk n);
  // one stage: R0 U0, then R(n + 1) after phase A and U(n + 1) at the end of chunk n. Empty
  // groups past the end keep the wait counts uniform.
  if (job.chunks > 0) {
    if constexpr (DB) {
      for (int f = 0; f < NS; ++f) {
        if (f < job.chunks) {
          if constexpr (MC) {
            if (tid == 0) issue_shared(f);
          } else {
            issue_rows(f);
          }
          issue_update(f);
        }
        cp_async_commit();
      }
    } else {
      issue_rows(0);
      cp_async_commit();
      issue_update(0);
      cp_async_commit();
    }
  }
  // Opt-in L2 prefetch of chunk n + prefetch's six input regions, shared out over the head's
  // D / VT CTAs (each region requested once), by lanes of warp 0.
  auto prefetch_chunk = [&](int n) {
    if (warp != 0 || lane >= 6 || n >= job.chunks || lane % static_cast<int>(gridDim.x) != static_cast<int>(blockIdx.x)) return;
    const float* b = chunk_base(n);
    const int64_t off = lane == 0 ? L::w : lane == 1 ? L::u : lane == 2 ? L::qg : lane == 3 ? L::kg : lane == 4 ? L::aqk : L::gl;
    const uint32_t bytes = lane == 1 ? C * D * 4 : lane == 4 ? C * C * 2 : lane == 5 ? D * 4 : C * D * 2;  // bf16 but u, gl
    pdl_bulk::bulk_prefetch_l2(b + off, bytes);
  };
  for (int n = NS; n < prefetch; ++n) prefetch_chunk(n);
  for (int n = 0; n < job.chunks; ++n) {
    if (prefetch > 0) prefetch_chunk(n + prefetch);
    const uint32_t st = sb + stage(n);
    // S^T as phase A's B operand.
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int c = 64 * wg + ra, vv = 8 * t + 2 * tig;
      put_pair(Sm::ST, Sm::ST_PANEL, c, vv, sacc[4 * t], sacc[4 * t + 1]);
      put_pair(Sm::ST, Sm::ST_PANEL, c + 8, vv, sacc[4 * t + 2], sacc[4 * t + 3]);
    }
    // Every CTA done with chunk n - 1: its stage takes chunk n - 1 + NS.
    if constexpr (MC) {
      if (n > 0 && !bars) {
        cluster_wait();
        if (tid == 0 && n - 1 + NS < job.chunks) issue_shared(n - 1 + NS);
      }
    }
    cp_async_wait<DB ? NS - 1 : 1>();  // NS stages: chunk n landed; one: its w, qg
    if constexpr (MC) pdl_bulk::mbar_wait(&full[n % NS], (n / NS) & 1);
    wgmma::fence_proxy_async();
    __syncthreads();

    // Phase A: WG0 w S^T, WG1 qg S^T.
    wgmma::fence();
    {
      const uint32_t a0 = st + (wg == 0 ? Sm::W : Sm::QG);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        WgMma<VT>::run(acc, desc(a0 + (kk >> 2) * (C * 128) + (kk & 3) * 32), desc(sb + Sm::ST + (kk >> 2) * Sm::ST_PANEL + (kk & 3) * 32),
                       kk > 0);
    }
    wgmma::commit();
    if constexpr (MC) {
      if (n > 0 && bars && tid == 0 && n - 1 + NS < job.chunks) {
        pdl_bulk::mbar_wait(&empty[(n - 1) % NS], ((n - 1) / NS) & 1);
        issue_shared(n - 1 + NS);
      }
    }
    wgmma::wait<0>();
    pin(acc);
    if constexpr (!DB) {
      __syncthreads();  // w, qg read by both warpgroups
      if (n + 1 < job.chunks) issue_rows(n + 1);
      cp_async_commit();
      cp_async_wait<1>();  // this chunk's kg^T, Aqk, u, gl
      wgmma::fence_proxy_async();
      __syncthreads();
    }
    if (wg == 0) {  // v_new = u - w S^T as phase C's B operand
      const float* su = reinterpret_cast<const float*>(sm + stage(n) + Sm::U);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int col = 8 * t + 2 * tig;
        const float v00 = su[ra * Sm::VS + col] - acc[4 * t], v01 = su[ra * Sm::VS + col + 1] - acc[4 * t + 1];
        const float v10 = su[(ra + 8) * Sm::VS + col] - acc[4 * t + 2], v11 = su[(ra + 8) * Sm::VS + col + 1] - acc[4 * t + 3];
        put_pair(Sm::VN, 0, ra, col, v00, v01);
        put_pair(Sm::VN, 0, ra + 8, col, v10, v11);
      }
    }
    wgmma::fence_proxy_async();
    __syncthreads();  // v_new complete

    // Phase C: the state's decay and update (both), then (WG1) o's intra-chunk part.
    {
      const float* sgl = reinterpret_cast<const float*>(sm + stage(n) + Sm::GL);
      const float gl0 = sgl[64 * wg + ra], gl1 = sgl[64 * wg + ra + 8];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        sacc[4 * t] *= gl0, sacc[4 * t + 1] *= gl0;
        sacc[4 * t + 2] *= gl1, sacc[4 * t + 3] *= gl1;
      }
    }
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < C / 16; ++kk) WgMma<VT>::run(sacc, desc(st + Sm::KG + wg * (64 * 128) + kk * 32), desc(sb + Sm::VN + kk * 32), 1);
    // o's Aqk v_new in both warpgroups (WG0's acc is dead here and discarded): a warpgroup-
    // divergent wgmma makes ptxas serialize every wgmma of the kernel.
#pragma unroll
    for (int kk = 0; kk < C / 16; ++kk) WgMma<VT>::run(acc, desc(st + Sm::AQK + kk * 32), desc(sb + Sm::VN + kk * 32), 1);
    wgmma::commit();
    wgmma::wait<0>();
    pin(sacc);
    pin(acc);
    if (wg == 1) {
      const int64_t row_base = job.row0 + static_cast<int64_t>(n) * C;
      const int64_t valid = job.rows - static_cast<int64_t>(n) * C;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int col = v0 + 8 * t + 2 * tig;
        if (ra < valid) *reinterpret_cast<float2*>(o + ((row_base + ra) * H + h) * D + col) = make_float2(acc[4 * t], acc[4 * t + 1]);
        if (ra + 8 < valid)
          *reinterpret_cast<float2*>(o + ((row_base + ra + 8) * H + h) * D + col) = make_float2(acc[4 * t + 2], acc[4 * t + 3]);
      }
    }
    __syncthreads();  // this stage, S^T's and v_new's staging free
    if constexpr (DB) {
      if (n + NS < job.chunks) {
        if constexpr (!MC) issue_rows(n + NS);
        issue_update(n + NS);
      }
    } else {
      if (n + 1 < job.chunks) issue_update(n + 1);
    }
    cp_async_commit();
    if constexpr (MC) {
      if (!bars) {
        cluster_arrive_relaxed();
      } else if (tid == 0 && n + NS < job.chunks) {  // this stage free here: tell every CTA's empty barrier
        // (only where chunk n + NS refills it: the last NS chunks' arrivals would have no waiter
        // and could still be landing in a peer's shared memory as it exits)
        for (int c = 0; c < CS; ++c) mbar_arrive_remote(sb + Sm::BAR + (NS + n % NS) * 8, c);
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (MC) {
    // No CTA leaves while a peer may still read its stages or arrive on its barriers.
    if (bars) cluster_arrive_relaxed();
    if (job.chunks > 0 || bars) cluster_wait();
  }

#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 64 * wg + ra + (e >> 1) * 8, vv = 8 * t + 2 * tig + (e & 1);
      S[static_cast<int64_t>(v0 + vv) * D + c] = sacc[4 * t + e];
    }
}

template <int VT, int NS, bool MC>
cudaError_t launch(const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, float* o, cudaStream_t stream,
                   int prefetch, const CUtensorMap& map256, const CUtensorMap& map128, int bars) {
  constexpr int bytes = WgSmem<VT, NS, MC>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(state_wgmma_kernel<VT, NS, MC>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(128 / VT, static_cast<unsigned>(H), static_cast<unsigned>(seqs));
  cfg.blockDim = dim3(256);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 128 / VT;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = MC ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, state_wgmma_kernel<VT, NS, MC>, ws, H, jobs, state, lo, o, prefetch, map256, map128, bars);
}

template <bool MC>
cudaError_t launch_vt(int vt, int ns, const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs, float* state, int64_t lo, float* o,
                      cudaStream_t stream, int pf, const CUtensorMap& m256, const CUtensorMap& m128, int bars = 0) {
  if (vt == 64)
    return ns == 2 || MC ? launch<64, 2, MC>(ws, H, jobs, seqs, state, lo, o, stream, pf, m256, m128, bars)
                         : launch<64, 1, false>(ws, H, jobs, seqs, state, lo, o, stream, pf, m256, m128, bars);
  return ns == 3   ? launch<32, 3, MC>(ws, H, jobs, seqs, state, lo, o, stream, pf, m256, m128, bars)
         : ns == 2 || MC ? launch<32, 2, MC>(ws, H, jobs, seqs, state, lo, o, stream, pf, m256, m128, bars)
                   : launch<32, 1, false>(ws, H, jobs, seqs, state, lo, o, stream, pf, m256, m128, bars);
}

}  // namespace

bool kda_chunk_state_wgmma_supported(int D, int vt) { return D == 128 && (vt == 32 || vt == 64); }

int kda_chunk_state_wgmma_stages(int vt, int asked, int multicast) {
  const int ns = asked < 1 ? 1 : asked > 2 && vt == 32 ? 3 : asked > 2 ? 2 : asked;
  return multicast && ns < 2 ? 2 : ns;
}

cudaError_t kda_chunk_state_wgmma_launch(int D, int vt, int stages, const float* ws, int64_t H, const SeqJob* jobs, int64_t seqs,
                                         float* state, int64_t layer_offset, float* o, cudaStream_t stream, int prefetch, int multicast,
                                         int64_t ws_chunks) {
  if (!kda_chunk_state_wgmma_supported(D, vt)) return cudaErrorInvalidValue;
  const int ns = kda_chunk_state_wgmma_stages(vt, stages, multicast), pf = prefetch < 0 ? 0 : prefetch;
  CUtensorMap m256{}, m128{};
  if (multicast < 1 || multicast > 2) return launch_vt<false>(vt, ns, ws, H, jobs, seqs, state, layer_offset, o, stream, pf, m256, m128);
  // The pass's workspace (ws_chunks chunks of H heads' blocks) as rows of 256 and of 128 bytes.
  using L = kda_chunk::Layout<128>;
  const uint64_t total = static_cast<uint64_t>(ws_chunks) * static_cast<uint64_t>(H) * L::floats * 4;
  if (ws_chunks <= 0 || total / 128 > 0x7fffffffu) return cudaErrorInvalidValue;  // box coordinates are 32-bit
  const uint64_t e256[2] = {128, total / 256}, s256[1] = {256}, e128[2] = {64, total / 128}, s128[1] = {128};
  const uint32_t box[2] = {64, 64};
  if (!encode_bf16_tensor_map(&m256, ws, 2, e256, s256, box, "kda state (w, qg)").is_ok() ||
      !encode_bf16_tensor_map(&m128, ws, 2, e128, s128, box, "kda state (kg, Aqk)").is_ok())
    return cudaErrorInvalidValue;
  return launch_vt<true>(vt, ns, ws, H, jobs, seqs, state, layer_offset, o, stream, pf, m256, m128, multicast == 2 ? 1 : 0);
}

}  // namespace pdserve::cuda
