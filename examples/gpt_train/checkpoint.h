#pragma once
// gpt_train's checkpoint: one safetensors file holding the training state (the model and AdamW
// state, or a Graph's state_dict), the step, the default generator's position (dropout draws from
// it) and the options that decide what a step computes, which a resumed run must repeat.
#include <cstdint>
#include <string>

#include "core/serialization.h"

namespace flow::examples {

struct CheckpointInfo {
  int64_t step = 0;
  uint64_t generator_seed = 0, generator_offset = 0;
  std::string run;  // the options a resumed run must share (run_signature in main.cpp)
};

// The file inside a --checkpoint directory.
std::string checkpoint_file(const std::string& dir);

// Records info in state's metadata (under "gpt_train.").
void add_checkpoint_info(StateDict& state, const CheckpointInfo& info);
// Reads it back; flow::Error "[gpt_train] ..." when the file holds no gpt_train state.
CheckpointInfo checkpoint_info(const StateDict& state, const std::string& path);

// The entries (tensors and metadata) of `part` under `prefix` + their names, added to `into`.
void add_prefixed(StateDict& into, const StateDict& part, const std::string& prefix);
// The entries of `state` whose names start with prefix, without it.
StateDict strip_prefix(const StateDict& state, const std::string& prefix);

}  // namespace flow::examples
