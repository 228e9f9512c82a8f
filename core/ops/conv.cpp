// Convolution and pooling. conv2d has two gradient primitives (w.r.t. input and weight) so that
// its vjp is written in ops; pooling keeps the argmax per output for its gradient.
#include "core/ops/conv.h"

#include "core/autograd_meta.h"
#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"

namespace flow {
namespace {

using Pair = std::vector<int64_t>;
const Pair& pair_attr(const Attrs& attrs, const char* name) { return attrs.get<Pair>(name); }

int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

void check_pair(const Pair& p, const char* name, const char* op, int64_t minimum) {
  if (p.size() != 2) fail(op, name, " must have 2 values, got ", p.size());
  if (p[0] < minimum || p[1] < minimum) fail(op, name, " must be >= ", minimum, ", got ", Shape(p));
}

Shape conv_output_shape(const Shape& x, const Shape& w, const Attrs& attrs) {
  const Pair &s = pair_attr(attrs, "stride"), &p = pair_attr(attrs, "padding"), &d = pair_attr(attrs, "dilation");
  const int64_t oh = out_size(x[2], w[2], s[0], p[0], d[0]), ow = out_size(x[3], w[3], s[1], p[1], d[1]);
  if (oh <= 0 || ow <= 0) {
    fail("conv2d", "input ", x, " is too small for kernel ", Shape{w[2], w[3]}, " with padding ", Shape(p), " and dilation ", Shape(d));
  }
  return {x[0], w[0], oh, ow};
}

std::vector<TensorMeta> conv_infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  if (in.size() != 2 && in.size() != 3) fail("conv2d", "expected input, weight and optional bias");
  const Shape &x = in[0].shape, &w = in[1].shape;
  if (x.ndim() != 4) fail("conv2d", "expected 4-d input (N,C,H,W), got ", x);
  if (w.ndim() != 4) fail("conv2d", "expected 4-d weight (O,C/groups,kH,kW), got ", w);
  if (!is_floating(in[0].dtype) || in[0].dtype != in[1].dtype) {
    fail("conv2d", "expected floating input and weight of one dtype, got ", dtype_name(in[0].dtype), " and ", dtype_name(in[1].dtype));
  }
  const int64_t groups = attrs.get<int64_t>("groups");
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0) {
    fail("conv2d", "groups ", groups, " must divide input channels ", x[1], " and output channels ", w[0]);
  }
  if (w[1] * groups != x[1]) fail("conv2d", "weight ", w, " expects ", w[1] * groups, " input channels, but input ", x, " has ", x[1]);
  if (in.size() == 3 && !(in[2].shape == Shape{w[0]})) fail("conv2d", "bias must have shape (", w[0], ",), got ", in[2].shape);
  return {{conv_output_shape(x, w, attrs), in[0].dtype, in[0].device}};
}

Attrs conv_attrs(const Pair& stride, const Pair& padding, const Pair& dilation, int64_t groups) {
  return Attrs().set("stride", stride).set("padding", padding).set("dilation", dilation).set("groups", groups);
}

const OpDef& kConvGradInput = OpBuilder("conv2d_grad_input")
                                  .inputs({"grad", "weight"})
                                  .outputs({"grad_input"})
                                  .attrs({"stride", "padding", "dilation", "groups", "input_shape"})
                                  .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                    return std::vector<TensorMeta>{{Shape(pair_attr(attrs, "input_shape")), in[0].dtype, in[0].device}};
                                  })
                                  .def();

const OpDef& kConvGradWeight = OpBuilder("conv2d_grad_weight")
                                   .inputs({"grad", "input"})
                                   .outputs({"grad_weight"})
                                   .attrs({"stride", "padding", "dilation", "groups", "weight_shape"})
                                   .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                     return std::vector<TensorMeta>{{Shape(pair_attr(attrs, "weight_shape")), in[0].dtype, in[0].device}};
                                   })
                                   .def();

