// The transfer engine interface. A transport moves bytes from registered local regions into
// a peer's registered regions, one batch of writes per room at a time, and on the receiving
// side admits only writes the receiver granted to that room. Each transport keeps its own
// batch and connection types; this interface knows about none of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pdserve/transfer/metrics.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer {

struct PeerAddress {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportCaps capabilities() const = 0;
  // Where peers reach this transport (what decode advertises to prefill).
  virtual PeerAddress local_address() const = 0;

  // Memory. A region must stay valid until unregister_region() returns; that call waits
  // for transfers reading or writing it and is refused while grants into it exist.
  virtual Status register_region(const MemoryRegion& region) = 0;
  virtual Status unregister_region(RegionId id) = 0;

  // Receiver side. Without a grant no peer can write a byte here.
  virtual Status grant(const Grant& g) = 0;
  // Idempotent; returns once no write of the room is in progress, so the room's pages can
  // be freed and reused safely.
  virtual Status revoke(RoomId room) = 0;
  // Set before peers connect.
  virtual void set_callbacks(ReceiverCallbacks callbacks) = 0;

  // Sender side. open_peer returns the live session to that address if one exists (open
  // once, reuse); a failed session is replaced by a new one.
  virtual Result<PeerId> open_peer(const PeerAddress& address) = 0;
  // Fails the peer's in-flight batches with kUnavailable; when it returns, no byte of
  // them is read again.
  virtual Status close_peer(PeerId peer) = 0;
  // Checks every write against the local regions before anything is sent.
  // kResourceExhausted when the peer already has its maximum of batches in flight.
  virtual Result<std::shared_ptr<TransferBatch>> submit(PeerId peer, const BatchRequest& batch) = 0;
  // Sender side, out of band: tells the peer that `room` (under `generation`) failed here, for
  // when the failure notice itself could not be submitted (no batch credit or notification slot
  // left), so the receiver frees the room now instead of waiting out its timeout.
  // kUnsupported where the transport has no channel beside its batches.
  virtual Status report_room_failure(PeerId peer, RoomId room, Generation generation) {
    (void)peer, (void)room, (void)generation;
    return unsupported("this transport cannot report a room failure out of band");
  }

  virtual MetricsSnapshot metrics() const = 0;
  // Stops listening, closes every peer and connection, joins threads. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace pdserve::transfer
