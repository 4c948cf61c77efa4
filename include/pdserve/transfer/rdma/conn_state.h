// The life of one RDMA connection (one peer, one NIC: one reliable-connected QP) as an explicit
// state machine. Pure: the transport feeds it events and does what the step says.
//
//   kIdle --start--> kExchanging --exchanged--> kInit --to_rtr--> kRtr --to_rts--> kConnected
//   kExchanging --exchange_failed--> kError      (bad / unauthenticated control-channel reply)
//   kInit, kRtr --modify_failed--> kError        (ibv_modify_qp refused the peer's attributes)
//   kConnected --completion_error--> kError      (a work completion with an error status: the
//                                                 QP is in the error state, nothing more lands)
//   kError --peer_reregistered--> kIdle          (the peer announced itself again on the
//                                                 control channel; a new QP may be built)
//   any --close--> kClosed                       (terminal)
// Entering kError fails every room the connection carried; until the peer re-registers its
// rooms cannot use this peer (submit() answers kUnavailable). Any other (state, event) pair
// is a bug in the caller and is refused without changing the state.
#pragma once

#include "pdserve/core/status.h"

namespace pdserve::transfer::rdma {

enum class ConnState { kIdle, kExchanging, kInit, kRtr, kConnected, kError, kClosed };
enum class ConnEvent { kStart, kExchanged, kExchangeFailed, kToRtr, kToRts, kModifyFailed, kCompletionError, kPeerReregistered, kClose };

const char* conn_state_name(ConnState s);
const char* conn_event_name(ConnEvent e);

struct ConnStep {
  ConnState next = ConnState::kIdle;
  bool fail_inflight = false;  // fail every room in flight on this connection now
};

// kInternal naming the state and event for a transition the machine does not have.
Result<ConnStep> conn_step(ConnState s, ConnEvent e);
// Work requests may be posted only here.
inline bool conn_can_post(ConnState s) { return s == ConnState::kConnected; }

// A connection's state with the step applied in place; keeps the last refusal for logs.
class ConnLifecycle {
 public:
  ConnState state() const { return state_; }
  // The step taken, or the refusal (state unchanged).
  Result<ConnStep> on(ConnEvent e) {
    Result<ConnStep> step = conn_step(state_, e);
    if (step.is_ok()) state_ = step->next;
    return step;
  }

 private:
  ConnState state_ = ConnState::kIdle;
};

}  // namespace pdserve::transfer::rdma
