#include "distributed/store_client.h"

#include <grpcpp/grpcpp.h>

#include "core/error.h"
#include "distributed/store.grpc.pb.h"

namespace flow::distributed {

namespace pb = flow::distributed::store;

struct StoreClient::Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Store::Stub> stub;
};

namespace {

// Room for the server to answer a wait that timed out before the client gives up on it.
constexpr auto kReplyGrace = std::chrono::seconds(5);

std::string seconds_text(std::chrono::milliseconds duration) {
  return detail::concat(static_cast<double>(duration.count()) / 1000.0, " s");
}

std::string joined(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += (text.empty() ? "'" : ", '") + key + "'";
  return text;
}

}  // namespace

std::string describe_rdzv_id(const std::string& rdzv_id) {
  return rdzv_id.empty() ? "no rendezvous id" : "rendezvous id '" + rdzv_id + "'";
}

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout,
                         std::chrono::milliseconds connect_timeout, std::string rdzv_id)
    : address_(host + ":" + std::to_string(port)),
      timeout_(timeout),
      rdzv_id_(std::move(rdzv_id)),
      connection_(std::make_unique<Connection>()) {
  grpc::ChannelArguments arguments;
  // The store is reached directly; an http_proxy in the environment must not capture it.
  arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Rank 0 may start after the others: retry often instead of gRPC's backoff of up to minutes.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  connection_->channel = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), arguments);
  connection_->stub = pb::Store::NewStub(connection_->channel);
  if (!connection_->channel->WaitForConnected(std::chrono::system_clock::now() + connect_timeout)) {
    throw StoreError(detail::concat("rank 0's rendezvous store at ", address_, " was not reachable within ",
                                    seconds_text(connect_timeout), " (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?)"));
  }
}

StoreClient::~StoreClient() = default;

namespace {

void configure(grpc::ClientContext& context, std::chrono::milliseconds deadline_after, const std::string& rdzv_id) {
  context.set_deadline(std::chrono::system_clock::now() + deadline_after);
  context.set_wait_for_ready(true);
  context.AddMetadata(kRdzvIdMetadata, rdzv_id);
}

// Store calls are rare (rendezvous, sub-group creation), so `what` is built even on success.
void check_status(const grpc::Status& status, const std::string& what, const std::string& address) {
  if (status.ok()) return;
  switch (status.error_code()) {
    case grpc::StatusCode::ABORTED: throw StoreError("the rendezvous was aborted: " + status.error_message());
    case grpc::StatusCode::FAILED_PRECONDITION:
      throw RdzvIdMismatch(detail::concat("the rendezvous store at ", address, " belongs to another job: ",
                                          status.error_message(),
                                          " (were two jobs started on one MASTER_PORT? give each its own)"));
    case grpc::StatusCode::DEADLINE_EXCEEDED: throw StoreError("timed out " + what);
    default:
      throw StoreError(detail::concat("the rendezvous store (rank 0) failed while ", what, ": ", status.error_message()));
  }
}

}  // namespace

void StoreClient::set(const std::string& key, const std::vector<char>& value) {
  set_string(key, std::string(value.begin(), value.end()));
}

void StoreClient::set_string(const std::string& key, const std::string& value,
                             std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  configure(context, timeout.value_or(timeout_), rdzv_id_);
  pb::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  pb::Empty reply;
  check_status(connection_->stub->Set(&context, request, &reply), "setting '" + key + "'", address_);
}

std::vector<char> StoreClient::get(const std::string& key) {
  std::string value = get_string(key, timeout_);
  return {value.begin(), value.end()};
}

std::string StoreClient::get_string(const std::string& key, std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  configure(context, timeout + kReplyGrace, rdzv_id_);
  pb::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(timeout.count());
  pb::GetReply reply;
  check_status(connection_->stub->Get(&context, request, &reply),
               detail::concat("after ", seconds_text(timeout), " waiting for key '", key, "'"), address_);
  return reply.value();
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void StoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  grpc::ClientContext context;
  configure(context, timeout + kReplyGrace, rdzv_id_);
  pb::KeysRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  pb::Empty reply;
  check_status(connection_->stub->Wait(&context, request, &reply),
               detail::concat("after ", seconds_text(timeout), " waiting for keys ", joined(keys)), address_);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  grpc::ClientContext context;
  configure(context, timeout_, rdzv_id_);
  pb::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  pb::AddReply reply;
  check_status(connection_->stub->Add(&context, request, &reply), "adding to '" + key + "'", address_);
  return reply.value();
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  grpc::ClientContext context;
  configure(context, timeout_, rdzv_id_);
  pb::KeysRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  pb::CheckReply reply;
  check_status(connection_->stub->Check(&context, request, &reply), "checking keys " + joined(keys), address_);
  return reply.all_set();
}

void StoreClient::abort(const std::string& message) noexcept {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  context.AddMetadata(kRdzvIdMetadata, rdzv_id_);
  pb::AbortRequest request;
  request.set_message(message);
  pb::Empty reply;
  (void)connection_->stub->Abort(&context, request, &reply);
}

}  // namespace flow::distributed
