// Sorting and selection along one dim: sort and topk are primitives returning values and int64
// indices; argsort is sort's indices. Their values' gradient goes back to the positions the
// indices name, so the vjp reads the indices alone. multinomial is here because drawing without
// replacement is a top-k of randomly scaled weights (see the kernel).
#include "core/ops/sorting.h"

#include <algorithm>

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/flops.h"
#include "core/ops/index.h"
#include "core/random.h"

namespace flow {
namespace {

// Lines along dim are sorted (or selected from) on their own, so splitting any other dim holds.
std::vector<SbpSignature> along_dim_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d != attrs.get<int64_t>("dim")) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d), Sbp::split(d)}});
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast(), Sbp::broadcast()}});
  return signatures;
}

// values[..., j, ...] = input[..., indices[..., j, ...], ...]: a gather, with gather's gradient
// (the indices of a line are distinct).
TensorList values_vjp(const VjpContext& ctx) {
  const TensorMeta& meta = ctx.input_meta(0);
  if (meta.shape.ndim() == 0) return TensorList{ctx.grad(0)};
  return TensorList{gather_backward(ctx.grad(0), ctx.attrs.get<int64_t>("dim"), ctx.output(1), meta.shape, meta.dtype)};
}

ProfileCost reads_indices(const std::vector<TensorMeta>&, const std::vector<TensorMeta>& out, const Attrs&) {
  return ProfileCost{{}, {1}, out[0].shape.numel(), 0};
}

const OpDef& kSort = OpBuilder("sort")
                         .inputs({"input"})
                         .outputs({"values", "indices"})
                         .attrs({{"dim", AttrType::kInt}, {"descending", AttrType::kBool}})
                         .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                           checks::check_axis("sort", attrs.get<int64_t>("dim"), std::max<int64_t>(in[0].shape.ndim(), 1));  // 0-d acts as 1-d
                           return std::vector<TensorMeta>{in[0], {in[0].shape, kInt64, in[0].device}};
                         })
                         .sbp(along_dim_sbp)
                         .flops(flops::per_input_element)
                         .profile_cost(reads_indices)
                         .vjp(values_vjp)
                         .def();

const OpDef& kTopk = OpBuilder("topk")
                         .inputs({"input"})
                         .outputs({"values", "indices"})
                         .attrs({{"k", AttrType::kInt}, {"dim", AttrType::kInt}, {"largest", AttrType::kBool}, {"sorted", AttrType::kBool}})
                         .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                           const Shape& shape = in[0].shape;
                           const int64_t dim = attrs.get<int64_t>("dim"), k = attrs.get<int64_t>("k");
                           checks::check_axis("topk", dim, std::max<int64_t>(shape.ndim(), 1));  // 0-d acts as 1-d
                           const int64_t size = shape.ndim() == 0 ? 1 : shape[dim];
                           if (k < 0 || k > size) fail("topk", "selected index k out of range: k ", k, " for dimension ", dim, " of size ", size);
                           Shape out = shape;
                           if (shape.ndim() > 0) out[dim] = k;
                           return std::vector<TensorMeta>{{out, in[0].dtype, in[0].device}, {out, kInt64, in[0].device}};
                         })
                         .sbp(along_dim_sbp)
                         .flops(flops::per_input_element)
                         .profile_cost(reads_indices)
                         .vjp(values_vjp)
                         .def();

// PyTorch's argument checks, before any counters are reserved; the weights' values are checked by
// the kernel, which reads them.
void check_multinomial(const TensorMeta& input, int64_t num_samples, bool replacement) {
  const int64_t ndim = input.shape.ndim();
  if (ndim != 1 && ndim != 2) fail("multinomial", "prob_dist must be 1 or 2 dim, got ", ndim);
  if (!is_floating(input.dtype)) fail("multinomial", "only supports floating-point dtypes for input, got ", dtype_name(input.dtype));
  if (num_samples <= 0) fail("multinomial", "cannot sample n_sample <= 0 samples, got ", num_samples);
  const int64_t categories = input.shape[ndim - 1];
  if (!replacement && num_samples > categories) {
    fail("multinomial", "cannot sample n_sample > prob_dist.size(-1) samples without replacement (", num_samples, " > ", categories, ")");
  }
  // Categories index float32 cumulative weights in PyTorch's kernels, exact only up to 2^24.
  if (categories > (int64_t{1} << 24)) fail("multinomial", "number of categories cannot exceed 2^24, got ", categories);
}

// Philox counters one call uses: one per draw with replacement, one per weight without.
int64_t multinomial_counters(const Shape& shape, int64_t num_samples, bool replacement) {
  const int64_t rows = shape.ndim() == 2 ? shape[0] : 1;
  return rows * (replacement ? num_samples : shape[shape.ndim() - 1]);
}

const OpDef& kMultinomial =
    OpBuilder("multinomial")
        .random()
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"num_samples", AttrType::kInt}, {"replacement", AttrType::kBool}, {"seed", AttrType::kInt}, {"offset", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const int64_t num_samples = attrs.get<int64_t>("num_samples");
          check_multinomial(in[0], num_samples, attrs.get<bool>("replacement"));
          const Shape out = in[0].shape.ndim() == 2 ? Shape{in[0].shape[0], num_samples} : Shape{num_samples};
          return std::vector<TensorMeta>{{out, kInt64, in[0].device}};
        })
        // Rows draw from counters at fixed offsets of the call's: every rank draws the whole result.
        .sbp([](const std::vector<TensorMeta>&, const Attrs&) { return std::vector<SbpSignature>{{{Sbp::broadcast()}, {Sbp::broadcast()}}}; })
        .flops(flops::per_input_element)
        .def();

}  // namespace

ValuesIndices sort(const Tensor& input, int64_t dim, bool descending, bool /*stable: every sort is*/) {
  TensorList out = apply(kSort, {input}, Attrs().set("dim", wrap_dim(dim, input.dim(), "sort")).set("descending", descending));
  return {out[0], out[1]};
}

Tensor argsort(const Tensor& input, int64_t dim, bool descending, bool stable) {
  return sort(input, dim, descending, stable).indices;
}

ValuesIndices topk(const Tensor& input, int64_t k, int64_t dim, bool largest, bool sorted) {
  TensorList out = apply(kTopk, {input},
                         Attrs()
                             .set("k", k)
                             .set("dim", wrap_dim(dim, input.dim(), "topk"))
                             .set("largest", largest)
                             .set("sorted", sorted));
  return {out[0], out[1]};
}

Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement, Generator* generator) {
  check_multinomial({input.shape(), input.dtype(), input.device()}, num_samples, replacement);
  const auto [seed, offset] =
      (generator != nullptr ? *generator : default_generator()).reserve(static_cast<uint64_t>(multinomial_counters(input.shape(), num_samples, replacement)));
  return apply_one(kMultinomial, {input},
                   Attrs()
                       .set("num_samples", num_samples)
                       .set("replacement", replacement)
                       .set("seed", static_cast<int64_t>(seed))
                       .set("offset", static_cast<int64_t>(offset)));
}

}  // namespace flow
