// Chunked KDA prefill, part 1 in bf16 mode: the intra-chunk kernel of kda_chunk_intra_sm90.cu
// (same grid, shared memory layout and outputs: kda_chunk::Layout, fp32 or packed bf16) with
// fewer instructions a chunk (docs/perf.md "Leaner bf16 intra kernel"):
//  - G is kept in log2 units, so every decay is one ex2.approx.ftz (one MUFU; __expf is a
//    multiply plus a denormal-safe ex2 sequence of five instructions);
//  - warps 2I and 2I+1 share row block I's work by tile parity instead of by operand: each
//    builds the decayed key B fragment of its own tiles once and feeds both the key-key and the
//    query-key mma with it (the former split built every B fragment twice), and the row-side
//    decay factors once for both q and k;
//  - the XOR swizzle is evaluated as (kb ^ X) + Y with per-lane X, Y (rows of one lane share
//    row % 8), so shared loads take immediate offsets; every warp runs the same code path;
//  - beta is folded into T's columns (w = T diag(beta) k exp(G), u = T diag(beta) v): no beta
//    pass over k and v;
//  - packed bf16 qg / kg^T are stored as 32-bit pairs swapped between neighbour lanes, not as
//    scattered 16-bit stores.
//  - the [w | u] step reads k exp(G) and v as bf16 from G's buffer (free by then) through
//    ldmatrix.trans, and T diag(beta) as float2 pairs in mma's own k order: a quarter of the
//    shared-memory instructions of scalar fp32 fragment loads, half the bytes; the solve reads
//    T's row operand as float4 (docs/perf.md "bf16 [w | u] operands by ldmatrix").
//  - Kq16 (the default; false = the former kernel, kept for timing it against this one): k and
//    q are staged as bf16 (converted in registers on their way in) and the score phase reads
//    them as 16-bit values, halving their shared-memory bytes; v lands in their 32 KB once both
//    are dead, so shared memory drops from 112 to 80 KB at D = 128 (docs/perf.md "bf16 k and q
//    staging"). G stays fp32: it is a cumulative log2 decay whose magnitude grows along the
//    chunk (tens to hundreds), and the decays are exp2 of differences of it; a bf16 G would carry
//    an absolute exponent error of |G| 2^-9 (0.4 at |G| = 200: a 30% error in the decay). k and
//    q are O(1) and multiplied in bf16 by the mma anyway: staging them as bf16 adds one rounding
//    (relative 2^-9) before the decay, inside the mode's 2e-2 bound.
// Off-diagonal decays have exponents <= 0 by construction (G is non-increasing), so only the
// diagonal blocks keep the clamp.
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using namespace kda_chunk;

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Phase 6's B operands, k exp(G) and v, staged as bf16 [C][D] in G's buffer once G is dead:
// rows of D bf16, 16-byte chunks XOR-swizzled so the 8 rows an ldmatrix phase reads (k rows
// kb..kb+7, one chunk) fall in distinct bank groups (D = 32: two rows per 128 bytes, so the
// swizzle takes row / 2).
template <int D>
__device__ __forceinline__ int bx_chunk(int row, int chunk) {
  return chunk ^ (D >= 64 ? (row & 7) : ((row >> 1) & 3));
}
// Element offset of (row, col) for a 4-aligned col (8-byte stores of 4 bf16).
template <int D>
__device__ __forceinline__ int bx_at(int row, int col) {
  return row * D + bx_chunk<D>(row, col >> 3) * 8 + (col & 7);
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a * b, m16n8k16 bf16 in mma's own k order (a: rows gid / gid+8 at k 2tig.., then k
// 2tig+8..; b: k 2tig.. and 2tig+8.. at column gid).
__device__ __forceinline__ void mma16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int D, bool Kq16>
struct IntraSmemBf16 {
  // Kq16: bf16 k and q then fp32 v (C D floats), else fp32 k, fp32 q then v; G (log2; then bf16
  // k exp(G) and v), A then T, beta.
  static constexpr int floats = (Kq16 ? 2 : 3) * C * D + C * C + C;
  static constexpr size_t bytes = floats * sizeof(float);
};

// A bf16x2 word's halves as floats (low half: the smaller column).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
// G's swizzle: the former kernel's (row % 8) << 2 on the column; Kq16's (row % 4) << 3, for
// float2 loads of columns (2 tig, 2 tig + 1): the 4 rows of a half-warp land in distinct 8-bank
// groups.
template <bool Kq16>
__device__ __forceinline__ int g_swz(int row) {
  return Kq16 ? (row & 3) << 3 : (row & 7) << 2;
}

// Swizzled offset of (row, col) in a [rows][W] array (the same swizzle as the tf32 kernel).
template <int W>
__device__ __forceinline__ int at(int row, int col) {
  return row * W + (col ^ ((row & 7) << 2));
}

// Row block I's score tiles for the warp of parity S (both warp-uniform, at run time: one code
// path for every warp; per-warp specialised copies had the warps of an SM miss the instruction
// cache half the time, docs/perf.md): off-diagonal tiles nt = 2m + S (m < I) against the first
// row's factors and the diagonal tile 2I + S against the middle row's, for keys (A, into sT
// with beta, strictly lower) and queries (Aqk, to the workspace, lower incl. the diagonal); also
// kg (S = 0) or qg (S = 1) for the block's rows.
//
// Swizzle: column kb + tig (+4) of a row r = gid (mod 8), kb a multiple of 8, lies at
// (kb ^ X) + Y (+/-4) with X = 8 (gid >> 1) and Y = tig + 4 (gid & 1); of row 63 at
// (kb ^ 24) + tig + 4 (and (kb ^ 24) + tig); rows 16I, 16I + 8 are unswizzled.
template <int D, bool PK>
__device__ __forceinline__ void score_block(const float* sk, const float* sq, const float* sG, float* sT, const float* sb, float* out,
                                            int I, int S, int gid, int tig) {
  using L = Layout<D>;
  const int r0 = I * 16 + gid, r1 = r0 + 8;
  float ak[3][4] = {}, aq[3][4] = {}, dk[4] = {}, dq[4] = {};
  const int X = (gid >> 1) << 3, Y = tig + 4 * (gid & 1), Y4 = Y ^ 4;
  const int rowI = r0 * D, rowJ = (8 * S + gid) * D, rowF = I * 16 * D + tig;  // + 16 m D: tile m's rows
  constexpr int kSk = 0, kSq = C * D, kSG = 2 * C * D;  // sq, sG at these offsets from sk
  (void)sq, (void)sG;
  // kg (S = 0) or qg (S = 1) of this lane at column kb + tig (+4): packed, a 32-bit pair whose
  // other half comes from the neighbour lane (qg [C][D]: column + 1 is lane ^ 1's; kg^T
  // [D][C]: row + 1 is lane ^ 4's); even lanes store the c0 pairs, odd lanes the c1 pairs.
  const bool odd = S ? (tig & 1) : (gid & 1);
  const int shfl_mask = S ? 1 : 4;
  uint32_t* xw = reinterpret_cast<uint32_t*>(out + (S ? L::qg : L::kg)) +
                 (S ? (r0 * D + tig + 3 * odd) / 2 : ((tig + 4 * odd) * C + r0 - odd) / 2);
  const int col_words = S ? 4 : 4 * C, row_words = S ? 4 * D : 4;  // words per 8 columns, r0 -> r1
  float* xf = out + (S ? L::qg : L::kg) + r0 * D + tig;
#pragma unroll 2
  for (int kb = 0; kb < D; kb += 8) {
    const int s0 = (kb ^ X) + Y, s1 = (kb ^ X) + Y4;  // swizzled columns of rows = gid (mod 8)
    const int l0c = (kb ^ 24) + tig + 4, l1c = (kb ^ 24) + tig;
    const float* p0 = sk + s0;
    const float* p1 = sk + s1;
    const float gf0 = sk[kSG + rowF + kb], gf1 = sk[kSG + rowF + kb + 4], gm0 = sk[kSG + rowF + 8 * D + kb], gm1 = sk[kSG + rowF + 8 * D + kb + 4];
    const float G00 = p0[kSG + rowI], G10 = p0[kSG + rowI + 8 * D], G01 = p1[kSG + rowI], G11 = p1[kSG + rowI + 8 * D];
    const float k00 = p0[kSk + rowI], k10 = p0[kSk + rowI + 8 * D], k01 = p1[kSk + rowI], k11 = p1[kSk + rowI + 8 * D];
    const float q00 = p0[kSq + rowI], q10 = p0[kSq + rowI + 8 * D], q01 = p1[kSq + rowI], q11 = p1[kSq + rowI + 8 * D];
    {  // kg = k exp(G_last - G) (S = 0) or qg = q exp(G) (S = 1)
      const float l0 = S ? 0.0f : sk[kSG + 63 * D + l0c], l1 = S ? 0.0f : sk[kSG + 63 * D + l1c];
      const float e00 = (S ? q00 : k00) * ex2(S ? G00 : l0 - G00), e10 = (S ? q10 : k10) * ex2(S ? G10 : l0 - G10);
      const float e01 = (S ? q01 : k01) * ex2(S ? G01 : l1 - G01), e11 = (S ? q11 : k11) * ex2(S ? G11 : l1 - G11);
      if constexpr (PK) {
        const float got0 = __shfl_xor_sync(0xffffffffu, odd ? e00 : e01, shfl_mask);
        const float got1 = __shfl_xor_sync(0xffffffffu, odd ? e10 : e11, shfl_mask);
        const int w = (kb >> 3) * col_words;
        xw[w] = odd ? bf16x2(got0, e01) : bf16x2(e00, got0);
        xw[w + row_words] = odd ? bf16x2(got1, e11) : bf16x2(e10, got1);
      } else {
        xf[kb] = e00;
        xf[8 * D + kb] = e10;
        xf[kb + 4] = e01;
        xf[8 * D + kb + 4] = e11;
      }
    }
    // Row-side factors, shared by k and q: exp(G - G_mid) (clamped) and exp(G - G_first) (<= 1).
    const float m00 = ex2(fminf(G00 - gm0, 120.0f)), m10 = ex2(fminf(G10 - gm0, 120.0f));
    const float m01 = ex2(fminf(G01 - gm1, 120.0f)), m11 = ex2(fminf(G11 - gm1, 120.0f));
    const FragA<kBf16> adk(k00 * m00, k10 * m10, k01 * m01, k11 * m11), adq(q00 * m00, q10 * m10, q01 * m01, q11 * m11);
    {  // the diagonal tile 2I + S: rows 16I + 8S + gid
      const int rd = rowJ + 16 * I * D;
      const float gj0 = p0[kSG + rd], gj1 = p1[kSG + rd];
      const FragB<kBf16> b(p0[kSk + rd] * ex2(fminf(gm0 - gj0, 120.0f)), p1[kSk + rd] * ex2(fminf(gm1 - gj1, 120.0f)));
      mma(dk, adk, b);
      mma(dq, adq, b);
    }
    if (I > 0) {
      const float f00 = ex2(G00 - gf0), f10 = ex2(G10 - gf0), f01 = ex2(G01 - gf1), f11 = ex2(G11 - gf1);
      const FragA<kBf16> aok(k00 * f00, k10 * f10, k01 * f01, k11 * f11), aoq(q00 * f00, q10 * f10, q01 * f01, q11 * f11);
#pragma unroll
      for (int m = 0; m < 3; ++m) {
        if (m < I) {
          const int rj = rowJ + 16 * m * D;
          const float gj0 = p0[kSG + rj], gj1 = p1[kSG + rj];
          const FragB<kBf16> b(p0[kSk + rj] * ex2(gf0 - gj0), p1[kSk + rj] * ex2(gf1 - gj1));
          mma(ak[m], aok, b);
          mma(aq[m], aoq, b);
        }
      }
    }
  }
  // Stores: tile nt = 2m + S (m < I) from ak / aq, tile 2I + S from dk / dq, tiles 2I + 2 + S ..
  // of this parity zero (Aqk only: sT's upper blocks are never read).
  auto store = [&](int nt, const float (&vk)[4], const float (&vq)[4], bool diag) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = hh ? r1 : r0, col = nt * 8 + 2 * tig;
      float q0 = vq[2 * hh], q1 = vq[2 * hh + 1], k0 = vk[2 * hh], k1 = vk[2 * hh + 1];
      if (diag) {
        q0 = col <= row ? q0 : 0.0f, q1 = col + 1 <= row ? q1 : 0.0f;
        k0 = col < row ? k0 : 0.0f, k1 = col + 1 < row ? k1 : 0.0f;
      }
      if constexpr (PK)
        reinterpret_cast<uint32_t*>(out + L::aqk)[(row * C + col) / 2] = bf16x2(q0, q1);
      else
        *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(q0, q1);
      const float b = sb[row];
      *reinterpret_cast<float2*>(sT + at<C>(row, col)) = make_float2(b * k0, b * k1);
    }
  };
