#include "serving/http_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>

#include "core/error.h"
#include "serving/rest_codec.h"

namespace flow::serving {
namespace {

// Keep-alive connections serve this many requests before they are closed.
constexpr size_t kKeepAliveMaxRequests = 1000;

void add_route(httplib::Server& server, const std::string& method, const std::string& pattern,
               httplib::Server::Handler handler) {
  if (method == "GET") server.Get(pattern, std::move(handler));
  if (method == "POST") server.Post(pattern, std::move(handler));
}

// Whether the request's body is still unread on the connection.
bool has_body(const httplib::Request& request) {
  return request.has_header("Transfer-Encoding") ||
         (request.has_header("Content-Length") && request.get_header_value("Content-Length") != "0");
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
  server_->set_socket_options([](int socket) {
    const int on = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  });
  // 404 and 405 are answered before httplib reads a body: it would wait for one a request with
  // no Content-Length never sends.
  server_->set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    for (const Route& route : routes_) {
      if (!std::regex_match(request.path, route.pattern)) continue;
      if (route.methods.count(request.method) || (request.method == "HEAD" && route.methods.count("GET"))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      std::string allow;
      for (const std::string& method : route.methods) allow += (allow.empty() ? "" : ", ") + method;
      response.set_header("Allow", allow);
      send_error(response, 405, "[serving] method " + request.method + " not allowed on " + request.path);
      break;
    }
    if (response.status != 405) send_error(response, 404, "[serving] no such path: " + request.method + " " + request.path);
    // A body left unread would be taken for the next request.
    if (has_body(request)) response.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses that httplib sets itself (404, 413, 400, ...) get the same JSON body as ours.
  server_->set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    send_error(response, response.status,
               "[serving] HTTP status " + std::to_string(response.status) + ": " + request.method + " " + request.path);
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
  auto known = std::find_if(routes_.begin(), routes_.end(), [&](const Route& route) { return route.text == pattern; });
  if (known == routes_.end()) known = routes_.insert(routes_.end(), Route{pattern, std::regex(pattern), {}});
  known->methods.insert(method);
  add_route(*server_, method, pattern, std::move(handler));
}

void HttpEndpoint::start() {
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
