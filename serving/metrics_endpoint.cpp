#include "serving/metrics_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"

namespace flow::serving {
namespace {

void send_all(int fd, const std::string& data) {
  for (size_t sent = 0; sent < data.size();) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    fail("serving", "cannot resolve the metrics address ", address);
  }
  listen_fd_ = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  const int on = 1;
  const bool ok = listen_fd_ >= 0 && setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == 0 &&
                  bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 && listen(listen_fd_, 16) == 0;
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (!ok || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0 || pipe(wake_pipe_) != 0) {
    const std::string reason = std::strerror(errno);
    if (listen_fd_ >= 0) close(listen_fd_);
    fail("serving", "cannot listen for metrics on ", address, ":", port, ": ", reason);
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  const char stop = 0;
  if (write(wake_pipe_[1], &stop, 1) != 1) close(listen_fd_);
  thread_.join();
  close(listen_fd_);
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
}

void MetricsEndpoint::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int connection = accept(listen_fd_, nullptr, nullptr);
    if (connection < 0) continue;
    answer(connection);
    close(connection);
  }
}

void MetricsEndpoint::answer(int connection) {
  // A scraper that never finishes its request must not stall the endpoint.
  const timeval timeout{2, 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const bool metrics = request.starts_with("GET /metrics ") || request.starts_with("GET /metrics?") ||
                       request.starts_with("GET / ");
  const std::string body = metrics ? prometheus::TextSerializer().Serialize(registry_->Collect()) : "not found\n";
  send_all(connection, std::string(metrics ? "HTTP/1.1 200 OK" : "HTTP/1.1 404 Not Found") +
                           "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
}

}  // namespace flow::serving
