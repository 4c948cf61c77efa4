// ModelWeights (pdserve/model/weights.h) in device memory: fp32 dense tensors, MXFP4 experts
// stacked per layer in moe.h's layout. Owns every allocation; freed with the object.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/moe.h"
#include "moe/moe_decode.h"
#include "pdserve/model/weights.h"

namespace pdserve::cuda {

struct DeviceMat {
  const float* p = nullptr;
  int64_t rows = 0, cols = 0;
};

struct DeviceMlp {
  DeviceMat gate, up, down;
};

struct DeviceLayer {
  LayerKind kind = LayerKind::kKda;
  int64_t pool_layer = 0;  // index among the layers of its kind (MLA or KDA pool)
  const float* input_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* attn_res_score = nullptr;
  const float* mlp_res_score = nullptr;
  // MLA
  DeviceMat q_a, q_b, q, kv_a, kv_b, o, gate;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  // KDA
  DeviceMat kq, kk, kv, f_a, f_b, b, g, g_a, g_b, ko;
  const float *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *a_log = nullptr, *dt_bias = nullptr, *o_norm = nullptr;
  // FFN
  bool is_moe = false;
  DeviceMlp mlp;
  DeviceMat router;
  const float* router_bias = nullptr;
  int64_t expert_begin = 0, local_experts = 0;
  bool quantized = false;
  // MXFP4 experts whose widths fit moe_decode.h's layout are stored only in it (mxfp4_decode,
  // decode_layout true; its bits: moe_decode_bits_for) and run through moe_expert_mlp_decode (and,
  // kBf16 only, the prefill grouped GEMM); others in moe.h's (mxfp4).
  bool decode_layout = false;
  MoeDecodeWeights mxfp4_decode;
  MoeExpertWeights mxfp4;
  MoeDenseWeights dense;
  bool has_shared = false;
  DeviceMlp shared;
  DeviceMat latent_down, latent_up;
  const float* latent_norm = nullptr;
};

class DeviceWeights {
 public:
  DeviceWeights() = default;
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  DeviceWeights(DeviceWeights&& o) noexcept;
  DeviceWeights& operator=(DeviceWeights&& o) noexcept;
  ~DeviceWeights();

  // `span`: a pipeline stage's layers; the others get a placeholder (kind and is_moe only, no
  // memory) and pool_layer counts the stage's own layers, as its pools hold only those.
  // `e4m3_moe_decode`: decode-layout experts in the kFp8 shuffle where moe_decode_bits_for
  // allows (CudaForwardOptions::e4m3_moe_decode), else kBf16.
  static Result<DeviceWeights> upload(const ModelConfig& cfg, const ModelWeights& w, const LayerSpan& span = {},
                                      bool e4m3_moe_decode = false);

  DeviceMat embed, lm_head;
  const float* final_norm = nullptr;
  const float* output_res_score = nullptr;
  std::vector<DeviceLayer> layers;
  size_t bytes() const { return bytes_; }

 private:
  Result<const float*> put(const std::vector<float>& v);
  Result<DeviceMat> put(const ops::DenseMatrix& m);
  Result<const void*> put_bytes(const void* data, size_t n);
  Status put_layer(const ModelConfig& cfg, const LayerWeights& lw, DeviceLayer* dl);
  Status put_moe(const ModelConfig& cfg, const MoeWeights& mw, DeviceLayer* dl);

  std::vector<void*> owned_;
  size_t bytes_ = 0;
  bool e4m3_moe_decode_ = false;
};

}  // namespace pdserve::cuda
