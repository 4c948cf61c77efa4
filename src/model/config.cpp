#include "pdserve/model/config.h"

#include <algorithm>
#include <set>

#include "pdserve/core/file_util.h"

namespace pdserve {

int64_t ModelConfig::num_mla_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kMla);
}
int64_t ModelConfig::num_kda_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kKda);
}

namespace {

// Reads the first of several spellings (hub schema vs DeepSeek-style names).
Result<int64_t> int_alias(const JsonFields& f, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (f.has(k)) return f.get_int(k);
  return f.error(*keys.begin(), "is missing");
}

Status positive(const JsonFields& f, const char* key, int64_t v) {
  if (v <= 0) return f.error(key, "must be positive, got " + std::to_string(v));
  return Status::ok();
}

Status parse_layer_kinds(const JsonFields& text, ModelConfig& c) {
  PDS_ASSIGN_OR_RETURN(JsonFields lac, text.get_object("linear_attn_config"));
  PDS_ASSIGN_OR_RETURN(auto kda, lac.get_int_list("kda_layers"));
  PDS_ASSIGN_OR_RETURN(auto full, lac.get_int_list("full_attn_layers"));
  // Both lists are 1-indexed in the published configs.
  std::vector<int> seen(c.num_layers, 0);
  for (int64_t l : kda) {
    if (l < 1 || l > c.num_layers) return lac.error("kda_layers", "has layer " + std::to_string(l) + " outside 1.." + std::to_string(c.num_layers));
    seen[l - 1] |= 1;
  }
  for (int64_t l : full) {
    if (l < 1 || l > c.num_layers) return lac.error("full_attn_layers", "has layer " + std::to_string(l) + " outside 1.." + std::to_string(c.num_layers));
    seen[l - 1] |= 2;
  }
  c.layer_kinds.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (seen[i] == 3) return lac.error("kda_layers", "and full_attn_layers both list layer " + std::to_string(i + 1));
    if (seen[i] == 0) return lac.error("kda_layers", "and full_attn_layers both omit layer " + std::to_string(i + 1));
    c.layer_kinds[i] = seen[i] == 1 ? LayerKind::kKda : LayerKind::kMla;
  }
  PDS_ASSIGN_OR_RETURN(c.kda_num_heads, lac.get_int("num_heads"));
  PDS_ASSIGN_OR_RETURN(c.kda_head_dim, lac.get_int("head_dim"));
  PDS_ASSIGN_OR_RETURN(c.conv_kernel, lac.get_int("short_conv_kernel_size"));
  PDS_RETURN_IF_ERROR(positive(lac, "num_heads", c.kda_num_heads));
  PDS_RETURN_IF_ERROR(positive(lac, "head_dim", c.kda_head_dim));
  if (c.conv_kernel < 2 || c.conv_kernel > 8) return lac.error("short_conv_kernel_size", "must be in 2..8");
  PDS_ASSIGN_OR_RETURN(c.kda_full_rank_output_gate, lac.get_bool("use_full_rank_gate", false));
  if (lac.has("gate_lower_bound")) {
    PDS_ASSIGN_OR_RETURN(c.gate_lower_bound, lac.get_double("gate_lower_bound"));
    if (c.gate_lower_bound >= 0) return lac.error("gate_lower_bound", "must be negative");
    c.has_gate_lower_bound = true;
  }
  return Status::ok();
}

Status parse_mla(const JsonFields& t, ModelConfig& c) {
  PDS_ASSIGN_OR_RETURN(c.num_heads, t.get_int("num_attention_heads"));
  PDS_RETURN_IF_ERROR(positive(t, "num_attention_heads", c.num_heads));
  PDS_ASSIGN_OR_RETURN(c.q_lora_rank, t.get_int("q_lora_rank", 0));
  PDS_ASSIGN_OR_RETURN(c.kv_lora_rank, t.get_int("kv_lora_rank"));
  PDS_ASSIGN_OR_RETURN(c.qk_nope_head_dim, t.get_int("qk_nope_head_dim"));
  PDS_ASSIGN_OR_RETURN(c.qk_rope_head_dim, t.get_int("qk_rope_head_dim"));
  PDS_ASSIGN_OR_RETURN(c.v_head_dim, t.get_int("v_head_dim"));
  PDS_RETURN_IF_ERROR(positive(t, "kv_lora_rank", c.kv_lora_rank));
  PDS_RETURN_IF_ERROR(positive(t, "qk_nope_head_dim", c.qk_nope_head_dim));
  PDS_RETURN_IF_ERROR(positive(t, "v_head_dim", c.v_head_dim));
  if (c.qk_rope_head_dim < 0) return t.error("qk_rope_head_dim", "must not be negative");
  if (c.q_lora_rank < 0) return t.error("q_lora_rank", "must not be negative");
  if (t.has("num_key_value_heads")) {
    PDS_ASSIGN_OR_RETURN(int64_t kvh, t.get_int("num_key_value_heads"));
    if (kvh != c.num_heads) return t.error("num_key_value_heads", "must equal num_attention_heads for MLA");
  }
  PDS_ASSIGN_OR_RETURN(bool nope, t.get_bool("mla_use_nope", false));
  if (!nope) return t.error("mla_use_nope", "must be true: only the NoPE MLA of Kimi models is supported");
  PDS_ASSIGN_OR_RETURN(c.mla_output_gate, t.get_bool("mla_use_output_gate", false));
  return Status::ok();
}

