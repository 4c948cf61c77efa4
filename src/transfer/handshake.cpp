#include "handshake.h"

#include <random>

#include <spdlog/spdlog.h>

#include "pdserve/core/sha256.h"
#include "pdserve/transfer/wire.h"
#include "socket_io.h"

namespace pdserve::transfer::handshake {

using wire::FrameHeader;
using wire::FrameType;

namespace {
constexpr size_t kNonce = 32, kMac = 32;

std::string random_bytes(size_t n) {
  std::random_device rd;
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rd() & 0xff);
  return s;
}

std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string mac(const std::string& secret, const char* role, const std::string& a, const std::string& b, uint64_t id,
                uint64_t stream) {
  const Sha256Digest d = hmac_sha256(secret, std::string("pdserve-transfer-v1 ") + role + "\n" + a + b + u64le(id) + u64le(stream));
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

Status send_frame(int fd, const FrameHeader& h, const std::string& payload) {
  uint8_t buf[wire::kHeaderBytes];
  FrameHeader f = h;
  f.length = payload.size();
  wire::encode_header(f, buf);
  iovec iov[2] = {{buf, sizeof(buf)}, {const_cast<char*>(payload.data()), payload.size()}};
  return net::send_all(fd, iov, payload.empty() ? 1 : 2);
}

template <typename StopFn>
Status recv_frame(int fd, const wire::Limits& limits, FrameHeader* h, std::string* payload, net::RecvMode mode, StopFn stop) {
  uint8_t buf[wire::kHeaderBytes];
  PDS_RETURN_IF_ERROR(net::recv_exact(fd, buf, sizeof(buf), mode, stop));
  PDS_ASSIGN_OR_RETURN(*h, wire::decode_header(buf, limits));
  payload->assign(h->length, '\0');
  if (h->length) PDS_RETURN_IF_ERROR(net::recv_exact(fd, payload->data(), h->length, net::RecvMode::kMidMessage, [] { return false; }));
  return Status::ok();
}

Status unavailable(std::string m) { return Status(ErrorCode::kUnavailable, std::move(m)); }

// Receiver: tell the peer why, then give up on the connection.
Status refuse(int fd, uint64_t seq, const std::string& why) {
  FrameHeader no;
  no.type = FrameType::kAuth;
  no.seq = seq;
  no.aux = static_cast<uint64_t>(ErrorCode::kInvalidArgument);
  (void)send_frame(fd, no, why);
  return Status(ErrorCode::kInvalidArgument, "unauthenticated transfer peer refused: " + why);
}
}  // namespace

Result<Outcome> as_sender(int fd, const TcpConfig& cfg, uint64_t instance_id, uint64_t stream, const std::string& where) {
  const bool auth = !cfg.secret.empty();
  const std::string ns = auth ? random_bytes(kNonce) : "";
  FrameHeader hello;
  hello.type = FrameType::kHello;
  hello.flags = auth ? wire::kFlagAuth : 0;
  hello.offset = stream;
  hello.aux = instance_id;
  PDS_RETURN_IF_ERROR(send_frame(fd, hello, ns).with_context("hello to " + where));
  FrameHeader ack;
  std::string payload;
  Status st = recv_frame(fd, cfg.limits, &ack, &payload, net::RecvMode::kMidMessage, [] { return false; });
  if (!st.is_ok()) return unavailable("no transfer endpoint answered at " + where + ": " + st.message());
  if (ack.type == FrameType::kAuth && ack.aux != 0)
    return unavailable("transfer receiver at " + where + " refused the connection: " + payload);
  if (ack.type != FrameType::kHelloAck || ack.seq != 0 || ack.offset == 0) return data_loss("bad hello answer from " + where);
  Outcome out{ack.offset, 1, 1};
  if (!auth) return out;
  if (!(ack.flags & wire::kFlagAuth) || payload.size() != kNonce + kMac)
    return unavailable("transfer receiver at " + where +
                       " does not authenticate; set the same cluster secret on decode (--cluster-secret-file)");
  const std::string nr = payload.substr(0, kNonce);
  if (!constant_time_equal(payload.substr(kNonce), mac(cfg.secret, "receiver", ns, nr, ack.aux, 0)))
    return unavailable("transfer receiver at " + where + " failed authentication: it holds a different cluster secret");
  FrameHeader proof;
  proof.type = FrameType::kAuth;
  proof.seq = 1;
  PDS_RETURN_IF_ERROR(send_frame(fd, proof, mac(cfg.secret, "sender", nr, ns, instance_id, stream)).with_context("auth to " + where));
  FrameHeader verdict;
  st = recv_frame(fd, cfg.limits, &verdict, &payload, net::RecvMode::kMidMessage, [] { return false; });
  if (!st.is_ok()) return unavailable("transfer receiver at " + where + " dropped the authentication: " + st.message());
  if (verdict.type != FrameType::kAuth || verdict.seq != 1) return data_loss("bad authentication answer from " + where);
  if (verdict.aux != 0) return unavailable("transfer receiver at " + where + " refused the connection: " + payload);
  return Outcome{ack.offset, 2, 2};
}

Result<Outcome> as_receiver(int fd, const TcpConfig& cfg, uint64_t instance_id, const std::atomic<bool>& stopping) {
  PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.connect_timeout));
  FrameHeader hello;
  std::string ns;
  PDS_RETURN_IF_ERROR(recv_frame(fd, cfg.limits, &hello, &ns, net::RecvMode::kBetweenFrames, [&] { return stopping.load(); }));
  if (hello.type != FrameType::kHello || hello.seq != 0) return data_loss("first message is not a hello");
  FrameHeader ack;
  ack.type = FrameType::kHelloAck;
  ack.offset = cfg.limits.max_write_bytes;  // the sender splits writes to fit
  ack.aux = instance_id;
  if (cfg.secret.empty()) {  // a sender's nonce, if any, is ignored: it will refuse us
    PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.io_timeout));
    PDS_RETURN_IF_ERROR(send_frame(fd, ack, ""));
    return Outcome{0, 1, 1};
  }
  if (!(hello.flags & wire::kFlagAuth) || ns.size() != kNonce)
    return refuse(fd, 0, "authentication required: this transfer listener needs the cluster secret (--cluster-secret-file)");
  const std::string nr = random_bytes(kNonce);
  ack.flags = wire::kFlagAuth;
  PDS_RETURN_IF_ERROR(send_frame(fd, ack, nr + mac(cfg.secret, "receiver", ns, nr, instance_id, 0)));
  FrameHeader proof;
  std::string got;
  // Nothing but the proof is accepted here: no write frame is ever read from an unproven peer.
  PDS_RETURN_IF_ERROR(recv_frame(fd, cfg.limits, &proof, &got, net::RecvMode::kMidMessage, [] { return false; }));
  if (proof.type != FrameType::kAuth || proof.seq != 1 || proof.aux != 0)
    return refuse(fd, 1, "expected the authentication message, got message type " + std::to_string(static_cast<int>(proof.type)));
  if (!constant_time_equal(got, mac(cfg.secret, "sender", nr, ns, hello.aux, hello.offset)))
    return refuse(fd, 1, "wrong authentication code: the peer holds a different cluster secret");
  FrameHeader ok;
  ok.type = FrameType::kAuth;
  ok.seq = 1;
  PDS_RETURN_IF_ERROR(send_frame(fd, ok, ""));
  PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.io_timeout));
  return Outcome{0, 2, 2};
}

}  // namespace pdserve::transfer::handshake
