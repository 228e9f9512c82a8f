// Host side of the CUDA reductions, softmax, gather/scatter and the fused SGD update
// (reduce_index.cu): views the contiguous inputs as (outer, n, inner), checks indices after the
// launch, and registers the kernels for DeviceType::kCUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"
#include "core/ops/copy.h"

namespace flow::cuda {
namespace {

struct MiddleView {
  int64_t outer = 1, n = 1, inner = 1;
};

// The (outer, n, inner) view of a contiguous tensor reduced along dims [first, last].
MiddleView middle_view(const Shape& shape, int64_t first, int64_t last) {
  MiddleView view;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (d < first) view.outer *= shape[d];
    else if (d <= last) view.n *= shape[d];
    else view.inner *= shape[d];
  }
  return view;
}

// reduce_sum over sorted unique dims. Adjacent dims reduce in place; others are first moved
// last by a permuted copy.
void sum_kernel(KernelContext& ctx) {
  Tensor input = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, "sum");
  const auto& dims = ctx.attrs.get<std::vector<int64_t>>("dims");
  MiddleView view;
  if (dims.empty()) {
    view.outer = input.numel();
  } else if (dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size())) {
    view = middle_view(input.shape(), dims.front(), dims.back());
  } else {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < input.dim(); ++d) {
      if (!std::binary_search(dims.begin(), dims.end(), d)) order.push_back(d);
    }
    const auto kept = static_cast<int64_t>(order.size());
    order.insert(order.end(), dims.begin(), dims.end());
    input = detail::contiguous_copy(input.permute(order));
    view = middle_view(input.shape(), kept, input.dim() - 1);
  }
  check(sum_middle(scalar_type(input.dtype(), "sum"), view.outer, view.n, view.inner, input.data_ptr(), out.data_ptr()), "sum");
}

// The (outer, n, inner) view along one dim; a 0-d tensor is one element.
MiddleView along(const Tensor& input, int64_t dim) {
  return input.dim() == 0 ? MiddleView{} : middle_view(input.shape(), dim, dim);
}

void argmax_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, "argmax");
  const MiddleView view = along(input, ctx.attrs.get<int64_t>("dim"));
  check(argmax_middle(scalar_type(input.dtype(), "argmax"), view.outer, view.n, view.inner, input.data_ptr(),
                      static_cast<int64_t*>(out.data_ptr())),
        "argmax");
}

template <bool log_output>
void softmax_kernel(KernelContext& ctx) {
  const char* op = log_output ? "log_softmax" : "softmax";
  const Tensor& input = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, op);
  const MiddleView view = along(input, ctx.attrs.get<int64_t>("dim"));
  check(softmax_middle(scalar_type(input.dtype(), op), log_output, view.outer, view.n, view.inner, input.data_ptr(), out.data_ptr()), op);
}

// Contiguous strides of `shape`; a 0-d tensor counts as 1-d of size 1.
Strides unit_strides(const Shape& shape) { return shape.ndim() == 0 ? Strides{1} : contiguous_strides(shape); }

IndexGeometry index_geometry(const Tensor& index, const Tensor& target, const Tensor& other, int64_t dim, const char* op) {
  IndexGeometry g;
  const int64_t ndim = std::max<int64_t>(index.dim(), 1);
  if (ndim > kMaxDims) fail(op, "CUDA kernels support up to ", kMaxDims, " dimensions, got ", ndim);
  g.ndim = static_cast<int>(ndim);
  g.dim = static_cast<int>(dim);
  g.dim_size = target.dim() == 0 ? 1 : target.size(dim);
  const Strides target_strides = unit_strides(target.shape()), other_strides = unit_strides(other.shape());
  for (int64_t d = 0; d < ndim; ++d) {
    g.index_sizes[d] = index.dim() == 0 ? 1 : index.size(d);
    g.target_strides[d] = target_strides[static_cast<size_t>(d)];
    g.other_strides[d] = other_strides[static_cast<size_t>(d)];
  }
  return g;
}

