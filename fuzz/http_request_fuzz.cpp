// The HTTP request path of flow_serve: the fuzzed bytes are what a client sends on a socket
// (request line, header fields, a body framed by Content-Length or chunked, maybe gzip- or
// deflate-encoded) to a real serving::Server's HTTP endpoint with the KServe v2 routes, started
// once per process on 127.0.0.1 (free ports) over a temporary model repository holding the real
// export fuzz/data/cnn as model "cnn" version 1 (max_batch_size 8). The limits are small so that
// fuzzed inputs reach them: 64 KiB bodies (inflated bytes count), a 4 KiB head, timeouts of a
// fraction of a second.
//
// Per input: connect, send the bytes, shut the write side, read until the server closes. A bug:
// an answer that does not start with an HTTP/1.1 status line (or an answer of 500, an internal
// error, to a client's bytes), a server that neither answers nor closes within kAnswerTimeout of
// the client's end of stream (its own timeouts are far shorter), or one that then no longer
// answers GET /v2/health/live with 200 on a new connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "serving/server.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kAnswerTimeout = 5s;
constexpr size_t kMaxAnswer = 1 << 20;

struct Exchange {
  std::string answer;
  bool closed = false;  // the server closed (or reset) the connection
};

// Says what went wrong on stderr and, when FLOW_FUZZ_REPORT names a file, appends it there too:
// libFuzzer's fork mode (the long runs) drops a crashed job's output.
void report(const std::string& text) {
  std::fprintf(stderr, "%s\n", text.c_str());
  if (const char* path = std::getenv("FLOW_FUZZ_REPORT")) {
    if (std::FILE* file = std::fopen(path, "a")) {
      std::fprintf(file, "pid %d: %s\n", static_cast<int>(::getpid()), text.c_str());
      std::fclose(file);
    }
  }
}

[[noreturn]] void fail(const std::string& detail, const char* what) {
  report(std::string(what) + "\n" + detail);
  flow_fuzz::invalid_accepted(what);
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("flow_fuzz: socket");
    std::abort();
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return fd;
  int error = errno;
  // A signal (a debugger's or a job control's SIGCONT) interrupts connect, which goes on in the
  // background: wait for it to finish rather than report the server gone.
  if (error == EINTR) {
    pollfd poll_fd{fd, POLLOUT, 0};
    int ready = 0;
    while ((ready = ::poll(&poll_fd, 1, 5000)) < 0 && errno == EINTR) {
    }
    socklen_t length = sizeof error;
    if (ready == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) return fd;
    if (ready == 0) error = ETIMEDOUT;
  }
  fail(std::string("connect: ") + std::strerror(error), "the server no longer accepts connections");
}

// Sends `request` (the server may close early: a 413 or 431; what it did not read is lost),
// ends the stream and reads until the server closes or `timeout` passes.
Exchange exchange(int port, std::string_view request, std::chrono::milliseconds timeout) {
  const int fd = connect_to(port);
  Exchange result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t sent = 0;
  bool writable = true;
  while (sent < request.size() && writable) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      writable = false;  // EPIPE, ECONNRESET: the server closed
    }
  }
  ::shutdown(fd, SHUT_WR);
  char buffer[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd poll_fd{fd, POLLIN, 0};
    const int ready = ::poll(&poll_fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      if (result.answer.size() < kMaxAnswer) result.answer.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    result.closed = true;  // 0: end of stream; < 0: reset
    break;
  }
  ::close(fd);
  return result;
}

