// mla_decode_bench skel (thirty-first session, docs/perf.md "The split-KV step's skeleton at batch
// 1"): how near the bf16 decode step at batch 1 is to the data movement its split-KV structure
// cannot avoid. The skeleton is the step with every computation taken out: a run grid on the
// plan's items whose CTAs read the item (plan entry, page entry) and its tokens' cache bytes, all
// before the dependency wait as the early ring does, then their q (after the wait: the kernel
// before produces it), then write a partial (heads x 512 floats and heads lse values, or the
// output for a one-item row); and a merge grid on the plan's slice that
// reads its row's partials for its dims after its wait (one round trip, 8 item chains), sums them
// over the chains through shared memory and writes the output. Both launched like the step (pdl,
// 256 threads, the early trigger), 20 steps back to back in a graph on rotated page tables, beside
// the default bf16 step (c0), its run alone (c1, no merge: wrong output where rows split), its run
// followed by the skeleton's merge (c2: the merge's math apart from the run's) and two empty kernels
// on the run's and the merge's grids (fb, m13's launch floor).
// Included by mla_decode_bench.cu (inside its anonymous namespace, after mla_decode_bench_m16.h:
// DtypeStep).
#pragma once

#include <algorithm>
#include <cstdio>
#include <vector>

constexpr int kSkelLoads = 8;  // float4 loads a thread keeps in flight (a 16-token bf16 tile needs 4.5)

// One CTA an item: its tokens' bf16 entries (1152 bytes each) read through the page table.
__global__ void __launch_bounds__(256, 2) skel_run_kernel(const uint16_t* __restrict__ cache, const int32_t* __restrict__ table,
                                                          int64_t max_pages, int page_size, const int32_t* __restrict__ plan, int heads,
                                                          const float* __restrict__ q_lat, float* part_o, float* part_lse, float* o_lat) {
  constexpr int kVecs = kEntry * 2 / 16;  // float4 a token: 72
  const int item = blockIdx.x;
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  if (item >= plan[0]) return;
  const int row = it.x, begin = it.y, end = it.z, slot = it.w;
  const int32_t* rt = table + static_cast<int64_t>(row) * max_pages;
  const int total = (end - begin) * kVecs;
  float fold = 0.0f;
  for (int base = 0; base < total; base += kSkelLoads * 256) {  // one pass at items of up to 28 tokens
    float4 v[kSkelLoads];
#pragma unroll
    for (int k = 0; k < kSkelLoads; ++k) {
      const int idx = base + k * 256 + static_cast<int>(threadIdx.x);
      v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (idx < total) {
        const int t = begin + idx / kVecs, page = __ldg(rt + t / page_size);
        if (page >= 0)
          v[k] = __ldcs(reinterpret_cast<const float4*>(cache + (static_cast<int64_t>(page) * page_size + t % page_size) * kEntry) + idx % kVecs);
      }
    }
    if (base == 0) {  // the first pass's loads are out: the wait, then the trigger (the step's early trigger)
      pdserve::cuda::pdl_bulk::pdl_wait();
      pdserve::cuda::pdl_bulk::pdl_trigger();
      // q comes from the kernel before (the q absorb, in the engine): read only after the wait.
      for (int h = 0; h < heads; ++h) {
        const float2 qv = *reinterpret_cast<const float2*>(q_lat + (static_cast<int64_t>(row) * heads + h) * kLat + 2 * threadIdx.x);
        fold += qv.x + qv.y;
      }
    }
#pragma unroll
    for (int k = 0; k < kSkelLoads; ++k) fold += v[k].x + v[k].y + v[k].z + v[k].w;
  }
  if (total == 0) {
    pdserve::cuda::pdl_bulk::pdl_wait();
    pdserve::cuda::pdl_bulk::pdl_trigger();
  }
  // Each thread its two dims of every head (512 = 256 x 2), as the block-softmax run writes them.
  const int col2 = 2 * static_cast<int>(threadIdx.x);
  for (int h = 0; h < heads; ++h) {
    float* dst = slot < 0 ? o_lat + (static_cast<int64_t>(row) * heads + h) * kLat : part_o + (static_cast<int64_t>(slot) * heads + h) * kLat;
    *reinterpret_cast<float2*>(dst + col2) = make_float2(fold, fold);
    if (slot >= 0 && static_cast<int>(threadIdx.x) == h) part_lse[static_cast<int64_t>(slot) * heads + h] = fold;
  }
}

