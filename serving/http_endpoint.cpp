#include "serving/http_endpoint.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "core/error.h"
#include "serving/content_encoding.h"
#include "serving/rest_codec.h"

namespace flow::serving {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::optional<std::string> HttpRequest::header(std::string_view name) const {
  for (const auto& [field, value] : headers) {
    if (beast::iequals(field, beast::string_view(name.data(), name.size()))) return value;
  }
  return std::nullopt;
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [field, old] : headers) {
    if (beast::iequals(field, name)) {
      old = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

void HttpResponse::set_content(std::string content, std::string content_type) {
  body = std::move(content);
  set_header("Content-Type", std::move(content_type));
}

void send_error(HttpResponse& response, int status, const std::string& message) {
  response.status = status;
  response.set_content(json_text({{"error", message}}), "application/json");
}

namespace {

using RouteHandler = std::pair<HttpEndpoint::Handler, HttpEndpoint::Runs>;

struct Route {
  std::string text;
  std::regex pattern;
  std::map<std::string, RouteHandler> by_method;
};

// An error answer for a connection that is closed after it: its request, or what is left of it,
// is not read.
HttpResponse closing_error(int status, const std::string& message) {
  HttpResponse response;
  send_error(response, status, message);
  response.set_header("Connection", "close");
  return response;
}

bool closes_connection(const HttpResponse& response) {
  for (const auto& [field, value] : response.headers) {
    if (beast::iequals(field, "Connection") && beast::iequals(value, "close")) return true;
  }
  return false;
}

}  // namespace

// What stop() and a streamed answer need of a session, whatever its stream.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void stop() = 0;
  // A streamed answer's next chunk and its end, queued from any thread.
  virtual void queue_chunk(std::shared_ptr<std::string> chunk) = 0;
  virtual void end_stream() = 0;
};

namespace {

// The HttpStream a handler gets: writes go to the session's I/O thread in order.
class ChunkStream final : public HttpStream {
 public:
  ChunkStream(std::shared_ptr<SessionBase> session, std::shared_ptr<std::atomic<bool>> gone, const std::atomic<bool>& stopping)
      : session_(std::move(session)), gone_(std::move(gone)), stopping_(stopping) {}
  ~ChunkStream() override { finish(); }

  bool write(std::string data) override {
    if (client_gone() || finished_) return false;
    if (!data.empty()) session_->queue_chunk(std::make_shared<std::string>(std::move(data)));
    return true;
  }
  void finish() override {
    if (!finished_.exchange(true)) session_->end_stream();
  }
  bool client_gone() const override { return gone_->load() || stopping_.load(); }

 private:
  std::shared_ptr<SessionBase> session_;
  std::shared_ptr<std::atomic<bool>> gone_;  // set by the session when a write fails
  const std::atomic<bool>& stopping_;        // the endpoint's; it outlives its sessions
  std::atomic<bool> finished_{false};
};

}  // namespace

class HttpEndpoint::Impl {
 public:
  explicit Impl(HttpOptions options)
      : options(std::move(options)), workers(static_cast<size_t>(std::max(1, this->options.threads))), acceptor(io) {}

  void accept();
  // The route whose pattern matches `path` whole, and its groups.
  const Route* find_route(const std::string& path, std::vector<std::string>& matches) const;

  // Declared before the I/O context: sessions that the context's destruction releases still
  // find them.
  const HttpOptions options;
  std::vector<Route> routes;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};
  std::mutex sessions_mutex;
  std::map<SessionBase*, std::weak_ptr<SessionBase>> sessions;
  std::optional<asio::ssl::context> tls;  // set: connections speak TLS
  asio::thread_pool workers;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::thread io_thread;
};

// One connection: Stream is beast::tcp_stream, or beast::ssl_stream over one for TLS.
template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  // The endpoint outlives its sessions: stop() waits until every connection is closed.
  template <typename... StreamArgs>
  explicit Session(HttpEndpoint::Impl& endpoint, StreamArgs&&... stream_args)
      : endpoint_(&endpoint), stream_(std::forward<StreamArgs>(stream_args)...) {}

