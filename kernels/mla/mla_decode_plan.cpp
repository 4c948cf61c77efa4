// Host half of the split-KV MLA decode: the per-step work list (mla_decode.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mla/mla_decode.h"

namespace pdserve::cuda {

namespace {

// The plan image's header words: items, rows, capacity, and kLeanPrefetch's pre-wait tiles an
// item (the step's budget shared out, at least one, never past an item's own tiles; the kernel
// also stops at its item's end).
void write_image_header(int64_t rows, int64_t capacity, int64_t longest_item, MlaDecodePlan* plan) {
  plan->image[0] = static_cast<int32_t>(plan->num_items);
  plan->image[1] = static_cast<int32_t>(rows);
  plan->image[2] = static_cast<int32_t>(capacity);
  const int64_t item_tiles = (longest_item + kMlaTileTokens - 1) / kMlaTileTokens;
  plan->image[3] = static_cast<int32_t>(
      std::clamp<int64_t>(kMlaPrefetchTileBudget / std::max<int64_t>(plan->num_items, 1), 1, std::max<int64_t>(item_tiles, 1)));
}

}  // namespace

Status build_mla_decode_plan(const int32_t* ctx_len, int64_t rows, int64_t page_size, int64_t capacity, MlaDecodePlan* plan,
                             int64_t waves, int64_t fan_in, bool allow_cluster) {
  if (kMlaPickCluster && allow_cluster && page_size > 0 && mla_decode_cluster_fits(ctx_len, rows, capacity))
    return build_mla_decode_cluster_plan(ctx_len, rows, page_size, capacity, kMlaClusterItems, plan);
  if (rows < 0 || page_size <= 0 || capacity < 0 || waves < 1) return invalid_argument("mla decode plan: bad rows, page size or capacity");
  if (fan_in < 1 || fan_in > kMlaMaxMergeFanIn) return invalid_argument("mla decode plan: merge fan-in outside [1, 64]");
  const int64_t granule = mla_decode_granule(page_size);
  std::vector<int64_t> granules(rows);
  int64_t longest = 0;
  for (int64_t b = 0; b < rows; ++b) {
    granules[b] = (std::max<int64_t>(ctx_len[b], 0) + granule - 1) / granule;
    longest = std::max(longest, granules[b]);
  }
  auto items_for = [&](int64_t chunk) {
    int64_t n = 0;
    for (int64_t g : granules) n += std::max<int64_t>(1, (g + chunk - 1) / chunk);  // an empty row: one empty item
    return n;
  };
  // The smallest chunk (in granules) whose items fit `budget` (items only fall as it grows).
  auto smallest_chunk = [&](int64_t budget) {
    int64_t lo = 1, hi = std::max<int64_t>(longest, 1);
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (items_for(mid) <= budget) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  // One chunk length for the step: the one whose waves of kMlaTargetItems CTAs finish first,
  // cost = waves x (chunk + a fixed per-item cost), trying budgets of 1..4 more waves than the
  // rows alone need (or `waves`, if more). Never more items than the capacity.
  constexpr int64_t kItemOverheadGranules = 4;
  const int64_t min_waves = std::max<int64_t>(waves, (rows + kMlaTargetItems - 1) / kMlaTargetItems);
  int64_t chunk = std::max<int64_t>(longest, 1), best_cost = -1;
  for (int64_t w = min_waves; w < min_waves + 4; ++w) {
    const int64_t c = smallest_chunk(std::min(w * kMlaTargetItems, std::max(capacity, rows)));
    const int64_t n = items_for(c);
    const int64_t cost = (n + kMlaTargetItems - 1) / kMlaTargetItems * (c + kItemOverheadGranules);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, chunk = c;
  }
  chunk *= granule;
  plan->rows = rows;
  plan->capacity = capacity;
  plan->num_items = 0;
  plan->any_split = plan->any_empty = false;
  int64_t most_items = 0;     // a row's, for the merge's form
  int64_t longest_item = 0;   // tokens, for the prefetch count
  plan->image.assign(mla_decode_plan_words(rows, capacity), 0);
  int32_t* items = plan->image.data() + 4;
  int32_t* row_info = items + 4 * capacity;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t n = std::max<int64_t>(ctx_len[b], 0);
    const int64_t splits = std::max<int64_t>(1, (n + chunk - 1) / chunk);
    if (plan->num_items + splits > capacity)
      return invalid_argument("mla decode plan: " + std::to_string(plan->num_items + splits) + " items exceed the capacity " +
                              std::to_string(capacity));
    // The fused merge's tree: one step up to fan_in items, else groups of about sqrt(splits)
    // (both steps then read about as many partials), no step past kMlaMaxMergeFanIn.
    int64_t group = splits;
    if (splits > fan_in) {
      group = std::max<int64_t>(static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(splits)))),
                                (splits + kMlaMaxMergeFanIn - 1) / kMlaMaxMergeFanIn);
      if (group > kMlaMaxMergeFanIn)
        return invalid_argument("mla decode plan: a row of " + std::to_string(splits) + " items is more than two merge steps take");
    }
    row_info[4 * b] = static_cast<int32_t>(plan->num_items);
    row_info[4 * b + 1] = static_cast<int32_t>(splits);
    row_info[4 * b + 2] = static_cast<int32_t>(group);
    row_info[4 * b + 3] = static_cast<int32_t>((splits + group - 1) / group);
    plan->any_split |= splits > 1;
    most_items = std::max(most_items, splits);
    plan->any_empty |= n == 0;
    longest_item = std::max(longest_item, std::min(n, chunk));
    for (int64_t s = 0; s < splits; ++s) {
      int32_t* it = items + 4 * plan->num_items;
      it[0] = static_cast<int32_t>(b);
      it[1] = static_cast<int32_t>(s * chunk);
      it[2] = static_cast<int32_t>(std::min(n, (s + 1) * chunk));  // an empty row: [0, 0)
      it[3] = splits > 1 ? static_cast<int32_t>(plan->num_items) : -1;
      ++plan->num_items;
    }
  }
  plan->ring = mla_decode_pick_ring(chunk);
  const bool one_tile = chunk <= kMlaTileTokens;  // the one-tile rings' trigger and merge slice
  plan->trigger = one_tile ? kMlaOneTileTrigger : kMlaDefaultTrigger;
  plan->merge_slice = one_tile ? 64 : 0;
  const bool block_ring = plan->ring == MlaDecodeRing::kLeanBlock || plan->ring == MlaDecodeRing::kLeanBlockPrefetch ||
                          plan->ring == MlaDecodeRing::kLeanBlockEarly;
  plan->merge = most_items > kMlaEarlyMergeMinItems                  ? MlaDecodeMerge::kSeparate
                : block_ring && most_items <= kMlaShortMergeMaxItems ? MlaDecodeMerge::kSeparateShort
                                                                     : MlaDecodeMerge::kAuto;
  write_image_header(rows, capacity, longest_item, plan);
  return Status::ok();
}

