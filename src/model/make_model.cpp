#include "pdserve/model/make_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"
#include "pdserve/model/safetensors.h"
#include "pdserve/ops/mxfp4.h"
#include "pdserve/tokenizer/tiny_tokenizer.h"

namespace pdserve {

namespace {

// splitmix64 + Box-Muller: the same bytes on every platform (std::normal_distribution is
// implementation-defined, which would make fixtures compiler-dependent).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  std::vector<float> normal_vec(int64_t n, float std, float mean = 0.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = mean + std * normal();
    return v;
  }

 private:
  uint64_t s_;
};

struct Preset {
  bool k3 = true;
  int64_t vocab_ranks = 1024;  // BPE ranks; 256 special ids follow
  int64_t hidden = 64, layers = 6, intermediate = 96;
  std::vector<int64_t> full_attn;  // 1-indexed
  int64_t heads = 2, q_lora = 32, kv_lora = 32, nope = 16, rope = 16, v = 16;
  int64_t kda_heads = 2, kda_dim = 32, conv = 4;
  int64_t experts = 8, top_k = 2, moe_inter = 64, shared = 1, latent = 32;
  int64_t attn_res_block = 2;
  int shards = 3;
};

Preset preset_for(const std::string& name) {
  Preset p;
  if (name == "tiny-k3") {
    p.full_attn = {3, 6};
  } else if (name == "tiny-k3-wide") {
    // Four MLA and four KDA heads, so tensor parallelism up to 4 can be tested.
    p.full_attn = {3, 6};
    p.heads = 4;
    p.kda_heads = 4;
    p.kda_dim = 16;
  } else if (name == "tiny-k3-moe128") {
    // Routed experts 128 wide in and out (latent 128, inter 128): the widths the CUDA backend's
    // MoE decode layout takes (moe_decode.h: inputs a multiple of 128), so the engine runs its
    // MXFP4 decode kernels (both bit shuffles) and the prefill grouped GEMM; the other presets'
    // latent 32 run the generic expert kernel. The rest is tiny-k3.
    p.full_attn = {3, 6};
    p.latent = 128;
    p.moe_inter = 128;
  } else if (name == "tiny-k3-mla512") {
    // K3's MLA cache widths (latent 512 + key 64) at one TP32 rank's 3 heads: the shapes the
    // CUDA backend's lean split-KV decode kernels take (kernels/mla/mla_decode.h); the tiny
    // presets' latent 32 runs their generic fallback. The rest is tiny-k3.
    p.full_attn = {3, 6};
    p.heads = 3;
    p.kv_lora = 512;
    p.rope = 64;
  } else {  // tiny-kimi-linear: the architecture transformers implements natively
    p.k3 = false;
    p.layers = 4;
    p.full_attn = {4};
    p.q_lora = 0;
    p.moe_inter = 32;
    p.latent = 0;
    p.attn_res_block = 0;
    p.shards = 2;
  }
  return p;
}

// Collects tensors, then spreads them over shards in insertion order.
class CheckpointBuilder {
 public:
  CheckpointBuilder(Rng& rng, std::string prefix) : rng_(rng), prefix_(std::move(prefix)) {}

