#include "pdserve/disagg/bootstrap_messages.h"

namespace pdserve::disagg {

Json RoomTarget::to_json() const {
  return Json{{"room", room},
              {"generation", generation},
              {"decode", decode.to_json()},
              {"transfer_host", transfer_host},
              {"transfer_port", transfer_port},
              {"pages", pages},
              {"slot", slot},
              {"aux_row", aux_row},
              {"prompt_len", prompt_len},
              {"prompt_hash", prompt_hash}};
}

Result<RoomTarget> RoomTarget::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("target: must be a JSON object");
  JsonFields f(j, "target");
  RoomTarget t;
  if (!j.contains("room") || !j.at("room").is_number_unsigned()) return f.error("room", "must be an unsigned integer");
  t.room = j.at("room").get<uint64_t>();
  if (t.room == 0) return f.error("room", "must be nonzero");
  PDS_ASSIGN_OR_RETURN(int64_t gen, f.get_int("generation"));
  if (gen < 0 || gen > 0xffffffffll) return f.error("generation", "must fit 32 bits");
  t.generation = static_cast<uint32_t>(gen);
  if (!j.contains("decode")) return f.error("decode", "is required");
  PDS_ASSIGN_OR_RETURN(t.decode, KvLayout::from_json(j.at("decode")));
  PDS_ASSIGN_OR_RETURN(t.transfer_host, f.get_string("transfer_host"));
  PDS_ASSIGN_OR_RETURN(int64_t port, f.get_int("transfer_port"));
  if (port < 1 || port > 65535) return f.error("transfer_port", "must be in [1, 65535]");
  t.transfer_port = static_cast<int>(port);
  PDS_ASSIGN_OR_RETURN(std::vector<int64_t> pages, f.get_int_list("pages"));
  for (int64_t p : pages) {
    if (p < 0 || p >= t.decode.num_pages) return f.error("pages", "page " + std::to_string(p) + " is outside decode's pool");
    t.pages.push_back(static_cast<int32_t>(p));
  }
  PDS_ASSIGN_OR_RETURN(int64_t slot, f.get_int("slot"));
  if (slot < 0 || slot >= t.decode.num_slots) return f.error("slot", "is outside decode's slots");
  t.slot = static_cast<int32_t>(slot);
  PDS_ASSIGN_OR_RETURN(int64_t aux, f.get_int("aux_row"));
  if (aux < 0 || aux >= t.decode.num_slots) return f.error("aux_row", "is outside decode's aux rows");
  t.aux_row = static_cast<int32_t>(aux);
  PDS_ASSIGN_OR_RETURN(t.prompt_len, f.get_int("prompt_len"));
  if (t.prompt_len < 1) return f.error("prompt_len", "must be positive");
  if (static_cast<int64_t>(t.pages.size()) != (t.prompt_len + t.decode.page_size - 1) / t.decode.page_size)
    return f.error("pages", "must hold exactly the prompt's pages");
  if (!j.contains("prompt_hash") || !j.at("prompt_hash").is_number_unsigned())
    return f.error("prompt_hash", "must be an unsigned integer");
  t.prompt_hash = j.at("prompt_hash").get<uint64_t>();
  return t;
}

}  // namespace pdserve::disagg
