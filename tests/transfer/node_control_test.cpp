// The node control stream: frames round-trip, malformed ones are refused (never read past,
// never allocate from a forged count), the opening exchange checks the cluster secret both
// ways, and the TCP collectives give the in-process group's bits and fail cleanly when a
// peer vanishes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "model/test_models.h"
#include "pdserve/model/tp_group.h"
#include "pdserve/transfer/node_control.h"
#include "pdserve/transfer/node_link.h"
#include "pdserve/transfer/tcp_collective.h"

namespace pdserve::transfer::node {
namespace {

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// A frame's payload (after checking its header says `type`).
std::string payload_of(const std::string& frame, MsgType type) {
  auto h = decode_header(bytes(frame));
  EXPECT_TRUE(h.is_ok()) << h.status().message();
  EXPECT_EQ(h->type, type);
  EXPECT_EQ(h->length, frame.size() - kHeaderBytes);
  return frame.substr(kHeaderBytes);
}

Step sample_step() {
  Step m;
  m.step = 41;
  m.seqs.push_back({0, 3, false, {1, 2, 3, 4}, {7, 8}});
  m.seqs.push_back({17, 0, true, {9}, {1, 2, 5}});
  return m;
}

TEST(NodeControl, FramesRoundTrip) {
  Hello h;
  h.nnodes = 2;
  h.tp = 4;
  h.collective_port = 40123;
  h.token[0] = 0xab;
  h.token[15] = 0xcd;
  h.group_id = {1, 2, 3};
  auto hp = payload_of(encode(h), MsgType::kHello);
  auto h2 = decode_hello(bytes(hp), hp.size());
  ASSERT_TRUE(h2.is_ok()) << h2.status().message();
  EXPECT_EQ(h2->nnodes, 2u);
  EXPECT_EQ(h2->tp, 4u);
  EXPECT_EQ(h2->collective_port, 40123);
  EXPECT_EQ(h2->token, h.token);
  EXPECT_EQ(h2->group_id, h.group_id);

  auto sp = payload_of(encode(sample_step()), MsgType::kStep);
  auto s = decode_step(bytes(sp), sp.size());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->step, 41u);
  ASSERT_EQ(s->seqs.size(), 2u);
  EXPECT_EQ(s->seqs[0].tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s->seqs[0].pages, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(s->seqs[0].slot, 3);
  EXPECT_FALSE(s->seqs[0].all_logits);
  EXPECT_EQ(s->seqs[1].cached_len, 17);
  EXPECT_TRUE(s->seqs[1].all_logits);

  auto st = payload_of(encode(Start{100, 16, 4}), MsgType::kStart);
  auto st2 = decode_start(bytes(st), st.size());
  ASSERT_TRUE(st2.is_ok());
  EXPECT_EQ(st2->num_pages, 100);
  EXPECT_EQ(st2->num_slots, 4);
  EXPECT_EQ(st2->kv_bf16, 0);
  auto sb = payload_of(encode(Start{100, 16, 4, 1}), MsgType::kStart);  // kv_cache_dtype bfloat16 reaches the followers
  EXPECT_EQ(decode_start(bytes(sb), sb.size())->kv_bf16, 1);
  auto rp = payload_of(encode(Ready{163840, 61}), MsgType::kReady);
  EXPECT_EQ(decode_ready(bytes(rp), rp.size())->num_layers, 61);
  auto dp = payload_of(encode(Shutdown{"bye"}), MsgType::kShutdown);
  EXPECT_EQ(decode_shutdown(bytes(dp), dp.size())->reason, "bye");
}

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Decode across nodes: the cache the leader forwards, and the role every node must share.
TEST(NodeControl, CacheFramesAndTheRoleRoundTripAndRefuseNonsense) {
  CacheData c;
  c.rank = 3;
  c.kind = CacheData::kStateLayer;
  c.id = 7;
  c.layer = 2;
  c.data = raw(std::vector<float>{1.5f, -2.0f, 0.25f});
  const std::string cp = payload_of(encode(c), MsgType::kCache);
  EXPECT_EQ(cp.size(), 18u + 12u);  // rank, kind, dtype, id, layer, byte count; three floats
  auto c2 = decode_cache(bytes(cp), cp.size());
  ASSERT_TRUE(c2.is_ok()) << c2.status().message();
  EXPECT_EQ(c2->rank, 3u);
  EXPECT_EQ(c2->kind, CacheData::kStateLayer);
  EXPECT_EQ(c2->dtype, DType::kF32);
  EXPECT_EQ(c2->id, 7);
  EXPECT_EQ(c2->layer, 2u);
  EXPECT_EQ(c2->data, c.data);
  for (size_t n = 0; n < cp.size(); ++n) EXPECT_FALSE(decode_cache(bytes(cp), n).is_ok()) << n << " bytes";
  auto truncated = decode_cache(bytes(cp), cp.size() - 1);
  EXPECT_NE(truncated.status().message().find("malformed cache message (a count of 12 past the payload)"), std::string::npos)
      << truncated.status().message();
  truncated = decode_cache(bytes(cp), 7);
  EXPECT_NE(truncated.status().message().find("(it ends after 7 bytes)"), std::string::npos) << truncated.status().message();
  for (auto mutate : {+[](CacheData& m) { m.id = -1; }, +[](CacheData& m) { m.kind = 2; }}) {
    CacheData m = c;
    mutate(m);
    const std::string q = payload_of(encode(m), MsgType::kCache);
    EXPECT_FALSE(decode_cache(bytes(q), q.size()).is_ok());
  }
  std::string forged = cp;
  forged[14] = 0x7f;  // the byte count (after rank, kind, dtype, id, layer) past the payload
  EXPECT_FALSE(decode_cache(bytes(forged), forged.size()).is_ok());
  // Prefill across nodes: the leader's fetch of a region and the follower's closing count.
  const std::string fp = payload_of(encode(Fetch{{4, 5, 9}, 2}), MsgType::kFetch);
  auto f2 = decode_fetch(bytes(fp), fp.size());
  ASSERT_TRUE(f2.is_ok()) << f2.status().message();
  EXPECT_EQ(f2->pages, (std::vector<int32_t>{4, 5, 9}));
  EXPECT_EQ(f2->slot, 2);
  for (size_t n = 0; n < fp.size(); ++n) EXPECT_FALSE(decode_fetch(bytes(fp), n).is_ok()) << n << " bytes";
  std::string q = payload_of(encode(Fetch{{4, -1}, -1}), MsgType::kFetch);
  EXPECT_FALSE(decode_fetch(bytes(q), q.size()).is_ok());  // a negative page
  q = payload_of(encode(Fetch{{}, -2}), MsgType::kFetch);
  EXPECT_FALSE(decode_fetch(bytes(q), q.size()).is_ok());  // a slot below "none"
  q = payload_of(encode(FetchDone{7}), MsgType::kFetchDone);
  auto d2 = decode_fetch_done(bytes(q), q.size());
  ASSERT_TRUE(d2.is_ok());
  EXPECT_EQ(d2->frames, 7u);
  Hello h;
  h.nnodes = 2;
  h.tp = 2;
  h.role = 2;
  std::string hp = payload_of(encode(h), MsgType::kHello);
  auto h2 = decode_hello(bytes(hp), hp.size());
  ASSERT_TRUE(h2.is_ok()) << h2.status().message();
  EXPECT_EQ(h2->role, 2);
  h.role = kMaxRole + 1;
  hp = payload_of(encode(h), MsgType::kHello);
  EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok());
}

// kv_cache_dtype bfloat16: a page frame carries the pool's bf16 bits as they are (2 bytes an
// element, half the float32 frame), every bit pattern intact (NaN payloads, -0.0); the dtype is
// named in the frame, an unknown one, a KDA layer in bf16 or a partial element is refused by name.
TEST(NodeControl, Bf16PageFramesCarryTheRawBitsAtHalfTheBytes) {
  const std::vector<uint16_t> bits = {0x3f80, 0x8000 /* -0.0 */, 0x7fc1 /* quiet NaN, payload */, 0x7f81 /* signalling NaN */,
                                      0xff80 /* -inf */, 0x0001 /* denormal */, 0xc2f7, 0x0000};
  CacheData p16;
  p16.rank = 1;
  p16.kind = CacheData::kPage;
  p16.dtype = DType::kBF16;
  p16.id = 5;
  p16.layer = 0;
  p16.data = raw(bits);
  CacheData p32 = p16;
  p32.dtype = DType::kF32;
  std::vector<float> widened;
  for (uint16_t b : bits) widened.push_back(bf16_to_f32(b));
  p32.data = raw(widened);
  const std::string f16 = encode(p16), f32 = encode(p32);
  EXPECT_EQ(f16.size(), kHeaderBytes + 18 + 2 * bits.size());
  EXPECT_EQ(f32.size(), kHeaderBytes + 18 + 4 * bits.size());
  const std::string q = payload_of(f16, MsgType::kCache);
  EXPECT_EQ(static_cast<uint8_t>(q[5]), 1);  // the dtype byte: bfloat16
  auto back = decode_cache(bytes(q), q.size());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->dtype, DType::kBF16);
  EXPECT_EQ(back->id, 5);
  ASSERT_EQ(back->data.size(), 2 * bits.size());
  EXPECT_EQ(0, std::memcmp(back->data.data(), bits.data(), back->data.size()));  // the same bits, NaN payloads and -0.0 included
  for (size_t n = 0; n < q.size(); ++n) EXPECT_FALSE(decode_cache(bytes(q), n).is_ok()) << n << " bytes";
  auto refused = [&](std::string bad, const std::string& why) {
    auto r = decode_cache(bytes(bad), bad.size());
    ASSERT_FALSE(r.is_ok()) << why;
    EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  std::string bad = q;
  bad[5] = 7;
  refused(bad, "dtype 7, not 0 (float32) or 1 (bfloat16)");
  bad = q;
  bad[4] = CacheData::kStateLayer;
  refused(bad, "a KDA layer in bfloat16 (the state is float32)");
  CacheData odd = p16;
  odd.data.pop_back();  // 15 bytes: seven and a half elements
  refused(payload_of(encode(odd), MsgType::kCache), "15 bytes, not whole bfloat16 elements");
  odd = p32;
  odd.data.resize(30);
  refused(payload_of(encode(odd), MsgType::kCache), "30 bytes, not whole float32 elements");
  odd = p16;
  odd.dtype = DType::kF16;  // not a cache dtype: written as unknown, refused on arrival
  refused(payload_of(encode(odd), MsgType::kCache), "dtype 255");
}

// Pipeline stages on several nodes: Hello's stage count (stages whole on a node) and a
// follower's per-step verdicts and logits.
TEST(NodeControl, PipelineFramesRoundTripAndBadOnesAreRefused) {
  Hello h;
  h.nnodes = 2;
  h.tp = 1;  // TP need not split over the nodes when the stages do
  h.pp = 4;
  std::string hp = payload_of(encode(h), MsgType::kHello);
  auto h2 = decode_hello(bytes(hp), hp.size());
  ASSERT_TRUE(h2.is_ok()) << h2.status().message();
  EXPECT_EQ(h2->pp, 4u);
  EXPECT_TRUE(h2->group_id.empty());
  // --device cuda: no stage-link hub (port 0), the stages' NCCL unique id (128 bytes) instead.
  h.group_id.resize(128);
  for (size_t i = 0; i < h.group_id.size(); ++i) h.group_id[i] = static_cast<uint8_t>(255 - i);
  hp = payload_of(encode(h), MsgType::kHello);
  h2 = decode_hello(bytes(hp), hp.size());
  ASSERT_TRUE(h2.is_ok()) << h2.status().message();
  EXPECT_EQ(h2->pp, 4u);
  EXPECT_EQ(h2->collective_port, 0);
  EXPECT_EQ(h2->group_id, h.group_id);
  h.group_id.clear();
  h.pp = 3;  // a stage would straddle two nodes
  hp = payload_of(encode(h), MsgType::kHello);
  EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok());
  h.pp = 1;  // then TP 1 cannot split over two nodes
  hp = payload_of(encode(h), MsgType::kHello);
  EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok());
  // Zero nodes (a hostile or corrupt frame; the fuzzer's find) is refused, not a division by
  // zero, with pipeline stages and without.
  h.nnodes = 0;
  for (uint32_t pp : {1u, 4u}) {
    h.pp = pp;
    hp = payload_of(encode(h), MsgType::kHello);
    EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok()) << "pp " << pp;
  }
  h.nnodes = 2;

  Round r;
  r.seqs = {Status::ok(), Status(ErrorCode::kAborted, "stage 1 failed it")};
  r.logits = {1.5f, -2.0f, 0.0f};
  const std::string rp = payload_of(encode(r), MsgType::kRound);
  auto r2 = decode_round(bytes(rp), rp.size());
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  ASSERT_EQ(r2->seqs.size(), 2u);
  EXPECT_TRUE(r2->seqs[0].is_ok());
  EXPECT_EQ(r2->seqs[1].code(), ErrorCode::kAborted);
  EXPECT_EQ(r2->seqs[1].message(), "stage 1 failed it");
  EXPECT_EQ(r2->logits, r.logits);
  EXPECT_FALSE(r2->more);
  r.more = true;
  const std::string more = payload_of(encode(r), MsgType::kRound);
  auto r3 = decode_round(bytes(more), more.size());
  ASSERT_TRUE(r3.is_ok());
  EXPECT_TRUE(r3->more);
  std::string bad_more = more;
  bad_more.back() = 2;
  EXPECT_FALSE(decode_round(bytes(bad_more), bad_more.size()).is_ok());
  for (size_t n = 0; n < rp.size(); ++n) EXPECT_FALSE(decode_round(bytes(rp), n).is_ok()) << n << " bytes";
  std::string forged = rp;
  forged[0] = 0x7f;  // the sequence count past the payload
  EXPECT_FALSE(decode_round(bytes(forged), forged.size()).is_ok());
  forged = rp;
  forged[4] = 99;  // the first sequence's code: no such ErrorCode
  EXPECT_FALSE(decode_round(bytes(forged), forged.size()).is_ok());
}

