// mla_decode_bench m18 (eighteenth session, docs/perf.md "The load path alone"): the load path's
// own ceiling. Copy-only kernels stream each plan item's tiles into a shared-memory ring (one warp a
// CTA issues the copies and waits; nothing computed), on the same plan, rotated page tables and
// pools as m17, in several copy forms, beside the runs' fp32 form (c0) and bf16 tensor-core form
// (c2). It found the 256-byte L2 promotion of tensor copies capping them at 4.0-4.2 TB/s (128 bytes
// or none: 4.4-4.5, as plain bulk copies), so the run's map asks for 128 bytes since; the "tma16"
// rows keep 256 bytes as the reference. Forms (StreamForm below; CTAs an SM from their shared
// memory, printed): tensor copies of 16- and 32-token boxes (128-byte swizzle), with an evict-first
// policy, with promotion none / 128 bytes, and of the same lines without swizzle; plain bulk copies
// of 16- and 32-token tiles; one plain copy a token into padded rows (1168 bytes) from 16 lanes or
// one; 8 copies a tile into slabs 16 bytes apart (2, 4, 8 tokens each), into 128-byte aligned
// slabs, and aligned with the stagger taken from the source side; cp.async by 256 threads; the fp32
// run's 16-token tiles (36 KiB).
// Included by mla_decode_bench.cu (inside its anonymous namespace, after mla_decode_bench_m17.h; it
// includes common/tensor_map.h and mla/mma_bf16.cuh).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

enum class StreamCopy { kTensor3d, kTensor3dEvictFirst, kTensor2dPlain, kBulk, kTokenLanes, kTokenOneLane, kSlabLanes, kSlabAligned, kSlabSrcShift, kCpAsync };

struct StreamForm {
  const char* name;
  int tokens;       // a tile's tokens (a plain copy never crosses a page: split there)
  int ring;         // stages
  StreamCopy copy;  // kTensor3d: the run's map (128-byte swizzle), boxes of `tokens` (kTensor3dEvictFirst:
                    // with an L2 evict-first policy); kTensor2dPlain: a map
                    // of 128-byte lines without swizzle, boxes of 16 tokens; kBulk: plain bulk copies;
                    // kToken*: one plain copy a token into rows padded to 1168 bytes (16 lanes issue, or lane 0);
                    // kSlabLanes: 8 plain copies a tile (lanes 0-7), each tokens / 8 consecutive tokens into
                    // slabs 16 bytes longer than their entries (so 8 slabs' rows fall in 8 bank groups);
                    // kSlabAligned: the same copies into 128-byte aligned slabs (no stagger); kSlabSrcShift:
                    // aligned slabs, slab s's copy starting 16 s bytes before its first token (the stagger
                    // from the source side, 16 s bytes more read); kCpAsync: 16-byte cp.async by 256
                    // threads into the run's swizzled layout (stream_cpasync_kernel)
  bool fp32;        // the fp32 pool (else bf16)
  L2Promotion promotion = L2Promotion::k256;  // kTensor3d's map (the run's was 256 bytes until this bench)
};

