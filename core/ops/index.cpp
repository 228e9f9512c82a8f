// Joining, splitting and indexing ops. Primitives: cat, index_select, gather, scatter (and its
// in-place form), masked_fill, one_hot; stack, split and chunk are composites over cat and slice views.
#include "core/ops/index.h"

#include <algorithm>

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"

namespace flow {
namespace {

void check_index_dtype(DType dtype, const char* op) {
  if (dtype != kInt64 && dtype != kInt32) fail(op, "expected an int64 or int32 index tensor, got ", dtype_name(dtype));
}

// The dim attribute of an indexing op: a dim of input (0 for a 0-d input, which acts as 1-d).
int64_t index_dim(const Attrs& attrs, const Shape& input, const char* op) {
  const int64_t dim = attrs.get<int64_t>("dim");
  checks::check_axis(op, dim, std::max<int64_t>(input.ndim(), 1));
  return dim;
}

std::vector<SbpSignature> split_except(const std::vector<TensorMeta>& in, int64_t dim, size_t inputs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d != dim) signatures.push_back({std::vector<Sbp>(inputs, Sbp::split(d)), {Sbp::split(d)}});
  }
  signatures.push_back({std::vector<Sbp>(inputs, Sbp::broadcast()), {Sbp::broadcast()}});
  return signatures;
}

const OpDef& kCat =
    OpBuilder("cat")
        .inputs({"tensors"}, /*variadic=*/true)
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          if (in.empty()) fail("cat", "expected a non-empty list of tensors");
          if (in[0].shape.ndim() == 0) fail("cat", "zero-dimensional tensor cannot be concatenated");
          const int64_t dim = attrs.get<int64_t>("dim");
          checks::check_axis("cat", dim, in[0].shape.ndim());
          Shape out = in[0].shape;
          for (size_t i = 1; i < in.size(); ++i) {
            const Shape& s = in[i].shape;
            if (in[i].dtype != in[0].dtype) fail("cat", "expected tensors of one dtype, got ", dtype_name(in[0].dtype), " and ", dtype_name(in[i].dtype));
            if (s.ndim() != out.ndim()) fail("cat", "tensors must have the same number of dimensions: got ", in[0].shape, " and ", s);
            for (int64_t d = 0; d < s.ndim(); ++d) {
              if (d != dim && s[d] != out[d]) {
                fail("cat", "sizes of tensors must match except in dimension ", dim, ": got ", in[0].shape, " and ", s);
              }
            }
            if (__builtin_add_overflow(out[dim], s[dim], &out[dim])) fail("cat", "the concatenated size overflows int64");
          }
          return std::vector<TensorMeta>{{out, in[0].dtype, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          return split_except(in, attrs.get<int64_t>("dim"), in.size());
        })
        .vjp([](const VjpContext& ctx) {
          const int64_t dim = ctx.attrs.get<int64_t>("dim");
          TensorList grads;
          int64_t start = 0;
          for (size_t i = 0; i < ctx.num_inputs(); ++i) {
            const int64_t length = ctx.input_meta(i).shape[dim];
            grads.push_back(narrow(ctx.grad(), dim, start, length));
            start += length;
          }
          return grads;
        })
        .def();

