// dist_check.h in a build without the CUDA backend: no GPUs, and the GPU calls say why.
#include "pdserve/model/dist_check.h"

namespace pdserve {

namespace {
Status no_cuda() { return unsupported("dist-check --device cuda: pdserve was built without CUDA (PDSERVE_CUDA=OFF or no nvcc found)"); }
}  // namespace

int cuda_visible_gpus() { return 0; }
Result<std::vector<uint8_t>> cuda_nccl_unique_id() { return no_cuda(); }
std::string cuda_nccl_describe() { return no_cuda().message(); }
Result<std::vector<RankAllReduceCheck>> cuda_dist_all_reduce_check(const std::vector<uint8_t>&, int, int, int, int64_t) { return no_cuda(); }

}  // namespace pdserve