// One CTA an item; its one warp keeps `ring` tiles in flight (lane 0, or 16 lanes for kTokenLanes)
// and waits for each in turn.
__global__ void __launch_bounds__(32) stream_tiles_kernel(const __grid_constant__ CUtensorMap map, const unsigned char* cache,
                                                         const int32_t* __restrict__ plan, const int32_t* __restrict__ tables,
                                                         int max_pages, int page_size, int tokens, int ring, int entry_bytes,
                                                         StreamCopy copy) {
  extern __shared__ float4 smem_raw[];
  unsigned char* const stages =
      reinterpret_cast<unsigned char*>(smem_raw) + ((1024u - (pdl_bulk::smem_u32(smem_raw) & 1023u)) & 1023u);
  __shared__ __align__(8) uint64_t full[8];
  const int item = blockIdx.x, lane = threadIdx.x;
  if (item >= plan[0]) return;
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int row = it.x, begin = it.y, end = it.z;
  const int32_t* table = tables + static_cast<int64_t>(row) * max_pages;
  if (lane == 0) {
    for (int s = 0; s < ring; ++s) pdl_bulk::mbar_init(&full[s], 1);
    pdl_bulk::mbar_init_fence();
  }
  __syncwarp();
  const bool token_rows = copy == StreamCopy::kTokenLanes || copy == StreamCopy::kTokenOneLane;
  const bool aligned_slabs = copy == StreamCopy::kSlabAligned || copy == StreamCopy::kSlabSrcShift;
  const int slab_tokens = tokens / 8, slab_bytes = slab_tokens * entry_bytes + (aligned_slabs ? 128 : 16);
  const int row_bytes = token_rows ? entry_bytes + 16 : entry_bytes;
  const int stage_bytes = copy == StreamCopy::kSlabLanes || aligned_slabs ? 8 * slab_bytes : (tokens * row_bytes + 1023) / 1024 * 1024;
  const int ntiles = (end - begin + tokens - 1) / tokens;
  auto token_of = [&](int t) { return static_cast<int64_t>(table[t / page_size]) * page_size + t % page_size; };
  auto issue = [&](int i, int st) {
    const int t0 = begin + i * tokens, t1 = min(end, t0 + tokens);
    unsigned char* dst = stages + static_cast<size_t>(st) * stage_bytes;
    uint64_t* bar = &full[st];
    if (copy == StreamCopy::kTensor3d || copy == StreamCopy::kTensor3dEvictFirst || copy == StreamCopy::kTensor2dPlain) {  // whole boxes
      if (lane != 0) return;
      const int box = copy == StreamCopy::kTensor2dPlain ? 16 : tokens, boxes = (t1 - t0 + box - 1) / box;
      pdl_bulk::mbar_arrive_expect_tx(bar, static_cast<unsigned>(boxes * box * entry_bytes));
      for (int b = 0; b < boxes; ++b) {
        const int token = static_cast<int>(token_of(t0 + box * b));
        if (copy == StreamCopy::kTensor3dEvictFirst) {
          uint64_t policy;
          asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
          asm volatile(
              "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], "
              "%6;\n" ::"r"(pdl_bulk::smem_u32(dst + b * box * entry_bytes)),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(0), "r"(token), "r"(pdl_bulk::smem_u32(bar)), "l"(policy)
              : "memory");
        } else if (copy == StreamCopy::kTensor3d)
          asm volatile(
              "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                  pdl_bulk::smem_u32(dst + b * box * entry_bytes)),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(0), "r"(token), "r"(pdl_bulk::smem_u32(bar))
              : "memory");
        else
          asm volatile(
              "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                  pdl_bulk::smem_u32(dst + b * box * entry_bytes)),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(token * (entry_bytes / 128)), "r"(pdl_bulk::smem_u32(bar))
              : "memory");
      }
      return;
    }
    if (copy == StreamCopy::kSlabLanes || aligned_slabs) {
      const int a = t0 + lane * slab_tokens, n = lane < 8 ? max(0, min(slab_tokens, t1 - a)) : 0;
      const int64_t src = n > 0 ? token_of(a) * entry_bytes : 0;
      const int shift = copy == StreamCopy::kSlabSrcShift && src >= 16 * lane ? 16 * lane : 0;
      const unsigned total = __reduce_add_sync(0xffffffffu, n > 0 ? static_cast<unsigned>(n * entry_bytes + shift) : 0u);
      if (lane == 0) pdl_bulk::mbar_arrive_expect_tx(bar, total);
      __syncwarp();
      if (n > 0)
        pdl_bulk::bulk_copy(dst + lane * slab_bytes, cache + src - shift, static_cast<unsigned>(n * entry_bytes + shift), bar);
      return;
    }
    if (token_rows) {
      if (lane == 0) pdl_bulk::mbar_arrive_expect_tx(bar, static_cast<unsigned>((t1 - t0) * entry_bytes));
      __syncwarp();  // the expectation before any copy completes on the barrier
      for (int t = t0 + (copy == StreamCopy::kTokenLanes ? lane : 0); t < t1; t += copy == StreamCopy::kTokenLanes ? 32 : 1) {
        if (copy == StreamCopy::kTokenOneLane && lane != 0) break;
        pdl_bulk::bulk_copy(dst + (t - t0) * row_bytes, cache + token_of(t) * entry_bytes, static_cast<unsigned>(entry_bytes), bar);
      }
      return;
    }
    if (lane != 0) return;
    pdl_bulk::mbar_arrive_expect_tx(bar, static_cast<unsigned>((t1 - t0) * entry_bytes));
    for (int t = t0; t < t1;) {  // one copy a page's part of the tile
      const int n = min(t1 - t, page_size - t % page_size);
      pdl_bulk::bulk_copy(dst + (t - t0) * entry_bytes, cache + token_of(t) * entry_bytes, static_cast<unsigned>(n * entry_bytes), bar);
      t += n;
    }
  };
  for (int s = 0; s < ring && s < ntiles; ++s) issue(s, s);
  for (int i = 0; i < ntiles; ++i) {
    const int st = i % ring;
    pdl_bulk::mbar_wait(&full[st], (i / ring) & 1);
    __syncwarp();
    if (i + ring < ntiles) issue(i + ring, st);
  }
}

