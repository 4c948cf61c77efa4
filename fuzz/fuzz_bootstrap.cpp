// The bootstrap plane's decoders on arbitrary bytes (what any host reaching the bootstrap
// port can send): a layout or a room target is either refused or internally consistent, and
// an accepted target's pages, slot and aux row lie inside the pool it describes. Also the
// aux row check on arbitrary 200-byte rows.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pdserve/disagg/aux_row.h"
#include "pdserve/disagg/bootstrap_messages.h"
#include "pdserve/disagg/transfer_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdserve::disagg;
  if (size >= sizeof(AuxRow)) {
    AuxRow row;
    std::memcpy(&row, data, sizeof row);
    auto f = check_aux_row(row, row.room, row.generation, row.cached_tokens);
    if (f.is_ok() && static_cast<int>(f->logprob.top.size()) != row.num_top) std::abort();
  }
  auto j = pdserve::parse_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!j.is_ok()) return 0;
  if (auto l = KvLayout::from_json(*j); l.is_ok()) {
    if (l->tp < 1 || l->kda.heads % l->tp != 0 || l->page_size < 1) std::abort();
    (void)check_pair(*l, *l);
  }
  if (auto t = RoomTarget::from_json(*j); t.is_ok()) {
    for (int32_t p : t->pages)
      if (p < 0 || p >= t->decode.num_pages) std::abort();
    if (t->slot < 0 || t->slot >= t->decode.num_slots || t->aux_row < 0 || t->aux_row >= t->decode.num_slots) std::abort();
    // The grants decode would make for it stay inside the described pools.
    auto grants = room_grants(t->decode, t->room, t->generation, t->pages, t->slot, t->aux_row);
    const uint64_t kv_bytes = static_cast<uint64_t>(t->decode.mla_layers * t->decode.num_pages) *
                              static_cast<uint64_t>(t->decode.page_bytes());
    for (const auto& g : grants)
      if (g.region >= kv_region(0) && g.region < state_region(0) && g.offset + g.length > kv_bytes) std::abort();
  }
  return 0;
}