TEST(NodeControl, BadHeadersAreRefused) {
  std::string f = encode(Shutdown{"x"});
  std::string bad = f;
  bad[0] = 'X';
  EXPECT_EQ(decode_header(bytes(bad)).status().code(), ErrorCode::kDataLoss);
  bad = f;
  bad[4] = 9;  // version 9
  EXPECT_NE(decode_header(bytes(bad)).status().message().find("version 9"), std::string::npos);
  bad[4] = 3;  // a node of the build before byte-typed kCache frames: refused on its first frame
  EXPECT_NE(decode_header(bytes(bad)).status().message().find("protocol version 3, this build speaks 4"), std::string::npos);
  bad = f;
  bad[6] = 0;  // type 0
  EXPECT_FALSE(decode_header(bytes(bad)).is_ok());
  bad[6] = 10;  // one past kRound
  EXPECT_FALSE(decode_header(bytes(bad)).is_ok());
  bad = f;
  bad[11] = 0x7f;  // ~2 GB
  EXPECT_NE(decode_header(bytes(bad)).status().message().find("too long"), std::string::npos);
}

TEST(NodeControl, EveryTruncationAndTrailingByteIsRefused) {
  const std::string p = payload_of(encode(sample_step()), MsgType::kStep);
  for (size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(decode_step(bytes(p), n).is_ok()) << n << " bytes";
  const std::string longer = p + '\0';
  auto r = decode_step(bytes(longer), longer.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos);
  Hello h;
  h.nnodes = 2;
  h.tp = 2;
  const std::string hp = payload_of(encode(h), MsgType::kHello);
  for (size_t n = 0; n < hp.size(); ++n) EXPECT_FALSE(decode_hello(bytes(hp), n).is_ok()) << n << " bytes";
}

TEST(NodeControl, ForgedCountsAndNegativeIdsAreRefused) {
  std::string p = payload_of(encode(sample_step()), MsgType::kStep);
  // The sequence count (bytes 8..11) far past what the payload holds.
  std::string forged = p;
  forged[11] = 0x7f;
  EXPECT_FALSE(decode_step(bytes(forged), forged.size()).is_ok());
  // The first sequence's token count (after cached_len, slot, flags: byte 12 + 13).
  forged = p;
  forged[12 + 13 + 3] = 0x10;
  EXPECT_FALSE(decode_step(bytes(forged), forged.size()).is_ok());
  // A negative token id, page id, slot or cached length.
  for (auto mutate : {+[](Step& m) { m.seqs[0].tokens[1] = -1; }, +[](Step& m) { m.seqs[1].pages[0] = -5; },
                      +[](Step& m) { m.seqs[0].slot = -1; }, +[](Step& m) { m.seqs[1].cached_len = -2; }}) {
    Step m = sample_step();
    mutate(m);
    const std::string q = payload_of(encode(m), MsgType::kStep);
    EXPECT_FALSE(decode_step(bytes(q), q.size()).is_ok());
  }
  // Unknown flag bits.
  forged = p;
  forged[12 + 12] = 2;
  EXPECT_FALSE(decode_step(bytes(forged), forged.size()).is_ok());
  // A hello whose group id is longer than allowed, or a nonsensical geometry.
  Hello h;
  h.nnodes = 2;
  h.tp = 2;
  h.group_id.assign(kMaxGroupId + 1, 1);
  std::string hp = payload_of(encode(h), MsgType::kHello);
  EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok());
  h.group_id.clear();
  h.nnodes = 1;
  hp = payload_of(encode(h), MsgType::kHello);
  EXPECT_FALSE(decode_hello(bytes(hp), hp.size()).is_ok());
  const std::string sp = payload_of(encode(Start{0, 16, 1}), MsgType::kStart);
  EXPECT_FALSE(decode_start(bytes(sp), sp.size()).is_ok());
  const std::string sd = payload_of(encode(Start{4, 16, 1, 2}), MsgType::kStart);  // no such KV dtype
  EXPECT_FALSE(decode_start(bytes(sd), sd.size()).is_ok());
}

