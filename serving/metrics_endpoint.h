#pragma once
// The metrics port: a small HTTP/1.x endpoint answering GET /metrics with a prometheus-cpp
// registry in the Prometheus text format, one connection at a time on its own thread.
// (prometheus-cpp's own Exposer runs civetweb, whose worker threads get a fixed small stack;
// the static TLS of the libraries flow_core links (OpenBLAS, cuBLASLt, glog: about 200 KiB)
// does not fit in it, so civetweb cannot start its threads in a process that links flow_core.)
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <thread>

namespace flow::serving {

class MetricsEndpoint {
 public:
  // Listens on address:port (port 0: any free port). Throws flow::Error when it cannot.
  MetricsEndpoint(const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void answer(int connection);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // written by the destructor to end serve()
  int port_ = 0;
  std::thread thread_;
};

}  // namespace flow::serving
