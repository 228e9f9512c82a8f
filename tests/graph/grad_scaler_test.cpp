// nn::Graph::set_grad_scaler: dynamic loss scaling inside the Job against eager training with
// amp::GradScaler: the same scales, the same skipped steps, the same parameters; its state in the
// graph's state_dict; its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "common/test_util.h"
#include "core/flow.h"
#include "graph_helpers.h"

namespace optim = flow::optim;
using flow::Tensor;
using graph_test::batch;
using graph_test::copy_params;
using graph_test::expect_same_parameters;
using graph_test::make_mlp;
using graph_test::TrainGraph;

namespace {

const flow::Shape kShape{16, 1, 28, 28};

// x with element `index` set to `value` (inf by default): that sample's loss and gradients are NaN.
Tensor poisoned(Tensor x, int64_t index, float value = std::numeric_limits<float>::infinity()) {
  x = x.contiguous();
  x.data_ptr<float>()[index] = value;
  return x;
}

// Step k's batch; an inf pixel in the steps listed in `poisoned_steps`.
std::pair<Tensor, Tensor> maybe_poisoned(int64_t k, const std::vector<int64_t>& poisoned_steps) {
  auto [x, y] = batch(k, kShape);
  if (std::find(poisoned_steps.begin(), poisoned_steps.end(), k) != poisoned_steps.end()) x = poisoned(x, 3);
  return {x, y};
}

// Copies of the module's parameters, by name.
std::map<std::string, Tensor> parameter_values(flow::nn::Module& net) {
  std::map<std::string, Tensor> values;
  for (const auto& [name, p] : net.named_parameters()) values[name] = p.clone();
  return values;
}

// Every parameter still holds exactly the value in `before`.
void expect_unchanged(flow::nn::Module& net, const std::map<std::string, Tensor>& before, const std::string& where) {
  for (const auto& [name, p] : net.named_parameters()) EXPECT_TRUE(flow::allclose(p, before.at(name), 0.0, 0.0)) << name << where;
}

// SGD with momentum and no dampening: its update does not depend on the step count, which a
// skipped step advances in a Graph (as in OneFlow) and not in eager (as in PyTorch).
std::shared_ptr<optim::SGD> sgd(flow::nn::Module& net) {
  return std::make_shared<optim::SGD>(net.parameters(), optim::SGDOptions(0.05).momentum(0.9));
}

// Trains an eager copy with amp::GradScaler and the graph's net in a Graph with another scaler
// of the same options, step by step, and compares scales and parameters after every step.
// The inputs are multiplied by input_gain; with `amp`, eager runs under flow::autocast(*amp) and
// the Graph with config().enable_amp(true, *amp). Returns how many steps eager skipped.
int expect_graph_follows_eager(const flow::amp::GradScalerOptions& options, int steps, const std::vector<int64_t>& poisoned,
                               double input_gain = 1, std::optional<flow::DType> amp = std::nullopt) {
  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  copy_params(*eager_net, *graph_net);
  auto eager_opt = sgd(*eager_net);
  flow::amp::GradScaler eager_scaler(options);
  TrainGraph graph(graph_net, sgd(*graph_net));
  if (amp) graph.config().enable_amp(true, *amp);
  auto graph_scaler = std::make_shared<flow::amp::GradScaler>(options);
  graph.set_grad_scaler(graph_scaler);
  flow::nn::CrossEntropyLoss loss_fn;
  // Mixed precision: fused element-wise chains round once where eager rounds after each op.
  const double tolerance = amp ? 1e-2 : 1e-5;
  int skipped = 0;
  for (int64_t k = 0; k < steps; ++k) {
    auto [x, y] = maybe_poisoned(k, poisoned);
    x = x * input_gain;
    const std::map<std::string, Tensor> before = parameter_values(*graph_net);
    Tensor loss;
    {
      const flow::autocast autocast(amp.value_or(flow::kBFloat16), amp.has_value());
      loss = loss_fn(eager_net->forward(x), y);
    }
    eager_opt->zero_grad();
    eager_scaler.scale(loss).backward();
    const bool stepped = eager_scaler.step(*eager_opt);
    eager_scaler.update();
    graph(x, y);
    EXPECT_EQ(graph_scaler->get_scale(), eager_scaler.get_scale()) << "step " << k;
    EXPECT_EQ(graph_scaler->growth_tracker(), eager_scaler.growth_tracker()) << "step " << k;
    expect_same_parameters(*graph_net, *eager_net, tolerance);
    if (!stepped) {
      ++skipped;
      expect_unchanged(*graph_net, before, " at step " + std::to_string(k));
    }
  }
  return skipped;
}

}  // namespace

