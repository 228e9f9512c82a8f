// The Prometheus metrics endpoint: Triton's counter names and labels, moving by exactly the
// expected amounts.
#include "serving_test_util.h"

namespace st = serving_test;

namespace {

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    st::export_affine(repo_.version_dir("plain", 1), 1.0f);
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }
  double metric(const std::string& name) { return st::metric(*server_, name, "plain"); }
  grpc::Status send(int64_t rows, int64_t width = 4) {
    inference::ModelInferResponse response;
    return client_->infer(flow::serving::make_infer_request(
                              "plain", {st::fp32_tensor("x", {rows, width}, std::vector<float>(rows * width, 1.0f))}),
                          response);
  }
  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
};

TEST_F(MetricsTest, EndpointServesTritonNamesWithModelAndVersionLabels) {
  const std::string text = flow::serving::fetch_metrics("127.0.0.1", server_->metrics_port());
  for (const char* name : {"nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
                           "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                           "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                           "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count"}) {
    const bool gauge = std::string(name) == "nv_inference_pending_request_count";
    EXPECT_NE(text.find(std::string("# TYPE ") + name + (gauge ? " gauge" : " counter")), std::string::npos) << name;
    EXPECT_NE(text.find(std::string(name) + "{model=\"plain\",version=\"1\"} 0"), std::string::npos) << name << "\n" << text;
  }
  // Failures by Triton's reasons.
  EXPECT_NE(text.find("# TYPE nv_inference_request_failure counter"), std::string::npos);
  for (const char* reason : {"REJECTED", "CANCELED", "BACKEND", "OTHER"}) {
    EXPECT_NE(text.find(std::string("nv_inference_request_failure{model=\"plain\",reason=\"") + reason +
                        "\",version=\"1\"} 0"),
              std::string::npos)
        << reason << "\n" << text;
  }
}

TEST_F(MetricsTest, CountersMoveByExactlyTheExpectedAmounts) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(send(2).ok());
  EXPECT_EQ(metric("nv_inference_request_success"), 3);
  EXPECT_EQ(metric("nv_inference_request_failure"), 0);
  EXPECT_EQ(metric("nv_inference_count"), 6);
  EXPECT_EQ(metric("nv_inference_exec_count"), 3);
  const double request_us = metric("nv_inference_request_duration_us");
  EXPECT_GT(request_us, 0);
  EXPECT_GT(metric("nv_inference_compute_input_duration_us") + metric("nv_inference_compute_output_duration_us"), 0);
  EXPECT_GE(request_us, metric("nv_inference_queue_duration_us") + metric("nv_inference_compute_input_duration_us") +
                            metric("nv_inference_compute_infer_duration_us") +
                            metric("nv_inference_compute_output_duration_us"));

  EXPECT_EQ(send(1, 5).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(send(1, 3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(metric("nv_inference_request_failure"), 2);
  EXPECT_EQ(flow::serving::metric_value(flow::serving::fetch_metrics("127.0.0.1", server_->metrics_port()),
                                        "nv_inference_request_failure", {{"model", "plain"}, {"reason", "OTHER"}}),
            2);
  EXPECT_EQ(metric("nv_inference_request_success"), 3);
  EXPECT_EQ(metric("nv_inference_count"), 6);
  EXPECT_EQ(metric("nv_inference_exec_count"), 3);
  EXPECT_EQ(metric("nv_inference_request_duration_us"), request_us);

  ASSERT_TRUE(send(5).ok());
  EXPECT_EQ(metric("nv_inference_request_success"), 4);
  EXPECT_EQ(metric("nv_inference_count"), 11);
  EXPECT_EQ(metric("nv_inference_exec_count"), 4);
}

}  // namespace