Status parse_moe(const JsonFields& t, ModelConfig& c) {
  PDS_ASSIGN_OR_RETURN(c.num_experts, int_alias(t, {"num_experts", "n_routed_experts"}));
  PDS_ASSIGN_OR_RETURN(c.num_experts_per_token, int_alias(t, {"num_experts_per_token", "num_experts_per_tok"}));
  PDS_RETURN_IF_ERROR(positive(t, "num_experts", c.num_experts));
  if (c.num_experts_per_token <= 0 || c.num_experts_per_token > c.num_experts)
    return t.error("num_experts_per_token", "must be in 1..num_experts, got " + std::to_string(c.num_experts_per_token));
  if (t.has("num_shared_experts") || t.has("n_shared_experts")) {
    PDS_ASSIGN_OR_RETURN(c.num_shared_experts, int_alias(t, {"num_shared_experts", "n_shared_experts"}));
  }
  if (c.num_shared_experts < 0) return t.error("num_shared_experts", "must not be negative");
  PDS_ASSIGN_OR_RETURN(c.moe_intermediate_size, t.get_int("moe_intermediate_size"));
  PDS_RETURN_IF_ERROR(positive(t, "moe_intermediate_size", c.moe_intermediate_size));
  PDS_ASSIGN_OR_RETURN(c.first_k_dense_replace, t.get_int("first_k_dense_replace", 0));
  PDS_ASSIGN_OR_RETURN(c.moe_layer_freq, t.get_int("moe_layer_freq", 1));
  PDS_RETURN_IF_ERROR(positive(t, "moe_layer_freq", c.moe_layer_freq));
  PDS_ASSIGN_OR_RETURN(c.routed_scaling_factor, t.get_double("routed_scaling_factor", 1.0));
  PDS_ASSIGN_OR_RETURN(c.moe_renormalize, t.get_bool("moe_renormalize", true));
  PDS_ASSIGN_OR_RETURN(std::string act, t.get_string("moe_router_activation_func", "sigmoid"));
  if (act != "sigmoid") return t.error("moe_router_activation_func", "must be \"sigmoid\" (noaux_tc routing), got \"" + act + "\"");
  int64_t groups = 1;
  if (t.has("num_expert_group") || t.has("n_group")) {
    PDS_ASSIGN_OR_RETURN(groups, int_alias(t, {"num_expert_group", "n_group"}));
  }
  if (groups != 1) return t.error("num_expert_group", "must be 1 (grouped routing is not supported), got " + std::to_string(groups));
  PDS_ASSIGN_OR_RETURN(c.routed_expert_hidden_size, t.get_int("routed_expert_hidden_size", 0));
  c.latent_moe = c.routed_expert_hidden_size > 0;
  if (!c.latent_moe) c.routed_expert_hidden_size = c.hidden_size;
  PDS_ASSIGN_OR_RETURN(c.latent_moe_norm, t.get_bool("latent_moe_use_norm", false));
  if (c.latent_moe_norm && !c.latent_moe) return t.error("latent_moe_use_norm", "needs routed_expert_hidden_size");
  c.layer_is_moe.assign(c.num_layers, false);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_is_moe[i] = i >= c.first_k_dense_replace && i % c.moe_layer_freq == 0;
  return Status::ok();
}

Status parse_activation(const JsonFields& t, ModelConfig& c) {
  PDS_ASSIGN_OR_RETURN(std::string act, t.get_string("hidden_act", "silu"));
  if (act == "silu") {
    c.activation = MlpActivation::kSiLU;
  } else if (act == "situ") {
    c.activation = MlpActivation::kSiTU;
    PDS_ASSIGN_OR_RETURN(c.situ_beta, t.get_double("activation_situ_beta", 1.0));
    PDS_ASSIGN_OR_RETURN(c.situ_linear_beta, t.get_double("activation_situ_linear_beta", 0.0));
    if (c.situ_beta <= 0) return t.error("activation_situ_beta", "must be positive");
    if (c.situ_linear_beta < 0) return t.error("activation_situ_linear_beta", "must not be negative");
  } else {
    return t.error("hidden_act", "must be \"silu\" or \"situ\", got \"" + act + "\"");
  }
  return Status::ok();
}

