// as_strided and as_strided_scatter: a strided view of a contiguous tensor, and a copy of the
// tensor with that view's elements replaced. Each is the other's gradient.
#include "core/ops/strided.h"

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"

namespace flow {
namespace {

struct Geometry {
  Shape size;
  Strides stride;
  int64_t offset;
};

Geometry geometry_of(const Attrs& attrs) {
  return {Shape(attrs.get<std::vector<int64_t>>("size")), attrs.get<std::vector<int64_t>>("stride"), attrs.get<int64_t>("offset")};
}

Attrs geometry_attrs(const Shape& size, const Strides& stride, int64_t offset) {
  return Attrs().set("size", size).set("stride", stride).set("offset", offset);
}

// Every element the view reaches lies inside a contiguous tensor of `numel` elements.
void check_geometry(const char* op, const Geometry& g, int64_t numel) {
  if (g.stride.size() != static_cast<size_t>(g.size.ndim())) fail(op, "size ", g.size, " and stride ", Shape(g.stride), " differ in length");
  if (g.offset < 0) fail(op, "offset must be non-negative, got ", g.offset);
  for (int64_t d = 0; d < g.size.ndim(); ++d) {
    if (g.size[d] < 0 || g.stride[d] < 0) fail(op, "sizes and strides must be non-negative, got size ", g.size, " and stride ", Shape(g.stride));
  }
  if (g.size.numel() == 0) return;
  const std::optional<int64_t> extent = checks::strided_extent(g.size, g.stride);
  int64_t end = 0;
  if (!extent || __builtin_add_overflow(g.offset, *extent, &end) || end > numel) {
    fail(op, "size ", g.size, ", stride ", Shape(g.stride), " and offset ", g.offset, " reach past the end of a tensor of ", numel, " elements");
  }
}

Tensor alias_of(const Tensor& input, const Attrs& attrs) {
  Geometry g = geometry_of(attrs);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(g.size);
  impl->strides = std::move(g.stride);
  impl->offset = input.storage_offset() + g.offset;
  impl->dtype = input.dtype();
  impl->device = input.device();
  impl->storage = input.storage();
  return Tensor(std::move(impl));
}

const std::vector<AttrDef> kGeometryAttrs{{"size", AttrType::kInts}, {"stride", AttrType::kInts}, {"offset", AttrType::kInt}};

std::vector<SbpSignature> broadcast_only(size_t inputs) { return {{std::vector<Sbp>(inputs, Sbp::broadcast()), {Sbp::broadcast()}}}; }

const OpDef& kAsStrided =
    OpBuilder("as_strided")
        .inputs({"input"})
        .outputs({"out"})
        .attrs(kGeometryAttrs)
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Geometry g = geometry_of(attrs);
          check_geometry("as_strided", g, in[0].shape.numel());
          return std::vector<TensorMeta>{{g.size, in[0].dtype, in[0].device}};
        })
        .sbp([](const std::vector<TensorMeta>&, const Attrs&) { return broadcast_only(1); })
        .view([](const TensorList& inputs, const Attrs& attrs) {
          if (!inputs[0].is_contiguous()) fail("as_strided", "needs a contiguous input, got strides ", Shape(inputs[0].strides()));
          return alias_of(inputs[0], attrs);
        })
        .vjp([](const VjpContext& ctx) {
          const Geometry g = geometry_of(ctx.attrs);
          const TensorMeta& in = ctx.input_meta(0);
          return TensorList{as_strided_scatter(zeros(in.shape, TensorOptions().dtype(in.dtype).device(in.device)), ctx.grad(), g.size, g.stride, g.offset)};
        })
        .def();

const OpDef& kAsStridedScatter =
    OpBuilder("as_strided_scatter")
        .inputs({"input", "src"})
        .outputs({"out"})
        .attrs(kGeometryAttrs)
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Geometry g = geometry_of(attrs);
          check_geometry("as_strided_scatter", g, in[0].shape.numel());
          for (int64_t d = 0; d < g.size.ndim(); ++d) {
            if (g.stride[d] == 0 && g.size[d] > 1) {
              fail("as_strided_scatter", "the view (size ", g.size, ", stride ", Shape(g.stride), ") reaches an element more than once");
            }
          }
          if (!(in[1].shape == g.size)) fail("as_strided_scatter", "src ", in[1].shape, " does not match the view's size ", g.size);
          if (in[1].dtype != in[0].dtype) fail("as_strided_scatter", "src is ", dtype_name(in[1].dtype), " but input is ", dtype_name(in[0].dtype));
          return std::vector<TensorMeta>{in[0]};
        })
        .sbp([](const std::vector<TensorMeta>&, const Attrs&) { return broadcast_only(2); })
        .vjp([](const VjpContext& ctx) {
          const Geometry g = geometry_of(ctx.attrs);
          const TensorMeta& src = ctx.input_meta(1);
          const Tensor grad = contiguous(ctx.grad());
          return TensorList{
              ctx.needs_input_grad[0] ? as_strided_scatter(grad, zeros(src.shape, TensorOptions().dtype(src.dtype).device(src.device)), g.size, g.stride, g.offset) : Tensor(),
              ctx.needs_input_grad[1] ? contiguous(as_strided(grad, g.size, g.stride, g.offset)) : Tensor()};
        })
        .def();

// Copies only, so one kernel serves every device the copy kernel serves.
void as_strided_scatter_kernel(KernelContext& ctx) {
  detail::copy_into(ctx.outputs[0], ctx.inputs[0]);
  detail::copy_into(alias_of(ctx.outputs[0], ctx.attrs), ctx.inputs[1]);
}

FLOW_REGISTER_KERNEL("as_strided_scatter", DeviceType::kCPU, storage_dtypes(), as_strided_scatter_kernel);
#ifdef FLOW_WITH_CUDA
FLOW_REGISTER_KERNEL("as_strided_scatter", DeviceType::kCUDA, storage_dtypes(), as_strided_scatter_kernel);
#endif

}  // namespace

Tensor as_strided(const Tensor& input, const Shape& size, const Strides& stride, int64_t offset) {
  return apply_one(kAsStrided, {input}, geometry_attrs(size, stride, offset));
}

Tensor as_strided_scatter(const Tensor& input, const Tensor& src, const Shape& size, const Strides& stride, int64_t offset) {
  return apply_one(kAsStridedScatter, {input, src}, geometry_attrs(size, stride, offset));
}

}  // namespace flow
