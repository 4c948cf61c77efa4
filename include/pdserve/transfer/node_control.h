// The control stream of an instance that spans nodes: node 0 (the leader) runs the scheduler
// and tells every other node (a follower) what to run, one message per engine step. The
// followers decide nothing: a step message carries the whole batch as the leader planned it
// (token ids, cached length, page table and KDA slot of every sequence), so a follower keeps
// no allocation state of its own and has nothing to mirror on admission, free or abort (a
// slot is zeroed by the forward when a sequence starts at cached_len 0, on every rank alike).
//
// Frames, little-endian:  magic "PDNC" | version u16 | type u8 | 0 u8 | payload length u32 | payload
//   kHello    leader -> follower: nnodes u32, tp u32, collective port u16, token [16],
//             group id length u32 + bytes (the NCCL unique id with --device cuda; empty on cpu),
//             role u8 (0 serve, 1 prefill, 2 decode: every node runs the leader's),
//             pp u32 (pipeline stages; > 1: node n runs stages n*pp/nnodes.., each of tp
//             ranks, and the collective port and token are the stage links' hub's)
//   kStart    leader -> follower: num_pages i64, page_size i64, num_slots i64, kv_bf16 u8 (the pools' geometry and KV dtype)
//   kReady    follower -> leader: vocab_size i64, num_layers i64 (its model, checked by the leader)
//   kStep     leader -> follower: step u64, sequences u32, each:
//             cached_len i64, slot i32, flags u8 (bit 0: all_logits), tokens u32 + i32 each,
//             pages u32 + i32 each
//   kShutdown leader -> follower: reason length u32 + bytes (the follower exits 0)
//   kCache    leader -> follower (decode role): cache prefill sent for a rank the follower
//             runs, ahead of the first step that reads it (same stream, so in order):
//             rank u32 (global), kind u8 (0: one page, every MLA layer; 1: one KDA layer of
//             one slot), dtype u8 (the values' type: 0 float32, 1 bfloat16; kind 1 is always
//             float32), id i32 (page or slot), layer u32 (kind 1: the KDA layer; kind 0: the
//             first MLA layer the values hold, consecutive layers from it, 0 = all), bytes u32
//             + the values as the pool stores them (a page: the MLA pool's raw entries, 2 bytes
//             an element in a bfloat16 pool; a whole number of elements); a receiver whose
//             pool holds another dtype refuses the frame; also follower -> leader in reply
//             to kFetch
//   kFetch    leader -> follower (prefill role): send back your ranks' share of a region the
//             last step wrote: pages u32 + i32 each, slot i32 (-1: none)
//   kFetchDone follower -> leader: the kCache frames sent in reply (u32), after the last one
//   kRound    follower -> leader (pp > 1): after each step, the verdict of this node's stages
//             on every sequence: sequences u32, each code u8 (0 ready, else the ErrorCode it
//             failed with) + text u32 + bytes; then logits u32 + f32 each (every row of the
//             step in batch order, from the node with the last stage; 0 from the others),
//             then more u8 (1: the logits continue in further kRound frames, which repeat
//             the verdicts, so no frame passes kMaxPayload)
// The connection is authenticated once when it opens (node_link.h: HMAC challenge-response
// over the cluster secret, as rank_bootstrap.h); frames are not encrypted.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/dtype.h"
#include "pdserve/core/status.h"

namespace pdserve::transfer::node {

// 2: Hello carries the role; kCache. 3: Hello.pp, kRound, pages from a layer. 4: kCache carries
// the pool's bytes and their dtype (was floats).
constexpr uint16_t kVersion = 4;
constexpr size_t kHeaderBytes = 12;
constexpr uint32_t kMaxPayload = 64u << 20;  // a step of many long prefill chunks stays far below
constexpr uint32_t kMaxGroupId = 4096;

enum class MsgType : uint8_t { kHello = 1, kStart = 2, kReady = 3, kStep = 4, kShutdown = 5, kCache = 6, kFetch = 7, kFetchDone = 8, kRound = 9 };

struct Hello {
  uint32_t nnodes = 0;
  uint32_t tp = 0;
  uint16_t collective_port = 0;          // --device cpu: rank 0's TCP collective listener
  std::array<uint8_t, 16> token{};       // what a rank presents there (tcp_collective.h)
  std::vector<uint8_t> group_id;         // --device cuda: the NCCL unique id
  uint8_t role = 0;                      // 0 serve, 1 prefill, 2 decode (kMaxRole)
  uint32_t pp = 1;                       // pipeline stages over the nodes
};
constexpr uint8_t kMaxRole = 2;

struct Start {
  int64_t num_pages = 0, page_size = 0, num_slots = 0;
  uint8_t kv_bf16 = 0;  // 1: the MLA pools hold bf16 entries (kv_cache_dtype bfloat16)
};

struct Ready {
  int64_t vocab_size = 0, num_layers = 0;
};

struct StepSeq {
  int64_t cached_len = 0;
  int32_t slot = -1;
  bool all_logits = false;
  std::vector<int32_t> tokens;
  std::vector<int32_t> pages;
};

struct Step {
  uint64_t step = 0;
  std::vector<StepSeq> seqs;
};

struct Shutdown {
  std::string reason;
};

struct CacheData {
  enum Kind : uint8_t { kPage = 0, kStateLayer = 1 };
  uint32_t rank = 0;
  uint8_t kind = kPage;
  DType dtype = DType::kF32;  // kF32 or kBF16 (pages only)
  int32_t id = 0;
  uint32_t layer = 0;
  std::vector<uint8_t> data;  // the values' bytes, little-endian, as the pool holds them
};

struct Fetch {
  std::vector<int32_t> pages;
  int32_t slot = -1;
};

struct FetchDone {
  uint32_t frames = 0;
};

struct Round {
  std::vector<Status> seqs;
  std::vector<float> logits;
  bool more = false;  // the logits continue in the next kRound frame
};
// Floats of logits one kRound frame carries at most (well inside kMaxPayload).
constexpr size_t kRoundLogits = 8u << 20;

struct Header {
  MsgType type = MsgType::kHello;
  uint32_t length = 0;
};

// The 12 header bytes: kDataLoss on a wrong magic, version, type or a length past kMaxPayload.
Result<Header> decode_header(const uint8_t* bytes);

// Whole frames (header + payload).
std::string encode(const Hello& m);
std::string encode(const Start& m);
std::string encode(const Ready& m);
std::string encode(const Step& m);
std::string encode(const Shutdown& m);
std::string encode(const CacheData& m);
std::string encode(const Fetch& m);
std::string encode(const FetchDone& m);
std::string encode(const Round& m);

// Payload decoders: kDataLoss on anything short, long (trailing bytes) or out of range
// (negative lengths or ids, counts past what the payload can hold).
Result<Hello> decode_hello(const uint8_t* p, size_t n);
Result<Start> decode_start(const uint8_t* p, size_t n);
Result<Ready> decode_ready(const uint8_t* p, size_t n);
Result<Step> decode_step(const uint8_t* p, size_t n);
Result<Shutdown> decode_shutdown(const uint8_t* p, size_t n);
Result<CacheData> decode_cache(const uint8_t* p, size_t n);
Result<Fetch> decode_fetch(const uint8_t* p, size_t n);
Result<FetchDone> decode_fetch_done(const uint8_t* p, size_t n);
Result<Round> decode_round(const uint8_t* p, size_t n);

}  // namespace pdserve::transfer::node
