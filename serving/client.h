#pragma once
// C++ client of the KServe v2 gRPC protocol (flow_serve, Triton, KServe servers): health,
// metadata and inference, blocking or asynchronous.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "serving/grpc_predict_v2.grpc.pb.h"
#include "serving/health.grpc.pb.h"

namespace flow::serving {

// A tensor as the protocol carries it: row-major little-endian bytes of a KServe datatype.
struct WireTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string data;
};

// A call that did not end with OK.
class RpcError : public Error {
 public:
  RpcError(grpc::StatusCode code, const std::string& message) : Error(message), code_(code) {}
  grpc::StatusCode code() const { return code_; }

 private:
  grpc::StatusCode code_;
};

struct ClientOptions {
  int max_message_bytes = 512 << 20;
  std::chrono::milliseconds timeout{0};  // per call; 0: no deadline
  // TLS: the CA that signed the server's certificate (set: the channel speaks TLS), and for
  // mutual TLS this client's certificate and key. PEM files.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string token;  // sent as "authorization: Bearer <token>" on every call made through call()/infer()
};

class Client {
 public:
  // target: "host:port".
  explicit Client(const std::string& target, ClientOptions options = {});

  // Health and metadata; they throw RpcError when the call fails.
  bool server_live();
  bool server_ready();
  bool model_ready(const std::string& model, const std::string& version = "");
  inference::ServerMetadataResponse server_metadata();
  inference::ModelMetadataResponse model_metadata(const std::string& model, const std::string& version = "");
  // grpc.health.v1.Health/Check; service "" is the whole server.
  grpc::health::v1::HealthCheckResponse::ServingStatus health(const std::string& service = "");

  // Inference in protocol terms: returns the call's status instead of throwing.
  grpc::Status infer(const inference::ModelInferRequest& request, inference::ModelInferResponse& response);
  // Inference with raw tensors; `outputs` empty asks for every output. Throws RpcError.
  std::vector<WireTensor> infer(const std::string& model, const std::vector<WireTensor>& inputs,
                                const std::vector<std::string>& outputs = {}, const std::string& version = "");
  // Starts an inference; `done` runs once, on a gRPC thread, when it ends. `request` must stay
  // alive until then.
  void infer_async(const inference::ModelInferRequest& request,
                   std::function<void(const grpc::Status&, const inference::ModelInferResponse&)> done);

  inference::GRPCInferenceService::Stub& stub() { return *stub_; }

 private:
  void prepare(grpc::ClientContext& context) const;
  template <typename Response, typename Request, typename Method>
  Response call(Method method, const Request& request, const char* what);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
};

// A ModelInferRequest carrying `inputs` in raw_input_contents.
// An input of the model's metadata with its shape (-1 replaced by `batch`), without data; count
// receives its element count.
WireTensor input_for(const inference::ModelMetadataResponse::TensorMetadata& spec, int64_t batch, int64_t& count);

inference::ModelInferRequest make_infer_request(const std::string& model, const std::vector<WireTensor>& inputs,
                                                const std::vector<std::string>& outputs = {},
                                                const std::string& version = "", const std::string& id = "");
// The response's outputs with their raw contents.
std::vector<WireTensor> response_outputs(const inference::ModelInferResponse& response);

// Element conversions for the CLI and tests: values as doubles to a datatype's bytes and back.
// Throws flow::Error for a datatype without a fixed element size (BYTES, unknown).
std::string encode_values(const std::string& datatype, const std::vector<double>& values);
std::vector<double> decode_values(const std::string& datatype, const std::string& data);

}  // namespace flow::serving
