// CudaModel's half of the disaggregation hand-over (device_forward.h): copies pages and a
// state slot between its device pools and the host pools the transfer layer moves. Both sides
// share cache_pools.h's layouts, ids and the MLA pages' dtype (fp32 or bf16: bytes copied as
// they are; a host pool of another dtype is refused), so a run of consecutive pages is one strided copy
// over every MLA layer (cudaMemcpy2D: one row per layer), and a slot is one contiguous copy.
#include "backend/cuda_model.h"
#include "common/cuda_check.h"

namespace pdserve::cuda {

Status CudaModel::check_region(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) const {
  const ModelConfig& c = cfg_;
  if (kv.num_layers() != mla_layers_ || kv.num_pages() != num_pages_ || kv.page_size() != page_size_ ||
      kv.entry_dim() != c.mla_cache_dim())
    return invalid_argument("cuda cache copy: the host page pool's geometry differs from the device's");
  // The bytes are copied as they are: a host pool of another dtype would be reinterpreted.
  if (kv.dtype() != kv_dtype_)
    return invalid_argument(std::string("cuda cache copy: the host page pool holds ") + kv_cache_dtype_name(kv.dtype()) +
                            ", the device pool " + kv_cache_dtype_name(kv_dtype_) + " (kv_cache_dtype must be one value for both)");
  if (state.num_slots() != num_slots_ || state.slot_floats() != slot_floats_)
    return invalid_argument("cuda cache copy: the host state pool's geometry differs from the device's");
  for (int32_t p : region.pages)
    if (p < 0 || p >= num_pages_) return invalid_argument("cuda cache copy: page " + std::to_string(p) + " does not exist");
  if (region.slot >= num_slots_) return invalid_argument("cuda cache copy: slot " + std::to_string(region.slot) + " does not exist");
  return Status::ok();
}

Status CudaModel::copy_region(const CacheRegion& region, uint8_t* host_kv, int64_t host_kv_stride_bytes, float* host_slot, bool to_host) {
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  // Bytes of the pool's dtype (fp32 or bf16): both sides hold the same bits.
  const int64_t page_bytes = page_size_ * cfg_.mla_cache_dim() * kv_elem_bytes();
  const size_t pitch_dev = kv_layer_stride_ * kv_elem_bytes(), pitch_host = host_kv_stride_bytes;
  const int64_t layers = mla_layers_;  // a pipeline stage's pools hold its layers only
  if (layers > 0) {
    for (auto [first, count] : page_runs(region.pages)) {
      uint8_t* dev = static_cast<uint8_t*>(kv_) + first * page_bytes;
      uint8_t* host = host_kv + first * page_bytes;
      const size_t width = static_cast<size_t>(count) * page_bytes;
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
  uint8_t* kv_base = kv.num_layers() > 0 ? kv.layer_bytes(0) : nullptr;
  float* slot = region.slot >= 0 && slot_floats_ > 0 ? state.slot_base(region.slot) : nullptr;
  return copy_region(region, kv_base, kv.layer_stride_bytes(), slot, true);
}

Status CudaModel::upload(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) {
  PDS_RETURN_IF_ERROR(check_region(region, kv, state));
  // The copy only reads the host side; copy_region takes one pointer type for both directions.
  uint8_t* kv_base = kv.num_layers() > 0 ? const_cast<uint8_t*>(kv.layer_bytes(0)) : nullptr;
  float* slot = region.slot >= 0 && slot_floats_ > 0 ? const_cast<float*>(state.slot_base(region.slot)) : nullptr;
  return copy_region(region, kv_base, kv.layer_stride_bytes(), slot, false);
}

}  // namespace pdserve::cuda
