// The separate merge of the split-KV MLA decode (mla_decode.h, MlaDecodeMerge::kSeparate*):
// one CTA per (row, head, slice of 16, 32 or 64 dims) combines a split row's partials into the output.
#include "mla/mla_decode_sm90.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_decode_detail;

// Grid (row, head, SLICE-dim slice): rows with one item were written by the run; rows with none
// get zeros; rows with several combine their partials weighted by 2^(lse - max). 8 chains
// split the items (at SLICE 64 a chain is a warp reading 256 contiguous bytes of each), a thread = two dims.
constexpr int kMergeStaged = 1024;  // the merge kernel keeps up to this many items' weights in shared memory

// Grid (row, head, SLICE-dim slice): rows with one item were written by the run; rows with
// several combine their partials weighted by 2^(lse - max). All 256 threads read the lse
// values at once into shared memory (one round trip to L2, then block reductions); the 8 chains
// split the items (see SLICE below), a thread = two dims.
// EARLY (MlaDecodeMerge::kSeparate, the plan's pick for rows of many items): each warp issues the loads of its first
// kMergeEarly items into registers BEFORE the weights' round trip (they do not depend on it),
// so a row of up to 8 x kMergeEarly items costs one L2 round trip after the run, not one for
// the weights plus one per 8 items a warp (4 more at 256 items: 1 x 16K, 1 x 64K).
// !EARLY (kSeparateChained and kAuto, the eighth version's merge): weights first, then 8 items a warp in flight.
// TL (bench only, MlaDecodeWork::timeline): thread 0 stamps the CTA's record; timeline points
// at the merge's first record (mla_decode.h).
// SLICE (MlaDecodeWork::merge_slice): the dims a CTA owns, 64 (one warp a chain) or 16 / 32
// (more CTAs a row: 8 lanes or 16 a chain). Every output element sums the same 8 chains (items
// i = c, c + 8, ... in order, chain c), in the same order, with the same weights whatever the
// slice, so the output is bit-identical across slices; only 4 x SLICE threads load partials.
constexpr int kMergeEarly = 32;
constexpr int kMergeChains = kWarps;  // the 8 item chains an element sums (the 64-dim form's warps)
// MlaDecodeMerge::kSeparateShort (fourteenth version): the early form with kMergeEarlyShort loads
// a chain (rows of up to 64 items in one round trip, 8 registers of partials, not 32).
constexpr int kMergeEarlyShort = 8;
template <bool EARLY, bool TL = false, int SLICE = 64, int NEARLY = kMergeEarly>
__global__ void __launch_bounds__(kThreads) mla_merge_kernel(const __grid_constant__ MlaDecodeArgs a, const int32_t* __restrict__ plan,
                                                             const float* __restrict__ part_o, const float* __restrict__ part_lse,
                                                             uint64_t* timeline) {
  __shared__ float s_w[kMergeStaged];
  __shared__ float s_red[2][kWarps];
  __shared__ float2 s_acc[kMergeChains][SLICE / 2];
  uint64_t* const rec = TL ? timeline + ((blockIdx.x * gridDim.y + blockIdx.y) * gridDim.z + blockIdx.z) * kMlaTimelineWords : nullptr;
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 0);
  }
  const int row = blockIdx.x, h = blockIdx.y, capacity = plan[2];
  const int32_t* info = plan + 4 + 4 * capacity + 4 * row;
  const int first = info[0], n = info[1];
  if (n == 1) return;  // written by the run (a row without tokens too: its one empty item)
  pdl_wait();  // the run's partials (and, for the zero rows, nothing before us reads o_lat)
  pdl_trigger();
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 1);
  }
  const int H = static_cast<int>(a.heads), lat = static_cast<int>(a.latent_dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kCols = SLICE / 2;  // threads a chain (two dims each)
  const int chain = threadIdx.x / kCols, col = threadIdx.x % kCols, d = blockIdx.z * SLICE + 2 * col;
  const bool loads = chain < kMergeChains;  // 4 x SLICE threads load partials
  float* out = a.o_lat + (static_cast<int64_t>(row) * H + h) * lat;
  if (n == 0) {
    if (chain == 0 && d < lat) *reinterpret_cast<float2*>(out + d) = make_float2(0.0f, 0.0f);
    return;
  }
  const float* lse = part_lse + static_cast<int64_t>(first) * H + h;
  const bool staged = n <= kMergeStaged;  // else the weights come from L2 again below
  const float2* src = reinterpret_cast<const float2*>(part_o + (static_cast<int64_t>(first) * H + h) * lat + d);
  const int64_t item_stride = static_cast<int64_t>(H) * lat / 2;  // float2 from one item's partial to the next
  float2 early[EARLY ? NEARLY : 1];
  if constexpr (EARLY) {
#pragma unroll
    for (int k = 0; k < NEARLY; ++k) {
      const int i = chain + k * kMergeChains;
      early[k] = loads && d < lat && i < n ? __ldcg(src + i * item_stride) : make_float2(0.0f, 0.0f);
    }
  }
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = lse[static_cast<int64_t>(i) * H];
    if (staged) s_w[i] = v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  if (lane == 0) s_red[0][warp] = mx;
  __syncthreads();
  float m = s_red[0][0];
#pragma unroll
  for (int k = 1; k < kWarps; ++k) m = fmaxf(m, s_red[0][k]);
  float sum = 0.0f;
  if (m != -INFINITY)
    for (int i = threadIdx.x; i < n; i += kThreads) {  // each thread its own items: no barrier needed
      const float w = exp2f((staged ? s_w[i] : lse[static_cast<int64_t>(i) * H]) - m);
      if (staged) s_w[i] = w;
      sum += w;
    }
  sum = warp_sum(sum);
  if (lane == 0) s_red[1][warp] = sum;
  __syncthreads();  // the weights and the partial sums
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 2);
  }
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) total += s_red[1][k];
  const float inv = m == -INFINITY ? 0.0f : 1.0f / total;
  float2 acc = make_float2(0.0f, 0.0f);
  if (loads && d < lat && m != -INFINITY) {
    int i0 = chain;
    if constexpr (EARLY) {
#pragma unroll
      for (int k = 0; k < NEARLY; ++k) {
        const int i = chain + k * kMergeChains;
        if (i < n) {
          const float w = staged ? s_w[i] : exp2f(lse[static_cast<int64_t>(i) * H] - m);
          acc = make_float2(fmaf(w, early[k].x, acc.x), fmaf(w, early[k].y, acc.y));
        }
      }
      i0 += NEARLY * kMergeChains;
    }
#pragma unroll 8
    for (int i = i0; i < n; i += kMergeChains) {
      const float w = staged ? s_w[i] : exp2f(lse[static_cast<int64_t>(i) * H] - m);
      const float2 v = *reinterpret_cast<const float2*>(part_o + ((static_cast<int64_t>(first) + i) * H + h) * lat + d);
      acc = make_float2(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y));
    }
  }
  if constexpr (TL) {
    if (threadIdx.x == 0) timeline_stamp(rec, 3);
  }
  if (loads) s_acc[chain][col] = acc;
  __syncthreads();
  if (chain == 0 && d < lat) {
    float2 o = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kMergeChains; ++k) o = make_float2(o.x + s_acc[k][col].x, o.y + s_acc[k][col].y);
    *reinterpret_cast<float2*>(out + d) = make_float2(o.x * inv, o.y * inv);
  }
  if constexpr (TL) {
    if (threadIdx.x == 0) {
      timeline_stamp(rec, 4);
      timeline_open(rec);
    }
  }
}

}  // namespace

