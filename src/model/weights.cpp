#include "pdserve/model/weights.h"

namespace pdserve {

namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

class Loader {
 public:
  Loader(const ModelConfig& cfg, const WeightStore& s, const ShardSpec& shard, const LayerSpan& span)
      : cfg_(cfg), store_(s), sh_(shard), span_(span) {}

  // The [rows, cols] tensor `name`, keeping only rows [r0, r1) and columns [c0, c1) (the
  // rank's shard); only those bytes are read from the mapped file.
  Result<DenseMatrix> dense(const std::string& name, int64_t rows, int64_t cols, int64_t r0 = 0, int64_t r1 = -1,
                            int64_t c0 = 0, int64_t c1 = -1) const {
    PDS_ASSIGN_OR_RETURN(const TensorView* t, store_.get(name, {rows, cols}));
    if (!is_float(t->dtype)) return invalid_argument(*t->file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) + ", expected a float type");
    if (r1 < 0) r1 = rows;
    if (c1 < 0) c1 = cols;
    DenseMatrix m;
    m.rows = r1 - r0;
    m.cols = c1 - c0;
    m.data.resize(m.rows * m.cols);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) m.data[(r - r0) * m.cols + (c - c0)] = tensor_float_at(*t, r * cols + c);
    return m;
  }
  Result<DenseMatrix> dense_rows(const std::string& name, int64_t rows, int64_t cols, int64_t r0, int64_t r1) const {
    return dense(name, rows, cols, r0, r1);
  }
  Result<DenseMatrix> dense_cols(const std::string& name, int64_t rows, int64_t cols, int64_t c0, int64_t c1) const {
    return dense(name, rows, cols, 0, -1, c0, c1);
  }

  // A vector of n floats; accepts [n], [1, n] and the other size-n shapes real checkpoints use.
  Result<std::vector<float>> vec(const std::string& name, int64_t n) const {
    const TensorView* t = store_.find(name);
    if (!t) return not_found(store_.dir() + ": tensor '" + name + "' is missing from the checkpoint");
    if (!is_float(t->dtype)) return invalid_argument(*t->file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) + ", expected a float type");
    if (t->numel() != n) return invalid_argument(*t->file + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " + std::to_string(n) + " values");
    return tensor_to_f32(*t);
  }

  Result<std::vector<float>> vec_range(const std::string& name, int64_t n, int64_t b, int64_t e) const {
    PDS_ASSIGN_OR_RETURN(auto all, vec(name, n));
    return std::vector<float>(all.begin() + b, all.begin() + e);
  }

  // A_log: [H], [1, 1, H, 1] (Kimi-Linear) or 1-D zero-padded past H (Kimi-K3 stores [128]).
  Result<std::vector<float>> a_log(const std::string& name, int64_t heads) const {
    const TensorView* t = store_.find(name);
    if (!t) return not_found(store_.dir() + ": tensor '" + name + "' is missing from the checkpoint");
    if (!is_float(t->dtype)) return invalid_argument(*t->file + ": tensor '" + name + "' must be a float type");
    bool padded_1d = t->shape.size() == 1 && t->shape[0] >= heads;
    if (t->numel() != heads && !padded_1d)
      return invalid_argument(*t->file + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(heads) + "], [1, 1, " + std::to_string(heads) + ", 1] or a zero-padded 1-D tensor");
    std::vector<float> all = tensor_to_f32(*t);
    all.resize(heads);
    return all;
  }

  // Conv weight [P, 1, K] or [P, K].
  Result<std::vector<float>> conv(const std::string& name, int64_t p, int64_t k) const {
    const TensorView* t = store_.find(name);
    if (!t) return not_found(store_.dir() + ": tensor '" + name + "' is missing from the checkpoint");
    bool ok = (t->shape == std::vector<int64_t>{p, 1, k}) || (t->shape == std::vector<int64_t>{p, k});
    if (!ok || !is_float(t->dtype)) return invalid_argument(*t->file + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(p) + ", 1, " + std::to_string(k) + "] float");
    return tensor_to_f32(*t);
  }

  Result<ops::Mxfp4Matrix> mxfp4(const std::string& base, int64_t rows, int64_t cols) const {
    PDS_ASSIGN_OR_RETURN(const TensorView* p, store_.get(base + ".weight_packed", {rows, cols / 2}));
    PDS_ASSIGN_OR_RETURN(const TensorView* s, store_.get(base + ".weight_scale", {rows, cols / kMxfp4GroupSize}));
    if (p->dtype != DType::kU8) return invalid_argument(*p->file + ": tensor '" + p->name + "' must be U8 (packed E2M1 nibbles)");
    if (s->dtype != DType::kU8) return invalid_argument(*s->file + ": tensor '" + s->name + "' must be U8 (E8M0 scales)");
    ops::Mxfp4Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.packed = p->data;
    m.scales = s->data;
    return m;
  }

  // Projection [hidden] -> score scalar: norm.weight * proj.weight, as the reference scores it.
  Result<std::vector<float>> res_score(const std::string& norm, const std::string& proj) const {
    PDS_ASSIGN_OR_RETURN(auto w, vec(norm, cfg_.hidden_size));
    PDS_ASSIGN_OR_RETURN(DenseMatrix p, dense(proj, 1, cfg_.hidden_size));
    for (int64_t i = 0; i < cfg_.hidden_size; ++i) w[i] *= p.data[i];
    return w;
  }

  // Split along the intermediate width: gate/up rows and down columns of this rank.
  Result<MlpWeights> mlp(const std::string& pre, int64_t inter) const {
    MlpWeights m;
    const int64_t i0 = sh_.begin(inter), i1 = sh_.end(inter), hd = cfg_.hidden_size;
    PDS_ASSIGN_OR_RETURN(m.gate, dense_rows(pre + "gate_proj.weight", inter, hd, i0, i1));
    PDS_ASSIGN_OR_RETURN(m.up, dense_rows(pre + "up_proj.weight", inter, hd, i0, i1));
    PDS_ASSIGN_OR_RETURN(m.down, dense_cols(pre + "down_proj.weight", hd, inter, i0, i1));
    return m;
  }

  // Heads [h0, h1) of this rank; the latent path (kv_a) is replicated.
  Result<MlaWeights> mla(const std::string& pre) const {
    const ModelConfig& c = cfg_;
    MlaWeights w;
    const int64_t hd = c.hidden_size, nh = c.num_heads, h0 = sh_.begin(nh), h1 = sh_.end(nh);
    const int64_t qd = c.q_head_dim(), kvb = c.qk_nope_head_dim + c.v_head_dim, vd = c.v_head_dim;
    if (c.q_lora_rank > 0) {
      PDS_ASSIGN_OR_RETURN(w.q_a, dense(pre + "q_a_proj.weight", c.q_lora_rank, hd));
      PDS_ASSIGN_OR_RETURN(w.q_a_norm, vec(pre + "q_a_layernorm.weight", c.q_lora_rank));
      PDS_ASSIGN_OR_RETURN(w.q_b, dense_rows(pre + "q_b_proj.weight", nh * qd, c.q_lora_rank, h0 * qd, h1 * qd));
    } else {
      PDS_ASSIGN_OR_RETURN(w.q, dense_rows(pre + "q_proj.weight", nh * qd, hd, h0 * qd, h1 * qd));
    }
    PDS_ASSIGN_OR_RETURN(w.kv_a, dense(pre + "kv_a_proj_with_mqa.weight", c.mla_cache_dim(), hd));
    PDS_ASSIGN_OR_RETURN(w.kv_a_norm, vec(pre + "kv_a_layernorm.weight", c.kv_lora_rank));
    PDS_ASSIGN_OR_RETURN(w.kv_b, dense_rows(pre + "kv_b_proj.weight", nh * kvb, c.kv_lora_rank, h0 * kvb, h1 * kvb));
    PDS_ASSIGN_OR_RETURN(w.o, dense_cols(pre + "o_proj.weight", hd, nh * vd, h0 * vd, h1 * vd));
    if (c.mla_output_gate) {
      PDS_ASSIGN_OR_RETURN(w.gate, dense_rows(pre + "g_proj.weight", nh * vd, hd, h0 * vd, h1 * vd));
    }
    return w;
  }

  // Heads [h0, h1) of this rank: rows of every per-channel projection, the matching conv
  // channels, gate parameters and o_proj columns. f_a / g_a (low rank) are replicated.
  Result<KdaWeights> kda(const std::string& pre) const {
    const ModelConfig& c = cfg_;
    KdaWeights w;
    const int64_t hd = c.hidden_size, p = c.kda_proj_dim(), d = c.kda_head_dim, h = c.kda_num_heads;
    const int64_t h0 = sh_.begin(h), h1 = sh_.end(h), p0 = h0 * d, p1 = h1 * d, k = c.conv_kernel;
    PDS_ASSIGN_OR_RETURN(w.q, dense_rows(pre + "q_proj.weight", p, hd, p0, p1));
    PDS_ASSIGN_OR_RETURN(w.k, dense_rows(pre + "k_proj.weight", p, hd, p0, p1));
    PDS_ASSIGN_OR_RETURN(w.v, dense_rows(pre + "v_proj.weight", p, hd, p0, p1));
    for (auto [name, dst] : {std::pair{"q_conv1d.weight", &w.conv_q}, {"k_conv1d.weight", &w.conv_k}, {"v_conv1d.weight", &w.conv_v}}) {
      PDS_ASSIGN_OR_RETURN(auto all, conv(pre + name, p, k));
      dst->assign(all.begin() + p0 * k, all.begin() + p1 * k);
    }
    PDS_ASSIGN_OR_RETURN(auto a_all, a_log(pre + "A_log", h));
    w.a_log.assign(a_all.begin() + h0, a_all.begin() + h1);
    PDS_ASSIGN_OR_RETURN(w.dt_bias, vec_range(pre + "dt_bias", p, p0, p1));
    PDS_ASSIGN_OR_RETURN(w.f_a, dense(pre + "f_a_proj.weight", d, hd));
    PDS_ASSIGN_OR_RETURN(w.f_b, dense_rows(pre + "f_b_proj.weight", p, d, p0, p1));
    PDS_ASSIGN_OR_RETURN(w.b, dense_rows(pre + "b_proj.weight", h, hd, h0, h1));
    if (c.kda_full_rank_output_gate) {
      PDS_ASSIGN_OR_RETURN(w.g, dense_rows(pre + "g_proj.weight", p, hd, p0, p1));
    } else {
      PDS_ASSIGN_OR_RETURN(w.g_a, dense(pre + "g_a_proj.weight", d, hd));
      PDS_ASSIGN_OR_RETURN(w.g_b, dense_rows(pre + "g_b_proj.weight", p, d, p0, p1));
    }
    PDS_ASSIGN_OR_RETURN(w.o_norm, vec(pre + "o_norm.weight", d));
    PDS_ASSIGN_OR_RETURN(w.o, dense_cols(pre + "o_proj.weight", hd, p, p0, p1));
    return w;
  }

  Result<MoeWeights> moe(const std::string& pre) const {
    const ModelConfig& c = cfg_;
    MoeWeights w;
    const int64_t hd = c.hidden_size, lat = c.routed_expert_hidden_size, im = c.moe_intermediate_size;
    PDS_ASSIGN_OR_RETURN(w.router, dense(pre + "gate.weight", c.num_experts, hd));
    PDS_ASSIGN_OR_RETURN(w.router_bias, vec(pre + "gate.e_score_correction_bias", c.num_experts));
    // Expert parallelism: this rank owns experts [expert_begin, expert_begin + experts.size()).
    w.expert_begin = sh_.begin(c.num_experts);
    w.experts.resize(sh_.local(c.num_experts));
    for (int64_t e = w.expert_begin; e < sh_.end(c.num_experts); ++e) {
      const std::string ep = pre + "experts." + std::to_string(e) + ".";
      ExpertWeights& x = w.experts[e - w.expert_begin];
      // Decide per expert from what is stored, so a config/tensor disagreement is named.
      x.quantized = store_.contains(ep + "w1.weight_packed");
      if (x.quantized != (c.expert_format == ExpertFormat::kMxfp4)) {
        return invalid_argument(store_.dir() + ": expert tensor '" + ep + "w1" + (x.quantized ? ".weight_packed" : ".weight") +
                                "' does not match quantization_config (" + (c.expert_format == ExpertFormat::kMxfp4 ? "mxfp4" : "none") + ")");
      }
      if (x.quantized) {
        PDS_ASSIGN_OR_RETURN(x.q1, mxfp4(ep + "w1", im, lat));
        PDS_ASSIGN_OR_RETURN(x.q3, mxfp4(ep + "w3", im, lat));
        PDS_ASSIGN_OR_RETURN(x.q2, mxfp4(ep + "w2", lat, im));
      } else {
        PDS_ASSIGN_OR_RETURN(x.w1, dense(ep + "w1.weight", im, lat));
        PDS_ASSIGN_OR_RETURN(x.w3, dense(ep + "w3.weight", im, lat));
        PDS_ASSIGN_OR_RETURN(x.w2, dense(ep + "w2.weight", lat, im));
      }
    }
    if (c.num_shared_experts > 0) {
      w.has_shared = true;
      PDS_ASSIGN_OR_RETURN(w.shared, mlp(pre + "shared_experts.", im * c.num_shared_experts));
    }
    if (c.latent_moe) {
      PDS_ASSIGN_OR_RETURN(w.latent_down, dense(pre + "routed_expert_down_proj.weight", lat, hd));
      PDS_ASSIGN_OR_RETURN(w.latent_up, dense(pre + "routed_expert_up_proj.weight", hd, lat));
      if (c.latent_moe_norm) {
        PDS_ASSIGN_OR_RETURN(w.latent_norm, vec(pre + "routed_expert_norm.weight", lat));
      }
    }
    return w;
  }

  Result<LayerWeights> layer(int64_t i) const {
    const ModelConfig& c = cfg_;
    const std::string pre = c.weight_prefix + "layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.kind = c.layer_kinds[i];
    PDS_ASSIGN_OR_RETURN(l.input_norm, vec(pre + "input_layernorm.weight", c.hidden_size));
    PDS_ASSIGN_OR_RETURN(l.post_attn_norm, vec(pre + "post_attention_layernorm.weight", c.hidden_size));
    if (c.attn_residuals()) {
      PDS_ASSIGN_OR_RETURN(l.attn_res_score, res_score(pre + "self_attention_res_norm.weight", pre + "self_attention_res_proj.weight"));
      PDS_ASSIGN_OR_RETURN(l.mlp_res_score, res_score(pre + "mlp_res_norm.weight", pre + "mlp_res_proj.weight"));
    }
    if (l.kind == LayerKind::kMla) {
      PDS_ASSIGN_OR_RETURN(l.mla, mla(pre + "self_attn."));
    } else {
      PDS_ASSIGN_OR_RETURN(l.kda, kda(pre + "self_attn."));
    }
    l.is_moe = c.layer_is_moe[i];
    if (l.is_moe) {
      PDS_ASSIGN_OR_RETURN(l.moe, moe(pre + "block_sparse_moe."));
    } else {
      PDS_ASSIGN_OR_RETURN(l.mlp, mlp(pre + "mlp.", c.intermediate_size));
    }
    return l;
  }

  Result<ModelWeights> all() const {
    const ModelConfig& c = cfg_;
    ModelWeights w;
    if (span_.first()) {
      PDS_ASSIGN_OR_RETURN(w.embed, dense(c.weight_prefix + "embed_tokens.weight", c.vocab_size, c.hidden_size));
    }
    if (span_.last(c.num_layers)) {
      PDS_ASSIGN_OR_RETURN(w.final_norm, vec(c.weight_prefix + "norm.weight", c.hidden_size));
      // lm_head is split by vocabulary rows; the logits are gathered after it.
      const int64_t v0 = sh_.begin(c.vocab_size), v1 = sh_.end(c.vocab_size);
      const std::string head = (c.tie_word_embeddings && !store_.contains(c.lm_head_name))
                                   ? c.weight_prefix + "embed_tokens.weight" : c.lm_head_name;
      PDS_ASSIGN_OR_RETURN(w.lm_head, dense_rows(head, c.vocab_size, c.hidden_size, v0, v1));
      if (c.attn_residuals()) {
        PDS_ASSIGN_OR_RETURN(w.output_res_score, res_score(c.weight_prefix + "output_attn_res_norm.weight", c.weight_prefix + "output_attn_res_proj.weight"));
      }
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (!span_.contains(i, c.num_layers)) {  // another stage's layer: only what it is
        LayerWeights l;
        l.kind = c.layer_kinds[i];
        l.is_moe = c.layer_is_moe[i];
        w.layers.push_back(std::move(l));
        continue;
      }
      PDS_ASSIGN_OR_RETURN(LayerWeights l, layer(i));
      w.layers.push_back(std::move(l));
    }
    return w;
  }

 private:
  const ModelConfig& cfg_;
  const WeightStore& store_;
  const ShardSpec& sh_;
  const LayerSpan& span_;
};

}  // namespace

