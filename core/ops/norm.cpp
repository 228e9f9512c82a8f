// Batch normalization as primitives: batch_norm_eval (given statistics; its vjp is written in
// functional ops) and batch_norm_train (batch statistics) with the closed-form gradient primitive
// batch_norm_train_grad. Graph passes (conv + batch norm folding) match these op names and input
// orders, so keep them stable. Layer normalization: layer_norm and layer_norm_grad.
#include "core/ops/norm.h"

#include <cmath>

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/creation.h"
#include "core/ops/reduce.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"

namespace flow {
namespace {

constexpr const char* kOp = "batch_norm";

void check_input(const TensorMeta& input) {
  if (input.shape.ndim() < 2) fail(kOp, "expected input with a channel dim (N,C,...), got ", input.shape);
  if (input.shape[1] == 0) fail(kOp, "expected at least one channel, got input ", input.shape);
  if (!is_floating(input.dtype)) fail(kOp, "expected a floating input, got ", dtype_name(input.dtype));
}

void check_eps(const char* op, const Attrs& attrs) {
  const double eps = attrs.get<double>("eps");
  if (!(eps >= 0) || !std::isfinite(eps)) fail(op, "eps must be finite and non-negative, got ", eps);
}

// One (C) tensor per channel of input, of its dtype.
void check_channel_meta(const TensorMeta& input, const TensorMeta& meta, const char* name) {
  if (!(meta.shape == Shape{input.shape[1]})) {
    fail(kOp, name, " should have shape (", input.shape[1], ",), one value per channel of input ", input.shape, ", got ", meta.shape);
  }
  checks::check_same_dtype(kOp, input, meta, name);
}

// Per-channel tensors (statistics, weight, bias) are (C) and of the input's dtype.
void check_channel_inputs(const std::vector<TensorMeta>& in, const std::vector<const char*>& names) {
  for (size_t i = 1; i < in.size(); ++i) check_channel_meta(in[0], in[i], names[i - 1]);
}

// Values each channel's statistics are taken over: N * d2 * d3 * ... (C > 0).
int64_t values_per_channel(const Shape& shape) { return shape.numel() / shape[1]; }

// Shape (1, C, 1, ...) broadcasting per-channel values over an input of `rank` dims, and the dims
// a per-channel reduction sums.
Shape channel_shape(int64_t channels, int64_t rank) {
  Shape shape(std::vector<int64_t>(static_cast<size_t>(rank), 1));
  shape[1] = channels;
  return shape;
}
std::vector<int64_t> non_channel_dims(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

std::vector<SbpSignature> all_broadcast(const std::vector<TensorMeta>& in, size_t outputs) {
  return {{std::vector<Sbp>(in.size(), Sbp::broadcast()), std::vector<Sbp>(outputs, Sbp::broadcast())}};
}

// All broadcast, or split by channel: each channel's statistics are then whole on one rank.
// Tensors of the input's shape (listed in `activations`) split on dim 1, per-channel ones on 0.
std::vector<SbpSignature> broadcast_or_channel_split(const std::vector<TensorMeta>& in, const std::vector<size_t>& activations,
                                                     size_t outputs) {
  std::vector<SbpSignature> signatures = all_broadcast(in, outputs);
  SbpSignature by_channel{std::vector<Sbp>(in.size(), Sbp::split(0)), std::vector<Sbp>(outputs, Sbp::split(0))};
  for (size_t i : activations) by_channel.inputs[i] = Sbp::split(1);
  by_channel.outputs[0] = Sbp::split(1);
  signatures.push_back(by_channel);
  return signatures;
}

// FLOPs per element as fvcore and Colossal-AI count batch norm: eval normalises with fixed
// statistics (a scale, plus a shift when affine); training also computes the mean and variance
// (4 per element, 5 with the affine step). The backward is taken as twice the forward (the grad
// input pass and the grad weight/bias reductions).
int64_t batch_norm_flops(const TensorMeta& input, bool affine, bool training) {
  return input.shape.numel() * (training ? (affine ? 5 : 4) : (affine ? 2 : 1));
}

// Batch norm in training and layer norm (inputs: input, then optional weight and bias; outputs:
// out, then the statistics).
int64_t training_norm_flops(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
  return batch_norm_flops(in[0], in.size() == 3, true);
}
// The vjp reads the input, the weight and the statistics the forward output.
ProfileCost training_norm_cost(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  std::vector<size_t> saved{0};
  if (in.size() == 3) saved.push_back(1);
  return ProfileCost{saved, {1, 2}, 2 * training_norm_flops(in, out, attrs), 0};
}

const OpDef& kEval = OpBuilder("batch_norm_eval")
                         .inputs({"input", "running_mean", "running_var", "weight", "bias"}, /*variadic=*/true)
                         .outputs({"out"})
                         .attrs({{"eps", AttrType::kDouble}})
                         .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                           if (in.size() != 3 && in.size() != 5)
                             fail(kOp, "expected input, running_mean, running_var and optional weight and bias");
                           check_eps(kOp, attrs);
                           check_input(in[0]);
                           check_channel_inputs(in, {"running_mean", "running_var", "weight", "bias"});
                           return std::vector<TensorMeta>{in[0]};
                         })
                         .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
                           return batch_norm_flops(in[0], in.size() == 5, false);
                         })
                         // The vjp reads the input and the statistics and weight (buffers and
                         // parameters, which the profiler does not charge again).
                         .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
                           std::vector<size_t> saved{0, 1, 2};
                           if (in.size() == 5) saved.push_back(3);
                           return ProfileCost{saved, {}, 2 * batch_norm_flops(in[0], in.size() == 5, false), 0};
                         })
                         .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
                           // The statistics are fixed, so samples normalise independently.
                           std::vector<SbpSignature> signatures = all_broadcast(in, 1);
                           std::vector<Sbp> split(in.size(), Sbp::broadcast());
                           split[0] = Sbp::split(0);
                           signatures.push_back({split, {Sbp::split(0)}});
                           return signatures;
                         })
                         .vjp([](const VjpContext& ctx) {
                           const int64_t rank = static_cast<int64_t>(ctx.input_meta(0).shape.ndim());
                           const Shape shape = channel_shape(ctx.input_meta(0).shape[1], rank);
                           const std::vector<int64_t> dims = non_channel_dims(rank);
                           const bool affine = ctx.num_inputs() == 5;
                           const Tensor invstd = rsqrt(ctx.input(2) + ctx.attrs.get<double>("eps"));
                           TensorList grads(ctx.num_inputs());
                           if (ctx.needs_input_grad[0]) grads[0] = ctx.grad() * (affine ? ctx.input(3) * invstd : invstd).reshape(shape);
                           if (affine && ctx.needs_input_grad[3]) {
                             grads[3] = sum(ctx.grad() * ((ctx.input(0) - ctx.input(1).reshape(shape)) * invstd.reshape(shape)), dims);
                           }
                           if (affine && ctx.needs_input_grad[4]) grads[4] = sum(ctx.grad(), dims);
                           return grads;
                         })
                         .def();

