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

namespace {

constexpr int64_t kMaxBatchSize = 8;

const flow::lite::Model& model_named(const std::string& name) {
  static const auto cnn = flow::lite::Model::load(flow_fuzz::data_path("cnn").string());
  static const auto dtypes = flow::lite::Model::load(flow_fuzz::data_path("dtypes").string());
  return name == "cnn" ? *cnn : *dtypes;
}

void check_decoded(const flow::serving::DecodedRequest& decoded, const flow::lite::Model& model) {
  if (decoded.inputs.size() != model.inputs().size()) flow_fuzz::invalid_accepted("decoded input count differs from the model's");
  for (size_t i = 0; i < decoded.inputs.size(); ++i) {
    const flow::Tensor& input = decoded.inputs[i];
    const auto& spec = model.inputs()[i];
    if (!input.defined() || input.dtype() != spec.dtype || input.device() != flow::kCPU || !input.is_contiguous()) {
      flow_fuzz::invalid_accepted("a decoded input of the wrong dtype or device");
    }
    bool matches = input.dim() == static_cast<int64_t>(spec.shape.size());
    for (int64_t d = 0; matches && d < input.dim(); ++d) matches = spec.shape[d] == -1 ? input.size(d) >= 1 : input.size(d) == spec.shape[d];
    if (!matches) flow_fuzz::invalid_accepted("a decoded input of the wrong shape");
  }
  if (model.dynamic_batch() && (decoded.batch < 1 || decoded.batch > kMaxBatchSize)) flow_fuzz::invalid_accepted("a batch outside [1, max_batch_size]");
  for (size_t output : decoded.outputs) {
    if (output >= model.outputs().size()) flow_fuzz::invalid_accepted("a requested output index out of range");
  }
}

}  // namespace

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
