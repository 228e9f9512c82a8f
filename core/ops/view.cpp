// View ops. Each is a primitive whose eager "kernel" builds a TensorImpl aliasing the input's
// storage with new shape, strides and offset; in a Graph they are ordinary nodes.
#include "core/ops/view.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/reduce.h"

namespace flow {
namespace {

Tensor alias(const Tensor& input, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = input.dtype();
  impl->device = input.device();
  impl->storage = input.storage();
  return Tensor(std::move(impl));
}

std::vector<int64_t> shape_attr(const Attrs& attrs, const char* name = "shape") {
  return attrs.get<std::vector<int64_t>>(name);
}

TensorMeta with_shape(const TensorMeta& in, Shape shape) { return {std::move(shape), in.dtype, in.device}; }

// Resolves a single -1 and checks the element count.
Shape infer_view_shape(const char* op, const Shape& input, const std::vector<int64_t>& requested) {
  std::vector<int64_t> dims = requested;
  std::optional<size_t> inferred;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred) fail(op, "only one dimension can be inferred in shape ", Shape(requested));
      inferred = i;
    } else if (dims[i] < 0) {
      fail(op, "invalid shape dimension ", dims[i], " in ", Shape(requested));
    } else if (__builtin_mul_overflow(known, dims[i], &known)) {
      fail(op, "shape ", Shape(requested), " is invalid for input of size ", input.numel());
    }
  }
  if (inferred) {
    if (known == 0 || input.numel() % known != 0) {
      fail(op, "shape ", Shape(requested), " is invalid for input of size ", input.numel());
    }
    dims[*inferred] = input.numel() / known;
  }
  if (Shape(dims).numel() != input.numel()) {
    fail(op, "shape ", Shape(requested), " is invalid for input of size ", input.numel(), " (input shape ", input, ")");
  }
  return Shape(std::move(dims));
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible (the
// algorithm of PyTorch's computeStride: each run of merged dims must be contiguous in itself).
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  Strides result(new_shape.size());
  if (shape.numel() == 0 || shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = new_shape.ndim() - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = shape.ndim() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    if (tensor_d == 0 || (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        result[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return result;
}

const OpDef& kView =
    OpBuilder("view")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"shape", AttrType::kInts}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return std::vector<TensorMeta>{with_shape(in[0], infer_view_shape("view", in[0].shape, shape_attr(attrs)))};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          // A split axis survives when it and every axis before it keep their sizes (the batch
          // axis of a flatten): the pieces are then views of the same shape.
          const Shape out = infer_view_shape("view", in[0].shape, shape_attr(attrs));
          std::vector<SbpSignature> signatures;
          for (int64_t d = 0; d < std::min(in[0].shape.ndim(), out.ndim()) && in[0].shape[d] == out[d]; ++d) {
            signatures.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
          }
          // Merging the batch axis with the next ones ((B, T, C) -> (B*T, C)) or splitting it
          // back: the pieces are the same rows when both sizes divide evenly (sbp_holds).
          if (in[0].shape.ndim() > 0 && out.ndim() > 0 && in[0].shape[0] != out[0]) {
            signatures.push_back({{Sbp::split(0)}, {Sbp::split(0)}});
          }
          signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
          signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
          return signatures;
        })
        .sbp_holds([](const std::vector<TensorMeta>& in, const Attrs& attrs, const SbpSignature& signature, int64_t parts) {
          const Shape out = infer_view_shape("view", in[0].shape, shape_attr(attrs));
          if (!signature.inputs[0].is_split() || in[0].shape.ndim() == 0 || out.ndim() == 0 || in[0].shape[0] == out[0]) return true;
          return in[0].shape[0] % parts == 0 && out[0] % parts == 0;
        })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          const Tensor& input = inputs[0];
          const Shape shape = infer_view_shape("view", input.shape(), shape_attr(attrs));
          auto strides = view_strides(input.shape(), input.strides(), shape);
          if (!strides) {
            fail("view", "view size ", shape, " is not compatible with input tensor's size ", input.shape(),
                 " and stride ", Shape(input.strides()), " (at least one dimension spans across two contiguous "
                 "subspaces); use reshape instead");
          }
          return alias(input, shape, *strides, input.storage_offset());
        })
        .vjp([](const VjpContext& ctx) { return TensorList{reshape(ctx.grad(), ctx.input_meta(0).shape)}; })
        .def();

