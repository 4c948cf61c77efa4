// Which bytes move for one room: the writes prefill submits (pages per chunk, then the KDA
// state and the aux row) and the grants decode makes so those writes, and only those, land.
// Pure functions over the two layouts, so the plan is tested without sockets.
//
// Region ids are the same scheme on both sides: rank r's MLA pool is kv_region(r), its KDA
// state pool state_region(r); one aux region per process.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pdserve/disagg/aux_row.h"
#include "pdserve/disagg/layout.h"
#include "pdserve/transfer/transport.h"
#include "pdserve/transfer/types.h"

namespace pdserve::disagg {

inline transfer::RegionId kv_region(int rank) { return 1000 + static_cast<transfer::RegionId>(rank); }
inline transfer::RegionId state_region(int rank) { return 2000 + static_cast<transfer::RegionId>(rank); }
inline constexpr transfer::RegionId kAuxRegion = 3000;

// Pages [first, last) of the prompt: src_pages[i] on prefill -> dst_pages[i] on decode, every
// MLA layer, every decode rank (each from the prefill rank latent_source_ranks() names).
// Runs of consecutive pages on both sides become one write.
std::vector<transfer::WriteOp> page_writes(const KvLayout& src, const KvLayout& dst, const std::vector<int32_t>& src_pages,
                                           const std::vector<int32_t>& dst_pages, int64_t first, int64_t last);
// The KDA state of one slot, sliced by head when the TP sizes differ.
Result<std::vector<transfer::WriteOp>> state_writes(const KvLayout& src, const KvLayout& dst, int32_t src_slot,
                                                    int32_t dst_slot);
transfer::WriteOp aux_write(int32_t src_row, int32_t dst_row);

// Registers rank `rank`'s MLA page pool and KDA state pool with `transport` under
// kv_region(rank) / state_region(rank), and records their base addresses in `bases` (both
// sides hash units from them). Empty pools (a model without MLA or KDA layers) are skipped.
Status register_rank_pools(transfer::Transport& transport, int rank, MlaKvPool& kv, KdaStatePool& state,
                           std::map<transfer::RegionId, const uint8_t*>& bases);

// Decode: what the room may receive (the prompt's pages on every rank, the slot, the row).
std::vector<transfer::Grant> room_grants(const KvLayout& dst, transfer::RoomId room, transfer::Generation gen,
                                         const std::vector<int32_t>& prompt_pages, int32_t slot, int32_t aux_row);

// Integrity: both sides hash the same units, prefill from its source bytes and decode from
// what landed, and decode refuses the room unless the sums agree. A unit is one page of one
// layer for one decode rank, one KDA state run, or the aux row, so the sum does not depend on
// how writes were merged or split. Order-independent (a wrapping sum of per-unit hashes, each
// keyed by its destination), so the two sides need not see units in the same order.
std::vector<transfer::WriteOp> page_units(const KvLayout& src, const KvLayout& dst, const std::vector<int32_t>& src_pages,
                                          const std::vector<int32_t>& dst_pages, int64_t first, int64_t last);
// `bytes` is the unit's data on the side doing the hashing.
uint64_t unit_hash(const transfer::WriteOp& unit, const void* bytes);
// 64-bit hash of a byte range (fast, not cryptographic: it catches corruption, not an attacker).
uint64_t checksum64(const void* data, size_t n, uint64_t seed = 0);

// Bytes one room moves (the formula docs/disaggregation.md states): pages x layers x page
// bytes x decode ranks + the whole-model KDA state + one aux row.
uint64_t room_bytes(const KvLayout& src, const KvLayout& dst, int64_t prompt_pages);

}  // namespace pdserve::disagg
