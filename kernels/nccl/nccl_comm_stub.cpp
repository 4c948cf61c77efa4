// The device communicator in a build that found no nccl.h: every factory says so.
#include "nccl/device_comm.h"

namespace pdserve::cuda {

namespace {
Status no_nccl() {
  return unsupported("tensor parallelism on the GPU needs NCCL, and this build found no nccl.h (see docs/operations.md)");
}
}  // namespace

Result<std::vector<uint8_t>> nccl_unique_id() { return no_nccl(); }
Result<std::unique_ptr<DeviceCommunicator>> nccl_join(int, int, const std::vector<uint8_t>&, int) { return no_nccl(); }
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_node_group(const std::vector<uint8_t>&, int, int, int) { return no_nccl(); }
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_group(int) { return no_nccl(); }
std::string nccl_describe() { return no_nccl().message(); }

}  // namespace pdserve::cuda
