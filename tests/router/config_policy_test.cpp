// Config validation, URL parsing, the policies and the PD body rewrite, without sockets.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "pdserve/router/config.h"
#include "pdserve/router/pd_body.h"
#include "pdserve/router/policy.h"

namespace pdserve::router {
namespace {

RouterConfig dp(std::vector<std::string> workers) {
  RouterConfig c;
  c.workers = std::move(workers);
  return c;
}

TEST(RouterConfig, DefaultsAreValid) {
  EXPECT_TRUE(validate(dp({"http://127.0.0.1:30000"})).is_ok());
  RouterConfig pd;
  pd.mode = RouterMode::kPd;
  pd.prefill = {"http://10.0.0.1:30000@9000"};
  pd.decode = {"http://10.0.0.2:30000"};
  EXPECT_TRUE(validate(pd).is_ok()) << validate(pd).to_string();
  EXPECT_EQ(pd.port, 31000);
}

TEST(RouterConfig, BadValuesAreNamed) {
  auto expect_named = [](RouterConfig c, const std::string& field) {
    Status st = validate(c);
    EXPECT_FALSE(st.is_ok()) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  RouterConfig c = dp({"http://a:1"});
  c.health.failure_threshold = 0;
  expect_named(c, "health.failure_threshold");
  c = dp({"http://a:1"});
  c.health.timeout_s = 0;
  expect_named(c, "health.timeout_s");
  c = dp({"http://a:1"});
  c.health.interval_s = -1;
  expect_named(c, "health.interval_s");
  c = dp({"http://a:1"});
  c.max_in_flight = 0;
  expect_named(c, "max_in_flight");
  c = dp({"http://a:1"});
  c.request_timeout_s = 0;
  expect_named(c, "request_timeout_s");
  c = dp({"http://a:1"});
  c.port = 70000;
  expect_named(c, "port");
  expect_named(dp({}), "--worker");
  expect_named(dp({"http://a:1", "http://a:1/"}), "listed twice");
  expect_named(dp({"http://a:1@9000"}), "only for --prefill");
  expect_named(dp({"https://a:1"}), "https");
  expect_named(dp({"http://a:99999"}), "port must be 1..65535");
  RouterConfig pd;
  pd.mode = RouterMode::kPd;
  pd.prefill = {"http://p:1"};
  expect_named(pd, "--decode");
}

TEST(RouterConfig, ParsesWorkerAddresses) {
  auto a = parse_worker_address("http://10.1.2.3:30000@8999", true);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->url, "http://10.1.2.3:30000");
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->port, 30000);
  EXPECT_EQ(a->bootstrap_port, 8999);
  auto b = parse_worker_address("node605:31001/", false);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->url, "http://node605:31001");
  EXPECT_EQ(b->bootstrap_port, 8998);  // the default
  auto c = parse_worker_address("http://[::1]:5000", false);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->url, "http://[::1]:5000");
  EXPECT_FALSE(parse_worker_address("http://h:1/v1", false).is_ok());
  EXPECT_FALSE(parse_worker_address("http://h:1@x", true).is_ok());
}

TEST(RouterConfig, PolicyNamesRoundTrip) {
  for (auto k : {PolicyKind::kRoundRobin, PolicyKind::kRandom, PolicyKind::kPowerOfTwo, PolicyKind::kLeastOutstanding}) {
    auto p = parse_policy(policy_name(k));
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(*p, k);
  }
  auto bad = parse_policy("cache_aware");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("cache_aware"), std::string::npos);
}

TEST(Policy, RoundRobinCycles) {
  Policy p(PolicyKind::kRoundRobin);
  std::vector<int64_t> load = {5, 0, 9};
  std::vector<size_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(p.pick(load));
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(Policy, LeastOutstandingPicksTheMinimumAndRotatesTies) {
  Policy p(PolicyKind::kLeastOutstanding);
  std::vector<int64_t> load = {4, 1, 7, 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.pick(load), 1u);
  std::vector<int64_t> idle = {0, 0, 0};
  std::set<size_t> seen;
  for (int i = 0; i < 6; ++i) seen.insert(p.pick(idle));
  EXPECT_EQ(seen.size(), 3u);  // an idle cluster is not herded onto worker 0
}

TEST(Policy, PowerOfTwoNeverPicksTheBusiestOfTwo) {
  Policy p(PolicyKind::kPowerOfTwo);
  std::vector<int64_t> two = {9, 2};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.pick(two), 1u);
  // With many candidates the single busiest one can only win if drawn twice, which the
  // distinct-pair draw rules out.
  std::vector<int64_t> many = {1, 1, 1, 50, 1};
  for (int i = 0; i < 500; ++i) EXPECT_NE(p.pick(many), 3u);
}

TEST(Policy, RandomCoversEveryCandidate) {
  Policy p(PolicyKind::kRandom);
  std::vector<int64_t> load(4, 0);
  std::map<size_t, int> hits;
  for (int i = 0; i < 400; ++i) {
    size_t k = p.pick(load);
    ASSERT_LT(k, 4u);
    hits[k]++;
  }
  EXPECT_EQ(hits.size(), 4u);
}

TEST(PdBody, RoomIsNonzeroAnd63Bit) {
  std::set<uint64_t> rooms;
  for (int i = 0; i < 10000; ++i) {
    uint64_t r = new_bootstrap_room();
    ASSERT_NE(r, 0u);
    ASSERT_LT(r, uint64_t(1) << 63);
    rooms.insert(r);
  }
  EXPECT_GT(rooms.size(), 9990u);  // random, not a counter stuck on a value
}

TEST(PdBody, AddsAndOverwritesBootstrapFields) {
  Json body = {{"prompt", "hi"}, {"bootstrap_room", 0}, {"bootstrap_host", "evil"}};
  add_bootstrap_fields(body, "10.0.0.7", 8998, 12345);
  EXPECT_EQ(body["bootstrap_host"], "10.0.0.7");
  EXPECT_EQ(body["bootstrap_port"], 8998);
  EXPECT_EQ(body["bootstrap_room"].get<uint64_t>(), 12345u);
  EXPECT_EQ(body["prompt"], "hi");
  // Serialised as a plain integer so any JSON reader gets the exact value back.
  uint64_t big = (uint64_t(1) << 63) - 1;
  add_bootstrap_fields(body, "h", 1, big);
  EXPECT_NE(body.dump().find("9223372036854775807"), std::string::npos);
}

TEST(PdBody, RequestIds) {
  EXPECT_TRUE(acceptable_request_id("abc-123"));
  EXPECT_FALSE(acceptable_request_id(""));
  EXPECT_FALSE(acceptable_request_id("has space"));
  EXPECT_FALSE(acceptable_request_id(std::string(200, 'a')));
  std::string id = new_request_id();
  EXPECT_TRUE(acceptable_request_id(id));
  EXPECT_NE(id, new_request_id());
}

}  // namespace
}  // namespace pdserve::router
