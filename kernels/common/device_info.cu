#include <cuda_runtime.h>

#include "device_info.h"

namespace pdserve::cuda {

Result<std::vector<DeviceInfo>> list_devices() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return Status(ErrorCode::kUnavailable, std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem});
  }
  return out;
}

bool have_hopper() {
  auto devs = list_devices();
  if (!devs.is_ok()) return false;
  for (const auto& d : *devs)
    if (d.sm_major == 9 && d.sm_minor == 0) return true;
  return false;
}

}  // namespace pdserve::cuda