// The vjp of batch_norm_train_grad, whose kernel computes per channel (means over the other dims,
// N values, xhat = (x - mean) * invstd, a = grad_out * weight):
//   grad_input = invstd (a - <a> - xhat <a xhat>) + grad_mean / N - grad_invstd invstd^2 xhat / N,
//   grad_weight = sum(grad_out xhat), grad_bias = sum(grad_out).
// mean and invstd are inputs of their own here (batch_norm_train's outputs): the partial
// derivatives w.r.t. them go back through batch_norm_train's vjp, which adds their dependence on x.
TensorList batch_norm_train_grad_vjp(const VjpContext& ctx) {
  const Shape& input_shape = ctx.input_meta(3).shape;
  const int64_t channels = input_shape[1], rank = input_shape.ndim();
  const Shape shape = channel_shape(channels, rank);
  const std::vector<int64_t> dims = non_channel_dims(rank);
  const double count = static_cast<double>(values_per_channel(input_shape));
  auto per_channel = [&](const Tensor& t) { return reshape(t, shape); };
  auto avg = [&](const Tensor& t) { return mean(t, dims, true); };
  auto channel_values = [&](const Tensor& t) { return reshape(t, Shape{channels}); };
  const bool affine = ctx.num_inputs() == 7;
  const Tensor g = ctx.input(0), x = ctx.input(3), invstd = per_channel(ctx.input(5)), grad_invstd = per_channel(ctx.input(2));
  const Tensor up = ctx.grad(0), up_weight = per_channel(ctx.grad(1)), up_bias = per_channel(ctx.grad(2));
  const Tensor xhat = (x - per_channel(ctx.input(4))) * invstd;
  const Tensor weight = affine ? per_channel(ctx.input(6)) : Tensor();
  const Tensor a = affine ? g * weight : g;
  const Tensor up_xhat = avg(up * xhat), a_xhat = avg(a * xhat);
  const Tensor projected = (up - avg(up) - xhat * up_xhat) * invstd;  // d grad_input / d a, applied to up
  TensorList grads(ctx.num_inputs());
  grads[0] = (affine ? projected * weight : projected) + xhat * up_weight + up_bias;
  grads[1] = channel_values(avg(up));
  grads[2] = channel_values(neg(invstd * invstd * up_xhat));
  const Tensor grad_x = invstd * (neg(invstd * (up * a_xhat + a * up_xhat)) - grad_invstd * invstd * invstd * up * (1.0 / count) + up_weight * g);
  grads[3] = grad_x;
  grads[4] = neg(sum(grad_x, dims));
  const Tensor grad_s = (avg(up * a) - avg(up) * avg(a) - up_xhat * a_xhat * 3.0) * count - grad_invstd * invstd * up_xhat * 3.0 +
                        up_weight * avg(g * xhat) * count / invstd;
  grads[5] = channel_values(grad_s);
  if (affine) grads[6] = sum(g * projected, dims);
  return grads;
}

