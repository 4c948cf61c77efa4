// Engine internals shared by engine.cpp (lifecycle, submit) and engine_step.cpp (the step).
#pragma once

#include <chrono>

#include "pdserve/runtime/engine.h"
#include "pdserve/runtime/sampling.h"
#include "pdserve/runtime/scheduler.h"
#include "pdserve/runtime/stop_matcher.h"
#include "pdserve/tokenizer/stream_detokenizer.h"

namespace pdserve::runtime {

using Clock = std::chrono::steady_clock;

struct Engine::SchedulerBox {
  Scheduler s;
};

// Everything the engine keeps for one request, from submit to finish.
struct Engine::Live {
  Live(GenerateRequest r, const tokenizer::Tokenizer& tok, uint64_t fallback_seed)
      : req(std::move(r)),
        sampler(req.sampling, req.prompt, fallback_seed),
        detok(tok, req.skip_special_tokens),
        stops(req.sampling.stop) {}
  GenerateRequest req;
  Sequence seq;
  std::shared_ptr<RequestChannel> ch = std::make_shared<RequestChannel>();
  Sampler sampler;
  tokenizer::StreamDetokenizer detok;
  StopMatcher stops;
  std::vector<int32_t> stop_ids;  // sorted
  Clock::time_point arrival = Clock::now(), last_token;
};

}  // namespace pdserve::runtime
