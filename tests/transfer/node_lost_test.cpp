// Losing a node mid-step: the group's one "lost" transition aborts the device collectives
// exactly once, a forward blocked in a collective then fails with the loss (never returns its
// garbage as a result), and a follower's link notices its leader hanging up during a step.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "model/test_models.h"
#include "pdserve/model/device_forward.h"
#include "pdserve/model/tp_group.h"
#include "pdserve/transfer/node_control.h"
#include "pdserve/transfer/node_link.h"

namespace pdserve {
namespace {

// Stands in for a CUDA rank whose forward sits in an NCCL collective waiting for a dead peer:
// with `block_until_abort` the forward returns only once abort_collectives() was called, and
// then with success and garbage (what a drained, aborted NCCL kernel leaves behind).
class CollectiveRank final : public DeviceForward {
 public:
  explicit CollectiveRank(bool block_until_abort) : block_(block_until_abort) {}
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override {
    std::unique_lock<std::mutex> l(mu_);
    entered_ = true;
    cv_.notify_all();
    if (block_) cv_.wait(l, [&] { return aborts_ > 0; });
    out->logits.assign(batch.seqs.size(), -1.0f);
    return Status::ok();
  }
  void abort_collectives() override {
    std::lock_guard<std::mutex> l(mu_);
    ++aborts_;
    cv_.notify_all();
  }
  void wait_entered() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return entered_; });
  }
  int aborts() {
    std::lock_guard<std::mutex> l(mu_);
    return aborts_;
  }
  std::string describe() const override { return "collective rank (test)"; }
  Status download(const CacheRegion&, MlaKvPool&, KdaStatePool&) override { return Status::ok(); }
  Status upload(const CacheRegion&, const MlaKvPool&, const KdaStatePool&) override { return Status::ok(); }

 private:
  bool block_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  int aborts_ = 0;
};

struct Rig {
  std::unique_ptr<TpModelGroup> group;
  CollectiveRank* rank = nullptr;
  ForwardBatch batch;
};

Rig rig(bool block_until_abort) {
  Rig r;
  auto g = TpModelGroup::load(testing::tiny_model_dir("tiny-k3"), 1, 16, 16, 2);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  r.group = std::move(g).value();
  auto dev = std::make_unique<CollectiveRank>(block_until_abort);
  r.rank = dev.get();
  EXPECT_TRUE(r.group->set_device_forward(std::move(dev)).is_ok());
  SequenceInput seq;
  seq.tokens = {1, 2, 3};
  seq.pages = *r.group->allocate_pages(1);
  seq.state_slot = *r.group->allocate_slot();
  r.batch.seqs.push_back(seq);
  return r;
}

TEST(NodeLost, TheFirstLossAbortsTheCollectivesOnceAndEveryLaterForwardFails) {
  Rig r = rig(false);
  ForwardOutput o;
  ASSERT_TRUE(r.group->forward(r.batch, &o).is_ok());
  EXPECT_EQ(r.rank->aborts(), 0);
  r.group->lose_node(Status(ErrorCode::kUnavailable, "node 1 of 2 left the instance (its control stream ended)"));
  r.group->lose_node(Status(ErrorCode::kUnavailable, "a second report of the same loss"));
  EXPECT_EQ(r.rank->aborts(), 1);
  const Status h = r.group->health();
  EXPECT_NE(h.message().find("lost one of its nodes"), std::string::npos) << h.message();
  EXPECT_NE(h.message().find("node 1 of 2 left"), std::string::npos) << h.message();  // the first cause stays
  EXPECT_EQ(r.group->forward(r.batch, &o).message(), h.message());
  EXPECT_EQ(r.rank->aborts(), 1);
}

TEST(NodeLost, AForwardBlockedInACollectiveFailsWithTheLossOnceAborted) {
  Rig r = rig(true);
  auto fwd = std::async(std::launch::async, [&] {
    ForwardOutput o;
    return r.group->forward(r.batch, &o);
  });
  r.rank->wait_entered();  // the step is "in the collective"
  r.group->lose_node(Status(ErrorCode::kUnavailable, "node 1 of 2 left the instance (its control stream ended)"));
  const Status st = fwd.get();  // returns only because lose_node aborted the collectives
  ASSERT_FALSE(st.is_ok()) << "the aborted step's garbage came back as a result";
  EXPECT_NE(st.message().find("lost one of its nodes"), std::string::npos) << st.message();
  EXPECT_EQ(r.rank->aborts(), 1);
}