  ~Session() {
    endpoint_->connections.fetch_sub(1);
    std::lock_guard lock(endpoint_->sessions_mutex);
    endpoint_->sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard lock(endpoint_->sessions_mutex);
      endpoint_->sessions.emplace(this, this->weak_from_this());
    }
    if constexpr (kTls) {
      socket_layer().expires_after(options().header_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code error) {
        if (error) return self->close();
        self->read_head();
      });
    } else {
      read_head();
    }
  }

  // On the endpoint's stop: a connection that waits for, or is still receiving, a request is
  // closed now; one whose request is being handled closes after its answer.
  void stop() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (!self->handling_) self->close();
    });
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  const HttpOptions& options() const { return endpoint_->options; }
  beast::tcp_stream& socket_layer() { return beast::get_lowest_layer(stream_); }

  void read_head() {
    if (endpoint_->stopping) return close();
    head_only_ = keep_alive_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(options().max_header_bytes, UINT32_MAX)));
    parser_->body_limit(static_cast<std::uint64_t>(options().max_body_bytes));
    socket_layer().expires_after(options().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code error, size_t) {
      self->on_head(error);
    });
  }

  void on_head(beast::error_code error) {
    if (error == http::error::header_limit) {
      return answer(closing_error(431, "[serving] the request head is larger than " + std::to_string(options().max_header_bytes) + " bytes"));
    }
    // Beast checks a Content-Length against the body limit with the head.
    if (error == http::error::body_limit) return answer(closing_error(413, too_large()));
    if (error) return bad_request_or_close(error);
    const auto& head = parser_->get();
    request_.method = std::string(head.method_string());
    const std::string target(head.target());
    request_.path = target.substr(0, target.find('?'));
    request_.headers.clear();
    for (const auto& field : head) request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    head_only_ = head.method() == http::verb::head;
    keep_alive_ = head.keep_alive();
    const bool body_pending = !parser_->is_done();
    if (endpoint_->stopping) return answer(closing_error(503, "[serving] the server is shutting down"));

    const Route* route = endpoint_->find_route(request_.path, request_.matches);
    const std::string method = head_only_ ? "GET" : request_.method;
    const auto handler = route ? route->by_method.find(method) : std::map<std::string, RouteHandler>::const_iterator();
    if (!route || handler == route->by_method.end()) {
      HttpResponse response;
      if (route) {
        std::string allow;
        for (const auto& [known, unused] : route->by_method) allow += (allow.empty() ? "" : ", ") + known;
        response.set_header("Allow", allow);
        send_error(response, 405, "[serving] method " + request_.method + " not allowed on " + request_.path);
      } else {
        send_error(response, 404, "[serving] no such path: " + request_.method + " " + request_.path);
      }
      // An unread body would be taken for the next request.
      if (body_pending) response.set_header("Connection", "close");
      return answer(std::move(response));
    }
    handler_ = &handler->second;
    if (!body_pending) return handle();
    // An HTTP/1.0 client's 100-continue is ignored (RFC 9110 10.1.1): it may not expect an interim answer.
    const auto expect = head.find(http::field::expect);
    if (head.version() >= 11 && expect != head.end() && beast::iequals(expect->value(), "100-continue")) {
      auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      socket_layer().expires_after(options().write_timeout);
      http::async_write(stream_, *interim, [self = this->shared_from_this(), interim](beast::error_code error, size_t) {
        if (error) return self->close();
        self->start_body();
      });
      return;
    }
    start_body();
  }

  void start_body() {
    body_deadline_ = Clock::now() + options().body_timeout;
    read_body();
  }

  void read_body() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(body_deadline_ - Clock::now());
    if (left.count() <= 0) return answer(closing_error(408, "[serving] the request body did not arrive in time"));
    socket_layer().expires_after(std::min(left, options().read_timeout));
    http::async_read_some(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code error, size_t) {
      if (error == http::error::body_limit) return self->answer(closing_error(413, self->too_large()));
      if (error == beast::error::timeout) return self->answer(closing_error(408, "[serving] the request body stopped arriving"));
      if (error) return self->bad_request_or_close(error);
      if (self->parser_->is_done()) return self->handle();
      self->read_body();
    });
  }

  // Runs the route's handler (on the I/O thread or a worker) and writes its answer.
  void handle() {
    request_.body = parser_->release().body();
    handling_ = true;
    auto run = [self = this->shared_from_this()] {
      HttpResponse response = self->run_handler();
      asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->answer(std::move(response));
      });
    };
    if (handler_->second == HttpEndpoint::Runs::kOnIoThread) {
      answer(run_handler());
    } else {
      asio::post(endpoint_->workers, std::move(run));
    }
  }

  HttpResponse run_handler() {
    HttpResponse response;
    try {
      request_.body = decode_content(std::move(request_.body), request_.header("Content-Encoding"), options().max_body_bytes);
      handler_->first(request_, response);
    } catch (const HttpError& error) {
      send_error(response, error.status, error.what());
    } catch (const std::exception& error) {
      send_error(response, 500, error.what());
    } catch (...) {
      send_error(response, 500, "[serving] unknown error");
    }
    return response;
  }

  void queue_chunk(std::shared_ptr<std::string> chunk) override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this(), chunk = std::move(chunk)]() mutable {
      self->chunks_.push_back(std::move(chunk));
      if (!self->writing_chunk_) self->write_next_chunk();
    });
  }

  void end_stream() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->stream_ending_ = true;
      if (!self->writing_chunk_) self->write_next_chunk();
    });
  }

  // Writes `response`; then reads the next request, or closes the connection.
  void answer(HttpResponse response) {
    if (response.stream) return answer_streamed(std::move(response));
    handling_ = false;
    const bool keep_alive = keep_alive_ && !closes_connection(response) && !endpoint_->stopping;
    auto message = std::make_shared<http::response<http::string_body>>();
    message->result(static_cast<unsigned>(response.status));
    message->version(11);
    message->set(http::field::server, "flow_serve");
    for (auto& [field, value] : response.headers) message->set(field, value);
    if (response.status >= 400 && !message->count(http::field::content_type) && !response.body.empty()) {
      message->set(http::field::content_type, "application/json");
    }
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    if (head_only_) message->body().clear();
    socket_layer().expires_after(options().write_timeout);
    http::async_write(stream_, *message, [self = this->shared_from_this(), message, keep_alive](beast::error_code error, size_t) {
      if (error || !keep_alive) return self->close();
      self->read_head();
    });
  }

  // Writes the head with chunked framing, then gives the handler's producer its stream; the
  // request stays in hand (the connection is not closed by stop()) until the stream ends.
  void answer_streamed(HttpResponse response) {
    streaming_keep_alive_ = keep_alive_ && !closes_connection(response) && !endpoint_->stopping;
    auto head = std::make_shared<http::response<http::empty_body>>();
    head->result(static_cast<unsigned>(response.status));
    head->version(11);
    head->set(http::field::server, "flow_serve");
    for (auto& [field, value] : response.headers) head->set(field, value);
    head->keep_alive(streaming_keep_alive_);
    head->chunked(true);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
    socket_layer().expires_after(options().write_timeout);
    http::async_write_header(stream_, *serializer,
                             [self = this->shared_from_this(), head, serializer, start = std::move(response.stream)](beast::error_code error, size_t) {
                               if (error) {
                                 self->handling_ = false;
                                 return self->close();
                               }
                               self->chunks_gone_ = std::make_shared<std::atomic<bool>>(false);
                               self->stream_ending_ = false;
                               start(std::make_shared<ChunkStream>(self, self->chunks_gone_, self->endpoint_->stopping));
                             });
  }

  // Writes the queued chunks one at a time; after the stream's end, its last chunk, then the
  // next request is read (or the connection closed).
  void write_next_chunk() {
    if (chunks_.empty()) {
      writing_chunk_ = false;
      if (!stream_ending_) return;
      stream_ending_ = false;
      if (chunks_gone_->load()) return;  // closed when the write failed
      writing_chunk_ = true;
      socket_layer().expires_after(options().write_timeout);
      asio::async_write(stream_, http::make_chunk_last(), [self = this->shared_from_this()](beast::error_code error, size_t) {
        self->writing_chunk_ = false;
        self->handling_ = false;
        if (error || !self->streaming_keep_alive_ || self->endpoint_->stopping) return self->close();
        self->read_head();
      });
      return;
    }
    writing_chunk_ = true;
    std::shared_ptr<std::string> chunk = std::move(chunks_.front());
    chunks_.pop_front();
    if (chunks_gone_->load()) return write_next_chunk();  // dropped: the client is gone
    socket_layer().expires_after(options().write_timeout);
    asio::async_write(stream_, http::make_chunk(asio::buffer(*chunk)), [self = this->shared_from_this(), chunk](beast::error_code error, size_t) {
      if (error) {
        self->chunks_gone_->store(true);
        self->handling_ = false;
        self->close();
      }
      self->write_next_chunk();
    });
  }

  // A request that does not parse is answered 400; a closed, timed-out or cancelled connection
  // is just closed.
  void bad_request_or_close(beast::error_code error) {
    const bool gone = error == http::error::end_of_stream || error == http::error::partial_message;
    if (gone || error.category() != http::make_error_code(http::error::bad_target).category()) return close();
    answer(closing_error(400, "[serving] malformed HTTP request: " + error.message()));
  }

  std::string too_large() const {
    return "[serving] the request body is larger than the limit of " + std::to_string(options().max_body_bytes) + " bytes";
  }

  void close() {
    beast::error_code ignored;
    socket_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket_layer().socket().close(ignored);
  }

  HttpEndpoint::Impl* const endpoint_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  const RouteHandler* handler_ = nullptr;
  bool head_only_ = false;
  bool keep_alive_ = false;
  bool handling_ = false;
  Clock::time_point body_deadline_;
  // A streamed answer's state, used on the I/O thread only (chunks_gone_ is shared with its
  // stream).
  std::deque<std::shared_ptr<std::string>> chunks_;
  bool writing_chunk_ = false;
  bool stream_ending_ = false;
  bool streaming_keep_alive_ = false;
  std::shared_ptr<std::atomic<bool>> chunks_gone_;
};

