#include "distributed/store_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "distributed/store.grpc.pb.h"
#include "distributed/store_client.h"

namespace flow::distributed {

namespace pb = flow::distributed::store;

class StoreService final : public pb::Store::Service {
 public:
  explicit StoreService(std::string rdzv_id) : rdzv_id_(std::move(rdzv_id)) {}

  grpc::Status Set(grpc::ServerContext* context, const pb::SetRequest* request, pb::Empty*) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[request->key()] = request->value();
    }
    changed_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context, const pb::GetRequest* request, pb::GetReply* reply) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    std::unique_lock<std::mutex> lock(mutex_);
    grpc::Status status = wait_for_keys(lock, context, std::vector<std::string>{request->key()}, request->timeout_ms());
    if (status.ok()) reply->set_value(values_.at(request->key()));
    return status;
  }

  grpc::Status Add(grpc::ServerContext* context, const pb::AddRequest* request, pb::AddReply* reply) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    int64_t value = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::string& stored = values_[request->key()];
      value = (stored.empty() ? 0 : std::stoll(stored)) + request->delta();
      stored = std::to_string(value);
    }
    changed_.notify_all();
    reply->set_value(value);
    return grpc::Status::OK;
  }

  grpc::Status Check(grpc::ServerContext* context, const pb::KeysRequest* request, pb::CheckReply* reply) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    std::lock_guard<std::mutex> lock(mutex_);
    reply->set_all_set(all_set(request->keys()));
    return grpc::Status::OK;
  }

  grpc::Status Wait(grpc::ServerContext* context, const pb::KeysRequest* request, pb::Empty*) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    std::unique_lock<std::mutex> lock(mutex_);
    return wait_for_keys(lock, context, request->keys(), request->timeout_ms());
  }

  grpc::Status Abort(grpc::ServerContext* context, const pb::AbortRequest* request, pb::Empty*) override {
    if (grpc::Status stranger = check_rdzv_id(context); !stranger.ok()) return stranger;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (abort_message_.empty()) abort_message_ = request->message();
    }
    changed_.notify_all();
    return grpc::Status::OK;
  }

  // Wakes every waiting call so that the server can shut down without waiting out their timeouts.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
  }

 private:
  // A rank of another job (started on this job's MASTER_PORT) must neither read nor change this
  // job's keys, nor abort its rendezvous.
  grpc::Status check_rdzv_id(grpc::ServerContext* context) const {
    const auto& metadata = context->client_metadata();
    const auto found = metadata.find(kRdzvIdMetadata);
    const std::string caller = found == metadata.end() ? "" : std::string(found->second.data(), found->second.size());
    if (caller == rdzv_id_) return grpc::Status::OK;
    return {grpc::StatusCode::FAILED_PRECONDITION,
            detail::concat("it serves ", describe_rdzv_id(rdzv_id_), ", this rank has ", describe_rdzv_id(caller))};
  }

  template <typename Keys>
  bool all_set(const Keys& keys) const {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  }

  template <typename Keys>
  grpc::Status wait_for_keys(std::unique_lock<std::mutex>& lock, grpc::ServerContext* context, const Keys& keys,
                             int64_t timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    // Wakes periodically too, to notice a client that went away.
    constexpr auto kPoll = std::chrono::milliseconds(200);
    while (true) {
      if (!abort_message_.empty()) return {grpc::StatusCode::ABORTED, abort_message_};
      if (all_set(keys)) return grpc::Status::OK;
      if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "the store (rank 0) is shutting down"};
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return {grpc::StatusCode::DEADLINE_EXCEEDED, "timed out"};
      changed_.wait_until(lock, std::min(deadline, now + kPoll));
    }
  }

  const std::string rdzv_id_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  std::string abort_message_;
  bool stopping_ = false;
};

StoreServer::StoreServer(int port, const std::string& rdzv_id) : service_(std::make_unique<StoreService>(rdzv_id)) {
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort("0.0.0.0:" + std::to_string(port), grpc::InsecureServerCredentials(), &bound_port);
  // gRPC sets SO_REUSEPORT by default, which would let two groups share a port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port == 0) {
    fail("init_process_group", "rank 0 cannot serve the rendezvous store on MASTER_PORT=", port,
         ": the port is in use or not allowed (pick another MASTER_PORT)");
  }
}

StoreServer::~StoreServer() {
  service_->stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace flow::distributed
