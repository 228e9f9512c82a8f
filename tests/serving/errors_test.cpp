// Every error status: NOT_FOUND, INVALID_ARGUMENT (each way a request can be wrong),
// RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and CANCELLED; messages name the model and the input,
// and the server keeps serving after each.
#include "serving_test_util.h"

namespace st = serving_test;
using grpc::StatusCode;

namespace {

class ErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_sum_product(repo_.version_dir("sum_product", 1));
    repo_.write_config("sum_product", "max_batch_size: 4");
    // Requests wait in the queue up to a minute for a batch to fill: they stay in flight until
    // cancelled or until shutdown dispatches them.
    st::export_affine(repo_.version_dir("held", 1), 2.0f);
    repo_.write_config("held",
                       "max_batch_size: 8 max_queue_size: 2 dynamic_batching { max_queue_delay_microseconds: 60000000 }");
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }

  inference::ModelInferRequest valid_request() const {
    return flow::serving::make_infer_request(
        "sum_product", {st::fp32_tensor("a", {1, 4}, {1, 2, 3, 4}), st::fp32_tensor("b", {1, 4}, {1, 1, 1, 1})});
  }
  // Sends the request; expects the code and a message holding every one of `parts`.
  void expect_error(const inference::ModelInferRequest& request, StatusCode code, const std::vector<std::string>& parts) {
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(request, response);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    for (const auto& part : parts) {
      EXPECT_NE(status.error_message().find(part), std::string::npos) << status.error_message() << " lacks " << part;
    }
    expect_still_serving();
  }
  void expect_still_serving() {
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(valid_request(), response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(st::fp32_values(response.raw_output_contents(0)), (std::vector<float>{2, 3, 4, 5}));
  }

  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
};

TEST_F(ErrorsTest, UnknownModelOrVersionIsNotFound) {
  auto request = valid_request();
  request.set_model_name("missing");
  expect_error(request, StatusCode::NOT_FOUND, {"'missing'"});
  request = valid_request();
  request.set_model_version("7");
  expect_error(request, StatusCode::NOT_FOUND, {"'sum_product'", "'7'"});
  try {
    client_->model_metadata("missing");
    ADD_FAILURE() << "no error";
  } catch (const flow::serving::RpcError& error) {
    EXPECT_EQ(error.code(), StatusCode::NOT_FOUND);
  }
}

TEST_F(ErrorsTest, WrongDatatype) {
  auto request = valid_request();
  request.mutable_inputs(1)->set_datatype("FP64");
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'b'", "FP32", "FP64"});
  request.mutable_inputs(1)->set_datatype("BYTES");
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'b'", "BYTES"});
}

TEST_F(ErrorsTest, WrongShape) {
  auto request = valid_request();
  request.mutable_inputs(0)->set_shape(1, 5);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'a'", "(-1,4)", "(1,5)"});
  request = valid_request();
  request.mutable_inputs(0)->add_shape(1);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'a'", "(1,4,1)"});
  request = valid_request();
  request.mutable_inputs(0)->set_shape(0, 0);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'a'"});
}

TEST_F(ErrorsTest, ByteSizeNotMatchingTheShape) {
  auto request = valid_request();
  request.mutable_raw_input_contents(1)->resize(12);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'b'", "16 bytes", "got 12"});
}

TEST_F(ErrorsTest, TypedCountNotMatchingTheShape) {
  auto request = valid_request();
  request.clear_raw_input_contents();
  for (auto& input : *request.mutable_inputs()) {
    for (float v : {1.0f, 2.0f, 3.0f}) input.mutable_contents()->add_fp32_contents(v);
  }
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'a'", "expected 4 values", "fp32_contents"});
}

TEST_F(ErrorsTest, MissingUnknownOrRepeatedInput) {
  auto request = valid_request();
  request.mutable_inputs()->RemoveLast();
  request.mutable_raw_input_contents()->RemoveLast();
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'b'", "missing"});
  request = valid_request();
  request.mutable_inputs(1)->set_name("c");
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'c'", "no such input", "a, b"});
  request = valid_request();
  request.mutable_inputs(1)->set_name("a");
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'a'", "twice"});
}

TEST_F(ErrorsTest, MixedEncodings) {
  auto request = valid_request();
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'a'", "raw_input_contents"});
  request = valid_request();
  request.mutable_raw_input_contents()->RemoveLast();
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) request.mutable_inputs(1)->mutable_contents()->add_fp32_contents(v);
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "2 inputs but 1 raw_input_contents"});
}

TEST_F(ErrorsTest, UnknownRequestedOutput) {
  auto request = valid_request();
  request.add_outputs()->set_name("quotient");
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "output 'quotient'", "sum, product"});
}

TEST_F(ErrorsTest, BatchAboveMaxBatchSizeOrInconsistent) {
  const std::vector<float> five_rows(20, 1.0f);
  auto request = flow::serving::make_infer_request(
      "sum_product", {st::fp32_tensor("a", {5, 4}, five_rows), st::fp32_tensor("b", {5, 4}, five_rows)});
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"model 'sum_product'", "input 'a'", "max_batch_size 4"});
  request = flow::serving::make_infer_request(
      "sum_product", {st::fp32_tensor("a", {1, 4}, {1, 2, 3, 4}), st::fp32_tensor("b", {2, 4}, std::vector<float>(8, 1))});
  expect_error(request, StatusCode::INVALID_ARGUMENT, {"input 'b'", "batch size 2"});
}

