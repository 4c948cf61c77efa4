// Host half of the split-KV MLA decode: the per-step work list (mla_decode.h).
#include <algorithm>
#include <string>
#include <vector>

#include "mla/mla_decode.h"

namespace pdserve::cuda {

Status build_mla_decode_plan(const int32_t* ctx_len, int64_t rows, int64_t page_size, int64_t capacity, MlaDecodePlan* plan,
                             int64_t waves) {
  if (rows < 0 || page_size <= 0 || capacity < 0 || waves < 1) return invalid_argument("mla decode plan: bad rows, page size or capacity");
  const int64_t granule = mla_decode_granule(page_size);
  std::vector<int64_t> granules(rows);
  int64_t longest = 0, busy_rows = 0;
  for (int64_t b = 0; b < rows; ++b) {
    granules[b] = (std::max<int64_t>(ctx_len[b], 0) + granule - 1) / granule;
    longest = std::max(longest, granules[b]);
    busy_rows += granules[b] > 0;
  }
  auto items_for = [&](int64_t chunk) {
    int64_t n = 0;
    for (int64_t g : granules) n += (g + chunk - 1) / chunk;
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
  const int64_t min_waves = std::max<int64_t>(waves, (busy_rows + kMlaTargetItems - 1) / kMlaTargetItems);
  int64_t chunk = std::max<int64_t>(longest, 1), best_cost = -1;
  for (int64_t w = min_waves; w < min_waves + 4; ++w) {
    const int64_t c = smallest_chunk(std::min(w * kMlaTargetItems, std::max(capacity, busy_rows)));
    const int64_t n = items_for(c);
    const int64_t cost = (n + kMlaTargetItems - 1) / kMlaTargetItems * (c + kItemOverheadGranules);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, chunk = c;
  }
  chunk *= granule;
  plan->rows = rows;
  plan->capacity = capacity;
  plan->num_items = 0;
  plan->any_split = plan->any_empty = false;
  plan->image.assign(mla_decode_plan_words(rows, capacity), 0);
  int32_t* items = plan->image.data() + 4;
  int32_t* row_info = items + 4 * capacity;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t n = std::max<int64_t>(ctx_len[b], 0);
    const int64_t splits = (n + chunk - 1) / chunk;
    if (plan->num_items + splits > capacity)
      return invalid_argument("mla decode plan: " + std::to_string(plan->num_items + splits) + " items exceed the capacity " +
                              std::to_string(capacity));
    row_info[2 * b] = static_cast<int32_t>(plan->num_items);
    row_info[2 * b + 1] = static_cast<int32_t>(splits);
    plan->any_split |= splits > 1;
    plan->any_empty |= splits == 0;
    for (int64_t s = 0; s < splits; ++s) {
      int32_t* it = items + 4 * plan->num_items;
      it[0] = static_cast<int32_t>(b);
      it[1] = static_cast<int32_t>(s * chunk);
      it[2] = static_cast<int32_t>(std::min(n, (s + 1) * chunk));
      it[3] = splits > 1 ? static_cast<int32_t>(plan->num_items) : -1;
      ++plan->num_items;
    }
  }
  plan->image[0] = static_cast<int32_t>(plan->num_items);
  plan->image[1] = static_cast<int32_t>(rows);
  plan->image[2] = static_cast<int32_t>(capacity);
  return Status::ok();
}

bool mla_decode_supported(int64_t heads, int64_t latent_dim, int64_t rope_dim) {
  const int64_t entry = latent_dim + rope_dim;
  return heads >= 1 && heads <= 32 && latent_dim >= 2 && latent_dim % 2 == 0 && latent_dim <= 512 && rope_dim >= 0 &&
         entry % 4 == 0 && entry <= 576;
}

}  // namespace pdserve::cuda
