// The per-request state the engine owns: MLA latent pages and KDA state slots.
// Both pools keep exact accounting (can_allocate / allocate / free, one place that mutates),
// so a test can assert that every page and slot is free again after any sequence of events.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/model/config.h"

namespace pdserve {

// MLA latent cache: [mla_layer][page][page_size][entry_dim] fp32, entry = [latent | key part].
class MlaKvPool {
 public:
  MlaKvPool(int64_t num_layers, int64_t num_pages, int64_t page_size, int64_t entry_dim);
  static std::unique_ptr<MlaKvPool> for_model(const ModelConfig& cfg, int64_t num_pages, int64_t page_size);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t page_size() const { return page_size_; }
  int64_t entry_dim() const { return entry_dim_; }
  int64_t pages_for_tokens(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  float* layer_base(int64_t layer) { return data_.data() + layer * layer_stride(); }
  const float* layer_base(int64_t layer) const { return data_.data() + layer * layer_stride(); }
  int64_t layer_stride() const { return num_pages_ * page_size_ * entry_dim_; }
  int64_t page_floats() const { return page_size_ * entry_dim_; }

  bool can_allocate(int64_t n) const;
  // n free pages, or kResourceExhausted. Pages are handed out lowest id first.
  Result<std::vector<int32_t>> allocate(int64_t n);
  // Returns pages to the pool; a page that is not allocated is an error (double free).
  Status free(const std::vector<int32_t>& pages);
  int64_t free_pages() const;
  int64_t used_pages() const { return num_pages_ - free_pages(); }

 private:
  int64_t num_layers_, num_pages_, page_size_, entry_dim_;
  std::vector<float> data_;
  mutable std::mutex mu_;
  std::vector<int32_t> free_list_;  // kept sorted descending so back() is the lowest id
  std::vector<uint8_t> in_use_;
};

// KDA state: per slot, per KDA layer: conv state [3][P][K-1] (q, k, v blocks; channel
// c = head * D + d; oldest input first) then recurrent state [H][D][D] laid out [V][K].
class KdaStatePool {
 public:
  KdaStatePool(int64_t num_layers, int64_t num_slots, int64_t heads, int64_t head_dim, int64_t conv_kernel);
  // `tp_size` > 1: this rank's share of the heads (the state is sharded by head).
  static std::unique_ptr<KdaStatePool> for_model(const ModelConfig& cfg, int64_t num_slots, int tp_size = 1);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t conv_floats() const { return 3 * heads_ * head_dim_ * (conv_kernel_ - 1); }
  int64_t recurrent_floats() const { return heads_ * head_dim_ * head_dim_; }
  int64_t layer_floats() const { return conv_floats() + recurrent_floats(); }
  int64_t slot_floats() const { return num_layers_ * layer_floats(); }

  float* conv(int32_t slot, int64_t layer) { return slot_base(slot) + layer * layer_floats(); }
  float* recurrent(int32_t slot, int64_t layer) { return conv(slot, layer) + conv_floats(); }
  float* slot_base(int32_t slot) { return data_.data() + static_cast<int64_t>(slot) * slot_floats(); }
  const float* slot_base(int32_t slot) const { return data_.data() + static_cast<int64_t>(slot) * slot_floats(); }
  void zero(int32_t slot);

  bool can_allocate() const;
  Result<int32_t> allocate();
  Status free(int32_t slot);
  int64_t free_slots() const;
  int64_t used_slots() const { return num_slots_ - free_slots(); }

 private:
  int64_t num_layers_, num_slots_, heads_, head_dim_, conv_kernel_;
  std::vector<float> data_;
  mutable std::mutex mu_;
  std::vector<int32_t> free_list_;
  std::vector<uint8_t> in_use_;
};

struct ModelCaches {
  MlaKvPool* kv = nullptr;
  KdaStatePool* state = nullptr;
};

}  // namespace pdserve
