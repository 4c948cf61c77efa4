// CudaModel's half of the disaggregation hand-over (device_forward.h): copies pages and a
// state slot between its device pools and the host pools the transfer layer moves. Both sides
// share cache_pools.h's layouts and ids, so a run of consecutive pages is one strided copy
// over every MLA layer (cudaMemcpy2D: one row per layer), and a slot is one contiguous copy.
#include "backend/cuda_model.h"
#include "common/cuda_check.h"

namespace pdserve::cuda {

Status CudaModel::check_region(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) const {
  const ModelConfig& c = cfg_;
  if (kv.num_layers() != mla_layers_ || kv.num_pages() != num_pages_ || kv.page_size() != page_size_ ||
      kv.entry_dim() != c.mla_cache_dim())
    return invalid_argument("cuda cache copy: the host page pool's geometry differs from the device's");
  if (kv.dtype() != DType::kF32)
    return unsupported("cuda cache copy: kv_cache_dtype bfloat16 is not supported with --device cuda yet (fp32 device cache)");
  if (state.num_slots() != num_slots_ || state.slot_floats() != slot_floats_)
    return invalid_argument("cuda cache copy: the host state pool's geometry differs from the device's");
  for (int32_t p : region.pages)
    if (p < 0 || p >= num_pages_) return invalid_argument("cuda cache copy: page " + std::to_string(p) + " does not exist");
  if (region.slot >= num_slots_) return invalid_argument("cuda cache copy: slot " + std::to_string(region.slot) + " does not exist");
  return Status::ok();
}

Status CudaModel::copy_region(const CacheRegion& region, float* host_kv, int64_t host_kv_stride, float* host_slot, bool to_host) {
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  const int64_t page_floats = page_size_ * cfg_.mla_cache_dim();
  const size_t pitch_dev = kv_layer_stride_ * sizeof(float), pitch_host = host_kv_stride * sizeof(float);
  const int64_t layers = mla_layers_;  // a pipeline stage's pools hold its layers only
  if (layers > 0) {
    for (auto [first, count] : page_runs(region.pages)) {
      float* dev = kv_ + first * page_floats;
      float* host = host_kv + first * page_floats;
      const size_t width = static_cast<size_t>(count) * page_floats * sizeof(float);
      const cudaError_t e = to_host ? cudaMemcpy2DAsync(host, pitch_host, dev, pitch_dev, width, layers, cudaMemcpyDeviceToHost, stream_)
                                    : cudaMemcpy2DAsync(dev, pitch_dev, host, pitch_host, width, layers, cudaMemcpyHostToDevice, stream_);
      PDS_RETURN_IF_ERROR(cuda_status(e, "cuda cache copy (pages)"));
    }
  }
  if (region.slot >= 0 && slot_floats_ > 0) {
    float* dev = state_ + region.slot * slot_floats_;
    const size_t bytes = slot_floats_ * sizeof(float);
    const cudaError_t e = to_host ? cudaMemcpyAsync(host_slot, dev, bytes, cudaMemcpyDeviceToHost, stream_)
                                  : cudaMemcpyAsync(dev, host_slot, bytes, cudaMemcpyHostToDevice, stream_);
    PDS_RETURN_IF_ERROR(cuda_status(e, "cuda cache copy (state slot)"));
  }
  return cuda_status(cudaStreamSynchronize(stream_), "cuda cache copy");
}

Status CudaModel::download(const CacheRegion& region, MlaKvPool& kv, KdaStatePool& state) {
  PDS_RETURN_IF_ERROR(check_region(region, kv, state));
  float* kv_base = kv.num_layers() > 0 ? kv.layer_base(0) : nullptr;
  float* slot = region.slot >= 0 && slot_floats_ > 0 ? state.slot_base(region.slot) : nullptr;
  return copy_region(region, kv_base, kv.layer_stride(), slot, true);
}

Status CudaModel::upload(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) {
  PDS_RETURN_IF_ERROR(check_region(region, kv, state));
  // The copy only reads the host side; copy_region takes one pointer type for both directions.
  float* kv_base = kv.num_layers() > 0 ? const_cast<float*>(kv.layer_base(0)) : nullptr;
  float* slot = region.slot >= 0 && slot_floats_ > 0 ? const_cast<float*>(state.slot_base(region.slot)) : nullptr;
  return copy_region(region, kv_base, kv.layer_stride(), slot, false);
}

}  // namespace pdserve::cuda