std::vector<int64_t> checked_permutation(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  if (static_cast<int64_t>(dims.size()) != ndim) {
    fail(op, "number of dims ", dims.size(), " does not match the tensor's ", ndim, " dimensions");
  }
  std::vector<int64_t> wrapped(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    wrapped[i] = wrap_dim(dims[i], ndim, op);
    if (seen[wrapped[i]]) fail(op, "repeated dim ", dims[i], " in permutation ", Shape(dims));
    seen[wrapped[i]] = true;
  }
  return wrapped;
}

const OpDef& kPermute =
    OpBuilder("permute")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"dims", AttrType::kInts}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const auto dims = checked_permutation("permute", shape_attr(attrs, "dims"), in[0].shape.ndim());
          Shape shape;
          for (int64_t d : dims) shape.push_back(in[0].shape[d]);
          return std::vector<TensorMeta>{with_shape(in[0], shape)};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const auto dims = checked_permutation("permute", shape_attr(attrs, "dims"), in[0].shape.ndim());
          std::vector<SbpSignature> signatures;
          for (size_t out_axis = 0; out_axis < dims.size(); ++out_axis) {
            signatures.push_back({{Sbp::split(dims[out_axis])}, {Sbp::split(static_cast<int64_t>(out_axis))}});
          }
          signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
          signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
          return signatures;
        })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          const Tensor& input = inputs[0];
          const auto dims = checked_permutation("permute", shape_attr(attrs, "dims"), input.dim());
          Shape shape;
          Strides strides;
          for (int64_t d : dims) {
            shape.push_back(input.size(d));
            strides.push_back(input.stride(d));
          }
          return alias(input, shape, strides, input.storage_offset());
        })
        .vjp([](const VjpContext& ctx) {
          const auto dims = shape_attr(ctx.attrs, "dims");
          std::vector<int64_t> inverse(dims.size());
          for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dims.size(), "permute")] = i;
          return TensorList{permute(ctx.grad(), inverse)};
        })
        .def();

struct SliceSpec {
  int64_t dim, start, length, step;
};

SliceSpec slice_spec(const Shape& shape, const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.get<int64_t>("dim"), shape.ndim(), "slice");
  FLOW_ARG_CHECK(shape.ndim() > 0, "slice", "cannot slice a 0-d tensor");
  const int64_t step = attrs.get<int64_t>("step");
  FLOW_ARG_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t size = shape[dim];
  auto clamp_index = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  const int64_t start = clamp_index(attrs.get<int64_t>("start"));
  const int64_t end = std::max(start, clamp_index(attrs.get<int64_t>("end")));
  const int64_t span = end - start;
  return {dim, start, span / step + (span % step != 0 ? 1 : 0), step};
}

// Slicing or selecting along `dim` acts on each piece alike when the tensor is split along
// another axis (which keeps its place in the output, one lower past a removed dim), and is
// linear: broadcast and partial sums pass through.
std::vector<SbpSignature> along_other_axes(const TensorMeta& input, int64_t dim, bool removes_dim) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < input.shape.ndim(); ++d) {
    if (d != dim) signatures.push_back({{Sbp::split(d)}, {Sbp::split(removes_dim && d > dim ? d - 1 : d)}});
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return signatures;
}

const std::vector<AttrDef> kSliceAttrs{
    {"dim", AttrType::kInt}, {"start", AttrType::kInt}, {"end", AttrType::kInt}, {"step", AttrType::kInt}};

