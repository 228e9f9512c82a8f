#include "serving/infer_codec.h"

#include <cstring>

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

std::string shape_str(const google::protobuf::RepeatedField<int64_t>& shape) {
  return Shape(shape.begin(), shape.end()).str();
}

// The shape must have the spec's rank and match it in every dimension but a -1 one.
void check_shape(const inference::ModelInferRequest::InferInputTensor& input, const lite::TensorSpec& spec,
                 const std::string& what) {
  bool ok = input.shape_size() == static_cast<int>(spec.shape.size());
  for (int d = 0; ok && d < input.shape_size(); ++d) {
    const int64_t expected = spec.shape[static_cast<size_t>(d)];
    ok = expected == -1 ? input.shape(d) >= 1 : input.shape(d) == expected;
  }
  if (!ok) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": expected shape ", Shape(spec.shape).str(), " (-1: any size), got ",
                shape_str(input.shape()));
  }
}

Tensor tensor_from_bytes(const std::string& bytes, const Shape& shape, DType dtype, const std::string& what) {
  Tensor tensor = make_tensor(shape, dtype, kCPU);
  const size_t expected = static_cast<size_t>(shape.numel()) * itemsize(dtype);
  if (bytes.size() != expected) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": shape ", shape.str(), " of ", kserve_datatype(dtype), " needs ",
                expected, " bytes, got ", bytes.size());
  }
  if (expected > 0) std::memcpy(tensor.data_ptr(), bytes.data(), expected);
  return tensor;
}

}  // namespace

DecodedRequest decode_infer_request(const inference::ModelInferRequest& request, const lite::Model& model,
                                    const std::string& model_label, int64_t max_batch_size) {
  const auto& specs = model.inputs();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    fail_status(StatusCode::INVALID_ARGUMENT, model_label, ": ", request.inputs_size(), " inputs but ",
                request.raw_input_contents_size(), " raw_input_contents");
  }

  DecodedRequest decoded;
  decoded.inputs.resize(specs.size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const std::string what = model_label + ", input '" + input.name() + "'";
    size_t index = 0;
    while (index < specs.size() && specs[index].name != input.name()) ++index;
    if (index == specs.size()) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": no such input (inputs: ", spec_names(specs), ")");
    }
    if (decoded.inputs[index].defined()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": given twice");
    const lite::TensorSpec& spec = specs[index];
    if (input.datatype() != kserve_datatype(spec.dtype)) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": expected datatype ", kserve_datatype(spec.dtype), ", got '",
                  input.datatype(), "'");
    }
    check_shape(input, spec, what);
    const Shape shape(input.shape().begin(), input.shape().end());
    if (raw && input.has_contents()) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": typed contents in a request using raw_input_contents");
    }
    if (raw) {
      decoded.inputs[index] = tensor_from_bytes(request.raw_input_contents(i), shape, spec.dtype, what);
    } else {
      try {
        decoded.inputs[index] = tensor_from_bytes(
            typed_contents_to_raw(input.contents(), spec.dtype, shape.numel(), what), shape, spec.dtype, what);
      } catch (const ServingError&) {
        throw;
      } catch (const Error& error) {
        throw ServingError(StatusCode::INVALID_ARGUMENT, error.what());
      }
    }
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
  for (const auto& requested : request.outputs()) {
    size_t index = 0;
    while (index < output_specs.size() && output_specs[index].name != requested.name()) ++index;
    if (index == output_specs.size()) {
      fail_status(StatusCode::INVALID_ARGUMENT, model_label, ", output '", requested.name(),
                  "': no such output (outputs: ", spec_names(output_specs), ")");
    }
    decoded.outputs.push_back(index);
  }
  if (decoded.outputs.empty()) {
    for (size_t i = 0; i < output_specs.size(); ++i) decoded.outputs.push_back(i);
  }
  return decoded;
}

void encode_infer_outputs(const lite::Model& model, const TensorList& outputs, const std::vector<size_t>& selected,
                          inference::ModelInferResponse& response) {
  for (size_t index : selected) {
    const Tensor tensor = outputs[index].cpu().contiguous();
    auto* output = response.add_outputs();
    output->set_name(model.outputs()[index].name);
    output->set_datatype(kserve_datatype(tensor.dtype()));
    for (int64_t dim : tensor.shape()) output->add_shape(dim);
    const size_t nbytes = static_cast<size_t>(tensor.numel()) * itemsize(tensor.dtype());
    response.add_raw_output_contents()->assign(static_cast<const char*>(tensor.data_ptr()), nbytes);
  }
}

}  // namespace flow::serving
