// Per-request token sampling: penalties, temperature, top-k / top-p / min-p, a seeded RNG,
// and logprobs. Pure CPU code over one logits row; no engine state.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "pdserve/runtime/request.h"

namespace pdserve::runtime {

struct SampleResult {
  int32_t token = 0;
  TokenLogprob logprob;  // filled only when params.logprobs
};

class Sampler {
 public:
  // A request without a seed gets one from `fallback_seed` (the engine's own generator).
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t fallback_seed);

  // Picks the next token from one row of logits and records it for the penalties.
  SampleResult sample(std::span<const float> logits);
  // Takes a token chosen elsewhere (decode role: prefill sampled the first token) as if
  // this sampler had drawn it: the penalties see it, and a sampled request's RNG spends the
  // one draw that token took there, so a seeded request continues exactly as a unified run.
  void observe(int32_t token);

  // Greedy pick: the highest logit, lowest id on ties (what the model-layer argmax does).
  static int32_t argmax(std::span<const float> logits);
  // log_softmax of the raw logits for `token`, plus the k best (best first, lowest id on ties).
  static TokenLogprob logprobs(std::span<const float> logits, int32_t token, int64_t k);

 private:
  void record(int32_t token);  // penalty history only
  void apply_penalties(std::vector<float>& logits) const;
  int32_t draw(std::vector<float>& logits);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int64_t> output_counts_;  // presence / frequency penalties
  std::vector<uint8_t> seen_;                           // repetition penalty: prompt + output
};

}  // namespace pdserve::runtime
