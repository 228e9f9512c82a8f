// Idle and slow HTTP clients do not hold up others: with connections open that send nothing, and
// one that sends its request a byte at a time for as long as the test lasts, on both the metrics
// and the REST port, a scrape and REST and gRPC inferences still complete.
#include <httplib.h>

#include <atomic>

#include "serving_test_util.h"

namespace st = serving_test;

namespace {

TEST(HttpConcurrencyTest, IdleAndSlowConnectionsDoNotHoldUpOthers) {
  st::Repository repo;
  st::export_affine(repo.version_dir("affine", 1), 2.0f);
  auto server = st::start_server(repo.root());
  constexpr int kIdlePerPort = 5;

  std::vector<int> idle, slow;
  for (int port : {server->metrics_port(), server->http_port()}) {
    for (int i = 0; i < kIdlePerPort; ++i) idle.push_back(st::connect_to(port));
    slow.push_back(st::connect_to(port));
  }
  for (int fd : idle) ASSERT_GE(fd, 0);
  for (int fd : slow) ASSERT_GE(fd, 0);
  // The slow clients send a never-ending header, one byte every 50 ms.
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const std::string start = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    for (size_t sent = 0; !stop; ++sent) {
      const char byte = sent < start.size() ? start[sent] : 'a';
      for (int fd : slow) send(fd, &byte, 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  auto scrape = std::async(std::launch::async, [&] {
    return flow::serving::fetch_metrics("127.0.0.1", server->metrics_port());
  });
  auto rest = std::async(std::launch::async, [&] {
    httplib::Client http("127.0.0.1", server->http_port());
    http.set_read_timeout(60, 0);
    const auto result = http.Post(
        "/v2/models/affine/infer",
        R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})",
        "application/json");
    return result ? result->status : -1;
  });
  auto grpc = std::async(std::launch::async, [&] {
    return st::connect(*server)->infer("affine", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})});
  });
  // Generous: a bound on a hang, not a measure of speed.
  const auto limit = std::chrono::seconds(30);
  const bool scraped = scrape.wait_for(limit) == std::future_status::ready;
  const bool rest_answered = rest.wait_for(limit) == std::future_status::ready;
  const bool grpc_answered = grpc.wait_for(limit) == std::future_status::ready;

  stop = true;
  trickler.join();
  for (int fd : idle) close(fd);
  for (int fd : slow) close(fd);
  ASSERT_TRUE(scraped);
  ASSERT_TRUE(rest_answered);
  ASSERT_TRUE(grpc_answered);
  EXPECT_NE(scrape.get().find("nv_inference_request_success"), std::string::npos);
  EXPECT_EQ(rest.get(), 200);
  EXPECT_EQ(st::fp32_values(grpc.get().at(0).data), (std::vector<float>{2, 4, 6, 8}));
}

}  // namespace