// A leader on a port the kernel picks.
uint16_t listen_port(std::unique_ptr<LeaderLink>* out, int nnodes, const std::string& secret) {
  auto l = LeaderLink::listen("127.0.0.1", 0, nnodes, secret);
  if (!l.is_ok()) return 0;
  *out = std::move(*l);
  return (*out)->port();
}

TEST(NodeLink, FramesFlowBothWaysAfterTheSecretIsChecked) {
  std::unique_ptr<LeaderLink> leader;
  const uint16_t port = listen_port(&leader, 2, "s3cret");
  ASSERT_GT(port, 0);
  auto follower = std::async(std::launch::async, [&] { return FollowerLink::connect("127.0.0.1", port, 1, "s3cret", std::chrono::seconds(10)); });
  ASSERT_TRUE(leader->accept_followers(std::chrono::seconds(10)).is_ok());
  auto f = follower.get();
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_TRUE(leader->broadcast(encode(sample_step())).is_ok());
  auto got = (*f)->receive();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->type, MsgType::kStep);
  EXPECT_EQ(decode_step(bytes(got->payload), got->payload.size())->step, 41u);
  ASSERT_TRUE((*f)->send(encode(Ready{5, 6})).is_ok());
  auto ready = leader->receive_from_all(std::chrono::seconds(10));
  ASSERT_TRUE(ready.is_ok()) << ready.status().message();
  EXPECT_EQ((*ready)[0].type, MsgType::kReady);
  // The follower goes away: the leader's next frame fails, naming the node, and stays failed.
  f->reset();
  Status st = Status::ok();
  for (int i = 0; i < 100 && st.is_ok(); ++i) st = leader->broadcast(encode(sample_step()));  // the first may still fit the socket buffer
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("node 1 of 2 left the instance"), std::string::npos) << st.message();
  EXPECT_EQ(leader->broadcast(encode(Shutdown{})).message(), st.message());
}