// Raises the first out-of-range index a gather or scatter launch recorded (a synchronising copy:
// the CPU kernels fail at the call, so these do too).
void check_indices(const Tensor& error, int64_t dim, int64_t size, const char* op) {
  int64_t recorded[2] = {0, 0};
  if (cudaMemcpy(recorded, error.data_ptr(), sizeof(recorded), cudaMemcpyDeviceToHost) != cudaSuccess) {
    fail(op, "CUDA kernel failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  if (recorded[0] != 0) fail(op, "index ", recorded[1], " is out of bounds for dimension ", dim, " with size ", size);
}

Tensor error_cell(const Tensor& like, const char* op) {
  Tensor error = make_tensor({2}, kInt64, like.device());
  check(fill(ScalarType::kInt64, error.data_ptr(), 2, 0.0), op);
  return error;
}

void gather_kernel(KernelContext& ctx) {
  const Tensor &input = ctx.inputs[0], &index = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  set_device(out, "gather");
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const IndexGeometry g = index_geometry(index, input, out, dim, "gather");
  const Tensor error = error_cell(out, "gather");
  check(gather(scalar_type(input.dtype(), "gather"), index.dtype() == kInt64, g, input.data_ptr(), index.data_ptr(), out.data_ptr(),
               static_cast<int64_t*>(error.data_ptr())),
        "gather");
  check_indices(error, dim, g.dim_size, "gather");
}

void scatter_kernel(KernelContext& ctx) {
  // The scatter ops hand their inputs with any strides (the CPU kernel reads them in place);
  // these kernels read index and src contiguous. The input is copied into out through its strides.
  const Tensor& input = ctx.inputs[0];
  const Tensor index = ctx.inputs[1].is_contiguous() ? ctx.inputs[1] : detail::contiguous_copy(ctx.inputs[1]);
  const Tensor src = ctx.inputs[2].is_contiguous() ? ctx.inputs[2] : detail::contiguous_copy(ctx.inputs[2]);
  Tensor& out = ctx.outputs[0];
  const bool add = ctx.attrs.get<std::string>("reduce") == "add";
  const char* op = add ? "scatter_add" : "scatter";
  set_device(out, op);
  if (out.data_ptr() != input.data_ptr()) detail::copy_into(out, input);  // scatter_inplace writes input itself
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const IndexGeometry g = index_geometry(index, out, src, dim, op);
  const Tensor error = error_cell(out, op);
  check(scatter(scalar_type(input.dtype(), op), index.dtype() == kInt64, add, g, src.data_ptr(), index.data_ptr(), out.data_ptr(),
                static_cast<int64_t*>(error.data_ptr())),
        op);
  check_indices(error, dim, g.dim_size, op);
}

void sgd_update_kernel(KernelContext& ctx) {
  Tensor& param = ctx.outputs[0];
  set_device(param, "sgd_update");
  const SgdStep step{ctx.attrs.get<double>("lr"),          ctx.attrs.get<double>("momentum"),
                     ctx.attrs.get<double>("dampening"),   ctx.attrs.get<double>("weight_decay"),
                     ctx.attrs.get<bool>("nesterov"),      ctx.attrs.get<bool>("buffer_initialized")};
  void* buffer = ctx.outputs.size() == 2 ? ctx.outputs[1].data_ptr() : nullptr;
  check(sgd_update(scalar_type(param.dtype(), "sgd_update"), param.numel(), param.data_ptr(), ctx.inputs.back().data_ptr(), buffer, step),
        "sgd_update");
}

const std::vector<DType> kFloating = floating_dtypes();
const std::vector<DType> kSummable = {kFloat32, kFloat64, kInt64, kInt32};

FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCUDA, kSummable, sum_kernel);
FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCUDA, kReducedFloating, sum_kernel);
FLOW_REGISTER_KERNEL("argmax", DeviceType::kCUDA, kSummable, argmax_kernel);
FLOW_REGISTER_KERNEL("argmax", DeviceType::kCUDA, kReducedFloating, argmax_kernel);
FLOW_REGISTER_KERNEL("softmax", DeviceType::kCUDA, kFloating, softmax_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax", DeviceType::kCUDA, kFloating, softmax_kernel<true>);
FLOW_REGISTER_KERNEL("gather", DeviceType::kCUDA, kCudaDtypes, gather_kernel);
FLOW_REGISTER_KERNEL("scatter", DeviceType::kCUDA, kCudaDtypes, scatter_kernel);
FLOW_REGISTER_KERNEL("scatter_inplace", DeviceType::kCUDA, kCudaDtypes, scatter_kernel);
FLOW_REGISTER_KERNEL("sgd_update", DeviceType::kCUDA, kFloating, sgd_update_kernel);

}  // namespace
}  // namespace flow::cuda