// kCpAsync: every thread of 8 warps copies 16-byte chunks of each tile into the run's swizzled
// layout (line L = 9 t + e / 64, chunk XOR L mod 8), one commit group a tile, `ring` tiles in flight.
__global__ void __launch_bounds__(256) stream_cpasync_kernel(const unsigned char* cache, const int32_t* __restrict__ plan,
                                                            const int32_t* __restrict__ tables, int max_pages, int page_size, int ring) {
  extern __shared__ float4 smem_raw[];
  unsigned char* const stages = reinterpret_cast<unsigned char*>(smem_raw);
  constexpr int kChunks = 16 * kEntry * 2 / 16, kTokenChunks = kEntry * 2 / 16;  // a tile's 16-byte chunks; a token's
  const int item = blockIdx.x;
  if (item >= plan[0]) return;
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int row = it.x, begin = it.y, end = it.z;
  const int32_t* table = tables + static_cast<int64_t>(row) * max_pages;
  const int ntiles = (end - begin + 15) / 16;
  auto issue = [&](int i) {
    if (i < ntiles) {
      const int t0 = begin + 16 * i;
      unsigned char* dst = stages + static_cast<size_t>(i % ring) * 16 * kEntry * 2;
      for (int c = threadIdx.x; c < kChunks; c += 256) {
        const int t = c / kTokenChunks, k = c % kTokenChunks, line = t * (kEntry / 64) + k / 8;
        const int tok = t0 + t;
        const int64_t token = tok < end ? static_cast<int64_t>(table[tok / page_size]) * page_size + tok % page_size : 0;
        mma::cp_async16(dst + line * 128 + (((k % 8) ^ (line & 7)) << 4), cache + token * kEntry * 2 + k * 16, tok < end ? 16 : 0);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int s = 0; s < ring - 1; ++s) issue(s);
  for (int i = 0; i < ntiles; ++i) {
    issue(i + ring - 1);
    switch (ring) {  // all but the newest ring - 1 groups landed: tile i is in
      case 6: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
      default: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    }
    __syncthreads();  // every thread's chunks of tile i are in; its stage may be refilled after this
  }
}

inline void bench_m18_shape(int64_t batch, int64_t ctx_tokens) {
  DtypeStep st(batch, ctx_tokens);  // mla_decode_bench_m16.h
  using C = StreamCopy;
  const StreamForm forms[] = {{"tma16 x5", 16, 5, C::kTensor3d, false},      {"tma32 x3", 32, 3, C::kTensor3d, false},
                              {"tma16 plain x5", 16, 5, C::kTensor2dPlain, false}, {"bulk16 x5", 16, 5, C::kBulk, false},
                              {"bulk32 x3", 32, 3, C::kBulk, false},         {"tok16 lanes x5", 16, 5, C::kTokenLanes, false},
                              {"tok16 one x5", 16, 5, C::kTokenOneLane, false}, {"f32x16 x3", 16, 3, C::kBulk, true},
                              {"slab2 x5", 16, 5, C::kSlabLanes, false},     {"slab4 x3", 32, 3, C::kSlabLanes, false},
                              {"slab8 x3", 64, 3, C::kSlabLanes, false},     {"slab4 aligned x3", 32, 3, C::kSlabAligned, false},
                              {"slab4 src-shift x3", 32, 3, C::kSlabSrcShift, false}, {"cp.async16 x5", 16, 5, C::kCpAsync, false},
                              {"cp.async16 x6", 16, 6, C::kCpAsync, false},  {"tma16 evict-first x5", 16, 5, C::kTensor3dEvictFirst, false},
                              {"tma16 L2-none x5", 16, 5, C::kTensor3d, false, L2Promotion::kNone},
                              {"tma16 L2-128 x5", 16, 5, C::kTensor3d, false, L2Promotion::k128}};
  constexpr int kForms = sizeof(forms) / sizeof(forms[0]);
  // Each 3-D tensor form's map: the run's (boxes of 16 or 32 tokens) with the form's L2 promotion.
  CUtensorMap map3[kForms]{}, map2{};
  for (int o = 0; o < kForms; ++o) {
    if (forms[o].copy != C::kTensor3d && forms[o].copy != C::kTensor3dEvictFirst) continue;
    const uint64_t extent[3] = {64, kEntry / 64, static_cast<uint64_t>(st.pool_pages * kPage)};
    const uint64_t stride[2] = {128, kEntry * 2};
    const uint32_t box[3] = {64, kEntry / 64, static_cast<uint32_t>(forms[o].tokens)};
    check(encode_bf16_tensor_map(&map3[o], st.c16.get(), 3, extent, stride, box, "m18 map", forms[o].promotion), "m18 map");
  }
  {
    const uint64_t extent[2] = {32, static_cast<uint64_t>(st.pool_pages * kPage * (kEntry / 64))};
    const uint32_t box[2] = {32, 16 * kEntry / 64};
    check(encode_u32_tensor_map_2d(&map2, st.c16.get(), extent, 128, box, "m18 plain map"), "m18 plain map");
  }
  auto smem_of = [](const StreamForm& f) {
    if (f.copy == C::kSlabLanes) return static_cast<size_t>(f.ring) * 8 * (f.tokens / 8 * kEntry * 2 + 16) + 1024;
    if (f.copy == C::kSlabAligned || f.copy == C::kSlabSrcShift) return static_cast<size_t>(f.ring) * 8 * (f.tokens / 8 * kEntry * 2 + 128) + 1024;
    const int row = kEntry * (f.fp32 ? 4 : 2) + (f.copy == C::kTokenLanes || f.copy == C::kTokenOneLane ? 16 : 0);
    return static_cast<size_t>(f.ring) * ((f.tokens * row + 1023) / 1024 * 1024) + 1024;
  };
  size_t most = 0;
  for (const StreamForm& f : forms) most = std::max(most, smem_of(f));
  check(cuda_status(cudaFuncSetAttribute(stream_tiles_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)), "m18 opt-in"),
        "m18 opt-in");
  check(cuda_status(cudaFuncSetAttribute(stream_cpasync_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)), "m18 opt-in"),
        "m18 opt-in");
  auto launch = [&](int o, cudaStream_t stream, int i) {
    const StreamForm& f = forms[o];
    const int entry_bytes = kEntry * (f.fp32 ? 4 : 2);
    const unsigned char* cache = f.fp32 ? reinterpret_cast<const unsigned char*>(st.c32.get()) : reinterpret_cast<const unsigned char*>(st.c16.get());
    if (f.copy == C::kCpAsync) {
      stream_cpasync_kernel<<<static_cast<unsigned>(st.plan.num_items), 256, smem_of(f), stream>>>(
          cache, st.dplan.get(), st.tables[i % st.copies].get(), static_cast<int>(st.a.max_pages), static_cast<int>(kPage), f.ring);
      check(cuda_status(cudaGetLastError(), "m18 launch"), "m18 launch");
      return;
    }
    const CUtensorMap& map = f.copy == C::kTensor2dPlain ? map2 : map3[o];
    stream_tiles_kernel<<<static_cast<unsigned>(st.plan.num_items), 32, smem_of(f), stream>>>(
        map, cache, st.dplan.get(), st.tables[i % st.copies].get(), static_cast<int>(st.a.max_pages), static_cast<int>(kPage), f.tokens, f.ring,
        entry_bytes, f.copy);
    check(cuda_status(cudaGetLastError(), "m18 launch"), "m18 launch");
  };
  MlaDecodeWork w32 = st.w, wtc = st.w;
  wtc.bf16_math = MlaDecodeBf16Math::kTensorCores;
  std::vector<double> rounds[kForms + 2];
  for (int r = 0; r < 5; ++r) {
    for (int o = 0; o < kForms; ++o) rounds[o].push_back(graph_launch_us([&](cudaStream_t s, int i) { launch(o, s, i); }, 20));
    rounds[kForms].push_back(graph_launch_us([&](cudaStream_t s, int i) { st.run(w32, false, s, i, "m18 c0"); }, 20));
    rounds[kForms + 1].push_back(graph_launch_us([&](cudaStream_t s, int i) { st.run(wtc, true, s, i, "m18 c2"); }, 20));
  }
  std::printf("| %4ld | %6ld | %5ld |", static_cast<long>(batch), static_cast<long>(ctx_tokens), static_cast<long>(st.plan.num_items));
  for (int o = 0; o < kForms + 2; ++o) {
    std::sort(rounds[o].begin(), rounds[o].end());
    const bool fp32 = o == kForms || (o < kForms && forms[o].fp32);
    int ctas = 0;
    if (o < kForms && forms[o].copy == C::kCpAsync) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, stream_cpasync_kernel, 256, smem_of(forms[o]));
    else if (o < kForms) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, stream_tiles_kernel, 32, smem_of(forms[o]));
    std::printf(" %8.2f (%4.2f)%s |", rounds[o][2], (fp32 ? st.bytes32 : st.bytes16) / rounds[o][2] * 1e-6,
                o < kForms ? (" " + std::to_string(ctas) + "/SM").c_str() : "");
  }
  std::printf("\n");
  std::fflush(stdout);
}

inline void bench_m18() {
  std::printf("m18 rows (graph us/step (TB/s over the bytes read), median of 5 interleaved rounds; the stream forms' CTAs an SM): | batch | "
              "ctx | items | tma16 x5 | tma32 x3 | tma16 plain x5 | bulk16 x5 | bulk32 x3 | tok16 lanes x5 | tok16 one x5 | f32x16 x3 | slab2 x5 | slab4 x3 | slab8 x3 | slab4 aligned x3 | slab4 src-shift x3 | cp.async16 x5 | cp.async16 x6 | tma16 evict-first x5 | tma16 L2-none x5 | tma16 L2-128 x5 | c0 fp32 run | "
              "c2 bf16 tensor-core run |\n");
  // 60 / 66 x 4K beside 64 x 4K: 240 / 264 items against 256 on 264 CTA slots (docs/perf.md, twenty-second session).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 65536}, {8, 16384}, {32, 16384}, {64, 4096}, {128, 16384}, {256, 16384}, {60, 4096}, {66, 4096}};
  const char* only = std::getenv("PDS_M18_ONLY");
  for (const auto& [b, c] : shapes)
    if (!only || std::to_string(b) + "x" + std::to_string(c) == only) bench_m18_shape(b, c);
}
