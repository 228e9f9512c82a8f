// CUDA pooling and batch normalization, float32 and float64.
//
// Pooling: avg_pool2d and avg_pool2d_grad run cuDNN (the padding counted, as flow defines it).
// max_pool2d must also output the flat h*w argmax that max_pool2d_grad consumes, which cuDNN
// cannot give, so max pooling runs the kernels of pool_norm.cu, whose window scan is the CPU
// loops': the same values and first-maximum indices, NaN winning and an all -inf window giving
// -inf. max_pool2d_inference runs that kernel too (without indices), so that its values never
// differ from max_pool2d's.
//
// Batch norm: cuDNN's spatial mode over the input viewed as (N, C, S, 1), S the product of the
// trailing dims. batch_norm_train writes cuDNN's saved mean and inverse standard deviation
// (1 / sqrt(biased variance + eps)) as its mean and invstd outputs; the running statistics are
// updated from those outputs by nn's functional batch_norm, not here. batch_norm_train_grad adds
// the gradient paths through those two outputs, which cuDNN does not know about, with
// pool_norm.cu.
#include "core/kernels/cuda/cudnn_util.h"

namespace flow::cuda {
namespace {

using namespace cudnn;
using Pair = std::vector<int64_t>;

class PoolingDescriptor : public Owned<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor> {
 public:
  PoolingDescriptor(cudnnPoolingMode_t mode, const Attrs& attrs, const char* op) : Owned(op) {
    const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
    const Shape window{k[0], k[1], s[0], s[1], p[0], p[1]};
    check(cudnnSetPooling2dDescriptor(get(), mode, CUDNN_PROPAGATE_NAN, to_int(k[0], op, window), to_int(k[1], op, window),
                                      to_int(p[0], op, window), to_int(p[1], op, window), to_int(s[0], op, window),
                                      to_int(s[1], op, window)),
          op, "cudnnSetPooling2dDescriptor");
  }
};

void avg_pool_kernel(KernelContext& ctx) {
  const char* op = "avg_pool2d";
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;  // an empty batch; cuDNN refuses zero dims
  const Session s = session(y, op);
  const PoolingDescriptor pooling(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, ctx.attrs, op);
  const TensorDescriptor x_desc(x.dtype(), x.shape(), op), y_desc(y.dtype(), y.shape(), op);
  check(cudnnPoolingForward(s.handle, pooling.get(), one(y.dtype()), x_desc.get(), x.data_ptr(), zero(y.dtype()), y_desc.get(),
                            y.data_ptr()),
        op, "cudnnPoolingForward");
}

// inputs: grad (of the output); attr input_shape.
void avg_pool_grad_kernel(KernelContext& ctx) {
  const char* op = "avg_pool2d_grad";
  const Tensor& grad = ctx.inputs[0];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const Session s = session(grad_input, op);
  const PoolingDescriptor pooling(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, ctx.attrs, op);
  const TensorDescriptor x_desc(grad.dtype(), grad_input.shape(), op), y_desc(grad.dtype(), grad.shape(), op);
  // Averaging reads neither the forward's input nor its output, but cuDNN wants both: grad stands
  // in for the output (same shape), and unread scratch for the input.
  const Tensor unread_input = make_tensor(grad_input.shape(), grad.dtype(), grad.device());
  check(cudnnPoolingBackward(s.handle, pooling.get(), one(grad.dtype()), y_desc.get(), grad.data_ptr(), y_desc.get(), grad.data_ptr(),
                             x_desc.get(), unread_input.data_ptr(), zero(grad.dtype()), x_desc.get(), grad_input.data_ptr()),
        op, "cudnnPoolingBackward");
}

PoolWindow pool_window(const Shape& x, const Shape& y, const Attrs& attrs) {
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  return {x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1]};
}

void set_device(const Tensor& t, const char* op) {
  if (cudaSetDevice(t.device().index) != cudaSuccess) fail(op, "cannot select ", t.device());
}

// max_pool2d (outputs: out, indices) and max_pool2d_inference (out only).
void max_pool_kernel(KernelContext& ctx) {
  const char* op = "max_pool2d";
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  int64_t* indices = ctx.outputs.size() > 1 ? ctx.outputs[1].data_ptr<int64_t>() : nullptr;
  set_device(y, op);
  check_launch(max_pool2d(scalar_type(x.dtype(), op), pool_window(x.shape(), y.shape(), ctx.attrs), x.data_ptr(), y.data_ptr(), indices),
               op);
}

// inputs: grad (of the output), indices; attr input_shape.
void max_pool_grad_kernel(KernelContext& ctx) {
  const char* op = "max_pool2d_grad";
  const Tensor &grad = ctx.inputs[0], &indices = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  set_device(grad_input, op);
  check_launch(max_pool2d_grad(scalar_type(grad.dtype(), op), pool_window(grad_input.shape(), grad.shape(), ctx.attrs), grad.data_ptr(),
                               indices.data_ptr<int64_t>(), grad_input.data_ptr()),
               op);
}

constexpr const char* kNormOp = "batch_norm";

// The input (N, C, ...) as cuDNN's (N, C, S, 1).
struct NormLayout {
  int64_t n, c, s;
};
NormLayout norm_layout(const Shape& shape) {
  int64_t s = 1;
  for (int64_t d = 2; d < shape.ndim(); ++d) s *= shape[d];
  return {shape[0], shape[1], s};
}

// The data descriptor and the per-channel one cuDNN derives from it.
struct NormDescriptors {
  TensorDescriptor data;
  Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> channel;
  NormDescriptors(DType dtype, const NormLayout& l) : data(dtype, l.n, l.c, l.s, 1, kNormOp), channel(kNormOp) {
    check(cudnnDeriveBNTensorDescriptor(channel.get(), data.get(), CUDNN_BATCHNORM_SPATIAL), kNormOp, "cudnnDeriveBNTensorDescriptor");
  }
};

// A (C) tensor on like's device: the given one, or one filled with `value` where the op has no
// such input (no affine weight and bias: scale 1, shift 0).
Tensor channel_values(const Tensor* given, const Tensor& like, int64_t channels, double value) {
  if (given != nullptr) return *given;
  Tensor filled = make_tensor({channels}, like.dtype(), like.device());
  check_launch(fill(scalar_type(like.dtype(), kNormOp), filled.data_ptr(), channels, value), kNormOp);
  return filled;
}

// inputs: input, running_mean, running_var[, weight, bias].
void eval_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (x.numel() == 0) return;
  const bool affine = ctx.inputs.size() == 5;
  const NormLayout l = norm_layout(x.shape());
  const Session s = session(y, kNormOp);
  const NormDescriptors d(x.dtype(), l);
  const Tensor weight = channel_values(affine ? &ctx.inputs[3] : nullptr, x, l.c, 1.0);
  const Tensor bias = channel_values(affine ? &ctx.inputs[4] : nullptr, x, l.c, 0.0);
  check(cudnnBatchNormalizationForwardInference(s.handle, CUDNN_BATCHNORM_SPATIAL, one(x.dtype()), zero(x.dtype()), d.data.get(),
                                                x.data_ptr(), d.data.get(), y.data_ptr(), d.channel.get(), weight.data_ptr(),
                                                bias.data_ptr(), ctx.inputs[1].data_ptr(), ctx.inputs[2].data_ptr(),
                                                ctx.attrs.get<double>("eps")),
        kNormOp, "cudnnBatchNormalizationForwardInference");
}