// Gradient of slice: zeros of the input's shape with grad written into the sliced positions.
const OpDef& kSliceGrad =
    OpBuilder("slice_grad")
        .inputs({"grad"})
        .outputs({"out"})
        .attrs({{"input_shape", AttrType::kInts},
                {"dim", AttrType::kInt},
                {"start", AttrType::kInt},
                {"end", AttrType::kInt},
                {"step", AttrType::kInt}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Shape input = checks::shape_attr("slice_grad", attrs, "input_shape");
          const SliceSpec spec = slice_spec(input, attrs);
          Shape sliced = input;
          sliced[spec.dim] = spec.length;
          if (!(in[0].shape == sliced)) fail("slice_grad", "grad ", in[0].shape, " does not match the slice ", sliced, " of input_shape ", input);
          return std::vector<TensorMeta>{with_shape(in[0], input)};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return along_other_axes(in[0], wrap_dim(attrs.get<int64_t>("dim"), in[0].shape.ndim(), "slice_grad"), false);
        })
        .vjp([](const VjpContext& ctx) {
          return TensorList{slice(ctx.grad(), ctx.attrs.get<int64_t>("dim"), ctx.attrs.get<int64_t>("start"),
                                  ctx.attrs.get<int64_t>("end"), ctx.attrs.get<int64_t>("step"))};
        })
        .def();

Tensor slice_grad(const Tensor& grad, const Shape& input_shape, const Attrs& slice_attrs) {
  return apply_one(kSliceGrad, {grad},
                   Attrs(slice_attrs).set("input_shape", input_shape));
}

const OpDef& kSlice =
    OpBuilder("slice")
        .inputs({"input"})
        .outputs({"out"})
        .attrs(kSliceAttrs)
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const SliceSpec spec = slice_spec(in[0].shape, attrs);
          Shape shape = in[0].shape;
          shape[spec.dim] = spec.length;
          return std::vector<TensorMeta>{with_shape(in[0], shape)};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return along_other_axes(in[0], slice_spec(in[0].shape, attrs).dim, false);
        })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          const Tensor& input = inputs[0];
          const SliceSpec spec = slice_spec(input.shape(), attrs);
          Shape shape = input.shape();
          Strides strides = input.strides();
          shape[spec.dim] = spec.length;
          const int64_t offset = input.storage_offset() + (spec.length > 0 ? spec.start * strides[spec.dim] : 0);
          // A step past the end would overflow the stride; with one element left it is unused.
          if (spec.length > 1) strides[spec.dim] *= spec.step;
          return alias(input, shape, strides, offset);
        })
        .vjp([](const VjpContext& ctx) { return TensorList{slice_grad(ctx.grad(), ctx.input_meta(0).shape, ctx.attrs)}; })
        .def();

int64_t select_index(const Shape& shape, int64_t dim, int64_t index) {
  const int64_t size = shape[dim];
  if (index < -size || index >= size) {
    fail("select", "index ", index, " is out of bounds for dimension ", dim, " with size ", size);
  }
  return index < 0 ? index + size : index;
}