// Gradients w.r.t. input, weight and bias from those w.r.t. the three outputs of
// batch_norm_train; its own vjp (above) gives double backward.
const OpDef& kTrainGrad = OpBuilder("batch_norm_train_grad")
                              .inputs({"grad_out", "grad_mean", "grad_invstd", "input", "mean", "invstd", "weight"}, /*variadic=*/true)
                              .outputs({"grad_input", "grad_weight", "grad_bias"})
                              .attrs({{"eps", AttrType::kDouble}})
                              .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                if (in.size() != 6 && in.size() != 7) {
                                  fail(kOp, "expected grad_out, grad_mean, grad_invstd, input, mean, invstd and optional weight");
                                }
                                check_eps(kOp, attrs);
                                const TensorMeta& input = in[3];
                                check_input(input);
                                if (!(in[0].shape == input.shape)) fail(kOp, "grad_out ", in[0].shape, " must match input ", input.shape);
                                checks::check_same_dtype(kOp, input, in[0], "grad_out");
                                const char* channel_names[] = {"grad_mean", "grad_invstd", "", "mean", "invstd", "weight"};
                                for (size_t i = 1; i < in.size(); ++i) {
                                  if (i != 3) check_channel_meta(input, in[i], channel_names[i - 1]);
                                }
                                const TensorMeta channel{Shape{input.shape[1]}, input.dtype, input.device};
                                return std::vector<TensorMeta>{input, channel, channel};
                              })
                              .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return broadcast_or_channel_split(in, {0, 3}, 3); })
                              .vjp(batch_norm_train_grad_vjp)
                              .def();

const OpDef& kTrain = OpBuilder("batch_norm_train")
                          .inputs({"input", "weight", "bias"}, /*variadic=*/true)
                          .outputs({"out", "mean", "invstd"})
                          .attrs({{"eps", AttrType::kDouble}})
                          .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                            if (in.size() != 1 && in.size() != 3) fail(kOp, "expected input and optional weight and bias");
                            check_eps(kOp, attrs);
                            check_input(in[0]);
                            check_channel_inputs(in, {"weight", "bias"});
                            if (values_per_channel(in[0].shape) <= 1) {
                              fail(kOp, "expected more than 1 value per channel when training, got input ", in[0].shape);
                            }
                            const TensorMeta channel{Shape{in[0].shape[1]}, in[0].dtype, in[0].device};
                            return std::vector<TensorMeta>{in[0], channel, channel};
                          })
                          // Batch statistics need the whole batch: a split batch is synced by
                          // batch_norm_train below, not by a signature of the primitive.
                          .sbp([](const std::vector<TensorMeta>& in, const Attrs&) { return broadcast_or_channel_split(in, {0}, 3); })
                          .flops(training_norm_flops)
                          .profile_cost(training_norm_cost)
                          .vjp([](const VjpContext& ctx) {
                            TensorList inputs{ctx.grad(0), ctx.grad(1), ctx.grad(2), ctx.input(0), ctx.output(1), ctx.output(2)};
                            if (ctx.num_inputs() == 3) inputs.push_back(ctx.input(1));
                            const TensorList grads = apply(kTrainGrad, inputs, ctx.attrs);
                            if (ctx.num_inputs() == 1) return TensorList{grads[0]};
                            return TensorList{grads[0], grads[1], grads[2]};
                          })
                          .def();

