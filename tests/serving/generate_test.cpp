// A decoder language model served end to end: a small GPT-2 exported with
// flow::models::export_decoder (the cached step as two oneflow_lite exports), served by
// flow::serving::Server, asked for text over REST generate, generate_stream (server-sent events)
// and gRPC ModelStreamInfer. Greedy tokens equal flow::models::generate's for the same prompt, alone
// or with other sequences joining the running batch; a client that goes away frees its slot; bad
// requests are refused.
#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "models/decoder_export.h"
#include "models/generation.h"
#include "serving/served_model.h"
#include "serving_test_util.h"

namespace st = serving_test;
using flow::serving::Client;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kMaxLength = 256;

std::vector<int64_t> bytes_of(const std::string& text) { return std::vector<int64_t>(text.begin(), text.end()); }

class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    flow::manual_seed(11);
    model_ = std::make_shared<flow::models::GPT2LMHeadModel>(
        flow::models::GPT2Config().vocab_size(300).n_positions(kMaxLength).n_embd(32).n_layer(2).n_head(2).dropout(0.0));
    model_->eval();
  }
  static void TearDownTestSuite() { model_.reset(); }

  void SetUp() override {
    flow::models::export_decoder(model_, repo_.version_dir("lm", 1).string(),
                                 flow::models::DecoderExportOptions().prefill_length(8).tokenizer("bytes").eos_token_id({299}));
    repo_.write_config("lm", "max_batch_size: 3");
    server_ = st::start_server(repo_.root());
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    http_->set_read_timeout(60);
  }

  // What flow::models::generate makes of the prompt alone (greedy, stopping at token 299).
  static std::vector<int64_t> expected(const std::vector<int64_t>& prompt, int64_t max_tokens) {
    return flow::models::generate(model_, {prompt}, flow::models::GenerationConfig().max_new_tokens(max_tokens).eos_token_id(299)).at(0);
  }

  httplib::Result post(const std::string& path, const json& body) { return http_->Post(path, body.dump(), "application/json"); }

  // The server-sent events of a generate_stream answer, parsed.
  static std::vector<json> events_of(const std::string& body) {
    std::vector<json> events;
    for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
      const size_t end = body.find("\n\n", at);
      events.push_back(json::parse(body.substr(at + 6, end - at - 6)));
      at = end;
    }
    return events;
  }

  flow::serving::GenerationEngine& engine() { return *server_->repository().get("lm", "")->generation(); }

  static std::shared_ptr<flow::models::GPT2LMHeadModel> model_;
  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<httplib::Client> http_;
};

std::shared_ptr<flow::models::GPT2LMHeadModel> GenerateTest::model_;

// A prompt longer than one prefill step (8 tokens) runs in three.
TEST_F(GenerateTest, GreedyGenerateMatchesFlowGenerate) {
  const std::string prompt = "the quick brown fox";
  const auto result = post("/v2/models/lm/generate", {{"text_input", prompt}, {"max_tokens", 24}});
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  ASSERT_EQ(result->status, 200) << result->body;
  const json answer = json::parse(result->body);
  EXPECT_EQ(answer["model_name"], "lm");
  EXPECT_EQ(answer["model_version"], "1");
  const std::vector<int64_t> want = expected(bytes_of(prompt), 24);
  EXPECT_EQ(answer["output_ids"].get<std::vector<int64_t>>(), want);
  EXPECT_EQ(answer["finish_reason"], want.size() < 24 ? "stop" : "length");
  EXPECT_TRUE(answer.contains("text_output"));
}

TEST_F(GenerateTest, StreamSendsOneEventPerTokenThenTheFinish) {
  const auto result = post("/v2/models/lm/generate_stream", {{"input_ids", {104, 105, 32}}, {"parameters", {{"max_tokens", 12}}}});
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<json> events = events_of(result->body);
  ASSERT_GE(events.size(), 2u);
  std::vector<int64_t> tokens;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_EQ(events[i]["output_ids"].size(), 1u) << events[i].dump();
    EXPECT_FALSE(events[i].contains("finish_reason"));
    tokens.push_back(events[i]["output_ids"][0].get<int64_t>());
  }
  EXPECT_TRUE(events.back().contains("finish_reason")) << events.back().dump();
  EXPECT_EQ(tokens, expected({104, 105, 32}, 12));
}

