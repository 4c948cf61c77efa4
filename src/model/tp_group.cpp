#include "pdserve/model/tp_group.h"

#include <thread>

namespace pdserve {

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load(const std::string& dir, int tp_size, int64_t num_pages,
                                                         int64_t page_size, int64_t num_slots, int pp_size) {
  PDS_ASSIGN_OR_RETURN(auto g, load_models(dir, tp_size, pp_size));
  g->make_pools(num_pages, page_size, num_slots);
  return g;
}

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load_models(const std::string& dir, int tp_size, int pp_size) {
  return load_stage_models(dir, tp_size, pp_size, 0, pp_size);
}

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load_stage_models(const std::string& dir, int tp_size, int pp_total, int first_stage,
                                                                      int pp_size) {
  if (tp_size < 1) return invalid_argument("tensor parallel size must be at least 1");
  PDS_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(dir));
  PDS_ASSIGN_OR_RETURN(std::vector<LayerSpan> all, plan_pipeline_stages(cfg, pp_total));
  if (pp_size < 1 || first_stage < 0 || first_stage + pp_size > pp_total)
    return invalid_argument("PP group: stages " + std::to_string(first_stage) + ".." + std::to_string(first_stage + pp_size - 1) +
                            " are not in a pipeline of " + std::to_string(pp_total));
  const std::vector<LayerSpan> stages(all.begin() + first_stage, all.begin() + first_stage + pp_size);
  std::unique_ptr<TpModelGroup> g(new TpModelGroup());
  g->tp_ = tp_size;
  g->pp_ = pp_size;
  g->stage0_ = first_stage;
  g->pp_total_ = pp_total;
  // The same split on every node, so every node cuts a batch into the same micro-batches.
  g->micro_batches_ = pp_total;
  for (int s = 0; s < pp_size; ++s)
    for (auto& c : make_in_process_group(tp_size)) g->comms_.push_back(std::move(c));
  if (pp_total > 1) {
    // One pipeline per TP rank: rank r of stage s talks to rank r of stages s - 1 and s + 1.
    g->channels_.resize(static_cast<size_t>(pp_size * tp_size));
    for (int r = 0; r < tp_size; ++r) {
      auto pipe = make_in_process_pipeline(pp_size);
      for (int s = 0; s < pp_size; ++s) g->channels_[s * tp_size + r] = std::move(pipe[s]);
    }
  }
  for (int s = 0; s < pp_size; ++s)
    for (int r = 0; r < tp_size; ++r) {
      PDS_ASSIGN_OR_RETURN(auto m, Model::load(dir, ShardSpec{r, tp_size}, g->comms_[s * tp_size + r].get(), stages[s]));
      g->models_.push_back(std::move(m));
    }
  return g;
}

Result<std::unique_ptr<TpModelGroup>> TpModelGroup::load_node_models(const std::string& dir, int tp_total, int first_rank,
                                                                     std::vector<std::unique_ptr<Communicator>> comms) {
  const int local = static_cast<int>(comms.size());
  if (local < 1 || first_rank < 0 || first_rank + local > tp_total)
    return invalid_argument("TP group: ranks " + std::to_string(first_rank) + ".." + std::to_string(first_rank + local - 1) + " are not in a group of " +
                            std::to_string(tp_total));
  std::unique_ptr<TpModelGroup> g(new TpModelGroup());
  g->tp_ = local;
  g->comms_ = std::move(comms);
  for (int i = 0; i < local; ++i) {
    PDS_ASSIGN_OR_RETURN(auto m, Model::load(dir, ShardSpec{first_rank + i, tp_total}, g->comms_[i].get()));
    g->models_.push_back(std::move(m));
  }
  return g;
}

std::unique_ptr<TpModelGroup> TpModelGroup::from_model(std::shared_ptr<const Model> model) {
  std::unique_ptr<TpModelGroup> g(new TpModelGroup());
  g->models_.push_back(std::move(model));
  return g;
}

void TpModelGroup::make_pools(int64_t num_pages, int64_t page_size, int64_t num_slots, DType kv_dtype) {
  kv_.clear();
  state_.clear();
  stage_kv_.clear();
  stage_state_.clear();
  remote_kv_.clear();
  remote_state_.clear();
  const ModelConfig& c = config();
  for (int r = 0; r < size(); ++r) {
    kv_.push_back(MlaKvPool::for_model(c, num_pages, page_size, kv_dtype));
    state_.push_back(KdaStatePool::for_model(c, num_slots, models_[0]->shard().size));  // heads of the global group
  }
  if (pp_total_ == 1) return;
  for (int s = 0; s < pp_; ++s)
    for (int r = 0; r < tp_; ++r) {
      const Model& m = stage_model(s, r);
      stage_kv_.push_back(std::make_unique<MlaKvPool>(m.stage_mla_layers(), num_pages, page_size, c.mla_cache_dim(), kv_dtype));
      stage_state_.push_back(std::make_unique<KdaStatePool>(m.stage_kda_layers(), num_slots, c.kda_num_heads / tp_, c.kda_head_dim, c.conv_kernel));
    }
}