const Route* HttpEndpoint::Impl::find_route(const std::string& path, std::vector<std::string>& matches) const {
  for (const Route& route : routes) {
    std::smatch match;
    if (!std::regex_match(path, match, route.pattern)) continue;
    matches.assign(match.begin(), match.end());
    return &route;
  }
  matches.clear();
  return nullptr;
}

void HttpEndpoint::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), [self = this](beast::error_code error, tcp::socket socket) {
    if (error) {
      if (error == asio::error::operation_aborted || !self->acceptor.is_open()) return;
      LOG(WARNING) << "[serving] HTTP accept on port " << self->port << " failed: " << error.message();
    } else if (self->connections.fetch_add(1) >= self->options.max_connections) {
      self->connections.fetch_sub(1);
      beast::error_code ignored;
      if (self->tls) {
        // A plain-text refusal means nothing to a TLS client: the connection is just closed.
        socket.close(ignored);
        return self->accept();
      }
      // Small enough for the socket's send buffer: written at once, never waited for.
      const HttpResponse refusal = closing_error(503, "[serving] too many connections (limit " + std::to_string(self->options.max_connections) + ")");
      const std::string text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                               std::to_string(refusal.body.size()) + "\r\n\r\n" + refusal.body;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(text), ignored);
      socket.shutdown(tcp::socket::shutdown_both, ignored);
    } else if (self->tls) {
      std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(*self, std::move(socket), *self->tls)->start();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(*self, std::move(socket))->start();
    }
    self->accept();
  });
}