TEST(NodeLink, AWrongSecretIsRefusedAndTheEndOfTheStreamIsReported) {
  std::unique_ptr<LeaderLink> leader;
  const uint16_t port = listen_port(&leader, 2, "right");
  ASSERT_GT(port, 0);
  auto intruder = std::async(std::launch::async, [&] { return FollowerLink::connect("127.0.0.1", port, 1, "wrong", std::chrono::seconds(10)); });
  auto honest = std::async(std::launch::async, [&] {
    intruder.wait();
    return FollowerLink::connect("127.0.0.1", port, 1, "right", std::chrono::seconds(10));
  });
  ASSERT_TRUE(leader->accept_followers(std::chrono::seconds(20)).is_ok());
  auto bad = intruder.get();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("refused node 1"), std::string::npos) << bad.status().message();
  EXPECT_EQ(leader->refused(), 1);
  auto good = honest.get();
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  leader.reset();  // the leader vanishes
  auto end = (*good)->receive();
  ASSERT_FALSE(end.is_ok());
  EXPECT_EQ(end.status().code(), ErrorCode::kUnavailable);
}

TEST(NodeLink, TheWatcherNoticesAFollowerLeavingBetweenSteps) {
  std::unique_ptr<LeaderLink> leader;
  const uint16_t port = listen_port(&leader, 2, "");
  ASSERT_GT(port, 0);
  auto follower = std::async(std::launch::async, [&] { return FollowerLink::connect("127.0.0.1", port, 1, "", std::chrono::seconds(10)); });
  ASSERT_TRUE(leader->accept_followers(std::chrono::seconds(10)).is_ok());
  auto f = follower.get();
  ASSERT_TRUE(f.is_ok());
  std::promise<Status> lost;
  leader->watch([&](const Status& why) { lost.set_value(why); });
  f->reset();  // no step in flight: only the watcher can notice
  auto got = lost.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Status why = got.get();
  EXPECT_NE(why.message().find("node 1 of 2 left the instance (its control stream ended)"), std::string::npos) << why.message();
  EXPECT_EQ(leader->broadcast(encode(sample_step())).message(), why.message());  // no send is tried
}

