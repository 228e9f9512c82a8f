#include "serving/http_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>

#include "core/error.h"
#include "serving/rest_codec.h"

namespace flow::serving {
namespace {

constexpr const char* kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};

// Keep-alive connections serve this many requests before they are closed.
constexpr size_t kKeepAliveMaxRequests = 1000;

void add_route(httplib::Server& server, const std::string& method, const std::string& pattern,
               httplib::Server::Handler handler) {
  if (method == "GET") server.Get(pattern, std::move(handler));
  if (method == "POST") server.Post(pattern, std::move(handler));
  if (method == "PUT") server.Put(pattern, std::move(handler));
  if (method == "PATCH") server.Patch(pattern, std::move(handler));
  if (method == "DELETE") server.Delete(pattern, std::move(handler));
  if (method == "OPTIONS") server.Options(pattern, std::move(handler));
}

}  // namespace

void send_error(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  response.set_content(json_text({{"error", message}}), "application/json");
}

HttpEndpoint::HttpEndpoint(HttpOptions options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  const auto threads = static_cast<size_t>(std::max(1, options_.threads));
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_read_timeout(options_.read_timeout);
  server_->set_write_timeout(options_.read_timeout);
  server_->set_keep_alive_timeout(options_.keep_alive_timeout.count());
  server_->set_keep_alive_max_count(kKeepAliveMaxRequests);
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_tcp_nodelay(true);
  // httplib's default socket options set SO_REUSEPORT, which would let a second server share the
  // port silently: a port another server holds must be an error.
  server_->set_socket_options([](httplib::socket_t socket) {
    const int on = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  });
  // Statuses that httplib sets itself (404, 413, 400, ...) get the same JSON body as ours.
  server_->set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    const std::string what = response.status == 404 ? "no such path" : "HTTP status " + std::to_string(response.status);
    send_error(response, response.status, "[serving] " + what + ": " + request.method + " " + request.path);
  });
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          send_error(response, 500, e.what());
        } catch (...) {
          send_error(response, 500, "[serving] unknown error");
        }
      });
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.address)
                             : (server_->bind_to_port(options_.address, options_.port) ? options_.port : -1);
  if (port_ <= 0) fail("serving", "cannot listen for HTTP on ", options_.address, ":", options_.port);
}

HttpEndpoint::~HttpEndpoint() { stop(); }

void HttpEndpoint::route(const std::string& method, const std::string& pattern, Handler handler) {
  methods_[pattern].insert(method);
  add_route(*server_, method, pattern, std::move(handler));
}

void HttpEndpoint::start() {
  for (const auto& [pattern, routed] : methods_) {
    std::string allow;
    for (const std::string& method : routed) allow += (allow.empty() ? "" : ", ") + method;
    for (const char* method : kMethods) {
      if (routed.count(method)) continue;
      add_route(*server_, method, pattern, [allow](const httplib::Request& request, httplib::Response& response) {
        response.set_header("Allow", allow);
        send_error(response, 405, "[serving] method " + request.method + " not allowed on " + request.path);
      });
    }
  }
  listener_ = std::thread([this] {
    server_->listen_after_bind();
    listener_done_ = true;
  });
  // stop() only stops a server that is running: wait until it is.
  while (!server_->is_running() && !listener_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpEndpoint::stop() {
  if (!listener_.joinable()) return;
  server_->stop();
  listener_.join();
}

}  // namespace flow::serving
