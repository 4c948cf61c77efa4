// config.json: both families parse; each bad field is refused with its name.
#include <gtest/gtest.h>

#include <functional>

#include "pdserve/core/json_util.h"
#include "pdserve/model/config.h"
#include "test_models.h"

namespace pdserve {
namespace {

Json config_of(const std::string& preset) {
  return *load_json_file(testing::tiny_model_dir(preset) + "/config.json");
}

TEST(Config, TinyK3ParsesEveryFeature) {
  auto c = parse_model_config(config_of("tiny-k3"), "config.json");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->family, ModelFamily::kKimiK3);
  EXPECT_EQ(c->weight_prefix, "language_model.model.");
  EXPECT_EQ(c->num_mla_layers(), 2);
  EXPECT_EQ(c->num_kda_layers(), 4);
  EXPECT_EQ(c->layer_kinds[2], LayerKind::kMla);
  EXPECT_FALSE(c->layer_is_moe[0]);
  EXPECT_TRUE(c->layer_is_moe[1]);
  EXPECT_EQ(c->expert_format, ExpertFormat::kMxfp4);
  EXPECT_TRUE(c->latent_moe && c->latent_moe_norm && c->mla_output_gate && c->kda_full_rank_output_gate);
  EXPECT_TRUE(c->has_gate_lower_bound);
  EXPECT_EQ(c->gate_lower_bound, -5.0);
  EXPECT_EQ(c->activation, MlpActivation::kSiTU);
  EXPECT_EQ(c->attn_res_block_size, 2);
  EXPECT_EQ(c->mla_cache_dim(), 48);
}

TEST(Config, TinyKimiLinearParses) {
  auto c = parse_model_config(config_of("tiny-kimi-linear"), "config.json");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->family, ModelFamily::kKimiLinear);
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_EQ(c->expert_format, ExpertFormat::kDense);
  EXPECT_FALSE(c->has_gate_lower_bound);
  EXPECT_EQ(c->routed_expert_hidden_size, c->hidden_size);
}

TEST(Config, DeepSeekStyleMoeNamesAreAccepted) {
  Json j = config_of("tiny-kimi-linear");
  j["n_routed_experts"] = j["num_experts"];
  j["num_experts_per_tok"] = j["num_experts_per_token"];
  j["n_shared_experts"] = j["num_shared_experts"];
  j.erase("num_experts");
  j.erase("num_experts_per_token");
  j.erase("num_shared_experts");
  auto c = parse_model_config(j, "config.json");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_token, 2);
  EXPECT_EQ(c->num_shared_experts, 1);
}

struct BadCase {
  const char* name;
  std::function<void(Json&)> mutate;
  const char* expect;  // substring of the error
};

TEST(Config, BadFieldsAreNamed) {
  const std::vector<BadCase> cases = {
      {"model type", [](Json& j) { j["model_type"] = "llama"; }, "field 'model_type'"},
      {"no text_config", [](Json& j) { j.erase("text_config"); }, "field 'text_config' is missing"},
      {"hidden size type", [](Json& j) { j["text_config"]["hidden_size"] = "big"; }, "text_config: field 'hidden_size' must be an integer"},
      {"negative layers", [](Json& j) { j["text_config"]["num_hidden_layers"] = -1; }, "'num_hidden_layers' must be positive"},
      {"kda layer out of range", [](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(99); }, "'kda_layers' has layer 99"},
      {"layer in both lists", [](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(3); }, "both list layer 3"},
      {"layer in neither", [](Json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"] = Json::array({3}); }, "both omit layer 6"},
      {"rope mla", [](Json& j) { j["text_config"]["mla_use_nope"] = false; }, "'mla_use_nope' must be true"},
      {"top-k", [](Json& j) { j["text_config"]["num_experts_per_token"] = 99; }, "'num_experts_per_token' must be in 1..num_experts"},
      {"activation", [](Json& j) { j["text_config"]["hidden_act"] = "gelu"; }, "'hidden_act' must be"},
      {"router", [](Json& j) { j["text_config"]["moe_router_activation_func"] = "softmax"; }, "'moe_router_activation_func'"},
      {"groups", [](Json& j) { j["text_config"]["num_expert_group"] = 4; }, "'num_expert_group' must be 1"},
      {"quant format", [](Json& j) { j["text_config"]["quantization_config"]["format"] = "pack-quantized"; }, "'format' \"pack-quantized\" is not supported"},
      {"lower bound", [](Json& j) { j["text_config"]["linear_attn_config"]["gate_lower_bound"] = 1.0; }, "'gate_lower_bound' must be negative"},
      {"conv kernel", [](Json& j) { j["text_config"]["linear_attn_config"]["short_conv_kernel_size"] = 1; }, "'short_conv_kernel_size'"},
      {"kv heads", [](Json& j) { j["text_config"]["num_key_value_heads"] = 1; }, "'num_key_value_heads'"},
  };
  for (const BadCase& bc : cases) {
    Json j = config_of("tiny-k3");
    bc.mutate(j);
    auto c = parse_model_config(j, "config.json");
    ASSERT_FALSE(c.is_ok()) << bc.name;
    EXPECT_NE(c.status().message().find(bc.expect), std::string::npos) << bc.name << ": " << c.status().message();
  }
}

}  // namespace
}  // namespace pdserve
