#pragma once
// The two oneflow_lite targets: an export directory whose one file (model.pb or
// weights.safetensors) is the fuzzed bytes and the others are the real export in fuzz/data/cnn.
// Model::load must accept or throw flow::Error; a model that loads runs once on zeros of its
// input specs (batch: the exported one). A model whose run needs more memory than this harness
// allows (libFuzzer's -malloc_limit_mb) is the model's claim, refused by the load's memory limit.
#include <cstdint>
#include <string_view>

#include "core/ops/all.h"
#include "fuzz_util.h"
#include "oneflow_lite/model.h"

namespace flow_fuzz {

inline int load_and_run_export(const char* fuzzed_file, const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    const fs::path export_dir = scratch_dir() / "export";
    fs::create_directories(export_dir);
    for (const char* file : {"model.pb", "weights.safetensors"}) write_file(export_dir / file, read_file(data_path("cnn") / file));
    return export_dir;
  }();
  write_file(dir / fuzzed_file, std::string_view(reinterpret_cast<const char*>(data), size));
  std::shared_ptr<const flow::lite::Model> model;
  try {
    model = flow::lite::Model::load(dir.string(), flow::lite::LoadOptions().memory_limit(int64_t{256} << 20));
  } catch (const flow::Error&) {
    return 0;
  }
  // Zeros of every input spec: the load's trial run allocated the same within the memory limit.
  flow::TensorList inputs;
  try {
    for (const auto& spec : model->inputs()) {
      std::vector<int64_t> shape = spec.shape;
      if (!shape.empty() && shape[0] == -1) shape[0] = model->exported_batch();
      inputs.push_back(flow::zeros(flow::Shape(shape), spec.dtype));
    }
    (void)model->run(inputs);
  } catch (const flow::Error&) {
  }
  return 0;
}

}  // namespace flow_fuzz
