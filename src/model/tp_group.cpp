#include "pdserve/model/tp_group.h"

#include <thread>

namespace pdserve {

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load(const std::string& dir, int tp_size, int64_t num_pages,
                                                         int64_t page_size, int64_t num_slots) {
  PDS_ASSIGN_OR_RETURN(auto g, load_models(dir, tp_size));
  g->make_pools(num_pages, page_size, num_slots);
  return g;
}

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load_models(const std::string& dir, int tp_size) {
  if (tp_size < 1) return invalid_argument("tensor parallel size must be at least 1");
  std::unique_ptr<TpModelGroup> g(new TpModelGroup());
  g->comms_ = make_in_process_group(tp_size);
  for (int r = 0; r < tp_size; ++r) {
    PDS_ASSIGN_OR_RETURN(auto m, Model::load(dir, ShardSpec{r, tp_size}, g->comms_[r].get()));
    g->models_.push_back(std::move(m));
  }
  return g;
}

std::unique_ptr<TpModelGroup> TpModelGroup::from_model(std::shared_ptr<const Model> model) {
  std::unique_ptr<TpModelGroup> g(new TpModelGroup());
  g->models_.push_back(std::move(model));
  return g;
}

void TpModelGroup::make_pools(int64_t num_pages, int64_t page_size, int64_t num_slots) {
  kv_.clear();
  state_.clear();
  for (int r = 0; r < size(); ++r) {
    kv_.push_back(MlaKvPool::for_model(config(), num_pages, page_size));
    state_.push_back(KdaStatePool::for_model(config(), num_slots, size()));
  }
}

Status TpModelGroup::forward(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts) {
  // Validate once up front: a rank that refused a batch would leave the others waiting in a
  // collective forever.
  for (int r = 0; r < size(); ++r) PDS_RETURN_IF_ERROR(models_[r]->validate(batch, ModelCaches{kv_[r].get(), state_[r].get()}));
  if (device_) return device_->forward(batch, out);
  std::vector<Status> st(size());
  std::vector<ForwardOutput> outs(size());
  std::vector<std::thread> threads;
  for (int r = 1; r < size(); ++r)
    threads.emplace_back([&, r] {
      ModelCaches c{kv_[r].get(), state_[r].get()};
      st[r] = models_[r]->forward(batch, c, &outs[r], opts);
    });
  ModelCaches c0{kv_[0].get(), state_[0].get()};
  st[0] = models_[0]->forward(batch, c0, out, opts);
  for (auto& t : threads) t.join();
  for (const Status& s : st) PDS_RETURN_IF_ERROR(s);
  return Status::ok();
}

Status TpModelGroup::set_device_forward(std::unique_ptr<DeviceForward> device) {
  if (size() > 1)
    return unsupported("device forward: tensor parallelism (tp " + std::to_string(size()) + ") is not supported on the device yet; use --tp 1");
  device_ = std::move(device);
  return Status::ok();
}

Status TpModelGroup::cache_to_host(const CacheRegion& region) {
  if (!device_ || (region.pages.empty() && region.slot < 0)) return Status::ok();
  return device_->download(region, *kv_[0], *state_[0]);
}

Status TpModelGroup::cache_to_device(const CacheRegion& region) {
  if (!device_ || (region.pages.empty() && region.slot < 0)) return Status::ok();
  return device_->upload(region, *kv_[0], *state_[0]);
}

Result<std::vector<int32_t>> TpModelGroup::allocate_pages(int64_t n) {
  PDS_ASSIGN_OR_RETURN(auto pages, kv_[0]->allocate(n));
  for (int r = 1; r < size(); ++r) {
    auto mirror = kv_[r]->allocate(n);
    if (!mirror.is_ok() || *mirror != pages) return internal_error("TP group: page pools out of step");
  }
  return pages;
}

Status TpModelGroup::free_pages(const std::vector<int32_t>& pages) {
  for (auto& kv : kv_) PDS_RETURN_IF_ERROR(kv->free(pages));
  return Status::ok();
}

Result<int32_t> TpModelGroup::allocate_slot() {
  PDS_ASSIGN_OR_RETURN(int32_t slot, state_[0]->allocate());
  for (int r = 1; r < size(); ++r) {
    auto mirror = state_[r]->allocate();
    if (!mirror.is_ok() || *mirror != slot) return internal_error("TP group: state pools out of step");
  }
  return slot;
}

Status TpModelGroup::free_slot(int32_t slot) {
  for (auto& s : state_) PDS_RETURN_IF_ERROR(s->free(slot));
  return Status::ok();
}

}  // namespace pdserve
