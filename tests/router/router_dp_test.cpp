// DP mode against in-process fake workers: equality with direct calls, errors the router
// owns, worker errors passed through, retries, health eviction and the in-flight bound.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <future>

#include "pdserve/net/client_connection.h"
#include "router_test_util.h"

namespace pdserve::router::testing {
namespace {

const std::string kBody = R"({"model":"tiny","prompt":"hello","max_tokens":4})";
const std::string kStreamBody = R"({"model":"tiny","prompt":"hello","max_tokens":4,"stream":true})";

TEST(RouterDp, ThroughTheRouterEqualsDirect) {
  FakeWorker w("w0");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  httplib::Headers rid = {{"X-Request-Id", "same-id"}};
  auto direct = post(w.port(), "/v1/completions", kBody, rid);
  auto routed = post(r->port(), "/v1/completions", kBody, rid);
  ASSERT_TRUE(direct && routed);
  EXPECT_EQ(routed->status, direct->status);
  EXPECT_EQ(routed->body, direct->body);
  EXPECT_EQ(routed->get_header_value("Content-Type"), direct->get_header_value("Content-Type"));
  EXPECT_EQ(routed->get_header_value("X-Request-Id"), "same-id");

  std::string sd, sr;
  EXPECT_EQ(post_stream(w.port(), "/v1/chat/completions", kStreamBody, [&](const std::string& c) { sd += c; }), 200);
  EXPECT_EQ(post_stream(r->port(), "/v1/chat/completions", kStreamBody, [&](const std::string& c) { sr += c; }), 200);
  EXPECT_EQ(sr, sd);
  EXPECT_NE(sr.find("data: [DONE]"), std::string::npos);

  auto models = get(r->port(), "/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(models->body, get(w.port(), "/v1/models")->body);
}

TEST(RouterDp, RoundRobinSpreadsAndAssignsRequestIds) {
  FakeWorker a("a"), b("b");
  a.start();
  b.start();
  auto cfg = fast_config();
  cfg.workers = {a.url(), b.url()};
  auto r = start_router(cfg);
  for (int i = 0; i < 10; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    std::string rid = res->get_header_value("X-Request-Id");
    EXPECT_EQ(rid.rfind("rtr-", 0), 0u) << rid;  // assigned by the router...
    EXPECT_EQ(Json::parse(res->body)["request_id"], rid);  // ...and seen by the worker
  }
  EXPECT_EQ(a.count(), 5u);
  EXPECT_EQ(b.count(), 5u);
}

TEST(RouterDp, RouterJudgesBodySizeAndMalformedJson) {
  FakeWorker w("w");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  cfg.max_body_bytes = 4096;
  auto r = start_router(cfg);

  auto big = post(r->port(), "/v1/completions", "{\"prompt\":\"" + std::string(10000, 'x') + "\"}");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  auto e = Json::parse(big->body);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("4096"), std::string::npos);

  auto bad = post(r->port(), "/v1/completions", "{\"prompt\": ");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(Json::parse(bad->body)["error"].is_object());
  auto not_obj = post(r->port(), "/v1/completions", "[1,2]");
  ASSERT_TRUE(not_obj);
  EXPECT_EQ(not_obj->status, 400);

  auto nowhere = get(r->port(), "/v2/nothing");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_TRUE(Json::parse(nowhere->body)["error"].is_object());
  EXPECT_EQ(w.count(), 0u);  // none of these reached the worker
}

TEST(RouterDp, WorkerErrorsPassThroughUnchanged) {
  FakeWorker w("w");
  w.start();
  const std::string err = R"({"error":{"message":"max_tokens: must be > 0","type":"invalid_request_error","param":"max_tokens","code":null}})";
  w.on_generate([&](const httplib::Request&, httplib::Response& res) {
    res.status = 422;
    res.set_content(err, "application/json; charset=utf-8");
  });
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  auto res = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 422);
  EXPECT_EQ(res->body, err);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8");
}

TEST(RouterDp, ApiKeyIsChecked) {
  FakeWorker w("w");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  cfg.api_key = "sekret";
  auto r = start_router(cfg);
  auto no = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401);
  auto yes = post(r->port(), "/v1/completions", kBody, {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(yes);
  EXPECT_EQ(yes->status, 200);
  EXPECT_EQ(get(r->port(), "/health")->status, 200);  // health stays open for probes
}

// The client's key is the router's credential: workers see the router's own worker key only.
TEST(RouterDp, WorkerKeyReplacesTheClientsAuthorization) {
  FakeWorker w("w");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  cfg.api_key = "client-key";
  auto r = start_router(cfg);
  ASSERT_EQ(post(r->port(), "/v1/completions", kBody, {{"Authorization", "Bearer client-key"}})->status, 200);
  ASSERT_EQ(w.seen().size(), 1u);
  EXPECT_EQ(w.seen()[0].authorization, "");  // not forwarded

  FakeWorker w2("w2");
  w2.start();
  cfg.workers = {w2.url()};
  cfg.worker_api_key = "worker-key";
  auto r2 = start_router(cfg);
  ASSERT_EQ(post(r2->port(), "/v1/completions", kBody, {{"Authorization", "Bearer client-key"}})->status, 200);
  ASSERT_EQ(w2.seen().size(), 1u);
  EXPECT_EQ(w2.seen()[0].authorization, "Bearer worker-key");
  EXPECT_EQ(r2->server_info()["worker_api_key"], "<redacted>");
}

// Drain: a stream in flight finishes; new requests and /health get 503 "draining".
TEST(RouterDp, DrainFinishesInFlightAndRefusesNew) {
  FakeWorker w("w");
  std::promise<void> release;
  auto released = release.get_future().share();
  w.on_generate([released](const httplib::Request&, httplib::Response& res) {
    released.wait();
    res.set_content(R"({"ok":true})", "application/json");
  });
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  auto slow = std::async(std::launch::async, [&] { return post(r->port(), "/v1/completions", kBody); });
  ASSERT_TRUE(eventually([&] { return r->in_flight() == 1; }));
  r->begin_drain();
  auto refused = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(Json::parse(refused->body)["error"]["code"], "router_draining");
  auto health = get(r->port(), "/health");
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Json::parse(health->body)["reason"], "draining");
  EXPECT_EQ(r->in_flight(), 1);  // the refused one never counted
  release.set_value();
  auto done = slow.get();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  EXPECT_TRUE(eventually([&] { return r->in_flight() == 0; }));
}

TEST(RouterDp, ConnectFailureIsRetriedOnAnotherWorker) {
  FakeWorker live("live");
  live.start();
  const std::string dead = "http://127.0.0.1:" + std::to_string(dead_port());
  auto cfg = fast_config();
  cfg.workers = {dead, live.url()};
  cfg.health.interval_s = 3600;  // keep the dead worker in the rotation: only retries save us
  auto r = start_router(cfg);
  for (int i = 0; i < 8; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  EXPECT_EQ(live.count(), 8u);
  EXPECT_GE(r->server_info()["counters"]["connect_retries"].get<int>(), 4);
  EXPECT_GE(worker_info(*r, dead)["connect_failures"].get<int>(), 4);
}

TEST(RouterDp, KilledWorkerIsEvictedAndReturnsWhenHealthy) {
  FakeWorker a("a"), b("b");
  a.start();
  b.start();
  auto cfg = fast_config();
  cfg.workers = {a.url(), b.url()};
  cfg.max_connect_retries = 0;  // so only eviction (not retries) keeps requests succeeding
  auto r = start_router(cfg);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);

  const int b_port = b.port();
  b.stop();
  ASSERT_TRUE(eventually([&] { return worker_info(*r, b.url())["state"] == "unhealthy"; }));
  const size_t a_before = a.count();
  for (int i = 0; i < 10; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  EXPECT_EQ(a.count(), a_before + 10);
  auto h = get(r->port(), "/health");
  EXPECT_EQ(h->status, 200);

  b.start(b_port);  // restart on the same port
  ASSERT_TRUE(eventually([&] { return worker_info(*r, b.url())["state"] == "healthy"; }));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);
  EXPECT_GT(b.count(), 0u);
}

TEST(RouterDp, HealthSays503WithAReasonWhenNoWorkerIsUsable) {
  FakeWorker w("w");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  EXPECT_EQ(get(r->port(), "/health")->status, 200);
  w.stop();
  ASSERT_TRUE(eventually([&] { return get(r->port(), "/health")->status == 503; }));
  auto h = get(r->port(), "/health");
  EXPECT_NE(Json::parse(h->body)["reason"].get<std::string>().find("no healthy worker"), std::string::npos);
  auto res = post(r->port(), "/v1/completions", kBody);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "no_healthy_worker");
}

