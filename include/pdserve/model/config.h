// The validated model configuration: everything the forward reads, from config.json.
// kimi_k3 (multimodal wrapper with text_config) and kimi_linear are both accepted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"

namespace pdserve {

enum class ModelFamily { kKimiK3, kKimiLinear };
enum class MlpActivation { kSiLU, kSiTU };
enum class LayerKind { kKda, kMla };
// How the routed experts are stored. Detected from config.json's quantization_config.
enum class ExpertFormat { kDense, kMxfp4 };

struct ModelConfig {
  ModelFamily family = ModelFamily::kKimiLinear;
  std::string model_type;     // top-level model_type as written
  std::string weight_prefix;  // "language_model.model." (K3) or "model." (Kimi-Linear)
  std::string lm_head_name;   // "language_model.lm_head.weight" or "lm_head.weight"

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // dense MLP (layer 0)
  double rms_norm_eps = 1e-5;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;

  std::vector<LayerKind> layer_kinds;  // per layer, 0-indexed
  std::vector<bool> layer_is_moe;

  // MLA (full attention). NoPE only: no rotary embedding anywhere.
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // the unrotated shared key part
  int64_t v_head_dim = 0;
  bool mla_output_gate = false;
  double mla_lora_norm_eps = 1e-6;  // q_a / kv_a norms use the RMSNorm default

  // KDA (linear attention).
  int64_t kda_num_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t conv_kernel = 0;
  bool kda_full_rank_output_gate = false;  // g_proj (K3) vs g_a/g_b (Kimi-Linear)
  bool has_gate_lower_bound = false;       // K3: g = lb * sigmoid(exp(A) * (f + dt_bias))
  double gate_lower_bound = 0.0;           // else g = -exp(A) * softplus(f + dt_bias)

  // MoE.
  int64_t num_experts = 0;
  int64_t num_experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  double routed_scaling_factor = 1.0;
  bool moe_renormalize = true;
  int64_t routed_expert_hidden_size = 0;  // latent MoE width; equals hidden_size when not latent
  bool latent_moe = false;
  bool latent_moe_norm = false;
  ExpertFormat expert_format = ExpertFormat::kDense;

  MlpActivation activation = MlpActivation::kSiLU;
  double situ_beta = 1.0;
  double situ_linear_beta = 0.0;  // 0: up passes through unchanged

  int64_t attn_res_block_size = 0;  // 0: plain residual stream

  // Derived sizes.
  int64_t q_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t mla_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // 576 for K3
  int64_t kda_proj_dim() const { return kda_num_heads * kda_head_dim; }
  int64_t num_mla_layers() const;
  int64_t num_kda_layers() const;
  bool attn_residuals() const { return attn_res_block_size > 0; }
};

Result<ModelConfig> parse_model_config(const Json& j, const std::string& label);
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace pdserve
