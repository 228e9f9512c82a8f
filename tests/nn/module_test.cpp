#include <gtest/gtest.h>

#include <sstream>

#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/modules.h"

using flow::Shape;
using flow::Tensor;
namespace nn = flow::nn;

namespace {
struct NeuralNetwork : nn::Module {
  NeuralNetwork() {
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    linear_relu_stack = register_module(
        "linear_relu_stack",
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(512, 10)));
  }
  std::string name() const override { return "NeuralNetwork"; }
  Tensor forward(const Tensor& x) override { return linear_relu_stack->forward(flatten->forward(x)); }
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Sequential> linear_relu_stack;
};
}  // namespace

TEST(Module, PrintsLikePyTorch) {
  auto model = std::make_shared<NeuralNetwork>();
  std::ostringstream out;
  out << *model;
  EXPECT_EQ(out.str(),
            "NeuralNetwork(\n"
            "  (flatten): Flatten(start_dim=1, end_dim=-1)\n"
            "  (linear_relu_stack): Sequential(\n"
            "    (0): Linear(in_features=784, out_features=512, bias=True)\n"
            "    (1): ReLU()\n"
            "    (2): Linear(in_features=512, out_features=512, bias=True)\n"
            "    (3): ReLU()\n"
            "    (4): Linear(in_features=512, out_features=10, bias=True)\n"
            "  )\n"
            ")");
}

TEST(Module, TraversalAndNames) {
  auto model = std::make_shared<NeuralNetwork>();
  auto named = model->named_parameters();
  ASSERT_EQ(named.size(), 6u);
  EXPECT_EQ(named[0].first, "linear_relu_stack.0.weight");
  EXPECT_EQ(named[5].first, "linear_relu_stack.4.bias");
  EXPECT_EQ(named[0].second.shape(), (Shape{512, 784}));
  EXPECT_TRUE(named[0].second.requires_grad());
  EXPECT_EQ(model->children().size(), 2u);
  auto modules = model->named_modules();
  EXPECT_EQ(modules.size(), 8u);
  EXPECT_EQ(modules[3].first, "linear_relu_stack.0");
  EXPECT_THROW_MSG(model->register_parameter("flatten", flow::zeros({1})), "[register_parameter] attribute 'flatten' already exists");
  EXPECT_THROW_MSG(model->register_buffer("a.b", flow::zeros({1})), "invalid name 'a.b'");
}

TEST(Module, LinearInitAndForward) {
  flow::manual_seed(15);
  nn::Linear layer(20, 7);
  const double bound = 1 / std::sqrt(20.0);
  EXPECT_LE(flow::max(flow::abs(layer.weight)).item<float>(), bound);
  EXPECT_LE(flow::max(flow::abs(layer.bias)).item<float>(), bound);
  EXPECT_GT(flow::max(flow::abs(layer.weight)).item<float>(), bound * 0.8) << "uses the whole range";
  Tensor x = flow::randn({3, 20});
  flow::testing::expect_close(layer(x), flow::matmul(x, layer.weight.t()) + layer.bias, 1e-5, 1e-6);
  nn::Linear no_bias(nn::LinearOptions(4, 2).bias(false));
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
}

TEST(Module, StateDictRoundTripAndErrors) {
  flow::manual_seed(16);
  auto a = std::make_shared<NeuralNetwork>();
  auto b = std::make_shared<NeuralNetwork>();
  const std::string path = unique_temp_path("model.safetensors");
  flow::save(a->state_dict(), path);
  Tensor b_weight = b->linear_relu_stack->named_parameters()[0].second;
  b->load_state_dict(flow::load(path));
  EXPECT_EQ(flow::testing::values(b_weight), flow::testing::values(a->named_parameters()[0].second))
      << "loading writes into the existing parameter tensors";
  Tensor x = flow::randn({2, 1, 28, 28});
  flow::testing::expect_close(b->forward(x), a->forward(x), 0, 0);

  flow::StateDict partial = a->state_dict();
  partial.erase("linear_relu_stack.4.bias");
  partial.insert("extra.weight", flow::zeros({1}));
  EXPECT_THROW_MSG(b->load_state_dict(partial),
                   "Missing key(s) in state_dict: \"linear_relu_stack.4.bias\". Unexpected key(s) in state_dict: \"extra.weight\"");
  b->load_state_dict(partial, /*strict=*/false);
  flow::StateDict wrong = a->state_dict();
  wrong.insert("linear_relu_stack.0.weight", flow::zeros({3, 3}));
  EXPECT_THROW_MSG(b->load_state_dict(wrong, false), "size mismatch for \"linear_relu_stack.0.weight: checkpoint (3,3), model (512,784)\"");
}

