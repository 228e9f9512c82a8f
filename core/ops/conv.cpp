// Convolution and pooling. conv2d has two gradient primitives (w.r.t. input and weight) so that
// its vjp is written in ops; pooling keeps the argmax per output for its gradient.
#include "core/ops/conv.h"

#include "core/autograd_meta.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/creation.h"
#include "core/ops/flops.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"

namespace flow {
namespace {

using Pair = std::vector<int64_t>;

// Window attributes beyond this are never meaningful and would overflow the kernels' index math.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 31;

const Pair& checked_pair(const Attrs& attrs, const char* name, const std::string& op, int64_t minimum) {
  const Pair& p = attrs.get<Pair>(name);
  if (p.size() != 2) fail(op, name, " must have 2 values, got ", p.size());
  if (p[0] < minimum || p[1] < minimum) fail(op, name, " must be >= ", minimum, ", got ", Shape(p));
  if (p[0] > kMaxWindowAttr || p[1] > kMaxWindowAttr) fail(op, name, " must be <= ", kMaxWindowAttr, ", got ", Shape(p));
  return p;
}

// Size arithmetic runs in 128 bits (the dims of an empty tensor may be as large as int64 allows)
// and saturates back; a saturated size fails the output's size check.
using Wide = __int128;
int64_t saturated(Wide value) {
  if (value > INT64_MAX) return INT64_MAX;
  if (value < INT64_MIN) return INT64_MIN;
  return static_cast<int64_t>(value);
}
// Extent of a dilated kernel: dilation * (kernel - 1) + 1.
Wide kernel_extent(int64_t kernel, int64_t dilation) { return static_cast<Wide>(dilation) * (kernel - 1) + 1; }

// floor((in + 2 * pad - dilation * (kernel - 1) - 1) / stride) + 1. Floor, not C++'s truncation:
// a window wider than the padded input must give a size below 1, not 1.
int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const Wide span = static_cast<Wide>(in) + 2 * static_cast<Wide>(pad) - kernel_extent(kernel, dilation);
  Wide quotient = span / stride;
  if (span % stride != 0 && span < 0) --quotient;
  return saturated(quotient + 1);
}

// The input size a transposed convolution produces: (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1.
int64_t transposed_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t output_padding) {
  return saturated(static_cast<Wide>(in - 1) * stride - 2 * static_cast<Wide>(pad) + kernel_extent(kernel, dilation) + output_padding);
}

void check_4d(const std::string& op, const Shape& shape, const char* what, const char* layout) {
  if (shape.ndim() != 4) fail(op, "expected 4-d ", what, " ", layout, ", got ", shape);
}

// The kernels need every dim but the batch non-empty (as PyTorch's convolution and pooling do).
void check_nonempty_planes(const std::string& op, const Shape& x, const char* what) {
  if (x[1] == 0 || x[2] == 0 || x[3] == 0) {
    fail(op, "expected ", what, " with non-zero channels, height and width (only the batch may be empty), got ", x);
  }
}

