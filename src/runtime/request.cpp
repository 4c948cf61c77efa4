#include "pdserve/runtime/request.h"

#include <cmath>

namespace pdserve::runtime {

const char* request_state_name(RequestState s) {
  switch (s) {
    case RequestState::kQueued: return "queued";
    case RequestState::kAwaitingKv: return "awaiting_kv";
    case RequestState::kPrefill: return "prefill";
    case RequestState::kDecode: return "decode";
    case RequestState::kSendingKv: return "sending_kv";
    case RequestState::kFinished: return "finished";
  }
  return "?";
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {
Status bad(const char* field, const std::string& what) {
  return invalid_argument(std::string(field) + ": " + what);
}
}  // namespace

Status SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0) return bad("temperature", "must be >= 0");
  if (!std::isfinite(top_p) || top_p <= 0.0 || top_p > 1.0) return bad("top_p", "must be in (0, 1]");
  if (top_k < 0) return bad("top_k", "must be >= 0 (0 disables it)");
  if (!std::isfinite(min_p) || min_p < 0.0 || min_p > 1.0) return bad("min_p", "must be in [0, 1]");
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0)
    return bad("presence_penalty", "must be in [-2, 2]");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0)
    return bad("frequency_penalty", "must be in [-2, 2]");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0)
    return bad("repetition_penalty", "must be > 0");
  if (max_tokens < 1) return bad("max_tokens", "must be >= 1");
  if (top_logprobs < 0 || top_logprobs > 20) return bad("top_logprobs", "must be in [0, 20]");
  for (const auto& s : stop)
    if (s.empty()) return bad("stop", "stop strings must not be empty");
  if (stop.size() > 16) return bad("stop", "at most 16 stop strings");
  return Status::ok();
}

}  // namespace pdserve::runtime
