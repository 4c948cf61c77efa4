// The per-request state the engine owns: MLA latent pages and KDA state slots.
// Both pools keep exact accounting (can_allocate / allocate / free, one place that mutates),
// so a test can assert that every page and slot is free again after any sequence of events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "pdserve/core/dtype.h"
#include "pdserve/core/status.h"
#include "pdserve/model/config.h"

namespace pdserve {

// MLA latent cache: [mla_layer][page][page_size][entry_dim], entry = [latent | key part], each
// element in the pool's dtype: kF32 (the default) or kBF16 (serving option kv_cache_dtype;
// half the bytes). A bf16 pool holds values rounded to nearest even when written
// (f32_to_bf16) and reads them back exactly (bf16_to_f32).
// Byte accessors work for both dtypes; the float accessors (layer_base, layer_stride,
// page_floats) are for fp32 pools only and abort on a bf16 pool, the *_bf16 ones the other way.
class MlaKvPool {
 public:
  MlaKvPool(int64_t num_layers, int64_t num_pages, int64_t page_size, int64_t entry_dim, DType dtype = DType::kF32);
  static std::unique_ptr<MlaKvPool> for_model(const ModelConfig& cfg, int64_t num_pages, int64_t page_size,
                                              DType dtype = DType::kF32);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t page_size() const { return page_size_; }
  int64_t entry_dim() const { return entry_dim_; }
  int64_t pages_for_tokens(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  DType dtype() const { return dtype_; }
  int64_t elem_bytes() const { return dtype_size(dtype_); }
  // Elements (of dtype()) per page and per layer; bytes the same.
  int64_t page_elems() const { return page_size_ * entry_dim_; }
  int64_t layer_elems() const { return num_pages_ * page_elems(); }
  int64_t page_bytes() const { return page_elems() * elem_bytes(); }
  int64_t layer_stride_bytes() const { return layer_elems() * elem_bytes(); }
  int64_t total_bytes() const { return num_layers_ * layer_stride_bytes(); }
  uint8_t* layer_bytes(int64_t layer) { return bytes_() + layer * layer_stride_bytes(); }
  const uint8_t* layer_bytes(int64_t layer) const { return bytes_() + layer * layer_stride_bytes(); }
  uint8_t* page_ptr(int64_t layer, int64_t page) { return layer_bytes(layer) + page * page_bytes(); }
  const uint8_t* page_ptr(int64_t layer, int64_t page) const { return layer_bytes(layer) + page * page_bytes(); }

  // fp32 pools only.
  float* layer_base(int64_t layer) { return reinterpret_cast<float*>(layer_bytes(require(DType::kF32, "layer_base", layer))); }
  const float* layer_base(int64_t layer) const {
    return reinterpret_cast<const float*>(layer_bytes(require(DType::kF32, "layer_base", layer)));
  }
  int64_t layer_stride() const { return require(DType::kF32, "layer_stride", layer_elems()); }
  int64_t page_floats() const { return require(DType::kF32, "page_floats", page_elems()); }
  // bf16 pools only (raw bf16 bits).
  uint16_t* layer_base_bf16(int64_t layer) {
    return reinterpret_cast<uint16_t*>(layer_bytes(require(DType::kBF16, "layer_base_bf16", layer)));
  }
  const uint16_t* layer_base_bf16(int64_t layer) const {
    return reinterpret_cast<const uint16_t*>(layer_bytes(require(DType::kBF16, "layer_base_bf16", layer)));
  }

  bool can_allocate(int64_t n) const;
  // n free pages, or kResourceExhausted. Pages are handed out lowest id first.
  Result<std::vector<int32_t>> allocate(int64_t n);
  // Returns pages to the pool; a page that is not allocated is an error (double free).
  Status free(const std::vector<int32_t>& pages);
  int64_t free_pages() const;
  int64_t used_pages() const { return num_pages_ - free_pages(); }

 private:
  // `v` when the pool's dtype is `want`; otherwise a message naming `accessor` and abort().
  int64_t require(DType want, const char* accessor, int64_t v) const {
    if (dtype_ != want) [[unlikely]] wrong_dtype(accessor);
    return v;
  }
  [[noreturn]] void wrong_dtype(const char* accessor) const;
  uint8_t* bytes_() { return reinterpret_cast<uint8_t*>(data_.data()); }
  const uint8_t* bytes_() const { return reinterpret_cast<const uint8_t*>(data_.data()); }

  int64_t num_layers_, num_pages_, page_size_, entry_dim_;
  DType dtype_;
  std::vector<std::byte> data_;  // total_bytes(); operator new's alignment (16) suits both dtypes
  mutable std::mutex mu_;
  std::vector<int32_t> free_list_;  // kept sorted descending so back() is the lowest id
  std::vector<uint8_t> in_use_;
};

// The serving option's spelling: "float32" / "bfloat16" (the layout's kv_dtype uses the same).
const char* kv_cache_dtype_name(DType t);
// false for anything but "float32" / "bfloat16".
bool kv_cache_dtype_from_name(std::string_view name, DType* out);

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
