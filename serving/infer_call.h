#pragma once
// One inference call of either protocol (gRPC or REST), from the model lookup to the answer: the
// request is decoded and validated, queued on the model's scheduler, and answered, with the
// model's metrics counted the same way whichever protocol carried it.
#include <functional>
#include <string>
#include <vector>

#include "serving/infer_codec.h"
#include "serving/model_repository.h"

namespace flow::serving {

struct InferCall {
  std::string model_name;
  std::string model_version;  // empty: the newest served
  // The request's inputs checked against the served model (decode_infer_request on what the
  // protocol carried). Throws ServingError.
  std::function<DecodedRequest(const ServedModel&)> decode;
  // Whether the client has gone (cancelled, deadline passed): the request is dropped, not run.
  std::function<bool()> cancelled;
  // Writes the outputs into the protocol's response, on a scheduler thread. May throw: the call
  // then fails with INTERNAL.
  std::function<void(const ServedModel&, std::vector<ResponseOutput>)> respond;
  // Sends the answer. Called exactly once: on the calling thread when the call fails before it is
  // queued, else on a scheduler thread once the model has run.
  std::function<void(const grpc::Status&)> finish;
};

// Looks the model up, decodes the request and queues it. Never throws: every failure goes to
// call.finish.
void start_infer(ModelRepository& repository, InferCall call);

}  // namespace flow::serving
