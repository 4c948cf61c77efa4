#include "pdserve/disagg/state_slicing.h"

namespace pdserve::disagg {

namespace {

// Offsets inside one rank's slot, for layer l and local head h.
struct RankLayout {
  KdaStateShape s;
  int64_t local_heads;
  int64_t conv_block() const { return local_heads * s.head_dim * s.conv_tail; }  // one of q, k, v
  int64_t layer_floats() const { return 3 * conv_block() + local_heads * s.head_dim * s.head_dim; }
  int64_t conv(int64_t l, int b, int64_t h) const { return l * layer_floats() + b * conv_block() + h * s.head_dim * s.conv_tail; }
  int64_t rec(int64_t l, int64_t h) const { return l * layer_floats() + 3 * conv_block() + h * s.head_dim * s.head_dim; }
};

void push_merged(std::vector<StateRun>& runs, StateRun r) {
  if (!runs.empty()) {
    StateRun& b = runs.back();
    if (b.src_rank == r.src_rank && b.dst_rank == r.dst_rank && b.src_offset + b.length == r.src_offset &&
        b.dst_offset + b.length == r.dst_offset) {
      b.length += r.length;
      return;
    }
  }
  runs.push_back(r);
}

}  // namespace

int64_t slot_floats(const KdaStateShape& s, int tp) {
  RankLayout l{s, s.heads / tp};
  return s.layers * l.layer_floats();
}

Result<std::vector<StateRun>> plan_state_copy(const KdaStateShape& s, int src_tp, int dst_tp) {
  if (src_tp < 1 || dst_tp < 1 || s.heads % src_tp || s.heads % dst_tp)
    return invalid_argument("KDA state slicing: " + std::to_string(s.heads) + " heads do not divide by prefill TP " +
                            std::to_string(src_tp) + " and decode TP " + std::to_string(dst_tp));
  const RankLayout src{s, s.heads / src_tp}, dst{s, s.heads / dst_tp};
  std::vector<StateRun> runs;
  // Destination-major, then layer, then block, then head: consecutive heads merge.
  for (int d = 0; d < dst_tp; ++d)
    for (int64_t l = 0; l < s.layers; ++l) {
      for (int b = 0; b < 3; ++b)
        for (int64_t hd = 0; hd < dst.local_heads; ++hd) {
          const int64_t g = d * dst.local_heads + hd;
          const int sr = static_cast<int>(g / src.local_heads);
          push_merged(runs, {sr, d, src.conv(l, b, g % src.local_heads), dst.conv(l, b, hd), s.head_dim * s.conv_tail});
        }
      for (int64_t hd = 0; hd < dst.local_heads; ++hd) {
        const int64_t g = d * dst.local_heads + hd;
        const int sr = static_cast<int>(g / src.local_heads);
        push_merged(runs, {sr, d, src.rec(l, g % src.local_heads), dst.rec(l, hd), s.head_dim * s.head_dim});
      }
    }
  return runs;
}

std::vector<int> latent_source_ranks(int src_tp, int dst_tp) {
  std::vector<int> out(dst_tp);
  for (int d = 0; d < dst_tp; ++d) out[d] = static_cast<int>(static_cast<int64_t>(d) * src_tp / dst_tp);
  return out;
}

}  // namespace pdserve::disagg