// Grid (row, head, SLICE-dim slice), as the separate merge: the row's partials summed, no weights.
template <int SLICE>
__global__ void __launch_bounds__(256) skel_merge_kernel(const int32_t* __restrict__ plan, const float* __restrict__ part_o, int heads,
                                                         float* o_lat) {
  constexpr int kCols = SLICE / 2, kChains = 8;
  __shared__ float2 s_acc[kChains][kCols];
  const int row = blockIdx.x, h = blockIdx.y, capacity = plan[2];
  const int32_t* info = plan + 4 + 4 * capacity + 4 * row;
  const int first = info[0], n = info[1];
  if (n == 1) return;
  pdserve::cuda::pdl_bulk::pdl_wait();
  pdserve::cuda::pdl_bulk::pdl_trigger();
  const int chain = static_cast<int>(threadIdx.x) / kCols, col = static_cast<int>(threadIdx.x) % kCols;
  const int d = static_cast<int>(blockIdx.z) * SLICE + 2 * col;
  float2 acc = make_float2(0.0f, 0.0f);
  if (chain < kChains) {
    float2 v[kSkelLoads];
#pragma unroll
    for (int k = 0; k < kSkelLoads; ++k) {
      const int i = chain + k * kChains;
      v[k] = i < n ? __ldcg(reinterpret_cast<const float2*>(part_o + ((static_cast<int64_t>(first) + i) * heads + h) * kLat + d))
                   : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < kSkelLoads; ++k) acc = make_float2(acc.x + v[k].x, acc.y + v[k].y);
    // Rows of more than 64 items: the rest one load at a time (not a floor there: the step's own
    // merge keeps 32 loads a chain in flight).
    for (int i = chain + kSkelLoads * kChains; i < n; i += kChains) {
      const float2 w = __ldcg(reinterpret_cast<const float2*>(part_o + ((static_cast<int64_t>(first) + i) * heads + h) * kLat + d));
      acc = make_float2(acc.x + w.x, acc.y + w.y);
    }
    s_acc[chain][col] = acc;
  }
  __syncthreads();
  if (chain == 0) {
    float2 o = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kChains; ++k) o = make_float2(o.x + s_acc[k][col].x, o.y + s_acc[k][col].y);
    *reinterpret_cast<float2*>(o_lat + (static_cast<int64_t>(row) * heads + h) * kLat + d) = o;
  }
}

