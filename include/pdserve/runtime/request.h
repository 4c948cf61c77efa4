// What a generation request is, as the runtime sees it: the sampling parameters, the
// sequence it grows, its lifecycle state, and the events it posts back to the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::runtime {

// Chronological: a request only ever moves forward, so checks are comparisons
// (state > kQueued means it holds pages and a slot until kFinished). A disaggregated
// request skips states: decode's goes kQueued -> kAwaitingKv -> kDecode, prefill's
// kQueued -> kPrefill -> kSendingKv.
enum class RequestState : uint8_t {
  kQueued = 0,   // waiting for admission; holds nothing
  kAwaitingKv,   // decode role: pages + slot reserved, prefill is writing the prompt's KV
  kPrefill,      // admitted: pages + KDA slot reserved, prompt being folded in chunk by chunk
  kDecode,       // one new token per step
  kSendingKv,    // prefill role: first token sampled, pages + slot held until the send ends
  kFinished,     // resources returned
};
const char* request_state_name(RequestState s);

enum class FinishReason : uint8_t { kNone = 0, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct SamplingParams {
  double temperature = 1.0;         // 0: greedy
  double top_p = 1.0;               // (0, 1]
  int64_t top_k = 0;                // 0: off
  double min_p = 0.0;               // [0, 1]
  double presence_penalty = 0.0;    // [-2, 2], over generated tokens (OpenAI)
  double frequency_penalty = 0.0;   // [-2, 2], over generated tokens (OpenAI)
  double repetition_penalty = 1.0;  // > 0, over prompt + generated tokens (HF / vLLM)
  std::optional<uint64_t> seed;     // same seed + same prompt + same params: same output
  int64_t max_tokens = 16;          // >= 1
  std::vector<std::string> stop;    // stop strings, never part of the output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;          // also ignores stop_token_ids' defaults added by the server
  bool logprobs = false;
  int64_t top_logprobs = 0;         // [0, 20]

  bool greedy() const { return temperature == 0.0 || top_k == 1; }
  // kInvalidArgument naming the field, as the HTTP layer spells it.
  Status validate() const;
};

// Which half of a prefill/decode pair runs this request (docs/disaggregation.md).
enum class DisaggMode : uint8_t {
  kNone = 0,     // unified: prefill and decode here
  kPrefillOnly,  // prefill role: fold the prompt in, sample one token, hand the KV over
  kDecodeOnly,   // decode role: receive the prompt's KV and first token, then decode
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  DisaggMode disagg = DisaggMode::kNone;
  uint64_t room = 0;  // the bootstrap room, passed to the disaggregation hooks
  SamplingParams sampling;
  std::vector<int32_t> eos_token_ids;  // stop tokens that ignore_eos switches off
  bool skip_special_tokens = true;     // chat keeps them: the K3 parser reads the framing
};

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // best first
};

// One message from the engine to the caller. Text is final: never a partial UTF-8
// character, never (a prefix of) a stop string that may still match.
struct RequestEvent {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;  // one per token_ids entry when asked for
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;  // set with kError
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
};

}  // namespace pdserve::runtime
