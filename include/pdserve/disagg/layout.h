// What each side of a prefill/decode pair tells the other about its cache layout, and the
// check that refuses a pair whose bytes would not mean the same thing on both sides.
// Prefill serves its layout on the bootstrap server's /route; decode sends its own with
// every room's target. Both sides check, so neither trusts the other blindly.
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/disagg/state_slicing.h"
#include "pdserve/model/cache_pools.h"
#include "pdserve/model/config.h"
#include "pdserve/transfer/types.h"

namespace pdserve::disagg {

inline constexpr int kProtocolVersion = 1;
inline constexpr int kTransferInfoVersion = 1;

// How this side moves bytes, so a pair whose transports cannot talk is refused by the layout
// check (clear message) instead of failing inside the first transfer. Travels as the optional
// "transfer" object of the layout (absent: tcp, so TCP peers of older builds are unaffected).
// The per-connection RDMA details (QP numbers, GIDs, rkeys, the notification ring) follow on
// the transport's own authenticated control connection, at the transfer address the target
// names (rdma_transport.h): they exist per peer, which the bootstrap messages are not.
struct TransferInfo {
  int version = kTransferInfoVersion;  // a reader ignores fields of newer versions it does not know
  std::string backend = "tcp";         // "tcp" or "rdma"
  int nics = 0;                        // rdma: NICs per side (both sides must use the same count)
  int notify_slots = 0;                // rdma: decode's notification ring slots per sender (informational)

  Json to_json() const;
  static Result<TransferInfo> from_json(const Json& j);
};

struct KvLayout {
  int protocol_version = kProtocolVersion;
  std::string role;               // "prefill" or "decode"
  std::string instance_id;        // random per process start: a restarted peer is a new one
  std::string model_fingerprint;  // hash of config.json, the shard index and the shards' names and sizes
  int tp = 1;
  int64_t page_size = 0;
  std::string kv_dtype = "float32";  // the MLA pool's dtype: "float32" or "bfloat16" (kv_cache_dtype)
  int64_t mla_layers = 0;
  int64_t entry_dim = 0;         // elements per token per MLA layer (latent | rope key)
  int64_t num_pages = 0;         // the pool's page count (the layer stride)
  KdaStateShape kda;             // whole-model shape (all heads)
  std::string state_dtype = "float32";
  std::string state_layout = "conv[q,k,v][H*D][K-1],recurrent[H][V][K]";
  int64_t num_slots = 0;
  bool checksum = true;          // every room's units are hashed and compared
  TransferInfo transfer;         // set by the coordinators from their transport

  Json to_json() const;
  static Result<KvLayout> from_json(const Json& j);
  int64_t kv_elem_bytes() const { return kv_dtype == "bfloat16" ? 2 : 4; }
  // Bytes of one page of one MLA layer (what the transfer moves per page and layer).
  int64_t page_bytes() const { return page_size * entry_dim * kv_elem_bytes(); }
  int64_t slot_floats_per_rank() const { return slot_floats(kda, tp); }
};

// What a transport says of itself, as the layout carries it ("fault(rdma)" counts as rdma).
TransferInfo transfer_info_of(const transfer::TransportCaps& caps);

// This process's layout from its config and pools (rank 0's pools; all ranks match).
KvLayout describe_layout(const std::string& role, const ModelConfig& cfg, const std::string& model_fingerprint,
                         int tp, const MlaKvPool& kv, const KdaStatePool& state, bool checksum);
// FNV-1a 64 over config.json, the shard index and each shard's name and size (16 hex digits).
Result<std::string> model_fingerprint(const std::string& model_dir);
std::string new_instance_id();

// kInvalidArgument naming the field and both values ("page_size: prefill 64, decode 32"),
// or a TP pair the head counts do not divide.
Status check_pair(const KvLayout& prefill, const KvLayout& decode);

// FNV-1a 64 over token ids: decode and prefill compare it to catch a mis-paired request.
uint64_t hash_tokens(const std::vector<int32_t>& tokens);

}  // namespace pdserve::disagg
