// The cache of the disaggregation roles between two nodes of one instance (src/server/
// node_cache.h), in this process over a loopback node link: node 0's staging pools of rank 1
// reach node 1's pools (decode: forward_region + apply_cache) and back (prefill: fetch_region +
// answer_fetch) with every byte intact, in the pools' dtype. A bfloat16 page frame carries the
// pool's bf16 bits (half the float32 frame); a frame in another dtype than the receiving
// pool's is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <iostream>

#include "model/test_models.h"
#include "pdserve/model/parallel.h"
#include "server/node_cache.h"

namespace pdserve::server {
namespace {

namespace node = transfer::node;

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Deterministic bytes of every kind a pool can hold: for bf16 pools every 16-bit pattern
// (NaN payloads, -0.0, infinities, denormals) shows up; for fp32 the same.
void fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<uint8_t>(x >> 24);
  }
  if (n >= 8) {  // -0.0 and a NaN with a payload at the front, in either dtype's layout
    const uint16_t neg_zero = 0x8000, nan = 0x7fc1;
    std::memcpy(p, &neg_zero, 2);
    std::memcpy(p + 2, &nan, 2);
    const uint32_t nan32 = 0x7fa00001u;  // a signalling NaN with a payload
    std::memcpy(p + 4, &nan32, 4);
  }
}

void fill_region(MlaKvPool& kv, KdaStatePool& st, const CacheRegion& r, uint32_t seed) {
  for (int64_t l = 0; l < kv.num_layers(); ++l)
    for (int32_t page : r.pages) fill(kv.page_ptr(l, page), static_cast<size_t>(kv.page_bytes()), seed + 131 * static_cast<uint32_t>(l) + page);
  fill(reinterpret_cast<uint8_t*>(st.slot_base(r.slot)), static_cast<size_t>(st.slot_floats()) * sizeof(float), seed + 7);
}

void expect_same_region(MlaKvPool& a, KdaStatePool& sa, MlaKvPool& b, KdaStatePool& sb, const CacheRegion& r) {
  ASSERT_EQ(a.num_layers(), b.num_layers());
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int32_t page : r.pages)
      EXPECT_EQ(0, std::memcmp(a.page_ptr(l, page), b.page_ptr(l, page), static_cast<size_t>(a.page_bytes()))) << "layer " << l << " page " << page;
  EXPECT_EQ(0, std::memcmp(sa.slot_base(r.slot), sb.slot_base(r.slot), static_cast<size_t>(sa.slot_floats()) * sizeof(float)));
}

// Node 0 (ranks 0 of 2, staging pools for rank 1) and node 1 (rank 1), joined by a node link.
struct TwoNodeCache {
  std::unique_ptr<TpModelGroup> leader, follower;
  std::unique_ptr<node::LeaderLink> lead;
  std::unique_ptr<node::FollowerLink> follow;

  explicit TwoNodeCache(DType dtype) {
    const std::string dir = pdserve::testing::tiny_model_dir("tiny-k3-wide");
    auto comms = make_in_process_group(2);  // never used: no step runs
    std::vector<std::unique_ptr<Communicator>> c0, c1;
    c0.push_back(std::move(comms[0]));
    c1.push_back(std::move(comms[1]));
    auto l = TpModelGroup::load_node_models(dir, 2, 0, std::move(c0));
    auto f = TpModelGroup::load_node_models(dir, 2, 1, std::move(c1));
    EXPECT_TRUE(l.is_ok() && f.is_ok());
    if (!l.is_ok() || !f.is_ok()) return;
    leader = std::move(*l);
    follower = std::move(*f);
    leader->make_pools(8, 16, 2, dtype);
    leader->make_remote_pools(2);
    follower->make_pools(8, 16, 2, dtype);
    auto ll = node::LeaderLink::listen("127.0.0.1", 0, 2, "s");
    EXPECT_TRUE(ll.is_ok()) << ll.status().message();
    if (!ll.is_ok()) return;
    lead = std::move(*ll);
    auto fl = std::async(std::launch::async, [&] { return node::FollowerLink::connect("127.0.0.1", lead->port(), 1, "s", std::chrono::seconds(10)); });
    EXPECT_TRUE(lead->accept_followers(std::chrono::seconds(10)).is_ok());
    auto got = fl.get();
    EXPECT_TRUE(got.is_ok()) << got.status().message();
    if (got.is_ok()) follow = std::move(*got);
  }
  bool ok() const { return leader && follower && lead && follow; }
  MlaKvPool& staged_kv() { return leader->transfer_kv(1); }
  KdaStatePool& staged_state() { return leader->transfer_state(1); }
};