// Checks a convolution of x (N,C,H,W) by weight w (O,C/groups,kH,kW) under attrs; returns the
// output shape. Shared by conv2d and its two gradient ops, which give x or w as an attribute.
Shape conv_output_shape(const std::string& op, const Shape& x, const Shape& w, const Attrs& attrs) {
  check_4d(op, x, "input", "(N,C,H,W)");
  check_4d(op, w, "weight", "(O,C/groups,kH,kW)");
  check_nonempty_planes(op, x, "input");
  if (w[0] == 0 || w[1] == 0 || w[2] == 0 || w[3] == 0) fail(op, "expected a non-empty weight, got ", w);
  const Pair& s = checked_pair(attrs, "stride", op, 1);
  const Pair& p = checked_pair(attrs, "padding", op, 0);
  const Pair& d = checked_pair(attrs, "dilation", op, 1);
  const int64_t groups = attrs.get<int64_t>("groups");
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0) {
    fail(op, "groups ", groups, " must divide input channels ", x[1], " and output channels ", w[0]);
  }
  if (x[1] / groups != w[1]) {
    fail(op, "weight ", w, " expects ", saturated(static_cast<Wide>(w[1]) * groups), " input channels, but input ", x, " has ", x[1]);
  }
  const int64_t oh = out_size(x[2], w[2], s[0], p[0], d[0]), ow = out_size(x[3], w[3], s[1], p[1], d[1]);
  if (oh < 1 || ow < 1) {
    fail(op, "calculated padded input size per channel: (", saturated(static_cast<Wide>(x[2]) + 2 * p[0]), " x ",
         saturated(static_cast<Wide>(x[3]) + 2 * p[1]), "). Kernel size: (", saturated(kernel_extent(w[2], d[0])), " x ",
         saturated(kernel_extent(w[3], d[1])), "). Kernel size can't be greater than actual input size");
  }
  return {x[0], w[0], oh, ow};
}

void check_operands(const std::string& op, const TensorMeta& a, const TensorMeta& b) {
  if (!is_floating(a.dtype) || a.dtype != b.dtype) {
    fail(op, "expected floating operands of one dtype, got ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
  }
}

// The gradient ops' shape attribute: a 4-d shape the other operand's dims must agree with.
Shape shape4_attr(const std::string& op, const Attrs& attrs, const char* name) {
  const Shape shape = checks::shape_attr(op, attrs, name);
  if (shape.ndim() != 4) fail(op, name, " must have 4 dims, got ", shape);
  return shape;
}

void check_grad_shape(const std::string& op, const Shape& grad, const Shape& expected) {
  if (!(grad == expected)) fail(op, "grad ", grad, " does not match the forward output ", expected);
}

std::vector<TensorMeta> conv_infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  if (in.size() != 2 && in.size() != 3) fail("conv2d", "expected input, weight and optional bias, got ", in.size(), " tensors");
  check_operands("conv2d", in[0], in[1]);
  const Shape out = conv_output_shape("conv2d", in[0].shape, in[1].shape, attrs);
  if (in.size() == 3) {
    if (!(in[2].shape == Shape{out[1]})) fail("conv2d", "bias must have shape (", out[1], ",), got ", in[2].shape);
    checks::check_same_dtype("conv2d", in[0], in[2], "bias");
  }
  return {{out, in[0].dtype, in[0].device}};
}

Attrs conv_attrs(const Pair& stride, const Pair& padding, const Pair& dilation, int64_t groups) {
  return Attrs().set("stride", stride).set("padding", padding).set("dilation", dilation).set("groups", groups);
}

// Samples and channels are independent in pooling: every tensor split along the batch, or along
// the channels, or all broadcast.
std::vector<SbpSignature> per_sample_or_channel(const std::vector<TensorMeta>& in, size_t outputs) {
  std::vector<SbpSignature> signatures;
  for (const Sbp& sbp : {Sbp::broadcast(), Sbp::split(0), Sbp::split(1)}) {
    signatures.push_back({std::vector<Sbp>(in.size(), sbp), std::vector<Sbp>(outputs, sbp)});
  }
  return signatures;
}

// Data parallel convolution's gradients (the input split over samples, the weight broadcast), or
// all broadcast: the input's gradient is split like the input, the weight's is a partial sum of
// every rank's samples' contributions.
std::vector<SbpSignature> conv_grad_signatures(const std::vector<TensorMeta>& in, const Sbp& second_input, const Sbp& output) {
  return {{std::vector<Sbp>(in.size(), Sbp::broadcast()), {Sbp::broadcast()}}, {{Sbp::split(0), second_input}, {output}}};
}

