// Host side of the CUDA reductions, cumsum, softmax, gather/scatter (and gather's gradient) and
// the fused SGD update (reduce_index.cu): views the contiguous inputs as (outer, n, inner), checks indices after the
// launch, and registers the kernels for DeviceType::kCUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"
#include "core/ops/copy.h"

namespace flow::cuda {

void check_indices(const Tensor& error, int64_t dim, int64_t size, const char* op) {
  if (const std::optional<int64_t> value = recorded_error(error, op)) {
    fail(op, "index ", *value, " is out of bounds for dimension ", dim, " with size ", size);
  }
}

std::optional<int64_t> recorded_error(const Tensor& error, const char* op) {
  int64_t recorded[2] = {0, 0};
  if (cudaMemcpy(recorded, error.data_ptr(), sizeof(recorded), cudaMemcpyDeviceToHost) != cudaSuccess) {
    fail(op, "CUDA kernel failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  if (recorded[0] == 0) return std::nullopt;
  return recorded[1];
}

Tensor error_cell(const Tensor& like, const char* op) {
  Tensor error = make_tensor({2}, kInt64, like.device());
  check(fill(ScalarType::kInt64, error.data_ptr(), 2, 0.0), op);
  return error;
}

namespace {

// reduce_sum, reduce_prod, reduce_max and reduce_min over sorted unique dims. Adjacent dims
// reduce in place; others are first moved last by a permuted copy.
template <ReduceOp op>
void reduce_kernel(KernelContext& ctx) {
  const char* name = op == ReduceOp::kSum ? "sum" : op == ReduceOp::kProd ? "prod" : op == ReduceOp::kMax ? "max" : "min";
  Tensor input = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, name);
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
  check(reduce_middle(op, scalar_type(input.dtype(), name), view.outer, view.n, view.inner, input.data_ptr(), out.data_ptr()), name);
}

// argmax and argmin (outputs: indices), max_dim and min_dim (outputs: values, indices).
template <bool is_max>
void extremum_index_kernel(KernelContext& ctx) {
  const char* name = is_max ? "argmax" : "argmin";
  const Tensor& input = ctx.inputs[0];
  const bool with_values = ctx.outputs.size() == 2;
  Tensor& indices = ctx.outputs[with_values ? 1 : 0];
  set_device(indices, name);
  const MiddleView view = along(input, ctx.attrs.get<int64_t>("dim"));
  check(extremum_index_middle(is_max, scalar_type(input.dtype(), name), view.outer, view.n, view.inner, input.data_ptr(),
                              static_cast<int64_t*>(indices.data_ptr()), with_values ? ctx.outputs[0].data_ptr() : nullptr),
        name);
}

void cumsum_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, "cumsum");
  const MiddleView view = along(input, ctx.attrs.get<int64_t>("dim"));
  check(cumsum_middle(scalar_type(input.dtype(), "cumsum"), ctx.attrs.get<bool>("reverse"), view.outer, view.n, view.inner,
                      input.data_ptr(), out.data_ptr()),
        "cumsum");
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

// inputs: grad, index; out = zeros of the input's shape with grad added at index along dim (in
// index order per slice, as the CPU's scatter_add).
void gather_grad_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &index = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  set_device(out, "gather_grad");
  check(fill(scalar_type(out.dtype(), "gather_grad"), out.data_ptr(), out.numel(), 0.0), "gather_grad");
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const IndexGeometry g = index_geometry(index, out, grad, dim, "gather_grad");
  const Tensor error = error_cell(out, "gather_grad");
  check(scatter(scalar_type(out.dtype(), "gather_grad"), index.dtype() == kInt64, /*add=*/true, g, grad.data_ptr(), index.data_ptr(),
                out.data_ptr(), static_cast<int64_t*>(error.data_ptr())),
        "gather_grad");
  check_indices(error, dim, g.dim_size, "gather_grad");
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
// The CPU's numeric_dtypes(): what its prod, max, min, arg and cumsum kernels take.
const std::vector<DType> kNumeric = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8};

FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCUDA, kSummable, reduce_kernel<ReduceOp::kSum>);
FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCUDA, kReducedFloating, reduce_kernel<ReduceOp::kSum>);
FLOW_REGISTER_KERNEL("reduce_prod", DeviceType::kCUDA, kNumeric, reduce_kernel<ReduceOp::kProd>);
FLOW_REGISTER_KERNEL("reduce_max", DeviceType::kCUDA, kNumeric, reduce_kernel<ReduceOp::kMax>);
FLOW_REGISTER_KERNEL("reduce_min", DeviceType::kCUDA, kNumeric, reduce_kernel<ReduceOp::kMin>);
FLOW_REGISTER_KERNEL("argmax", DeviceType::kCUDA, kNumeric, extremum_index_kernel<true>);
FLOW_REGISTER_KERNEL("argmax", DeviceType::kCUDA, kReducedFloating, extremum_index_kernel<true>);
FLOW_REGISTER_KERNEL("argmin", DeviceType::kCUDA, kNumeric, extremum_index_kernel<false>);
FLOW_REGISTER_KERNEL("max_dim", DeviceType::kCUDA, kNumeric, extremum_index_kernel<true>);
FLOW_REGISTER_KERNEL("min_dim", DeviceType::kCUDA, kNumeric, extremum_index_kernel<false>);
FLOW_REGISTER_KERNEL("cumsum", DeviceType::kCUDA, kNumeric, cumsum_kernel);
FLOW_REGISTER_KERNEL("softmax", DeviceType::kCUDA, kFloating, softmax_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax", DeviceType::kCUDA, kFloating, softmax_kernel<true>);
FLOW_REGISTER_KERNEL("gather", DeviceType::kCUDA, kCudaDtypes, gather_kernel);
FLOW_REGISTER_KERNEL("gather_grad", DeviceType::kCUDA, kNumeric, gather_grad_kernel);
FLOW_REGISTER_KERNEL("scatter", DeviceType::kCUDA, kCudaDtypes, scatter_kernel);
FLOW_REGISTER_KERNEL("scatter_inplace", DeviceType::kCUDA, kCudaDtypes, scatter_kernel);
FLOW_REGISTER_KERNEL("sgd_update", DeviceType::kCUDA, kFloating, sgd_update_kernel);

}  // namespace
}  // namespace flow::cuda
