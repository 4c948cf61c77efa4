// Encoding and strict decoding of the node control stream's frames (node_control.h).
#include "pdserve/transfer/node_control.h"

#include <cstring>
#include <string>

namespace pdserve::transfer::node {

namespace {

constexpr char kMagic[4] = {'P', 'D', 'N', 'C'};

// kCache's dtype byte.
constexpr uint8_t kWireF32 = 0, kWireBF16 = 1, kWireOther = 0xff;
uint8_t wire_dtype(DType t) { return t == DType::kF32 ? kWireF32 : t == DType::kBF16 ? kWireBF16 : kWireOther; }
const char* wire_name(DType t) { return t == DType::kBF16 ? "bfloat16" : "float32"; }

class Writer {
 public:
  void u8(uint8_t v) { s_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i32(int32_t v) { le(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void bytes(const void* p, size_t n) {
    if (n > 0) s_.append(static_cast<const char*>(p), n);
  }
  void i32s(const std::vector<int32_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int32_t x : v) i32(x);
  }
  // Prepends the header once the payload is complete.
  std::string frame(MsgType type) const {
    Writer h;
    h.bytes(kMagic, 4);
    h.u16(kVersion);
    h.u8(static_cast<uint8_t>(type));
    h.u8(0);
    h.u32(static_cast<uint32_t>(s_.size()));
    return h.s_ + s_;
  }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string s_;
};

// Every read checks the bytes left; the first failure sticks and the result is refused.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint64_t le(int n) {
    if (!take(n)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[at_ - n + i]) << (8 * i);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  void bytes(void* out, size_t n) {
    if (take(n) && n > 0) std::memcpy(out, p_ + at_ - n, n);  // an empty vector's data() may be null
  }
  // A count of `each`-byte items: refused when the rest of the payload cannot hold them
  // (so a forged count never drives an allocation).
  uint32_t count(size_t each) {
    const uint32_t c = u32();
    if (ok_ && static_cast<uint64_t>(c) * each > n_ - at_) fail("a count of " + std::to_string(c) + " past the payload");
    return ok_ ? c : 0;
  }
  // Non-negative i32s (token ids, page ids).
  std::vector<int32_t> ids() {
    std::vector<int32_t> v(count(4));
    for (auto& x : v) {
      x = i32();
      if (x < 0) fail("a negative id");
    }
    return v;
  }
  // The first failure's reason is the one reported.
  void fail(const std::string& why = "a value out of range") {
    if (ok_) why_ = why;
    ok_ = false;
  }
  Status done(const char* what) const {
    if (!ok_) return Status(ErrorCode::kDataLoss, std::string("node control: malformed ") + what + " message (" + why_ + ")");
    if (at_ != n_) return Status(ErrorCode::kDataLoss, std::string("node control: trailing bytes after a ") + what + " message");
    return Status::ok();
  }

 private:
  bool take(size_t n) {
    if (!ok_ || n > n_ - at_) {
      fail("it ends after " + std::to_string(n_) + " bytes");
      return false;
    }
    at_ += n;
    return true;
  }
  const uint8_t* p_;
  size_t n_, at_ = 0;
  bool ok_ = true;
  std::string why_;
};

}  // namespace

Result<Header> decode_header(const uint8_t* b) {
  if (std::memcmp(b, kMagic, 4) != 0) return Status(ErrorCode::kDataLoss, "node control: not a control frame (bad magic)");
  Reader r(b + 4, kHeaderBytes - 4);
  const uint16_t version = r.u16();
  const uint8_t type = r.u8();
  const uint8_t zero = r.u8();
  Header h;
  h.length = r.u32();
  if (version != kVersion)
    return Status(ErrorCode::kDataLoss, "node control: protocol version " + std::to_string(version) + ", this build speaks " +
                                            std::to_string(kVersion) + " (run the same pdserve on every node)");
  if (type < static_cast<uint8_t>(MsgType::kHello) || type > static_cast<uint8_t>(MsgType::kRound) || zero != 0)
    return Status(ErrorCode::kDataLoss, "node control: unknown frame type " + std::to_string(type));
  if (h.length > kMaxPayload) return Status(ErrorCode::kDataLoss, "node control: frame of " + std::to_string(h.length) + " bytes is too long");
  h.type = static_cast<MsgType>(type);
  return h;
}

std::string encode(const Hello& m) {
  Writer w;
  w.u32(m.nnodes);
  w.u32(m.tp);
  w.u16(m.collective_port);
  w.bytes(m.token.data(), m.token.size());
  w.u32(static_cast<uint32_t>(m.group_id.size()));
  w.bytes(m.group_id.data(), m.group_id.size());
  w.u8(m.role);
  w.u32(m.pp);
  return w.frame(MsgType::kHello);
}

std::string encode(const Start& m) {
  Writer w;
  w.i64(m.num_pages);
  w.i64(m.page_size);
  w.i64(m.num_slots);
  w.u8(m.kv_bf16);
  return w.frame(MsgType::kStart);
}

std::string encode(const Ready& m) {
  Writer w;
  w.i64(m.vocab_size);
  w.i64(m.num_layers);
  return w.frame(MsgType::kReady);
}

std::string encode(const Step& m) {
  Writer w;
  w.u64(m.step);
  w.u32(static_cast<uint32_t>(m.seqs.size()));
  for (const StepSeq& s : m.seqs) {
    w.i64(s.cached_len);
    w.i32(s.slot);
    w.u8(s.all_logits ? 1 : 0);
    w.i32s(s.tokens);
    w.i32s(s.pages);
  }
  return w.frame(MsgType::kStep);
}

std::string encode(const Shutdown& m) {
  Writer w;
  w.u32(static_cast<uint32_t>(m.reason.size()));
  w.bytes(m.reason.data(), m.reason.size());
  return w.frame(MsgType::kShutdown);
}

std::string encode(const CacheData& m) {
  Writer w;
  w.u32(m.rank);
  w.u8(m.kind);
  w.u8(wire_dtype(m.dtype));
  w.i32(m.id);
  w.u32(m.layer);
  w.u32(static_cast<uint32_t>(m.data.size()));
  w.bytes(m.data.data(), m.data.size());  // the pools' bytes: the hosts are little-endian (x86-64, aarch64)
  return w.frame(MsgType::kCache);
}

std::string encode(const Fetch& m) {
  Writer w;
  w.i32s(m.pages);
  w.i32(m.slot);
  return w.frame(MsgType::kFetch);
}

std::string encode(const FetchDone& m) {
  Writer w;
  w.u32(m.frames);
  return w.frame(MsgType::kFetchDone);
}

std::string encode(const Round& m) {
  Writer w;
  w.u32(static_cast<uint32_t>(m.seqs.size()));
  for (const Status& st : m.seqs) {
    w.u8(static_cast<uint8_t>(st.code()));
    w.u32(static_cast<uint32_t>(st.message().size()));
    w.bytes(st.message().data(), st.message().size());
  }
  w.u32(static_cast<uint32_t>(m.logits.size()));
  w.bytes(m.logits.data(), m.logits.size() * sizeof(float));
  w.u8(m.more ? 1 : 0);
  return w.frame(MsgType::kRound);
}

Result<Hello> decode_hello(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Hello m;
  m.nnodes = r.u32();
  m.tp = r.u32();
  m.collective_port = r.u16();
  r.bytes(m.token.data(), m.token.size());
  const uint32_t id = r.count(1);
  if (id > kMaxGroupId) r.fail();
  m.group_id.resize(id);
  r.bytes(m.group_id.data(), id);
  m.role = r.u8();
  m.pp = r.u32();
  // Stages are whole on a node (pp a multiple of nnodes), or else TP splits over the nodes.
  // nnodes is checked first: a hostile frame's 0 must not reach the modulo.
  const bool sizes = m.nnodes >= 2 && m.tp >= 1 && m.pp >= 1;
  const bool split = sizes && (m.pp > 1 ? m.pp % m.nnodes == 0 && m.pp <= 64 : m.tp % m.nnodes == 0);
  if (!split || m.role > kMaxRole) r.fail();
  PDS_RETURN_IF_ERROR(r.done("hello"));
  return m;
}

Result<Start> decode_start(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Start m;
  m.num_pages = r.i64();
  m.page_size = r.i64();
  m.num_slots = r.i64();
  m.kv_bf16 = r.u8();
  if (m.num_pages < 1 || m.page_size < 1 || m.num_slots < 1 || m.kv_bf16 > 1) r.fail();
  PDS_RETURN_IF_ERROR(r.done("start"));
  return m;
}

Result<Ready> decode_ready(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Ready m;
  m.vocab_size = r.i64();
  m.num_layers = r.i64();
  PDS_RETURN_IF_ERROR(r.done("ready"));
  return m;
}

Result<Step> decode_step(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Step m;
  m.step = r.u64();
  // A sequence takes at least 8 + 4 + 1 + 4 + 4 bytes.
  m.seqs.resize(r.count(21));
  for (StepSeq& s : m.seqs) {
    s.cached_len = r.i64();
    s.slot = r.i32();
    const uint8_t flags = r.u8();
    if (s.cached_len < 0 || s.slot < 0 || (flags & ~1u) != 0) r.fail();
    s.all_logits = (flags & 1u) != 0;
    s.tokens = r.ids();
    s.pages = r.ids();
  }
  PDS_RETURN_IF_ERROR(r.done("step"));
  return m;
}

Result<Shutdown> decode_shutdown(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Shutdown m;
  m.reason.resize(r.count(1));
  r.bytes(m.reason.data(), m.reason.size());
  PDS_RETURN_IF_ERROR(r.done("shutdown"));
  return m;
}

Result<CacheData> decode_cache(const uint8_t* p, size_t n) {
  Reader r(p, n);
  CacheData m;
  m.rank = r.u32();
  m.kind = r.u8();
  const uint8_t dtype = r.u8();
  m.id = r.i32();
  m.layer = r.u32();
  m.data.resize(r.count(1));
  r.bytes(m.data.data(), m.data.size());
  m.dtype = dtype == kWireBF16 ? DType::kBF16 : DType::kF32;
  if (m.kind > CacheData::kStateLayer) r.fail("kind " + std::to_string(m.kind) + ", not 0 (page) or 1 (KDA layer)");
  if (dtype > kWireBF16) r.fail("dtype " + std::to_string(dtype) + ", not 0 (float32) or 1 (bfloat16)");
  if (m.kind == CacheData::kStateLayer && m.dtype != DType::kF32) r.fail("a KDA layer in bfloat16 (the state is float32)");
  if (m.id < 0) r.fail("id " + std::to_string(m.id));
  if (m.data.size() % static_cast<size_t>(dtype_size(m.dtype)) != 0)
    r.fail(std::to_string(m.data.size()) + " bytes, not whole " + wire_name(m.dtype) + std::string(" elements"));
  PDS_RETURN_IF_ERROR(r.done("cache"));
  return m;
}

Result<Fetch> decode_fetch(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Fetch m;
  m.pages = r.ids();
  m.slot = r.i32();
  if (m.slot < -1) r.fail();
  PDS_RETURN_IF_ERROR(r.done("fetch"));
  return m;
}

Result<FetchDone> decode_fetch_done(const uint8_t* p, size_t n) {
  Reader r(p, n);
  FetchDone m;
  m.frames = r.u32();
  PDS_RETURN_IF_ERROR(r.done("fetch done"));
  return m;
}

Result<Round> decode_round(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Round m;
  m.seqs.resize(r.count(5));  // code u8 + text length u32 at least
  for (Status& st : m.seqs) {
    const uint8_t code = r.u8();
    std::string text(r.count(1), '\0');
    r.bytes(text.data(), text.size());
    if (code > static_cast<uint8_t>(ErrorCode::kDeadlineExceeded) || (code == 0 && !text.empty())) r.fail();
    if (code != 0) st = Status(static_cast<ErrorCode>(code), text);
  }
  m.logits.resize(r.count(sizeof(float)));
  r.bytes(m.logits.data(), m.logits.size() * sizeof(float));
  const uint8_t more = r.u8();
  if (more > 1) r.fail();
  m.more = more == 1;
  PDS_RETURN_IF_ERROR(r.done("round"));
  return m;
}

}  // namespace pdserve::transfer::node