Status TpModelGroup::set_stage_channels(std::vector<std::unique_ptr<StageChannel>> channels) {
  if (static_cast<int>(channels.size()) != pp_ * tp_ || pp_total_ == 1)
    return invalid_argument("stage channels: " + std::to_string(channels.size()) + " endpoints for " + std::to_string(pp_) + " stages of " +
                            std::to_string(tp_) + " ranks");
  for (int i = 0; i < pp_ * tp_; ++i)
    if (!channels[i] || channels[i]->stage() != stage0_ + i / tp_ || channels[i]->num_stages() != pp_total_)
      return invalid_argument("stage channels: endpoint " + std::to_string(i) + " is not stage " + std::to_string(stage0_ + i / tp_) + "'s");
  channels_ = std::move(channels);
  return Status::ok();
}

Status TpModelGroup::link_stages(std::vector<std::unique_ptr<StageChannel>> up, std::vector<std::unique_ptr<StageChannel>> down) {
  const size_t want_up = stage0_ > 0 ? tp_ : 0, want_down = holds_last_stage() ? 0 : tp_;
  if (up.size() != want_up || down.size() != want_down)
    return invalid_argument("stage links: " + std::to_string(up.size()) + " in and " + std::to_string(down.size()) + " out for stages " +
                            std::to_string(stage0_) + ".." + std::to_string(stage0_ + pp_ - 1) + " of " + std::to_string(pp_total_));
  std::vector<std::unique_ptr<StageChannel>> channels(static_cast<size_t>(pp_ * tp_));
  for (int r = 0; r < tp_; ++r) {
    auto local = make_in_process_pipeline(pp_);
    for (int s = 0; s < pp_; ++s)
      channels[s * tp_ + r] = make_spliced_stage_channel(std::move(local[s]), stage0_, stage0_ + s, pp_total_,
                                                         s == 0 && !up.empty() ? std::move(up[r]) : nullptr,
                                                         s == pp_ - 1 && !down.empty() ? std::move(down[r]) : nullptr);
  }
  return set_stage_channels(std::move(channels));
}

Status TpModelGroup::forward(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts) {
  if (pp_total_ > 1) return forward_pipeline(batch, out, opts);
  // Validate once up front: a rank that refused a batch would leave the others waiting in a
  // collective forever.
  for (int r = 0; r < size(); ++r) PDS_RETURN_IF_ERROR(models_[r]->validate(batch, ModelCaches{kv_[r].get(), state_[r].get()}));
  PDS_RETURN_IF_ERROR(health());
  // The other nodes must run the same batch: send it before ours meets them in a collective.
  if (step_sender_) {
    if (Status st = step_sender_(batch); !st.is_ok()) return break_group(st);
  }
  Status ran = run_local_ranks(batch, out, opts);
  // A lost peer explains whatever the ranks saw after it, so it is the error to report.
  for (const auto& c : comms_)
    if (Status st = c->health(); !st.is_ok()) return break_group(st);
  // Lost during the step (the watcher aborted the collectives): the logits are garbage.
  PDS_RETURN_IF_ERROR(health());
  return ran;
}

Status TpModelGroup::break_group(const Status& why) {
  {
    std::lock_guard<std::mutex> l(broken_mu_);
    if (!broken_.is_ok()) return broken_;
    broken_ = Status(ErrorCode::kInternal, "this instance lost one of its nodes and serves no more (restart every node): " + why.message());
  }
  // Outside the lock: an abort can take a while, and health() must keep answering meanwhile.
  for (const auto& d : devices_) d->abort_collectives();
  return health();
}

