// CudaModel as a pipeline stage (docs/design.md, "Pipeline parallelism for the prefill
// role"): the stage's activations go GPU to GPU over NCCL send/recv on the model's stream,
// from the scratch buffers the layers use, with no host copy of the payload.
//
// One message per micro-batch from stage s to s + 1: a 16-byte header {status code, float
// count}, then, when the code is kOk, the residual stream [T, hidden] and the
// attention-residual snapshots [n, T, hidden] (pipeline.h's stage_activation_floats). The
// receiver reads the header to the host first: a failure crosses as its code (NCCL carries
// bytes, not text), and then no payload follows. That header read is the one host
// synchronisation a stage adds per micro-batch.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda_model.h"
#include "backend/cuda_step.h"
#include "common/cuda_check.h"
#include "pdserve/model/pipeline.h"

namespace pdserve::cuda {

namespace {
constexpr size_t kHeaderBytes = 2 * sizeof(int64_t);
}

Result<std::unique_ptr<CudaModel>> CudaModel::create_stage(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                           int64_t num_slots, int device, std::unique_ptr<DeviceCommunicator> stage_link,
                                                           CudaForwardOptions opts) {
  if (!model) return invalid_argument("cuda backend: no model");
  if (model->shard().size > 1) return unsupported("cuda backend: pipeline stages of several tensor-parallel ranks are not built yet (--tp 1 with --pp)");
  const bool staged = !model->first_stage() || !model->last_stage();
  if (staged && (!stage_link || stage_link->device() != device || stage_link->size() < 2))
    return invalid_argument("cuda backend: a pipeline stage needs a stage link on its device (" + std::to_string(device) + ")");
  PDS_ASSIGN_OR_RETURN(auto m, create(std::move(model), num_pages, page_size, num_slots, device, nullptr, opts));
  if (staged) {
    const bool first = m->first_stage(), last = m->last_stage();
    const int rank = stage_link->rank(), size = stage_link->size();
    if (first != (rank == 0) || last != (rank == size - 1))
      return invalid_argument("cuda backend: stage link rank " + std::to_string(rank) + " of " + std::to_string(size) +
                              " does not match the stage's layers");
    m->stage_link_ = std::move(stage_link);
    m->opts_.graphs = false;  // a stage's step includes NCCL send/recv: not captured
  }
  return m;
}

Status CudaModel::recv_activations(int64_t T, float* x, float* bank, int* bank_count) {
  const int from = stage_link_->rank() - 1;
  stage_received_ = true;  // from here on the upstream message is (being) read
  PDS_ASSIGN_OR_RETURN(unsigned char* hdr, scratch<unsigned char>(kStageHeader, kHeaderBytes));
  PDS_RETURN_IF_ERROR(stage_link_->recv(hdr, kHeaderBytes, from, stream_));
  int64_t h[2] = {0, 0};
  PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(h, hdr, kHeaderBytes, cudaMemcpyDeviceToHost, stream_), "stage recv header"));
  PDS_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "stage recv header"));
  if (h[0] != 0)
    return Status(static_cast<ErrorCode>(h[0]), "pipeline stage " + std::to_string(from) + " failed this micro-batch (its error code crossed NCCL)");
  const int64_t hd = cfg_.hidden_size;
  const int64_t want = stage_activation_floats(cfg_, model_->layers().begin, T);
  if (h[1] != want) {
    // Read what was sent so that the link stays in step, then refuse it.
    PDS_ASSIGN_OR_RETURN(float* sink, scratch<float>(kStageDrain, static_cast<size_t>(std::max<int64_t>(h[1], 1))));
    if (h[1] > 0) PDS_RETURN_IF_ERROR(stage_link_->recv(sink, h[1] * sizeof(float), from, stream_));
    return internal_error("pipeline stage " + std::to_string(from) + " sent " + std::to_string(h[1]) + " floats, stage " +
                          std::to_string(stage_link_->rank()) + " expected " + std::to_string(want));
  }
  const int snapshots = static_cast<int>(want / (T * hd)) - 1;
  PDS_RETURN_IF_ERROR(stage_link_->recv(x, T * hd * sizeof(float), from, stream_));
  if (snapshots > 0) PDS_RETURN_IF_ERROR(stage_link_->recv(bank, snapshots * T * hd * sizeof(float), from, stream_));
  *bank_count = snapshots;
  return Status::ok();
}

Status CudaModel::send_activations(int64_t T, const float* x, const float* bank, int bank_count) {
  const int to = stage_link_->rank() + 1;
  const int64_t hd = cfg_.hidden_size;
  PDS_ASSIGN_OR_RETURN(unsigned char* hdr, scratch<unsigned char>(kStageHeader, kHeaderBytes));
  const int64_t h[2] = {0, (1 + bank_count) * T * hd};
  // Pageable source: the copy is staged before the call returns, so `h` may go.
  PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(hdr, h, kHeaderBytes, cudaMemcpyHostToDevice, stream_), "stage send header"));
  stage_sent_ = true;  // the header is on its way: a failure can no longer replace this message
  PDS_RETURN_IF_ERROR(stage_link_->send(hdr, kHeaderBytes, to, stream_));
  PDS_RETURN_IF_ERROR(stage_link_->send(x, T * hd * sizeof(float), to, stream_));
  if (bank_count > 0) PDS_RETURN_IF_ERROR(stage_link_->send(bank, bank_count * T * hd * sizeof(float), to, stream_));
  // The stage's forward ends when its output has left (send completes once received).
  return cuda_status(cudaStreamSynchronize(stream_), "stage send");
}

Status CudaModel::send_failure(const Status& why) {
  const int to = stage_link_->rank() + 1;
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  PDS_ASSIGN_OR_RETURN(unsigned char* hdr, scratch<unsigned char>(kStageHeader, kHeaderBytes));
  const int64_t h[2] = {static_cast<int64_t>(why.is_ok() ? ErrorCode::kInternal : why.code()), 0};
  PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(hdr, h, kHeaderBytes, cudaMemcpyHostToDevice, stream_), "stage send header"));
  stage_sent_ = true;
  PDS_RETURN_IF_ERROR(stage_link_->send(hdr, kHeaderBytes, to, stream_));
  return cuda_status(cudaStreamSynchronize(stream_), "stage send failure");
}

void CudaModel::drain_upstream(int64_t T) {
  if (cudaSetDevice(device_) != cudaSuccess) return;
  const int64_t hd = cfg_.hidden_size;
  auto x = scratch<float>(kX, static_cast<size_t>(T * hd));
  const int64_t max_bank = cfg_.attn_residuals() ? (cfg_.num_layers + cfg_.attn_res_block_size - 1) / cfg_.attn_res_block_size : 0;
  auto bank = scratch<float>(kBank, static_cast<size_t>(std::max<int64_t>(max_bank, 1) * T * hd));
  if (!x.is_ok() || !bank.is_ok()) return;
  int count = 0;
  (void)recv_activations(T, *x, *bank, &count);  // its result is the failure we report anyway
  (void)cudaStreamSynchronize(stream_);
}

}  // namespace pdserve::cuda
