#include "core/sampling.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/ops/all.h"

namespace flow {
namespace {

constexpr double kFiltered = -std::numeric_limits<double>::infinity();

void check_logits(const Tensor& logits, const char* op) {
  if (logits.dim() != 2 || !is_floating(logits.dtype())) {
    fail(op, "expects floating-point logits of shape (batch, vocab), got ", dtype_name(logits.dtype()), " ", logits.shape());
  }
}

}  // namespace

std::optional<std::string> sampling_options_error(const SamplingOptions& o) {
  if (!(o.temperature > 0) || !std::isfinite(o.temperature)) return detail::concat("temperature must be a positive number, got ", o.temperature);
  if (o.top_k < 0) return detail::concat("top_k must be >= 0 (0: no top-k filtering), got ", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) return detail::concat("top_p must be in (0, 1], got ", o.top_p);
  if (!(o.repetition_penalty > 0) || !std::isfinite(o.repetition_penalty)) {
    return detail::concat("repetition_penalty must be a positive number, got ", o.repetition_penalty);
  }
  return std::nullopt;
}

Tensor temperature_logits(const Tensor& logits, double temperature) {
  check_logits(logits, "temperature_logits");
  if (!(temperature > 0) || !std::isfinite(temperature)) fail("temperature_logits", "temperature must be a positive number, got ", temperature);
  return div(logits, temperature);
}

Tensor top_k_logits(const Tensor& logits, int64_t top_k) {
  check_logits(logits, "top_k_logits");
  if (top_k < 1) fail("top_k_logits", "top_k must be >= 1, got ", top_k);
  if (top_k >= logits.size(1)) return logits;
  const Tensor kth = topk(logits, top_k, -1).values.slice(1, top_k - 1, top_k);
  return masked_fill(logits, lt(logits, kth), kFiltered);
}

Tensor top_p_logits(const Tensor& logits, double top_p, int64_t min_tokens_to_keep) {
  check_logits(logits, "top_p_logits");
  if (!(top_p > 0 && top_p <= 1)) fail("top_p_logits", "top_p must be in (0, 1], got ", top_p);
  if (min_tokens_to_keep < 1) fail("top_p_logits", "min_tokens_to_keep must be >= 1, got ", min_tokens_to_keep);
  const ValuesIndices sorted = sort(logits, -1, /*descending=*/true);
  const Tensor probs = softmax(to(sorted.values, kFloat64), -1);
  // The mass of the likelier tokens before each one; those reached after top_p go.
  const Tensor before = sub(cumsum(probs, -1), probs);
  const int64_t keep = std::min(min_tokens_to_keep, logits.size(1));
  const Tensor first = lt(arange(logits.size(1), TensorOptions(kInt64).device(logits.device())), keep).unsqueeze(0);
  const Tensor drop_sorted = logical_and(ge(before, top_p), logical_not(first));
  const Tensor drop = scatter(zeros_like(drop_sorted), 1, sorted.indices, drop_sorted);
  return masked_fill(logits, drop, kFiltered);
}

Tensor repetition_penalty_logits(const Tensor& logits, const std::vector<std::vector<int64_t>>& sequences, double penalty) {
  check_logits(logits, "repetition_penalty_logits");
  if (!(penalty > 0) || !std::isfinite(penalty)) fail("repetition_penalty_logits", "penalty must be a positive number, got ", penalty);
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  if (static_cast<int64_t>(sequences.size()) != batch) {
    fail("repetition_penalty_logits", "needs one token sequence per row: ", batch, " rows, ", sequences.size(), " sequences");
  }
  size_t longest = 0;
  for (const auto& row : sequences) longest = std::max(longest, row.size());
  if (longest == 0) return logits;
  // (B, longest) indices, short rows repeating a token of theirs (the same value written twice);
  // a row with no tokens reads and rewrites its token 0 unchanged.
  std::vector<int64_t> ids;
  std::vector<uint8_t> penalised;
  for (const auto& row : sequences) {
    for (size_t j = 0; j < longest; ++j) {
      const int64_t id = row.empty() ? 0 : row[std::min(j, row.size() - 1)];
      if (id < 0 || id >= vocab) fail("repetition_penalty_logits", "token id ", id, " is outside the vocabulary [0, ", vocab, ")");
      ids.push_back(id);
      penalised.push_back(row.empty() ? 0 : 1);
    }
  }
  const auto width = static_cast<int64_t>(longest);
  const Tensor index = tensor<int64_t>(ids, Shape{batch, width}, TensorOptions(kInt64).device(logits.device()));
  const Tensor mask = ne(tensor<uint8_t>(penalised, Shape{batch, width}, TensorOptions(kUInt8).device(logits.device())), 0);
  const Tensor score = gather(logits, 1, index);
  const Tensor penalised_score = where(lt(score, 0), mul(score, penalty), div(score, penalty));
  return scatter(logits, 1, index, where(mask, penalised_score, score));
}

Tensor next_tokens(Tensor logits, const SamplingOptions& options, const std::vector<std::vector<int64_t>>& sequences, Generator* generator) {
  logits = to(logits, kFloat32);
  if (options.repetition_penalty != 1.0) logits = repetition_penalty_logits(logits, sequences, options.repetition_penalty);
  if (!options.do_sample) return argmax(logits, -1);
  if (options.temperature != 1.0) logits = temperature_logits(logits, options.temperature);
  if (options.top_k > 0) logits = top_k_logits(logits, options.top_k);
  if (options.top_p < 1.0) logits = top_p_logits(logits, options.top_p);
  return multinomial(softmax(logits, -1), 1, /*replacement=*/false, generator).reshape({-1});
}

}  // namespace flow
