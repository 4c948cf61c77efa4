// Messages on the bootstrap plane (HTTP + JSON on prefill's bootstrap port):
//   GET  /route      -> prefill's KvLayout (503 until every prefill rank registered)
//   GET  /health     -> {"status": "ok", "instance_id": ...} (decode's heartbeat)
//   POST /target     <- RoomTarget: where decode wants this room's KV
//   POST /abort      <- {"room": N, "reason": "..."}: decode gave up on the room
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/disagg/layout.h"

namespace pdserve::disagg {

struct RoomTarget {
  uint64_t room = 0;
  uint32_t generation = 0;
  KvLayout decode;                 // decode's layout: prefill checks the pair too
  std::string transfer_host;       // decode's transfer listener
  int transfer_port = 0;
  std::vector<int32_t> pages;      // the prompt's pages on decode, in order
  int32_t slot = -1;               // decode's KDA state slot
  int32_t aux_row = -1;
  int64_t prompt_len = 0;
  uint64_t prompt_hash = 0;        // hash_tokens(prompt): a mis-paired request is refused

  Json to_json() const;
  static Result<RoomTarget> from_json(const Json& j);
};

}  // namespace pdserve::disagg
