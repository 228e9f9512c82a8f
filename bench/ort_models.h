#pragma once
// The models of bench/ort_bench.sh by name: ort_export_models exports each one built after
// flow::manual_seed(0), and lite_latency --graph-model builds it the same way (the same weights)
// to time the inference nn::Graph the exports come from.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "bench/bench_models.h"
#include "tests/common/models.h"

namespace bench {

using MakeModel = std::shared_ptr<flow::nn::Module> (*)();

inline std::shared_ptr<flow::nn::Module> relu_model() { return std::make_shared<flow::nn::ReLU>(); }

inline std::shared_ptr<flow::nn::Module> resnet_model() {
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});  // non-trivial running statistics, as the tests do
  return net;
}

// "relu" (one ReLU: the per-call floor), "mlp", "cnn" (bench/bench_models.h), "resnet"
// (tests/common/models.h).
inline std::vector<std::pair<const char*, MakeModel>> ort_models() {
  return {{"relu", relu_model}, {"mlp", mlp}, {"cnn", cnn}, {"resnet", resnet_model}};
}

// The model named `name`, or nullptr.
inline MakeModel find_ort_model(const char* name) {
  for (const auto& [model, make] : ort_models()) {
    if (std::strcmp(model, name) == 0) return make;
  }
  return nullptr;
}

}  // namespace bench
