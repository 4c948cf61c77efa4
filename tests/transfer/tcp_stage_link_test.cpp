// Pipeline stage links between nodes over TCP (tcp_stage_link.h): activations and failures
// cross unchanged, the hub relays a boundary between two followers, strangers without the
// token are not counted, and a vanished end is an error on the other instead of a wait.
#include <gtest/gtest.h>

#include <unistd.h>

#include <future>

#include "pdserve/model/pipeline.h"
#include "pdserve/transfer/tcp_stage_link.h"

namespace pdserve::transfer {
namespace {

constexpr auto kTimeout = std::chrono::milliseconds(5000);

// Three nodes with one stage and one TP rank each: node 0's own link of boundary 0, node 1's
// ends of boundaries 0 and 1, node 2's end of boundary 1 (relayed by the hub).
struct ThreeNodes {
  std::unique_ptr<TcpStageHub> hub;
  std::unique_ptr<StageChannel> n0_out, n1_in, n1_out, n2_in;
  ThreeNodes() {
    auto h = TcpStageHub::listen("127.0.0.1");
    EXPECT_TRUE(h.is_ok()) << h.status().message();
    if (!h.is_ok()) return;
    hub = std::move(*h);
    auto connect = [&](int boundary, StageLinkSide side) {
      auto fd = connect_stage_link("127.0.0.1", hub->port(), hub->token(), boundary, 0, side, kTimeout);
      EXPECT_TRUE(fd.is_ok()) << fd.status().message();
      return fd.is_ok() ? *fd : -1;
    };
    // A stranger (wrong token) first: dropped, not counted.
    CollectiveToken wrong = hub->token();
    wrong[0] ^= 1;
    auto stranger = connect_stage_link("127.0.0.1", hub->port(), wrong, 0, 0, StageLinkSide::kReceiver, kTimeout);
    EXPECT_TRUE(stranger.is_ok());
    n1_in = make_tcp_stage_channel(connect(0, StageLinkSide::kReceiver), 1, 0, 3);
    n1_out = make_tcp_stage_channel(connect(1, StageLinkSide::kSender), 1, 2, 3);
    n2_in = make_tcp_stage_channel(connect(1, StageLinkSide::kReceiver), 2, 1, 3);
    auto own = hub->accept_links(3, 1, kTimeout);
    EXPECT_TRUE(own.is_ok()) << own.status().message();
    if (own.is_ok() && own->size() == 1) n0_out = make_tcp_stage_channel((*own)[0], 0, 1, 3);
    if (stranger.is_ok()) ::close(*stranger);
  }
};

TEST(TcpStageLink, ActivationsAndFailuresCrossTwoBoundaries) {
  ThreeNodes t;
  ASSERT_TRUE(t.n0_out && t.n1_in && t.n1_out && t.n2_in);
  std::vector<float> x(100000);  // larger than a socket buffer: the relay must keep pace
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 7.25f;
  auto sent = std::async(std::launch::async, [&] { return t.n0_out->send(1, x.data(), static_cast<int64_t>(x.size())); });
  std::vector<float> got(x.size());
  ASSERT_TRUE(t.n1_in->recv(0, got.data(), static_cast<int64_t>(got.size())).is_ok());
  ASSERT_TRUE(sent.get().is_ok());
  EXPECT_EQ(got, x);
  // Node 1 -> node 2 through the hub's relay, then a failure with its code and text.
  sent = std::async(std::launch::async, [&] { return t.n1_out->send(2, got.data(), static_cast<int64_t>(got.size())); });
  std::vector<float> got2(x.size());
  ASSERT_TRUE(t.n2_in->recv(1, got2.data(), static_cast<int64_t>(got2.size())).is_ok());
  ASSERT_TRUE(sent.get().is_ok());
  EXPECT_EQ(got2, x);
  ASSERT_TRUE(t.n1_out->send_failure(2, Status(ErrorCode::kResourceExhausted, "stage 1 ran out of pages")).is_ok());
  Status f = t.n2_in->recv(1, got2.data(), 4);
  EXPECT_EQ(f.code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(f.message(), "stage 1 ran out of pages");
  // A size the receiver did not expect is refused and read off: the next message still fits.
  ASSERT_TRUE(t.n1_out->send(2, x.data(), 3).is_ok());
  ASSERT_TRUE(t.n1_out->send(2, x.data(), 4).is_ok());
  EXPECT_EQ(t.n2_in->recv(1, got2.data(), 4).code(), ErrorCode::kInternal);
  ASSERT_TRUE(t.n2_in->recv(1, got2.data(), 4).is_ok());
  EXPECT_EQ(got2[3], x[3]);
  // A link goes only to its neighbour.
  EXPECT_EQ(t.n1_out->send(0, x.data(), 1).code(), ErrorCode::kInvalidArgument);
}

TEST(TcpStageLink, AVanishedEndIsAnErrorNotAWait) {
  ThreeNodes t;
  ASSERT_TRUE(t.n0_out && t.n1_in && t.n1_out && t.n2_in);
  t.n1_out.reset();  // node 1 gone: node 2 waiting on the relayed link hears of it
  float v[4];
  Status st = t.n2_in->recv(1, v, 4);
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.message();
  EXPECT_NE(st.message().find("another node"), std::string::npos) << st.message();
  t.n1_in.reset();
  st = t.n0_out->recv(2, v, 4);  // not its neighbour: refused without touching the socket
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  Status sent = Status::ok();
  for (int i = 0; i < 100 && sent.is_ok(); ++i) sent = t.n0_out->send(1, v, 4);  // the closed peer resets the connection
  EXPECT_EQ(sent.code(), ErrorCode::kUnavailable) << sent.message();
}

TEST(SplicedStageChannel, RoutesByGlobalStageNumber) {
  // Node with stages 2 and 3 of 5: local 0 -> 1 in process, up from 1 and down to 4 (in-process
  // stand-ins for the network links).
  auto local = make_in_process_pipeline(2);
  auto up = make_in_process_pipeline(5);    // stands in for the link from stage 1
  auto down = make_in_process_pipeline(5);  // and the one to stage 4
  auto s2 = make_spliced_stage_channel(std::move(local[0]), 2, 2, 5, std::move(up[2]), nullptr);
  auto s3 = make_spliced_stage_channel(std::move(local[1]), 2, 3, 5, nullptr, std::move(down[3]));
  EXPECT_EQ(s2->stage(), 2);
  EXPECT_EQ(s3->num_stages(), 5);
  const float a[2] = {1.5f, -3.0f};
  float b[2] = {0, 0};
  ASSERT_TRUE(up[1]->send(2, a, 2).is_ok());
  ASSERT_TRUE(s2->recv(1, b, 2).is_ok());
  ASSERT_TRUE(s2->send(3, b, 2).is_ok());
  ASSERT_TRUE(s3->recv(2, b, 2).is_ok());
  ASSERT_TRUE(s3->send(4, b, 2).is_ok());
  float c[2] = {0, 0};
  ASSERT_TRUE(down[4]->recv(3, c, 2).is_ok());
  EXPECT_EQ(c[0], 1.5f);
  EXPECT_EQ(c[1], -3.0f);
  EXPECT_EQ(s2->send(4, a, 2).code(), ErrorCode::kInvalidArgument);  // not a neighbour of stage 2
}

}  // namespace
}  // namespace pdserve::transfer