const OpDef& kConvGradInput = OpBuilder("conv2d_grad_input")
                                  .inputs({"grad", "weight"})
                                  .outputs({"grad_input"})
                                  .attrs({{"stride", AttrType::kInts},
                                          {"padding", AttrType::kInts},
                                          {"dilation", AttrType::kInts},
                                          {"groups", AttrType::kInt},
                                          {"input_shape", AttrType::kInts}})
                                  .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                    const char* op = "conv2d_grad_input";
                                    check_operands(op, in[0], in[1]);
                                    const Shape input = shape4_attr(op, attrs, "input_shape");
                                    check_grad_shape(op, in[0].shape, conv_output_shape(op, input, in[1].shape, attrs));
                                    return std::vector<TensorMeta>{{input, in[0].dtype, in[0].device}};
                                  })
                                  .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
                                    return conv_grad_signatures(in, Sbp::broadcast(), Sbp::split(0));
                                  })
                                  .def();

const OpDef& kConvGradWeight = OpBuilder("conv2d_grad_weight")
                                   .inputs({"grad", "input"})
                                   .outputs({"grad_weight"})
                                   .attrs({{"stride", AttrType::kInts},
                                           {"padding", AttrType::kInts},
                                           {"dilation", AttrType::kInts},
                                           {"groups", AttrType::kInt},
                                           {"weight_shape", AttrType::kInts}})
                                   .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                     const char* op = "conv2d_grad_weight";
                                     check_operands(op, in[0], in[1]);
                                     const Shape weight = shape4_attr(op, attrs, "weight_shape");
                                     check_grad_shape(op, in[0].shape, conv_output_shape(op, in[1].shape, weight, attrs));
                                     return std::vector<TensorMeta>{{weight, in[0].dtype, in[0].device}};
                                   })
                                   .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
                                     return conv_grad_signatures(in, Sbp::split(0), Sbp::partial_sum());
                                   })
                                   .def();

int64_t conv_flops(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out) {
  const Shape& weight = in[1].shape;
  return 2 * out[0].shape.numel() * weight[1] * weight[2] * weight[3];
}

const OpDef& kConv =
    OpBuilder("conv2d")
        .inputs({"input", "weight", "bias"}, /*variadic=*/true)
        .outputs({"out"})
        .attrs({{"stride", AttrType::kInts}, {"padding", AttrType::kInts}, {"dilation", AttrType::kInts}, {"groups", AttrType::kInt}})
        .infer(conv_infer)
        // 2 per multiply-accumulate: each output element sums (C_in / groups) * kH * kW products,
        // the extent of one filter (weight dims 1..3); the bias adds are not counted.
        .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return conv_flops(in, out);
        })
        // grad input and grad weight are each a convolution of the forward's size; they read
        // the input and the weight (a parameter, not charged again by the profiler).
        .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return ProfileCost{{0, 1}, {}, 2 * conv_flops(in, out), 0};
        })
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

// x with `before` zeros ahead of dim and `after` zeros behind it (cropped where negative).
Tensor zero_pad(const Tensor& x, int64_t dim, int64_t before, int64_t after) {
  const Tensor kept = after < 0 ? x.narrow(dim, 0, x.size(dim) + after) : x;
  auto zeros_of = [&](int64_t length) {
    Shape shape = kept.shape();
    shape[dim] = length;
    return zeros(shape, options_beside(kept));
  };
  TensorList pieces;
  if (before > 0) pieces.push_back(zeros_of(before));
  pieces.push_back(kept);
  if (after > 0) pieces.push_back(zeros_of(after));
  return pieces.size() > 1 ? cat(pieces, dim) : kept;
}

Attrs pool_attrs(Pair kernel, Pair stride, const Pair& padding) {
  if (stride.empty()) stride = kernel;
  return Attrs().set("kernel_size", kernel).set("stride", stride).set("padding", padding);
}