// The ops take weight and bias together or not at all; a missing half is the identity.
void append_affine(TensorList& inputs, const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (!weight.defined() && !bias.defined()) return;
  FLOW_ARG_CHECK(input.dim() >= 2, kOp, "expected input with a channel dim (N,C,...), got ", input.shape());
  const Tensor& given = weight.defined() ? weight : bias;
  const TensorOptions options = options_beside(given);
  inputs.push_back(weight.defined() ? weight : ones({input.size(1)}, options));
  inputs.push_back(bias.defined() ? bias : zeros({input.size(1)}, options));
}

constexpr const char* kLayerOp = "layer_norm";

// Rows and the normalized shape of a layer_norm input.
Shape row_shape(const TensorMeta& input, int64_t normalized_ndim) {
  return Shape(std::vector<int64_t>(input.shape.begin(), input.shape.end() - normalized_ndim));
}
Shape normalized_shape_of(const TensorMeta& input, int64_t normalized_ndim) {
  return Shape(std::vector<int64_t>(input.shape.end() - normalized_ndim, input.shape.end()));
}

// The normalized_ndim attribute, checked against a floating input.
int64_t normalized_ndim(const char* op, const TensorMeta& input, const Attrs& attrs) {
  const int64_t k = attrs.get<int64_t>("normalized_ndim");
  if (k < 1 || k > input.shape.ndim()) fail(op, "cannot normalize the last ", k, " dims of input ", input.shape);
  if (!is_floating(input.dtype)) fail(op, "expected a floating input, got ", dtype_name(input.dtype));
  return k;
}

// The vjp of layer_norm_grad, whose kernel computes per row (means over the normalized dims,
// xhat = (x - mean) * rstd, a = grad_out * weight):
//   grad_input = rstd (a - <a> - xhat <a xhat>), grad_weight = sum(grad_out xhat), grad_bias = sum(grad_out).
// layer_norm's vjp passes nothing back through its mean and rstd outputs, so the derivative w.r.t.
// the input is the total one, through xhat's and rstd's dependence on x as well; mean and rstd get none.
TensorList layer_norm_grad_vjp(const VjpContext& ctx) {
  const TensorMeta& input = ctx.input_meta(1);
  const int64_t k = ctx.attrs.get<int64_t>("normalized_ndim"), rank = input.shape.ndim();
  std::vector<int64_t> dims, row_dims;
  for (int64_t d = 0; d < rank; ++d) (d < rank - k ? row_dims : dims).push_back(d);
  Shape stat_shape = row_shape(input, k);
  for (int64_t i = 0; i < k; ++i) stat_shape.push_back(1);
  auto avg = [&](const Tensor& t) { return mean(t, dims, true); };
  const bool affine = ctx.num_inputs() == 5;
  const Tensor g = ctx.input(0), rstd = reshape(ctx.input(3), stat_shape);
  const Tensor xhat = (ctx.input(1) - reshape(ctx.input(2), stat_shape)) * rstd;
  const Tensor a = affine ? g * ctx.input(4) : g;
  const Tensor up = ctx.grad(0), up_weight = ctx.grad(1), up_bias = ctx.grad(2);
  // q - <q> - xhat <q xhat>: rstd times it is the input gradient of any function of xhat with gradient q.
  auto project = [&](const Tensor& q) { return q - avg(q) - xhat * avg(q * xhat); };
  const Tensor up_xhat = avg(up * xhat), a_xhat = avg(a * xhat);
  const Tensor projected = project(up) * rstd;
  TensorList grads(ctx.num_inputs());
  grads[0] = (affine ? projected * ctx.input(4) : projected) + xhat * up_weight + up_bias;
  grads[1] = rstd * rstd * (xhat * (a_xhat * up_xhat - avg(up * a) + avg(up) * avg(a)) - project(a * up_xhat + up * a_xhat)) +
             rstd * project(g * up_weight);
  if (affine) grads[4] = sum(g * projected, row_dims);
  return grads;
}

