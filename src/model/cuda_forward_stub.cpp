// make_cuda_forward in a build without the CUDA backend (PDSERVE_CUDA=OFF or no nvcc).
#include "pdserve/model/cuda_node_stages.h"
#include "pdserve/model/device_forward.h"
#include "pdserve/model/pipeline.h"

namespace pdserve {

Result<std::unique_ptr<DeviceForward>> make_cuda_forward(std::shared_ptr<const Model>, int64_t, int64_t, int64_t, CudaForwardOptions) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Status check_cuda_devices(int, int) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_tp_forwards(const std::vector<std::shared_ptr<const Model>>&, int64_t,
                                                                          int64_t, int64_t, CudaForwardOptions) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_pp_forwards(const std::vector<std::shared_ptr<const Model>>&, int64_t,
                                                                          int64_t, int64_t, CudaForwardOptions) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_tp_forwards(const std::vector<std::shared_ptr<const Model>>&,
                                                                               const std::vector<uint8_t>&, int, int, int64_t, int64_t, int64_t,
                                                                               CudaForwardOptions) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_pp_forwards(const std::vector<std::shared_ptr<const Model>>&,
                                                                               const std::vector<uint8_t>&, int, int, int64_t, int64_t, int64_t,
                                                                               CudaForwardOptions) {
  return Status(ErrorCode::kUnsupported, "--device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

Result<std::vector<std::unique_ptr<StageChannel>>> make_nccl_pipeline(int) {
  return Status(ErrorCode::kUnsupported, "NCCL pipeline stages: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)");
}

}  // namespace pdserve