  Rng& rng() { return rng_; }
  void linear(const std::string& name, int64_t out, int64_t in) { linear_unprefixed(prefix_ + name, out, in); }
  // A tensor outside the text model's prefix (lm_head, vision weights).
  void linear_unprefixed(const std::string& full_name, int64_t out, int64_t in) {
    add_raw(full_name, DType::kBF16, {out, in}, encode_bf16(rng_.normal_vec(out * in, 1.0f / std::sqrt(static_cast<float>(in)))));
  }
  void norm(const std::string& name, int64_t n) { add_bf16(name, {n}, rng_.normal_vec(n, 0.1f, 1.0f)); }
  void add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    add_raw(prefix_ + name, DType::kBF16, std::move(shape), encode_bf16(v));
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    add_raw(prefix_ + name, DType::kF32, std::move(shape), encode_f32(v));
  }
  void add_raw(const std::string& full_name, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    tensors_.push_back({full_name, t, std::move(shape), std::move(bytes)});
  }
  void mxfp4(const std::string& name, int64_t out, int64_t in) {
    std::vector<float> w = rng_.normal_vec(out * in, 1.0f / std::sqrt(static_cast<float>(in)));
    std::vector<uint8_t> packed, scales;
    ops::mxfp4_quantize(w.data(), out, in, &packed, &scales);
    add_raw(prefix_ + name + ".weight_packed", DType::kU8, {out, in / 2}, std::move(packed));
    add_raw(prefix_ + name + ".weight_scale", DType::kU8, {out, in / kMxfp4GroupSize}, std::move(scales));
  }

  // Spreads the tensors over `shards` files in insertion order, by cumulative size.
  Status write(const std::string& dir, int shards) const {
    size_t total = 0;
    for (const Tensor& t : tensors_) total += t.bytes.size();
    const size_t per_shard = total / shards + 1;
    std::vector<SafetensorsWriter> files(shards);
    Json weight_map = Json::object();
    size_t acc = 0;
    for (const Tensor& t : tensors_) {
      const int s = std::min<int>(shards - 1, static_cast<int>(acc / per_shard));
      acc += t.bytes.size();
      files[s].add(t.name, t.dtype, t.shape, t.bytes);
      weight_map[t.name] = shard_name(s, shards);
    }
    for (int s = 0; s < shards; ++s) PDS_RETURN_IF_ERROR(files[s].write(join_path(dir, shard_name(s, shards))));
    Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    return write_file(join_path(dir, "model.safetensors.index.json"), index.dump(2) + "\n");
  }

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  static std::string shard_name(int s, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, n);
    return buf;
  }
  Rng& rng_;
  std::string prefix_;
  std::vector<Tensor> tensors_;
};

Json text_config(const Preset& p, int64_t vocab, int64_t special_base) {
  std::vector<int64_t> kda, full = p.full_attn;
  for (int64_t l = 1; l <= p.layers; ++l)
    if (std::find(full.begin(), full.end(), l) == full.end()) kda.push_back(l);
  Json lac = {{"kda_layers", kda}, {"full_attn_layers", full}, {"num_heads", p.kda_heads}, {"head_dim", p.kda_dim},
              {"short_conv_kernel_size", p.conv}};
  Json t = {
      {"model_type", "kimi_linear"}, {"vocab_size", vocab}, {"hidden_size", p.hidden},
      {"num_hidden_layers", p.layers}, {"intermediate_size", p.intermediate}, {"num_attention_heads", p.heads},
      {"num_key_value_heads", p.heads}, {"kv_lora_rank", p.kv_lora}, {"qk_nope_head_dim", p.nope},
      {"qk_rope_head_dim", p.rope}, {"v_head_dim", p.v}, {"mla_use_nope", true},
      {"q_lora_rank", p.q_lora > 0 ? Json(p.q_lora) : Json(nullptr)},
      {"num_experts", p.experts}, {"num_experts_per_token", p.top_k}, {"num_shared_experts", p.shared},
      {"moe_intermediate_size", p.moe_inter}, {"moe_renormalize", true}, {"moe_router_activation_func", "sigmoid"},
      {"num_expert_group", 1}, {"topk_group", 1}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
      {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", false}, {"max_position_embeddings", 8192},
      {"bos_token_id", special_base}, {"eos_token_id", special_base + 1}, {"pad_token_id", special_base + 255},
      {"linear_attn_config", lac}, {"torch_dtype", "bfloat16"}};
  if (p.k3) {
    t["hidden_act"] = "situ";
    t["activation_situ_beta"] = 4.0;
    t["activation_situ_linear_beta"] = 25.0;
    t["routed_scaling_factor"] = 1.0;
    t["routed_expert_hidden_size"] = p.latent;
    t["latent_moe_use_norm"] = true;
    t["mla_use_output_gate"] = true;
    t["attn_res_block_size"] = p.attn_res_block;
    t["linear_attn_config"]["use_full_rank_gate"] = true;
    t["linear_attn_config"]["gate_lower_bound"] = -5.0;
    t["quantization_config"] = {
        {"quant_method", "compressed-tensors"}, {"format", "mxfp4-pack-quantized"}, {"quantization_status", "compressed"},
        {"config_groups",
         {{"group_0",
           {{"format", "mxfp4-pack-quantized"}, {"targets", {"Linear"}},
            {"weights", {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}, {"symmetric", true},
                         {"dynamic", false}, {"scale_dtype", "torch.uint8"}}}}}}},
        {"ignore", {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*", "re:.*lm_head.*",
                    "re:.*block_sparse_moe\\.gate$", "re:.*routed_expert_(down|up)_proj.*", "re:.*vision_tower.*",
                    "re:.*mm_projector.*"}}};
  } else {
    t["hidden_act"] = "silu";
    t["routed_scaling_factor"] = 2.446;
    t["architectures"] = {"KimiLinearForCausalLM"};
  }
  return t;
}

