// The RDMA posting and completion logic against fake send queues: bounded outstanding work,
// the notification only after every data write completed, keys and addresses per NIC,
// sender-side bounds and grant checks, and what a QP error does to rooms and the peer.
#include "pdserve/transfer/rdma/write_poster.h"

#include <gtest/gtest.h>

#include "fake_send_queue.h"

namespace pdserve::transfer::rdma {
namespace {

using testing::FakeSendQueue;
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
constexpr RegionId kSrc = 1, kDst = 2, kStaging = 3, kNotifyRing = 4;

struct Rig {
  explicit Rig(int nics, int max_outstanding) : queues(nics) {
    std::vector<SendQueue*> lanes;
    for (auto& q : queues) lanes.push_back(&q);
    PeerKeys k;
    for (int n = 0; n < nics; ++n) {
      k.local[kSrc].keys.push_back(100 + n);
      k.remote[kDst].keys.push_back(200 + n);
      k.local[kStaging].keys.push_back(300 + n);
      k.remote[kNotifyRing].keys.push_back(400 + n);
    }
    k.local[kSrc].addr = 0x10000000, k.local[kSrc].size = 64 * MiB;
    k.remote[kDst].addr = 0x70000000, k.remote[kDst].size = 64 * MiB;
    k.local[kStaging].addr = 0x20000000, k.local[kStaging].size = 4 * KiB;
    k.remote[kNotifyRing].addr = 0x80000000, k.remote[kNotifyRing].size = 4 * KiB;
    poster = std::make_unique<WritePoster>(lanes, k, max_outstanding);
  }
  StripePlan plan(std::vector<WriteOp> writes, StripeOptions opt = {}) {
    auto p = plan_stripes(writes, static_cast<int>(queues.size()), opt);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return *p;
  }
  // Grants the whole destination region and the first notify slot to room under gen.
  static std::vector<Grant> grants(RoomId room, Generation gen) {
    return {{room, kDst, 0, 64 * MiB, gen}, {room, kNotifyRing, 0, 64, gen}};
  }
  static WriteOp notify() { return {kStaging, 0, kNotifyRing, 0, 64}; }
  void drain() {
    for (bool more = true; more;) {
      more = false;
      for (size_t i = 0; i < queues.size(); ++i) {
        queues[i].complete_all();
        more |= poster->progress(static_cast<int>(i)) > 0;
      }
    }
  }
  std::vector<FakeSendQueue> queues;
  std::unique_ptr<WritePoster> poster;
};

TEST(WritePoster, KeepsAtMostMaxOutstandingAndNotifiesLast) {
  Rig rig(1, 2);
  std::vector<WriteOp> writes;
  for (uint64_t i = 0; i < 5; ++i) writes.push_back({kSrc, i * 2 * MiB, kDst, i * 2 * MiB + 4 * KiB, 1 * MiB});  // 5 runs (gaps)
  auto b = rig.poster->submit(7, 3, rig.plan(writes), Rig::grants(7, 3), Rig::notify(), 0xabc);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  FakeSendQueue& q = rig.queues[0];
  EXPECT_EQ(q.all.size(), 2u);
  EXPECT_EQ(rig.poster->posted(0), 2u);
  q.complete(1);
  rig.poster->progress(0);
  EXPECT_EQ(q.all.size(), 3u);  // one retired, one more posted
  EXPECT_FALSE((*b)->poll().has_value());
  q.complete_all();
  rig.poster->progress(0);
  q.complete_all();
  rig.poster->progress(0);
  ASSERT_EQ(q.all.size(), 6u);  // 5 data writes, then the notification
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(q.all[i].imm.has_value()) << i;
  ASSERT_TRUE(q.all[5].imm.has_value());
  EXPECT_EQ(*q.all[5].imm, 0xabcu);
  EXPECT_EQ(q.all[5].remote_addr, 0x80000000u);
  EXPECT_FALSE((*b)->poll().has_value());  // notification posted, not completed
  q.complete_all();
  rig.poster->progress(0);
  ASSERT_TRUE((*b)->poll().has_value());
  EXPECT_TRUE((*b)->poll()->is_ok());
  EXPECT_EQ((*b)->bytes(), 5 * MiB);
}

TEST(WritePoster, StripesOverNicsWithEachNicsKeysAndWaitsForAllOfThem) {
  Rig rig(2, 16);
  auto b = rig.poster->submit(1, 1, rig.plan({{kSrc, 0, kDst, 8 * MiB, 8 * MiB}}), Rig::grants(1, 1), Rig::notify(), 1);
  ASSERT_TRUE(b.is_ok());
  ASSERT_EQ(rig.queues[0].all.size(), 1u);
  ASSERT_EQ(rig.queues[1].all.size(), 1u);
  const RdmaWrite &a = rig.queues[0].all[0], &c = rig.queues[1].all[0];
  EXPECT_EQ(a.lkey, 100u);
  EXPECT_EQ(a.rkey, 200u);
  EXPECT_EQ(c.lkey, 101u);
  EXPECT_EQ(c.rkey, 201u);
  EXPECT_EQ(a.local_addr, 0x10000000u);
  EXPECT_EQ(a.remote_addr, 0x70000000u + 8 * MiB);
  EXPECT_EQ(c.local_addr, 0x10000000u + a.length);
  EXPECT_EQ(c.remote_addr, 0x70000000u + 8 * MiB + a.length);
  EXPECT_EQ(uint64_t{a.length} + c.length, 8 * MiB);
  rig.queues[0].complete_all();
  rig.poster->progress(0);
  EXPECT_EQ(rig.queues[0].all.size(), 1u);  // NIC 1's half has not landed: no notification yet
  rig.queues[1].complete_all();
  rig.poster->progress(1);
  ASSERT_EQ(rig.queues[0].all.size(), 2u);
  EXPECT_TRUE(rig.queues[0].all[1].imm.has_value());
  rig.drain();
  EXPECT_TRUE((*b)->wait(Clock::now()).is_ok());
}

TEST(WritePoster, RefusesWritesOutsideRegionsOrGrantsBeforePostingAnything) {
  Rig rig(1, 8);
  auto msg = [&](std::vector<WriteOp> w, std::vector<Grant> g) {
    auto r = rig.poster->submit(5, 2, rig.plan(w), g, std::nullopt, 0);
    return r.is_ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(msg({{kSrc, 0, kDst, 64 * MiB - 4 * KiB, 8 * KiB}}, Rig::grants(5, 2)).find("leaves the peer's region"), std::string::npos);
  EXPECT_NE(msg({{kSrc, 64 * MiB, kDst, 0, 4 * KiB}}, Rig::grants(5, 2)).find("leaves local region"), std::string::npos);
  EXPECT_NE(msg({{kSrc, 0, 99, 0, 4 * KiB}}, {{5, 99, 0, 4 * KiB, 2}}).find("no region 99"), std::string::npos);
  EXPECT_NE(msg({{kSrc, 0, kDst, 0, 4 * KiB}}, Rig::grants(5, 1)).find("outside room 5's grants"), std::string::npos);  // old generation
  EXPECT_NE(msg({{kSrc, 0, kDst, 0, 4 * KiB}}, Rig::grants(6, 2)).find("outside room 5's grants"), std::string::npos);  // another room
  // Two adjacent grants cover a run that spans both; a gap between them does not.
  EXPECT_EQ(msg({{kSrc, 0, kDst, 0, 8 * KiB}}, {{5, kDst, 0, 4 * KiB, 2}, {5, kDst, 4 * KiB, 4 * KiB, 2}}), "ok");
  EXPECT_NE(msg({{kSrc, 0, kDst, 0, 8 * KiB}}, {{5, kDst, 0, 4 * KiB, 2}, {5, kDst, 5 * KiB, 4 * KiB, 2}}).find("grants"), std::string::npos);
  EXPECT_EQ(rig.queues[0].all.size(), 1u);  // only the one accepted batch was posted
}

TEST(WritePoster, AnErrorCompletionFailsTheRoomsOnThatNicAndBlocksThePeer) {
  Rig rig(2, 16);
  // Room 1 is striped over both NICs; room 2 is small and lands on one NIC only.
  auto big = rig.poster->submit(1, 1, rig.plan({{kSrc, 0, kDst, 0, 8 * MiB}}), Rig::grants(1, 1), Rig::notify(), 1);
  auto small = rig.poster->submit(2, 1, rig.plan({{kSrc, 9 * MiB, kDst, 9 * MiB, 4 * KiB}}), Rig::grants(2, 1), std::nullopt, 0);
  ASSERT_TRUE(big.is_ok() && small.is_ok());
  // Each batch is planned alone, so room 2's one piece goes to NIC 0 (ties go low).
  ASSERT_EQ(rig.queues[0].all.size(), 2u);
  rig.queues[1].complete(1, /*fail_from=*/0);
  rig.poster->progress(1);
  EXPECT_EQ(rig.poster->lane_state(1), ConnState::kError);
  ASSERT_TRUE((*big)->poll().has_value());
  EXPECT_EQ((*big)->poll()->code(), ErrorCode::kUnavailable);
  EXPECT_NE((*big)->poll()->message().find("remote access error"), std::string::npos);
  // The other NIC's work still completes; room 1's half there is ignored, room 2 finishes.
  rig.queues[0].complete_all();
  rig.poster->progress(0);
  ASSERT_TRUE((*small)->poll().has_value());
  EXPECT_TRUE((*small)->poll()->is_ok());
  EXPECT_EQ(rig.queues[0].all.size(), 2u);  // no notification for the failed room
  // Blocked until the peer re-registers and the failed lane is replaced.
  auto refused = rig.poster->submit(3, 1, rig.plan({{kSrc, 0, kDst, 0, 4 * KiB}}), Rig::grants(3, 1), std::nullopt, 0);
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("re-registers"), std::string::npos);
  FakeSendQueue fresh;
  ASSERT_TRUE(rig.poster->reconnect(1, &fresh).is_ok());
  EXPECT_FALSE(rig.poster->reconnect(1, &fresh).is_ok());  // only a lane in error is replaced
  EXPECT_EQ(rig.poster->lane_state(1), ConnState::kConnected);
  auto again = rig.poster->submit(4, 1, rig.plan({{kSrc, 0, kDst, 0, 8 * MiB}}), Rig::grants(4, 1), std::nullopt, 0);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(fresh.all.size(), 1u);
  rig.queues[0].complete_all();
  rig.poster->progress(0);
  fresh.complete_all();
  rig.poster->progress(1);
  EXPECT_TRUE((*again)->poll().has_value() && (*again)->poll()->is_ok());
}

TEST(WritePoster, ARefusedPostFailsTheBatchLikeAnErrorCompletion) {
  Rig rig(1, 4);
  rig.queues[0].refuse_posts = true;
  auto b = rig.poster->submit(1, 1, rig.plan({{kSrc, 0, kDst, 0, 4 * KiB}}), Rig::grants(1, 1), Rig::notify(), 1);
  ASSERT_TRUE(b.is_ok());
  ASSERT_TRUE((*b)->poll().has_value());
  EXPECT_NE((*b)->poll()->message().find("refuses posts"), std::string::npos);
  EXPECT_EQ(rig.poster->lane_state(0), ConnState::kError);
}

TEST(WritePoster, CloseFailsEverythingInFlightAndRefusesMore) {
  Rig rig(1, 1);
  auto a = rig.poster->submit(1, 1, rig.plan({{kSrc, 0, kDst, 0, 4 * KiB}}), Rig::grants(1, 1), std::nullopt, 0);
  auto b = rig.poster->submit(2, 1, rig.plan({{kSrc, 0, kDst, 8 * KiB, 4 * KiB}}), Rig::grants(2, 1), std::nullopt, 0);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(rig.queues[0].all.size(), 1u);  // b waits for a slot
  rig.poster->close(Status(ErrorCode::kUnavailable, "peer closed"));
  EXPECT_EQ((*a)->poll()->message(), "peer closed");
  EXPECT_EQ((*b)->poll()->message(), "peer closed");
  rig.queues[0].complete_all();
  rig.poster->progress(0);  // late completions of a closed peer change nothing
  EXPECT_EQ(rig.queues[0].all.size(), 1u);
  EXPECT_EQ(rig.poster->submit(3, 1, rig.plan({{kSrc, 0, kDst, 0, 4 * KiB}}), Rig::grants(3, 1), std::nullopt, 0).status().message(),
            "peer closed");
  EXPECT_EQ(rig.poster->lane_state(0), ConnState::kClosed);
}

TEST(WritePoster, ABatchWithoutWritesOrNotifyFinishesAtOnce) {
  Rig rig(1, 1);
  auto b = rig.poster->submit(1, 1, StripePlan{}, {}, std::nullopt, 0);
  ASSERT_TRUE(b.is_ok());
  EXPECT_TRUE((*b)->poll().has_value() && (*b)->poll()->is_ok());
}

TEST(WritePoster, ARoomsNotificationWaitsForItsEarlierBatchesOnOtherNics) {
  Rig rig(2, 16);
  StripePlan first;  // room 3's first batch: one write on NIC 1, no notification
  first.wrs.push_back({1, {kSrc, 0, kDst, 0, 64 * KiB}});
  StripePlan second;  // its last batch: one write on NIC 0, then the notification
  second.wrs.push_back({0, {kSrc, 64 * KiB, kDst, 64 * KiB, 64 * KiB}});
  auto a = rig.poster->submit(3, 1, first, Rig::grants(3, 1), std::nullopt, 0);
  auto b = rig.poster->submit(3, 1, second, Rig::grants(3, 1), Rig::notify(), 9);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  rig.queues[0].complete_all();
  rig.poster->progress(0);
  EXPECT_EQ(rig.queues[0].all.size(), 1u) << "notified before the room's earlier batch landed";
  rig.queues[1].complete_all();
  rig.poster->progress(1);
  ASSERT_EQ(rig.queues[0].all.size(), 2u);
  EXPECT_TRUE(rig.queues[0].all[1].imm.has_value());
  rig.drain();
  EXPECT_TRUE((*a)->poll()->is_ok());
  EXPECT_TRUE((*b)->poll()->is_ok());
}

TEST(WritePoster, AFailedBatchAbortsTheRoomsLaterNotification) {
  Rig rig(2, 16);
  StripePlan first, second;
  first.wrs.push_back({1, {kSrc, 0, kDst, 0, 64 * KiB}});
  second.wrs.push_back({0, {kSrc, 64 * KiB, kDst, 64 * KiB, 64 * KiB}});
  auto a = rig.poster->submit(3, 1, first, Rig::grants(3, 1), std::nullopt, 0);
  auto b = rig.poster->submit(3, 1, second, Rig::grants(3, 1), Rig::notify(), 9);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  rig.queues[0].complete_all();
  rig.poster->progress(0);
  rig.queues[1].complete(1, 0);  // NIC 1's write fails
  rig.poster->progress(1);
  EXPECT_EQ((*a)->poll()->code(), ErrorCode::kUnavailable);
  ASSERT_TRUE((*b)->poll().has_value());
  EXPECT_FALSE((*b)->poll()->is_ok());
  for (const auto& w : rig.queues[0].all) EXPECT_FALSE(w.imm.has_value()) << "a failed room notified";
}

TEST(WritePoster, ABatchWhoseNotificationNicFailedFailsInsteadOfWaiting) {
  Rig rig(2, 16);
  StripePlan on_nic1, on_nic0;
  on_nic1.wrs.push_back({1, {kSrc, 0, kDst, 0, 64 * KiB}});
  on_nic0.wrs.push_back({0, {kSrc, 64 * KiB, kDst, 64 * KiB, 64 * KiB}});
  auto a = rig.poster->submit(1, 1, on_nic1, Rig::grants(1, 1), Rig::notify(), 1);  // notifies on NIC 0
  auto b = rig.poster->submit(2, 1, on_nic0, Rig::grants(2, 1), std::nullopt, 0);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  rig.queues[0].complete(1, 0);  // NIC 0 fails under room 2's write
  rig.poster->progress(0);
  EXPECT_FALSE((*b)->poll()->is_ok());
  rig.queues[1].complete_all();  // room 1's data landed on NIC 1
  rig.poster->progress(1);
  ASSERT_TRUE((*a)->poll().has_value()) << "a batch waits forever on a failed NIC";
  EXPECT_EQ((*a)->poll()->code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace pdserve::transfer::rdma
