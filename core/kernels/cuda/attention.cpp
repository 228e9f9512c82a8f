// Host side of attention.cu: flash_attention, flash_attention_dropout and flash_attention_grad
// on CUDA in float32, float64, bfloat16 and float16 (the CPU kernel's dtypes and semantics:
// core/kernels/cpu/attention.cpp). The forward reads query, key and value in place when each
// batch element's matrix is contiguous (a narrowed KV cache) and the mask through its strides.
#include <string>

#include "core/kernels/cuda/host.h"
#include "core/op.h"
#include "core/ops/copy.h"

namespace flow::cuda {
namespace {

// t itself when each batch element's matrix is contiguous (any batch strides), else a contiguous copy.
Tensor with_contiguous_matrices(const Tensor& t) {
  const int64_t n = t.dim();
  const bool rows = t.size(n - 1) <= 1 || t.stride(n - 1) == 1;
  const bool matrix = t.size(n - 2) <= 1 || t.stride(n - 2) == t.size(n - 1);
  return rows && matrix ? t : detail::contiguous_copy(t);
}

AttentionProblem problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Attrs& attrs, const char* op) {
  const int64_t n = q.dim();
  if (n - 2 > kMaxDims) fail(op, "CUDA attention supports up to ", kMaxDims, " batch dims, got ", n - 2);
  AttentionProblem p;
  p.l = q.size(n - 2);
  p.e = q.size(n - 1);
  p.s = k.size(n - 2);
  p.ev = v.size(n - 1);
  for (int64_t d = 0; d < n - 2; ++d) p.batch *= q.size(d);
  p.scale = attrs.get<double>("scale");
  p.causal = attrs.get<bool>("is_causal");
  p.dropout_p = attrs.get<double>("dropout_p");
  if (mask != nullptr) {
    // The mask broadcasts to (batch..., L, S): stride 0 along its missing and size-1 dims.
    const int64_t lead = n - mask->dim();
    auto stride = [&](int64_t d) { return d >= lead && mask->size(d - lead) != 1 ? mask->stride(d - lead) : 0; };
    p.mask_row_stride = stride(n - 2);
    p.mask_col_stride = stride(n - 1);
  }
  return p;
}

AttentionBatch layout_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask) {
  AttentionBatch layout;
  const int64_t n = q.dim();
  layout.ndim = static_cast<int>(n - 2);
  const int64_t mask_lead = mask != nullptr ? n - mask->dim() : 0;
  for (int64_t d = 0; d < n - 2; ++d) {
    layout.sizes[d] = q.size(d);
    layout.query[d] = q.stride(d);
    layout.key[d] = k.stride(d);
    layout.value[d] = v.stride(d);
    if (mask != nullptr && d >= mask_lead && mask->size(d - mask_lead) != 1) layout.mask[d] = mask->stride(d - mask_lead);
  }
  return layout;
}

// inputs: query, key, value[, mask]; outputs: out, logsumexp, rng_state.
void forward_kernel(KernelContext& ctx) {
  const char* op = "scaled_dot_product_attention";
  const Tensor query = with_contiguous_matrices(ctx.inputs[0]), key = with_contiguous_matrices(ctx.inputs[1]),
               value = with_contiguous_matrices(ctx.inputs[2]);
  const Tensor* mask = ctx.inputs.size() == 4 ? &ctx.inputs[3] : nullptr;
  set_device(query, op);
  const AttentionProblem p = problem_of(query, key, value, mask, ctx.attrs, op);
  uint64_t seed = 0, offset = 0;
  if (p.dropout_p > 0) {
    seed = static_cast<uint64_t>(ctx.attrs.get<int64_t>("seed"));
    offset = static_cast<uint64_t>(ctx.attrs.get<int64_t>("offset"));
  }
  check(attention_forward(scalar_type(query.dtype(), op), p, layout_of(query, key, value, mask), query.data_ptr(), key.data_ptr(),
                          value.data_ptr(), mask != nullptr ? mask->data_ptr() : nullptr, ctx.outputs[0].data_ptr(), ctx.outputs[1].data_ptr(),
                          static_cast<int64_t*>(ctx.outputs[2].data_ptr()), seed, offset),
        op);
}

// inputs: grad_out, query, key, value, out, logsumexp, rng_state[, mask] (contiguous);
// outputs: grad_query, grad_key, grad_value.
void backward_kernel(KernelContext& ctx) {
  const char* op = "scaled_dot_product_attention";  // the call whose gradient this is
  const Tensor& query = ctx.inputs[1];
  const Tensor& key = ctx.inputs[2];
  const Tensor& value = ctx.inputs[3];
  const Tensor& logsumexp = ctx.inputs[5];
  const Tensor* mask = ctx.inputs.size() == 8 ? &ctx.inputs[7] : nullptr;
  set_device(query, op);
  const AttentionProblem p = problem_of(query, key, value, mask, ctx.attrs, op);
  Tensor row_dot = make_tensor(logsumexp.shape(), logsumexp.dtype(), logsumexp.device());
  check(attention_backward(scalar_type(query.dtype(), op), p, layout_of(query, key, value, mask), ctx.inputs[0].data_ptr(), query.data_ptr(),
                           key.data_ptr(), value.data_ptr(), ctx.inputs[4].data_ptr(), logsumexp.data_ptr(),
                           static_cast<const int64_t*>(ctx.inputs[6].data_ptr()), mask != nullptr ? mask->data_ptr() : nullptr,
                           row_dot.data_ptr(), ctx.outputs[0].data_ptr(), ctx.outputs[1].data_ptr(), ctx.outputs[2].data_ptr()),
        op);
}

FLOW_REGISTER_KERNEL("flash_attention", DeviceType::kCUDA, and_reduced(floating_dtypes()), forward_kernel);
FLOW_REGISTER_KERNEL("flash_attention_dropout", DeviceType::kCUDA, and_reduced(floating_dtypes()), forward_kernel);
FLOW_REGISTER_KERNEL("flash_attention_grad", DeviceType::kCUDA, and_reduced(floating_dtypes()), backward_kernel);

}  // namespace
}  // namespace flow::cuda