namespace mla_decode_detail {

Status launch_merge(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream) {
  const int slice = w.merge_slice != 0 ? w.merge_slice : mla_decode_merge_slice(a.rows, a.heads, a.latent_dim);
  if (slice != 16 && slice != 32 && slice != 64) return invalid_argument("mla_decode_run: merge slice must be 0, 16, 32 or 64");
  const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>(a.heads), static_cast<unsigned>((a.latent_dim + slice - 1) / slice));
  // kSeparate: the early-load form; kAuto and kSeparateChained: the chained one.
  const bool early = w.merge_mode == MlaDecodeMerge::kSeparate;
  uint64_t* tl = w.timeline ? w.timeline + w.capacity * kMlaTimelineWords : nullptr;  // the merge's records follow the run's
  const auto pick = [&](auto kernel) { return launch_pdl(w.pdl, kernel, grid, dim3(kThreads), 0, stream, a, w.plan, w.part_o, w.part_lse, tl); };
  const auto by_slice = [&](auto k16, auto k32, auto k64) { return slice == 16 ? pick(k16) : slice == 32 ? pick(k32) : pick(k64); };
  constexpr int kShort = kMergeEarlyShort;
  const cudaError_t e =
      w.merge_mode == MlaDecodeMerge::kSeparateShort
          ? (tl ? by_slice(mla_merge_kernel<true, true, 16, kShort>, mla_merge_kernel<true, true, 32, kShort>, mla_merge_kernel<true, true, 64, kShort>)
                : by_slice(mla_merge_kernel<true, false, 16, kShort>, mla_merge_kernel<true, false, 32, kShort>,
                           mla_merge_kernel<true, false, 64, kShort>))
      : tl ? (early ? by_slice(mla_merge_kernel<true, true, 16>, mla_merge_kernel<true, true, 32>, mla_merge_kernel<true, true, 64>)
                    : by_slice(mla_merge_kernel<false, true, 16>, mla_merge_kernel<false, true, 32>, mla_merge_kernel<false, true, 64>))
           : (early ? by_slice(mla_merge_kernel<true, false, 16>, mla_merge_kernel<true, false, 32>, mla_merge_kernel<true, false, 64>)
                    : by_slice(mla_merge_kernel<false, false, 16>, mla_merge_kernel<false, false, 32>, mla_merge_kernel<false, false, 64>));
  if (e != cudaSuccess) return cuda_status(e, "mla_decode_run (merge)");
  return last_launch_status("mla_decode_run (merge)");
}

}  // namespace mla_decode_detail

}  // namespace pdserve::cuda