TEST(GraphGradScaler, SkipsStepsWithNonFiniteGradientsAndGrowsTheScaleAsEagerDoes) {
  // Growth after 3 clean steps; steps 4 and 9 have NaN gradients.
  EXPECT_EQ(expect_graph_follows_eager(flow::amp::GradScalerOptions().init_scale(1024).growth_interval(3), 12, {4, 9}), 2);
}

TEST(GraphGradScaler, AnOverflowingScaleBacksOffAsEagerDoes) {
  // 2^127 times the gradients of a loss on large inputs overflows float32: the first steps are
  // skipped until the scale has backed off enough, in the Job as in eager.
  const auto options = flow::amp::GradScalerOptions().init_scale(std::ldexp(1.0, 127)).backoff_factor(1.0 / 1024);
  EXPECT_GE(expect_graph_follows_eager(options, 6, {}, 1e4), 1);
}

// What the scaler is for: float16 autocast. The Graph with enable_amp(float16) against eager
// autocast, each with a scaler.
TEST(GraphGradScaler, Float16MixedPrecisionTrainsAsEagerAutocastWithAScaler) {
  const auto options = flow::amp::GradScalerOptions().init_scale(std::ldexp(1.0, 20)).growth_interval(4);
  expect_graph_follows_eager(options, 10, {}, 1, flow::kFloat16);
}

// A second input signature compiles a second plan; both read and write the same scale variables.
TEST(GraphGradScaler, PlansOfEveryInputSignatureShareTheScale) {
  auto net = make_mlp();
  TrainGraph graph(net, sgd(*net));
  auto scaler = std::make_shared<flow::amp::GradScaler>(flow::amp::GradScalerOptions().init_scale(64).growth_interval(2));
  graph.set_grad_scaler(scaler);
  const std::vector<double> expected{64, 32, 32, 64, 64};  // step 1 (batch 8) backs off, steps 2-3 grow
  for (int64_t k = 0; k < 5; ++k) {
    const auto [x, y] = batch(k, k % 2 == 1 ? flow::Shape{8, 1, 28, 28} : kShape);
    graph(k == 1 ? poisoned(x, 0, std::numeric_limits<float>::quiet_NaN()) : x, y);
    EXPECT_EQ(scaler->get_scale(), expected[k]) << k;
  }
  EXPECT_EQ(graph.num_compiled_plans(), 2);
}

TEST(GraphGradScaler, StateDictResumesTheScale) {
  const auto options = flow::amp::GradScalerOptions().init_scale(256).growth_interval(2);
  auto net = make_mlp();
  TrainGraph graph(net, sgd(*net));
  auto scaler = std::make_shared<flow::amp::GradScaler>(options);
  graph.set_grad_scaler(scaler);
  // Step 1 backs off to 128; steps 2-3 and 4-5 grow it to 256, then 512.
  for (int64_t k = 0; k < 6; ++k) {
    auto [x, y] = maybe_poisoned(k, {1});
    graph(x, y);
  }
  const double scale = scaler->get_scale();
  EXPECT_EQ(scale, 512.0);
  const flow::StateDict state = graph.state_dict();
  EXPECT_EQ(state.metadata().at("_grad_scaler.growth_tracker"), std::to_string(scaler->growth_tracker()));

  // A new graph (compiled before loading: the Job's variables are written in place) resumes it.
  auto resumed_net = make_mlp();
  TrainGraph resumed(resumed_net, sgd(*resumed_net));
  auto resumed_scaler = std::make_shared<flow::amp::GradScaler>(options);
  resumed.set_grad_scaler(resumed_scaler);
  auto [x0, y0] = batch(100, kShape);
  resumed(x0, y0);
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed_scaler->get_scale(), scale);
  for (int64_t k = 6; k < 9; ++k) {
    auto [x, y] = batch(k, kShape);
    graph(x, y);
    resumed(x, y);
    EXPECT_EQ(resumed_scaler->get_scale(), scaler->get_scale()) << k;
  }
  expect_same_parameters(*resumed_net, *net, 1e-6);

  // A state without the scaler's entries is refused by a strict load.
  auto plain_net = make_mlp();
  TrainGraph plain(plain_net, sgd(*plain_net));
  EXPECT_THROW_MSG(resumed.load_state_dict(plain.state_dict()), "has no grad scaler state");
}