const OpDef& kIndexSelect =
    OpBuilder("index_select")
        .inputs({"input", "index"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          check_index_dtype(in[1].dtype, "index_select");
          const int64_t dim = index_dim(attrs, in[0].shape, "index_select");
          if (in[1].shape.ndim() > 1) fail("index_select", "index must be 0-d or 1-d, got shape ", in[1].shape);
          Shape out = in[0].shape;
          if (out.ndim() > 0) out[dim] = in[1].shape.numel();
          else if (in[1].shape.numel() != 1) fail("index_select", "a 0-d input takes one index, got ", in[1].shape.numel());
          return std::vector<TensorMeta>{{out, in[0].dtype, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          std::vector<SbpSignature> signatures;
          const int64_t dim = attrs.get<int64_t>("dim");
          for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
            if (d != dim) signatures.push_back({{Sbp::split(d), Sbp::broadcast()}, {Sbp::split(d)}});
          }
          // An embedding lookup over a split batch of indices: each rank looks up its own.
          if (in[1].shape.ndim() == 1 && in[0].shape.ndim() > 0) {
            signatures.push_back({{Sbp::broadcast(), Sbp::split(0)}, {Sbp::split(dim)}});
          }
          signatures.push_back({{Sbp::broadcast(), Sbp::broadcast()}, {Sbp::broadcast()}});
          return signatures;
        })
        .vjp([](const VjpContext& ctx) {
          const TensorMeta& meta = ctx.input_meta(0);
          const int64_t dim = ctx.attrs.get<int64_t>("dim");
          if (meta.shape.ndim() == 0) return TensorList{ctx.grad(), Tensor()};
          Shape index_shape(std::vector<int64_t>(static_cast<size_t>(meta.shape.ndim()), 1));
          index_shape[dim] = ctx.grad().size(dim);
          const Tensor index = reshape(ctx.input(1), index_shape).expand(ctx.grad().shape());
          return TensorList{scatter_add(zeros(meta.shape, options_beside(ctx.grad()).dtype(meta.dtype)), dim, index, ctx.grad()),
                            Tensor()};
        })
        .def();

void check_gather_shapes(const Shape& input, const Shape& index, int64_t dim, const char* op) {
  if (index.ndim() != input.ndim()) {
    fail(op, "index ", index, " must have the same number of dimensions as input ", input);
  }
  for (int64_t d = 0; d < input.ndim(); ++d) {
    if (d != dim && index[d] > input[d]) {
      fail(op, "index ", index, " is larger than input ", input, " in dimension ", d);
    }
  }
}

// gather's gradient: zeros of the input's shape with grad added at index along dim, what
// zeros(...).scatter_add(dim, index, grad) computes, as one op so that backward makes one tensor of
// the input's size instead of the zeros and their copy (a cross-entropy over 50257 words: 206 MB
// each at 1024 tokens).
const OpDef& kGatherGrad =
    OpBuilder("gather_grad")
        .inputs({"grad", "index"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}, {"input_shape", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Shape input = checks::shape_attr("gather_grad", attrs, "input_shape");
          check_index_dtype(in[1].dtype, "gather_grad");
          if (input.ndim() == 0) fail("gather_grad", "input_shape must have at least one dimension");
          check_gather_shapes(input, in[1].shape, index_dim(attrs, input, "gather_grad"), "gather_grad");
          if (!(in[0].shape == in[1].shape)) fail("gather_grad", "grad ", in[0].shape, " must have the shape of index ", in[1].shape);
          return std::vector<TensorMeta>{{input, in[0].dtype, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Shape input(attrs.get<std::vector<int64_t>>("input_shape"));
          const int64_t dim = attrs.get<int64_t>("dim");
          std::vector<SbpSignature> signatures;
          for (int64_t d = 0; d < input.ndim(); ++d) {
            // Split alike where index spans the whole dim; any split of grad and index adds up as
            // a partial sum (each rank adds its rows into zeros of the whole shape).
            if (d != dim && in[1].shape[d] == input[d]) signatures.push_back({{Sbp::split(d), Sbp::split(d)}, {Sbp::split(d)}});
            signatures.push_back({{Sbp::split(d), Sbp::split(d)}, {Sbp::partial_sum()}});
          }
          signatures.push_back({{Sbp::broadcast(), Sbp::broadcast()}, {Sbp::broadcast()}});
          return signatures;
        })
        .vjp([](const VjpContext& ctx) { return TensorList{gather(ctx.grad(), ctx.attrs.get<int64_t>("dim"), ctx.input(1)), Tensor()}; })
        .def();

const OpDef& kGather =
    OpBuilder("gather")
        .inputs({"input", "index"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          check_index_dtype(in[1].dtype, "gather");
          check_gather_shapes(in[0].shape, in[1].shape, index_dim(attrs, in[0].shape, "gather"), "gather");
          return std::vector<TensorMeta>{{in[1].shape, in[0].dtype, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return split_except(in, attrs.get<int64_t>("dim"), 2); })
        .vjp([](const VjpContext& ctx) {
          const TensorMeta& meta = ctx.input_meta(0);
          return TensorList{gather_backward(ctx.grad(), ctx.attrs.get<int64_t>("dim"), ctx.input(1), meta.shape, meta.dtype), Tensor()};
        })
        .def();

std::vector<TensorMeta> scatter_infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const std::string& reduce = attrs.get<std::string>("reduce");
  if (reduce != "none" && reduce != "add") fail("scatter", "reduce must be 'none' or 'add', got '", reduce, "'");
  const char* op = reduce == "add" ? "scatter_add" : "scatter";
  check_index_dtype(in[1].dtype, op);
  const int64_t dim = index_dim(attrs, in[0].shape, op);
  check_gather_shapes(in[0].shape, in[1].shape, dim, op);
  if (in[2].shape.ndim() != in[1].shape.ndim()) fail(op, "src ", in[2].shape, " must have the rank of index ", in[1].shape);
  for (int64_t d = 0; d < in[1].shape.ndim(); ++d) {
    if (in[1].shape[d] > in[2].shape[d]) fail(op, "index ", in[1].shape, " is larger than src ", in[2].shape, " in dimension ", d);
  }
  if (in[2].dtype != in[0].dtype) fail(op, "src dtype ", dtype_name(in[2].dtype), " must match input dtype ", dtype_name(in[0].dtype));
  return std::vector<TensorMeta>{in[0]};
}

std::vector<SbpSignature> scatter_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures = split_except(in, attrs.get<int64_t>("dim"), 3);
  // Adding: each rank adds its part of index and src into its piece of a partial sum (an
  // embedding's gradient over a split batch).
  if (attrs.get<std::string>("reduce") == "add") {
    for (int64_t d = 0; d < in[1].shape.ndim(); ++d) {
      signatures.push_back({{Sbp::partial_sum(), Sbp::split(d), Sbp::split(d)}, {Sbp::partial_sum()}});
    }
  }
  return signatures;
}

TensorList scatter_vjp(const VjpContext& ctx) {
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const Tensor index = ctx.input(1);
  const Tensor& grad = ctx.grad();
  Tensor grad_src;
  if (ctx.needs_input_grad[2]) {
    if (!(ctx.input_meta(2).shape == index.shape())) {
      fail("scatter", "the gradient w.r.t. src needs src ", ctx.input_meta(2).shape, " and index ", index.shape(), " of the same shape");
    }
    grad_src = gather(grad, dim, index);
  }
  if (ctx.attrs.get<std::string>("reduce") == "add") return TensorList{grad, Tensor(), grad_src};
  // Overwritten positions pass no gradient to the input.
  return TensorList{scatter(grad, dim, index, 0), Tensor(), grad_src};
}

const OpDef& kScatter =
    OpBuilder("scatter")
        .inputs({"input", "index", "src"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}, {"reduce", AttrType::kString}})
        .strided_inputs()  // the CPU kernel reads strides: an expanded index is not copied out
        .infer(scatter_infer)
        .sbp(scatter_sbp)
        .vjp(scatter_vjp)
        .def();

// scatter_(input, dim, index, src): scatter written into input itself (torch.Tensor.scatter_);
// the output is input. A KV cache takes each step's keys and values this way.
const OpDef& kScatterInplace =
    OpBuilder("scatter_inplace")
        .inputs({"input", "index", "src"})
        .outputs({"out"})
        .attrs({{"dim", AttrType::kInt}, {"reduce", AttrType::kString}})
        .inplace()
        .strided_inputs()  // index and src as given (the written input is contiguous regardless)
        .infer(scatter_infer)
        .sbp(scatter_sbp)
        .vjp(scatter_vjp)
        .def();

const OpDef& kMaskedFill =
    OpBuilder("masked_fill")
        .inputs({"input", "mask"})
        .outputs({"out"})
        .attrs({{"value", AttrType::kScalar}})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          if (in[1].dtype != kBool) fail("masked_fill", "mask must be a bool tensor, got ", dtype_name(in[1].dtype));
          checks::check_scalar_fits("masked_fill", attrs.get<Scalar>("value"), in[0].dtype, "value");
          const Shape shape = broadcast_shapes(in[0].shape, in[1].shape, "masked_fill");
          if (!(shape == in[0].shape)) fail("masked_fill", "mask ", in[1].shape, " cannot be broadcast to input ", in[0].shape);
          return std::vector<TensorMeta>{in[0]};
        })
        .sbp(sbp::elementwise)
        .vjp([](const VjpContext& ctx) { return TensorList{masked_fill(ctx.grad(), ctx.input(1), 0), Tensor()}; })
        .def();