bool mla_decode_cluster_fits(const int32_t* ctx_len, int64_t rows, int64_t capacity) {
  if (rows < 1 || rows > kMlaClusterMaxRows || rows * kMlaClusterItems > capacity) return false;
  for (int64_t b = 0; b < rows; ++b)
    if (ctx_len[b] > kMlaClusterMaxTokens) return false;
  return true;
}

Status build_mla_decode_cluster_plan(const int32_t* ctx_len, int64_t rows, int64_t page_size, int64_t capacity, int cluster,
                                     MlaDecodePlan* plan) {
  if (rows < 0 || page_size <= 0 || capacity < 0) return invalid_argument("mla decode cluster plan: bad rows, page size or capacity");
  if (cluster < 1 || cluster > kMlaClusterMaxCtas) return invalid_argument("mla decode cluster plan: cluster outside [1, 16]");
  if (rows * cluster > capacity)
    return invalid_argument("mla decode cluster plan: " + std::to_string(rows * cluster) + " items exceed the capacity " +
                            std::to_string(capacity));
  const int64_t granule = mla_decode_granule(page_size);
  plan->rows = rows;
  plan->capacity = capacity;
  plan->num_items = rows * cluster;
  plan->cluster = cluster;
  plan->any_split = rows > 0;  // the merge is in the run: every row's items are combined there
  plan->any_empty = false;
  plan->image.assign(mla_decode_plan_words(rows, capacity), 0);
  int32_t* items = plan->image.data() + 4;
  int32_t* row_info = items + 4 * capacity;
  int64_t longest_item = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t n = std::max<int64_t>(ctx_len[b], 0);
    plan->any_empty |= n == 0;
    const int64_t chunk = std::max<int64_t>(1, ((n + granule - 1) / granule + cluster - 1) / cluster) * granule;
    longest_item = std::max(longest_item, std::min(n, chunk));
    for (int64_t r = 0; r < cluster; ++r) {
      int32_t* it = items + 4 * (b * cluster + r);
      it[0] = static_cast<int32_t>(b);
      it[1] = static_cast<int32_t>(std::min(n, r * chunk));
      it[2] = static_cast<int32_t>(std::min(n, (r + 1) * chunk));
      it[3] = static_cast<int32_t>(b * cluster + r);
    }
    row_info[4 * b] = static_cast<int32_t>(b * cluster);
    row_info[4 * b + 1] = cluster;
    row_info[4 * b + 2] = cluster;
    row_info[4 * b + 3] = 1;
  }
  plan->ring = rows <= kMlaClusterWideMaxRows ? MlaDecodeRing::kLeanWidePrefetch
               : rows <= kMlaClusterMaxRows   ? MlaDecodeRing::kLeanPrefetch
                                              : MlaDecodeRing::kLean;
  plan->merge = MlaDecodeMerge::kCluster;
  plan->trigger = MlaDecodeTrigger::kEarly;
  plan->merge_slice = 0;
  write_image_header(rows, capacity, longest_item, plan);
  return Status::ok();
}

MlaDecodeRing mla_decode_pick_ring(int64_t chunk_tokens) {
  if (chunk_tokens <= kMlaBlockSoftmaxMaxChunk) {
    if (chunk_tokens <= kMlaEarlyMaxChunk) return MlaDecodeRing::kLeanBlockEarly;
    return chunk_tokens <= kMlaTileTokens ? MlaDecodeRing::kLeanBlockPrefetch : MlaDecodeRing::kLeanBlock;
  }
  if (chunk_tokens <= kMlaTileTokens) return kMlaOneTileItemRing;
  return chunk_tokens <= kMlaDeepRingMaxChunk ? kMlaShortItemRing : kMlaLongItemRing;
}

bool mla_decode_supported(int64_t heads, int64_t latent_dim, int64_t rope_dim) {
  const int64_t entry = latent_dim + rope_dim;
  return heads >= 1 && heads <= 32 && latent_dim >= 2 && latent_dim % 2 == 0 && latent_dim <= 512 && rope_dim >= 0 &&
         entry % 4 == 0 && entry <= 576;
}

bool mla_decode_bf16_supported(int64_t heads, int64_t latent_dim, int64_t rope_dim, int64_t page_size) {
  return mla_decode_supported(heads, latent_dim, rope_dim) && heads <= 3 && latent_dim == 512 && rope_dim == 64 && page_size > 0 &&
         page_size % kMlaTileTokens == 0;
}

}  // namespace pdserve::cuda
