#include "tensor_map.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda_check.h"

namespace pdserve::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiled> lookup_encoder() {
  void* sym = nullptr;
  cudaDriverEntryPointQueryResult found{};
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &sym, 12000, cudaEnableDefault, &found),
                                  "tensor map: driver entry point"));
  if (found != cudaDriverEntryPointSuccess || sym == nullptr)
    return internal_error("tensor map: cuTensorMapEncodeTiled not found in the driver");
  return reinterpret_cast<EncodeTiled>(sym);
}

CUtensorMapL2promotion l2_promotion(L2Promotion p) {
  switch (p) {
    case L2Promotion::kNone: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    case L2Promotion::k128: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case L2Promotion::k256: break;
  }
  return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

}  // namespace

Status encode_bf16_tensor_map(CUtensorMap* map, const void* base, int rank, const uint64_t* extent,
                              const uint64_t* stride_bytes, const uint32_t* box, const char* who, L2Promotion promotion) {
  static const Result<EncodeTiled> encoder = lookup_encoder();  // once, thread-safe
  if (!encoder.is_ok()) return encoder.status().with_context(who);
  if (rank < 1 || rank > 5) return invalid_argument(std::string(who) + ": tensor map rank " + std::to_string(rank));
  cuuint64_t ext[5], str[4];
  cuuint32_t bx[5], step[5];
  for (int d = 0; d < rank; ++d) {
    ext[d] = extent[d];
    bx[d] = box[d];
    step[d] = 1;
    if (d + 1 < rank) str[d] = stride_bytes[d];
  }
  const CUresult r = encoder.value()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank), const_cast<void*>(base), ext,
                                     str, bx, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2_promotion(promotion),
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return internal_error(std::string(who) + ": cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return Status::ok();
}

Status encode_u32_tensor_map_2d(CUtensorMap* map, const void* base, const uint64_t* extent, uint64_t stride_bytes, const uint32_t* box,
                                const char* who) {
  static const Result<EncodeTiled> encoder = lookup_encoder();
  if (!encoder.is_ok()) return encoder.status().with_context(who);
  const cuuint64_t ext[2] = {extent[0], extent[1]}, str[1] = {stride_bytes};
  const cuuint32_t bx[2] = {box[0], box[1]}, step[2] = {1, 1};
  const CUresult r = encoder.value()(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<void*>(base), ext, str, bx, step,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return internal_error(std::string(who) + ": cuTensorMapEncodeTiled (u32) failed (" + std::to_string(r) + ")");
  return Status::ok();
}

}  // namespace pdserve::cuda
