// The TCP connections that carry the node control stream (node_control.h): the leader listens
// on --dist-init-addr and every follower connects once. The opening exchange proves that both
// sides hold the cluster secret (when one is set), in the manner of rank_bootstrap.h:
//   leader -> follower: Ns (16 random bytes)
//   follower -> leader: node rank (u32 LE), Nc (16 bytes), HMAC(secret, "pdserve-node-join" || Ns || Nc || rank)
//   leader -> follower: verdict (u8: 0 ok, 1 refused), then on ok HMAC(secret, "pdserve-node-lead" || Nc || Ns)
// Without a secret the MACs are 32 zero bytes and are not checked (single-host tests).
#pragma once

#include <chrono>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/transfer/node_control.h"

namespace pdserve::transfer::node {

// One received frame: its type and payload bytes.
struct Frame {
  MsgType type = MsgType::kHello;
  std::string payload;
};

class LeaderLink {
 public:
  // Listens on host:port (a busy port fails here, before any weights are loaded).
  static Result<std::unique_ptr<LeaderLink>> listen(const std::string& host, uint16_t port, int nnodes, std::string secret);
  ~LeaderLink();
  // Blocks until nodes 1..nnodes-1 have each joined once, or `timeout` passes (the error says
  // which nodes are missing and how many connections were refused).
  Status accept_followers(std::chrono::milliseconds timeout);
  // Sends one whole frame to every follower. The first failure names the node; after it every
  // later call fails the same way (an instance that lost a node stays broken).
  Status broadcast(const std::string& frame);
  // One frame to node `node` (1..nnodes-1), with broadcast's failure rules.
  Status send_to(int node, const std::string& frame);
  // Waits for one frame from every follower; kUnavailable naming the node on end-of-stream.
  Result<std::vector<Frame>> receive_from_all(std::chrono::milliseconds timeout);
  // The next frame from node `node` (replies to a kFetch); a failure breaks the link as a
  // failed send does. Call expect_replies(true) before sending the request and false after
  // the last reply was read: meanwhile the watcher takes readable bytes as replies, not as a
  // node speaking out of turn (an end of stream still counts as the node gone).
  Result<Frame> receive_from(int node, std::chrono::milliseconds timeout);
  void expect_replies(bool on) {
    replies_.store(on);
    reply_epoch_.fetch_add(1);
  }
  int refused() const { return refused_; }
  uint16_t port() const { return port_; }  // the bound port (listen on port 0 picks one)
  // After the followers are ready they send nothing more, so any end-of-stream (or byte) on
  // their connections means a node left: a thread notices it between steps too, marks the
  // link broken and calls on_lost once. stop_watching() ends the thread (the destructor too).
  void watch(std::function<void(const Status&)> on_lost);
  void stop_watching();

 private:
  LeaderLink() = default;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  int nnodes_ = 1;
  int refused_ = 0;
  std::string secret_;
  Status fail(const Status& why);
  std::vector<int> fds_;  // [node - 1]
  std::mutex mu_;         // broken_: the engine's sends and the watcher
  Status broken_ = Status::ok();
  std::atomic<bool> watching_{false};
  std::atomic<bool> replies_{false};
  std::atomic<uint64_t> reply_epoch_{0};  // bumped by every expect_replies: a reply window opened or closed
  bool unread_out_of_turn(int fd);
  std::thread watcher_;
};

class FollowerLink {
 public:
  // Connects to the leader (retrying until `timeout`: the leader may start later) and joins
  // as `node_rank`. kInvalidArgument when the leader refuses us or fails authentication.
  static Result<std::unique_ptr<FollowerLink>> connect(const std::string& host, uint16_t port, int node_rank, const std::string& secret,
                                                       std::chrono::milliseconds timeout);
  ~FollowerLink();
  // The next frame. kUnavailable on end-of-stream (the leader went away), kDataLoss on a frame
  // that does not parse. `idle_timeout` zero: wait for ever.
  Result<Frame> receive(std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(0));
  Status send(const std::string& frame);
  // A thread that notices the leader hanging up (end of stream, e.g. its process died) while
  // receive() is not being called, i.e. during a step: calls on_lost once; not when the
  // unread frame before the end is a Shutdown (the leader stopped normally). Frames stay
  // queued for receive(). stop_watching() ends the thread (the destructor too).
  void watch(std::function<void(const Status&)> on_lost);
  void stop_watching();
  // The watcher saw the end of the stream and returned (with or without calling on_lost).
  bool watcher_done() const { return watcher_done_.load(); }

 private:
  FollowerLink() = default;
  int fd_ = -1;
  std::atomic<bool> watching_{false}, watcher_done_{false};
  std::thread watcher_;
};

}  // namespace pdserve::transfer::node
