#include "pdserve/disagg/transfer_plan.h"

#include <cstring>

namespace pdserve::disagg {

using transfer::Grant;
using transfer::WriteOp;

namespace {
constexpr uint64_t kF = sizeof(float);

// [begin, end) index ranges where both page lists step by exactly one.
template <typename F>
void for_each_page_run(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t first, int64_t last, F f) {
  int64_t i = first;
  while (i < last) {
    int64_t j = i + 1;
    while (j < last && a[j] == a[j - 1] + 1 && b[j] == b[j - 1] + 1) ++j;
    f(i, j);
    i = j;
  }
}
}  // namespace

std::vector<WriteOp> page_writes(const KvLayout& src, const KvLayout& dst, const std::vector<int32_t>& src_pages,
                                 const std::vector<int32_t>& dst_pages, int64_t first, int64_t last) {
  std::vector<WriteOp> out;
  const uint64_t page_bytes = static_cast<uint64_t>(src.page_bytes());
  const std::vector<int> source = latent_source_ranks(src.tp, dst.tp);
  for (int d = 0; d < dst.tp; ++d)
    for (int64_t l = 0; l < src.mla_layers; ++l)
      for_each_page_run(src_pages, dst_pages, first, last, [&](int64_t i, int64_t j) {
        WriteOp w;
        w.local_region = kv_region(source[static_cast<size_t>(d)]);
        w.local_offset = (static_cast<uint64_t>(l * src.num_pages) + static_cast<uint64_t>(src_pages[i])) * page_bytes;
        w.remote_region = kv_region(d);
        w.remote_offset = (static_cast<uint64_t>(l * dst.num_pages) + static_cast<uint64_t>(dst_pages[i])) * page_bytes;
        w.length = static_cast<uint64_t>(j - i) * page_bytes;
        out.push_back(w);
      });
  return out;
}

Result<std::vector<WriteOp>> state_writes(const KvLayout& src, const KvLayout& dst, int32_t src_slot, int32_t dst_slot) {
  PDS_ASSIGN_OR_RETURN(std::vector<StateRun> runs, plan_state_copy(src.kda, src.tp, dst.tp));
  const uint64_t src_base = static_cast<uint64_t>(src_slot) * static_cast<uint64_t>(src.slot_floats_per_rank());
  const uint64_t dst_base = static_cast<uint64_t>(dst_slot) * static_cast<uint64_t>(dst.slot_floats_per_rank());
  std::vector<WriteOp> out;
  out.reserve(runs.size());
  for (const StateRun& r : runs)
    out.push_back({state_region(r.src_rank), (src_base + static_cast<uint64_t>(r.src_offset)) * kF,
                   state_region(r.dst_rank), (dst_base + static_cast<uint64_t>(r.dst_offset)) * kF,
                   static_cast<uint64_t>(r.length) * kF});
  return out;
}

WriteOp aux_write(int32_t src_row, int32_t dst_row) {
  return {kAuxRegion, static_cast<uint64_t>(src_row) * sizeof(AuxRow), kAuxRegion,
          static_cast<uint64_t>(dst_row) * sizeof(AuxRow), sizeof(AuxRow)};
}

Status register_rank_pools(transfer::Transport& transport, int rank, MlaKvPool& kv, KdaStatePool& state,
                           std::map<transfer::RegionId, const uint8_t*>& bases) {
  if (kv.num_layers() > 0) {
    PDS_RETURN_IF_ERROR(transport.register_region(
        {kv_region(rank), kv.layer_bytes(0), static_cast<uint64_t>(kv.total_bytes()), "mla_pages_rank" + std::to_string(rank), false}));
    bases[kv_region(rank)] = kv.layer_bytes(0);
  }
  if (state.slot_floats() > 0) {
    PDS_RETURN_IF_ERROR(transport.register_region(
        {state_region(rank), state.slot_base(0), static_cast<uint64_t>(state.num_slots() * state.slot_floats()) * kF,
         "kda_state_rank" + std::to_string(rank), false}));
    bases[state_region(rank)] = reinterpret_cast<const uint8_t*>(state.slot_base(0));
  }
  return Status::ok();
}

std::vector<Grant> room_grants(const KvLayout& dst, transfer::RoomId room, transfer::Generation gen,
                               const std::vector<int32_t>& prompt_pages, int32_t slot, int32_t aux_row) {
  std::vector<Grant> out;
  const uint64_t page_bytes = static_cast<uint64_t>(dst.page_bytes());
  const int64_t n = static_cast<int64_t>(prompt_pages.size());
  for (int d = 0; d < dst.tp; ++d) {
    for (int64_t l = 0; l < dst.mla_layers; ++l)
      for_each_page_run(prompt_pages, prompt_pages, 0, n, [&](int64_t i, int64_t j) {
        out.push_back({room, kv_region(d),
                       (static_cast<uint64_t>(l * dst.num_pages) + static_cast<uint64_t>(prompt_pages[i])) * page_bytes,
                       static_cast<uint64_t>(j - i) * page_bytes, gen});
      });
    const uint64_t slot_bytes = static_cast<uint64_t>(dst.slot_floats_per_rank()) * kF;
    if (slot_bytes > 0) out.push_back({room, state_region(d), static_cast<uint64_t>(slot) * slot_bytes, slot_bytes, gen});
  }
  out.push_back({room, kAuxRegion, static_cast<uint64_t>(aux_row) * sizeof(AuxRow), sizeof(AuxRow), gen});
  return out;
}

std::vector<WriteOp> page_units(const KvLayout& src, const KvLayout& dst, const std::vector<int32_t>& src_pages,
                                const std::vector<int32_t>& dst_pages, int64_t first, int64_t last) {
  std::vector<WriteOp> out;
  const uint64_t page_bytes = static_cast<uint64_t>(src.page_bytes());
  const std::vector<int> source = latent_source_ranks(src.tp, dst.tp);
  for (int d = 0; d < dst.tp; ++d)
    for (int64_t l = 0; l < src.mla_layers; ++l)
      for (int64_t i = first; i < last; ++i)
        out.push_back({kv_region(source[static_cast<size_t>(d)]),
                       (static_cast<uint64_t>(l * src.num_pages) + static_cast<uint64_t>(src_pages[i])) * page_bytes,
                       kv_region(d),
                       (static_cast<uint64_t>(l * dst.num_pages) + static_cast<uint64_t>(dst_pages[i])) * page_bytes,
                       page_bytes});
  return out;
}

namespace {
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
}  // namespace

// Four independent lanes over 8-byte words keep the multiplies pipelined (several GB/s on one
// core); the tail is folded in byte by byte.
uint64_t checksum64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h[4] = {seed ^ 0x9e3779b97f4a7c15ull, seed + 0x632be59bd9b4e019ull, seed ^ 0x85ebca77c2b2ae63ull, ~seed};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      h[k] = (h[k] ^ w) * 0x9fb21c651e98df25ull;
      h[k] ^= h[k] >> 29;
    }
  uint64_t tail = n;
  for (; i < n; ++i) tail = (tail ^ p[i]) * 0x100000001b3ull;
  return mix64(h[0] ^ mix64(h[1] ^ mix64(h[2] ^ mix64(h[3] ^ tail))));
}

uint64_t unit_hash(const WriteOp& u, const void* bytes) {
  return mix64(checksum64(bytes, u.length) ^ mix64((static_cast<uint64_t>(u.remote_region) << 48) ^ u.remote_offset));
}

uint64_t room_bytes(const KvLayout& src, const KvLayout& dst, int64_t prompt_pages) {
  const uint64_t pages = static_cast<uint64_t>(prompt_pages) * static_cast<uint64_t>(src.mla_layers) *
                         static_cast<uint64_t>(src.page_bytes()) * static_cast<uint64_t>(dst.tp);
  const uint64_t state = static_cast<uint64_t>(slot_floats(src.kda, 1)) * kF;
  return pages + state + sizeof(AuxRow);
}

}  // namespace pdserve::disagg
