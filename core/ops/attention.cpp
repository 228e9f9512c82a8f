// Fused attention: flash_attention (outputs the attention and each query row's log-sum-exp of
// scores) and its gradient primitive flash_attention_grad, which recomputes the scores tile by
// tile from that log-sum-exp. Kernels: core/kernels/cpu/attention.cpp.
#include "core/ops/attention.h"

#include <cmath>

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/creation.h"
#include "core/ops/unary.h"
#include "core/random.h"

namespace flow {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Batch dims of query (all but the last two).
int64_t batch_ndim(const TensorMeta& query) { return query.shape.ndim() - 2; }

// query, key, value and the optional additive mask (inputs 0-3), checked; returns nothing.
void check_inputs(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const TensorMeta& q = in[0];
  const TensorMeta& k = in[1];
  const TensorMeta& v = in[2];
  checks::check_floating(kOp, q, "query");
  checks::check_same_dtype(kOp, q, k, "key");
  checks::check_same_dtype(kOp, q, v, "value");
  if (q.shape.ndim() < 2 || k.shape.ndim() != q.shape.ndim() || v.shape.ndim() != q.shape.ndim()) {
    fail(kOp, "expected query (..., L, E), key (..., S, E) and value (..., S, Ev) of one rank (at least 2), got ", q.shape, ", ",
         k.shape, " and ", v.shape);
  }
  const int64_t n = q.shape.ndim();
  for (int64_t d = 0; d < n - 2; ++d) {
    if (k.shape[d] != q.shape[d] || v.shape[d] != q.shape[d]) {
      fail(kOp, "query, key and value need the same batch dims, got ", q.shape, ", ", k.shape, " and ", v.shape);
    }
  }
  if (k.shape[n - 1] != q.shape[n - 1]) fail(kOp, "key's last dim (", k.shape[n - 1], ") must equal query's (", q.shape[n - 1], ")");
  if (v.shape[n - 2] != k.shape[n - 2]) {
    fail(kOp, "value has ", v.shape[n - 2], " positions but key has ", k.shape[n - 2], "; they must match");
  }
  const double scale = attrs.get<double>("scale");
  if (!std::isfinite(scale)) fail(kOp, "scale must be finite, got ", scale);
  if (in.size() < 4) return;
  const TensorMeta& mask = in[3];
  if (attrs.get<bool>("is_causal")) fail(kOp, "give either attn_mask or is_causal, not both");
  checks::check_same_dtype(kOp, q, mask, "attn_mask");
  Shape scores = q.shape;
  scores[static_cast<size_t>(n - 1)] = k.shape[n - 2];
  bool broadcasts = mask.shape.ndim() <= n;
  for (int64_t d = 1; broadcasts && d <= mask.shape.ndim(); ++d) {
    const int64_t size = mask.shape[mask.shape.ndim() - d];
    broadcasts = size == 1 || size == scores[static_cast<size_t>(n - d)];
  }
  if (!broadcasts) fail(kOp, "attn_mask of shape ", mask.shape, " does not broadcast to the scores' shape ", scores);
}

// Where the optional tensors sit among an attention op's inputs and outputs.
struct Layout {
  size_t mask_input;       // the mask, when there is one more input than this index
  size_t rng_input;        // the gradient's rng_state input (npos: none)
  size_t rng_output;       // the forward's rng_state output (npos: none)
  size_t num_outputs;
};
constexpr size_t kNone = static_cast<size_t>(-1);
// Forward: (query, key, value, [mask]) -> (out, logsumexp, rng_state). Gradient: (grad_out, query,
// key, value, out, logsumexp, rng_state, [mask]) -> (grad_query, grad_key, grad_value).
constexpr Layout kForward{3, kNone, 2, 3};
constexpr Layout kGradient{7, 6, kNone, 3};

// Split along any batch dim (heads included: tensor-parallel attention), or all broadcast. A mask
// is split where it has that dim, broadcast where it broadcasts along it; the (seed, offset) pair
// is the same on every rank. With dropout only all broadcast: split pieces would draw the same
// counters on every rank.
std::vector<SbpSignature> attention_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs, const Layout& layout) {
  std::vector<SbpSignature> signatures;
  const int64_t n = in[0].shape.ndim();
  const int64_t batch_dims = attrs.get<double>("dropout_p") > 0 ? 0 : batch_ndim(in[layout.rng_input == kNone ? 0 : 1]);
  for (int64_t d = 0; d < batch_dims; ++d) {
    SbpSignature split{std::vector<Sbp>(in.size(), Sbp::split(d)), std::vector<Sbp>(layout.num_outputs, Sbp::split(d))};
    if (layout.rng_input != kNone) split.inputs[layout.rng_input] = Sbp::broadcast();
    if (layout.rng_output != kNone) split.outputs[layout.rng_output] = Sbp::broadcast();
    if (in.size() > layout.mask_input) {
      const TensorMeta& mask = in[layout.mask_input];
      const int64_t mask_dim = d - (n - mask.shape.ndim());
      split.inputs[layout.mask_input] = mask_dim >= 0 && mask.shape[mask_dim] != 1 ? Sbp::split(mask_dim) : Sbp::broadcast();
    }
    signatures.push_back(split);
  }
  signatures.push_back({std::vector<Sbp>(in.size(), Sbp::broadcast()), std::vector<Sbp>(layout.num_outputs, Sbp::broadcast())});
  return signatures;
}