const std::vector<AttrDef>& pool_attr_defs(bool with_input_shape) {
  static const std::vector<AttrDef> forward{
      {"kernel_size", AttrType::kInts}, {"stride", AttrType::kInts}, {"padding", AttrType::kInts}};
  static const std::vector<AttrDef> backward = [] {
    std::vector<AttrDef> defs = forward;
    defs.push_back({"input_shape", AttrType::kInts});
    return defs;
  }();
  return with_input_shape ? backward : forward;
}

// PyTorch's pooling output size: floor (or ceil) of (in + 2 * pad - kernel) / stride, plus one. In
// ceil mode a last window that would start inside the right padding is dropped.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  if (!ceil_mode) return out_size(in, kernel, stride, pad, 1);
  const Wide span = static_cast<Wide>(in) + 2 * static_cast<Wide>(pad) - kernel + (stride - 1);
  Wide size = span / stride + 1;
  if (span % stride != 0 && span < 0) --size;
  if ((size - 1) * stride >= static_cast<Wide>(in) + pad) --size;
  return saturated(size);
}

// Checks pooling input x (N,C,H,W) under attrs; returns the output shape.
Shape pool_output_shape(const std::string& op, const Shape& x, const Attrs& attrs, bool ceil_mode = false) {
  const Pair& k = checked_pair(attrs, "kernel_size", op, 1);
  const Pair& s = checked_pair(attrs, "stride", op, 1);
  const Pair& p = checked_pair(attrs, "padding", op, 0);
  if (p[0] * 2 > k[0] || p[1] * 2 > k[1]) {
    fail(op, "pad should be at most half of the kernel size, got padding ", Shape(p), " and kernel ", Shape(k));
  }
  check_4d(op, x, "input", "(N,C,H,W)");
  check_nonempty_planes(op, x, "input");
  const int64_t oh = pool_out_size(x[2], k[0], s[0], p[0], ceil_mode), ow = pool_out_size(x[3], k[1], s[1], p[1], ceil_mode);
  if (oh < 1 || ow < 1) {
    fail(op, "given input size: (", x[1], "x", x[2], "x", x[3], "). Calculated output size: (", x[1], "x", oh, "x", ow,
         "). Output size is too small");
  }
  return {x[0], x[1], oh, ow};
}

InferFn pool_infer(const char* op, bool with_indices) {
  return [op, with_indices](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    checks::check_floating(op, in[0], "input");
    const Shape out = pool_output_shape(op, in[0].shape, attrs);
    std::vector<TensorMeta> metas{{out, in[0].dtype, in[0].device}};
    if (with_indices) metas.push_back({out, kInt64, in[0].device});
    return metas;
  };
}

// A pooling gradient: grad of the forward output's shape for input_shape; returns input_shape.
Shape pool_grad_input_shape(const std::string& op, const TensorMeta& grad, const Attrs& attrs) {
  checks::check_floating(op, grad, "grad");
  const Shape input = shape4_attr(op, attrs, "input_shape");
  check_grad_shape(op, grad.shape, pool_output_shape(op, input, attrs));
  return input;
}

// Scatters pooled gradients back through the saved argmax positions (flat h*w per plane). The
// window attributes let a kernel turn them into window offsets (cuDNN's backward reads windows).
const OpDef& kMaxPoolGrad = OpBuilder("max_pool2d_grad")
                                .inputs({"grad", "indices"})
                                .outputs({"grad_input"})
                                .attrs(pool_attr_defs(true))
                                .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                  const char* op = "max_pool2d_grad";
                                  const Shape input = pool_grad_input_shape(op, in[0], attrs);
                                  if (in[1].dtype != kInt64 || !(in[1].shape == in[0].shape)) {
                                    fail(op, "indices must be int64 of the grad's shape ", in[0].shape, ", got ", dtype_name(in[1].dtype), " ",
                                         in[1].shape);
                                  }
                                  return std::vector<TensorMeta>{{input, in[0].dtype, in[0].device}};
                                })
                                .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return per_sample_or_channel(in, 1); })
                                .def();