void add_weights(const Preset& p, CheckpointBuilder& b, int64_t vocab) {
  // lm_head is added by the caller: it sits outside the text prefix for K3.
  const int64_t hd = p.hidden;
  b.add_bf16("embed_tokens.weight", {vocab, hd}, b.rng().normal_vec(vocab * hd, 1.0f));
  for (int64_t i = 0; i < p.layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    b.norm(l + "input_layernorm.weight", hd);
    b.norm(l + "post_attention_layernorm.weight", hd);
    if (p.attn_res_block > 0) {
      b.norm(l + "self_attention_res_norm.weight", hd);
      b.linear(l + "self_attention_res_proj.weight", 1, hd);
      b.norm(l + "mlp_res_norm.weight", hd);
      b.linear(l + "mlp_res_proj.weight", 1, hd);
    }
    const bool mla = std::find(p.full_attn.begin(), p.full_attn.end(), i + 1) != p.full_attn.end();
    const std::string a = l + "self_attn.";
    if (mla) {
      if (p.q_lora > 0) {
        b.linear(a + "q_a_proj.weight", p.q_lora, hd);
        b.norm(a + "q_a_layernorm.weight", p.q_lora);
        b.linear(a + "q_b_proj.weight", p.heads * (p.nope + p.rope), p.q_lora);
      } else {
        b.linear(a + "q_proj.weight", p.heads * (p.nope + p.rope), hd);
      }
      b.linear(a + "kv_a_proj_with_mqa.weight", p.kv_lora + p.rope, hd);
      b.norm(a + "kv_a_layernorm.weight", p.kv_lora);
      b.linear(a + "kv_b_proj.weight", p.heads * (p.nope + p.v), p.kv_lora);
      b.linear(a + "o_proj.weight", hd, p.heads * p.v);
      if (p.k3) b.linear(a + "g_proj.weight", p.heads * p.v, hd);
    } else {
      const int64_t P = p.kda_heads * p.kda_dim, D = p.kda_dim, H = p.kda_heads;
      b.linear(a + "q_proj.weight", P, hd);
      b.linear(a + "k_proj.weight", P, hd);
      // Larger values keep the KDA output's RMS far above o_norm's eps, as in a trained model;
      // with tiny outputs the eps dominates and amplifies rounding noise 100-fold.
      b.add_bf16(a + "v_proj.weight", {P, hd}, b.rng().normal_vec(P * hd, 16.0f / std::sqrt(static_cast<float>(hd))));
      for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
        if (p.k3) b.add_f32(a + n + ".weight", {P, 1, p.conv}, b.rng().normal_vec(P * p.conv, 0.5f));
        else b.add_bf16(a + n + ".weight", {P, 1, p.conv}, b.rng().normal_vec(P * p.conv, 0.5f));
      }
      std::vector<float> alog(H);
      for (float& x : alog) x = std::log(1.0f + 15.0f * static_cast<float>(b.rng().uniform()));
      if (p.k3) {
        alog.resize(H * 2, 0.0f);  // stored zero-padded, as the real checkpoint does (96 of 128)
        b.add_f32(a + "A_log", {H * 2}, alog);
      } else {
        b.add_f32(a + "A_log", {1, 1, H, 1}, alog);
      }
      b.add_f32(a + "dt_bias", {P}, b.rng().normal_vec(P, 0.5f));
      b.linear(a + "f_a_proj.weight", D, hd);
      b.linear(a + "f_b_proj.weight", P, D);
      b.linear(a + "b_proj.weight", H, hd);
      if (p.k3) {
        b.linear(a + "g_proj.weight", P, hd);
      } else {
        b.linear(a + "g_a_proj.weight", D, hd);
        b.linear(a + "g_b_proj.weight", P, D);
      }
      b.add_f32(a + "o_norm.weight", {D}, b.rng().normal_vec(D, 0.1f, 1.0f));
      b.linear(a + "o_proj.weight", hd, P);
    }
    if (i == 0) {
      b.linear(l + "mlp.gate_proj.weight", p.intermediate, hd);
      b.linear(l + "mlp.up_proj.weight", p.intermediate, hd);
      b.linear(l + "mlp.down_proj.weight", hd, p.intermediate);
      continue;
    }
    const std::string m = l + "block_sparse_moe.";
    const int64_t lat = p.latent > 0 ? p.latent : hd;
    b.linear(m + "gate.weight", p.experts, hd);
    b.add_f32(m + "gate.e_score_correction_bias", {p.experts}, b.rng().normal_vec(p.experts, 0.1f));
    for (int64_t e = 0; e < p.experts; ++e) {
      const std::string ep = m + "experts." + std::to_string(e) + ".";
      if (p.k3) {
        b.mxfp4(ep + "w1", p.moe_inter, lat);
        b.mxfp4(ep + "w2", lat, p.moe_inter);
        b.mxfp4(ep + "w3", p.moe_inter, lat);
      } else {
        b.linear(ep + "w1.weight", p.moe_inter, lat);
        b.linear(ep + "w2.weight", lat, p.moe_inter);
        b.linear(ep + "w3.weight", p.moe_inter, lat);
      }
    }
    const int64_t si = p.moe_inter * p.shared;
    b.linear(m + "shared_experts.gate_proj.weight", si, hd);
    b.linear(m + "shared_experts.up_proj.weight", si, hd);
    b.linear(m + "shared_experts.down_proj.weight", hd, si);
    if (p.latent > 0) {
      b.linear(m + "routed_expert_down_proj.weight", lat, hd);
      b.linear(m + "routed_expert_up_proj.weight", hd, lat);
      b.norm(m + "routed_expert_norm.weight", lat);
    }
  }
  b.norm("norm.weight", hd);
  if (p.attn_res_block > 0) {
    b.norm("output_attn_res_norm.weight", hd);
    b.linear("output_attn_res_proj.weight", 1, hd);
  }
}

}  // namespace

