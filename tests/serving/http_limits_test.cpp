// The HTTP endpoint's bounds, driven by raw sockets and httplib::Client: the body limit holds on
// the bytes read whatever the framing (Content-Length, chunked) and on the inflated bytes of a
// gzip or deflate body; heads and bodies that arrive too slowly are cut off; a connection cap;
// cheap routes answer while every worker is busy; stop() closes idle and slow connections and
// finishes the requests being handled.
#include <httplib.h>
#include <zlib.h>

#include <atomic>
#include <future>

#include "serving/http_endpoint.h"
#include "serving_test_util.h"

namespace st = serving_test;
using flow::serving::HttpEndpoint;
using flow::serving::HttpOptions;
using flow::serving::HttpRequest;
using flow::serving::HttpResponse;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMaxBody = 1 << 20;

// `text` compressed as a gzip (gzip = true) or zlib stream: what Content-Encoding gzip or deflate
// carries.
std::string compress(const std::string& text, bool gzip) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, gzip ? 15 + 16 : 15, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string chunk(const std::string& data) {
  char size[32];
  snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

// The status code of the first response in `reply`, or 0.
int status_of(const std::string& reply) {
  int status = 0;
  return sscanf(reply.c_str(), "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

class HttpEndpointTest : public ::testing::Test {
 protected:
  void start(HttpOptions options = {}) {
    options.address = "127.0.0.1";
    options.port = 0;
    options.max_body_bytes = kMaxBody;
    endpoint_ = std::make_unique<HttpEndpoint>(options);
    endpoint_->route("GET", "/health", [](const HttpRequest&, HttpResponse& response) { response.set_content("ok", "text/plain"); },
                     HttpEndpoint::Runs::kOnIoThread);
    endpoint_->route("POST", "/size", [](const HttpRequest& request, HttpResponse& response) {
      response.set_content(std::to_string(request.body.size()), "text/plain");
    });
    endpoint_->route("POST", "/block", [this](const HttpRequest&, HttpResponse& response) {
      ++blocked_;
      release_.wait();
      response.set_content("released", "text/plain");
    });
    endpoint_->start();
  }

  void TearDown() override {
    release();
    for (int fd : sockets_) close(fd);
    if (endpoint_) endpoint_->stop();
  }

  int open_socket() {
    const int fd = st::connect_to(endpoint_->port());
    EXPECT_GE(fd, 0);
    sockets_.push_back(fd);
    return fd;
  }

  // Sends `request` on a new connection and returns what comes back within 10 s (the answer,
  // then the connection's close, for a request that asks for it).
  std::string exchange(const std::string& request) {
    const int fd = open_socket();
    st::send_all(fd, request);
    return st::receive(fd, 10s);
  }

  httplib::Result get_health() {
    httplib::Client client("127.0.0.1", endpoint_->port());
    client.set_connection_timeout(2);
    client.set_read_timeout(2);
    return client.Get("/health");
  }

  void release() {
    if (!released_.exchange(true)) release_promise_.set_value();
  }

  std::unique_ptr<HttpEndpoint> endpoint_;
  std::vector<int> sockets_;
  std::promise<void> release_promise_;
  std::shared_future<void> release_ = release_promise_.get_future().share();
  std::atomic<bool> released_{false};
  std::atomic<int> blocked_{0};
};

TEST_F(HttpEndpointTest, ContentLengthOverTheLimitIsRefusedBeforeTheBody) {
  start();
  const std::string reply = exchange("POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(kMaxBody + 1) + "\r\n\r\n");
  EXPECT_EQ(status_of(reply), 413) << reply;
  EXPECT_NE(reply.find("larger than the limit of 1048576 bytes"), std::string::npos) << reply;
}

TEST_F(HttpEndpointTest, ChunkedBodyOverTheLimitIsRefusedAsSoonAsItIsCrossed) {
  start();
  const int fd = open_socket();
  // 1.5 MiB of chunks and no last chunk: the answer must not wait for the end of the body.
  std::string request = "POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) request += chunk(std::string(kMaxBody / 2, 'a'));
  st::send_all(fd, request);
  const std::string reply = st::receive(fd, 10s, "\r\n\r\n");
  EXPECT_EQ(status_of(reply), 413) << reply;
  EXPECT_TRUE(st::closed_within(fd, 10s));
}

TEST_F(HttpEndpointTest, ChunkedBodyWithinTheLimitIsServed) {
  start();
  const std::string reply = exchange("POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                     chunk(std::string(1000, 'a')) + chunk(std::string(24, 'b')) + "0\r\n\r\n");
  EXPECT_EQ(status_of(reply), 200) << reply;
  EXPECT_TRUE(reply.ends_with("\r\n\r\n1024")) << reply;
}

TEST_F(HttpEndpointTest, CompressedBodiesAreInflatedUnderTheSameLimit) {
  start();
  httplib::Client client("127.0.0.1", endpoint_->port());
  const std::string text(kMaxBody / 2, 'a');
  for (const auto& [encoding, gzip] : {std::pair{"gzip", true}, {"deflate", false}}) {
    const auto served = client.Post("/size", {{"Content-Encoding", encoding}}, compress(text, gzip), "text/plain");
    ASSERT_TRUE(served);
    EXPECT_EQ(served->status, 200) << encoding;
    EXPECT_EQ(served->body, std::to_string(text.size())) << encoding;
  }
  // 64 MiB of zeros in a ~64 KiB gzip body: refused once it inflates past 1 MiB.
  const auto bomb = client.Post("/size", {{"Content-Encoding", "gzip"}}, compress(std::string(64 << 20, '\0'), true), "text/plain");
  ASSERT_TRUE(bomb);
  EXPECT_EQ(bomb->status, 413);
  EXPECT_NE(bomb->body.find("inflates to more than the limit of 1048576 bytes"), std::string::npos) << bomb->body;
  const auto brotli = client.Post("/size", {{"Content-Encoding", "br"}}, "abc", "text/plain");
  ASSERT_TRUE(brotli);
  EXPECT_EQ(brotli->status, 415);
  const auto corrupt = client.Post("/size", {{"Content-Encoding", "gzip"}}, "not gzip at all", "text/plain");
  ASSERT_TRUE(corrupt);
  EXPECT_EQ(corrupt->status, 400);
  std::string truncated = compress(text, true);
  truncated.resize(truncated.size() / 2);
  const auto cut = client.Post("/size", {{"Content-Encoding", "gzip"}}, truncated, "text/plain");
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->status, 400);
}

TEST_F(HttpEndpointTest, HeadOverTheLimitIs431) {
  HttpOptions options;
  options.max_header_bytes = 4096;
  start(options);
  const std::string reply = exchange("GET /health HTTP/1.1\r\nX-Big: " + std::string(8192, 'x') + "\r\n\r\n");
  EXPECT_EQ(status_of(reply), 431) << reply;
}

TEST_F(HttpEndpointTest, MalformedRequestIs400) {
  start();
  EXPECT_EQ(status_of(exchange("NOT A REQUEST\r\n\r\n")), 400);
}

TEST_F(HttpEndpointTest, ExpectContinueGetsTheInterimAnswer) {
  start();
  const int fd = open_socket();
  st::send_all(fd, "POST /size HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(status_of(st::receive(fd, 10s, "\r\n\r\n")), 100);
  st::send_all(fd, "hello");
  const std::string reply = st::receive(fd, 10s, "\r\n\r\n5");
  EXPECT_EQ(status_of(reply), 200) << reply;
}

// RFC 9110 10.1.1: a server ignores 100-continue from an HTTP/1.0 client (which may not know
// interim answers), so the first thing it reads is the final answer (found by fuzzing: the
// server answered "HTTP/1.0 100 Continue").
TEST_F(HttpEndpointTest, ExpectContinueFromHttp10IsIgnored) {
  start();
  const int fd = open_socket();
  st::send_all(fd, "POST /size HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello");
  const std::string reply = st::receive(fd, 10s, "\r\n\r\n5");
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 ", 0), 0u) << reply;
  EXPECT_EQ(reply.find("100 Continue"), std::string::npos) << reply;
}

TEST_F(HttpEndpointTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  const int fd = open_socket();
  st::send_all(fd, "POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string replies = st::receive(fd, 10s, "ok");
  const size_t first = replies.find("\r\n\r\n3"), second = replies.find("\r\n\r\nok");
  ASSERT_NE(first, std::string::npos) << replies;
  ASSERT_NE(second, std::string::npos) << replies;
  EXPECT_LT(first, second);
}

TEST_F(HttpEndpointTest, SlowHeadsAndSlowBodiesAreCutOff) {
  HttpOptions options;
  options.header_timeout = 500ms;
  options.read_timeout = 500ms;
  options.body_timeout = 1500ms;
  start(options);
  // A head sent a byte every 100 ms never completes within its 500 ms.
  const int slow_head = open_socket();
  // A body whose bytes keep coming, each within the read timeout, but not whole in 1.5 s.
  const int slow_body = open_socket();
  st::send_all(slow_body, "POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
  // A body that stops.
  const int stalled_body = open_socket();
  st::send_all(stalled_body, "POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc");
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    for (int i = 0; !stop && i < 600; ++i) {
      send(slow_head, "G", 1, MSG_NOSIGNAL);
      send(slow_body, "b", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(100ms);
    }
  });
  EXPECT_TRUE(st::closed_within(slow_head, 20s));
  EXPECT_TRUE(st::closed_within(stalled_body, 20s));
  EXPECT_TRUE(st::closed_within(slow_body, 20s));
  stop = true;
  trickler.join();
  // An idle keep-alive connection is closed after the head timeout too.
  const int idle = open_socket();
  st::send_all(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(st::receive(idle, 10s, "ok")), 200);
  EXPECT_TRUE(st::closed_within(idle, 20s));
}

TEST_F(HttpEndpointTest, HundredSlowConnectionsDoNotDelayAHealthCheck) {
  HttpOptions options;
  options.threads = 1;
  options.header_timeout = 60s;
  start(options);
  std::vector<int> slow;
  for (int i = 0; i < 100; ++i) slow.push_back(open_socket());
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const std::string head = "POST /size HTTP/1.1\r\nX-Slow: ";
    for (size_t sent = 0; !stop && sent < 6000; ++sent) {
      const char byte = sent < head.size() ? head[sent] : 'a';
      for (int fd : slow) send(fd, &byte, 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(10ms);
    }
  });
  ASSERT_TRUE(st::eventually([&] { return endpoint_->connections() >= 100; }));
  for (int i = 0; i < 5; ++i) {
    const auto health = get_health();  // its own timeout: 2 s
    ASSERT_TRUE(health) << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
  }
  stop = true;
  trickler.join();
}

TEST_F(HttpEndpointTest, CheapRoutesAnswerWhileEveryWorkerIsBusy) {
  HttpOptions options;
  options.threads = 1;
  start(options);
  auto post_block = [&] {
    httplib::Client client("127.0.0.1", endpoint_->port());
    client.set_read_timeout(60);
    const auto result = client.Post("/block", "", "text/plain");
    return result ? result->status : -1;
  };
  auto first = std::async(std::launch::async, post_block);
  auto second = std::async(std::launch::async, post_block);
  ASSERT_TRUE(st::eventually([&] { return blocked_ >= 1; }));
  const auto health = get_health();
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  release();
  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(second.get(), 200);
}

TEST_F(HttpEndpointTest, ConnectionsOverTheCapAre503) {
  HttpOptions options;
  options.max_connections = 8;
  options.header_timeout = 60s;
  start(options);
  for (int i = 0; i < 8; ++i) open_socket();
  ASSERT_TRUE(st::eventually([&] { return endpoint_->connections() == 8; }));
  const int extra = open_socket();
  const std::string reply = st::receive(extra, 10s);
  EXPECT_EQ(status_of(reply), 503) << reply;
  EXPECT_NE(reply.find("too many connections"), std::string::npos) << reply;
  close(sockets_.front());
  sockets_.erase(sockets_.begin());
  ASSERT_TRUE(st::eventually([&] { return endpoint_->connections() < 8; }));
  EXPECT_EQ(get_health()->status, 200);
}

TEST_F(HttpEndpointTest, StopClosesIdleAndSlowConnectionsAndFinishesRequestsBeingHandled) {
  HttpOptions options;
  options.header_timeout = 60s;
  options.read_timeout = 60s;
  start(options);
  const int idle = open_socket();
  const int slow_head = open_socket();
  st::send_all(slow_head, "GET /hea");
  const int slow_body = open_socket();
  st::send_all(slow_body, "POST /size HTTP/1.1\r\nContent-Length: 100\r\n\r\nab");
  const int handled = open_socket();
  st::send_all(handled, "POST /block HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(st::eventually([&] { return blocked_ == 1; }));

  auto stopped = std::async(std::launch::async, [&] { endpoint_->stop(); });
  for (int fd : {idle, slow_head, slow_body}) EXPECT_TRUE(st::closed_within(fd, 10s));
  EXPECT_EQ(stopped.wait_for(100ms), std::future_status::timeout);  // still handling /block
  release();
  const std::string reply = st::receive(handled, 10s);
  EXPECT_EQ(status_of(reply), 200) << reply;
  EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
  EXPECT_TRUE(reply.ends_with("released")) << reply;
  EXPECT_EQ(stopped.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(endpoint_->connections(), 0);
}

}  // namespace