#pragma unroll
  for (int m = 0; m < 3; ++m)
    if (m < I) store(2 * m + S, ak[m], aq[m], false);
  store(2 * I + S, dk, dq, true);
  for (int nt = 2 * I + 2 + S; nt < 8; nt += 2) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = hh ? r1 : r0, col = nt * 8 + 2 * tig;
      if constexpr (PK)
        reinterpret_cast<uint32_t*>(out + L::aqk)[(row * C + col) / 2] = 0u;
      else
        *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(0.0f, 0.0f);
    }
  }
}

// score_block with k and q staged as bf16 (Kq16): the same tiles, factors and mma, but a lane's
// two columns of every 8 are adjacent, kb + 2 tig and kb + 2 tig + 1 (the k order of m16n8k8
// is free as long as A and B share it), so each row's k or q pair is one 32-bit load of a
// bf16x2 word and each G pair one float2 load: per 8 columns 4 words + 2 float2 on the row side
// and 1 word + 1 float2 a key tile, against 12 and 4 scalar loads (a third fewer shared-memory
// wavefronts: a warp's 16-bit or 32-bit scalar load costs one like a 32-bit word load).
// k, q: bf16 [C][D] with bx_at's 16-byte chunk swizzle (rows = gid (mod 8) share it); G: fp32
// [C][D] with g_swz<true> (rows = gid (mod 4) share it; rows 16I, 16I + 8 unswizzled, row 63
// XOR 24).
template <int D, bool PK>
__device__ __forceinline__ void score_block_pairs(const uint16_t* k16, const float* sG, float* sT, const float* sb, float* out, int I,
                                                  int S, int gid, int tig) {
  using L = Layout<D>;
  const int r0 = I * 16 + gid, r1 = r0 + 8;
  float ak[3][4] = {}, aq[3][4] = {}, dk[4] = {}, dq[4] = {};
  const int KX = (D >= 64 ? (gid & 7) : ((gid >> 1) & 3)) << 3, GX = (gid & 3) << 3, c2 = 2 * tig;
  const int rowI = r0 * D, rowJ = (8 * S + gid) * D, rowF = I * 16 * D + c2;  // + 16 m D: tile m's rows
  // kg (S = 0) or qg (S = 1) of this lane's pair. fp32: [C][D], one float2 a row. Packed: qg
  // [C][D], the pair is one word; kg^T [D][C], 32-bit pairs along rows (r0, r0 + 1) of lanes gid,
  // gid ^ 1 (lane ^ 4), exchanged by one shuffle: even gid stores column kb + 2 tig, odd gid
  // column + 1 (rows r0 - 1, r0).
  const int odd = S ? 0 : gid & 1;
  float* xf = out + (S ? L::qg : L::kg) + r0 * D + c2;
  uint32_t* xw = reinterpret_cast<uint32_t*>(out + (S ? L::qg : L::kg)) +
                 ((S ? r0 * D + c2 : (c2 + odd) * C + r0 - odd) >> 1);
  const int col_mul = S ? 1 : C, row_words = S ? 4 * D : 4;  // words: kb / 2 * col_mul; r0 -> r1
#pragma unroll 2
  for (int kb = 0; kb < D; kb += 8) {
    const int kc = (kb ^ KX) + c2, gc = (kb ^ GX) + c2;  // this lane's pair in k / q and in G rows
    const float2 gf = *reinterpret_cast<const float2*>(sG + rowF + kb), gm = *reinterpret_cast<const float2*>(sG + rowF + 8 * D + kb);
    const float2 g0 = *reinterpret_cast<const float2*>(sG + rowI + gc), g1 = *reinterpret_cast<const float2*>(sG + rowI + 8 * D + gc);
    const uint32_t kw0 = *reinterpret_cast<const uint32_t*>(k16 + rowI + kc), kw1 = *reinterpret_cast<const uint32_t*>(k16 + rowI + 8 * D + kc);
    const uint32_t qw0 = *reinterpret_cast<const uint32_t*>(k16 + C * D + rowI + kc);
    const uint32_t qw1 = *reinterpret_cast<const uint32_t*>(k16 + C * D + rowI + 8 * D + kc);
    const float G00 = g0.x, G01 = g0.y, G10 = g1.x, G11 = g1.y;  // G<row half><column>
    const float k00 = bf16_lo(kw0), k01 = bf16_hi(kw0), k10 = bf16_lo(kw1), k11 = bf16_hi(kw1);
    const float q00 = bf16_lo(qw0), q01 = bf16_hi(qw0), q10 = bf16_lo(qw1), q11 = bf16_hi(qw1);
    {  // kg = k exp(G_last - G) (S = 0) or qg = q exp(G) (S = 1)
      float2 l = make_float2(0.0f, 0.0f);
      if (!S) l = *reinterpret_cast<const float2*>(sG + 63 * D + (kb ^ 24) + c2);
      const float e00 = (S ? q00 : k00) * ex2(S ? G00 : l.x - G00), e10 = (S ? q10 : k10) * ex2(S ? G10 : l.x - G10);
      const float e01 = (S ? q01 : k01) * ex2(S ? G01 : l.y - G01), e11 = (S ? q11 : k11) * ex2(S ? G11 : l.y - G11);
      if constexpr (PK) {
        const float got0 = __shfl_xor_sync(0xffffffffu, odd ? e00 : e01, 4);  // used by S = 0 only
        const float got1 = __shfl_xor_sync(0xffffffffu, odd ? e10 : e11, 4);
        const int w = (kb >> 1) * col_mul;
        xw[w] = bf16x2(S || !odd ? e00 : got0, S || odd ? e01 : got0);
        xw[w + row_words] = bf16x2(S || !odd ? e10 : got1, S || odd ? e11 : got1);
      } else {
        *reinterpret_cast<float2*>(xf + kb) = make_float2(e00, e01);
        *reinterpret_cast<float2*>(xf + 8 * D + kb) = make_float2(e10, e11);
      }
    }
    // Row-side factors, shared by k and q: exp(G - G_mid) (clamped) and exp(G - G_first) (<= 1).
    const float m00 = ex2(fminf(G00 - gm.x, 120.0f)), m10 = ex2(fminf(G10 - gm.x, 120.0f));
    const float m01 = ex2(fminf(G01 - gm.y, 120.0f)), m11 = ex2(fminf(G11 - gm.y, 120.0f));
    const FragA<kBf16> adk(k00 * m00, k10 * m10, k01 * m01, k11 * m11), adq(q00 * m00, q10 * m10, q01 * m01, q11 * m11);
    {  // the diagonal tile 2I + S: rows 16I + 8S + gid
      const int rd = rowJ + 16 * I * D;
      const float2 gj = *reinterpret_cast<const float2*>(sG + rd + gc);
      const uint32_t kw = *reinterpret_cast<const uint32_t*>(k16 + rd + kc);
      const FragB<kBf16> b(bf16_lo(kw) * ex2(fminf(gm.x - gj.x, 120.0f)), bf16_hi(kw) * ex2(fminf(gm.y - gj.y, 120.0f)));
      mma(dk, adk, b);
      mma(dq, adq, b);
    }
    if (I > 0) {
      const float f00 = ex2(G00 - gf.x), f10 = ex2(G10 - gf.x), f01 = ex2(G01 - gf.y), f11 = ex2(G11 - gf.y);
      const FragA<kBf16> aok(k00 * f00, k10 * f10, k01 * f01, k11 * f11), aoq(q00 * f00, q10 * f10, q01 * f01, q11 * f11);
#pragma unroll
      for (int m = 0; m < 3; ++m) {
        if (m < I) {
          const int rj = rowJ + 16 * m * D;
          const float2 gj = *reinterpret_cast<const float2*>(sG + rj + gc);
          const uint32_t kw = *reinterpret_cast<const uint32_t*>(k16 + rj + kc);
          const FragB<kBf16> b(bf16_lo(kw) * ex2(gf.x - gj.x), bf16_hi(kw) * ex2(gf.y - gj.y));
          mma(ak[m], aok, b);
          mma(aq[m], aoq, b);
        }
      }
    }
  }
  // Stores as in score_block (the accumulators' layout does not depend on the k order).
  auto store = [&](int nt, const float (&vk)[4], const float (&vq)[4], bool diag) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = hh ? r1 : r0, col = nt * 8 + 2 * tig;
      float q0 = vq[2 * hh], q1 = vq[2 * hh + 1], k0 = vk[2 * hh], k1 = vk[2 * hh + 1];
      if (diag) {
        q0 = col <= row ? q0 : 0.0f, q1 = col + 1 <= row ? q1 : 0.0f;
        k0 = col < row ? k0 : 0.0f, k1 = col + 1 < row ? k1 : 0.0f;
      }
      if constexpr (PK)
        reinterpret_cast<uint32_t*>(out + L::aqk)[(row * C + col) / 2] = bf16x2(q0, q1);
      else
        *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(q0, q1);
      const float b = sb[row];
      *reinterpret_cast<float2*>(sT + at<C>(row, col)) = make_float2(b * k0, b * k1);
    }
  };