std::vector<std::string> model_presets() { return {"tiny-k3", "tiny-k3-wide", "tiny-kimi-linear", "tiny-k3-mla512", "tiny-k3-moe128"}; }

Status make_model(const std::string& preset, const std::string& out_dir, uint64_t seed) {
  const auto presets = model_presets();
  if (std::find(presets.begin(), presets.end(), preset) == presets.end())
    return invalid_argument("unknown preset '" + preset + "' (tiny-k3, tiny-k3-wide, tiny-kimi-linear, tiny-k3-mla512 or tiny-k3-moe128)");
  ::mkdir(out_dir.c_str(), 0755);
  if (!file_exists(out_dir)) return io_error("cannot create " + out_dir);
  const Preset p = preset_for(preset);  // tiny-k3-wide is tiny-k3 with 4 heads everywhere
  const int64_t vocab = p.vocab_ranks + 256;
  PDS_RETURN_IF_ERROR(tokenizer::write_tiny_tokenizer(out_dir, static_cast<int>(p.vocab_ranks)));

  Rng rng(seed);
  CheckpointBuilder b(rng, p.k3 ? "language_model.model." : "model.");
  add_weights(p, b, vocab);
  b.linear_unprefixed(p.k3 ? "language_model.lm_head.weight" : "lm_head.weight", vocab, p.hidden);
  if (p.k3) {
    // Real K3 checkpoints carry the vision tower; the text engine must skip it.
    b.linear_unprefixed("vision_tower.patch_embed.proj.weight", 16, 48);
    b.linear_unprefixed("mm_projector.proj.0.weight", p.hidden, 16);
  }
  PDS_RETURN_IF_ERROR(b.write(out_dir, p.shards));

  const int64_t base = p.vocab_ranks;
  Json text = text_config(p, vocab, base);
  Json config;
  if (p.k3) {
    config = {{"model_type", "kimi_k3"},
              {"architectures", {"KimiK3ForConditionalGeneration"}},
              {"text_config", text},
              {"vision_config", {{"model_type", "moonvit3d"}, {"patch_size", 4}, {"vt_hidden_size", 16}}},
              {"media_placeholder_token_id", base + 21},
              {"pad_token_id", base + 255},
              {"torch_dtype", "bfloat16"}};
  } else {
    config = text;
  }
  config["pdserve_preset"] = preset;
  config["pdserve_seed"] = seed;
  PDS_RETURN_IF_ERROR(write_file(join_path(out_dir, "config.json"), config.dump(2) + "\n"));
  Json gen = {{"bos_token_id", base}, {"eos_token_id", {base + 1, base + 2}}, {"do_sample", false}};
  PDS_RETURN_IF_ERROR(write_file(join_path(out_dir, "generation_config.json"), gen.dump(2) + "\n"));
  return Status::ok();
}

}  // namespace pdserve