// inputs: input[, weight, bias]; outputs: out, mean, invstd.
void train_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (x.numel() == 0) return;
  const bool affine = ctx.inputs.size() == 3;
  const NormLayout l = norm_layout(x.shape());
  const Session s = session(x, kNormOp);
  const NormDescriptors d(x.dtype(), l);
  const Tensor weight = channel_values(affine ? &ctx.inputs[1] : nullptr, x, l.c, 1.0);
  const Tensor bias = channel_values(affine ? &ctx.inputs[2] : nullptr, x, l.c, 0.0);
  // No running statistics (null, factor unused): the op's outputs are the batch's own.
  check(cudnnBatchNormalizationForwardTraining(s.handle, CUDNN_BATCHNORM_SPATIAL, one(x.dtype()), zero(x.dtype()), d.data.get(),
                                               x.data_ptr(), d.data.get(), ctx.outputs[0].data_ptr(), d.channel.get(), weight.data_ptr(),
                                               bias.data_ptr(), 0.0, nullptr, nullptr, ctx.attrs.get<double>("eps"),
                                               ctx.outputs[1].data_ptr(), ctx.outputs[2].data_ptr()),
        kNormOp, "cudnnBatchNormalizationForwardTraining");
}

// inputs: grad_out, grad_mean, grad_invstd, input, mean, invstd[, weight];
// outputs: grad_input, grad_weight, grad_bias.
void train_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[3];
  if (x.numel() == 0) return;
  const bool affine = ctx.inputs.size() == 7;
  const NormLayout l = norm_layout(x.shape());
  const Session s = session(x, kNormOp);
  const NormDescriptors d(x.dtype(), l);
  const Tensor weight = channel_values(affine ? &ctx.inputs[6] : nullptr, x, l.c, 1.0);
  const Tensor &mean = ctx.inputs[4], &invstd = ctx.inputs[5];
  Tensor& grad_input = ctx.outputs[0];
  check(cudnnBatchNormalizationBackward(s.handle, CUDNN_BATCHNORM_SPATIAL, one(x.dtype()), zero(x.dtype()), one(x.dtype()), zero(x.dtype()),
                                        d.data.get(), x.data_ptr(), d.data.get(), ctx.inputs[0].data_ptr(), d.data.get(),
                                        grad_input.data_ptr(), d.channel.get(), weight.data_ptr(), ctx.outputs[1].data_ptr(),
                                        ctx.outputs[2].data_ptr(), ctx.attrs.get<double>("eps"), mean.data_ptr(), invstd.data_ptr()),
        kNormOp, "cudnnBatchNormalizationBackward");
  check_launch(batch_norm_statistics_grad(scalar_type(x.dtype(), kNormOp), l.n, l.c, l.s, x.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
                                          ctx.inputs[1].data_ptr(), ctx.inputs[2].data_ptr(), grad_input.data_ptr()),
               kNormOp);
}

const std::vector<DType> kFloating = {kFloat32, kFloat64};
// Max pooling selects values (and sums 16-bit gradients in float): autocast runs it in float16/bfloat16.
const std::vector<DType> kPoolDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16};

FLOW_REGISTER_KERNEL("max_pool2d", DeviceType::kCUDA, kPoolDtypes, max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_inference", DeviceType::kCUDA, kPoolDtypes, max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_grad", DeviceType::kCUDA, kPoolDtypes, max_pool_grad_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d", DeviceType::kCUDA, kFloating, avg_pool_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d_grad", DeviceType::kCUDA, kFloating, avg_pool_grad_kernel);
FLOW_REGISTER_KERNEL("batch_norm_eval", DeviceType::kCUDA, kFloating, eval_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train", DeviceType::kCUDA, kFloating, train_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train_grad", DeviceType::kCUDA, kFloating, train_grad_kernel);

}  // namespace
}  // namespace flow::cuda
