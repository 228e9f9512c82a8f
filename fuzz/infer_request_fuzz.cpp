// serving::decode_infer_request on any bytes parsed as a KServe ModelInferRequest, against two
// real exports in fuzz/data: "cnn" (FP32 images (-1,1,28,28) -> logits) when the request names
// model "cnn", else "dtypes" (one (-1,2) input per KServe datatype but BYTES, identity). Raw and
// typed contents. A flow::Error (ServingError) is a rejection. An accepted request must be what
// the model takes: decoded inputs of the spec dtypes and shapes, batch within max_batch_size, and
// the model runs on them; its outputs encode.
#include <cstdint>

#include "fuzz_util.h"
#include "quiet_protobuf.h"
#include "oneflow_lite/model.h"
#include "serving/infer_codec.h"
#include "serving/inference_service.h"
#include "serving_fuzz.h"

using flow_fuzz::check_decoded;
using flow_fuzz::kMaxBatchSize;
using flow_fuzz::model_named;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const flow::lite::Model& model = model_named(request.model_name());
  flow::serving::DecodedRequest decoded;
  try {
    std::vector<std::string> requested;
    for (const auto& output : request.outputs()) requested.push_back(output.name());
    decoded = flow::serving::decode_infer_request(flow::serving::request_inputs(request, "fuzz"), requested, model, "fuzz",
                                                  kMaxBatchSize);
  } catch (const flow::Error&) {
    return 0;
  }
  check_decoded(decoded, model);
  flow::TensorList outputs;
  try {
    outputs = model.run(decoded.inputs);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    flow_fuzz::invalid_accepted("the model does not run on a decoded request");
  }
  for (const auto& output : flow::serving::select_outputs(model, outputs, decoded.outputs)) {
    if (output.bytes().size() != static_cast<size_t>(output.tensor.nbytes())) flow_fuzz::invalid_accepted("an output encodes to the wrong size");
  }
  return 0;
}