// Two products of (L, E) by (E, S) and (L, S) by (S, Ev) per batch element; backward five.
int64_t forward_flops(const std::vector<TensorMeta>& in) {
  const int64_t n = in[0].shape.ndim();
  const int64_t batch = in[0].shape.numel() / std::max<int64_t>(1, in[0].shape[n - 2] * in[0].shape[n - 1]);
  const int64_t l = in[0].shape[n - 2], e = in[0].shape[n - 1], s = in[1].shape[n - 2], ev = in[2].shape[n - 1];
  return 2 * batch * l * s * (e + ev);
}

void check_dropout(const Attrs& attrs) {
  const double p = attrs.get<double>("dropout_p");
  if (!(p >= 0 && p < 1)) fail(kOp, "the fused kernel's dropout_p must be in [0, 1), got ", p);
}

std::vector<AttrDef> attention_attrs(bool dropout) {
  std::vector<AttrDef> attrs{{"scale", AttrType::kDouble}, {"is_causal", AttrType::kBool}, {"dropout_p", AttrType::kDouble}};
  if (dropout) {
    // Philox counters: element i of the (..., L, S) weights reads word i % 4 of counter offset + i / 4.
    for (const char* name : {"seed", "offset", "counters"}) attrs.push_back({name, AttrType::kInt});
  }
  return attrs;
}

const OpDef& kFlashAttentionGrad =
    OpBuilder("flash_attention_grad")
        .inputs({"grad_out", "query", "key", "value", "out", "logsumexp", "rng_state", "attn_mask"}, /*variadic=*/true)
        .outputs({"grad_query", "grad_key", "grad_value"})
        .attrs(attention_attrs(false))
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          if (in.size() != 7 && in.size() != 8) {
            fail(kOp, "gradient expects grad_out, query, key, value, out, logsumexp, rng_state and an optional mask");
          }
          std::vector<TensorMeta> forward_inputs{in[1], in[2], in[3]};
          if (in.size() == 8) forward_inputs.push_back(in[7]);
          check_inputs(forward_inputs, attrs);
          check_dropout(attrs);
          if (!(in[0].shape == in[4].shape)) fail(kOp, "grad_out ", in[0].shape, " and out ", in[4].shape, " differ");
          return std::vector<TensorMeta>{in[1], in[2], in[3]};
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return attention_sbp(in, attrs, kGradient); })
        .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
          return forward_flops({in[1], in[2], in[3]}) * 5 / 2;
        })
        .def();

