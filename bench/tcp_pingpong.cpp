// The floor under any RPC on this machine: a 64-byte TCP ping-pong between two processes over
// 127.0.0.1 (TCP_NODELAY, blocking reads), no RPC framework. Prints latency percentiles.
// Usage: tcp_pingpong [round trips, default 5000]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void set_nodelay(int socket_fd) {
  const int one = 1;
  if (setsockopt(socket_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("setsockopt");
}

// Reads exactly `size` bytes; false at end of stream.
bool read_exactly(int socket_fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t got = read(socket_fd, data, size);
    if (got <= 0) return false;
    data += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

void write_all(int socket_fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t put = write(socket_fd, data, size);
    if (put <= 0) die("write");
    data += put;
    size -= static_cast<size_t>(put);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The floor under any RPC: a 64-byte TCP ping-pong between two processes over 127.0.0.1.", "tcp_pingpong");
  int round_trips = 5000;
  app.add_option("round_trips", round_trips, "round trips to time")->check(flow::cli::at_least(1))->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;  // any free port
  socklen_t length = sizeof address;
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    die("listen");
  }
  std::array<char, 64> message{};
  const pid_t echo = fork();
  if (echo == 0) {
    const int peer = accept(listener, nullptr, nullptr);
    set_nodelay(peer);
    while (read_exactly(peer, message.data(), message.size())) write_all(peer, message.data(), message.size());
    std::_Exit(0);
  }
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) die("connect");
  set_nodelay(client);
  std::vector<double> latencies_us;
  for (int i = 0; i < round_trips; ++i) {
    const auto start = std::chrono::steady_clock::now();
    write_all(client, message.data(), message.size());
    if (!read_exactly(client, message.data(), message.size())) die("read");
    latencies_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  close(client);
  waitpid(echo, nullptr, 0);
  std::sort(latencies_us.begin(), latencies_us.end());
  auto at = [&](double p) { return latencies_us[static_cast<size_t>(p * static_cast<double>(latencies_us.size() - 1))]; };
  std::printf("tcp ping-pong over %d round trips (us): p50 %.1f, p90 %.1f, p99 %.1f\n", round_trips, at(0.5), at(0.9),
              at(0.99));
  return 0;
}
