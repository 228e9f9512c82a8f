#pragma once
// flow_serve's server: the model repository, the KServe v2 gRPC service with gRPC health and
// reflection, the KServe v2 REST endpoint and the Prometheus metrics endpoint (one HTTP server
// for both when they are given the same port).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "serving/metrics.h"
#include "serving/model_repository.h"
#include "serving/request_tracker.h"
#include "serving/security.h"

namespace grpc {
class Server;
}

namespace flow::serving {

class InferenceService;
class HttpEndpoint;

struct ServerOptions {
  std::string model_repository;
  std::string address = "0.0.0.0";  // of every endpoint
  int grpc_port = 8001;              // 0: any free port (see Server::grpc_port())
  int http_port = 8000;              // KServe v2 REST; 0: any free port; -1: none
  int metrics_port = 8002;           // 0: any free port; -1: none; http_port's: served by that server
  // Worker threads of each HTTP server: they run the handlers that may block (inference,
  // model metadata); connections, health and metrics are served by its one I/O thread.
  int http_threads = 8;
  // Open connections each HTTP server keeps; one more is answered 503 and closed.
  int http_max_connections = 1024;
  // A request's head must arrive whole within this (from the connection, or the previous answer
  // on a keep-alive connection, which is closed when idle that long); its body must not pause
  // longer than http_read_timeout and must arrive whole within http_body_timeout.
  std::chrono::milliseconds http_header_timeout{5000};
  std::chrono::milliseconds http_read_timeout{5000};
  std::chrono::milliseconds http_body_timeout{60000};
  // Largest request or response message (gRPC) or request body (HTTP); the default carries
  // 256 MiB tensors with room to spare.
  int max_message_bytes = 512 << 20;
  // How often the repository is rescanned for new versions; 0: only at start-up.
  std::chrono::milliseconds repository_poll_interval{0};
  // How long shutdown() waits for in-flight requests.
  std::chrono::milliseconds shutdown_timeout{30000};
  // TLS for every endpoint (gRPC, REST, metrics); none: plain TCP.
  TlsFiles tls;
  // A bearer token every call must carry (health and metrics too with protect_health).
  AccessPolicy access;
};

class Server {
 public:
  // Loads the repository's models and starts serving. Throws flow::Error when the repository
  // is missing or a port cannot be bound.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }        // -1: none
  int metrics_port() const { return metrics_port_; }  // -1: none
  ModelRepository& repository() { return repository_; }
  // Inference requests admitted and not yet answered.
  int64_t in_flight() const { return tracker_.in_flight(); }
  // Whether shutdown() has begun (new inference requests are refused).
  bool shutting_down() const { return tracker_.draining(); }

  // Graceful shutdown: readiness and health turn false, new inference requests get UNAVAILABLE,
  // in-flight ones finish (up to shutdown_timeout), then the endpoints close. Thread-safe; later
  // calls wait for the first.
  void shutdown();
  // Blocks until shutdown() has finished.
  void wait();

 private:
  void poll_loop();

  const ServerOptions options_;
  Metrics metrics_;
  ModelRepository repository_;
  RequestTracker tracker_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpEndpoint> http_endpoint_;
  std::unique_ptr<HttpEndpoint> metrics_endpoint_;  // none when http_endpoint_ serves the metrics
  int grpc_port_ = 0;
  int http_port_ = -1;
  int metrics_port_ = -1;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;  // set by shutdown(): ends the poll loop
  bool stopped_ = false;   // shutdown() finished
  std::thread poller_;
};

}  // namespace flow::serving
