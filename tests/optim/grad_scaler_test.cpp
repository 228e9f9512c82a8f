// amp::GradScaler: scaling, unscaling, skipped steps on inf/NaN gradients, growth and backoff
// of the scale, misuse errors and its state_dict, with torch.amp.GradScaler's semantics.
#include <gtest/gtest.h>

#include <limits>

#include "common/test_util.h"
#include "core/flow.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

using flow::Tensor;
using flow::amp::GradScaler;
using flow::amp::GradScalerOptions;

namespace {

// One parameter p = [1, 2] and loss = sum(p * g): its gradient is g.
struct Problem {
  Tensor p = flow::tensor<float>({1.f, 2.f}).requires_grad_();
  flow::optim::SGD optimizer{{p}, flow::optim::SGDOptions(0.5)};

  void backward(GradScaler& scaler, const Tensor& g) {
    optimizer.zero_grad();
    scaler.scale(flow::sum(p * g)).backward();
  }
};

}  // namespace

TEST(GradScaler, UnscalesGradientsAndStepsWhenTheyAreFinite) {
  Problem problem;
  GradScaler scaler(GradScalerOptions().init_scale(1024));
  problem.backward(scaler, flow::tensor<float>({0.25f, -1.f}));
  EXPECT_EQ(problem.p.grad().tolist<float>(), (std::vector<float>{256.f, -1024.f}));  // scaled
  EXPECT_TRUE(scaler.step(problem.optimizer));
  EXPECT_EQ(problem.p.grad().tolist<float>(), (std::vector<float>{0.25f, -1.f}));  // unscaled
  EXPECT_EQ(problem.p.tolist<float>(), (std::vector<float>{0.875f, 2.5f}));  // p - 0.5 * g
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, SkipsTheStepAndBacksOffOnInfOrNaN) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Problem problem;
    GradScaler scaler(GradScalerOptions().init_scale(8).growth_interval(1));
    problem.backward(scaler, flow::tensor<float>({1.f, 1.f}));
    scaler.step(problem.optimizer);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 16.0);  // grown after one clean step
    problem.backward(scaler, flow::tensor<float>({bad, 1.f}));
    EXPECT_FALSE(scaler.step(problem.optimizer));
    EXPECT_EQ(problem.p.tolist<float>(), (std::vector<float>{0.5f, 1.5f}));  // only the first step
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 8.0);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanStepsInARow) {
  Problem problem;
  GradScaler scaler(GradScalerOptions().init_scale(2).growth_factor(4).backoff_factor(0.25).growth_interval(3));
  for (int step = 1; step <= 6; ++step) {
    problem.backward(scaler, flow::tensor<float>({0.f, 0.f}));
    scaler.step(problem.optimizer);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), step < 3 ? 2.0 : step < 6 ? 8.0 : 32.0) << step;
  }
}

TEST(GradScaler, ExplicitUnscaleLetsGradientsBeClippedBeforeTheStep) {
  Problem problem;
  GradScaler scaler(GradScalerOptions().init_scale(64));
  problem.backward(scaler, flow::tensor<float>({3.f, 4.f}));
  scaler.unscale_(problem.optimizer);
  EXPECT_EQ(problem.p.grad().tolist<float>(), (std::vector<float>{3.f, 4.f}));
  EXPECT_THROW_MSG(scaler.unscale_(problem.optimizer), "unscale_() has already been called on this optimizer since the last update()");
  EXPECT_TRUE(scaler.step(problem.optimizer));  // does not unscale twice
  EXPECT_EQ(problem.p.tolist<float>(), (std::vector<float>{-0.5f, 0.f}));
  EXPECT_THROW_MSG(scaler.step(problem.optimizer), "step() has already been called since the last update()");
  scaler.update();
  EXPECT_THROW_MSG(scaler.update(), "no inf checks were recorded prior to update()");
}

TEST(GradScaler, DisabledPassesEverythingThrough) {
  Problem problem;
  GradScaler scaler(GradScalerOptions().enabled(false));
  problem.backward(scaler, flow::tensor<float>({1.f, -1.f}));
  EXPECT_EQ(problem.p.grad().tolist<float>(), (std::vector<float>{1.f, -1.f}));
  EXPECT_TRUE(scaler.step(problem.optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().metadata().empty());
}

TEST(GradScaler, StateDictRoundTripsTheScaleAndTracker) {
  Problem problem;
  GradScaler scaler(GradScalerOptions().init_scale(0.1).growth_interval(5));
  for (int step = 0; step < 2; ++step) {
    problem.backward(scaler, flow::tensor<float>({1.f, 1.f}));
    scaler.step(problem.optimizer);
    scaler.update();
  }
  GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  EXPECT_EQ(restored.get_scale(), 0.1);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.state_dict().metadata(), scaler.state_dict().metadata());
  EXPECT_THROW_MSG(restored.load_state_dict(flow::StateDict()), "the state is empty");
}

TEST(GradScaler, RejectsBadOptions) {
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().init_scale(0)), "init_scale must be a positive finite number");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().growth_factor(1)), "growth_factor must be > 1");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().backoff_factor(1)), "backoff_factor must be in (0, 1)");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().growth_interval(0)), "growth_interval must be positive");
}