TEST(RouterDp, InFlightBoundGivesAClear503) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  FakeWorker w("slow");
  w.on_generate([&](const httplib::Request& req, httplib::Response& res) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return release; });
    res.set_content(FakeWorker::json_answer("slow", req.body, ""), "application/json");
  });
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  cfg.max_in_flight = 2;
  auto r = start_router(cfg);
  auto f1 = std::async(std::launch::async, [&] { return post(r->port(), "/v1/completions", kBody)->status; });
  auto f2 = std::async(std::launch::async, [&] { return post(r->port(), "/v1/completions", kBody)->status; });
  ASSERT_TRUE(eventually([&] { return w.in_flight.load() == 2; }));
  auto third = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503);
  auto e = Json::parse(third->body);
  EXPECT_EQ(e["error"]["code"], "router_overloaded");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("max_in_flight"), std::string::npos);
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(f1.get(), 200);
  EXPECT_EQ(f2.get(), 200);
  EXPECT_TRUE(eventually([&] { return r->server_info()["in_flight"] == 0; }));
  EXPECT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);  // slots came back
}

// A non-streaming client that hangs up while the worker is still working: the router notices
// (it polls the client's socket), cancels the worker call, and the worker sees its own client
// (the router) hang up, which is how a real worker knows to abort (ServerApi tests that half).
TEST(RouterDp, ClientHangingUpCancelsTheWorkerCall) {
  std::atomic<bool> worker_saw_hangup{false};
  FakeWorker w("slow");
  w.on_generate([&](const httplib::Request& req, httplib::Response& res) {
    auto conn = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    for (int i = 0; i < 1000 && !worker_saw_hangup; ++i) {
      if (conn.gone()) worker_saw_hangup = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    res.set_content(FakeWorker::json_answer("slow", req.body, ""), "application/json");
  });
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(r->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  ASSERT_TRUE(eventually([&] { return w.in_flight.load() == 1; }));
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return worker_saw_hangup.load(); })) << "the router kept the worker call open";
  EXPECT_TRUE(eventually([&] { return r->server_info()["counters"]["client_gone"] == 1; }));
  EXPECT_TRUE(eventually([&] { return r->server_info()["in_flight"] == 0; }));
  EXPECT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);  // and it still serves
}

TEST(RouterDp, MetricsAndServerInfo) {
  FakeWorker w("w");
  w.start();
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  ASSERT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);
  auto m = get(r->port(), "/metrics");
  ASSERT_TRUE(m);
  const std::string label = "worker=\"" + w.url() + "\",role=\"unified\"";
  EXPECT_NE(m->body.find("pdserve_router_worker_requests_total{" + label + "} 1"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("pdserve_router_worker_request_duration_seconds_count{" + label + "} 1"), std::string::npos);
  EXPECT_NE(m->body.find("pdserve_router_in_flight 0"), std::string::npos);
  auto info = Json::parse(get(r->port(), "/get_server_info")->body);
  EXPECT_EQ(info["mode"], "dp");
  EXPECT_EQ(info["workers"][0]["state"], "healthy");
  EXPECT_EQ(info["workers"][0]["requests"], 1);
}

}  // namespace
}  // namespace pdserve::router::testing
