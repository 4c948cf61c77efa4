#include "pdserve/model/cache_pools.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pdserve {

MlaKvPool::MlaKvPool(int64_t num_layers, int64_t num_pages, int64_t page_size, int64_t entry_dim, DType dtype)
    : num_layers_(num_layers), num_pages_(num_pages), page_size_(page_size), entry_dim_(entry_dim),
      dtype_(dtype == DType::kBF16 ? DType::kBF16 : DType::kF32), in_use_(num_pages, 0) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    std::fprintf(stderr, "MlaKvPool: dtype %s is not a KV cache dtype (float32 or bfloat16)\n",
                 std::string(dtype_name(dtype)).c_str());
    std::abort();
  }
  data_.assign(static_cast<size_t>(total_bytes()), std::byte{0});  // bf16 0x0000 and fp32 0x00000000 are both +0
  for (int64_t p = num_pages - 1; p >= 0; --p) free_list_.push_back(static_cast<int32_t>(p));
}

std::unique_ptr<MlaKvPool> MlaKvPool::for_model(const ModelConfig& cfg, int64_t num_pages, int64_t page_size, DType dtype) {
  return std::make_unique<MlaKvPool>(cfg.num_mla_layers(), num_pages, page_size, cfg.mla_cache_dim(), dtype);
}

void MlaKvPool::wrong_dtype(const char* accessor) const {
  std::fprintf(stderr, "MlaKvPool::%s called on a %s pool (a bug: the caller must branch on dtype())\n", accessor,
               kv_cache_dtype_name(dtype_));
  std::abort();
}

const char* kv_cache_dtype_name(DType t) { return t == DType::kBF16 ? "bfloat16" : t == DType::kF32 ? "float32" : "?"; }

bool kv_cache_dtype_from_name(std::string_view name, DType* out) {
  if (name == "float32") return *out = DType::kF32, true;
  if (name == "bfloat16") return *out = DType::kBF16, true;
  return false;
}

bool MlaKvPool::can_allocate(int64_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  return n <= static_cast<int64_t>(free_list_.size());
}

Result<std::vector<int32_t>> MlaKvPool::allocate(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n > static_cast<int64_t>(free_list_.size()))
    return resource_exhausted("KV pool: " + std::to_string(n) + " pages requested, " + std::to_string(free_list_.size()) + " free");
  std::vector<int32_t> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(free_list_.back());
    free_list_.pop_back();
    in_use_[out.back()] = 1;
  }
  return out;
}

Status MlaKvPool::free(const std::vector<int32_t>& pages) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t p : pages)
    if (p < 0 || p >= num_pages_ || !in_use_[p]) return internal_error("KV pool: page " + std::to_string(p) + " is not allocated");
  for (int32_t p : pages) {
    in_use_[p] = 0;
    free_list_.push_back(p);
  }
  std::sort(free_list_.begin(), free_list_.end(), std::greater<int32_t>());
  return Status::ok();
}

int64_t MlaKvPool::free_pages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_list_.size());
}

KdaStatePool::KdaStatePool(int64_t num_layers, int64_t num_slots, int64_t heads, int64_t head_dim, int64_t conv_kernel)
    : num_layers_(num_layers), num_slots_(num_slots), heads_(heads), head_dim_(head_dim), conv_kernel_(conv_kernel),
      in_use_(num_slots, 0) {
  data_.assign(static_cast<size_t>(num_slots * slot_floats()), 0.0f);
  for (int64_t s = num_slots - 1; s >= 0; --s) free_list_.push_back(static_cast<int32_t>(s));
}

std::unique_ptr<KdaStatePool> KdaStatePool::for_model(const ModelConfig& cfg, int64_t num_slots, int tp_size) {
  return std::make_unique<KdaStatePool>(cfg.num_kda_layers(), num_slots, cfg.kda_num_heads / tp_size, cfg.kda_head_dim,
                                        cfg.conv_kernel);
}

void KdaStatePool::zero(int32_t slot) { std::fill(slot_base(slot), slot_base(slot) + slot_floats(), 0.0f); }

bool KdaStatePool::can_allocate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !free_list_.empty();
}

Result<int32_t> KdaStatePool::allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_list_.empty()) return resource_exhausted("KDA state pool: all " + std::to_string(num_slots_) + " slots in use");
  int32_t s = free_list_.back();
  free_list_.pop_back();
  in_use_[s] = 1;
  return s;
}

Status KdaStatePool::free(int32_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot < 0 || slot >= num_slots_ || !in_use_[slot]) return internal_error("KDA state pool: slot " + std::to_string(slot) + " is not allocated");
  in_use_[slot] = 0;
  free_list_.push_back(slot);
  std::sort(free_list_.begin(), free_list_.end(), std::greater<int32_t>());
  return Status::ok();
}

int64_t KdaStatePool::free_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_list_.size());
}

}  // namespace pdserve
