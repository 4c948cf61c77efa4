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
  const bool device = !devices_.empty();
  if (device && size() == 1) return devices_[0]->forward(batch, out);
  auto run_rank = [&](int r, ForwardOutput* o) {
    if (device) return devices_[r]->forward(batch, o);
    ModelCaches c{kv_[r].get(), state_[r].get()};
    return models_[r]->forward(batch, c, o, opts);
  };
  std::vector<Status> st(size());
  std::vector<ForwardOutput> outs(size());
  std::vector<std::thread> threads;
  for (int r = 1; r < size(); ++r) threads.emplace_back([&, r] { st[r] = run_rank(r, &outs[r]); });
  st[0] = run_rank(0, out);
  for (auto& t : threads) t.join();
  for (const Status& s : st) PDS_RETURN_IF_ERROR(s);
  return Status::ok();
}

Status TpModelGroup::set_device_forward(std::unique_ptr<DeviceForward> device) {
  if (size() > 1)
    return invalid_argument("device forward: a group of " + std::to_string(size()) + " ranks needs one device forward per rank");
  devices_.clear();
  devices_.push_back(std::move(device));
  return Status::ok();
}

Status TpModelGroup::set_device_forwards(std::vector<std::unique_ptr<DeviceForward>> devices) {
  if (static_cast<int>(devices.size()) != size())
    return invalid_argument("device forward: " + std::to_string(devices.size()) + " device forwards for " + std::to_string(size()) + " ranks");
  for (const auto& d : devices)
    if (!d) return invalid_argument("device forward: a rank without a device forward");
  devices_ = std::move(devices);
  return Status::ok();
}

Status TpModelGroup::cache_to_host(const CacheRegion& region) {
  if (devices_.empty() || (region.pages.empty() && region.slot < 0)) return Status::ok();
  for (size_t r = 0; r < devices_.size(); ++r) PDS_RETURN_IF_ERROR(devices_[r]->download(region, *kv_[r], *state_[r]));
  return Status::ok();
}

Status TpModelGroup::cache_to_device(const CacheRegion& region) {
  if (devices_.empty() || (region.pages.empty() && region.slot < 0)) return Status::ok();
  for (size_t r = 0; r < devices_.size(); ++r) PDS_RETURN_IF_ERROR(devices_[r]->upload(region, *kv_[r], *state_[r]));
  return Status::ok();
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
