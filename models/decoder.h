#pragma once
// CachedDecoder: incremental decoding of a GPT-2 over a preallocated KV cache, by slots (rows of
// the cache), the building block of generate() and of a serving loop that batches sequences
// continuously: prefill new sequences into free slots, decode one token for every active slot,
// reset finished slots for the next sequence. Eager, or with config use_graph through an
// nn::Graph whose plans (one per prompt length, one for the decode step) hold the cache as state.
#include <cstdint>
#include <memory>
#include <vector>

#include "models/gpt2.h"
#include "models/kv_cache.h"

namespace flow::nn {
class Graph;
}

namespace flow::models {

struct CachedDecoderOptions {
  int64_t slots_ = 1;       // rows of the cache: sequences decoded side by side
  int64_t max_length_ = 0;  // positions per slot (prompt and generated tokens); 0: n_positions
  // Runs every step through a compiled nn::Graph. Its plans have static shapes: they compute all
  // slots (a slot outside the call computes a result nobody reads) and attend over the whole
  // cache under the mask, where eager steps compute only the slots asked for when they are
  // consecutive and read only the positions in use.
  bool use_graph_ = false;
  // With use_graph: prompt lengths are padded up to a multiple of this (fewer plans to compile;
  // a step whose padded length would pass the end of a slot's cache keeps its exact length).
  int64_t prefill_bucket_ = 16;
  CachedDecoderOptions& slots(int64_t v) { slots_ = v; return *this; }
  CachedDecoderOptions& max_length(int64_t v) { max_length_ = v; return *this; }
  CachedDecoderOptions& use_graph(bool v) { use_graph_ = v; return *this; }
  CachedDecoderOptions& prefill_bucket(int64_t v) { prefill_bucket_ = v; return *this; }
};

class CachedDecoder {
 public:
  // The model is used as it is (put it in eval mode first); with use_graph the Graph sets it to
  // eval. Errors are flow::Error "[decoder] ...".
  explicit CachedDecoder(std::shared_ptr<GPT2LMHeadModel> model, const CachedDecoderOptions& options = {});
  ~CachedDecoder();
  CachedDecoder(const CachedDecoder&) = delete;
  CachedDecoder& operator=(const CachedDecoder&) = delete;

  // Appends tokens[i] (at least one token each) to slot slots[i]'s cached sequence (a reset slot
  // starts empty) in one step; returns float32 (slots.size(), vocab) logits of each one's last
  // token, in the order of slots. Slots are distinct; each must have room for its tokens.
  Tensor prefill(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& tokens);
  // One token for each of slots: prefill with one token each, (slots.size(), vocab) logits.
  Tensor decode(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens);
  // Frees a slot (or all): its length becomes 0, its cached positions free space. A full slot
  // (length == max_length) takes no more tokens, and steps that run every row may overwrite its
  // last position (their padding clamps there); only code reading cache() directly sees that.
  void reset(int64_t slot);
  void reset();

  int64_t length(int64_t slot) const;  // tokens cached in slot
  int64_t num_slots() const { return cache_->batch_size(); }
  int64_t max_length() const { return cache_->max_length(); }
  bool uses_graph() const { return graph_ != nullptr; }
  const GPT2LMHeadModel& model() const { return *model_; }
  const KVCache& cache() const { return *cache_; }
  // The step Graph (plans compiled so far: graph()->num_compiled_plans()), or null when eager.
  const nn::Graph* graph() const;

 private:
  // One forward over rows [first, first + count) of the cache with ids (count, T); (count, vocab).
  Tensor run(int64_t first, int64_t count, const Tensor& ids, const Tensor& past, const Tensor& lengths, int64_t attend_length);
  // One step for the given slots whose tokens fit the cache when padded to the longest: logits in
  // the order of slots.
  Tensor step(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& tokens);
  void check_slot(int64_t slot, const char* what) const;

  std::shared_ptr<GPT2LMHeadModel> model_;
  std::shared_ptr<KVCache> cache_;
  std::vector<int64_t> lengths_;
  int64_t prefill_bucket_;
  std::unique_ptr<nn::Graph> graph_;
};

}  // namespace flow::models
