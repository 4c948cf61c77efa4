// What CUDA devices this process sees. Host-only header: no CUDA types leak out.
#pragma once

#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  size_t total_memory = 0;
};

// The visible devices, or an error that says why none can be used (no driver, no GPU).
Result<std::vector<DeviceInfo>> list_devices();
// True when at least one sm_90 device exists: the kernels here are built for it only.
bool have_hopper();

}  // namespace pdserve::cuda
