// The copy op: one primitive for dtype casts, device moves and making tensors contiguous, and
// the in-place write (assign) that every in-place method is built on.
#include "core/ops/copy.h"

#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "core/ops/creation.h"
#include "core/ops/reduce.h"

namespace flow {
namespace {

const OpDef& kCopy =
      OpBuilder("copy")
          .inputs({"input"})
          .outputs({"out"})
          .attrs({{"dtype", AttrType::kDType}, {"device", AttrType::kDevice}})
          .strided_inputs()
          .mixed_devices()
          .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
            const Device device = attrs.get<Device>("device");
            if (in[0].device.is_meta() && !device.is_meta()) fail("to", "cannot copy out of a meta tensor: it has no data");
            return std::vector<TensorMeta>{{in[0].shape, attrs.get<DType>("dtype"), device}};
          })
          // A copy of partial sums is a partial sum (autograd clones gradients, which are often P).
          .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return sbp::linear_elementwise(in, attrs); })
          .vjp([](const VjpContext& ctx) {
            return TensorList{to(to(ctx.grad(), ctx.input_meta(0).dtype), ctx.input_meta(0).device)};
          })
          .def();

// assign(dst, src): writes src (broadcast, cast) into dst's elements; the output is dst itself.
const OpDef& kAssign =
      OpBuilder("assign")
          .inputs({"dst", "src"})
          .outputs({"out"})
          .strided_inputs()
          .mixed_devices()
          .inplace()
          .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
            const Shape shape = broadcast_shapes(in[0].shape, in[1].shape, "copy_");
            if (!(shape == in[0].shape)) fail("copy_", "cannot broadcast source ", in[1].shape, " to destination ", in[0].shape);
            if (in[1].device.is_meta() && !in[0].device.is_meta()) fail("copy_", "cannot copy out of a meta tensor: it has no data");
            return std::vector<TensorMeta>{in[0]};
          })
          // Partial sums written with partial sums stay the sum written (clip_grad_norm_ scales
          // data-parallel gradients, which are P, in place).
          .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return sbp::linear_elementwise(in, attrs); })
          .view([](const TensorList& inputs, const Attrs&) {
            // Eager: the write happens here, before autograd records the node, so the saved
            // destination carries its new version.
            const Tensor& dst = inputs[0];
            detail::copy_into(dst, inputs[1]);
            dst.storage()->bump_version();
            return dst;
          })
          .vjp([](const VjpContext& ctx) {
            // The old destination value is overwritten: only the source receives gradient.
            const TensorMeta& src = ctx.input_meta(1);
            return TensorList{Tensor(), to(to(sum_to(ctx.grad(), src.shape), src.dtype), src.device)};
          })
          .def();

}  // namespace

Tensor to(const Tensor& input, DType dtype) {
  if (input.dtype() == dtype) return input;
  return apply_one(kCopy, {input}, Attrs().set("dtype", dtype).set("device", input.device()));
}

Tensor to(const Tensor& input, Device device) {
  if (input.device() == device) return input;
  backend_for(device, "to");
  return apply_one(kCopy, {input}, Attrs().set("dtype", input.dtype()).set("device", device));
}

Tensor contiguous(const Tensor& input) { return input.is_contiguous() ? input : clone(input); }

Tensor clone(const Tensor& input) {
  return apply_one(kCopy, {input}, Attrs().set("dtype", input.dtype()).set("device", input.device()));
}

namespace detail {
void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_meta()) return;
  if (src.device().is_meta()) fail("copy_", "cannot copy out of a meta tensor: it has no data");
  TensorList outputs{dst};
  TensorList inputs{src};
  Attrs attrs;
  attrs.set("dtype", dst.dtype()).set("device", dst.device());
  KernelContext ctx{inputs, outputs, attrs};
  const Device device = dst.device().is_cuda() ? dst.device() : src.device();
  kCopy.kernel(device.type, src.dtype())(ctx);
}

Tensor contiguous_copy(const Tensor& input) {
  Tensor out = make_tensor(input.shape(), input.dtype(), input.device());
  copy_into(out, input);
  return out;
}
}  // namespace detail

Tensor Tensor::contiguous() const { return flow::contiguous(*this); }
Tensor Tensor::clone() const { return flow::clone(*this); }
Tensor Tensor::to(DType dtype) const { return flow::to(*this, dtype); }
Tensor Tensor::to(Device device) const { return flow::to(*this, device); }

Tensor& Tensor::copy_(const Tensor& src) {
  if (is_grad_enabled() && requires_grad() && is_leaf()) {
    fail("copy_", "a leaf tensor that requires grad is being used in an in-place operation; wrap it in "
         "flow::autograd::NoGradGuard or use detach()");
  }
  const std::shared_ptr<TensorImpl> base = view_base(*this);
  if (is_grad_enabled() && base && Tensor(base).requires_grad() && Tensor(base).is_leaf()) {
    fail("copy_", "a view of a leaf tensor that requires grad is being used in an in-place operation; wrap it in "
         "flow::autograd::NoGradGuard or use detach()");
  }
  apply(kAssign, {*this, src});
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  return copy_(full({}, value, TensorOptions().dtype(dtype()).device(device())));
}

}  // namespace flow