#pragma unroll
  for (int m = 0; m < 3; ++m)
    if (m < I) store(2 * m + S, ak[m], aq[m], false);
  store(2 * I + S, dk, dq, true);
  for (int nt = 2 * I + 2 + S; nt < 8; nt += 2) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = hh ? r1 : r0, col = nt * 8 + 2 * tig;
      if constexpr (PK)
        reinterpret_cast<uint32_t*>(out + L::aqk)[(row * C + col) / 2] = 0u;
      else
        *reinterpret_cast<float2*>(out + L::aqk + row * C + col) = make_float2(0.0f, 0.0f);
    }
  }
}

template <int D, bool PK, bool Kq16>
__global__ void __launch_bounds__(256, 2) intra_bf16_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                            const float* __restrict__ v, const float* __restrict__ g,
                                                            const float* __restrict__ beta, int64_t H, const ChunkJob* __restrict__ jobs,
                                                            float* __restrict__ ws) {
  using L = Layout<D>;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);
  float* sqv = Kq16 ? sk : sk + C * D;  // q (fp32 staging) then v; Kq16: v over bf16 k and q
  float* sG = sk + (Kq16 ? 1 : 2) * C * D;
  uint16_t* sk16 = reinterpret_cast<uint16_t*>(sk);  // Kq16: k then q, bf16 [C][D] each
  float* sT = sG + C * D;
  float* sb = sT + C * C;

  const ChunkJob job = jobs[blockIdx.x];
  const int64_t h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  float* out = ws + (static_cast<int64_t>(blockIdx.x) * H + h) * L::floats;
  constexpr int D4 = D / 4, RS = 256 / D4;  // rows one sweep of the block covers
  // A thread loads column group cl of rows i0, i0 + RS, ...: all with the same row % 8 (RS is a
  // multiple of 8), so one swizzled column.
  const int cl = (tid % D4) * 4, i0 = tid / D4, scl = cl ^ ((i0 & 7) << 2), gcl = cl ^ g_swz<Kq16>(i0);
  const int64_t row_stride = H * D;
  const int64_t gbase = (job.row0 * H + h) * D + cl;

  // 1. Load k, q, g, every copy in flight at once (rows past the sequence's end are zero); Kq16:
  //    k and q through registers, converted to bf16 (bx_at's swizzle, score_block_pairs reads it).
