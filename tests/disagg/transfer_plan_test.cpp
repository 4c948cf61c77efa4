// The transfer plan as pure data: runs merge only where both sides are contiguous, every
// decode rank gets the latent, grants cover exactly what the writes touch, the layout check
// names both values, and the aux row refuses stale or mis-addressed rows.
#include <gtest/gtest.h>

#include <set>

#include "pdserve/disagg/aux_row.h"
#include "pdserve/disagg/bootstrap_messages.h"
#include "pdserve/disagg/transfer_plan.h"

namespace pdserve::disagg {
namespace {

KvLayout layout(int tp, int64_t num_pages = 32) {
  KvLayout l;
  l.role = "x";
  l.instance_id = "i";
  l.model_fingerprint = "f";
  l.tp = tp;
  l.page_size = 4;
  l.mla_layers = 2;
  l.entry_dim = 3;
  l.num_pages = num_pages;
  l.kda = KdaStateShape{2, 8, 2, 3};
  l.num_slots = 4;
  return l;
}

TEST(TransferPlan, PageRunsMergeOnlyWhereBothSidesAreContiguous) {
  const KvLayout src = layout(1, 32), dst = layout(1, 64);
  const std::vector<int32_t> sp = {3, 4, 5, 9}, dp = {10, 11, 20, 21};
  auto w = page_writes(src, dst, sp, dp, 0, 4);
  // Runs: [3,4]->[10,11], [5]->[20], [9]->[21]; per layer (2).
  ASSERT_EQ(w.size(), 6u);
  const uint64_t pb = 4 * 3 * sizeof(float);
  EXPECT_EQ(w[0].local_offset, 3 * pb);
  EXPECT_EQ(w[0].remote_offset, 10 * pb);
  EXPECT_EQ(w[0].length, 2 * pb);
  EXPECT_EQ(w[3].local_offset, (32 + 3) * pb);   // layer 1 on prefill: stride 32 pages
  EXPECT_EQ(w[3].remote_offset, (64 + 10) * pb); // layer 1 on decode: stride 64 pages
  // A sub-range starts where the last chunk stopped.
  auto tail = page_writes(src, dst, sp, dp, 3, 4);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].local_offset, 9 * pb);
}

// kv_cache_dtype bfloat16: the same pages, half the bytes per page, and the grants, units and
// room bytes follow; the KDA state and aux row are unchanged.
TEST(TransferPlan, Bf16PagesMoveHalfTheBytes) {
  KvLayout s32 = layout(2), d32 = layout(4), s16 = layout(2), d16 = layout(4);
  s16.kv_dtype = d16.kv_dtype = "bfloat16";
  EXPECT_EQ(s32.page_bytes(), 4 * 3 * 4);
  EXPECT_EQ(s16.page_bytes(), 4 * 3 * 2);
  const std::vector<int32_t> sp = {3, 4, 9}, dp = {10, 11, 20};
  auto w32 = page_writes(s32, d32, sp, dp, 0, 3), w16 = page_writes(s16, d16, sp, dp, 0, 3);
  ASSERT_EQ(w16.size(), w32.size());
  for (size_t i = 0; i < w16.size(); ++i) {
    EXPECT_EQ(w16[i].length * 2, w32[i].length);
    EXPECT_EQ(w16[i].local_offset * 2, w32[i].local_offset);
    EXPECT_EQ(w16[i].remote_offset * 2, w32[i].remote_offset);
  }
  const uint64_t fixed = static_cast<uint64_t>(slot_floats(s32.kda, 1)) * 4 + sizeof(AuxRow);
  EXPECT_EQ((room_bytes(s16, d16, 3) - fixed) * 2, room_bytes(s32, d32, 3) - fixed);
  uint64_t granted = 0;
  for (const auto& g : room_grants(d16, 1, 1, dp, 0, 0))
    if (g.region == kv_region(0)) granted += g.length;
  EXPECT_EQ(granted, 3u * 2 * static_cast<uint64_t>(d16.page_bytes()));  // 3 pages x 2 layers on rank 0
  for (const auto& u : page_units(s16, d16, sp, dp, 0, 3)) EXPECT_EQ(u.length, static_cast<uint64_t>(s16.page_bytes()));
  // The layout says so, reads back, and refuses a dtype it does not know.
  auto back = KvLayout::from_json(s16.to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->kv_dtype, "bfloat16");
  Json bad = s16.to_json();
  bad["kv_dtype"] = "float16";
  auto r = KvLayout::from_json(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("kv_dtype"), std::string::npos) << r.status().message();
  // A float32 decode refuses a bfloat16 prefill, naming the field and both values.
  Status st = check_pair(s16, d32);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("kv_dtype: prefill bfloat16, decode float32"), std::string::npos) << st.message();
  // describe_layout takes the dtype from the pool.
  ModelConfig cfg;
  MlaKvPool kv(2, 8, 4, 3, DType::kBF16);
  KdaStatePool state(0, 2, 8, 2, 4);
  EXPECT_EQ(describe_layout("prefill", cfg, "f", 1, kv, state, true).kv_dtype, "bfloat16");
  EXPECT_EQ(describe_layout("prefill", cfg, "f", 1, MlaKvPool(2, 8, 4, 3), state, true).kv_dtype, "float32");
}

