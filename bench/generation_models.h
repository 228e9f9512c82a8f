#pragma once
// The GPT-2 shapes of the text-generation benchmarks (generate_bench, serve_generate_bench):
// "gpt_train" is examples/gpt_train's default model (4 layers, width 256, 4 heads, 256 byte
// tokens, 128 positions), "gpt2" GPT-2 small (12 layers, 768, 12 heads, vocabulary 50257, 1024
// positions). Dropout off; the weights are whatever the caller draws.
#include <string>

#include "models/gpt2.h"

namespace bench {

inline flow::models::GPT2Config generation_model_config(const std::string& model) {
  const bool small = model == "gpt_train";
  return flow::models::GPT2Config()
      .vocab_size(small ? 256 : 50257)
      .n_positions(small ? 128 : 1024)
      .n_embd(small ? 256 : 768)
      .n_layer(small ? 4 : 12)
      .n_head(small ? 4 : 12)
      .dropout(0);
}

}  // namespace bench
