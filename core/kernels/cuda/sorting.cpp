// Host side of sorting.cu: sort and topk on CUDA over the input viewed as (outer, n, inner) along
// dim, and multinomial, in the CPU kernels' dtypes, order and draws (core/kernels/cpu/sorting.cpp).
#include <optional>

#include "core/kernels/cuda/host.h"
#include "core/op.h"

namespace flow::cuda {
namespace {

void select(KernelContext& ctx, int64_t dim, int64_t k, bool descending, const char* op) {
  const Tensor& input = ctx.inputs[0];
  set_device(input, op);
  const MiddleView view = along(input, dim);
  check(sort_lines(scalar_type(input.dtype(), op), view.outer, view.n, view.inner, k, descending, input.data_ptr(), ctx.outputs[0].data_ptr(),
                   static_cast<int64_t*>(ctx.outputs[1].data_ptr())),
        op);
}

void sort_kernel(KernelContext& ctx) {
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const int64_t n = ctx.inputs[0].dim() == 0 ? 1 : ctx.inputs[0].size(dim);
  select(ctx, dim, n, ctx.attrs.get<bool>("descending"), "sort");
}

// Unsorted, the CPU leaves the k chosen in nth_element's order, which no caller may rely on; these
// come sorted.
void topk_kernel(KernelContext& ctx) {
  // A 0-d input's result is 0-d, its one element, whether k is 1 or 0 (PyTorch copies it).
  const int64_t k = ctx.inputs[0].dim() == 0 ? 1 : ctx.attrs.get<int64_t>("k");
  select(ctx, ctx.attrs.get<int64_t>("dim"), k, ctx.attrs.get<bool>("largest"), "topk");
}

// The CPU kernel's messages (PyTorch's) for a failure multinomial() recorded.
[[noreturn]] void fail_multinomial(MultinomialFailure failure) {
  switch (failure) {
    case MultinomialFailure::kNotFiniteOrNegative: fail("multinomial", "probability tensor contains either `inf`, `nan` or element < 0");
    case MultinomialFailure::kNegativeEntry: fail("multinomial", "invalid multinomial distribution (encountering probability entry < 0)");
    case MultinomialFailure::kNonFiniteEntry:
      fail("multinomial", "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
    default: fail("multinomial", "invalid multinomial distribution (sum of probabilities <= 0)");
  }
}

// Reads the weights on the device; their check is read back after the launch (a synchronising
// copy), since the CPU kernel fails at the call.
void multinomial_kernel(KernelContext& ctx) {
  const char* op = "multinomial";
  const Tensor& input = ctx.inputs[0];
  set_device(input, op);
  const int64_t categories = input.size(-1), rows = input.dim() == 2 ? input.size(0) : 1;
  const int64_t num_samples = ctx.attrs.get<int64_t>("num_samples");
  const bool replacement = ctx.attrs.get<bool>("replacement");
  Tensor workspace = make_tensor({rows * categories}, kFloat64, input.device());
  const Tensor error = error_cell(input, op);
  check(multinomial(scalar_type(input.dtype(), op), rows, categories, num_samples, replacement, replacement && num_samples > 1,
                    static_cast<uint64_t>(ctx.attrs.get<int64_t>("seed")), static_cast<uint64_t>(ctx.attrs.get<int64_t>("offset")),
                    input.data_ptr(), static_cast<double*>(workspace.data_ptr()), static_cast<int64_t*>(ctx.outputs[0].data_ptr()),
                    static_cast<int64_t*>(error.data_ptr())),
        op);
  if (const std::optional<int64_t> recorded = recorded_error(error, op)) fail_multinomial(static_cast<MultinomialFailure>(*recorded & 7));
}

FLOW_REGISTER_KERNEL("sort", DeviceType::kCUDA, numeric_dtypes(), sort_kernel);
FLOW_REGISTER_KERNEL("topk", DeviceType::kCUDA, numeric_dtypes(), topk_kernel);
FLOW_REGISTER_KERNEL("multinomial", DeviceType::kCUDA, floating_dtypes(), multinomial_kernel);

}  // namespace
}  // namespace flow::cuda
