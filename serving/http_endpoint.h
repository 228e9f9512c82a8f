#pragma once
// An event-driven HTTP/1.1 endpoint (Boost.Beast on Boost.Asio): one I/O thread reads and writes
// every connection, so a connection costs a socket and a buffer, not a thread, and slow or idle
// clients hold nobody up. Handlers that may block (a model run) run on a pool of worker threads;
// cheap ones (health, metrics) run on the I/O thread and answer however busy the workers are.
//
// Every request is bounded: its head must arrive whole within header_timeout (counted from the
// connection, or from the previous answer on a keep-alive connection) and within
// max_header_bytes; its body must keep arriving (no gap over read_timeout) and be whole within
// body_timeout; a body over max_body_bytes, whatever its framing (Content-Length or chunked) or
// encoding (gzip and deflate are inflated, and the inflated bytes count), is answered 413 as soon
// as the limit is crossed, and the connection closed. A connection over max_connections is
// answered 503 and closed. With TLS files, connections speak TLS (mutual TLS with a client CA).
// Paths are routed by method: a known path with another method answers
// 405, an unknown path 404, both with a JSON {"error": ...} body.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serving/security.h"

namespace flow::serving {

struct HttpOptions {
  std::string address = "0.0.0.0";
  int port = 0;     // 0: any free port
  int threads = 8;  // worker threads: handlers added with Runs::kOnWorker
  size_t max_body_bytes = 512 << 20;
  size_t max_header_bytes = 64 << 10;  // the request line and header fields; larger: 431
  int max_connections = 1024;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds read_timeout{5000};  // the longest gap between two reads of a body
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds write_timeout{60000};
  TlsFiles tls;  // a certificate: every connection speaks TLS (its handshake within header_timeout)
};

struct HttpRequest {
  std::string method;  // GET, HEAD (answered by the GET route), POST, ...
  std::string path;    // the target without its query
  std::vector<std::string> matches;  // the route's groups: [0] the whole path, then each group
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // inflated when the request was sent gzip- or deflate-encoded

  // The first field named `name` (case-insensitive), if any.
  std::optional<std::string> header(std::string_view name) const;
};

// The body of an answer written while it is produced, in chunks (chunked transfer encoding):
// server-sent events. Any thread may write; chunks go out in the order written.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Queues `data` as the next chunk. False once the client is gone (a write failed or timed out)
  // or the endpoint is stopping: the producer should stop, and what it writes is dropped.
  virtual bool write(std::string data) = 0;
  // Ends the body; the connection then serves its next request. The destructor ends it if this
  // was not called.
  virtual void finish() = 0;
  virtual bool client_gone() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set by a handler to stream the body instead of sending `body`: the head (status, headers) is
  // written, then `stream` is called once with the open stream, on the I/O thread, so it must not
  // block: it hands the stream to whatever produces the chunks. Not called when the head cannot
  // be written (the client is gone).
  std::function<void(std::shared_ptr<HttpStream>)> stream;

  void set_header(std::string name, std::string value);
  void set_content(std::string content, std::string content_type);
};

class HttpEndpoint {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  enum class Runs { kOnIoThread, kOnWorker };

  // Binds the port (listening starts with start()). Throws flow::Error when it cannot.
  explicit HttpEndpoint(HttpOptions options);
  // stop()s.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Answers `method` ("GET" or "POST") requests whose whole path matches the regular expression
  // `pattern`. A handler that never blocks may run on the I/O thread; one that may (it waits for
  // a model, a lock held long) must run on a worker. Before start() only.
  void route(const std::string& method, const std::string& pattern, Handler handler, Runs runs = Runs::kOnWorker);
  // Starts accepting connections on a thread of its own.
  void start();
  // Stops accepting; closes connections that wait for or are still sending a request (idle,
  // slow); lets the requests being handled finish and their answers be written (each within
  // write_timeout), then closes those too and joins the threads. Idempotent.
  void stop();

  int port() const;
  // Connections open now.
  int connections() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Answers with `status` and a JSON {"error": message} body.
void send_error(HttpResponse& response, int status, const std::string& message);

}  // namespace flow::serving
