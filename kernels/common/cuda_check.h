// CUDA error handling as Status values, and a small RAII device buffer for launchers and tests.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  return Status(ErrorCode::kInternal, std::string(what) + ": " + cudaGetErrorString(err));
}

// The launch's own error (bad configuration) or a fault from an earlier asynchronous kernel.
inline Status last_launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // On allocation failure get() is null and size() is n; launchers then fail loudly.
  explicit DeviceBuffer(size_t n) { (void)resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  ~DeviceBuffer() { if (p_) cudaFree(p_); }

  Status resize(size_t n) {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    return n ? cuda_status(cudaMalloc(&p_, n * sizeof(T)), "cudaMalloc") : Status::ok();
  }
  Status upload(const std::vector<T>& v) {
    if (v.size() != n_) PDS_RETURN_IF_ERROR(resize(v.size()));
    return cuda_status(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  Result<std::vector<T>> download() const {
    std::vector<T> v(n_);
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download"));
    return v;
  }
  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pdserve::cuda
