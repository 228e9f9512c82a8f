#pragma once
// An HTTP/1.1 endpoint on cpp-httplib: a pool of `threads` threads, each serving one connection
// for as long as it stays open (a keep-alive connection idle longer than keep_alive_timeout, or
// a request slower than read_timeout between two reads, is closed). Paths are routed by method:
// a known path with another method answers 405, an unknown path 404, both with a JSON
// {"error": ...} body.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flow::serving {

struct HttpOptions {
  std::string address = "0.0.0.0";
  int port = 0;  // 0: any free port
  int threads = 8;
  size_t max_body_bytes = 512 << 20;  // larger bodies: 413
  std::chrono::seconds read_timeout{5};
  std::chrono::seconds keep_alive_timeout{5};
};

class HttpEndpoint {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // Binds the port (listening starts with start()). Throws flow::Error when it cannot.
  explicit HttpEndpoint(HttpOptions options);
  // stop()s.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Answers `method` ("GET" or "POST") requests whose whole path matches the regular expression
  // `pattern` (its groups in request.matches). Before start() only.
  void route(const std::string& method, const std::string& pattern, Handler handler);
  // Starts accepting connections on a thread of its own.
  void start();
  // Stops accepting, lets the connections being served finish (each within its timeouts), joins
  // the threads. Idempotent.
  void stop();

  int port() const { return port_; }

 private:
  const HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
  struct Route {
    std::string text;
    std::regex pattern;
    std::set<std::string> methods;
  };
  std::vector<Route> routes_;
  int port_ = 0;
  std::thread listener_;
  std::atomic<bool> listener_done_{false};
};

// Answers with `status` and a JSON {"error": message} body.
void send_error(httplib::Response& response, int status, const std::string& message);

}  // namespace flow::serving