// With gradient accumulation every micro-batch's backward starts from the scale; the summed,
// averaged and unscaled gradients are those of the graph without a scaler (a power-of-two scale
// divides out exactly), and an inf in one micro-batch skips the whole step.
TEST(GraphGradScaler, GradientAccumulationUnscalesTheAccumulatedGradients) {
  auto net = make_mlp();
  auto plain_net = make_mlp();
  copy_params(*net, *plain_net);
  TrainGraph graph(net, sgd(*net));
  graph.config().set_gradient_accumulation_steps(2);
  auto scaler = std::make_shared<flow::amp::GradScaler>(flow::amp::GradScalerOptions().init_scale(512));
  graph.set_grad_scaler(scaler);
  TrainGraph plain(plain_net, sgd(*plain_net));
  plain.config().set_gradient_accumulation_steps(2);
  for (int64_t k = 0; k < 3; ++k) {
    auto [x, y] = batch(k, kShape);
    graph(x, y);
    plain(x, y);
  }
  expect_same_parameters(*net, *plain_net, 1e-6);
  const std::map<std::string, Tensor> before = parameter_values(*net);
  const auto [x, y] = batch(3, kShape);
  graph(poisoned(x, kShape.numel() - 1), y);  // the second micro-batch's last pixel
  expect_unchanged(*net, before, "");
  EXPECT_EQ(scaler->get_scale(), 256.0);
}

// The masked updates (where(found_inf, old, new)) and the scale's own update fuse into in-place
// element-wise nodes: no separate where or assign passes over the parameters.
TEST(GraphGradScaler, MaskedUpdatesFuseInPlace) {
  auto net = make_mlp();
  TrainGraph graph(net, sgd(*net));
  graph.set_grad_scaler(std::make_shared<flow::amp::GradScaler>());
  auto [x, y] = batch(0, kShape);
  graph(x, y);
  EXPECT_EQ(graph_test::count_op(graph.job(), "assign"), 0);
  // 6 parameters, each written with its momentum buffer by one node (merge_inplace_updates).
  EXPECT_GE(graph_test::count_op(graph.job(), "fused_elementwise_inplace"), 6);
}

TEST(GraphGradScaler, ADisabledScalerChangesNothing) {
  auto net = make_mlp();
  auto plain_net = make_mlp();
  copy_params(*net, *plain_net);
  TrainGraph graph(net, sgd(*net));
  auto scaler = std::make_shared<flow::amp::GradScaler>(flow::amp::GradScalerOptions().enabled(false));
  graph.set_grad_scaler(scaler);
  TrainGraph plain(plain_net, sgd(*plain_net));
  for (int64_t k = 0; k < 3; ++k) {
    auto [x, y] = batch(k, kShape);
    graph(x, y);
    plain(x, y);
  }
  expect_same_parameters(*net, *plain_net, 0.0);
  EXPECT_EQ(graph.job().nodes_size(), plain.job().nodes_size());
  EXPECT_EQ(scaler->get_scale(), 1.0);
}

TEST(GraphGradScaler, Errors) {
  auto net = make_mlp();
  TrainGraph graph(net, sgd(*net));
  EXPECT_THROW_MSG(graph.set_grad_scaler(nullptr), "[graph] set_grad_scaler got a null GradScaler");
  EXPECT_THROW_MSG(graph.set_grad_scaler(std::make_shared<flow::amp::GradScaler>(flow::amp::GradScalerOptions().growth_interval(int64_t{1} << 25))),
                   "is above the 2^24 a graph counts to");
  auto [x, y] = batch(0, kShape);
  graph(x, y);
  EXPECT_THROW_MSG(graph.set_grad_scaler(std::make_shared<flow::amp::GradScaler>()), "[graph] set_grad_scaler after the graph was compiled");

  graph_test::EvalGraph inference(make_mlp());
  inference.set_grad_scaler(std::make_shared<flow::amp::GradScaler>());
  EXPECT_THROW_MSG(inference(x), "set_grad_scaler needs add_optimizer");
}
