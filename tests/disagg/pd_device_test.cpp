// The prefill and decode roles with a device forward: the engine copies each request's cache
// between the device pools and the host pools (which the transfer layer moves) at the
// hand-over points. A stand-in device (the CPU model over pools of its own, so nothing reaches
// the host pools unless copied) proves the copies come at the right moments with the right
// ids: greedy output equals the unified CPU server's bit for bit only if prefill downloaded
// every page and the slot before sending and decode uploaded them before its first step.
// The same pair on the real CUDA backend runs where a GPU is (skips itself elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "model/test_models.h"
#include "pd_fixture.h"

namespace pdserve::server::testing {
namespace {

using pdserve::testing::random_ids;

struct CopyLog {
  std::mutex mu;
  std::vector<CacheRegion> downloads, uploads;
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    downloads.clear();
    uploads.clear();
  }
};

// The CPU model over private pools: a device whose memory the host cannot see.
class ShadowDevice final : public DeviceForward {
 public:
  ShadowDevice(TpModelGroup& g, CopyLog* log) : model_(g.model_ptr(0)), log_(log) {
    kv_ = MlaKvPool::for_model(model_->config(), g.kv(0).num_pages(), g.kv(0).page_size());
    state_ = KdaStatePool::for_model(model_->config(), g.state(0).num_slots());
  }
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override {
    ModelCaches caches{kv_.get(), state_.get()};
    return model_->forward(batch, caches, out);
  }
  std::string describe() const override { return "shadow device (test)"; }
  Status download(const CacheRegion& r, MlaKvPool& kv, KdaStatePool& state) override {
    copy(r, *kv_, *state_, kv, state);
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->downloads.push_back(r);
    return Status::ok();
  }
  Status upload(const CacheRegion& r, const MlaKvPool& kv, const KdaStatePool& state) override {
    copy(r, kv, state, *kv_, *state_);
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->uploads.push_back(r);
    return Status::ok();
  }

 private:
  static void copy(const CacheRegion& r, const MlaKvPool& from_kv, const KdaStatePool& from_state, MlaKvPool& to_kv,
                   KdaStatePool& to_state) {
    for (int64_t l = 0; l < from_kv.num_layers(); ++l)
      for (int32_t p : r.pages)
        std::copy_n(from_kv.layer_base(l) + p * from_kv.page_floats(), from_kv.page_floats(), to_kv.layer_base(l) + p * to_kv.page_floats());
    if (r.slot >= 0) std::copy_n(from_state.slot_base(r.slot), from_state.slot_floats(), to_state.slot_base(r.slot));
  }
  std::shared_ptr<const Model> model_;
  CopyLog* log_;
  std::unique_ptr<MlaKvPool> kv_;
  std::unique_ptr<KdaStatePool> state_;
};

Json greedy_body(const std::vector<int32_t>& prompt, int max_tokens) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1}};
}

Json tokens_of(const std::string& body) { return Json::parse(body)["choices"][0]["logprobs"]["tokens"]; }

struct DevicePair {
  std::unique_ptr<LiveServer> prefill, decode;
  DevicePair(HttpServer::DeviceFactory pf, HttpServer::DeviceFactory df, DType kv_dtype = DType::kF32) {
    ServeConfig pc = pd_config(ServerRole::kPrefill, 1), dc = pd_config(ServerRole::kDecode, 1);
    pc.device = dc.device = "cuda";
    pc.runtime.kv_cache_dtype = dc.runtime.kv_cache_dtype = kv_dtype;
    prefill = std::make_unique<LiveServer>(pc, HttpServer::TransportFactory{}, std::move(pf));
    decode = std::make_unique<LiveServer>(dc, HttpServer::TransportFactory{}, std::move(df));
  }
  PdResult request(const Json& body, uint64_t room) const {
    Json b = body;
    b["bootstrap_host"] = "127.0.0.1";
    b["bootstrap_port"] = prefill->server().prefill()->bootstrap_port();
    b["bootstrap_room"] = room;
    auto p = std::async(std::launch::async, [&] { return prefill->post("/v1/completions", b.dump()); });
    auto d = decode->post("/v1/completions", b.dump());
    auto pr = p.get();
    return {pr.first, d.first, pr.second, d.second};
  }
};

// page_size 16, chunk_size 32 (pd_config): one page, a partial page, chunk boundaries.
const std::vector<size_t> kPromptLengths = {1, 16, 33, 70};