const OpDef& kMaxPool = OpBuilder("max_pool2d")
                            .inputs({"input"})
                            .outputs({"out", "indices"})
                            .attrs(pool_attr_defs(false))
                            .infer(pool_infer("max_pool2d", true))
                            .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return per_sample_or_channel(in, 2); })
                            // One compare per input element; the backward scatters one value per
                            // input element through the argmax indices alone.
                            .flops(flops::per_input_element)
                            .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
                              return ProfileCost{{}, {1}, in[0].shape.numel(), 0};
                            })
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
                                     .attrs(pool_attr_defs(false))
                                     .infer(pool_infer("max_pool2d", false))
                                     .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return per_sample_or_channel(in, 1); })
                                     .flops(flops::per_input_element)
                                     .def();

const OpDef& kAvgPoolGrad = OpBuilder("avg_pool2d_grad")
                                .inputs({"grad"})
                                .outputs({"grad_input"})
                                .attrs(pool_attr_defs(true))
                                .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                  return std::vector<TensorMeta>{{pool_grad_input_shape("avg_pool2d_grad", in[0], attrs), in[0].dtype, in[0].device}};
                                })
                                .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return per_sample_or_channel(in, 1); })
                                .def();

const OpDef& kAvgPool = OpBuilder("avg_pool2d")
                            .inputs({"input"})
                            .outputs({"out"})
                            .attrs(pool_attr_defs(false))
                            .infer(pool_infer("avg_pool2d", false))
                            .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return per_sample_or_channel(in, 1); })
                            // One add per input element; the backward spreads one value per input
                            // element by the window attributes alone.
                            .flops(flops::per_input_element)
                            .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
                              return ProfileCost{{}, {}, in[0].shape.numel(), 0};
                            })
                            .vjp([](const VjpContext& ctx) {
                              return TensorList{apply_one(kAvgPoolGrad, {ctx.grad()},
                                                          Attrs(ctx.attrs).set("input_shape", ctx.input_meta(0).shape))};
                            })
                            .def();