TEST(Module, TrainEvalZeroGradAndDtype) {
  auto model = std::make_shared<NeuralNetwork>();
  model->eval();
  EXPECT_FALSE(model->linear_relu_stack->is_training());
  model->train();
  EXPECT_TRUE(model->linear_relu_stack->operator[](0)->is_training());
  flow::manual_seed(17);
  Tensor loss = flow::sum(model->forward(flow::randn({2, 784})));
  loss.backward();
  Tensor w = model->parameters()[0];
  EXPECT_TRUE(w.grad().defined());
  model->zero_grad(false);
  EXPECT_EQ(flow::sum(flow::abs(w.grad())).item<float>(), 0.f);
  model->zero_grad();
  EXPECT_FALSE(w.grad().defined());
  model->to(flow::kFloat64);
  EXPECT_EQ(w.dtype(), flow::kFloat64) << "existing handles see the cast";
  EXPECT_EQ(model->forward(flow::randn({1, 784}, flow::kFloat64)).dtype(), flow::kFloat64);
}

TEST(Module, DropoutTrainAndEval) {
  flow::manual_seed(18);
  nn::Dropout dropout(0.25);
  Tensor x = flow::ones({100000});
  Tensor y = dropout(x);
  const auto v = flow::testing::values(y);
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0) ++zeros;
    else EXPECT_NEAR(e, 1 / 0.75, 1e-6);
  }
  EXPECT_NEAR(zeros / 100000.0, 0.25, 0.01);
  dropout.eval();
  EXPECT_TRUE(dropout(x).same(x));
  EXPECT_THROW_MSG(nn::Dropout(1.5), "[Dropout] probability has to be between 0 and 1");
}

TEST(Losses, ValuesMatchHandComputation) {
  Tensor logits = flow::tensor<double>({1, 2, 3, 1, 1, 1}, Shape{2, 3});
  Tensor target = flow::tensor<int64_t>({2, 0});
  const double l0 = -std::log(std::exp(3) / (std::exp(1) + std::exp(2) + std::exp(3)));
  const double l1 = std::log(3.0);
  EXPECT_NEAR(nn::CrossEntropyLoss()(logits, target).item<double>(), (l0 + l1) / 2, 1e-12);
  using nn::functional::CrossEntropyLossOptions;
  using nn::functional::Reduction;
  EXPECT_NEAR(nn::functional::cross_entropy(logits, target, CrossEntropyLossOptions().reduction(Reduction::kSum)).item<double>(),
              l0 + l1, 1e-12);
  EXPECT_NEAR(nn::functional::cross_entropy(logits, flow::tensor<int64_t>({2, -100})).item<double>(), l0, 1e-12);
  const double eps = 0.1;
  const double smooth0 = -(std::log(std::exp(1) / (std::exp(1) + std::exp(2) + std::exp(3))) +
                           std::log(std::exp(2) / (std::exp(1) + std::exp(2) + std::exp(3))) - l0) / 3;
  EXPECT_NEAR(nn::functional::cross_entropy(logits, target, CrossEntropyLossOptions().label_smoothing(eps)).item<double>(),
              ((1 - eps) * l0 + eps * smooth0 + (1 - eps) * l1 + eps * l1) / 2, 1e-12);
  Tensor spatial = flow::randn({2, 3, 4, 5}, flow::kFloat64);
  Tensor spatial_target = flow::randint(0, 3, {2, 4, 5});
  EXPECT_EQ(nn::functional::cross_entropy(spatial, spatial_target, CrossEntropyLossOptions().reduction(Reduction::kNone)).shape(),
            (Shape{2, 4, 5}));
  EXPECT_NEAR(nn::MSELoss()(flow::tensor<double>({1, 2}), flow::tensor<double>({3, 2})).item<double>(), 2.0, 1e-12);
  EXPECT_NEAR(nn::L1Loss()(flow::tensor<double>({1, 2}), flow::tensor<double>({3, 5})).item<double>(), 2.5, 1e-12);
  EXPECT_THROW_MSG(nn::CrossEntropyLoss()(logits, flow::tensor<int64_t>({1, 2, 0})), "[cross_entropy] expected target of shape (2,)");
  EXPECT_THROW_MSG(nn::CrossEntropyLoss()(logits, flow::tensor<float>({1, 2})), "expected int64 class-index targets, got float32");
  EXPECT_THROW_MSG(nn::CrossEntropyLoss()(logits, flow::tensor<int64_t>({3, 0})),
                   "[sparse_softmax_cross_entropy] label 3 of row 0 is outside [0, 3) and is not ignore_index (-100)");
  EXPECT_THROW_MSG(nn::functional::nll_loss(logits, flow::tensor<int64_t>({3, 0})), "[gather] index 3 is out of bounds");
}