const OpDef& kSelect =
    OpBuilder("select")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}, {"index", AttrType::kInt}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          FLOW_ARG_CHECK(in[0].shape.ndim() > 0, "select", "cannot select from a 0-d tensor");
          const int64_t dim = wrap_dim(attrs.get<int64_t>("dim"), in[0].shape.ndim(), "select");
          select_index(in[0].shape, dim, attrs.get<int64_t>("index"));
          Shape shape = in[0].shape;
          shape.erase(dim);
          return std::vector<TensorMeta>{with_shape(in[0], shape)};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return along_other_axes(in[0], wrap_dim(attrs.get<int64_t>("dim"), in[0].shape.ndim(), "select"), true);
        })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          const Tensor& input = inputs[0];
          const int64_t dim = wrap_dim(attrs.get<int64_t>("dim"), input.dim(), "select");
          const int64_t index = select_index(input.shape(), dim, attrs.get<int64_t>("index"));
          Shape shape = input.shape();
          Strides strides = input.strides();
          const int64_t offset = input.storage_offset() + index * strides[dim];
          shape.erase(dim);
          strides.erase(strides.begin() + dim);
          return alias(input, shape, strides, offset);
        })
        .vjp([](const VjpContext& ctx) {
          const Shape& shape = ctx.input_meta(0).shape;
          const int64_t dim = wrap_dim(ctx.attrs.get<int64_t>("dim"), shape.ndim(), "select");
          const int64_t index = select_index(shape, dim, ctx.attrs.get<int64_t>("index"));
          const Attrs slice_attrs = Attrs().set("dim", dim).set("start", index).set("end", index + 1).set("step", 1);
          return TensorList{slice_grad(unsqueeze(ctx.grad(), dim), shape, slice_attrs)};
        })
        .def();

Shape expanded_shape(const Shape& input, const std::vector<int64_t>& requested) {
  if (requested.size() < input.size()) {
    fail("expand", "the number of sizes provided (", requested.size(), ") must be greater or equal to the number of "
         "dimensions in the tensor (", input.size(), ")");
  }
  const size_t lead = requested.size() - input.size();
  Shape shape;
  for (size_t i = 0; i < requested.size(); ++i) {
    const int64_t want = requested[i];
    if (i < lead) {
      if (want < 0) fail("expand", "the expanded size ", want, " is not allowed in a leading, non-existing dimension");
      shape.push_back(want);
      continue;
    }
    const int64_t have = input[i - lead];
    if (want == -1 || want == have) {
      shape.push_back(have);
    } else if (have == 1 && want >= 0) {
      shape.push_back(want);
    } else {
      fail("expand", "the expanded size of the tensor (", want, ") must match the existing size (", have,
           ") at non-singleton dimension ", i, ": target ", Shape(requested), ", tensor ", input);
    }
  }
  return shape;
}

const OpDef& kExpand =
    OpBuilder("expand")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"shape", AttrType::kInts}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return std::vector<TensorMeta>{with_shape(in[0], expanded_shape(in[0].shape, shape_attr(attrs)))};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          // A split axis that keeps its size is split alike in the output (leading dims are added
          // in front); expanding is linear, so partial sums pass through.
          const Shape out = expanded_shape(in[0].shape, shape_attr(attrs));
          const int64_t lead = out.ndim() - in[0].shape.ndim();
          std::vector<SbpSignature> signatures;
          for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
            if (in[0].shape[d] == out[lead + d]) signatures.push_back({{Sbp::split(d)}, {Sbp::split(lead + d)}});
          }
          signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
          signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
          return signatures;
        })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          const Tensor& input = inputs[0];
          const Shape shape = expanded_shape(input.shape(), shape_attr(attrs));
          const size_t lead = shape.size() - input.shape().size();
          Strides strides(shape.size(), 0);
          for (size_t i = lead; i < shape.size(); ++i) {
            strides[i] = input.size(static_cast<int64_t>(i - lead)) == shape[i] ? input.stride(static_cast<int64_t>(i - lead)) : 0;
          }
          return alias(input, shape, strides, input.storage_offset());
        })
        .vjp([](const VjpContext& ctx) { return TensorList{sum_to(ctx.grad(), ctx.input_meta(0).shape)}; })
        .def();

}  // namespace

namespace detail {
Tensor slice_alias(const Tensor& input, const Attrs& slice_attrs) { return kSlice.view({input}, slice_attrs); }
}  // namespace detail

Tensor view(const Tensor& input, const Shape& shape) { return apply_one(kView, {input}, Attrs().set("shape", shape)); }

