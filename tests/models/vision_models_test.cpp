// flow::vision::models against torchvision: parameter counts, state_dict names and shapes (so
// torchvision checkpoints converted to safetensors load by name), initialisation, output shapes,
// eager vs nn::Graph inference and safetensors round trips.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/graphs.h"
#include "common/models.h"
#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/serialization.h"
#include "models/vision/mobilenet_v2.h"
#include "models/vision/resnet.h"

namespace nn = flow::nn;
namespace vm = flow::vision::models;
using flow::Shape;
using flow::Tensor;

namespace {
int64_t parameter_count(const nn::Module& module) {
  int64_t count = 0;
  for (const Tensor& p : module.parameters()) count += p.numel();
  return count;
}

// Name -> shape for a torchvision state_dict entry.
using NamedShapes = std::vector<std::pair<std::string, Shape>>;

// Every expected name is in the state_dict with that shape, and they come in the given order
// (torchvision's order: a module's parameters, then its buffers, then its children).
void expect_torchvision_entries(const nn::Module& module, const NamedShapes& expected) {
  const flow::StateDict state = module.state_dict();
  const std::vector<std::string> keys = state.keys();
  auto previous = keys.begin();
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(state.contains(name)) << name;
    EXPECT_EQ(state.at(name).shape(), shape) << name;
    auto position = std::find(keys.begin(), keys.end(), name);
    EXPECT_TRUE(position >= previous) << name << " comes before an entry expected ahead of it";
    previous = position;
  }
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.tolist<double>(), y = b.tolist<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

double max_abs(const Tensor& t) {
  double largest = 0;
  for (double v : t.tolist<double>()) largest = std::max(largest, std::abs(v));
  return largest;
}

double standard_deviation(const Tensor& t) {
  const auto values = t.tolist<double>();
  double sum = 0, sum_of_squares = 0;
  for (double v : values) sum += v, sum_of_squares += v * v;
  const double n = static_cast<double>(values.size()), mean = sum / n;
  return std::sqrt(sum_of_squares / n - mean * mean);
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/flow_vision_" + std::to_string(::getpid()) + "_" + name + ".safetensors";
}

Tensor eval_logits(nn::Module& net, const Tensor& input) {
  flow::autograd::NoGradGuard no_grad;
  net.eval();
  return net.forward(input);
}
}  // namespace

