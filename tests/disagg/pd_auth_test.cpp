// A prefill + decode pair with a cluster secret: the same greedy output as without one; the
// bootstrap server refuses unsigned, wrongly signed, stale and replayed requests with 401;
// decode with another secret cannot use the prefill; bad secret files stop the server.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "model/test_models.h"
#include "pd_fixture.h"
#include "pdserve/core/secret_file.h"
#include "pdserve/disagg/bootstrap_auth.h"

namespace pdserve::server::testing {
namespace {

using pdserve::testing::random_ids;

std::string write_secret(const std::string& name, const std::string& contents, mode_t mode) {
  const std::string path = pdserve::testing::temp_dir("secrets") + "/" + name;
  std::ofstream(path, std::ios::trunc) << contents;
  ::chmod(path.c_str(), mode);
  return path;
}

ServeConfig with_secret_file(ServerRole role, const std::string& file) {
  ServeConfig c = pd_config(role, 1);
  c.disagg.cluster_secret_file = file;
  return c;
}

Json body(size_t n) {
  return Json{{"prompt", random_ids(n, 42)}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
}

Json comparable(const std::string& b) {
  Json j = Json::parse(b);
  j.erase("id");
  j.erase("created");
  return j;
}

TEST(PdAuth, SameSecretGivesTheSameOutputAsNoSecret) {
  const std::string file = write_secret("good", "s3cret-shared-by-the-pair\n", 0600);
  PdPair plain(1, 1);
  PdPair authed(1, 1, with_secret_file(ServerRole::kPrefill, file), with_secret_file(ServerRole::kDecode, file));
  EXPECT_EQ(authed.prefill->info()["disagg"]["authenticated"], true);
  EXPECT_EQ(authed.prefill->info().dump().find("s3cret"), std::string::npos) << "the secret must never be printed";
  for (size_t n : {5u, 47u}) {
    auto want = plain.request("/v1/completions", body(n), 100 + n);
    auto got = authed.request("/v1/completions", body(n), 200 + n);
    ASSERT_EQ(got.decode_status, 200) << got.decode_body;
    ASSERT_EQ(got.prefill_status, 200) << got.prefill_body;
    EXPECT_EQ(comparable(got.decode_body)["choices"], comparable(want.decode_body)["choices"]);
  }
  authed.expect_pools_free();
}

TEST(PdAuth, DecodeWithAnotherSecretIsRefused) {
  const std::string a = write_secret("a", "secret-a", 0600), b = write_secret("b", "secret-b", 0600);
  ServeConfig pc = with_secret_file(ServerRole::kPrefill, a);
  pc.disagg.bootstrap_timeout_s = 1;  // prefill's half never gets a target: do not wait long
  PdPair pd(1, 1, pc, with_secret_file(ServerRole::kDecode, b));
  auto r = pd.request("/v1/completions", body(5), 300);
  EXPECT_NE(r.decode_status, 200);
  EXPECT_NE(r.decode_body.find("401"), std::string::npos) << r.decode_body;
  pd.expect_pools_free();
}

TEST(PdAuth, BootstrapServerRefusesUnsignedWrongStaleAndReplayedRequests) {
  const std::string file = write_secret("boot", "the-bootstrap-secret", 0600);
  PdPair pd(1, 1, with_secret_file(ServerRole::kPrefill, file), with_secret_file(ServerRole::kDecode, file));
  httplib::Client c("127.0.0.1", pd.bootstrap_port());
  EXPECT_EQ(c.Get("/health")->status, 200);  // probes stay open
  EXPECT_EQ(c.Get("/route")->status, 401);   // unsigned
  const std::string abort_body = R"({"room": 5, "reason": "test"})";
  EXPECT_EQ(c.Post("/abort", abort_body, "application/json")->status, 401);

  auto signed_headers = [](const std::string& secret, const std::string& method, const std::string& path,
                           const std::string& b) {
    httplib::Headers h;
    for (auto& [k, v] : disagg::BootstrapAuth(secret).sign(method, path, b)) h.emplace(k, v);
    return h;
  };
  EXPECT_EQ(c.Get("/route", signed_headers("wrong-secret", "GET", "/route", ""))->status, 401);
  auto good = signed_headers("the-bootstrap-secret", "GET", "/route", "");
  auto ok = c.Get("/route", good);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(c.Get("/route", good)->status, 401) << "a replayed nonce must be refused";
  // Signed for another body: the signature covers the body.
  EXPECT_EQ(c.Post("/abort", signed_headers("the-bootstrap-secret", "POST", "/abort", "{}"), abort_body,
                   "application/json")->status, 401);

  disagg::BootstrapAuth auth("k");
  const int64_t now = 1'800'000'000;
  const std::string ts = std::to_string(now - 61), nonce = std::string(32, 'a');
  Status stale = auth.verify("GET", "/route", "", ts, nonce, disagg::BootstrapAuth::mac("k", "GET", "/route", ts, nonce, ""), now);
  EXPECT_FALSE(stale.is_ok());
  EXPECT_NE(stale.message().find("stale"), std::string::npos) << stale.message();
  const std::string fresh = std::to_string(now - 59);
  EXPECT_TRUE(auth.verify("GET", "/route", "", fresh, nonce, disagg::BootstrapAuth::mac("k", "GET", "/route", fresh, nonce, ""), now).is_ok());
}

TEST(PdAuth, BadSecretFilesStopTheServerNamingTheFile) {
  const std::string open_file = write_secret("world-readable", "secret", 0644);
  auto r = read_secret_file(open_file);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(open_file), std::string::npos);
  EXPECT_NE(r.status().message().find("chmod 600"), std::string::npos) << r.status().message();
  const std::string empty = write_secret("empty", "\n", 0600);
  ASSERT_FALSE(read_secret_file(empty).is_ok());
  EXPECT_NE(read_secret_file(empty).status().message().find("is empty"), std::string::npos);
  auto missing = read_secret_file("/nonexistent/secret");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/secret"), std::string::npos);
  auto fine = read_secret_file(write_secret("fine", "abc\n", 0600));
  ASSERT_TRUE(fine.is_ok());
  EXPECT_EQ(*fine, "abc");
  auto srv = HttpServer::create(with_secret_file(ServerRole::kPrefill, open_file));
  ASSERT_FALSE(srv.is_ok());
  EXPECT_NE(srv.status().message().find(open_file), std::string::npos);
}

}  // namespace
}  // namespace pdserve::server::testing