// A leader of two nodes on loopback with its one follower joined (no secret).
void connect_one_follower(std::unique_ptr<transfer::node::LeaderLink>* leader, std::unique_ptr<transfer::node::FollowerLink>* follower) {
  using namespace transfer::node;
  auto l = LeaderLink::listen("127.0.0.1", 0, 2, "");
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  *leader = std::move(*l);
  const uint16_t port = (*leader)->port();
  auto joining = std::async(std::launch::async, [port] { return FollowerLink::connect("127.0.0.1", port, 1, "", std::chrono::seconds(10)); });
  ASSERT_TRUE((*leader)->accept_followers(std::chrono::seconds(10)).is_ok());
  auto f = joining.get();
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  *follower = std::move(*f);
}

TEST(NodeLost, AFollowersWatcherNoticesTheLeaderHangingUpButNotItsFrames) {
  using namespace transfer::node;
  std::unique_ptr<LeaderLink> leader;
  std::unique_ptr<FollowerLink> f;
  connect_one_follower(&leader, &f);
  if (::testing::Test::HasFatalFailure()) return;
  std::mutex mu;
  std::vector<Status> lost;
  std::promise<void> once;
  f->watch([&](const Status& why) {
    std::lock_guard<std::mutex> g(mu);
    lost.push_back(why);
    once.set_value();
  });
  Step s;
  s.step = 0;
  s.seqs.push_back({0, 0, false, {1, 2}, {0}});
  ASSERT_TRUE(leader->broadcast(encode(s)).is_ok());
  auto got = f->receive();  // a frame is the main loop's, not a loss
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->type, MsgType::kStep);
  {
    std::lock_guard<std::mutex> g(mu);
    EXPECT_TRUE(lost.empty());
  }
  leader.reset();  // the leader's process dies mid-step
  auto done = once.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  f->stop_watching();
  std::lock_guard<std::mutex> g(mu);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].code(), ErrorCode::kUnavailable);
  EXPECT_NE(lost[0].message().find("leader's control stream ended"), std::string::npos) << lost[0].message();
}

// The leader's watcher: replies read inside a reply window are never a loss, even when the
// engine reads them and closes the window between the watcher's poll and its check (a race
// seen under load as "sent data out of turn" on a healthy follower); bytes that arrive with
// no window open and stay unread are.
TEST(NodeLost, ALeadersWatcherTakesRepliesAsRepliesAndUnaskedBytesAsALoss) {
  using namespace transfer::node;
  std::unique_ptr<LeaderLink> leader;
  std::unique_ptr<FollowerLink> f;
  connect_one_follower(&leader, &f);
  if (::testing::Test::HasFatalFailure()) return;
  std::mutex mu;
  std::vector<Status> lost;
  leader->watch([&](const Status& why) {
    std::lock_guard<std::mutex> g(mu);
    lost.push_back(why);
  });
  const std::string reply = encode(FetchDone{3});
  for (int i = 0; i < 500; ++i) {
    leader->expect_replies(true);
    ASSERT_TRUE(f->send(reply).is_ok());
    auto got = leader->receive_from(1, std::chrono::seconds(10));
    leader->expect_replies(false);
    ASSERT_TRUE(got.is_ok()) << "round " << i << ": " << got.status().message();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    std::lock_guard<std::mutex> g(mu);
    ASSERT_TRUE(lost.empty()) << lost[0].message();
  }
  ASSERT_TRUE(f->send(reply).is_ok());  // nobody asked
  for (int i = 0; i < 3000; ++i) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!lost.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  leader->stop_watching();
  std::lock_guard<std::mutex> g(mu);
  ASSERT_EQ(lost.size(), 1u) << "unasked bytes were never noticed";
  EXPECT_NE(lost[0].message().find("node 1 of 2 left the instance (it sent data out of turn)"), std::string::npos) << lost[0].message();
}

TEST(NodeLost, AFollowersWatcherTakesShutdownThenHangUpAsAGoodbyeNotALoss) {
  using namespace transfer::node;
  std::unique_ptr<LeaderLink> leader;
  std::unique_ptr<FollowerLink> f;
  connect_one_follower(&leader, &f);
  if (::testing::Test::HasFatalFailure()) return;
  std::atomic<int> lost{0};
  f->watch([&](const Status&) { ++lost; });
  ASSERT_TRUE(leader->broadcast(encode(Shutdown{"the leader is stopping"})).is_ok());
  leader.reset();  // Shutdown, then the end of the stream, while this node finishes a step
  for (int i = 0; i < 3000 && !f->watcher_done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(f->watcher_done()) << "the watcher never saw the hang-up";
  EXPECT_EQ(lost.load(), 0);
  auto got = f->receive();  // the frame is still there for the main loop
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->type, MsgType::kShutdown);
}

}  // namespace
}  // namespace pdserve