// More streams than slots (3): new sequences join the running batch as others finish, and each
// one's tokens are those of its solo run.
TEST_F(GenerateTest, ConcurrentSequencesEachMatchTheirSoloRun) {
  const std::vector<std::string> prompts{"a", "hello there", "continuous batching!", "xyz", "one more prompt here", "ok"};
  std::vector<std::future<std::vector<int64_t>>> answers;
  for (size_t i = 0; i < prompts.size(); ++i) {
    answers.push_back(std::async(std::launch::async, [this, &prompts, i] {
      httplib::Client client("127.0.0.1", server_->http_port());
      client.set_read_timeout(60);
      const json body{{"text_input", prompts[i]}, {"max_tokens", 10 + static_cast<int64_t>(i) * 7}};
      const auto result = client.Post("/v2/models/lm/generate_stream", body.dump(), "application/json");
      std::vector<int64_t> tokens;
      if (!result || result->status != 200) return tokens;
      for (const json& event : events_of(result->body)) {
        for (const json& id : event["output_ids"]) tokens.push_back(id.get<int64_t>());
      }
      return tokens;
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(answers[i].get(), expected(bytes_of(prompts[i]), 10 + static_cast<int64_t>(i) * 7)) << prompts[i];
  }
  EXPECT_EQ(engine().active(), 0);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(GenerateTest, GrpcStreamInferAnswersOnePerTokenThenAFinalResponse) {
  const auto client = st::connect(*server_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 60s);
  auto stream = client->stub().ModelStreamInfer(&context);
  inference::ModelInferRequest request;
  request.set_model_name("lm");
  request.set_id("r1");
  auto& input = *request.add_inputs();
  input.set_name("input_ids");
  input.set_datatype("INT64");
  input.add_shape(4);
  for (int64_t id : {70, 108, 111, 119}) input.mutable_contents()->add_int64_contents(id);
  (*request.mutable_parameters())["max_tokens"].set_int64_param(9);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->WritesDone());
  std::vector<int64_t> tokens;
  inference::ModelStreamInferResponse response;
  bool final_seen = false;
  while (stream->Read(&response)) {
    ASSERT_EQ(response.error_message(), "");
    const auto& infer = response.infer_response();
    EXPECT_EQ(infer.id(), "r1");
    final_seen = infer.parameters().at("triton_final_response").bool_param();
    if (final_seen) break;
    ASSERT_EQ(infer.outputs_size(), 2);
    EXPECT_EQ(infer.outputs(1).name(), "output_ids");
    int64_t token = 0;
    ASSERT_EQ(infer.raw_output_contents(1).size(), sizeof(token));
    std::memcpy(&token, infer.raw_output_contents(1).data(), sizeof(token));
    tokens.push_back(token);
  }
  EXPECT_TRUE(final_seen);
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(tokens, expected({70, 108, 111, 119}, 9));
}

// The client closes its connection after the first event: the sequence is cancelled at its next
// token and its slot is free again, long before its 240 tokens would have been generated.
TEST_F(GenerateTest, ClientThatGoesAwayFreesItsSlot) {
  const int fd = st::connect_to(server_->http_port());
  ASSERT_GE(fd, 0);
  const std::string body = json{{"input_ids", {1, 2, 3}}, {"max_tokens", 240}, {"stop_token_ids", json::array()}}.dump();
  ASSERT_TRUE(st::send_all(fd, "POST /v2/models/lm/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_NE(st::receive(fd, 30s, "\n\n").find("data: "), std::string::npos);
  close(fd);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((engine().active() > 0 || server_->in_flight() > 0) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine().active(), 0);
  EXPECT_EQ(server_->in_flight(), 0);
  httplib::Client metrics("127.0.0.1", server_->metrics_port());
  const auto text = metrics.Get("/metrics");
  ASSERT_TRUE(text);
  EXPECT_NE(text->body.find("nv_inference_request_failure{model=\"lm\",reason=\"CANCELED\",version=\"1\"} 1"), std::string::npos)
      << text->body;
  // Still serving: a new request runs to its end.
  const auto result = post("/v2/models/lm/generate", {{"input_ids", {5}}, {"max_tokens", 3}, {"stop_token_ids", json::array()}});
  ASSERT_TRUE(result);
  EXPECT_EQ(json::parse(result->body)["output_ids"].size(), 3u);
}

TEST_F(GenerateTest, SampledGenerationIsReproducibleFromItsSeed) {
  const json body{{"text_input", "seeded"}, {"max_tokens", 16}, {"do_sample", true}, {"temperature", 1.5}, {"top_k", 40}, {"seed", 7}};
  const auto first = post("/v2/models/lm/generate", body);
  const auto second = post("/v2/models/lm/generate", body);
  ASSERT_TRUE(first && second);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(json::parse(first->body)["output_ids"], json::parse(second->body)["output_ids"]);
}

TEST_F(GenerateTest, BadRequestsAreRefused) {
  const std::vector<std::pair<json, std::string>> cases{
      {{{"text_input", ""}, {"max_tokens", 4}}, "the prompt is empty"},
      {{{"input_ids", {1, 300}}}, "outside the vocabulary"},
      {{{"input_ids", {1}}, {"max_tokens", -1}}, "max_tokens must be >= 0"},
      {{{"input_ids", std::vector<int64_t>(kMaxLength, 1)}}, "leave room to generate"},
      {{{"input_ids", {1}}, {"temperature", 0}}, "temperature must be a positive number"},
      {{{"input_ids", {1}}, {"top_p", 1.5}}, "top_p must be in (0, 1]"},
      {{{"input_ids", {1}}, {"max_token", 3}}, "unknown parameter 'max_token'"},
      {{{"max_tokens", 3}}, "neither text_input nor input_ids"},
  };
  for (const auto& [body, message] : cases) {
    for (const char* route : {"generate", "generate_stream"}) {
      const auto result = post(std::string("/v2/models/lm/") + route, body);
      ASSERT_TRUE(result);
      EXPECT_EQ(result->status, 400) << route << " " << body.dump() << ": " << result->body;
      EXPECT_NE(result->body.find(message), std::string::npos) << result->body;
    }
  }
  const auto not_json = http_->Post("/v2/models/lm/generate", "{", "application/json");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
  const auto unknown = post("/v2/models/nope/generate", {{"input_ids", {1}}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(GenerateTest, MetricsCountTokensAndTheFirstResponse) {
  ASSERT_TRUE(post("/v2/models/lm/generate", {{"input_ids", {9, 8}}, {"max_tokens", 5}, {"stop_token_ids", json::array()}}));
  httplib::Client metrics("127.0.0.1", server_->metrics_port());
  const auto text = metrics.Get("/metrics");
  ASSERT_TRUE(text);
  EXPECT_NE(text->body.find("nv_inference_count{model=\"lm\",version=\"1\"} 5"), std::string::npos) << text->body;
  EXPECT_NE(text->body.find("nv_inference_first_response_histogram_ms_count{model=\"lm\",version=\"1\"} 1"), std::string::npos);
}

}  // namespace
