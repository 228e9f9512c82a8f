#pragma once
// flow_serve's server: the model repository, the KServe v2 gRPC service with gRPC health and
// reflection, and the Prometheus metrics endpoint.
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

namespace grpc {
class Server;
}

namespace flow::serving {

class InferenceService;
class MetricsEndpoint;

struct ServerOptions {
  std::string model_repository;
  std::string address = "0.0.0.0";  // of both the gRPC and the metrics endpoint
  int grpc_port = 8001;              // 0: any free port (see Server::grpc_port())
  int metrics_port = 8002;           // 0: any free port; -1: no metrics endpoint
  // Largest request or response message; the default carries 256 MiB tensors with room to spare.
  int max_message_bytes = 512 << 20;
  // How often the repository is rescanned for new versions; 0: only at start-up.
  std::chrono::milliseconds repository_poll_interval{0};
  // How long shutdown() waits for in-flight requests.
  std::chrono::milliseconds shutdown_timeout{30000};
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
  int metrics_port() const { return metrics_port_; }
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
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  int grpc_port_ = 0;
  int metrics_port_ = -1;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;  // set by shutdown(): ends the poll loop
  bool stopped_ = false;   // shutdown() finished
  std::thread poller_;
};

}  // namespace flow::serving