// Gradients w.r.t. input, weight and bias from that w.r.t. layer_norm's output (its mean and rstd
// outputs are internal: nothing differentiates them); its own vjp (above) gives double backward.
const OpDef& kLayerNormGrad = OpBuilder("layer_norm_grad")
                                  .inputs({"grad_out", "input", "mean", "rstd", "weight"}, /*variadic=*/true)
                                  .outputs({"grad_input", "grad_weight", "grad_bias"})
                                  .attrs({{"normalized_ndim", AttrType::kInt}, {"eps", AttrType::kDouble}})
                                  .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                    const char* op = "layer_norm_grad";
                                    if (in.size() != 4 && in.size() != 5) fail(op, "expected grad_out, input, mean, rstd and optional weight");
                                    check_eps(op, attrs);
                                    const TensorMeta& input = in[1];
                                    const int64_t k = normalized_ndim(op, input, attrs);
                                    const TensorMeta rows{row_shape(input, k), input.dtype, input.device};
                                    const TensorMeta affine{normalized_shape_of(input, k), input.dtype, input.device};
                                    const std::vector<std::pair<const char*, const TensorMeta*>> expected{
                                        {"grad_out", &input}, {"mean", &rows}, {"rstd", &rows}, {"weight", &affine}};
                                    for (size_t i = 0; i < in.size(); ++i) {
                                      if (i == 1) continue;
                                      const auto& [name, meta] = expected[i == 0 ? 0 : i - 1];
                                      if (!(in[i].shape == meta->shape)) fail(op, name, " should have shape ", meta->shape, ", got ", in[i].shape);
                                      checks::check_same_dtype(op, input, in[i], name);
                                    }
                                    return std::vector<TensorMeta>{input, affine, affine};
                                  })
                                  .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                                    // Rows split along dim 0: each rank's rows give its input
                                    // gradient and partial sums of the weight's and bias's.
                                    std::vector<SbpSignature> signatures = all_broadcast(in, 3);
                                    if (in[1].shape.ndim() > attrs.get<int64_t>("normalized_ndim")) {
                                      std::vector<Sbp> split(in.size(), Sbp::split(0));
                                      if (in.size() == 5) split[4] = Sbp::broadcast();
                                      signatures.push_back({split, {Sbp::split(0), Sbp::partial_sum(), Sbp::partial_sum()}});
                                    }
                                    return signatures;
                                  })
                                  .vjp(layer_norm_grad_vjp)
                                  .def();

