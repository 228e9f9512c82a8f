// Reductions. Primitives: reduce_sum/prod/max/min over sorted unique dims, argmax/argmin and
// max_dim/min_dim along one dim. mean, var, std and logsumexp are composites of primitives, so
// their gradients come from the primitives' vjps.
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/flops.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"

namespace flow {
namespace {

const std::vector<int64_t>& dims_of(const Attrs& attrs) { return attrs.get<std::vector<int64_t>>("dims"); }

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Gradient of a reduced output, viewed with the reduced dims restored and broadcast to the input.
Tensor expand_back(const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& dims) {
  return reshape(grad, reduced_shape(input_shape, dims, true)).expand(input_shape);
}

std::vector<SbpSignature> reduce_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs, bool partial_ok) {
  const auto& dims = dims_of(attrs);
  const bool keepdim = attrs.get<bool>("keepdim");
  std::vector<SbpSignature> signatures;
  int64_t out_axis = 0;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) signatures.push_back({{Sbp::split(d)}, {Sbp::split(out_axis)}});
    else if (partial_ok) signatures.push_back({{Sbp::split(d)}, {Sbp::partial_sum()}});
    if (!reduced || keepdim) ++out_axis;
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  return signatures;
}

// The dims attribute of a reduction: sorted, unique dims of the input (none for a 0-d input).
// max and min have no identity, so they cannot reduce an empty dim.
std::vector<TensorMeta> reduction_metas(const std::vector<TensorMeta>& in, const Attrs& attrs, const char* op, bool needs_values) {
  const Shape& shape = in[0].shape;
  const auto& dims = dims_of(attrs);
  for (size_t i = 0; i < dims.size(); ++i) {
    checks::check_axis(op, dims[i], shape.ndim());
    if (i > 0 && dims[i] <= dims[i - 1]) fail(op, "dims must be sorted and unique, got ", Shape(dims));
    if (needs_values && shape[dims[i]] == 0) fail(op, "cannot reduce over dimension ", dims[i], " of size 0 (input shape ", shape, ")");
  }
  return {{reduced_shape(shape, dims, attrs.get<bool>("keepdim")), in[0].dtype, in[0].device}};
}

// needs_values: max and min, which have no value over an empty dimension; vjp_reads_values: the
// vjp reads the input and the output (max, min, prod), not only their shapes (sum).
const OpDef& reduction(const char* name, bool partial_ok, VjpFn vjp, bool needs_values = false, bool vjp_reads_values = false) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"out"})
      .attrs({{"dims", AttrType::kInts}, {"keepdim", AttrType::kBool}})
      .infer([name, needs_values](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        return reduction_metas(in, attrs, name, needs_values);
      })
      .sbp([partial_ok](const std::vector<TensorMeta>& in, const Attrs& attrs) { return reduce_sbp(in, attrs, partial_ok); })
      // One operation per input element; the backward writes one value per input element, and
      // max/min compare the input with their result to route it.
      .flops(flops::per_input_element)
      .profile_cost([vjp_reads_values](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
        return vjp_reads_values ? ProfileCost{{0}, {0}, in[0].shape.numel(), 0} : ProfileCost{{}, {}, in[0].shape.numel(), 0};
      })
      .vjp(std::move(vjp))
      .def();
}

// Gradient of max/min over dims: shared evenly among the elements equal to the result.
TensorList extremum_vjp(const VjpContext& ctx) {
  const Shape& shape = ctx.input_meta(0).shape;
  const auto& dims = dims_of(ctx.attrs);
  const Tensor x = ctx.input(0);
  const Tensor mask = to(eq(x, expand_back(ctx.output(0), shape, dims)), x.dtype());
  const Tensor count = apply_one(find_op("reduce_sum"), {mask}, Attrs().set("dims", dims).set("keepdim", true));
  return TensorList{expand_back(ctx.grad(), shape, dims) * mask / count};
}

const OpDef& kSum = reduction("reduce_sum", true, [](const VjpContext& ctx) {
  return TensorList{expand_back(ctx.grad(), ctx.input_meta(0).shape, dims_of(ctx.attrs))};
});
const OpDef& kProd = reduction("reduce_prod", false, [](const VjpContext& ctx) {
  const Shape& shape = ctx.input_meta(0).shape;
  const auto& dims = dims_of(ctx.attrs);
  return TensorList{expand_back(ctx.grad() * ctx.output(0), shape, dims) / ctx.input(0)};
}, false, true);
const OpDef& kMax = reduction("reduce_max", false, extremum_vjp, true, true);
const OpDef& kMin = reduction("reduce_min", false, extremum_vjp, true, true);

