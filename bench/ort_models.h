#pragma once
// The models of bench/ort_bench.sh by name: ort_export_models exports each one built after
// flow::manual_seed(0), and lite_latency --graph-model builds it the same way (the same weights)
// to time the inference nn::Graph the exports come from.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/bench_models.h"
#include "models/vision/mobilenet_v2.h"
#include "models/vision/resnet.h"
#include "tests/common/models.h"

namespace bench {

using MakeModel = std::shared_ptr<flow::nn::Module> (*)();

struct OrtModel {
  const char* name;
  MakeModel make;
  flow::Shape image;  // one input row: (channels, height, width)
};

inline const flow::Shape kSmallImage{1, 28, 28};
inline const flow::Shape kVisionImage{3, 224, 224};

inline std::shared_ptr<flow::nn::Module> relu_model() { return std::make_shared<flow::nn::ReLU>(); }

inline std::shared_ptr<flow::nn::Module> resnet_model() {
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});  // non-trivial running statistics, as the tests do
  return net;
}

// A vision model of flow::vision::models (random weights, 1000 classes) with non-trivial batch
// norm statistics: three training-mode forwards on 2 random 64x64 images.
template <std::shared_ptr<flow::nn::Module> (*Make)()>
std::shared_ptr<flow::nn::Module> vision_model() {
  auto net = Make();
  test_models::warm_up_batch_norm(*net, {2, 3, 64, 64});
  return net;
}
inline std::shared_ptr<flow::nn::Module> make_resnet18() { return flow::vision::models::resnet18(); }
inline std::shared_ptr<flow::nn::Module> make_resnet50() { return flow::vision::models::resnet50(); }
inline std::shared_ptr<flow::nn::Module> make_mobilenet_v2() { return flow::vision::models::mobilenet_v2(); }

// "relu" (one ReLU: the per-call floor), "mlp", "cnn" (bench/bench_models.h), "resnet"
// (tests/common/models.h) on (1, 28, 28) images; "resnet18", "resnet50", "mobilenet_v2"
// (flow::vision::models) on (3, 224, 224) images.
inline std::vector<OrtModel> ort_models() {
  return {{"relu", relu_model, kSmallImage},
          {"mlp", mlp, kSmallImage},
          {"cnn", cnn, kSmallImage},
          {"resnet", resnet_model, kSmallImage},
          {"resnet18", vision_model<make_resnet18>, kVisionImage},
          {"resnet50", vision_model<make_resnet50>, kVisionImage},
          {"mobilenet_v2", vision_model<make_mobilenet_v2>, kVisionImage}};
}

// The model named `name`, or nullptr.
inline const OrtModel* find_ort_model(const char* name) {
  static const std::vector<OrtModel> models = ort_models();
  for (const OrtModel& model : models) {
    if (std::strcmp(model.name, name) == 0) return &model;
  }
  return nullptr;
}

}  // namespace bench
