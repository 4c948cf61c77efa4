// PD mode against fake prefill / decode workers: what both sides receive, incremental SSE
// relay, decode errors unchanged, prefill failures as clean errors, retries.
#include <chrono>
#include <condition_variable>
#include <thread>

#include "router_test_util.h"

namespace pdserve::router::testing {
namespace {

const std::string kBody = R"({"model":"tiny","prompt":"hello","max_tokens":4})";
const std::string kStreamBody = R"({"model":"tiny","prompt":"hello","max_tokens":4,"stream":true})";

RouterConfig pd_config(const FakeWorker& p, const FakeWorker& d, int bootstrap_port = 0) {
  auto c = fast_config();
  c.mode = RouterMode::kPd;
  c.prefill = {p.url() + (bootstrap_port ? "@" + std::to_string(bootstrap_port) : "")};
  c.decode = {d.url()};
  return c;
}

// A one-shot latch for handing control between a fake worker and the test.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
  bool wait(int seconds = 20) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(seconds), [&] { return open; });
  }
};

TEST(RouterPd, BothSidesGetTheSameBodyAndRequestId) {
  FakeWorker p("prefill"), d("decode");
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d, 9123));
  auto res = post(r->port(), "/v1/completions", kBody, {{"X-Request-Id", "client-rid-1"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(Json::parse(res->body)["worker"], "decode");  // decode's answer is returned
  EXPECT_EQ(res->get_header_value("X-Request-Id"), "client-rid-1");
  ASSERT_TRUE(eventually([&] { return p.seen().size() == 1; }));
  auto ps = p.seen()[0], ds = d.seen()[0];
  EXPECT_EQ(ps.body, ds.body);
  EXPECT_EQ(ps.request_id, "client-rid-1");
  EXPECT_EQ(ds.request_id, "client-rid-1");
  auto b = Json::parse(ds.body);
  EXPECT_EQ(b["bootstrap_host"], "127.0.0.1");
  EXPECT_EQ(b["bootstrap_port"], 9123);
  ASSERT_TRUE(b["bootstrap_room"].is_number_unsigned() || b["bootstrap_room"].is_number_integer());
  const uint64_t room = b["bootstrap_room"].get<uint64_t>();
  EXPECT_NE(room, 0u);
  EXPECT_LT(room, uint64_t(1) << 63);
  EXPECT_EQ(b["prompt"], "hello");  // the client's fields are kept

  // Without a client id one is assigned, the same on both sides; rooms differ per request.
  auto res2 = post(r->port(), "/v1/completions", kBody);
  ASSERT_EQ(res2->status, 200);
  ASSERT_TRUE(eventually([&] { return p.seen().size() == 2; }));
  const std::string rid = res2->get_header_value("X-Request-Id");
  EXPECT_FALSE(rid.empty());
  EXPECT_EQ(p.seen()[1].request_id, rid);
  EXPECT_EQ(d.seen()[1].request_id, rid);
  EXPECT_NE(Json::parse(d.seen()[1].body)["bootstrap_room"].get<uint64_t>(), room);
  EXPECT_EQ(Json::parse(p.seen()[0].body)["bootstrap_port"], 9123);
}

TEST(RouterPd, DefaultBootstrapPortIs8998) {
  FakeWorker p("prefill"), d("decode");
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  ASSERT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);
  EXPECT_EQ(Json::parse(d.seen()[0].body)["bootstrap_port"], 8998);
}

TEST(RouterPd, SseIsRelayedAsItArrives) {
  Gate seen_first;  // opened by the test once chunk 1 came out of the router
  std::atomic<bool> decode_waited_in_vain{false};
  FakeWorker p("prefill"), d("decode");
  d.on_generate([&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
      const std::string first = "data: {\"choices\":[{\"text\":\"one\"}]}\n\n";
      sink.write(first.data(), first.size());
      // If the router buffered, the test could never see chunk 1 and this wait would expire.
      if (!seen_first.wait()) decode_waited_in_vain = true;
      const std::string rest = "data: {\"choices\":[{\"text\":\"two\"}]}\n\ndata: [DONE]\n\n";
      sink.write(rest.data(), rest.size());
      sink.done();
      return true;
    });
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  std::string got;
  httplib::Headers h;
  int status = post_stream(r->port(), "/v1/completions", kStreamBody, [&](const std::string& c) {
    got += c;
    if (got.find("one") != std::string::npos && got.find("two") == std::string::npos) seen_first.release();
  }, &h);
  EXPECT_EQ(status, 200);
  EXPECT_FALSE(decode_waited_in_vain.load()) << "chunk 1 was held back until the stream ended";
  EXPECT_EQ(got, "data: {\"choices\":[{\"text\":\"one\"}]}\n\ndata: {\"choices\":[{\"text\":\"two\"}]}\n\ndata: [DONE]\n\n");
  ASSERT_NE(h.find("Content-Type"), h.end());
  EXPECT_EQ(h.find("Content-Type")->second, "text/event-stream");
}

TEST(RouterPd, DecodeErrorsReachTheClientUnchanged) {
  FakeWorker p("prefill"), d("decode");
  const std::string err = R"({"error":{"message":"page_size mismatch: prefill 64, decode 32","type":"invalid_request_error","param":null,"code":"pd_layout_mismatch"}})";
  d.on_generate([&](const httplib::Request&, httplib::Response& res) {
    res.status = 409;
    res.set_content(err, "application/json");
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  for (const auto& body : {kBody, kStreamBody}) {
    auto res = post(r->port(), "/v1/chat/completions", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 409);
    EXPECT_EQ(res->body, err);
  }
}

TEST(RouterPd, PrefillFailureFailsTheRequestCleanly) {
  Gate end_decode;
  FakeWorker p("prefill"), d("decode");
  p.on_generate([](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(R"({"error":{"message":"KV transfer failed"}})", "application/json");
  });
  // Decode waits for KV that will never come (as a real decode would, until its timeout).
  d.on_generate([&](const httplib::Request& req, httplib::Response& res) {
    end_decode.wait(30);
    res.set_content(FakeWorker::json_answer("decode", req.body, ""), "application/json");
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 502);
  auto e = Json::parse(res->body);
  EXPECT_EQ(e["error"]["code"], "prefill_failed");
  EXPECT_NE(e["error"]["message"].get<std::string>().find(p.url()), std::string::npos);
  // The router gave up on decode instead of waiting for it: its call is no longer in flight.
  EXPECT_TRUE(eventually([&] { return worker_info(*r, d.url())["outstanding"] == 0; }));
  EXPECT_EQ(r->server_info()["in_flight"], 0);
  EXPECT_EQ(r->server_info()["counters"]["prefill_failures"], 1);
  end_decode.release();
}

TEST(RouterPd, PrefillFailureAfterDecodeHeadersEndsTheStreamWithAnError) {
  Gate prefill_go, end_decode;
  FakeWorker p("prefill"), d("decode");
  p.on_generate([&](const httplib::Request&, httplib::Response& res) {
    prefill_go.wait();  // fail only once decode has sent its SSE headers
    res.status = 500;
    res.set_content("boom", "text/plain");
  });
  d.on_generate([&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
      // The headers are on the wire now, but the router reads them on its own thread: let it
      // (releasing prefill at once raced it and sometimes tested the before-headers case).
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      prefill_go.release();
      end_decode.wait(30);
      sink.done();
      return true;
    });
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  std::string got;
  int status = post_stream(r->port(), "/v1/completions", kStreamBody, [&](const std::string& c) { got += c; });
  EXPECT_EQ(status, 200);
  EXPECT_NE(got.find("\"prefill_failed\""), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
  end_decode.release();
}

TEST(RouterPd, PrefillClientErrorPassesThrough) {
  Gate end_decode;
  FakeWorker p("prefill"), d("decode");
  const std::string err = R"({"error":{"message":"prompt too long","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}})";
  p.on_generate([&](const httplib::Request&, httplib::Response& res) {
    res.status = 400;
    res.set_content(err, "application/json");
  });
  d.on_generate([&](const httplib::Request& req, httplib::Response& res) {
    end_decode.wait(30);
    res.set_content("{}", "application/json");
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(res->body, err);
  end_decode.release();
}

TEST(RouterPd, A503FromDecodeBeforeAnyByteIsRetriedWithAFreshRoom) {
  FakeWorker p("prefill"), d("decode");
  std::atomic<int> calls{0};
  d.on_generate([&](const httplib::Request& req, httplib::Response& res) {
    if (calls.fetch_add(1) == 0) {  // the first room's KV transfer failed
      res.status = 503;
      res.set_content(R"({"error":{"message":"KV transfer failed","type":"overloaded_error","param":null,"code":"x"}})",
                      "application/json");
      return;
    }
    res.set_content(FakeWorker::json_answer("decode", req.body, ""), "application/json");
  });
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  ASSERT_EQ(d.seen().size(), 2u);
  EXPECT_NE(Json::parse(d.seen()[0].body)["bootstrap_room"], Json::parse(d.seen()[1].body)["bootstrap_room"]);
  // A decode that keeps answering 503 is retried a bounded number of times, then passed on.
  d.on_generate([&](const httplib::Request&, httplib::Response& res2) {
    res2.status = 503;
    res2.set_content(R"({"error":{"message":"still failing","type":"overloaded_error","param":null,"code":"x"}})",
                     "application/json");
  });
  auto again = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 503);
  EXPECT_NE(again->body.find("still failing"), std::string::npos);
}

TEST(RouterPd, ConnectFailuresAreRetriedWithAFreshPair) {
  FakeWorker p("prefill"), d("decode");
  p.start();
  d.start();
  auto cfg = fast_config();
  cfg.mode = RouterMode::kPd;
  cfg.prefill = {p.url()};
  cfg.decode = {"http://127.0.0.1:" + std::to_string(dead_port()), d.url()};
  cfg.decode_policy = PolicyKind::kRoundRobin;
  cfg.health.interval_s = 3600;
  auto r = start_router(cfg);
  for (int i = 0; i < 6; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  EXPECT_EQ(d.count(), 6u);
  EXPECT_GE(r->server_info()["counters"]["connect_retries"].get<int>(), 3);
  // Each retry used a new room: decode never saw the same room twice.
  std::set<uint64_t> rooms;
  for (const auto& s : d.seen()) rooms.insert(Json::parse(s.body)["bootstrap_room"].get<uint64_t>());
  EXPECT_EQ(rooms.size(), 6u);
}

TEST(RouterPd, HealthNeedsBothSides) {
  FakeWorker p("prefill"), d("decode");
  p.start();
  d.start();
  auto r = start_router(pd_config(p, d));
  EXPECT_EQ(get(r->port(), "/health")->status, 200);
  EXPECT_EQ(get(r->port(), "/health_generate")->status, 200);
  p.stop();
  ASSERT_TRUE(eventually([&] { return get(r->port(), "/health")->status == 503; }));
  EXPECT_NE(get(r->port(), "/health")->body.find("no healthy prefill worker"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::router::testing