std::vector<TensorMeta> along_dim_metas(const std::vector<TensorMeta>& in, const Attrs& attrs, bool with_values,
                                        const char* op) {
  const Shape& shape = in[0].shape;
  const int64_t dim = attrs.get<int64_t>("dim");
  checks::check_axis(op, dim, std::max<int64_t>(shape.ndim(), 1));  // a 0-d input acts as 1-d
  if (shape.ndim() > 0 && shape[dim] == 0) {
    fail(op, "cannot reduce over dimension ", dim, " of size 0 (input shape ", shape, ")");
  }
  const Shape out = shape.ndim() == 0 ? Shape() : reduced_shape(shape, {dim}, attrs.get<bool>("keepdim"));
  std::vector<TensorMeta> metas;
  if (with_values) metas.push_back({out, in[0].dtype, in[0].device});
  metas.push_back({out, kInt64, in[0].device});
  return metas;
}

std::vector<SbpSignature> along_dim_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs, size_t outputs) {
  const int64_t dim = attrs.get<int64_t>("dim");
  const bool keepdim = attrs.get<bool>("keepdim");
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d == dim) continue;
    const Sbp out = Sbp::split(keepdim || d < dim ? d : d - 1);
    signatures.push_back({{Sbp::split(d)}, std::vector<Sbp>(outputs, out)});
  }
  signatures.push_back({{Sbp::broadcast()}, std::vector<Sbp>(outputs, Sbp::broadcast())});
  return signatures;
}

const OpDef& arg_op(const char* name) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"indices"})
      .attrs({{"dim", AttrType::kInt}, {"keepdim", AttrType::kBool}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs& attrs) { return along_dim_metas(in, attrs, false, name); })
      .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return along_dim_sbp(in, attrs, 1); })
      .def();
}

// Gradient of values along a dim: to the position each index names.
TensorList values_indices_vjp(const VjpContext& ctx) {
  const Shape& shape = ctx.input_meta(0).shape;
  if (shape.ndim() == 0) return TensorList{ctx.grad()};
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  Tensor grad = ctx.grad(0), indices = ctx.output(1);
  if (!ctx.attrs.get<bool>("keepdim")) {
    grad = unsqueeze(grad, dim);
    indices = unsqueeze(indices, dim);
  }
  Shape positions_shape(std::vector<int64_t>(static_cast<size_t>(shape.ndim()), 1));
  positions_shape[dim] = shape[dim];
  const Tensor positions = reshape(arange(shape[dim], TensorOptions(kInt64).device(ctx.input_meta(0).device)), positions_shape);
  return TensorList{where(eq(positions, indices), grad, 0).expand(shape).contiguous()};
}

const OpDef& values_indices_op(const char* name) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"values", "indices"})
      .attrs({{"dim", AttrType::kInt}, {"keepdim", AttrType::kBool}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs& attrs) { return along_dim_metas(in, attrs, true, name); })
      .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return along_dim_sbp(in, attrs, 2); })
      .vjp(values_indices_vjp)
      .def();
}

const OpDef& kArgmax = arg_op("argmax");
const OpDef& kArgmin = arg_op("argmin");
const OpDef& kMaxDim = values_indices_op("max_dim");
const OpDef& kMinDim = values_indices_op("min_dim");

// Wraps, sorts and de-duplicates dims; empty means every dim.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> result;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) result.push_back(d);
    return result;
  }
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    if (std::find(result.begin(), result.end(), w) != result.end()) fail(op, "dim ", d, " appears multiple times in the list of dims");
    result.push_back(ndim == 0 ? -1 : w);
  }
  std::erase(result, -1);  // a 0-d tensor has no dim to reduce
  std::sort(result.begin(), result.end());
  return result;
}

Tensor reduce(const OpDef& op, const Tensor& input, const std::vector<int64_t>& dims, bool keepdim, const char* name) {
  return apply_one(op, {input}, Attrs().set("dims", normalize_dims(dims, input.dim(), name)).set("keepdim", keepdim));
}

void require_floating(const Tensor& input, const char* op) {
  if (!input.is_floating_point()) fail(op, "expected a floating point input, got ", dtype_name(input.dtype()));
}

