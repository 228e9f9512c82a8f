#include "serving/client.h"

#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "serving/text_file.h"

namespace flow::serving {
namespace {

// Calls fn.template operator()<T>() with the C++ element type of a KServe datatype.
template <typename Fn>
auto visit_datatype(const std::string& datatype, Fn&& fn) {
  if (datatype == "BOOL") return fn.template operator()<bool>();
  if (datatype == "UINT8") return fn.template operator()<uint8_t>();
  if (datatype == "UINT16") return fn.template operator()<uint16_t>();
  if (datatype == "UINT32") return fn.template operator()<uint32_t>();
  if (datatype == "UINT64") return fn.template operator()<uint64_t>();
  if (datatype == "INT8") return fn.template operator()<int8_t>();
  if (datatype == "INT16") return fn.template operator()<int16_t>();
  if (datatype == "INT32") return fn.template operator()<int32_t>();
  if (datatype == "INT64") return fn.template operator()<int64_t>();
  if (datatype == "FP16") return fn.template operator()<Half>();
  if (datatype == "BF16") return fn.template operator()<BFloat16>();
  if (datatype == "FP32") return fn.template operator()<float>();
  if (datatype == "FP64") return fn.template operator()<double>();
  fail("client", "datatype '", datatype, "' has no fixed element size");
}

}  // namespace

Client::Client(const std::string& target, ClientOptions options) : options_(options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_message_bytes);
  arguments.SetMaxSendMessageSize(options_.max_message_bytes);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = read_text_file("client", options_.tls_ca_file, "TLS CA");
    if (!options_.tls_cert_file.empty()) tls.pem_cert_chain = read_text_file("client", options_.tls_cert_file, "TLS certificate");
    if (!options_.tls_key_file.empty()) tls.pem_private_key = read_text_file("client", options_.tls_key_file, "TLS private key");
    credentials = grpc::SslCredentials(tls);
  }
  channel_ = grpc::CreateCustomChannel(target, credentials, arguments);
  stub_ = inference::GRPCInferenceService::NewStub(channel_);
  health_stub_ = grpc::health::v1::Health::NewStub(channel_);
}

void Client::prepare(grpc::ClientContext& context) const {
  if (options_.timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
}

template <typename Response, typename Request, typename Method>
Response Client::call(Method method, const Request& request, const char* what) {
  grpc::ClientContext context;
  prepare(context);
  Response response;
  const grpc::Status status = method(&context, request, &response);
  if (!status.ok()) throw RpcError(status.error_code(), std::string(what) + ": " + status.error_message());
  return response;
}

bool Client::server_live() {
  return call<inference::ServerLiveResponse>(
             [this](auto* c, const auto& q, auto* r) { return stub_->ServerLive(c, q, r); },
             inference::ServerLiveRequest(), "ServerLive")
      .live();
}

bool Client::server_ready() {
  return call<inference::ServerReadyResponse>(
             [this](auto* c, const auto& q, auto* r) { return stub_->ServerReady(c, q, r); },
             inference::ServerReadyRequest(), "ServerReady")
      .ready();
}

bool Client::model_ready(const std::string& model, const std::string& version) {
  inference::ModelReadyRequest request;
  request.set_name(model);
  request.set_version(version);
  return call<inference::ModelReadyResponse>(
             [this](auto* c, const auto& q, auto* r) { return stub_->ModelReady(c, q, r); }, request, "ModelReady")
      .ready();
}

inference::ServerMetadataResponse Client::server_metadata() {
  return call<inference::ServerMetadataResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ServerMetadata(c, q, r); },
      inference::ServerMetadataRequest(), "ServerMetadata");
}

inference::ModelMetadataResponse Client::model_metadata(const std::string& model, const std::string& version) {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  request.set_version(version);
  return call<inference::ModelMetadataResponse>(
      [this](auto* c, const auto& q, auto* r) { return stub_->ModelMetadata(c, q, r); }, request, "ModelMetadata");
}

