// scaled_dot_product_attention in a training Graph: equal to eager, and its planned memory shows
// that the fused kernel keeps no (L, S) matrix for backward where the composite formula does.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "common/reference.h"
#include "graph/graph.h"
#include "nn/functional.h"
#include "optim/optimizer.h"

using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;
namespace F = flow::nn::functional;

namespace {

std::map<std::string, Tensor> parameters_by_name(const flow::nn::Module& module) {
  std::map<std::string, Tensor> named;
  for (const auto& [name, parameter] : module.named_parameters()) named[name] = parameter;
  return named;
}

// A training step of self-attention over parameters: x * w_q, x * w_k, x * w_v.
struct AttentionStep : flow::nn::Graph {
  struct Weights : flow::nn::Module {
    explicit Weights(int64_t features) {
      for (const char* name : {"q", "k", "v"}) register_parameter(name, flow::randn({features}));
    }
  };
  AttentionStep(std::shared_ptr<Weights> weights, bool fused, double dropout_p = 0.0) : fused(fused), dropout_p(dropout_p) {
    model = register_module("model", weights);
    add_optimizer(std::make_shared<flow::optim::SGD>(weights->parameters(), flow::optim::SGDOptions(0.1)));
  }
  static Tensor loss(const std::shared_ptr<flow::nn::Module>& model, const Tensor& x, bool fused, double dropout_p = 0.0) {
    const auto params = parameters_by_name(*model);
    const Tensor q = x * params.at("q"), k = x * params.at("k"), v = x * params.at("v");
    const Tensor out = fused ? F::scaled_dot_product_attention(q, k, v, Tensor(), dropout_p, true)
                             : flow::testing::reference_attention(q, k, v, Tensor(), true, 1.0 / std::sqrt(static_cast<double>(x.size(-1))));
    return flow::sum(out * out);
  }
  TensorList build(const TensorList& in) override {
    Tensor l = loss(model, in[0], fused, dropout_p);
    l.backward();
    return {l};
  }
  std::shared_ptr<flow::nn::Module> model;
  bool fused;
  double dropout_p;
};

TEST(ScaledDotProductAttentionGraph, TrainingStepEqualsEagerAndPlansNoScoreMatrix) {
  constexpr int64_t kBatchHeads = 2, kLength = 256, kFeatures = 16;
  flow::manual_seed(6);
  const Tensor x = flow::randn({kBatchHeads, kLength, kFeatures});
  auto fused_weights = std::make_shared<AttentionStep::Weights>(kFeatures);
  auto composite_weights = std::make_shared<AttentionStep::Weights>(kFeatures);
  auto eager_weights = std::make_shared<AttentionStep::Weights>(kFeatures);
  composite_weights->load_state_dict(fused_weights->state_dict());
  eager_weights->load_state_dict(fused_weights->state_dict());

  AttentionStep fused(fused_weights, true), composite(composite_weights, false);
  const Tensor fused_loss = fused(x)[0];
  const Tensor composite_loss = composite(x)[0];
  flow::optim::SGD eager_sgd(eager_weights->parameters(), flow::optim::SGDOptions(0.1));
  Tensor eager_loss = AttentionStep::loss(eager_weights, x, true);
  eager_loss.backward();
  eager_sgd.step();
  expect_close(fused_loss, eager_loss, 1e-6, 1e-6);
  expect_close(composite_loss, eager_loss, 1e-5, 1e-5);
  for (const auto& [name, weight] : eager_weights->named_parameters()) {
    expect_close(parameters_by_name(*fused_weights).at(name), weight, 1e-5, 1e-6);
    expect_close(parameters_by_name(*composite_weights).at(name), weight, 1e-4, 1e-5);
  }

  // One (B*H, L, L) float32 matrix is 512 KiB, one (B*H, L, E) activation 32 KiB. The composite
  // keeps scores and weights alive for backward; the fused step's peak is a handful of
  // activations (x; q, k, v; out; their gradients) and the (B*H, L) log-sum-exp.
  const int64_t score_matrix = kBatchHeads * kLength * kLength * 4;
  const int64_t activation = kBatchHeads * kLength * kFeatures * 4;
  const int64_t fused_peak = fused.plan().block_bytes.at("cpu");
  const int64_t composite_peak = composite.plan().block_bytes.at("cpu");
  EXPECT_GE(composite_peak, 2 * score_matrix);
  EXPECT_LE(fused_peak, 9 * activation) << "fused " << fused_peak << " composite " << composite_peak;
}

// Each run of the Graph draws fresh dropout counters, and its backward replays the ones its forward
// drew: a run equals the eager step that reads the same counters.
TEST(ScaledDotProductAttentionGraph, DropoutBackwardReplaysTheCountersEachRunDrew) {
  constexpr double kDropout = 0.3;
  flow::manual_seed(21);
  const Tensor x = flow::randn({2, 40, 8});
  auto graph_weights = std::make_shared<AttentionStep::Weights>(8);
  auto eager_weights = std::make_shared<AttentionStep::Weights>(8);
  AttentionStep graph(graph_weights, true, kDropout);
  const Tensor first = graph(x)[0];
  eager_weights->load_state_dict(graph_weights->state_dict());
  const uint64_t offset = flow::default_generator().offset();
  const Tensor second = graph(x)[0];
  EXPECT_NE(first.item<double>(), second.item<double>());

  flow::default_generator().set_offset(offset);
  flow::optim::SGD eager_sgd(eager_weights->parameters(), flow::optim::SGDOptions(0.1));
  Tensor eager_loss = AttentionStep::loss(eager_weights, x, true, kDropout);
  eager_loss.backward();
  eager_sgd.step();
  expect_close(second, eager_loss, 1e-6, 1e-6);
  for (const auto& [name, weight] : eager_weights->named_parameters()) {
    expect_close(parameters_by_name(*graph_weights).at(name), weight, 1e-5, 1e-6);
  }
}

// Compiling draws no random numbers: the call that compiles moves the generator as far as a later
// call, so a run's dropout does not depend on when its graph compiled.
TEST(ScaledDotProductAttentionGraph, CompilingDrawsNoRandomNumbers) {
  flow::manual_seed(22);
  const Tensor x = flow::randn({2, 40, 8});
  AttentionStep graph(std::make_shared<AttentionStep::Weights>(8), true, 0.3);
  const uint64_t before = flow::default_generator().offset();
  graph(x);
  const uint64_t after_compiling_call = flow::default_generator().offset();
  graph(x);
  EXPECT_GT(after_compiling_call, before);
  EXPECT_EQ(after_compiling_call - before, flow::default_generator().offset() - after_compiling_call);
}

}  // namespace
