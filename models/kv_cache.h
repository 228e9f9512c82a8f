#pragma once
// A preallocated key/value cache for incremental decoding (Hugging Face's StaticCache): per layer,
// keys and values of shape (batch, n_head, max_length, head_dim). Row b holds the keys and values
// of its first length(b) tokens; positions past that are free space that any step may write
// (models/gpt2.h, GPT2LMHeadModel::forward_cached, says how a step writes and reads it).
#include <cstdint>
#include <string>

#include "core/ops/creation.h"
#include "nn/module.h"

namespace flow::models {

// The cache tensors of every layer, as a step reads and writes them: keys[i] and values[i] are
// (batch, n_head, max_length, head_dim). Plain handles: a step's inputs and outputs when the cache
// is passed as explicit tensors (an exported step), or views of a KVCache's buffers.
struct PastKeyValues {
  TensorList keys, values;
  int64_t num_layers() const { return static_cast<int64_t>(keys.size()); }
  int64_t batch_size() const { return keys.at(0).size(0); }
  int64_t max_length() const { return keys.at(0).size(2); }
};

// How a cached step stores the new keys and values.
enum class CacheUpdate {
  kInPlace,     // scatter_ into the given tensors (eager decoding; a Graph whose cache is state)
  kFunctional,  // scatter into new tensors, returned; the given ones stay as they were (a step
                // whose cache is explicit inputs and outputs, as ONNX and oneflow_lite need)
};

// The cache as module state: buffers key_<layer> and value_<layer>, zeros at first, so that an
// nn::Graph that registers it holds the cache as variables its plans write in place (the way batch
// norm's running statistics are updated).
class KVCache : public nn::Module {
 public:
  KVCache(int64_t num_layers, int64_t batch_size, int64_t num_heads, int64_t max_length, int64_t head_dim,
          const TensorOptions& options = {});
  std::string name() const override { return "KVCache"; }
  std::string extra_repr() const override;
  // The buffers themselves.
  PastKeyValues all() const { return {keys, values}; }
  // Rows [start, start + count) of every buffer: contiguous views, written in place like the rest.
  PastKeyValues rows(int64_t start, int64_t count) const;
  // Zeros every buffer (lengths are the caller's; a zeroed cache is only tidier, not required).
  void zero_();
  int64_t batch_size() const { return batch_size_; }
  int64_t max_length() const { return max_length_; }
  TensorList keys, values;

 private:
  int64_t batch_size_, max_length_;
};

}  // namespace flow::models