Status TpModelGroup::run_local_ranks(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts) {
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

// The device MLA pool holds the host pools' dtype (make_pools): the hand-over copies bytes.
Status TpModelGroup::check_device_dtype(const DeviceForward& d) const {
  if (kv_.empty() || d.kv_cache_dtype() == kv_[0]->dtype()) return Status::ok();
  return invalid_argument(std::string("device forward: its MLA cache holds ") + kv_cache_dtype_name(d.kv_cache_dtype()) +
                          ", the host pools " + kv_cache_dtype_name(kv_[0]->dtype()) + " (kv_cache_dtype must be one value for both)");
}

Status TpModelGroup::set_device_forward(std::unique_ptr<DeviceForward> device) {
  if (pp_total_ > 1) return invalid_argument("device forward: " + std::to_string(pp_) + " pipeline stages need one device forward each");
  if (size() > 1)
    return invalid_argument("device forward: a group of " + std::to_string(size()) + " ranks needs one device forward per rank");
  PDS_RETURN_IF_ERROR(check_device_dtype(*device));
  devices_.clear();
  devices_.push_back(std::move(device));
  return Status::ok();
}

Status TpModelGroup::set_device_forwards(std::vector<std::unique_ptr<DeviceForward>> devices) {
  if (static_cast<int>(devices.size()) != pp_ * size())
    return invalid_argument("device forward: " + std::to_string(devices.size()) + " device forwards for " + std::to_string(pp_ * size()) + " ranks");
  for (const auto& d : devices) {
    if (!d) return invalid_argument("device forward: a rank without a device forward");
    PDS_RETURN_IF_ERROR(check_device_dtype(*d));
  }
  devices_ = std::move(devices);
  return Status::ok();
}

Status TpModelGroup::cache_to_host(const CacheRegion& region) {
  PDS_RETURN_IF_ERROR(download_region(region));
  if (cache_fetcher_ && (!region.pages.empty() || region.slot >= 0)) {
    if (Status st = cache_fetcher_(region); !st.is_ok()) return break_group(st);
  }
  return Status::ok();
}

Status TpModelGroup::download_region(const CacheRegion& region) {
  if (pp_total_ > 1) {
    // Device stages: each stage's device pools -> its host stage pools (same geometry), then
    // the gather of every stage into the whole-model pools the transfer layer reads.
    if (!devices_.empty() && (!region.pages.empty() || region.slot >= 0))
      for (int i = 0; i < pp_ * tp_; ++i)
        PDS_RETURN_IF_ERROR(devices_[i]->download(region, stage_kv(i / tp_, i % tp_), stage_state(i / tp_, i % tp_)));
    move_stage_region(region, true);
    return Status::ok();
  }
  if (devices_.empty() || (region.pages.empty() && region.slot < 0)) return Status::ok();
  for (size_t r = 0; r < devices_.size(); ++r) PDS_RETURN_IF_ERROR(devices_[r]->download(region, *kv_[r], *state_[r]));
  return Status::ok();
}

void TpModelGroup::make_remote_pools(int tp_total) {
  remote_kv_.clear();
  remote_state_.clear();
  for (int r = tp_; r < tp_total; ++r) {
    remote_kv_.push_back(MlaKvPool::for_model(config(), kv_[0]->num_pages(), kv_[0]->page_size(), kv_[0]->dtype()));
    remote_state_.push_back(KdaStatePool::for_model(config(), state_[0]->num_slots(), tp_total));
  }
}

Status TpModelGroup::cache_to_device(const CacheRegion& region) {
  PDS_RETURN_IF_ERROR(upload_region(region));
  if (cache_forwarder_ && (!region.pages.empty() || region.slot >= 0)) {
    if (Status st = cache_forwarder_(region); !st.is_ok()) return break_group(st);
  }
  return Status::ok();
}

Status TpModelGroup::upload_region(const CacheRegion& region) {
  if (pp_total_ > 1) {
    move_stage_region(region, false);
    if (!devices_.empty() && (!region.pages.empty() || region.slot >= 0))
      for (int i = 0; i < pp_ * tp_; ++i)
        PDS_RETURN_IF_ERROR(devices_[i]->upload(region, stage_kv(i / tp_, i % tp_), stage_state(i / tp_, i % tp_)));
    return Status::ok();
  }
  if (devices_.empty() || (region.pages.empty() && region.slot < 0)) return Status::ok();
  for (size_t r = 0; r < devices_.size(); ++r) PDS_RETURN_IF_ERROR(devices_[r]->upload(region, *kv_[r], *state_[r]));
  return Status::ok();
}

Result<std::vector<int32_t>> TpModelGroup::allocate_pages(int64_t n) {
  PDS_ASSIGN_OR_RETURN(auto pages, kv_[0]->allocate(n));
  auto mirror_into = [&](MlaKvPool& kv) {
    auto mirror = kv.allocate(n);
    return mirror.is_ok() && *mirror == pages;
  };
  for (int r = 1; r < size(); ++r)
    if (!mirror_into(*kv_[r])) return internal_error("TP group: page pools out of step");
  for (auto& kv : stage_kv_)
    if (!mirror_into(*kv)) return internal_error("PP group: stage page pools out of step");
  return pages;
}

Status TpModelGroup::free_pages(const std::vector<int32_t>& pages) {
  for (auto& kv : kv_) PDS_RETURN_IF_ERROR(kv->free(pages));
  for (auto& kv : stage_kv_) PDS_RETURN_IF_ERROR(kv->free(pages));
  return Status::ok();
}

Result<int32_t> TpModelGroup::allocate_slot() {
  PDS_ASSIGN_OR_RETURN(int32_t slot, state_[0]->allocate());
  auto mirror_into = [&](KdaStatePool& st) {
    auto mirror = st.allocate();
    return mirror.is_ok() && *mirror == slot;
  };
  for (int r = 1; r < size(); ++r)
    if (!mirror_into(*state_[r])) return internal_error("TP group: state pools out of step");
  for (auto& st : stage_state_)
    if (!mirror_into(*st)) return internal_error("PP group: stage state pools out of step");
  return slot;
}

Status TpModelGroup::free_slot(int32_t slot) {
  for (auto& s : state_) PDS_RETURN_IF_ERROR(s->free(slot));
  for (auto& s : stage_state_) PDS_RETURN_IF_ERROR(s->free(slot));
  return Status::ok();
}

}  // namespace pdserve
