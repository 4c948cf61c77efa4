// kv_cache_dtype bfloat16 across a prefill/decode pair (CPU, real TCP transport): the pages
// move as bf16 bytes (half the MLA bytes of float32), the output equals a single-process bf16
// server's token for token, and a float32 decode refuses a bfloat16 prefill by name.
#include <gtest/gtest.h>

#include "model/test_models.h"
#include "pd_fixture.h"
#include "pdserve/disagg/transfer_plan.h"

namespace pdserve::server::testing {
namespace {

using pdserve::testing::random_ids;

ServeConfig bf16(ServeConfig c) {
  c.runtime.kv_cache_dtype = DType::kBF16;
  return c;
}

Json body_of(size_t n, uint32_t seed) {
  return Json{{"prompt", random_ids(n, seed)}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1}};
}

TEST(PdBf16, MatchesTheUnifiedBf16ServerAndMovesHalfTheMlaBytes) {
  LiveServer unified(bf16(pd_config(ServerRole::kUnified, 1)));
  PdPair pd(1, 1, bf16(pd_config(ServerRole::kPrefill, 1)), bf16(pd_config(ServerRole::kDecode, 1)));
  const Json info = pd.decode->info();
  EXPECT_EQ(info["pools"]["kv_cache_dtype"], "bfloat16");
  auto src = disagg::KvLayout::from_json(pd.prefill->server().prefill()->info()["layout"]);
  auto dst = disagg::KvLayout::from_json(pd.decode->server().decode()->info()["layout"]);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  EXPECT_EQ(src->kv_dtype, "bfloat16");
  EXPECT_EQ(dst->kv_dtype, "bfloat16");
  EXPECT_EQ(info["pools"]["kv_bytes_per_token"].get<int64_t>(), dst->mla_layers * dst->entry_dim * 2);
  disagg::KvLayout src32 = *src, dst32 = *dst;
  src32.kv_dtype = dst32.kv_dtype = "float32";
  const uint64_t fixed = static_cast<uint64_t>(disagg::slot_floats(src->kda, 1)) * 4 + sizeof(disagg::AuxRow);
  uint64_t expect = 0, room = 500;
  for (size_t n : {size_t{5}, size_t{47}}) {  // part of a page; several chunks with a partial last page
    SCOPED_TRACE("prompt length " + std::to_string(n));
    const Json body = body_of(n, static_cast<uint32_t>(n));
    auto [us, ubody] = unified.post("/v1/completions", body.dump());
    ASSERT_EQ(us, 200) << ubody;
    PdResult r = pd.request("/v1/completions", body, ++room);
    ASSERT_EQ(r.decode_status, 200) << r.decode_body;
    ASSERT_EQ(r.prefill_status, 200) << r.prefill_body;
    // The same rounded entries on both paths (bytes moved as they are): identical output.
    const Json g = Json::parse(r.decode_body)["choices"][0], w = Json::parse(ubody)["choices"][0];
    EXPECT_EQ(g["text"], w["text"]);
    EXPECT_EQ(g["logprobs"]["tokens"], w["logprobs"]["tokens"]);
    EXPECT_EQ(g["logprobs"]["token_logprobs"], w["logprobs"]["token_logprobs"]);
    const int64_t pages = (static_cast<int64_t>(n) + src->page_size - 1) / src->page_size;
    const uint64_t b16 = disagg::room_bytes(*src, *dst, pages), b32 = disagg::room_bytes(src32, dst32, pages);
    EXPECT_EQ((b16 - fixed) * 2, b32 - fixed);  // the MLA pages: half
    expect += b16;
    pd.expect_pools_free();
  }
  // What moved on the wire is the bf16 formula's bytes.
  const Json t = pd.decode->info()["disaggregation"]["transfer"];
  EXPECT_EQ(t["bytes"].get<uint64_t>(), expect);
  EXPECT_EQ(pd.prefill->info()["disaggregation"]["transport_counters"]["bytes_sent"].get<uint64_t>(), expect);
}

TEST(PdBf16, AFloat32DecodeRefusesABfloat16Prefill) {
  PdPair pd(1, 1, bf16(pd_config(ServerRole::kPrefill, 1)), pd_config(ServerRole::kDecode, 1));
  auto [status, text] = pd.decode->post("/v1/completions", pd.with_bootstrap(body_of(10, 3), 21).dump());
  EXPECT_EQ(status, 400) << text;
  EXPECT_NE(text.find("kv_dtype: prefill bfloat16, decode float32"), std::string::npos) << text;
  pd.expect_pools_free();
}

}  // namespace
}  // namespace pdserve::server::testing
