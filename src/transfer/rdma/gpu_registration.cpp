#include "pdserve/transfer/rdma/gpu_registration.h"

namespace pdserve::transfer::rdma {

const char* gpu_reg_path_name(GpuRegPath p) { return p == GpuRegPath::kDmaBuf ? "dma-buf" : "nvidia-peermem"; }

Result<GpuRegChoice> choose_gpu_registration(const GpuRegProbe& probe) {
  if (probe.dmabuf_missing.empty()) {
    std::string why = "GPU memory registered through dma-buf (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr)";
    if (probe.peermem_missing.empty()) why += "; nvidia-peermem is loaded too but not needed";
    return GpuRegChoice{GpuRegPath::kDmaBuf, why};
  }
  if (probe.peermem_missing.empty())
    return GpuRegChoice{GpuRegPath::kPeerMem,
                        "GPU memory registered through nvidia-peermem (ibv_reg_mr on device pointers); dma-buf unavailable: " +
                            probe.dmabuf_missing};
  return Status(ErrorCode::kUnavailable,
                "the RDMA NICs cannot reach GPU memory: dma-buf: " + probe.dmabuf_missing + "; nvidia-peermem: " + probe.peermem_missing +
                    ". Fix one (a CUDA 11.7+ driver with dma-buf support and rdma-core 34+, or `modprobe nvidia-peermem`), "
                    "or keep the transfer pools in host memory");
}

}  // namespace pdserve::transfer::rdma
