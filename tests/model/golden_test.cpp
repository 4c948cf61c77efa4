// Logits of the tiny models against references nobody here wrote.
//
// Fixtures (tests/fixtures/golden_*.json) come from tools/golden/gen_golden.py on the GPU
// machine (H200, torch 2.11, transformers 5.17, fla 0.6.0), reading the checkpoint that
// `pdserve make-model` writes with the fixture's seed:
//   tiny-k3:          the public Kimi-K3 reference modeling code with fla, float32 with TF32
//                     off everywhere (TRITON_F32_DEFAULT=ieee). Only summation order differs:
//                     measured 1e-5 on short prompts and 3e-4 on the 70-token one, the same
//                     spread our own chunked and recurrent KDA paths show on this model
//                     (forward_test.cpp). Bound 1e-3.
//   tiny-kimi-linear: transformers' native KimiLinearForCausalLM (which dispatches its KDA to
//                     fla when fla is installed). This fixture was made before TF32 was turned
//                     off in Triton, so fla's dots ran on TF32 tensor cores (inputs rounded to
//                     10 mantissa bits): measured 1.7e-4 to 1.9e-3, bound 5e-3. Regenerating it with the
//                     current script tightens the bound to 1e-4 (docs/design.md, golden fixtures).
// Normalised error = max |ours - ref| / max |ref| over every position's sampled columns and
// the last position's full row. Greedy continuations must match token for token unless the
// reference's top-2 margin at the diverging step is within 100x the bound of the logit scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <functional>

#include "forward_test_util.h"
#include "pdserve/core/json_util.h"
#include "test_models.h"

namespace pdserve {
namespace {

struct GoldenCase {
  const char* fixture;
  double bound;
};

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, LogitsAndGreedyMatchReference) {
  const GoldenCase gc = GetParam();
  auto fixture = load_json_file(std::string(PDSERVE_SOURCE_DIR) + "/tests/fixtures/" + gc.fixture);
  ASSERT_TRUE(fixture.is_ok()) << fixture.status().message();
  const Json& j = *fixture;
  testing::ModelRunner run(testing::tiny_model_dir(j["preset"].get<std::string>(), j["seed"].get<uint64_t>()));
  const int64_t V = run.vocab();
  for (const Json& c : j["cases"]) {
    const auto ids = c["prompt"].get<std::vector<int32_t>>();
    const auto cols = c["columns"].get<std::vector<int64_t>>();
    const auto ref = c["logits_sampled"].get<std::vector<std::vector<double>>>();
    const auto last = c["last_logits"].get<std::vector<double>>();
    std::vector<float> ours = run.prefill_logits(ids);
    ASSERT_EQ(ours.size(), ids.size() * V);
    double num = 0, den = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      for (size_t k = 0; k < cols.size(); ++k) {
        num = std::max(num, std::fabs(ours[t * V + cols[k]] - ref[t][k]));
        den = std::max(den, std::fabs(ref[t][k]));
      }
    for (int64_t v = 0; v < V; ++v) {
      num = std::max(num, std::fabs(ours[(ids.size() - 1) * V + v] - last[v]));
      den = std::max(den, std::fabs(last[v]));
    }
    const double err = num / den;
    RecordProperty("normalized_error_" + std::to_string(ids.size()), std::to_string(err));
    EXPECT_LT(err, gc.bound) << gc.fixture << " prompt of " << ids.size() << " tokens";

    const auto want = c["greedy"].get<std::vector<int32_t>>();
    const auto margins = c["greedy_margins"].get<std::vector<double>>();
    const auto got = run.greedy(ids, static_cast<int>(want.size()));
    size_t same = 0;
    while (same < want.size() && got[same] == want[same]) ++same;
    std::printf("%s, %zu-token prompt: error %.3g, greedy %zu/%zu identical\n", gc.fixture, ids.size(), err, same, want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      // The step's margin is of the logits that chose token i (the prefill for i = 0).
      double margin;
      if (i == 0) {
        std::vector<double> top(last);
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<double>());
        margin = top[0] - top[1];
      } else {
        margin = margins[i - 1];
      }
      EXPECT_LT(margin, 100 * gc.bound * den) << "greedy diverged at step " << i << " with a clear reference margin";
      break;  // after a legitimate divergence the sequences differ
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values(GoldenCase{"golden_tiny_kimi_linear.json", 5e-3},
                                           GoldenCase{"golden_tiny_k3.json", 1e-3}));

}  // namespace
}  // namespace pdserve
