// pdserve/model/dist_check.h over kernels/nccl: join this node's ranks, all-reduce once, check.
#include "pdserve/model/dist_check.h"

#include <cuda_runtime.h>

#include <thread>

#include "common/cuda_check.h"
#include "nccl/device_comm.h"

namespace pdserve {

int cuda_visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Result<std::vector<uint8_t>> cuda_nccl_unique_id() { return cuda::nccl_unique_id(); }

std::string cuda_nccl_describe() { return cuda::nccl_describe(); }

namespace {

// One rank, on a thread bound to its device: fill with rank + 1, sum over the group, compare.
Result<RankAllReduceCheck> check_rank(cuda::DeviceCommunicator& comm, int world, int64_t elements) {
  PDS_RETURN_IF_ERROR(cuda::cuda_status(cudaSetDevice(comm.device()), "cudaSetDevice"));
  RankAllReduceCheck r;
  r.rank = comm.rank();
  r.device = comm.device();
  r.want = static_cast<float>(world) * (world + 1) / 2;  // exact in fp32 for any world we allow
  std::vector<float> host(elements, static_cast<float>(comm.rank() + 1));
  cuda::DeviceBuffer<float> buf(elements);
  if (!buf.get()) return resource_exhausted("dist-check: cudaMalloc of " + std::to_string(elements) + " floats failed");
  cudaStream_t stream = nullptr;
  PDS_RETURN_IF_ERROR(cuda::cuda_status(cudaStreamCreate(&stream), "cudaStreamCreate"));
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  Status st = cuda::cuda_status(cudaMemcpy(buf.get(), host.data(), elements * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (st.is_ok()) st = cuda::cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
  if (st.is_ok()) st = comm.all_reduce_sum(buf.get(), elements, stream);
  if (st.is_ok()) st = cuda::cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
  if (st.is_ok()) st = cuda::cuda_status(cudaStreamSynchronize(stream), "all-reduce");
  float ms = 0;
  if (st.is_ok()) st = cuda::cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  if (st.is_ok()) st = cuda::cuda_status(cudaMemcpy(host.data(), buf.get(), elements * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  PDS_RETURN_IF_ERROR(st);
  r.ms = ms;
  r.got = host[0];
  for (float v : host) r.mismatches += v != r.want;
  r.ok = r.mismatches == 0;
  return r;
}

}  // namespace

Result<std::vector<RankAllReduceCheck>> cuda_dist_all_reduce_check(const std::vector<uint8_t>& id, int world, int first_rank, int local,
                                                                   int64_t elements) {
  if (elements < 1) return invalid_argument("dist-check: --elements must be >= 1");
  PDS_ASSIGN_OR_RETURN(auto comms, cuda::make_nccl_node_group(id, world, first_rank, local));
  // The all-reduce blocks until every rank of every node enqueued it: one thread per rank.
  std::vector<Result<RankAllReduceCheck>> out(local, Result<RankAllReduceCheck>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < local; ++i) threads.emplace_back([&, i] { out[i] = check_rank(*comms[i], world, elements); });
  for (auto& t : threads) t.join();
  std::vector<RankAllReduceCheck> checks;
  for (auto& r : out) {
    PDS_RETURN_IF_ERROR(r.status());
    checks.push_back(*r);
  }
  return checks;
}

}  // namespace pdserve
