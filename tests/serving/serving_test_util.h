#pragma once
// Shared by the serving tests: tiny Graphs exported with flow::save into a temporary model
// repository, a server on 127.0.0.1 with free ports, and request helpers.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/scratch_dir.h"
#include "core/ops/all.h"
#include "graph/export.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "serving/client.h"
#include "serving/metrics_text.h"
#include "serving/server.h"

namespace serving_test {

namespace fs = std::filesystem;
using flow::Tensor;
using flow::TensorList;
using flow::serving::WireTensor;

// Returns its inputs, each through a copy: the identity-like model.
struct IdentityGraph : flow::nn::Graph {
  TensorList build(const TensorList& in) override {
    TensorList out;
    for (const Tensor& x : in) out.push_back(flow::clone(x));
    return out;
  }
};

// y = x * scale + shift.
struct AffineGraph : flow::nn::Graph {
  AffineGraph(float scale, float shift) : scale(scale), shift(shift) {}
  TensorList build(const TensorList& in) override { return {flow::add(flow::mul(in[0], scale), shift)}; }
  float scale, shift;
};

// Two inputs a, b -> outputs sum = a + b, product = a * b.
struct SumProductGraph : flow::nn::Graph {
  TensorList build(const TensorList& in) override { return {flow::add(in[0], in[1]), flow::mul(in[0], in[1])}; }
};

// Many 512x512 linear layers: a request of a large batch takes a while to compute.
struct SlowGraph : flow::nn::Graph {
  SlowGraph() {
    for (int i = 0; i < 48; ++i) {
      layers.push_back(register_module("layer" + std::to_string(i), std::make_shared<flow::nn::Linear>(512, 512)));
    }
  }
  TensorList build(const TensorList& in) override {
    Tensor x = in[0];
    for (const auto& layer : layers) x = flow::relu(layer->forward(x));
    return {x};
  }
  std::vector<std::shared_ptr<flow::nn::Linear>> layers;
};

// A convolution first, as in the CNN users serve: a shape that reached its kernel could crash it.
struct ConvGraph : flow::nn::Graph {
  ConvGraph() { conv = register_module("conv", std::make_shared<flow::nn::Conv2d>(1, 2, 3)); }
  TensorList build(const TensorList& in) override { return {flow::relu(conv->forward(in[0]))}; }
  std::shared_ptr<flow::nn::Conv2d> conv;
};

// Exports graph, called once on `example`, into dir with the given input and output names.
inline void export_graph(flow::nn::Graph& graph, const TensorList& example, const fs::path& dir,
                         std::vector<std::string> inputs, std::vector<std::string> outputs) {
  graph(example);
  flow::save(graph, dir.string(), flow::ExportOptions().input_names(std::move(inputs)).output_names(std::move(outputs)));
}

// Identity on one input "x" -> "y" of dtype, shape (-1, width).
inline void export_identity(const fs::path& dir, flow::DType dtype, int64_t width = 3) {
  IdentityGraph graph;
  export_graph(graph, {flow::zeros({2, width}).to(dtype)}, dir, {"x"}, {"y"});
}

// "x" (-1, 4) float32 -> "y" = x * scale + shift.
inline void export_affine(const fs::path& dir, float scale, float shift = 0) {
  AffineGraph graph(scale, shift);
  export_graph(graph, {flow::zeros({2, 4})}, dir, {"x"}, {"y"});
}

inline void export_sum_product(const fs::path& dir) {
  SumProductGraph graph;
  export_graph(graph, {flow::zeros({2, 4}), flow::zeros({2, 4})}, dir, {"a", "b"}, {"sum", "product"});
}

// "x" (-1, 512) float32 -> "y" (-1, 512) through SlowGraph.
inline void export_slow(const fs::path& dir) {
  SlowGraph graph;
  export_graph(graph, {flow::zeros({2, 512})}, dir, {"x"}, {"y"});
}

// "image" (-1, 1, 28, 28) float32 -> "features" (-1, 2, 26, 26) through ConvGraph.
inline void export_conv(const fs::path& dir) {
  ConvGraph graph;
  export_graph(graph, {flow::zeros({2, 1, 28, 28})}, dir, {"image"}, {"features"});
}

inline void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A model repository in a fresh temporary directory, removed at the end.
class Repository {
 public:
  const fs::path& root() const { return scratch_.path(); }
  fs::path version_dir(const std::string& model, int version) const { return scratch_ / model / std::to_string(version); }
  void write_config(const std::string& model, const std::string& text) const {
    write_file(scratch_ / model / "config.pbtxt", text);
  }