TEST(Losses, Gradcheck) {
  flow::manual_seed(19);
  Tensor target = flow::tensor<int64_t>({1, 0, 2, -100});
  using flow::TensorList;
  using nn::functional::CrossEntropyLossOptions;
  EXPECT_TRUE(flow::testing::gradcheck(
      [&](const TensorList& x) { return nn::functional::cross_entropy(x[0], target, CrossEntropyLossOptions().label_smoothing(0.2)); },
      {flow::testing::grad_input({4, 3})}));
  EXPECT_TRUE(flow::testing::gradcheck([](const TensorList& x) { return nn::functional::mse_loss(x[0], x[1]); },
                                       {flow::testing::grad_input({3, 2}), flow::testing::grad_input({3, 2})}));
  EXPECT_TRUE(flow::testing::gradcheck([](const TensorList& x) { return nn::functional::leaky_relu(x[0], 0.1); },
                                       {flow::testing::grad_input({6})}));
  auto layer = std::make_shared<nn::Linear>(3, 2);
  layer->to(flow::kFloat64);
  EXPECT_TRUE(flow::testing::gradcheck([&](const TensorList& x) { return (*layer)(x[0]); }, {flow::testing::grad_input({4, 3})}));
}

TEST(Losses, SmoothL1AndBinaryCrossEntropy) {
  Tensor x = flow::tensor<double>({0.2, 3.0}), t = flow::tensor<double>({0.0, 1.0});
  EXPECT_NEAR(nn::SmoothL1Loss()(x, t).item<double>(), (0.5 * 0.04 + 1.5) / 2, 1e-12);
  Tensor p = flow::tensor<double>({0.9, 0.2}), y = flow::tensor<double>({1.0, 0.0});
  EXPECT_NEAR(nn::BCELoss()(p, y).item<double>(), -(std::log(0.9) + std::log(0.8)) / 2, 1e-12);
  EXPECT_NEAR(nn::BCELoss()(flow::tensor<double>({0.0}), flow::tensor<double>({1.0})).item<double>(), 100.0, 1e-12);
  Tensor logits = flow::tensor<double>({2.0, -30.0});
  EXPECT_NEAR(nn::BCEWithLogitsLoss()(logits, y).item<double>(),
              (std::log1p(std::exp(-2.0)) + std::log1p(std::exp(-30.0))) / 2, 1e-12);
  using flow::TensorList;
  EXPECT_TRUE(flow::testing::gradcheck(
      [](const TensorList& v) { return nn::functional::smooth_l1_loss(v[0], v[1], nn::functional::Reduction::kSum, 0.5); },
      {flow::testing::grad_input({6}), flow::testing::grad_input({6})}));
  EXPECT_TRUE(flow::testing::gradcheck(
      [&](const TensorList& v) { return nn::functional::binary_cross_entropy(flow::sigmoid(v[0]), y.reshape({2, 1}).expand({2, 3}).contiguous()); },
      {flow::testing::grad_input({2, 3})}));
  EXPECT_TRUE(flow::testing::gradcheck(
      [&](const TensorList& v) { return nn::functional::binary_cross_entropy_with_logits(v[0], v[1]); },
      {flow::testing::grad_input({4}, -3, 3), flow::testing::grad_input({4}, 0, 1)}));
  EXPECT_THROW_MSG(nn::BCELoss()(p, flow::ones({3}, flow::kFloat64)), "[binary_cross_entropy] target (3,) and input (2,) must have the same shape");
  EXPECT_THROW_MSG(nn::BCELoss()(flow::tensor<double>({1.5}), flow::tensor<double>({1.0})), "[binary_cross_entropy] all elements of input should be between 0 and 1");
}