TEST_F(ErrorsTest, FullQueueIsResourceExhausted) {
  const auto request = flow::serving::make_infer_request("held", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})});
  std::atomic<int> answered{0}, ok{0};
  for (int i = 0; i < 2; ++i) {
    client_->infer_async(request, [&](const grpc::Status& status, const inference::ModelInferResponse&) {
      ok += status.ok() ? 1 : 0;
      ++answered;
    });
  }
  ASSERT_TRUE(st::eventually([&] { return st::metric(*server_, "nv_inference_pending_request_count", "held") == 2; }));
  inference::ModelInferResponse response;
  const grpc::Status status = client_->infer(request, response);
  EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("model 'held'"), std::string::npos) << status.error_message();
  expect_still_serving();
  // The queued two still complete: shutting down dispatches them without waiting out the delay.
  server_->shutdown();
  ASSERT_TRUE(st::eventually([&] { return answered == 2; }));
  EXPECT_EQ(ok, 2);
}

TEST_F(ErrorsTest, ClientDeadlineIsHonoured) {
  const auto request = flow::serving::make_infer_request("held", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})});
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  inference::ModelInferResponse response;
  const grpc::Status status = client_->stub().ModelInfer(&context, request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::DEADLINE_EXCEEDED);
  expect_still_serving();
}

TEST_F(ErrorsTest, ClientCancellationIsHonoured) {
  const auto request = flow::serving::make_infer_request("held", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})});
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  std::promise<grpc::Status> result;
  client_->stub().async()->ModelInfer(&context, &request, &response, [&](grpc::Status s) { result.set_value(s); });
  ASSERT_TRUE(st::eventually([&] { return st::metric(*server_, "nv_inference_pending_request_count", "held") == 1; }));
  context.TryCancel();
  EXPECT_EQ(result.get_future().get().error_code(), StatusCode::CANCELLED);
  expect_still_serving();
  // The server drops the cancelled request from its queue instead of running it.
  ASSERT_TRUE(st::eventually([&] { return server_->in_flight() == 0; }));
  EXPECT_EQ(st::metric(*server_, "nv_inference_pending_request_count", "held"), 0);
  EXPECT_EQ(st::metric(*server_, "nv_inference_exec_count", "held"), 0);
}

}  // namespace

namespace {

// A call whose client goes away (cancels, or its deadline passes: gRPC marks both cancelled) while
// its model runs gets no answer, and the server counts it as a failure (canceled), not as a success
// whose answer gRPC then drops.
TEST(CancelDuringRunTest, CallCancelledWhileItRunsIsCountedAsAFailure) {
  st::Repository repo;
  st::export_slow(repo.version_dir("slow", 1));
  auto server = st::start_server(repo.root());
  auto client = st::connect(*server);
  // 8192 rows through 48 512x512 layers: 206 GFLOP, about a second on two cores, so that the
  // cancel below lands while it runs.
  const int64_t rows = 8192;
  const auto request =
      flow::serving::make_infer_request("slow", {st::fp32_tensor("x", {rows, 512}, std::vector<float>(rows * 512, 0.5f))});
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  std::promise<grpc::Status> result;
  client->stub().async()->ModelInfer(&context, &request, &response, [&](grpc::Status s) { result.set_value(s); });
  // Running: admitted and no longer queued.
  ASSERT_TRUE(st::eventually([&] {
    return server->in_flight() == 1 && st::metric(*server, "nv_inference_exec_count", "slow") == 0 &&
           st::metric(*server, "nv_inference_pending_request_count", "slow") == 0;
  }));
  // Past the scheduler's check for calls cancelled before they run (microseconds after the
  // dequeue), well within the run.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  context.TryCancel();
  EXPECT_EQ(result.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(st::eventually([&] { return server->in_flight() == 0; }));
  EXPECT_EQ(st::metric(*server, "nv_inference_exec_count", "slow"), 1);  // it did run
  EXPECT_EQ(st::metric(*server, "nv_inference_request_success", "slow"), 0);
  EXPECT_EQ(st::metric(*server, "nv_inference_request_failure", "slow"), 1);
}

TEST(MessageSizeTest, MaxMessageSizeIsConfigurable) {
  st::Repository repo;
  st::export_identity(repo.version_dir("identity", 1), flow::kUInt8);
  flow::serving::ServerOptions options;
  options.max_message_bytes = 1 << 20;
  auto server = st::start_server(repo.root(), options);
  auto client = st::connect(*server);
  auto request_of = [](int64_t rows) {
    return flow::serving::make_infer_request("identity",
                                             {{"x", "UINT8", {rows, 3}, std::string(static_cast<size_t>(rows * 3), '\7')}});
  };
  inference::ModelInferResponse response;
  EXPECT_TRUE(client->infer(request_of(300000), response).ok());  // 900 kB
  EXPECT_EQ(response.raw_output_contents(0), std::string(900000, '\7'));
  EXPECT_EQ(client->infer(request_of(400000), response).error_code(), StatusCode::RESOURCE_EXHAUSTED);  // 1.2 MB
  EXPECT_TRUE(client->infer(request_of(1), response).ok());
}

TEST(MessageSizeTest, DefaultCarriesA256MiBTensor) {
  st::Repository repo;
  st::export_identity(repo.version_dir("identity", 1), flow::kUInt8, 1024);
  auto server = st::start_server(repo.root());
  auto client = st::connect(*server);
  const int64_t rows = 256 * 1024;  // 256 MiB
  std::string data(static_cast<size_t>(rows * 1024), '\0');
  for (size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i / 4096);
  inference::ModelInferResponse response;
  const grpc::Status status = client->infer(
      flow::serving::make_infer_request("identity", {{"x", "UINT8", {rows, 1024}, data}}), response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.raw_output_contents(0) == data);
}

}  // namespace
