// The batches the device-forward tests (forward_mla_early_test, forward_bf16_test) drive a CPU
// Model and device models through, so that both walk the same prefill chunks and decode steps:
// three sequences, A (300 tokens) prefilled in chunks of 96, 96, 96, 12, B (45) and C (7) each in
// one chunk beside A's, then 24 decode steps of all three, every sequence following the CPU's
// greedy token. The caller's `run` forwards one batch on every model and then calls
// follow_cpu_greedy with the CPU's output.
#pragma once

#include <cstdint>
#include <vector>

#include "pdserve/model/cache_pools.h"
#include "pdserve/model/model.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve::cuda::ktest {

// Logits that differ between two outputs (all of them where the sizes differ).
inline size_t differing(const ForwardOutput& a, const ForwardOutput& b) {
  if (a.logits.size() != b.logits.size()) return std::max(a.logits.size(), b.logits.size());
  size_t n = 0;
  for (size_t j = 0; j < a.logits.size(); ++j) n += a.logits[j] != b.logits[j];
  return n;
}

// Pages for each sequence's prompt + 24 decode tokens, and a KDA slot each.
inline void start_three_sequences(MlaKvPool& kv, KdaStatePool& state, SequenceInput& A, SequenceInput& B, SequenceInput& C) {
  A.pages = kv.allocate(kv.pages_for_tokens(300 + 24)).value();
  B.pages = kv.allocate(kv.pages_for_tokens(45 + 24)).value();
  C.pages = kv.allocate(kv.pages_for_tokens(7 + 24)).value();
  A.state_slot = state.allocate().value();
  B.state_slot = state.allocate().value();
  C.state_slot = state.allocate().value();
}

// After a step: each sequence's tokens are cached, and its next input is the CPU's greedy token.
inline void follow_cpu_greedy(const std::vector<SequenceInput*>& seqs, const ForwardOutput& cpu, int64_t vocab) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->cached_len += static_cast<int64_t>(seqs[i]->tokens.size());
    seqs[i]->tokens = {argmax(cpu.row(i), vocab)};
    seqs[i]->all_logits = false;
  }
}

// The schedule above; run(std::vector<SequenceInput*>) forwards one batch.
template <typename Run>
void run_three_sequence_schedule(SequenceInput& A, SequenceInput& B, SequenceInput& C, Run&& run) {
  const auto a = testing::random_ids(300, 31), b = testing::random_ids(45, 32), c = testing::random_ids(7, 33);
  auto part = [&](size_t lo, size_t hi) { return std::vector<int32_t>(a.begin() + lo, a.begin() + hi); };
  A.tokens = part(0, 96);
  A.all_logits = true;
  B.tokens = b;
  run(std::vector<SequenceInput*>{&A, &B});
  A.tokens = part(96, 192);
  C.tokens = c;
  C.all_logits = true;
  run(std::vector<SequenceInput*>{&C, &A});
  A.tokens = part(192, 288);
  A.all_logits = true;
  run(std::vector<SequenceInput*>{&A});
  A.tokens = part(288, 300);
  run(std::vector<SequenceInput*>{&A});
  for (int i = 0; i < 24; ++i) run(std::vector<SequenceInput*>{&B, &C, &A});
}

}  // namespace pdserve::cuda::ktest
