// Defaults equal PyTorch's (1.13), listed in one place: an optimizer, scheduler, scaler, module or
// loss built without naming an option behaves as torch's built the same way.
#include <gtest/gtest.h>

#include <sstream>

#include "core/flow.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
using flow::Tensor;

namespace {

Tensor parameter() { return flow::zeros({2}).requires_grad_(); }

std::map<std::string, double> defaults_of(const optim::Optimizer& optimizer) { return optimizer.param_groups().at(0).options; }

std::string printed(const nn::Module& module) {
  std::ostringstream out;
  out << module;
  return out.str();
}

}  // namespace

TEST(PyTorchDefaults, Optimizers) {
  using Options = std::map<std::string, double>;
  EXPECT_EQ(defaults_of(optim::SGD({parameter()}, optim::SGDOptions(0.1))),
            (Options{{"lr", 0.1}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0}, {"nesterov", 0}}));
  EXPECT_EQ(defaults_of(optim::Adam({parameter()}, optim::AdamOptions())),
            (Options{{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}}));
  // torch.optim.AdamW's weight decay is 0.01, also when only the learning rate is given.
  EXPECT_EQ(defaults_of(optim::AdamW({parameter()}, optim::AdamWOptions(3e-4))),
            (Options{{"lr", 3e-4}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 1e-2}}));
  EXPECT_EQ(defaults_of(optim::AdamW({parameter()})).at("weight_decay"), 1e-2);
  EXPECT_EQ(defaults_of(optim::RMSprop({parameter()}, optim::RMSpropOptions())),
            (Options{{"lr", 1e-2}, {"alpha", 0.99}, {"eps", 1e-8}, {"weight_decay", 0}, {"momentum", 0}, {"centered", 0}}));
  EXPECT_EQ(defaults_of(optim::Adagrad({parameter()}, optim::AdagradOptions())),
            (Options{{"lr", 1e-2}, {"lr_decay", 0}, {"weight_decay", 0}, {"initial_accumulator_value", 0}, {"eps", 1e-10}}));
}

TEST(PyTorchDefaults, SchedulersAndGradScaler) {
  const auto lr_after = [](auto make_scheduler, int epochs) {
    optim::SGD sgd({parameter()}, optim::SGDOptions(1.0));
    auto scheduler = make_scheduler(sgd);
    for (int e = 0; e < epochs; ++e) scheduler.step();
    return sgd.param_groups().at(0).options.at("lr");
  };
  EXPECT_DOUBLE_EQ(lr_after([](optim::Optimizer& o) { return optim::StepLR(o, 2); }, 2), 0.1);  // gamma 0.1
  EXPECT_DOUBLE_EQ(lr_after([](optim::Optimizer& o) { return optim::MultiStepLR(o, {1}); }, 1), 0.1);
  EXPECT_DOUBLE_EQ(lr_after([](optim::Optimizer& o) { return optim::CosineAnnealingLR(o, 4); }, 4), 0.0);  // eta_min 0
  EXPECT_DOUBLE_EQ(lr_after([](optim::Optimizer& o) { return optim::LinearLR(o); }, 0), 1.0 / 3);  // start 1/3
  EXPECT_DOUBLE_EQ(lr_after([](optim::Optimizer& o) { return optim::LinearLR(o); }, 5), 1.0);      // end 1 after 5
  const flow::amp::GradScalerOptions scaler;
  EXPECT_EQ(scaler.init_scale_, 65536.0);
  EXPECT_EQ(scaler.growth_factor_, 2.0);
  EXPECT_EQ(scaler.backoff_factor_, 0.5);
  EXPECT_EQ(scaler.growth_interval_, 2000);
  EXPECT_TRUE(scaler.enabled_);
}

// The modules print as torch's repr() of the same module built with defaults.
TEST(PyTorchDefaults, ModulesPrintAsTorchRepr) {
  EXPECT_EQ(printed(nn::Linear(4, 3)), "Linear(in_features=4, out_features=3, bias=True)");
  EXPECT_EQ(printed(nn::Conv2d(1, 8, 3)), "Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1))");
  EXPECT_EQ(printed(nn::MaxPool2d(2)), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  EXPECT_EQ(printed(nn::AvgPool2d(2)), "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  EXPECT_EQ(printed(nn::BatchNorm1d(8)), "BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(printed(nn::BatchNorm2d(8)), "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(printed(nn::LayerNorm({8})), "LayerNorm((8,), eps=1e-05, elementwise_affine=True)");
  EXPECT_EQ(printed(nn::GroupNorm(2, 8)), "GroupNorm(2, 8, eps=1e-05, affine=True)");
  EXPECT_EQ(printed(nn::Embedding(10, 3)), "Embedding(10, 3)");
  EXPECT_EQ(printed(nn::Dropout()), "Dropout(p=0.5, inplace=False)");
  EXPECT_EQ(printed(nn::LeakyReLU()), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(printed(nn::GELU()), "GELU(approximate='none')");
  EXPECT_EQ(printed(nn::Flatten()), "Flatten(start_dim=1, end_dim=-1)");
}

TEST(PyTorchDefaults, Losses) {
  const nn::functional::CrossEntropyLossOptions cross_entropy;
  EXPECT_EQ(cross_entropy.ignore_index_, -100);
  EXPECT_EQ(cross_entropy.label_smoothing_, 0.0);
  EXPECT_EQ(cross_entropy.reduction_, nn::functional::Reduction::kMean);
  const nn::functional::NLLLossOptions nll;
  EXPECT_EQ(nll.ignore_index_, -100);
  EXPECT_EQ(nll.reduction_, nn::functional::Reduction::kMean);
  // SmoothL1Loss's beta is 1: |d| < 1 gives d^2 / 2, else |d| - 1/2.
  nn::SmoothL1Loss smooth_l1;
  EXPECT_DOUBLE_EQ(smooth_l1(flow::tensor<double>({0.5, 3.0}), flow::zeros({2}, flow::kFloat64)).item<double>(), (0.125 + 2.5) / 2);
}
