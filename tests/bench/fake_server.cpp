#include "fake_server.h"

#include <httplib.h>

#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>

namespace pdserve::bench::testing {
namespace {

using Json = nlohmann::json;

int64_t count_prompt_tokens(const Json& body) {
  if (body.contains("prompt") && body["prompt"].is_array()) return static_cast<int64_t>(body["prompt"].size());
  std::string text = body.contains("prompt") ? body["prompt"].get<std::string>()
                                              : body["messages"][0]["content"].get<std::string>();
  std::istringstream words(text);
  int64_t n = 0;
  for (std::string w; words >> w;) ++n;
  return n;
}

std::string sse(const Json& j) { return "data: " + j.dump() + "\n\n"; }

}  // namespace

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions opts) : opts_(opts), server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [] { return new httplib::ThreadPool(64); };  // many concurrent streams
  server_->Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
  });
  auto handler = [this](const httplib::Request& req, httplib::Response& res) {
    const int64_t n = ++requests_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = req.body;
    }
    if (opts_.fail_every > 0 && n % opts_.fail_every == 0) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"injected failure"}})", "application/json");
      return;
    }
    const Json body = Json::parse(req.body);
    const bool chat = req.path.find("chat") != std::string::npos;
    const bool stream = body.value("stream", false);
    const int64_t max_tokens = body.value("max_tokens", 16);
    const int64_t generated = std::max<int64_t>(1, max_tokens - opts_.short_by);
    const Json usage{{"prompt_tokens", count_prompt_tokens(body) + opts_.prompt_tokens_delta},
                     {"completion_tokens", generated + opts_.completion_tokens_delta},
                     {"total_tokens", 0}};
    if (!stream) {
      std::string text;
      for (int64_t i = 0; i < generated; ++i) text += "tok" + std::to_string(i) + " ";
      Json choice = chat ? Json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"finish_reason", "length"}}
                         : Json{{"index", 0}, {"text", text}, {"finish_reason", "length"}};
      Json out{{"id", "x"}, {"object", chat ? "chat.completion" : "text_completion"}, {"choices", Json::array({choice})}};
      if (!opts_.omit_usage) out["usage"] = usage;
      std::this_thread::sleep_for(std::chrono::milliseconds(opts_.first_token_delay_ms + generated * opts_.token_delay_ms));
      res.set_content(out.dump(), "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [this, chat, generated, usage](size_t, httplib::DataSink& sink) {
      // One call writes the whole stream, pausing between chunks like a decoder would.
      const int64_t now = ++in_flight_;
      for (int64_t m = max_in_flight_.load(); now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
      }
      auto put = [&](const std::string& s) { sink.write(s.data(), s.size()); };
      const char* object = chat ? "chat.completion.chunk" : "text_completion";
      if (chat) put(sse({{"object", object}, {"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}}));
      std::this_thread::sleep_for(std::chrono::milliseconds(opts_.first_token_delay_ms));
      const int64_t merge = std::max<int64_t>(1, opts_.merge_every);
      for (int64_t i = 0; i < generated; i += merge) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opts_.token_delay_ms));
        std::string text;
        for (int64_t k = i; k < std::min(generated, i + merge); ++k) text += "tok" + std::to_string(k) + " ";
        Json choice = chat ? Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}}
                           : Json{{"index", 0}, {"text", text}, {"finish_reason", nullptr}};
        if (i + merge >= generated) choice["finish_reason"] = "length";
        put(sse({{"object", object}, {"choices", Json::array({choice})}}));
      }
      if (!opts_.omit_usage) put(sse({{"object", object}, {"choices", Json::array()}, {"usage", usage}}));
      if (!opts_.omit_done) put("data: [DONE]\n\n");
      --in_flight_;
      sink.done();
      return true;
    });
  };
  server_->Post("/v1/completions", handler);
  server_->Post("/v1/chat/completions", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it, or a quick stop() hangs join().
  for (int i = 0; i < 1000 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeOpenAiServer::~FakeOpenAiServer() {
  server_->stop();
  thread_.join();
}

std::string FakeOpenAiServer::last_body() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_body_;
}

}  // namespace pdserve::bench::testing
