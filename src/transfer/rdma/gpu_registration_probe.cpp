// The system side of gpu_registration.h: run-time lookups only, so nothing here needs the
// CUDA driver or a dma-buf-capable rdma-core at build time. NEVER RUN ON A REAL NIC.
#include <dlfcn.h>
#include <sys/stat.h>

#include "pdserve/transfer/rdma/gpu_registration.h"

namespace pdserve::transfer::rdma {

namespace {

// CUDA driver API values (cuda.h), spelled out so no CUDA header is needed.
constexpr int kCuDevAttrDmaBufSupported = 124;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
using CuInit = int (*)(unsigned);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);

std::string dmabuf_missing() {
  if (!dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr")) return "libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)";
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) return "libcuda.so.1 cannot be loaded (no NVIDIA driver)";
  // The handle stays open: the registration path uses the same library later.
  if (!dlsym(cuda, "cuMemGetHandleForAddressRange")) return "libcuda.so.1 has no cuMemGetHandleForAddressRange (driver older than CUDA 11.7)";
  auto init = reinterpret_cast<CuInit>(dlsym(cuda, "cuInit"));
  auto get = reinterpret_cast<CuDeviceGet>(dlsym(cuda, "cuDeviceGet"));
  auto attr = reinterpret_cast<CuDeviceGetAttribute>(dlsym(cuda, "cuDeviceGetAttribute"));
  if (!init || !get || !attr) return "libcuda.so.1 lacks cuInit / cuDeviceGet / cuDeviceGetAttribute";
  int dev = 0, supported = 0;
  if (init(0) != 0 || get(&dev, 0) != 0) return "cuInit / cuDeviceGet failed (no usable GPU)";
  if (attr(&supported, kCuDevAttrDmaBufSupported, dev) != 0 || !supported)
    return "the GPU driver reports no dma-buf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0; needs the open kernel modules or a newer driver)";
  return "";
}

std::string peermem_missing() {
  struct stat st {};
  if (::stat("/sys/module/nvidia_peermem", &st) == 0) return "";
  return "/sys/module/nvidia_peermem does not exist (`modprobe nvidia-peermem`)";
}

}  // namespace

GpuRegProbe probe_gpu_registration() { return GpuRegProbe{dmabuf_missing(), peermem_missing()}; }

}  // namespace pdserve::transfer::rdma