TEST(TransferPlan, EveryDecodeRankGetsTheLatentFromItsSourceRank) {
  const KvLayout src = layout(2), dst = layout(4);
  auto w = page_writes(src, dst, {0}, {0}, 0, 1);
  ASSERT_EQ(w.size(), 4u * 2u);
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  for (const auto& op : w) pairs.insert({op.local_region, op.remote_region});
  EXPECT_TRUE(pairs.count({kv_region(0), kv_region(0)}));
  EXPECT_TRUE(pairs.count({kv_region(0), kv_region(1)}));
  EXPECT_TRUE(pairs.count({kv_region(1), kv_region(2)}));
  EXPECT_TRUE(pairs.count({kv_region(1), kv_region(3)}));
}

TEST(TransferPlan, GrantsCoverEveryWriteAndNothingMore) {
  for (auto [ptp, dtp] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 2}, std::pair{8, 1}}) {
    const KvLayout src = layout(ptp), dst = layout(dtp);
    const std::vector<int32_t> sp = {1, 2, 7}, dp = {5, 6, 9};
    std::vector<transfer::WriteOp> w = page_writes(src, dst, sp, dp, 0, 3);
    auto st = state_writes(src, dst, 2, 3);
    ASSERT_TRUE(st.is_ok());
    w.insert(w.end(), st->begin(), st->end());
    w.push_back(aux_write(2, 3));
    auto grants = room_grants(dst, 42, 7, dp, 3, 3);
    uint64_t written = 0, granted = 0;
    for (const auto& op : w) {
      written += op.length;
      bool inside = false;
      for (const auto& g : grants)
        inside |= g.region == op.remote_region && op.remote_offset >= g.offset && op.remote_offset + op.length <= g.offset + g.length;
      EXPECT_TRUE(inside) << "write to region " << op.remote_region << " at " << op.remote_offset << " is not granted";
    }
    for (const auto& g : grants) granted += g.length;
    EXPECT_EQ(written, granted) << "P" << ptp << " D" << dtp;
    EXPECT_EQ(written, room_bytes(src, dst, 3));
  }
}

TEST(Checksum, UnitSumsAgreeAcrossMergingAndCatchOneFlippedBit) {
  const KvLayout src = layout(2), dst = layout(4);
  const std::vector<int32_t> sp = {1, 2, 3, 7}, dp = {4, 5, 6, 9};
  // Fake pools: page bytes are a function of (layer, page), identical on both sides.
  auto fill = [](std::vector<uint8_t>& pool, const KvLayout& l, const std::vector<int32_t>& pages) {
    const uint64_t pb = static_cast<uint64_t>(l.page_bytes());
    pool.assign(static_cast<size_t>(l.mla_layers * l.num_pages) * pb, 0);
    for (int64_t layer = 0; layer < l.mla_layers; ++layer)
      for (size_t i = 0; i < pages.size(); ++i)
        for (uint64_t b = 0; b < pb; ++b)
          pool[(static_cast<uint64_t>(layer * l.num_pages) + static_cast<uint64_t>(pages[i])) * pb + b] =
              static_cast<uint8_t>(layer * 31 + static_cast<int64_t>(i) * 7 + static_cast<int64_t>(b));
  };
  std::vector<uint8_t> sbuf, dbuf;
  fill(sbuf, src, sp);
  fill(dbuf, dst, dp);
  uint64_t sent = 0, got = 0;
  // Prefill hashes in two chunks; decode hashes all at once.
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4}})
    for (const auto& u : page_units(src, dst, sp, dp, a, b)) sent += unit_hash(u, sbuf.data() + u.local_offset);
  for (const auto& u : page_units(src, dst, dp, dp, 0, 4)) got += unit_hash(u, dbuf.data() + u.remote_offset);
  EXPECT_EQ(sent, got);
  dbuf[(static_cast<uint64_t>(dst.num_pages) + 6) * 48 + 5] ^= 0x10;  // layer 1, page 6, one bit
  uint64_t bad = 0;
  for (const auto& u : page_units(src, dst, dp, dp, 0, 4)) bad += unit_hash(u, dbuf.data() + u.remote_offset);
  EXPECT_NE(sent, bad);
  // The same bytes at another destination are another unit.
  transfer::WriteOp a{0, 0, kv_region(0), 0, 48}, b{0, 0, kv_region(1), 0, 48};
  EXPECT_NE(unit_hash(a, sbuf.data()), unit_hash(b, sbuf.data()));
}