// Decode: node 0 forwards rank 1's share; node 1 writes every frame. Returns the kCache frames'
// sizes (pages first, then one per KDA layer).
std::vector<size_t> forward_and_apply(TwoNodeCache& n, const CacheRegion& region) {
  EXPECT_TRUE(forward_region(*n.lead, *n.leader, 1, region).is_ok());
  const size_t frames = region.pages.size() + static_cast<size_t>(n.staged_state().num_layers());
  std::vector<size_t> sizes;
  CacheRegion pending;
  for (size_t i = 0; i < frames; ++i) {
    auto f = n.follow->receive(std::chrono::seconds(10));
    EXPECT_TRUE(f.is_ok()) << f.status().message();
    if (!f.is_ok()) break;
    EXPECT_EQ(f->type, node::MsgType::kCache);
    sizes.push_back(node::kHeaderBytes + f->payload.size());
    auto m = node::decode_cache(bytes(f->payload), f->payload.size());
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    if (!m.is_ok()) break;
    Status st = apply_cache(*n.follower, 1, *m, &pending);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_EQ(pending.pages, region.pages);
  EXPECT_EQ(pending.slot, region.slot);
  return sizes;
}

TEST(NodeCache, Bf16PagesCrossTheNodesAsTheirOwnBitsAtHalfTheBytes) {
  const CacheRegion region{{2, 5}, 1};
  std::vector<size_t> sizes[2];
  size_t page_elems = 0;  // elements of one page over every MLA layer
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(kv_cache_dtype_name(dtype));
    TwoNodeCache n(dtype);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(n.follower->kv(0).dtype(), dtype);
    page_elems = static_cast<size_t>(n.follower->kv(0).page_elems() * n.follower->kv(0).num_layers());
    // Decode: node 0's staging pools of rank 1 -> node 1.
    fill_region(n.staged_kv(), n.staged_state(), region, 11);
    sizes[dtype == DType::kBF16] = forward_and_apply(n, region);
    expect_same_region(n.staged_kv(), n.staged_state(), n.follower->kv(0), n.follower->state(0), region);
    // Prefill: node 1's pools -> node 0's staging pools (other bytes, so nothing passes by luck).
    fill_region(n.follower->kv(0), n.follower->state(0), region, 97);
    auto answered = std::async(std::launch::async, [&] {
      auto f = n.follow->receive(std::chrono::seconds(10));
      if (!f.is_ok()) return f.status();
      auto fetch = node::decode_fetch(bytes(f->payload), f->payload.size());
      if (!fetch.is_ok()) return fetch.status();
      return answer_fetch(*n.follow, *n.follower, 1, *fetch);
    });
    Status st = fetch_region(*n.lead, *n.leader, 1, region, std::chrono::seconds(10));
    EXPECT_TRUE(st.is_ok()) << st.message();
    Status a = answered.get();
    EXPECT_TRUE(a.is_ok()) << a.message();
    expect_same_region(n.staged_kv(), n.staged_state(), n.follower->kv(0), n.follower->state(0), region);

    // A page frame in the other dtype is refused by name, never reinterpreted.
    node::CacheData wrong;
    wrong.rank = 1;
    wrong.kind = node::CacheData::kPage;
    wrong.dtype = dtype == DType::kBF16 ? DType::kF32 : DType::kBF16;
    wrong.id = 3;
    wrong.data.assign(page_elems * static_cast<size_t>(dtype_size(wrong.dtype)), 0);
    CacheRegion pending;
    st = apply_cache(*n.follower, 1, wrong, &pending);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), ErrorCode::kDataLoss);
    const std::string want = std::string("page 3 arrived as ") + kv_cache_dtype_name(wrong.dtype) + ", this rank's MLA pool holds " +
                             kv_cache_dtype_name(dtype);
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_TRUE(pending.pages.empty());
  }
  // The page frames: 2 bytes an element in bf16 (the old float frames were 4 either way); the
  // KDA state frames stay float32, the same size in both.
  ASSERT_EQ(sizes[0].size(), sizes[1].size());
  for (size_t i = 0; i < region.pages.size(); ++i) {
    EXPECT_EQ(sizes[1][i], node::kHeaderBytes + 18 + 2 * page_elems);
    EXPECT_EQ(sizes[0][i], node::kHeaderBytes + 18 + 4 * page_elems);
  }
  for (size_t i = region.pages.size(); i < sizes[0].size(); ++i) EXPECT_EQ(sizes[0][i], sizes[1][i]);
  std::cout << "node cache page frame (tiny-k3-wide, page 16, " << page_elems << " entries): float32 " << sizes[0][0] << " bytes, bfloat16 "
            << sizes[1][0] << " bytes\n";
}

}  // namespace
}  // namespace pdserve::server
