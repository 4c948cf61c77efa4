// Split-KV MLA latent decode (issue 12): the same contract as mla_attend_latent (mla.h), in a
// plan/run split.
//
// Plan (host, once per step, mla_decode_plan.cpp): from each row's ctx_len, a flat list of work
// items (row, token begin, token end). One chunk length (whole granules of 16 tokens) for the
// whole step, chosen so that waves of kMlaTargetItems CTAs (2 per SM) finish first: at small
// batch x long context rows split until the SMs are full, at large batch rows stay whole. A
// row with a single item writes its output directly (a row with no tokens gets one empty
// item, which writes zeros); a row with several writes per-item partials (o normalised +
// log2-sum-exp) that are merged. The plan is a flat int32 image for a device buffer of FIXED
// capacity, so a CUDA graph can hold the launches and only the buffer's contents change from
// step to step.
//
// Run (device, mla_decode_sm90.cu): one CTA per item, for ALL heads of its row, so each
// cached token (latent + key, 576 floats for K3) is read from HBM once per row: tiles are
// streamed into shared memory (16 tokens x 3 stages, or 8 x 6: MlaDecodeRing, with the lean
// scoring loop or not, picked by the plan), and every head's online softmax
// runs over the shared tile (two variants, MlaDecodeVariant below). The merge of split rows
// (MlaDecodeMerge): a second kernel, or folded into the run: the last CTA of a group of a
// row's items (an atomic counter per group in a workspace the kernel leaves zeroed, so a graph
// can replay it) merges the group's partials, and the last group of the row merges the groups
// into the output: one launch a step, but slower on the H200 than the second kernel with pdl
// (docs/perf.md, MLA decode, sixth version), so the separate merge stays the default.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "mla/mla.h"
#include "pdserve/core/status.h"

