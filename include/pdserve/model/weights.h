// The model's weights in the layout the CPU forward uses: fp32 copies of the dense tensors,
// MXFP4 experts left packed in the mapped checkpoint. Loaded and shape-checked once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pdserve/model/config.h"
#include "pdserve/model/parallel.h"
#include "pdserve/model/safetensors.h"
#include "pdserve/ops/linear.h"
#include "pdserve/ops/mxfp4.h"

namespace pdserve {

using ops::DenseMatrix;

struct MlaWeights {
  DenseMatrix q_a, q_b, q;  // q_a/q_b when q_lora_rank > 0, else q
  std::vector<float> q_a_norm;
  DenseMatrix kv_a;          // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;
  DenseMatrix kv_b;          // [heads * (nope + v), kv_lora]
  DenseMatrix o;             // [hidden, heads * v]
  DenseMatrix gate;          // output gate [heads * v, hidden], K3 only
};

struct KdaWeights {
  DenseMatrix q, k, v;                  // [P, hidden]
  std::vector<float> conv_q, conv_k, conv_v;  // [P][K]
  std::vector<float> a_log;             // [H]
  std::vector<float> dt_bias;           // [P]
  DenseMatrix f_a, f_b;                 // forget gate, low rank
  DenseMatrix b;                        // beta [H, hidden]
  DenseMatrix g, g_a, g_b;              // output gate: full rank (K3) or low rank
  std::vector<float> o_norm;            // [D]
  DenseMatrix o;                        // [hidden, P]
};

struct MlpWeights {
  DenseMatrix gate, up, down;
};

// A routed expert: dense (bf16 checkpoints) or MXFP4 (compressed-tensors).
struct ExpertWeights {
  bool quantized = false;
  DenseMatrix w1, w2, w3;            // gate, down, up
  ops::Mxfp4Matrix q1, q2, q3;
};

struct MoeWeights {
  DenseMatrix router;                // [E, hidden], replicated: every rank routes every token
  std::vector<float> router_bias;    // [E]
  int64_t expert_begin = 0;          // this rank's experts are [expert_begin, + experts.size())
  std::vector<ExpertWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
  DenseMatrix latent_down, latent_up;  // latent MoE (K3)
  std::vector<float> latent_norm;
};

struct LayerWeights {
  LayerKind kind = LayerKind::kKda;
  std::vector<float> input_norm, post_attn_norm;
  // Attention residuals: the norm weight times the 1-row projection, per block input.
  std::vector<float> attn_res_score, mlp_res_score;
  MlaWeights mla;
  KdaWeights kda;
  bool is_moe = false;
  MlpWeights mlp;
  MoeWeights moe;
};

struct ModelWeights {
  DenseMatrix embed;  // [vocab, hidden]
  std::vector<float> final_norm;
  std::vector<float> output_res_score;
  DenseMatrix lm_head;
  std::vector<LayerWeights> layers;
};

// Reads and checks every tensor the forward needs, only this rank's shard of the split ones;
// vision and unknown tensors are ignored.
// `span`: a pipeline stage loads only its layers (the others stay empty, kind and is_moe set)
// and the embedding / final norm + lm_head only where it is the first / last stage.
Result<ModelWeights> load_model_weights(const ModelConfig& cfg, const WeightStore& store, const ShardSpec& shard = {},
                                        const LayerSpan& span = {});
// Whether `shard` divides every split dimension of the model; the error names the field.
Status check_shardable(const ModelConfig& cfg, const ShardSpec& shard);

}  // namespace pdserve
