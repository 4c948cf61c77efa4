#include "pdserve/transfer/rdma/conn_state.h"

#include <gtest/gtest.h>

namespace pdserve::transfer::rdma {
namespace {

using S = ConnState;
using E = ConnEvent;

TEST(ConnState, HappyPathPostsOnlyWhenConnected) {
  ConnLifecycle c;
  for (E e : {E::kStart, E::kExchanged, E::kToRtr}) {
    EXPECT_FALSE(conn_can_post(c.state()));
    ASSERT_TRUE(c.on(e).is_ok()) << conn_event_name(e);
  }
  ASSERT_TRUE(c.on(E::kToRts).is_ok());
  EXPECT_EQ(c.state(), S::kConnected);
  EXPECT_TRUE(conn_can_post(c.state()));
}

TEST(ConnState, EveryErrorFailsInflightRoomsAndBlocksUntilReregistered) {
  struct Case {
    std::vector<E> to_get_there;
    E error;
  };
  const std::vector<Case> cases = {{{E::kStart}, E::kExchangeFailed},
                                   {{E::kStart, E::kExchanged}, E::kModifyFailed},
                                   {{E::kStart, E::kExchanged, E::kToRtr}, E::kModifyFailed},
                                   {{E::kStart, E::kExchanged, E::kToRtr, E::kToRts}, E::kCompletionError}};
  for (const Case& k : cases) {
    ConnLifecycle c;
    for (E e : k.to_get_there) ASSERT_TRUE(c.on(e).is_ok());
    auto step = c.on(k.error);
    ASSERT_TRUE(step.is_ok());
    EXPECT_TRUE(step->fail_inflight);
    EXPECT_EQ(c.state(), S::kError);
    // Blocked: neither a new start nor posting, until the peer re-registers.
    EXPECT_FALSE(conn_can_post(c.state()));
    EXPECT_EQ(c.on(E::kStart).status().code(), ErrorCode::kInternal);
    EXPECT_EQ(c.state(), S::kError);
    auto flushed = c.on(E::kCompletionError);  // flushed work requests keep completing in error
    ASSERT_TRUE(flushed.is_ok());
    EXPECT_FALSE(flushed->fail_inflight);  // the rooms were failed once already
    ASSERT_TRUE(c.on(E::kPeerReregistered).is_ok());
    EXPECT_EQ(c.state(), S::kIdle);
    EXPECT_TRUE(c.on(E::kStart).is_ok());
  }
}

TEST(ConnState, OutOfOrderEventsAreRefusedWithoutMoving) {
  ConnLifecycle c;
  auto r = c.on(E::kToRts);
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
  EXPECT_NE(r.status().message().find("idle"), std::string::npos);
  EXPECT_EQ(c.state(), S::kIdle);
  ASSERT_TRUE(c.on(E::kStart).is_ok());
  EXPECT_FALSE(c.on(E::kToRtr).is_ok());  // the peer's attributes are not known yet
  EXPECT_FALSE(c.on(E::kCompletionError).is_ok());
  EXPECT_FALSE(c.on(E::kPeerReregistered).is_ok());
  EXPECT_EQ(c.state(), S::kExchanging);
}

TEST(ConnState, CloseIsTerminalAndFailsWhatWasInFlight) {
  ConnLifecycle idle;
  auto step = idle.on(E::kClose);
  ASSERT_TRUE(step.is_ok());
  EXPECT_FALSE(step->fail_inflight);
  ConnLifecycle live;
  for (E e : {E::kStart, E::kExchanged, E::kToRtr, E::kToRts}) ASSERT_TRUE(live.on(e).is_ok());
  step = live.on(E::kClose);
  ASSERT_TRUE(step.is_ok());
  EXPECT_TRUE(step->fail_inflight);
  for (E e : {E::kStart, E::kClose, E::kPeerReregistered, E::kCompletionError}) EXPECT_FALSE(live.on(e).is_ok());
  EXPECT_EQ(live.state(), S::kClosed);
}

}  // namespace
}  // namespace pdserve::transfer::rdma
