#pragma once
// ModelInferRequest -> validated input tensors, and output tensors -> ModelInferResponse.
#include <cstdint>
#include <string>
#include <vector>

#include "oneflow_lite/model.h"
#include "serving/grpc_predict_v2.pb.h"

namespace flow::serving {

struct DecodedRequest {
  TensorList inputs;            // in the model's input order: CPU, contiguous
  int64_t batch = 0;            // dim 0 of the inputs when the model batches, else 0
  std::vector<size_t> outputs;  // indices into the model's outputs, in the order to answer
};

// Checks a request against the model and copies its tensors out of the message. Throws
// ServingError(INVALID_ARGUMENT) naming `model_label` and the input for an unknown, missing or
// repeated input, a wrong datatype or shape, contents that do not match the shape, raw and typed
// contents mixed, an unknown requested output, or a batch above max_batch_size (when > 0).
DecodedRequest decode_infer_request(const inference::ModelInferRequest& request, const lite::Model& model,
                                    const std::string& model_label, int64_t max_batch_size);

// Fills the response's outputs and raw_output_contents with outputs[i] for every i in
// `selected` (indices into the model's outputs), in that order.
void encode_infer_outputs(const lite::Model& model, const TensorList& outputs, const std::vector<size_t>& selected,
                          inference::ModelInferResponse& response);

}  // namespace flow::serving