struct PoolGradVjps {
  PoolGradVjps() {
    // max_pool2d_grad is linear in grad: its vjp reads the upstream gradient at each argmax.
    op_def("max_pool2d_grad").vjp = [](const VjpContext& ctx) {
      const Shape& out = ctx.input_meta(0).shape;
      const Shape in = ctx.grad().shape();
      const Tensor planes = reshape(ctx.grad(), {in[0], in[1], in[2] * in[3]});
      return TensorList{reshape(gather(planes, 2, reshape(ctx.input(1), {out[0], out[1], out[2] * out[3]})), out), Tensor()};
    };
    op_def("avg_pool2d_grad").vjp = [](const VjpContext& ctx) {
      Attrs attrs = ctx.attrs;
      return TensorList{apply_one(kAvgPool, {ctx.grad()}, attrs)};
    };
  }
} pool_grad_vjps;

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  TensorList inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  return apply_one(kConv, inputs, conv_attrs(stride, padding, dilation, groups));
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
                        std::vector<int64_t> padding, std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                        int64_t groups) {
  // The transposed convolution is the input-gradient of the convolution it transposes, whose
  // input shape is computed here; conv2d_grad_input checks the rest.
  const char* op = "conv_transpose2d";
  Attrs attrs = conv_attrs(stride, padding, dilation, groups);
  checked_pair(attrs, "stride", op, 1);
  checked_pair(attrs, "padding", op, 0);
  checked_pair(attrs, "dilation", op, 1);
  checked_pair(Attrs().set("output_padding", output_padding), "output_padding", op, 0);
  if (input.dim() != 4 || weight.dim() != 4) fail(op, "expected 4-d input and weight, got ", input.shape(), " and ", weight.shape());
  if (groups < 1 || weight.size(0) != input.size(1) || input.size(1) % groups != 0) {
    fail(op, "weight ", weight.shape(), " expects ", weight.size(0), " input channels in ", groups, " groups, but input ", input.shape(),
         " has ", input.size(1));
  }
  for (int d = 0; d < 2; ++d) {
    // The gradient kernels (oneDNN's among them) need the forward geometry to give back exactly
    // this input size, which holds when output_padding < stride.
    if (output_padding[d] >= stride[d]) {
      fail(op, "output padding must be smaller than stride, got output_padding ", Shape(output_padding), " and stride ", Shape(stride));
    }
  }
  Shape out{input.size(0), weight.size(1) * groups};
  for (int d = 0; d < 2; ++d) {
    out.push_back(transposed_size(input.size(2 + d), weight.size(2 + d), stride[d], padding[d], dilation[d], output_padding[d]));
    if (out[out.size() - 1] <= 0) fail(op, "input ", input.shape(), " gives an empty output");
  }
  Tensor y = apply_one(kConvGradInput, {input, weight}, attrs.set("input_shape", out));
  if (bias.defined()) {
    if (!(bias.shape() == Shape{out[1]})) fail(op, "bias must have shape (", out[1], ",), got ", bias.shape());
    y = y + bias.reshape({1, out[1], 1, 1});
  }
  return y;
}

Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride, std::vector<int64_t> padding) {
  Attrs attrs = pool_attrs(kernel_size, stride, padding);
  if (is_grad_enabled() && input.requires_grad()) return apply(kMaxPool, {input}, std::move(attrs))[0];
  return apply_one(kMaxPoolInference, {input}, std::move(attrs));
}

Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride, std::vector<int64_t> padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  Attrs attrs = pool_attrs(kernel_size, stride, padding);
  FLOW_ARG_CHECK(!divisor_override || *divisor_override != 0, op, "divisor must be not zero");
  const bool padded = attrs.get<Pair>("padding") != Pair{0, 0};
  if (!ceil_mode && !divisor_override && (count_include_pad || !padded)) return apply_one(kAvgPool, {input}, std::move(attrs));
  // The other options as a composite: the window sums of the input zero-padded to the last
  // window's extent (the primitive without padding, times the window size), each scaled by
  // kh * kw / divisor. The primitive's gradients give this one's to every order.
  FLOW_ARG_CHECK(input.is_floating_point(), op, "expected a floating input, got ", dtype_name(input.dtype()));
  const Shape out = pool_output_shape(op, input.shape(), attrs, ceil_mode);
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  // Per output row (d = 0) or column (d = 1): the window's extent clipped to the padded input, and
  // to the input itself.
  auto extents = [&](int d) {
    const int64_t size = input.size(2 + d);
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int64_t o = 0; o < out[2 + d]; ++o) {
      const int64_t start = o * s[d] - p[d], end = std::min(start + k[d], size + p[d]);
      spans.emplace_back(end - start, std::min(end, size) - std::max<int64_t>(start, 0));
    }
    return spans;
  };
  const auto rows = extents(0), cols = extents(1);
  std::vector<double> factors;
  factors.reserve(rows.size() * cols.size());
  for (const auto& [row_window, row_valid] : rows) {
    for (const auto& [col_window, col_valid] : cols) {
      const int64_t divisor = divisor_override ? *divisor_override : count_include_pad ? row_window * col_window : row_valid * col_valid;
      factors.push_back(static_cast<double>(k[0] * k[1]) / static_cast<double>(divisor));
    }
  }
  Tensor x = input;
  for (int d = 0; d < 2; ++d) {
    const int64_t dim = 2 + d, extent = (out[dim] - 1) * s[d] + k[d];
    x = zero_pad(x, dim, p[d], extent - input.size(dim) - p[d]);
  }
  const Tensor scale = tensor(factors, Shape{out[2], out[3]}, options_beside(input));
  return apply_one(kAvgPool, {x}, pool_attrs(k, s, {0, 0})) * scale;
}

}  // namespace flow
