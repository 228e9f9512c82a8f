#pragma once
// KServe v2 datatype names ("FP32", "INT64", ...) of flow dtypes, and typed
// InferTensorContents to raw little-endian bytes.
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "serving/grpc_predict_v2.pb.h"

namespace flow::serving {

// The KServe name of a flow dtype.
std::string kserve_datatype(DType dtype);

// The elements of `contents` for a tensor of `dtype` with `count` elements, as raw bytes.
// Throws flow::Error naming `what` (e.g. "input 'x' of model 'm'") when the field for the
// dtype holds another count, or when the dtype has no typed field (FP16, BF16).
std::string typed_contents_to_raw(const inference::InferTensorContents& contents, DType dtype, int64_t count,
                                  const std::string& what);

}  // namespace flow::serving
