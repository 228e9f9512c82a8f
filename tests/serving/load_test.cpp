// Concurrent load through the load generator loses no request and mixes none up, in both its
// fixed-concurrency and fixed-rate modes.
#include "serving/loadgen.h"
#include "serving_test_util.h"

namespace st = serving_test;

namespace {

TEST(LoadTest, ConcurrentLoadLosesNoRequest) {
  st::Repository repo;
  st::export_sum_product(repo.version_dir("sum_product", 1));
  repo.write_config("sum_product",
                    "max_batch_size: 16 dynamic_batching { max_queue_delay_microseconds: 1000 } instance_group { count: 2 }");
  auto server = st::start_server(repo.root());
  auto client = st::connect(*server);

  auto make = [](int64_t seq) {
    const float v = static_cast<float>(seq);
    return flow::serving::make_infer_request(
        "sum_product", {st::fp32_tensor("a", {1, 4}, {v, v, v, v}), st::fp32_tensor("b", {1, 4}, {1, 2, 3, 4})}, {"sum"},
        "", std::to_string(seq));
  };
  auto check = [](int64_t seq, const inference::ModelInferResponse& response) -> std::string {
    const float v = static_cast<float>(seq);
    if (response.id() != std::to_string(seq)) return "id " + response.id();
    if (response.outputs_size() != 1 || response.outputs(0).name() != "sum") return "wrong outputs";
    if (st::fp32_values(response.raw_output_contents(0)) != std::vector<float>{v + 1, v + 2, v + 3, v + 4}) {
      return "wrong sum";
    }
    return "";
  };

  flow::serving::LoadOptions concurrent;
  concurrent.concurrency = 32;
  concurrent.requests = 1000;
  const auto closed = flow::serving::run_load(*client, concurrent, make, check);
  EXPECT_EQ(closed.sent, 1000);
  EXPECT_EQ(closed.succeeded, 1000);
  EXPECT_EQ(closed.failed, 0) << closed.first_failure;
  EXPECT_GT(closed.p99_us, 0);
  EXPECT_LE(closed.p50_us, closed.p90_us);
  EXPECT_LE(closed.p90_us, closed.p99_us);

  flow::serving::LoadOptions rate;
  rate.rate = 2000;
  rate.requests = 400;
  const auto open = flow::serving::run_load(*client, rate, make, check);
  EXPECT_EQ(open.succeeded, 400);
  EXPECT_EQ(open.failed, 0) << open.first_failure;

  EXPECT_EQ(st::metric(*server, "nv_inference_request_success", "sum_product"), 1400);
  EXPECT_EQ(st::metric(*server, "nv_inference_request_failure", "sum_product"), 0);
}

}  // namespace
