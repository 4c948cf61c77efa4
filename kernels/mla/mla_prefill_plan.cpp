// build_mla_prefill_plan (contract: mla_prefill.h).
#include <algorithm>
#include <climits>

#include "mla/mla_prefill.h"

namespace pdserve::cuda {

Status build_mla_prefill_plan(const std::vector<MlaPrefillSeq>& seqs, int64_t page_size, MlaPrefillPlan* plan, int64_t tile_rows,
                              MlaPrefillKernel kernel) {
  if (page_size <= 0) return invalid_argument("mla prefill plan: page_size must be positive");
  if (tile_rows != 64 && tile_rows != 128) return invalid_argument("mla prefill plan: tile_rows must be 64 or 128");
  if (kernel != MlaPrefillKernel::kMmaSync && tile_rows != 128)
    return invalid_argument("mla prefill plan: the wgmma kernel runs 128-row tiles only");
  struct Tile {
    int32_t seq, row0;
    int64_t keys;
  };
  std::vector<Tile> tiles;
  int64_t ctx_total = 0, rows = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const MlaPrefillSeq& q = seqs[s];
    if (q.new_len <= 0 || q.cached_len < 0 || q.row_begin < 0 || !q.pages)
      return invalid_argument("mla prefill plan: sequence " + std::to_string(s) + " has no new tokens, a negative length or no pages");
    for (int64_t r = 0; r < q.new_len; r += tile_rows) {
      const int64_t last = q.cached_len + std::min(q.new_len, r + tile_rows) - 1;  // last position of the tile
      tiles.push_back({static_cast<int32_t>(s), static_cast<int32_t>(r), last + 1});
    }
    ctx_total += q.cached_len + q.new_len;
    rows = std::max(rows, q.row_begin + q.new_len);
  }
  if (ctx_total > INT32_MAX / 2 || rows > INT32_MAX / 2) return invalid_argument("mla prefill plan: too many tokens");
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.keys > b.keys; });
  plan->seqs = static_cast<int64_t>(seqs.size());
  plan->tiles = static_cast<int64_t>(tiles.size());
  plan->ctx_total = ctx_total;
  plan->rows = rows;
  plan->tile_rows = tile_rows;
  plan->kernel = kernel;
  std::vector<int32_t>& im = plan->image;
  im.assign(4 + 4 * plan->seqs + 2 * plan->tiles + ctx_total, 0);
  im[0] = static_cast<int32_t>(plan->seqs), im[1] = static_cast<int32_t>(plan->tiles);
  im[2] = static_cast<int32_t>(ctx_total), im[3] = static_cast<int32_t>(rows);
  int32_t* seq_w = im.data() + 4;
  int32_t* tile_w = seq_w + 4 * plan->seqs;
  int32_t* entry_w = tile_w + 2 * plan->tiles;
  int64_t kv = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const MlaPrefillSeq& q = seqs[s];
    seq_w[4 * s] = static_cast<int32_t>(q.row_begin), seq_w[4 * s + 1] = static_cast<int32_t>(q.new_len);
    seq_w[4 * s + 2] = static_cast<int32_t>(q.cached_len), seq_w[4 * s + 3] = static_cast<int32_t>(kv);
    for (int64_t p = 0; p < q.cached_len + q.new_len; ++p)
      entry_w[kv++] = static_cast<int32_t>(q.pages[p / page_size] * page_size + p % page_size);
  }
  for (size_t t = 0; t < tiles.size(); ++t) tile_w[2 * t] = tiles[t].seq, tile_w[2 * t + 1] = tiles[t].row0;
  return Status::ok();
}

}  // namespace pdserve::cuda
