// The first messages on a transfer connection (internal). Without a secret: hello, hello-ack.
// With one, a challenge-response both ways, before any write frame is read:
//   sender   -> hello    {flags auth, payload Ns}                       (seq 0)
//   receiver -> hello-ack{flags auth, payload Nr || MAC_r}              (seq 0)
//   sender   -> auth     {payload MAC_s}                                (seq 1)
//   receiver -> auth     {aux = 0, or an ErrorCode and why}             (seq 1)
// MAC_r = HMAC(secret, "receiver" || Ns || Nr || receiver id), MAC_s = HMAC(secret, "sender" ||
// Nr || Ns || sender id || stream): each side proves it holds the secret on the other's
// fresh nonce, so a recorded handshake cannot be replayed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "pdserve/transfer/tcp_transport.h"

namespace pdserve::transfer::handshake {

struct Outcome {
  uint64_t max_write_bytes = 0;  // sender: the receiver's limit
  uint64_t next_out_seq = 1;     // sequence numbers the conversation continues with
  uint64_t next_in_seq = 1;
};

// `where`: the peer's address, for messages.
Result<Outcome> as_sender(int fd, const TcpConfig& cfg, uint64_t instance_id, uint64_t stream, const std::string& where);
Result<Outcome> as_receiver(int fd, const TcpConfig& cfg, uint64_t instance_id, const std::atomic<bool>& stopping);

}  // namespace pdserve::transfer::handshake