int64_t count_of(const Tensor& input, const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : normalize_dims(dims, input.dim(), "mean")) count *= input.size(d);
  return count;
}

void require_nonempty(const Tensor& input, const std::vector<int64_t>& dims, const char* op) {
  for (int64_t d : normalize_dims(dims, input.dim(), op)) {
    if (input.size(d) == 0) fail(op, "cannot reduce over dimension ", d, " of size 0 (input shape ", input.shape(), ")");
  }
}

Tensor integral_to_int64(const Tensor& input) { return input.is_floating_point() ? input : to(input, kInt64); }

Attrs along_dim(const Tensor& input, int64_t dim, bool keepdim, const char* op) {
  return Attrs().set("dim", wrap_dim(dim, input.dim(), op)).set("keepdim", keepdim);
}

}  // namespace

Tensor sum(const Tensor& input, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(kSum, integral_to_int64(input), dims, keepdim, "sum");
}

Tensor prod(const Tensor& input, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(kProd, integral_to_int64(input), dims, keepdim, "prod");
}

Tensor mean(const Tensor& input, const std::vector<int64_t>& dims, bool keepdim) {
  require_floating(input, "mean");
  return sum(input, dims, keepdim) / static_cast<double>(count_of(input, dims));
}

Tensor var(const Tensor& input, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  require_floating(input, "var");
  const Tensor centered = input - mean(input, dims, true);
  const double divisor = static_cast<double>(std::max<int64_t>(count_of(input, dims) - correction, 0));
  return sum(centered * centered, dims, keepdim) / divisor;
}

Tensor std(const Tensor& input, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return sqrt(var(input, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& input, const std::vector<int64_t>& dims, bool keepdim) {
  require_floating(input, "logsumexp");
  require_nonempty(input, dims, "logsumexp");
  // Shifting by the (constant) max keeps exp from overflowing; infinite maxima shift by 0.
  Tensor shift = reduce(kMax, input.detach(), dims, true, "logsumexp");
  shift = where(eq(abs(shift), INFINITY), 0.0, shift);
  const Tensor result = log(sum(exp(input - shift), dims, true)) + shift;
  return keepdim ? result : reshape(result, reduced_shape(input.shape(), normalize_dims(dims, input.dim(), "logsumexp"), false));
}

// Checked here too so that the error names the function called rather than the primitive.
Tensor max(const Tensor& input) {
  require_nonempty(input, {}, "max");
  return reduce(kMax, input, {}, false, "max");
}

Tensor min(const Tensor& input) {
  require_nonempty(input, {}, "min");
  return reduce(kMin, input, {}, false, "min");
}

ValuesIndices max(const Tensor& input, int64_t dim, bool keepdim) {
  TensorList out = apply(kMaxDim, {input}, along_dim(input, dim, keepdim, "max"));
  return {out[0], out[1]};
}

ValuesIndices min(const Tensor& input, int64_t dim, bool keepdim) {
  TensorList out = apply(kMinDim, {input}, along_dim(input, dim, keepdim, "min"));
  return {out[0], out[1]};
}

Tensor argmax(const Tensor& input, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return apply_one(kArgmax, {reshape(input, {-1})}, Attrs().set("dim", 0).set("keepdim", false));
  return apply_one(kArgmax, {input}, along_dim(input, *dim, keepdim, "argmax"));
}

Tensor argmin(const Tensor& input, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return apply_one(kArgmin, {reshape(input, {-1})}, Attrs().set("dim", 0).set("keepdim", false));
  return apply_one(kArgmin, {input}, along_dim(input, *dim, keepdim, "argmin"));
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - shape.ndim();
  FLOW_ARG_CHECK(lead >= 0, "sum_to", "cannot sum ", grad.shape(), " to the larger shape ", shape);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  return reshape(dims.empty() ? grad : sum(grad, dims, true), shape);
}

bool all(const Tensor& input) { return sum(to(ne(input, 0), kInt64)).item<int64_t>() == input.numel(); }
bool any(const Tensor& input) { return sum(to(ne(input, 0), kInt64)).item<int64_t>() > 0; }

Tensor Tensor::sum() const { return flow::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return flow::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return flow::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return flow::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return flow::max(*this); }
Tensor Tensor::min() const { return flow::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return flow::argmax(*this, dim, keepdim); }

}  // namespace flow
