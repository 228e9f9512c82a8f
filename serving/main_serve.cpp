// flow_serve: serves a model repository over the KServe v2 gRPC protocol.
//   flow_serve --model-repository <dir> [--grpc-port 8001] [--metrics-port 8002] ...
// SIGTERM or SIGINT shut it down gracefully.
#include <glog/logging.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

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

constexpr const char* kUsage = R"(usage: flow_serve --model-repository <dir> [options]
  --grpc-port N               gRPC port (default 8001; 0: any free port)
  --metrics-port N            Prometheus metrics port (default 8002; 0: any free port; -1: off)
  --address ADDR              address to listen on (default 0.0.0.0)
  --max-message-mb N          largest request/response message in MiB (default 512)
  --repository-poll-secs S    rescan the repository for new versions every S seconds (default 5; 0: off)
  --shutdown-timeout-secs S   how long SIGTERM waits for in-flight requests (default 30)
  --kernel-threads N          threads of the CPU kernels, shared by all models (default: all cores)
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "flow_serve: " << message << "\n" << kUsage;
  std::exit(2);
}

flow::serving::ServerOptions parse_args(int argc, char** argv) {
  flow::serving::ServerOptions options;
  options.repository_poll_interval = std::chrono::seconds(5);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error("missing value for " + flag);
    const std::string value = argv[++i];
    try {
      if (flag == "--model-repository") {
        options.model_repository = value;
      } else if (flag == "--grpc-port") {
        options.grpc_port = std::stoi(value);
      } else if (flag == "--metrics-port") {
        options.metrics_port = std::stoi(value);
      } else if (flag == "--address") {
        options.address = value;
      } else if (flag == "--max-message-mb") {
        options.max_message_bytes = std::stoi(value) << 20;
      } else if (flag == "--repository-poll-secs") {
        options.repository_poll_interval = std::chrono::milliseconds(static_cast<int64_t>(std::stod(value) * 1000));
      } else if (flag == "--shutdown-timeout-secs") {
        options.shutdown_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::stod(value) * 1000));
      } else if (flag == "--kernel-threads") {
        flow::set_num_threads(std::stoi(value));
      } else {
        usage_error("unknown option " + flag);
      }
    } catch (const std::logic_error&) {
      usage_error("bad value '" + value + "' for " + flag);
    }
  }
  if (options.model_repository.empty()) usage_error("--model-repository is required");
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
              << std::endl;
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
