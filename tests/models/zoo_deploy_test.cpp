// The vision models deploy: exported from an eval Graph, they run in oneflow_lite with the
// eager model's results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/export.h"
#include "models/vision/mobilenet_v2.h"
#include "models/vision/resnet.h"
#include "oneflow_lite/model.h"

namespace vm = flow::vision::models;

namespace {

// Largest |a - b| relative to the largest |b|: logits are compared as a whole.
double relative_difference(const flow::Tensor& a, const flow::Tensor& b) {
  const std::vector<float> va = a.tolist<float>(), vb = b.tolist<float>();
  double worst = 0, scale = 1e-6;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::abs(static_cast<double>(vb[i])));
  }
  return worst / scale;
}

void expect_deploys(const std::shared_ptr<flow::nn::Module>& model, const std::string& name) {
  flow::manual_seed(3);
  test_models::warm_up_batch_norm(*model, {2, 3, 64, 64});
  const flow::Tensor images = flow::randn({2, 3, 64, 64});
  flow::Tensor expected;
  {
    flow::autograd::NoGradGuard no_grad;
    expected = model->forward(images);
  }
  test_graphs::PredictGraph graph(model);
  graph(images);
  const flow::testing::ScratchDir scratch(name);
  const std::string dir = (scratch / "model").string();
  flow::save(graph, dir);
  const auto lite = flow::lite::Model::load(dir);
  const flow::TensorList outputs = lite->run({images});
  ASSERT_EQ(outputs.size(), 1u);
  ASSERT_EQ(outputs[0].shape(), expected.shape());
  EXPECT_LT(relative_difference(outputs[0], expected), 1e-4);
}

TEST(ZooDeploy, Resnet18RunsInOneflowLite) { expect_deploys(vm::resnet18(vm::ResNetOptions().num_classes(10)), "resnet18"); }

TEST(ZooDeploy, MobileNetV2RunsInOneflowLite) {
  expect_deploys(vm::mobilenet_v2(vm::MobileNetV2Options().num_classes(10)), "mobilenet_v2");
}

}  // namespace
