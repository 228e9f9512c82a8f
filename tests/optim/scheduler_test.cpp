#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "core/ops/all.h"
#include "optim/lr_scheduler.h"

namespace optim = flow::optim;

namespace {
std::vector<double> lrs(optim::LRScheduler& scheduler, int steps) {
  std::vector<double> out{scheduler.get_last_lr()[0]};
  for (int i = 0; i < steps; ++i) {
    scheduler.step();
    out.push_back(scheduler.get_last_lr()[0]);
  }
  return out;
}
flow::Tensor param() { return flow::zeros({1}).requires_grad_(); }
void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "step " << i;
}
}  // namespace

TEST(LRScheduler, ClosedForms) {
  optim::SGD a({param()}, optim::SGDOptions(1.0));
  optim::StepLR step(a, 2, 0.5);
  expect_near_all(lrs(step, 5), {1, 1, 0.5, 0.5, 0.25, 0.25});
  optim::SGD b({param()}, optim::SGDOptions(1.0));
  optim::MultiStepLR multi(b, {1, 3}, 0.1);
  expect_near_all(lrs(multi, 4), {1, 0.1, 0.1, 0.01, 0.01});
  optim::SGD c({param()}, optim::SGDOptions(2.0));
  optim::ExponentialLR exponential(c, 0.5);
  expect_near_all(lrs(exponential, 3), {2, 1, 0.5, 0.25});
  optim::SGD d({param()}, optim::SGDOptions(1.0));
  optim::CosineAnnealingLR cosine(d, 4, 0.2);
  expect_near_all(lrs(cosine, 4), {1, 0.2 + 0.8 * (1 + std::cos(M_PI / 4)) / 2, 0.6, 0.2 + 0.8 * (1 + std::cos(3 * M_PI / 4)) / 2, 0.2});
  optim::SGD e({param()}, optim::SGDOptions(1.0));
  optim::LinearLR warmup(e, 0.25, 1.0, 3);
  expect_near_all(lrs(warmup, 4), {0.25, 0.5, 0.75, 1, 1});
}

TEST(LRScheduler, SequentialAndResume) {
  optim::SGD sgd({param()}, optim::SGDOptions(1.0));
  auto warmup = std::make_shared<optim::LinearLR>(sgd, 0.5, 1.0, 2);
  auto decay = std::make_shared<optim::ExponentialLR>(sgd, 0.5);
  optim::SequentialLR sequential(sgd, {warmup, decay}, {2});
  expect_near_all(lrs(sequential, 4), {0.5, 0.75, 1, 0.5, 0.25});
  sequential.set_last_epoch(1);
  EXPECT_NEAR(sequential.get_last_lr()[0], 0.75, 1e-12);
  EXPECT_THROW_MSG(optim::SequentialLR(sgd, {warmup, decay}, {}), "[SequentialLR] expected one milestone fewer than schedulers");
  EXPECT_THROW_MSG(optim::StepLR(sgd, 0), "[StepLR] step_size must be positive");
}

TEST(RMSpropAdagrad, MatchHandComputedSteps) {
  flow::Tensor p = flow::tensor<double>({1.0}).requires_grad_();
  p.set_grad(flow::tensor<double>({0.5}));
  optim::RMSprop rmsprop({p}, optim::RMSpropOptions(0.1));
  double value = 1.0, square = 0;
  for (int i = 0; i < 2; ++i) {
    rmsprop.step();
    square = 0.99 * square + 0.01 * 0.25;
    value -= 0.1 * 0.5 / (std::sqrt(square) + 1e-8);
    EXPECT_NEAR(p.item<double>(), value, 1e-12);
  }
  flow::Tensor q = flow::tensor<double>({1.0}).requires_grad_();
  q.set_grad(flow::tensor<double>({2.0}));
  optim::Adagrad adagrad({q}, optim::AdagradOptions(0.1).lr_decay(0.5));
  adagrad.step();  // sum 4 -> 1 - 0.1 * 2 / 2
  EXPECT_NEAR(q.item<double>(), 0.9, 1e-9);
  adagrad.step();  // sum 8, clr 0.1 / 1.5
  EXPECT_NEAR(q.item<double>(), 0.9 - 0.1 / 1.5 * 2 / std::sqrt(8.0), 1e-9);
}