inline void bench_skel_shape(int64_t batch, int64_t ctx_tokens) {
  DtypeStep st(batch, ctx_tokens);  // mla_decode_bench_m16.h: the plan's pick, rotated tables, both pools
  const MlaDecodePlan& plan = st.plan;
  MlaDecodeWork run_alone = st.w;
  run_alone.merge = false;
  const int slice = plan.merge_slice != 0 ? plan.merge_slice : mla_decode_merge_slice(batch, DtypeStep::kHeads, kLat);
  const unsigned run_grid = static_cast<unsigned>(plan.num_items);
  const dim3 merge_grid(static_cast<unsigned>(batch), static_cast<unsigned>(DtypeStep::kHeads), static_cast<unsigned>(kLat / slice));
  const bool merge = st.w.merge;
  auto pdl = [](auto kernel, dim3 grid, size_t smem, cudaStream_t s, auto... args) {
    check(cuda_status(pdserve::cuda::pdl_bulk::launch_pdl(true, kernel, grid, dim3(256), smem, s, args...), "skel launch"), "skel launch");
  };
  // The skeleton's merge after `run` (the skeleton's run, or the step's own run alone).
  auto skeleton_with = [&](cudaStream_t s, int i, bool own_run) {
    if (own_run)
      st.run(run_alone, true, s, i, "mla_decode_run (skel c2)");
    else
      pdl(skel_run_kernel, dim3(run_grid), 0, s, static_cast<const uint16_t*>(st.c16.get()), static_cast<const int32_t*>(st.tables[i % st.copies].get()),
          st.a.max_pages, static_cast<int>(kPage), static_cast<const int32_t*>(st.dplan.get()), static_cast<int>(DtypeStep::kHeads),
          static_cast<const float*>(st.ql.get()), st.part_o.get(), st.part_lse.get(), st.out.get());
    if (!merge) return;
    const int32_t* p = st.dplan.get();
    const float* po = st.part_o.get();
    const int H = static_cast<int>(DtypeStep::kHeads);
    if (slice == 16) pdl(skel_merge_kernel<16>, merge_grid, 0, s, p, po, H, st.out.get());
    else if (slice == 32) pdl(skel_merge_kernel<32>, merge_grid, 0, s, p, po, H, st.out.get());
    else pdl(skel_merge_kernel<64>, merge_grid, 0, s, p, po, H, st.out.get());
  };
  auto empty_pair = [&](cudaStream_t s, int) {
    pdl(floor_empty_kernel, dim3(run_grid), 0, s);
    if (merge) pdl(floor_empty_kernel, merge_grid, 0, s);
  };
  constexpr int kCols = 5;
  std::vector<double> rounds[kCols];
  for (int r = 0; r < 5; ++r) {
    rounds[0].push_back(graph_launch_us([&](cudaStream_t s, int i) { st.run(st.w, true, s, i, "mla_decode_run (skel c0)"); }, 20));
    rounds[1].push_back(graph_launch_us([&](cudaStream_t s, int i) { st.run(run_alone, true, s, i, "mla_decode_run (skel c1)"); }, 20));
    rounds[2].push_back(graph_launch_us([&](cudaStream_t s, int i) { skeleton_with(s, i, true); }, 20));
    rounds[3].push_back(graph_launch_us([&](cudaStream_t s, int i) { skeleton_with(s, i, false); }, 20));
    rounds[4].push_back(graph_launch_us(empty_pair, 20));
  }
  double med[kCols];
  for (int o = 0; o < kCols; ++o) std::sort(rounds[o].begin(), rounds[o].end()), med[o] = rounds[o][2];
  std::printf("| %4ld | %6ld | %5ld | %2d | %2d |", static_cast<long>(batch), static_cast<long>(ctx_tokens), static_cast<long>(plan.num_items),
              static_cast<int>(plan.ring), slice);
  for (int o = 0; o < kCols; ++o) std::printf(" %7.2f |", med[o]);
  std::printf(" %5.2f | %5.2f | %5.2f |\n", med[0] / med[3], med[0] - med[3], med[3] / med[4]);
  std::fflush(stdout);
}

inline void bench_skel() {
  std::printf("skel rows (graph us/step, 20 steps a graph, pdl, bf16 cache, 3 heads; median of 5 interleaved rounds): | batch | ctx | items | "
              "plan ring (enum) | merge slice | c0 default step | c1 its run alone | c2 its run + the skeleton's merge | "
              "skeleton: run + merge moving the same bytes, no math | fb two empty kernels | c0 / skeleton | c0 - skeleton us | skeleton / fb |\n");
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64}, {1, 256}, {1, 1024}, {1, 4096}, {2, 1024}, {4, 1024}, {1, 16384}};
  for (const auto& [b, c] : shapes) bench_skel_shape(b, c);
}