Status check_shardable(const ModelConfig& c, const ShardSpec& s) {
  if (s.size < 1 || s.rank < 0 || s.rank >= s.size)
    return invalid_argument("tensor parallel rank " + std::to_string(s.rank) + " of " + std::to_string(s.size) + " is not valid");
  const std::pair<const char*, int64_t> units[] = {
      {"num_attention_heads", c.num_heads},   {"linear_attn_config.num_heads", c.kda_num_heads},
      {"intermediate_size", c.intermediate_size}, {"moe_intermediate_size * num_shared_experts", c.moe_intermediate_size * c.num_shared_experts},
      {"num_experts", c.num_experts},         {"vocab_size", c.vocab_size}};
  for (const auto& [name, n] : units)
    if (n % s.size) return invalid_argument(std::string("tensor parallel size ") + std::to_string(s.size) + " does not divide " + name + " (" + std::to_string(n) + ")");
  return Status::ok();
}

Result<ModelWeights> load_model_weights(const ModelConfig& cfg, const WeightStore& store, const ShardSpec& shard,
                                        const LayerSpan& span) {
  PDS_RETURN_IF_ERROR(check_shardable(cfg, shard));
  const int64_t end = span.resolved_end(cfg.num_layers);
  if (span.begin < 0 || span.begin >= end || end > cfg.num_layers)
    return invalid_argument("pipeline stage layers [" + std::to_string(span.begin) + ", " + std::to_string(end) + ") are not inside the model's " +
                            std::to_string(cfg.num_layers) + " layers");
  return Loader(cfg, store, shard, span).all();
}

}  // namespace pdserve