HttpEndpoint::HttpEndpoint(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  const HttpOptions& o = impl_->options;
  beast::error_code error;
  const auto address = asio::ip::make_address(o.address, error);
  if (error) fail("serving", "cannot listen for HTTP on ", o.address, ":", o.port, ": ", error.message());
  if (o.tls.enabled()) {
    o.tls.check();
    try {
      auto& tls = impl_->tls.emplace(asio::ssl::context::tls_server);
      tls.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                      asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
      tls.use_certificate_chain_file(o.tls.cert_file);
      tls.use_private_key_file(o.tls.key_file, asio::ssl::context::pem);
      if (!o.tls.client_ca_file.empty()) {
        tls.load_verify_file(o.tls.client_ca_file);
        tls.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
      }
    } catch (const boost::system::system_error& e) {
      fail("serving", "TLS for HTTP on port ", o.port, ": the certificate, key or client CA does not load: ", e.what());
    }
  }
  const tcp::endpoint where(address, static_cast<unsigned short>(o.port));
  tcp::acceptor& acceptor = impl_->acceptor;
  // SO_REUSEADDR (a restarted server binds at once) but not SO_REUSEPORT: a port another server
  // holds must be an error.
  if (!acceptor.open(where.protocol(), error) && !acceptor.set_option(asio::socket_base::reuse_address(true), error) &&
      !acceptor.bind(where, error) && !acceptor.listen(asio::socket_base::max_listen_connections, error)) {
    impl_->port = acceptor.local_endpoint().port();
    return;
  }
  fail("serving", "cannot listen for HTTP on ", o.address, ":", o.port, ": ", error.message());
}

HttpEndpoint::~HttpEndpoint() { stop(); }

void HttpEndpoint::route(const std::string& method, const std::string& pattern, Handler handler, Runs runs) {
  auto& routes = impl_->routes;
  auto known = std::find_if(routes.begin(), routes.end(), [&](const Route& route) { return route.text == pattern; });
  if (known == routes.end()) known = routes.insert(routes.end(), Route{pattern, std::regex(pattern), {}});
  known->by_method[method] = {std::move(handler), runs};
}

void HttpEndpoint::start() {
  impl_->accept();
  impl_->io_thread = std::thread([impl = impl_.get()] {
    // Kept running while stop() waits for the workers, whose answers are posted here.
    auto work = asio::make_work_guard(impl->io);
    impl->io.run();
  });
}

void HttpEndpoint::stop() {
  Impl& impl = *impl_;
  if (!impl.io_thread.joinable() || impl.stopping.exchange(true)) return;
  asio::post(impl.io, [&impl] {
    beast::error_code ignored;
    impl.acceptor.close(ignored);
    std::vector<std::shared_ptr<SessionBase>> open;
    {
      std::lock_guard lock(impl.sessions_mutex);
      for (auto& [raw, session] : impl.sessions) {
        if (auto alive = session.lock()) open.push_back(std::move(alive));
      }
    }
    for (const auto& session : open) session->stop();
  });
  impl.workers.join();
  // Every handler has run; the answers they posted are being written. The I/O thread's work
  // guard is released by stopping the context once no connection is left.
  while (impl.connections.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  impl.io.stop();
  impl.io_thread.join();
}

int HttpEndpoint::port() const { return impl_->port; }
int HttpEndpoint::connections() const { return impl_->connections.load(); }

}  // namespace flow::serving
