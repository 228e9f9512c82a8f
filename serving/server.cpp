#include "serving/server.h"

#include <algorithm>

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "serving/inference_service.h"
#include "serving/http_endpoint.h"
#include "serving/rest_service.h"

namespace flow::serving {
namespace {

// The service name a gRPC health check may ask about besides "" (the whole server).
constexpr const char* kInferenceServiceName = "inference.GRPCInferenceService";
// How long shutdown() lets gRPC connections close by themselves once no request is in flight.
constexpr std::chrono::milliseconds kCloseGrace{2000};

// The models served at first under explicit model control: those named, or with "*" every model
// directory.
std::optional<std::set<std::string>> explicit_models(const ServerOptions& options) {
  if (!options.explicit_model_control) return std::nullopt;
  if (!options.explicit_models.contains("*")) return options.explicit_models;
  return model_directories(options.model_repository);
}

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)), repository_(options_.model_repository, metrics_, explicit_models(options_)) {
  const int failures = repository_.poll();
  LOG(INFO) << "[serving] " << repository_.models().size() << " model version(s) loaded from " << options_.model_repository
            << (failures ? ", " + std::to_string(failures) + " version(s) failed to load" : "");

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  options_.tls.check();
  service_ = std::make_unique<InferenceService>(repository_, tracker_, options_.access);
  grpc::ServerBuilder builder;
  // A port another server holds is an error, not silently shared (gRPC's default on Linux).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options_.address + ":" + std::to_string(options_.grpc_port),
                           grpc_server_credentials(options_.tls), &grpc_port_);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (!grpc_server_ || grpc_port_ == 0) {
    fail("serving", "cannot listen for gRPC on ", options_.address, ":", options_.grpc_port);
  }
  grpc_server_->GetHealthCheckService()->SetServingStatus(kInferenceServiceName, true);
  grpc_server_->GetHealthCheckService()->SetServingStatus(true);

  HttpOptions http;
  http.address = options_.address;
  http.threads = options_.http_threads;
  http.max_body_bytes = static_cast<size_t>(options_.max_message_bytes);
  http.max_connections = options_.http_max_connections;
  http.header_timeout = options_.http_header_timeout;
  http.read_timeout = options_.http_read_timeout;
  http.body_timeout = options_.http_body_timeout;
  http.tls = options_.tls;
  const bool shared_port = options_.http_port > 0 && options_.http_port == options_.metrics_port;
  if (options_.http_port >= 0) {
    http.port = options_.http_port;
    http_endpoint_ = std::make_unique<HttpEndpoint>(http);
    add_kserve_routes(*http_endpoint_, repository_, tracker_, options_.access);
    if (shared_port) add_metrics_route(*http_endpoint_, metrics_.registry(), options_.access);
    http_port_ = http_endpoint_->port();
  }
  if (options_.metrics_port >= 0 && !shared_port) {
    http.port = options_.metrics_port;
    metrics_endpoint_ = std::make_unique<HttpEndpoint>(http);
    add_metrics_route(*metrics_endpoint_, metrics_.registry(), options_.access);
  }
  metrics_port_ = shared_port ? http_port_ : metrics_endpoint_ ? metrics_endpoint_->port() : -1;
  if (http_endpoint_) http_endpoint_->start();
  if (metrics_endpoint_) metrics_endpoint_->start();
  if (options_.repository_poll_interval.count() > 0 && !options_.explicit_model_control) {
    poller_ = std::thread([this] { poll_loop(); });
  }
  LOG(INFO) << "[serving] gRPC on " << options_.address << ":" << grpc_port_ << ", HTTP on port " << http_port_
            << ", metrics on port " << metrics_port_;
}

Server::~Server() { shutdown(); }

void Server::poll_loop() {
  std::unique_lock lock(mutex_);
  while (!changed_.wait_for(lock, options_.repository_poll_interval, [this] { return stopping_; })) {
    lock.unlock();
    repository_.poll();
    lock.lock();
  }
}

void Server::shutdown() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_) {
      changed_.wait(lock, [this] { return stopped_; });
      return;
    }
    stopping_ = true;
  }
  changed_.notify_all();
  LOG(INFO) << "[serving] shutting down: " << tracker_.in_flight() << " request(s) in flight";
  grpc_server_->GetHealthCheckService()->SetServingStatus(false);
  for (const auto& model : repository_.models()) model->scheduler().flush();
  const auto drain_deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  if (!tracker_.drain(options_.shutdown_timeout)) {
    LOG(WARNING) << "[serving] " << tracker_.in_flight() << " request(s) still in flight after the shutdown timeout";
  }
  if (poller_.joinable()) poller_.join();
  // Every inference request has ended (or the timeout passed), but an answer may still sit in the
  // socket's send buffer: closing the connection now, with a client's flow-control update unread,
  // resets it and the client loses the answer. gRPC's graceful shutdown sends GOAWAY and lets
  // clients close first; whatever stays open after the grace period is cancelled.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_deadline - std::chrono::steady_clock::now());
  grpc_server_->Shutdown(std::chrono::system_clock::now() + std::clamp(left, std::chrono::milliseconds(0), kCloseGrace));
  if (http_endpoint_) http_endpoint_->stop();
  repository_.clear();
  if (metrics_endpoint_) metrics_endpoint_->stop();
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  changed_.notify_all();
}

void Server::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return stopped_; });
}

}  // namespace flow::serving
