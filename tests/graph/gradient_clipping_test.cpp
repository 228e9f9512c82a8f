// The "gradient_clipping" training rewrite (optim::ParamGroup::clip_grad_max_norm) against eager
// training that calls nn::utils::clip_grad_norm_ between backward and step: plain, with gradient
// accumulation, with a grad scaler (PyTorch's recipe: unscale_, clip, step), per param group.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "common/test_util.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "graph_helpers.h"
#include "nn/utils/clip_grad.h"
#include "optim/grad_scaler.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
using flow::Tensor;
using flow::TensorList;
using graph_test::batch;
using graph_test::copy_params;
using graph_test::expect_same_parameters;
using graph_test::make_mlp;
using graph_test::TrainGraph;

namespace {

const flow::Shape kShape{16, 1, 28, 28};
// Under the MLP's gradient norm on these batches (about 1-3), so every step clips.
constexpr double kMaxNorm = 0.25;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct EagerStep {
  double max_norm = kMaxNorm;
  double norm_type = 2;
  int64_t micro_batches = 1;
  flow::amp::GradScaler* scaler = nullptr;
};

// One eager step on (x, y) as the Graph traces it: micro-batch gradients summed, then averaged;
// unscaled; clipped; the update. Returns the total norm clip_grad_norm_ saw.
double eager_step(nn::Module& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y, const EagerStep& step) {
  nn::CrossEntropyLoss loss_fn;
  opt.zero_grad();
  const int64_t rows = x.size(0) / step.micro_batches;
  for (int64_t k = 0; k < step.micro_batches; ++k) {
    const Tensor loss = loss_fn(net.forward(x.narrow(0, k * rows, rows)), y.narrow(0, k * rows, rows));
    (step.scaler ? step.scaler->scale(loss) : loss).backward();
  }
  const TensorList params = net.parameters();
  if (step.micro_batches > 1) {
    flow::autograd::NoGradGuard no_grad;
    for (Tensor p : params) p.set_grad(p.grad() * (1.0 / static_cast<double>(step.micro_batches)));
  }
  if (step.scaler) step.scaler->unscale_(opt);
  const double total = nn::utils::clip_grad_norm_(params, step.max_norm, step.norm_type).item<double>();
  if (step.scaler) {
    step.scaler->step(opt);
    step.scaler->update();
  } else {
    opt.step();
  }
  return total;
}

std::shared_ptr<optim::SGD> clipping_sgd(nn::Module& net, double norm_type = 2, double max_norm = kMaxNorm) {
  return std::make_shared<optim::SGD>(net.parameters(),
                                      optim::SGDOptions(0.05).momentum(0.9).clip_grad_max_norm(max_norm).clip_grad_norm_type(norm_type));
}

}  // namespace

TEST(GraphGradientClipping, TrainsAsEagerClipGradNormForEachNormType) {
  // The largest gradient element is about 0.1-0.2: the inf-norm clips at 0.05.
  for (const auto& [norm_type, max_norm] : std::vector<std::pair<double, double>>{{2, kMaxNorm}, {1, kMaxNorm}, {kInf, 0.05}}) {
    auto eager_net = make_mlp();
    auto graph_net = make_mlp();
    copy_params(*eager_net, *graph_net);
    optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    TrainGraph graph(graph_net, clipping_sgd(*graph_net, norm_type, max_norm));
    for (int64_t k = 0; k < 4; ++k) {
      auto [x, y] = batch(k, kShape);
      EXPECT_GT(eager_step(*eager_net, eager_opt, x, y, {max_norm, norm_type}), max_norm) << "step " << k << " clips";
      graph(x, y);
      expect_same_parameters(*graph_net, *eager_net, 1e-6);
    }
    EXPECT_EQ(graph.explain().plans.at(0).log.training_rewrites, (std::vector<std::string>{"gradient_clipping", "optimizer_step"}));
  }
}

// The clipping changes the step: without it the Graph ends elsewhere (the comparison above can fail).
TEST(GraphGradientClipping, ClippingChangesTheStep) {
  auto clipped_net = make_mlp();
  auto plain_net = make_mlp();
  copy_params(*clipped_net, *plain_net);
  TrainGraph clipped(clipped_net, clipping_sgd(*clipped_net));
  TrainGraph plain(plain_net, std::make_shared<optim::SGD>(plain_net->parameters(), optim::SGDOptions(0.05).momentum(0.9)));
  auto [x, y] = batch(0, kShape);
  clipped(x, y);
  plain(x, y);
  EXPECT_GT(graph_test::max_relative_difference(clipped_net->parameters()[0], plain_net->parameters()[0]), 1e-3);
  EXPECT_EQ(plain.explain().plans.at(0).log.training_rewrites, (std::vector<std::string>{"optimizer_step"}));
}

TEST(GraphGradientClipping, ClipsTheAveragedGradientsOfGradientAccumulation) {
  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  copy_params(*eager_net, *graph_net);
  optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  TrainGraph graph(graph_net, clipping_sgd(*graph_net));
  graph.config().set_gradient_accumulation_steps(2);
  for (int64_t k = 0; k < 3; ++k) {
    auto [x, y] = batch(k, kShape);
    eager_step(*eager_net, eager_opt, x, y, {.micro_batches = 2});
    graph(x, y);
    expect_same_parameters(*graph_net, *eager_net, 1e-6);
  }
  EXPECT_EQ(graph.explain().plans.at(0).log.training_rewrites,
            (std::vector<std::string>{"gradient_accumulation", "gradient_clipping", "optimizer_step"}));
}

