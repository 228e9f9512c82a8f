#include "models/kv_cache.h"

#include "core/error.h"
#include "core/grad_mode.h"

namespace flow::models {

KVCache::KVCache(int64_t num_layers, int64_t batch_size, int64_t num_heads, int64_t max_length, int64_t head_dim,
                 const TensorOptions& options)
    : batch_size_(batch_size), max_length_(max_length) {
  if (num_layers < 1 || batch_size < 1 || num_heads < 1 || max_length < 1 || head_dim < 1) {
    fail("kv_cache", "sizes must be positive: layers ", num_layers, ", batch ", batch_size, ", heads ", num_heads, ", max_length ",
         max_length, ", head_dim ", head_dim);
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    keys.push_back(register_buffer("key_" + std::to_string(i), zeros({batch_size, num_heads, max_length, head_dim}, options)));
    values.push_back(register_buffer("value_" + std::to_string(i), zeros({batch_size, num_heads, max_length, head_dim}, options)));
  }
}

std::string KVCache::extra_repr() const {
  const Shape& shape = keys.at(0).shape();
  return "layers=" + std::to_string(keys.size()) + ", batch=" + std::to_string(shape[0]) + ", heads=" + std::to_string(shape[1]) +
         ", max_length=" + std::to_string(shape[2]) + ", head_dim=" + std::to_string(shape[3]);
}

PastKeyValues KVCache::rows(int64_t start, int64_t count) const {
  if (start < 0 || count < 1 || start + count > batch_size_) {
    fail("kv_cache", "rows [", start, ", ", start + count, ") are not within the cache's ", batch_size_, " rows");
  }
  PastKeyValues view;
  for (size_t i = 0; i < keys.size(); ++i) {
    view.keys.push_back(keys[i].slice(0, start, start + count));
    view.values.push_back(values[i].slice(0, start, start + count));
  }
  return view;
}

void KVCache::zero_() {
  const autograd::NoGradGuard no_grad;
  for (Tensor& t : keys) t.zero_();
  for (Tensor& t : values) t.zero_();
}

}  // namespace flow::models
