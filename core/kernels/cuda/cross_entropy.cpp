// Host side of cross_entropy.cu: sparse_softmax_cross_entropy and its gradient over contiguous
// (N, C) logits, registered for DeviceType::kCUDA with the CPU kernels' dtypes. The kernels flag
// a bad label as they go; the host then reads the flag (a synchronising copy, as the CPU kernels
// fail at the call) and names the first bad row as the CPU does.
#include <cuda_runtime.h>

#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"

namespace flow::cuda {
namespace {

void check_labels(const Tensor& error, const Tensor& labels, int64_t classes, int64_t ignore_index, const char* op) {
  if (!recorded_error(error, op)) return;
  std::vector<int64_t> label(static_cast<size_t>(labels.numel()));
  if (cudaMemcpy(label.data(), labels.data_ptr(), label.size() * sizeof(int64_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
    fail(op, "CUDA kernel failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  for (size_t n = 0; n < label.size(); ++n) {
    if (label[n] != ignore_index && (label[n] < 0 || label[n] >= classes)) {
      fail(op, "label ", label[n], " of row ", n, " is outside [0, ", classes, ") and is not ignore_index (", ignore_index, ")");
    }
  }
}

// inputs: logits (N, C), labels (N); outputs: loss (N), max (N), log_sum_exp (N).
void sparse_cross_entropy_kernel(KernelContext& ctx) {
  constexpr const char* kName = "sparse_softmax_cross_entropy";
  const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1];
  set_device(logits, kName);
  const int64_t classes = logits.size(1), ignore_index = ctx.attrs.get<int64_t>("ignore_index");
  const Tensor error = error_cell(logits, kName);
  check(sparse_cross_entropy(scalar_type(logits.dtype(), kName), scalar_type(ctx.outputs[0].dtype(), kName), logits.size(0), classes,
                             ignore_index, logits.data_ptr(), labels.data_ptr<int64_t>(), ctx.outputs[0].data_ptr(),
                             ctx.outputs[1].data_ptr(), ctx.outputs[2].data_ptr(), static_cast<int64_t*>(error.data_ptr())),
        kName);
  check_labels(error, labels, classes, ignore_index, kName);
}

// inputs: grad (N), logits (N, C), labels (N), max (N), log_sum_exp (N); output: grad_logits.
void sparse_cross_entropy_grad_kernel(KernelContext& ctx) {
  constexpr const char* kName = "sparse_softmax_cross_entropy_grad";
  const Tensor &grad = ctx.inputs[0], &logits = ctx.inputs[1], &labels = ctx.inputs[2];
  set_device(logits, kName);
  const int64_t classes = logits.size(1), ignore_index = ctx.attrs.get<int64_t>("ignore_index");
  const Tensor error = error_cell(logits, kName);
  check(sparse_cross_entropy_grad(scalar_type(logits.dtype(), kName), scalar_type(grad.dtype(), kName), logits.size(0), classes,
                                  ignore_index, grad.data_ptr(), logits.data_ptr(), labels.data_ptr<int64_t>(), ctx.inputs[3].data_ptr(),
                                  ctx.inputs[4].data_ptr(), ctx.outputs[0].data_ptr(), static_cast<int64_t*>(error.data_ptr())),
        kName);
  check_labels(error, labels, classes, ignore_index, kName);
}

const std::vector<DType> kDtypes = and_reduced(floating_dtypes());
FLOW_REGISTER_KERNEL("sparse_softmax_cross_entropy", DeviceType::kCUDA, kDtypes, sparse_cross_entropy_kernel);
FLOW_REGISTER_KERNEL("sparse_softmax_cross_entropy_grad", DeviceType::kCUDA, kDtypes, sparse_cross_entropy_grad_kernel);

}  // namespace
}  // namespace flow::cuda
