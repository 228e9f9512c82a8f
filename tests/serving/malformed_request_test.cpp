// Requests whose shape is out of all proportion to their data, against a model whose first layer
// is a convolution: each answers INVALID_ARGUMENT with the dimension or byte count named, before
// any tensor is allocated and without reaching the model, the server keeps serving, and the
// failure counts as an invalid request (reason OTHER), never as the model failing (BACKEND).
#include "serving_test_util.h"

namespace st = serving_test;
using grpc::StatusCode;

namespace {

constexpr int64_t kImageBytes = 28 * 28 * sizeof(float);  // 3136

class MalformedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_conv(repo_.version_dir("cnn", 1));
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }

  // A raw request for `image` with this shape and these bytes.
  static inference::ModelInferRequest raw_request(std::vector<int64_t> shape, std::string data) {
    return flow::serving::make_infer_request("cnn", {{"image", "FP32", std::move(shape), std::move(data)}});
  }
  // A typed request with `values` in contents.fp32_contents.
  static inference::ModelInferRequest typed_request(std::vector<int64_t> shape, int values) {
    auto request = raw_request(std::move(shape), "");
    request.clear_raw_input_contents();
    for (int i = 0; i < values; ++i) request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(0.5f);
    return request;
  }

  // Expects INVALID_ARGUMENT naming the model, the input and every one of `parts`, then a valid
  // request still answered.
  void expect_invalid(const inference::ModelInferRequest& request, const std::vector<std::string>& parts) {
    inference::ModelInferResponse response;
    const grpc::Status status = client_->infer(request, response);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    for (const std::string& part : std::vector<std::string>{"model 'cnn' version 1", "input 'image'"} ) {
      EXPECT_NE(status.error_message().find(part), std::string::npos) << status.error_message() << " lacks " << part;
    }
    for (const std::string& part : parts) {
      EXPECT_NE(status.error_message().find(part), std::string::npos) << status.error_message() << " lacks " << part;
    }
    ++invalid_;
    const auto valid = raw_request({1, 1, 28, 28}, std::string(kImageBytes, '\0'));
    const grpc::Status served = client_->infer(valid, response);
    ASSERT_TRUE(served.ok()) << served.error_message();
    EXPECT_EQ(response.outputs(0).shape(1), 2);
  }

  void TearDown() override {
    const auto failures = [&](const std::string& reason) {
      return flow::serving::metric_value(flow::serving::fetch_metrics("127.0.0.1", server_->metrics_port()),
                                         "nv_inference_request_failure",
                                         {{"model", "cnn"}, {"version", "1"}, {"reason", reason}});
    };
    EXPECT_EQ(failures("OTHER"), invalid_);
    EXPECT_EQ(failures("BACKEND"), 0);
    EXPECT_EQ(st::metric(*server_, "nv_inference_exec_count", "cnn"), invalid_);  // only the valid ones ran
  }

  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
  int invalid_ = 0;
};

TEST_F(MalformedRequestTest, ElementCountThatWrapsInt64) {
  const int64_t wraps = (int64_t{1} << 61) + 1;
  expect_invalid(raw_request({wraps, 1, 28, 28}, std::string(kImageBytes, '\0')),
                 {"(2305843009213693953,1,28,28)", "more bytes than int64 can count"});
  expect_invalid(typed_request({wraps, 1, 28, 28}, 28 * 28), {"more bytes than int64 can count"});
}

TEST_F(MalformedRequestTest, HugeShapeWithNoData) {
  expect_invalid(raw_request({int64_t{1} << 58, 1, 28, 28}, ""), {"more bytes than int64 can count"});
  expect_invalid(typed_request({int64_t{1} << 60, 1, 28, 28}, 0), {"more bytes than int64 can count"});
}

TEST_F(MalformedRequestTest, ByteCountIsCheckedBeforeAllocating) {
  // 2^40 images: 3.4 PB, far beyond any allocator; the count is compared first.
  const int64_t images = int64_t{1} << 40;
  expect_invalid(raw_request({images, 1, 28, 28}, std::string(kImageBytes, '\0')),
                 {"needs " + std::to_string(images * kImageBytes) + " bytes, got 3136"});
  expect_invalid(typed_request({images, 1, 28, 28}, 28 * 28),
                 {"expected " + std::to_string(images * 28 * 28) + " values", "got 784"});
}

TEST_F(MalformedRequestTest, NonPositiveOrMismatchedDimensionIsNamed) {
  const std::string image(kImageBytes, '\0');
  expect_invalid(raw_request({-1, 1, 28, 28}, image),
                 {"dimension 0 of shape (-1,1,28,28) is -1", "variable", "(-1,1,28,28)", "at least 1"});
  expect_invalid(raw_request({0, 1, 28, 28}, image), {"dimension 0 of shape (0,1,28,28) is 0", "at least 1"});
  expect_invalid(raw_request({1, 1, -28, 28}, image), {"dimension 2 of shape (1,1,-28,28) is -28", "needs 28"});
  expect_invalid(raw_request({1, 3, 28, 28}, image), {"dimension 1", "is 3", "needs 1"});
  expect_invalid(raw_request({1, 28, 28}, image), {"shape (1,28,28) has 3 dimensions", "has 4"});
  expect_invalid(raw_request(std::vector<int64_t>(100, 1), image), {"100 dimensions)", "has 4"});
}

}  // namespace