// PyTorch's AMP recipe: the scaled gradients are unscaled before the norm is taken.
TEST(GraphGradientClipping, ClipsTheUnscaledGradientsOfAGradScaler) {
  const auto options = flow::amp::GradScalerOptions().init_scale(1024).growth_interval(2);
  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  copy_params(*eager_net, *graph_net);
  optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  flow::amp::GradScaler eager_scaler(options);
  TrainGraph graph(graph_net, clipping_sgd(*graph_net));
  auto graph_scaler = std::make_shared<flow::amp::GradScaler>(options);
  graph.set_grad_scaler(graph_scaler);
  for (int64_t k = 0; k < 5; ++k) {
    auto [x, y] = batch(k, kShape);
    EXPECT_GT(eager_step(*eager_net, eager_opt, x, y, {.scaler = &eager_scaler}), kMaxNorm);
    graph(x, y);
    EXPECT_EQ(graph_scaler->get_scale(), eager_scaler.get_scale()) << "step " << k;
    expect_same_parameters(*graph_net, *eager_net, 1e-6);
  }
  EXPECT_EQ(graph.explain().plans.at(0).log.training_rewrites,
            (std::vector<std::string>{"loss_scaling", "gradient_clipping", "optimizer_step"}));
}

// Each group has its own total norm; a group without clip_grad_max_norm is not clipped. Set
// through add_param_group's keys, as OneFlow's param-group dict.
TEST(GraphGradientClipping, EachParamGroupClipsByItsOwnNorm) {
  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  copy_params(*eager_net, *graph_net);
  const auto groups_of = [](nn::Module& net) {
    const TensorList params = net.parameters();
    return std::pair{TensorList(params.begin(), params.begin() + 2), TensorList(params.begin() + 2, params.end())};
  };
  const auto [eager_first, eager_rest] = groups_of(*eager_net);
  const auto [graph_first, graph_rest] = groups_of(*graph_net);
  optim::Adam eager_opt(eager_first, optim::AdamOptions(1e-3));
  eager_opt.add_param_group(eager_rest, {{"lr", 2e-3}});
  auto graph_opt = std::make_shared<optim::Adam>(graph_first, optim::AdamOptions(1e-3).clip_grad_max_norm(0.1).clip_grad_norm_type(1));
  graph_opt->add_param_group(graph_rest, {{"lr", 2e-3}, {"clip_grad_max_norm", 0.2}, {"clip_grad_norm_type", 2}});
  ASSERT_EQ(graph_opt->param_groups()[1].clip_grad_max_norm, 0.2);
  EXPECT_EQ(graph_opt->param_groups()[1].options.count("clip_grad_max_norm"), 0u);  // not an update hyper-parameter
  TrainGraph graph(graph_net, graph_opt);
  nn::CrossEntropyLoss loss_fn;
  for (int64_t k = 0; k < 3; ++k) {
    auto [x, y] = batch(k, kShape);
    eager_opt.zero_grad();
    loss_fn(eager_net->forward(x), y).backward();
    EXPECT_GT(nn::utils::clip_grad_norm_(eager_first, 0.1, 1).item<double>(), 0.1);
    EXPECT_GT(nn::utils::clip_grad_norm_(eager_rest, 0.2, 2).item<double>(), 0.2);
    eager_opt.step();
    graph(x, y);
    expect_same_parameters(*graph_net, *eager_net, 1e-6);
  }
  // Only the second group clips now.
  graph_opt->param_groups()[0].clip_grad_max_norm.reset();
  TrainGraph regraphed(graph_net, graph_opt);
  auto [x, y] = batch(3, kShape);
  eager_opt.zero_grad();
  loss_fn(eager_net->forward(x), y).backward();
  nn::utils::clip_grad_norm_(eager_rest, 0.2, 2);
  eager_opt.step();
  regraphed(x, y);
  expect_same_parameters(*graph_net, *eager_net, 1e-6);
}

TEST(GraphGradientClipping, SettingsAreSavedAndCheckedWhenCompiling) {
  auto net = make_mlp();
  auto opt = clipping_sgd(*net, 1);
  const flow::StateDict state = opt->state_dict();
  EXPECT_EQ(state.metadata().at("param_groups.0.clip_grad_max_norm"), "0.25");
  EXPECT_EQ(state.metadata().at("param_groups.0.clip_grad_norm_type"), "1");
  optim::SGD resumed(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed.param_groups()[0].clip_grad_max_norm, 0.25);
  EXPECT_EQ(resumed.param_groups()[0].clip_grad_norm_type, 1);
  EXPECT_EQ(optim::SGD(net->parameters(), optim::SGDOptions(0.1)).state_dict().metadata().count("param_groups.0.clip_grad_max_norm"), 0u);

  opt->param_groups()[0].clip_grad_max_norm = -1;
  TrainGraph graph(net, opt);
  auto [x, y] = batch(0, kShape);
  EXPECT_THROW_MSG(graph(x, y), ": SGD param group 0: clip_grad_max_norm must be non-negative and clip_grad_norm_type positive or inf, got -1 and 1");
  EXPECT_THROW_MSG(graph(x, y), "[graph] " + graph.name() + ": SGD param group 0");
}