namespace pdserve::cuda {

// Image layout (int32): [0] num_items, [1] rows, [2] capacity, [3] the L2 prefetch count: tiles
// each item prefetches before the pdl wait (kLeanPrefetch), or the L2's lead over the ring
// (kLeanAhead); min(the longest item's tiles, kMlaPrefetchTileBudget / num_items), >= 1;
// items from word 4: capacity x {row, token_begin, token_end, partial_slot (-1: direct)};
// then rows x {first_item, num_items, group_size, num_groups}: the fused merge's tree, items
// [first + g x group_size, ...) form group g; a row with one group merges in one step.
// How deep the warp variant's copy ring is (bytes in flight per SM; both rings keep two CTAs
// an SM on 108 KiB of shared memory each, and read the same plan image, so a graph captured
// with one ring stays correct when a later step's plan would pick the other). kShallow: tiles
// of 16 tokens, 3 stages (two tiles, 72 KiB, in flight while one is scored). kDeep: tiles of 8
// tokens, 6 stages (five tiles, 90 KiB, in flight): by Little's law the stream's bandwidth
// tracks the bytes in flight (docs/perf.md, MLA decode, sixth and seventh versions).
// kDeep needs the bulk loader (with kCpAsync, or with dynamic tiles, the run uses kShallow).
// kLean: kShallow's ring with a leaner scoring loop (K3's latent 512 + key 64 fixed at compile
// time, tile validity from the issuing thread instead of a page-table load and a division per
// token, the scores of a tile reduced together): 14-38% faster than kShallow on the H200 at
// every measured shape (docs/perf.md, MLA decode, eighth version). kLeanDeep: the same loop on
// kDeep's ring. Other shapes (and dynamic tiles) run kShallow / kDeep instead; kCpAsync, kShallow.
// kLeanBurst: kLean whose prologue fills all three stages (a larger first burst; the steady
// state is kLean's) and prefetches their page-table lines to L2 before the pdl wait: measured
// no faster than kLean at any shape on the H200 (docs/perf.md, MLA decode, ninth version), so
// never picked; a tested option.
// kLeanPrefetch: kLean whose CTAs, BEFORE the pdl wait, aim L2 prefetches (cp.async.bulk.prefetch.L2)
// at their item's first tiles (the plan's count, image word 3), so the cache streams from HBM
// while the kernel before still drains (the previous step's merge in back-to-back steps);
// after the wait the ring is kLean's and finds those tiles in L2 or in flight. The page table
// is read before the wait for this: a stale entry only mis-aims a hint (prefetches return
// nothing to the thread, L2 is the point of coherence), entries outside
// [0, MlaDecodeWork::cache_pages) are skipped (cache_pages 0: no prefetch, kLean itself).
// docs/perf.md, MLA decode, tenth version.
// kLeanAhead: kLean whose issuing thread keeps the L2 the plan's count (image word 3) of tiles
// ahead of the shared-memory ring: each tile is prefetched to L2 that many tiles before its
// bulk copy is issued, so a CTA has that many more tiles in flight than its three stages hold
// (all after the pdl wait; no shared memory or barrier added).
// kAuto: the run's default, kShallow; the plan's pick (MlaDecodePlan::ring) is what callers pass.
// kLeanWide / kLeanWidePrefetch (the cluster form only, MlaDecodeMerge::kCluster; elsewhere
// kLean / kLeanPrefetch): kLean's loop on 16-token tiles in 5 stages (180 KiB: one CTA an SM, so
// a cluster of 16 spans 16 SMs), every stage filled at the start (an item of up to 5 tiles is
// one burst: 1 x 1K's 4-tile items); the prefetch form adds kLeanPrefetch's pre-wait L2 hints.
// kLeanBlock / kLeanBlockPrefetch (fourteenth version, mla_decode_block_sm90.cu; <= 3 heads, K3's
// widths, bulk loader, else the same fallbacks as kLean): kLean's ring (every stage filled at the
// start) with ONE softmax for the whole CTA instead of one a warp: per tile, the 8 warps score its
// 16 tokens (kLean's sums), one block barrier, every warp then updates the same block-wide max /
// sum per head from the tile's scores, and thread t accumulates latent dims 2t, 2t + 1 of every
// head over the tile's tokens; the output (or partial) is written by each thread for its own
// dims, with no combine of warp states at the item's end. Correct for items of any length; built
// for items of one or two tiles (the plan's pick: mla_decode_pick_ring). The prefetch form adds
// kLeanPrefetch's pre-wait L2 hints (without MlaDecodeWork::cache_pages: kLeanBlock).
// kLeanBlockEarly / kLeanEarly (fifteenth version; kLeanBlock's / kLean's shapes and fallbacks): kLeanBlock
// / kLean whose CTAs, BEFORE the pdl wait, read their prologue tiles' page-table entries and
// issue those tiles' bulk copies (every stage filled at the start: 3 tiles; the warp form too)
// for the item's STABLE tokens, those before its row's newest MlaDecodeWork::new_tokens (the
// row's end from the plan: the last item's end). A tile holding both is copied in two bulk copies
// on its stage's mbarrier (armed once, before the wait, with the tile's bytes): rows [t0, stable)
// before the wait, [stable, t0 + valid) after it; q, the tiles past the prologue and tiles wholly
// past the stable bound after it, as in kLean. What may be read before the wait, and why: see
// MlaDecodeWork::new_tokens. Same sums as kLeanBlock / kLean (bit-identical outputs).
// A bf16 cache (MlaDecodeArgs::cache_bf16; sixteenth version, docs/perf.md): the pages hold bf16
// entries [latent 512 | key 64] (1152 bytes a token), copied into shared memory as they are (16-token
// tiles of 18 KiB) and turned into fp32 as each pair is read (q, the softmax, the accumulators, the
// partials and the merge stay fp32: values and sums are the fp32 form's on the bf16 cache's exact
// fp32 expansion). Taken: K3's widths (latent 512, key 64), <= 3 heads (the warp variant's shapes),
// the bulk loader (pages a multiple of 16 tokens), fixed tiles; the rings map to the lean forms:
// kLeanBlockEarly -> its bf16 form, kLeanBlock / kLeanBlockPrefetch -> kLeanBlock's (no prefetch
// form), kLeanEarly -> its bf16 form, every other ring (kAuto, kShallow, kDeep, kLean, kLeanDeep,
// kLeanBurst, kLeanPrefetch, kLeanAhead, kLeanWide*) -> kLean's. Refused with an error (Status):
// more heads or the block variant, other widths, the cp.async loader or pages not a multiple of 16,
// the cluster merge, dynamic tiles with the fused merge, the bench timeline, bf16_stages not in {0, 3, 6}.
// The ring's depth: MlaDecodeWork::bf16_stages (kMlaBf16Stages by default). Those are the cuda-core
// forms; by default a bf16 cache runs on the tensor cores instead wherever the ring is not a
// block-softmax one (seventeenth version: MlaDecodeBf16Math below, mla_decode_mma_sm90.cu).
enum class MlaDecodeRing { kAuto, kShallow, kDeep, kLean, kLeanDeep, kLeanBurst, kLeanPrefetch, kLeanAhead, kLeanWide, kLeanWidePrefetch,
                           kLeanBlock, kLeanBlockPrefetch, kLeanBlockEarly, kLeanEarly };

// Where split rows are merged. kSeparate / kSeparateChained: a second kernel (grid row x head x slice of MlaDecodeWork::merge_slice dims).
// kFused: in the run, by the last CTA of each group / row (needs MlaDecodeWork::counters).
// kAuto: kSeparateChained, the measured default (docs/perf.md, MLA decode, sixth version: the
// fused tail's chain of atomics and L2 round trips in one CTA costs more than a second kernel
// whose launch pdl hides); kFused where kMlaDefaultMergeFused and counters are given.
// The separate kernel comes in two forms. kSeparateChained (the eighth version's): the weights
// first, then 8 partials a warp at a time (one L2 round trip per 64 items of a row after the
// weights' one). kSeparate (early loads): each warp issues its first 32 partials' loads before
// the weights' round trip, so rows of up to 256 items cost one; but 128 registers a thread
// (against 32), measured slower than the chained form at rows of up to 64 items and faster at
// 256 (ninth version): the plan picks it for rows of more than kMlaEarlyMergeMinItems items
// (MlaDecodePlan::merge), which callers pass like the ring.
// kCluster (thirteenth version, one launch): a row's items are the CTAs of one thread-block
// cluster (MlaDecodeWork::cluster of them, <= 16); each CTA keeps its partial (o, lse) in its
// own shared memory, the cluster syncs, then each CTA merges a slice of the row's heads x dims
// reading its peers' partials through distributed shared memory and writes the output: no
// merge kernel, no global partials. Needs the cluster plan (build_mla_decode_cluster_plan:
// exactly `cluster` items a row, item row x cluster + r, empty items allowed) and the warp
// variant; the launch is rows x cluster CTAs whatever launch_items says.
// kSeparateShort (fourteenth version): the early-load form with 8 loads a chain instead of 32 (a
// row of up to 64 items, 1 x 1K's, in one L2 round trip after the run, at 8 registers of
// partials); bit-identical to the other separate forms (the same chains in the same order).
enum class MlaDecodeMerge { kAuto, kSeparate, kFused, kSeparateChained, kCluster, kSeparateShort };
inline constexpr bool kMlaDefaultMergeFused = false;
// Between the measured 64 items a row (the chained form faster) and 256 (the early one faster).
inline constexpr int64_t kMlaEarlyMergeMinItems = 128;
// kSeparateShort, the plan's pick where its ring is the block-softmax form (items of <= 2 tiles)
// and no row has more than this many items: on the H200 0.2-0.7 us faster than the chained form
// at 1 x 64 to 8 x 1K (4-64 items a row) and 0.2 at 1 x 2K (128), 1.5 us slower than the early
// form at 1 x 4K (256) (docs/perf.md, MLA decode, fourteenth version).
inline constexpr int64_t kMlaShortMergeMaxItems = 128;

// With pdl: where the run lets the merge launch. kEarly: right after its own wait (the merge's
// CTAs may then sit resident, waiting, while the run still streams); kLate: after each CTA
// has written its output, so the merge only launches as the run's last CTAs finish.
enum class MlaDecodeTrigger { kEarly, kLate };
inline constexpr MlaDecodeTrigger kMlaDefaultTrigger = MlaDecodeTrigger::kLate;
// Items of one tile (the plan's kMlaOneTileItemRing steps: 1 x 1K, 1 x 4K): kEarly, the
// merge's CTAs resident and waiting while the run's one tile streams (docs/perf.md, MLA
// decode, twelfth version).
inline constexpr MlaDecodeTrigger kMlaOneTileTrigger = MlaDecodeTrigger::kEarly;

struct MlaDecodePlan {
  int64_t rows = 0, capacity = 0, num_items = 0;
  MlaDecodeRing ring = MlaDecodeRing::kShallow;  // the ring measured faster for this step's shape (mla_decode_pick_ring)
  // The separate merge's form: kSeparate (early loads) where a row has more than
  // kMlaEarlyMergeMinItems items; kSeparateShort where the ring is kLeanBlock* and no row has
  // more than kMlaShortMergeMaxItems; else kAuto (the chained form). Callers pass it unless they fuse.
  MlaDecodeMerge merge = MlaDecodeMerge::kAuto;
  // With pdl: where the run lets the merge launch (MlaDecodeWork::trigger): kMlaOneTileTrigger
  // where items hold one tile, else kMlaDefaultTrigger.
  MlaDecodeTrigger trigger = kMlaDefaultTrigger;
  // The separate merge's slice (MlaDecodeWork::merge_slice): 64 where items hold one tile (with
  // the early trigger the 64-dim merge measured as fast as the 16-dim one, and 16-dim with the
  // late trigger 1 us slower there), else 0 (the launch's pick, mla_decode_merge_slice).
  int merge_slice = 0;
  // kCluster plans (build_mla_decode_cluster_plan): the items a row (the cluster size); else 0.
  int cluster = 0;
  bool any_split = false;     // some row has >= 2 items: the merge has work
  bool any_empty = false;     // some row has ctx_len <= 0 (its one empty item writes zeros)
  std::vector<int32_t> image; // mla_decode_plan_words(rows, capacity) words
};

inline constexpr int64_t kMlaTargetItems = 264;  // 2 CTAs on each of the H200's 132 SMs
// Waves of kMlaTargetItems the plan aims for at least when it splits (more, shorter items
// even out the CTAs' finish times at the cost of more partials to merge): the default plan's
// value, from the H200 measurement (docs/perf.md, "MLA split-KV latent decode", fifth version).
inline constexpr int64_t kMlaPlanWaves = 1;
inline constexpr int64_t kMlaTileTokens = 16;    // tokens per shared-memory tile of the run
// kLeanPrefetch / kLeanAhead: tiles prefetched to L2, over the whole step: two per CTA slot
// (528 x 36.9 KB = 19.5 MB at K3's widths, well inside the H200's 50 MB L2, and about what HBM
// delivers in the 2-5 us the run's CTAs sit before the wait).
inline constexpr int64_t kMlaPrefetchTileBudget = 2 * kMlaTargetItems;
// The fused merge: a row of at most kMlaMergeFanIn items merges in one step (its last CTA
// reads them all); longer rows merge in two, groups of about sqrt(items). No merge step reads
// more than kMlaMaxMergeFanIn partials (so rows of up to its square split, checked by the plan).
inline constexpr int64_t kMlaMergeFanIn = 16;
inline constexpr int64_t kMlaMaxMergeFanIn = 64;

// Items start and end (except at ctx_len) on multiples of this many tokens: the tile when
// pages hold whole tiles (a tile then never crosses a page), else the page.
inline int64_t mla_decode_granule(int64_t page_size) {
  return page_size % kMlaTileTokens == 0 ? kMlaTileTokens : page_size;
}

// Items can never exceed rows + waves x target (each row rounds up at most one chunk): the
// capacity for plans built with `waves`.
inline int64_t mla_decode_plan_capacity(int64_t rows, int64_t waves = kMlaPlanWaves) { return rows + waves * kMlaTargetItems; }
inline int64_t mla_decode_plan_words(int64_t rows, int64_t capacity) { return 4 + 4 * capacity + 4 * rows; }
// The fused merge's counters (one per group, one per row) and each row's tile queue (the
// warp variant's dynamic tiles): int32 words of the workspace.
inline int64_t mla_decode_counter_words(int64_t rows, int64_t capacity) { return capacity + 2 * rows; }

// The one-launch cluster form (MlaDecodeMerge::kCluster). kMlaClusterItems: the items a row
// (CTAs a cluster). mla_decode_cluster_fits: every row holds at most kMlaClusterMaxTokens
// tokens, the step at most kMlaClusterMaxRows rows, rows x kMlaClusterItems within the capacity.
// kMlaPickCluster: whether build_mla_decode_plan with allow_cluster picks it where it fits.
// false: on the H200 it was faster nowhere by more than 4% and 49% slower at 1 x 1K (16 CTAs
// of 4 tiles each against 64 CTAs of one: docs/perf.md, MLA decode, thirteenth version), so
// callers opt in by building the cluster plan themselves.
inline constexpr int kMlaClusterItems = 16;
inline constexpr int kMlaClusterMaxCtas = 16;  // the H200's largest (non-portable) cluster
inline constexpr int64_t kMlaClusterMaxTokens = 1024;
inline constexpr int64_t kMlaClusterMaxRows = 4;
inline constexpr bool kMlaPickCluster = false;
// kAuto's ring in a kCluster run (mla_decode_run): kLean.
inline constexpr MlaDecodeRing kMlaClusterRing = MlaDecodeRing::kLean;
// The cluster plan's ring, the fastest cluster form measured at each row count (thirteenth
// version): kLeanWidePrefetch (one CTA an SM) up to kMlaClusterWideMaxRows rows, kLeanPrefetch
// up to kMlaClusterMaxRows, kLean beyond (the wide ring's clusters of 16 SMs stop fitting side by
// side: 8 x 1K 20.7 us against 13.5). Its trigger: early (0.8-1.1 us faster than late at 1 x 1K
// and 2 x 1K in back-to-back steps).
inline constexpr int64_t kMlaClusterWideMaxRows = 2;
// The cluster plan: row b's `cluster` items are [b x cluster, (b + 1) x cluster), item r holding
// granules [r c, (r + 1) c) of the row (c = ceil(granules / cluster)), clipped to ctx (items
// past the row's end are empty); every item's partial_slot is its index (the partial stays in
// shared memory). ring and trigger: as above. capacity >= rows x cluster.
Status build_mla_decode_cluster_plan(const int32_t* ctx_len, int64_t rows, int64_t page_size, int64_t capacity, int cluster,
                                     MlaDecodePlan* plan);
bool mla_decode_cluster_fits(const int32_t* ctx_len, int64_t rows, int64_t capacity);

// ctx_len: [rows] host values. Deterministic: the same ctx_len give the same image. waves >= 1:
// the fewest waves of kMlaTargetItems items to split into (never past the capacity). fan_in
// in [1, kMlaMaxMergeFanIn]: the most items a row merges in one step (kMlaMergeFanIn).
Status build_mla_decode_plan(const int32_t* ctx_len, int64_t rows, int64_t page_size, int64_t capacity, MlaDecodePlan* plan,
                             int64_t waves = kMlaPlanWaves, int64_t fan_in = kMlaMergeFanIn, bool allow_cluster = false);

// kBlock: any head count (<= 32), the block shares each tile's scores (three barriers a tile).
// kWarp: <= 3 heads (the TP32 rank) and latent % 4 == 0, each warp its own online softmax over its tokens
// (one barrier a tile), states combined at the end. kAuto: kWarp where it applies.
enum class MlaDecodeVariant { kAuto, kBlock, kWarp };

// How the warp variant streams tiles into shared memory. kCpAsync: every thread issues 16-byte
// cp.async (any page size). kBulk: one thread issues one bulk copy (cp.async.bulk) per tile,
// completing on an mbarrier (pages a multiple of the tile, else it falls back to kCpAsync);
// no per-thread copy instructions or address arithmetic. kAuto: kBulk, the measured default
// (docs/perf.md, "MLA split-KV latent decode on the H200", fourth version).
enum class MlaDecodeLoader { kAuto, kCpAsync, kBulk };

// A bf16 cache's arithmetic (seventeenth version, mla_decode_mma_sm90.cu). kCudaCores: the lean
// forms above, each pair of entries widened to fp32 and scored by FMA (bit-identical to the fp32
// forms on the cache's exact expansion). kTensorCores: the entries fed to bf16 tensor cores as they
// are (mma.sync m16n8k16 for the scores and for P x V; q and p split into bf16 hi + lo, ~16
// significant bits, every sum fp32; a tile arrives as one bulk tensor copy, 128-byte swizzled):
// within ~2e-5 (normalised) of the fp32 forms, not bit-identical. The kernel takes up to 4 heads; a
// bf16 cache's run takes up to 3 (mla_decode_bf16_supported). Its ring: the early
// rings (kLeanEarly, kLeanBlockEarly) give its early prologue (MlaDecodeWork::new_tokens), every
// other ring its plain one. With the fused merge (counters) the run takes the cuda-core forms.
// kAuto: the tensor cores except for the block-softmax rings (kLeanBlock*, the plan's pick for items
// of one or two tiles), where the cuda-core block form measured faster (1 x 64 to 1 x 4K: 4.23-7.48 us
// a step against 4.81-7.64); from 1 x 16K up the tensor cores are 0.77-0.93x the cuda-core time and
// reach 4.06-4.49 TB/s from 32 x 16K (docs/perf.md, seventeenth version; the 128-byte L2 promotion of
// its tensor map, eighteenth session).
enum class MlaDecodeBf16Math { kAuto, kCudaCores, kTensorCores };
// The tensor-core form's stages of 16 tokens (18 KiB each, two CTAs an SM): 5, 6-32% faster than 3
// at every measured shape (seventeenth version).
inline constexpr int kMlaMmaStages = 5;

// Device side of one step's plan. part_o: [capacity][heads][latent_dim], part_lse:
// [capacity][heads]. launch_items: CTAs to launch (the plan's num_items when known on the host,
// its capacity inside a graph: surplus CTAs exit). merge: launch the separate merge (always,
// in a graph; kSeparate only).
struct MlaDecodeWork {
  const int32_t* plan = nullptr;  // the image on the device
  int64_t capacity = 0;
  int64_t launch_items = 0;
  bool merge = true;
  MlaDecodeMerge merge_mode = MlaDecodeMerge::kAuto;
  // kFused: mla_decode_counter_words(rows, capacity) int32, zero before the first run (e.g.
  // cudaMemset once at allocation); every run leaves them zero again. One run at a time.
  int32_t* counters = nullptr;
  // kFused with the bulk loader (warp variant): a split row's CTAs take its tiles from a shared
  // queue instead of fixed ranges (mla_decode_warp_sm90.cu). Off by default: slower on the H200
  // (perf.md, sixth version), and the result then depends on which CTA took which tile (not
  // bit-reproducible from run to run).
  bool dynamic_tiles = false;
  MlaDecodeVariant variant = MlaDecodeVariant::kAuto;
  MlaDecodeLoader loader = MlaDecodeLoader::kAuto;
  // The warp variant's copy ring (the block variant has one ring; dynamic tiles keep kShallow's).
  MlaDecodeRing ring = MlaDecodeRing::kAuto;
  // Programmatic dependent launches (sm_90): the run may launch while the kernel before it
  // drains and the merge while the run drains; each waits (griddepcontrol.wait) before
  // reading anything but the plan, so the plan must not be written by the kernel just before.
  bool pdl = false;
  // The cache's page count (one layer): bounds kLeanPrefetch's pre-wait prefetches (0: none).
  int64_t cache_pages = 0;
  // The early rings (kLeanBlockEarly, kLeanEarly; others ignore it): each row's newest new_tokens
  // tokens are read only after the pdl wait; everything else they read (the plan, the page
  // table, the cache entries of a row's tokens [0, ctx - new_tokens)) may be read BEFORE it, while
  // the kernel just before the run (P) still runs. That is safe only when
  // (1) the plan and the page table were written before the step by the host (a copy in the
  //     stream ahead of the step's kernels), never by a kernel the run may overlap;
  // (2) every cache entry of a row but its newest new_tokens was written by a kernel that has
  //     COMPLETED when the run starts: with pdl the run starts once P triggers (or ends); if P
  //     triggers only after its own pdl wait, or not at all (every kernel here: pdl_bulk.cuh),
  //     every kernel before P has completed by then, so the only writer still running is P itself,
  //     which may write q and the rows' newest new_tokens entries (a decode step's
  //     mla_write_latents: 1 a row), both read after the wait. Tokens older than that were written
  //     by earlier steps (or earlier in this one, by kernels before P), which completed.
  // A P that triggers BEFORE its own pdl wait breaks (2): the kernel before P may still be
  // writing, and the run could copy entries it has not written yet; so does a P that writes
  // older entries than the newest new_tokens, and a page table written by a kernel.
  // 1 for decode (one query row a sequence, its one new token). Rows that are several query
  // tokens of one sequence in one step (a prefill chunk through the split-KV path, speculative
  // tokens) must pass the step's new tokens a sequence (the chunk's length): row i's newest i + 1
  // are new. >= a row's length: nothing of that row is read early. >= 0 (else refused).
  // 0 (nothing but q after the wait) where P is a plain launch (no pdl) that starts after every
  // cache writer of the step and writes only q: the CUDA backend's q absorb (mla_absorb.h,
  // cuda_layers.cpp), which then triggers at its start for the early rings' pre-wait window.
  int64_t new_tokens = 1;
  // A bf16 cache (MlaDecodeArgs::cache_bf16): the ring's stages of 16-token tiles, 3 (kLean's count,
  // half its shared memory) or 6 (kLean's shared memory, five tiles in flight); 0: kMlaBf16Stages.
  int bf16_stages = 0;
  // A bf16 cache, 3 heads, kLean's form at kMlaBf16Stages only (bench): bf16 pairs turned into fp32
  // by two byte permutes (prmt) instead of a shift and a mask; the same values.
  bool bf16_prmt = false;
  // A bf16 cache: the cuda-core forms or the tensor-core form (MlaDecodeBf16Math; kAuto: the
  // tensor cores except for the block-softmax rings).
  MlaDecodeBf16Math bf16_math = MlaDecodeBf16Math::kAuto;
  MlaDecodeTrigger trigger = kMlaDefaultTrigger;
  // The separate merge's dims a CTA (16, 32 or 64; 0: mla_decode_merge_slice). The output is
  // bit-identical across slices (mla_decode_merge_sm90.cu); only the CTA count changes. 64 (the
  // eleventh version's grid) unless the caller passes the plan's pick (MlaDecodePlan::merge_slice).
  int merge_slice = 64;
  // kCluster: CTAs a cluster = items a row (the plan's MlaDecodePlan::cluster; 2..16, 16 needs
  // the non-portable cluster size). part_o / part_lse are not used.
  int cluster = kMlaClusterItems;
  float* part_o = nullptr;
  float* part_lse = nullptr;
  // Bench only (mla_decode_bench timeline): non-null launches instrumented instantiations of
  // the run (kLean / kLeanPrefetch, 3 heads) and of the separate merge, whose thread 0 writes
  // one record of kMlaTimelineWords per CTA (layout below); any other ring returns an error.
  // Null (always, outside the bench): the kernels have no instrumentation code at all.
  uint64_t* timeline = nullptr;
};

// Timeline record (uint64): words 2e, 2e + 1 = %globaltimer (ns) and clock64 at event e
// (kMlaTimelineEvents); word 10 = %smid; word 11 = 1 where the CTA wrote the record. The run's
// CTA i at record i; the merge's CTA (x, y, z) at record capacity + (x gridDim.y + y) gridDim.z + z.
// Run events: entry, past griddepcontrol.wait, first tile landed, main loop done, exit (before
// the late trigger). Merge events: entry, past the wait, weights ready, partials summed, exit.
inline constexpr int kMlaTimelineEvents = 5;
inline constexpr int64_t kMlaTimelineWords = 12;
inline int64_t mla_decode_timeline_records(int64_t rows, int64_t heads, int64_t latent_dim, int64_t capacity) {
  return capacity + rows * heads * ((latent_dim + 15) / 16);  // room for the narrowest merge slice
}

// The separate merge's slice (MlaDecodeWork::merge_slice 0, the plan's pick past one-tile items): kMlaNarrowMergeSlice dims a CTA
// where the 64-dim form would launch fewer CTAs than half the SMs' slots (kMlaTargetItems / 2:
// batch 1-5 at 3 heads, 24 CTAs a row), else 64. From the launch's shape only, so a graph keeps
// its grid; docs/perf.md, MLA decode, twelfth version.
inline constexpr int kMlaNarrowMergeSlice = 16;
inline int mla_decode_merge_slice(int64_t rows, int64_t heads, int64_t latent_dim) {
  return rows * heads * ((latent_dim + 63) / 64) < kMlaTargetItems / 2 ? kMlaNarrowMergeSlice : 64;
}

// Shapes the split-KV kernel takes (else use mla_attend_latent): heads <= 32, latent_dim even
// and <= 512, (latent_dim + rope_dim) % 4 == 0 and <= 576.
// The plan's ring for a step whose items hold at most `chunk_tokens` tokens: kMlaShortItemRing
// for short items (<= kMlaDeepRingMaxChunk tokens), where the deep ring's first burst (six
// 8-token tiles issued at once) is a large share of each item (kDeep measured 6-15% faster than
// kShallow on the H200, seventh version), kMlaLongItemRing for longer ones; both from the
// eighth version's measurement (docs/perf.md, MLA decode), where the lean scoring loop beat
// every other ring at every shape.
inline constexpr int64_t kMlaDeepRingMaxChunk = 128;
inline constexpr MlaDecodeRing kMlaShortItemRing = MlaDecodeRing::kLean;
inline constexpr MlaDecodeRing kMlaLongItemRing = MlaDecodeRing::kLean;
// Items of one tile (chunk <= kMlaTileTokens: 1 x 1K, 1 x 4K): kLeanPrefetch, whose pre-wait
// prefetch is then the item's whole read; 3-5% faster than kLean there on the H200 in two
// calls, and 1-9% slower wherever items hold two tiles or more (docs/perf.md, MLA decode,
// tenth version). Falls back to kLean where MlaDecodeWork::cache_pages is 0. The CUDA backend
// runs kLean instead (cuda_model.cpp: a graph keeps its first step's ring). Since the fourteenth
// version the plan picks kLeanBlockPrefetch there instead (kMlaBlockSoftmaxMaxChunk below), and
// since the fifteenth kLeanBlockEarly (kMlaEarlyMaxChunk); kMlaOneTileItemRing is its pick only
// where both are set below one tile.
inline constexpr MlaDecodeRing kMlaOneTileItemRing = MlaDecodeRing::kLeanPrefetch;
// The block-softmax form (kLeanBlock*, fourteenth version): the plan picks it for items of at most
// kMlaBlockSoftmaxMaxChunk tokens (0: never), kLeanBlockPrefetch for one-tile items, kLeanBlock
// for longer ones (docs/perf.md, MLA decode, fourteenth version).
inline constexpr int64_t kMlaBlockSoftmaxMaxChunk = 2 * kMlaTileTokens;
// The early form (kLeanBlockEarly, fifteenth version): the plan's pick instead of kLeanBlock* for
// items of at most kMlaEarlyMaxChunk tokens (0: never; within kMlaBlockSoftmaxMaxChunk): one tile,
// where it measured 8-14% faster than kLeanBlockPrefetch on the H200 (1 x 64 to 4 x 1K: 1 x 1K
// 4.98 us a step against 5.56); at two tiles an item (8 x 1K) a tie with kLeanBlock, which the
// plan keeps there (docs/perf.md, MLA decode, fifteenth version). Callers that pass the plan's ring must keep MlaDecodeWork::new_tokens' contract
// (decode: the default 1).
inline constexpr int64_t kMlaEarlyMaxChunk = kMlaTileTokens;
MlaDecodeRing mla_decode_pick_ring(int64_t chunk_tokens);
// A bf16 cache's default ring depth (MlaDecodeWork::bf16_stages 0): 3 stages of 16 tokens. On the
// H200 the 6-stage ring (twice the tiles in flight) was 2-9% slower at 1 x 16K to 256 x 16K and
// within 1% at 1 x 64 to 1 x 4K (an earlier call: 4-10% slower, 2.6% faster at 32 x 16K): the bf16
// run is bound by the instructions a token costs, not by the bytes in flight (docs/perf.md,
// sixteenth version).
inline constexpr int kMlaBf16Stages = 3;

bool mla_decode_supported(int64_t heads, int64_t latent_dim, int64_t rope_dim);
// The shapes whose bf16 cache (MlaDecodeArgs::cache_bf16) mla_decode_run takes with its default
// work options: the lean forms' K3 widths (latent 512 + key 64), <= 3 heads, pages a multiple of
// the tile (the bulk loader). Elsewhere a bf16 cache runs mla_attend_latent.
bool mla_decode_bf16_supported(int64_t heads, int64_t latent_dim, int64_t rope_dim, int64_t page_size);

// a: the usual arguments (a.rows must equal the plan's rows). Page ids < 0 are masked out; a
// row with nothing to attend to writes zeros.
Status mla_decode_run(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream);

}  // namespace pdserve::cuda