grpc::health::v1::HealthCheckResponse::ServingStatus Client::health(const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  return call<grpc::health::v1::HealthCheckResponse>(
             [this](auto* c, const auto& q, auto* r) { return health_stub_->Check(c, q, r); }, request, "Health/Check")
      .status();
}

grpc::Status Client::infer(const inference::ModelInferRequest& request, inference::ModelInferResponse& response) {
  grpc::ClientContext context;
  prepare(context);
  return stub_->ModelInfer(&context, request, &response);
}

std::vector<WireTensor> Client::infer(const std::string& model, const std::vector<WireTensor>& inputs,
                                      const std::vector<std::string>& outputs, const std::string& version) {
  inference::ModelInferResponse response;
  const grpc::Status status = infer(make_infer_request(model, inputs, outputs, version), response);
  if (!status.ok()) throw RpcError(status.error_code(), "ModelInfer: " + status.error_message());
  return response_outputs(response);
}

void Client::infer_async(const inference::ModelInferRequest& request,
                         std::function<void(const grpc::Status&, const inference::ModelInferResponse&)> done) {
  struct Call {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    std::function<void(const grpc::Status&, const inference::ModelInferResponse&)> done;
  };
  auto* call = new Call;
  call->done = std::move(done);
  prepare(call->context);
  stub_->async()->ModelInfer(&call->context, &request, &call->response, [call](grpc::Status status) {
    auto done = std::move(call->done);
    const inference::ModelInferResponse response = std::move(call->response);
    // The context goes first: it holds a reference to the channel, and the last one must not be
    // dropped here, on one of gRPC's callback threads, once the caller has let the Client go
    // (gRPC 1.51 then shuts its callback queue down under this very thread).
    delete call;
    done(status, response);
  });
}

inference::ModelInferRequest make_infer_request(const std::string& model, const std::vector<WireTensor>& inputs,
                                                const std::vector<std::string>& outputs, const std::string& version,
                                                const std::string& id) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  request.set_id(id);
  for (const WireTensor& tensor : inputs) {
    auto* input = request.add_inputs();
    input->set_name(tensor.name);
    input->set_datatype(tensor.datatype);
    for (int64_t dim : tensor.shape) input->add_shape(dim);
    request.add_raw_input_contents(tensor.data);
  }
  for (const std::string& name : outputs) request.add_outputs()->set_name(name);
  return request;
}

std::vector<WireTensor> response_outputs(const inference::ModelInferResponse& response) {
  std::vector<WireTensor> outputs;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    WireTensor tensor{output.name(), output.datatype(), {output.shape().begin(), output.shape().end()}, {}};
    if (i < response.raw_output_contents_size()) tensor.data = response.raw_output_contents(i);
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

std::string encode_values(const std::string& datatype, const std::vector<double>& values) {
  return visit_datatype(datatype, [&]<typename T>() {
    std::string data(values.size() * sizeof(T), '\0');
    for (size_t i = 0; i < values.size(); ++i) {
      T element;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        element = T(static_cast<float>(values[i]));
      } else {
        element = static_cast<T>(values[i]);
      }
      std::memcpy(data.data() + i * sizeof(T), &element, sizeof(T));
    }
    return data;
  });
}

std::vector<double> decode_values(const std::string& datatype, const std::string& data) {
  return visit_datatype(datatype, [&]<typename T>() {
    std::vector<double> values(data.size() / sizeof(T));
    for (size_t i = 0; i < values.size(); ++i) {
      T element;
      std::memcpy(&element, data.data() + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        values[i] = static_cast<float>(element);
      } else {
        values[i] = static_cast<double>(element);
      }
    }
    return values;
  });
}

WireTensor input_for(const inference::ModelMetadataResponse::TensorMetadata& spec, int64_t batch, int64_t& count) {
  WireTensor tensor{spec.name(), spec.datatype(), {}, {}};
  count = 1;
  for (int64_t dim : spec.shape()) {
    tensor.shape.push_back(dim < 0 ? batch : dim);
    count *= tensor.shape.back();
  }
  return tensor;
}

}  // namespace flow::serving