Tensor reshape(const Tensor& input, const Shape& shape) {
  const Shape target = infer_view_shape("reshape", input.shape(), shape.vec());
  // A global tensor's logical strides are always contiguous; its piece decides. A lazy tensor
  // (Graph tracing) carries the strides its value will have when the graph runs.
  const bool viewable = input.is_global() ? input.is_contiguous() : view_strides(input.shape(), input.strides(), target).has_value();
  if (viewable) return view(input, target);
  return view(contiguous(input), target);
}

Tensor permute(const Tensor& input, const std::vector<int64_t>& dims) {
  return apply_one(kPermute, {input}, Attrs().set("dims", dims));
}

Tensor transpose(const Tensor& input, int64_t dim0, int64_t dim1) {
  const int64_t ndim = input.dim();
  if (ndim == 0) {
    wrap_dim(dim0, ndim, "transpose");
    wrap_dim(dim1, ndim, "transpose");
    return input;
  }
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, ndim, "transpose")], dims[wrap_dim(dim1, ndim, "transpose")]);
  return permute(input, dims);
}

Tensor slice(const Tensor& input, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return apply_one(kSlice, {input}, Attrs().set("dim", dim).set("start", start).set("end", end).set("step", step));
}

Tensor narrow(const Tensor& input, int64_t dim, int64_t start, int64_t length) {
  FLOW_ARG_CHECK(input.dim() > 0, "narrow", "cannot narrow a 0-d tensor");
  const int64_t size = input.size(wrap_dim(dim, input.dim(), "narrow"));
  const int64_t begin = start < 0 ? start + size : start;
  if (begin < 0 || length < 0 || begin + length > size) {
    fail("narrow", "start (", start, ") + length (", length, ") exceeds dimension size (", size, ")");
  }
  return slice(input, dim, begin, begin + length);
}

Tensor select(const Tensor& input, int64_t dim, int64_t index) {
  return apply_one(kSelect, {input}, Attrs().set("dim", dim).set("index", index));
}

Tensor expand(const Tensor& input, const Shape& shape) {
  return apply_one(kExpand, {input}, Attrs().set("shape", shape));
}

Tensor squeeze(const Tensor& input) {
  Shape shape;
  for (int64_t d : input.shape()) {
    if (d != 1) shape.push_back(d);
  }
  return view(input, shape);
}

Tensor squeeze(const Tensor& input, int64_t dim) {
  const int64_t d = wrap_dim(dim, input.dim(), "squeeze");
  if (input.dim() == 0 || input.size(d) != 1) return view(input, input.shape());
  Shape shape = input.shape();
  shape.erase(d);
  return view(input, shape);
}

Tensor unsqueeze(const Tensor& input, int64_t dim) {
  const int64_t d = wrap_dim(dim, input.dim() + 1, "unsqueeze");
  Shape shape = input.shape();
  shape.insert(d, 1);
  return view(input, shape);
}

Tensor flatten(const Tensor& input, int64_t start_dim, int64_t end_dim) {
  if (input.dim() == 0) return reshape(input, {1});
  const int64_t start = wrap_dim(start_dim, input.dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, input.dim(), "flatten");
  FLOW_ARG_CHECK(start <= end, "flatten", "start_dim (", start_dim, ") cannot come after end_dim (", end_dim, ")");
  Shape shape;
  for (int64_t d = 0; d < start; ++d) shape.push_back(input.size(d));
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= input.size(d);
  shape.push_back(merged);
  for (int64_t d = end + 1; d < input.dim(); ++d) shape.push_back(input.size(d));
  return reshape(input, shape);
}

Tensor Tensor::view(const Shape& shape) const { return flow::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return flow::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return flow::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  FLOW_ARG_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dimensions, but got ", dim(), "-d ", shape());
  return dim() < 2 ? *this : flow::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return flow::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const { return flow::narrow(*this, dim, start, length); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return flow::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return flow::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& shape) const { return flow::expand(*this, shape); }
Tensor Tensor::squeeze() const { return flow::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return flow::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return flow::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return flow::flatten(*this, start_dim, end_dim); }

}  // namespace flow
