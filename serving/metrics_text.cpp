#include "serving/metrics_text.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <sstream>

#include "core/error.h"

namespace flow::serving {
namespace {

// {a="x",b="y"} -> {a: x, b: y}; label values in flow_serve's metrics hold no quotes or commas.
std::map<std::string, std::string> parse_labels(const std::string& text) {
  std::map<std::string, std::string> labels;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t equals = text.find('=', pos);
    const size_t open = text.find('"', equals);
    const size_t close = text.find('"', open + 1);
    if (equals == std::string::npos || open == std::string::npos || close == std::string::npos) break;
    labels[text.substr(pos, equals - pos)] = text.substr(open + 1, close - open - 1);
    pos = text.find_first_not_of(", ", close + 1);
  }
  return labels;
}

}  // namespace

std::string fetch_metrics(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    fail("metrics", "cannot resolve ", host);
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  const int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd < 0 || connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    if (fd >= 0) close(fd);
    fail("metrics", "cannot connect to ", host, ":", port);
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  std::string reply;
  bool sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
  char buffer[16384];
  for (ssize_t n; sent && (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  const bool ok = reply.compare(0, 12, "HTTP/1.1 200") == 0 || reply.compare(0, 12, "HTTP/1.0 200") == 0;
  if (!sent || body == std::string::npos || !ok) {
    fail("metrics", "bad answer from http://", host, ":", port, "/metrics: ", reply.substr(0, reply.find('\r')));
  }
  return reply.substr(body + 4);
}

double metric_value(const std::string& text, const std::string& name, const std::map<std::string, std::string>& labels) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    std::map<std::string, std::string> sample_labels;
    size_t value_pos = name.size();
    if (next == '{') {
      const size_t close = line.find('}', name.size());
      if (close == std::string::npos) continue;
      sample_labels = parse_labels(line.substr(name.size() + 1, close - name.size() - 1));
      value_pos = close + 1;
    }
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample_labels.find(key);
      match = match && it != sample_labels.end() && it->second == value;
    }
    if (match) sum += std::stod(line.substr(value_pos));
  }
  return sum;
}

}  // namespace flow::serving
