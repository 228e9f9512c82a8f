#pragma once
// Shared by the serving request targets (infer_request, rest_request): the two real exports in
// fuzz/data they decode against, and the checks on a request decode_infer_request accepted.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "oneflow_lite/model.h"
#include "serving/infer_codec.h"

namespace flow_fuzz {

constexpr int64_t kMaxBatchSize = 8;

// "cnn" (FP32 images (-1,1,28,28) -> logits), or for any other name "dtypes".
inline const flow::lite::Model& model_named(const std::string& name) {
  static const auto cnn = flow::lite::Model::load(flow_fuzz::data_path("cnn").string());
  static const auto dtypes = flow::lite::Model::load(flow_fuzz::data_path("dtypes").string());
  return name == "cnn" ? *cnn : *dtypes;
}

// An accepted request is what the model takes: inputs of the spec dtypes and shapes, batch within
// kMaxBatchSize, requested outputs that exist.
inline void check_decoded(const flow::serving::DecodedRequest& decoded, const flow::lite::Model& model) {
  if (decoded.inputs.size() != model.inputs().size()) invalid_accepted("decoded input count differs from the model's");
  for (size_t i = 0; i < decoded.inputs.size(); ++i) {
    const flow::Tensor& input = decoded.inputs[i];
    const auto& spec = model.inputs()[i];
    if (!input.defined() || input.dtype() != spec.dtype || input.device() != flow::kCPU || !input.is_contiguous()) {
      invalid_accepted("a decoded input of the wrong dtype or device");
    }
    bool matches = input.dim() == static_cast<int64_t>(spec.shape.size());
    for (int64_t d = 0; matches && d < input.dim(); ++d) matches = spec.shape[d] == -1 ? input.size(d) >= 1 : input.size(d) == spec.shape[d];
    if (!matches) invalid_accepted("a decoded input of the wrong shape");
  }
  if (model.dynamic_batch() && (decoded.batch < 1 || decoded.batch > kMaxBatchSize)) invalid_accepted("a batch outside [1, max_batch_size]");
  for (size_t output : decoded.outputs) {
    if (output >= model.outputs().size()) invalid_accepted("a requested output index out of range");
  }
}

}  // namespace flow_fuzz
