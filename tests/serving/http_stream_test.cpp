// Streamed HTTP answers (chunked transfer encoding, what server-sent events ride on): chunks
// written from another thread arrive in order, the connection then serves its next request, a
// client that goes away makes write() return false, and stop() ends a stream that is still open.
#include <httplib.h>

#include <atomic>
#include <future>
#include <thread>

#include "serving/http_endpoint.h"
#include "serving_test_util.h"

namespace st = serving_test;
using flow::serving::HttpEndpoint;
using flow::serving::HttpOptions;
using flow::serving::HttpRequest;
using flow::serving::HttpResponse;
using flow::serving::HttpStream;
using namespace std::chrono_literals;

namespace {

class HttpStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    options.write_timeout = 5s;
    endpoint_ = std::make_unique<HttpEndpoint>(options);
    // Streams "data: i" events from a producer thread: `count` of them, or until the client is
    // gone when count is "forever".
    endpoint_->route("POST", "/events/(\\w+)", [this](const HttpRequest& request, HttpResponse& response) {
      const std::string count = request.matches.at(1);
      response.set_header("Content-Type", "text/event-stream");
      response.stream = [this, count](std::shared_ptr<HttpStream> stream) {
        producers_.emplace_back([this, count, stream] {
          const int limit = count == "forever" ? 1 << 30 : std::stoi(count);
          int written = 0;
          for (; written < limit; ++written) {
            if (!stream->write("data: " + std::to_string(written) + "\n\n")) break;
            std::this_thread::sleep_for(1ms);
          }
          stream->finish();
          if (count == "forever") stopped_after_.set_value(written);
        });
      };
    });
    endpoint_->route("GET", "/health", [](const HttpRequest&, HttpResponse& response) { response.set_content("ok", "text/plain"); });
    endpoint_->start();
  }

  void TearDown() override {
    if (endpoint_) endpoint_->stop();
    for (auto& producer : producers_) producer.join();
  }

  std::unique_ptr<HttpEndpoint> endpoint_;
  std::vector<std::thread> producers_;  // started on the I/O thread only, joined after stop()
  std::promise<int> stopped_after_;
};

TEST_F(HttpStreamTest, ChunksArriveInOrderThenTheConnectionServesTheNextRequest) {
  httplib::Client client("127.0.0.1", endpoint_->port());
  client.set_keep_alive(true);
  client.set_read_timeout(10);
  const auto result = client.Post("/events/20", "", "text/plain");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/event-stream");
  std::string expected;
  for (int i = 0; i < 20; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  EXPECT_EQ(result->body, expected);
  // The same (kept-alive) connection answers again.
  const auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->body, "ok");
  EXPECT_EQ(endpoint_->connections(), 1);
}

TEST_F(HttpStreamTest, ClientThatGoesAwayStopsTheProducer) {
  const int fd = st::connect_to(endpoint_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(st::send_all(fd, "POST /events/forever HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  const std::string first = st::receive(fd, 10s, "data: 3\n\n");
  ASSERT_NE(first.find("Transfer-Encoding: chunked"), std::string::npos) << first;
  close(fd);
  auto stopped = stopped_after_.get_future();
  ASSERT_EQ(stopped.wait_for(20s), std::future_status::ready) << "the producer never saw the client go";
  EXPECT_GE(stopped.get(), 4);
}

TEST_F(HttpStreamTest, StopEndsAnOpenStream) {
  const int fd = st::connect_to(endpoint_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(st::send_all(fd, "POST /events/forever HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  ASSERT_NE(st::receive(fd, 10s, "data: 1\n\n").find("data: 1"), std::string::npos);
  auto stopping = std::async(std::launch::async, [this] { endpoint_->stop(); });
  ASSERT_EQ(stopping.wait_for(20s), std::future_status::ready) << "stop() waited for a stream that never ends";
  auto stopped = stopped_after_.get_future();
  ASSERT_EQ(stopped.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(st::closed_within(fd, 10s));
  close(fd);
}

}  // namespace
