#pragma once
// inference.GRPCInferenceService (KServe v2) on the callback API: metadata and health answer on
// gRPC's threads; ModelInfer validates there and hands the request to the model's scheduler,
// whose thread finishes the call. ModelStreamInfer (serving/stream_infer.h) answers each request
// of its stream the same way, one response per request.
#include <optional>
#include <string>
#include <vector>

#include "serving/model_repository.h"
#include "serving/grpc_predict_v2.grpc.pb.h"
#include "serving/infer_codec.h"
#include "serving/request_tracker.h"
#include "serving/security.h"

namespace flow::serving {

// The request's inputs for decode_infer_request, their data in raw_input_contents or in typed
// contents (mixing the two is an error of this protocol's encoding: ServingError).
std::vector<RequestInput> request_inputs(const inference::ModelInferRequest& request, const std::string& model_label);

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `access` must outlive the service: calls without its bearer token get UNAUTHENTICATED.
  InferenceService(ModelRepository& repository, RequestTracker& tracker, const AccessPolicy& access)
      : repository_(repository), tracker_(tracker), access_(access) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context, const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context, const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                const inference::RepositoryModelLoadRequest* request,
                                                inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* context,
                                                  const inference::RepositoryModelUnloadRequest* request,
                                                  inference::RepositoryModelUnloadResponse* response) override;

 private:
  // UNAUTHENTICATED when the call lacks the token it needs (`health`: ServerLive, ServerReady).
  std::optional<grpc::Status> refusal(const grpc::CallbackServerContext* context, bool health) const;

  ModelRepository& repository_;
  RequestTracker& tracker_;
  const AccessPolicy& access_;
};

}  // namespace flow::serving
