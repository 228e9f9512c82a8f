#pragma once
// FLOP counting shared by op families whose ops visit each input element once (pooling,
// reductions, softmax): one operation per element of input 0, as Colossal-AI's profiler counts
// them. Element-wise ops count their outputs instead (flops::elementwise, core/op.h).
#include <vector>

#include "core/op.h"

namespace flow::flops {

inline int64_t per_input_element(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>&, const Attrs&) {
  return inputs.at(0).shape.numel();
}

}  // namespace flow::flops
