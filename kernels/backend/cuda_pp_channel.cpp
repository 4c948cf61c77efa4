// make_nccl_pipeline: StageChannel endpoints whose messages travel GPU to GPU over NCCL
// send/recv (stage s on device s). The CPU backend's stages hand host activations, so each
// message is staged host -> device, sent, and copied device -> host on the receiver. The
// CUDA backend's stages do not use this: they send their device buffers (cuda_pp_stage.cpp).
//
// Wire format per message: a 16-byte header {status code, float count}, then the floats when
// the code is kOk. A failure crosses as its code only (NCCL carries bytes, not text).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "nccl/device_comm.h"
#include "pdserve/model/device_forward.h"
#include "pdserve/model/pipeline.h"

namespace pdserve {

namespace {

using cuda::cuda_status;

class NcclStageChannel final : public StageChannel {
 public:
  NcclStageChannel(std::unique_ptr<cuda::DeviceCommunicator> comm, int stages) : comm_(std::move(comm)), stages_(stages) {}
  ~NcclStageChannel() override {
    cudaSetDevice(comm_->device());
    if (buf_) cudaFree(buf_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  int stage() const override { return comm_->rank(); }
  int num_stages() const override { return stages_; }

  Status send(int to, const float* data, int64_t n) override {
    PDS_RETURN_IF_ERROR(prepare(to, n));
    const int64_t header[2] = {0, n};
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(buf_, header, sizeof(header), cudaMemcpyHostToDevice, stream_), "stage send header"));
    PDS_RETURN_IF_ERROR(comm_->send(buf_, sizeof(header), to, stream_));
    float* payload = reinterpret_cast<float*>(static_cast<char*>(buf_) + 16);
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(payload, data, n * sizeof(float), cudaMemcpyHostToDevice, stream_), "stage send copy"));
    PDS_RETURN_IF_ERROR(comm_->send(payload, n * sizeof(float), to, stream_));
    return cuda_status(cudaStreamSynchronize(stream_), "stage send");
  }
  Status send_failure(int to, const Status& why) override {
    PDS_RETURN_IF_ERROR(prepare(to, 0));
    const int64_t header[2] = {static_cast<int64_t>(why.is_ok() ? ErrorCode::kInternal : why.code()), 0};
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(buf_, header, sizeof(header), cudaMemcpyHostToDevice, stream_), "stage send header"));
    PDS_RETURN_IF_ERROR(comm_->send(buf_, sizeof(header), to, stream_));
    return cuda_status(cudaStreamSynchronize(stream_), "stage send failure");
  }
  Status recv(int from, float* data, int64_t n) override {
    PDS_RETURN_IF_ERROR(prepare(from, n));
    int64_t header[2] = {0, 0};
    PDS_RETURN_IF_ERROR(comm_->recv(buf_, sizeof(header), from, stream_));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(header, buf_, sizeof(header), cudaMemcpyDeviceToHost, stream_), "stage recv header"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "stage recv header"));
    if (header[0] != 0)
      return Status(static_cast<ErrorCode>(header[0]), "stage " + std::to_string(from) + " failed this micro-batch (over NCCL)");
    if (header[1] != n)
      return internal_error("stage channel: stage " + std::to_string(from) + " sent " + std::to_string(header[1]) + " floats, stage " +
                            std::to_string(stage()) + " expected " + std::to_string(n));
    float* payload = reinterpret_cast<float*>(static_cast<char*>(buf_) + 16);
    PDS_RETURN_IF_ERROR(comm_->recv(payload, n * sizeof(float), from, stream_));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(data, payload, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "stage recv copy"));
    return cuda_status(cudaStreamSynchronize(stream_), "stage recv");
  }

 private:
  Status prepare(int peer, int64_t n) {
    if (peer < 0 || peer >= stages_ || peer == stage()) return invalid_argument("stage channel: no stage " + std::to_string(peer));
    PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(comm_->device()), "cudaSetDevice"));
    if (!stream_) PDS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    const size_t need = 16 + static_cast<size_t>(n) * sizeof(float);
    if (need > cap_) {
      if (buf_) cudaFree(buf_);
      buf_ = nullptr;
      PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&buf_, need), "cudaMalloc"));
      cap_ = need;
    }
    return Status::ok();
  }
  std::unique_ptr<cuda::DeviceCommunicator> comm_;
  int stages_;
  cudaStream_t stream_ = nullptr;
  void* buf_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace

Result<std::vector<std::unique_ptr<StageChannel>>> make_nccl_pipeline(int stages) {
  PDS_RETURN_IF_ERROR(check_cuda_devices(1, stages));
  PDS_ASSIGN_OR_RETURN(auto comms, cuda::make_nccl_group(stages));
  std::vector<std::unique_ptr<StageChannel>> out;
  for (auto& c : comms) out.push_back(std::make_unique<NcclStageChannel>(std::move(c), stages));
  return out;
}

}  // namespace pdserve
