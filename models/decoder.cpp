#include "models/decoder.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/graph.h"

namespace flow::models {
namespace {

// The step as a Graph: inputs (input_ids (S, T), past_lengths (S), input_lengths (S)), output the
// logits of each row's last token (S, vocab). The cache is a registered module, so its buffers are
// the Job's variables and the step's scatter_ writes them in place; a prompt length is an input
// shape, so each compiles its own plan (the plan cache keeps them), and T = 1 is the decode plan.
class CachedStepGraph : public nn::Graph {
 public:
  CachedStepGraph(std::shared_ptr<GPT2LMHeadModel> model, std::shared_ptr<KVCache> cache, int64_t plans) {
    model_ = register_module("model", std::move(model));
    cache_ = register_module("cache", std::move(cache));
    eval();
    config().set_cache_limit(plans);
  }
  TensorList build(const TensorList& in) override {
    return {model_->forward_cached(in[0], in[1], cache_->all(), CachedForwardOptions().input_lengths(in[2])).logits};
  }

 private:
  std::shared_ptr<GPT2LMHeadModel> model_;
  std::shared_ptr<KVCache> cache_;
};

int64_t longest(const std::vector<std::vector<int64_t>>& tokens) {
  size_t most = 0;
  for (const auto& row : tokens) most = std::max(most, row.size());
  return static_cast<int64_t>(most);
}

}  // namespace

CachedDecoder::CachedDecoder(std::shared_ptr<GPT2LMHeadModel> model, const CachedDecoderOptions& options)
    : model_(std::move(model)), prefill_bucket_(options.prefill_bucket_) {
  if (!model_) fail("decoder", "no model");
  if (model_->transformer->wte->weight.is_global()) fail("decoder", "the model's parameters are global; decode with a local copy");
  const int64_t n_positions = model_->transformer->config().n_positions_;
  const int64_t max_length = options.max_length_ == 0 ? n_positions : options.max_length_;
  if (options.slots_ < 1) fail("decoder", "slots must be positive, got ", options.slots_);
  if (max_length < 1 || max_length > n_positions) {
    fail("decoder", "max_length must be in [1, n_positions = ", n_positions, "] (0: n_positions), got ", options.max_length_);
  }
  if (prefill_bucket_ < 1) fail("decoder", "prefill_bucket must be positive, got ", prefill_bucket_);
  cache_ = model_->make_cache(options.slots_, max_length);
  lengths_.assign(static_cast<size_t>(options.slots_), 0);
  if (options.use_graph_) {
    // A decode plan and a plan per bucket of prompt lengths, and near the end of the cache, where
    // a bucket would not fit, a plan per exact length: at most one per length.
    graph_ = std::make_unique<CachedStepGraph>(model_, cache_, max_length + 1);
  }
}

CachedDecoder::~CachedDecoder() = default;

const nn::Graph* CachedDecoder::graph() const { return graph_.get(); }

void CachedDecoder::check_slot(int64_t slot, const char* what) const {
  if (slot < 0 || slot >= num_slots()) fail("decoder", what, ": slot ", slot, " is not in [0, ", num_slots(), ")");
}

int64_t CachedDecoder::length(int64_t slot) const {
  check_slot(slot, "length");
  return lengths_[static_cast<size_t>(slot)];
}

void CachedDecoder::reset(int64_t slot) {
  check_slot(slot, "reset");
  lengths_[static_cast<size_t>(slot)] = 0;
}

void CachedDecoder::reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

Tensor CachedDecoder::decode(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) {
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(tokens.size());
  for (int64_t token : tokens) rows.push_back({token});
  return prefill(slots, rows);
}

Tensor CachedDecoder::prefill(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& tokens) {
  if (slots.empty()) fail("decoder", "no slots were given");
  if (slots.size() != tokens.size()) fail("decoder", slots.size(), " slots but ", tokens.size(), " token lists");
  const int64_t vocab = model_->transformer->config().vocab_size_;
  std::set<int64_t> seen;
  for (size_t i = 0; i < slots.size(); ++i) {
    check_slot(slots[i], "prefill");
    if (!seen.insert(slots[i]).second) fail("decoder", "slot ", slots[i], " is given twice");
    if (tokens[i].empty()) fail("decoder", "slot ", slots[i], " was given no tokens");
    for (int64_t token : tokens[i]) {
      if (token < 0 || token >= vocab) fail("decoder", "token id ", token, " for slot ", slots[i], " is outside the vocabulary [0, ", vocab, ")");
    }
    const int64_t total = lengths_[static_cast<size_t>(slots[i])] + static_cast<int64_t>(tokens[i].size());
    if (total > max_length()) {
      fail("decoder", "slot ", slots[i], " holds ", lengths_[static_cast<size_t>(slots[i])], " tokens; ", tokens[i].size(),
           " more exceed its max_length ", max_length());
    }
  }
  // Rows padded to the longest must fit the cache (a padding token past the end would overwrite
  // the last real one); when they do not, each slot takes its own step.
  const int64_t padded = longest(tokens);
  bool fits = true;
  for (int64_t slot : slots) fits = fits && lengths_[static_cast<size_t>(slot)] + padded <= max_length();
  if (fits) return step(slots, tokens);
  TensorList logits;
  for (size_t i = 0; i < slots.size(); ++i) logits.push_back(step({slots[i]}, {tokens[i]}));
  return cat(logits, 0);
}

Tensor CachedDecoder::step(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& tokens) {
  const auto count = static_cast<int64_t>(slots.size());
  int64_t length = longest(tokens);
  int64_t most_past = 0, attend = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t past = lengths_[static_cast<size_t>(slots[i])];
    most_past = std::max(most_past, past);
    attend = std::max(attend, past + static_cast<int64_t>(tokens[i].size()));
  }
  // Eager, consecutive slots in order run on their rows alone; otherwise (and in a Graph) every
  // row runs, the others with no tokens.
  bool consecutive = true;
  for (size_t i = 1; i < slots.size(); ++i) consecutive = consecutive && slots[i] == slots[0] + static_cast<int64_t>(i);
  const bool all_rows = graph_ != nullptr || !consecutive;
  if (graph_ && length > 1) {
    const int64_t bucketed = (length + prefill_bucket_ - 1) / prefill_bucket_ * prefill_bucket_;
    if (most_past + bucketed <= max_length()) length = bucketed;
  }
  const int64_t first = all_rows ? 0 : slots[0];
  const int64_t rows = all_rows ? num_slots() : count;
  std::vector<int64_t> ids(static_cast<size_t>(rows * length), 0), past(static_cast<size_t>(rows)), lengths(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) past[static_cast<size_t>(r)] = lengths_[static_cast<size_t>(first + r)];
  std::vector<int64_t> picked;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t row = slots[i] - first;
    picked.push_back(row);
    std::copy(tokens[i].begin(), tokens[i].end(), ids.begin() + row * length);
    lengths[static_cast<size_t>(row)] = static_cast<int64_t>(tokens[i].size());
  }
  const TensorOptions on = TensorOptions(kInt64).device(model_->transformer->wte->weight.device());
  Tensor logits = run(first, rows, tensor<int64_t>(ids, Shape{rows, length}, on), tensor<int64_t>(past, std::nullopt, on),
                      tensor<int64_t>(lengths, std::nullopt, on), attend);
  for (size_t i = 0; i < slots.size(); ++i) lengths_[static_cast<size_t>(slots[i])] += static_cast<int64_t>(tokens[i].size());
  if (rows != count || !consecutive) logits = index_select(logits, 0, tensor<int64_t>(picked, std::nullopt, on));
  return to(logits, kFloat32);
}

Tensor CachedDecoder::run(int64_t first, int64_t count, const Tensor& ids, const Tensor& past, const Tensor& lengths, int64_t attend_length) {
  if (graph_) return (*graph_)(ids, past, lengths).at(0);
  const autograd::NoGradGuard no_grad;
  const PastKeyValues cache = count == num_slots() ? cache_->all() : cache_->rows(first, count);
  return model_->forward_cached(ids, past, cache, CachedForwardOptions().input_lengths(lengths).attend_length(attend_length)).logits;
}

}  // namespace flow::models
