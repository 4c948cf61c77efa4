// What an RDMA peer sends before and around its writes, on arbitrary bytes: the connection
// info, a pushed grant, and a notification-ring slot. Each is refused, or what it accepts is
// within bounds (a slot's payload inside the slot) and re-encodes to something accepted again.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "../src/transfer/rdma/control_channel.h"
#include "../src/transfer/rdma/notify_slot.h"
#include "pdserve/transfer/rdma/conn_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdserve::transfer;
  using namespace pdserve::transfer::rdma;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (auto info = decode_conn_info(bytes); info.is_ok()) {
    auto again = decode_conn_info(encode_conn_info(*info));
    if (!again.is_ok() || again->nics.size() != info->nics.size() || again->regions.size() != info->regions.size()) std::abort();
  }
  if (auto g = control::decode_grant(bytes); g.is_ok()) {
    if (g->length == 0 || g->offset > UINT64_MAX - g->length) std::abort();
    if (!control::decode_grant(control::encode_grant(*g)).is_ok()) std::abort();
  }
  if (size >= kNotifyHeaderBytes) {
    std::vector<uint8_t> slot(data, data + size);
    if (auto n = read_notify_slot(slot.data(), slot.size()); n.is_ok() && n->payload.size() > size - kNotifyHeaderBytes) std::abort();
  }
  return 0;
}