class Fixture {
 public:
  Fixture() {
    const fs::path repository = flow_fuzz::scratch_dir() / "repository";
    fs::create_directories(repository / "cnn" / "1");
    for (const char* file : {"model.pb", "weights.safetensors"}) {
      fs::copy_file(flow_fuzz::data_path("cnn") / file, repository / "cnn" / "1" / file);
    }
    flow_fuzz::write_file(repository / "cnn" / "config.pbtxt", "max_batch_size: 8\n");
    flow::serving::ServerOptions options;
    options.model_repository = repository.string();
    options.address = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.metrics_port = -1;
    options.http_threads = 2;
    options.http_max_connections = 16;
    options.http_header_timeout = 500ms;
    options.http_read_timeout = 500ms;
    options.http_body_timeout = 2000ms;
    options.max_message_bytes = 64 << 10;
    options.shutdown_timeout = 2000ms;
    server_ = std::make_unique<flow::serving::Server>(options);
    port_ = server_->http_port();
    // Once through the paths an input takes, so that whatever they construct on first use
    // (function-local statics) is constructed before this fixture and destroyed after it: the
    // server's threads stop at exit before those go.
    std::string zeros = "0";
    for (int i = 1; i < 784; ++i) zeros += ",0";
    const std::string body = R"({"inputs":[{"name":"image","datatype":"FP32","shape":[1,1,28,28],"data":[)" + zeros + "]}]}";
    const std::string warm_up[] = {
        "GET /v2/health/live HTTP/1.1\r\nHost: fuzz\r\n\r\n",
        "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: fuzz\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
        "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: fuzz\r\nContent-Length: 2\r\n\r\n{}",
        "GET /nowhere HTTP/1.1\r\nHost: fuzz\r\n\r\n"};
    for (const std::string& request : warm_up) {
      const Exchange answer = exchange(port_, request, kAnswerTimeout);
      if (answer.answer.rfind("HTTP/1.1 ", 0) != 0) {
        std::fprintf(stderr, "flow_fuzz: the server does not answer %s\n", request.substr(0, 40).c_str());
        std::abort();
      }
    }
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<flow::serving::Server> server_;
  int port_ = -1;
};

bool digit(char c) { return c >= '0' && c <= '9'; }

// "HTTP/1.1 ddd " then a reason up to CRLF; what arrived of it when the connection was reset
// early may be a prefix only.
void check_status_line(const std::string& answer) {
  if (answer.empty()) return;
  const std::string_view head = std::string_view(answer).substr(0, 13);
  const std::string_view version = "HTTP/1.1 ";
  if (head.substr(0, std::min(head.size(), version.size())) != version.substr(0, std::min(head.size(), version.size()))) {
    fail(answer.substr(0, 256), "the answer does not start with HTTP/1.1");
  }
  for (size_t i = version.size(); i < head.size() && i < 12; ++i) {
    if (!digit(head[i])) fail(answer.substr(0, 256), "the answer's status is not three digits");
  }
  if (head.size() >= 13 && head[12] != ' ') fail(answer.substr(0, 256), "the answer's status line is malformed");
  if (head.size() >= 12) {
    const int status = std::stoi(std::string(head.substr(9, 3)));
    if (status < 100 || status > 599) fail(answer.substr(0, 256), "the answer's status is outside 100..599");
    if (status == 500) fail(answer.substr(0, 2048), "the server answered 500 (an internal error) to a client's bytes");
  }
  const size_t end = answer.find("\r\n");
  if (end != std::string::npos && answer.substr(0, end).find('\n') != std::string::npos) {
    fail(answer.substr(0, 256), "the answer's status line holds a bare LF");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  const Exchange fuzzed = exchange(fixture.port(), std::string_view(reinterpret_cast<const char*>(data), size),
                                   kAnswerTimeout);
  check_status_line(fuzzed.answer);
  if (!fuzzed.closed) {
    fail(std::to_string(fuzzed.answer.size()) + " bytes answered: " + fuzzed.answer.substr(0, 512),
         "the server neither answered nor closed the connection within 5 s of the client's end");
  }
  const Exchange health = exchange(fixture.port(), "GET /v2/health/live HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n",
                                   kAnswerTimeout);
  if (health.answer.rfind("HTTP/1.1 200 ", 0) != 0) {
    fail("health check answered (" + std::string(health.closed ? "closed" : "still open") + "): " + health.answer.substr(0, 512),
         "the server no longer answers GET /v2/health/live with 200");
  }
  return 0;
}
