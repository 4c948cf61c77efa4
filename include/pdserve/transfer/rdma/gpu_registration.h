// How the RDMA NICs get at GPU memory (the MLA page pool, the KDA state pool, the aux rows
// when they live on the device): dma-buf (cuMemGetHandleForAddressRange exports the range as
// a dma-buf fd, ibv_reg_dmabuf_mr registers it; needs CUDA 11.7+ with dma-buf support and
// rdma-core 34+) or nvidia-peermem (the kernel module lets a plain ibv_reg_mr take a device
// pointer). Both are looked up at run time (dlopen / dlsym, /sys/module), so the build needs
// neither the driver nor a recent rdma-core. The choice is pure and unit-tested on injected
// probe results; only probe_gpu_registration() touches the system.
// NEVER RUN ON A REAL NIC (docs/disaggregation.md, "RDMA").
#pragma once

#include <string>

#include "pdserve/core/status.h"

namespace pdserve::transfer::rdma {

enum class GpuRegPath { kDmaBuf, kPeerMem };
const char* gpu_reg_path_name(GpuRegPath p);  // "dma-buf", "nvidia-peermem"

// What the probes found; each `*_missing` is empty when that way is available, else why not.
struct GpuRegProbe {
  std::string dmabuf_missing;   // e.g. "libcuda.so.1 has no cuMemGetHandleForAddressRange (driver older than 11.7)"
  std::string peermem_missing;  // e.g. "/sys/module/nvidia_peermem does not exist (modprobe nvidia-peermem)"
};

struct GpuRegChoice {
  GpuRegPath path = GpuRegPath::kDmaBuf;
  std::string reason;  // for the startup log: which way, and why not the other
};

// dma-buf when available (it needs no out-of-tree module), else nvidia-peermem; kUnavailable
// naming both reasons and the fixes when neither is.
Result<GpuRegChoice> choose_gpu_registration(const GpuRegProbe& probe);

// The real probes: dlopen("libcuda.so.1") and its dma-buf entry points and device attribute,
// dlsym("ibv_reg_dmabuf_mr"), and /sys/module/nvidia_peermem.
GpuRegProbe probe_gpu_registration();

}  // namespace pdserve::transfer::rdma