// Probabilities that round to exactly 0 or 1 (a saturated sigmoid): the loss is clamped at 100 per
// element and the gradient is PyTorch's, (p - t) / max(p (1 - p), 1e-12): finite, never NaN.
TEST(Losses, BinaryCrossEntropyGradientIsFiniteWhereProbabilitiesSaturate) {
  Tensor logits = flow::tensor<float>({-200, -20, 0, 20, 200, 200, -200, 0.5}).requires_grad_();
  const Tensor target = flow::tensor<float>({0, 1, 1, 0, 1, 0, 1, 0.25});
  const Tensor p = flow::sigmoid(logits);
  const std::vector<float> probabilities = p.tolist<float>();
  Tensor loss = nn::BCELoss(nn::functional::Reduction::kSum)(p, target);
  loss.backward();
  const std::vector<float> grad = logits.grad().tolist<float>();
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_TRUE(std::isfinite(grad[i])) << "element " << i << ": " << grad[i];
  // d loss / d p at p = 1, t = 0 is 1 / 1e-12 (PyTorch's clamp), and the sigmoid's derivative there
  // is 0: the chain gives 0, not 0 * inf.
  EXPECT_EQ(probabilities[4], 1.0f);
  EXPECT_EQ(grad[4], 0.0f);
  EXPECT_EQ(grad[5], 0.0f);
  // Away from saturation the gradient through the sigmoid is p - t.
  EXPECT_NEAR(grad[7], probabilities[7] - 0.25f, 1e-6);
  EXPECT_NEAR(grad[2], 0.5f - 1.0f, 1e-6);
  // Loss: each saturated wrong answer costs 100 (log clamped at -100), as in PyTorch.
  Tensor direct = flow::tensor<double>({0.0, 1.0, 1.0}).requires_grad_();
  Tensor per_element = nn::functional::binary_cross_entropy(direct, flow::tensor<double>({1.0, 0.0, 1.0}), nn::functional::Reduction::kNone);
  EXPECT_EQ(per_element.tolist<double>(), (std::vector<double>{100.0, 100.0, 0.0}));
  per_element.sum().backward();
  EXPECT_EQ(direct.grad().tolist<double>(), (std::vector<double>{-1e12, 1e12, 0.0}));
}

TEST(Module, ModuleDict) {
  nn::ModuleDict dict({{"encoder", std::make_shared<nn::Linear>(4, 3)}, {"act", std::make_shared<nn::ReLU>()}});
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"encoder", "act"}));
  EXPECT_TRUE(dict.contains("act"));
  EXPECT_EQ(dict["encoder"]->parameters().size(), 2u);
  EXPECT_EQ(dict.named_parameters()[0].first, "encoder.weight");
  EXPECT_THROW_MSG(dict["decoder"], "[ModuleDict] no module named 'decoder'");
}