TEST(NodeLink, AMissingFollowerIsNamed) {
  std::unique_ptr<LeaderLink> leader;
  ASSERT_GT(listen_port(&leader, 3, ""), 0);
  Status st = leader->accept_followers(std::chrono::milliseconds(200));
  EXPECT_EQ(st.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("node(s) 1, 2 did not join"), std::string::npos) << st.message();
}

// World ranks over TCP, each in its own thread, as the nodes' ranks would be.
std::vector<std::unique_ptr<Communicator>> tcp_group(int world) {
  auto listener = TcpCollectiveListener::listen("127.0.0.1", world);
  EXPECT_TRUE(listener.is_ok());
  std::vector<std::unique_ptr<Communicator>> comms(world);
  for (int r = 1; r < world; ++r) {
    auto c = connect_tcp_collective("127.0.0.1", (*listener)->port(), r, world, (*listener)->token(), std::chrono::seconds(5));
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    comms[r] = std::move(*c);
  }
  auto root = (*listener)->accept_ranks(std::chrono::seconds(5));
  EXPECT_TRUE(root.is_ok()) << root.status().message();
  comms[0] = std::move(*root);
  return comms;
}

TEST(TcpCollective, SameBitsAsTheInProcessGroup) {
  const int world = 3;
  const int64_t n = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 1e3);
  std::vector<std::vector<float>> inputs(world, std::vector<float>(n));
  for (auto& v : inputs)
    for (auto& x : v) x = d(rng);
  auto run = [&](std::vector<std::unique_ptr<Communicator>>& comms, std::vector<std::vector<float>>* sums, std::vector<std::vector<float>>* gathers) {
    sums->assign(world, {});
    gathers->assign(world, std::vector<float>(world * n));
    std::vector<std::thread> t;
    for (int r = 0; r < world; ++r)
      t.emplace_back([&, r] {
        (*sums)[r] = inputs[r];
        comms[r]->all_reduce_sum((*sums)[r].data(), n);
        comms[r]->all_gather(inputs[r].data(), n, (*gathers)[r].data());
      });
    for (auto& x : t) x.join();
  };
  auto local = make_in_process_group(world);
  auto tcp = tcp_group(world);
  std::vector<std::vector<float>> s1, g1, s2, g2;
  run(local, &s1, &g1);
  run(tcp, &s2, &g2);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(0, std::memcmp(s1[r].data(), s2[r].data(), n * sizeof(float))) << "rank " << r;
    EXPECT_EQ(g1[r], g2[r]) << "rank " << r;
    EXPECT_TRUE(tcp[r]->health().is_ok());
  }
}

