#include "examples/gpt_train/checkpoint.h"

#include <filesystem>

#include "core/error.h"

namespace flow::examples {

std::string checkpoint_file(const std::string& dir) { return (std::filesystem::path(dir) / "gpt_train.safetensors").string(); }

void add_checkpoint_info(StateDict& state, const CheckpointInfo& info) {
  auto& meta = state.metadata();
  meta["gpt_train.step"] = std::to_string(info.step);
  meta["gpt_train.generator_seed"] = std::to_string(info.generator_seed);
  meta["gpt_train.generator_offset"] = std::to_string(info.generator_offset);
  meta["gpt_train.run"] = info.run;
}

CheckpointInfo checkpoint_info(const StateDict& state, const std::string& path) {
  const auto& meta = state.metadata();
  auto field = [&](const std::string& name) -> const std::string& {
    const auto found = meta.find("gpt_train." + name);
    if (found == meta.end()) fail("gpt_train", path, " holds no gpt_train state (no ", name, ")");
    return found->second;
  };
  CheckpointInfo info;
  info.step = std::stoll(field("step"));
  info.generator_seed = std::stoull(field("generator_seed"));
  info.generator_offset = std::stoull(field("generator_offset"));
  info.run = field("run");
  return info;
}

void add_prefixed(StateDict& into, const StateDict& part, const std::string& prefix) {
  for (const auto& [name, tensor] : part) into.insert(prefix + name, tensor);
  for (const auto& [key, value] : part.metadata()) into.metadata()[prefix + key] = value;
}

StateDict strip_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, tensor] : state) {
    if (name.rfind(prefix, 0) == 0) out.insert(name.substr(prefix.size()), tensor);
  }
  for (const auto& [key, value] : state.metadata()) {
    if (key.rfind(prefix, 0) == 0) out.metadata()[key.substr(prefix.size())] = value;
  }
  return out;
}

}  // namespace flow::examples