const OpDef& kLayerNorm =
    OpBuilder("layer_norm")
        .inputs({"input", "weight", "bias"}, /*variadic=*/true)
        .outputs({"out", "mean", "rstd"})
        .attrs({{"normalized_ndim", AttrType::kInt}, {"eps", AttrType::kDouble}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          if (in.size() != 1 && in.size() != 3) fail(kLayerOp, "expected input and optional weight and bias");
          check_eps(kLayerOp, attrs);
          const TensorMeta& input = in[0];
          const int64_t k = normalized_ndim(kLayerOp, input, attrs);
          const Shape normalized = normalized_shape_of(input, k);
          for (size_t i = 1; i < in.size(); ++i) {
            const char* name = i == 1 ? "weight" : "bias";
            if (!(in[i].shape == normalized)) fail(kLayerOp, name, " should have shape ", normalized, ", got ", in[i].shape);
            if (in[i].dtype != input.dtype) fail(kLayerOp, name, " has dtype ", dtype_name(in[i].dtype), " but input has ", dtype_name(input.dtype));
          }
          const TensorMeta rows{row_shape(input, k), input.dtype, input.device};
          return std::vector<TensorMeta>{input, rows, rows};
        })
        // Counted as batch norm in training: statistics, normalisation and the affine step.
        .flops(training_norm_flops)
        .profile_cost(training_norm_cost)
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          // Rows normalise independently: split along a leading dim.
          std::vector<SbpSignature> signatures = all_broadcast(in, 3);
          if (in[0].shape.ndim() > attrs.get<int64_t>("normalized_ndim")) {
            std::vector<Sbp> split(in.size(), Sbp::broadcast());
            split[0] = Sbp::split(0);
            signatures.push_back({split, {Sbp::split(0), Sbp::split(0), Sbp::split(0)}});
          }
          return signatures;
        })
        .vjp([](const VjpContext& ctx) {
          TensorList inputs{ctx.grad(0), ctx.input(0), ctx.output(1), ctx.output(2)};
          if (ctx.num_inputs() == 3) inputs.push_back(ctx.input(1));
          const TensorList grads = apply(kLayerNormGrad, inputs, ctx.attrs);
          if (ctx.num_inputs() == 1) return TensorList{grads[0]};
          return TensorList{grads[0], grads[1], grads[2]};
        })
        .def();

}  // namespace

Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  const auto k = static_cast<int64_t>(normalized_shape.size());
  FLOW_ARG_CHECK(k >= 1 && input.dim() >= k && Shape(std::vector<int64_t>(input.shape().end() - k, input.shape().end())) == Shape(normalized_shape),
                 kLayerOp, "input ", input.shape(), " does not end with normalized_shape ", Shape(normalized_shape));
  TensorList inputs{input};
  if (weight.defined() || bias.defined()) {
    const Tensor& given = weight.defined() ? weight : bias;
    const TensorOptions options = options_beside(given);
    inputs.push_back(weight.defined() ? weight : ones(Shape(normalized_shape), options));
    inputs.push_back(bias.defined() ? bias : zeros(Shape(normalized_shape), options));
  }
  return apply(kLayerNorm, inputs, Attrs().set("normalized_ndim", k).set("eps", eps))[0];
}

Tensor batch_norm_eval(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       double eps) {
  FLOW_ARG_CHECK(running_mean.defined() && running_var.defined(), kOp, "running_mean and running_var are needed outside training");
  TensorList inputs{input, running_mean, running_var};
  append_affine(inputs, input, weight, bias);
  return apply_one(kEval, inputs, Attrs().set("eps", eps));
}

namespace {
// Whether some dimension of a global input's sbp splits it along a batch or spatial dim: the
// statistics of each channel then come from several ranks.
bool splits_statistics(const Tensor& input) {
  if (!input.is_global()) return false;
  for (const Sbp& sbp : input.sbp()) {
    if (sbp.is_split() && sbp.axis != 1) return true;
  }
  return false;
}

// SyncBatchNorm, as composed ops: the per-channel sums of each rank's piece are partial sums of
// the batch's, and boxing them to broadcast all-reduces C values twice (mean, then variance),
// while the normalisation runs on each piece. The primitive would instead gather the whole
// activation onto every rank. Autograd differentiates the composition (two more all-reduces of
// C values in backward).
BatchNormTrainResult synced_batch_norm_train(const TensorList& inputs, double eps) {
  const Tensor& input = inputs[0];
  const int64_t rank = input.dim();
  const std::vector<int64_t> dims = non_channel_dims(rank);
  const Shape shape = channel_shape(input.size(1), rank);
  const double count = static_cast<double>(values_per_channel(input.shape()));
  const NdSbp broadcast = broadcast_sbp(input.placement());
  const Tensor mean = (sum(input, dims) / count).to_global(input.placement(), broadcast);
  const Tensor centered = input - mean.reshape(shape);
  const Tensor var = (sum(centered * centered, dims) / count).to_global(input.placement(), broadcast);
  const Tensor invstd = rsqrt(var + eps);
  Tensor out = centered * invstd.reshape(shape);
  if (inputs.size() == 3) out = out * inputs[1].reshape(shape) + inputs[2].reshape(shape);
  return {out, mean, invstd};
}
}  // namespace

BatchNormTrainResult batch_norm_train(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  TensorList inputs{input};
  append_affine(inputs, input, weight, bias);
  if (splits_statistics(input)) {
    check_and_infer(kTrain, inputs, Attrs().set("eps", eps));
    return synced_batch_norm_train(inputs, eps);
  }
  TensorList outputs = apply(kTrain, inputs, Attrs().set("eps", eps));
  return {outputs[0], outputs[1], outputs[2]};
}

}  // namespace flow