// flash_attention, and flash_attention_dropout: a random op (a Graph draws fresh counters on every
// run) whose rng_state output hands the counters it drew to the gradient.
const OpDef& forward_op(const char* name, bool dropout) {
  OpBuilder builder(name);
  if (dropout) builder.random();
  return builder.inputs({"query", "key", "value", "attn_mask"}, /*variadic=*/true)
      .outputs({"out", "logsumexp", "rng_state"})
      .attrs(attention_attrs(dropout))
      .strided_inputs()  // the kernel reads batch-strided query, key and value in place
      .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        if (in.size() != 3 && in.size() != 4) fail(kOp, "expects query, key, value and an optional attn_mask");
        check_inputs(in, attrs);
        check_dropout(attrs);
        const int64_t n = in[0].shape.ndim();
        TensorMeta out = in[0];
        out.shape[static_cast<size_t>(n - 1)] = in[2].shape[n - 1];
        // The log-sum-exp of each query row's scores, kept for backward; float32 for 16-bit inputs.
        std::vector<int64_t> rows = in[0].shape.vec();
        rows.pop_back();
        const DType lse_dtype = in[0].dtype == kFloat64 ? kFloat64 : kFloat32;
        return std::vector<TensorMeta>{out, {Shape(rows), lse_dtype, in[0].device}, {Shape{2}, kInt64, in[0].device}};
      })
      .sbp([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return attention_sbp(in, attrs, kForward); })
      .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) { return forward_flops(in); })
      // The vjp reads query, key, value (and the mask), the output, the log-sum-exp and the
      // counters: no (L, S) matrix.
      .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
        std::vector<size_t> saved{0, 1, 2};
        if (in.size() == 4) saved.push_back(3);
        return ProfileCost{saved, {0, 1, 2}, forward_flops(in) * 5 / 2, 0};
      })
      .vjp([](const VjpContext& ctx) {
        if (ctx.num_inputs() == 4 && ctx.needs_input_grad[3]) {
          fail(kOp, "the fused kernel gives no gradient for attn_mask; detach the mask, or pass a float mask through the composite formula");
        }
        TensorList inputs{ctx.grad(0), ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0), ctx.output(1), ctx.output(2)};
        if (ctx.num_inputs() == 4) inputs.push_back(ctx.input(3));
        Attrs attrs = Attrs().set("scale", ctx.attrs.get<double>("scale")).set("is_causal", ctx.attrs.get<bool>("is_causal"));
        attrs.set("dropout_p", ctx.attrs.get<double>("dropout_p"));
        TensorList grads = apply(kFlashAttentionGrad, inputs, attrs);
        if (ctx.num_inputs() == 4) grads.emplace_back();
        return grads;
      })
      .def();
}

const OpDef& kFlashAttention = forward_op("flash_attention", false);
const OpDef& kFlashAttentionDropout = forward_op("flash_attention_dropout", true);

}  // namespace

namespace {

Attrs call_attrs(const Tensor& query, bool is_causal, std::optional<double> scale, double dropout_p) {
  const double default_scale = query.size(-1) > 0 ? 1.0 / std::sqrt(static_cast<double>(query.size(-1))) : 1.0;
  return Attrs().set("scale", scale.value_or(default_scale)).set("is_causal", is_causal).set("dropout_p", dropout_p);
}

// The op's inputs: PyTorch's boolean mask (true takes part) becomes additive (false is -inf).
TensorList attention_inputs(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask) {
  if (!query.defined() || !key.defined() || !value.defined()) fail(kOp, "query, key and value must be defined tensors");
  if (query.dim() == 0) fail(kOp, "expected query (..., L, E), got a 0-d tensor");
  TensorList inputs{query, key, value};
  if (attn_mask.defined()) {
    inputs.push_back(attn_mask.dtype() == kBool ? where(attn_mask, zeros({}, TensorOptions(query.dtype()).device(query.device())), -INFINITY)
                                                : attn_mask);
  }
  return inputs;
}

}  // namespace

Tensor flash_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask, bool is_causal,
                       std::optional<double> scale, double dropout_p) {
  TensorList inputs = attention_inputs(query, key, value, attn_mask);
  Attrs attrs = call_attrs(query, is_causal, scale, dropout_p);
  if (dropout_p == 0) return apply(kFlashAttention, inputs, attrs)[0];
  // One Philox counter gives 4 words: one per attention weight, over (..., L, S).
  const int64_t weights = query.numel() / std::max<int64_t>(1, query.size(-1)) * key.size(-2);
  const int64_t counters = (weights + 3) / 4;
  const auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>(counters));
  attrs.set("seed", static_cast<int64_t>(seed)).set("offset", static_cast<int64_t>(offset)).set("counters", counters);
  return apply(kFlashAttentionDropout, inputs, attrs)[0];
}

void check_attention_args(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask, bool is_causal,
                          std::optional<double> scale) {
  if (attn_mask.defined() && attn_mask.dtype() == kBool && is_causal) fail(kOp, "give either attn_mask or is_causal, not both");
  const TensorList inputs = attention_inputs(query, key, value, attn_mask.defined() && attn_mask.dtype() == kBool ? Tensor() : attn_mask);
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype(), t.device()});
  if (attn_mask.defined() && attn_mask.dtype() == kBool) metas.push_back({attn_mask.shape(), query.dtype(), query.device()});
  check_inputs(metas, call_attrs(query, is_causal, scale, 0));
}

}  // namespace flow