const OpDef& kOneHot =
    OpBuilder("one_hot")
        .inputs({"indices"})
        .outputs({"out"})
        .attrs({{"num_classes", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          if (in[0].dtype != kInt64) fail("one_hot", "expected int64 class indices, got ", dtype_name(in[0].dtype));
          const int64_t num_classes = attrs.get<int64_t>("num_classes");
          if (num_classes < 0) fail("one_hot", "num_classes must be non-negative or -1, got ", num_classes);
          Shape out = in[0].shape;
          out.push_back(num_classes);
          return std::vector<TensorMeta>{{out, kInt64, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
          std::vector<SbpSignature> signatures;
          for (int64_t d = 0; d < in[0].shape.ndim(); ++d) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
          signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
          return signatures;
        })
        .def();

int64_t dim_of(const Tensor& t, int64_t dim, const char* op) { return wrap_dim(dim, t.dim(), op); }

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) fail("cat", "expected a non-empty list of tensors");
  DType dtype = tensors[0].dtype();
  for (const auto& t : tensors) dtype = promote_types(dtype, t.dtype());
  TensorList inputs;
  for (const auto& t : tensors) inputs.push_back(to(t, dtype));
  if (tensors[0].dim() == 0) fail("cat", "zero-dimensional tensor cannot be concatenated");  // before wrapping dim
  return apply_one(kCat, inputs, Attrs().set("dim", dim_of(tensors[0], dim, "cat")));
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) fail("stack", "expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList expanded;
  for (const auto& t : tensors) {
    if (!(t.shape() == tensors[0].shape())) {
      fail("stack", "expects each tensor to be equal size, but got ", tensors[0].shape(), " and ", t.shape());
    }
    expanded.push_back(t.unsqueeze(d));
  }
  return cat(expanded, d);
}

TensorList split(const Tensor& input, int64_t split_size, int64_t dim) {
  FLOW_ARG_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  const int64_t d = dim_of(input, dim, "split");
  const int64_t size = input.size(d);
  TensorList parts;
  for (int64_t start = 0; start < size || (size == 0 && parts.empty()); start += split_size) {
    parts.push_back(input.narrow(d, start, std::min(split_size, size - start)));
    if (size == 0) break;
  }
  return parts;
}

TensorList split(const Tensor& input, const std::vector<int64_t>& split_sizes, int64_t dim) {
  const int64_t d = dim_of(input, dim, "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    FLOW_ARG_CHECK(s >= 0, "split", "split sizes must be non-negative, got ", Shape(split_sizes));
    total += s;
  }
  FLOW_ARG_CHECK(total == input.size(d), "split", "split sizes ", Shape(split_sizes), " sum to ", total,
                 " but dimension ", d, " has size ", input.size(d));
  TensorList parts;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    parts.push_back(input.narrow(d, start, s));
    start += s;
  }
  return parts;
}

