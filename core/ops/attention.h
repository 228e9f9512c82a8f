#pragma once
#include <optional>

#include "core/tensor.h"

namespace flow {

// softmax(query @ key^T * scale + mask) @ value, fused (the FlashAttention algorithm): keys are
// visited in tiles with an online softmax, so no (L, S) score matrix is ever stored; backward
// recomputes the scores from the per-row log-sum-exp the forward keeps (O(batch * L) extra memory).
// query (..., L, E), key (..., S, E), value (..., S, Ev), with equal batch dims; returns
// (..., L, Ev). attn_mask (optional) broadcasts to (..., L, S): bool (true takes part) or of
// query's dtype (added to the scores). is_causal: query i sees keys j <= i (top-left aligned, as
// PyTorch's); not with attn_mask. scale: 1/sqrt(E) by default. A row that sees no key gives zeros.
// dropout_p in [0, 1): attention weights dropped (and the rest scaled by 1/(1-p)) inside the
// kernel, from Philox counters drawn from the default generator, which backward replays.
Tensor flash_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                       bool is_causal = false, std::optional<double> scale = std::nullopt, double dropout_p = 0.0);

// flash_attention's argument checks (flow::Error prefixed [scaled_dot_product_attention]), for
// paths that compute attention another way.
void check_attention_args(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask, bool is_causal,
                          std::optional<double> scale);

}  // namespace flow