TEST(PdDevice, EngineCopiesCacheAtTheHandOverPoints) {
  LiveServer unified(pd_config(ServerRole::kUnified, 1));
  CopyLog plog, dlog;
  DevicePair pd([&](TpModelGroup& g, const ServeConfig&) -> Result<std::unique_ptr<DeviceForward>> {
                  return std::unique_ptr<DeviceForward>(std::make_unique<ShadowDevice>(g, &plog));
                },
                [&](TpModelGroup& g, const ServeConfig&) -> Result<std::unique_ptr<DeviceForward>> {
                  return std::unique_ptr<DeviceForward>(std::make_unique<ShadowDevice>(g, &dlog));
                });
  uint64_t room = 500;
  for (size_t n : kPromptLengths) {
    SCOPED_TRACE("prompt length " + std::to_string(n));
    plog.clear();
    dlog.clear();
    const Json body = greedy_body(random_ids(n, static_cast<uint32_t>(n + 3)), 8);
    auto [ustatus, ubody] = unified.post("/v1/completions", body.dump());
    ASSERT_EQ(ustatus, 200) << ubody;
    PdResult r = pd.request(body, ++room);
    ASSERT_EQ(r.prefill_status, 200) << r.prefill_body;
    ASSERT_EQ(r.decode_status, 200) << r.decode_body;
    EXPECT_EQ(tokens_of(r.decode_body), tokens_of(ubody));

    const size_t pages = (n + 15) / 16, chunks = (n + 31) / 32;
    std::lock_guard<std::mutex> pl(plog.mu), dl(dlog.mu);
    // Prefill: one download per chunk, each the pages that chunk touched; the slot only with
    // the last (the state is final only then); together every page of the prompt.
    ASSERT_EQ(plog.downloads.size(), chunks);
    std::set<int32_t> downloaded;
    for (size_t c = 0; c < chunks; ++c) {
      const CacheRegion& d = plog.downloads[c];
      const size_t first = c * 32 / 16, last = std::min(pages, ((c + 1) * 32 + 15) / 16);
      EXPECT_EQ(d.pages.size(), last - first) << "chunk " << c;
      downloaded.insert(d.pages.begin(), d.pages.end());
      EXPECT_EQ(d.slot >= 0, c + 1 == chunks) << "chunk " << c;
    }
    EXPECT_EQ(downloaded.size(), pages);
    // Decode: one upload, before its first step, of the prompt's pages and the slot.
    ASSERT_EQ(dlog.uploads.size(), 1u);
    EXPECT_EQ(dlog.uploads[0].pages.size(), pages);
    EXPECT_GE(dlog.uploads[0].slot, 0);
  }
  EXPECT_TRUE(PdPair::pools_free(*pd.prefill));
  EXPECT_TRUE(PdPair::pools_free(*pd.decode));
}

// The device copies move one run of consecutive page ids at a time.
TEST(PdDevice, PageRunsSplitAtGaps) {
  using Runs = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(page_runs({}), Runs{});
  EXPECT_EQ(page_runs({4}), (Runs{{4, 1}}));
  EXPECT_EQ(page_runs({7, 8, 9, 3, 20, 21, 5}), (Runs{{7, 3}, {3, 1}, {20, 2}, {5, 1}}));
  EXPECT_EQ(page_runs({2, 1}), (Runs{{2, 1}, {1, 1}}));  // descending ids are not one run
}

// More ranks than GPUs is refused before any weights load, naming both counts (or, in a
// build without CUDA, saying so).
TEST(PdDevice, MoreRanksThanGpusIsRefusedBeforeLoading) {
  ServeConfig cfg = pd_config(ServerRole::kDecode, 16);
  cfg.device = "cuda";
  auto s = HttpServer::create(cfg);
  ASSERT_FALSE(s.is_ok());
  const std::string m = s.status().message();
  EXPECT_TRUE(m.find("needs 16 GPUs") != std::string::npos || m.find("built without CUDA") != std::string::npos) << m;
}

// Whether a CUDA device forward can be made here (else the test skips, saying why).
Status cuda_probe() {
  auto model = Model::load(pdserve::testing::tiny_model_dir("tiny-k3-wide"));
  if (!model.is_ok()) return model.status();
  return make_cuda_forward(std::shared_ptr<const Model>(std::move(model).value()), 1, 16, 1).status();
}

// The real backend: prefill on CUDA -> decode on CUDA gives the unified CPU server's greedy
// tokens; with kv_cache_dtype bfloat16 on every side (bf16 device pools, bf16 bytes through the
// host pools and the wire), the unified CPU bf16 server's.
class PdDeviceDtype : public ::testing::TestWithParam<DType> {};

TEST_P(PdDeviceDtype, CudaPrefillToCudaDecodeMatchesCpuServe) {
  if (Status probe = cuda_probe(); !probe.is_ok()) GTEST_SKIP() << "no CUDA device here (" << probe.message() << ")";
  ServeConfig uc = pd_config(ServerRole::kUnified, 1);
  uc.runtime.kv_cache_dtype = GetParam();
  LiveServer unified(uc);
  DevicePair pd({}, {}, GetParam());
  EXPECT_EQ(pd.decode->info()["pools"]["kv_cache_dtype"], kv_cache_dtype_name(GetParam()));
  uint64_t room = 900;
  for (size_t n : kPromptLengths) {
    SCOPED_TRACE("prompt length " + std::to_string(n));
    const Json body = greedy_body(random_ids(n, static_cast<uint32_t>(n + 3)), 16);
    auto [ustatus, ubody] = unified.post("/v1/completions", body.dump());
    ASSERT_EQ(ustatus, 200) << ubody;
    PdResult r = pd.request(body, ++room);
    ASSERT_EQ(r.prefill_status, 200) << r.prefill_body;
    ASSERT_EQ(r.decode_status, 200) << r.decode_body;
    EXPECT_EQ(tokens_of(r.decode_body), tokens_of(ubody));
  }
  EXPECT_TRUE(PdPair::pools_free(*pd.decode));
}

INSTANTIATE_TEST_SUITE_P(KvCacheDtype, PdDeviceDtype, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(kv_cache_dtype_name(p.param)); });

}  // namespace
}  // namespace pdserve::server::testing