// Each model is built once per test: initialising tens of millions of parameters dominates the
// suite's time, above all under the sanitizers.
TEST(VisionModels, ResNet18MatchesTorchvision) {
  flow::manual_seed(0);
  auto net = vm::resnet18();
  EXPECT_EQ(parameter_count(*net), 11'689'512);
  // 20 convs, 20 batch norms (5 entries each: weight, bias, running_mean, running_var,
  // num_batches_tracked) and fc: torchvision's 122 entries, 62 of them parameters.
  EXPECT_EQ(net->state_dict().size(), 122u);
  EXPECT_EQ(net->named_parameters().size(), 62u);
  expect_torchvision_entries(*net, {{"conv1.weight", {64, 3, 7, 7}},
                                    {"bn1.weight", {64}},
                                    {"bn1.bias", {64}},
                                    {"bn1.running_mean", {64}},
                                    {"bn1.running_var", {64}},
                                    {"bn1.num_batches_tracked", {}},
                                    {"layer1.0.conv1.weight", {64, 64, 3, 3}},
                                    {"layer1.0.bn1.running_var", {64}},
                                    {"layer1.0.conv2.weight", {64, 64, 3, 3}},
                                    {"layer1.1.bn2.bias", {64}},
                                    {"layer2.0.conv1.weight", {128, 64, 3, 3}},
                                    {"layer2.0.bn2.num_batches_tracked", {}},
                                    {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
                                    {"layer2.0.downsample.1.weight", {128}},
                                    {"layer2.0.downsample.1.running_mean", {128}},
                                    {"layer3.1.conv2.weight", {256, 256, 3, 3}},
                                    {"layer4.0.downsample.0.weight", {512, 256, 1, 1}},
                                    {"layer4.1.bn2.running_var", {512}},
                                    {"fc.weight", {1000, 512}},
                                    {"fc.bias", {1000}}});
  EXPECT_EQ(net->state_dict().keys().front(), "conv1.weight");
  EXPECT_EQ(net->state_dict().keys().back(), "fc.bias");
  EXPECT_FALSE(net->state_dict().contains("layer1.0.downsample.0.weight"));  // identity shortcut
  EXPECT_EQ(net->state_dict().at("bn1.num_batches_tracked").dtype(), flow::kInt64);

  // kaiming_normal_(fan_out, relu) convs: std sqrt(2 / (64 * 7 * 7)) for the stem; BN 1 and 0;
  // fc keeps PyTorch's Linear default, uniform within 1/sqrt(512).
  const double stem_std = std::sqrt(2.0 / (64 * 49));
  EXPECT_NEAR(standard_deviation(net->conv1->weight), stem_std, 0.03 * stem_std);
  EXPECT_EQ(max_abs(net->bn1->weight - 1), 0.0);
  EXPECT_EQ(max_abs(net->bn1->bias), 0.0);
  EXPECT_LE(max_abs(net->fc->weight), 1 / std::sqrt(512.0));

  EXPECT_EQ(eval_logits(*net, flow::randn({2, 3, 64, 64})).shape(), Shape({2, 1000}));
}

TEST(VisionModels, ResNet18OptionsChangeTheClassifierAndResidualInit) {
  flow::manual_seed(0);
  auto net = vm::resnet18(vm::ResNetOptions().num_classes(10).zero_init_residual(true));
  // Only the classifier shrinks: 512 * 10 + 10 instead of 512 * 1000 + 1000.
  EXPECT_EQ(parameter_count(*net), 11'181'642);
  auto block = std::dynamic_pointer_cast<vm::BasicBlock>((*net->layer3)[1]);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(max_abs(block->bn2->weight), 0.0);
  EXPECT_EQ(max_abs(block->bn1->weight - 1), 0.0);
  // Sizes that do not divide by 32 still pool to one value per channel.
  EXPECT_EQ(eval_logits(*net, flow::randn({1, 3, 40, 50})).shape(), Shape({1, 10}));
}

TEST(VisionModels, ResNet50MatchesTorchvision) {
  flow::manual_seed(0);
  auto net = vm::resnet50();
  EXPECT_EQ(parameter_count(*net), 25'557'032);
  // 53 convs and 53 batch norms (4 downsample pairs) and fc: 161 parameters, 320 entries.
  EXPECT_EQ(net->named_parameters().size(), 161u);
  EXPECT_EQ(net->state_dict().size(), 320u);
  expect_torchvision_entries(*net, {{"conv1.weight", {64, 3, 7, 7}},
                                    {"layer1.0.conv1.weight", {64, 64, 1, 1}},
                                    {"layer1.0.conv2.weight", {64, 64, 3, 3}},
                                    {"layer1.0.conv3.weight", {256, 64, 1, 1}},
                                    {"layer1.0.bn3.weight", {256}},
                                    {"layer1.0.downsample.0.weight", {256, 64, 1, 1}},
                                    {"layer1.0.downsample.1.num_batches_tracked", {}},
                                    {"layer1.1.conv1.weight", {64, 256, 1, 1}},
                                    {"layer2.0.conv1.weight", {128, 256, 1, 1}},
                                    {"layer2.0.conv2.weight", {128, 128, 3, 3}},
                                    {"layer2.0.downsample.0.weight", {512, 256, 1, 1}},
                                    {"layer3.5.bn3.running_mean", {1024}},
                                    {"layer4.2.conv3.weight", {2048, 512, 1, 1}},
                                    {"fc.weight", {1000, 2048}},
                                    {"fc.bias", {1000}}});
  EXPECT_FALSE(net->state_dict().contains("layer3.6.conv1.weight"));  // 3, 4, 6, 3 blocks
  EXPECT_FALSE(net->state_dict().contains("layer1.1.downsample.0.weight"));
  EXPECT_EQ(eval_logits(*net, flow::randn({1, 3, 32, 32})).shape(), Shape({1, 1000}));
}

TEST(VisionModels, MobileNetV2MatchesTorchvision) {
  flow::manual_seed(0);
  auto net = vm::mobilenet_v2();
  EXPECT_EQ(parameter_count(*net), 3'504'872);
  // 52 convs, 52 batch norms and the classifier's linear layer.
  EXPECT_EQ(net->named_parameters().size(), 158u);
  EXPECT_EQ(net->state_dict().size(), 314u);
  expect_torchvision_entries(*net, {{"features.0.0.weight", {32, 3, 3, 3}},
                                    {"features.0.1.weight", {32}},
                                    {"features.0.1.num_batches_tracked", {}},
                                    // expand_ratio 1: depthwise, projection, norm
                                    {"features.1.conv.0.0.weight", {32, 1, 3, 3}},
                                    {"features.1.conv.0.1.running_mean", {32}},
                                    {"features.1.conv.1.weight", {16, 32, 1, 1}},
                                    {"features.1.conv.2.weight", {16}},
                                    // expand_ratio 6: expansion, depthwise, projection, norm
                                    {"features.2.conv.0.0.weight", {96, 16, 1, 1}},
                                    {"features.2.conv.1.0.weight", {96, 1, 3, 3}},
                                    {"features.2.conv.1.1.bias", {96}},
                                    {"features.2.conv.2.weight", {24, 96, 1, 1}},
                                    {"features.2.conv.3.running_var", {24}},
                                    {"features.17.conv.2.weight", {320, 960, 1, 1}},
                                    {"features.18.0.weight", {1280, 320, 1, 1}},
                                    {"features.18.1.running_mean", {1280}},
                                    {"classifier.1.weight", {1000, 1280}},
                                    {"classifier.1.bias", {1000}}});
  EXPECT_FALSE(net->state_dict().contains("features.19.0.weight"));

  std::ostringstream out;
  out << *net;
  const std::string printed = out.str();
  EXPECT_EQ(printed.rfind("MobileNetV2(\n  (features): Sequential(\n    (0): Conv2dNormActivation(\n", 0), 0u) << printed;
  EXPECT_NE(printed.find("(1): InvertedResidual(\n      (conv): Sequential(\n"), std::string::npos);
  EXPECT_NE(printed.find("(2): ReLU6()"), std::string::npos);
  EXPECT_NE(printed.find("(0): Dropout(p=0.2, inplace=False)\n    (1): Linear(in_features=1280, out_features=1000, bias=True)"),
            std::string::npos);

  // The classifier's linear layer starts from normal(0, 0.01) with zero bias.
  auto linear = std::dynamic_pointer_cast<nn::Linear>((*net->classifier)[1]);
  ASSERT_NE(linear, nullptr);
  EXPECT_NEAR(standard_deviation(linear->weight), 0.01, 0.0005);
  EXPECT_EQ(max_abs(linear->bias), 0.0);

  EXPECT_EQ(eval_logits(*net, flow::randn({2, 3, 64, 64})).shape(), Shape({2, 1000}));
}

TEST(VisionModels, MobileNetV2WidthMultiplierRoundsToMultiplesOfEight) {
  flow::manual_seed(0);
  auto net = vm::mobilenet_v2(vm::MobileNetV2Options().width_mult(0.5).num_classes(10));
  const flow::StateDict state = net->state_dict();
  EXPECT_EQ(state.at("features.0.0.weight").shape(), Shape({16, 3, 3, 3}));
  EXPECT_EQ(state.at("features.1.conv.1.weight").shape(), Shape({8, 16, 1, 1}));
  EXPECT_EQ(state.at("features.17.conv.2.weight").shape(), Shape({160, 480, 1, 1}));
  EXPECT_EQ(state.at("features.18.0.weight").shape(), Shape({1280, 160, 1, 1}));  // the last conv keeps 1280
  EXPECT_EQ(eval_logits(*net, flow::randn({1, 3, 32, 32})).shape(), Shape({1, 10}));
}

TEST(VisionModels, TrainingStepUpdatesEveryParameter) {
  flow::manual_seed(0);
  auto net = vm::mobilenet_v2(vm::MobileNetV2Options().width_mult(0.5).num_classes(10));
  net->train();
  nn::CrossEntropyLoss loss_fn;
  Tensor loss = loss_fn(net->forward(flow::randn({2, 3, 32, 32})), flow::randint(0, 10, {2}));
  loss.backward();
  for (const auto& [name, parameter] : net->named_parameters()) EXPECT_TRUE(parameter.grad().defined()) << name;
  EXPECT_EQ(net->state_dict().at("features.0.1.num_batches_tracked").item<int64_t>(), 1);
}

TEST(VisionModels, GraphInferenceMatchesEager) {
  for (const auto& [label, net] : std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{{"resnet18", vm::resnet18()},
                                                                                                   {"mobilenet_v2", vm::mobilenet_v2()}}) {
    SCOPED_TRACE(label);
    flow::manual_seed(0);
    // Non-trivial running statistics, so that the folded batch norms matter.
    test_models::warm_up_batch_norm(*net, {2, 3, 32, 32});
    const Tensor images = flow::randn({2, 3, 32, 32});
    const Tensor eager = eval_logits(*net, images);
    test_graphs::PredictGraph graph(net);
    const Tensor compiled = graph(images)[0];
    ASSERT_EQ(compiled.shape(), eager.shape());
    // The Graph folds batch norms into the convs, which changes rounding only.
    EXPECT_LE(max_abs_difference(compiled, eager), 1e-4 * std::max(1.0, max_abs(eager)));
  }
}

TEST(VisionModels, SafetensorsRoundTripKeepsTheLogits) {
  flow::manual_seed(0);
  auto trained = vm::resnet18(vm::ResNetOptions().num_classes(10));
  test_models::warm_up_batch_norm(*trained, {2, 3, 32, 32});
  const std::string path = temp_path("resnet18");
  flow::save(trained->state_dict(), path);

  flow::manual_seed(1);
  auto fresh = vm::resnet18(vm::ResNetOptions().num_classes(10));
  const Tensor images = flow::randn({2, 3, 32, 32});
  EXPECT_GT(max_abs_difference(eval_logits(*fresh, images), eval_logits(*trained, images)), 0.0);
  fresh->load_state_dict(flow::load(path));
  EXPECT_EQ(max_abs_difference(eval_logits(*fresh, images), eval_logits(*trained, images)), 0.0);
  EXPECT_EQ(fresh->bn1->num_batches_tracked.item<int64_t>(), 3);
  std::remove(path.c_str());
}

TEST(VisionModels, LoadsAFileWrittenUnderTorchvisionsNames) {
  // What a torchvision checkpoint converted to safetensors holds, for a few tensors.
  flow::StateDict torchvision_names;
  torchvision_names.insert("features.0.0.weight", flow::full({32, 3, 3, 3}, 0.25));
  torchvision_names.insert("features.1.conv.0.1.running_var", flow::full({32}, 2.0));
  torchvision_names.insert("features.18.1.num_batches_tracked", flow::full({}, 7, flow::TensorOptions(flow::kInt64)));
  torchvision_names.insert("classifier.1.bias", flow::arange(10).to(flow::kFloat32));
  const std::string path = temp_path("mobilenet_v2_partial");
  flow::save(torchvision_names, path);

  flow::manual_seed(0);
  auto net = vm::mobilenet_v2(vm::MobileNetV2Options().num_classes(10));
  net->load_state_dict(flow::load(path), /*strict=*/false);
  const flow::StateDict state = net->state_dict();
  for (const auto& [name, value] : torchvision_names) EXPECT_EQ(max_abs_difference(state.at(name), value), 0.0) << name;
  // A strict load names what the partial file lacks.
  EXPECT_THROW_MSG(net->load_state_dict(flow::load(path)), "features.0.1.weight");
  std::remove(path.c_str());
}

TEST(VisionModels, RejectsBadConfigurationsAndInputs) {
  const std::vector<int64_t> three_stages{2, 2, 2};
  EXPECT_THROW_MSG(std::make_shared<vm::ResNet>(vm::ResNetBlock::kBasic, three_stages), "4 stages");
  EXPECT_THROW_MSG(vm::resnet18(vm::ResNetOptions().num_classes(0)), "num_classes must be positive");
  EXPECT_THROW_MSG(vm::mobilenet_v2(vm::MobileNetV2Options().width_mult(0)), "width_mult must be positive");
  EXPECT_THROW_MSG(std::make_shared<vm::InvertedResidual>(16, 16, 3, 6), "stride must be 1 or 2");
  flow::manual_seed(0);
  auto net = vm::mobilenet_v2(vm::MobileNetV2Options().num_classes(10));
  EXPECT_THROW_MSG(net->forward(flow::randn({1, 1, 32, 32})), "expected input (N, 3, H, W)");
}
