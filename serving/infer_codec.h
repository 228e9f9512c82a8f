#pragma once
// The one place that checks an inference request against a model, whatever protocol carried it
// (gRPC's ModelInferRequest, REST's JSON and binary data): names, datatypes, shapes and byte
// counts, before anything is allocated. And the model's outputs as both protocols answer them.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oneflow_lite/model.h"

namespace flow::serving {

// One input tensor of a request, as the protocol carries it.
struct RequestInput {
  std::string name;
  std::string datatype;  // KServe name ("FP32", ...)
  std::vector<int64_t> shape;
  // The data: raw little-endian bytes, or, when empty, typed values that `typed` turns into the
  // bytes of `count` elements of a dtype (throwing flow::Error naming `what` when there are not
  // exactly `count` values or one does not fit the dtype). `typed` is called only once the shape
  // is known to be valid, and must check the count before it allocates.
  std::optional<std::string_view> raw;
  std::function<std::string(DType dtype, int64_t count, const std::string& what)> typed;
};

struct DecodedRequest {
  TensorList inputs;            // in the model's input order: CPU, contiguous
  int64_t batch = 0;            // dim 0 of the inputs when the model batches, else 0
  std::vector<size_t> outputs;  // indices into the model's outputs, in the order to answer
};

// Checks the inputs against the model and copies their data into tensors. Throws
// ServingError(INVALID_ARGUMENT), naming `model_label`, the input and what is wrong, for an
// unknown, missing or repeated input, a wrong datatype, a shape of the wrong rank or with a
// dimension that does not fit the model's (-1 takes any size >= 1), a shape whose byte count
// overflows, data that does not hold exactly the shape's bytes or values, an unknown requested
// output, or a batch above max_batch_size (when > 0). No tensor is allocated before its byte
// count matches the data received.
DecodedRequest decode_infer_request(const std::vector<RequestInput>& inputs,
                                    const std::vector<std::string>& requested_outputs, const lite::Model& model,
                                    const std::string& model_label, int64_t max_batch_size);

// An output as the protocols answer it: contiguous on the CPU.
struct ResponseOutput {
  std::string name;
  std::string datatype;
  Tensor tensor;
  std::string_view bytes() const;
};

// outputs[i] for every i in `selected` (indices into the model's outputs), in that order.
std::vector<ResponseOutput> select_outputs(const lite::Model& model, const TensorList& outputs,
                                           const std::vector<size_t>& selected);

}  // namespace flow::serving
