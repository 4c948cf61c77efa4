// GPU memory registration on one protection domain, by the way gpu_registration.h chose.
// COMPILED IN CI, NEVER RUN: no RDMA device (nor GPU next to one) has been available.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_qp.h"

namespace pdserve::transfer::rdma {

namespace {

constexpr int kCuMemRangeHandleTypeDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
using CuMemGetHandle = int (*)(void* handle, unsigned long long dptr, size_t size, int type, unsigned long long flags);
using RegDmabufMr = ibv_mr* (*)(ibv_pd*, uint64_t offset, size_t length, uint64_t iova, int fd, int access);

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

Status mr_error(const MemoryRegion& r, const std::string& what, int err) {
  return Status(ErrorCode::kUnavailable, what + " of GPU region '" + r.name + "' (" + std::to_string(r.size) +
                                             " bytes): " + std::strerror(err ? err : EIO));
}

Result<MrPtr> register_dmabuf(ibv_pd* pd, const MemoryRegion& r) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto get_handle = cuda ? reinterpret_cast<CuMemGetHandle>(dlsym(cuda, "cuMemGetHandleForAddressRange")) : nullptr;
  auto reg = reinterpret_cast<RegDmabufMr>(dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr"));
  if (!get_handle || !reg) return unsupported("dma-buf entry points vanished since the probe (libcuda.so.1 / libibverbs)");
  // The export works on whole host pages; the MR then starts `offset` into the dma-buf and is
  // addressed by the region's own device address (iova), like a host MR by its pointer.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t base = reinterpret_cast<uint64_t>(r.base);
  const uint64_t start = base & ~(page - 1);
  const uint64_t end = (base + r.size + page - 1) & ~(page - 1);
  int fd = -1;
  if (int rc = get_handle(&fd, start, end - start, kCuMemRangeHandleTypeDmaBufFd, 0); rc != 0 || fd < 0)
    return Status(ErrorCode::kUnavailable, "cuMemGetHandleForAddressRange of GPU region '" + r.name + "' failed (CUresult " +
                                               std::to_string(rc) + ")");
  MrPtr mr(reg(pd, base - start, r.size, base, fd, kAccess));
  const int err = errno;
  ::close(fd);  // the MR holds its own reference to the dma-buf
  if (!mr) return mr_error(r, "ibv_reg_dmabuf_mr", err);
  return mr;
}

}  // namespace

Result<MrPtr> register_gpu_region(ibv_pd* pd, const MemoryRegion& region, GpuRegPath path) {
  if (path == GpuRegPath::kDmaBuf) return register_dmabuf(pd, region);
  // nvidia-peermem: the kernel module resolves device pointers inside ibv_reg_mr.
  MrPtr mr(ibv_reg_mr(pd, region.base, region.size, kAccess));
  if (!mr) return mr_error(region, "ibv_reg_mr (nvidia-peermem)", errno);
  return mr;
}

}  // namespace pdserve::transfer::rdma
