// The KServe v2 REST protocol through httplib::Client: health, metadata, readiness, inference in
// JSON and in Triton's binary tensor data, the gRPC side's errors with Triton's HTTP statuses,
// the same metrics, and routing (404, 405).
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serving/rest_service.h"
#include "serving_test_util.h"

namespace st = serving_test;
using nlohmann::json;

namespace {

class RestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_sum_product(repo_.version_dir("sum_product", 1));
    repo_.write_config("sum_product", "max_batch_size: 4");
    st::export_conv(repo_.version_dir("cnn", 1));
    st::export_identity(repo_.version_dir("bytes", 1), flow::kUInt8);
    server_ = st::start_server(repo_.root());
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    http_->set_read_timeout(60, 0);
  }

  httplib::Result get(const std::string& path) { return http_->Get(path.c_str()); }
  httplib::Result post_json(const std::string& path, const json& body) {
    return http_->Post(path.c_str(), body.dump(), "application/json");
  }
  // POSTs the JSON header followed by binary data, as Triton's binary extension sends it.
  httplib::Result post_binary(const std::string& path, const json& header, const std::string& binary) {
    const std::string text = header.dump();
    const httplib::Headers headers{{"Inference-Header-Content-Length", std::to_string(text.size())}};
    return http_->Post(path.c_str(), headers, text + binary, "application/octet-stream");
  }
  // Expects `status` and an {"error": ...} body holding every one of `parts`.
  static void expect_error(const httplib::Result& result, int status, const std::vector<std::string>& parts) {
    ASSERT_TRUE(result) << httplib::to_string(result.error());
    EXPECT_EQ(result->status, status) << result->body;
    const json body = json::parse(result->body);
    ASSERT_TRUE(body.contains("error")) << result->body;
    for (const std::string& part : parts) {
      EXPECT_NE(body["error"].get<std::string>().find(part), std::string::npos) << result->body << " lacks " << part;
    }
  }

  static json sum_product_request() {
    return {{"id", "req-7"},
            {"inputs",
             {{{"name", "a"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", {1, 2, 3, 4}}},
              {{"name", "b"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", {{2, 2, 2, 2}}}}}}};
  }

  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(RestTest, HealthAndReadiness) {
  EXPECT_EQ(get("/v2/health/live")->status, 200);
  EXPECT_EQ(get("/v2/health/ready")->status, 200);
  EXPECT_EQ(get("/v2/models/sum_product/ready")->status, 200);
  EXPECT_EQ(get("/v2/models/sum_product/versions/1/ready")->status, 200);
  EXPECT_EQ(get("/v2/models/sum_product/versions/2/ready")->status, 400);
  EXPECT_EQ(get("/v2/models/nope/ready")->status, 400);
}

TEST_F(RestTest, ServerAndModelMetadata) {
  auto result = get("/v2");
  ASSERT_EQ(result->status, 200);
  const json server = json::parse(result->body);
  EXPECT_EQ(server["name"], "flow");
  EXPECT_EQ(server["extensions"], json::array({"binary_tensor_data", "model_repository", "generate"}));

  for (const char* path : {"/v2/models/sum_product", "/v2/models/sum_product/versions/1"}) {
    result = get(path);
    ASSERT_EQ(result->status, 200) << path;
    const json model = json::parse(result->body);
    EXPECT_EQ(model["name"], "sum_product");
    EXPECT_EQ(model["versions"], json::array({"1"}));
    EXPECT_EQ(model["platform"], "oneflow_lite");
    EXPECT_EQ(model["inputs"][1], (json{{"name", "b"}, {"datatype", "FP32"}, {"shape", {-1, 4}}}));
    EXPECT_EQ(model["outputs"][0]["name"], "sum");
  }
  expect_error(get("/v2/models/missing"), 404, {"'missing'"});
  expect_error(get("/v2/models/sum_product/versions/7"), 404, {"'sum_product'", "'7'"});
}

TEST_F(RestTest, InferWithJsonTensors) {
  const auto result = post_json("/v2/models/sum_product/infer", sum_product_request());
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  const json response = json::parse(result->body);
  EXPECT_EQ(response["model_name"], "sum_product");
  EXPECT_EQ(response["model_version"], "1");
  EXPECT_EQ(response["id"], "req-7");
  ASSERT_EQ(response["outputs"].size(), 2u);
  EXPECT_EQ(response["outputs"][0], (json{{"name", "sum"}, {"datatype", "FP32"}, {"shape", {1, 4}},
                                          {"data", {3, 4, 5, 6}}}));
  EXPECT_EQ(response["outputs"][1]["data"], (json{2, 4, 6, 8}));
}

TEST_F(RestTest, RequestedOutputsInTheRequestedOrder) {
  json request = sum_product_request();
  request["outputs"] = {{{"name", "product"}}, {{"name", "sum"}}};
  const json response = json::parse(post_json("/v2/models/sum_product/versions/1/infer", request)->body);
  ASSERT_EQ(response["outputs"].size(), 2u);
  EXPECT_EQ(response["outputs"][0]["name"], "product");
  EXPECT_EQ(response["outputs"][1]["name"], "sum");
}

TEST_F(RestTest, InferWithBinaryTensorData) {
  const std::vector<float> a{1, 2, 3, 4, 5, 6, 7, 8}, b{1, 1, 1, 1, 2, 2, 2, 2};
  std::string binary(reinterpret_cast<const char*>(a.data()), 32);
  binary.append(reinterpret_cast<const char*>(b.data()), 32);
  const json header = {
      {"inputs",
       {{{"name", "a"}, {"datatype", "FP32"}, {"shape", {2, 4}}, {"parameters", {{"binary_data_size", 32}}}},
        {{"name", "b"}, {"datatype", "FP32"}, {"shape", {2, 4}}, {"parameters", {{"binary_data_size", 32}}}}}},
      {"outputs", {{{"name", "sum"}, {"parameters", {{"binary_data", true}}}}, {{"name", "product"}}}}};
  const auto result = post_binary("/v2/models/sum_product/infer", header, binary);
  ASSERT_EQ(result->status, 200) << result->body;
  const size_t json_length = std::stoul(result->get_header_value("Inference-Header-Content-Length"));
  const json response = json::parse(result->body.substr(0, json_length));
  EXPECT_EQ(response["outputs"][0]["parameters"]["binary_data_size"], 32);
  EXPECT_FALSE(response["outputs"][0].contains("data"));
  EXPECT_EQ(st::fp32_values(result->body.substr(json_length)), (std::vector<float>{2, 3, 4, 5, 7, 8, 9, 10}));
  EXPECT_EQ(response["outputs"][1]["data"], (json{1, 2, 3, 4, 10, 12, 14, 16}));

  // binary_data_output answers every output in binary.
  json all_binary = header;
  all_binary.erase("outputs");
  all_binary["parameters"] = {{"binary_data_output", true}};
  const auto both = post_binary("/v2/models/sum_product/infer", all_binary, binary);
  ASSERT_EQ(both->status, 200) << both->body;
  const size_t both_length = std::stoul(both->get_header_value("Inference-Header-Content-Length"));
  EXPECT_EQ(both->body.size(), both_length + 64);
}

TEST_F(RestTest, JsonIntegersAreRangeChecked) {
  const json request = {{"inputs", {{{"name", "x"}, {"datatype", "UINT8"}, {"shape", {1, 3}}, {"data", {0, 7, 255}}}}}};
  const auto result = post_json("/v2/models/bytes/infer", request);
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(json::parse(result->body)["outputs"][0]["data"], (json{0, 7, 255}));
  json out_of_range = request;
  out_of_range["inputs"][0]["data"] = {0, 256, 1};
  expect_error(post_json("/v2/models/bytes/infer", out_of_range), 400, {"input 'x'", "value 1", "256", "UINT8"});
  out_of_range["inputs"][0]["data"] = {0, 1.5, 1};
  expect_error(post_json("/v2/models/bytes/infer", out_of_range), 400, {"value 1", "not an integer"});
}

// The gRPC side's checks and messages, with Triton's statuses.
TEST_F(RestTest, ErrorsMatchTheGrpcSide) {
  json request = sum_product_request();
  request["inputs"][0]["shape"] = {1, 5};
  expect_error(post_json("/v2/models/sum_product/infer", request), 400,
               {"model 'sum_product' version 1, input 'a'", "dimension 1 of shape (1,5) is 5", "needs 4"});
  request = sum_product_request();
  request["inputs"][1]["datatype"] = "FP64";
  expect_error(post_json("/v2/models/sum_product/infer", request), 400, {"input 'b'", "expected datatype FP32"});
  request = sum_product_request();
  request["inputs"][1]["data"] = {1, 2, 3};
  expect_error(post_json("/v2/models/sum_product/infer", request), 400, {"input 'b'", "expected 4 values", "got 3"});
  request = sum_product_request();
  request["inputs"].erase(1);
  expect_error(post_json("/v2/models/sum_product/infer", request), 400, {"input 'b': missing"});
  request = sum_product_request();
  request["outputs"] = {{{"name", "quotient"}}};
  expect_error(post_json("/v2/models/sum_product/infer", request), 400, {"output 'quotient'", "sum, product"});
  request = sum_product_request();
  request["inputs"][0]["shape"] = {5, 4};
  request["inputs"][0]["data"] = std::vector<float>(20, 1.0f);
  request["inputs"][1]["shape"] = {5, 4};
  request["inputs"][1]["data"] = std::vector<float>(20, 1.0f);
  expect_error(post_json("/v2/models/sum_product/infer", request), 400, {"max_batch_size 4"});
  expect_error(post_json("/v2/models/missing/infer", sum_product_request()), 404, {"'missing'"});
  expect_error(post_json("/v2/models/sum_product/versions/3/infer", sum_product_request()), 404, {"'3'"});
  // The regression of the gRPC side, through REST: a wrapping element count.
  const json huge = {{"inputs",
                      {{{"name", "image"},
                        {"datatype", "FP32"},
                        {"shape", {(int64_t{1} << 61) + 1, 1, 28, 28}},
                        {"parameters", {{"binary_data_size", 3136}}}}}}};
  expect_error(post_binary("/v2/models/cnn/infer", huge, std::string(3136, '\0')), 400,
               {"input 'image'", "more bytes than int64 can count"});
  // Still serving.
  EXPECT_EQ(post_json("/v2/models/sum_product/infer", sum_product_request())->status, 200);
}

TEST_F(RestTest, MalformedBodiesAreBadRequests) {
  const std::string path = "/v2/models/sum_product/infer";
  expect_error(http_->Post(path.c_str(), "{\"inputs\": [", "application/json"), 400, {"not valid JSON"});
  expect_error(post_json(path, json::array()), 400, {"must be a JSON object"});
  expect_error(post_json(path, json::object()), 400, {"has no 'inputs'"});
  json request = sum_product_request();
  request["inputs"][0]["shape"] = "1,4";
  expect_error(post_json(path, request), 400, {"inputs[0].shape must be an array"});
  request = sum_product_request();
  request["inputs"][0]["shape"] = {1, 4.5};
  expect_error(post_json(path, request), 400, {"inputs[0].shape must hold integers"});
  request = sum_product_request();
  request["inputs"][0]["data"] = {{{1, 2, 3, 4}}};
  expect_error(post_json(path, request), 400, {"input 'a'", "nests deeper than the shape's 2 dimensions"});
  request = sum_product_request();
  request["inputs"][0]["data"] = "1,2,3,4";
  expect_error(post_json(path, request), 400, {"input 'a'", "data must be an array"});
  std::string twice = sum_product_request().dump();
  twice.replace(twice.find("\"data\""), 6, "\"data\":[1,2,3,4],\"data\"");
  expect_error(http_->Post(path.c_str(), twice, "application/json"), 400, {"two data fields"});
  request = sum_product_request();
  request["inputs"][0].erase("data");
  expect_error(post_json(path, request), 400, {"input 'a'", "neither data nor parameters.binary_data_size"});
  request = sum_product_request();
  request["inputs"][0]["parameters"] = {{"binary_data_size", 16}};
  expect_error(post_binary(path, request, std::string(16, '\0')), 400, {"input 'a'", "both data and"});
  request = sum_product_request();
  request["inputs"][1].erase("data");
  request["inputs"][1]["parameters"] = {{"binary_data_size", 16}};
  expect_error(post_binary(path, request, std::string(8, '\0')), 400, {"binary_data_size 16 but only 8 bytes"});
  expect_error(post_binary(path, request, std::string(20, '\0')), 400, {"4 bytes of binary data that no input"});
  const httplib::Headers bad_length{{"Inference-Header-Content-Length", "99999"}};
  expect_error(http_->Post(path.c_str(), bad_length, sum_product_request().dump(), "application/json"), 400,
               {"Inference-Header-Content-Length '99999'"});
}

TEST_F(RestTest, RestRequestsCountInTheSameMetrics) {
  ASSERT_EQ(post_json("/v2/models/sum_product/infer", sum_product_request())->status, 200);
  json request = sum_product_request();
  request["inputs"][0]["shape"] = {1, 5};
  ASSERT_EQ(post_json("/v2/models/sum_product/infer", request)->status, 400);
  EXPECT_EQ(st::metric(*server_, "nv_inference_request_success", "sum_product"), 1);
  EXPECT_EQ(st::metric(*server_, "nv_inference_request_failure", "sum_product"), 1);
  EXPECT_EQ(st::metric(*server_, "nv_inference_exec_count", "sum_product"), 1);
  EXPECT_GT(st::metric(*server_, "nv_inference_compute_output_duration_us", "sum_product"), 0);
}

TEST_F(RestTest, RoutingAnswers404And405) {
  expect_error(get("/v2/nothing/here"), 404, {"no such path", "/v2/nothing/here"});
  expect_error(get("/metrics"), 404, {"no such path"});  // metrics have their own port
  expect_error(get("/v2/models/sum_product/infer"), 405, {"GET", "not allowed"});
  EXPECT_EQ(get("/v2/models/sum_product/infer")->get_header_value("Allow"), "POST");
  expect_error(http_->Delete("/v2/health/live"), 405, {"DELETE"});
  // A path as long as httplib reads is routed without trouble.
  expect_error(get("/v2/models/" + std::string(8000, 'm')), 404, {"'mmmm"});

  httplib::Client metrics("127.0.0.1", server_->metrics_port());
  const auto scrape = metrics.Get("/metrics");
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->body.find("nv_inference_request_success"), std::string::npos);
  expect_error(metrics.Post("/metrics", "", "text/plain"), 405, {"POST"});
  expect_error(metrics.Get("/"), 404, {"no such path"});
  expect_error(metrics.Get("/metricsfoo"), 404, {"no such path"});
}

TEST(RestStatusTest, TritonsHttpStatuses) {
  using grpc::StatusCode;
  EXPECT_EQ(flow::serving::http_status(StatusCode::INVALID_ARGUMENT), 400);
  EXPECT_EQ(flow::serving::http_status(StatusCode::CANCELLED), 400);
  EXPECT_EQ(flow::serving::http_status(StatusCode::NOT_FOUND), 404);
  EXPECT_EQ(flow::serving::http_status(StatusCode::INTERNAL), 500);
  EXPECT_EQ(flow::serving::http_status(StatusCode::UNAVAILABLE), 503);
  EXPECT_EQ(flow::serving::http_status(StatusCode::RESOURCE_EXHAUSTED), 503);
}

TEST(RestPortTest, OneServerAnswersBothWhenThePortsAreTheSame) {
  st::Repository repo;
  st::export_affine(repo.version_dir("affine", 1), 2.0f);
  flow::serving::ServerOptions options;
  options.model_repository = repo.root().string();
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  const int port = st::free_port();
  ASSERT_GT(port, 0);
  options.http_port = options.metrics_port = port;
  flow::serving::Server server(options);
  EXPECT_EQ(server.http_port(), port);
  EXPECT_EQ(server.metrics_port(), port);
  httplib::Client http("127.0.0.1", port);
  EXPECT_EQ(http.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(http.Get("/metrics")->status, 200);
}

}  // namespace