const OpDef& kConv =
    OpBuilder("conv2d")
        .inputs({"input", "weight", "bias"}, /*variadic=*/true)
        .outputs({"out"})
        .attrs({"stride", "padding", "dilation", "groups"})
        .infer(conv_infer)
        .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
          std::vector<SbpSignature> signatures{{std::vector<Sbp>(in.size(), Sbp::broadcast()), {Sbp::broadcast()}}};
          std::vector<Sbp> data{Sbp::split(0), Sbp::broadcast()};
          if (in.size() == 3) data.push_back(Sbp::broadcast());
          signatures.push_back({data, {Sbp::split(0)}});
          return signatures;
        })
        .vjp([](const VjpContext& ctx) {
          Attrs base = ctx.attrs;
          TensorList grads(ctx.num_inputs());
          if (ctx.needs_input_grad[0]) {
            grads[0] = apply_one(kConvGradInput, {ctx.grad(), ctx.input(1)}, Attrs(base).set("input_shape", ctx.input_meta(0).shape));
          }
          if (ctx.needs_input_grad[1]) {
            grads[1] = apply_one(kConvGradWeight, {ctx.grad(), ctx.input(0)}, Attrs(base).set("weight_shape", ctx.input_meta(1).shape));
          }
          if (ctx.num_inputs() == 3 && ctx.needs_input_grad[2]) grads[2] = sum(ctx.grad(), {0, 2, 3});
          return grads;
        })
        .def();

// Gradients of the gradient primitives (double backward) are the primitives themselves.
struct ConvGradVjps {
  ConvGradVjps() {
    op_def("conv2d_grad_input").vjp = [](const VjpContext& ctx) {
      Attrs attrs = ctx.attrs;
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = apply_one(kConv, {ctx.grad(), ctx.input(1)}, attrs);
      if (ctx.needs_input_grad[1]) {
        grads[1] = apply_one(kConvGradWeight, {ctx.input(0), ctx.grad()}, Attrs(attrs).set("weight_shape", ctx.input_meta(1).shape));
      }
      return grads;
    };
    op_def("conv2d_grad_weight").vjp = [](const VjpContext& ctx) {
      Attrs attrs = ctx.attrs;
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = apply_one(kConv, {ctx.input(1), ctx.grad()}, attrs);
      if (ctx.needs_input_grad[1]) {
        grads[1] = apply_one(kConvGradInput, {ctx.input(0), ctx.grad()}, Attrs(attrs).set("input_shape", ctx.input_meta(1).shape));
      }
      return grads;
    };
  }
} conv_grad_vjps;

Attrs pool_attrs(const char* op, const Tensor& input, Pair kernel, Pair stride, const Pair& padding) {
  if (stride.empty()) stride = kernel;
  check_pair(kernel, "kernel_size", op, 1);
  check_pair(stride, "stride", op, 1);
  check_pair(padding, "padding", op, 0);
  if (padding[0] * 2 > kernel[0] || padding[1] * 2 > kernel[1]) {
    fail(op, "pad should be at most half of the kernel size, got padding ", Shape(padding), " and kernel ", Shape(kernel));
  }
  if (input.dim() != 4) fail(op, "expected 4-d input (N,C,H,W), got ", input.shape());
  return Attrs().set("kernel_size", kernel).set("stride", stride).set("padding", padding);
}

InferFn pool_infer(const char* op, bool with_indices) {
  return [op, with_indices](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    const Shape& x = in[0].shape;
    const Pair &k = pair_attr(attrs, "kernel_size"), &s = pair_attr(attrs, "stride"), &p = pair_attr(attrs, "padding");
    const int64_t oh = out_size(x[2], k[0], s[0], p[0], 1), ow = out_size(x[3], k[1], s[1], p[1], 1);
    if (oh <= 0 || ow <= 0) fail(op, "input ", x, " is too small for kernel ", Shape(k));
    std::vector<TensorMeta> metas{{Shape{x[0], x[1], oh, ow}, in[0].dtype, in[0].device}};
    if (with_indices) metas.push_back({Shape{x[0], x[1], oh, ow}, kInt64, in[0].device});
    return metas;
  };
}

// Scatters pooled gradients back through the saved argmax positions (flat h*w per plane). The
// window attributes let a kernel turn them into window offsets (oneDNN's workspace).
const OpDef& kMaxPoolGrad = OpBuilder("max_pool2d_grad")
                                .inputs({"grad", "indices"})
                                .outputs({"grad_input"})
                                .attrs({"kernel_size", "stride", "padding", "input_shape"})
                                .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                  return std::vector<TensorMeta>{{Shape(pair_attr(attrs, "input_shape")), in[0].dtype, in[0].device}};
                                })
                                .def();

const OpDef& kMaxPool = OpBuilder("max_pool2d")
                            .inputs({"input"})
                            .outputs({"out", "indices"})
                            .attrs({"kernel_size", "stride", "padding"})
                            .infer(pool_infer("max_pool2d", true))
                            .vjp([](const VjpContext& ctx) {
                              return TensorList{apply_one(kMaxPoolGrad, {ctx.grad(0), ctx.output(1)},
                                                          Attrs(ctx.attrs).set("input_shape", ctx.input_meta(0).shape))};
                            })
                            .def();