 private:
  flow::testing::ScratchDir scratch_{"repository"};
};

// Exports an affine model (y = scale * x) as `version` of model "affine": written under a hidden
// staging directory, then renamed into place, so the repository never sees a half-written version.
inline void publish_affine(const Repository& repo, int version, float scale) {
  const fs::path staging = repo.root() / ".staging";
  fs::remove_all(staging);
  export_affine(staging, scale);
  fs::create_directories(repo.root() / "affine");
  fs::rename(staging, repo.version_dir("affine", version));
}

inline std::unique_ptr<flow::serving::Server> start_server(const fs::path& repository,
                                                           flow::serving::ServerOptions options = {}) {
  options.model_repository = repository.string();
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  return std::make_unique<flow::serving::Server>(options);
}

inline std::unique_ptr<flow::serving::Client> connect(const flow::serving::Server& server) {
  return std::make_unique<flow::serving::Client>("127.0.0.1:" + std::to_string(server.grpc_port()));
}

inline WireTensor fp32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  std::string data(values.size() * sizeof(float), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  return {name, "FP32", std::move(shape), std::move(data)};
}

inline std::vector<float> fp32_values(const std::string& data) {
  std::vector<float> values(data.size() / sizeof(float));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

// Waits (bounded) until cond() holds; returns whether it did.
template <typename Cond>
bool eventually(Cond cond, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A port free on 127.0.0.1 when this returns (bound to 0 by the kernel, then let go).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  return ok ? ntohs(address.sin_port) : 0;
}

// A TCP connection to 127.0.0.1:port (-1 when it cannot connect), for clients that misbehave
// byte by byte.
inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `text`; false when the connection is closed before.
inline bool send_all(int fd, const std::string& text) {
  for (size_t sent = 0; sent < text.size();) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// What arrives on `fd` until the peer closes it (closed: true, also on a reset), `until` is found
// in it, or `limit` passes.
struct Received {
  std::string data;
  bool closed = false;
};
inline Received read_from(int fd, std::chrono::milliseconds limit, const std::string& until = "") {
  Received got;
  const auto end = std::chrono::steady_clock::now() + limit;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return got;
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(left.count())) <= 0) return got;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      got.closed = true;
      return got;
    }
    got.data.append(buffer, static_cast<size_t>(n));
    if (!until.empty() && got.data.find(until) != std::string::npos) return got;
  }
}

inline std::string receive(int fd, std::chrono::milliseconds limit, const std::string& until = "") {
  return read_from(fd, limit, until).data;
}

// Whether the peer closes `fd` (or resets it) within `limit`, reading what it sends until then.
inline bool closed_within(int fd, std::chrono::milliseconds limit) { return read_from(fd, limit).closed; }

// A flow_serve process on 127.0.0.1 with free ports, read from the line it prints first.
struct ServeProcess {
  pid_t pid = -1;
  int grpc_port = 0, metrics_port = 0, http_port = 0;

  // Starts it on `repository`; pid stays -1 when the ports could not be read.
  explicit ServeProcess(const fs::path& repository) {
    // Everything the child needs is prepared before fork: it only calls dup2, close and execl.
    const std::string root = repository.string();
    int out[2];
    if (pipe(out) != 0) return;
    const pid_t child = fork();
    if (child == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      execl(FLOW_SERVE_PATH, FLOW_SERVE_PATH, "--model-repository", root.c_str(), "--address", "127.0.0.1",
            "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0", "--shutdown-timeout-secs", "20",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    std::string line;
    for (char c; child > 0 && line.find('\n') == std::string::npos && read(out[0], &c, 1) == 1;) line += c;
    close(out[0]);
    if (sscanf(line.c_str(), "flow_serve: gRPC port %d, metrics port %d, HTTP port %d", &grpc_port, &metrics_port,
               &http_port) == 3) {
      pid = child;
    } else if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
  }
  // SIGTERM, then the exit status (waitpid's), or -1.
  int terminate() {
    if (pid <= 0) return -1;
    int status = -1;
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  ~ServeProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// The value of a metric of model m (version v) scraped from the server's metrics endpoint.
inline double metric(const flow::serving::Server& server, const std::string& name, const std::string& model,
                     const std::string& version = "1") {
  return flow::serving::metric_value(flow::serving::fetch_metrics("127.0.0.1", server.metrics_port()), name,
                                     {{"model", model}, {"version", version}});
}

}  // namespace serving_test
