// Dynamic batching: concurrent requests are merged into batches (fewer model runs than
// requests), each response holds exactly its own request's rows.
#include "serving/loadgen.h"
#include "serving_test_util.h"

namespace st = serving_test;

namespace {

// y = 2x for row values unique to request `seq`.
std::vector<float> rows_of(int64_t seq, int64_t rows) {
  std::vector<float> values(static_cast<size_t>(rows * 4));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(seq * 100 + static_cast<int64_t>(i));
  return values;
}

std::string check_doubled(int64_t seq, int64_t rows, const inference::ModelInferResponse& response) {
  if (response.raw_output_contents_size() != 1) return "no output";
  const std::vector<float> got = st::fp32_values(response.raw_output_contents(0));
  std::vector<float> expected = rows_of(seq, rows);
  for (float& v : expected) v *= 2;
  if (got != expected) return "output is not this request's rows doubled";
  if (response.outputs(0).shape(0) != rows) return "wrong batch dimension";
  return "";
}

class BatchingTest : public ::testing::Test {
 protected:
  void start(const std::string& config) {
    st::export_affine(repo_.version_dir("doubler", 1), 2.0f);
    repo_.write_config("doubler", config);
    server_ = st::start_server(repo_.root());
    client_ = st::connect(*server_);
  }
  double metric(const std::string& name) { return st::metric(*server_, name, "doubler"); }

  st::Repository repo_;
  std::unique_ptr<flow::serving::Server> server_;
  std::unique_ptr<flow::serving::Client> client_;
};

// With a delay far beyond the test, a batch runs only when it is full: 32 one-row requests make
// exactly 4 runs of 8.
TEST_F(BatchingTest, FullBatchesRunAsOne) {
  start("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 60000000 }");
  flow::serving::LoadOptions options;
  options.concurrency = 32;
  options.requests = 32;
  const auto report = flow::serving::run_load(
      *client_, options,
      [](int64_t seq) {
        return flow::serving::make_infer_request("doubler", {st::fp32_tensor("x", {1, 4}, rows_of(seq, 1))});
      },
      [](int64_t seq, const auto& response) { return check_doubled(seq, 1, response); });
  EXPECT_EQ(report.succeeded, 32) << report.first_failure;
  EXPECT_EQ(metric("nv_inference_exec_count"), 4);
  EXPECT_EQ(metric("nv_inference_count"), 32);
  EXPECT_EQ(metric("nv_inference_request_success"), 32);
}

TEST_F(BatchingTest, PreferredBatchSizeRunsWithoutWaiting) {
  start("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 60000000 preferred_batch_size: [4] }");
  flow::serving::LoadOptions options;
  options.concurrency = 4;
  options.requests = 4;
  const auto report = flow::serving::run_load(
      *client_, options,
      [](int64_t seq) {
        return flow::serving::make_infer_request("doubler", {st::fp32_tensor("x", {1, 4}, rows_of(seq, 1))});
      },
      [](int64_t seq, const auto& response) { return check_doubled(seq, 1, response); });
  EXPECT_EQ(report.succeeded, 4) << report.first_failure;
  EXPECT_EQ(metric("nv_inference_exec_count"), 1);
}

// Requests of 1 to 3 rows from 16 concurrent clients: merged (fewer runs than requests) and
// split back with no cross-talk.
TEST_F(BatchingTest, MixedBatchSizesSplitBackToTheirRequests) {
  start("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 2000 } instance_group { count: 2 threads: 1 }");
  flow::serving::LoadOptions options;
  options.concurrency = 16;
  options.requests = 300;
  auto rows = [](int64_t seq) { return 1 + seq % 3; };
  const auto report = flow::serving::run_load(
      *client_, options,
      [&](int64_t seq) {
        return flow::serving::make_infer_request("doubler", {st::fp32_tensor("x", {rows(seq), 4}, rows_of(seq, rows(seq)))});
      },
      [&](int64_t seq, const auto& response) { return check_doubled(seq, rows(seq), response); });
  EXPECT_EQ(report.failed, 0) << report.first_failure;
  EXPECT_EQ(report.succeeded, 300);
  EXPECT_LT(metric("nv_inference_exec_count"), 300);
  EXPECT_EQ(metric("nv_inference_count"), 600);  // 100 requests each of 1, 2 and 3 rows
}

}  // namespace