TEST(TcpCollective, APeerThatVanishesBreaksTheGroupWithoutHanging) {
  auto tcp = tcp_group(3);
  tcp[2].reset();  // rank 2's process died
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  std::thread r1([&] { tcp[1]->all_reduce_sum(b.data(), 10); });
  tcp[0]->all_reduce_sum(a.data(), 10);
  r1.join();
  ASSERT_FALSE(tcp[0]->health().is_ok());
  EXPECT_NE(tcp[0]->health().message().find("lost rank 2"), std::string::npos) << tcp[0]->health().message();
  EXPECT_FALSE(tcp[1]->health().is_ok());  // woken by rank 0 shutting its connections
  // That collective and every later one return zeros at once.
  EXPECT_EQ(a, std::vector<float>(10, 0.0f));
  EXPECT_EQ(b, std::vector<float>(10, 0.0f));
  a.assign(10, 1.0f);
  tcp[0]->all_reduce_sum(a.data(), 10);
  EXPECT_EQ(a, std::vector<float>(10, 0.0f));
  std::vector<float> out(30, 5.0f);
  tcp[1]->all_gather(b.data(), 10, out.data());
  EXPECT_EQ(out, std::vector<float>(30, 0.0f));
}

// Two "nodes" of one rank each as two groups in this process, joined only by TCP collectives
// and the step sender: the leader's logits equal a one-process TP2 group's bit for bit, and
// losing the follower breaks the leader's group for good with a clear error.
TEST(NodeGroup, TwoGroupsOverTcpEqualOneInProcessGroupAndBreakCleanly) {
  const std::string dir = pdserve::testing::tiny_model_dir("tiny-k3-wide");
  auto comms = tcp_group(2);
  std::vector<std::unique_ptr<Communicator>> c0, c1;
  c0.push_back(std::move(comms[0]));
  c1.push_back(std::move(comms[1]));
  auto leader = TpModelGroup::load_node_models(dir, 2, 0, std::move(c0));
  auto follower = TpModelGroup::load_node_models(dir, 2, 1, std::move(c1));
  ASSERT_TRUE(leader.is_ok()) << leader.status().message();
  ASSERT_TRUE(follower.is_ok()) << follower.status().message();
  auto local = TpModelGroup::load(dir, 2, 16, 16, 2);
  ASSERT_TRUE(local.is_ok());
  (*leader)->make_pools(16, 16, 2);
  (*follower)->make_pools(16, 16, 2);
  // The leader hands each validated batch to the follower through the control frame codec.
  std::vector<std::string> sent;
  auto follow = [&] {
    auto m = decode_step(bytes(sent.back()), sent.back().size());
    ForwardBatch b;
    for (auto& q : m->seqs) b.seqs.push_back(SequenceInput{q.tokens, q.cached_len, q.pages, q.slot, q.all_logits});
    ForwardOutput o;
    return (*follower)->forward(b, &o);
  };
  ForwardBatch batch;
  batch.seqs.push_back(SequenceInput{pdserve::testing::random_ids(37, 1), 0, {0, 1, 2}, 0, true});
  batch.seqs.push_back(SequenceInput{pdserve::testing::random_ids(5, 2), 0, {3}, 1, false});
  for (int step = 0; step < 3; ++step) {
    ForwardOutput want, got;
    ASSERT_TRUE((*local)->forward(batch, &want).is_ok());
    Status follower_st = Status::ok();
    std::thread f;
    // The follower starts once the frame is there (the sender runs before the leader's ranks).
    std::atomic<bool> go{false};
    f = std::thread([&] {
      while (!go.load()) std::this_thread::yield();
      follower_st = follow();
    });
    (*leader)->set_step_sender([&](const ForwardBatch& b) {
      Step m;
      for (const auto& q : b.seqs) m.seqs.push_back({q.cached_len, q.state_slot, q.all_logits, q.tokens, q.pages});
      sent.push_back(encode(m).substr(kHeaderBytes));
      go.store(true);
      return Status::ok();
    });
    Status st = (*leader)->forward(batch, &got);
    f.join();
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_TRUE(follower_st.is_ok()) << follower_st.message();
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(0, std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float))) << "step " << step;
    for (auto& q : batch.seqs) {  // decode one more token each
      q.cached_len += static_cast<int64_t>(q.tokens.size());
      q.tokens = {static_cast<int32_t>(7 + step)};
      q.all_logits = false;
    }
  }
  // The follower's process dies: the leader's next step fails, and so does every later one.
  follower->reset();
  ForwardOutput o;
  (*leader)->set_step_sender({});
  Status st = (*leader)->forward(batch, &o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("lost one of its nodes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lost rank 1"), std::string::npos) << st.message();
  EXPECT_EQ((*leader)->health().message(), st.message());
  EXPECT_EQ((*leader)->forward(batch, &o).message(), st.message());
}

TEST(TcpCollective, AStrangerWithoutTheTokenDoesNotJoin) {
  auto listener = TcpCollectiveListener::listen("127.0.0.1", 2);
  ASSERT_TRUE(listener.is_ok());
  CollectiveToken wrong = (*listener)->token();
  wrong[0] ^= 1;
  auto c = connect_tcp_collective("127.0.0.1", (*listener)->port(), 1, 2, wrong, std::chrono::seconds(5));
  ASSERT_TRUE(c.is_ok());  // it connects, but rank 0 does not count it
  auto root = (*listener)->accept_ranks(std::chrono::milliseconds(300));
  ASSERT_FALSE(root.is_ok());
  EXPECT_NE(root.status().message().find("0 of 1 ranks"), std::string::npos) << root.status().message();
}

}  // namespace
}  // namespace pdserve::transfer::node
