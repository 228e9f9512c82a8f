#include "serving/infer_codec.h"

#include <cstring>

#include "core/bool_bytes.h"
#include "serving/datatype.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

using grpc::StatusCode;

template <typename Specs>
std::string spec_names(const Specs& specs) {
  std::string names;
  for (const auto& spec : specs) names += (names.empty() ? "" : ", ") + spec.name;
  return names;
}

// A request's shape for a message: a shape of any rank may arrive, the message stays short.
std::string shape_text(const std::vector<int64_t>& dims) {
  constexpr size_t kShown = 8;
  if (dims.size() <= kShown) return Shape(dims).str();
  std::string text = "(";
  for (size_t d = 0; d < kShown; ++d) text += std::to_string(dims[d]) + ",";
  return text + "... " + std::to_string(dims.size()) + " dimensions)";
}

// The shape must have the spec's rank and match it in every dimension; -1 in the spec takes any
// size >= 1. The message names the first dimension that does not fit and why.
void check_shape(const RequestInput& input, const lite::TensorSpec& spec, const std::string& what) {
  const Shape expected(spec.shape);
  if (input.shape.size() != spec.shape.size()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": shape ", shape_text(input.shape), " has ", input.shape.size(),
                " dimensions, the model's ", expected.str(), " has ", spec.shape.size());
  }
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    const int64_t got = input.shape[d];
    const int64_t want = spec.shape[d];
    if (want == -1 && got < 1) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": dimension ", d, " of shape ", shape_text(input.shape), " is ",
                  got, "; it is variable in the model's shape ", expected.str(), " and must be at least 1");
    }
    if (want != -1 && got != want) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": dimension ", d, " of shape ", shape_text(input.shape), " is ",
                  got, "; the model's shape ", expected.str(), " needs ", want);
    }
  }
}

// The input's data as a tensor of `shape`: the byte count (overflow-checked) is compared with
// the data before the tensor is allocated.
Tensor input_tensor(const RequestInput& input, const Shape& shape, DType dtype, const std::string& what) {
  int64_t nbytes = 0;
  try {
    nbytes = shape.nbytes(itemsize(dtype), "serving");
  } catch (const Error&) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": shape ", shape.str(), " of ", input.datatype,
                " has more bytes than int64 can count");
  }
  std::string typed_bytes;
  std::string_view bytes;
  if (input.raw) {
    bytes = *input.raw;
  } else {
    try {
      typed_bytes = input.typed(dtype, shape.numel(), what);
    } catch (const ServingError&) {
      throw;
    } catch (const Error& error) {
      throw ServingError(StatusCode::INVALID_ARGUMENT, error.what());
    }
    bytes = typed_bytes;
  }
  if (bytes.size() != static_cast<uint64_t>(nbytes)) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": shape ", shape.str(), " of ", input.datatype, " needs ", nbytes,
                " bytes, got ", bytes.size());
  }
  if (dtype == kBool) {
    if (const std::optional<int> invalid = find_non_boolean_byte(bytes)) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": BOOL data holds the byte ", *invalid, " (only 0 and 1 are booleans)");
    }
  }
  Tensor tensor = make_tensor(shape, dtype, kCPU);
  if (nbytes > 0) std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  return tensor;
}

}  // namespace

DecodedRequest decode_infer_request(const std::vector<RequestInput>& inputs,
                                    const std::vector<std::string>& requested_outputs, const lite::Model& model,
                                    const std::string& model_label, int64_t max_batch_size) {
  const auto& specs = model.inputs();
  DecodedRequest decoded;
  decoded.inputs.resize(specs.size());
  for (const RequestInput& input : inputs) {
    const std::string what = model_label + ", input '" + input.name + "'";
    size_t index = 0;
    while (index < specs.size() && specs[index].name != input.name) ++index;
    if (index == specs.size()) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": no such input (inputs: ", spec_names(specs), ")");
    }
    if (decoded.inputs[index].defined()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": given twice");
    const lite::TensorSpec& spec = specs[index];
    if (input.datatype != kserve_datatype(spec.dtype)) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": expected datatype ", kserve_datatype(spec.dtype), ", got '",
                  input.datatype, "'");
    }
    check_shape(input, spec, what);
    decoded.inputs[index] = input_tensor(input, Shape(input.shape), spec.dtype, what);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!decoded.inputs[i].defined()) {
      fail_status(StatusCode::INVALID_ARGUMENT, model_label, ", input '", specs[i].name, "': missing");
    }
  }

  if (model.dynamic_batch()) {
    decoded.batch = decoded.inputs[0].size(0);
    for (size_t i = 1; i < specs.size(); ++i) {
      if (decoded.inputs[i].size(0) != decoded.batch) {
        fail_status(StatusCode::INVALID_ARGUMENT, model_label, ", input '", specs[i].name, "': batch size ",
                    decoded.inputs[i].size(0), " differs from input '", specs[0].name, "' (", decoded.batch, ")");
      }
    }
    if (max_batch_size > 0 && decoded.batch > max_batch_size) {
      fail_status(StatusCode::INVALID_ARGUMENT, model_label, ", input '", specs[0].name, "': batch size ",
                  decoded.batch, " exceeds max_batch_size ", max_batch_size);
    }
  }

  const auto& output_specs = model.outputs();
  for (const std::string& requested : requested_outputs) {
    size_t index = 0;
    while (index < output_specs.size() && output_specs[index].name != requested) ++index;
    if (index == output_specs.size()) {
      fail_status(StatusCode::INVALID_ARGUMENT, model_label, ", output '", requested,
                  "': no such output (outputs: ", spec_names(output_specs), ")");
    }
    decoded.outputs.push_back(index);
  }
  if (decoded.outputs.empty()) {
    for (size_t i = 0; i < output_specs.size(); ++i) decoded.outputs.push_back(i);
  }
  return decoded;
}

std::string_view ResponseOutput::bytes() const {
  return {static_cast<const char*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()) * itemsize(tensor.dtype())};
}

std::vector<ResponseOutput> select_outputs(const lite::Model& model, const TensorList& outputs,
                                           const std::vector<size_t>& selected) {
  std::vector<ResponseOutput> answer;
  for (size_t index : selected) {
    Tensor tensor = outputs[index].cpu().contiguous();
    answer.push_back({model.outputs()[index].name, kserve_datatype(tensor.dtype()), std::move(tensor)});
  }
  return answer;
}

}  // namespace flow::serving