TEST(Layout, MismatchNamesTheFieldAndBothValues) {
  KvLayout p = layout(1), d = layout(1);
  EXPECT_TRUE(check_pair(p, d).is_ok());
  d.page_size = 8;
  Status st = check_pair(p, d);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("page_size: prefill 4, decode 8"), std::string::npos) << st.message();
  d = layout(1);
  d.kv_dtype = "bfloat16";
  EXPECT_NE(check_pair(p, d).message().find("kv_dtype: prefill float32, decode bfloat16"), std::string::npos);
  d = layout(1);
  d.model_fingerprint = "other";
  EXPECT_NE(check_pair(p, d).message().find("model"), std::string::npos);
  d = layout(3);
  EXPECT_FALSE(check_pair(p, d).is_ok());  // 3 does not divide 8 heads
}

TEST(Layout, JsonRoundTripAndBadValuesNamed) {
  KvLayout l = layout(2);
  auto back = KvLayout::from_json(l.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->to_json(), l.to_json());
  Json j = l.to_json();
  j["page_size"] = -1;
  auto bad = KvLayout::from_json(j);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("page_size"), std::string::npos);
}

TEST(RoomTargetJson, RefusesPagesOutsideThePoolAndWrongCounts) {
  RoomTarget t;
  t.room = 9;
  t.generation = 1;
  t.decode = layout(1, 8);
  t.transfer_host = "127.0.0.1";
  t.transfer_port = 1234;
  t.pages = {1, 2};
  t.slot = 0;
  t.aux_row = 0;
  t.prompt_len = 5;  // 2 pages of 4
  t.prompt_hash = 77;
  ASSERT_TRUE(RoomTarget::from_json(t.to_json()).is_ok());
  RoomTarget bad = t;
  bad.pages = {1, 8};
  EXPECT_NE(RoomTarget::from_json(bad.to_json()).status().message().find("outside"), std::string::npos);
  bad = t;
  bad.pages = {1};
  EXPECT_NE(RoomTarget::from_json(bad.to_json()).status().message().find("pages"), std::string::npos);
  bad = t;
  bad.slot = 4;
  EXPECT_FALSE(RoomTarget::from_json(bad.to_json()).is_ok());
}

TEST(AuxRow, RefusesStaleAndMisaddressedRows) {
  runtime::FirstToken f;
  f.token = 17;
  f.logprob = {17, -0.5f, {{17, -0.5f}, {3, -1.5f}}};
  AuxRow row = make_aux_row(100, 4, 33, f);
  auto ok = check_aux_row(row, 100, 4, 33);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->token, 17);
  ASSERT_EQ(ok->logprob.top.size(), 2u);
  EXPECT_EQ(ok->logprob.top[1].id, 3);
  EXPECT_EQ(check_aux_row(row, 101, 4, 33).status().code(), ErrorCode::kDataLoss);  // another room's row
  EXPECT_EQ(check_aux_row(row, 100, 5, 33).status().code(), ErrorCode::kDataLoss);  // an older generation
  EXPECT_EQ(check_aux_row(row, 100, 4, 34).status().code(), ErrorCode::kDataLoss);  // a different prompt
  EXPECT_EQ(check_aux_row(AuxRow{}, 100, 4, 33).status().code(), ErrorCode::kDataLoss);  // never written
}

}  // namespace
}  // namespace pdserve::disagg
