#include "pdserve/transfer/rdma/conn_state.h"

#include <string>

namespace pdserve::transfer::rdma {

const char* conn_state_name(ConnState s) {
  switch (s) {
    case ConnState::kIdle: return "idle";
    case ConnState::kExchanging: return "exchanging";
    case ConnState::kInit: return "init";
    case ConnState::kRtr: return "ready-to-receive";
    case ConnState::kConnected: return "connected";
    case ConnState::kError: return "error";
    case ConnState::kClosed: return "closed";
  }
  return "?";
}

const char* conn_event_name(ConnEvent e) {
  switch (e) {
    case ConnEvent::kStart: return "start";
    case ConnEvent::kExchanged: return "exchanged";
    case ConnEvent::kExchangeFailed: return "exchange_failed";
    case ConnEvent::kToRtr: return "to_rtr";
    case ConnEvent::kToRts: return "to_rts";
    case ConnEvent::kModifyFailed: return "modify_failed";
    case ConnEvent::kCompletionError: return "completion_error";
    case ConnEvent::kPeerReregistered: return "peer_reregistered";
    case ConnEvent::kClose: return "close";
  }
  return "?";
}

Result<ConnStep> conn_step(ConnState s, ConnEvent e) {
  using S = ConnState;
  using E = ConnEvent;
  if (e == E::kClose && s != S::kClosed) return ConnStep{S::kClosed, s != S::kIdle && s != S::kError};
  switch (s) {
    case S::kIdle:
      if (e == E::kStart) return ConnStep{S::kExchanging, false};
      break;
    case S::kExchanging:
      if (e == E::kExchanged) return ConnStep{S::kInit, false};
      if (e == E::kExchangeFailed) return ConnStep{S::kError, true};
      break;
    case S::kInit:
      if (e == E::kToRtr) return ConnStep{S::kRtr, false};
      if (e == E::kModifyFailed) return ConnStep{S::kError, true};
      break;
    case S::kRtr:
      if (e == E::kToRts) return ConnStep{S::kConnected, false};
      if (e == E::kModifyFailed) return ConnStep{S::kError, true};
      break;
    case S::kConnected:
      if (e == E::kCompletionError) return ConnStep{S::kError, true};
      break;
    case S::kError:
      if (e == E::kPeerReregistered) return ConnStep{S::kIdle, false};
      if (e == E::kCompletionError) return ConnStep{S::kError, false};  // flushed WRs keep completing with errors
      break;
    case S::kClosed:
      break;
  }
  return Status(ErrorCode::kInternal, std::string("rdma connection: no transition from ") + conn_state_name(s) + " on " + conn_event_name(e));
}

}  // namespace pdserve::transfer::rdma