// Max pooling without the argmax indices, for when no gradient will be taken: eager calls
// under no-grad (or on inputs that need none), and Graph nodes whose indices nobody reads.
const OpDef& kMaxPoolInference = OpBuilder("max_pool2d_inference")
                                     .inputs({"input"})
                                     .outputs({"out"})
                                     .attrs({"kernel_size", "stride", "padding"})
                                     .infer(pool_infer("max_pool2d", false))
                                     .def();

const OpDef& kAvgPoolGrad = OpBuilder("avg_pool2d_grad")
                                .inputs({"grad"})
                                .outputs({"grad_input"})
                                .attrs({"kernel_size", "stride", "padding", "input_shape"})
                                .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                  return std::vector<TensorMeta>{{Shape(pair_attr(attrs, "input_shape")), in[0].dtype, in[0].device}};
                                })
                                .def();

const OpDef& kAvgPool = OpBuilder("avg_pool2d")
                            .inputs({"input"})
                            .outputs({"out"})
                            .attrs({"kernel_size", "stride", "padding"})
                            .infer(pool_infer("avg_pool2d", false))
                            .vjp([](const VjpContext& ctx) {
                              return TensorList{apply_one(kAvgPoolGrad, {ctx.grad()},
                                                          Attrs(ctx.attrs).set("input_shape", ctx.input_meta(0).shape))};
                            })
                            .def();

struct PoolGradVjps {
  PoolGradVjps() {
    op_def("avg_pool2d_grad").vjp = [](const VjpContext& ctx) {
      Attrs attrs = ctx.attrs;
      return TensorList{apply_one(kAvgPool, {ctx.grad()}, attrs)};
    };
  }
} pool_grad_vjps;

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  check_pair(stride, "stride", "conv2d", 1);
  check_pair(padding, "padding", "conv2d", 0);
  check_pair(dilation, "dilation", "conv2d", 1);
  TensorList inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  return apply_one(kConv, inputs, conv_attrs(stride, padding, dilation, groups));
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
                        std::vector<int64_t> padding, std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                        int64_t groups) {
  check_pair(stride, "stride", "conv_transpose2d", 1);
  check_pair(padding, "padding", "conv_transpose2d", 0);
  check_pair(output_padding, "output_padding", "conv_transpose2d", 0);
  check_pair(dilation, "dilation", "conv_transpose2d", 1);
  if (input.dim() != 4 || weight.dim() != 4) {
    fail("conv_transpose2d", "expected 4-d input and weight, got ", input.shape(), " and ", weight.shape());
  }
  if (groups < 1 || weight.size(0) != input.size(1) || input.size(1) % groups != 0) {
    fail("conv_transpose2d", "weight ", weight.shape(), " expects ", weight.size(0), " input channels in ", groups,
         " groups, but input ", input.shape(), " has ", input.size(1));
  }
  for (int d = 0; d < 2; ++d) {
    if (output_padding[d] >= std::max(stride[d], dilation[d])) {
      fail("conv_transpose2d", "output padding must be smaller than either stride or dilation, got ", Shape(output_padding));
    }
  }
  Shape out{input.size(0), weight.size(1) * groups};
  for (int d = 0; d < 2; ++d) {
    out.push_back((input.size(2 + d) - 1) * stride[d] - 2 * padding[d] + dilation[d] * (weight.size(2 + d) - 1) + output_padding[d] + 1);
    if (out[out.size() - 1] <= 0) fail("conv_transpose2d", "input ", input.shape(), " gives an empty output");
  }
  // The transposed convolution is the input-gradient of the convolution it transposes.
  Tensor y = apply_one(kConvGradInput, {input, weight}, conv_attrs(stride, padding, dilation, groups).set("input_shape", out));
  if (bias.defined()) {
    if (!(bias.shape() == Shape{out[1]})) fail("conv_transpose2d", "bias must have shape (", out[1], ",), got ", bias.shape());
    y = y + bias.reshape({1, out[1], 1, 1});
  }
  return y;
}

Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride, std::vector<int64_t> padding) {
  Attrs attrs = pool_attrs("max_pool2d", input, kernel_size, stride, padding);
  if (is_grad_enabled() && input.requires_grad()) return apply(kMaxPool, {input}, std::move(attrs))[0];
  return apply_one(kMaxPoolInference, {input}, std::move(attrs));
}

Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return apply_one(kAvgPool, {input}, pool_attrs("avg_pool2d", input, kernel_size, stride, padding));
}

}  // namespace flow
