#include "pdserve/disagg/aux_row.h"

#include <algorithm>

namespace pdserve::disagg {

AuxRow make_aux_row(uint64_t room, uint32_t generation, int64_t cached_tokens, const runtime::FirstToken& first) {
  AuxRow row;
  row.magic = kAuxMagic;
  row.generation = generation;
  row.room = room;
  row.cached_tokens = cached_tokens;
  row.first_token = first.token;
  row.logprob = first.logprob.logprob;
  row.num_top = static_cast<int32_t>(std::min<size_t>(first.logprob.top.size(), kAuxTopLogprobs));
  for (int i = 0; i < row.num_top; ++i) {
    row.top_ids[i] = first.logprob.top[static_cast<size_t>(i)].id;
    row.top_logprobs[i] = first.logprob.top[static_cast<size_t>(i)].logprob;
  }
  return row;
}

Result<runtime::FirstToken> check_aux_row(const AuxRow& row, uint64_t room, uint32_t generation, int64_t prompt_len) {
  if (row.magic != kAuxMagic) return data_loss("aux row: bad magic (the row was never written, or overwritten)");
  if (row.room != room)
    return data_loss("aux row: room " + std::to_string(row.room) + " where room " + std::to_string(room) +
                     " was expected (a stale or mis-addressed row)");
  if (row.generation != generation)
    return data_loss("aux row: generation " + std::to_string(row.generation) + " where " + std::to_string(generation) +
                     " was expected (a stale row)");
  if (row.cached_tokens != prompt_len)
    return data_loss("aux row: prefill folded in " + std::to_string(row.cached_tokens) + " tokens, the prompt has " +
                     std::to_string(prompt_len));
  if (row.num_top < 0 || row.num_top > kAuxTopLogprobs) return data_loss("aux row: num_top out of range");
  runtime::FirstToken f;
  f.token = row.first_token;
  f.logprob.id = row.first_token;
  f.logprob.logprob = row.logprob;
  for (int i = 0; i < row.num_top; ++i) f.logprob.top.push_back({row.top_ids[i], row.top_logprobs[i]});
  return f;
}

}  // namespace pdserve::disagg