TensorList chunk(const Tensor& input, int64_t chunks, int64_t dim) {
  FLOW_ARG_CHECK(chunks > 0, "chunk", "number of chunks must be positive, got ", chunks);
  const int64_t size = input.size(dim_of(input, dim, "chunk"));
  return split(input, std::max<int64_t>(1, (size + chunks - 1) / chunks), dim);
}

Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index) {
  return apply_one(kIndexSelect, {input, index}, Attrs().set("dim", dim_of(input, dim, "index_select")));
}

Tensor gather(const Tensor& input, int64_t dim, const Tensor& index) {
  return apply_one(kGather, {input, index}, Attrs().set("dim", dim_of(input, dim, "gather")));
}

Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src) {
  return apply_one(kScatter, {input, index, to(src, input.dtype())},
                   Attrs().set("dim", dim_of(input, dim, "scatter")).set("reduce", "none"));
}

Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, const Scalar& value) {
  const Tensor src = full(index.shape(), value, options_beside(input));
  return scatter(input, dim, index, src);
}

Tensor& scatter_(Tensor& input, int64_t dim, const Tensor& index, const Tensor& src) {
  apply(kScatterInplace, {input, index, to(src, input.dtype())}, Attrs().set("dim", dim_of(input, dim, "scatter_")).set("reduce", "none"));
  return input;
}

Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src) {
  return apply_one(kScatter, {input, index, to(src, input.dtype())},
                   Attrs().set("dim", dim_of(input, dim, "scatter_add")).set("reduce", "add"));
}

Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index, const Shape& input_shape, DType input_dtype) {
  if (input_shape.ndim() == 0 || grad.device().is_cuda()) {
    return scatter_add(zeros(input_shape, options_beside(grad).dtype(input_dtype)), dim, index, grad);
  }
  return apply_one(kGatherGrad, {to(grad, input_dtype), index}, Attrs().set("dim", dim).set("input_shape", input_shape));
}

Tensor masked_fill(const Tensor& input, const Tensor& mask, const Scalar& value) {
  return apply_one(kMaskedFill, {input, mask}, Attrs().set("value", value));
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  // -1 asks for the classes the indices name, which reading them (max) needs int64 indices for.
  if (num_classes == -1) {
    if (indices.dtype() != kInt64) fail("one_hot", "expected int64 class indices, got ", dtype_name(indices.dtype()));
    num_classes = indices.numel() == 0 ? 0 : max(indices).item<int64_t>() + 1;
  }
  return apply_one(kOneHot, {indices}, Attrs().set("num_classes", num_classes));
}

}  // namespace flow
