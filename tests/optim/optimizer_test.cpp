#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "optim/optimizer.h"

using flow::Tensor;
namespace optim = flow::optim;

namespace {
// One parameter with a fixed gradient.
Tensor param_with_grad(std::vector<double> values, std::vector<double> grad) {
  Tensor p = flow::tensor(values).requires_grad_();
  p.set_grad(flow::tensor(grad));
  return p;
}
}  // namespace

TEST(SGD, PlainMomentumNesterovWeightDecay) {
  Tensor p = param_with_grad({1.0, -2.0}, {0.5, 1.0});
  optim::SGD plain({p}, optim::SGDOptions(0.1));
  plain.step();
  EXPECT_EQ(p.tolist<double>(), (std::vector<double>{1.0 - 0.05, -2.0 - 0.1}));

  Tensor q = param_with_grad({1.0}, {1.0});
  optim::SGD momentum({q}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5).weight_decay(0.1));
  momentum.step();  // d = 1 + 0.1*1 = 1.1; buf = 1.1; q = 1 - 0.11
  EXPECT_NEAR(q.item<double>(), 0.89, 1e-15);
  momentum.step();  // d = 1 + 0.089 = 1.089; buf = 0.9*1.1 + 0.5*1.089 = 1.5345; q = 0.89 - 0.15345
  EXPECT_NEAR(q.item<double>(), 0.89 - 0.15345, 1e-15);

  Tensor r = param_with_grad({0.0}, {1.0});
  optim::SGD nesterov({r}, optim::SGDOptions(1.0).momentum(0.5).nesterov(true));
  nesterov.step();  // buf = 1; d = 1 + 0.5 = 1.5
  nesterov.step();  // buf = 0.5 + 1 = 1.5; d = 1 + 0.75 = 1.75
  EXPECT_NEAR(r.item<double>(), -3.25, 1e-15);
}

TEST(Adam, MatchesHandComputedSteps) {
  Tensor p = param_with_grad({1.0}, {0.5});
  optim::Adam adam({p}, optim::AdamOptions(0.1));
  double value = 1.0, m = 0, v = 0;
  for (int step = 1; step <= 3; ++step) {
    adam.step();
    m = 0.9 * m + 0.1 * 0.5;
    v = 0.999 * v + 0.001 * 0.25;
    value -= 0.1 / (1 - std::pow(0.9, step)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, step)) + 1e-8);
    EXPECT_NEAR(p.item<double>(), value, 1e-14) << "step " << step;
  }
  Tensor w = param_with_grad({2.0}, {0.0});
  optim::AdamW adamw({w}, optim::AdamWOptions(0.1).weight_decay(0.5));
  adamw.step();
  EXPECT_NEAR(w.item<double>(), 2.0 * (1 - 0.05), 1e-14) << "decoupled decay; zero gradient moves nothing else";
}

TEST(Optimizer, StateDictResumesExactly) {
  auto make = [] { return param_with_grad({1.0, 2.0, 3.0}, {0.3, -0.2, 0.1}); };
  Tensor a = make(), b = make();
  optim::Adam first({a}, optim::AdamOptions(0.05));
  optim::Adam second({b}, optim::AdamOptions(0.05));
  first.step();
  second.step();
  const std::string path = unique_temp_path("adam.safetensors");
  flow::save(second.state_dict(), path);
  Tensor c = flow::tensor(b.tolist<double>()).requires_grad_();
  c.set_grad(b.grad());
  optim::Adam resumed({c}, optim::AdamOptions(0.05));
  resumed.load_state_dict(flow::load(path));
  first.step();
  resumed.step();
  EXPECT_EQ(a.tolist<double>(), c.tolist<double>());
  optim::SGD sgd({make()}, optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(sgd.load_state_dict(flow::load(path)), "[load_state_dict] the state was saved by Adam, not SGD");
}

TEST(Optimizer, ParamGroupsZeroGradAndErrors) {
  Tensor a = param_with_grad({1.0}, {1.0}), b = param_with_grad({1.0}, {1.0});
  optim::SGD sgd({a}, optim::SGDOptions(0.1));
  sgd.add_param_group({b}, {{"lr", 1.0}});
  sgd.step();
  EXPECT_NEAR(a.item<double>(), 0.9, 1e-15);
  EXPECT_NEAR(b.item<double>(), 0.0, 1e-15);
  sgd.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_THROW_MSG(sgd.add_param_group({a}), "[SGD] some parameters appear in more than one parameter group");
  EXPECT_THROW_MSG(optim::SGD({a}, optim::SGDOptions(-1)), "[SGD] invalid learning rate: -1");
  EXPECT_THROW_MSG(optim::SGD({a}, optim::SGDOptions(0.1).nesterov(true)), "nesterov momentum requires a momentum");
  EXPECT_THROW_MSG(optim::Adam({a}, optim::AdamOptions().betas(1.0, 0.9)), "[Adam] invalid beta parameters");
}

TEST(SGD, FusedUpdateMatchesElementwiseFallback) {
  // Contiguous CPU parameters take the fused sgd_update op; a strided one takes the op-by-op path.
  flow::manual_seed(25);
  Tensor base = flow::randn({6, 4}, flow::kFloat64);
  Tensor fused = base.clone().requires_grad_();
  Tensor strided_storage = flow::zeros({4, 6}, flow::kFloat64);
  Tensor strided = strided_storage.t();
  {
    flow::autograd::NoGradGuard no_grad;
    strided.copy_(base);
  }
  strided.requires_grad_();
  ASSERT_FALSE(strided.is_contiguous());
  optim::SGD a({fused}, optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01).nesterov(true));
  optim::SGD b({strided}, optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01).nesterov(true));
  for (int step = 0; step < 3; ++step) {
    Tensor g = flow::randn({6, 4}, flow::kFloat64);
    fused.set_grad(g);
    strided.set_grad(g.clone());
    a.step();
    b.step();
  }
  EXPECT_TRUE(flow::allclose(fused, strided, 1e-12, 1e-12));
}
