// Host side of index.cu, and cat (strided device-to-device copies, no kernel of its own):
// registers cat, index_select, one_hot, tril, triu, eye and linspace for DeviceType::kCUDA with
// the CPU kernels' dtypes.
#include <cuda_runtime.h>

#include <optional>
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"

namespace flow::cuda {
namespace {

int item_of(const Tensor& t) { return static_cast<int>(itemsize(t.dtype())); }

// Each input's (outer, size * inner) rows land at its offset along dim of the output's rows: one
// pitched copy per input (a plain one for a single row, whose pitch could pass CUDA's limit), on
// the default stream the kernels run on.
void cat_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "cat");
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const MiddleView o = along(out, dim);
  const size_t item = itemsize(out.dtype());
  int64_t offset = 0;
  for (const Tensor& t : ctx.inputs) {
    const MiddleView s = along(t, dim);
    const size_t run = static_cast<size_t>(s.n * s.inner) * item;
    if (run > 0 && o.outer > 0) {
      char* dst = static_cast<char*>(out.data_ptr()) + static_cast<size_t>(offset * o.inner) * item;
      const cudaError_t status =
          o.outer == 1 ? cudaMemcpyAsync(dst, t.data_ptr(), run, cudaMemcpyDeviceToDevice, nullptr)
                       : cudaMemcpy2DAsync(dst, static_cast<size_t>(o.n * o.inner) * item, t.data_ptr(), run, run,
                                           static_cast<size_t>(o.outer), cudaMemcpyDeviceToDevice, nullptr);
      check(status == cudaSuccess ? nullptr : cudaGetErrorString(status), "cat");
    }
    offset += s.n;
  }
}

void index_select_kernel(KernelContext& ctx) {
  const Tensor &input = ctx.inputs[0], &index = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  set_device(out, "index_select");
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const MiddleView s = along(input, dim);
  const Tensor error = error_cell(out, "index_select");
  check(index_select(item_of(input), index.dtype() == kInt64, s.outer, s.n, s.inner, index.numel(), input.data_ptr(), index.data_ptr(),
                     out.data_ptr(), static_cast<int64_t*>(error.data_ptr())),
        "index_select");
  check_indices(error, dim, s.n, "index_select");
}

void one_hot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  set_device(out, "one_hot");
  const int64_t classes = ctx.attrs.get<int64_t>("num_classes");
  check(fill(ScalarType::kInt64, out.data_ptr(), out.numel(), 0.0), "one_hot");
  const Tensor error = error_cell(out, "one_hot");
  check(one_hot(indices.numel(), classes, static_cast<const int64_t*>(indices.data_ptr()), static_cast<int64_t*>(out.data_ptr()),
                static_cast<int64_t*>(error.data_ptr())),
        "one_hot");
  if (const std::optional<int64_t> value = recorded_error(error, "one_hot")) {
    fail("one_hot", "class index ", *value, " is out of range [0, ", classes, ")");
  }
}

template <bool lower>
void triangular_kernel(KernelContext& ctx) {
  const char* op = lower ? "tril" : "triu";
  const Tensor& input = ctx.inputs[0];
  set_device(input, op);
  check(triangular(lower, item_of(input), input.numel(), input.size(-2), input.size(-1), ctx.attrs.get<int64_t>("diagonal"),
                   input.data_ptr(), ctx.outputs[0].data_ptr()),
        op);
}

void eye_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "eye");
  check(eye(scalar_type(out.dtype(), "eye"), out.size(0), out.size(1), out.data_ptr()), "eye");
}

void linspace_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "linspace");
  check(linspace(scalar_type(out.dtype(), "linspace"), out.numel(), ctx.attrs.get<Scalar>("start").to_double(),
                 ctx.attrs.get<Scalar>("end").to_double(), out.data_ptr()),
        "linspace");
}

const std::vector<DType> kAllDtypes = and_reduced(kCudaDtypes);
const std::vector<DType> kNumeric = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8};

FLOW_REGISTER_KERNEL("cat", DeviceType::kCUDA, kAllDtypes, cat_kernel);
FLOW_REGISTER_KERNEL("index_select", DeviceType::kCUDA, kAllDtypes, index_select_kernel);
FLOW_REGISTER_KERNEL("one_hot", DeviceType::kCUDA, {kInt64}, one_hot_kernel);
FLOW_REGISTER_KERNEL("tril", DeviceType::kCUDA, kAllDtypes, triangular_kernel<true>);
FLOW_REGISTER_KERNEL("triu", DeviceType::kCUDA, kAllDtypes, triangular_kernel<false>);
FLOW_REGISTER_KERNEL("eye", DeviceType::kCUDA, kAllDtypes, eye_kernel);
FLOW_REGISTER_KERNEL("linspace", DeviceType::kCUDA, kNumeric, linspace_kernel);

}  // namespace
}  // namespace flow::cuda