#pragma unroll
  for (int it = 0; it < C / RS; ++it) {
    const int i = i0 + it * RS;
    const bool ok = i < job.len;
    const int64_t off = ok ? gbase + i * row_stride : 0;
    if constexpr (!Kq16) {
      cp_async16_zfill(sk + i * D + scl, k + off, ok);
      cp_async16_zfill(sqv + i * D + scl, q + off, ok);
    }
    cp_async16_zfill(sG + i * D + gcl, g + off, ok);
  }
  cp_async_commit();
  if constexpr (Kq16) {
    float4 xk[C / RS], xq[C / RS];
#pragma unroll
    for (int it = 0; it < C / RS; ++it) {
      const int i = i0 + it * RS;
      const bool ok = i < job.len;
      const int64_t off = ok ? gbase + i * row_stride : 0;
      xk[it] = ok ? __ldg(reinterpret_cast<const float4*>(k + off)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      xq[it] = ok ? __ldg(reinterpret_cast<const float4*>(q + off)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int it = 0; it < C / RS; ++it) {
      const int e = bx_at<D>(i0 + it * RS, cl);  // score_block_pairs' swizzle
      *reinterpret_cast<uint2*>(sk16 + e) = make_uint2(bf16x2(xk[it].x, xk[it].y), bf16x2(xk[it].z, xk[it].w));
      *reinterpret_cast<uint2*>(sk16 + C * D + e) = make_uint2(bf16x2(xq[it].x, xq[it].y), bf16x2(xq[it].z, xq[it].w));
    }
  }
  if (tid < C) sb[tid] = tid < job.len ? beta[(job.row0 + tid) * H + h] : 0.0f;
  cp_async_wait<0>();
  __syncthreads();

  // 2. Cumulative log2 decay per channel (16 rows loaded ahead of each dependent run of adds).
  for (int c = tid; c < D; c += 256) {
    float acc = 0.0f;
#pragma unroll
    for (int r0 = 0; r0 < C; r0 += 16) {
      float x[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) x[e] = sG[(r0 + e) * D + (c ^ g_swz<Kq16>(r0 + e))];
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        acc = fmaf(x[e], kLog2e, acc);
        sG[(r0 + e) * D + (c ^ g_swz<Kq16>(r0 + e))] = acc;
      }
    }
    out[L::gl + c] = ex2(acc);
  }
  __syncthreads();

  // 3. Score blocks: warp pair I owns rows [16I, 16I + 16), split by tile parity.
  if constexpr (Kq16)
    score_block_pairs<D, PK>(sk16, sG, sT, sb, out, warp >> 1, warp & 1, gid, tig);
  else
    score_block<D, PK>(sk, sqv, sG, sT, sb, out, warp >> 1, warp & 1, gid, tig);
  __syncthreads();

  // 4. q is dead: bring v into its buffer (landing while the solve runs), and compute k exp(G)
  //    (beta goes into T's columns) as bf16, kept in registers until G's buffer is free. Kq16: v
  //    overwrites k as well, so its copies start after the solve's first barrier.
  auto load_v = [&] {
#pragma unroll
    for (int it = 0; it < C / RS; ++it) {
      const int i = i0 + it * RS;
      const bool ok = i < job.len;
      const int64_t off = ok ? gbase + i * row_stride : 0;
      cp_async16_zfill(sqv + i * D + scl, v + off, ok);
    }
    cp_async_commit();
  };
  if constexpr (!Kq16) load_v();
  uint2 kx[C / RS];
#pragma unroll
  for (int it = 0; it < C / RS; ++it) {
    const int i = i0 + it * RS;
    const float4 gg = *reinterpret_cast<const float4*>(sG + i * D + gcl);
    float4 x;
    if constexpr (Kq16) {
      const uint2 h = *reinterpret_cast<const uint2*>(sk16 + bx_at<D>(i, cl));
      x = make_float4(__uint_as_float(h.x << 16), __uint_as_float(h.x & 0xffff0000u), __uint_as_float(h.y << 16),
                      __uint_as_float(h.y & 0xffff0000u));
    } else {
      x = *reinterpret_cast<const float4*>(sk + i * D + scl);
    }
    kx[it] = make_uint2(bf16x2(x.x * ex2(gg.x), x.y * ex2(gg.y)), bf16x2(x.z * ex2(gg.z), x.w * ex2(gg.w)));
  }
  uint16_t* sbx = reinterpret_cast<uint16_t*>(sG);  // k exp(G) then v, bf16 [C][D] each

  // 5. T = (I + A)^-1 in place of A (A strictly lower), as in the tf32 kernel.
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
  if constexpr (Kq16) load_v();  // every thread has read k (phase 4)
  // Every thread has read G (phase 4): its buffer takes the bf16 operands.
#pragma unroll
  for (int it = 0; it < C / RS; ++it) *reinterpret_cast<uint2*>(sbx + bx_at<D>(i0 + it * RS, cl)) = kx[it];
  {
    // Row I * 16 + r's T entries are read as float4 (the swizzle keeps 4 aligned columns together)
    // once for every J; each acc[J][e] sums the same terms in the same order as one scalar
    // loop per J would, so T is bit-identical to it.
    const int r = tid >> 4, cc = tid & 15;
#pragma unroll
    for (int I = 1; I < 4; ++I) {
      const float* Trow = sT + (I * 16 + r) * C;
      const int rsw = ((I * 16 + r) & 7) << 2;
      float x[3];
      {
        float acc[3][4] = {};
#pragma unroll
        for (int m = 0; m < I * 16; m += 4) {
          const float4 t = *reinterpret_cast<const float4*>(Trow + (m ^ rsw));
          const float te[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
          for (int J = 0; J < I; ++J)
            if (m >= J * 16)
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[J][e] += te[e] * sT[at<C>(m + e, J * 16 + cc)];
        }
#pragma unroll
        for (int J = 0; J < I; ++J) x[J] = (acc[J][0] + acc[J][1]) + (acc[J][2] + acc[J][3]);
      }
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) sT[at<C>(I * 16 + r, J * 16 + cc)] = x[J];
      __syncthreads();
      {
        float acc[3][4] = {};
#pragma unroll
        for (int m = 0; m < 16; m += 4) {
          const float4 t = *reinterpret_cast<const float4*>(Trow + ((I * 16 + m) ^ rsw));
          const float te[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
          for (int J = 0; J < I; ++J)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[J][e] += te[e] * sT[at<C>(I * 16 + m + e, J * 16 + cc)];
        }
#pragma unroll
        for (int J = 0; J < I; ++J) x[J] = -((acc[J][0] + acc[J][1]) + (acc[J][2] + acc[J][3]));
      }
      __syncthreads();
#pragma unroll
      for (int J = 0; J < I; ++J) sT[at<C>(I * 16 + r, J * 16 + cc)] = x[J];
      __syncthreads();
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int it = 0; it < C / RS; ++it) {  // this thread's own v copies, as bf16
    const int i = i0 + it * RS;
    const float4 x = *reinterpret_cast<const float4*>(sqv + i * D + scl);
    *reinterpret_cast<uint2*>(sbx + C * D + bx_at<D>(i, cl)) = make_uint2(bf16x2(x.x, x.y), bf16x2(x.z, x.w));
  }
  __syncthreads();

  // 6. [w | u] = T diag(beta) [k exp(G) | v]: warp (mt, half) owns rows [16mt, 16mt+16) and
  //    half the columns; T is lower triangular, so the K loop stops at the block's last row.
  {
    const int mt = warp & 3, half = warp >> 2;
    const int r0 = mt * 16 + gid, r1 = r0 + 8;
    constexpr int NT = D / 8, NP = D / 16;
    float acc[NT][4] = {};
    // B by ldmatrix.x4.trans from the bf16 [C][D] operand: lane l addresses row kb + l % 16
    // (matrices 0 / 1: k rows 0-7 / 8-15) of chunk 2 np + l / 16 (n columns 16 np + 8 (l / 16)),
    // giving b0, b1 of n-tile 2 np and b0, b1 of 2 np + 1. Chunks 8.. repeat the swizzle of 0..
    // 7 one 128-byte step on, so four per-lane offsets serve every np.
    const int lr = lane & 15, lhi = lane >> 4;
    const uint32_t bbase = static_cast<uint32_t>(__cvta_generic_to_shared(sbx + (half ? C * D : 0) + lr * D));
    uint32_t boff[NP < 4 ? NP : 4];
#pragma unroll
    for (int np = 0; np < (NP < 4 ? NP : 4); ++np) boff[np] = bbase + 2 * 8 * bx_chunk<D>(lr, 2 * np + lhi);
    const float* Tr = sT + r0 * C;
    const int gsw = gid << 2;
    for (int kb = 0; kb < 16 * mt + 16; kb += 16) {
      // A = T diag(beta) at k kb + 2 tig (+1) and kb + 8 + 2 tig (+1), rows r0 / r1 (row % 8 = gid).
      const int c0 = (kb + 2 * tig) ^ gsw, c1 = (kb + 8 + 2 * tig) ^ gsw;
      const float2 be0 = *reinterpret_cast<const float2*>(sb + kb + 2 * tig), be1 = *reinterpret_cast<const float2*>(sb + kb + 8 + 2 * tig);
      const float2 t00 = *reinterpret_cast<const float2*>(Tr + c0), t10 = *reinterpret_cast<const float2*>(Tr + 8 * C + c0);
      const float2 t01 = *reinterpret_cast<const float2*>(Tr + c1), t11 = *reinterpret_cast<const float2*>(Tr + 8 * C + c1);
      const uint32_t a[4] = {bf16x2(t00.x * be0.x, t00.y * be0.y), bf16x2(t10.x * be0.x, t10.y * be0.y),
                             bf16x2(t01.x * be1.x, t01.y * be1.y), bf16x2(t11.x * be1.x, t11.y * be1.y)};
      const uint32_t krow = 2 * kb * D;  // bytes to k row kb
#pragma unroll
      for (int np = 0; np < NP; ++np) {
        uint32_t b[4];
        ldsm_x4_trans(b, boff[np % 4] + krow + 2 * 64 * (np / 4));
        mma16(acc[2 * np], a, b[0], b[1]);
        mma16(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
    float* dst = out + (half ? L::u : L::w);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * tig;
      if (PK && !half) {  // w in bf16 (u stays fp32)
        reinterpret_cast<uint32_t*>(dst)[(r0 * D + col) / 2] = bf16x2(acc[nt][0], acc[nt][1]);
        reinterpret_cast<uint32_t*>(dst)[(r1 * D + col) / 2] = bf16x2(acc[nt][2], acc[nt][3]);
      } else {
        *reinterpret_cast<float2*>(dst + r0 * D + col) = make_float2(acc[nt][0], acc[nt][1]);
        *reinterpret_cast<float2*>(dst + r1 * D + col) = make_float2(acc[nt][2], acc[nt][3]);
      }
    }
  }
}

template <int D, bool PK, bool Kq16>
cudaError_t launch(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H, const ChunkJob* jobs,
                   int64_t chunks, float* ws, cudaStream_t stream) {
  constexpr size_t bytes = IntraSmemBf16<D, Kq16>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(intra_bf16_kernel<D, PK, Kq16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  intra_bf16_kernel<D, PK, Kq16><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(H)), 256, bytes, stream>>>(q, k, v, g, beta, H, jobs, ws);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_pk(bool packed, bool kq16, const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H,
                      const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream) {
  if (kq16)
    return packed ? launch<D, true, true>(q, k, v, g, beta, H, jobs, chunks, ws, stream)
                  : launch<D, false, true>(q, k, v, g, beta, H, jobs, chunks, ws, stream);
  return packed ? launch<D, true, false>(q, k, v, g, beta, H, jobs, chunks, ws, stream)
                : launch<D, false, false>(q, k, v, g, beta, H, jobs, chunks, ws, stream);
}

}  // namespace

cudaError_t kda_chunk_intra_bf16_launch(int D, const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t H,
                                        const ChunkJob* jobs, int64_t chunks, float* ws, cudaStream_t stream, bool packed, bool kq16) {
  switch (D) {
    case 32: return launch_pk<32>(packed, kq16, q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case 64: return launch_pk<64>(packed, kq16, q, k, v, g, beta, H, jobs, chunks, ws, stream);
    case 128: return launch_pk<128>(packed, kq16, q, k, v, g, beta, H, jobs, chunks, ws, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pdserve::cuda
