// A value computed once per GPU and kept (kernel attribute opt-ins, occupancy queries).
// cudaFuncSetAttribute applies to the calling thread's current device only (the per-device
// form, cudaKernelSetAttributeForDevice, says so), while one process drives several GPUs: TP
// ranks and pipeline stages are threads of it. A function-local `static const x = [] {...}()`
// would opt in the first GPU only, and every other GPU's launch of a kernel that needs more
// than 48 KiB of shared memory would then fail. PerDevice runs `make` once for each device it is
// called on (thread-safe) and returns that device's value.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace pdserve::cuda {

inline constexpr int kMaxPerDeviceSlots = 64;

template <typename T>
class PerDevice {
 public:
  template <typename Make>
  T get(Make&& make) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxPerDeviceSlots) return make();  // no slot: every call
    std::call_once(once_[dev], [&] { value_[dev] = make(); });
    return value_[dev];
  }

 private:
  std::once_flag once_[kMaxPerDeviceSlots];
  T value_[kMaxPerDeviceSlots]{};
};

}  // namespace pdserve::cuda