Status parse_quantization(const Json& root, const JsonFields& text, ModelConfig& c) {
  const Json* q = nullptr;
  if (text.has("quantization_config")) q = &text.json().at("quantization_config");
  else if (root.is_object() && root.contains("quantization_config") && !root["quantization_config"].is_null()) q = &root["quantization_config"];
  c.expert_format = ExpertFormat::kDense;
  if (!q) return Status::ok();
  JsonFields qf(*q, text.where() + ".quantization_config");
  PDS_ASSIGN_OR_RETURN(std::string method, qf.get_string("quant_method", ""));
  PDS_ASSIGN_OR_RETURN(std::string format, qf.get_string("format", ""));
  if (method != "compressed-tensors") return qf.error("quant_method", "must be \"compressed-tensors\", got \"" + method + "\"");
  if (format != "mxfp4-pack-quantized")
    return qf.error("format", "\"" + format + "\" is not supported yet; only \"mxfp4-pack-quantized\" routed experts are");
  c.expert_format = ExpertFormat::kMxfp4;
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const Json& root, const std::string& label) {
  if (!root.is_object()) return invalid_argument(label + ": not a JSON object");
  JsonFields top(root, label);
  PDS_ASSIGN_OR_RETURN(std::string model_type, top.get_string("model_type"));
  ModelConfig c;
  c.model_type = model_type;
  const Json* text_json = &root;
  std::string text_label = label;
  if (model_type == "kimi_k3") {
    if (!top.has("text_config") || !root["text_config"].is_object()) return top.error("text_config", "is missing (kimi_k3 wraps the text model in text_config)");
    text_json = &root["text_config"];
    text_label = label + ".text_config";
    c.weight_prefix = "language_model.model.";
    c.lm_head_name = "language_model.lm_head.weight";
  } else if (model_type == "kimi_linear") {
    c.weight_prefix = "model.";
    c.lm_head_name = "lm_head.weight";
  } else {
    return top.error("model_type", "must be \"kimi_k3\" or \"kimi_linear\", got \"" + model_type + "\"");
  }
  JsonFields t(*text_json, text_label);
  PDS_ASSIGN_OR_RETURN(c.vocab_size, t.get_int("vocab_size"));
  PDS_ASSIGN_OR_RETURN(c.hidden_size, t.get_int("hidden_size"));
  PDS_ASSIGN_OR_RETURN(c.num_layers, t.get_int("num_hidden_layers"));
  PDS_ASSIGN_OR_RETURN(c.intermediate_size, t.get_int("intermediate_size"));
  PDS_RETURN_IF_ERROR(positive(t, "vocab_size", c.vocab_size));
  PDS_RETURN_IF_ERROR(positive(t, "hidden_size", c.hidden_size));
  PDS_RETURN_IF_ERROR(positive(t, "num_hidden_layers", c.num_layers));
  PDS_RETURN_IF_ERROR(positive(t, "intermediate_size", c.intermediate_size));
  if (c.num_layers > 4096) return t.error("num_hidden_layers", "is implausibly large");
  PDS_ASSIGN_OR_RETURN(c.rms_norm_eps, t.get_double("rms_norm_eps", 1e-5));
  if (c.rms_norm_eps <= 0) return t.error("rms_norm_eps", "must be positive");
  PDS_ASSIGN_OR_RETURN(c.max_position_embeddings, t.get_int("max_position_embeddings", 1 << 20));
  PDS_ASSIGN_OR_RETURN(c.tie_word_embeddings, t.get_bool("tie_word_embeddings", false));
  if (model_type == "kimi_k3") {
    PDS_ASSIGN_OR_RETURN(std::string inner, t.get_string("model_type", "kimi_linear"));
    if (inner != "kimi_linear") return t.error("model_type", "must be \"kimi_linear\" inside text_config, got \"" + inner + "\"");
    c.family = ModelFamily::kKimiK3;
  } else {
    c.family = ModelFamily::kKimiLinear;
  }
  PDS_RETURN_IF_ERROR(parse_layer_kinds(t, c));
  PDS_RETURN_IF_ERROR(parse_mla(t, c));
  PDS_RETURN_IF_ERROR(parse_moe(t, c));
  PDS_RETURN_IF_ERROR(parse_activation(t, c));
  PDS_RETURN_IF_ERROR(parse_quantization(root, t, c));
  PDS_ASSIGN_OR_RETURN(c.attn_res_block_size, t.get_int("attn_res_block_size", 0));
  if (c.attn_res_block_size < 0) return t.error("attn_res_block_size", "must not be negative");
  if (c.expert_format == ExpertFormat::kMxfp4 && (c.routed_expert_hidden_size % 32 || c.moe_intermediate_size % 32))
    return t.error("moe_intermediate_size", "and routed_expert_hidden_size must be multiples of 32 for MXFP4 experts");
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  std::string path = join_path(model_dir, "config.json");
  PDS_ASSIGN_OR_RETURN(Json j, load_json_file(path));
  return parse_model_config(j, path);
}

}  // namespace pdserve
