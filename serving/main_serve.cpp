// flow_serve: serves a model repository over the KServe v2 protocol, gRPC and REST.
//   flow_serve --model-repository <dir> [--grpc-port 8001] [--http-port 8000] [--metrics-port 8002] ...
// SIGTERM or SIGINT shut it down gracefully.
#include <glog/logging.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "cli/cli.h"
#include "core/thread_pool.h"
#include "serving/server.h"

namespace {

// SIGTERM/SIGINT write their number here; main waits on the other end. (A handler, not sigwait:
// threads started before main, such as OpenBLAS's, would not block the signals.)
int stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const char byte = static_cast<char>(signal);
  [[maybe_unused]] const ssize_t written = write(stop_pipe[1], &byte, 1);
}

void install_stop_handlers() {
  if (pipe(stop_pipe) != 0) {
    std::cerr << "flow_serve: cannot create the signal pipe\n";
    std::exit(1);
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int wait_for_stop_signal() {
  char byte = 0;
  while (read(stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

// The command line; exits 0 after --help, 2 after a usage error (flow::cli::parse).
std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

flow::serving::ServerOptions parse_args(int argc, char** argv) {
  flow::serving::ServerOptions options;
  double poll_secs = 5;
  double shutdown_secs = 30;
  int max_message_mb = options.max_message_bytes >> 20;
  int kernel_threads = 0;
  CLI::App app("flow_serve: serves a model repository over the KServe v2 protocol (gRPC and REST)");
  app.option_defaults()->always_capture_default();
  app.add_option("--model-repository", options.model_repository, "model repository directory")->required();
  app.add_option("--grpc-port", options.grpc_port, "gRPC port (0: any free port)")->check(CLI::Range(0, 65535));
  app.add_option("--http-port", options.http_port, "KServe v2 REST port (0: any free port; -1: off)")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--metrics-port", options.metrics_port,
                 "Prometheus metrics port (0: any free port; -1: off; the --http-port: served there)")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--address", options.address, "address every endpoint listens on");
  app.add_option("--http-thread-count", options.http_threads,
                 "worker threads of each HTTP server (inference and model metadata; connections, health and "
                 "metrics are served by its I/O thread)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-max-connections", options.http_max_connections,
                 "open connections of each HTTP server; one more is answered 503")
      ->check(CLI::Range(1, 1 << 20));
  double header_timeout_secs = 5, read_timeout_secs = 5, body_timeout_secs = 60;
  app.add_option("--http-header-timeout-secs", header_timeout_secs,
                 "a request's head must arrive whole within S seconds (also the keep-alive idle timeout)")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-read-timeout-secs", read_timeout_secs, "the longest pause while a request body arrives")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-body-timeout-secs", body_timeout_secs, "a request body must arrive whole within S seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-message-mb", max_message_mb, "largest gRPC message or HTTP body in MiB")
      ->check(CLI::Range(1, 2047));
  app.add_option("--repository-poll-secs", poll_secs, "rescan the repository for new versions every S seconds (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shutdown-timeout-secs", shutdown_secs, "how long SIGTERM waits for in-flight requests")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tls-cert", options.tls.cert_file, "serve every endpoint over TLS with this certificate chain (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls.key_file, "the private key of --tls-cert (PEM)")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", options.tls.client_ca_file,
                 "mutual TLS: clients must present a certificate this CA signed (PEM)")
      ->check(CLI::ExistingFile);
  std::string token_file;
  app.add_option("--auth-token-file", token_file,
                 "every call must carry the bearer token on this file's first line (health and metrics: see --auth-health)")
      ->check(CLI::ExistingFile);
  app.add_flag("--auth-health", options.access.protect_health, "health and metrics need the bearer token too");
  app.add_option("--kernel-threads", kernel_threads,
                 "threads of the CPU kernels, shared by all models (default: all cores)")
      ->check(CLI::PositiveNumber)
      ->default_str("");
  if (const std::optional<int> status = flow::cli::parse(app, argc, argv)) std::exit(*status);
  options.max_message_bytes = max_message_mb << 20;
  options.repository_poll_interval = milliseconds_of(poll_secs);
  options.shutdown_timeout = milliseconds_of(shutdown_secs);
  options.http_header_timeout = milliseconds_of(header_timeout_secs);
  options.http_read_timeout = milliseconds_of(read_timeout_secs);
  options.http_body_timeout = milliseconds_of(body_timeout_secs);
  if (kernel_threads > 0) flow::set_num_threads(kernel_threads);
  try {
    if (!token_file.empty()) options.access.token = flow::serving::BearerToken::from_file(token_file);
  } catch (const std::exception& error) {
    std::cerr << "flow_serve: " << error.what() << "\n";
    std::exit(2);
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const flow::serving::ServerOptions options = parse_args(argc, argv);

  install_stop_handlers();

  try {
    flow::serving::Server server(options);
    std::cout << "flow_serve: gRPC port " << server.grpc_port() << ", metrics port " << server.metrics_port()
              << ", HTTP port " << server.http_port() << std::endl;
    const int signal = wait_for_stop_signal();
    LOG(INFO) << "[serving] signal " << signal << ": shutting down";
    // The drain honours the timeout; a model run that never returns must not keep the process.
    std::thread([timeout = options.shutdown_timeout] {
      std::this_thread::sleep_for(timeout + std::chrono::seconds(5));
      LOG(ERROR) << "[serving] shutdown did not finish in time; exiting";
      std::_Exit(1);
    }).detach();
    server.shutdown();
  } catch (const std::exception& error) {
    LOG(ERROR) << error.what();
    return 1;
  }
  return 0;
}
