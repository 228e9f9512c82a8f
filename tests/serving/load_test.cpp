// Concurrent load through the load generator loses no request and mixes none up, in both its
// fixed-concurrency and fixed-rate modes; while the server does not answer it backs off, and its
// throughput counts only the time the server was up.
#include <netinet/in.h>
#include <sys/socket.h>

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

// A port on 127.0.0.1 that nothing listens on (free when asked).
int unused_port() {
  const int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  EXPECT_EQ(bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(socket_fd);
  return ntohs(address.sin_port);
}

inference::ModelInferRequest sum_product_request(int64_t) {
  return flow::serving::make_infer_request(
      "sum_product", {st::fp32_tensor("a", {1, 4}, {1, 2, 3, 4}), st::fp32_tensor("b", {1, 4}, {1, 2, 3, 4})});
}

// With no server, attempts follow the backoff (1 ms doubling up to 500 ms, one probe at a time),
// not the speed of the machine: in one second that is at most the first round (one call per
// sender) and about ten probes, where failing at full speed made tens of thousands of calls.
TEST(LoadTest, BacksOffWhileNoServerAnswers) {
  flow::serving::Client client("127.0.0.1:" + std::to_string(unused_port()));
  flow::serving::LoadOptions closed;
  closed.concurrency = 4;
  closed.duration = std::chrono::seconds(1);
  const auto report = flow::serving::run_load(client, closed, sum_product_request);
  EXPECT_GE(report.sent, 1);
  EXPECT_LE(report.sent, 20);
  EXPECT_EQ(report.failed, report.sent);
  EXPECT_EQ(report.failures.at("UNAVAILABLE"), report.sent);
  EXPECT_GT(report.down_seconds, 0);
  EXPECT_LE(report.down_seconds, report.seconds);
  EXPECT_EQ(report.throughput, 0);
  EXPECT_NE(flow::serving::format_report(report).find("down"), std::string::npos) << flow::serving::format_report(report);

  // The open loop too: its schedule (50/s) pauses while the probes fail.
  flow::serving::LoadOptions open;
  open.rate = 50;
  open.duration = std::chrono::seconds(1);
  const auto scheduled = flow::serving::run_load(client, open, sum_product_request);
  EXPECT_GE(scheduled.sent, 1);
  EXPECT_LE(scheduled.sent, 25);
  EXPECT_EQ(scheduled.failed, scheduled.sent);
}

// The server comes up after the first failed calls: the load goes on at full speed from the first
// answer, the down time runs from the first failure to that answer, and throughput is the
// successful requests per second of up time.
TEST(LoadTest, ThroughputCountsOnlyTheTimeTheServerWasUp) {
  st::Repository repo;
  st::export_sum_product(repo.version_dir("sum_product", 1));
  const int port = unused_port();
  flow::serving::Client client("127.0.0.1:" + std::to_string(port));
  std::unique_ptr<flow::serving::Server> server;
  auto make = [&](int64_t seq) {
    if (seq == 3) {
      flow::serving::ServerOptions options;
      options.model_repository = repo.root().string();
      options.address = "127.0.0.1";
      options.grpc_port = port;
      options.metrics_port = -1;
      server = std::make_unique<flow::serving::Server>(options);
    }
    return sum_product_request(seq);
  };
  flow::serving::LoadOptions options;
  options.requests = 40;
  const auto report = flow::serving::run_load(client, options, make);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(report.sent, 40);
  EXPECT_GE(report.failed, 3) << "requests 0, 1 and 2 went out before the server started";
  EXPECT_EQ(report.failed, report.failures.at("UNAVAILABLE"));
  EXPECT_GT(report.succeeded, 0) << report.first_failure;
  EXPECT_EQ(report.succeeded + report.failed, 40);
  // Three failed calls in a row are followed by waits of at least 1, 2 and 4 ms before the next call.
  EXPECT_GE(report.down_seconds, 0.007);
  EXPECT_LT(report.down_seconds, report.seconds);
  EXPECT_DOUBLE_EQ(report.throughput, static_cast<double>(report.succeeded) / (report.seconds - report.down_seconds));
}

}  // namespace
